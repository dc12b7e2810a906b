/*
 * mp_registration.c - registration seen through the public API, under each registration mode.
 *
 *   alloc-then-use: fresh registered or interior buffers of many sizes, used by an all_reduce
 *     right after weft_malloc and freed right after; results must be exact.
 *   address reuse: weft_free then weft_malloc of the same size, many times, each time with new
 *     data read by peers (all_gather); a stale peer mapping would show old data.
 *   first-use waits: allocate, then in roa mode poll the stats until every registration started
 *     has completed (acknowledged by every peer; deadline SETTLE_LIMIT_S, however slow the
 *     registrar is under load), then use: first_use_waits must not move. In jit mode, barrier,
 *     sleep 50 ms, then use: the first use registers and must count a wait, and a second use of
 *     the same buffers must not (cached).
 *   counters: registrations_completed <= registrations_started at every sample; a fresh
 *     allocation larger than everything registered so far must raise registrations_started,
 *     registrations_completed and bytes_registered once used (roa: by at least its size; jit: no
 *     registration before the first use); staged mode takes the staged path for weft_malloc
 *     memory too.
 *   concurrent allocation: a second thread allocates and frees while the main thread runs
 *     collectives (weft_malloc/weft_free may be called from any thread).
 */
#include "harness.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLEEP_BEFORE_USE_MS 50.0 /* jit: nothing registers before the first use, pause or not */
#define SETTLE_LIMIT_S 30.0      /* roa: acknowledgements of the registrations of weft_malloc */
#define BIG_CAP_BYTES ((uint64_t)1 << 30)

static const size_t use_sizes[] = {1, 3, 255, 1024, 4099, 65537, 300001};
static const weft_dtype_t use_dtypes[] = {WEFT_INT32,   WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_INT8,
                                          WEFT_FLOAT64, WEFT_UINT64,  WEFT_FLOAT16};
#define NUM_USE_DTYPES (sizeof use_dtypes / sizeof use_dtypes[0])

