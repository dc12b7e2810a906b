/*
 * gpu_graph.c - weft collectives captured in a CUDA graph and replayed.
 *
 * Under each registration mode, one sequence is enqueued on the test's stream:
 *   host callback "pre"   writes this execution's inputs into pinned host arrays: execution k
 *                          gets the data of case base + 1 + k (k counts executions, eager or
 *                          replayed, in stream order);
 *   copies                 pinned inputs -> device (weft_malloc input slab, cudaMalloc input);
 *   all_reduce             float32 sum, 4099, out of place (interior weft pointers)
 *   all_gather             int32, 1031 per rank
 *   reduce_scatter         bfloat16 avg, 2053 per rank
 *   all_to_all             uint8, 517 per peer
 *   barrier
 *   all_reduce             float64 max, 1000, in place
 *   broadcast              int64, 777, root n-1 (non-roots pass NULL as sendbuf)
 *   all_reduce             float16 sum, 4099, on cudaMalloc memory (the staged path)
 *   all_reduce             float32 sum, 1M+3 (roa only; two-shot from 3 ranks; checked every
 *                          10th execution)
 *   copies                 device -> pinned outputs (and the inputs back, to check them);
 *   host callback "post"   snapshots the pinned outputs of execution k.
 * It runs once eagerly (warm-up, registration), then is captured (cudaStreamBeginCapture,
 * relaxed mode: weft makes host calls during capture), instantiated and replayed R times back to
 * back; then an eager all_reduce of 64 MiB of cudaMalloc memory, which outgrows the staging
 * scratch the graph's staged calls captured (the replays after it must still find that scratch),
 * and the sequence once more eagerly (non-graph calls after replays), then R2 more replays; one
 * stream synchronisation at the end. Every execution's outputs are then checked
 * exactly against the expected values of its case (the large all_reduce every 10th), inputs of
 * out-of-place calls must be unchanged, and the bytes between buffers must keep their fill.
 */
#include "gpu_harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLAYS 100
#define REPLAYS_AFTER 10
#define QUICK_REPLAYS 20
#define QUICK_REPLAYS_AFTER 5
#define LARGE_EVERY 10
#define REGION_GAP 64
#define REGION_ALIGN 256
#define REGION_SKEW 8 /* region starts are 8- but not 16-byte aligned */
#define POISON_BYTE 0xA5
#define FILL_BYTE 0x5A
#define RAW_AG_BASE 0
#define RAW_A2A_BASE ((uint64_t)1 << 40)
#define RAW_BC_BASE ((uint64_t)2 << 40)
#define LARGE_FIRST ((size_t)1 << 20) /* element index the large input starts at */
#define GROW_BYTES ((size_t)64 << 20) /* the staged all_reduce that outgrows the scratch */

typedef enum {
    G_AR,
    G_AG,
    G_RS,
    G_A2A,
    G_BARRIER,
    G_AR_INPLACE,
    G_BC,
    G_AR_CUDA,
    G_AR_LARGE
} gkind_t;
#define NUM_GOPS 9

typedef struct gop {
    gkind_t kind;
    const char *name;
    weft_dtype_t dt;
    weft_redop_t op;
    size_t count; /* the call's count argument (per peer, per rank, ...) */
} gop_t;

static const gop_t gops[NUM_GOPS] = {
    {G_AR, "all_reduce float32 sum", WEFT_FLOAT32, WEFT_SUM, 4099},
    {G_AG, "all_gather int32", WEFT_INT32, WEFT_SUM, 1031},
    {G_RS, "reduce_scatter bfloat16 avg", WEFT_BFLOAT16, WEFT_AVG, 2053},
    {G_A2A, "all_to_all uint8", WEFT_UINT8, WEFT_SUM, 517},
    {G_BARRIER, "barrier", WEFT_UINT8, WEFT_SUM, 0},
    {G_AR_INPLACE, "all_reduce float64 max in place", WEFT_FLOAT64, WEFT_MAX, 1000},
    {G_BC, "broadcast int64", WEFT_INT64, WEFT_SUM, 777},
    {G_AR_CUDA, "all_reduce float16 sum on cudaMalloc memory", WEFT_FLOAT16, WEFT_SUM, 4099},
    {G_AR_LARGE, "all_reduce float32 sum 1M+3", WEFT_FLOAT32, WEFT_SUM, MP_LARGE_COUNT},
};

