/*
 * weft_bench.c - weft-bench, the collective benchmark: nccl-tests columns over a size sweep.
 *
 * Runs as every rank of a job (`weftrun -n N weft-bench [options]`), written against the public
 * API (include/weft.h) only. For each selected collective and each size of the sweep it measures
 * the out-of-place and the in-place form, optionally verifies one call of each exactly, and rank 0
 * prints one row per size in the nccl-tests layout, plus the SM blocks a call held:
 *
 *     size count type redop root | time algbw busbw #wrong blocks | time algbw busbw #wrong blocks
 *
 * Design:
 * - Size is the byte count of the collective's full buffer as nccl-tests define it: the all-reduce
 *   and broadcast buffer, the gathered output of all-gather, the input of reduce-scatter, the
 *   whole send (= receive) buffer of all-to-all(v). Sizes of the per-rank collectives are rounded
 *   down to a multiple of nranks elements. algbw = size / time; busbw = algbw times the
 *   collective's bus factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all(v)
 *   (n-1)/n; broadcast 1).
 * - Timing: warm-up calls back to back, then each timed call alone: a barrier, clock_gettime
 *   (CLOCK_MONOTONIC) before and after the call. Each rank takes the median (and min, mean) of its
 *   per-call times; the printed time is the maximum over ranks of the per-rank medians, reduced
 *   with weft_all_reduce(MAX).
 * - Verification (-c 1) runs one extra call per size and placement on freshly written inputs
 *   whose reductions are exact in every dtype (small integers, products of +-1 and one 2, sums
 *   divisible by nranks for AVG), with the outputs poisoned first; every element is compared
 *   bit for bit and the wrong elements are summed over ranks. The inputs, the traffic matrix of
 *   all-to-allv and the expected results are bench_data.c's, the tables and the command line
 *   bench_opts.c's; this file measures and prints.
 * - Buffers: one send and one receive buffer of the largest size, from weft_malloc (zero-copy
 *   path) or posix_memalign (--buffers malloc: the staged path); smaller sizes use their start.
 *   One untimed all-reduce over both whole buffers precedes the sweep, so that their background
 *   registration is complete before the first timed call.
 *   The timed calls reuse whatever the buffers hold (in-place reductions may overflow to inf;
 *   values never become subnormal), so timing never waits for a refill.
 * - CUDA backend (--backend cuda, or auto on a GPU host): the collectives run on device buffers
 *   (weft_malloc, or cudaMalloc with --buffers malloc) on one non-blocking stream; inputs are
 *   written and results checked in host mirrors copied across, outside the timed region. A
 *   timed call is measured from before the call until cudaStreamSynchronize returns, after a
 *   stream-ordered barrier that was itself synchronised, so the time is the call's latency.
 *   WEFT_CUDA_COPY_ENGINE=1 selects the copy-engine path of pure copies (no SM). Column
 *   blocks: the thread blocks that moved a timed call's data (weft_stats_t sm_blocks over the
 *   timed calls, max over ranks), 0 where the copy engines moved it all; "-" on the host
 *   backend and in weft-bench-nccl. The JSON also has the share of the timed calls that the
 *   copy engines carried (copy_engine_ops).
 * - weft-bench-nccl is this program built with WEFT_BENCH_NCCL (bench_nccl.h): the measured calls
 *   go through NCCL, everything else (job, barriers, timing, verification, output) is the same,
 *   so its rows join weft-bench's size by size. CUDA backend only; buffers default to cudaMalloc
 *   (what an NCCL user passes); barrier is not measured (NCCL has none).
 *
 * Thread safety: single-threaded.
 *
 * Exit status: 0 on success, 1 on a failed call or any wrong element, 2 on an argument error.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#include "bench_data.h"
#include "bench_opts.h"
#include "bench_util.h"
#include "util/clock.h"
#ifdef WEFT_BENCH_NCCL
#include "bench_nccl.h"
#define LIBRARY_NAME "nccl"
#define STATS_SEE_CALLS 0 /* weft_get_stats does not see the measured calls */
#else
#define LIBRARY_NAME "weft"
#define STATS_SEE_CALLS 1
#endif

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Alignment of plain-malloc buffers (weft_malloc chooses its own). */
#define MALLOC_ALIGN 4096
/* Doubles of the bookkeeping reductions (b->meta): a timed size's three times, blocks and
 * copy-engine share. */
#define META_VALUES 5

/* One measured (size, placement). Times are the maximum over ranks, in microseconds. */
typedef struct result {
    bool valid;
    bool checked; /* wrong is meaningful */
    double median_us, min_us, avg_us;
    double algbw_gbps, busbw_gbps;
    uint64_t wrong;     /* summed over ranks */
    double sm_blocks;   /* CUDA: blocks that moved data per timed call (weft_stats_t
                           sm_blocks), max over ranks; < 0: not known (host, NCCL) */
    double copy_engine; /* CUDA: share of the timed calls the copy engines carried; < 0 ditto */
} result_t;

