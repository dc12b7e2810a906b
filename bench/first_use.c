/*
 * first_use.c - first-use: the latency of the first collective on a freshly allocated buffer
 * against the steady state, per registration mode (weft_registration_t in include/weft.h; with
 * roa a collective waits only for a registration of its buffers that a peer has not yet
 * acknowledged). CUDA backend; built with CUDA only.
 *
 *   weftrun -n N first-use[-nccl] [-m MODES] [-s SIZES] [-g GAPS_MS] [-n CALLS] [-r REPEATS]
 *                          [--gap-kind sleep|spin|busy] [--tag TEXT] [--json FILE]
 *
 * For each registration mode (one communicator each, made with weft_config_default, the CUDA
 * backend and .registration = the mode), each allocation size and each gap, REPEATS
 * measurements, each on a fresh buffer, on every rank (sizes up to WEFT_CUDA_PUSH_BYTES take
 * the push path, which registers nothing: set it to 0 to measure registration there):
 *
 *   barrier; weft_malloc(size); gap; barrier;
 *   first:      t0; weft_all_reduce(in place, float32, sum, size / 4); cudaStreamSynchronize; t1
 *   steady:     CALLS times { barrier; the same timed call }  -> this rank's median
 *   after-gap:  barrier; gap; barrier; the same timed call on the now used buffer
 *   weft_free
 *   launch:     CALLS times { barrier; t0; launch an empty kernel; t1; cudaStreamSynchronize }
 *               -> this rank's median; then barrier; gap; barrier; the same launch timed once
 *
 * The gap is a sleep of the host (--gap-kind sleep, the default: the GPU and the CPU go idle),
 * a busy wait of the host (spin: the CPU stays awake, the GPU goes idle) or GPU work (busy: a
 * one-warp kernel runs for the gap on the stream and the host waits for it in
 * cudaStreamSynchronize, as a training step computes between allocating a buffer and
 * communicating it; ranks leave it within microseconds of each other, their kernels having
 * started together after the barrier). Comparing the three tells where an idle cost sits.
 *
 * "barrier" is weft_barrier on the stream followed by cudaStreamSynchronize: it is itself a
 * collective, so the one before a measurement comes before the allocation; the one after the gap
 * lines the ranks up as before every steady call (it touches no buffer), so that the first call
 * is not charged with how far apart the ranks leave the gap (up to 200 us after a sleep; the
 * after-gap control measured that in runs without this barrier). Times are host
 * clock (CLOCK_MONOTONIC) from before the call to after the stream synchronised; each includes
 * the wait for the last rank to arrive. The host part of each (until weft_all_reduce returned:
 * entry handshake and launch) is recorded too. Sleeps run with a timer slack of 1 ns (prctl), so
 * ranks leave them within microseconds. The buffer is never written by the program: the call's cost
 * does not depend on the values.
 *
 * The after-gap call is a control: the same idle time and the same barrier skew as the first
 * call, on a buffer whose registration is long done. first - after-gap is the cost of first use
 * itself; after-gap - steady is what the idle gap alone costs (clocks, a sleeping thread).
 * The launch is a second control, without weft: the host time of launching an empty kernel
 * (bench/gpu_busy.cu, 0 ns) after a barrier, steady and after the same gap and barrier as the
 * first call. Its after-gap excess is what any call that launches a kernel pays after the gap
 * in the CUDA driver, whatever the library: (steady + launch excess) / steady is the lowest
 * first / steady a call with one launch can reach ("floor").
 *
 * Statistics (weft_get_stats, this rank's counters): registrations started between the
 * allocation and the end of the first call (0 when the allocation came out of memory weft had
 * already registered), first_use_waits and first_use_wait_ns of the first call, and the waits
 * of every later call of the measurement (expected 0 in every mode).
 *
 * Mode nccl (first-use-nccl only: first_use.c built with WEFT_BENCH_NCCL against NCCL, one
 * rank per GPU) runs the same protocol with NCCL's in-place all-reduce on a cudaMalloc buffer
 * (weft, registering nothing, still provides the barriers and the reduction of the results): the
 * same idle gaps on another library, for the after-gap cost side by side.
 *
 * Before measuring, each communicator runs every size once (allocate, 3 calls, free): kernels
 * are loaded, the staging scratch has grown, and whatever weft keeps after a free is there.
 *
 * Reduction: each measurement's per-rank values are all-gathered (weft_all_gather of doubles in
 * cudaMalloc memory: outside the window, so they register nothing, and after the counters were
 * read). Per repetition the first, steady, after-gap and wait times are the maxima over ranks,
 * registrations and waits the sums over ranks. A row gives the medians over repetitions (the
 * JSON also the maximum and every repetition's first-call time), first / steady and
 * first / after-gap, the sums of the counts, and whether it meets the target ("meets"):
 *
 *   roa, gap >= 10 ms:  "yes" if first <= 1.10 x steady and no first-use wait (first or later
 *                       call), else "NO";
 *   jit:                "yes" if every first call whose allocation started a registration
 *                       waited (it paid the registration), else "NO"; "-" when no allocation
 *                       registered anything (weft's chunks held it already: nothing to pay);
 *   other rows:         "-".
 *
 * Output: rank 0 prints a table (lines starting with # are comments) one row at a time, and with
 * --json FILE writes one JSON object per row and line. Exit status: 0 on success, 1 on a failed
 * call, 2 on an argument error, 77 without a CUDA device ("SKIP: no CUDA device (<reason>)").
 *
 * Thread safety: single-threaded.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "util/clock.h"
#include "util/parse_bytes.h"
#include "weft.h"
#include "bench_util.h"
#include "gpu_busy.h"
#include "gpu_prog.h"
#ifdef WEFT_BENCH_NCCL
#include "bench_nccl.h"
#endif

#define MAX_MODES 4
#define MODE_NCCL 3 /* after the weft_registration_t values */
#define MAX_SIZES 16
#define MAX_GAPS 16
#define MAX_REPEATS 100
#define MAX_CALLS 100000
#define MAX_GAP_MS 60000
#define WARMUP_CALLS 3
#define TARGET_GAP_MS 10
#define TARGET_RATIO 1.10