/* Where an operation's buffers live: offsets in the input and output areas. The cudaMalloc
 * all-reduce uses its own two areas; the in-place one only the input area. */
typedef struct place {
    size_t in_off, in_bytes;
    size_t out_off, out_bytes;
} place_t;

/* One device area (weft slab or cudaMalloc) with its pinned host images. */
typedef struct area {
    int weft;
    size_t bytes; /* whole area */
    size_t small; /* bytes snapshotted every execution (everything but the large op) */
    unsigned char *dev;
    unsigned char *h_in;   /* pinned: what the pre callback writes, copied to the device */
    unsigned char *h_back; /* pinned: the area copied back after the sequence */
} area_t;

enum { A_WIN, A_WOUT, A_CIN, A_COUT, NUM_AREAS };

typedef struct graph_state {
    mp_ctx_t dctx; /* copy of the context for the callbacks' data (case_id set per execution) */
    uint64_t base_case;
    int large;               /* the large all-reduce is part of the sequence */
    int executions;          /* capacity of the history */
    int next_pre, next_post; /* execution counters of the two callbacks */
    place_t place[NUM_GOPS];
    area_t area[NUM_AREAS];
    unsigned char *hist; /* executions x hist_stride: small parts of every area */
    size_t hist_off[NUM_AREAS], hist_stride;
    unsigned char *large_hist; /* (executions / LARGE_EVERY + 1) x large output bytes */
} graph_state_t;

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Next region start after `end` in an area. */
static size_t next_region(size_t end)
{
    return align_up(end + REGION_GAP, REGION_ALIGN) + REGION_SKEW;
}

/* ---------------------------------------------------------------------------------------------
 * Layout and memory
 * ------------------------------------------------------------------------------------------- */
static void layout(graph_state_t *gs, int n)
{
    size_t win = 0, wout = 0;
    for (int i = 0; i < NUM_GOPS; i++) {
        const gop_t *o = &gops[i];
        place_t *p = &gs->place[i];
        size_t es = mp_dtype_bytes(o->dt), c = o->count, nn = (size_t)n;
        size_t in = 0, out = 0;
        switch (o->kind) {
        case G_AR:
        case G_AR_LARGE:
        case G_BC:
            in = out = c * es;
            break;
        case G_AG:
            in = c * es;
            out = nn * c * es;
            break;
        case G_RS:
            in = nn * c * es;
            out = c * es;
            break;
        case G_A2A:
            in = out = nn * c * es;
            break;
        case G_AR_INPLACE:
            in = c * es;
            break;
        case G_BARRIER:
            break;
        case G_AR_CUDA:
            p->in_off = p->out_off = REGION_SKEW;
            p->in_bytes = p->out_bytes = c * es;
            continue;
        }
        if (o->kind == G_AR_LARGE && !gs->large)
            continue;
        if (in > 0) {
            p->in_off = next_region(win);
            p->in_bytes = in;
            win = p->in_off + in;
        }
        if (out > 0) {
            p->out_off = next_region(wout);
            p->out_bytes = out;
            wout = p->out_off + out;
        }
        if (o->kind == G_AR_LARGE)
            continue;
        gs->area[A_WIN].small = win;
        gs->area[A_WOUT].small = wout;
    }
    gs->area[A_WIN].bytes = win + REGION_GAP;
    gs->area[A_WOUT].bytes = wout + REGION_GAP;
    gs->area[A_WIN].small += REGION_GAP;
    gs->area[A_WOUT].small += REGION_GAP;
    const place_t *pc = &gs->place[G_AR_CUDA];
    gs->area[A_CIN].bytes = gs->area[A_CIN].small = pc->in_off + pc->in_bytes + REGION_GAP;
    gs->area[A_COUT].bytes = gs->area[A_COUT].small = pc->out_off + pc->out_bytes + REGION_GAP;
}

