#!/usr/bin/env bash
# run.sh - the whole GPU test suite, on a machine with an NVIDIA GPU (see tests/gpu/README.md).
#
#   tests/gpu/run.sh BUILD_DIR [OUT_DIR]
#
# 1. Prints nvidia-smi.
# 2. When some run has more ranks than the machine has GPUs, starts an MPS control daemon of its
#    own (CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY are fresh directories under /tmp), so
#    that the ranks sharing a GPU run their kernels at the same time; it is always stopped on
#    exit (`echo quit | nvidia-cuda-mps-control`). Each rank takes the GPU of its LOCAL_RANK
#    (modulo the GPU count): with as many GPUs as ranks, one rank per GPU and no MPS. The GPUs
#    counted are those CUDA_VISIBLE_DEVICES names, when it is set.
# 3. Runs gpu_collectives, gpu_graph, gpu_registration, gpu_invalid, gpu_moe and gpu_fault
#    (through gpu_fault.sh) with 2, 4 and 8 ranks (GPU_TEST_RANKS), then gpu_fault --inflight
#    with the same rank counts, gpu_late (a kernel later than the timeout: WEFT_TIMEOUT_S=3) at
#    the first rank count on all_reduce, on the copy engines' all_gather and on MoE dispatch and
#    combine (their data kernels after an entry kernel that gave up), gpu_collectives and
#    gpu_graph at the first and the last rank
#    count with every pure copy on the copy engines (WEFT_CUDA_COPY_ENGINE=1: a call's copies
#    on the caller's stream and on side streams, captured and replayed; with more ranks, more
#    side streams per call), and gpu_collectives twice more at the first rank count: with the
#    push path off (WEFT_CUDA_PUSH_BYTES=0: small payloads take the mesh as large ones do), and
#    with 3 blocks per launch (WEFT_CUDA_MAX_BLOCKS=3: the partitioner's slices on few blocks;
#    the harness checks that no operation launched more); then gpu_collectives and gpu_graph at
#    the first rank count with the device operation counter started where 32-bit numbers break
#    (WEFT_SEQ_START=0x01010100 and 2^32 - 8).
#    Every run: WEFT_BACKEND=cuda NCCL_NVLS_ENABLE=0 WEFT_TIMEOUT_S=30 (5 for gpu_fault).
# 4. Runs gpu_collectives and gpu_moe with 2 ranks and a small grid (GPU_TEST_QUICK=1), each rank
#    under its own `compute-sanitizer --tool memcheck` (weftrun starts the sanitizers, so a
#    rank's sanitizer only waits for that rank). If a run under MPS fails because the sanitizer
#    refused the MPS clients (mps_refused: a sanitizer line naming MPS, no PASS or FAIL line of
#    the program, no error reported, no timeout), it stops MPS and runs both again without MPS;
#    any other failure (FAIL lines, a crash, a timeout, an error) stays a failure.
# 5. Prints a summary table (program, N, result, seconds) last and exits 0 only if every run
#    passed.
#
# Each run has a timeout of 300 s (120 s for gpu_fault), shortened so that the whole script ends
# within GPU_TEST_BUDGET_S seconds (default 480); a run that no longer fits is reported as
# NOT-RUN, which fails the suite. OUT_DIR (default BUILD_DIR/gpu-test-logs) receives four files:
# gpu-tests.log (the output of every run, with its command), summary.txt, nvidia-smi.txt and
# mps.log (the MPS daemon's and server's logs).
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
    exit 2
fi
build=$(cd "$1" && pwd) || exit 2
out=${2:-$build/gpu-test-logs}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
weftrun=$build/weftrun
bin=$build/tests/gpu
programs=(gpu_collectives gpu_graph gpu_registration gpu_invalid gpu_moe)
for exe in "$weftrun" "${programs[@]/#/$bin/}" "$bin/gpu_fault" "$bin/gpu_late"; do
    if [ ! -x "$exe" ]; then
        echo "$0: $exe is missing: build with the CUDA backend first" >&2
        exit 2
    fi
