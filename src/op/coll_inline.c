/*
 * coll_inline.c - the flag path: collectives whose payload per pair of ranks fits in the
 * handshake slot (WEFT_INLINE_BYTES, at most 256 bytes).
 *
 * Each rank writes its payload for peer p into p's slot together with the descriptor, waits
 * for every peer's slot, and computes its result from the slots locally. No registered buffer
 * is read remotely and nobody reads this rank's buffers, so there is no closing signal: one
 * round of flags per call, the least a collective can do. Slot reuse is safe by the two-slot
 * rule of comm.h.
 */
#include <string.h>

#include "exec/reduce_host.h"
#include "op/op.h"
#include "util/log.h"

int weft_inline_fits(const struct weft_comm *comm, size_t pair_bytes)
{
    return pair_bytes <= comm->inline_bytes;
}

/* Run the handshake of an inline operation: desc is completed with the inline flag and size. */
static weft_status_t inline_exchange(struct weft_comm *comm, const char *call, weft_op_t *op,
                                     weft_op_desc_t *desc, const void *data, size_t stride,
                                     size_t bytes)
{
    weft_status_t st = weft_op_begin(comm, call, NULL, op);
    if (st != WEFT_SUCCESS)
        return st;
    desc->flags = WEFT_DESC_INLINE;
    desc->inline_bytes = (uint16_t)bytes; /* at most WEFT_INLINE_MAX */
    return weft_op_exchange(op, desc, NULL, NULL, NULL, data, stride, NULL);
}

weft_status_t weft_inline_empty(struct weft_comm *comm, const char *call, weft_op_desc_t *desc)
{
    weft_op_t op = {0};
    weft_status_t st = inline_exchange(comm, call, &op, desc, NULL, 0, 0);
    return op.comm ? weft_op_end(&op, st, 1) : st;
}

weft_status_t weft_inline_barrier(struct weft_comm *comm)
{
    weft_op_desc_t desc = {.coll = WEFT_COLL_BARRIER};
    return weft_inline_empty(comm, "weft_barrier", &desc);
}

/* Sources for a reduction over inline payloads, in rank order (the same order on every rank,
 * so every rank computes bit-identical results). */
static void gather_sources(const weft_op_t *op, const void *mine, const void **srcs)
{
    for (int r = 0; r < op->comm->nranks; r++)
        srcs[r] = r == op->comm->rank ? mine : weft_op_peer_data(op, r);
}

weft_status_t weft_inline_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t redop)
{
    weft_op_t op = {0};
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_ALL_REDUCE, .dtype = dtype, .redop = redop, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    weft_status_t st = inline_exchange(comm, "weft_all_reduce", &op, &desc, sendbuf, 0, bytes);
    if (st == WEFT_SUCCESS) {
        const void *srcs[WEFT_MAX_RANKS];
        gather_sources(&op, sendbuf, srcs);
        weft_reduce_host(recvbuf, srcs, comm->nranks, count, dtype, redop, comm->nranks);
    }
    return op.comm ? weft_op_end(&op, st, 1) : st;
}

weft_status_t weft_inline_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, weft_dtype_t dtype, weft_redop_t redop)
{
    weft_op_t op = {0};
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_REDUCE_SCATTER, .dtype = dtype, .redop = redop, .count = recvcount};
    size_t bytes = recvcount * weft_dtype_size(dtype);
    weft_status_t st =
        inline_exchange(comm, "weft_reduce_scatter", &op, &desc, sendbuf, bytes, bytes);
    if (st == WEFT_SUCCESS) {
        const void *srcs[WEFT_MAX_RANKS];
        gather_sources(&op, (const uint8_t *)sendbuf + (size_t)comm->rank * bytes, srcs);
        weft_reduce_host(recvbuf, srcs, comm->nranks, recvcount, dtype, redop, comm->nranks);
    }
    return op.comm ? weft_op_end(&op, st, 1) : st;
}

weft_status_t weft_inline_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype)
{
    weft_op_t op = {0};
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_GATHER, .dtype = dtype, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    weft_status_t st = inline_exchange(comm, "weft_all_gather", &op, &desc, sendbuf, 0, bytes);
    if (st == WEFT_SUCCESS) {
        for (int r = 0; r < comm->nranks; r++) {
            uint8_t *dst = (uint8_t *)recvbuf + (size_t)r * bytes;
            const void *src = r == comm->rank ? sendbuf : weft_op_peer_data(&op, r);
            if (dst != src)
                memmove(dst, src, bytes);
        }
    }
    return op.comm ? weft_op_end(&op, st, 1) : st;
}

weft_status_t weft_inline_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, int root)
{
    weft_op_t op = {0};
    weft_op_desc_t desc = {
        .coll = WEFT_COLL_BROADCAST, .dtype = dtype, .root = root, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    int is_root = comm->rank == root;
    weft_status_t st =
        inline_exchange(comm, "weft_broadcast", &op, &desc, sendbuf, 0, is_root ? bytes : 0);
    if (st == WEFT_SUCCESS) {
        const void *src = is_root ? sendbuf : weft_op_peer_data(&op, root);
        if (src != recvbuf)
            memmove(recvbuf, src, bytes);
    }
    return op.comm ? weft_op_end(&op, st, 1) : st;
}

weft_status_t weft_inline_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype)
{
    weft_op_t op = {0};
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_TO_ALL, .dtype = dtype, .count = count};
    size_t bytes = count * weft_dtype_size(dtype);
    weft_status_t st = inline_exchange(comm, "weft_all_to_all", &op, &desc, sendbuf, bytes, bytes);
    if (st == WEFT_SUCCESS) {
        for (int r = 0; r < comm->nranks; r++) {
            const void *src = r == comm->rank ? (const uint8_t *)sendbuf + (size_t)r * bytes
                                              : weft_op_peer_data(&op, r);
            memcpy((uint8_t *)recvbuf + (size_t)r * bytes, src, bytes);
        }
    }
    return op.comm ? weft_op_end(&op, st, 1) : st;
}