static void areas_create(gpu_ctx_t *g, graph_state_t *gs)
{
    for (int a = 0; a < NUM_AREAS; a++) {
        area_t *ar = &gs->area[a];
        ar->weft = a == A_WIN || a == A_WOUT;
        if (ar->weft) {
            void *p = NULL;
            weft_status_t st = weft_malloc(g->mp.comm, &p, ar->bytes);
            if (st != WEFT_SUCCESS || !p)
                mp_fatal(&g->mp, "weft_malloc(%zu) returned %s: %s", ar->bytes,
                         weft_status_string(st), weft_last_error());
            ar->dev = p;
        } else {
            gpu_cuda_ok(g, cudaMalloc((void **)&ar->dev, ar->bytes), "cudaMalloc");
        }
        gpu_cuda_ok(g, cudaMallocHost((void **)&ar->h_in, ar->bytes), "cudaMallocHost");
        gpu_cuda_ok(g, cudaMallocHost((void **)&ar->h_back, ar->bytes), "cudaMallocHost");
        /* Inputs areas: the fill between regions travels with every copy; outputs: poison. */
        int out = a == A_WOUT || a == A_COUT;
        memset(ar->h_in, FILL_BYTE, ar->bytes);
        memset(ar->h_back, 0, ar->bytes);
        gpu_cuda_ok(g,
                    cudaMemsetAsync(ar->dev, out ? POISON_BYTE : FILL_BYTE, ar->bytes, g->stream),
                    "cudaMemsetAsync");
    }
    size_t off = 0;
    for (int a = 0; a < NUM_AREAS; a++) {
        gs->hist_off[a] = off;
        off += gs->area[a].small;
    }
    gs->hist_stride = off;
    gs->hist = malloc((size_t)gs->executions * off);
    size_t lbytes = gs->large ? gs->place[G_AR_LARGE].out_bytes : 0;
    gs->large_hist = malloc(((size_t)gs->executions / LARGE_EVERY + 1) * (lbytes ? lbytes : 1));
    if (!gs->hist || !gs->large_hist)
        mp_fatal(&g->mp, "out of memory for the execution history");
    gpu_sync(g, "area set-up");
}

static void areas_destroy(gpu_ctx_t *g, graph_state_t *gs)
{
    for (int a = 0; a < NUM_AREAS; a++) {
        area_t *ar = &gs->area[a];
        if (ar->weft)
            mp_ok(&g->mp, weft_free(g->mp.comm, ar->dev), "weft_free");
        else
            gpu_cuda_ok(g, cudaFree(ar->dev), "cudaFree");
        gpu_cuda_ok(g, cudaFreeHost(ar->h_in), "cudaFreeHost");
        gpu_cuda_ok(g, cudaFreeHost(ar->h_back), "cudaFreeHost");
    }
    free(gs->hist);
    free(gs->large_hist);
}

/* ---------------------------------------------------------------------------------------------
 * Host callbacks (run by CUDA's callback thread in stream order; no CUDA calls in here)
 * ------------------------------------------------------------------------------------------- */

/* Write execution k's inputs into the pinned input images. */
static void fill_inputs(graph_state_t *gs, int k)
{
    mp_ctx_t *d = &gs->dctx;
    int me = d->rank, n = d->nranks;
    d->case_id = gs->base_case + 1 + (uint64_t)k;
    unsigned char *win = gs->area[A_WIN].h_in, *cin = gs->area[A_CIN].h_in;
    for (int i = 0; i < NUM_GOPS; i++) {
        const gop_t *o = &gops[i];
        const place_t *p = &gs->place[i];
        size_t c = o->count;
        switch (o->kind) {
        case G_AR:
        case G_AR_INPLACE:
            mp_red_fill(d, o->dt, o->op, me, 0, c, win + p->in_off);
            break;
        case G_AR_LARGE:
            if (gs->large && k % LARGE_EVERY == 0)
                mp_red_fill(d, o->dt, o->op, me, LARGE_FIRST, c, win + p->in_off);
            break;
        case G_RS:
            mp_red_fill(d, o->dt, o->op, me, 0, (size_t)n * c, win + p->in_off);
            break;
        case G_AG:
            mp_raw_fill(d, o->dt, me, RAW_AG_BASE, c, win + p->in_off);
            break;
        case G_A2A:
            mp_raw_fill(d, o->dt, me, RAW_A2A_BASE, (size_t)n * c, win + p->in_off);
            break;
        case G_BC:
            mp_raw_fill(d, o->dt, me, RAW_BC_BASE, c, win + p->in_off);
            break;
        case G_AR_CUDA:
            mp_red_fill(d, o->dt, o->op, me, 0, c, cin + p->in_off);
            break;
        case G_BARRIER:
            break;
        }
    }
}

static void CUDART_CB pre_cb(void *arg)
{
    graph_state_t *gs = arg;
    int k = gs->next_pre++;
    if (k < gs->executions)
        fill_inputs(gs, k);
}

