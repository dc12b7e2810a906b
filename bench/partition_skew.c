/*
 * partition_skew.c - partition-skew: per-worker completion times of an MoE dispatch's gather
 * under skewed routing, with weft's cost-model partitioner against the naive one-peer-per-worker
 * assignment (model/partition.h), on the host's CPU workers.
 *
 *   partition-skew [-n RANKS] [-w WORKERS] [-T TOKENS] [-H HIDDEN] [-k TOPK] [-E EXPERTS]
 *                  [-s ZIPF_S] [-r REPEATS] [--json FILE]
 *
 * The work is what one receiving rank (rank 0) of an n-rank expert-parallel layer pulls in a
 * dispatch: from each source rank p, the rows (HIDDEN bf16 elements) of p's TOKENS tokens that
 * have an expert on rank 0, as one slice per peer. Routing is skewed per source, as when each
 * data-parallel group favours its own experts: source p draws each of its k experts (distinct)
 * with Zipf weights 1 / (1 + (e - p * E/n) mod E)^s, so rank 0 receives most from source 0 and
 * least from source n - 1. Seeded (printed), so both assignments move the same bytes.
 *
 * Each plan's units run on WORKERS threads (started together at a barrier; each copies its units
 * from the peers' source buffers into the receive buffer with memcpy) and each thread's
 * completion time is recorded. Per plan, over REPEATS runs (the median of each quantity): the
 * makespan (slowest worker), the fastest-to-slowest gap (1 - fastest / slowest, over workers
 * that have work) and the cost model's predicted makespan. The partitioner uses the host
 * backend's configured model (WEFT_TIER_PEER_*, WEFT_PART_UNIT_BYTES, WEFT_PART_FANOUT; as
 * weft_comm_init builds it). Memory is touched once before timing.
 *
 * Exit status: 0 on success, 1 on a failure, 2 on a usage error. Thread safety: the main thread
 * owns everything; workers only copy their own units.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "model/partition.h"
#include "util/config.h"

#define MAX_WORKERS 256
#define MAX_REPEATS 1000
#define ROW_ELEM_BYTES 2 /* bf16 */

typedef struct opts {
    int nranks, workers, topk, experts, repeats;
    size_t tokens, hidden;
    double zipf_s;
    const char *json;
} opts_t;

typedef struct run {
    const weft_plan_t *plan;
    uint8_t *const *src; /* per slice (peer) */
    uint8_t *const *dst;
    pthread_barrier_t start;
    uint64_t t0_ns;
    uint64_t end_ns[MAX_WORKERS];
} run_t;

typedef struct worker_arg {
    run_t *run;
    int worker;
} worker_arg_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Tokens of source p with an expert on rank 0 (experts [0, E/n)), under the per-source Zipf. */
static size_t tokens_to_rank0(const opts_t *o, int p, uint64_t *seed)
{
    int E = o->experts, epr = E / o->nranks;
    double *cdf = malloc((size_t)E * sizeof *cdf);
    int *picked = malloc((size_t)o->topk * sizeof *picked);
    if (!cdf || !picked) {
        free(cdf);
        free(picked);
        return SIZE_MAX;
    }
    double total = 0;
    for (int e = 0; e < E; e++) {
        int rankd = ((e - p * epr) % E + E) % E; /* source p's hottest expert first */
        total += 1.0 / pow(1.0 + rankd, o->zipf_s);
        cdf[e] = total;
    }
    size_t count = 0;
    for (size_t t = 0; t < o->tokens; t++) {
        int mine = 0;
        for (int j = 0; j < o->topk; j++) {
            int e;
            int again;
            do { /* k distinct experts */
                double u = (double)(splitmix(seed) >> 11) / 9007199254740992.0 * total;
                e = 0;
                while (e < E - 1 && cdf[e] < u)
                    e++;
                again = 0;
                for (int i = 0; i < j; i++)
                    again |= picked[i] == e;
            } while (again);
            picked[j] = e;
            mine |= e < epr;
        }
        count += (size_t)mine;
    }
    free(picked);
    free(cdf);
    return count;
}

static void *worker_main(void *arg)
{
    worker_arg_t *wa = arg;
    run_t *r = wa->run;
    const weft_plan_t *plan = r->plan;
    pthread_barrier_wait(&r->start);
    for (size_t u = plan->worker_begin[wa->worker]; u < plan->worker_begin[wa->worker + 1]; u++) {
        const weft_unit_t *unit = &plan->units[u];
        memcpy(r->dst[unit->slice] + unit->offset, r->src[unit->slice] + unit->offset, unit->bytes);
    }
    r->end_ns[wa->worker] = now_ns();
    return NULL;
}

