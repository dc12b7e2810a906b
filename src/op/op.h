/*
 * op.h - collective algorithms (one per file) and the steps they share.
 *
 * Every host algorithm is the same sequence, written out in its file:
 *   weft_op_begin       sequence number, deadline, health check
 *   weft_op_source      make the data peers will read remotely readable: zero-copy when it is
 *                       registered memory, else copied into the staging scratch
 *   weft_op_exchange    post a descriptor to every peer, wait for theirs, detect mismatches
 *   weft_op_execute     copy or reduce (a weft_work_t), split over the workers by the
 *                       partitioner, then the closing signal: wait until no peer still reads
 *                       our buffers
 *   weft_op_end         statistics, and marking the communicator unusable on fatal errors
 *
 * Data moves mostly by loads: a rank reads peers' memory and writes only its own, so only the
 * sources of an operation need to be registered. Two exceptions store into peers' memory: the
 * CUDA backend's push path for small payloads (coll_push.c), into the peers' control blocks
 * (weft's memory, never a user buffer), and the store forms of all-gather, all-to-all and
 * two-shot all-reduce (allgather_mesh.c, alltoall_mesh.c, allreduce_twoshot.c), into the peers'
 * outputs when every rank's output is registered.
 *
 * Backends: the handshake always runs on the host (it carries pointers and returns mismatches
 * as statuses). On the host backend weft_op_execute runs the work on the CPU workers and the
 * signals through the host control blocks; on the CUDA backend it launches one kernel on the
 * caller's stream that waits for the peers' device-side "ready" flags, moves the data and runs
 * the closing signal on the device (stream-ordered and graph-capturable).
 */
#ifndef WEFT_OP_OP_H
#define WEFT_OP_OP_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/comm_cuda.h"
#include "exec/work.h"
#include "model/partition.h"
#include "weft.h"

typedef struct weft_op {
    struct weft_comm *comm;
    uint64_t seq;
    weft_wait_ctx_t wait;
    const char *call;         /* API function name, for messages */
    void *stream;             /* cudaStream_t on the CUDA backend, NULL on the host */
    int posted;               /* its descriptor went to the peers (weft_op_exchange) */
    int staged;               /* some source went through the staging scratch */
    int remote_stores;        /* the work writes into peers' buffers (counted in the stats) */
    uint64_t first_use_ns;    /* time spent waiting for its buffers' registrations */
    weft_cuda_copy_t pending; /* CUDA: a local copy the next launch runs (weft_op_local_copy) */
    weft_cuda_push_t push;    /* CUDA: the push path's payloads for the next launch (coll_push.c) */
    weft_cuda_usage_t usage;  /* CUDA: what its launches held of the GPU (counted in the stats) */
    weft_cuda_prev_t caller;  /* CUDA: the caller's context, given back at the end */
} weft_op_t;

/* Start an operation on a communicator the API layer found usable (weft_api_check_comm): fails
 * with the first error a kernel reported (CUDA backend), and with WEFT_ERR_INVALID_ARGUMENT if
 * another thread is inside an operation on it. On the CUDA backend the communicator's device is
 * current from here to weft_op_end (weft_cuda_device_enter). On success the caller must reach
 * weft_op_end on every path. */
weft_status_t weft_op_begin(struct weft_comm *comm, const char *call, void *stream, weft_op_t *op);

/* Finish: give the caller's device back; count the operation (zero-copy, staged or inline; on CUDA
 * also its usage; a first-use wait if it waited for any registration, whatever its status); on
 * WEFT_ERR_PEER_LOST / TIMEOUT / ABORTED / INTERNAL store the status so every later call returns
 * it; let the next operation begin. A failure before the descriptor went to the peers (out of
 * staging memory, say) is fatal too, and closes the connections: the peers wait in the handshake
 * for a descriptor that will never come, and this rank's sequence number has moved on without
 * theirs; they see WEFT_ERR_PEER_LOST at once instead of their timeout. Returns st. */
weft_status_t weft_op_end(weft_op_t *op, weft_status_t st, int inline_payload);

/* Whether [ptr, ptr + bytes) is registered memory readable by every peer at the same address
 * (waiting for its registration if needed; the wait makes the operation a first use, counted once
 * by weft_op_end). With a single
 * rank nothing is read remotely: always ready. */
weft_status_t weft_op_acquire(weft_op_t *op, const void *ptr, size_t bytes, int *ready_out);

/* The staging scratch, at least bytes long, for this operation's staged data (one call per
 * operation: a later call may move the scratch). Marks the operation as staged. */
weft_status_t weft_op_stage(weft_op_t *op, size_t bytes, uint8_t **base_out);

/* The common single-source case: *remote_out = ptr when it is registered (zero-copy), else a
 * copy of the bytes in the staging scratch (the staged path). force_copy copies even registered
 * memory (one-shot in place: peers must read the input while we overwrite it); that private
 * copy does not make the operation staged. */
weft_status_t weft_op_source(weft_op_t *op, const void *ptr, size_t bytes, int force_copy,
                             const void **remote_out);

/* Post desc to every peer (src overridden by src_per_peer[p] when given, pair counts by
 * pair_send[p]/pair_recv[p] when given, inline data data + p * data_stride when desc is
 * inline), wait for every peer's descriptor and compare. A pair-count mismatch is seen by every
 * rank (the pair digest: weft_hs_check_match) and returned like any other; should the digest miss
 * it (a 2^-64 chance) only the pair's ranks see it: *pair_only_out (may be NULL) is then set to
 * 1 and the operation must still complete (weft_op_complete) so that every rank reports it (on
 * the CUDA backend the other ranks may then have chosen another path than the pair's, and end
 * at the timeout instead). */
