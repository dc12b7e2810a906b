/*
 * moe_dispatch.c - MoE dispatch over the full mesh (host backend), by pull.
 *
 * Design. A layout pass lists, per destination rank, the indices of this rank's tokens that go
 * there (each token once, in increasing order) and, per listed token, its k expert slots as that
 * destination sees them (local expert id and weight, or -1 and 0.0f for experts owned
 * elsewhere). The lists are written into the registered staging scratch (together with a copy of
 * x when x is not registered), and the handshake posts to each peer the address of its list and
 * its token count. Every rank then knows how many tokens arrive from each peer, hence its
 * receive layout (source rank, then source token); a phase signal agrees on the capacity verdict
 * before anyone writes, so an overflow fails every rank and never overruns a buffer (the
 * signal's note says which check failed and with which numbers, so that every rank's message
 * names the argument and the rank). Finally each
 * rank pulls from every peer that peer's list, its expert slots and the token rows (runs of
 * consecutive tokens coalesced into one slice), as COPY work split over the workers by the
 * partitioner, and the closing signal releases the peers' buffers. The handle keeps the receive
 * side too (source token of every received row, and the received routing), so that a dispatch
 * reusing it (WEFT_MOE_REUSE) stages no lists: it posts x, its pair counts and the number of the
 * dispatch that made the handle (every rank must reuse a handle of that one dispatch), agrees on
 * the verdict (capacity) and pulls rows. Expert ids out of range fail every rank through the
 * same verdict, so that a rank with a bad routing still takes its turn in the exchange.
 *
 * What a rank reads of its peers' dispatch is used only within the bounds it knows: a count
 * posted for it at most that peer's num_tokens (which the descriptor carries), each listed token
 * below it, each received expert slot -1 or a local id. No sound peer writes anything else; a
 * value outside them (a peer's memory that changed under this rank, a peer that gave up) fails
 * the dispatch with WEFT_ERR_PEER_LOST, through the verdict or the closing signal, and is never
 * used as an index.
 *
 * Handles (all backends) are listed on their communicator while the caller holds them, and
 * detached by its destruction (moe.h, "Lifetime"); the list code is here, beside the handle's
 * allocation and release.
 *
 * Thread safety: runs on the communicator's user thread; the workers only read peers' memory and
 * write this rank's outputs. The handle lists and each listed handle's comm and dev are guarded
 * by handles_mu, one process-wide mutex (a handle may be destroyed on another thread while its
 * communicator is being destroyed, so the lock cannot live in the communicator). It is held for
 * list and pointer updates only, never across a device synchronisation: a release that frees
 * device memory counts itself in comm->moe_releases under it, and the detach waits on
 * handles_cv until that count is 0. It is held across fork() from the library's load on
 * (util/forksafe.h), so a child never inherits it locked.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm_cuda.h"
#include "op/moe.h"
#include "op/op.h"
#include "util/forksafe.h"
#include "util/log.h"

static const char call[] = "weft_moe_dispatch";

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* Bytes of one destination's list for c tokens and k slots: tokens, expert ids, weights. */
static size_t list_bytes(size_t c, size_t k)
{
    return align_up(c * sizeof(int64_t) + c * k * sizeof(int64_t) + c * k * sizeof(float), 8);
}

/* The host memory of a handle. */
static void handle_free_host(struct weft_moe_handle *handle)
{
    free(handle->recv_counts);
    free(handle->recv_weights);
    free(handle->recv_idx);
    free(handle->recv_tokens);
    free(handle->send_tokens);
    free(handle->recv_cnt);
    free(handle->recv_off);
    free(handle->send_off);
    free(handle);
}

/* The device memory of a handle of comm: wait_device says whether kernels may still read it.
 * Failures are logged. When the device cannot be waited for (a sticky error, or another thread
 * capturing a CUDA graph in global mode) the memory is left to the communicator's teardown,
 * which frees every allocation after its own synchronisation: kernels may still read it. */
static void handle_free_dev(struct weft_comm *comm, void *dev, int wait_device)
{
    /* Kernels of this process may still read it; peers finished reading it when ours did (each
     * MoE kernel ends with the closing signal). */
    if (wait_device && weft_cuda_synchronize("weft_moe_handle_destroy") != WEFT_SUCCESS) {
        WEFT_LOG_WARN("weft_moe_handle_destroy: %s (its device memory is freed with the "
                      "communicator)",
                      weft_last_error());
        return;
    }
    if (weft_registry_free(comm->registry, dev) != WEFT_SUCCESS)
        WEFT_LOG_WARN("weft_moe_handle_destroy: %s", weft_last_error());
}

