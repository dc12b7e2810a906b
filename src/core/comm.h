/*
 * comm.h - the communicator (internal view) and its control blocks.
 *
 * Each rank owns a control block: host memory shared with every peer at communicator creation
 * (ctrlblk.c), into which its peers write. It holds, for every sender p, two handshake slots
 * (indexed by the operation's sequence number modulo 2) and one "done" and one "phase" signal line.
 * Every flag sits on its own cache line, written by exactly one rank.
 *
 * Slot reuse is safe with two slots: rank r writes its slot for operation s + 2 in p's block only
 * after it saw p's slot for s + 1, which p posts only after it finished reading everything of s.
 */
#ifndef WEFT_CORE_COMM_H
#define WEFT_CORE_COMM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/registry.h"
#include "core/window.h"
#include "exec/exec.h"
#include "exec/steal.h"
#include "exec/work.h"
#include "mem/mem.h"
#include "model/cost_model.h"
#include "model/partition.h"
#include "model/plan_cache.h"
#include "util/config.h"
#include "util/wait.h"
#include "weft.h"

struct weft_moe_handle; /* op/moe.h */

#define WEFT_INLINE_MAX 256 /* payload bytes a handshake slot carries */
#define WEFT_CACHELINE 64

/* Collectives as they appear in handshake descriptors. */
typedef enum {
    WEFT_COLL_BARRIER = 1,
    WEFT_COLL_ALL_GATHER,
    WEFT_COLL_REDUCE_SCATTER,
    WEFT_COLL_ALL_REDUCE,
    WEFT_COLL_BROADCAST,
    WEFT_COLL_ALL_TO_ALL,
    WEFT_COLL_ALL_TO_ALLV,
    WEFT_COLL_DESTROY,
    WEFT_COLL_MOE_DISPATCH,
    WEFT_COLL_MOE_COMBINE
} weft_coll_t;

#define WEFT_DESC_INLINE 0x1u /* the payload travels in the slot's data */
/* All-reduce in the two-shot form. Each rank picks its form from its own in-place flag, and the
 * forms cannot meet (their signals differ): ranks must agree on it (weft_hs_check_match). */
#define WEFT_DESC_TWOSHOT 0x2u

/* What a sender tells one receiver about an operation. Fields that all ranks must agree on
 * (coll, dtype, redop, root, count) are compared by the receiver; per-pair fields are compared
 * against the receiver's own view of the pair. With the slot's flag in front, the header and
 * the first 40 bytes of an inline payload share one cache line. */
typedef struct weft_op_desc {
    uint8_t coll;          /* weft_coll_t */
    uint8_t dtype;         /* weft_dtype_t */
    uint8_t redop;         /* weft_redop_t, 0 where none */
    uint8_t flags;         /* WEFT_DESC_* */
    int16_t root;          /* broadcast root, 0 where none */
    uint16_t inline_bytes; /* payload bytes when WEFT_DESC_INLINE */
    uint32_t topk;         /* MoE: k of the routing, 0 where none */
    uint32_t experts;      /* MoE dispatch: num_experts, 0 where none */
    uint64_t count;        /* the collective's count argument (0 for all_to_allv) */
    /* Not sent with WEFT_DESC_INLINE: the payload takes their place. */
    uint64_t src;       /* address the receiver reads from (meaning per algorithm) */
    uint64_t aux;       /* second address (two-shot: the sender's reduced chunk) */
    uint64_t dst;       /* the sender's output, which the receiver may write; 0: it may not */
    uint64_t pair_send; /* all_to_allv: elements the sender sends to the receiver */
    uint64_t pair_recv; /* all_to_allv: elements the sender expects from the receiver */
    uint64_t pair_max;  /* all_to_allv: the sender's largest block, sent or received, in bytes */
    /* all_to_allv: the sender's term of the pair digest (weft_hs_pair_digest), the same in every
     * peer's slot; the terms of all ranks sum to 0 when every pair agrees on its counts */
    uint64_t pair_digest;
    /* MoE: the sender's num_tokens, which bounds the tokens its lists may name */
    uint64_t tokens;
    /* MoE on the CUDA backend, where the counts are on the device. */
    uint64_t capacity; /* dispatch: the sender's max_recv_tokens; combine: its handle's (the rows of
                          y it posts) */
    uint64_t rejections; /* rejected dispatches the sender's host has seen so far */
    /* MoE reuse and combine: the operation number of the dispatch that made the handle, the same
     * on every rank for handles of one dispatch (0 where none); compared for MoE only, whose
     * descriptors are never inline */
    uint64_t layout;
} weft_op_desc_t;

