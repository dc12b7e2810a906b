/*
 * mp_moe_corrupt.c - MoE dispatch on the host backend when what one rank offers its peers is out
 * of bounds: the receiver must fail with WEFT_ERR_PEER_LOST instead of using the value.
 *
 * A sound rank never offers such values; a peer's memory that changed under the reader (a peer
 * that gave up and went on) can. To make one deterministically, this test wraps
 * weft_op_exchange (-Wl,--wrap, so it links the internal library instead of libweft): on the
 * last rank (the rogue), in a dispatch, the wrapper changes what rank 0 (the victim) will read,
 * before the rogue's phase signal lets the victim read anything:
 *   count:  the count the rogue posts for the victim is its num_tokens + 1 (its list holds
 *           fewer: a read past the list, and a receive count past the rows it has);
 *   token:  the first token of the rogue's list for the victim is num_tokens + 2^40 (a row far
 *           past the rogue's x);
 *   expert: the first expert slot of that list is 2^40 (a local expert id far past
 *           recv_expert_counts, which the victim counts into).
 * Each case runs on a fresh communicator (timeout 60 s): T = 8 tokens per rank of H = 4 float32,
 * E = n experts, topk 1, token t to expert t % n (so the victim gets tokens 0, n, ... of every
 * rank). Expected: the victim's dispatch returns WEFT_ERR_PEER_LOST naming weft_moe_dispatch,
 * every other rank's returns WEFT_ERR_PEER_LOST too (the victim's verdict or closing signal
 * carries it), all within 10 s; the victim's *num_recv_tokens, *handle and recv_expert_counts
 * are untouched; the next call fails alike (the communicator is unusable) and
 * weft_comm_destroy succeeds. (Before receivers checked these values, the count case read past
 * the rogue's list and took a receive count past its rows, and the token and expert cases
 * crashed the victim: a read 2^40 rows past x, an increment 2^40 counters past
 * recv_expert_counts.) A first, unaltered dispatch checks that the wrapper passes calls through.
 * Needs at least 2 ranks; prints PASS/FAIL per rank (harness.h).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op/op.h"

#define T 8
#define H 4
#define LIMIT_S 10.0 /* the failure must come long before the 60 s timeout */

typedef enum { CORRUPT_NONE, CORRUPT_COUNT, CORRUPT_TOKEN, CORRUPT_EXPERT } corrupt_t;
static const char *const corrupt_names[] = {"none", "count", "token", "expert"};

/* What the wrapper does on this rank (the rogue only; CORRUPT_NONE elsewhere). */
static corrupt_t corrupt = CORRUPT_NONE;
#define VICTIM 0

weft_status_t __real_weft_op_exchange(weft_op_t *op, const weft_op_desc_t *desc,
                                      const uint64_t *src_per_peer, const uint64_t *pair_send,
                                      const uint64_t *pair_recv, const void *data,
                                      size_t data_stride, int *pair_only_out);
weft_status_t __wrap_weft_op_exchange(weft_op_t *op, const weft_op_desc_t *desc,
                                      const uint64_t *src_per_peer, const uint64_t *pair_send,
                                      const uint64_t *pair_recv, const void *data,
                                      size_t data_stride, int *pair_only_out);

/* The rogue's dispatch: a fresh one posts its list addresses (src_per_peer) and the count for
 * each peer (pair_send); the victim reads them only after the phase signal that follows. */
weft_status_t __wrap_weft_op_exchange(weft_op_t *op, const weft_op_desc_t *desc,
                                      const uint64_t *src_per_peer, const uint64_t *pair_send,
                                      const uint64_t *pair_recv, const void *data,
                                      size_t data_stride, int *pair_only_out)
{
    if (corrupt == CORRUPT_NONE || desc->coll != WEFT_COLL_MOE_DISPATCH || !src_per_peer ||
        !pair_send)
        return __real_weft_op_exchange(op, desc, src_per_peer, pair_send, pair_recv, data,
                                       data_stride, pair_only_out);
    uint64_t send[WEFT_MAX_RANKS];
    memcpy(send, pair_send, (size_t)op->comm->nranks * sizeof *send);
    if (corrupt == CORRUPT_COUNT)
        send[VICTIM] = desc->tokens + 1;
    weft_status_t st = __real_weft_op_exchange(op, desc, src_per_peer, send, pair_recv, data,
                                               data_stride, pair_only_out);
    if (st != WEFT_SUCCESS || corrupt == CORRUPT_COUNT || send[VICTIM] == 0)
        return st;
    /* The list: send[VICTIM] tokens, then their expert slots (write_list in moe_dispatch.c). */
    int64_t *tokens = (int64_t *)(uintptr_t)src_per_peer[VICTIM];
    if (corrupt == CORRUPT_TOKEN)
        tokens[0] = (int64_t)desc->tokens + ((int64_t)1 << 40);
    else
        tokens[send[VICTIM]] = (int64_t)1 << 40;
    return st;
}