/* Run plan once on nworkers threads; per-worker completion times (us) into times_us. */
static int run_plan(run_t *r, int nworkers, double *times_us)
{
    pthread_t th[MAX_WORKERS];
    worker_arg_t args[MAX_WORKERS];
    if (pthread_barrier_init(&r->start, NULL, (unsigned)nworkers + 1) != 0)
        return -1;
    for (int w = 0; w < nworkers; w++) {
        args[w] = (worker_arg_t){r, w};
        if (pthread_create(&th[w], NULL, worker_main, &args[w]) != 0) {
            /* The started threads wait at a barrier that can no longer fill: give up. */
            fprintf(stderr, "partition-skew: pthread_create failed\n");
            exit(1);
        }
    }
    r->t0_ns = now_ns();
    pthread_barrier_wait(&r->start);
    for (int w = 0; w < nworkers; w++)
        pthread_join(th[w], NULL);
    pthread_barrier_destroy(&r->start);
    for (int w = 0; w < nworkers; w++)
        times_us[w] = (double)(r->end_ns[w] - r->t0_ns) / 1e3;
    return 0;
}

typedef struct summary {
    double makespan_us, gap, predicted_us;
    double worker_us[MAX_WORKERS]; /* medians per worker */
} summary_t;

static int measure(run_t *r, const weft_plan_t *plan, const opts_t *o, summary_t *out)
{
    static double times[MAX_REPEATS][MAX_WORKERS];
    double mk[MAX_REPEATS], gap[MAX_REPEATS], col[MAX_REPEATS];
    r->plan = plan;
    for (int rep = 0; rep < o->repeats; rep++) {
        if (run_plan(r, o->workers, times[rep]) != 0)
            return -1;
        double hi = 0, lo = INFINITY;
        for (int w = 0; w < o->workers; w++) {
            if (plan->worker_begin[w + 1] == plan->worker_begin[w])
                continue; /* idle worker: not part of the gap */
            hi = times[rep][w] > hi ? times[rep][w] : hi;
            lo = times[rep][w] < lo ? times[rep][w] : lo;
        }
        mk[rep] = hi;
        gap[rep] = hi > 0 ? 1.0 - lo / hi : 0;
    }
    out->makespan_us = median(mk, o->repeats);
    out->gap = median(gap, o->repeats);
    out->predicted_us = plan->makespan_us;
    for (int w = 0; w < o->workers; w++) {
        for (int rep = 0; rep < o->repeats; rep++)
            col[rep] = times[rep][w];
        out->worker_us[w] = median(col, o->repeats);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: partition-skew [-n RANKS] [-w WORKERS] [-T TOKENS] [-H HIDDEN] [-k TOPK]\n"
               "                      [-E EXPERTS] [-s ZIPF_S] [-r REPEATS] [--json FILE]\n"
               "defaults: -n 8 -w 8 -T 4096 -H 7168 -k 8 -E 256 -s 1.0 -r 21\n");
}

static void print_summary(const char *name, const summary_t *s, int nworkers)
{
    printf("%-10s makespan %9.1f us  gap %5.1f%%  predicted %9.1f us  workers(us):", name,
           s->makespan_us, 100 * s->gap, s->predicted_us);
    for (int w = 0; w < nworkers; w++)
        printf(" %.0f", s->worker_us[w]);
    printf("\n");
}

static void json_summary(FILE *f, const char *name, const summary_t *s, int nworkers)
{
    fprintf(f,
            "\"%s\":{\"makespan_us\":%.3f,\"gap\":%.5f,\"predicted_makespan_us\":%.3f,"
            "\"worker_us\":[",
            name, s->makespan_us, s->gap, s->predicted_us);
    for (int w = 0; w < nworkers; w++)
        fprintf(f, "%s%.3f", w ? "," : "", s->worker_us[w]);
    fprintf(f, "]}");
}