done

budget=${GPU_TEST_BUDGET_S:-480}
start=$(date +%s)
deadline=$((start + budget))
log=$out/gpu-tests.log
summary=$out/summary.txt
: >"$log"
results=()  # "label|N|result|seconds"
failures=0
last_out="" # output of the last run (kept until the next one)

export WEFT_BACKEND=cuda NCCL_NVLS_ENABLE=0

record() {
    results+=("$1|$2|$3|$4")
    case "$3" in
    PASS | RETRIED) ;;
    *) failures=$((failures + 1)) ;;
    esac
}

# MPS (tools/mps.sh: a daemon of our own, stopped on exit)
# shellcheck source=tools/mps.sh
source "$here/../../tools/mps.sh"

cleanup() {
    mps_finish "$out/mps.log"
    [ -n "$last_out" ] && rm -f "$last_out"
    last_out=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------

# run_one LABEL PROG N WANT_PASS CAP_S CMD...
# Runs CMD with a timeout (CAP_S, or less to keep to the budget). WANT_PASS > 0: the run passes
# when CMD exits 0, prints exactly WANT_PASS lines "PASS PROG rank=..." and no "FAIL", and (for
# sanitizer runs) no "ERROR SUMMARY: <non-zero>"; WANT_PASS = 0: when CMD exits 0 (gpu_fault.sh
# makes its own checks). Its output goes to the log and stays in $last_out until the next run.
run_one() {
    local label=$1 prog=$2 n=$3 want=$4 cap=$5
    shift 5
    [ -n "$last_out" ] && rm -f "$last_out"
    last_out=""
    local now left limit
    now=$(date +%s)
    left=$((deadline - now))
    if [ "$left" -lt 30 ]; then
        echo "run.sh: $label n=$n: NOT-RUN (the time budget of $budget s is spent)"
        record "$label" "$n" "NOT-RUN" 0
        return
    fi
    limit=$((left < cap ? left : cap))
    last_out=$(mktemp /tmp/gpu-tests-run.XXXXXX)
    echo "run.sh: $label n=$n (timeout ${limit} s) ..."
    local t0 t1 rc secs verdict pass
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@" >"$last_out" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    pass=$(grep -c "^PASS $prog rank=" "$last_out")
    if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "${secs%.*}" -ge "$limit" ]; }; then
        verdict=TIMEOUT
    elif [ "$rc" -eq 77 ] && grep -q "^SKIP" "$last_out"; then
        verdict=SKIP # no usable GPU: a failure on the machine this script is for
    elif [ "$want" -eq 0 ]; then
        [ "$rc" -eq 0 ] && verdict=PASS || verdict=FAIL
    elif [ "$rc" -eq 0 ] && [ "$pass" -eq "$want" ] && ! grep -q "FAIL" "$last_out" &&
        ! grep -q "ERROR SUMMARY: [1-9]" "$last_out"; then
        verdict=PASS
    else
        verdict=FAIL
    fi
    {
        echo "===== $label n=$n: $verdict in $secs s (exit status $rc)"
        echo "\$ $*"
        cat "$last_out"
        echo
    } >>"$log"
    echo "run.sh: $label n=$n: $verdict in $secs s (exit status $rc)"
    if [ "$verdict" != PASS ]; then
        tail -n 40 "$last_out" | sed 's/^/    | /'
    fi
    record "$label" "$n" "$verdict" "$secs"
}

print_summary() {
    local total=$(($(date +%s) - start))
    {
        echo
        printf '%-34s %3s  %-8s %8s\n' program N result seconds
        printf '%-34s %3s  %-8s %8s\n' ------- - ------ -------
        local r a b c d
        for r in "${results[@]}"; do
            IFS='|' read -r a b c d <<<"$r"
            printf '%-34s %3s  %-8s %8s\n' "$a" "$b" "$c" "$d"
        done
        if [ "$failures" -eq 0 ]; then
            echo "run.sh: all ${#results[@]} runs passed in $total s"
        else
            echo "run.sh: $failures of ${#results[@]} runs did not pass ($total s); see $log"
        fi
    } | tee "$summary"
}

# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------
# Every program runs with 64 MiB chunks, except gpu_registration, which counts registrations per
# allocation and sets WEFT_CUDA_CHUNK_BYTES=0 (a chunk per allocation) itself.
chunks=WEFT_CUDA_CHUNK_BYTES=64M
only=${GPU_TEST_ONLY:-}    # e.g. "gpu_registration": run just these programs
ranks=${GPU_TEST_RANKS:-2 4 8}
echo "run.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), build $build, logs in $out"
echo "===== nvidia-smi"
if ! nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt"; then
    echo "run.sh: nvidia-smi failed"
    record nvidia-smi - FAIL 0
fi

# The GPUs the ranks can use (CUDA_VISIBLE_DEVICES=0 runs the one-GPU suite on a larger machine).
ngpu=$(mps_gpus)
most=0
for n in $ranks; do
    [ "$n" -gt "$most" ] && most=$n
done
if [ "$most" -le "$ngpu" ]; then
    echo "run.sh: $ngpu GPU(s), at most $most ranks: one rank per GPU, no MPS"
elif ! mps_start; then
    record "MPS (nvidia-cuda-mps-control -d)" - FAIL 0
    cleanup
    print_summary
    exit 1
fi

[ -n "$only" ] && read -r -a programs <<<"$only"
for n in $ranks; do
    for p in "${programs[@]}"; do
        run_one "$p" "$p" "$n" "$n" 300 \
            env WEFT_TIMEOUT_S=30 "$chunks" "$weftrun" --grace 15 -n "$n" -- "$bin/$p"
    done
    [ -n "$only" ] && continue
    run_one gpu_fault gpu_fault "$n" 0 120 \
        env WEFT_TIMEOUT_S=5 sh "$here/gpu_fault.sh" "$weftrun" "$bin/gpu_fault" "$n"
done
for n in $ranks; do
    [ -n "$only" ] && break
    run_one "gpu_fault --inflight" gpu_fault "$n" 0 120 \
        env WEFT_TIMEOUT_S=5 sh "$here/gpu_fault.sh" "$weftrun" "$bin/gpu_fault" "$n" --inflight
done

# A kernel later than the timeout, at the first rank count: on the kernel path, and with the
# copies on the copy engines between an entry and a closing launch.
if [ -z "$only" ]; then
    first=${ranks%% *}
    run_one "gpu_late all_reduce" gpu_late "$first" "$first" 120 \
        env WEFT_TIMEOUT_S=3 "$weftrun" --grace 15 -n "$first" -- "$bin/gpu_late" all_reduce
    run_one "gpu_late all_gather (copy engine)" gpu_late "$first" "$first" 120 \
        env WEFT_TIMEOUT_S=3 WEFT_CUDA_COPY_ENGINE=1 "$weftrun" --grace 15 -n "$first" -- \
        "$bin/gpu_late" all_gather
    run_one "gpu_late moe" gpu_late "$first" "$first" 120 \
        env WEFT_TIMEOUT_S=3 "$weftrun" --grace 15 -n "$first" -- "$bin/gpu_late" moe
fi