typedef struct bench {
    weft_comm_t comm;
    int rank, nranks;
    int workers;
    weft_registration_t registration;
    bench_opts_t opt;
    const dtype_info_t *dt;
    size_t buf_bytes;
    char *sendbuf, *recvbuf; /* host memory: the buffers, or the CUDA backend's mirrors */
    char *before;            /* opt.check: sendbuf as a verified call got it (buf_bytes) */
    double *meta;            /* bookkeeping reductions (host) */
    char *dsend, *drecv;     /* what the collectives get: the same, or device buffers */
    double *dmeta;
    bool cuda;          /* the communicator uses the CUDA backend */
    void *stream;       /* cudaStream_t on the CUDA backend, NULL on the host */
    uint64_t *times_ns; /* opt.iters entries */
    a2av_layout_t a2av; /* of the current size; one allocation of 4 * nranks entries */
    FILE *json;
#ifdef WEFT_BENCH_NCCL
    bench_nccl_t *nccl; /* the library under test */
#endif
    uint64_t timed_calls, other_calls;
    uint64_t wrong_total;
    uint64_t wrong_here; /* this rank's own wrong elements, whatever the reduction above said */
    int rows_checked;
    double busbw_sum;
    int busbw_rows;
} bench_t;

/* ---------------------------------------------------------------------------------------------
 * One call
 * ------------------------------------------------------------------------------------------- */

/* What determines this rank's inputs and expected results (bench_data.h). */
static data_spec_t data_spec(const bench_t *b)
{
    return (data_spec_t){.dtype = b->opt.dtype,
                         .op = b->opt.op,
                         .root = b->opt.root,
                         .rank = b->rank,
                         .nranks = b->nranks};
}

/* Issue one call of coll over a full buffer of total elements (a multiple of nranks for the
 * per-rank collectives), through weft or, in weft-bench-nccl, through NCCL. */
static weft_status_t run_once(bench_t *b, coll_t coll, size_t total, bool inplace)
{
    size_t es = b->dt->size, per = total / (size_t)b->nranks;
    char *send = b->dsend, *recv = b->drecv;
    /* The arguments of the weft call (in-place forms included), which NCCL's take alike. */
    const void *in = send;
    void *out = recv;
    size_t count = total;
    switch (coll) {
    case COLL_ALL_REDUCE:
    case COLL_BROADCAST:
        in = inplace ? recv : send;
        break;
    case COLL_ALL_GATHER:
        in = inplace ? recv + (size_t)b->rank * per * es : send;
        count = per;
        break;
    case COLL_REDUCE_SCATTER:
        out = inplace ? send + (size_t)b->rank * per * es : recv;
        count = per;
        break;
    case COLL_ALL_TO_ALL:
        count = per;
        break;
    case COLL_ALL_TO_ALLV:
    case COLL_BARRIER:
    case NUM_COLLS:
        break;
    }
    weft_dtype_t dt = b->opt.dtype;
#ifdef WEFT_BENCH_NCCL
    return bench_nccl_call(b->nccl, coll, in, out, count, dt, b->opt.op, b->opt.root, &b->a2av);
#else
    void *st = b->stream;
    switch (coll) {
    case COLL_ALL_REDUCE:
        return weft_all_reduce(b->comm, in, out, count, dt, b->opt.op, st);
    case COLL_ALL_GATHER:
        return weft_all_gather(b->comm, in, out, count, dt, st);
    case COLL_REDUCE_SCATTER:
        return weft_reduce_scatter(b->comm, in, out, count, dt, b->opt.op, st);
    case COLL_BROADCAST:
        return weft_broadcast(b->comm, in, out, count, dt, b->opt.root, st);
    case COLL_ALL_TO_ALL:
        return weft_all_to_all(b->comm, in, out, count, dt, st);
    case COLL_ALL_TO_ALLV:
        return weft_all_to_allv(b->comm, in, b->a2av.sendcounts, b->a2av.sdispls, out,
                                b->a2av.recvcounts, b->a2av.rdispls, dt, st);
    case COLL_BARRIER:
    case NUM_COLLS:
        break;
    }
    return weft_barrier(b->comm, st);
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Device side (CUDA backend): copies between the host mirrors and the device buffers, and
 * waiting for the stream. On the host backend the pointers are the same and these are no-ops.
 * ------------------------------------------------------------------------------------------- */
static int dev_copy(const bench_t *b, void *dst, const void *src, size_t bytes)
{
    if (!b->cuda || dst == src || bytes == 0)
        return 0;
#ifdef WEFT_HAVE_CUDA
    /* On the benchmark's own stream, then waited for: a plain cudaMemcpy from pageable memory
     * may return before its DMA lands, and it is ordered on the legacy stream, which a
     * non-blocking stream does not wait for. */
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)b->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize((cudaStream_t)b->stream);
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "weft-bench: rank %d: cudaMemcpy(%zu bytes): %s\n", b->rank, bytes,
            cudaGetErrorString(err));
