/*
 * handshake.c - entry handshake, mismatch detection and completion signals (see comm.h).
 *
 * Ordering: a sender writes the descriptor (and inline data) with plain stores, then sets the
 * slot's flag with a seq_cst store; a receiver acquires the flag before reading. Signals carry a
 * status word and a note (the cause of an error status) written before their flag. All waits go
 * through weft_flag_wait_all with the operation's wait context, so they end at the deadline or
 * when a peer is lost.
 */
#include <stddef.h>
#include <string.h>

#include "core/comm.h"
#include "util/log.h"

weft_ctrlblk_layout_t weft_ctrlblk_layout(int nranks)
{
    weft_ctrlblk_layout_t l;
    l.slots = WEFT_CACHELINE;
    l.done = l.slots + (size_t)nranks * 2 * sizeof(weft_slot_t);
    l.phase = l.done + (size_t)nranks * sizeof(weft_signal_t);
    l.bytes = l.phase + (size_t)nranks * sizeof(weft_signal_t);
    return l;
}

void weft_hs_post(struct weft_comm *comm, int peer, uint64_t seq, const weft_op_desc_t *desc,
                  const void *data)
{
    weft_slot_t *slot = weft_slot(comm, peer, comm->rank, seq);
    if (desc->flags & WEFT_DESC_INLINE) {
        memcpy(slot->u.in.header, desc, WEFT_DESC_HEADER_BYTES);
        if (desc->inline_bytes > 0)
            memcpy(slot->u.in.data, data, desc->inline_bytes);
    } else {
        slot->u.desc = *desc;
    }
    weft_flag_set(&slot->posted, seq);
}

weft_status_t weft_hs_wait_posted(struct weft_comm *comm, uint64_t seq, weft_wait_ctx_t *ctx)
{
    weft_slot_t *first = weft_slot(comm, comm->rank, 0, seq);
    return weft_flag_wait_all(&first->posted, 2 * sizeof(weft_slot_t), comm->nranks, comm->rank,
                              seq, &comm->wait_policy, weft_comm_check, weft_wait_begin(ctx));
}

static const char *coll_name(uint32_t coll)
{
    static const char *const names[] = {
        "?",          "barrier",     "all_gather",   "reduce_scatter", "all_reduce", "broadcast",
        "all_to_all", "all_to_allv", "comm_destroy", "moe_dispatch",   "moe_combine"};
    return coll < sizeof names / sizeof names[0] ? names[coll] : "?";
}

static int is_moe(uint8_t coll)
{
    return coll == WEFT_COLL_MOE_DISPATCH || coll == WEFT_COLL_MOE_COMBINE;
}

/* The all_to_allv verdict for one direction of a pair: sender sends `sent` elements to
 * receiver, which expects `expected`. */
static weft_status_t pair_mismatch(const char *call, int sender, uint64_t sent, int receiver,
                                   uint64_t expected)
{
    return weft_error(WEFT_ERR_MISMATCH,
                      "%s: rank %d sends %llu elements to rank %d, which expects %llu", call,
                      sender, (unsigned long long)sent, receiver, (unsigned long long)expected);
}

weft_status_t weft_hs_check_match(struct weft_comm *comm, uint64_t seq, const weft_op_desc_t *mine,
                                  const uint64_t *my_pair_send, const uint64_t *my_pair_recv,
                                  const char *call, int *common_out)
{
    if (common_out)
        *common_out = 0;
    /* Common fields first, over every peer: a difference there is seen by every rank. */
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank)
            continue;
        const weft_op_desc_t *d = &weft_slot(comm, comm->rank, p, seq)->u.desc;
        const char *field = NULL;
        if (d->coll != mine->coll) {
            if (common_out)
                *common_out = 1;
            return weft_error(WEFT_ERR_MISMATCH, "%s: rank %d called %s while rank %d called %s",
                              call, comm->rank, coll_name(mine->coll), p, coll_name(d->coll));
        }
        if (d->dtype != mine->dtype)
            field = "dtype";
        else if (d->redop != mine->redop) /* MoE dispatch: the reuse flag (op/moe.h) */
            field = mine->coll == WEFT_COLL_MOE_DISPATCH
                        ? "WEFT_MOE_REUSE (a layout reused on some ranks only)"
                        : "op";
        else if (d->root != mine->root)
            field = "root";
        else if (d->count != mine->count)
            field = "count";
        else if (d->topk != mine->topk)
            field = "topk";
        else if (d->experts != mine->experts)
            field = "num_experts";
        else if (is_moe(mine->coll) && d->layout != mine->layout) /* MoE posts it (not inline) */
            field = "the MoE layout (handles of different dispatches)";
        else if ((d->flags ^ mine->flags) & WEFT_DESC_TWOSHOT)
            field = "the all-reduce form (in place on some ranks only, at a size where the "
                    "in-place and out-of-place forms differ: WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES "
                    "and WEFT_ALLREDUCE_TWOSHOT_BYTES)";
        if (field) {
            if (common_out)
                *common_out = 1;
            return weft_error(WEFT_ERR_MISMATCH, "%s: rank %d and rank %d disagree on %s", call,
                              comm->rank, p, field);
        }
    }
    if (!my_pair_send || !my_pair_recv)
        return WEFT_SUCCESS;
    /* Pair counts (all_to_allv). The digest tells every rank whether some pair differs; the two
     * ranks of that pair also see which (the pair of a rank with itself is checked too, so that
     * it fails like any other pair). The message names the direction that differs, as sender
     * and receiver, so both ranks of the pair word it alike; when both directions differ, each
     * names the one it sends in. */
    uint64_t total = mine->pair_digest;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank)
            total += weft_slot(comm, comm->rank, p, seq)->u.desc.pair_digest;
    if (common_out)
        *common_out = total != 0;
    for (int p = 0; p < comm->nranks; p++) {
        uint64_t their_send = my_pair_send[p], their_recv = my_pair_recv[p];
        if (p != comm->rank) {
            const weft_op_desc_t *d = &weft_slot(comm, comm->rank, p, seq)->u.desc;
            their_send = d->pair_send;
            their_recv = d->pair_recv;
        }
        if (their_recv != my_pair_send[p])
            return pair_mismatch(call, comm->rank, my_pair_send[p], p, their_recv);
        if (their_send != my_pair_recv[p])
            return pair_mismatch(call, p, their_send, comm->rank, my_pair_recv[p]);
    }
    if (total != 0)
        return weft_error(WEFT_ERR_MISMATCH,
                          "%s: the counts of another rank disagree (what a rank sends against "
                          "what its receiver expects, itself as a pair included): the ranks "
                          "concerned name them",
                          call);
    return WEFT_SUCCESS;
}