/* One dispatch on a fresh communicator, the rogue corrupting as mode says. */
static void run_case(mp_ctx_t *ctx, corrupt_t mode)
{
    int n = ctx->nranks, me = ctx->rank, rogue = n - 1;
    mp_comm_open(ctx, WEFT_REGISTRATION_ROA);
    mp_case(ctx, "moe dispatch, rank %d's %s corrupted for rank %d", rogue, corrupt_names[mode],
            VICTIM);
    size_t cap = (size_t)n * T;
    mp_buf_t x, idx, w, rx, ridx, rw, rcnt;
    mp_buf_alloc(ctx, &x, MP_BUF_UNREGISTERED, T * H * 4);
    mp_buf_alloc(ctx, &idx, MP_BUF_UNREGISTERED, T * 8);
    mp_buf_alloc(ctx, &w, MP_BUF_UNREGISTERED, T * 4);
    mp_buf_alloc(ctx, &rx, MP_BUF_UNREGISTERED, cap * H * 4);
    mp_buf_alloc(ctx, &ridx, MP_BUF_UNREGISTERED, cap * 8);
    mp_buf_alloc(ctx, &rw, MP_BUF_UNREGISTERED, cap * 4);
    mp_buf_alloc(ctx, &rcnt, MP_BUF_UNREGISTERED, 8);
    for (size_t t = 0; t < T; t++) {
        int64_t e = (int64_t)(t % (size_t)n);
        float one = 1.0f;
        memcpy(idx.ptr + t * 8, &e, 8);
        memcpy(w.ptr + t * 4, &one, 4);
        for (size_t i = 0; i < H; i++) {
            float v = (float)((size_t)me * 1000 + t * H + i);
            memcpy(x.ptr + (t * H + i) * 4, &v, 4);
        }
    }
    corrupt = me == rogue ? mode : CORRUPT_NONE;
    int64_t num_recv = -5;
    weft_moe_handle_t handle = NULL;
    double t0 = mp_now_s();
    weft_status_t st =
        weft_moe_dispatch(ctx->comm, x.ptr, T, H, WEFT_FLOAT32, (const int64_t *)idx.ptr,
                          (const float *)w.ptr, 1, n, rx.ptr, (int64_t *)ridx.ptr, (float *)rw.ptr,
                          (int64_t *)rcnt.ptr, cap, &num_recv, &handle, NULL);
    double dt = mp_now_s() - t0;
    corrupt = CORRUPT_NONE;
    if (mode == CORRUPT_NONE) {
        /* Rank r gets tokens r, r + n, ... of every rank. */
        int64_t want = (int64_t)n * ((T + n - 1 - me) / n);
        if (mp_ok(ctx, st, "weft_moe_dispatch (unaltered)")) {
            int64_t counts;
            memcpy(&counts, rcnt.ptr, 8);
            mp_check(ctx, num_recv == want && counts == want,
                     "num_recv_tokens %lld, recv_expert_counts[0] %lld; expected %lld",
                     (long long)num_recv, (long long)counts, (long long)want);
            mp_ok(ctx, weft_moe_handle_destroy(handle), "weft_moe_handle_destroy");
        }
        mp_comm_close(ctx);
    } else {
        if (me == VICTIM)
            mp_expect_status(ctx, st, WEFT_ERR_PEER_LOST, "weft_moe_dispatch", "the victim");
        else
            mp_check(ctx, st == WEFT_ERR_PEER_LOST,
                     "weft_moe_dispatch returned %s (%s); expected peer lost (rank %d's failure)",
                     weft_status_string(st), st == WEFT_SUCCESS ? "no error" : weft_last_error(),
                     VICTIM);
        mp_check(ctx, dt < LIMIT_S, "weft_moe_dispatch took %.2f s", dt);
        mp_check(ctx, num_recv == -5 && handle == NULL, "outputs set on failure");
        mp_check_poison(ctx, "recv_expert_counts", rcnt.ptr, rcnt.bytes);
        st = weft_barrier(ctx->comm, NULL);
        mp_check(ctx, mp_lost_peer(st), "weft_barrier after the failure returned %s",
                 weft_status_string(st));
        mp_comm_close_within(ctx, LIMIT_S);
    }
    mp_buf_free(ctx, &rcnt, "recv_expert_counts");
    mp_buf_free(ctx, &rw, "recv_topk_weights");
    mp_buf_free(ctx, &ridx, "recv_topk_idx");
    mp_buf_free(ctx, &rx, "recv_x");
    mp_buf_free(ctx, &w, "topk_weights");
    mp_buf_free(ctx, &idx, "topk_idx");
    mp_buf_free(ctx, &x, "x");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_moe_corrupt");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    for (corrupt_t mode = CORRUPT_NONE; mode <= CORRUPT_EXPERT; mode++)
        run_case(&ctx, mode);
    return mp_finish(&ctx);
}
