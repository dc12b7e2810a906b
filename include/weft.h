/*
 * weft.h - public C API of weft, a collective communication library for scale-up domains.
 *
 * This header is the contract (names are fixed; functions may be added, never removed).
 * Semantics follow NCCL where this header is silent: counts are in elements, and the in-place
 * rules are written next to each collective.
 *
 * Thread safety: a communicator may be used by one thread at a time (as an NCCL communicator);
 * different communicators may be used concurrently. weft_malloc/weft_free may be called from any
 * thread. weft_last_error() is per thread.
 *
 * Fork: a process made by fork() (a PyTorch DataLoader worker, say) cannot use the communicators
 * of the process it was forked from. weft's fork handler (registered when the library is loaded,
 * so it covers a fork on any thread at any time) closes the child's copies of every
 * connection the communicators hold, so a child never keeps them open: when a rank dies, its
 * peers see the loss at once whatever children it left (closing drops only the child's
 * reference; the parent's connections are untouched). In the child, every function that takes
 * such a communicator returns WEFT_ERR_INVALID_ARGUMENT, saying it was forked, and touches
 * nothing of it: weft_comm_destroy and weft_comm_abort too (the child's copy is left as it is,
 * and the parent's communicator stays usable in the parent), as well as weft_malloc, weft_free,
 * weft_get_stats, the collectives and MoE calls, weft_moe_handle_destroy of a CUDA backend
 * handle still attached to it, and weft_torch_bind (weft_torch.h); only weft_comm_rank,
 * weft_comm_size, weft_comm_backend and weft_comm_device still answer. Memory from weft_malloc on
 * the host backend stays mapped in the child (arrays over it still read; writes reach the memory
 * the ranks share) until the parent frees it; from then on the child's view never shows a later
 * allocation, and its writes there reach no live allocation. A child may create communicators of
 * its own. Only fork() runs the handler: a child made by vfork or posix_spawn keeps the descriptors
 * until it execs (they are close-on-exec). CUDA itself cannot be used in a forked child.
 *
 * This header compiles alone, as C11 and as C++.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the shared library's interface (everything else is hidden). */
#if defined(WEFT_BUILDING_LIBRARY) && defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------------
 * Status. One list generates the enum and its strings (weft_status_string).
 * ------------------------------------------------------------------------------------------- */
#define WEFT_STATUS_MAP(X)                                                                         \
    X(WEFT_SUCCESS, "success")                                                                     \
    X(WEFT_ERR_INVALID_ARGUMENT, "invalid argument")                                               \
    X(WEFT_ERR_UNSUPPORTED, "unsupported by this backend")                                         \
    X(WEFT_ERR_NO_MEMORY, "out of memory")                                                         \
    X(WEFT_ERR_SYSTEM, "system call failed")                                                       \
    X(WEFT_ERR_CUDA, "CUDA call failed")                                                           \
    X(WEFT_ERR_PEER_LOST, "peer lost")                                                             \
    X(WEFT_ERR_TIMEOUT, "timed out")                                                               \
    X(WEFT_ERR_MISMATCH, "ranks called mismatched operations")                                     \
    X(WEFT_ERR_ABORTED, "communicator aborted")                                                    \
    X(WEFT_ERR_INTERNAL, "internal error")

typedef enum {
#define WEFT_STATUS_ENUM_(name, text) name,
    WEFT_STATUS_MAP(WEFT_STATUS_ENUM_)
#undef WEFT_STATUS_ENUM_
} weft_status_t;

/* After WEFT_ERR_PEER_LOST, WEFT_ERR_TIMEOUT, WEFT_ERR_ABORTED or WEFT_ERR_INTERNAL the
 * communicator is unusable except for weft_comm_abort and weft_comm_destroy, and the local calls
 * weft_free (it releases the buffer on this rank only), weft_get_stats and the queries
 * weft_comm_rank, weft_comm_size, weft_comm_backend and weft_comm_device; so it is after any
 * error a collective meets on this rank alone before its peers heard from it (WEFT_ERR_NO_MEMORY
 * for the staging scratch, say), which its peers see as WEFT_ERR_PEER_LOST at once. After
 * WEFT_ERR_INVALID_ARGUMENT (checked before any communication) or WEFT_ERR_MISMATCH (which every
 * rank returns) it stays usable. */

