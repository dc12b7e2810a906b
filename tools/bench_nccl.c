/*
 * bench_nccl.c - NCCL as the library under test of weft-bench-nccl (see bench_nccl.h).
 *
 * Design: the unique id travels from rank 0 through a weft_broadcast of a small weft_malloc'ed
 * device buffer, so no second rendezvous is needed; the dtype and reduction tables map weft's
 * enums onto NCCL's one for one. weft's argument conventions become NCCL's here: NCCL's
 * all-gather and reduce-scatter take the per-rank count as weft does, its all-reduce and
 * broadcast the whole count, and its in-place forms are the same pointer identities as weft's.
 *
 * Thread safety: single-threaded.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_nccl.h"

struct bench_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, nranks;
    char version[32];
    size_t *uniform; /* 2 * nranks: an all-to-all's counts and displacements, made at init so
                        that no allocation lands in a timed call */
};

static const ncclDataType_t nccl_dtypes[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = ncclInt8,       [WEFT_UINT8] = ncclUint8,       [WEFT_INT32] = ncclInt32,
    [WEFT_UINT32] = ncclUint32,   [WEFT_INT64] = ncclInt64,       [WEFT_UINT64] = ncclUint64,
    [WEFT_FLOAT16] = ncclFloat16, [WEFT_BFLOAT16] = ncclBfloat16, [WEFT_FLOAT32] = ncclFloat32,
    [WEFT_FLOAT64] = ncclFloat64,
};
static const ncclRedOp_t nccl_redops[WEFT_NUM_REDOPS] = {
    [WEFT_SUM] = ncclSum, [WEFT_PROD] = ncclProd, [WEFT_MAX] = ncclMax,
    [WEFT_MIN] = ncclMin, [WEFT_AVG] = ncclAvg,
};

/* Print a failed NCCL call of this rank; returns WEFT_ERR_INTERNAL. */
static weft_status_t nccl_failed(int rank, const char *what, ncclResult_t r)
{
    fprintf(stderr, "weft-bench-nccl: rank %d: %s: %s\n", rank, what, ncclGetErrorString(r));
    return WEFT_ERR_INTERNAL;
}

/* Rank 0's unique id, on every rank, through weft. Returns 0 or -1 (printed). */
static int share_unique_id(weft_comm_t comm, cudaStream_t stream, ncclUniqueId *id)
{
    int rank = weft_comm_rank(comm);
    void *dev = NULL;
    weft_status_t s = weft_malloc(comm, &dev, sizeof *id);
    if (s != WEFT_SUCCESS) {
        fprintf(stderr, "weft-bench-nccl: rank %d: weft_malloc: %s\n", rank, weft_last_error());
        return -1;
    }
    cudaError_t err = cudaMemcpyAsync(dev, id, sizeof *id, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) {
        s = weft_broadcast(comm, dev, dev, sizeof *id, WEFT_UINT8, 0, stream);
        if (s == WEFT_SUCCESS)
            err = cudaMemcpyAsync(id, dev, sizeof *id, cudaMemcpyDeviceToHost, stream);
        if (s == WEFT_SUCCESS && err == cudaSuccess)
            err = cudaStreamSynchronize(stream);
    }
    int rc = 0;
    if (s != WEFT_SUCCESS || err != cudaSuccess) {
        fprintf(stderr, "weft-bench-nccl: rank %d: broadcasting the NCCL id: %s\n", rank,
                s != WEFT_SUCCESS ? weft_last_error() : cudaGetErrorString(err));
        rc = -1;
    }
    if (weft_free(comm, dev) != WEFT_SUCCESS)
        rc = -1;
    return rc;
}

