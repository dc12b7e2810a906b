#!/usr/bin/env bash
# run.sh - the `make run` job: benchmark every collective across local ranks and print the
# nccl-tests tables (see docs/bench.md for the columns).
#
#   bench/run.sh BUILD_DIR RANKS
#
# Per collective two weft-bench runs (backend auto: CUDA where a GPU is present, else the host;
# WEFT_BENCH_BACKEND overrides), out of place and in place, every result
# verified (-c 1): 8 B .. 128 KiB (x4) with 1000 timed calls, then 1 MiB .. 64 MiB (x4) with 20;
# then the barrier. About 20 s on a quiet 2-core host, well under two minutes on a busy one.
# Extra weft-bench options can be passed in WEFT_BENCH_ARGS (e.g. "--registration staged").
# When the ranks may take the CUDA backend and outnumber the GPUs, they share them under an MPS
# daemon of the script's own (tools/mps.sh; without one a GPU time-slices between the processes
# and every call costs milliseconds); without MPS the job still runs, slowly.
# Exits non-zero if any run fails or any result is wrong.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR RANKS" >&2
    exit 2
fi
build=$1
ranks=$2
weftrun=$build/weftrun
bench=$build/weft-bench
for exe in "$weftrun" "$bench"; do
    if [ ! -x "$exe" ]; then
        echo "$0: $exe is missing; build first (make)" >&2
        exit 2
    fi
done
# Word splitting of the extra options is intended.
read -r -a extra <<< "${WEFT_BENCH_ARGS:-}"
backend=${WEFT_BENCH_BACKEND:-auto}

# shellcheck source=tools/mps.sh
source "$(dirname "$0")/../tools/mps.sh"
ngpu=$(mps_gpus)
if [ "$backend" != host ] && [ "$ngpu" -gt 0 ] && [ "$ranks" -gt "$ngpu" ]; then
    trap mps_finish EXIT
    mps_start || echo "# no MPS: $ranks ranks time-slice $ngpu GPU(s), every call takes milliseconds"
fi

start=$(date +%s)
echo "# weft collectives on $ranks local ranks ($(nproc) cores, $ngpu GPU(s), $(uname -r))"
for coll in all_reduce all_gather reduce_scatter broadcast all_to_all all_to_allv; do
    # Small sizes: many short calls; large sizes: few long ones.
    "$weftrun" -n "$ranks" "$bench" -t "$coll" -b 8 -e 256K -f 4 -n 1000 -w 100 -c 1 \
        --backend "$backend" "${extra[@]}"
    "$weftrun" -n "$ranks" "$bench" -t "$coll" -b 1M -e 64M -f 4 -n 20 -w 5 -c 1 \
        --backend "$backend" "${extra[@]}"
done
"$weftrun" -n "$ranks" "$bench" -t barrier -n 1000 -w 100 --backend "$backend" "${extra[@]}"
echo "# bench/run.sh: done in $(( $(date +%s) - start )) s"