static void CUDART_CB post_cb(void *arg)
{
    graph_state_t *gs = arg;
    int k = gs->next_post++;
    if (k >= gs->executions)
        return;
    unsigned char *h = gs->hist + (size_t)k * gs->hist_stride;
    for (int a = 0; a < NUM_AREAS; a++)
        memcpy(h + gs->hist_off[a], gs->area[a].h_back, gs->area[a].small);
    if (gs->large && k % LARGE_EVERY == 0) {
        const place_t *p = &gs->place[G_AR_LARGE];
        memcpy(gs->large_hist + (size_t)(k / LARGE_EVERY) * p->out_bytes,
               gs->area[A_WOUT].h_back + p->out_off, p->out_bytes);
    }
}

/* ---------------------------------------------------------------------------------------------
 * The sequence
 * ------------------------------------------------------------------------------------------- */
typedef struct issue {
    weft_status_t st; /* first weft failure */
    const char *call; /* ... and its call */
    cudaError_t err;  /* first CUDA failure */
    const char *what;
} issue_t;

static void note_weft(issue_t *is, weft_status_t st, const char *call)
{
    if (st != WEFT_SUCCESS && is->st == WEFT_SUCCESS) {
        is->st = st;
        is->call = call;
    }
}

static void note_cuda(issue_t *is, cudaError_t err, const char *what)
{
    if (err != cudaSuccess && is->err == cudaSuccess) {
        is->err = err;
        is->what = what;
    }
}

/* Enqueue the whole sequence on the stream (eagerly or into a capture). Failures are recorded,
 * not acted on, so that a capture can always be ended. */
static void enqueue(gpu_ctx_t *g, graph_state_t *gs, issue_t *is)
{
    weft_comm_t comm = g->mp.comm;
    cudaStream_t s = g->stream;
    int me = g->mp.rank, n = g->mp.nranks;
    area_t *ar = gs->area;
    unsigned char *win = ar[A_WIN].dev, *wout = ar[A_WOUT].dev;
    note_cuda(is, cudaLaunchHostFunc(s, pre_cb, gs), "cudaLaunchHostFunc(pre)");
    for (int a = 0; a < NUM_AREAS; a++)
        if (a == A_WIN || a == A_CIN)
            note_cuda(
                is, cudaMemcpyAsync(ar[a].dev, ar[a].h_in, ar[a].bytes, cudaMemcpyHostToDevice, s),
                "cudaMemcpyAsync(inputs)");
    for (int i = 0; i < NUM_GOPS; i++) {
        const gop_t *o = &gops[i];
        const place_t *p = &gs->place[i];
        switch (o->kind) {
        case G_AR:
            note_weft(is,
                      weft_all_reduce(comm, win + p->in_off, wout + p->out_off, o->count, o->dt,
                                      o->op, s),
                      "weft_all_reduce");
            break;
        case G_AR_LARGE:
            if (gs->large)
                note_weft(is,
                          weft_all_reduce(comm, win + p->in_off, wout + p->out_off, o->count, o->dt,
                                          o->op, s),
                          "weft_all_reduce (large)");
            break;
        case G_AG:
            note_weft(is,
                      weft_all_gather(comm, win + p->in_off, wout + p->out_off, o->count, o->dt, s),
                      "weft_all_gather");
            break;
        case G_RS:
            note_weft(is,
                      weft_reduce_scatter(comm, win + p->in_off, wout + p->out_off, o->count, o->dt,
                                          o->op, s),
                      "weft_reduce_scatter");
            break;
        case G_A2A:
            note_weft(is,
                      weft_all_to_all(comm, win + p->in_off, wout + p->out_off, o->count, o->dt, s),
                      "weft_all_to_all");
            break;
        case G_BARRIER:
            note_weft(is, weft_barrier(comm, s), "weft_barrier");
            break;
        case G_AR_INPLACE:
            note_weft(
                is,
                weft_all_reduce(comm, win + p->in_off, win + p->in_off, o->count, o->dt, o->op, s),
                "weft_all_reduce (in place)");
            break;
        case G_BC:
            note_weft(is,
                      weft_broadcast(comm, me == n - 1 ? win + p->in_off : NULL, wout + p->out_off,
                                     o->count, o->dt, n - 1, s),
                      "weft_broadcast");
            break;
        case G_AR_CUDA:
            note_weft(is,
                      weft_all_reduce(comm, ar[A_CIN].dev + p->in_off, ar[A_COUT].dev + p->out_off,
                                      o->count, o->dt, o->op, s),
                      "weft_all_reduce (cudaMalloc)");
            break;
        }
    }
    for (int a = 0; a < NUM_AREAS; a++) {
        /* The large output is copied back whole; the rest of every area, its small part. */
        size_t bytes = a == A_WOUT ? ar[a].bytes : ar[a].small;
        note_cuda(is, cudaMemcpyAsync(ar[a].h_back, ar[a].dev, bytes, cudaMemcpyDeviceToHost, s),
                  "cudaMemcpyAsync(outputs)");
    }
    note_cuda(is, cudaLaunchHostFunc(s, post_cb, gs), "cudaLaunchHostFunc(post)");
}

