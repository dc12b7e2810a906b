/*
 * api_coll.c - public collectives: every argument a caller can get wrong is checked here and
 * rejected with WEFT_ERR_INVALID_ARGUMENT and a message naming the call and the argument,
 * before any communication (so the communicator stays usable); then the op layer runs.
 *
 * A count of 0 moves nothing but still takes its turn in the handshake (weft_select_empty), so
 * that ranks passing different counts get WEFT_ERR_MISMATCH even when some pass 0.
 */
#include <stdint.h>

#include "api/api.h"
#include "core/comm.h"
#include "op/select.h"
#include "util/dtype.h"
#include "util/log.h"

#define INVALID(...) weft_error(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

weft_status_t weft_api_check_comm(const char *call, weft_comm_t comm, void *stream)
{
    weft_error_clear();
    if (!comm)
        return INVALID("%s: comm is NULL", call);
    weft_status_t st = weft_comm_usable(comm, call);
    if (st != WEFT_SUCCESS)
        return st;
    if (stream != NULL && comm->backend == WEFT_BACKEND_HOST)
        return INVALID("%s: stream must be NULL on the host backend", call);
    return WEFT_SUCCESS;
}

weft_status_t weft_api_check_aligned(const char *call, const char *what, const void *ptr,
                                     size_t esize, const char *type)
{
    if ((uintptr_t)ptr & (esize - 1))
        return INVALID("%s: %s %p is not aligned to its %zu-byte %s elements", call, what, ptr,
                       esize, type);
    return WEFT_SUCCESS;
}

/* Both buffers of a reduction aligned to dtype's elements (weft_api_check_aligned). */
static weft_status_t check_aligned_pair(const char *call, const void *sendbuf, const void *recvbuf,
                                        weft_dtype_t dtype)
{
    size_t esize = weft_dtype_size(dtype);
    weft_status_t st =
        weft_api_check_aligned(call, "sendbuf", sendbuf, esize, weft_dtype_name(dtype));
    if (st == WEFT_SUCCESS)
        st = weft_api_check_aligned(call, "recvbuf", recvbuf, esize, weft_dtype_name(dtype));
    return st;
}

/* Checks every collective shares: weft_api_check_comm, dtype, and count * esize * blocks
 * within WEFT_API_MAX_BUFFER_BYTES. */
static weft_status_t check_common(const char *call, weft_comm_t comm, void *stream,
                                  weft_dtype_t dtype, size_t count, size_t blocks)
{
    weft_status_t st = weft_api_check_comm(call, comm, stream);
    if (st != WEFT_SUCCESS)
        return st;
    if (!weft_dtype_valid(dtype))
        return INVALID("%s: dtype %d is not a weft_dtype_t", call, (int)dtype);
    size_t esize = weft_dtype_size(dtype);
    if (count > WEFT_API_MAX_BUFFER_BYTES / esize / blocks)
        return INVALID("%s: count %zu elements of %s (times %zu blocks) exceeds the %zu bytes a "
                       "process can address",
                       call, count, weft_dtype_name(dtype), blocks, WEFT_API_MAX_BUFFER_BYTES);
    return WEFT_SUCCESS;
}

static weft_status_t check_op(const char *call, weft_redop_t op)
{
    if (!weft_redop_valid(op))
        return INVALID("%s: op %d is not a weft_redop_t", call, (int)op);
    return WEFT_SUCCESS;
}

/* 1 if [x, x + xlen) and [y, y + ylen) overlap (empty ranges overlap nothing); no sum is
 * formed, so ranges near the top of the address space compare right. */
static int ranges_overlap(uintptr_t x, size_t xlen, uintptr_t y, size_t ylen)
{
    if (xlen == 0 || ylen == 0)
        return 0;
    return x < y ? y - x < xlen : x - y < ylen;
}

int weft_api_overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    return ranges_overlap((uintptr_t)a, alen, (uintptr_t)b, blen);
}

