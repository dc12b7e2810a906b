/*
 * launch_cost.cu - launch-cost: what launching an empty kernel costs before and after the
 * process has imported many peer mappings (reported to slow launches; on one H200 one run
 * showed 5.6 -> 7.5 us per empty-kernel launch after importing 1000 mappings of 2 MiB, five later
 * runs showed no change). CUDA backend; built with CUDA only. C written as C++ only where nvcc
 * needs it: the kernel and its launch.
 *
 *   weftrun -n N launch-cost [-k LAUNCHES] [-b BUFFERS] [-z BYTES] [-B BATCH] [-t TIMEOUT_S]
 *                            [--tag TEXT] [--json FILE]
 *
 * Phases, in this order, every rank together (one communicator, CUDA backend, roa):
 *
 *   baseline    after weft_comm_init: weft's own allocations only
 *   cudamalloc  BUFFERS buffers of BYTES from cudaMalloc on every rank (freed after the phase)
 *   weft        BUFFERS buffers of BYTES from weft_malloc on every rank, and every registration
 *               complete: each rank waits (weft_get_stats, every BATCH allocations and after the
 *               last, at most TIMEOUT_S) until registrations_completed reaches
 *               registrations_started, then a barrier. Each process then holds its peers'
 *               segments: BUFFERS x (N-1) mappings when weft gives every allocation a segment of
 *               its own (WEFT_CUDA_CHUNK_BYTES=0), fewer when it carves allocations out of
 *               chunks. The pacing (BATCH, default 32) bounds the registrar's queue: it holds a
 *               descriptor per queued export and peer, and descriptors in flight on the control
 *               sockets count against RLIMIT_NOFILE; -B 0 allocates everything before the first
 *               wait.
 *   after-free  the weft buffers freed, a barrier, then until this rank's peer_mappings is back
 *               to its baseline value or has not changed for 1 s (weft may keep an empty chunk)
 *
 * In each phase the ranks measure in turn: rank r measures while the others wait in the host
 * handshake of a weft_barrier (no work of theirs on the GPU). A measurement, on the rank's
 * non-blocking stream, after 100 untimed launches: LAUNCHES launches of an empty kernel
 * (1 block of 1 thread, through cudaLaunchKernel), each timed alone on the host clock
 * (CLOCK_MONOTONIC):
 *
 *   launch      the cudaLaunchKernel call (asynchronous); the stream is synchronised, untimed,
 *               every 100 launches, so the queue never fills
 *   round trip  cudaLaunchKernel + cudaStreamSynchronize
 *
 * each summarised as median, 10th and 90th percentile and mean, with the rank's peer_mappings
 * and registrations_completed at that moment. The values are all-gathered (weft_all_gather of
 * doubles in cudaMalloc memory); rank 0 prints a row per phase and rank, then per phase the
 * median over ranks of the medians and its ratio to the baseline.
 *
 * Output: the tables (lines starting with # are comments) and, with --json FILE, one JSON object
 * per phase and rank and one per phase summary (rank null), one per line. Exit status: 0 on
 * success, 1 on a failed call or a registration that did not complete in time, 2 on an argument
 * error, 77 without a CUDA device ("SKIP: no CUDA device (<reason>)").
 *
 * Thread safety: single-threaded.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "weft.h"
#include "bench_util.h"
#include "gpu_prog.h"
extern "C" {
#include "util/clock.h"
#include "util/parse_bytes.h"
}

#define WARMUP_LAUNCHES 100
#define SYNC_EVERY 100
#define MAX_LAUNCHES 10000000
#define MAX_BUFFERS 100000
#define POLL_NS 1000000ull      /* statistics polling period */
#define SETTLE_NS 1000000000ull /* after-free: peer_mappings unchanged this long means settled */

enum { PH_BASELINE, PH_CUDAMALLOC, PH_WEFT, PH_AFTER_FREE, NUM_PHASES };
static const char *const phase_names[NUM_PHASES] = {"baseline", "cudamalloc", "weft", "after-free"};

/* Per-rank values of one phase, all-gathered as doubles. */
enum {
    V_LAUNCH_MED,
    V_LAUNCH_P10,
    V_LAUNCH_P90,
    V_LAUNCH_MEAN,
    V_RT_MED,
    V_RT_P10,
    V_RT_P90,
    V_RT_MEAN,
    V_PEER_MAPPINGS,
    V_REGISTRATIONS,
    NVALS
};

