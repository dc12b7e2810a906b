/*
 * coll_push.c - the push path of the CUDA backend: collectives whose payload per pair of ranks
 * is at most weft_cuda_push_bytes (WEFT_CUDA_PUSH_BYTES).
 *
 * The device counterpart of the host's flag path (coll_inline.c), on NCCL's LL protocol. The
 * host handshake stays (it carries no pointer, only the call, so that mismatches return
 * WEFT_ERR_MISMATCH before any launch); then one kernel stores this rank's payload for each
 * peer into that peer's LL slot as words that carry the operation's number, polls its own slot
 * until every peer's words arrived, and computes the result in local memory
 * (exec/exec_cuda.h). Nobody reads this rank's buffers, so they need not be registered, an
 * in-place all-reduce needs no private copy of its input, and there are neither ready nor
 * closing flags nor fences for ordering (the one fence there is for time: exec_cuda.cu): one
 * one-way trip per call.
 *
 * Every rank takes this path for the same calls: the payload limit is agreed at init and the
 * payload per pair follows from arguments the handshake compares; an all_to_allv, whose blocks
 * differ per pair, decides after its handshake from every rank's largest block
 * (alltoall_mesh.c).
 */
#include "op/op.h"

int weft_push_fits(const struct weft_comm *comm, size_t pair_bytes)
{
    return comm->backend == WEFT_BACKEND_CUDA && comm->nranks > 1 &&
           pair_bytes <= weft_cuda_push_bytes(comm);
}

/* The same payload size to and from every rank (this rank's own block included); this rank's
 * payload for rank r at src + r * stride. */
static void push_uniform(const struct weft_comm *comm, const void *src, size_t stride, size_t bytes,
                         weft_cuda_push_t *push)
{
    *push = (weft_cuda_push_t){.bytes = bytes};
    for (int r = 0; r < comm->nranks; r++) {
        push->to[r] = (const uint8_t *)src + (size_t)r * stride;
        push->send[r] = push->recv[r] = (uint32_t)bytes;
    }
}

/* The handshake (desc compared, no pointer), then one launch of work with push. */
static weft_status_t push_run(struct weft_comm *comm, const char *call, const weft_op_desc_t *desc,
                              const weft_cuda_push_t *push, const weft_work_t *work, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    st = weft_op_exchange(&op, desc, NULL, NULL, NULL, NULL, 0, NULL);
    op.push = *push;
    return weft_op_end(&op, weft_op_execute(&op, work, 0, st), 1);
}

/* A REDUCE of count elements into recvbuf, this rank's own contribution at mine. */
static void reduce_work(const struct weft_comm *comm, void *recvbuf, const void *mine, size_t count,
                        weft_dtype_t dtype, weft_redop_t redop, weft_work_t *work)
{
    const void *srcs[WEFT_MAX_RANKS] = {0};
    srcs[comm->rank] = mine;
    weft_work_reduce(work, recvbuf, srcs, comm->nranks, count, dtype, redop, comm->nranks, 1);
}

weft_status_t weft_push_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, weft_redop_t redop,
                                   void *stream)
{
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_ALL_REDUCE, .dtype = dtype, .redop = redop, .count = count};
    weft_work_t work;
    reduce_work(comm, recvbuf, sendbuf, count, dtype, redop, &work);
    weft_cuda_push_t push;
    push_uniform(comm, sendbuf, 0, count * weft_dtype_size(dtype), &push);
    return push_run(comm, "weft_all_reduce", &desc, &push, &work, stream);
}

weft_status_t weft_push_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, weft_dtype_t dtype, weft_redop_t redop,
                                       void *stream)
{
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_REDUCE_SCATTER, .dtype = dtype, .redop = redop, .count = recvcount};
    size_t block = recvcount * weft_dtype_size(dtype);
    weft_work_t work;
    reduce_work(comm, recvbuf, (const uint8_t *)sendbuf + (size_t)comm->rank * block, recvcount,
                dtype, redop, &work);
    weft_cuda_push_t push;
    push_uniform(comm, sendbuf, block, block, &push);
    return push_run(comm, "weft_reduce_scatter", &desc, &push, &work, stream);
}

/* A COPY of each rank's block (bytes) to recvbuf + r * bytes; this rank's own from mine. */
static void gather_work(const struct weft_comm *comm, void *recvbuf, const void *mine, size_t bytes,
                        weft_work_t *work)
{
    *work = (weft_work_t){.kind = WEFT_WORK_COPY, .nslices = comm->nranks};
    for (int r = 0; r < comm->nranks; r++)
        work->dst[r] = (uint8_t *)recvbuf + (size_t)r * bytes;
    work->src[comm->rank] = mine;
}

weft_status_t weft_push_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, void *stream)
{
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_GATHER, .dtype = dtype, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    weft_work_t work;
    gather_work(comm, recvbuf, sendbuf, bytes, &work);
    weft_cuda_push_t push;
    push_uniform(comm, sendbuf, 0, bytes, &push);
    return push_run(comm, "weft_all_gather", &desc, &push, &work, stream);
}

weft_status_t weft_push_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, void *stream)
{
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_TO_ALL, .dtype = dtype, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    weft_work_t work;
    gather_work(comm, recvbuf, (const uint8_t *)sendbuf + (size_t)comm->rank * bytes, bytes, &work);
    weft_cuda_push_t push;
    push_uniform(comm, sendbuf, bytes, bytes, &push);
    return push_run(comm, "weft_all_to_all", &desc, &push, &work, stream);
}

weft_status_t weft_push_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, int root, void *stream)
{
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_BROADCAST, .dtype = dtype, .root = (int16_t)root, .count = count};
    int is_root = comm->rank == root;
    /* Only the root's slot of the COPY is used: the root copies its input there (unless in
     * place), the others receive into it. */
    weft_work_t work = {.kind = WEFT_WORK_COPY, .nslices = comm->nranks};
    work.dst[root] = recvbuf;
    work.src[comm->rank] = is_root ? sendbuf : NULL;
    size_t bytes = count * weft_dtype_size(dtype);
    weft_cuda_push_t push = {.bytes = bytes};
    for (int r = 0; r < comm->nranks; r++) {
        push.to[r] = sendbuf;
        push.send[r] = is_root ? (uint32_t)bytes : 0;
    }
    if (!is_root)
        push.recv[root] = (uint32_t)bytes;
    return push_run(comm, "weft_broadcast", &desc, &push, &work, stream);
}

weft_status_t weft_push_all_to_allv(weft_op_t *op, const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, size_t esize, size_t largest)
{
    const struct weft_comm *comm = op->comm;
    int me = comm->rank;
    weft_cuda_push_t *push = &op->push;
    /* Every rank launches, with the same largest block: also one whose own blocks are all empty
     * (it still exchanges the header words). */
    *push = (weft_cuda_push_t){.bytes = largest};
    weft_work_t work = {.kind = WEFT_WORK_COPY, .nslices = comm->nranks};
    for (int r = 0; r < comm->nranks; r++) {
        push->to[r] = (const uint8_t *)sendbuf + sdispls[r] * esize;
        push->send[r] = (uint32_t)(sendcounts[r] * esize);
        push->recv[r] = (uint32_t)(recvcounts[r] * esize);
        work.dst[r] = (uint8_t *)recvbuf + rdispls[r] * esize;
    }
    work.src[me] = push->to[me];
    /* The mesh's private copy of the input, made before the path was known: nobody reads it. */
    op->pending = (weft_cuda_copy_t){0};
    return weft_op_execute(op, &work, 0, WEFT_SUCCESS);
}
