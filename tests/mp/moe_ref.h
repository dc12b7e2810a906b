/*
 * moe_ref.h - the reference model of weft_moe_dispatch and weft_moe_combine shared by the host
 * test (tests/mp/mp_moe.c) and the GPU test (tests/gpu/gpu_moe.c). Part of the harness library
 * weft_mp_harness; written against the public API (weft.h) only, without the library's code.
 *
 * A case's data are a pure function of (seed, case number, rank, index), like every input of the
 * harness: each rank regenerates every rank's routing and computes, on the host, what it must
 * receive (ordered by source rank, then source token; local expert ids or -1; the sender's
 * weights or 0.0f; per-expert counts, one per routing slot that names a local expert) and what
 * combine must return. The values:
 *
 *   x       row t of rank r holds integers in [-8, 8];
 *   weights multiples of 1/8 in [0, 15/8];
 *   y       rank d's combine input for a received token is the token's row times (d + 1),
 *           rounded once to the dtype; in a spread case (moe_shape_t.spread) instead that
 *           times 2^-k (k in [2, 12], per element) plus an offset L on rank 0 and -L on
 *           rank 2 (L = 2^20, 2^16 and 2^14 for float32, bfloat16 and float16), rounded once;
 *   out     out[t] = sum over the ranks d that received t of y_d[t], summed in float32 in
 *           increasing rank order and rounded once to the dtype, 0 for a token sent nowhere.
 *           With the integer y every partial sum is exact, so any order gives the same out; in
 *           a spread case the offsets make float32 sums depend on the order (a small term
 *           added to +-L loses its low bits, on a grid that depends on what it is added to),
 *           and a 16-bit partial sum loses a small term altogether, while the offsets cancel
 *           in a token that ranks 0 and 2 received, so the result keeps those low bits: from
 *           3 ranks, a combine that sums in another order, or rounds each step to 16 bits,
 *           gets some elements wrong (moe_ref_spread_misses counts them for the case).
 *
 * Routings (an expert id per routing slot (t, j)):
 *   uniform     every expert equally likely;
 *   zipf        expert e with weight 1/(e + 1) (Zipf, exponent 1): the first ranks get most;
 *   all_to_one  every expert on one rank (case number mod n);
 *   masked      a third of the slots -1, every fifth token fully masked, the rest uniform.
 * Slots are drawn independently: a token may name an expert twice, and then counts twice in
 * recv_expert_counts (one count per slot), as the host backend does.
 *
 * Buffers are host images, of any alignment (read and written with memcpy): the host test
 * passes its buffers, the GPU test its host mirrors.
 *
 * Thread safety: as harness.h (an mp_ctx_t and a moe_ref_t belong to the test's thread).
 */
#ifndef WEFT_TESTS_MP_MOE_REF_H
#define WEFT_TESTS_MP_MOE_REF_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "weft.h"

/* Ranks the model supports (a token's destinations are one 64-bit mask). */
#define MOE_MAX_RANKS 64

typedef enum {
    MOE_ROUTE_UNIFORM,
    MOE_ROUTE_ZIPF,
    MOE_ROUTE_ALL_TO_ONE,
    MOE_ROUTE_MASKED
} moe_route_t;
#define MOE_NUM_ROUTES 4

/* What a case dispatches. experts is a multiple of the rank count; 1 <= topk <= experts;
 * dt is float32, float16 or bfloat16. */
typedef struct moe_shape {
    size_t tokens[MOE_MAX_RANKS]; /* tokens per rank */
    size_t hidden;
    int topk, experts;
    moe_route_t route;
    weft_dtype_t dt;
    int spread; /* y of the spread kind (above) instead of integers */
} moe_shape_t;

/* The routing of every rank for one case, and what follows from it. */
typedef struct moe_ref {
    moe_shape_t shape;
    int rank, nranks;
    int epr;                       /* experts per rank */
    uint64_t seed, case_id;        /* of the mp_ctx_t at moe_ref_create */
    uint64_t x_round;              /* 0 at create; a dispatch reusing the layout sends new rows:
                                      bump it, and x (hence y and out) is drawn afresh */
    int64_t *idx[MOE_MAX_RANKS];   /* rank r's topk_idx: tokens[r] x topk expert ids */
    float *w[MOE_MAX_RANKS];       /* rank r's topk_weights */
    uint64_t *dest[MOE_MAX_RANKS]; /* bit d of dest[r][t]: rank d receives token t of rank r */
    size_t recv[MOE_MAX_RANKS];    /* tokens each rank receives */
    size_t most;                   /* the largest of recv[] */
    int most_rank;                 /* the first rank that receives `most` */
} moe_ref_t;