#define WEFT_DESC_HEADER_BYTES offsetof(weft_op_desc_t, src)

typedef struct weft_slot {
    weft_flag_t posted; /* sequence number of the descriptor below */
    union {
        weft_op_desc_t desc;
        struct {
            uint8_t header[WEFT_DESC_HEADER_BYTES];
            uint8_t data[WEFT_INLINE_MAX];
        } in;
    } u;
    uint8_t
        pad[5 * WEFT_CACHELINE - sizeof(weft_flag_t) - WEFT_DESC_HEADER_BYTES - WEFT_INLINE_MAX];
} weft_slot_t;

/* What a signal adds to an error status so that every rank can word the same verdict, naming
 * the argument and the rank that failed (weft_op_agree): what is the algorithm's code for the
 * failed check (0: none), a and b its numbers. */
typedef struct weft_signal_note {
    uint32_t what;
    uint64_t a, b;
} weft_signal_note_t;

/* A signal: flag = sequence number, status = the sender's verdict for that operation, and with
 * an error status its note (weft_signal_note_t; what 0 otherwise), written before the flag. */
typedef struct weft_signal {
    weft_flag_t flag;
    _Atomic uint32_t status;
    _Atomic uint32_t note_what;
    _Atomic uint64_t note_a, note_b;
    uint8_t pad[WEFT_CACHELINE - sizeof(weft_flag_t) - 2 * sizeof(uint32_t) - 2 * sizeof(uint64_t)];
} weft_signal_t;

_Static_assert(sizeof(weft_slot_t) % WEFT_CACHELINE == 0, "slot must be whole cache lines");
_Static_assert(sizeof(weft_signal_t) == WEFT_CACHELINE, "signal must be one cache line");

/* Layout of one control block for nranks ranks (offsets in bytes). */
typedef struct weft_ctrlblk_layout {
    size_t slots; /* nranks * 2 weft_slot_t, [sender][parity] */
    size_t done;  /* nranks weft_signal_t, [sender] */
    size_t phase; /* nranks weft_signal_t, [sender] */
    size_t bytes; /* total */
} weft_ctrlblk_layout_t;

typedef enum { WEFT_SIGNAL_DONE, WEFT_SIGNAL_PHASE } weft_signal_kind_t;

/* Counters of weft_stats_t that the communicator keeps itself. */
typedef struct weft_comm_stats {
    _Atomic uint64_t first_use_waits;
    _Atomic uint64_t first_use_wait_ns;
    _Atomic uint64_t zero_copy_ops;
    _Atomic uint64_t staged_ops;
    _Atomic uint64_t inline_ops;
    _Atomic uint64_t remote_store_ops;
    _Atomic uint64_t copy_engine_ops;
    _Atomic uint64_t sm_blocks;
} weft_comm_stats_t;

struct weft_comm {
    int rank;
    int nranks;
    weft_backend_t backend;
    /* CUDA backend: the GPU (an ordinal among the visible devices), chosen before any memory is
     * made, so that the registrar works on it too (registry.c); -1 on the host backend. */
    int device;
    weft_registration_t registration;
    double timeout_s;
    size_t inline_bytes; /* <= WEFT_INLINE_MAX */
    /* WEFT_ALLREDUCE_TWOSHOT_BYTES and WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES, or WEFT_CONFIG_AUTO
     * (util/config.h): op/select.c's measured defaults */
    uint64_t allreduce_twoshot_bytes;
    uint64_t allreduce_inplace_twoshot_bytes;
    int remote_stores; /* collectives may write into peers' outputs (WEFT_REMOTE_STORES) */

    const weft_mem_ops_t *mem;
    weft_window_t window;
    weft_registry_t *registry;

    weft_ctrlblk_layout_t layout;
    uint8_t **blocks; /* every rank's control block (host memory), mapped in this process */
    uint64_t seq;     /* sequence number of the last operation started */

