/*
 * mp_all_to_all.c - weft_all_to_all and weft_all_to_allv.
 *
 * all_to_all: every dtype over the small counts (count per peer), with registered, interior and
 * unregistered buffers, under each registration mode, plus the 1M+3 count once per mode. Block p
 * of rank r's input holds elements (r, p * count + i); block p of its result must hold rank p's
 * elements (p, r * count + i). Each case also checks whether the remote-store form ran
 * (remote_store_ops; only with WEFT_REMOTE_STORES=1, which CTest runs as mp_all_to_all.stores);
 * last, mixed cases where one rank's buffer is unregistered and the others' registered.
 *
 * all_to_allv: random count matrices shared by all ranks (drawn from the seed), with zeros
 * (about a quarter of the blocks, a rank that sends nothing, a rank that receives nothing, an
 * all-zero call), and displacements that are neither in rank order nor dense: the blocks are
 * rotated or reversed and separated by gaps, which must keep their poison. Element i from rank s
 * to rank d is (s, (d << 32) + i).
 *
 * Each case checks every element, the guard zones and that the input is left untouched, and the
 * zero-copy/staged path in the stats. The data, count patterns,
 * layouts and checks are shared with tests/gpu/gpu_collectives.c (cases.h).
 */
#include "cases.h"
#include "harness.h"

#include <inttypes.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------------
 * all_to_all
 * ------------------------------------------------------------------------------------------- */
/* One all_to_all with this rank's input and output of the given kinds; want_stores: every
 * rank's output registered and no rank's input unregistered (the store form may run). */
