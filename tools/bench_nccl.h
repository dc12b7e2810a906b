/*
 * bench_nccl.h - NCCL as the library under test of weft-bench-nccl: the same sweep, timing,
 * verification and output as weft-bench, with each measured call issued through NCCL instead of
 * weft, so the two tables can be joined size by size (bench/gpu_vs_nccl.sh).
 *
 * weft still provides everything around the measured calls: the job (weftrun, torchrun
 * environment), the barriers before timed calls and the reductions of the results; the NCCL
 * communicator is created from a unique id that rank 0 broadcasts with weft. All-to-all(v) is
 * what a PyTorch user gets from NCCL: one group of ncclSend/ncclRecv, one pair per peer.
 *
 * Thread safety: single-threaded, as weft-bench.
 */
#ifndef WEFT_TOOLS_BENCH_NCCL_H
#define WEFT_TOOLS_BENCH_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "bench_data.h"
#include "weft.h"

typedef struct bench_nccl bench_nccl_t;

/* Create the NCCL communicator of the job that comm spans (collective over comm, on the CUDA
 * backend; stream is the cudaStream_t the calls will use). On failure prints why and returns
 * NULL on every rank that saw it (a rank whose NCCL init fails leaves the others to time out in
 * NCCL: call weft_comm_abort on failure). */
bench_nccl_t *bench_nccl_init(weft_comm_t comm, void *stream);

/* "NCCL 2.28.3" (static storage). */
const char *bench_nccl_version(const bench_nccl_t *nccl);

/* Issue coll through NCCL on the stream given at init, with weft's argument conventions: in
 * and out as weft_<coll> takes them (in-place forms included), count as the weft call's count
 * argument (per-rank count for all-gather, reduce-scatter and all-to-all; layout for
 * all-to-allv). Returns WEFT_SUCCESS, WEFT_ERR_UNSUPPORTED for a dtype or redop NCCL lacks, or
 * WEFT_ERR_INTERNAL after printing NCCL's error. Does not wait for the stream. */
weft_status_t bench_nccl_call(bench_nccl_t *nccl, coll_t coll, const void *in, void *out,
                              size_t count, weft_dtype_t dtype, weft_redop_t op, int root,
                              const a2av_layout_t *a2av);

/* Destroy the communicator (NULL: no-op); with abort (after a failure, when peers may be gone)
 * ncclCommAbort, which never waits for them. */
void bench_nccl_destroy(bench_nccl_t *nccl, bool abort);

#endif /* WEFT_TOOLS_BENCH_NCCL_H */
