/*
 * moe.h - MoE dispatch and combine over the full mesh (host backend): the handle that dispatch
 * fills and combine reads, and the two algorithms (moe_dispatch.c, moe_combine.c).
 *
 * Layout: rank r owns experts [r * E/n, (r + 1) * E/n). A token goes to each rank that owns one
 * of its (unmasked) experts, once. Received tokens are ordered by source rank, then by source
 * token index; the handle remembers both sides of that layout, so combine moves no metadata.
 *
 * Thread safety: a handle belongs to the communicator's user thread; it is read-only after
 * dispatch returned it.
 */
#ifndef WEFT_OP_MOE_H
#define WEFT_OP_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "weft.h"

struct weft_moe_handle {
    struct weft_comm *comm; /* the communicator of the dispatch (combine must use the same) */
    int nranks;
    size_t num_tokens; /* this rank's tokens (rows of x and of combine's out) */
    size_t hidden;     /* elements per row */
    weft_dtype_t dtype;
    /* Send side: send_tokens[send_off[p] .. send_off[p + 1]) are, in increasing order, the
     * indices of this rank's tokens that went to rank p. */
    size_t *send_off;     /* nranks + 1 entries */
    int64_t *send_tokens; /* send_off[nranks] entries */
    /* Receive side: rows recv_off[p] .. recv_off[p] + recv_cnt[p] - 1 of recv_x came from p. */
    size_t *recv_off; /* nranks entries */
    size_t *recv_cnt; /* nranks entries */
    size_t num_recv;  /* sum of recv_cnt */
};

/* Dispatch and combine with the arguments of the public functions, already checked by the api
 * layer (host backend). Dispatch sets *handle_out and *num_recv_out only on success; on
 * WEFT_ERR_INVALID_ARGUMENT (a rank would receive more than max_recv_tokens) every rank returns
 * that status, no output was written and the communicator stays usable. Both block until every
 * peer finished reading this rank's buffers. */
weft_status_t weft_moe_dispatch_mesh(struct weft_comm *comm, const void *x, size_t num_tokens,
                                     size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                     const float *topk_weights, int topk, int num_experts,
                                     void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                     int64_t *recv_expert_counts, size_t max_recv_tokens,
                                     int64_t *num_recv_out, struct weft_moe_handle **handle_out);
weft_status_t weft_moe_combine_mesh(struct weft_comm *comm, const struct weft_moe_handle *handle,
                                    const void *y, void *out);

/* Free a handle (NULL: no-op). Local. */
void weft_moe_handle_free(struct weft_moe_handle *handle);

#endif /* WEFT_OP_MOE_H */