/* weft_moe_handle_free and weft_moe_handle_free_unused: a handle never handed to the caller
 * (not listed, so no other thread knows it). */
static void handle_free(struct weft_moe_handle *handle, int wait_device)
{
    if (!handle)
        return;
    if (handle->dev)
        handle_free_dev(handle->comm, handle->dev, wait_device);
    handle_free_host(handle);
}

void weft_moe_handle_free(struct weft_moe_handle *handle)
{
    handle_free(handle, 1);
}

void weft_moe_handle_free_unused(struct weft_moe_handle *handle)
{
    handle_free(handle, 0);
}

/* ---- the handles a caller holds (file comment) ---------------------------------------------- */
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t handles_cv = PTHREAD_COND_INITIALIZER; /* a comm's moe_releases hit 0 */

/* handles_mu is held across every fork from the library's load on (util/forksafe.h). */
__attribute__((constructor)) static void handles_guard(void)
{
    weft_forksafe_guard(&handles_mu, NULL);
}

static void handles_lock(void)
{
    pthread_mutex_lock(&handles_mu);
}

static void handles_unlock(void)
{
    pthread_mutex_unlock(&handles_mu);
}

/* Take h off its communicator's list; under the lock. */
static void handle_unlink(struct weft_moe_handle *h)
{
    if (!h->listed)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        h->comm->moe_handles = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    h->listed = 0;
}

void weft_moe_handle_attach(struct weft_moe_handle *h)
{
    handles_lock();
    h->prev = NULL;
    h->next = h->comm->moe_handles;
    if (h->next)
        h->next->prev = h;
    h->comm->moe_handles = h;
    h->listed = 1;
    handles_unlock();
}

void weft_moe_handles_detach(struct weft_comm *comm)
{
    handles_lock();
    for (struct weft_moe_handle *h = comm->moe_handles, *next; h; h = next) {
        next = h->next;
        h->prev = h->next = NULL;
        h->listed = 0;
        h->comm = NULL;
        h->dev = NULL;
    }
    comm->moe_handles = NULL;
    /* A release on another thread that took its handle off the list before us may still free
     * device memory through comm (after a device synchronisation, which the kernels' deadlines
     * bound); none starts from now. */
    while (comm->moe_releases > 0)
        pthread_cond_wait(&handles_cv, &handles_mu);
    handles_unlock();
}

struct weft_comm *weft_moe_handle_comm(const struct weft_moe_handle *h)
{
    handles_lock();
    struct weft_comm *comm = h->comm;
    handles_unlock();
    return comm;
}

weft_status_t weft_moe_handle_release(struct weft_moe_handle *h)
{
    static const char destroy[] = "weft_moe_handle_destroy";
    handles_lock();
    struct weft_comm *comm = h->comm; /* attached: not freed before we unlock */
    void *dev = h->dev;
    if (comm && dev) {
        /* Freeing device memory reaches the registrar and the device, which a forked child's copy
         * must not touch (a host handle is local memory). */
        weft_status_t st = weft_comm_owned(comm, destroy);
        if (st != WEFT_SUCCESS) {
            handles_unlock();
            return st;
        }
        comm->moe_releases++;
    }
    if (comm)
        handle_unlink(h);
    h->comm = NULL;
    h->dev = NULL;
    handles_unlock();
    weft_status_t st = WEFT_SUCCESS;
    if (comm && dev) {
        /* Only in the communicator's context does the synchronisation wait for the kernels that
         * may read the memory (in another, or in none, it may wait for nothing, or fail). When
         * the switch fails the memory is left to the communicator's teardown, as after a failed
         * synchronisation (handle_free_dev); the switch's error is returned. */
        weft_cuda_prev_t prev = {NULL, 0};
        st = weft_cuda_device_enter(comm, destroy, &prev);
        if (st == WEFT_SUCCESS) {
            handle_free_dev(comm, dev, 1);
            weft_cuda_device_leave(prev);
        }
        handles_lock();
        if (--comm->moe_releases == 0)
            pthread_cond_broadcast(&handles_cv);
        handles_unlock();
    }
    handle_free_host(h);
    return st;
}

