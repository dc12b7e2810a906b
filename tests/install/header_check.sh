#!/bin/sh
# header_check.sh SRC_DIR: the public header compiles alone, as C11 and as C++, warning-free.
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <weft.h>\nint main(void) { return weft_dtype_size(WEFT_FLOAT32) == 4 ? 0 : 1; }\n' \
    >"$tmp/t.c"
cc -std=c11 -pedantic -Wall -Wextra -Werror -I "$src/include" -c "$tmp/t.c" -o "$tmp/c.o"
c++ -std=c++11 -pedantic -Wall -Wextra -Werror -x c++ -I "$src/include" -c "$tmp/t.c" -o "$tmp/cxx.o"
echo "PASS: weft.h compiles alone as C11 and C++11"