/* Static string for a status ("invalid argument"); "unknown status" for values not in the list. */
WEFT_API const char *weft_status_string(weft_status_t s);

/* Thread-local text of the last error raised on this thread: which call, which argument, why.
 * Empty string if none. Valid until the next weft call on this thread. */
WEFT_API const char *weft_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------------- */
typedef enum {
    WEFT_INT8,
    WEFT_UINT8,
    WEFT_INT32,
    WEFT_UINT32,
    WEFT_INT64,
    WEFT_UINT64,
    WEFT_FLOAT16,
    WEFT_BFLOAT16,
    WEFT_FLOAT32,
    WEFT_FLOAT64
} weft_dtype_t;
#define WEFT_NUM_DTYPES 10

/* 16-bit floats reduce in float32 and round to nearest even. Integer SUM and PROD wrap around;
 * AVG on integers divides that SUM, wrapped, by the rank count, truncating toward zero (the
 * mean of values whose sum wraps is not their mean); AVG on floats divides the float32 (float64
 * for WEFT_FLOAT64) sum by the rank count. MAX and MIN on floats ignore NaNs, as fmaxf and fminf
 * (and NCCL) do: an element is NaN only where it is NaN on every rank. */
typedef enum { WEFT_SUM, WEFT_PROD, WEFT_MAX, WEFT_MIN, WEFT_AVG } weft_redop_t;
#define WEFT_NUM_REDOPS 5

typedef enum { WEFT_BACKEND_AUTO, WEFT_BACKEND_HOST, WEFT_BACKEND_CUDA } weft_backend_t;

/* How user buffers become remotely accessible; WEFT_REGISTRATION selects the default. */
typedef enum {
    WEFT_REGISTRATION_ROA,   /* register in the background at weft_malloc (default) */
    WEFT_REGISTRATION_JIT,   /* register at first collective use, then cache */
    WEFT_REGISTRATION_STAGED /* never touch user buffers remotely: copy through scratch */
} weft_registration_t;

typedef struct weft_comm *weft_comm_t;

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
WEFT_API size_t weft_dtype_size(weft_dtype_t dtype);

/* ---------------------------------------------------------------------------------------------
 * Communicator
 * ------------------------------------------------------------------------------------------- */
typedef struct weft_config {
    size_t size;                      /* sizeof(weft_config_t); set by weft_config_default */
    int rank;                         /* -1: from WEFT_RANK, else RANK */
    int nranks;                       /* -1: from WEFT_NRANKS, else WORLD_SIZE */
    weft_backend_t backend;           /* default from WEFT_BACKEND */
    weft_registration_t registration; /* default from WEFT_REGISTRATION */
    double timeout_s;                 /* every wait's deadline, [1e-3, 1e7] s; WEFT_TIMEOUT_S */
    int host_workers;                 /* worker threads per rank, [1, 256]; WEFT_HOST_WORKERS */
} weft_config_t;

/* Fill cfg with the defaults: rank/nranks = -1 (from the environment), the other fields from the
 * configuration table (environment variables or their defaults; `weft-info -c` lists them). The
 * table's variables are read once per process, at the first call into weft that needs them: a
 * later setenv changes nothing (cfg's fields do, per communicator). */
WEFT_API void weft_config_default(weft_config_t *cfg);

