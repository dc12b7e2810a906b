/*
 * moe_cuda.h - the device side of MoE dispatch and combine on the CUDA backend: the layout every
 * rank keeps in its handle's registered device memory, and the C launchers of the kernels of
 * moe_cuda.cu. The op layer (op/moe_dispatch_dev.c, op/moe_combine_dev.c) brackets the
 * kernels that read peers' memory between the communicator's entry and closing signals
 * (weft_cuda_enter / weft_cuda_leave), so they run only while every peer's inputs are complete
 * and nobody moves on before every peer has finished reading.
 *
 * Handle memory of a rank with T tokens, n ranks and k slots (one registered allocation, mapped
 * at the same address on every rank; offsets from weft_moe_dev_layout):
 *
 *   weft_moe_dev_header_t   verdict inputs and outputs, counts, receive layout
 *   pos      int32[T][n]    index of token t in the list for rank d, or -1
 *   list d   (d = 0..n-1)   tokens int64[T], then expert slots int64[T][k] as d sees them (local
 *                           id or -1), then weights float[T][k] (0.0f where the id is -1); the
 *                           first count[d] entries of each are used
 *
 * Peers read a rank's header (counts, bad flag, receive offsets) and lists; only the owner writes
 * them. Everything a kernel needs travels by value in its parameters (graph-capturable: a
 * replay reads the same addresses).
 *
 * Failures. The staging, gather and combine kernels read this rank's failed flag (the device
 * copy of the status word, exec_cuda.h) first and return at once when a kernel of the rank
 * failed before, the entry kernel just ahead of them included: a peer whose entry signal never
 * came may not have written its handle memory, or may have freed it (then it can hold another
 * dispatch's header and lists). They write nothing then, but for the gather's *num_recv_out =
 * -1. Even so, a value read from a peer is used only within the bounds this rank knows from
 * the handshake: a count at most the peer's num_tokens, a listed token below it, a local expert
 * id -1 or in [0, experts_per_rank), a peer's receive block for this rank inside the rows it
 * received and as long as this rank's list for it. A value outside them is never used: the
 * kernel records WEFT_ERR_PEER_LOST as a failed wait does (status word and failed flag: the
 * closing kernel then posts nothing, and the next call returns the status) and the thread, or
 * the block when the value is one every thread needs, stops.
 */
#ifndef WEFT_EXEC_MOE_CUDA_H
#define WEFT_EXEC_MOE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "exec/exec_cuda.h"
#include "weft.h"

typedef struct weft_moe_dev_header {
    uint64_t bad;      /* layout: an expert id outside [-1, E) in this rank's topk_idx */
    uint64_t rejected; /* dispatch verdict: 1 when the dispatch wrote nothing (bad or overflow) */
    int64_t num_recv;  /* tokens received, -1 when rejected */
    uint64_t count[WEFT_CUDA_MAX_RANKS];    /* layout: this rank's tokens for rank d */
    uint64_t recv_off[WEFT_CUDA_MAX_RANKS]; /* dispatch: first row from source p in recv_x */
    uint64_t recv_cnt[WEFT_CUDA_MAX_RANKS]; /* dispatch: rows from source p */
} weft_moe_dev_header_t;

/* Byte offsets inside a rank's handle memory. */
typedef struct {
    size_t pos;        /* int32[T][n] */
    size_t lists;      /* list 0 */
    size_t list_bytes; /* distance between lists d and d + 1 */
    size_t idx;        /* within a list: expert slots */
    size_t weights;    /* within a list: weights */
    size_t total;      /* bytes of the whole handle memory */
} weft_moe_dev_layout_t;

#ifdef __CUDACC__
#define WEFT_MOE_HD __host__ __device__
#else
#define WEFT_MOE_HD
#endif

static inline WEFT_MOE_HD size_t weft_moe_align16(size_t v)
{
    return (v + 15) / 16 * 16;
}

/* The layout for T tokens, n ranks, k slots (pure; every rank computes any peer's, on the host
 * and in kernels). */
static inline WEFT_MOE_HD weft_moe_dev_layout_t weft_moe_dev_layout(size_t tokens, int nranks,
                                                                    int topk)
{
    weft_moe_dev_layout_t l;
    size_t k = (size_t)topk;
    l.pos = weft_moe_align16(sizeof(weft_moe_dev_header_t));
    l.lists = l.pos + weft_moe_align16(tokens * (size_t)nranks * sizeof(int32_t));
    l.idx = weft_moe_align16(tokens * sizeof(int64_t));
    l.weights = l.idx + weft_moe_align16(tokens * k * sizeof(int64_t));
    l.list_bytes = l.weights + weft_moe_align16(tokens * k * sizeof(float));
    l.total = l.lists + (size_t)nranks * l.list_bytes;
    return l;
}

/* weft_moe_dev_layout(tokens, nranks, topk).total when it is at most limit, else 0 (also where
 * the products would overflow): pure, for the host to check a dispatch's shape before asking
 * for its handle memory. limit must be at most 2^60; topk and nranks at least 1. Below the
 * bound each product of weft_moe_dev_layout is at most limit, so it computes without
 * overflow. */
static inline size_t weft_moe_dev_layout_bytes(size_t tokens, int nranks, int topk, size_t limit)
{
    size_t n = (size_t)nranks, k = (size_t)topk;
    if (k > limit / 12 / n) /* then n * 12k <= limit: per token, n * (4 + 8 + 12k) below */
        return 0;
    size_t per_token = n * (4 + 8 + 12 * k);
    if (tokens > limit / per_token)
        return 0;
    size_t total = weft_moe_dev_layout(tokens, nranks, topk).total;
    return total <= limit ? total : 0;
}