int main(int argc, char **argv)
{
    opts_t o = {.nranks = 8,
                .workers = 8,
                .topk = 8,
                .experts = 256,
                .repeats = 21,
                .tokens = 4096,
                .hidden = 7168,
                .zipf_s = 1.0};
    static const struct option longopts[] = {{"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:w:T:H:k:E:s:r:h", longopts, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        double v = c == 'j' || c == 'h' ? 0 : strtod(optarg, &end);
        if (c != 'j' && c != 'h' && (errno != 0 || end == optarg || *end != '\0' || v < 0)) {
            fprintf(stderr, "partition-skew: bad value '%s' for -%c\n", optarg, c);
            usage(stderr);
            return 2;
        }
        switch (c) {
        case 'n':
            o.nranks = (int)v;
            break;
        case 'w':
            o.workers = (int)v;
            break;
        case 'T':
            o.tokens = (size_t)v;
            break;
        case 'H':
            o.hidden = (size_t)v;
            break;
        case 'k':
            o.topk = (int)v;
            break;
        case 'E':
            o.experts = (int)v;
            break;
        case 's':
            o.zipf_s = v;
            break;
        case 'r':
            o.repeats = (int)v;
            break;
        case 'j':
            o.json = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || o.nranks < 2 || o.nranks > WEFT_MAX_RANKS || o.workers < 1 ||
        o.workers > MAX_WORKERS || o.experts < o.nranks || o.experts % o.nranks != 0 ||
        o.topk < 1 || o.topk > o.experts || o.repeats < 1 || o.repeats > MAX_REPEATS ||
        o.hidden == 0) {
        fprintf(stderr, "partition-skew: arguments out of range\n");
        usage(stderr);
        return 2;
    }

    uint64_t seed = (uint64_t)now_ns();
    printf("# partition-skew: rank 0 of %d pulls rows of %zu bf16 from each source; T=%zu k=%d "
           "E=%d, per-source Zipf s=%.2f, %d workers, %d repeats, seed %llu\n",
           o.nranks, o.hidden, o.tokens, o.topk, o.experts, o.zipf_s, o.workers, o.repeats,
           (unsigned long long)seed);
    size_t row = o.hidden * ROW_ELEM_BYTES;
    weft_slice_t slices[WEFT_MAX_RANKS];
    uint8_t *src[WEFT_MAX_RANKS], *dst[WEFT_MAX_RANKS];
    size_t total = 0;
    printf("# bytes from each source:");
    for (int p = 0; p < o.nranks; p++) {
        size_t rows = tokens_to_rank0(&o, p, &seed);
        if (rows == SIZE_MAX) {
            fprintf(stderr, "partition-skew: out of memory\n");
            return 1;
        }
        slices[p] = (weft_slice_t){.peer = p, .tier = WEFT_TIER_PEER, .bytes = rows * row};
        src[p] = malloc(rows * row + 1);
        dst[p] = malloc(rows * row + 1);
        if (!src[p] || !dst[p]) {
            fprintf(stderr, "partition-skew: out of memory\n");
            return 1;
        }
        memset(src[p], p + 1, rows * row); /* first touch, outside the timing */
        memset(dst[p], 0, rows * row);
        total += rows * row;
        printf(" %zu", rows * row);
    }
    printf(" (total %zu)\n", total);

    weft_cost_model_t model;
    weft_comm_model_from_config(&model, weft_config_get());
    weft_plan_t cost, naive;
    weft_plan_init(&cost);
    weft_plan_init(&naive);
    if (weft_partition(&model, slices, (size_t)o.nranks, o.workers, 64, &cost) != WEFT_SUCCESS ||
        weft_partition_naive(&model, slices, (size_t)o.nranks, o.workers, &naive) != WEFT_SUCCESS) {
        fprintf(stderr, "partition-skew: %s\n", weft_last_error());
        return 1;
    }
    printf("# cost model (peer tier): %.2f us + bytes / %.1f GB/s, units of %llu bytes, fan-out "
           "%d\n",
           model.tier[WEFT_TIER_PEER].lat_us, model.tier[WEFT_TIER_PEER].bw_gbps,
           (unsigned long long)model.tier[WEFT_TIER_PEER].unit_bytes,
           model.tier[WEFT_TIER_PEER].fanout);

    run_t r = {.src = src, .dst = dst};
    summary_t s_cost, s_naive;
    /* Alternate so that drifting clocks affect both alike: one warm-up each first. */
    if (measure(&r, &naive, &(opts_t){.workers = o.workers, .repeats = 1}, &s_naive) != 0 ||
        measure(&r, &cost, &(opts_t){.workers = o.workers, .repeats = 1}, &s_cost) != 0 ||
        measure(&r, &naive, &o, &s_naive) != 0 || measure(&r, &cost, &o, &s_cost) != 0) {
        fprintf(stderr, "partition-skew: a run failed\n");
        return 1;
    }
    print_summary("naive", &s_naive, o.workers);
    print_summary("partition", &s_cost, o.workers);
    printf("# makespan: partitioner %.1f%% shorter than naive; gap %.1f%% vs %.1f%%\n",
           100 * (1 - s_cost.makespan_us / s_naive.makespan_us), 100 * s_cost.gap,
           100 * s_naive.gap);
    if (o.json) {
        FILE *f = fopen(o.json, "a");
        if (!f) {
            fprintf(stderr, "partition-skew: %s: %s\n", o.json, strerror(errno));
            return 1;
        }
        fprintf(f,
                "{\"bench\":\"partition_skew\",\"ranks\":%d,\"workers\":%d,\"tokens\":%zu,"
                "\"hidden\":%zu,\"topk\":%d,\"experts\":%d,\"zipf_s\":%.3f,\"repeats\":%d,"
                "\"seed\":%llu,\"bytes\":[",
                o.nranks, o.workers, o.tokens, o.hidden, o.topk, o.experts, o.zipf_s, o.repeats,
                (unsigned long long)seed);
        for (int p = 0; p < o.nranks; p++)
            fprintf(f, "%s%llu", p ? "," : "", (unsigned long long)slices[p].bytes);
        fprintf(f, "],");
        json_summary(f, "naive", &s_naive, o.workers);
        fprintf(f, ",");
        json_summary(f, "partition", &s_cost, o.workers);
        fprintf(f, "}\n");
        fclose(f);
    }
    weft_plan_fini(&cost);
    weft_plan_fini(&naive);
    for (int p = 0; p < o.nranks; p++) {
        free(src[p]);
        free(dst[p]);
    }
    return 0;
}
