/*
 * allgather_mesh.c - all-gather over the full mesh: every rank copies every peer's input block
 * into its own output directly, in one step (no ring), the copies split over the workers.
 *
 * In place (sendbuf == recvbuf + rank * count) our own block is already where it belongs, and
 * peers read only that block while we write the others.
 */
#include "op/op.h"

weft_status_t weft_allgather_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_all_gather", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    size_t bytes = count * weft_dtype_size(dtype);
    const void *src;
    st = weft_op_source(&op, sendbuf, bytes, 0, &src);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_GATHER,
                           .dtype = dtype,
                           .count = count,
                           .src = (uint64_t)(uintptr_t)src};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    weft_work_t work = {.kind = WEFT_WORK_COPY, .nslices = comm->nranks};
    for (int r = 0; r < comm->nranks; r++) {
        work.dst[r] = (uint8_t *)recvbuf + (size_t)r * bytes;
        work.src[r] =
            r == comm->rank ? sendbuf : (const uint8_t *)(uintptr_t)weft_op_peer(&op, r)->src;
        int copy = work.src[r] != work.dst[r];
        work.slices[r] =
            (weft_slice_t){.peer = r, .tier = comm->peer_tier[r], .bytes = copy ? bytes : 0};
    }
    return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
}
