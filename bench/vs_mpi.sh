#!/usr/bin/env bash
# vs_mpi.sh - weft against Open MPI on this host, side by side in one run, as ratios.
#
#   bench/vs_mpi.sh [BUILD_DIR]        (default: build; built here if the tools are missing)
#
# Measures, on 2 local ranks of the host backend:
#   1. float32 SUM all-reduce latency at 8 B, 64 KiB, 1 MiB, 16 MiB: weft (weft_malloc'ed
#      buffers, registration-on-allocation) vs MPI_Allreduce (Open MPI defaults, malloc'ed
#      buffers), then the same over a sweep 8 B .. 64 MiB;
#   2. zero-copy vs staged all-reduce at 1 .. 64 MiB: weft buffers with --registration roa,
#      weft buffers with --registration staged, plain malloc buffers (always staged);
#   3. all-gather and all-to-all against a plain memcpy of the same bytes (2 threads at once).
# Both sides use the same timing (per-call times after a barrier, per-rank median, maximum over
# ranks) and verify their results. Writes docs/results/<date>-host-vs-openmpi.md with the tables,
# the machine, the exact commands and the raw outputs. Installs Open MPI with apt-get if mpicc is
# missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
ranks=2

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "# mpicc not found: installing Open MPI (apt-get)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q
    $sudo apt-get install -y -q openmpi-bin libopenmpi-dev
fi
if [ ! -x "$build/weftrun" ] || [ ! -x "$build/weft-bench" ]; then
    cmake -S "$root" -B "$build" -DWEFT_WERROR=ON >/dev/null
    cmake --build "$build" -j "$(nproc)"
fi
mkdir -p "$build/bench" "$root/docs/results"
# The two baselines do not link weft: they compile the dependency-free helpers they share with
# the other benchmarks (medians, option values, byte sizes; util/clock.h is header-only).
helpers=(-I"$root/src" -I"$root/tools" "$root/tools/bench_util.c" "$root/src/util/parse_bytes.c")
mpicc -std=gnu11 -O2 -Wall -Wextra "$root/bench/mpi_allreduce.c" "${helpers[@]}" \
    -o "$build/bench/mpi_allreduce"
cc -std=gnu11 -O2 -Wall -Wextra -D_GNU_SOURCE "$root/bench/memcpy_bw.c" "${helpers[@]}" \
    -o "$build/bench/memcpy_bw" -lpthread

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
reps=3      # every measurement is repeated, alternating weft and the baseline; medians shown
commands=() # every command line, in the order run
ran=()      # the raw output files, in the order run

# run NAME CMD...: run CMD into $raw/NAME, headed by the command line.
run() {
    local name=$1
    shift
    commands+=("$*")
    ran+=("$name")
    echo "## $name: $*" >"$raw/$name"
    "$@" >>"$raw/$name"
}
weft() {
    local name=$1
    shift
    run "$name" "$build/weftrun" -n "$ranks" "$build/weft-bench" --backend host -d float -o sum \
        --inplace 0 -c 1 "$@"
}
mpi() {
    local name=$1
    shift
    run "$name" mpirun -np "$ranks" --oversubscribe --allow-run-as-root \
        "$build/bench/mpi_allreduce" "$@"
}

# med COL NAME [plain]: for each size, the median over the repetitions $raw/NAME.r1.. of column
# COL of the data rows (lines whose first field is a number), then, unless "plain", the range:
# "size median [min, max]".
med() {
    local files=()
    for ((r = 1; r <= reps; r++)); do
        files+=("$raw/$2.r$r")
    done
    awk -v c="$1" -v plain="${3:-}" '
        $1 ~ /^[0-9]+$/ && NF >= c {
            if (!($1 in n)) order[++nsizes] = $1;
            v[$1, ++n[$1]] = $c;
        }
        END {
            for (i = 1; i <= nsizes; i++) {
                s = order[i]; m = n[s];
                for (a = 1; a <= m; a++) x[a] = v[s, a] + 0;
                for (a = 2; a <= m; a++)          # insertion sort of the m values
                    for (b = a; b > 1 && x[b - 1] > x[b]; b--) {
                        t = x[b]; x[b] = x[b - 1]; x[b - 1] = t;
                    }
                mid = m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2;
                if (plain) printf "%s %.2f\n", s, mid;
                else printf "%s %.2f [%.2f, %.2f]\n", s, mid, x[1], x[m];
            }
        }' "${files[@]}"
}

