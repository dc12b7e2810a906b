/*
 * moe_combine.c - MoE combine over the full mesh (host backend), by pull: every rank reads, for
 * each of its own tokens, the rows that the ranks which received the token computed for it, and
 * sums them into its output.
 *
 * Design. The dispatch handle holds both sides of the layout: the tokens this rank sent to each
 * rank (sorted lists), and where each source's block sits in this rank's y. The handshake posts
 * to each peer the address in y (staged when not registered) where that peer's block
 * starts, plus the block's length, which the peer checks against its own list (a handle from
 * another dispatch is a mismatch). Workers then each take a contiguous range of output tokens
 * (found in every sorted list by binary search) and sum, rank by rank in increasing order, in
 * float32 (16-bit types round once at the end). Tokens sent nowhere come out as zeros. The
 * closing signal releases the peers' y.
 *
 * Thread safety: runs on the communicator's user thread; each worker writes its own token range.
 */
#include <stdlib.h>
#include <string.h>

#include "exec/reduce_host.h"
#include "op/moe.h"
#include "op/op.h"
#include "util/log.h"

static const char call[] = "weft_moe_combine";

typedef struct combine_ctx {
    const struct weft_moe_handle *h;
    const uint8_t *y[WEFT_MAX_RANKS]; /* rank d's y, at the first row of this rank's block */
    void *out;
    float *acc; /* num_tokens * hidden floats for 16-bit types, else NULL (sum into out) */
    int nworkers;
} combine_ctx_t;

/* First index in tokens[0..c) whose value is >= t. */
static size_t lower_bound(const int64_t *tokens, size_t c, int64_t t)
{
    size_t lo = 0, hi = c;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tokens[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static float load(const uint8_t *row, size_t i, weft_dtype_t dtype)
{
    uint16_t v;
    switch (dtype) {
    case WEFT_FLOAT16:
        memcpy(&v, row + 2 * i, 2);
        return weft_half_to_float(v);
    case WEFT_BFLOAT16:
        memcpy(&v, row + 2 * i, 2);
        return weft_bf16_to_float(v);
    default: {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    }
}

static void combine_worker(void *arg, int worker)
{
    combine_ctx_t *c = arg;
    const struct weft_moe_handle *h = c->h;
    size_t H = h->hidden, T = h->num_tokens;
    size_t first = T * (size_t)worker / (size_t)c->nworkers;
    size_t last = T * ((size_t)worker + 1) / (size_t)c->nworkers;
    if (first == last)
        return;
    float *sum = c->acc ? c->acc : (float *)c->out;
    size_t row_bytes = H * weft_dtype_size(h->dtype);
    memset(sum + first * H, 0, (last - first) * H * sizeof *sum);
    for (int d = 0; d < h->nranks; d++) {
        const int64_t *tokens = h->send_tokens + h->send_off[d];
        size_t cnt = h->send_off[d + 1] - h->send_off[d];
        size_t i = lower_bound(tokens, cnt, (int64_t)first);
        for (; i < cnt && (size_t)tokens[i] < last; i++) {
            const uint8_t *row = c->y[d] + i * row_bytes;
            float *dst = sum + (size_t)tokens[i] * H;
            if (h->dtype == WEFT_FLOAT32) {
                const float *src = (const float *)row;
                for (size_t e = 0; e < H; e++)
                    dst[e] += src[e];
            } else {
                for (size_t e = 0; e < H; e++)
                    dst[e] += load(row, e, h->dtype);
            }
        }
    }
    if (!c->acc)
        return;
    uint16_t *out = (uint16_t *)c->out;
    for (size_t e = first * H; e < last * H; e++)
        out[e] = h->dtype == WEFT_FLOAT16 ? weft_float_to_half(sum[e]) : weft_float_to_bf16(sum[e]);
}

weft_status_t weft_moe_combine_mesh(struct weft_comm *comm, const struct weft_moe_handle *h,
                                    const void *y, void *out)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, NULL, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    size_t row_bytes = h->hidden * weft_dtype_size(h->dtype);
    size_t y_bytes = h->num_recv * row_bytes;
    const void *y_remote = y;
    if (y_bytes > 0) {
        st = weft_op_source(&op, y, y_bytes, 0, &y_remote);
        if (st != WEFT_SUCCESS)
            return weft_op_end(&op, st, 0);
    }
    uint64_t block_addr[WEFT_MAX_RANKS], block_len[WEFT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        block_addr[p] = (uint64_t)(uintptr_t)y_remote + h->recv_off[p] * row_bytes;
        block_len[p] = h->recv_cnt[p];
    }
    weft_op_desc_t desc = {.coll = WEFT_COLL_MOE_COMBINE,
                           .dtype = (uint8_t)h->dtype,
                           .count = h->hidden,
                           .layout = h->layout};
    st = weft_op_exchange(&op, &desc, block_addr, block_len, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    /* Each peer's block must be as long as my list for it; else the handles do not match. Only
     * the pair sees it: the closing signal tells everyone. */
    combine_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        st = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", call);
    for (int p = 0; c && p < n && st == WEFT_SUCCESS; p++) {
        size_t sent = h->send_off[p + 1] - h->send_off[p];
        const weft_op_desc_t *pd = p == me ? NULL : weft_op_peer(&op, p);
        if (pd && pd->pair_send != sent)
            st = weft_error(WEFT_ERR_MISMATCH,
                            "%s: rank %d sent %zu tokens to rank %d, whose handle holds %llu "
                            "(handles from different dispatches)",
                            call, me, sent, p, (unsigned long long)pd->pair_send);
        c->y[p] = (const uint8_t *)(uintptr_t)(pd ? pd->src : block_addr[me]);
    }
    if (st == WEFT_SUCCESS && h->num_tokens > 0) {
        c->h = h;
        c->out = out;
        c->nworkers = comm->exec_ops->nworkers(comm->exec);
        if (h->dtype != WEFT_FLOAT32) {
            c->acc = malloc(h->num_tokens * h->hidden * sizeof *c->acc);
            if (!c->acc)
                st = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %zu x %zu floats", call,
                                h->num_tokens, h->hidden);
        }
        if (st == WEFT_SUCCESS)
            comm->exec_ops->run(comm->exec, combine_worker, c);
        free(c->acc);
    }
    free(c);
    return weft_op_end(&op, weft_op_execute(&op, NULL, WEFT_SYNC_DONE, st), 0);
}