static void issue_check(gpu_ctx_t *g, const issue_t *is, const char *phase)
{
    if (is->err != cudaSuccess)
        mp_fatal(&g->mp, "%s: %s failed: %s: %s", phase, is->what, cudaGetErrorName(is->err),
                 cudaGetErrorString(is->err));
    if (is->st != WEFT_SUCCESS)
        mp_fatal(&g->mp, "%s: %s returned %s: %s", phase, is->call, weft_status_string(is->st),
                 weft_last_error());
}

/* ---------------------------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------------------------- */

/* The bytes of a snapshot area outside the given regions must all be `byte`. */
static void check_between(mp_ctx_t *ctx, const char *area_name, const unsigned char *h,
                          size_t bytes, const size_t *offs, const size_t *lens, int nregions,
                          unsigned char byte)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; i++) {
        int inside = 0;
        for (int r = 0; r < nregions && !inside; r++)
            inside = i >= offs[r] && i < offs[r] + lens[r];
        if (!inside && h[i] != byte && bad++ == 0)
            first = i;
    }
    mp_check(ctx, bad == 0,
             "%s: %zu bytes between the buffers changed (first at offset %zu: 0x%02x, expected "
             "0x%02x)",
             area_name, bad, first, bad ? h[first] : 0, byte);
}

