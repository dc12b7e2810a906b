/*
 * moe_dispatch_dev.c - MoE dispatch on the CUDA backend, by pull, with the layout computed on
 * the device so that nothing waits on the host (stream-ordered, graph-capturable).
 *
 * Design. The routing is in device memory, so the host cannot count tokens per destination.
 * Each dispatch therefore gets handle memory of its own (registered, mapped at the same address
 * on every rank; exec/moe_cuda.h) sized for the worst case, in which a layout kernel writes this
 * rank's per-destination token lists and counts. The handshake carries what the host does know:
 * the handle memory's address, x's address (staged when x is not registered), the token count
 * and max_recv_tokens of every rank. Then, between the entry and closing signals of the
 * communicator (weft_cuda_enter / weft_cuda_leave), a gather kernel reads every rank's counts,
 * takes the capacity verdict the same way on every rank, and pulls its rows. A rejected dispatch
 * (overflow, or an expert id out of range on some rank) writes *num_recv_tokens = -1 and a report
 * into mapped host memory; the host learns of it at a later MoE call, whose handshake carries
 * the number of rejections each rank has seen, so that every rank returns
 * WEFT_ERR_INVALID_ARGUMENT from the same call. A dispatch that reuses a handle (WEFT_MOE_REUSE)
 * skips the layout kernel: the lists and counts are still in every rank's handle memory, and
 * the gather takes the verdict again with the new capacities.
 *
 * Thread safety: runs on the communicator's user thread.
 */
#include <stdlib.h>

#include "core/comm_cuda.h"
#include "op/moe.h"
#include "op/op.h"
#include "util/log.h"

#ifdef WEFT_HAVE_CUDA

#include "exec/moe_cuda.h"

static const char call[] = "weft_moe_dispatch";

/* After the handshake of a CUDA MoE call: if some rank has seen a rejected dispatch (or
 * combine) that no call returned yet, every rank returns WEFT_ERR_INVALID_ARGUMENT (the same
 * verdict everywhere: the maximum over the handshake). */
weft_status_t weft_moe_check_rejected(weft_op_t *op, uint32_t seen)
{
    struct weft_comm *comm = op->comm;
    uint32_t most = seen;
    for (int p = 0; p < comm->nranks; p++) {
        if (p != comm->rank && weft_op_peer(op, p)->rejections > most)
            most = (uint32_t)weft_op_peer(op, p)->rejections;
    }
    if (most == comm->moe_rejections_reported)
        return WEFT_SUCCESS;
    comm->moe_rejections_reported = most;
    /* The verdict's words after "an earlier weft_moe_dispatch was rejected: " are the host
     * backend's (moe_dispatch.c, agree_verdict), but for the index and value of a bad id. */
    weft_moe_dev_report_t r;
    if (weft_cuda_moe_rejections(comm, &r) != most)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: an earlier weft_moe_dispatch or weft_moe_combine was rejected on "
                          "the device (capacity, expert ids, or y NULL where rows were received)",
                          op->call);
    if (r.why == WEFT_MOE_REJECT_Y_NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: an earlier weft_moe_combine was rejected: y: rank %d passed y NULL "
                          "but received %llu tokens; every rank's out was zeroed",
                          op->call, r.rank, (unsigned long long)r.need);
    if (r.why == WEFT_MOE_REJECT_EXPERT)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: an earlier weft_moe_dispatch was rejected: topk_idx: rank %d's "
                          "topk_idx holds an id that is neither -1 nor an expert in [0, %d); "
                          "nothing was written (*num_recv_tokens = -1)",
                          op->call, r.rank, r.experts);
    return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                      "%s: an earlier weft_moe_dispatch was rejected: max_recv_tokens: rank %d "
                      "would receive %llu tokens, more than its max_recv_tokens (%llu); nothing "
                      "was written (*num_recv_tokens = -1)",
                      op->call, r.rank, (unsigned long long)r.need, (unsigned long long)r.cap);
}