/* Per-rank values of one measurement, all-gathered as doubles. */
enum {
    V_FIRST_NS,
    V_STEADY_NS,
    V_AFTER_GAP_NS,
    V_FIRST_HOST_NS, /* the host parts of the three: until weft_all_reduce returned */
    V_STEADY_HOST_NS,
    V_AFTER_GAP_HOST_NS,
    V_REGS,
    V_WAITS,
    V_WAIT_NS,
    V_LATER_WAITS,
    V_LAUNCH_STEADY_NS, /* the launch control: an empty kernel's launch, host time */
    V_LAUNCH_AFTER_GAP_NS,
    NVALS
};

typedef struct bench {
    weft_comm_t comm;
    cudaStream_t stream;
    int rank, nranks;
    int calls;
    int gap_kind;        /* GAP_SLEEP, GAP_SPIN or GAP_BUSY */
    uint64_t *call_ns;   /* calls entries: the steady calls of one measurement */
    uint64_t *host_ns;   /* calls entries: their host parts */
    uint64_t *launch_ns; /* calls entries: the steady launches of the launch control */
    double *d_mine;      /* device (cudaMalloc): NVALS values of this rank */
    double *d_all;       /* device (cudaMalloc): nranks * NVALS values */
    double *h_all;       /* host copy of d_all */
#ifdef WEFT_BENCH_NCCL
    bench_nccl_t *nccl; /* mode nccl: the library under test */
#endif
} bench_t;

/* One row: a (mode, size, gap) over its repetitions, as rank 0 accumulates it. */
typedef struct row {
    double first_us[MAX_REPEATS], steady_us[MAX_REPEATS], after_gap_us[MAX_REPEATS];
    double host_us[3][MAX_REPEATS];   /* host parts of first, steady, after-gap */
    double launch_us[2][MAX_REPEATS]; /* the launch control: steady, after the gap */
    double wait_us[MAX_REPEATS];
    uint64_t regs, waits, later_waits;
    int ranks_waited;      /* (rank, repetition) pairs whose first call waited */
    int ranks_registered;  /* pairs whose allocation started a registration */
    int registered_waited; /* pairs of both kinds */
} row_t;