/* One all_reduce on fresh buffers of `count` elements; checks and frees them. */
static void fresh_all_reduce(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                             weft_redop_t op)
{
    mp_case(ctx, "alloc-then-use %s count=%zu %s %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op));
    size_t bytes = count * mp_dtype_bytes(dt);
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, kind, bytes);
    mp_buf_alloc(ctx, &recv, kind, bytes);
    mp_red_fill(ctx, dt, op, ctx->rank, 0, count, send.ptr);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, dt, op, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_reduce")) {
        mp_red_check_result(ctx, "recvbuf", recv.ptr, dt, op, 0, count);
        mp_check_path(ctx, &s0, &s1, kind, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

static void alloc_then_use(mp_ctx_t *ctx)
{
    int rounds = ctx->quick ? 1 : 3;
    unsigned k = 0;
    for (int round = 0; round < rounds; round++)
        for (size_t i = 0; i < sizeof use_sizes / sizeof use_sizes[0]; i++, k++)
            fresh_all_reduce(ctx, k % 2 ? MP_BUF_INTERIOR : MP_BUF_REGISTERED, use_sizes[i],
                             use_dtypes[k % NUM_USE_DTYPES], (weft_redop_t)(k % WEFT_NUM_REDOPS));
}

static void address_reuse(mp_ctx_t *ctx)
{
    int iters = ctx->quick ? 15 : 40;
    const size_t count = 16387; /* elements of uint32: 64 KiB + 12 bytes */
    size_t bytes = count * 4, n = (size_t)ctx->nranks;
    void *prev = NULL;
    int reused = 0;
    for (int it = 0; it < iters; it++) {
        mp_case(ctx, "address reuse iteration %d", it);
        void *send = NULL, *recv = NULL;
        mp_ok(ctx, weft_malloc(ctx->comm, &send, bytes), "weft_malloc");
        mp_ok(ctx, weft_malloc(ctx->comm, &recv, n * bytes), "weft_malloc");
        if (!send || !recv)
            mp_fatal(ctx, "weft_malloc returned NULL");
        reused += send == prev;
        prev = send;
        mp_raw_fill(ctx, WEFT_UINT32, ctx->rank, 0, count, send);
        memset(recv, 0xA5, n * bytes);
        weft_status_t st = weft_all_gather(ctx->comm, send, recv, count, WEFT_UINT32, NULL);
        if (mp_ok(ctx, st, "weft_all_gather"))
            for (int p = 0; p < ctx->nranks; p++) {
                char what[64];
                snprintf(what, sizeof what, "recvbuf block %d", p);
                mp_raw_check(ctx, what, (char *)recv + (size_t)p * bytes, WEFT_UINT32, p, 0, count);
            }
        mp_ok(ctx, weft_free(ctx->comm, send), "weft_free");
        mp_ok(ctx, weft_free(ctx->comm, recv), "weft_free");
    }
    mp_note(ctx, "reg=%s: address reuse: %d of %d allocations got the previous address",
            mp_reg_name(ctx->reg), reused, iters);
}

static void check_monotonic(mp_ctx_t *ctx, const weft_stats_t *a, const weft_stats_t *b,
                            const char *when)
{
    mp_check(ctx,
             b->registrations_started >= a->registrations_started &&
                 b->registrations_completed >= a->registrations_completed &&
                 b->first_use_waits >= a->first_use_waits &&
                 b->first_use_wait_ns >= a->first_use_wait_ns &&
                 b->zero_copy_ops >= a->zero_copy_ops && b->staged_ops >= a->staged_ops,
             "%s: a counter went down (started %" PRIu64 "->%" PRIu64 ", completed %" PRIu64
             "->%" PRIu64 ", waits %" PRIu64 "->%" PRIu64 ", zero_copy %" PRIu64 "->%" PRIu64
             ", staged %" PRIu64 "->%" PRIu64 ")",
             when, a->registrations_started, b->registrations_started, a->registrations_completed,
             b->registrations_completed, a->first_use_waits, b->first_use_waits, a->zero_copy_ops,
             b->zero_copy_ops, a->staged_ops, b->staged_ops);
}

/* All_reduce (out of place) from the first `count` float32 elements of buf into the next
 * `count`; checks the result. */
static void use_buffer(mp_ctx_t *ctx, void *buf, size_t count)
{
    float *in = buf, *out = in + count;
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, in);
    memset(out, 0xA5, count * sizeof *out);
    weft_status_t st = weft_all_reduce(ctx->comm, in, out, count, WEFT_FLOAT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", out, WEFT_FLOAT32, WEFT_SUM, 0, count);
}

static void first_use_waits(mp_ctx_t *ctx)
{
    static const size_t sizes[] = {4096, 1 << 20, 9 << 20};
    if (ctx->nranks < 2 || ctx->reg == WEFT_REGISTRATION_STAGED)
        return;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t bytes = sizes[i], count = bytes / 4;
        int roa = ctx->reg == WEFT_REGISTRATION_ROA;
        if (roa)
            mp_case(ctx, "first use after weft_malloc's registrations completed, %zu bytes", bytes);
        else
            mp_case(ctx, "first use %.0f ms after weft_malloc, %zu bytes", SLEEP_BEFORE_USE_MS,
                    bytes);
        weft_stats_t before, settled, s0, s1, s2;
        mp_stats(ctx, &before);
        void *send = NULL, *recv = NULL;
        mp_ok(ctx, weft_malloc(ctx->comm, &send, bytes), "weft_malloc");
        mp_ok(ctx, weft_malloc(ctx->comm, &recv, bytes), "weft_malloc");
        if (!send || !recv)
            mp_fatal(ctx, "weft_malloc returned NULL");
        mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, send);
        if (roa) {
            /* Registration started at weft_malloc (if the buffers needed a new chunk): wait
             * for it to complete, not for a time (a registration counted as completed is
             * acknowledged already: registry.c, handle_ack). The barrier after it lines the ranks
             * up, as the jit branch does. */
            mp_check_registrations_settle(ctx, &before, 0, SETTLE_LIMIT_S, &settled);
            mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier");
        } else {
            mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier");
            mp_sleep_ms(SLEEP_BEFORE_USE_MS);
        }
        mp_stats(ctx, &s0);
        mp_ok(ctx, weft_all_reduce(ctx->comm, send, recv, count, WEFT_FLOAT32, WEFT_SUM, NULL),
              "weft_all_reduce");
        mp_stats(ctx, &s1);
        mp_red_check_result(ctx, "recvbuf (first use)", recv, WEFT_FLOAT32, WEFT_SUM, 0, count);
        memset(recv, 0xA5, bytes);
        mp_ok(ctx, weft_all_reduce(ctx->comm, send, recv, count, WEFT_FLOAT32, WEFT_SUM, NULL),
              "weft_all_reduce");
        mp_stats(ctx, &s2);
        mp_red_check_result(ctx, "recvbuf (second use)", recv, WEFT_FLOAT32, WEFT_SUM, 0, count);
        check_monotonic(ctx, &s0, &s1, "first use");
        check_monotonic(ctx, &s1, &s2, "second use");
        mp_check_first_use_waits(ctx, &s0, &s1, &s2);
        mp_ok(ctx, weft_free(ctx->comm, send), "weft_free");
        mp_ok(ctx, weft_free(ctx->comm, recv), "weft_free");
    }
}