weft_status_t weft_moe_dispatch_dev(struct weft_comm *comm, const void *x, size_t num_tokens,
                                    size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                    const float *topk_weights, int topk, int num_experts,
                                    void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                    int64_t *recv_expert_counts, size_t max_recv_tokens,
                                    struct weft_moe_handle *reuse, int64_t *num_recv_out,
                                    struct weft_moe_handle **handle_out, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    uint32_t seen = weft_cuda_moe_rejections(comm, NULL);
    size_t x_bytes = num_tokens * hidden * weft_dtype_size(dtype);

    struct weft_moe_handle *h = reuse;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            return weft_op_end(&op, weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", call), 0);
        *h = (struct weft_moe_handle){.comm = comm,
                                      .nranks = n,
                                      .num_tokens = num_tokens,
                                      .hidden = hidden,
                                      .dtype = dtype,
                                      .topk = topk,
                                      .num_experts = num_experts,
                                      .capacity = max_recv_tokens,
                                      .layout = op.seq};
        weft_moe_dev_layout_t l = weft_moe_dev_layout(num_tokens, n, topk);
        st = weft_registry_alloc(comm->registry, l.total, 1, &h->dev);
        if (st != WEFT_SUCCESS) {
            weft_error_prefix(st, call); /* the registry's message does not know the call */
            goto err_free_handle;
        }
        int ready = 1;
        st = weft_op_acquire(&op, h->dev, l.total, &ready);
        if (st == WEFT_SUCCESS && !ready)
            st = weft_error(WEFT_ERR_INTERNAL, "%s: handle memory is not registered", call);
        if (st != WEFT_SUCCESS)
            goto err_free_handle;
    }
    const void *x_remote = x;
    if (x_bytes > 0)
        st = weft_op_source(&op, x, x_bytes, 0, &x_remote);
    if (st != WEFT_SUCCESS)
        goto err_free_handle;

    weft_op_desc_t desc = {.coll = WEFT_COLL_MOE_DISPATCH,
                           .dtype = (uint8_t)dtype,
                           .redop = reuse ? WEFT_MOE_DESC_REUSE : 0,
                           .topk = (uint32_t)topk,
                           .experts = (uint32_t)num_experts,
                           .count = hidden,
                           .src = (uint64_t)(uintptr_t)h->dev,
                           .aux = (uint64_t)(uintptr_t)x_remote,
                           .tokens = num_tokens,
                           .capacity = max_recv_tokens,
                           .rejections = seen,
                           .layout = reuse ? reuse->layout : 0};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st == WEFT_SUCCESS)
        st = weft_moe_check_rejected(&op, seen);
    if (st != WEFT_SUCCESS)
        goto err_free_handle;

    weft_moe_dev_args_t a = {.rank = me,
                             .nranks = n,
                             .topk = topk,
                             .experts_per_rank = num_experts / n,
                             .num_experts = num_experts,
                             .dtype = (int32_t)dtype,
                             .hidden = hidden,
                             .topk_idx = topk_idx,
                             .topk_weights = topk_weights,
                             .recv_x = recv_x,
                             .recv_topk_idx = recv_topk_idx,
                             .recv_topk_weights = recv_topk_weights,
                             .recv_expert_counts = recv_expert_counts,
                             .num_recv_out = num_recv_out,
                             .report = weft_cuda_moe_report(comm),
                             .fail = weft_cuda_moe_fail(comm)};
    for (int p = 0; p < n; p++) {
        const weft_op_desc_t *pd = p == me ? &desc : weft_op_peer(&op, p);
        a.tokens[p] = pd->tokens;
        a.capacity[p] = pd->capacity;
        a.base[p] = (uint8_t *)(uintptr_t)pd->src;
        a.rows[p] = (const uint8_t *)(uintptr_t)pd->aux;
    }
    /* From here every rank launches the same steps: the verdict is the device's. A reuse finds
     * the layout (lists, counts) in the handle memory of every rank. */
    st = reuse ? weft_moe_dev_counts_clear(&a, stream) : weft_moe_dev_layout_launch(&a, stream);
    if (st == WEFT_SUCCESS)
        st = weft_cuda_enter(comm, &op.pending, stream, &op.usage);
    if (st == WEFT_SUCCESS) {
        st = weft_moe_dev_gather_launch(&a, weft_cuda_moe_blocks(comm), stream);
        weft_cuda_usage_blocks(&op.usage, weft_cuda_moe_blocks(comm));
    }
    if (st == WEFT_SUCCESS)
        st = weft_cuda_leave(comm, stream);
    if (st != WEFT_SUCCESS) {
        weft_comm_fail(comm, st); /* peers wait for this rank's flags */
        if (!reuse)
            weft_moe_handle_free(h);
        return weft_op_end(&op, st, 0);
    }
    h->capacity = max_recv_tokens; /* the verdict's bound, also on a reuse (moe.h) */
    if (!reuse)
        weft_moe_handle_attach(h);
    *handle_out = h;
    return weft_op_end(&op, WEFT_SUCCESS, 0);

err_free_handle:
    if (!reuse) /* a reused handle is the caller's, and unchanged */
        weft_moe_handle_free_unused(h);
    return weft_op_end(&op, st, 0);
}

#else /* !WEFT_HAVE_CUDA */

weft_status_t weft_moe_dispatch_dev(struct weft_comm *comm, const void *x, size_t num_tokens,
                                    size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                    const float *topk_weights, int topk, int num_experts,
                                    void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                    int64_t *recv_expert_counts, size_t max_recv_tokens,
                                    struct weft_moe_handle *reuse, int64_t *num_recv_out,
                                    struct weft_moe_handle **handle_out, void *stream)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: this library was built without CUDA",
                      "weft_moe_dispatch");
}

#endif /* WEFT_HAVE_CUDA */