const char *moe_route_name(moe_route_t route);

/* Draw the routing of every rank for ctx's current case (seed and case number) and this rank
 * (ctx->rank). Exits 1 (mp_fatal) when out of memory or when the shape is out of the model's
 * range (more than MOE_MAX_RANKS ranks, experts not a multiple of n, topk outside
 * [1, min(experts, 64)], another dtype). Free with moe_ref_destroy. */
void moe_ref_create(mp_ctx_t *ctx, const moe_shape_t *shape, moe_ref_t *ref);
void moe_ref_destroy(moe_ref_t *ref);

/* Whether rank d receives token t of rank r. */
int moe_ref_goes_to(const moe_ref_t *ref, int r, size_t t, int d);

/* Element e of row t of rank r's x. */
float moe_ref_x(const moe_ref_t *ref, int r, size_t t, size_t e);

/* Element i of a buffer of dtype dt (float32, float16, bfloat16): store rounds v to the dtype
 * (nearest even), fetch widens it exactly. */
void moe_ref_store(void *buf, size_t i, weft_dtype_t dt, float v);
float moe_ref_fetch(const void *buf, size_t i, weft_dtype_t dt);

/* This rank's dispatch inputs: x (tokens x hidden elements), topk_idx (tokens x topk int64),
 * topk_weights (tokens x topk float); topk_idx and topk_weights may be NULL (not written). */
void moe_ref_fill_inputs(const moe_ref_t *ref, void *x, void *topk_idx, void *topk_weights);

/* Check that this rank's inputs still hold what moe_ref_fill_inputs wrote (a failure names the
 * first wrong element of each). */
void moe_ref_check_inputs(mp_ctx_t *ctx, const moe_ref_t *ref, const void *x, const void *topk_idx,
                          const void *topk_weights);

/* Element e of rank d's combine input for token t of rank r, as stored in the dtype (above). */
float moe_ref_y(const moe_ref_t *ref, int d, int r, size_t t, size_t e);

/* This rank's combine input: recv[rank] rows, row i = moe_ref_y of received row i. */
void moe_ref_fill_y(const moe_ref_t *ref, void *y);

/* For a spread case, how many elements of this rank's combine output a combine would get
 * wrong that summed in decreasing rank order (*reversed_out) or rounded every partial sum to
 * the dtype (*stepwise_out; 0 for float32, where that is the right sum): with 3 ranks or more
 * and tokens that ranks 0, 1 and 2 receive, both are non-zero for the grid's sizes, so the
 * spread cases can tell those combines from the right one. */
void moe_ref_spread_misses(const moe_ref_t *ref, size_t *reversed_out, size_t *stepwise_out);

/* Check this rank's dispatch outputs: num_recv (the value of *num_recv_tokens) against
 * recv[rank]; rows, local ids and weights of every received token; the E/n per-expert counts;
 * and that rows recv[rank] .. cap - 1 of recv_x, recv_topk_idx and recv_topk_weights kept the
 * harness's poison (cap = the max_recv_tokens of the call, at least recv[rank]). recv_topk_idx,
 * recv_topk_weights and recv_expert_counts may be NULL (a reused layout's optional outputs):
 * then they are not checked. At most three wrong values are printed per check. */
void moe_ref_check_dispatch(mp_ctx_t *ctx, const moe_ref_t *ref, int64_t num_recv,
                            const void *recv_x, const void *recv_topk_idx,
                            const void *recv_topk_weights, const void *recv_expert_counts,
                            size_t cap);

/* Check this rank's combine output (tokens x hidden elements) against the sum of the y rows
 * (moe_ref_fill_y) of the ranks that received each token. */
void moe_ref_check_combine(mp_ctx_t *ctx, const moe_ref_t *ref, const void *out);

/* Handles destroyed on another thread while the test's thread destroys their communicator (a
 * garbage collector's finalizer, say): fill h[] (NULL entries are no-ops), moe_race_start,
 * close the communicator, moe_race_join, which checks that every destroy succeeded. */
enum { MOE_RACE_HANDLES = 16 };

typedef struct moe_race {
    weft_moe_handle_t h[MOE_RACE_HANDLES];
    weft_status_t st[MOE_RACE_HANDLES];
    pthread_t thread;
} moe_race_t;

/* Start the thread, which destroys h[0], h[1], ... in order (mp_fatal if it cannot start). */
void moe_race_start(mp_ctx_t *ctx, moe_race_t *race);
void moe_race_join(mp_ctx_t *ctx, moe_race_t *race);

#endif /* WEFT_TESTS_MP_MOE_REF_H */
