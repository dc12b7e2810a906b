/*
 * broadcast_mesh.c - broadcast by pull: every rank copies the root's input into its own output
 * directly, the copy split over the workers.
 *
 * Only the root needs the closing signal (its input must stay untouched until every rank has
 * read it); on the host the others return as soon as their copy is done.
 */
#include "op/op.h"

weft_status_t weft_broadcast_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, int root, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_broadcast", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    size_t bytes = count * weft_dtype_size(dtype);
    int is_root = comm->rank == root;
    const void *src = NULL;
    if (is_root) {
        st = weft_op_source(&op, sendbuf, bytes, 0, &src);
        if (st != WEFT_SUCCESS)
            return weft_op_end(&op, st, 0);
    }
    weft_op_desc_t desc = {.coll = WEFT_COLL_BROADCAST,
                           .dtype = dtype,
                           .root = (int16_t)root,
                           .count = count,
                           .src = (uint64_t)(uintptr_t)src};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    weft_work_t work = {.kind = WEFT_WORK_COPY, .nslices = 1};
    work.src[0] = is_root ? sendbuf : (const uint8_t *)(uintptr_t)weft_op_peer(&op, root)->src;
    work.dst[0] = recvbuf;
    work.slices[0] = (weft_slice_t){.peer = root,
                                    .tier = comm->peer_tier[root],
                                    .bytes = work.src[0] != work.dst[0] ? bytes : 0};
    unsigned sync = is_root ? WEFT_SYNC_DONE : WEFT_SYNC_DONE_NOWAIT;
    return weft_op_end(&op, weft_op_execute(&op, &work, sync, st), 0);
}
