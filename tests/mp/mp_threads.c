/*
 * mp_threads.c - a communicator serves one thread at a time: a second thread that calls a
 * collective while another thread of the rank is inside one gets WEFT_ERR_INVALID_ARGUMENT at
 * once, the first call completes, and the communicator stays usable.
 *
 * Rank 0's main thread enters a barrier that the other ranks join only after DELAY_MS; 50 ms in,
 * a second thread of rank 0 calls all_reduce and must be refused within REFUSE_LIMIT_S. Then
 * every rank runs an all_reduce (from the second thread on rank 0) and checks its exact result.
 * Needs at least 2 ranks.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DELAY_MS 500.0
#define REFUSE_LIMIT_S 0.2
#define COUNT 64

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
    return mp_finish(&ctx);
}
