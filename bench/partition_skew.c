/*
 * partition_skew.c - partition-skew: per-worker completion times of an MoE dispatch's gather
 * under skewed routing, with weft's cost-model partitioner (model/partition.h), run statically
 * and completed by work stealing (exec/steal.h), against the naive one-peer-per-worker
 * assignment, on the host's CPU workers.
 *
 *   partition-skew [-n RANKS] [-w WORKERS] [-T TOKENS] [-H HIDDEN] [-k TOPK] [-E EXPERTS]
 *                  [-s ZIPF_S] [-r REPEATS] [--json FILE]
 *
 * The work is what one receiving rank (rank 0) of an n-rank expert-parallel layer pulls in a
 * dispatch: from each source rank p, the rows (HIDDEN bf16 elements) of p's TOKENS tokens that
 * have an expert on rank 0, as one slice per peer. Routing is skewed per source, as when each
 * data-parallel group favours its own experts: source p draws each of its k experts (distinct)
 * with Zipf weights 1 / (1 + (e - p * E/n) mod E)^s, so rank 0 receives most from source 0 and
 * least from source n - 1. Seeded (printed), so every plan moves the same bytes.
 *
 * Three plans run on WORKERS threads, each unit copied with memcpy from the peers' source
 * buffers into the receive buffer:
 *   naive      one peer per worker, each worker runs its own units (static);
 *   partition  the partitioner's plan, each worker runs its own units (static);
 *   steal      the partitioner's plan through weft_steal_run, as the host executor runs it: each
 *              worker runs its own units, then steals the others' smallest ones.
 * The threads are created once and reused: each run releases them with one barrier and waits for
 * them at another, so thread creation is never timed. Each worker records when it passed the
 * start barrier and when it finished; times are taken from the earliest start, and the spread
 * of the starts (start skew: latest - earliest, which the completion times include) is reported
 * so that a gap it dominates can be told apart. Per plan, over REPEATS runs (the median of each
 * quantity; the three plans alternate within each repeat so that drift affects them alike): the
 * makespan (slowest worker), the fastest-to-slowest gap (1 - fastest / slowest, over the workers
 * that ran a unit), the start skew, the units stolen per run, and the cost model's predicted
 * makespan. The partitioner uses the host backend's configured model (WEFT_TIER_PEER_*,
 * WEFT_PART_UNIT_BYTES, WEFT_PART_FANOUT; as weft_comm_init builds it). Memory is touched once
 * before timing, and each plan runs once untimed first.
 *
 * Exit status: 0 on success, 1 on a failure, 2 on a usage error. Thread safety: the main thread
 * owns everything and writes the run's parameters only while the workers wait at the start
 * barrier; workers write only their own slots of the result arrays, read after the end barrier.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "exec/steal.h"
#include "model/partition.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/splitmix.h"

#include "bench_util.h"

#define MAX_WORKERS 256
#define MAX_REPEATS 1000
#define ROW_ELEM_BYTES 2 /* bf16 */

typedef struct opts {
    int nranks, workers, topk, experts, repeats;
    size_t tokens, hidden;
    double zipf_s;
    const char *json;
} opts_t;

typedef enum { PLAN_NAIVE, PLAN_PARTITION, PLAN_STEAL, NUM_PLANS } plan_kind_t;

static const char *const plan_names[NUM_PLANS] = {"naive", "partition", "steal"};

typedef struct pool pool_t;

typedef struct worker_arg {
    pool_t *pool;
    int worker;
} worker_arg_t;

/* The worker threads, kept across runs. */
struct pool {
    int nworkers;
    pthread_t threads[MAX_WORKERS];
    worker_arg_t args[MAX_WORKERS];
    pthread_barrier_t start, end; /* nworkers + 1: the workers and the main thread */
    /* The current run: written by the main thread while the workers wait at start. */
    int stop;
    const weft_plan_t *plan;
    int steal; /* 1: through weft_steal_run over steal_state; 0: own units only */
    weft_steal_t steal_state;
    uint8_t *const *src; /* per slice (peer) */
    uint8_t *const *dst;
    /* Results: each worker writes its own slot before end. */
    uint64_t start_ns[MAX_WORKERS], end_ns[MAX_WORKERS];
    size_t units_run[MAX_WORKERS], stolen[MAX_WORKERS];
};

/* What one worker carries through weft_steal_run. */
typedef struct copy_ctx {
    const pool_t *pool;
    size_t units;
} copy_ctx_t;

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
                double u = (double)(weft_splitmix64_next(seed) >> 11) / 9007199254740992.0 * total;
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