/* Create a communicator over all ranks of the job. Collective: every rank calls it, and it
 * returns when every rank has joined (or on error, within the timeout). cfg may be NULL, which
 * means weft_config_default. On success *comm is set; on failure it is left untouched.
 * The k-th weft_comm_init of each rank meets the k-th of the others: every call counts, whatever
 * its arguments (a NULL comm, an invalid cfg) and however it ends. So when one rank's call fails
 * at once, its peers' calls fail too (at their timeout at the latest; with WEFT_ERR_PEER_LOST at
 * once when the rank died after it reached the rendezvous store), and the next call of every
 * rank meets again; a rank must not retry alone. Threads of one process that make
 * communicators must take turns (one weft_comm_init at a time, in the same order on every rank):
 * the calls are counted in the order they start.
 * A communicator has at most 256 ranks, 16 on the CUDA backend (more: WEFT_ERR_INVALID_ARGUMENT,
 * WEFT_ERR_UNSUPPORTED on CUDA). On the CUDA backend the communicator's GPU is device LOCAL_RANK
 * (WEFT_LOCAL_RANK, else the rank) modulo the visible devices, left current on the calling thread.
 * Every later call on the communicator makes that GPU current for its span and gives the caller's
 * back, as NCCL does: any thread may call, whatever its current device (the stream passed must be
 * the GPU's). */
WEFT_API weft_status_t weft_comm_init(weft_comm_t *comm, const weft_config_t *cfg);

/* Collective: waits for every rank, then frees everything the communicator owns, including
 * memory still allocated with weft_malloc. Also valid (and then local) after an error that made
 * the communicator unusable. On the CUDA backend, a kernel that failed (WEFT_ERR_TIMEOUT,
 * WEFT_ERR_PEER_LOST) after the last call that could report it makes destroy return that error,
 * everything freed all the same: that operation's result is wrong, and no later call would say
 * so (not after weft_comm_abort, nor once a call returned the communicator's failure); so does a
 * failed wait for the device (WEFT_ERR_CUDA). On a usable communicator the wait for the other
 * ranks can fail like a collective's (WEFT_ERR_TIMEOUT: a rank did not reach its destroy in time;
 * WEFT_ERR_PEER_LOST; WEFT_ERR_ABORTED; WEFT_ERR_MISMATCH: a rank called an operation instead),
 * everything freed all the same. In a forked child: WEFT_ERR_INVALID_ARGUMENT, nothing freed
 * (Fork, above). */
WEFT_API weft_status_t weft_comm_destroy(weft_comm_t comm);

/* Local; never blocks. Fails every pending and future operation with WEFT_ERR_ABORTED, closes
 * the connections (peers see WEFT_ERR_PEER_LOST). weft_comm_destroy must still be called. Any
 * thread may call it, also while another thread is in weft_comm_destroy (its waits then end, or
 * the call does nothing once teardown began); never after weft_comm_destroy has returned. */
WEFT_API weft_status_t weft_comm_abort(weft_comm_t comm);

WEFT_API int weft_comm_rank(weft_comm_t comm); /* -1 for a NULL communicator */
WEFT_API int weft_comm_size(weft_comm_t comm); /* -1 for a NULL communicator */
WEFT_API weft_backend_t weft_comm_backend(weft_comm_t comm);
/* The CUDA device (an ordinal among the visible devices, as cudaSetDevice takes it) of a CUDA
 * backend communicator: where its memory lives and its kernels run (weft_comm_init). -1 on the
 * host backend and for a NULL communicator. Local, never blocks; also answers in a forked
 * child. */
