/*
 * mp_threads.c - a communicator serves one thread at a time: a second thread that calls a
 * collective while another thread of the rank is inside one gets WEFT_ERR_INVALID_ARGUMENT at
 * once, the first call completes, and the communicator stays usable.
 *
 * Rank 0's main thread enters a barrier that the other ranks join only after DELAY_MS; 50 ms in,
 * a second thread of rank 0 calls all_reduce and must be refused within REFUSE_LIMIT_S. Then
 * every rank runs an all_reduce (from the second thread on rank 0) and checks its exact result.
 *
 * Different communicators may be used at once (weft.h): every rank opens a second communicator,
 * and two threads per rank run CONCURRENT_ROUNDS all_reduce and all_gather calls on weft_malloc
 * buffers of CONCURRENT_COUNT elements, one thread per communicator, each result checked exactly
 * (the values depend on the communicator, the round and the rank).
 * Needs at least 2 ranks.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DELAY_MS 500.0
#define REFUSE_LIMIT_S 0.2
#define COUNT 64
#define CONCURRENT_ROUNDS 100
#define CONCURRENT_COUNT 16384 /* uint64: 128 KiB per rank, past the inline limit */

typedef struct second {
    mp_ctx_t *ctx;
    weft_status_t refused; /* the all_reduce attempted during the barrier */
    double refused_s;
    char message[256];
} second_t;

static void *second_thread(void *arg)
{
    second_t *s = arg;
    mp_sleep_ms(50);
    uint64_t in[COUNT] = {0}, out[COUNT];
    double t0 = mp_now_s();
    s->refused = weft_all_reduce(s->ctx->comm, in, out, COUNT, WEFT_UINT64, WEFT_SUM, NULL);
    s->refused_s = mp_now_s() - t0;
    snprintf(s->message, sizeof s->message, "%s", weft_last_error());
    return NULL;
}

/* An all_reduce of rank-dependent values, checked exactly. */
static void checked_all_reduce(mp_ctx_t *ctx)
{
    uint64_t in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (uint64_t)(ctx->rank + 1) * 1000 + (uint64_t)i;
    memset(out, 0xa5, sizeof out);
    if (!mp_ok(ctx, weft_all_reduce(ctx->comm, in, out, COUNT, WEFT_UINT64, WEFT_SUM, NULL),
               "weft_all_reduce"))
        return;
    uint64_t n = (uint64_t)ctx->nranks;
    size_t wrong = 0;
    for (int i = 0; i < COUNT; i++)
        wrong += out[i] != 1000 * n * (n + 1) / 2 + n * (uint64_t)i;
    mp_check(ctx, wrong == 0, "all_reduce after the refusal: %zu of %d elements wrong", wrong,
             COUNT);
}

static void *checked_thread(void *arg)
{
    checked_all_reduce(arg);
    return NULL;
}

/* One thread's loop on its own communicator; the results are checked by the main thread. */
typedef struct concurrent {
    weft_comm_t comm;
    int id, rank, nranks;
    uint64_t *in, *out; /* weft_malloc on comm: CONCURRENT_COUNT and nranks * CONCURRENT_COUNT */
    size_t wrong;       /* elements wrong, over every round */
    weft_status_t st;   /* the first failure */
    char message[256];
} concurrent_t;

static uint64_t concurrent_value(int id, int round, int rank, size_t i)
{
    return ((uint64_t)id << 48) + ((uint64_t)round << 32) + (uint64_t)rank * 1000003u + i;
}

static void *concurrent_thread(void *arg)
{
    concurrent_t *c = arg;
    uint64_t n = (uint64_t)c->nranks;
    for (int round = 0; round < CONCURRENT_ROUNDS && c->st == WEFT_SUCCESS; round++) {
        for (size_t i = 0; i < CONCURRENT_COUNT; i++)
            c->in[i] = concurrent_value(c->id, round, c->rank, i);
        memset(c->out, 0xa5, CONCURRENT_COUNT * sizeof *c->out);
        c->st =
            weft_all_reduce(c->comm, c->in, c->out, CONCURRENT_COUNT, WEFT_UINT64, WEFT_SUM, NULL);
        for (size_t i = 0; i < CONCURRENT_COUNT && c->st == WEFT_SUCCESS; i++) {
            uint64_t sum = 0;
            for (int r = 0; r < c->nranks; r++)
                sum += concurrent_value(c->id, round, r, i);
            c->wrong += c->out[i] != sum;
        }
        if (c->st == WEFT_SUCCESS) {
            memset(c->out, 0xa5, n * CONCURRENT_COUNT * sizeof *c->out);
            c->st = weft_all_gather(c->comm, c->in, c->out, CONCURRENT_COUNT, WEFT_UINT64, NULL);
        }
        for (int r = 0; r < c->nranks && c->st == WEFT_SUCCESS; r++)
            for (size_t i = 0; i < CONCURRENT_COUNT; i++)
                c->wrong += c->out[(size_t)r * CONCURRENT_COUNT + i] !=
                            concurrent_value(c->id, round, r, i);
    }
    if (c->st != WEFT_SUCCESS)
        snprintf(c->message, sizeof c->message, "%s", weft_last_error());
    return NULL;
}