weft_status_t weft_op_exchange(weft_op_t *op, const weft_op_desc_t *desc,
                               const uint64_t *src_per_peer, const uint64_t *pair_send,
                               const uint64_t *pair_recv, const void *data, size_t data_stride,
                               int *pair_only_out);

/* After weft_op_exchange: whether the operation takes its store form (writing into the peers'
 * outputs), which needs 2+ ranks and every rank's output posted as writable (desc.dst non-zero,
 * mine being this rank's posted descriptor). Every rank reaches the same answer; when it is yes,
 * the operation counts in remote_store_ops. */
int weft_op_store_form(weft_op_t *op, const weft_op_desc_t *mine);

/* The descriptor peer posted for this operation (valid after weft_op_exchange). */
static inline const weft_op_desc_t *weft_op_peer(const weft_op_t *op, int peer)
{
    return &weft_slot(op->comm, op->comm->rank, peer, op->seq)->u.desc;
}

/* The inline payload peer posted. */
static inline const void *weft_op_peer_data(const weft_op_t *op, int peer)
{
    return weft_slot(op->comm, op->comm->rank, peer, op->seq)->u.in.data;
}

/* Run work (its slices cut and assigned by the partitioner), then the signals of sync
 * (WEFT_SYNC_*, exec/work.h). mine is
 * this rank's verdict so far: on WEFT_SUCCESS the work runs; otherwise only the signals, which
 * carry it to the peers. Returns mine if it is an error, else the first error a peer
 * reported, else the work's status. */
weft_status_t weft_op_execute(weft_op_t *op, const weft_work_t *work, unsigned sync,
                              weft_status_t mine);

/* The host backend's phase signal (weft_op_execute with WEFT_SYNC_PHASE and no work) for a
 * verdict the caller words itself: mine travels with note (NULL: none; sent only with an error
 * status), and every rank's status and note come back in status_out[p] and notes_out[p]
 * (nranks entries each; this rank's are mine and note), so that each rank can pick the same
 * verdict and name the argument and the rank that failed. Returns a wait's error (timeout, peer
 * lost), else WEFT_SUCCESS: the verdicts are the caller's to read, and no message was recorded
 * for them. */
weft_status_t weft_op_agree(weft_op_t *op, weft_status_t mine, const weft_signal_note_t *note,
                            weft_status_t *status_out, weft_signal_note_t *notes_out);

/* dst <- src locally, in stream order (staging copies). On the CUDA backend a small copy may
 * be deferred to the operation's next launch (weft_cuda_local_copy): every path that copies must
 * then reach weft_op_execute or weft_cuda_enter with &op->pending; weft_op_end reports an
 * internal error if a successful operation left one behind. */
weft_status_t weft_op_local_copy(weft_op_t *op, void *dst, const void *src, size_t bytes);

/* ---- algorithms -------------------------------------------------------------------------- */

/* Payloads that fit the handshake slot (coll_inline.c). Arguments as the public functions. */
int weft_inline_fits(const struct weft_comm *comm, size_t pair_bytes);
weft_status_t weft_inline_barrier(struct weft_comm *comm);
/* A call that moves nothing (a count of 0): its descriptor's header alone, so that a peer that
 * passed another count gets WEFT_ERR_MISMATCH (select.h, weft_select_empty). */
weft_status_t weft_inline_empty(struct weft_comm *comm, const char *call, weft_op_desc_t *desc);
weft_status_t weft_inline_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t op);
weft_status_t weft_inline_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype);
weft_status_t weft_inline_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, weft_dtype_t dtype, weft_redop_t op);
weft_status_t weft_inline_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, int root);
weft_status_t weft_inline_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype);

/* The CUDA backend's push path (coll_push.c): payloads per pair of ranks of at most
 * weft_cuda_push_bytes are stored into the peers' LL slots. Arguments as the public functions. */
int weft_push_fits(const struct weft_comm *comm, size_t pair_bytes);
weft_status_t weft_push_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, weft_redop_t op, void *stream);
weft_status_t weft_push_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, void *stream);
weft_status_t weft_push_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                       void *stream);
weft_status_t weft_push_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, int root, void *stream);
weft_status_t weft_push_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, void *stream);

/* The push path of an all_to_allv whose handshake (op) found every rank's largest block within
 * the push limit (every rank decides alike from the descriptors' pair_max): launches it, largest
 * (> 0) being the largest block of all ranks. A private copy of the input that the mesh would
 * have read (op's pending copy) is dropped. */
weft_status_t weft_push_all_to_allv(weft_op_t *op, const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, size_t esize, size_t largest);

/* Mesh algorithms, on both backends (stream: see weft_op_t). */
weft_status_t weft_allreduce_oneshot(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t op,
                                     void *stream);
weft_status_t weft_allreduce_twoshot(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t op,
                                     void *stream);
weft_status_t weft_allgather_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, void *stream);
weft_status_t weft_reduce_scatter_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                       void *stream);
weft_status_t weft_broadcast_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, int root, void *stream);
/* all_to_all is all_to_allv with uniform counts (counts/displacements arrays of nranks). */
weft_status_t weft_alltoallv_mesh(struct weft_comm *comm, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  weft_dtype_t dtype, weft_coll_t coll, size_t count, void *stream);
/* A barrier through the device-side flags, in stream order (CUDA backend). */
weft_status_t weft_barrier_stream(struct weft_comm *comm, void *stream);

#endif /* WEFT_OP_OP_H */