static const char *const mode_names[MAX_MODES] = {"roa", "jit", "staged", "nccl"};

enum { GAP_SLEEP, GAP_SPIN, GAP_BUSY, NUM_GAP_KINDS };
static const char *const gap_kind_names[NUM_GAP_KINDS] = {"sleep", "spin", "busy"};

/* The gap between allocation (or a barrier) and a call: the host sleeps or busy-waits, or the
 * GPU computes. */
static void gap(bench_t *b, int ms)
{
    if (ms <= 0)
        return;
    if (b->gap_kind == GAP_BUSY) {
        cuda_ok(gpu_busy(b->stream, (uint64_t)ms * 1000000u), "gpu_busy launch");
        cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize after gpu_busy");
        return;
    }
    if (b->gap_kind == GAP_SPIN) {
        uint64_t t0 = weft_now_ns();
        while (weft_now_ns() - t0 < (uint64_t)ms * 1000000u)
            ;
        return;
    }
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Every rank's stream has reached this point, and so has every rank's host. */
static void barrier(bench_t *b)
{
    weft_ok(weft_barrier(b->comm, b->stream), "weft_barrier");
    cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize after weft_barrier");
}

/* One in-place float32 sum all-reduce of buf (through NCCL in mode nccl), host time from the
 * call to the end of the stream synchronisation; *host_ns gets the time until the call
 * returned. */
static uint64_t timed_all_reduce(bench_t *b, void *buf, size_t count, uint64_t *host_ns)
{
    uint64_t t0 = weft_now_ns();
#ifdef WEFT_BENCH_NCCL
    if (b->nccl) {
        if (bench_nccl_call(b->nccl, COLL_ALL_REDUCE, buf, buf, count, WEFT_FLOAT32, WEFT_SUM, 0,
                            NULL) != WEFT_SUCCESS)
            fatal("NCCL all-reduce failed");
    } else
#endif
        weft_ok(weft_all_reduce(b->comm, buf, buf, count, WEFT_FLOAT32, WEFT_SUM, b->stream),
                "weft_all_reduce");
    *host_ns = weft_now_ns() - t0;
    cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize after the all-reduce");
    return weft_now_ns() - t0;
}

/* The host time of launching an empty kernel on the stream (then synchronised, untimed). */
static uint64_t timed_launch(bench_t *b)
{
    uint64_t t0 = weft_now_ns();
    cuda_ok(gpu_busy(b->stream, 0), "gpu_busy launch");
    uint64_t ns = weft_now_ns() - t0;
    cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize after the launch");
    return ns;
}

/* A fresh buffer of the library under test: weft_malloc, or cudaMalloc in mode nccl. */
static void *alloc_buf(bench_t *b, size_t bytes)
{
    void *buf = NULL;
#ifdef WEFT_BENCH_NCCL
    if (b->nccl) {
        cuda_ok(cudaMalloc(&buf, bytes), "cudaMalloc");
        return buf;
    }
#endif
    weft_ok(weft_malloc(b->comm, &buf, bytes), "weft_malloc");
    return buf;
}

static void free_buf(bench_t *b, void *buf)
{
#ifdef WEFT_BENCH_NCCL
    if (b->nccl) {
        cuda_ok(cudaFree(buf), "cudaFree");
        return;
    }
#endif
    weft_ok(weft_free(b->comm, buf), "weft_free");
}

static void get_stats(bench_t *b, weft_stats_t *s)
{
    weft_ok(weft_get_stats(b->comm, s), "weft_get_stats");
}

/* Median of v[0..n) (1 <= n <= MAX_REPEATS); v is left in order (the JSON lists it). */
static double median_of(const double *v, int n)
{
    double s[MAX_REPEATS];
    memcpy(s, v, (size_t)n * sizeof *v);
    return bench_median_double(s, (size_t)n);
}

/* One measurement on a fresh buffer; out gets this rank's NVALS values. */
static void measure(bench_t *b, size_t bytes, int gap_ms, double out[NVALS])
{
    size_t count = bytes / sizeof(float);
    weft_stats_t s_alloc, s_first, s_end;
    barrier(b);
    get_stats(b, &s_alloc);
    void *buf = alloc_buf(b, bytes);
    gap(b, gap_ms);
    barrier(b);
    uint64_t first_host, after_gap_host;
    uint64_t first_ns = timed_all_reduce(b, buf, count, &first_host);
    get_stats(b, &s_first);
    for (int i = 0; i < b->calls; i++) {
        barrier(b);
        b->call_ns[i] = timed_all_reduce(b, buf, count, &b->host_ns[i]);
    }
    barrier(b);
    gap(b, gap_ms);
    barrier(b);
    uint64_t after_gap_ns = timed_all_reduce(b, buf, count, &after_gap_host);
    get_stats(b, &s_end);
    free_buf(b, buf);
    for (int i = 0; i < b->calls; i++) {
        barrier(b);
        b->launch_ns[i] = timed_launch(b);
    }
    barrier(b);
    gap(b, gap_ms);
    barrier(b);
    uint64_t launch_after_gap_ns = timed_launch(b);

    out[V_FIRST_NS] = (double)first_ns;
    out[V_STEADY_NS] = bench_median_u64(b->call_ns, (size_t)b->calls);
    out[V_AFTER_GAP_NS] = (double)after_gap_ns;
    out[V_FIRST_HOST_NS] = (double)first_host;
    out[V_STEADY_HOST_NS] = bench_median_u64(b->host_ns, (size_t)b->calls);
    out[V_AFTER_GAP_HOST_NS] = (double)after_gap_host;
    out[V_REGS] = (double)(s_first.registrations_started - s_alloc.registrations_started);
    out[V_WAITS] = (double)(s_first.first_use_waits - s_alloc.first_use_waits);
    out[V_WAIT_NS] = (double)(s_first.first_use_wait_ns - s_alloc.first_use_wait_ns);
    out[V_LATER_WAITS] = (double)(s_end.first_use_waits - s_first.first_use_waits);
    out[V_LAUNCH_STEADY_NS] = bench_median_u64(b->launch_ns, (size_t)b->calls);
    out[V_LAUNCH_AFTER_GAP_NS] = (double)launch_after_gap_ns;
}

/* Every rank's NVALS values into b->h_all (rank-major). */
static void gather(bench_t *b, const double mine[NVALS])
{
    size_t bytes = NVALS * sizeof(double);
    cuda_ok(cudaMemcpyAsync(b->d_mine, mine, bytes, cudaMemcpyHostToDevice, b->stream),
            "cudaMemcpyAsync (values to the device)");
    weft_ok(weft_all_gather(b->comm, b->d_mine, b->d_all, NVALS, WEFT_FLOAT64, b->stream),
            "weft_all_gather of the results");
    cuda_ok(cudaMemcpyAsync(b->h_all, b->d_all, bytes * (size_t)b->nranks, cudaMemcpyDeviceToHost,
                            b->stream),
            "cudaMemcpyAsync (results to the host)");
    cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize after the results");
}

/* Rank 0: fold one repetition's gathered values into the row. */
static void accumulate(const bench_t *b, row_t *row, int rep)
{
    double most[NVALS] = {0}; /* each value's maximum over ranks (all are >= 0) */
    for (int r = 0; r < b->nranks; r++) {
        const double *v = b->h_all + (size_t)r * NVALS;
        for (int i = 0; i < NVALS; i++)
            most[i] = v[i] > most[i] ? v[i] : most[i];
        row->regs += (uint64_t)v[V_REGS];
        row->waits += (uint64_t)v[V_WAITS];
        row->later_waits += (uint64_t)v[V_LATER_WAITS];
        row->ranks_waited += v[V_WAITS] > 0;
        row->ranks_registered += v[V_REGS] > 0;
        row->registered_waited += v[V_REGS] > 0 && v[V_WAITS] > 0;
    }
    row->first_us[rep] = most[V_FIRST_NS] / 1e3;
    row->steady_us[rep] = most[V_STEADY_NS] / 1e3;
    row->after_gap_us[rep] = most[V_AFTER_GAP_NS] / 1e3;
    row->wait_us[rep] = most[V_WAIT_NS] / 1e3;
    for (int h = 0; h < 3; h++)
        row->host_us[h][rep] = most[V_FIRST_HOST_NS + h] / 1e3;
    for (int l = 0; l < 2; l++)
        row->launch_us[l][rep] = most[V_LAUNCH_STEADY_NS + l] / 1e3;
}

typedef struct setup {
    int modes[MAX_MODES], nmodes;
    size_t sizes[MAX_SIZES];
    int nsizes;
    int gaps[MAX_GAPS], ngaps;
    int calls, repeats;
    int gap_kind;
    const char *tag;
    const char *json;
} setup_t;

/* Rank 0: print and write one finished row. */
static void report(const bench_t *b, const setup_t *s, FILE *json, const char *device, int mode,
                   size_t bytes, int gap_ms, const row_t *row)
{
    int n = s->repeats;
    double first = median_of(row->first_us, n), steady = median_of(row->steady_us, n);
    double after = median_of(row->after_gap_us, n), wait = median_of(row->wait_us, n);
    double first_max = 0;
    for (int i = 0; i < n; i++)
        first_max = row->first_us[i] > first_max ? row->first_us[i] : first_max;
    double ratio = steady > 0 ? first / steady : 0, ratio_after = after > 0 ? first / after : 0;
    double host[3], launch[2];
    for (int h = 0; h < 3; h++)
        host[h] = median_of(row->host_us[h], n);
    for (int l = 0; l < 2; l++)
        launch[l] = median_of(row->launch_us[l], n);
    double ratio_floor = steady > 0 ? (steady + launch[1] - launch[0]) / steady : 0;
    const char *target = "-";
    if (mode == WEFT_REGISTRATION_ROA && gap_ms >= TARGET_GAP_MS)
        target = ratio <= TARGET_RATIO && row->waits == 0 && row->later_waits == 0 ? "yes" : "NO";
    else if (mode == WEFT_REGISTRATION_JIT)
        target = row->ranks_registered == 0                        ? "-"
                 : row->registered_waited == row->ranks_registered ? "yes"
                                                                   : "NO";
    printf("%6s %10zu %6d %10.1f %10.1f %10.1f %7.2f %7.2f %5llu %5llu %9.1f %5llu %6s "
           "%7.1f %7.1f %7.1f %7.1f %7.1f %6.2f\n",
           mode_names[mode], bytes, gap_ms, first, steady, after, ratio, ratio_after,
           (unsigned long long)row->regs, (unsigned long long)row->waits, wait,
           (unsigned long long)row->later_waits, target, host[0], host[1], host[2], launch[0],
           launch[1], ratio_floor);
    fflush(stdout);
    if (!json)
        return;
    fprintf(json, "{\"bench\":\"first_use\",\"tag\":");
    bench_json_string(json, s->tag);
    fprintf(json, ",\"device\":");
    bench_json_string(json, device);
    fprintf(json, ",\"gap_kind\":\"%s\"", gap_kind_names[s->gap_kind]);
    fprintf(json,
            ",\"mode\":\"%s\",\"bytes\":%zu,\"gap_ms\":%d,\"ranks\":%d,\"repeats\":%d,"
            "\"calls\":%d,\"first_us\":%.3f,\"first_max_us\":%.3f,\"steady_us\":%.3f,"
            "\"after_gap_us\":%.3f,\"ratio\":%.4f,\"ratio_after_gap\":%.4f,"
            "\"registrations\":%llu,\"first_use_waits\":%llu,\"first_use_wait_us\":%.3f,"
            "\"ranks_waited\":%d,\"ranks_registered\":%d,\"later_waits\":%llu,"
            "\"host_first_us\":%.3f,"
            "\"host_steady_us\":%.3f,\"host_after_gap_us\":%.3f,\"launch_steady_us\":%.3f,"
            "\"launch_after_gap_us\":%.3f,\"ratio_floor\":%.4f,\"meets_target\":",
            mode_names[mode], bytes, gap_ms, b->nranks, n, s->calls, first, first_max, steady,
            after, ratio, ratio_after, (unsigned long long)row->regs,
            (unsigned long long)row->waits, wait, row->ranks_waited, row->ranks_registered,
            (unsigned long long)row->later_waits, host[0], host[1], host[2], launch[0], launch[1],
            ratio_floor);
    if (strcmp(target, "-") == 0)
        fprintf(json, "null");
    else
        fprintf(json, "%s", strcmp(target, "yes") == 0 ? "true" : "false");
    fprintf(json, ",\"first_us_each\":[");
    for (int i = 0; i < n; i++)
        fprintf(json, "%s%.3f", i ? "," : "", row->first_us[i]);
    fprintf(json, "],\"after_gap_us_each\":[");
    for (int i = 0; i < n; i++)
        fprintf(json, "%s%.3f", i ? "," : "", row->after_gap_us[i]);
    fprintf(json, "]}\n");
    fflush(json);
}

/* Open the communicator of one mode (mode nccl: a staged weft communicator and NCCL's), its
 * stream and result buffers. */
static void bench_open(bench_t *b, int mode, int calls, int gap_kind)
{
    memset(b, 0, sizeof *b);
    b->comm = gpu_prog_comm_open(mode == MODE_NCCL ? WEFT_REGISTRATION_STAGED
                                                   : (weft_registration_t)mode);
    b->rank = gpu_prog_rank;
    b->nranks = weft_comm_size(b->comm);
    b->calls = calls;
    b->gap_kind = gap_kind;
    /* gpu_prog_comm_open made the rank's device current on this thread. */
    cuda_ok(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaMalloc((void **)&b->d_mine, NVALS * sizeof(double)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&b->d_all, (size_t)b->nranks * NVALS * sizeof(double)),
            "cudaMalloc");
    b->h_all = calloc((size_t)b->nranks * NVALS, sizeof(double));
    b->call_ns = calloc((size_t)calls, sizeof(uint64_t));
    b->host_ns = calloc((size_t)calls, sizeof(uint64_t));
    b->launch_ns = calloc((size_t)calls, sizeof(uint64_t));
    if (!b->h_all || !b->call_ns || !b->host_ns || !b->launch_ns)
        fatal("calloc: out of memory");
#ifdef WEFT_BENCH_NCCL
    if (mode == MODE_NCCL && !(b->nccl = bench_nccl_init(b->comm, b->stream))) {
        weft_comm_abort(b->comm);
        fatal("NCCL communicator: init failed");
    }
#endif
}

static void bench_close(bench_t *b)
{
    cuda_ok(cudaStreamSynchronize(b->stream), "cudaStreamSynchronize");
#ifdef WEFT_BENCH_NCCL
    bench_nccl_destroy(b->nccl, false);
#endif
    weft_ok(weft_comm_destroy(b->comm), "weft_comm_destroy");
    cuda_ok(cudaFree(b->d_mine), "cudaFree");
    cuda_ok(cudaFree(b->d_all), "cudaFree");
    cuda_ok(cudaStreamDestroy(b->stream), "cudaStreamDestroy");
    free(b->h_all);
    free(b->call_ns);
    free(b->host_ns);
    free(b->launch_ns);
    memset(b, 0, sizeof *b);
}

/* Every size once: kernels loaded, staging scratch grown, weft's allocator in steady state. */
static void warm_up(bench_t *b, const setup_t *s)
{
    for (int i = 0; i < s->nsizes; i++) {
        barrier(b);
        void *buf = alloc_buf(b, s->sizes[i]);
        for (int c = 0; c < WARMUP_CALLS; c++) {
            barrier(b);
            uint64_t host_ns;
            (void)timed_all_reduce(b, buf, s->sizes[i] / sizeof(float), &host_ns);
        }
        free_buf(b, buf);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weftrun -n N %s [-m MODES] [-s SIZES] [-g GAPS_MS] [-n CALLS]\n"
            "         [-r REPEATS] [--gap-kind K] [--tag TEXT] [--json FILE]\n"
            "  -m, --modes LIST    registration modes: roa,jit,staged (default all three);\n"
            "                      nccl (first-use-nccl only): NCCL on cudaMalloc buffers\n"
            "  -s, --sizes LIST    allocation sizes, multiples of 4 (default 64K,16M,256M)\n"
            "  -g, --gaps LIST     ms between weft_malloc and the first call (default "
            "0,1,10,100)\n"
            "  -n, --calls N       steady-state calls per measurement (default 20)\n"
            "  -r, --repeats N     measurements per (mode, size, gap) (default 5)\n"
            "      --gap-kind K    sleep (the host sleeps), spin (the host busy-waits) or "
            "busy (a kernel\n"
            "                      runs for the gap) (default sleep)\n"
            "      --tag TEXT      label printed in the header and written to the JSON\n"
            "      --json FILE     also write one JSON object per row (rank 0)\n",
            gpu_prog_name);
}

static int add_mode(const char *tok, void *ctx)
{
    setup_t *s = ctx;
#ifndef WEFT_BENCH_NCCL
    if (strcmp(tok, mode_names[MODE_NCCL]) == 0) {
        fprintf(stderr,
                "%s: mode nccl: use first-use-nccl (built when cmake finds NCCL, "
                "-DWEFT_NCCL_ROOT=...)\n",
                gpu_prog_name);
        return -1;
    }
#endif
    for (int m = 0; m < MAX_MODES; m++) {
        if (strcmp(tok, mode_names[m]) == 0) {
            for (int i = 0; i < s->nmodes; i++) {
                if (s->modes[i] == m)
                    return -1;
            }
            s->modes[s->nmodes++] = m;
            return 0;
        }
    }
    return -1;
}

static int add_size(const char *tok, void *ctx)
{
    setup_t *s = ctx;
    uint64_t v;
    if (s->nsizes == MAX_SIZES || weft_parse_bytes(tok, &v) != 0 || v == 0 ||
        v % sizeof(float) != 0 || v > SIZE_MAX)
        return -1;
    s->sizes[s->nsizes++] = (size_t)v;
    return 0;
}

static int add_gap(const char *tok, void *ctx)
{
    setup_t *s = ctx;
    if (s->ngaps == MAX_GAPS)
        return -1;
    return bench_parse_int(tok, 0, MAX_GAP_MS, &s->gaps[s->ngaps++]);
}

/* Parse the command line into s. Returns 0, 1 (help printed) or 2 (usage error). */
static int parse_args(int argc, char **argv, setup_t *s)
{
    static const struct option longopts[] = {
        {"modes", required_argument, NULL, 'm'},    {"sizes", required_argument, NULL, 's'},
        {"gaps", required_argument, NULL, 'g'},     {"calls", required_argument, NULL, 'n'},
        {"repeats", required_argument, NULL, 'r'},  {"tag", required_argument, NULL, 't'},
        {"gap-kind", required_argument, NULL, 'k'}, {"json", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    memset(s, 0, sizeof *s);
    s->calls = 20;
    s->repeats = 5;
    s->tag = "";
    const char *modes = "roa,jit,staged", *sizes = "64K,16M,256M", *gaps = "0,1,10,100";
    int opt;
    while ((opt = getopt_long(argc, argv, "m:s:g:n:r:h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'm':
            modes = optarg;
            break;
        case 's':
            sizes = optarg;
            break;
        case 'g':
            gaps = optarg;
            break;
        case 'n':
            bad = bench_parse_int(optarg, 1, MAX_CALLS, &s->calls);
            break;
        case 'r':
            bad = bench_parse_int(optarg, 1, MAX_REPEATS, &s->repeats);
            break;
        case 't':
            s->tag = optarg;
            break;
        case 'k':
            bad = 1;
            for (int k = 0; k < NUM_GAP_KINDS; k++) {
                if (strcmp(optarg, gap_kind_names[k]) == 0) {
                    s->gap_kind = k;
                    bad = 0;
                }
            }
            break;
        case 'j':
            s->json = optarg;
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
    if (optind != argc || bench_parse_list(modes, add_mode, s) != 0 ||
        bench_parse_list(sizes, add_size, s) != 0 || bench_parse_list(gaps, add_gap, s) != 0) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
#ifdef WEFT_BENCH_NCCL
    gpu_prog_name = "first-use-nccl";
#else
    gpu_prog_name = "first-use";
#endif
    setup_t s;
    int pa = parse_args(argc, argv, &s);
    if (pa != 0)
        return pa == 1 ? 0 : 2;

    require_device();

    /* Sleeps end within microseconds instead of the default 50 us slack: ranks start the call
     * after a gap closer together (the after-gap control sees the rest of the skew). */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    FILE *json = NULL;
    char device[256] = "unknown";
    for (int m = 0; m < s.nmodes; m++) {
        bench_t b;
        bench_open(&b, s.modes[m], s.calls, s.gap_kind);
        if (m == 0 && b.rank == 0) {
            int dev = 0;
            struct cudaDeviceProp prop;
            if (cudaGetDevice(&dev) == cudaSuccess &&
                cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
                snprintf(device, sizeof device, "%s", prop.name);
            if (s.json && !(json = fopen(s.json, "w")))
                fatal("--json %s: %s", s.json, strerror(errno));
            printf("# %s: first in-place float32 sum all-reduce on a fresh buffer (weft_malloc; "
                   "nccl: cudaMalloc) vs steady state\n"
                   "# ranks %d, device %s, %d repeats, %d steady calls, gaps: %s%s%s\n"
                   "# times in us, max over ranks, median over repeats; after_gap: the same "
                   "gap, then a call on the used\n"
                   "# buffer; regs (registrations started), waits (first-use waits of the "
                   "first call), later (waits\n"
                   "# of the other calls): sums over ranks and repeats; wait_us: max over "
                   "ranks, median over repeats\n"
                   "# meets: roa gap>=%d ms: first <= %.2f x steady and 0 waits; jit: every "
                   "first call that registered waited\n"
                   "# h_first, h_stdy, h_aftr: the host parts of the three calls (until "
                   "weft_all_reduce returned)\n"
                   "# l_stdy, l_aftr: host time of an empty kernel's launch, steady and after "
                   "the gap and a barrier;\n"
                   "# floor: (steady + l_aftr - l_stdy) / steady, the least f/stdy of a call "
                   "that launches once\n",
                   gpu_prog_name, b.nranks, device, s.repeats, s.calls, gap_kind_names[s.gap_kind],
                   s.tag[0] ? ", tag " : "", s.tag, TARGET_GAP_MS, TARGET_RATIO);
            printf("#%5s %10s %6s %10s %10s %10s %7s %7s %5s %5s %9s %5s %6s %7s %7s %7s %7s %7s "
                   "%6s\n",
                   "mode", "bytes", "gap_ms", "first_us", "steady_us", "after_gap", "f/stdy",
                   "f/aftr", "regs", "waits", "wait_us", "later", "meets", "h_first", "h_stdy",
                   "h_aftr", "l_stdy", "l_aftr", "floor");
            fflush(stdout);
        }
        warm_up(&b, &s);
        for (int z = 0; z < s.nsizes; z++) {
            for (int g = 0; g < s.ngaps; g++) {
                row_t row;
                memset(&row, 0, sizeof row);
                for (int rep = 0; rep < s.repeats; rep++) {
                    double mine[NVALS];
                    measure(&b, s.sizes[z], s.gaps[g], mine);
                    gather(&b, mine);
                    if (b.rank == 0)
                        accumulate(&b, &row, rep);
                }
                if (b.rank == 0)
                    report(&b, &s, json, device, s.modes[m], s.sizes[z], s.gaps[g], &row);
            }
        }
        bench_close(&b);
    }
    if (json && fclose(json) != 0)
        fatal("--json %s: %s", s.json, strerror(errno));
    return 0;
}
