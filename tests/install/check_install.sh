#!/bin/sh
# check_install.sh BUILD_DIR: install weft from BUILD_DIR into a temporary prefix, check the
# layout the README promises, then build a program against it twice (pkg-config, CMake package)
# and run each with the installed weftrun on 2 ranks.
set -eu
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/weft.h lib/libweft.so lib/libweft.a lib/pkgconfig/weft.pc \
         lib/cmake/weft/weftConfig.cmake bin/weftrun bin/weft-bench bin/weft-info; do
    if [ ! -e "$prefix/$f" ]; then
        echo "FAIL: $f is not installed"
        exit 1
    fi
done

# run_2 WHAT PROG: run PROG on 2 ranks with the installed weftrun; weftrun must exit 0 and exactly
# two lines (one per rank) start with PASS. The output is kept in a file, so that weftrun's
# status is checked (not lost in a pipe) and shown on failure.
run_2() {
    what=$1
    rc=0
    "$prefix/bin/weftrun" -n 2 "$2" >"$tmp/run.out" 2>&1 || rc=$?
    passes=$(grep -c '^PASS' "$tmp/run.out" || true)
    if [ "$rc" -ne 0 ] || [ "$passes" -ne 2 ]; then
        cat "$tmp/run.out"
        echo "FAIL: the $what build did not pass on 2 ranks (weftrun exit $rc, $passes PASS lines)"
        exit 1
    fi
}

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export WEFT_BACKEND=host # hello.c writes its buffers from the CPU
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$tmp/hello_pc" "$here/hello.c" $(pkg-config --cflags --libs weft) \
   -Wl,-rpath,"$prefix/lib"
run_2 pkg-config "$tmp/hello_pc"

cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
run_2 CMake-package "$tmp/consumer/hello_cmake"

rc=0
"$prefix/bin/weft-info" -c >"$tmp/info.out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] || ! grep -q WEFT_TIMEOUT_S "$tmp/info.out"; then
    cat "$tmp/info.out"
    echo "FAIL: weft-info -c (exit $rc)"
    exit 1
fi
echo "PASS: install layout, pkg-config and CMake package builds"