WEFT_API int weft_comm_device(weft_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Memory: registration-on-allocation
 * ------------------------------------------------------------------------------------------- */

/* Local, returns at once, except near out of memory: memory freed earlier (or, on the CUDA
 * backend, kept as a spare chunk) is reusable only once every peer unmapped it, so an allocation
 * that fits only with it waits for that (each peer's background thread answers within
 * milliseconds), within the communicator's timeout, instead of failing with WEFT_ERR_NO_MEMORY.
 * When that wait fails (WEFT_ERR_TIMEOUT, WEFT_ERR_PEER_LOST, WEFT_ERR_ABORTED) the communicator
 * is unusable, as after a failed collective. Host memory on the host backend, device memory on
 * the CUDA backend. The pointer is usable locally at once and, after background registration, at
 * the same address on every peer. bytes == 0 sets *ptr to NULL and succeeds; bytes above 2^56
 * (more than a process can address, as for the collectives' buffers) is
 * WEFT_ERR_INVALID_ARGUMENT. WEFT_ERR_NO_MEMORY when this rank's part of the shared address
 * window has no room for bytes or the memory cannot be had; WEFT_ERR_SYSTEM (host backend, e.g.
 * no file descriptor left for a memfd) or WEFT_ERR_CUDA (CUDA backend: cuMemCreate, cuMemMap or
 * cuMemSetAccess) when making or mapping the memory fails otherwise. These leave the
 * communicator usable. A background registration that finds no file descriptor left
 * (RLIMIT_NOFILE) waits for one, retrying, until the communicator's timeout, and then fails the
 * communicator (WEFT_ERR_TIMEOUT, returned by its next call); on the CUDA backend only where the
 * driver reports the shortage as out of memory (otherwise it fails at once, WEFT_ERR_CUDA). */
WEFT_API weft_status_t weft_malloc(weft_comm_t comm, void **ptr, size_t bytes);

/* Local, returns at once; peers unmap in the background. ptr must be a pointer returned by
 * weft_malloc on this communicator (not an interior pointer; WEFT_ERR_INVALID_ARGUMENT otherwise),
 * or NULL (no-op). On the CUDA backend, as with any device memory, no queued operation may still
 * use the buffer: synchronise the streams that use it first. WEFT_ERR_NO_MEMORY when the range
 * cannot be recorded as free (ptr stays allocated; freeing it again may succeed). */
WEFT_API weft_status_t weft_free(weft_comm_t comm, void *ptr);

/* ---------------------------------------------------------------------------------------------
 * Collectives
 *
 * stream is a cudaStream_t on the CUDA backend and must be NULL on the host backend, where
 * operations complete before returning. On the CUDA backend the operations of a communicator
 * run in the order they were called and must be ordered on the device too: issue them on one
 * stream (or order the streams yourself), and in the same order on every rank.
 * Every operation accepts any pointer: memory from weft_malloc (interior pointers included)
 * takes the zero-copy path, other memory the staged path. The buffers of the reductions
 * (all-reduce, reduce-scatter) and of MoE dispatch and combine must be aligned to their elements,
 * as C requires of typed pointers (WEFT_ERR_INVALID_ARGUMENT otherwise: a GPU traps on a
 * misaligned element); the others move bytes and take any alignment. A count of 0 is valid: it
 * returns success and moves nothing, after one round of flags with the peers: ranks that pass
 * 0 where others pass more all get WEFT_ERR_MISMATCH.
 * ------------------------------------------------------------------------------------------- */

/* recvbuf holds nranks * sendcount elements. In place when sendbuf == recvbuf + rank*sendcount. */
WEFT_API weft_status_t weft_all_gather(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                       size_t sendcount, weft_dtype_t dtype, void *stream);

/* sendbuf holds nranks * recvcount elements. In place when recvbuf == sendbuf + rank*recvcount. */
WEFT_API weft_status_t weft_reduce_scatter(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                           size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                           void *stream);

/* In place when sendbuf == recvbuf. Every rank gets bit-identical results. Where the in-place
 * and out-of-place forms differ (between WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES and
 * WEFT_ALLREDUCE_TWOSHOT_BYTES, docs/config.md), ranks in place and ranks out of place in one
 * call get WEFT_ERR_MISMATCH. */
WEFT_API weft_status_t weft_all_reduce(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                       size_t count, weft_dtype_t dtype, weft_redop_t op,
                                       void *stream);

/* sendbuf is read on root only (may be NULL elsewhere). In place when sendbuf == recvbuf. The
 * non-roots do not wait for the root to finish (on the host backend), so an error the root meets
 * after the handshake (out of memory while splitting its copies) is returned on the root alone;
 * the non-roots' results are complete. */
WEFT_API weft_status_t weft_broadcast(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                      size_t count, weft_dtype_t dtype, int root, void *stream);

/* count elements to and from each peer; block p of sendbuf goes to rank p. Not in place. */
WEFT_API weft_status_t weft_all_to_all(weft_comm_t comm, const void *sendbuf, void *recvbuf,
                                       size_t count /* per peer */, weft_dtype_t dtype,
                                       void *stream);

/* Arrays of nranks counts and displacements, in elements. sendcounts[p] on this rank must equal
 * recvcounts[this rank] on rank p, p = this rank included (else every rank returns
 * WEFT_ERR_MISMATCH and nothing moves; the two ranks of the pair name it). Receive blocks must
 * not overlap each other nor any send block (not in place; send and receive blocks may share
 * one buffer where they share no byte). */
WEFT_API weft_status_t weft_all_to_allv(weft_comm_t comm, const void *sendbuf,
                                        const size_t *sendcounts, const size_t *sdispls,
                                        void *recvbuf, const size_t *recvcounts,
                                        const size_t *rdispls, weft_dtype_t dtype, void *stream);

WEFT_API weft_status_t weft_barrier(weft_comm_t comm, void *stream);

/* ---------------------------------------------------------------------------------------------
 * Mixture of experts: dispatch tokens to the ranks that own their experts, and combine the
 * experts' outputs back.
 *
 * Rank r owns experts [r * E/n, (r + 1) * E/n) of num_experts = E (a multiple of the rank count
 * n). Both calls are collective (every rank calls them, in the same order as the other
 * operations) and accept any pointer, as the collectives do: weft_malloc memory is read by the
 * peers in place, other memory through the staging scratch. Neither is in place: an array a call
 * writes must not overlap another of its arrays (WEFT_ERR_INVALID_ARGUMENT; on the CUDA backend
 * combine's y, whose row count is on the device, is not checked against out), and every array is
 * aligned to its elements. Ranks must agree on topk and num_experts (WEFT_ERR_MISMATCH on every
 * rank otherwise). On the host backend stream must be
 * NULL and the calls complete before returning. On the CUDA backend every array argument
 * (num_recv_tokens and recv_expert_counts included) is device memory, and both calls only
 * enqueue work on stream and return: nothing waits on the host, so they can be captured in a
 * CUDA graph. There the capacity and expert-id checks are made on the device, identically on
 * every rank: a dispatch that fails them writes *num_recv_tokens = -1 and zero counts and nothing
 * else (a combine with its handle writes zeros), and the first MoE call on the communicator after
 * some rank's host has seen that (e.g. after synchronising the stream) returns
 * WEFT_ERR_INVALID_ARGUMENT on every rank and does nothing; the communicator stays usable. A
 * call whose wait for the peers gave up on the device (WEFT_ERR_TIMEOUT or WEFT_ERR_PEER_LOST,
 * returned by the next call, as for the collectives) writes no output but a dispatch's
 * *num_recv_tokens = -1 and zeroed recv_expert_counts.
 * ------------------------------------------------------------------------------------------- */
typedef struct weft_moe_handle *weft_moe_handle_t;

/* topk of a weft_moe_dispatch that reuses the layout of the handle it is given (see there). */
#define WEFT_MOE_REUSE 0

/* Send each of this rank's num_tokens rows of x (hidden elements of dtype: float32, float16 or
 * bfloat16) to every rank that owns one of its experts, once per rank however many of its
 * experts live there. topk_idx and topk_weights hold num_tokens x topk entries (row-major);
 * an expert id of -1 is masked (goes nowhere), other ids must be in [0, num_experts) (else the
 * dispatch fails on every rank, as an overflow of max_recv_tokens does); 1 <= topk <=
 * num_experts. x, topk_idx and topk_weights may be NULL when num_tokens is 0. Sizes are
 * WEFT_ERR_INVALID_ARGUMENT past 2^56 bytes (what a process can address) for any array (x,
 * recv_x, the routing arrays and their received copies) and for the layout a dispatch builds
 * from them (about 12 * topk + 8 bytes per token and destination rank); on the CUDA backend
 * also num_tokens or max_recv_tokens past INT32_MAX.
 *
 * Received tokens are ordered by source rank, then by source token index. For received token i:
 * recv_x row i is the token's row; recv_topk_idx[i * topk + j] is the local id (0 .. E/n - 1) of
 * the token's expert j if this rank owns it, else -1 (masked, or owned elsewhere);
 * recv_topk_weights[i * topk + j] the sender's weight for a local expert, else 0.0f.
 * recv_expert_counts (E/n entries) counts, per local expert, the routing slots of received
 * tokens that name it (one count per top-k slot, not per token): a token whose topk_idx row
 * names the same local expert twice counts twice there, and that id appears twice in its
 * recv_topk_idx row (the row itself is received once); *num_recv_tokens is the number of tokens
 * received. recv_x, recv_topk_idx and recv_topk_weights hold max_recv_tokens rows (may be NULL
 * when it is 0): if any rank would receive more, every rank returns WEFT_ERR_INVALID_ARGUMENT,
 * writes no output and the communicator stays usable (the counts are learnt in the handshake,
 * before any data moves). Every rank's message then names the same failed check, argument and
 * rank: an expert id out of range (topk_idx) before an overflow (max_recv_tokens, with the
 * counts), the lowest such rank first.
 *
 * On success *handle holds the layout for weft_moe_combine (free it with
 * weft_moe_handle_destroy); on failure no output parameter is set. x and the routing arrays may
 * be reused as soon as the call returns.
 *
 * Layout reuse (the backward pass, or any later dispatch with the same routing): with topk =
 * WEFT_MOE_REUSE and *handle a handle of an earlier dispatch on this communicator, x is sent
 * along that dispatch's routing and nothing of the layout is recomputed. num_tokens, hidden and
 * dtype must be the handle's; topk_idx, topk_weights and num_experts are ignored (may be NULL /
 * 0); recv_topk_idx, recv_topk_weights and recv_expert_counts may each be NULL, and are written
 * as by the first dispatch otherwise; max_recv_tokens is checked again. *handle is left as is:
 * the handle serves combines of either dispatch (they share the layout). Every rank must reuse
 * in the same call, a handle of the same dispatch (else WEFT_ERR_MISMATCH). On the CUDA backend
 * a handle reflects its latest dispatch that returned success (a reuse included): its verdict
 * (one rejected on the device makes its combines write zeros) and its max_recv_tokens, the rows
 * weft_moe_combine takes y to have. */
WEFT_API weft_status_t weft_moe_dispatch(weft_comm_t comm, const void *x, size_t num_tokens,
                                         size_t hidden, weft_dtype_t dtype, const int64_t *topk_idx,
                                         const float *topk_weights, int topk, int num_experts,
                                         void *recv_x, int64_t *recv_topk_idx,
                                         float *recv_topk_weights, int64_t *recv_expert_counts,
                                         size_t max_recv_tokens, int64_t *num_recv_tokens,
                                         weft_moe_handle_t *handle, void *stream);

/* The reverse of the dispatch that produced handle (on this communicator): y holds one row
 * (hidden elements of the dispatch's dtype) per received token, in dispatch order; out gets
 * num_tokens rows, row t the sum over the ranks that received token t of their row for t
 * (summed in float32 in increasing rank order; float16 and bfloat16 round once at the end).
 * Tokens sent nowhere (every expert masked) get zeros. y may be NULL when nothing was received,
 * out when num_tokens was 0. A NULL y where rows were received is WEFT_ERR_INVALID_ARGUMENT: on
 * the host backend on that rank only, before it communicates (as any bad argument: its peers'
 * combine then fails at their timeout); on the CUDA backend, where only the device knows the
 * count, on every rank, as a rejected dispatch is: every rank's out gets zeros and the next MoE
 * call returns it on every rank.
 * handle stays valid (combine may run any number of times) until it or its communicator is
 * destroyed. Ranks passing handles of different dispatches all get WEFT_ERR_MISMATCH, and
 * nothing moves. On the CUDA backend, where the host does not know how many rows were received,
 * peers read y in place when max_recv_tokens rows from y (those of the handle's latest
 * dispatch, see layout reuse) lie in weft_malloc memory; otherwise (a y of exactly the received
 * rows at the end of its allocation, cudaMalloc memory) a kernel first copies the received rows
 * into registered scratch, which grows to that many rows. */
WEFT_API weft_status_t weft_moe_combine(weft_comm_t comm, weft_moe_handle_t handle, const void *y,
                                        void *out, void *stream);

/* Free a dispatch's handle (NULL: no-op). Local. A handle may be destroyed before or after its
 * communicator: weft_comm_destroy detaches the handles left (their device memory goes with the
 * communicator's), and destroying a detached handle frees the rest and succeeds; dispatch and
 * combine refuse a detached handle (WEFT_ERR_INVALID_ARGUMENT). Any thread may destroy a handle,
 * also while another destroys its communicator (a garbage collector's finalizer, say), but not
 * while another uses it. On the CUDA backend an attached handle first waits for the device
 * (cudaDeviceSynchronize: kernels may still read its device memory), which CUDA forbids while
 * any thread of the process captures a graph in global mode; when that wait fails the device
 * memory is freed with the communicator instead. Fails only for a CUDA backend handle attached
 * to a communicator in a forked child (WEFT_ERR_INVALID_ARGUMENT, nothing freed: Fork, above),
 * or when its device cannot be made current (the error; the handle is freed all the same, its
 * device memory with the communicator, as when the wait fails). */
WEFT_API weft_status_t weft_moe_handle_destroy(weft_moe_handle_t handle);

/* ---------------------------------------------------------------------------------------------
 * Statistics (fields are appended only)
 * ------------------------------------------------------------------------------------------- */
typedef struct weft_stats {
    uint64_t registrations_started, registrations_completed, bytes_registered;
    /* Operations that had to wait for a registration of a buffer they use (once per operation,
     * however many of its buffers it waited for), and the time they spent waiting. */
    uint64_t first_use_waits, first_use_wait_ns;
    /* Every successful operation counts once on each rank, in exactly one of zero_copy_ops,
     * staged_ops and inline_ops. staged: this rank copied a buffer that peers read through the
     * registered staging scratch, because it was not weft_malloc memory or the registration mode
     * is staged. Buffers peers read: the input of all-gather, reduce-scatter, all-to-all(v) and
     * all-reduce, the root's input of broadcast, and also the output of a two-shot all-reduce
     * (out of place from WEFT_ALLREDUCE_TWOSHOT_BYTES, in place from
     * WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES; their defaults depend on the rank count and the
     * GPUs: docs/config.md) unless it took the store form (remote_store_ops).
     * With one rank nothing is read remotely. */
    uint64_t zero_copy_ops, staged_ops;
    uint64_t peer_mappings; /* segments of peers currently mapped into this process */
    uint64_t staging_bytes; /* size of this rank's registered staging scratch */
    /* Operations whose payloads travelled with their signalling, not read from peers' buffers:
     * host backend, payload per pair <= WEFT_INLINE_BYTES, inside the handshake (all_to_allv
     * never: its blocks take the mesh whatever their size); CUDA backend, the push path,
     * payload per pair <= WEFT_CUDA_PUSH_BYTES. Barriers and calls of count 0 count here on both
     * backends (an all_to_allv whose counts are all 0 is no such call: it takes its path). */
    uint64_t inline_ops;
    /* Operations that wrote their results into peers' outputs instead of each rank reading
     * them (WEFT_REMOTE_STORES, by default on the CUDA backend), when every rank's output is
     * weft memory: an all-gather whose inputs are not staged (each rank reads its input once
     * and stores it into every output), an all-to-all whose inputs are not staged (each rank
     * stores its block for every peer into that peer's output), a two-shot all-reduce (each
     * rank stores its reduced chunk into every output, and peers read nothing of its output). */
    uint64_t remote_store_ops;
    /* CUDA backend: operations whose data the copy engines moved (WEFT_CUDA_COPY_ENGINE); their
     * kernels only signal, one block each, before and after the copies (after them only, in
     * the second step of a two-shot all-reduce). */
    uint64_t copy_engine_ops;
    /* CUDA backend: thread blocks that moved operations' data, summed over operations: per
     * operation the blocks of its largest launch that copied, reduced or pushed data (a local
     * copy on the SMs counts, signalling kernels do not). Its growth over some calls divided by
     * their number is the SM share a call held: 0 for calls that only the copy engines or the
     * handshake (inline_ops) carried. Always 0 on the host backend. */
    uint64_t sm_blocks;
} weft_stats_t;

WEFT_API weft_status_t weft_get_stats(weft_comm_t comm, weft_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
