/*
 * weft_calibrate.c - weft-calibrate: measures the Burst-Gap parameters (R, T_iss0(K, V), V_k,
 * Q(K)) of device-initiated remote stores and fits them with model/burst_gap.h (docs/burst_gap.md,
 * "Calibration"). CUDA backend; built with CUDA only.
 *
 *   weftrun -n N weft-calibrate [-r REPEATS] [-b BURSTS] [-V MAX_BYTES] [-p PLATEAU_BYTES]
 *                               [--json FILE]
 *   weft-calibrate --synthetic SEED [...]      (no GPU: see below)
 *
 * Every rank weft_mallocs a receive buffer of N regions of MAX_BYTES (region s is written by
 * rank s), all-gathers its address (shadow addressing: the pointer is valid on every rank) and
 * waits for its registration with one weft_all_reduce on it. The producer kernel runs K blocks;
 * a burst of V bytes (all blocks together, 16-byte stores, split evenly over the blocks in
 * 512-byte warp chunks) is followed by a gap made of a dependent FMA chain whose result feeds the
 * next burst's data, calibrated to microseconds with %globaltimer first. Thread 0 of each block
 * reads %globaltimer after a __syncthreads before and after each burst. Per burst, across
 * blocks: start = min of the starts, issue time = max of the ends - start, gap = start - the
 * previous burst's end, period = start - the previous start. One setting (pattern, K, V, gap)
 * is one kernel of BURSTS bursts, every rank at once after a weft_barrier, reduced to the
 * medians over bursts 2.. of those times: a point. The points of all ranks are pooled (all-
 * gathered) and every rank fits the same numbers.
 *
 * Patterns: oneway (rank r stores to rank r+1 mod N), local (the same kernel storing to r's own
 * buffer: the control) and alltoall (every rank stores to every other rank at once, the burst
 * split evenly over the peers in warp chunks). Per pattern and repeat:
 *
 *   rate     zero-gap bursts, K = all SMs / ranks sharing the GPU, V = MAX/16 .. MAX
 *            -> R (weft_bg_fit_rate on the periods)
 *   plateau  V = PLATEAU_BYTES, gaps {0 .. 4} x V/R, for each K -> T_iss0(K, V)
 *            (weft_bg_fit_plateau on the issue times)
 *   knee     isolated bursts (gap max(10 us, 2 V/R)), V = 4 KiB .. MAX doubling, for each K
 *            -> V_k, T_iss0(K, V_k), Q(K) (weft_bg_fit_knee)
 *
 * K in {1, 8, 32, all}, clipped to all. A fit that fails (no knee in the sweep, too few plateau
 * points) is reported as null with its reason, and so is one whose precondition the fitted
 * numbers contradict (calibrate_sweep.c, rate_drain_bound and plateau_issue_bound): R needs the
 * rate sweep drain-bound, MAX/16 / R > T_iss0(all, MAX/16), with T_iss0 from the knee fit of
 * K = all (or, without one, bounded by the plateau when PLATEAU_BYTES >= MAX/16; else R is not
 * checked, which a comment says), and with a broken R go Q and every prediction; T_iss0(K,
 * PLATEAU_BYTES) needs the plateau burst not to stall on the capacity: its excess PLATEAU_BYTES - R
 * * T_iss0 at most Q(K)/2 (0 without a knee fit). Each parameter is reported as the median and the
 * spread (max - min) over the repeats. Rank 0 prints a table and writes --json FILE: machine,
 * date, options, parameters (median, spread, every repeat's value), the held-out check and the
 * points of every rank. Results are labelled "same-device" when all ranks share one GPU.
 *
 * Held-out check (docs/burst_gap.md, "Held-out check"). Some settings of each sweep are measured
 * but kept out of every fit: the middle volume of the rate sweep (MAX/4), the gaps {0.75, 1.5, 3}
 * x V/R of the plateau sweep, and every third volume of the knee sweep from the second on (never
 * the last), so each lies between fitted settings. The fits see the rest, exactly as they would
 * see the whole sweep. Each repeat's fits make a parameter table (R; per K whose knee fitted, the
 * T_iss0 table of weft_bg_fit_row, which takes the plateau sweep only where its T_iss0 is
 * reported, and Q), and every point of that repeat, fitted or held out, gets its predicted issue
 * time and period from weft_bg_stall_times at its K, volume and measured gap.
 * The relative errors |predicted - measured| / measured are pooled per pattern over repeats, K
 * and ranks; rank 0 prints their count, median and max, held-out and fitted points apart, and
 * writes every point with its tag ("fit" or "holdout") and prediction to the JSON, from which
 * bench/plot_burst_gap.py draws measured against predicted.
 *
 * --synthetic SEED runs the same host path with no GPU and no communicator: three ranks' points
 * are drawn from a built-in platform (the stall model with 1% noise) instead of measured, so the
 * sweeps' bookkeeping, the fits, the check and the JSON can be tested anywhere.
 *
 * Files (tools/calibrate/; what they share and their contracts are in calibrate.h):
 *   weft_calibrate.c       the options and the order of a run (this file)
 *   calibrate_sweep.c      the sweeps of a pattern and repeat, the held-out settings, the fits
 *   calibrate_device.cu    the points measured on the GPU: kernels, communicator, buffers
 *   calibrate_synthetic.c  the points drawn from the built-in platform (--synthetic)
 *   calibrate_report.c     the held-out check, the tables and the JSON
 * Only calibrate_device.cu is CUDA (C written as C++ only where nvcc needs it: the kernels and
 * their launches); the rest is plain C.
 *
 * Exit status: 0 on success, 1 on a failed call, 2 on an argument error, 77 without a CUDA device
 * ("SKIP: no CUDA device (<reason>)"). Thread safety: single-threaded.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gpu_prog.h"
#include "util/parse_bytes.h"
#include "calibrate.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weftrun -n N weft-calibrate [-r REPEATS] [-b BURSTS] [-V MAX_BYTES]\n"
            "                                  [-p PLATEAU_BYTES] [--json FILE]\n"
            "  -r, --repeats N     repeats of every sweep (1..100, default 5)\n"
            "  -b, --bursts N      bursts per setting, the first %d not counted (%d..64,\n"
            "                      default 12)\n"
            "  -V, --max-bytes S   largest burst: rate and knee sweeps (power of two,\n"
            "                      64K..1G, default 64M); R is reported only if S/16\n"
            "                      is drain-bound\n"
            "  -p, --plateau S     burst of the gap sweep (multiple of 512, default 64K);\n"
            "                      T_iss0 is reported only if it does not stall on Q\n"
            "      --json FILE     also write everything as one JSON object (rank 0)\n"
            "      --synthetic SEED  no GPU: draw three ranks' points from a built-in\n"
            "                      platform (seeded noise) to test the fits, the check and\n"
            "                      the JSON; run without weftrun\n",
            WARM_BURSTS, WARM_BURSTS + 3);
}

/* Parse the command line into s. Returns 0, 1 (help printed) or 2 (usage error). */
static int parse_args(int argc, char **argv, setup_t *s)
{
    static const struct option longopts[] = {{"repeats", required_argument, NULL, 'r'},
                                             {"bursts", required_argument, NULL, 'b'},
                                             {"max-bytes", required_argument, NULL, 'V'},
                                             {"plateau", required_argument, NULL, 'p'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"synthetic", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    memset(s, 0, sizeof *s);
    s->repeats = 5;
    s->bursts = 12;
    s->max_bytes = 64u << 20;
    s->plateau_bytes = 64u << 10;
    int opt;
    while ((opt = getopt_long(argc, argv, "r:b:V:p:h", longopts, NULL)) != -1) {
        char *end;
        int bad = 0;
        switch (opt) {
        case 'r':
            bad = bench_parse_int(optarg, 1, MAX_REPEATS, &s->repeats);
            break;
        case 'b':
            bad = bench_parse_int(optarg, WARM_BURSTS + 3, 64, &s->bursts);
            break;
        case 'V':
            bad = weft_parse_bytes(optarg, &s->max_bytes) != 0 || s->max_bytes < (64u << 10) ||
                  s->max_bytes > (1u << 30) || (s->max_bytes & (s->max_bytes - 1));
            break;
        case 'p':
            bad = weft_parse_bytes(optarg, &s->plateau_bytes) != 0 || s->plateau_bytes == 0 ||
                  s->plateau_bytes % 512 || s->plateau_bytes > (1u << 30);
            break;
        case 'j':
            s->json = optarg;
            break;
        case 's':
            errno = 0;
            s->synthetic_seed = strtoull(optarg, &end, 0);
            bad = errno || end == optarg || *end;
            s->synthetic = true;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || s->plateau_bytes > s->max_bytes) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    gpu_prog_name = "weft-calibrate";
    setup_t s;
    int pa = parse_args(argc, argv, &s);
    if (pa != 0)
        return pa == 1 ? 0 : 2;

    cal_t c;
    memset(&c, 0, sizeof c);
    c.s = &s;
    time_t now = time(NULL);
    struct tm utc;
    if (!gmtime_r(&now, &utc) || !strftime(c.date, sizeof c.date, "%Y-%m-%dT%H:%M:%SZ", &utc))
        snprintf(c.date, sizeof c.date, "unknown");
    if (s.synthetic) {
        cal_synthetic_machine(&c);
        cal_choose_k(&c);
    } else {
        cal_device_open(&c); /* exits with 77 without a CUDA device */
    }
    cal_results_open(&c);
    if (c.rank == 0 && s.json && !(c.json = fopen(s.json, "w")))
        fatal("--json %s: %s", s.json, strerror(errno));
    if (c.rank == 0)
        cal_report_header(&c);

    for (int r = 0; r < s.repeats; r++)
        for (int p = 0; p < NUM_PATTERNS; p++)
            cal_run_pattern(&c, r, p, c.params + ((size_t)r * NUM_PATTERNS + p) * NPARAMS);
    if (c.rank == 0)
        cal_report(&c);

    cal_results_close(&c);
    if (!s.synthetic)
        cal_device_close(&c);
    if (c.json && fclose(c.json) != 0)
        fatal("--json %s: %s", s.json, strerror(errno));
    return 0;
}