bench_nccl_t *bench_nccl_init(weft_comm_t comm, void *stream)
{
    bench_nccl_t *n = calloc(1, sizeof *n);
    if (n)
        n->uniform = calloc(2 * (size_t)weft_comm_size(comm), sizeof *n->uniform);
    if (!n || !n->uniform) {
        fprintf(stderr, "weft-bench-nccl: out of memory\n");
        goto err_free;
    }
    n->rank = weft_comm_rank(comm);
    n->nranks = weft_comm_size(comm);
    n->stream = (cudaStream_t)stream;
    int version = 0;
    ncclResult_t r = ncclGetVersion(&version);
    if (r != ncclSuccess) {
        nccl_failed(n->rank, "ncclGetVersion", r);
        goto err_free;
    }
    snprintf(n->version, sizeof n->version, "NCCL %d.%d.%d", version / 10000, version / 100 % 100,
             version % 100);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (n->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
        nccl_failed(n->rank, "ncclGetUniqueId", r);
        goto err_free;
    }
    if (share_unique_id(comm, n->stream, &id) != 0)
        goto err_free;
    r = ncclCommInitRank(&n->comm, n->nranks, id, n->rank);
    if (r != ncclSuccess) {
        nccl_failed(n->rank, "ncclCommInitRank", r);
        goto err_free;
    }
    return n;

err_free:
    if (n)
        free(n->uniform);
    free(n);
    return NULL;
}

const char *bench_nccl_version(const bench_nccl_t *nccl)
{
    return nccl->version;
}

/* All-to-all(v) as one group of point-to-point calls; counts and displacements in elements. */
static ncclResult_t all_to_allv(bench_nccl_t *n, const char *in, char *out, size_t es,
                                ncclDataType_t dt, const size_t *scounts, const size_t *sdispls,
                                const size_t *rcounts, const size_t *rdispls)
{
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < n->nranks && r == ncclSuccess; p++) {
        r = ncclSend(in + sdispls[p] * es, scounts[p], dt, p, n->comm, n->stream);
        if (r == ncclSuccess)
            r = ncclRecv(out + rdispls[p] * es, rcounts[p], dt, p, n->comm, n->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
}

weft_status_t bench_nccl_call(bench_nccl_t *n, coll_t coll, const void *in, void *out, size_t count,
                              weft_dtype_t dtype, weft_redop_t op, int root,
                              const a2av_layout_t *a2av)
{
    ncclDataType_t dt = nccl_dtypes[dtype];
    ncclRedOp_t rop = nccl_redops[op];
    size_t es = weft_dtype_size(dtype);
    ncclResult_t r = ncclSuccess;
    switch (coll) {
    case COLL_ALL_REDUCE:
        r = ncclAllReduce(in, out, count, dt, rop, n->comm, n->stream);
        break;
    case COLL_ALL_GATHER:
        r = ncclAllGather(in, out, count, dt, n->comm, n->stream);
        break;
    case COLL_REDUCE_SCATTER:
        r = ncclReduceScatter(in, out, count, dt, rop, n->comm, n->stream);
        break;
    case COLL_BROADCAST:
        r = ncclBroadcast(in, out, count, dt, root, n->comm, n->stream);
        break;
    case COLL_ALL_TO_ALL: {
        size_t *uniform = n->uniform;
        for (int p = 0; p < n->nranks; p++) {
            uniform[p] = count;
            uniform[n->nranks + p] = (size_t)p * count;
        }
        r = all_to_allv(n, in, out, es, dt, uniform, uniform + n->nranks, uniform,
                        uniform + n->nranks);
        break;
    }
    case COLL_ALL_TO_ALLV:
        r = all_to_allv(n, in, out, es, dt, a2av->sendcounts, a2av->sdispls, a2av->recvcounts,
                        a2av->rdispls);
        break;
    case COLL_BARRIER:
    case NUM_COLLS:
        return WEFT_ERR_UNSUPPORTED;
    }
    return r == ncclSuccess ? WEFT_SUCCESS : nccl_failed(n->rank, "the NCCL call", r);
}

void bench_nccl_destroy(bench_nccl_t *n, bool abort)
{
    if (!n)
        return;
    if (abort)
        ncclCommAbort(n->comm);
    else
        ncclCommDestroy(n->comm);
    free(n->uniform);
    free(n);
}
