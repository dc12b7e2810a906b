# weft - top-level entry points. `make run` and `make test` are the README's two commands.
#
#   make            configure and build (build/)
#   make run        build, then benchmark the collectives across local ranks
#   make test       build everything and run all tests (normal, ASan+UBSan, TSan builds, and
#                   the Python package's tests)
#   make install PREFIX=/usr/local

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?= -DWEFT_WERROR=ON
RANKS   ?= 2

.PHONY: all build run test test-fast test-asan test-tsan test-python install clean

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

# TSan leaves a program about 1.5 TiB of addresses in two ranges (its shadow takes the rest), in
# which eight ranks' default 64 GiB slices often find no common 512 GiB: smaller slices there.
TSAN_WINDOW_SLICE ?= 8G
test-tsan:
	cmake -S . -B $(BUILD)-tsan $(CMAKE_FLAGS) -DWEFT_SANITIZE=thread >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 WEFT_TEST_QUICK=1 WEFT_WINDOW_SLICE_BYTES=$(TSAN_WINDOW_SLICE) \
	    ctest --test-dir $(BUILD)-tsan --output-on-failure -j 1 -L tsan

# The Python package (python/, docs/python.md) against this build's libweft, in a venv of its own
# with numpy and pytest from PyPI (no torch: its tests skip and say so), plus one `pip install` of
# the package into a fresh venv.
PYVENV ?= $(BUILD)/pyvenv
test-python: build
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check numpy pytest
	WEFT_LIBRARY=$(abspath $(BUILD))/libweft.so WEFT_WEFTRUN=$(abspath $(BUILD))/weftrun \
	    WEFT_TEST_PIP_INSTALL=1 $(PYVENV)/bin/python -m pytest -q -rs -p no:cacheprovider python/tests

test: test-fast test-asan test-tsan test-python

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
