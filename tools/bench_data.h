/*
 * bench_data.h - weft-bench's exactly verifiable data: what each rank's inputs are, and what the
 * right answer of each collective is.
 *
 * Every value is an integer, stored exactly in every dtype (16-bit floats included), and chosen
 * so that every partial result of a reduction, in any order of combination, stays exact in the
 * type the reduction computes in (integers past their limit: exact modulo 2^bits, as they wrap)
 * (float32 for the 16-bit floats, whose SUM and AVG inputs are chosen so that their partial sums
 * are not exact in 16 bits): a verified call can then be compared with its expected result bit for
 * bit. Nothing here calls weft or touches a device; the buffers are host memory. Pure computation:
 * thread-safe.
 */
#ifndef WEFT_TOOLS_BENCH_DATA_H
#define WEFT_TOOLS_BENCH_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* The collectives weft-bench measures. */
typedef enum {
    COLL_ALL_REDUCE,
    COLL_ALL_GATHER,
    COLL_REDUCE_SCATTER,
    COLL_BROADCAST,
    COLL_ALL_TO_ALL,
    COLL_ALL_TO_ALLV,
    COLL_BARRIER,
    NUM_COLLS
} coll_t;

typedef struct dtype_info {
    const char *name;  /* nccl-tests name, printed */
    const char *alias; /* weft name, also accepted */
    size_t size;
    bool is_signed; /* floats count as signed */
    int64_t limit;  /* largest magnitude every partial result may reach and stay exact */
} dtype_info_t;

/* One row per weft_dtype_t, indexed by it. */
extern const dtype_info_t dtypes[WEFT_NUM_DTYPES];

/* What determines the inputs and expected results of a verified call on one rank. */
typedef struct data_spec {
    weft_dtype_t dtype;
    weft_redop_t op; /* of the reductions */
    int root;        /* of broadcast */
    int rank;        /* the rank whose inputs are written and whose outputs are checked */
    int nranks;      /* at least 1 */
} data_spec_t;

/* Counts and displacements (in elements) of one rank's all-to-allv: nranks entries each, owned
 * by the caller. */
typedef struct a2av_layout {
    size_t *sendcounts, *sdispls;
    size_t *recvcounts, *rdispls;
} a2av_layout_t;

/* Store the integer v as one element of dtype at dst (dtypes[dtype].size bytes, any alignment).
 * v must be exactly representable in dtype (true of every value this module produces); 16-bit
 * floats are rounded to nearest even. */
void encode(weft_dtype_t dtype, int64_t v, void *dst);

/* Element i of rank r's input to a copy collective (all-gather, broadcast, all-to-all(v)): a
 * small integer that depends only on (r, i) and whether spec's dtype is signed. */
int64_t copy_value(const data_spec_t *spec, int r, size_t i);

/* Fill *layout for spec's rank with per elements per rank on average: rank s sends
 * f((d - s) mod n) elements to rank d, with f(j) = floor(2 * per * (j + 1) / (n + 1)) and the
 * rounding remainder on f(n - 1), so every row and column sums to n * per (the all-to-all
 * total) with a skew of about n:1 between the smallest and largest block. Displacements are
 * packed in rank order. */
void a2av_setup(const data_spec_t *spec, size_t per, a2av_layout_t *layout);

/* Verified calls per size for dtype: 2 for one-byte dtypes, whose exact result can be the first
 * poison byte (a uint8 sum, say: an output left unwritten would then pass), else 1 (no exact
 * result of a wider element this module makes repeats a poison byte). */
int verify_passes(weft_dtype_t dtype);

/* The byte fill_inputs writes over the outputs for verified call `pass` of a size (0xA5, then
 * 0x5A). */
unsigned char verify_poison(int pass);

/* Write spec's rank's inputs for one verified call of coll (a collective that moves data, not
 * COLL_BARRIER) over a full buffer of total elements (a multiple of nranks for the per-rank
 * collectives; for all-to-allv, the layout a2av_setup made for total / nranks) into the host
 * buffers sendbuf and recvbuf, each of at least total elements, after filling the first total
 * elements of recvbuf with the byte poison. The in-place forms read their inputs where the API
 * says, in recvbuf (reduce-scatter reads sendbuf in both forms). */
void fill_inputs(const data_spec_t *spec, coll_t coll, size_t total, bool inplace, char *sendbuf,
                 char *recvbuf, unsigned char poison);

/* Count the output elements of spec's rank that differ, bit for bit, from the exact result of
 * coll (not COLL_BARRIER) over total elements on the inputs fill_inputs writes. The outputs are
 * read from recvbuf, or for an in-place reduce-scatter from the rank's block of sendbuf; layout
 * is read for COLL_ALL_TO_ALLV only. */
uint64_t verify(const data_spec_t *spec, coll_t coll, size_t total, bool inplace,
                const char *sendbuf, const char *recvbuf, const a2av_layout_t *layout);

#endif /* WEFT_TOOLS_BENCH_DATA_H */
