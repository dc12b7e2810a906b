/*
 * moe.h - MoE dispatch and combine over the full mesh: the handle that dispatch fills and
 * combine reads, and the algorithms: host backend (moe_dispatch.c, moe_combine.c), CUDA backend
 * (moe_dispatch_dev.c, moe_combine_dev.c: the layout is computed on the device, nothing waits
 * on the host).
 *
 * Layout: rank r owns experts [r * E/n, (r + 1) * E/n). A token goes to each rank that owns one
 * of its (unmasked) experts, once. Received tokens are ordered by source rank, then by source
 * token index; the handle remembers both sides of that layout, so combine moves no metadata.
 *
 * Lifetime: a handle the caller holds is listed on its communicator (comm->moe_handles). A
 * communicator's destruction detaches its handles (comm and dev NULL: the device memory goes with
 * the registry), so that a handle may be destroyed before or after its communicator, and a
 * detached handle is refused by dispatch and combine.
 *
 * Thread safety: a handle belongs to the communicator's user thread and is read-only after
 * dispatch returned it, but for its comm, dev and list links: the lists of every communicator
 * and those fields are guarded by one process-wide lock (moe_dispatch.c), so that a handle may
 * be destroyed on one thread (a garbage collector's finalizer) while another destroys its
 * communicator.
 */
#ifndef WEFT_OP_MOE_H
#define WEFT_OP_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "op/op.h"
#include "weft.h"

struct weft_moe_handle {
    /* The communicator of the dispatch (combine must use the same); NULL once detached. */
    struct weft_comm *comm;
    /* comm->moe_handles, once the caller holds it (listed); under the lock (file comment) */
    struct weft_moe_handle *prev, *next;
    int listed;
    int nranks;
    size_t num_tokens; /* this rank's tokens (rows of x and of combine's out) */
    size_t hidden;     /* elements per row */
    weft_dtype_t dtype;
    /* Send side: send_tokens[send_off[p] .. send_off[p + 1]) are, in increasing order, the
     * indices of this rank's tokens that went to rank p. */
    size_t *send_off;     /* nranks + 1 entries */
    int64_t *send_tokens; /* send_off[nranks] entries */
    /* Receive side: rows recv_off[p] .. recv_off[p] + recv_cnt[p] - 1 of recv_x came from p;
     * received row i is token recv_tokens[i] of its source, with the routing the dispatch
     * wrote out (kept for a dispatch that reuses the layout). */
    size_t *recv_off;     /* nranks entries */
    size_t *recv_cnt;     /* nranks entries */
    size_t num_recv;      /* sum of recv_cnt */
    int64_t *recv_tokens; /* num_recv entries */
    int64_t *recv_idx;    /* num_recv x topk: recv_topk_idx */
    float *recv_weights;  /* num_recv x topk: recv_topk_weights */
    int64_t *recv_counts; /* num_experts / nranks: recv_expert_counts */
    /* CUDA backend: the layout lives in device memory instead (send_off ... recv_counts unused). */
    void *dev;       /* this rank's handle memory (exec/moe_cuda.h), registered; NULL on host */
    int topk;        /* k of the dispatch */
    int num_experts; /* E of the dispatch */
    /* CUDA: max_recv_tokens of its latest dispatch that returned success, a reuse included (the
     * received count, unless that dispatch was rejected, is at most it): the rows y may have */
    size_t capacity;
    uint64_t layout; /* the operation number of the dispatch that made it (weft_op_desc_t) */
};

/* The redop field of a dispatch's handshake descriptor: set when the dispatch reuses a layout,
 * so that ranks which disagree on it get WEFT_ERR_MISMATCH before any data moves. */
#define WEFT_MOE_DESC_REUSE 1

/* Dispatch and combine with the arguments of the public functions, already checked by the api
 * layer (host backend). reuse: NULL for a fresh dispatch, else the handle whose layout a
 * WEFT_MOE_REUSE dispatch reuses (topk and num_experts are then the handle's, topk_idx and
 * topk_weights unused, the routing outputs optional); it is returned in *handle_out and never
 * changed. Dispatch sets *handle_out and *num_recv_out only on success; on
 * WEFT_ERR_INVALID_ARGUMENT (a rank would receive more than max_recv_tokens) every rank returns
 * that status, no output was written and the communicator stays usable. Both block until every
 * peer finished reading this rank's buffers. */
weft_status_t weft_moe_dispatch_mesh(struct weft_comm *comm, const void *x, size_t num_tokens,
                                     size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                     const float *topk_weights, int topk, int num_experts,
                                     void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                     int64_t *recv_expert_counts, size_t max_recv_tokens,
                                     struct weft_moe_handle *reuse, int64_t *num_recv_out,
                                     struct weft_moe_handle **handle_out);