/* A handle with its per-rank arrays zeroed, NULL when out of memory. */
static struct weft_moe_handle *handle_alloc(int nranks)
{
    struct weft_moe_handle *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->nranks = nranks;
    h->send_off = calloc((size_t)nranks + 1, sizeof *h->send_off);
    h->recv_off = calloc((size_t)nranks, sizeof *h->recv_off);
    h->recv_cnt = calloc((size_t)nranks, sizeof *h->recv_cnt);
    if (!h->send_off || !h->recv_off || !h->recv_cnt) {
        weft_moe_handle_free(h);
        return NULL;
    }
    return h;
}

/* The checks of a dispatch that fail every rank, as the phase signal's note tells them (so that
 * every rank names the argument and the rank that failed: agree_verdict). */
enum {
    NOTE_EXPERT = 1, /* topk_idx[a] = (int64_t)b is out of range */
    NOTE_CAPACITY    /* the rank would receive a tokens, more than its max_recv_tokens b */
};

/* Every expert id of the routing -1 or in [0, num_experts): else WEFT_ERR_INVALID_ARGUMENT, the
 * first that is not in *note, and no message (agree_verdict words it on every rank). */
static weft_status_t check_routing(const int64_t *topk_idx, size_t num_tokens, int topk,
                                   int num_experts, weft_signal_note_t *note)
{
    for (size_t i = 0; i < num_tokens * (size_t)topk; i++) {
        if (topk_idx[i] < -1 || topk_idx[i] >= num_experts) {
            *note = (weft_signal_note_t){NOTE_EXPERT, i, (uint64_t)topk_idx[i]};
            return WEFT_ERR_INVALID_ARGUMENT;
        }
    }
    return WEFT_SUCCESS;
}

/* The phase signal of a dispatch, with this rank's verdict mine (and its note): every rank
 * returns the same error for the checks that fail every rank, worded the same, naming the
 * argument and the rank (an expert id out of range before a capacity overflow, the lowest rank
 * first: the CUDA backend's gather kernel picks alike). A rank whose own verdict has no note
 * (out of memory, a pair mismatch) returns it, its message recorded where it was found; else
 * the first peer's error is named. */
static weft_status_t agree_verdict(weft_op_t *op, weft_status_t mine,
                                   const weft_signal_note_t *note, int num_experts)
{
    int n = op->comm->nranks;
    weft_status_t status[WEFT_MAX_RANKS];
    weft_signal_note_t notes[WEFT_MAX_RANKS];
    weft_status_t st = weft_op_agree(op, mine, note, status, notes);
    if (st != WEFT_SUCCESS)
        return st;
    if (mine != WEFT_SUCCESS && note->what == 0)
        return mine;
    for (uint32_t what = NOTE_EXPERT; what <= NOTE_CAPACITY; what++) {
        for (int p = 0; p < n; p++) {
            const weft_signal_note_t *w = &notes[p];
            if (status[p] != WEFT_ERR_INVALID_ARGUMENT || w->what != what)
                continue;
            if (what == NOTE_EXPERT)
                return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                  "%s: topk_idx: rank %d's topk_idx[%llu] = %lld is neither -1 "
                                  "nor an expert in [0, %d)",
                                  call, p, (unsigned long long)w->a, (long long)(int64_t)w->b,
                                  num_experts);
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: max_recv_tokens: rank %d would receive %llu tokens, more than "
                              "its max_recv_tokens (%llu)",
                              call, p, (unsigned long long)w->a, (unsigned long long)w->b);
        }
    }
    for (int p = 0; p < n; p++) {
        if (status[p] != WEFT_SUCCESS)
            return weft_error(status[p], "%s: rank %d reported: %s", call, p,
                              weft_status_string(status[p]));
    }
    return WEFT_SUCCESS;
}