weft_status_t weft_all_reduce(weft_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                              weft_dtype_t dtype, weft_redop_t op, void *stream)
{
    static const char call[] = "weft_all_reduce";
    weft_status_t st = check_common(call, comm, stream, dtype, count, 1);
    if (st == WEFT_SUCCESS)
        st = check_op(call, op);
    if (st != WEFT_SUCCESS)
        return st;
    if (count == 0)
        return weft_select_empty(comm, call, WEFT_COLL_ALL_REDUCE, dtype, op, 0);
    if (!sendbuf || !recvbuf)
        return INVALID("%s: %s is NULL", call, sendbuf ? "recvbuf" : "sendbuf");
    st = check_aligned_pair(call, sendbuf, recvbuf, dtype);
    if (st != WEFT_SUCCESS)
        return st;
    size_t bytes = count * weft_dtype_size(dtype);
    if (sendbuf != recvbuf && weft_api_overlap(sendbuf, bytes, recvbuf, bytes))
        return INVALID("%s: sendbuf and recvbuf overlap without being equal (in place)", call);
    return weft_select_all_reduce(comm, sendbuf, recvbuf, count, dtype, op, stream);
}

weft_status_t weft_all_gather(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                              size_t sendcount, weft_dtype_t dtype, void *stream)
{
    static const char call[] = "weft_all_gather";
    weft_status_t st =
        check_common(call, comm, stream, dtype, sendcount, comm ? (size_t)comm->nranks : 1);
    if (st != WEFT_SUCCESS)
        return st;
    if (sendcount == 0)
        return weft_select_empty(comm, call, WEFT_COLL_ALL_GATHER, dtype, 0, 0);
    if (!sendbuf || !recvbuf)
        return INVALID("%s: %s is NULL", call, sendbuf ? "recvbuf" : "sendbuf");
    size_t bytes = sendcount * weft_dtype_size(dtype);
    const uint8_t *inplace = (const uint8_t *)recvbuf + (size_t)comm->rank * bytes;
    if (sendbuf != inplace &&
        weft_api_overlap(sendbuf, bytes, recvbuf, bytes * (size_t)comm->nranks))
        return INVALID("%s: sendbuf overlaps recvbuf but is not recvbuf + rank * sendcount", call);
    return weft_select_all_gather(comm, sendbuf, recvbuf, sendcount, dtype, stream);
}

weft_status_t weft_reduce_scatter(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                  size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                  void *stream)
{
    static const char call[] = "weft_reduce_scatter";
    weft_status_t st =
        check_common(call, comm, stream, dtype, recvcount, comm ? (size_t)comm->nranks : 1);
    if (st == WEFT_SUCCESS)
        st = check_op(call, op);
    if (st != WEFT_SUCCESS)
        return st;
    if (recvcount == 0)
        return weft_select_empty(comm, call, WEFT_COLL_REDUCE_SCATTER, dtype, op, 0);
    if (!sendbuf || !recvbuf)
        return INVALID("%s: %s is NULL", call, sendbuf ? "recvbuf" : "sendbuf");
    st = check_aligned_pair(call, sendbuf, recvbuf, dtype);
    if (st != WEFT_SUCCESS)
        return st;
    size_t bytes = recvcount * weft_dtype_size(dtype);
    const uint8_t *inplace = (const uint8_t *)sendbuf + (size_t)comm->rank * bytes;
    if ((const uint8_t *)recvbuf != inplace &&
        weft_api_overlap(sendbuf, bytes * (size_t)comm->nranks, recvbuf, bytes))
        return INVALID("%s: recvbuf overlaps sendbuf but is not sendbuf + rank * recvcount", call);
    return weft_select_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op, stream);
}

weft_status_t weft_broadcast(weft_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                             weft_dtype_t dtype, int root, void *stream)
{
    static const char call[] = "weft_broadcast";
    weft_status_t st = check_common(call, comm, stream, dtype, count, 1);
    if (st != WEFT_SUCCESS)
        return st;
    if (root < 0 || root >= comm->nranks)
        return INVALID("%s: root %d is not in [0, %d)", call, root, comm->nranks);
    if (count == 0)
        return weft_select_empty(comm, call, WEFT_COLL_BROADCAST, dtype, 0, root);
    int is_root = comm->rank == root;
    if (!recvbuf || (is_root && !sendbuf))
        return INVALID("%s: %s is NULL", call, recvbuf ? "sendbuf (on the root)" : "recvbuf");
    size_t bytes = count * weft_dtype_size(dtype);
    if (is_root && sendbuf != recvbuf && weft_api_overlap(sendbuf, bytes, recvbuf, bytes))
        return INVALID("%s: sendbuf and recvbuf overlap without being equal (in place)", call);
    return weft_select_broadcast(comm, sendbuf, recvbuf, count, dtype, root, stream);
}