static void check_execution(gpu_ctx_t *g, graph_state_t *gs, int k, const char *phase)
{
    mp_ctx_t *ctx = &g->mp;
    int me = ctx->rank, n = ctx->nranks;
    ctx->case_id = gs->base_case + 1 + (uint64_t)k;
    snprintf(ctx->where, sizeof ctx->where, "graph reg=%s execution %d (%s)", mp_reg_name(ctx->reg),
             k, phase);
    const unsigned char *h = gs->hist + (size_t)k * gs->hist_stride;
    const unsigned char *win = h + gs->hist_off[A_WIN], *wout = h + gs->hist_off[A_WOUT];
    const unsigned char *cin = h + gs->hist_off[A_CIN], *cout = h + gs->hist_off[A_COUT];
    size_t in_offs[NUM_GOPS], in_lens[NUM_GOPS], out_offs[NUM_GOPS], out_lens[NUM_GOPS];
    int nin = 0, nout = 0;
    char what[96];
    for (int i = 0; i < NUM_GOPS; i++) {
        const gop_t *o = &gops[i];
        const place_t *p = &gs->place[i];
        size_t c = o->count, es = mp_dtype_bytes(o->dt);
        switch (o->kind) {
        case G_AR:
            mp_red_check_result(ctx, o->name, wout + p->out_off, o->dt, o->op, 0, c);
            mp_red_check_input(ctx, "all_reduce input", win + p->in_off, o->dt, o->op, me, 0, c);
            break;
        case G_AR_LARGE:
            break; /* checked apart, every LARGE_EVERY executions */
        case G_AR_INPLACE:
            mp_red_check_result(ctx, o->name, win + p->in_off, o->dt, o->op, 0, c);
            break;
        case G_RS:
            mp_red_check_result(ctx, o->name, wout + p->out_off, o->dt, o->op, (size_t)me * c, c);
            mp_red_check_input(ctx, "reduce_scatter input", win + p->in_off, o->dt, o->op, me, 0,
                               (size_t)n * c);
            break;
        case G_AG:
            for (int q = 0; q < n; q++) {
                snprintf(what, sizeof what, "%s block %d", o->name, q);
                mp_raw_check(ctx, what, wout + p->out_off + (size_t)q * c * es, o->dt, q,
                             RAW_AG_BASE, c);
            }
            mp_raw_check(ctx, "all_gather input", win + p->in_off, o->dt, me, RAW_AG_BASE, c);
            break;
        case G_A2A:
            for (int q = 0; q < n; q++) {
                snprintf(what, sizeof what, "%s block from rank %d", o->name, q);
                mp_raw_check(ctx, what, wout + p->out_off + (size_t)q * c * es, o->dt, q,
                             RAW_A2A_BASE + (uint64_t)me * c, c);
            }
            mp_raw_check(ctx, "all_to_all input", win + p->in_off, o->dt, me, RAW_A2A_BASE,
                         (size_t)n * c);
            break;
        case G_BC:
            mp_raw_check(ctx, o->name, wout + p->out_off, o->dt, n - 1, RAW_BC_BASE, c);
            mp_raw_check(ctx, "broadcast input", win + p->in_off, o->dt, me, RAW_BC_BASE, c);
            break;
        case G_AR_CUDA:
            mp_red_check_result(ctx, o->name, cout + p->out_off, o->dt, o->op, 0, c);
            mp_red_check_input(ctx, "cudaMalloc all_reduce input", cin + p->in_off, o->dt, o->op,
                               me, 0, c);
            break;
        case G_BARRIER:
            break;
        }
        if (o->kind == G_AR_LARGE || o->kind == G_AR_CUDA || o->kind == G_BARRIER)
            continue;
        if (p->in_bytes > 0) {
            in_offs[nin] = p->in_off;
            in_lens[nin++] = p->in_bytes;
        }
        if (p->out_bytes > 0) {
            out_offs[nout] = p->out_off;
            out_lens[nout++] = p->out_bytes;
        }
    }
    check_between(ctx, "weft input area", win, gs->area[A_WIN].small, in_offs, in_lens, nin,
                  FILL_BYTE);
    check_between(ctx, "weft output area", wout, gs->area[A_WOUT].small, out_offs, out_lens, nout,
                  POISON_BYTE);
    const place_t *pc = &gs->place[G_AR_CUDA];
    check_between(ctx, "cudaMalloc input area", cin, gs->area[A_CIN].small, &pc->in_off,
                  &pc->in_bytes, 1, FILL_BYTE);
    check_between(ctx, "cudaMalloc output area", cout, gs->area[A_COUT].small, &pc->out_off,
                  &pc->out_bytes, 1, POISON_BYTE);
    if (gs->large && k % LARGE_EVERY == 0) {
        const gop_t *o = &gops[G_AR_LARGE];
        const place_t *p = &gs->place[G_AR_LARGE];
        mp_red_check_result(ctx, o->name, gs->large_hist + (size_t)(k / LARGE_EVERY) * p->out_bytes,
                            o->dt, o->op, LARGE_FIRST, o->count);
    }
}

/* ---------------------------------------------------------------------------------------------
 * One registration mode
 * ------------------------------------------------------------------------------------------- */
/* An all_reduce (float32 sum, out of place) of GROW_BYTES of cudaMalloc memory on the stream,
 * staged through a scratch larger than any before: zeros in, an output poisoned with 0xFF must
 * come back zero. Frees its buffers after synchronising. */
typedef struct grow_call {
    void *in, *out;
} grow_call_t;

static void grow_enqueue(gpu_ctx_t *g, grow_call_t *gc)
{
    gpu_cuda_ok(g, cudaMalloc(&gc->in, GROW_BYTES), "cudaMalloc (grow input)");
    gpu_cuda_ok(g, cudaMalloc(&gc->out, GROW_BYTES), "cudaMalloc (grow output)");
    gpu_cuda_ok(g, cudaMemsetAsync(gc->in, 0, GROW_BYTES, g->stream), "cudaMemsetAsync");
    gpu_cuda_ok(g, cudaMemsetAsync(gc->out, 0xFF, GROW_BYTES, g->stream), "cudaMemsetAsync");
    mp_ok(&g->mp,
          weft_all_reduce(g->mp.comm, gc->in, gc->out, GROW_BYTES / 4, WEFT_FLOAT32, WEFT_SUM,
                          g->stream),
          "weft_all_reduce (outgrowing the staging scratch)");
}