# join_rows RATIO FILE...: Markdown rows joining "size value..." files on size:
# | size | value of file 1 | value of file 2 | ... | and, with RATIO=1, | v1 / v2 |.
join_rows() {
    local ratio=$1
    shift
    awk -v nfiles=$# -v ratio="$ratio" '
        function human(b) {
            if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB";
            if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB";
            return b " B";
        }
        FNR == 1 { f++ }
        { s = $1; $1 = ""; sub(/^ /, ""); v[f, s] = $0; if (f == 1) order[++n] = s }
        END {
            for (i = 1; i <= n; i++) {
                s = order[i]; line = "| " human(s) " |"; ok = 1;
                for (k = 1; k <= nfiles; k++) {
                    if (!((k, s) in v)) { ok = 0; break }
                    line = line " " v[k, s] " |";
                }
                if (!ok) continue;
                if (ratio) line = line sprintf(" %.2f |", v[1, s] / v[2, s]);
                print line;
            }
        }' "$@"
}

start=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
points=(8:2000:200 64K:1000:100 1M:200:20 16M:30:5)
sweep_small=(8 16 32 64 128 256 512 1K 2K 4K 8K 16K 32K 64K)
sweep_large=(128K 256K 512K 1M 2M 4M 8M 16M 32M 64M)
copy_sizes=(64K 256K 1M 4M 16M 64M)
for ((r = 1; r <= reps; r++)); do
    # 1. Latency at four sizes: many calls where calls are short, fewer where they are long.
    for point in "${points[@]}"; do
        IFS=: read -r size iters warm <<<"$point"
        weft "weft-point-$size.r$r" -t all_reduce -b "$size" -e "$size" -n "$iters" -w "$warm"
        mpi "mpi-point-$size.r$r" -n "$iters" -w "$warm" "$size"
    done
    # 1b. Sweep 8 B .. 64 MiB (factor 2), in two ranges with their own iteration counts.
    weft "weft-sweep-small.r$r" -t all_reduce -b 8 -e 64K -f 2 -n 500 -w 50
    mpi "mpi-sweep-small.r$r" -n 500 -w 50 "${sweep_small[@]}"
    weft "weft-sweep-large.r$r" -t all_reduce -b 128K -e 64M -f 2 -n 20 -w 5
    mpi "mpi-sweep-large.r$r" -n 20 -w 5 "${sweep_large[@]}"
    # 2. Zero-copy vs staged all-reduce.
    weft "zc-roa.r$r" -t all_reduce -b 1M -e 64M -f 2 -n 20 -w 5 --buffers weft \
        --registration roa
    weft "zc-staged.r$r" -t all_reduce -b 1M -e 64M -f 2 -n 20 -w 5 --buffers weft \
        --registration staged
    weft "zc-malloc.r$r" -t all_reduce -b 1M -e 64M -f 2 -n 20 -w 5 --buffers malloc \
        --registration roa
    # 3. Copy collectives vs memcpy of the same bytes.
    weft "copy-all_gather.r$r" -t all_gather -b 64K -e 64M -f 4 -n 20 -w 5
    weft "copy-all_to_all.r$r" -t all_to_all -b 64K -e 64M -f 4 -n 20 -w 5
    run "copy-memcpy.r$r" "$build/bench/memcpy_bw" -t "$ranks" -n 20 -w 5 "${copy_sizes[@]}"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(($(date +%s) - start))

for point in "${points[@]}"; do
    size=${point%%:*}
    med 6 "weft-point-$size"
done >"$raw/weft-points.med"
for point in "${points[@]}"; do
    size=${point%%:*}
    med 6 "mpi-point-$size"