weft_status_t weft_all_to_all(weft_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                              weft_dtype_t dtype, void *stream)
{
    static const char call[] = "weft_all_to_all";
    weft_status_t st =
        check_common(call, comm, stream, dtype, count, comm ? (size_t)comm->nranks : 1);
    if (st != WEFT_SUCCESS)
        return st;
    if (count == 0)
        return weft_select_empty(comm, call, WEFT_COLL_ALL_TO_ALL, dtype, 0, 0);
    if (!sendbuf || !recvbuf)
        return INVALID("%s: %s is NULL", call, sendbuf ? "recvbuf" : "sendbuf");
    size_t total = count * weft_dtype_size(dtype) * (size_t)comm->nranks;
    if (weft_api_overlap(sendbuf, total, recvbuf, total))
        return INVALID("%s: sendbuf and recvbuf overlap (all-to-all is not in place)", call);
    return weft_select_all_to_all(comm, sendbuf, recvbuf, count, dtype, stream);
}

/* The byte extent [0, *extent_out) the blocks (counts, displs) cover; checks that each block
 * ends within WEFT_API_MAX_BUFFER_BYTES. */
static weft_status_t block_extent(const char *call, const char *what, const size_t *counts,
                                  const size_t *displs, int n, size_t esize, size_t *extent_out)
{
    size_t extent = 0;
    for (int p = 0; p < n; p++) {
        if (counts[p] == 0)
            continue;
        if (counts[p] > WEFT_API_MAX_BUFFER_BYTES / esize ||
            displs[p] > WEFT_API_MAX_BUFFER_BYTES / esize - counts[p])
            return INVALID("%s: %s block %d (displacement %zu, count %zu) ends beyond the %zu "
                           "bytes a process can address",
                           call, what, p, displs[p], counts[p], WEFT_API_MAX_BUFFER_BYTES);
        size_t end = (displs[p] + counts[p]) * esize;
        if (end > extent)
            extent = end;
    }
    *extent_out = extent;
    return WEFT_SUCCESS;
}

weft_status_t weft_all_to_allv(weft_comm_t comm, const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, weft_dtype_t dtype, void *stream)
{
    static const char call[] = "weft_all_to_allv";
    weft_status_t st = check_common(call, comm, stream, dtype, 0, 1);
    if (st != WEFT_SUCCESS)
        return st;
    if (!sendcounts || !sdispls || !recvcounts || !rdispls)
        return INVALID("%s: %s is NULL", call,
                       !sendcounts   ? "sendcounts"
                       : !sdispls    ? "sdispls"
                       : !recvcounts ? "recvcounts"
                                     : "rdispls");
    int n = comm->nranks;
    size_t esize = weft_dtype_size(dtype), send_extent = 0, recv_extent = 0;
    st = block_extent(call, "send", sendcounts, sdispls, n, esize, &send_extent);
    if (st == WEFT_SUCCESS)
        st = block_extent(call, "receive", recvcounts, rdispls, n, esize, &recv_extent);
    if (st != WEFT_SUCCESS)
        return st;
    if ((send_extent > 0 && !sendbuf) || (recv_extent > 0 && !recvbuf))
        return INVALID("%s: %s is NULL", call, send_extent > 0 && !sendbuf ? "sendbuf" : "recvbuf");
    /* Block by block: a send and a receive layout may share one buffer without sharing a byte. */
    for (int p = 0; p < n && recv_extent > 0; p++) {
        for (int q = 0; q < n && sendcounts[p] > 0; q++) {
            if (recvcounts[q] > 0 && /* both within bounds (block_extent) */
                ranges_overlap((uintptr_t)sendbuf + sdispls[p] * esize, sendcounts[p] * esize,
                               (uintptr_t)recvbuf + rdispls[q] * esize, recvcounts[q] * esize))
                return INVALID("%s: send block %d and receive block %d overlap (all-to-all-v is "
                               "not in place)",
                               call, p, q);
        }
    }
    for (int p = 0; p < n; p++) {
        for (int q = p + 1; q < n; q++) {
            if (ranges_overlap(rdispls[p] * esize, recvcounts[p] * esize, rdispls[q] * esize,
                               recvcounts[q] * esize))
                return INVALID("%s: receive blocks %d and %d overlap", call, p, q);
        }
    }
    return weft_select_all_to_allv(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                                   dtype, stream);
}

weft_status_t weft_barrier(weft_comm_t comm, void *stream)
{
    weft_status_t st = check_common("weft_barrier", comm, stream, WEFT_INT8, 0, 1);
    if (st != WEFT_SUCCESS)
        return st;
    return weft_select_barrier(comm, stream);
}