weft_status_t weft_moe_combine_mesh(struct weft_comm *comm, const struct weft_moe_handle *handle,
                                    const void *y, void *out);

/* The CUDA backend's dispatch and combine, same contracts except: asynchronous on stream; the
 * capacity verdict (and the range check of topk_idx) is taken on the device, identically on
 * every rank, and a rejected dispatch sets *num_recv_tokens = -1 and writes nothing else; the
 * next MoE call on the communicator then returns WEFT_ERR_INVALID_ARGUMENT on every rank once
 * some rank's host has seen the rejection (weft_moe_check_rejected). When a kernel of the rank
 * failed before the data kernels (the entry signal's wait timed out or was aborted), a dispatch
 * sets *num_recv_tokens = -1 and a combine writes nothing; a value in a peer's handle memory
 * outside its bounds fails the rank with WEFT_ERR_PEER_LOST instead of being used
 * (exec/moe_cuda.h, "Failures"). The next call returns the failure (weft_cuda_check). A reuse
 * that returns success sets the handle's capacity to its max_recv_tokens: the bound of the
 * verdict its gather writes into the handle memory, so the rows a combine's y may have; nothing
 * else of the host handle changes. Builds without CUDA return WEFT_ERR_UNSUPPORTED. */
weft_status_t weft_moe_dispatch_dev(struct weft_comm *comm, const void *x, size_t num_tokens,
                                    size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                    const float *topk_weights, int topk, int num_experts,
                                    void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                    int64_t *recv_expert_counts, size_t max_recv_tokens,
                                    struct weft_moe_handle *reuse, int64_t *num_recv_out,
                                    struct weft_moe_handle **handle_out, void *stream);
/* y NULL stands for "nothing received", which the host cannot check: where this rank did
 * receive rows, the device rejects the combine on every rank (out gets zeros; the next MoE call
 * returns WEFT_ERR_INVALID_ARGUMENT on every rank, weft_moe_check_rejected). */
weft_status_t weft_moe_combine_dev(struct weft_comm *comm, const struct weft_moe_handle *handle,
                                   const void *y, void *out, void *stream);

/* After the handshake of a CUDA MoE call (op/moe_dispatch_dev.c): WEFT_ERR_INVALID_ARGUMENT on
 * every rank, naming the rejected dispatch or combine, when some rank's host has seen a
 * rejection (seen: this rank's count when it posted its descriptor) that no call has returned
 * yet. */
weft_status_t weft_moe_check_rejected(weft_op_t *op, uint32_t seen);

/* Hand a dispatch's new handle to the caller: list it on its communicator (h->comm), where
 * weft_moe_handles_detach finds it. Never fails, never blocks but on the lock. */
void weft_moe_handle_attach(struct weft_moe_handle *h);

/* Before comm is freed (weft_comm_destroy): detach every handle listed on it (comm and dev set
 * to NULL; the device memory is released with the registry, which unmaps every allocation of
 * the rank), then wait until no weft_moe_handle_release on another thread still frees a handle
 * of comm (its device synchronisation, at most). */
void weft_moe_handles_detach(struct weft_comm *comm);

/* The communicator h is attached to, NULL once detached (read under the lock: another thread
 * may be destroying that communicator). */
struct weft_comm *weft_moe_handle_comm(const struct weft_moe_handle *h);

/* weft_moe_handle_destroy of a handle the caller holds (not NULL): an attached handle is taken
 * off its communicator's list and, on the CUDA backend, waits for the device (kernels of this
 * process may still read its memory) and frees its device memory; a detached one has only host
 * memory left. Always freed, except a CUDA handle attached to a communicator of the process
 * this one was forked from (WEFT_ERR_INVALID_ARGUMENT, nothing freed: weft_comm_owned). A
 * failed switch to the communicator's device is returned and a failed synchronisation logged;
 * after either the device memory is left to the communicator's teardown (kernels may still read
 * it) and the rest of the handle is freed all the same. */
weft_status_t weft_moe_handle_release(struct weft_moe_handle *h);

/* Free a handle that was never handed to the caller (NULL: no-op), of a dispatch that failed
 * after launching: on the CUDA backend it first waits for the device (kernels of this process
 * may still read the handle's memory). */
void weft_moe_handle_free(struct weft_moe_handle *handle);

/* Free a handle of a dispatch that failed before launching anything: no kernel ever read its
 * memory, so this does not wait for the device (which would also break a stream capture in
 * progress, and wait for unrelated work). */
void weft_moe_handle_free_unused(struct weft_moe_handle *handle);

#endif /* WEFT_OP_MOE_H */