/* The layout pass: h->send_off and h->send_tokens from the routing. */
static weft_status_t build_send_lists(struct weft_moe_handle *h, const int64_t *topk_idx,
                                      size_t num_tokens, int topk, int experts_per_rank)
{
    int n = h->nranks;
    int64_t *last = malloc((size_t)n * sizeof *last); /* last token counted per destination */
    size_t *fill = malloc((size_t)n * sizeof *fill);
    if (!last || !fill) {
        free(fill);
        free(last);
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for the layout", call);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int d = 0; d < n; d++) {
            last[d] = -1;
            fill[d] = h->send_off[d];
        }
        for (size_t t = 0; t < num_tokens; t++) {
            for (int j = 0; j < topk; j++) {
                int64_t e = topk_idx[t * (size_t)topk + (size_t)j];
                if (e < 0)
                    continue;
                int d = (int)(e / experts_per_rank);
                if (last[d] == (int64_t)t)
                    continue;
                last[d] = (int64_t)t;
                if (pass == 0)
                    h->send_off[d + 1]++;
                else
                    h->send_tokens[fill[d]++] = (int64_t)t;
            }
        }
        if (pass == 0) {
            for (int d = 0; d < n; d++)
                h->send_off[d + 1] += h->send_off[d];
            h->send_tokens =
                malloc((h->send_off[n] > 0 ? h->send_off[n] : 1) * sizeof *h->send_tokens);
            if (!h->send_tokens) {
                free(fill);
                free(last);
                return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %zu token entries",
                                  call, h->send_off[n]);
            }
        }
    }
    free(fill);
    free(last);
    return WEFT_SUCCESS;
}

/* Write destination d's list at dst: its tokens, then their k expert slots as d sees them. */
static void write_list(const struct weft_moe_handle *h, int d, const int64_t *topk_idx,
                       const float *topk_weights, int topk, int experts_per_rank, uint8_t *dst)
{
    size_t first = h->send_off[d], c = h->send_off[d + 1] - first, k = (size_t)topk;
    int64_t *tokens = (int64_t *)dst;
    int64_t *idx = tokens + c;
    float *w = (float *)(idx + c * k);
    int64_t lo = (int64_t)d * experts_per_rank;
    for (size_t i = 0; i < c; i++) {
        size_t t = (size_t)h->send_tokens[first + i];
        tokens[i] = (int64_t)t;
        for (size_t j = 0; j < k; j++) {
            int64_t e = topk_idx[t * k + j];
            int mine = e >= lo && e < lo + experts_per_rank;
            idx[i * k + j] = mine ? e - lo : -1;
            w[i * k + j] = mine ? topk_weights[t * k + j] : 0.0f;
        }
    }
}

/* COPY work filled slice by slice and run whenever it is full. */
typedef struct gather {
    weft_op_t *op;
    weft_work_t work;
} gather_t;

static weft_status_t gather_add(gather_t *g, int peer, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return WEFT_SUCCESS;
    weft_work_t *w = &g->work;
    if (w->nslices == WEFT_MAX_RANKS) {
        weft_status_t st = weft_op_execute(g->op, w, 0, WEFT_SUCCESS);
        if (st != WEFT_SUCCESS)
            return st;
        w->nslices = 0;
    }
    int i = w->nslices++;
    w->dst[i] = dst;
    w->src[i] = src;
    w->slices[i] = (weft_slice_t){
        .peer = peer, .tier = g->op->comm->peer_tier[peer], .bytes = (uint64_t)bytes};
    return WEFT_SUCCESS;
}

/* Pull peer p's expert slots and weights from its list into their places (a fresh dispatch). */
static weft_status_t gather_slots(gather_t *g, int p, const uint8_t *list, size_t c, size_t off,
                                  size_t k, int64_t *recv_topk_idx, float *recv_topk_weights)
{
    if (c == 0)
        return WEFT_SUCCESS;
    const int64_t *idx = (const int64_t *)list + c;
    const float *w = (const float *)(idx + c * k);
    weft_status_t st = gather_add(g, p, recv_topk_idx + off * k, idx, c * k * sizeof *idx);
    if (st == WEFT_SUCCESS)
        st = gather_add(g, p, recv_topk_weights + off * k, w, c * k * sizeof *w);
    return st;
}

/* Pull the rows of peer p's tokens (h->recv_tokens of its block) from its x, runs of consecutive
 * tokens as one slice. */
static weft_status_t gather_rows(gather_t *g, const struct weft_moe_handle *h, int p,
                                 const uint8_t *xs, size_t row_bytes, void *recv_x)
{
    const int64_t *tokens = h->recv_tokens + h->recv_off[p];
    size_t c = h->recv_cnt[p], off = h->recv_off[p];
    weft_status_t st = WEFT_SUCCESS;
    for (size_t i = 0; i < c && st == WEFT_SUCCESS;) {
        size_t j = i + 1;
        while (j < c && tokens[j] == tokens[j - 1] + 1)
            j++;
        st = gather_add(g, p, (uint8_t *)recv_x + (off + i) * row_bytes,
                        xs + (size_t)tokens[i] * row_bytes, (j - i) * row_bytes);
        i = j;
    }
    return st;
}