typedef struct setup {
    int launches, buffers, batch;
    size_t bytes;
    double timeout_s;
    const char *tag;
    const char *json;
} setup_t;

typedef struct lc {
    weft_comm_t comm;
    cudaStream_t stream;
    int rank, nranks;
    const setup_t *s;
    uint64_t *t_ns;                /* launches entries */
    double *d_mine;                /* device (cudaMalloc): NVALS values of this rank */
    double *d_all;                 /* device (cudaMalloc): nranks * NVALS values */
    double *h_all;                 /* host copy of d_all */
    double *h_med;                 /* nranks entries: scratch for the medians over ranks */
    double summary[NUM_PHASES][2]; /* rank 0: medians over ranks of launch, round trip (us) */
    FILE *json;
    char device[256];
} lc_t;

/* The kernel whose launch is timed. */
static __global__ void empty_kernel(void) {}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void barrier(lc_t *c)
{
    weft_ok(weft_barrier(c->comm, c->stream), "weft_barrier");
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after weft_barrier");
}

static void get_stats(lc_t *c, weft_stats_t *st)
{
    weft_ok(weft_get_stats(c->comm, st), "weft_get_stats");
}

static void launch(lc_t *c)
{
    void *args[1] = {NULL};
    cuda_ok(cudaLaunchKernel((const void *)empty_kernel, dim3(1), dim3(1), args, 0, c->stream),
            "cudaLaunchKernel");
}

/* Median, 10th and 90th percentile (nearest rank) and mean of t[0..n) in us; sorts t. */
static void summarize(uint64_t *t, int n, double out[4])
{
    out[0] = bench_median_u64(t, (size_t)n) / 1e3;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)t[i];
    out[1] = (double)t[(size_t)(0.1 * (n - 1) + 0.5)] / 1e3;
    out[2] = (double)t[(size_t)(0.9 * (n - 1) + 0.5)] / 1e3;
    out[3] = sum / n / 1e3;
}

/* This rank's launch and round-trip times into out. */
static void measure(lc_t *c, double out[NVALS])
{
    int n = c->s->launches;
    for (int i = 0; i < WARMUP_LAUNCHES; i++)
        launch(c);
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    for (int i = 0; i < n; i++) {
        if (i % SYNC_EVERY == 0)
            cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
        uint64_t t0 = weft_now_ns();
        launch(c);
        c->t_ns[i] = weft_now_ns() - t0;
    }
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    summarize(c->t_ns, n, out + V_LAUNCH_MED);
    for (int i = 0; i < n; i++) {
        uint64_t t0 = weft_now_ns();
        launch(c);
        cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
        c->t_ns[i] = weft_now_ns() - t0;
    }
    summarize(c->t_ns, n, out + V_RT_MED);
}

/* Every rank's NVALS values into c->h_all (rank-major). */
static void gather(lc_t *c, const double mine[NVALS])
{
    size_t bytes = NVALS * sizeof(double);
    cuda_ok(cudaMemcpyAsync(c->d_mine, mine, bytes, cudaMemcpyHostToDevice, c->stream),
            "cudaMemcpyAsync (values to the device)");
    weft_ok(weft_all_gather(c->comm, c->d_mine, c->d_all, NVALS, WEFT_FLOAT64, c->stream),
            "weft_all_gather of the results");
    cuda_ok(cudaMemcpyAsync(c->h_all, c->d_all, bytes * (size_t)c->nranks, cudaMemcpyDeviceToHost,
                            c->stream),
            "cudaMemcpyAsync (results to the host)");
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after the results");
}

static void json_head(lc_t *c, const char *phase)
{
    fprintf(c->json, "{\"bench\":\"launch_cost\",\"tag\":");
    bench_json_string(c->json, c->s->tag);
    fprintf(c->json, ",\"device\":");
    bench_json_string(c->json, c->device);
    fprintf(c->json,
            ",\"phase\":\"%s\",\"ranks\":%d,\"launches\":%d,\"buffers\":%d,"
            "\"buffer_bytes\":%zu",
            phase, c->nranks, c->s->launches, c->s->buffers, c->s->bytes);
}