#endif
    return -1;
}

/* Wait until the stream's work is done (returns 0), or -1 after printing the CUDA error. */
static int dev_sync(const bench_t *b)
{
    if (!b->cuda)
        return 0;
#ifdef WEFT_HAVE_CUDA
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)b->stream);
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "weft-bench: rank %d: cudaStreamSynchronize: %s\n", b->rank,
            cudaGetErrorString(err));
#endif
    return -1;
}

/* A collective, then (CUDA) the wait for it: the latency of one call. */
static weft_status_t run_and_wait(bench_t *b, coll_t coll, size_t total, bool inplace)
{
    weft_status_t s = run_once(b, coll, total, inplace);
    if (s == WEFT_SUCCESS && dev_sync(b) != 0)
        s = WEFT_ERR_CUDA;
    return s;
}

/* All-reduce n doubles or uint64s of the bookkeeping buffer (host meta) across ranks. */
static weft_status_t reduce_meta(bench_t *b, size_t n, weft_dtype_t dt, weft_redop_t op)
{
    if (dev_copy(b, b->dmeta, b->meta, n * 8) != 0)
        return WEFT_ERR_CUDA;
    weft_status_t s = weft_all_reduce(b->comm, b->dmeta, b->dmeta, n, dt, op, b->stream);
    if (s == WEFT_SUCCESS && (dev_sync(b) != 0 || dev_copy(b, b->meta, b->dmeta, n * 8) != 0))
        s = WEFT_ERR_CUDA;
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Measurement
 * ------------------------------------------------------------------------------------------- */
/* Print a failed call of this rank and return -1. */
static int report_failure(const bench_t *b, const char *what, coll_t coll, size_t total,
                          weft_status_t s)
{
    fprintf(stderr, "weft-bench: rank %d: %s (%s, %zu elements) failed: %s: %s\n", b->rank, what,
            colls[coll].name, total, weft_status_string(s), weft_last_error());
    return -1;
}

/* Elements a verified call changed that are not its output (b->before holds the send buffer as
 * the call got it, fill_inputs poisoned the receive buffer with poison): any of the send
 * buffer's (the inputs, and what no call reads), except an in-place reduce-scatter's own block,
 * which is its output; and an out-of-place reduce-scatter's receive elements past its block,
 * which must keep the poison. The other collectives' outputs fill the receive buffer's total
 * elements, which verify checks. */
static uint64_t changed_outside(const bench_t *b, coll_t coll, size_t total, bool inplace,
                                unsigned char poison)
{
    size_t es = b->dt->size, per = total / (size_t)b->nranks;
    size_t mine = coll == COLL_REDUCE_SCATTER && inplace ? (size_t)b->rank * per : total;
    uint64_t changed = 0;
    for (size_t i = 0; i < total; i++)
        if (i < mine || i >= mine + per)
            changed += memcmp(b->sendbuf + i * es, b->before + i * es, es) != 0;
    for (size_t i = per; coll == COLL_REDUCE_SCATTER && !inplace && i < total; i++) {
        const unsigned char *e = (const unsigned char *)b->recvbuf + i * es;
        bool kept = true;
        for (size_t k = 0; k < es; k++)
            kept = kept && e[k] == poison;
        changed += !kept;
    }
    return changed;
}

/* Measure one (collective, size, placement) into *res. Collective over all ranks. Returns 0, or
 * -1 after printing a failed call. */
static int measure(bench_t *b, coll_t coll, size_t total, bool inplace, result_t *res)
{
    weft_status_t s;
    for (int w = 0; w < b->opt.warmup; w++) {
        s = run_and_wait(b, coll, total, inplace);
        if (s != WEFT_SUCCESS)
            return report_failure(b, "warm-up call", coll, total, s);
        b->other_calls++;
    }
    weft_stats_t before, after;
    s = weft_get_stats(b->comm, &before);
    if (s != WEFT_SUCCESS)
        return report_failure(b, "weft_get_stats", coll, total, s);
    for (int it = 0; it < b->opt.iters; it++) {
        s = weft_barrier(b->comm, b->stream);
        if (s == WEFT_SUCCESS && dev_sync(b) != 0)
            s = WEFT_ERR_CUDA;
        if (s != WEFT_SUCCESS)
            return report_failure(b, "weft_barrier before a timed call", coll, total, s);
        b->other_calls++;
        uint64_t t0 = weft_now_ns();
        s = run_and_wait(b, coll, total, inplace);
        uint64_t t1 = weft_now_ns();
        if (s != WEFT_SUCCESS)
            return report_failure(b, "timed call", coll, total, s);
        b->times_ns[it] = t1 - t0;
        b->timed_calls++;
    }
    s = weft_get_stats(b->comm, &after);
    if (s != WEFT_SUCCESS)
        return report_failure(b, "weft_get_stats", coll, total, s);
    size_t nit = (size_t)b->opt.iters;
    double median = bench_median_u64(b->times_ns, nit); /* sorts: times_ns[0] is the minimum */
    double sum = 0;
    for (size_t i = 0; i < nit; i++)
        sum += (double)b->times_ns[i];
    b->meta[0] = median / 1e3;
    b->meta[1] = (double)b->times_ns[0] / 1e3;
    b->meta[2] = sum / (double)nit / 1e3;
    /* The barriers between the timed calls move no data and use no copy engine. */
    b->meta[3] = (double)(after.sm_blocks - before.sm_blocks) / (double)nit;
    b->meta[4] = (double)(after.copy_engine_ops - before.copy_engine_ops) / (double)nit;
    s = reduce_meta(b, META_VALUES, WEFT_FLOAT64, WEFT_MAX);
    if (s != WEFT_SUCCESS)
        return report_failure(b, "weft_all_reduce of the times", coll, total, s);
    b->other_calls++;
    /* weft's counters say nothing of NCCL's calls, and the host backend has no SM. */
    bool usage_known = b->cuda && STATS_SEE_CALLS;
    *res = (result_t){.valid = true,
                      .median_us = b->meta[0],
                      .min_us = b->meta[1],
                      .avg_us = b->meta[2],
                      .sm_blocks = usage_known ? b->meta[3] : -1,
                      .copy_engine = usage_known ? b->meta[4] : -1};

    if (colls[coll].busbw_kind >= 0 && res->median_us > 0) {
        double n = b->nranks;
        /* all-to-allv: what the rank sends to itself never crosses a link (a2av_setup: the same
         * on every rank) */
        double factor = colls[coll].busbw_kind == 2   ? 2 * (n - 1) / n
                        : colls[coll].busbw_kind == 1 ? (n - 1) / n
                        : colls[coll].busbw_kind != 3 ? 1.0
                        : total > 0 ? (double)(total - b->a2av.recvcounts[b->rank]) / (double)total
                                    : 0.0;
        res->algbw_gbps = (double)(total * b->dt->size) / (res->median_us * 1e3);
        res->busbw_gbps = res->algbw_gbps * factor;
    }

    if (b->opt.check && coll != COLL_BARRIER) {
        size_t bytes = total * b->dt->size;
        data_spec_t spec = data_spec(b);
        uint64_t wrong = 0; /* the most elements any pass found wrong */
        for (int pass = 0; pass < verify_passes(spec.dtype); pass++) {
            fill_inputs(&spec, coll, total, inplace, b->sendbuf, b->recvbuf, verify_poison(pass));
            memcpy(b->before, b->sendbuf, bytes);
            if (dev_copy(b, b->dsend, b->sendbuf, bytes) != 0 ||
                dev_copy(b, b->drecv, b->recvbuf, bytes) != 0)
                return report_failure(b, "copying the inputs to the device", coll, total,
                                      WEFT_ERR_CUDA);
            s = run_and_wait(b, coll, total, inplace);
            if (s != WEFT_SUCCESS)
                return report_failure(b, "verified call", coll, total, s);
            b->other_calls++;
            if (dev_copy(b, b->recvbuf, b->drecv, bytes) != 0 ||
                dev_copy(b, b->sendbuf, b->dsend, bytes) != 0)
                return report_failure(b, "copying the results from the device", coll, total,
                                      WEFT_ERR_CUDA);
            /* Host buffers: the results were copied back from the device above. */
            uint64_t w = verify(&spec, coll, total, inplace, b->sendbuf, b->recvbuf, &b->a2av) +
                         changed_outside(b, coll, total, inplace, verify_poison(pass));
            wrong = w > wrong ? w : wrong;
        }
        b->wrong_here += wrong; /* the exit status does not rest on the library's reduction alone */
        b->rows_checked++;
        memcpy(b->meta, &wrong, sizeof wrong);
        s = reduce_meta(b, 1, WEFT_UINT64, WEFT_SUM);
        if (s != WEFT_SUCCESS)
            return report_failure(b, "weft_all_reduce of the wrong counts", coll, total, s);
        b->other_calls++;
        memcpy(&res->wrong, b->meta, sizeof res->wrong);
        res->checked = true;
        b->wrong_total += res->wrong;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Output (rank 0)
 * ------------------------------------------------------------------------------------------- */
/* Width of one placement's columns: "  %9s  %7s  %7s  %6s  %6s". */
#define RESULT_WIDTH 45

static void print_centered(const char *label, int width)
{
    int len = (int)strlen(label), left = (width - len) / 2;
    printf("%*s%s%*s", left, "", label, width - len - left, "");
}

static void print_header(const bench_t *b, coll_t coll)
{
    printf("#\n# Collective: %s\n#\n", colls[coll].name);
    printf("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
    if (b->opt.run_outofplace)
        print_centered("out-of-place", RESULT_WIDTH);
    if (b->opt.run_inplace)
        print_centered("in-place", RESULT_WIDTH);
    printf("\n# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int p = 0; p < 2; p++)
        if (p ? b->opt.run_inplace : b->opt.run_outofplace)
            printf("  %9s  %7s  %7s  %6s  %6s", "time", "algbw", "busbw", "#wrong", "blocks");
    printf("\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    for (int p = 0; p < 2; p++)
        if (p ? b->opt.run_inplace : b->opt.run_outofplace)
            printf("  %9s  %7s  %7s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "", "(SM)");
    printf("\n");
}

static void print_result(const result_t *r)
{
    if (!r->valid) {
        printf("  %9s  %7s  %7s  %6s  %6s", "N/A", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    printf("  %9.2f  %7.2f  %7.2f", r->median_us, r->algbw_gbps, r->busbw_gbps);
    if (r->checked)
        printf("  %6llu", (unsigned long long)r->wrong);
    else
        printf("  %6s", "N/A");
    if (r->sm_blocks >= 0)
        printf("  %6.1f", r->sm_blocks);
    else
        printf("  %6s", "-");
}

static void write_json(const bench_t *b, coll_t coll, size_t total, const char *type,
                       const char *redop, int root, bool inplace, const result_t *r)
{
    if (!b->json || !r->valid)
        return;
    fprintf(b->json,
            "{\"coll\":\"%s\",\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\","
            "\"root\":%d,\"inplace\":%d,\"time_us\":%.3f,\"time_min_us\":%.3f,"
            "\"time_avg_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,",
            colls[coll].name, total * b->dt->size, total, type, redop, root, inplace ? 1 : 0,
            r->median_us, r->min_us, r->avg_us, r->algbw_gbps, r->busbw_gbps);
    if (r->checked)
        fprintf(b->json, "\"wrong\":%llu,", (unsigned long long)r->wrong);
    else
        fprintf(b->json, "\"wrong\":null,");
    if (r->sm_blocks >= 0)
        fprintf(b->json, "\"sm_blocks\":%.2f,\"copy_engine\":%.3f,", r->sm_blocks, r->copy_engine);
    else
        fprintf(b->json, "\"sm_blocks\":null,\"copy_engine\":null,");
    fprintf(b->json,
            "\"ranks\":%d,\"backend\":\"%s\",\"registration\":\"%s\",\"buffers\":\"%s\","
            "\"workers\":%d,\"iters\":%d,\"warmup\":%d,\"check\":%d,\"version\":\"%d.%d.%d\","
            "\"library\":\"%s\"}\n",
            b->nranks, backend_names[weft_comm_backend(b->comm)],
            registration_names[b->registration], b->opt.weft_buffers ? "weft" : "malloc",
            b->workers, b->opt.iters, b->opt.warmup, b->opt.check ? 1 : 0, WEFT_VERSION_MAJOR,
            WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, LIBRARY_NAME);
    fflush(b->json);
}

/* Run and print every size of one collective. Returns 0, or -1 after a failed call. */
static int bench_coll(bench_t *b, coll_t coll)
{
    const coll_info_t *ci = &colls[coll];
    const char *type = coll == COLL_BARRIER ? "none" : b->dt->name;
    const char *redop = ci->reduces ? redop_names[b->opt.op] : "none";
    int root = ci->rooted ? b->opt.root : -1;
    size_t n = (size_t)b->nranks, es = b->dt->size;
    if (b->rank == 0)
        print_header(b, coll);

    size_t bytes = coll == COLL_BARRIER ? 0 : b->opt.min_bytes;
    for (;;) {
        size_t total = bytes / es;
        if (ci->per_rank)
            total = total / n * n;
        if (coll == COLL_ALL_TO_ALLV) {
            data_spec_t spec = data_spec(b);
            a2av_setup(&spec, total / n, &b->a2av);
        }
        result_t res[2] = {{0}, {0}};
        for (int p = 0; p < 2; p++) {
            bool inplace = p == 1;
            if (!(inplace ? b->opt.run_inplace : b->opt.run_outofplace))
                continue;
            if (inplace && !ci->has_inplace)
                continue;
            if (measure(b, coll, total, inplace, &res[p]) != 0)
                return -1;
        }
        if (b->rank == 0) {
            printf("  %10zu  %12zu  %8s  %6s  %6d", total * es, total, type, redop, root);
            for (int p = 0; p < 2; p++) {
                if (!(p ? b->opt.run_inplace : b->opt.run_outofplace))
                    continue;
                print_result(&res[p]);
                write_json(b, coll, total, type, redop, root, p == 1, &res[p]);
                if (res[p].valid && ci->busbw_kind >= 0) {
                    b->busbw_sum += res[p].busbw_gbps;
                    b->busbw_rows++;
                }
            }
            printf("\n");
            fflush(stdout);
        }
        if (coll == COLL_BARRIER || bytes > b->opt.max_bytes / b->opt.factor)
            break;
        bytes *= b->opt.factor;
        if (bytes == 0)
            break;
    }
    return 0;
}

static void print_stats(const bench_t *b)
{
    weft_stats_t st;
    weft_status_t s = weft_get_stats(b->comm, &st);
    if (s != WEFT_SUCCESS) {
        printf("# weft_get_stats failed: %s: %s\n", weft_status_string(s), weft_last_error());
        return;
    }
    printf("#\n# weft_get_stats of rank 0 (weft-bench issued %llu timed calls and %llu others:\n"
           "# warm-ups, barriers, verified calls, reductions of the results)\n",
           (unsigned long long)b->timed_calls, (unsigned long long)b->other_calls);
    printf("#   registrations started/completed : %llu / %llu (%llu bytes)\n",
           (unsigned long long)st.registrations_started,
           (unsigned long long)st.registrations_completed, (unsigned long long)st.bytes_registered);
    printf("#   first-use waits                 : %llu (%.3f ms in total)\n",
           (unsigned long long)st.first_use_waits, (double)st.first_use_wait_ns / 1e6);
    printf("#   zero-copy / staged operations   : %llu / %llu\n",
           (unsigned long long)st.zero_copy_ops, (unsigned long long)st.staged_ops);
    printf("#   copy-engine operations          : %llu (SM blocks of all: %llu)\n",
           (unsigned long long)st.copy_engine_ops, (unsigned long long)st.sm_blocks);
    printf("#   peer mappings                   : %llu\n", (unsigned long long)st.peer_mappings);
    printf("#   staging scratch                 : %llu bytes\n",
           (unsigned long long)st.staging_bytes);
}

/* ---------------------------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------------------------- */

/* Allocate one data buffer of bytes (the buffers the collectives get: on the CUDA backend device
 * memory, from cudaMalloc for --buffers malloc). Returns 0, or -1 after printing the failure. */
static int alloc_buffer(bench_t *b, size_t bytes, char **out)
{
    void *p = NULL;
#ifdef WEFT_HAVE_CUDA
    if (b->cuda && !b->opt.weft_buffers) {
        cudaError_t err = cudaMalloc(&p, bytes);
        if (err != cudaSuccess) {
            fprintf(stderr, "weft-bench: rank %d: cudaMalloc(%zu) failed: %s\n", b->rank, bytes,
                    cudaGetErrorString(err));
            return -1;
        }
        *out = p;
        return 0;
    }
#endif
    if (b->opt.weft_buffers) {
        weft_status_t s = weft_malloc(b->comm, &p, bytes);
        if (s != WEFT_SUCCESS) {
            fprintf(stderr, "weft-bench: rank %d: weft_malloc(%zu) failed: %s: %s\n", b->rank,
                    bytes, weft_status_string(s), weft_last_error());
            return -1;
        }
    } else {
        int err = posix_memalign(&p, MALLOC_ALIGN, bytes);
        if (err != 0) {
            fprintf(stderr, "weft-bench: rank %d: posix_memalign(%zu) failed: %s\n", b->rank, bytes,
                    strerror(err));
            return -1;
        }
    }
    *out = p;
    return 0;
}

/* Allocate everything after the communicator exists. Returns 0 or -1 (printed). */
static int bench_setup(bench_t *b)
{
    size_t es = b->dt->size;
    size_t n = (size_t)b->nranks;
    bool sized = false; /* a collective that moves data is selected */
    for (int c = 0; c < COLL_BARRIER; c++)
        sized = sized || b->opt.coll_selected[c];
    b->buf_bytes = sized ? (b->opt.max_bytes / es) * es : 0;
    if (b->buf_bytes < n * es)
        b->buf_bytes = n * es; /* room for one element per rank, and never 0 */

    b->times_ns = calloc((size_t)b->opt.iters, sizeof *b->times_ns);
    b->a2av.sendcounts = calloc(4 * n, sizeof(size_t));
    if (!b->times_ns || !b->a2av.sendcounts) {
        fprintf(stderr, "weft-bench: rank %d: out of memory\n", b->rank);
        return -1;
    }
    b->a2av.sdispls = b->a2av.sendcounts + n;
    b->a2av.recvcounts = b->a2av.sendcounts + 2 * n;
    b->a2av.rdispls = b->a2av.sendcounts + 3 * n;

    void *meta = NULL;
    weft_status_t s = weft_malloc(b->comm, &meta, META_VALUES * sizeof(double));
    if (s != WEFT_SUCCESS) {
        fprintf(stderr, "weft-bench: rank %d: weft_malloc of the result buffer failed: %s: %s\n",
                b->rank, weft_status_string(s), weft_last_error());
        return -1;
    }
    b->dmeta = meta;
    if (alloc_buffer(b, b->buf_bytes, &b->dsend) != 0 ||
        alloc_buffer(b, b->buf_bytes, &b->drecv) != 0)
        return -1;
    if (b->cuda) { /* host mirrors */
        b->meta = malloc(META_VALUES * sizeof(double));
        b->sendbuf = malloc(b->buf_bytes);
        b->recvbuf = malloc(b->buf_bytes);
        if (!b->meta || !b->sendbuf || !b->recvbuf) {
            fprintf(stderr, "weft-bench: rank %d: out of memory\n", b->rank);
            return -1;
        }
    } else {
        b->meta = b->dmeta;
        b->sendbuf = b->dsend;
        b->recvbuf = b->drecv;
    }
    if (b->opt.check && !(b->before = malloc(b->buf_bytes))) {
        fprintf(stderr, "weft-bench: rank %d: out of memory\n", b->rank);
        return -1;
    }
    /* First touch outside the timed region; small integers keep every dtype finite. */
    data_spec_t spec = data_spec(b);
    for (size_t i = 0; i < b->buf_bytes / es; i++) {
        encode(b->opt.dtype, copy_value(&spec, b->rank, i), b->sendbuf + i * es);
        encode(b->opt.dtype, copy_value(&spec, b->rank, i), b->recvbuf + i * es);
    }
    if (dev_copy(b, b->dsend, b->sendbuf, b->buf_bytes) != 0 ||
        dev_copy(b, b->drecv, b->recvbuf, b->buf_bytes) != 0)
        return -1;

    if (b->rank == 0 && b->opt.json_path) {
        b->json = fopen(b->opt.json_path, "a");
        if (!b->json) {
            fprintf(stderr, "weft-bench: cannot open %s: %s\n", b->opt.json_path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* One untimed all-reduce over the whole send and receive buffers before the sweep: it waits for
 * their background registration (a first-use wait, counted in the statistics), so that neither
 * that wait nor the registration work lands in the timings of the first size. Collective.
 * Returns 0, or -1 after printing a failed call. */
static int bench_settle(bench_t *b)
{
    size_t total = b->buf_bytes / b->dt->size;
    weft_status_t s =
        weft_all_reduce(b->comm, b->dsend, b->drecv, total, b->opt.dtype, WEFT_MAX, b->stream);
    if (s == WEFT_SUCCESS && dev_sync(b) != 0)
        s = WEFT_ERR_CUDA;
    if (s != WEFT_SUCCESS)
        return report_failure(b, "weft_all_reduce over the whole buffers", COLL_ALL_REDUCE, total,
                              s);
    b->other_calls++;
    return 0;
}

/* Free what bench_setup allocated (any prefix of it). With comm_usable false (after an error
 * or abort) the weft_malloc'ed memory is left to weft_comm_destroy, which frees it. */
static void bench_teardown(bench_t *b, bool comm_usable)
{
    if (b->json)
        fclose(b->json);
    free(b->before);
    if (b->cuda) {
        free(b->meta);
        free(b->recvbuf);
        free(b->sendbuf);
    }
    if (b->opt.weft_buffers && comm_usable) {
        (void)weft_free(b->comm, b->drecv);
        (void)weft_free(b->comm, b->dsend);
    } else if (!b->opt.weft_buffers && !b->cuda) {
        free(b->drecv);
        free(b->dsend);
    }
#ifdef WEFT_BENCH_NCCL
    bench_nccl_destroy(b->nccl, !comm_usable);
#endif
#ifdef WEFT_HAVE_CUDA
    if (!b->opt.weft_buffers && b->cuda) {
        cudaFree(b->drecv);
        cudaFree(b->dsend);
    }
    if (b->stream)
        cudaStreamDestroy((cudaStream_t)b->stream);
#endif
    if (comm_usable)
        (void)weft_free(b->comm, b->dmeta);
    free(b->a2av.sendcounts);
    free(b->times_ns);
}

int main(int argc, char **argv)
{
    bench_t b = {0};
    int rc = bench_parse_args(argc, argv, &b.opt);
    if (rc != 0) {
        bench_usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    b.dt = &dtypes[b.opt.dtype];

    weft_config_t cfg;
    weft_config_default(&cfg);
    if (b.opt.backend_set)
        cfg.backend = b.opt.backend;
    if (b.opt.registration_set)
        cfg.registration = b.opt.registration;
    b.registration = cfg.registration;
    b.workers = cfg.host_workers;
    weft_status_t s = weft_comm_init(&b.comm, &cfg);
    if (s != WEFT_SUCCESS) {
        fprintf(stderr, "weft-bench: weft_comm_init failed: %s: %s\n", weft_status_string(s),
                weft_last_error());
        return 1;
    }
    b.rank = weft_comm_rank(b.comm);
    b.nranks = weft_comm_size(b.comm);

    int exit_code = 0;
    if (b.opt.root >= b.nranks) {
        if (b.rank == 0)
            fprintf(stderr, "weft-bench: root %d is not a rank of this %d-rank job\n", b.opt.root,
                    b.nranks);
        exit_code = 2;
        goto out_destroy;
    }
    b.cuda = weft_comm_backend(b.comm) == WEFT_BACKEND_CUDA;
#ifdef WEFT_HAVE_CUDA
    if (b.cuda) {
        cudaStream_t stream;
        cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        if (err != cudaSuccess) {
            fprintf(stderr, "weft-bench: rank %d: cudaStreamCreate: %s\n", b.rank,
                    cudaGetErrorString(err));
            goto out_abort;
        }
        b.stream = stream;
    }
#endif
#ifdef WEFT_BENCH_NCCL
    if (!b.cuda) {
        fprintf(stderr, "weft-bench-nccl: rank %d: the communicator is not on the CUDA backend\n",
                b.rank);
        goto out_abort;
    }
    b.nccl = bench_nccl_init(b.comm, b.stream);
    if (!b.nccl)
        goto out_abort;
#endif
    if (bench_setup(&b) != 0 || bench_settle(&b) != 0)
        goto out_abort;

    if (b.rank == 0) {
        printf("# weft-bench %d.%d.%d: ranks %d, backend %s, registration %s, buffers %s, "
               "workers %d\n",
               WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, b.nranks,
               backend_names[weft_comm_backend(b.comm)], registration_names[b.registration],
               b.opt.weft_buffers ? "weft" : "malloc", b.workers);
        printf("# sizes %zu..%zu bytes x%zu, type %s, redop %s, root %d, iters %d, warmup %d, "
               "check %d\n",
               b.opt.min_bytes, b.opt.max_bytes, b.opt.factor, b.dt->name, redop_names[b.opt.op],
               b.opt.root, b.opt.iters, b.opt.warmup, b.opt.check ? 1 : 0);
        printf("# time: max over ranks of the per-rank median of per-call times\n");
#ifdef WEFT_BENCH_NCCL
        printf("# library under test: %s (weft provides the job, barriers and reductions)\n",
               bench_nccl_version(b.nccl));
#endif
    }
    for (int c = 0; c < NUM_COLLS; c++)
        if (b.opt.coll_selected[c] && bench_coll(&b, (coll_t)c) != 0)
            goto out_abort;

    if (b.rank == 0) {
        printf("#\n# Out of bounds values : %llu %s\n", (unsigned long long)b.wrong_total,
               !b.opt.check          ? "(not checked)"
               : b.wrong_total       ? "FAILED"
               : b.rows_checked == 0 ? "(nothing checked)"
                                     : "OK");
        printf("# Avg bus bandwidth    : %.4f GB/s\n",
               b.busbw_rows ? b.busbw_sum / b.busbw_rows : 0.0);
        print_stats(&b);
    }
    if (b.wrong_total || b.wrong_here) {
        if (b.wrong_here)
            fprintf(stderr, "weft-bench: rank %d: %llu wrong element(s) on this rank\n", b.rank,
                    (unsigned long long)b.wrong_here);
        exit_code = 1;
    }
    bench_teardown(&b, true);
out_destroy:
    s = weft_comm_destroy(b.comm);
    if (s != WEFT_SUCCESS) {
        fprintf(stderr, "weft-bench: rank %d: weft_comm_destroy failed: %s: %s\n", b.rank,
                weft_status_string(s), weft_last_error());
        return 1;
    }
    return exit_code;

out_abort:
    /* Peers blocked in a collective see WEFT_ERR_PEER_LOST instead of waiting out the timeout. */
    (void)weft_comm_abort(b.comm);
    bench_teardown(&b, false);
    (void)weft_comm_destroy(b.comm);
    return 1;
}