    void *staging; /* registered scratch for the staged path */
    size_t staging_bytes;

    const weft_exec_ops_t *exec_ops;
    weft_exec_t *exec;
    weft_cost_model_t model;
    weft_plan_cache_t *plans; /* the partitioner's recent plans (model/plan_cache.h) */
    weft_steal_t steal;       /* the host workers' claims over a plan (exec/steal.h) */
    weft_tier_t *peer_tier;   /* nranks entries */
    weft_wait_policy_t wait_policy;
    struct weft_cuda_state *cuda; /* CUDA backend only (comm_cuda.c) */
    /* CUDA: the host-mapped word that makes kernels give up, published (release) once set up
     * and withdrawn before it is freed: the registrar may fail the communicator while init is
     * still filling `cuda` (weft_cuda_abort). NULL otherwise. */
    _Atomic(volatile int32_t *) cuda_abort_word;
    uint32_t moe_rejections_reported; /* CUDA MoE: rejected dispatches already returned */
    /* The MoE handles of this communicator that the caller holds: a list through the handles,
     * under op/moe_dispatch.c's lock; detached (weft_moe_handles_detach) before it is freed,
     * which then waits until no handle destroyed on another thread still frees its memory
     * (moe_releases, under that lock). */
    struct weft_moe_handle *moe_handles;
    int moe_releases;

    _Atomic int async_error; /* first fatal error (weft_status_t): of a background thread, or a
                                timeout or internal error of an operation */
    /* Some call returned the communicator's failure to its caller (weft_comm_usable,
     * weft_comm_check, weft_comm_fail): weft_comm_destroy then need not report a kernel's */
    _Atomic int failure_returned;
    _Atomic int aborted;
    /* weft_comm_abort calls between weft_comm_abort_enter and _leave; teardown waits for 0 once
     * the communicator is off the live list (comm.c) */
    _Atomic int aborts_in_flight;
    _Atomic int in_op; /* an operation is between weft_op_begin and weft_op_end (op/op.h) */
    weft_comm_stats_t stats;
    /* weft_forksafe_generation() of the creating process: a forked child, whose generation
     * differs, holds a copy of the communicator it must not use (weft_comm_owned) */
    uint32_t fork_generation;
    /* The number of the weft_comm_init call that created it (weft_comm_take_generation): the
     * number of its rendezvous in the store. */
    uint32_t generation;
};

/* The host backend's cost model from the configuration (WEFT_TIER_*, WEFT_PART_*). Pure. */
void weft_comm_model_from_config(weft_cost_model_t *m, const weft_env_t *cfg);

/* Record the first background error (later ones are dropped). Thread-safe, never blocks. */
void weft_comm_set_async_error(struct weft_comm *comm, weft_status_t status);

/* A failure after the ranks agreed to run an operation, when peers already wait for this
 * rank's signals: records status (as weft_comm_set_async_error; the communicator is unusable
 * from here) and closes the control connections, so that peers fail at once with
 * WEFT_ERR_PEER_LOST instead of at their deadline. Thread-safe, never blocks. */
void weft_comm_fail(struct weft_comm *comm, weft_status_t status);

/* WEFT_SUCCESS in the process that created comm; WEFT_ERR_INVALID_ARGUMENT, with a message
 * naming call, in a process forked from it. That process holds a copy of the communicator whose
 * descriptors its fork handler closed (util/forksafe.h), whose threads do not exist in it and
 * whose mutexes another thread may have held at the fork, and whose control blocks and memory
 * it still shares with the ranks: every public function that takes comm (or an object of it)
 * checks this first, and touches nothing of comm when it fails (weft.h, "Fork"). Never blocks. */
weft_status_t weft_comm_owned(const struct weft_comm *comm, const char *call);

/* WEFT_SUCCESS, or the status every call but weft_comm_abort and weft_comm_destroy returns
 * after an abort or a fatal error (weft.h), with a message naming call; first of all
 * weft_comm_owned's. Thread-safe. */
weft_status_t weft_comm_usable(struct weft_comm *comm, const char *call);