static void counters(mp_ctx_t *ctx)
{
    const size_t use_count = 1024; /* float32 elements used at the start of the allocation */
    weft_stats_t s0, s1, s2;
    mp_case(ctx, "registration counters");
    mp_stats(ctx, &s0);
    mp_check_registration_invariants(ctx, &s0, "start");
    /* Larger than everything registered so far: it cannot fit in an existing registered chunk.
     * All ranks agree on the size (MAX), so that they allocate alike. */
    uint64_t big = s0.bytes_registered + ((uint64_t)1 << 20) + 4096;
    big = big < ((uint64_t)4 << 20) ? (uint64_t)4 << 20 : big;
    uint64_t agreed = 0;
    mp_ok(ctx, weft_all_reduce(ctx->comm, &big, &agreed, 1, WEFT_UINT64, WEFT_MAX, NULL),
          "weft_all_reduce");
    /* The earlier cases of this communicator register some tens of MiB: more than the cap
     * means registration was counted wrong (or a setting made it huge), not a reason to skip. */
    if (!mp_check(ctx, agreed <= BIG_CAP_BYTES,
                  "counters: a fresh allocation larger than everything registered so far "
                  "needs %" PRIu64 " bytes, over the %" PRIu64 "-byte cap (the earlier cases "
                  "register tens of MiB)",
                  agreed, BIG_CAP_BYTES))
        return;
    void *buf = NULL;
    mp_ok(ctx, weft_malloc(ctx->comm, &buf, (size_t)agreed), "weft_malloc");
    if (!buf)
        mp_fatal(ctx, "weft_malloc(%" PRIu64 ") returned NULL", agreed);
    mp_stats(ctx, &s1);
    mp_check_registration_invariants(ctx, &s1, "after weft_malloc");
    check_monotonic(ctx, &s0, &s1, "weft_malloc");
    mp_check_malloc_registered(ctx, &s0, &s1);
    use_buffer(ctx, buf, use_count);
    mp_stats(ctx, &s2);
    mp_check_registration_invariants(ctx, &s2, "after first use");
    check_monotonic(ctx, &s1, &s2, "first use");
    mp_check_use_registered(ctx, &s0, &s2, agreed, 2 * use_count * 4);
    mp_check_path(ctx, &s1, &s2, MP_BUF_REGISTERED, use_count * 4);
    mp_ok(ctx, weft_free(ctx->comm, buf), "weft_free");
}

/* ---------------------------------------------------------------------------------------------
 * Concurrent allocation from a second thread
 * ------------------------------------------------------------------------------------------- */
typedef struct churn {
    weft_comm_t comm;
    uint64_t seed;
    int iters;
    int failures;            /* calls that failed */
    weft_status_t first_bad; /* the first failing status */
} churn_t;

static void *churn_main(void *arg)
{
    churn_t *ch = arg;
    for (int i = 0; i < ch->iters; i++) {
        size_t bytes = 1 + (size_t)(mp_hash(ch->seed, (uint64_t)i, 0, 3) % (256 * 1024));
        void *p = NULL;
        weft_status_t st = weft_malloc(ch->comm, &p, bytes);
        if (st == WEFT_SUCCESS && p) {
            memset(p, i & 0xff, bytes);
            st = weft_free(ch->comm, p);
        }
        if (st != WEFT_SUCCESS || !p) {
            if (ch->failures++ == 0)
                ch->first_bad = st;
        }
    }
    return NULL;
}

static void concurrent_alloc(mp_ctx_t *ctx)
{
    const size_t count = 4099;
    int ops = ctx->quick ? 10 : 30;
    mp_case(ctx, "weft_malloc/weft_free on a second thread during collectives");
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, MP_BUF_REGISTERED, count * 4);
    mp_buf_alloc(ctx, &recv, MP_BUF_INTERIOR, count * 4);
    churn_t ch = {.comm = ctx->comm,
                  .seed = ctx->seed + (uint64_t)ctx->rank,
                  .iters = ctx->quick ? 100 : 300};
    pthread_t thread;
    if (pthread_create(&thread, NULL, churn_main, &ch) != 0)
        mp_fatal(ctx, "pthread_create failed");
    for (int i = 0; i < ops; i++) {
        mp_case(ctx, "all_reduce %d during concurrent weft_malloc/weft_free", i);
        mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, send.ptr);
        weft_status_t st =
            weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, WEFT_FLOAT32, WEFT_SUM, NULL);
        if (mp_ok(ctx, st, "weft_all_reduce"))
            mp_red_check_result(ctx, "recvbuf", recv.ptr, WEFT_FLOAT32, WEFT_SUM, 0, count);
    }
    pthread_join(thread, NULL);
    mp_check(ctx, ch.failures == 0,
             "%d of %d weft_malloc/weft_free pairs on the second thread failed (first: %s)",
             ch.failures, ch.iters, weft_status_string(ch.first_bad));
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_registration");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        alloc_then_use(&ctx);
        address_reuse(&ctx);
        first_use_waits(&ctx);
        counters(&ctx);
        concurrent_alloc(&ctx);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