/* A fresh dispatch's receive counts and offsets, from the counts the peers posted. A count is
 * the length of a peer's list, so at most the num_tokens it posted: a larger one (which no sound
 * peer posts) is WEFT_ERR_PEER_LOST and never used, so the sum cannot wrap past the capacity
 * check either. */
static weft_status_t receive_counts(struct weft_moe_handle *h, weft_op_t *op,
                                    const uint64_t *pair_send)
{
    int n = h->nranks, me = op->comm->rank;
    for (int p = 0; p < n; p++) {
        const weft_op_desc_t *pd = p == me ? NULL : weft_op_peer(op, p);
        uint64_t c = pd ? pd->pair_send : pair_send[me];
        if (pd && (c > pd->tokens || c > SIZE_MAX - h->num_recv))
            return weft_error(
                WEFT_ERR_PEER_LOST,
                "%s: rank %d posted %llu tokens for rank %d with num_tokens %llu: not a "
                "dispatch's descriptor",
                call, p, (unsigned long long)c, me, (unsigned long long)pd->tokens);
        h->recv_cnt[p] = (size_t)c;
        h->recv_off[p] = h->num_recv;
        h->num_recv += h->recv_cnt[p];
    }
    return WEFT_SUCCESS;
}

/* The tokens rank p listed for rank me (their block of h->recv_tokens, a fresh dispatch's copy
 * of p's list), each in [0, tokens), p's num_tokens: they index p's x. Else WEFT_ERR_PEER_LOST,
 * and no row is read: the list changed under this rank (p's memory no longer holds its
 * dispatch, a peer that gave up) or p is broken. */
static weft_status_t check_tokens(const struct weft_moe_handle *h, int p, int me, uint64_t tokens)
{
    const int64_t *t = h->recv_tokens + h->recv_off[p];
    for (size_t i = 0; i < h->recv_cnt[p]; i++) {
        if (t[i] < 0 || (uint64_t)t[i] >= tokens)
            return weft_error(WEFT_ERR_PEER_LOST,
                              "%s: rank %d's list for rank %d names token %lld, not one of its "
                              "%llu: its memory changed while this rank read it",
                              call, p, me, (long long)t[i], (unsigned long long)tokens);
    }
    return WEFT_SUCCESS;
}

/* The expert slots a fresh dispatch received (recv_topk_idx, copied from the peers' lists), each
 * -1 or a local id in [0, epr): they index recv_counts (routing_outputs). Else
 * WEFT_ERR_PEER_LOST naming the source rank, as check_tokens. */
static weft_status_t check_slots(const struct weft_moe_handle *h, int me,
                                 const int64_t *recv_topk_idx, int epr)
{
    size_t k = (size_t)h->topk;
    if (h->num_recv == 0) /* recv_topk_idx may be NULL */
        return WEFT_SUCCESS;
    for (int p = 0; p < h->nranks; p++) {
        const int64_t *idx = recv_topk_idx + h->recv_off[p] * k;
        for (size_t i = 0; i < h->recv_cnt[p] * k; i++) {
            if (idx[i] < -1 || idx[i] >= epr)
                return weft_error(WEFT_ERR_PEER_LOST,
                                  "%s: rank %d's list for rank %d holds the expert slot %lld, "
                                  "neither -1 nor a local id in [0, %d): its memory changed while "
                                  "this rank read it",
                                  call, p, me, (long long)idx[i], epr);
        }
    }
    return WEFT_SUCCESS;
}

/* Room for the received routing the handle keeps (for a later reuse of the layout); after the
 * capacity check, so that an overflow is never taken for a shortage of memory. */
static weft_status_t receive_alloc(struct weft_moe_handle *h, int epr)
{
    size_t k = (size_t)h->topk;
    size_t rows = h->num_recv > 0 ? h->num_recv : 1;
    h->recv_tokens = malloc(rows * sizeof *h->recv_tokens);
    h->recv_idx = malloc(rows * k * sizeof *h->recv_idx);
    h->recv_weights = malloc(rows * k * sizeof *h->recv_weights);
    h->recv_counts = calloc((size_t)epr, sizeof *h->recv_counts);
    if (!h->recv_tokens || !h->recv_idx || !h->recv_weights || !h->recv_counts)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %zu received tokens", call,
                          h->num_recv);
    return WEFT_SUCCESS;
}

