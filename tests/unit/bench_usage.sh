#!/bin/sh
# bench_usage.sh BUILD_DIR [CUDA]: the benchmark and tool programs' command lines, without running
# a measurement: --help exits 0, an unknown option, a malformed value or one out of range exits 2
# (the usage error), before any device or rank is needed. CUDA is the build's WEFT_HAVE_CUDA
# (ON/OFF, default OFF). A program missing from BUILD_DIR is a failure, except the CUDA-only
# programs in a build without CUDA and first-use-nccl (built only where NCCL is found), which
# are left out, each named once.
set -u
build=$1
cuda=${2:-OFF}
failures=0

# built PROGRAM: whether PROGRAM is in the build; a missing program is a failure unless the build
# is not expected to have it (then it is named as left out, once).
left_out=" "
built() {
    [ -x "$build/$1" ] && return 0
    case "$1" in
    first-use-nccl) why="built only with NCCL" ;;
    first-use | launch-cost | moe-bench | reg-cost | weft-calibrate)
        case "$cuda" in
        ON | on | TRUE | true | 1 | YES | yes) why="" ;;
        *) why="CUDA only, and this build has no CUDA" ;;
        esac
        ;;
    *) why="" ;;
    esac
    case "$left_out" in
    *" $1 "*) return 1 ;;
    esac
    left_out="$left_out$1 "
    if [ -n "$why" ]; then
        echo "bench_usage: $1 left out ($why)"
    else
        echo "FAIL: $build/$1 is missing (it should be built)"
        failures=$((failures + 1))
    fi
    return 1
}

# expect STATUS PROGRAM ARGS...
expect() {
    want=$1
    prog=$2
    shift 2
    built "$prog" || return 0
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
expect 2 weft-bench -b 0 -e 1K   # a sweep from 0 never grows
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