# The copy-engine path, which the default (auto) takes only for large copies between GPUs, and
# the mesh for the small payloads that take the push path by default.
if [ -z "$only" ]; then
    first=${ranks%% *}
    last=${ranks##* }
    for n in $(printf '%s\n' "$first" "$last" | uniq); do
        for p in gpu_collectives gpu_graph; do
            run_one "$p (copy engine)" "$p" "$n" "$n" 300 \
                env WEFT_TIMEOUT_S=30 WEFT_CUDA_COPY_ENGINE=1 "$chunks" "$weftrun" \
                --grace 15 -n "$n" -- "$bin/$p"
        done
    done
    run_one "gpu_collectives (no push)" gpu_collectives "$first" "$first" 300 \
        env WEFT_TIMEOUT_S=30 WEFT_CUDA_PUSH_BYTES=0 "$chunks" "$weftrun" \
        --grace 15 -n "$first" -- "$bin/gpu_collectives"
    run_one "gpu_collectives (3 blocks)" gpu_collectives "$first" "$first" 300 \
        env WEFT_TIMEOUT_S=30 WEFT_CUDA_MAX_BLOCKS=3 "$chunks" "$weftrun" \
        --grace 15 -n "$first" -- "$bin/gpu_collectives"
    # Operation numbers where 32-bit arithmetic breaks: 0x01010100 (the push path's first odd
    # operation is 0x01010101, the flag of never-written even words) and 2^32 - 8 (flags that
    # no operation set read 2^32 behind; the push path's words wrap to 0).
    for seq_start in 16843008 4294967288; do
        for p in gpu_collectives gpu_graph; do
            run_one "$p (from operation $seq_start)" "$p" "$first" "$first" 300 \
                env WEFT_TIMEOUT_S=30 WEFT_SEQ_START=$seq_start "$chunks" "$weftrun" \
                --grace 15 -n "$first" -- "$bin/$p"
        done
    done
fi

# compute-sanitizer memcheck on a short run.
san=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$san" ] && [ -x "$c" ] && san=$c
done
if [ -n "${GPU_TEST_NO_MEMCHECK:-}" ]; then
    echo "run.sh: memcheck skipped (GPU_TEST_NO_MEMCHECK)"
elif [ -z "$san" ]; then
    echo "run.sh: compute-sanitizer not found"
    record "memcheck gpu_collectives" 2 MISSING 0
else
    memcheck() { # memcheck PROG [ENV...]: 2 ranks, a sanitizer per rank
        local prog=$1
        shift
        run_one "memcheck $prog ($where)" "$prog" 2 2 300 env "$@" GPU_TEST_QUICK=1 \
            GPU_TEST_SANITIZER=1 WEFT_TIMEOUT_S=120 "$weftrun" --grace 15 -n 2 -- "$san" --tool memcheck \
            --report-api-errors no --print-limit 20 --error-exitcode 86 "$bin/$prog"
    }
    # mps_refused PROG: whether the last run failed only because the sanitizer refused to run the
    # program as an MPS client: it ended on its own (not a timeout), the program printed no PASS
    # or FAIL line (it never ran, or never got past start-up), the sanitizer reported no error,
    # and one of the sanitizer's own lines ("========= ...") names MPS.
    mps_refused() {
        local last=${results[${#results[@]} - 1]}
        [[ "$last" == *"|FAIL|"* ]] &&
            ! grep -Eq "^(PASS|FAIL) $1 " "$last_out" &&
            ! grep -q "ERROR SUMMARY: [1-9]" "$last_out" &&
            grep -Eiq "^=========.*(MPS|multi-process service)" "$last_out"
    }
    where=$([ "$mps_on" = 1 ] && echo MPS || echo "no MPS")
    no_mps=() # once MPS is stopped: the ranks must not look for it
    for prog in gpu_collectives gpu_moe; do
        memcheck "$prog" "${no_mps[@]}"
        if [ "$mps_on" = 1 ] && mps_refused "$prog"; then
            last=${results[${#results[@]} - 1]}
            results[${#results[@]} - 1]="memcheck $prog (MPS)|2|RETRIED|${last##*|}"
            failures=$((failures - 1))
            echo "run.sh: the sanitizer refused the MPS clients: memcheck again without MPS"
            mps_stop
            where="no MPS"
            no_mps=(-u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY)
            memcheck "$prog" "${no_mps[@]}"
        fi
    done
fi

cleanup
print_summary
if [ "$failures" -ne 0 ]; then
    exit 1
fi
exit 0