/* Deadline-and-health check passed to every wait of an operation. */
typedef struct weft_wait_ctx {
    struct weft_comm *comm;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: set by the first check (hot paths skip the
                             clock read when no wait is needed) */
    /* CLOCK_MONOTONIC, 0: none. No wait of the context outlives it, whatever its own deadline:
     * the bound of a call whose waits must end within one timeout in all (weft_comm_init, whose
     * contract is "within the timeout"). Read only where deadline_ns is set, so it costs the hot
     * paths nothing; weft_wait_begin keeps it. */
    uint64_t cap_ns;
    const char *what; /* named in the timeout message */
} weft_wait_ctx_t;

/* ctx, made ready for a new wait: each wait of an operation gets the whole timeout from its own
 * first slow poll (WEFT_TIMEOUT_S is every wait's deadline), not what an earlier wait left; but
 * never past ctx->cap_ns, which stays. */
static inline weft_wait_ctx_t *weft_wait_begin(weft_wait_ctx_t *ctx)
{
    ctx->deadline_ns = 0;
    return ctx;
}

/* WEFT_ERR_ABORTED, the stored background error, WEFT_ERR_TIMEOUT past the deadline (the
 * earlier of the wait's timeout and ctx->cap_ns), else WEFT_SUCCESS. arg is a weft_wait_ctx_t. */
weft_status_t weft_comm_check(void *arg);

/* A wait context whose deadline is the communicator's timeout from the first slow poll (of
 * each wait, weft_wait_begin), with no cap. */
weft_wait_ctx_t weft_comm_wait_ctx(struct weft_comm *comm, const char *what);

/* ---- handshake (handshake.c) ---------------------------------------------------------------- */

/* Create this rank's control block (host memory, zeroed), share it with every peer over the
 * control sockets socks (init only, before the registrar owns them) and map every rank's block:
 * blocks_out[r] for r < nranks. On failure nothing stays mapped. */
weft_status_t weft_ctrlblk_share(const int *socks, int rank, int nranks, size_t bytes,
                                 uint64_t deadline_ns, uint8_t **blocks_out);
void weft_ctrlblk_unmap(uint8_t **blocks, int nranks, size_t bytes);

/* Compute the control block layout for nranks. */
weft_ctrlblk_layout_t weft_ctrlblk_layout(int nranks);

/* Slot that rank `from` writes in rank `to`'s block for sequence number seq. */
static inline weft_slot_t *weft_slot(struct weft_comm *comm, int to, int from, uint64_t seq)
{
    return (weft_slot_t *)(comm->blocks[to] + comm->layout.slots) + (size_t)from * 2 + (seq & 1u);
}

/* Post desc (and, if desc->flags has WEFT_DESC_INLINE, desc->inline_bytes of data) for seq in
 * peer's block. Never blocks. */
void weft_hs_post(struct weft_comm *comm, int peer, uint64_t seq, const weft_op_desc_t *desc,
                  const void *data);

/* Wait until every peer posted seq in this rank's block. */
weft_status_t weft_hs_wait_posted(struct weft_comm *comm, uint64_t seq, weft_wait_ctx_t *ctx);

/* This rank's term of the pair digest of an all_to_allv whose counts to and from rank q are
 * send[q] and recv[q] (nranks entries each): the sum over q of H(rank, q, send[q]) minus the sum
 * over q of H(q, rank, recv[q]), for a 64-bit mixing hash H of (sender, receiver, count), mod
 * 2^64. Summed over every rank's term, each pair's two counts cancel when they are equal, so the
 * total is 0 when every pair agrees and, when any pair differs, nonzero but for a chance of
 * 2^-64: a pair-count mismatch that every rank sees in the handshake, not only the pair's two. */
uint64_t weft_hs_pair_digest(int rank, int nranks, const uint64_t *send, const uint64_t *recv);

/* WEFT_ERR_MISMATCH (with a message naming the first differing rank and field) if any peer's
 * descriptor for seq disagrees with mine: the common fields (WEFT_DESC_TWOSHOT among them), and
 * for all_to_allv the pair counts (pair_send/pair_recv of the peer against
 * my_pair_recv[p]/my_pair_send[p], which may be NULL for other collectives, and the pair digest
 * over every rank, mine->pair_digest being this rank's term). *common_out (may be NULL) is set to 1
 * when every rank sees the mismatch: a common field differs, or the pair digest (the rank of a
 * differing pair names the pair, the others say that some pair differs); 0 when only the pair's two
 * ranks see it (pair counts that differ while the digest sums to 0, a 2^-64 chance). Call after
 * weft_hs_wait_posted. `call` names the API function. */