/* All ranks measure in turn; rank 0 prints and writes the phase's rows and keeps its summary. */
static void run_phase(lc_t *c, int phase)
{
    double mine[NVALS];
    memset(mine, 0, sizeof mine);
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->rank) {
            weft_stats_t st;
            get_stats(c, &st);
            mine[V_PEER_MAPPINGS] = (double)st.peer_mappings;
            mine[V_REGISTRATIONS] = (double)st.registrations_completed;
            measure(c, mine);
        }
        barrier(c);
    }
    gather(c, mine);
    if (c->rank != 0)
        return;
    for (int r = 0; r < c->nranks; r++) {
        const double *v = c->h_all + (size_t)r * NVALS;
        printf("%11s %5d %9.0f %6.0f %9.2f %7.2f %7.2f %7.2f %9.2f %7.2f %7.2f %7.2f\n",
               phase_names[phase], r, v[V_PEER_MAPPINGS], v[V_REGISTRATIONS], v[V_LAUNCH_MED],
               v[V_LAUNCH_P10], v[V_LAUNCH_P90], v[V_LAUNCH_MEAN], v[V_RT_MED], v[V_RT_P10],
               v[V_RT_P90], v[V_RT_MEAN]);
        if (c->json) {
            json_head(c, phase_names[phase]);
            fprintf(c->json,
                    ",\"rank\":%d,\"peer_mappings\":%.0f,\"registrations\":%.0f,"
                    "\"launch_us\":%.3f,\"launch_p10_us\":%.3f,\"launch_p90_us\":%.3f,"
                    "\"launch_mean_us\":%.3f,\"roundtrip_us\":%.3f,\"roundtrip_p10_us\":%.3f,"
                    "\"roundtrip_p90_us\":%.3f,\"roundtrip_mean_us\":%.3f}\n",
                    r, v[V_PEER_MAPPINGS], v[V_REGISTRATIONS], v[V_LAUNCH_MED], v[V_LAUNCH_P10],
                    v[V_LAUNCH_P90], v[V_LAUNCH_MEAN], v[V_RT_MED], v[V_RT_P10], v[V_RT_P90],
                    v[V_RT_MEAN]);
        }
    }
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < c->nranks; r++)
            c->h_med[r] = c->h_all[(size_t)r * NVALS + (k == 0 ? V_LAUNCH_MED : V_RT_MED)];
        c->summary[phase][k] = bench_median_double(c->h_med, (size_t)c->nranks);
    }
    fflush(stdout);
    if (c->json)
        fflush(c->json);
}

/* Wait until every registration this rank started has completed (acknowledged by every peer). */
static void wait_registered(lc_t *c)
{
    weft_stats_t st;
    get_stats(c, &st);
    uint64_t target = st.registrations_started;
    uint64_t deadline = weft_deadline_after_s(c->s->timeout_s);
    while (st.registrations_completed < target) {
        if (weft_now_ns() > deadline)
            fatal("registrations: %llu of %llu completed after %.0f s",
                  (unsigned long long)st.registrations_completed, (unsigned long long)target,
                  c->s->timeout_s);
        sleep_ns(POLL_NS);
        get_stats(c, &st);
    }
}

/* Wait until this rank's peer_mappings is back to floor or has not changed for SETTLE_NS (weft
 * may keep an empty chunk registered), at most the timeout. Returns the final count. */
static uint64_t wait_settled(lc_t *c, uint64_t floor)
{
    weft_stats_t st;
    get_stats(c, &st);
    uint64_t deadline = weft_deadline_after_s(c->s->timeout_s);
    uint64_t last = st.peer_mappings, since = weft_now_ns();
    while (st.peer_mappings > floor && weft_now_ns() - since < SETTLE_NS &&
           weft_now_ns() < deadline) {
        sleep_ns(POLL_NS);
        get_stats(c, &st);
        if (st.peer_mappings != last) {
            last = st.peer_mappings;
            since = weft_now_ns();
        }
    }
    return st.peer_mappings;
}