static void a2a(mp_ctx_t *ctx, mp_buf_kind_t send_kind, mp_buf_kind_t recv_kind, size_t count,
                weft_dtype_t dt, int want_stores)
{
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    size_t bytes = count * es;
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, send_kind, n * bytes);
    mp_buf_alloc(ctx, &recv, recv_kind, n * bytes);
    mp_raw_fill(ctx, dt, ctx->rank, 0, n * count, send.ptr);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_to_all(ctx->comm, send.ptr, recv.ptr, count, dt, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_to_all")) {
        mp_a2a_check(ctx, dt, count, send.ptr, recv.ptr);
        mp_check_path(ctx, &s0, &s1, send_kind, bytes);
        mp_check_remote_stores(ctx, &s0, &s1, want_stores, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

static void run_a2a(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt)
{
    mp_case(ctx, "all_to_all %s count=%zu %s", mp_buf_kind_name(kind), count, mp_dtype_name(dt));
    a2a(ctx, kind, kind, count, dt, mp_expect_zero_copy(ctx, kind));
}

/* Ranks whose buffers differ in kind (roa): one rank's unregistered output, or one rank's
 * staged input, makes every rank take the load form, with exact results. */
static void run_a2a_mixed(mp_ctx_t *ctx)
{
    const size_t count = 4099;
    const mp_buf_kind_t R = MP_BUF_REGISTERED, U = MP_BUF_UNREGISTERED;
    int last = ctx->nranks - 1;
    mp_comm_open(ctx, WEFT_REGISTRATION_ROA);
    mp_case(ctx, "all_to_all mixed: rank 0's output unregistered");
    a2a(ctx, R, ctx->rank == 0 ? U : R, count, WEFT_UINT32, 0);
    mp_case(ctx, "all_to_all mixed: rank %d's input unregistered", last);
    a2a(ctx, ctx->rank == last ? U : R, R, count, WEFT_FLOAT16, 0);
    mp_case(ctx, "all_to_all mixed: every buffer registered");
    a2a(ctx, R, R, count, WEFT_UINT32, 1);
    mp_comm_close(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * all_to_allv
 * ------------------------------------------------------------------------------------------- */
/* The path of one all_to_allv in the stats (weft.h): counted once, never inline on the host (its
 * blocks take the mesh whatever their size, an all-zero call too); staged exactly when this rank
 * sends something that peers read through the scratch. */
static void check_a2av_path(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1,
                            mp_buf_kind_t kind, const mp_a2av_plan_t *plan)
{
    if (!mp_check_counted_once(ctx, s0, s1))
        return;
    size_t sent = 0;
    for (int p = 0; p < ctx->nranks; p++)
        sent += plan->sendcounts[p];
    int staged = ctx->nranks > 1 && sent > 0 && !mp_expect_zero_copy(ctx, kind);
    uint64_t dz = s1->zero_copy_ops - s0->zero_copy_ops;
    uint64_t ds = s1->staged_ops - s0->staged_ops;
    mp_check(ctx, staged ? ds == 1 : dz == 1,
             "stats: expected the %s path (%s buffers, %zu elements sent, reg=%s): zero_copy_ops "
             "+%" PRIu64 ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64,
             staged ? "staged" : "zero-copy", mp_buf_kind_name(kind), sent, mp_reg_name(ctx->reg),
             dz, ds, s1->inline_ops - s0->inline_ops);
}

static void run_a2av(mp_ctx_t *ctx, mp_buf_kind_t kind, mp_a2av_pattern_t pattern, weft_dtype_t dt)
{
    size_t es = mp_dtype_bytes(dt);
    mp_case(ctx, "all_to_allv %s pattern=%s %s", mp_buf_kind_name(kind),
            mp_a2av_pattern_name(pattern), mp_dtype_name(dt));
    mp_a2av_plan_t plan;
    mp_a2av_plan_create(ctx, pattern, &plan);
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, kind, plan.slen * es);
    mp_buf_alloc(ctx, &recv, kind, plan.rlen * es);
    mp_a2av_fill(ctx, &plan, dt, send.ptr);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_to_allv(ctx->comm, send.ptr, plan.sendcounts, plan.sdispls,
                                        recv.ptr, plan.recvcounts, plan.rdispls, dt, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_to_allv")) {
        mp_a2av_check(ctx, &plan, dt, send.ptr, recv.ptr);
        check_a2av_path(ctx, &s0, &s1, kind, &plan);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
    mp_a2av_plan_destroy(&plan);
}

/* all_to_allv whose send and receive blocks share one buffer without sharing a byte: sendbuf
 * == recvbuf, the receive blocks after the send blocks (not in place, so valid). */
static void run_a2av_one_buffer(mp_ctx_t *ctx, weft_dtype_t dt)
{
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    mp_case(ctx, "all_to_allv, send and receive blocks in one buffer, %s", mp_dtype_name(dt));
    mp_a2av_plan_t plan;
    mp_a2av_plan_create(ctx, MP_A2AV_MEDIUM, &plan);
    size_t *rdispls = malloc(n * sizeof *rdispls);
    if (!rdispls)
        mp_fatal(ctx, "out of host memory");
    for (size_t p = 0; p < n; p++)
        rdispls[p] = plan.slen + plan.rdispls[p];
    mp_buf_t buf;
    mp_buf_alloc(ctx, &buf, MP_BUF_REGISTERED, (plan.slen + plan.rlen) * es);
    mp_a2av_fill(ctx, &plan, dt, buf.ptr);
    weft_status_t st = weft_all_to_allv(ctx->comm, buf.ptr, plan.sendcounts, plan.sdispls, buf.ptr,
                                        plan.recvcounts, rdispls, dt, NULL);
    if (mp_ok(ctx, st, "weft_all_to_allv"))
        mp_a2av_check(ctx, &plan, dt, buf.ptr, buf.ptr + plan.slen * es);
    mp_buf_free(ctx, &buf, "buffer");
    free(rdispls);
    mp_a2av_plan_destroy(&plan);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_all_to_all");
    size_t counts[8];
    size_t ncounts = mp_counts(&ctx, counts);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        for (int kind = 0; kind < MP_NUM_BUF_KINDS; kind++) {
            for (size_t c = 0; c < ncounts; c++)
                for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
                    if (mp_selected(&ctx, (unsigned)dt, (mp_buf_kind_t)kind))
                        run_a2a(&ctx, (mp_buf_kind_t)kind, counts[c], (weft_dtype_t)dt);
            for (int pat = 0; pat < MP_A2AV_NUM_PATTERNS; pat++) {
                if (pat == MP_A2AV_HUGE && (ctx.quick || kind != (reg + 1) % MP_NUM_BUF_KINDS))
                    continue;
                int dt = (pat * 3 + kind + reg * 7) % WEFT_NUM_DTYPES;
                run_a2av(&ctx, (mp_buf_kind_t)kind, (mp_a2av_pattern_t)pat, (weft_dtype_t)dt);
            }
        }
        run_a2av_one_buffer(&ctx, reg == 0 ? WEFT_FLOAT32 : reg == 1 ? WEFT_UINT8 : WEFT_FLOAT64);
        if (!ctx.quick)
            run_a2a(&ctx, (mp_buf_kind_t)reg, MP_LARGE_COUNT,
                    reg == 0   ? WEFT_FLOAT32
                    : reg == 1 ? WEFT_UINT8
                               : WEFT_BFLOAT16);
        mp_comm_close(&ctx);
    }
    run_a2a_mixed(&ctx);
    return mp_finish(&ctx);
}
