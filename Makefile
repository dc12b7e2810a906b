# weft - top-level entry points. `make run` and `make test` are the README's two commands.
#
#   make            configure and build (build/)
#   make run        build, then benchmark the collectives across local ranks
#   make test       build everything and run all tests (normal, ASan+UBSan, TSan builds)
#   make install PREFIX=/usr/local

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?= -DWEFT_WERROR=ON
RANKS   ?= 2

.PHONY: all build run test test-fast test-asan test-tsan install clean

all: build

build:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./bench/run.sh $(BUILD) $(RANKS)

test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -j 1

test-asan:
	cmake -S . -B $(BUILD)-asan $(CMAKE_FLAGS) -DWEFT_SANITIZE=address >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 WEFT_TEST_QUICK=1 \
	    ctest --test-dir $(BUILD)-asan --output-on-failure -j 1

test-tsan:
	cmake -S . -B $(BUILD)-tsan $(CMAKE_FLAGS) -DWEFT_SANITIZE=thread >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 WEFT_TEST_QUICK=1 \
	    ctest --test-dir $(BUILD)-tsan --output-on-failure -j 1 -L tsan

test: test-fast test-asan test-tsan

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