/* Why the device rejected a MoE call (weft_moe_dev_report_t.why). */
enum {
    WEFT_MOE_REJECT_CAPACITY = 0, /* dispatch: a rank would receive more than max_recv_tokens */
    WEFT_MOE_REJECT_EXPERT = 1,   /* dispatch: an expert id outside [-1, num_experts) */
    WEFT_MOE_REJECT_Y_NULL = 2    /* combine: a rank that received rows passed y NULL */
};

/* What the mapped report area holds after a rejected dispatch or combine (comm_cuda.h). */
typedef struct weft_moe_dev_report {
    uint32_t count;  /* rejected calls so far (written last) */
    int32_t rank;    /* the rank whose arguments failed the check */
    int32_t why;     /* WEFT_MOE_REJECT_* */
    int32_t experts; /* num_experts of the dispatch (WEFT_MOE_REJECT_EXPERT) */
    uint64_t need;   /* tokens that rank would receive (capacity) or received (y NULL) */
    uint64_t cap;    /* its max_recv_tokens (capacity) */
} weft_moe_dev_report_t;

/* Where a MoE kernel reads whether the rank failed, and records a failure of its own: this rank's
 * control block (its failed flag) and the mapped status word, device pointers (exec_cuda.h). */
typedef struct weft_moe_dev_fail {
    weft_cuda_ctl_t *ctl;
    int32_t *status;
} weft_moe_dev_fail_t;

typedef struct weft_moe_dev_args {
    int32_t rank, nranks, topk, experts_per_rank, num_experts;
    int32_t dtype;
    uint64_t hidden;
    uint64_t tokens[WEFT_CUDA_MAX_RANKS];     /* each rank's T */
    uint64_t capacity[WEFT_CUDA_MAX_RANKS];   /* each rank's max_recv_tokens (dispatch), or its
                                                 handle's capacity: the rows of y it posted
                                                 (combine) */
    uint8_t *base[WEFT_CUDA_MAX_RANKS];       /* each rank's handle memory */
    const uint8_t *rows[WEFT_CUDA_MAX_RANKS]; /* each rank's x (dispatch) or y (combine) */
    /* This rank's arguments. */
    const int64_t *topk_idx;
    const float *topk_weights;
    void *recv_x;
    int64_t *recv_topk_idx;
    float *recv_topk_weights;
    int64_t *recv_expert_counts;
    int64_t *num_recv_out;
    void *out;
    weft_moe_dev_report_t *report; /* mapped host memory (device pointer) */
    weft_moe_dev_fail_t fail;
} weft_moe_dev_args_t;

#ifdef __cplusplus
extern "C" {
#endif

/* Dispatch, before the entry signal: reset the header, build this rank's lists and pos array
 * from topk_idx / topk_weights (n blocks, one per destination), zero recv_expert_counts. */
weft_status_t weft_moe_dev_layout_launch(const weft_moe_dev_args_t *args, void *stream);

/* Dispatch reusing a layout, before the entry signal: zero recv_expert_counts (none when NULL). */
weft_status_t weft_moe_dev_counts_clear(const weft_moe_dev_args_t *args, void *stream);

/* Dispatch, between the signals: every rank's counts give the same verdict everywhere; when
 * accepted, pull every row, expert slot and weight meant for this rank and count per expert
 * (recv_topk_idx, recv_topk_weights, recv_expert_counts: each skipped when NULL); when
 * rejected, write -1 to *num_recv_out and a report, nothing else. After a failure of the rank
 * (the entry kernel's included) it writes -1 to *num_recv_out and nothing else; a peer's count
 * above its num_tokens fails the operation alike, and a listed token or expert id out of
 * bounds stops the thread that reads it (file comment, "Failures"). */
weft_status_t weft_moe_dev_gather_launch(const weft_moe_dev_args_t *args, int nblocks,
                                         void *stream);

/* Combine, before the entry signal: copy this rank's y (the header's num_recv rows of row_bytes)
 * to dst, the registered staging scratch of max_rows rows (the handle's capacity), when y is not
 * registered; on WEFT_MOE_STAGE_BLOCKS blocks. Copies nothing after a failure of the rank (peers
 * may still read the scratch for the operation that failed), and fails the rank with
 * WEFT_ERR_INTERNAL instead of copying when num_recv exceeds max_rows. */
#define WEFT_MOE_STAGE_BLOCKS 32
weft_status_t weft_moe_dev_stage_launch(void *dst, const void *y, const uint8_t *base,
                                        size_t row_bytes, uint64_t max_rows,
                                        weft_moe_dev_fail_t fail, void *stream);

/* Combine, between the signals: out[t] = sum over ranks d that received t of d's row for t
 * (float32 accumulation); zeros for tokens sent nowhere and when the dispatch was rejected. A
 * rank that received rows but posted no y (rows[d] NULL) rejects the combine, alike on every
 * rank: out gets zeros and a report is written (WEFT_MOE_REJECT_Y_NULL). Writes nothing after a
 * failure of the rank, nor when a peer's receive block for this rank is out of bounds (which
 * fails the operation: file comment, "Failures"). */
weft_status_t weft_moe_dev_combine_launch(const weft_moe_dev_args_t *args, int nblocks,
                                          void *stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_EXEC_MOE_CUDA_H */
