/*
 * moe_combine_dev.c - MoE combine on the CUDA backend, by pull: every rank reads, for each of
 * its tokens, the rows that the ranks which received the token computed for it, and sums them
 * (exec/moe_cuda.h), all in stream order.
 *
 * Design. The handle memory of the dispatch holds, on each rank, where every token of its went
 * in each destination's list (pos) and, in the header that peers read, where each source's
 * block starts in its y (recv_off). The handshake posts y's address (or, when y is not
 * registered, that of its copy in the staging scratch, made by a kernel since only the device
 * knows how many rows y has) and the handle memory's address, and checks the handles match (the
 * dispatch that made them, hidden size and dtype: handshake.c's common fields). The combine
 * kernel runs between the entry and closing signals; a dispatch the device rejected gives
 * zeros. y NULL is posted as address 0: only the device knows whether that rank received rows,
 * and if it did, every rank's kernel rejects the combine (zeros, and a report that the next MoE
 * call returns, as a rejected dispatch's).
 *
 * Thread safety: runs on the communicator's user thread.
 */
#include "core/comm_cuda.h"
#include "op/moe.h"
#include "op/op.h"
#include "util/log.h"

#ifdef WEFT_HAVE_CUDA

#include "exec/moe_cuda.h"

static const char call[] = "weft_moe_combine";

weft_status_t weft_moe_combine_dev(struct weft_comm *comm, const struct weft_moe_handle *h,
                                   const void *y, void *out, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    uint32_t seen = weft_cuda_moe_rejections(comm, NULL);
    size_t row_bytes = h->hidden * weft_dtype_size(h->dtype);
    size_t y_bytes = h->capacity * row_bytes; /* the most rows y can have */

    /* y is read by peers: zero-copy when registered, else staged by a kernel (the number of
     * rows is on the device). */
    const void *y_remote = y;
    if (y && y_bytes > 0) {
        int ready = 0;
        st = weft_op_acquire(&op, y, y_bytes, &ready);
        if (st == WEFT_SUCCESS && !ready) {
            uint8_t *stage;
            st = weft_op_stage(&op, y_bytes, &stage);
            if (st == WEFT_SUCCESS) {
                st = weft_moe_dev_stage_launch(stage, y, h->dev, row_bytes, h->capacity,
                                               weft_cuda_moe_fail(comm), stream);
                weft_cuda_usage_blocks(&op.usage, WEFT_MOE_STAGE_BLOCKS);
            }
            y_remote = stage;
        }
        if (st != WEFT_SUCCESS)
            return weft_op_end(&op, st, 0);
    }
    weft_op_desc_t desc = {.coll = WEFT_COLL_MOE_COMBINE,
                           .dtype = (uint8_t)h->dtype,
                           .topk = (uint32_t)h->topk,
                           .count = h->hidden,
                           .src = (uint64_t)(uintptr_t)y_remote,
                           .aux = (uint64_t)(uintptr_t)h->dev,
                           .tokens = h->num_tokens,
                           .capacity = h->capacity, /* the rows of y_remote peers may read */
                           .rejections = seen,
                           .layout = h->layout};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st == WEFT_SUCCESS)
        st = weft_moe_check_rejected(&op, seen);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    weft_moe_dev_args_t a = {.rank = me,
                             .nranks = n,
                             .topk = h->topk,
                             .dtype = (int32_t)h->dtype,
                             .hidden = h->hidden,
                             .out = out,
                             .report = weft_cuda_moe_report(comm),
                             .fail = weft_cuda_moe_fail(comm)};
    for (int p = 0; p < n; p++) {
        const weft_op_desc_t *pd = p == me ? &desc : weft_op_peer(&op, p);
        a.tokens[p] = pd->tokens;
        a.capacity[p] = pd->capacity;
        a.base[p] = (uint8_t *)(uintptr_t)pd->aux;
        a.rows[p] = (const uint8_t *)(uintptr_t)pd->src;
    }
    st = weft_cuda_enter(comm, &op.pending, stream, &op.usage);
    if (st == WEFT_SUCCESS) {
        st = weft_moe_dev_combine_launch(&a, weft_cuda_moe_blocks(comm), stream);
        weft_cuda_usage_blocks(&op.usage, weft_cuda_moe_blocks(comm));
    }
    if (st == WEFT_SUCCESS)
        st = weft_cuda_leave(comm, stream);
    if (st != WEFT_SUCCESS)
        weft_comm_fail(comm, st); /* peers wait for this rank's flags */
    return weft_op_end(&op, st, 0);
}

#else /* !WEFT_HAVE_CUDA */

weft_status_t weft_moe_combine_dev(struct weft_comm *comm, const struct weft_moe_handle *h,
                                   const void *y, void *out, void *stream)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: this library was built without CUDA",
                      "weft_moe_combine");
}

#endif /* WEFT_HAVE_CUDA */
