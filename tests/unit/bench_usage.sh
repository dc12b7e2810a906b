#!/bin/sh
# bench_usage.sh BUILD_DIR: the benchmark and tool programs' command lines, without running a
# measurement: --help exits 0, an unknown option, a malformed value or one out of range exits 2
# (the usage error), before any device or rank is needed. Programs not built (the GPU ones
# without CUDA) are left out.
set -u
build=$1
failures=0

# expect STATUS PROGRAM ARGS...
expect() {
    want=$1
    prog=$2
    shift 2
    [ -x "$build/$prog" ] || return 0
    "$build/$prog" "$@" >/dev/null 2>&1 </dev/null
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $prog $*: exit status $got, expected $want"
        failures=$((failures + 1))
    fi
}

for prog in weft-bench partition-skew first-use first-use-nccl launch-cost moe-bench reg-cost \
    weft-calibrate; do
    expect 0 "$prog" --help
    expect 2 "$prog" --bogus
done
expect 2 weft-bench -b 12Q
expect 2 weft-bench -f 1
expect 2 weft-bench -n 5x
expect 2 partition-skew -n x
expect 2 partition-skew -w 0
expect 2 partition-skew extra
expect 2 first-use -s 6
expect 2 first-use -s 64K,abc
expect 2 first-use -s ,
expect 2 first-use -m roa,roa
expect 2 first-use -g 1,x
expect 2 first-use -r 101
expect 2 first-use extra
expect 2 first-use -m nccl # the mode of first-use-nccl only
expect 2 first-use-nccl -m nccl,roa,nccl
expect 2 launch-cost -z 0
expect 2 launch-cost -z -1
expect 2 launch-cost -k 5x
expect 2 moe-bench -T 0
expect 2 moe-bench -k 9 -E 8
expect 2 reg-cost -b 0
expect 2 reg-cost -e 2K -b 4K
expect 2 reg-cost -n x
expect 2 weft-calibrate -V 3M
expect 2 weft-calibrate -p 100
expect 2 weft-calibrate -r 0

if [ "$failures" -ne 0 ]; then
    echo "bench_usage: $failures failure(s)"
    exit 1
fi
echo "PASS: bench_usage"