static void copy_unit(void *arg, const weft_unit_t *unit)
{
    copy_ctx_t *c = arg;
    memcpy(c->pool->dst[unit->slice] + unit->offset, c->pool->src[unit->slice] + unit->offset,
           unit->bytes);
    c->units++;
}

static void *worker_main(void *arg)
{
    pool_t *p = ((worker_arg_t *)arg)->pool;
    int w = ((worker_arg_t *)arg)->worker;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->stop)
            return NULL;
        copy_ctx_t c = {p, 0};
        size_t stolen = 0;
        p->start_ns[w] = weft_now_ns();
        if (p->steal) {
            stolen = weft_steal_run(&p->steal_state, w, copy_unit, &c);
        } else {
            const weft_plan_t *plan = p->plan;
            for (size_t u = plan->worker_begin[w]; u < plan->worker_begin[w + 1]; u++)
                copy_unit(&c, &plan->units[u]);
        }
        p->end_ns[w] = weft_now_ns();
        p->units_run[w] = c.units;
        p->stolen[w] = stolen;
        pthread_barrier_wait(&p->end);
    }
}

/* Start the pool's nworkers threads; they wait for the first run. Exits on failure. */
static void pool_start(pool_t *p)
{
    if (pthread_barrier_init(&p->start, NULL, (unsigned)p->nworkers + 1) != 0 ||
        pthread_barrier_init(&p->end, NULL, (unsigned)p->nworkers + 1) != 0) {
        fprintf(stderr, "partition-skew: pthread_barrier_init failed\n");
        exit(1);
    }
    weft_steal_init(&p->steal_state);
    for (int w = 0; w < p->nworkers; w++) {
        p->args[w] = (worker_arg_t){p, w};
        if (pthread_create(&p->threads[w], NULL, worker_main, &p->args[w]) != 0) {
            /* The started threads wait at a barrier that can no longer fill: give up. */
            fprintf(stderr, "partition-skew: pthread_create failed\n");
            exit(1);
        }
    }
}

static void pool_stop(pool_t *p)
{
    p->stop = 1;
    pthread_barrier_wait(&p->start);
    for (int w = 0; w < p->nworkers; w++)
        pthread_join(p->threads[w], NULL);
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->end);
    weft_steal_fini(&p->steal_state);
}

/* One run's measurements. */
typedef struct sample {
    double worker_us[MAX_WORKERS]; /* completion time from the earliest start */
    double makespan_us, gap, skew_us, stolen;
} sample_t;

/* Run plan once on the pool (through weft_steal_run if steal) into *out. */
static int run_plan(pool_t *p, const weft_plan_t *plan, int steal, sample_t *out)
{
    p->plan = plan;
    p->steal = steal;
    if (steal && weft_steal_prepare(&p->steal_state, plan) != WEFT_SUCCESS) {
        fprintf(stderr, "partition-skew: %s\n", weft_last_error());
        return -1;
    }
    pthread_barrier_wait(&p->start);
    pthread_barrier_wait(&p->end);
    uint64_t first = UINT64_MAX, last = 0;
    for (int w = 0; w < p->nworkers; w++) {
        first = p->start_ns[w] < first ? p->start_ns[w] : first;
        last = p->start_ns[w] > last ? p->start_ns[w] : last;
    }
    double hi = 0, lo = INFINITY, stolen = 0;
    for (int w = 0; w < p->nworkers; w++) {
        out->worker_us[w] = (double)(p->end_ns[w] - first) / 1e3;
        stolen += (double)p->stolen[w];
        if (p->units_run[w] == 0)
            continue; /* idle worker: not part of the gap */
        hi = out->worker_us[w] > hi ? out->worker_us[w] : hi;
        lo = out->worker_us[w] < lo ? out->worker_us[w] : lo;
    }
    out->makespan_us = hi;
    out->gap = hi > 0 ? 1.0 - lo / hi : 0;
    out->skew_us = (double)(last - first) / 1e3;
    out->stolen = stolen;
    return 0;
}

typedef struct summary {
    double makespan_us, gap, skew_us, stolen, predicted_us;
    double worker_us[MAX_WORKERS]; /* medians per worker */
} summary_t;

/* Medians over n samples of one plan. */
static void summarize(const sample_t *samples, int n, int nworkers, const weft_plan_t *plan,
                      summary_t *out)
{
    static double col[MAX_REPEATS];
    for (int i = 0; i < n; i++)
        col[i] = samples[i].makespan_us;
    out->makespan_us = bench_median_double(col, (size_t)n);
    for (int i = 0; i < n; i++)
        col[i] = samples[i].gap;
    out->gap = bench_median_double(col, (size_t)n);
    for (int i = 0; i < n; i++)
        col[i] = samples[i].skew_us;
    out->skew_us = bench_median_double(col, (size_t)n);
    for (int i = 0; i < n; i++)
        col[i] = samples[i].stolen;
    out->stolen = bench_median_double(col, (size_t)n);
    out->predicted_us = plan->makespan_us;
    for (int w = 0; w < nworkers; w++) {
        for (int i = 0; i < n; i++)
            col[i] = samples[i].worker_us[w];
        out->worker_us[w] = bench_median_double(col, (size_t)n);
    }
}