static void grow_check(gpu_ctx_t *g, grow_call_t *gc)
{
    unsigned char *h = malloc(GROW_BYTES);
    if (!h)
        mp_fatal(&g->mp, "out of memory");
    gpu_d2h(g, h, gc->out, GROW_BYTES);
    size_t bad = 0;
    for (size_t i = 0; i < GROW_BYTES; i++)
        bad += h[i] != 0;
    mp_check(&g->mp, bad == 0, "all_reduce outgrowing the scratch: %zu of %zu bytes not zero", bad,
             GROW_BYTES);
    free(h);
    gpu_cuda_ok(g, cudaFree(gc->in), "cudaFree");
    gpu_cuda_ok(g, cudaFree(gc->out), "cudaFree");
}

static void run_mode(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    int replays = ctx->quick ? QUICK_REPLAYS : REPLAYS;
    int after = ctx->quick ? QUICK_REPLAYS_AFTER : REPLAYS_AFTER;
    gpu_comm_open(g, reg);
    graph_state_t *gs = calloc(1, sizeof *gs);
    if (!gs)
        mp_fatal(ctx, "out of memory");
    gs->large = reg == WEFT_REGISTRATION_ROA && !ctx->quick;
    gs->executions = 1 + replays + 1 + after;
    layout(gs, ctx->nranks);
    areas_create(g, gs);
    gs->dctx = *ctx;
    gs->base_case = ctx->case_id;
    mp_case(ctx, "graph reg=%s: eager warm-up", mp_reg_name(reg));

    /* Execution 0: eager (registers the buffers, grows nothing later). */
    issue_t is = {0};
    enqueue(g, gs, &is);
    issue_check(g, &is, "eager warm-up");
    gpu_sync(g, "eager warm-up");

    /* Capture. */
    snprintf(ctx->where, sizeof ctx->where, "graph reg=%s: capture", mp_reg_name(reg));
    gpu_cuda_ok(g, cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed),
                "cudaStreamBeginCapture(relaxed)");
    enqueue(g, gs, &is);
    cudaGraph_t graph = NULL;
    cudaError_t end = cudaStreamEndCapture(g->stream, &graph);
    issue_check(g, &is, "capture");
    gpu_cuda_ok(g, end, "cudaStreamEndCapture");
    if (!graph)
        mp_fatal(ctx, "cudaStreamEndCapture returned no graph");
    size_t nodes = 0;
    gpu_cuda_ok(g, cudaGraphGetNodes(graph, NULL, &nodes), "cudaGraphGetNodes");
    cudaGraphExec_t exec = NULL;
    gpu_cuda_ok(g, cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    mp_note(ctx, "reg=%s: captured %zu graph nodes; %d replays, an eager run, %d replays",
            mp_reg_name(reg), nodes, replays, after);

    /* Replays, an eager execution, replays: back to back, one synchronisation. */
    snprintf(ctx->where, sizeof ctx->where, "graph reg=%s: replays", mp_reg_name(reg));
    for (int r = 0; r < replays; r++)
        gpu_cuda_ok(g, cudaGraphLaunch(exec, g->stream), "cudaGraphLaunch");
    grow_call_t grow;
    grow_enqueue(g, &grow);
    enqueue(g, gs, &is);
    issue_check(g, &is, "eager run after the replays");
    for (int r = 0; r < after; r++)
        gpu_cuda_ok(g, cudaGraphLaunch(exec, g->stream), "cudaGraphLaunch");
    gpu_sync(g, "replays");
    grow_check(g, &grow);
    mp_check(ctx, gs->next_pre == gs->executions && gs->next_post == gs->executions,
             "the host callbacks ran %d and %d times, expected %d executions", gs->next_pre,
             gs->next_post, gs->executions);

    for (int k = 0; k < gs->executions; k++) {
        const char *phase = k == 0             ? "eager warm-up"
                            : k <= replays     ? "replay"
                            : k == replays + 1 ? "eager after the replays"
                                               : "replay after the eager run";
        check_execution(g, gs, k, phase);
    }
    ctx->case_id = gs->base_case + (uint64_t)gs->executions;

    gpu_cuda_ok(g, cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    gpu_cuda_ok(g, cudaGraphDestroy(graph), "cudaGraphDestroy");
    /* The communicator still works after the graph is gone; a kernel failure during the
     * replays would surface here too. */
    mp_case(ctx, "barrier after the graph reg=%s", mp_reg_name(reg));
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "barrier after the graph");
    areas_destroy(g, gs);
    free(gs);
    mp_comm_close(ctx);
}

int main(void)
{
    gpu_ctx_t g;
    gpu_init(&g, "gpu_graph");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++)
        run_mode(&g, (weft_registration_t)reg);
    return gpu_finish(&g);
}
