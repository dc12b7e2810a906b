#!/bin/sh
# check_install.sh BUILD_DIR: install weft from BUILD_DIR into a temporary prefix, check the
# layout API.md promises, then build a program against it twice (pkg-config, CMake package)
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

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export WEFT_BACKEND=host # hello.c writes its buffers from the CPU
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$tmp/hello_pc" "$here/hello.c" $(pkg-config --cflags --libs weft) \
   -Wl,-rpath,"$prefix/lib"
"$prefix/bin/weftrun" -n 2 "$tmp/hello_pc" | grep -c '^PASS' | grep -qx 2 ||
    { echo "FAIL: the pkg-config build did not pass on 2 ranks"; exit 1; }

cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$prefix/bin/weftrun" -n 2 "$tmp/consumer/hello_cmake" | grep -c '^PASS' | grep -qx 2 ||
    { echo "FAIL: the CMake-package build did not pass on 2 ranks"; exit 1; }

"$prefix/bin/weft-info" -c | grep -q WEFT_TIMEOUT_S || { echo "FAIL: weft-info -c"; exit 1; }
echo "PASS: install layout, pkg-config and CMake package builds"
