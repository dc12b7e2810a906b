# shellcheck shell=bash
# mps.sh - an MPS control daemon of the calling script's own, so that ranks sharing a GPU run
# their kernels at the same time (without MPS the GPU time-slices between processes: a
# cross-process flag round trip costs milliseconds instead of microseconds). Sourced by bash
# scripts (bench/run.sh, bench/gpu_*.sh, tests/gpu/run.sh, python/tests/run_gpu.sh):
#
#   source tools/mps.sh
#   mps_gpus            print how many GPUs the ranks can use: CUDA_VISIBLE_DEVICES's entries
#                       when it is set, else the GPUs nvidia-smi lists (0 without either)
#   mps_start           start the daemon: its pipe and log directories are fresh ones under /tmp
#                       (made at the first start, kept until mps_finish), exported as
#                       CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY; returns 1 if
#                       nvidia-cuda-mps-control is missing or fails (the variables then unset)
#   mps_stop            quit the daemon and wait until its pipe no longer answers (at most 10 s);
#                       it may be started again; a no-op when none of ours runs
#   mps_finish [FILE]   mps_stop, then write the daemon's and servers' logs to FILE (when given;
#                       replaced) and remove the directories: for the caller's EXIT trap; a
#                       no-op once done (FILE is left as it is)
#
# mps_on is 1 while a daemon of ours runs. Messages go to stdout, prefixed "mps:". Every function
# returns 0 but as said, whatever the commands it runs return: callers run under set -e.

mps_on=0
mps_dir=""

mps_gpus() {
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true
    elif command -v nvidia-smi >/dev/null; then
        nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true # grep -c prints 0, exits 1
    else
        echo 0
    fi
}

mps_start() {
    [ "$mps_on" = 1 ] && return 0
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        echo "mps: nvidia-cuda-mps-control not found"
        return 1
    fi
    if [ -z "$mps_dir" ]; then
        mps_dir=$(mktemp -d /tmp/weft-mps.XXXXXX) || return 1
        mkdir -p "$mps_dir/pipe" "$mps_dir/log"
    fi
    export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
    if nvidia-cuda-mps-control -d; then
        mps_on=1
        echo "mps: MPS control daemon started (pipe directory $CUDA_MPS_PIPE_DIRECTORY)"
        return 0
    fi
    echo "mps: nvidia-cuda-mps-control -d failed"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 1
}

mps_stop() {
    [ "$mps_on" = 1 ] || return 0
    mps_on=0
    echo quit | nvidia-cuda-mps-control || true # a daemon that is gone already answers nothing
    # The daemon is gone once its pipe no longer answers.
    for _ in $(seq 50); do
        if ! echo get_server_list | timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1; then
            echo "mps: MPS stopped"
            return 0
        fi
        sleep 0.2
    done
    echo "mps: the MPS control daemon still answers 10 s after quit"
}

mps_finish() {
    mps_stop
    [ -n "$mps_dir" ] || return 0
    if [ -n "${1:-}" ]; then
        for f in "$mps_dir"/log/*; do
            if [ -f "$f" ]; then
                echo "===== $(basename "$f")"
                cat "$f" || true
            fi
        done >"$1"
    fi
    rm -rf "$mps_dir"
    mps_dir=""
    return 0
}