static void lc_open(lc_t *c, const setup_t *s)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->comm = gpu_prog_comm_open(WEFT_REGISTRATION_ROA);
    c->rank = gpu_prog_rank;
    c->nranks = weft_comm_size(c->comm);
    /* gpu_prog_comm_open made the rank's device current on this thread. */
    cuda_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaMalloc((void **)&c->d_mine, NVALS * sizeof(double)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&c->d_all, (size_t)c->nranks * NVALS * sizeof(double)),
            "cudaMalloc");
    c->h_all = (double *)calloc((size_t)c->nranks * NVALS, sizeof(double));
    c->h_med = (double *)calloc((size_t)c->nranks, sizeof(double));
    c->t_ns = (uint64_t *)calloc((size_t)s->launches, sizeof(uint64_t));
    if (!c->h_all || !c->h_med || !c->t_ns)
        fatal("calloc: out of memory");
    snprintf(c->device, sizeof c->device, "unknown");
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(c->device, sizeof c->device, "%s", prop.name);
    if (c->rank == 0 && s->json && !(c->json = fopen(s->json, "w")))
        fatal("--json %s: %s", s->json, strerror(errno));
}

static void lc_close(lc_t *c)
{
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    weft_ok(weft_comm_destroy(c->comm), "weft_comm_destroy");
    cuda_ok(cudaFree(c->d_mine), "cudaFree");
    cuda_ok(cudaFree(c->d_all), "cudaFree");
    cuda_ok(cudaStreamDestroy(c->stream), "cudaStreamDestroy");
    free(c->h_all);
    free(c->h_med);
    free(c->t_ns);
    if (c->json && fclose(c->json) != 0)
        fatal("--json %s: %s", c->s->json, strerror(errno));
}

/* Rank 0: the table's header. */
static void print_header(const lc_t *c)
{
    const setup_t *s = c->s;
    struct rlimit rl;
    char soft[32] = "?", hard[32] = "?";
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        snprintf(soft, sizeof soft, "%llu", (unsigned long long)rl.rlim_cur);
        snprintf(hard, sizeof hard, "%llu", (unsigned long long)rl.rlim_max);
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(soft, sizeof soft, "unlimited");
        if (rl.rlim_max == RLIM_INFINITY)
            snprintf(hard, sizeof hard, "unlimited");
    }
    printf("# launch-cost: empty kernel (1 block, 1 thread) via cudaLaunchKernel, each rank in "
           "turn, %d launches\n"
           "# ranks %d, device %s, %d buffers of %zu bytes per rank, registration batch %d, "
           "RLIMIT_NOFILE %s/%s%s%s\n"
           "# launch: the asynchronous call; rtrip: launch + cudaStreamSynchronize; us\n",
           s->launches, c->nranks, c->device, s->buffers, s->bytes, s->batch, soft, hard,
           s->tag[0] ? ", tag " : "", s->tag);
    printf("#%10s %5s %9s %6s %9s %7s %7s %7s %9s %7s %7s %7s\n", "phase", "rank", "peer_maps",
           "regs", "launch_us", "p10", "p90", "mean", "rtrip_us", "p10", "p90", "mean");
    fflush(stdout);
}

/* Rank 0: per phase, the median over ranks and its ratio to the baseline. */
static void print_summary(lc_t *c)
{
    const double *base = c->summary[PH_BASELINE];
    printf("# summary: median over ranks of the per-rank medians (us), ratio to baseline\n"
           "#%10s %9s %8s %9s %8s\n",
           "phase", "launch_us", "vs_base", "rtrip_us", "vs_base");
    for (int p = 0; p < NUM_PHASES; p++) {
        const double *v = c->summary[p];
        double rl = base[0] > 0 ? v[0] / base[0] : 0, rr = base[1] > 0 ? v[1] / base[1] : 0;
        printf("%11s %9.2f %8.3f %9.2f %8.3f\n", phase_names[p], v[0], rl, v[1], rr);
        if (c->json) {
            json_head(c, phase_names[p]);
            fprintf(c->json,
                    ",\"rank\":null,\"launch_us\":%.3f,\"launch_vs_baseline\":%.4f,"
                    "\"roundtrip_us\":%.3f,\"roundtrip_vs_baseline\":%.4f}\n",
                    v[0], rl, v[1], rr);
        }
    }
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: weftrun -n N launch-cost [-k LAUNCHES] [-b BUFFERS] [-z BYTES] [-B BATCH]\n"
               "                                [-t TIMEOUT_S] [--tag TEXT] [--json FILE]\n"
               "  -k, --launches N   timed launches per measurement (default 10000)\n"
               "  -b, --buffers N    buffers allocated per rank (default 1000)\n"
               "  -z, --bytes SIZE   size of each buffer (default 2M)\n"
               "  -B, --batch N      wait for the registrations every N weft_malloc calls\n"
               "                     (default 32; 0: only after the last)\n"
               "  -t, --timeout S    longest wait for registrations and unmaps (default 120)\n"
               "      --tag TEXT     label printed in the header and written to the JSON\n"
               "      --json FILE    also write the results as JSON lines (rank 0)\n");
}