/* One untimed run of each plan, then REPEATS rounds running each plan once in turn. */
static int measure(pool_t *p, const weft_plan_t *plans[NUM_PLANS], int repeats,
                   summary_t out[NUM_PLANS])
{
    static sample_t samples[NUM_PLANS][MAX_REPEATS];
    sample_t warm;
    for (int k = 0; k < NUM_PLANS; k++) {
        if (run_plan(p, plans[k], k == PLAN_STEAL, &warm) != 0)
            return -1;
    }
    for (int rep = 0; rep < repeats; rep++) {
        for (int k = 0; k < NUM_PLANS; k++) {
            if (run_plan(p, plans[k], k == PLAN_STEAL, &samples[k][rep]) != 0)
                return -1;
        }
    }
    for (int k = 0; k < NUM_PLANS; k++)
        summarize(samples[k], repeats, p->nworkers, plans[k], &out[k]);
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
    printf("%-10s makespan %9.1f us  gap %5.1f%%  skew %6.1f us  stolen %5.0f  predicted %9.1f us"
           "  workers(us):",
           name, s->makespan_us, 100 * s->gap, s->skew_us, s->stolen, s->predicted_us);
    for (int w = 0; w < nworkers; w++)
        printf(" %.0f", s->worker_us[w]);
    printf("\n");
}

static void json_summary(FILE *f, const char *name, const summary_t *s, int nworkers)
{
    fprintf(f,
            "\"%s\":{\"makespan_us\":%.3f,\"gap\":%.5f,\"start_skew_us\":%.3f,"
            "\"stolen_units\":%.1f,\"predicted_makespan_us\":%.3f,\"worker_us\":[",
            name, s->makespan_us, s->gap, s->skew_us, s->stolen, s->predicted_us);
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
        /* '?' (an unknown option, which getopt reported) has no value either. */
        int numeric = c != 'j' && c != 'h' && c != '?';
        char *end = NULL;
        errno = 0;
        double v = numeric ? strtod(optarg, &end) : 0;
        if (numeric && (errno != 0 || end == optarg || *end != '\0' || v < 0)) {
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

    const uint64_t seed0 = (uint64_t)weft_now_ns(); /* printed; seed advances as tokens are drawn */
    uint64_t seed = seed0;
    printf("# partition-skew: rank 0 of %d pulls rows of %zu bf16 from each source; T=%zu k=%d "
           "E=%d, per-source Zipf s=%.2f, %d workers, %d repeats, seed %llu\n",
           o.nranks, o.hidden, o.tokens, o.topk, o.experts, o.zipf_s, o.workers, o.repeats,
           (unsigned long long)seed0);
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

    static pool_t pool; /* tens of KiB: not on the stack */
    pool.nworkers = o.workers;
    pool.src = src;
    pool.dst = dst;
    pool_start(&pool);
    const weft_plan_t *plans[NUM_PLANS] = {&naive, &cost, &cost};
    summary_t sum[NUM_PLANS];
    int failed = measure(&pool, plans, o.repeats, sum);
    pool_stop(&pool);
    if (failed) {
        fprintf(stderr, "partition-skew: a run failed\n");
        return 1;
    }
    for (int k = 0; k < NUM_PLANS; k++)
        print_summary(plan_names[k], &sum[k], o.workers);
    printf("# makespan vs naive: partitioner %+.1f%%, with stealing %+.1f%%; "
           "gap: naive %.1f%%, partitioner %.1f%%, with stealing %.1f%%\n",
           100 * (sum[PLAN_PARTITION].makespan_us / sum[PLAN_NAIVE].makespan_us - 1),
           100 * (sum[PLAN_STEAL].makespan_us / sum[PLAN_NAIVE].makespan_us - 1),
           100 * sum[PLAN_NAIVE].gap, 100 * sum[PLAN_PARTITION].gap, 100 * sum[PLAN_STEAL].gap);
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
                (unsigned long long)seed0);
        for (int p = 0; p < o.nranks; p++)
            fprintf(f, "%s%llu", p ? "," : "", (unsigned long long)slices[p].bytes);
        fprintf(f, "]");
        for (int k = 0; k < NUM_PLANS; k++) {
            fprintf(f, ",");
            json_summary(f, plan_names[k], &sum[k], o.workers);
        }
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