/* The routing outputs: a fresh dispatch keeps what it received in the handle, a reuse writes
 * the handle's (where the caller asked for them). */
static void routing_outputs(struct weft_moe_handle *h, int reuse, int64_t *recv_topk_idx,
                            float *recv_topk_weights, int64_t *recv_expert_counts)
{
    size_t slots = h->num_recv * (size_t)h->topk, epr = (size_t)(h->num_experts / h->nranks);
    if (slots == 0) {
        /* nothing received: only the (zero) counts */
    } else if (!reuse) {
        memcpy(h->recv_idx, recv_topk_idx, slots * sizeof *h->recv_idx);
        memcpy(h->recv_weights, recv_topk_weights, slots * sizeof *h->recv_weights);
        for (size_t i = 0; i < slots; i++) {
            if (h->recv_idx[i] >= 0) /* below epr: check_slots */
                h->recv_counts[h->recv_idx[i]]++;
        }
    } else {
        if (recv_topk_idx)
            memcpy(recv_topk_idx, h->recv_idx, slots * sizeof *h->recv_idx);
        if (recv_topk_weights)
            memcpy(recv_topk_weights, h->recv_weights, slots * sizeof *h->recv_weights);
    }
    if (recv_expert_counts)
        memcpy(recv_expert_counts, h->recv_counts, epr * sizeof *h->recv_counts);
}