/* Two communicators of every rank, each used by a thread of its own at the same time. */
static void concurrent_communicators(mp_ctx_t *ctx)
{
    mp_case(ctx, "two communicators used at once, one thread each");
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    weft_comm_t second = NULL;
    weft_status_t st = weft_comm_init(&second, &cfg);
    if (!mp_ok(ctx, st, "weft_comm_init (the second communicator)"))
        return;
    concurrent_t c[2];
    size_t n = (size_t)ctx->nranks;
    for (int k = 0; k < 2; k++) {
        c[k] = (concurrent_t){
            .comm = k == 0 ? ctx->comm : second, .id = k, .rank = ctx->rank, .nranks = ctx->nranks};
        mp_ok(ctx, weft_malloc(c[k].comm, (void **)&c[k].in, CONCURRENT_COUNT * 8), "weft_malloc");
        mp_ok(ctx, weft_malloc(c[k].comm, (void **)&c[k].out, n * CONCURRENT_COUNT * 8),
              "weft_malloc");
        if (!c[k].in || !c[k].out)
            mp_fatal(ctx, "weft_malloc returned NULL");
    }
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        if (pthread_create(&t[k], NULL, concurrent_thread, &c[k]) != 0)
            mp_fatal(ctx, "pthread_create");
    for (int k = 0; k < 2; k++) {
        pthread_join(t[k], NULL);
        mp_check(ctx, c[k].st == WEFT_SUCCESS, "communicator %d: %s: %s", k,
                 weft_status_string(c[k].st), c[k].message);
        mp_check(ctx, c[k].wrong == 0, "communicator %d: %zu elements wrong over %d rounds", k,
                 c[k].wrong, CONCURRENT_ROUNDS);
        mp_ok(ctx, weft_free(c[k].comm, c[k].in), "weft_free");
        mp_ok(ctx, weft_free(c[k].comm, c[k].out), "weft_free");
    }
    mp_ok(ctx, weft_comm_destroy(second), "weft_comm_destroy (the second communicator)");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_threads");
    if (ctx.nranks < 2)
        mp_fatal(&ctx, "needs at least 2 ranks");
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);

    mp_case(&ctx, "a second thread's all_reduce during rank 0's barrier");
    second_t s = {.ctx = &ctx};
    pthread_t t;
    if (ctx.rank == 0 && pthread_create(&t, NULL, second_thread, &s) != 0)
        mp_fatal(&ctx, "pthread_create");
    if (ctx.rank != 0)
        mp_sleep_ms(DELAY_MS);
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");
    if (ctx.rank == 0) {
        pthread_join(t, NULL);
        mp_check(&ctx, s.refused == WEFT_ERR_INVALID_ARGUMENT,
                 "the second thread's all_reduce returned %s, expected %s: %s",
                 weft_status_string(s.refused), weft_status_string(WEFT_ERR_INVALID_ARGUMENT),
                 s.message);
        mp_check(&ctx, strstr(s.message, "weft_all_reduce") && strstr(s.message, "thread"),
                 "the refusal does not name the call and the cause: \"%s\"", s.message);
        mp_check(&ctx, s.refused_s < REFUSE_LIMIT_S, "the refusal took %.3f s (limit %.1f s)",
                 s.refused_s, REFUSE_LIMIT_S);
    }

    mp_case(&ctx, "the communicator afterwards (rank 0 from another thread)");
    if (ctx.rank == 0) {
        if (pthread_create(&t, NULL, checked_thread, &ctx) != 0)
            mp_fatal(&ctx, "pthread_create");
        pthread_join(t, NULL);
    } else {
        checked_all_reduce(&ctx);
    }
    concurrent_communicators(&ctx);
    return mp_finish(&ctx);
}
