/*
 * allreduce_twoshot.c - all-reduce as reduce-scatter then all-gather over the full mesh.
 *
 * Phase 1: rank r reduces chunk r of every rank's input (in rank order) into chunk r of its own
 *          output (or of the staging scratch when the output is not registered).
 * Phase 2: after a phase signal, rank r copies chunk p from rank p's reduced chunk, for every p.
 * Cost per rank: 2 (n - 1) S / n bytes read remotely instead of (n - 1) S for one-shot.
 *
 * Store form, when every rank allows it (WEFT_REMOTE_STORES; by default on the CUDA backend),
 * every rank's output is registered and, across GPUs, the call is smaller than
 * STORE_FORM_MAX_BYTES_GPUS: phase 1 also writes each unit of the reduced chunk r
 * into chunk r of every peer's output, straight after reducing it (a REDUCE work item with n
 * destinations), and there is no phase 2 and no phase signal: the closing signal then means
 * that every chunk has landed. Every rank takes the same form, from every rank's descriptor.
 *
 * In place is safe without staging: in phase 1 rank r writes only its chunk r, which no peer
 * reads (in the store form, chunk r of every output, which only rank r reads, each element
 * after reading it); in phase 2 it overwrites the other chunks only after every peer finished
 * phase 1. Chunk boundaries are multiples of 64 bytes, the same on every rank.
 */
#include "op/op.h"

/* Across GPUs, the store form pays up to this size per call and the loads from it: two H200s
 * over NVLink, 2 ranks in place, the stores take 23% less time at 4 MiB, 9% at 64 MiB, 2% at
 * 128 MiB, the loads 5% less at 256 MiB and 9% from 512 MiB; 4 ranks (two per GPU), stores 7-12%
 * less to 64 MiB, even at 256 MiB, loads 8% less at 1 GiB (docs/results/2026-11-30-h200-s14.md).
 * Ranks sharing one GPU keep the stores at every size (one H200, 4 ranks: 10-32% less time from
 * 2 to 128 MiB, docs/results/2026-11-29-h200-s6.md; 4 and 8 ranks 9-14% less from 128 MiB to
 * 1 GiB, 2 ranks 1-5%, docs/results/2026-11-30-h200-s15.md). */
#define STORE_FORM_MAX_BYTES_GPUS ((uint64_t)256 << 20)

/* Byte range of rank r's chunk out of bytes: the chunks cover every byte (the last ones may
 * be short or empty). */
static void chunk_of(uint64_t bytes, int nranks, int r, uint64_t *lo, uint64_t *hi)
{
    uint64_t per = weft_work_share(bytes, nranks);
    *lo = (uint64_t)r * per < bytes ? (uint64_t)r * per : bytes;
    *hi = *lo + per < bytes ? *lo + per : bytes;
}

weft_status_t weft_allreduce_twoshot(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t redop,
                                     void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_all_reduce", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    size_t esize = weft_dtype_size(dtype);
    uint64_t bytes = (uint64_t)count * esize, lo, hi;
    chunk_of(bytes, n, me, &lo, &hi);

    /* Sources peers read: the input (phase 1) and our reduced chunk (phase 2). */
    int src_ready = 0, out_ready = 0;
    st = weft_op_acquire(&op, sendbuf, bytes, &src_ready);
    if (st == WEFT_SUCCESS)
        st = weft_op_acquire(&op, recvbuf, bytes, &out_ready);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    const uint8_t *src = sendbuf;
    uint8_t *mychunk = (uint8_t *)recvbuf + lo;
    if (!src_ready || !out_ready) {
        uint8_t *stage;
        st = weft_op_stage(&op, (src_ready ? 0 : bytes) + (out_ready ? 0 : hi - lo), &stage);
        if (st == WEFT_SUCCESS && !src_ready) {
            st = weft_op_local_copy(&op, stage, sendbuf, bytes);
            src = stage;
            stage += bytes;
        }
        if (st != WEFT_SUCCESS)
            return weft_op_end(&op, st, 0);
        if (!out_ready)
            mychunk = stage;
    }
    int stores = comm->remote_stores && out_ready &&
                 (bytes < STORE_FORM_MAX_BYTES_GPUS || !weft_cuda_spans_gpus(comm));
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_REDUCE,
                           .dtype = dtype,
                           .redop = redop,
                           .flags = WEFT_DESC_TWOSHOT,
                           .count = count,
                           .src = (uint64_t)(uintptr_t)src,
                           .aux = (uint64_t)(uintptr_t)mychunk,
                           .dst = stores ? (uint64_t)(uintptr_t)recvbuf : 0};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    /* Phase 1: reduce our chunk, then the phase signal (in the store form: into every output,
     * then the closing signal). */
    const void *srcs[WEFT_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        const uint8_t *base = r == me ? src : (const uint8_t *)(uintptr_t)weft_op_peer(&op, r)->src;
        srcs[r] = base + lo;
    }
    weft_work_t work;
    weft_work_reduce(&work, mychunk, srcs, n, (hi - lo) / esize, dtype, redop, n, n);
    if (weft_op_store_form(&op, &desc)) {
        for (int r = 0; r < n; r++)
            if (r != me)
                work.dst[work.ndsts++] = (uint8_t *)(uintptr_t)weft_op_peer(&op, r)->dst + lo;
        return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
    }
    st = weft_op_execute(&op, &work, WEFT_SYNC_PHASE, st);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    /* Phase 2: gather every chunk (ours too when it sits in the staging scratch). */
    work = (weft_work_t){.kind = WEFT_WORK_COPY, .nslices = n};
    for (int r = 0; r < n; r++) {
        uint64_t rlo, rhi;
        chunk_of(bytes, n, r, &rlo, &rhi);
        work.dst[r] = (uint8_t *)recvbuf + rlo;
        work.src[r] = r == me ? mychunk : (const uint8_t *)(uintptr_t)weft_op_peer(&op, r)->aux;
        int copy = work.src[r] != work.dst[r];
        work.slices[r] =
            (weft_slice_t){.peer = r, .tier = comm->peer_tier[r], .bytes = copy ? rhi - rlo : 0};
    }
    st = weft_op_execute(&op, &work, WEFT_SYNC_CONTINUE | WEFT_SYNC_DONE, WEFT_SUCCESS);
    return weft_op_end(&op, st, 0);
}