done >"$raw/mpi-points.med"
cat <(med 6 weft-sweep-small) <(med 6 weft-sweep-large) >"$raw/weft-sweep.med"
cat <(med 6 mpi-sweep-small) <(med 6 mpi-sweep-large) >"$raw/mpi-sweep.med"

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
date_iso=$(date +%Y-%m-%d)
out=$root/docs/results/$date_iso-host-vs-openmpi.md
model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
mpi_version=$(mpirun --version 2>&1 | head -n 1)
rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo "no commit")
{
    echo "# weft vs Open MPI on the host backend ($date_iso)"
    echo
    echo "Produced by \`bench/vs_mpi.sh\` in one run of ${elapsed} s (weft at $rev)."
    echo
    echo "| machine | |"
    echo "| --- | --- |"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
    echo "| cores (\`nproc\`) | $(nproc) |"
    echo "| CPU (\`lscpu\` model name) | ${model:-unknown} |"
    echo "| kernel | $(uname -r) |"
    echo "| load average before / after | $load_before / $load_after |"
    echo "| Open MPI | $mpi_version |"
    echo "| ranks | $ranks (processes on this host) |"
    echo
    echo "Method: every call is timed alone after a barrier (\`clock_gettime(CLOCK_MONOTONIC)\`);"
    echo "each rank takes the median of its per-call times, and a run reports the maximum over"
    echo "ranks of those medians, in microseconds. Every measurement was run $reps times,"
    echo "alternating weft and the baseline; the tables show the median of the $reps runs and"
    echo "[the smallest, the largest]. Both programs verify one call per size exactly. weft uses"
    echo "\`weft_malloc\`'ed buffers (registration-on-allocation) unless stated; Open MPI runs"
    echo "with its default settings on \`malloc\`'ed buffers. A ratio below 1 means weft is faster."
    echo
    echo "## All-reduce latency, float32 sum"
    echo
    echo "| size | weft (us) | Open MPI (us) | weft / Open MPI |"
    echo "| ---: | ---: | ---: | ---: |"
    join_rows 1 "$raw/weft-points.med" "$raw/mpi-points.med"
    echo
    echo "Calls per run: 8 B: 2000 (+200 warm-up); 64 KiB: 1000 (+100); 1 MiB: 200 (+20);"
    echo "16 MiB: 30 (+5)."
    echo
    echo "### Sweep 8 B .. 64 MiB"
    echo
    echo "| size | weft (us) | Open MPI (us) | weft / Open MPI |"
    echo "| ---: | ---: | ---: | ---: |"
    join_rows 1 "$raw/weft-sweep.med" "$raw/mpi-sweep.med"
    echo
    echo "Calls per run: 500 (+50 warm-up) up to 64 KiB, 20 (+5) above."
    echo
    echo "## Zero-copy vs staged all-reduce"
    echo
    echo "Same all-reduce, 20 calls (+5) per size: \`--buffers weft --registration roa\`"
    echo "(zero-copy), \`--buffers weft --registration staged\`, and \`--buffers malloc\`"
    echo "(memory weft did not allocate always takes the staged path)."
    echo
    echo "| size | zero-copy (us) | staged (us) | malloc buffers (us) | zero-copy / staged |"
    echo "| ---: | ---: | ---: | ---: | ---: |"
    join_rows 0 <(med 6 zc-roa) <(med 6 zc-staged) <(med 6 zc-malloc) |
        awk -F'|' '{ printf "%s %.2f |\n", $0, $3 / $4 }'
    echo
    echo "## Copy collectives vs memcpy of the same bytes"
    echo
    echo "Every rank of an all-gather or all-to-all of size S writes S bytes into its receive"
    echo "buffer; \`memcpy_bw -t $ranks\` copies S bytes in $ranks threads at once, timed the same"
    echo "way. busbw = S (n-1)/n / time; memcpy GB/s = S / time. The ratios compare times."
    echo
    echo "| size | all_gather (us) | all_to_all (us) | memcpy (us) | all_gather busbw (GB/s)"\
         "| all_to_all busbw (GB/s) | memcpy (GB/s) | all_gather / memcpy"\
         "| all_to_all / memcpy |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    join_rows 0 <(med 6 copy-all_gather) <(med 6 copy-all_to_all) <(med 2 copy-memcpy) \
        <(med 8 copy-all_gather plain) <(med 8 copy-all_to_all plain) \
        <(med 3 copy-memcpy plain) |
        awk -F'|' '{ printf "%s %.2f | %.2f |\n", $0, $3 / $5, $4 / $5 }'
    echo
    echo "## Commands"
    echo
    echo "Run as \`bench/vs_mpi.sh $build\`, which ran, in this order:"
    echo
    echo '```'
    printf '%s\n' "${commands[@]}"
    echo '```'
    echo
    echo "## Raw outputs"
    for f in "${ran[@]}"; do
        echo
        echo '```'
        cat "$raw/$f"
        echo '```'
    done
} >"$out"

sed -n '1,/^## Commands/p' "$out" | head -n -1
echo "# written to $out"