/* Parse the command line into s. Returns 0, 1 (help printed) or 2 (usage error). */
static int parse_args(int argc, char **argv, setup_t *s)
{
    static const struct option longopts[] = {{"launches", required_argument, NULL, 'k'},
                                             {"buffers", required_argument, NULL, 'b'},
                                             {"bytes", required_argument, NULL, 'z'},
                                             {"batch", required_argument, NULL, 'B'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"tag", required_argument, NULL, 'T'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    memset(s, 0, sizeof *s);
    s->launches = 10000;
    s->buffers = 1000;
    s->bytes = 2u << 20;
    s->batch = 32;
    s->timeout_s = 120;
    s->tag = "";
    int opt, timeout_s = 120;
    while ((opt = getopt_long(argc, argv, "k:b:z:B:t:h", longopts, NULL)) != -1) {
        int bad = 0;
        uint64_t v = 0;
        switch (opt) {
        case 'k':
            bad = bench_parse_int(optarg, 1, MAX_LAUNCHES, &s->launches);
            break;
        case 'b':
            bad = bench_parse_int(optarg, 0, MAX_BUFFERS, &s->buffers);
            break;
        case 'z':
            bad = weft_parse_bytes(optarg, &v) != 0 || v == 0 || v > SIZE_MAX;
            s->bytes = (size_t)v;
            break;
        case 'B':
            bad = bench_parse_int(optarg, 0, MAX_BUFFERS, &s->batch);
            break;
        case 't':
            bad = bench_parse_int(optarg, 1, 3600, &timeout_s);
            s->timeout_s = timeout_s;
            break;
        case 'T':
            s->tag = optarg;
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
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    gpu_prog_name = "launch-cost";
    setup_t s;
    int pa = parse_args(argc, argv, &s);
    if (pa != 0)
        return pa == 1 ? 0 : 2;

    require_device();

    lc_t c;
    lc_open(&c, &s);
    if (c.rank == 0)
        print_header(&c);
    void **bufs = (void **)calloc((size_t)s.buffers + 1, sizeof(void *));
    if (!bufs)
        fatal("calloc: out of memory");
    barrier(&c);
    run_phase(&c, PH_BASELINE);

    for (int i = 0; i < s.buffers; i++)
        cuda_ok(cudaMalloc(&bufs[i], s.bytes), "cudaMalloc (buffers)");
    barrier(&c);
    run_phase(&c, PH_CUDAMALLOC);
    for (int i = 0; i < s.buffers; i++)
        cuda_ok(cudaFree(bufs[i]), "cudaFree (buffers)");
    barrier(&c);

    weft_stats_t st;
    get_stats(&c, &st);
    uint64_t maps_base = st.peer_mappings;
    for (int i = 0; i < s.buffers; i++) {
        weft_ok(weft_malloc(c.comm, &bufs[i], s.bytes), "weft_malloc (buffers)");
        if (s.batch > 0 && (i + 1) % s.batch == 0)
            wait_registered(&c);
    }
    wait_registered(&c);
    barrier(&c);
    run_phase(&c, PH_WEFT);

    for (int i = 0; i < s.buffers; i++)
        weft_ok(weft_free(c.comm, bufs[i]), "weft_free (buffers)");
    barrier(&c);
    uint64_t maps_left = wait_settled(&c, maps_base);
    barrier(&c);
    if (maps_left > maps_base) {
        printf("# rank %d: %llu peer mappings after the frees, %llu at the baseline\n", c.rank,
               (unsigned long long)maps_left, (unsigned long long)maps_base);
        fflush(stdout);
    }
    run_phase(&c, PH_AFTER_FREE);

    if (c.rank == 0)
        print_summary(&c);
    free(bufs);
    lc_close(&c);
    return 0;
}