weft_status_t weft_hs_check_match(struct weft_comm *comm, uint64_t seq, const weft_op_desc_t *mine,
                                  const uint64_t *my_pair_send, const uint64_t *my_pair_recv,
                                  const char *call, int *common_out);

/* Set signal `kind` for seq, carrying status and note (NULL: none), in every peer's block.
 * Never blocks. */
void weft_hs_signal(struct weft_comm *comm, weft_signal_kind_t kind, uint64_t seq,
                    weft_status_t status, const weft_signal_note_t *note);

/* Wait until every peer signalled `kind` for seq. *peer_status_out (may be NULL) gets the first
 * non-success status a peer reported, or WEFT_SUCCESS. */
weft_status_t weft_hs_wait_signal(struct weft_comm *comm, weft_signal_kind_t kind, uint64_t seq,
                                  weft_wait_ctx_t *ctx, weft_status_t *peer_status_out);

/* The status and note peer sent with its signal `kind` (after weft_hs_wait_signal for the
 * operation, before this rank signals the next one: until then the peer cannot send another).
 * The note is zeroed when the status is WEFT_SUCCESS. */
void weft_hs_signal_note(struct weft_comm *comm, weft_signal_kind_t kind, int peer,
                         weft_status_t *status_out, weft_signal_note_t *note_out);

/* ---- communicator lifetime (comm.c) --------------------------------------------------------- */

/* The number of this weft_comm_init call of the process (0, 1, 2, ...), which names its
 * rendezvous in the store (bootstrap.h): the k-th call of each rank meets the k-th of the others
 * there. weft_comm_init takes it first thing, before it checks anything, so every call consumes
 * exactly one number whatever its arguments and however it ends: a rank whose call failed on
 * its own stays in step with peers whose call waited for it and failed too. Thread-safe, never
 * blocks. */
uint32_t weft_comm_take_generation(void);

/* The collective init/destroy and the local abort behind the public functions (api checks
 * arguments first). create joins the rendezvous of generation (weft_comm_take_generation). */
weft_status_t weft_comm_create(const weft_config_t *cfg, uint32_t generation,
                               struct weft_comm **comm_out);
weft_status_t weft_comm_teardown(struct weft_comm *comm);
/* weft_comm_abort's access to a communicator another thread may be destroying: enter returns 1
 * and counts the abort in flight while comm is live (created, and its teardown has not reached
 * the point where it frees things), else 0 (then nothing of comm may be touched); after a 1,
 * call weft_comm_abort_leave when done. Thread-safe. */
int weft_comm_abort_enter(struct weft_comm *comm);
void weft_comm_abort_leave(struct weft_comm *comm);
/* Fail pending and future operations with WEFT_ERR_ABORTED and shut the connections; between
 * weft_comm_abort_enter and _leave. Never blocks. */
void weft_comm_mark_aborted(struct weft_comm *comm);

/* A registered scratch area of at least bytes for the staged path, grown (registered anew, the
 * wait for it added to *waited_ns as by weft_comm_acquire) when too small; on the CUDA backend an
 * outgrown one is kept until destroy (captured graphs use its address). Local: peers learn the
 * address through the handshake. Statuses: WEFT_ERR_NO_MEMORY, wait errors. */
weft_status_t weft_comm_staging(struct weft_comm *comm, size_t bytes, weft_wait_ctx_t *ctx,
                                void **ptr_out, uint64_t *waited_ns);

/* Make [ptr, ptr + bytes) readable by peers at the same address if it is registered memory
 * (waiting for its registration if needed); *ready_out = 1 then, 0 if the caller must stage it.
 * The time spent waiting is added to *waited_ns (nothing when it did not wait); the caller counts
 * it in the statistics: an operation counts one first-use wait however many of its buffers it
 * waited for (weft_op_end). */
weft_status_t weft_comm_acquire(struct weft_comm *comm, const void *ptr, size_t bytes,
                                weft_wait_ctx_t *ctx, int *ready_out, uint64_t *waited_ns);

#endif /* WEFT_CORE_COMM_H */