weft_status_t weft_moe_dispatch_mesh(struct weft_comm *comm, const void *x, size_t num_tokens,
                                     size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                     const float *topk_weights, int topk, int num_experts,
                                     void *recv_x, int64_t *recv_topk_idx, float *recv_topk_weights,
                                     int64_t *recv_expert_counts, size_t max_recv_tokens,
                                     struct weft_moe_handle *reuse, int64_t *num_recv_out,
                                     struct weft_moe_handle **handle_out)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, NULL, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank, epr = num_experts / n;
    size_t k = (size_t)topk, row_bytes = hidden * weft_dtype_size(dtype);
    size_t x_bytes = num_tokens * row_bytes;

    struct weft_moe_handle *h = reuse;
    weft_status_t routing = WEFT_SUCCESS;
    weft_signal_note_t note = {0, 0, 0}; /* the cause of this rank's verdict (agree_verdict) */
    if (!h) {
        h = handle_alloc(n);
        if (!h)
            return weft_op_end(&op, weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", call), 0);
        h->comm = comm;
        h->num_tokens = num_tokens;
        h->hidden = hidden;
        h->dtype = dtype;
        h->topk = topk;
        h->num_experts = num_experts;
        h->layout = op.seq;
        /* An expert id out of range fails every rank through the verdict below, so this rank
         * still takes its turn in the exchange (with nothing to send). */
        routing = check_routing(topk_idx, num_tokens, topk, num_experts, &note);
        if (routing == WEFT_SUCCESS)
            st = build_send_lists(h, topk_idx, num_tokens, topk, epr);
        if (st != WEFT_SUCCESS)
            goto err;
    }

    /* The staging scratch: x first when it is not registered, then (a fresh dispatch) one list
     * per destination. */
    int x_ready = 1;
    if (x_bytes > 0) {
        st = weft_op_acquire(&op, x, x_bytes, &x_ready);
        if (st != WEFT_SUCCESS)
            goto err;
    }
    size_t list_off[WEFT_MAX_RANKS];
    size_t stage_bytes = x_ready ? 0 : align_up(x_bytes, 64);
    for (int d = 0; d < n; d++) {
        list_off[d] = stage_bytes;
        if (!reuse)
            stage_bytes += list_bytes(h->send_off[d + 1] - h->send_off[d], k);
    }
    uint8_t *stage = NULL;
    const void *x_remote = x;
    if (stage_bytes > 0) {
        int staged = op.staged;
        st = weft_op_stage(&op, stage_bytes, &stage);
        if (st != WEFT_SUCCESS)
            goto err;
        /* The lists alone are metadata: the operation is staged only when x is. */
        op.staged = x_ready ? staged : 1;
        if (!x_ready) {
            memcpy(stage, x, x_bytes);
            x_remote = stage;
        }
        for (int d = 0; d < n && !reuse; d++)
            write_list(h, d, topk_idx, topk_weights, topk, epr, stage + list_off[d]);
    }

    /* A reuse posts both directions' counts of its layout: ranks whose handles come from
     * different dispatches see a pair mismatch, which the phase signal tells everyone. */
    uint64_t list_addr[WEFT_MAX_RANKS], pair_send[WEFT_MAX_RANKS], pair_recv[WEFT_MAX_RANKS];
    for (int d = 0; d < n; d++) {
        list_addr[d] = stage && !reuse ? (uint64_t)(uintptr_t)(stage + list_off[d]) : 0;
        pair_send[d] = h->send_off[d + 1] - h->send_off[d];
        pair_recv[d] = reuse ? h->recv_cnt[d] : 0;
    }
    weft_op_desc_t desc = {.coll = WEFT_COLL_MOE_DISPATCH,
                           .dtype = (uint8_t)dtype,
                           .redop = reuse ? WEFT_MOE_DESC_REUSE : 0,
                           .topk = (uint32_t)topk,
                           .experts = (uint32_t)num_experts,
                           .count = hidden,
                           .aux = (uint64_t)(uintptr_t)x_remote,
                           .tokens = num_tokens,
                           .layout = reuse ? reuse->layout : 0};
    int pair_only = 0;
    st = weft_op_exchange(&op, &desc, list_addr, pair_send, reuse ? pair_recv : NULL, NULL, 0,
                          &pair_only);
    if (st != WEFT_SUCCESS && !pair_only)
        goto err;

    /* The receive layout, and the capacity verdict agreed on before anyone writes. */
    weft_status_t verdict = st != WEFT_SUCCESS ? st : routing;
    if (verdict == WEFT_SUCCESS && !reuse)
        verdict = receive_counts(h, &op, pair_send);
    if (verdict == WEFT_SUCCESS && h->num_recv > max_recv_tokens) {
        verdict = WEFT_ERR_INVALID_ARGUMENT;
        note = (weft_signal_note_t){NOTE_CAPACITY, h->num_recv, max_recv_tokens};
    }
    if (verdict == WEFT_SUCCESS && !reuse)
        verdict = receive_alloc(h, epr);
    st = agree_verdict(&op, verdict, &note, num_experts);
    if (st != WEFT_SUCCESS)
        goto err;

    gather_t *g = malloc(sizeof *g);
    if (!g)
        st = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for the work", call);
    if (g) {
        g->op = &op;
        g->work = (weft_work_t){.kind = WEFT_WORK_COPY};
        for (int p = 0; p < n && st == WEFT_SUCCESS; p++) {
            const weft_op_desc_t *pd = p == me ? NULL : weft_op_peer(&op, p);
            const uint8_t *xs = pd ? (const uint8_t *)(uintptr_t)pd->aux : (const uint8_t *)x;
            if (!reuse && h->recv_cnt[p] > 0) {
                const uint8_t *list = (const uint8_t *)(uintptr_t)(pd ? pd->src : list_addr[me]);
                memcpy(h->recv_tokens + h->recv_off[p], list,
                       h->recv_cnt[p] * sizeof *h->recv_tokens);
                st = check_tokens(h, p, me, pd ? pd->tokens : num_tokens);
                if (st == WEFT_SUCCESS)
                    st = gather_slots(g, p, list, h->recv_cnt[p], h->recv_off[p], k, recv_topk_idx,
                                      recv_topk_weights);
            }
            if (st == WEFT_SUCCESS)
                st = gather_rows(g, h, p, xs, row_bytes, recv_x);
        }
        if (st == WEFT_SUCCESS && g->work.nslices > 0)
            st = weft_op_execute(&op, &g->work, 0, WEFT_SUCCESS);
        if (st == WEFT_SUCCESS && !reuse) /* before the closing signal tells the peers */
            st = check_slots(h, me, recv_topk_idx, epr);
        free(g);
    }
    st = weft_op_execute(&op, NULL, WEFT_SYNC_DONE, st);
    if (st != WEFT_SUCCESS)
        goto err;

    routing_outputs(h, reuse != NULL, recv_topk_idx, recv_topk_weights, recv_expert_counts);
    *num_recv_out = (int64_t)h->num_recv;
    if (!reuse)
        weft_moe_handle_attach(h);
    *handle_out = h;
    return weft_op_end(&op, WEFT_SUCCESS, 0);

err:
    if (!reuse) /* a reused handle is the caller's, and unchanged */
        weft_moe_handle_free(h);
    return weft_op_end(&op, st, 0);
}