/* splitmix64's finaliser: a bijection of 64-bit words whose output bits each depend on every
 * input bit. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* H(sender, receiver, count) of the pair digest. */
static uint64_t pair_hash(int sender, int receiver, uint64_t count)
{
    uint64_t pair = ((uint64_t)(uint32_t)sender << 32 | (uint32_t)receiver) + 0x9e3779b97f4a7c15ull;
    return mix64(mix64(pair) ^ mix64(count + 0x632be59bd9b4e019ull));
}

uint64_t weft_hs_pair_digest(int rank, int nranks, const uint64_t *send, const uint64_t *recv)
{
    uint64_t d = 0;
    for (int q = 0; q < nranks; q++)
        d += pair_hash(rank, q, send[q]) - pair_hash(q, rank, recv[q]);
    return d;
}

static weft_signal_t *signal_line(struct weft_comm *comm, int owner, weft_signal_kind_t kind,
                                  int from)
{
    size_t off = kind == WEFT_SIGNAL_DONE ? comm->layout.done : comm->layout.phase;
    return (weft_signal_t *)(comm->blocks[owner] + off) + from;
}

void weft_hs_signal(struct weft_comm *comm, weft_signal_kind_t kind, uint64_t seq,
                    weft_status_t status, const weft_signal_note_t *note)
{
    weft_signal_note_t none = {0, 0, 0};
    if (!note || status == WEFT_SUCCESS)
        note = &none;
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank)
            continue;
        weft_signal_t *s = signal_line(comm, p, kind, comm->rank);
        atomic_store_explicit(&s->status, (uint32_t)status, memory_order_relaxed);
        atomic_store_explicit(&s->note_what, note->what, memory_order_relaxed);
        atomic_store_explicit(&s->note_a, note->a, memory_order_relaxed);
        atomic_store_explicit(&s->note_b, note->b, memory_order_relaxed);
        weft_flag_set(&s->flag, seq);
    }
}

weft_status_t weft_hs_wait_signal(struct weft_comm *comm, weft_signal_kind_t kind, uint64_t seq,
                                  weft_wait_ctx_t *ctx, weft_status_t *peer_status_out)
{
    weft_signal_t *first = signal_line(comm, comm->rank, kind, 0);
    weft_status_t st =
        weft_flag_wait_all(&first->flag, sizeof(weft_signal_t), comm->nranks, comm->rank, seq,
                           &comm->wait_policy, weft_comm_check, weft_wait_begin(ctx));
    if (st != WEFT_SUCCESS || !peer_status_out)
        return st;
    *peer_status_out = WEFT_SUCCESS;
    for (int p = 0; p < comm->nranks; p++) {
        uint32_t s = atomic_load_explicit(&first[p].status, memory_order_relaxed);
        if (p != comm->rank && s != WEFT_SUCCESS) {
            *peer_status_out = (weft_status_t)s;
            break;
        }
    }
    return WEFT_SUCCESS;
}

void weft_hs_signal_note(struct weft_comm *comm, weft_signal_kind_t kind, int peer,
                         weft_status_t *status_out, weft_signal_note_t *note_out)
{
    const weft_signal_t *s = signal_line(comm, comm->rank, kind, peer);
    *status_out = (weft_status_t)atomic_load_explicit(&s->status, memory_order_relaxed);
    *note_out = (weft_signal_note_t){0, 0, 0};
    if (*status_out != WEFT_SUCCESS)
        *note_out =
            (weft_signal_note_t){.what = atomic_load_explicit(&s->note_what, memory_order_relaxed),
                                 .a = atomic_load_explicit(&s->note_a, memory_order_relaxed),
                                 .b = atomic_load_explicit(&s->note_b, memory_order_relaxed)};
}
