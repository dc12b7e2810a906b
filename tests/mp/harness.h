/*
 * harness.h - shared helpers of the multi-process tests (tests/mp), written against the public
 * API (weft.h) only.
 *
 * A test program runs as every rank of a job launched by `weftrun -n N`. All ranks walk the same
 * list of cases in the same order (lockstep); a case's data are a pure function of
 * (seed, case number, rank, element index), so every rank regenerates its peers' inputs and
 * computes exact expected values locally, without trusting the library under test.
 *
 * Inputs are "verifiable" (the nccl-tests idea): small integers for SUM/PROD/AVG, chosen so that
 * every partial result is exact in every dtype (float16 and bfloat16 included), and random
 * finite values of the full range for MAX/MIN. Float16/bfloat16 SUM and AVG also run with
 * "spread" inputs (mp_red_data_t), whose partial sums are exact in float32 but not in 16 bits,
 * so that a collective that rounds to 16 bits before the end fails. Results are compared bit
 * for bit, outputs are poisoned (0xA5) before every call and every buffer carries guard zones
 * (0x5A) that are checked afterwards.
 *
 * Buffers come in three kinds: registered (the pointer weft_malloc returned), interior (a
 * non-zero, element-aligned offset inside a larger weft_malloc allocation) and unregistered
 * (plain malloc). Communicators are opened once per registration mode (roa, jit, staged), one
 * after another, in the same order on every rank.
 *
 * Failures print one line each, prefixed "FAIL <test> rank=R n=N seed=S reg=M case=K (...)",
 * so that `WEFT_TEST_SEED=S` reproduces the run. A status that leaves the communicator unusable
 * ends the program (exit 1); anything else is counted and the run goes on.
 *
 * Environment read by the harness (test-only variables, not part of weft's configuration table):
 *   WEFT_TEST_SEED   seed to use instead of one drawn from time and pid on rank 0
 *   WEFT_TEST_QUICK  1: smaller grid (sanitizer builds)
 *
 * Thread safety: an mp_ctx_t belongs to the thread that runs the test (the main thread).
 */
#ifndef WEFT_TESTS_MP_HARNESS_H
#define WEFT_TESTS_MP_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define MP_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* The large count of the grid (1M + 3 elements), run for a representative subset of cases. */
#define MP_LARGE_COUNT ((size_t)1048579)

/* Counts at or above which a case also checks which path (zero-copy or staged) the stats show. */
#define MP_PATH_CHECK_BYTES ((size_t)4096)

#define MP_NUM_REG_MODES 3

typedef enum { MP_BUF_REGISTERED, MP_BUF_INTERIOR, MP_BUF_UNREGISTERED } mp_buf_kind_t;
#define MP_NUM_BUF_KINDS 3

/* Inputs of the reductions (mp_ctx_t.red_data). */
typedef enum {
    /* Small integers (see mp_red_fill): every partial result is exact in every dtype. */
    MP_RED_SMALL,
    /* For float16 and bfloat16 SUM and AVG (mp_red_spread_applies; other pairs take the small
     * inputs): +-m * 2^(b + e), m a random significand of the dtype's full width (11 or 8 bits),
     * b a random base per element (the same on every rank), e random in [0, w] per rank with
     * w = 24 - width - ceil(log2 nranks). Every input is exact in the dtype, every partial sum
     * of any subset of ranks is a multiple of 2^b below 2^(b + 24), so exact in float32, and the
     * sum of all ranks is finite in the dtype (float16: b <= -10); but partial sums need up to 24
     * bits, so a collective that rounds a partial result to 16 bits loses them. The expected
     * value is the exact sum (AVG: divided by nranks in float32) rounded once to nearest even,
     * whatever order or tree the library combines ranks in. With 2 ranks a reduction makes one
     * addition, so rounding it early changes nothing; from 3 ranks, rounding after each addition
     * gives a different result for about 15-50% of the elements. */
    MP_RED_SPREAD
} mp_red_data_t;

typedef struct mp_ctx {
    const char *test;        /* program name: the first word of every message */
    weft_comm_t comm;        /* the open communicator, NULL when none is open */
    weft_registration_t reg; /* registration mode of comm */
    int rank, nranks;
    uint64_t seed;       /* the same on every rank */
    int quick;           /* WEFT_TEST_QUICK */
    uint64_t case_id;    /* number of the current case, the same on every rank */
    char where[320];     /* description of the current case, for messages */
    uint64_t checks;     /* checks made by this rank */
    uint64_t failures;   /* checks failed on this rank */
    unsigned fail_lines; /* FAIL lines printed (printing stops after a limit) */
    double start_s;      /* mp_now_s() at mp_init */
    int spans_gpus;      /* 1: the ranks are on several GPUs (set by the GPU harness) */
    /* Inputs of mp_red_fill / mp_red_check_*: MP_RED_SMALL (mp_init), or MP_RED_SPREAD while a
     * caller runs its spread cases; mp_case then adds " spread" to the case's description. */
    mp_red_data_t red_data;
} mp_ctx_t;

/* A buffer with guard zones. ptr is what the test hands to weft; bytes is its usable size. */
typedef struct mp_buf {
    mp_buf_kind_t kind;
    void *alloc;        /* what weft_malloc or malloc returned (NULL if nothing) */
    size_t alloc_bytes; /* size of that allocation */
    unsigned char *ptr; /* alloc + front */
    size_t bytes;       /* usable bytes at ptr */
    size_t front, back; /* guard zone sizes before and after [ptr, ptr + bytes) */
} mp_buf_t;

/* ---------------------------------------------------------------------------------------------
 * Set-up, communicators and reports
 * ------------------------------------------------------------------------------------------- */

/* Start a test: line-buffer stdout, read the test variables, create a communicator with a NULL
 * config (from the environment that weftrun sets), agree on the seed (rank 0 draws it, or takes
 * WEFT_TEST_SEED, and broadcasts it), then destroy that communicator. Exits 1 on failure. */
void mp_init(mp_ctx_t *ctx, const char *test);

/* Start a test whose communicators may fail to open (no seed is agreed: it stays 0):
 * line-buffer stdout, take the rank and size from WEFT_RANK and WEFT_NRANKS (weftrun sets them).
 * Exits 1 unless there are at least 2 ranks. */
void mp_init_without_comm(mp_ctx_t *ctx, const char *test);

/* Open ctx->comm on the host backend in registration mode reg (other fields: the defaults).
 * Exits 1 if weft_comm_init fails or the communicator reports another rank, size or backend. */
void mp_comm_open(mp_ctx_t *ctx, weft_registration_t reg);

/* Like mp_comm_open with a caller-filled config (from weft_config_default). */
void mp_comm_open_cfg(mp_ctx_t *ctx, const weft_config_t *cfg);

/* For the fault tests: a barrier on a default communicator (so that every rank has started),
 * which is then destroyed, and ctx->comm opened anew on the host backend with timeout_s. */
void mp_comm_reopen_with_timeout(mp_ctx_t *ctx, double timeout_s);

/* For the fault tests: destroy ctx->comm, which must succeed within limit_s (both checked). */
void mp_comm_close_within(mp_ctx_t *ctx, double limit_s);

/* Destroy ctx->comm (collective); a failure is counted. No-op if none is open. */
void mp_comm_close(mp_ctx_t *ctx);

/* Finish: close the communicator if open, print the summary line of this rank
 * ("PASS <test> rank=R ..." or "FAIL <test> rank=R ... k of m checks failed") and return the
 * process exit status (0 when nothing failed). */
int mp_finish(mp_ctx_t *ctx);

/* Begin a case: increment ctx->case_id (data of the case derive from it) and describe it (with
 * " spread" appended when ctx->red_data is MP_RED_SPREAD). */
void mp_case(mp_ctx_t *ctx, const char *fmt, ...) MP_PRINTF(2, 3);

/* Count a check; if cond is false count a failure and print the message. Returns cond. */
int mp_check(mp_ctx_t *ctx, int cond, const char *fmt, ...) MP_PRINTF(3, 4);

/* Count and print a failure. */
void mp_fail(mp_ctx_t *ctx, const char *fmt, ...) MP_PRINTF(2, 3);

/* Print a failure and end the process with status 1 after aborting and destroying the
 * communicator (peers then see WEFT_ERR_PEER_LOST and stop too). */
void mp_fatal(mp_ctx_t *ctx, const char *fmt, ...) MP_PRINTF(2, 3) __attribute__((noreturn));

/* Check that a call succeeded. Returns 1 on success. A failure is counted; if the status leaves
 * the communicator unusable (anything but INVALID_ARGUMENT or UNSUPPORTED) the run ends. */
int mp_ok(mp_ctx_t *ctx, weft_status_t st, const char *call);

/* Whether st says a peer is gone or never came: WEFT_ERR_PEER_LOST or WEFT_ERR_TIMEOUT (what a
 * survivor of a fault may get, depending on which it notices first). */
int mp_lost_peer(weft_status_t st);

/* Check that st == want and, for a failure status, that weft_last_error() is non-empty and
 * contains name (e.g. "weft_all_reduce"). Returns 1 if all holds. */
int mp_expect_status(mp_ctx_t *ctx, weft_status_t st, weft_status_t want, const char *name,
                     const char *what);

/* Print a line on rank 0 only (progress and informational notes, prefixed with the test). */
void mp_note(const mp_ctx_t *ctx, const char *fmt, ...) MP_PRINTF(2, 3);

/* ---------------------------------------------------------------------------------------------
 * Names, sizes, time
 * ------------------------------------------------------------------------------------------- */
const char *mp_dtype_name(weft_dtype_t dt);
const char *mp_op_name(weft_redop_t op);
const char *mp_reg_name(weft_registration_t reg);
const char *mp_buf_kind_name(mp_buf_kind_t kind);

/* Element size from the harness's own table (not weft_dtype_size, which is under test). */
size_t mp_dtype_bytes(weft_dtype_t dt);

double mp_now_s(void);       /* CLOCK_MONOTONIC, seconds (comparable across processes) */
void mp_sleep_ms(double ms); /* sleeps at least ms milliseconds */

/* 64-bit mix of (seed, a, b, c): the source of every random choice of the tests. */
uint64_t mp_hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

/* 16-bit floats, written independently of the library: float32 to float16 or bfloat16 rounded
 * to nearest even (float16 overflows to infinity; bfloat16 takes no NaN), and back exactly. */
uint16_t mp_f32_to_f16(float f);
float mp_f16_to_f32(uint16_t h);
uint16_t mp_f32_to_bf16(float f);
float mp_bf16_to_f32(uint16_t b);

/* ---------------------------------------------------------------------------------------------
 * The grid
 * ------------------------------------------------------------------------------------------- */

/* Fill out[] (capacity 8) with the small counts of the grid for ctx->nranks, without
 * duplicates: {0, 1, n-1, n+1, 4099}, or {0, 1, n+1, 4099} in quick mode. Returns how many. */
size_t mp_counts(const mp_ctx_t *ctx, size_t *out);

/* Whether grid point `combo` runs with buffer kind `kind` under ctx->reg. The buffer kinds of
 * one mode split the combos between them (and so do the modes of one buffer kind), so that each
 * mode and each buffer kind sees every combo. Quick mode keeps half of each share (the half
 * depending on the mode), so that the modes and kinds of one program run together still see
 * every combo, at least once (a mode or a kind alone sees half of them). */
int mp_selected(const mp_ctx_t *ctx, unsigned combo, mp_buf_kind_t kind);

/* One case of a collective's grid: buffers of kind, count elements of dt, reduction op (WEFT_SUM
 * in a grid without reductions), in place or not. It begins its own case (mp_case). */
typedef void (*mp_grid_fn)(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                           weft_redop_t op, int inplace);

/* A case at MP_LARGE_COUNT elements, run under registration mode reg. */
typedef struct mp_large_case {
    weft_registration_t reg;
    mp_buf_kind_t kind;
    int inplace;
    weft_dtype_t dt;
    weft_redop_t op; /* WEFT_SUM in a grid without reductions */
} mp_large_case_t;

/* Run the grid of a collective through run, under each registration mode in turn (one
 * communicator each, opened and closed here): every buffer kind x small count (mp_counts) x dtype
 * (x reduction, with with_ops) that mp_selected keeps, the combo being dt * WEFT_NUM_REDOPS + op
 * (with_ops) or dt, in place and out of place; then, outside quick mode, the nlarge large cases
 * of that mode. With with_ops, each mode then runs the spread cases (ctx->red_data =
 * MP_RED_SPREAD, reset to MP_RED_SMALL after): every buffer kind x non-zero small count x the
 * (dtype, reduction) pairs of mp_red_spread_applies, in place and out of place; and outside quick
 * mode, in roa mode, float16 AVG at MP_LARGE_COUNT (registered, out of place). */
void mp_run_grid(mp_ctx_t *ctx, int with_ops, mp_grid_fn run, const mp_large_case_t *large,
                 size_t nlarge);

/* ---------------------------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------------------------- */

/* Allocate a buffer of the given kind with `bytes` usable bytes (0 allowed: ptr is then still a
 * valid, non-NULL pointer), guard zones filled with 0x5A and the payload poisoned with 0xA5.
 * Exits 1 if the allocation fails. */
void mp_buf_alloc(mp_ctx_t *ctx, mp_buf_t *b, mp_buf_kind_t kind, size_t bytes);

/* Poison the payload again (0xA5), as before a call that must write only part of it. */
void mp_buf_poison(mp_buf_t *b);

/* Check the guard zones (a failure names `name`), then free. */
void mp_buf_free(mp_ctx_t *ctx, mp_buf_t *b, const char *name);

/* Check that the guard zones are intact. */
void mp_buf_check_guards(mp_ctx_t *ctx, const mp_buf_t *b, const char *name);

/* Check that bytes at p are all poison (0xA5): memory the call must not have written. */
void mp_check_poison(mp_ctx_t *ctx, const char *what, const void *p, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Data: reductions. Element i of rank r's input is a function of (seed, case, dtype, op, r, i).
 * ------------------------------------------------------------------------------------------- */

/* Whether ctx->red_data == MP_RED_SPREAD gives (dt, op) other inputs than MP_RED_SMALL:
 * float16 and bfloat16 SUM and AVG. */
int mp_red_spread_applies(weft_dtype_t dt, weft_redop_t op);

/* Write rank's input elements first .. first+count-1 to dst (inputs of kind ctx->red_data). */
void mp_red_fill(const mp_ctx_t *ctx, weft_dtype_t dt, weft_redop_t op, int rank, size_t first,
                 size_t count, void *dst);

/* Check that got holds rank's input elements first .. first+count-1 (an input left untouched). */
void mp_red_check_input(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt,
                        weft_redop_t op, int rank, size_t first, size_t count);

/* Check that got holds the reduction over all ranks of elements first .. first+count-1. */
void mp_red_check_result(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt,
                         weft_redop_t op, size_t first, size_t count);

/* ---------------------------------------------------------------------------------------------
 * Data: movement (gather, broadcast, all-to-all). Element `index` of rank r is random bytes,
 * a function of (seed, case, r, index). Indices need not be dense (e.g. (peer << 32) + i).
 * ------------------------------------------------------------------------------------------- */
void mp_raw_fill(const mp_ctx_t *ctx, weft_dtype_t dt, int rank, uint64_t first, size_t count,
                 void *dst);
void mp_raw_check(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt, int rank,
                  uint64_t first, size_t count);

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */

/* weft_get_stats on ctx->comm; exits 1 if it fails. */
void mp_stats(mp_ctx_t *ctx, weft_stats_t *out);

/* After a barrier, poll the statistics (every 10 ms, for at most limit_s) until every
 * registration started has completed, then check that at least expected more were started than
 * in before and that all completed. out gets the last statistics. */
void mp_check_registrations_settle(mp_ctx_t *ctx, const weft_stats_t *before, uint64_t expected,
                                   double limit_s, weft_stats_t *out);

/* Whether a collective on buffers of this kind should take the zero-copy path under ctx->reg:
 * weft_malloc memory (registered or interior) in roa or jit mode. */
int mp_expect_zero_copy(const mp_ctx_t *ctx, mp_buf_kind_t kind);

/* Check that one successful operation, between the stats before and after it, counted exactly
 * once: +1 in exactly one of zero_copy_ops, staged_ops and inline_ops, +0 in the other two
 * (weft.h). Returns whether it did. The host and GPU harnesses' path checks start with it. */
int mp_check_counted_once(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after);

/* Check the path one successful collective took from the stats before and after it:
 * sm_blocks and copy_engine_ops did not grow (the host backend has neither); it counted exactly
 * once (mp_check_counted_once); with bytes == 0 (a collective of count 0, which takes its turn in
 * the handshake without payload) in inline_ops; and when nranks > 1 and bytes >=
 * MP_PATH_CHECK_BYTES (smaller payloads may travel inline with the handshake), in zero_copy_ops
 * or in staged_ops as expected. bytes == 0 means a count of 0: a call that still moves data
 * with no payload of its own (a MoE call without tokens) is checked with mp_check_counted_once. The
 * path is decided by the buffers peers read (weft.h): mp_check_path assumes this rank's buffers of
 * kind are read; mp_check_path_expect takes the expectation itself (a broadcast's non-root ranks
 * have nothing read remotely: always zero-copy). */
void mp_check_path(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                   mp_buf_kind_t kind, size_t bytes);
void mp_check_path_expect(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                          int zero_copy, mp_buf_kind_t kind, size_t bytes);

/* A byte size from the environment, read as the library reads its variables
 * (src/util/parse_bytes.h: "4096", "64K", "2MiB"): dflt when name is unset, empty or "auto" (the
 * library's default, where the variable takes auto); a value that does not parse ends the test
 * (mp_fatal). */
uint64_t mp_env_bytes(mp_ctx_t *ctx, const char *name, uint64_t dflt);

/* An integer from the environment, read as the library reads its integer variables (a whole
 * decimal int): dflt when name is unset or empty; anything else ends the test (mp_fatal). */
int mp_env_int(mp_ctx_t *ctx, const char *name, int dflt);

/* Whether an all-reduce of bytes takes the two-shot form (op/select.c) under the thresholds in the
 * environment (WEFT_ALLREDUCE_TWOSHOT_BYTES, WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES), else their
 * defaults (docs/config.md), which depend on ctx->spans_gpus. */
int mp_expect_twoshot(mp_ctx_t *ctx, size_t bytes, int inplace);

/* Whether that all-reduce's two-shot form may take its store form (src/op/allreduce_twoshot.c):
 * two-shot, and across GPUs below 256 MiB. Whether stores are enabled and the output registered
 * is the caller's to add. */
int mp_expect_twoshot_stores(mp_ctx_t *ctx, size_t bytes, int inplace);

/* Whether collectives may take their store form: WEFT_REMOTE_STORES=1 (on the host backend the
 * default, auto, means never). */
int mp_remote_stores_enabled(void);

/* Check that one collective counted in remote_store_ops exactly when want (and stores are
 * enabled); only when nranks > 1 and bytes >= MP_PATH_CHECK_BYTES, as mp_check_path. */
void mp_check_remote_stores(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                            int want, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Registration counters (the tests of registration on the host and CUDA backends)
 * ------------------------------------------------------------------------------------------- */

/* registrations_completed <= registrations_started in s; a failure names when. */
void mp_check_registration_invariants(mp_ctx_t *ctx, const weft_stats_t *s, const char *when);

/* The first-use counters of two uses of the same fresh weft_malloc buffers under ctx->reg (roa
 * or jit): s0 before the first use, s1 between them, s2 after the second. roa (the caller waited
 * until every registration started had completed, mp_check_registrations_settle): the first use
 * waited for nothing; jit: it counted exactly one wait (one operation), with time; the second use
 * counted none. */
void mp_check_first_use_waits(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1,
                              const weft_stats_t *s2);

/* The counters before (s0) and after (s1) weft_malloc of a buffer larger than everything
 * registered so far: in jit mode, nothing registered (registrations_started and
 * bytes_registered unchanged). */
void mp_check_malloc_registered(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1);

/* The counters before that weft_malloc of bytes (s0) and after a first use of used_bytes of it
 * (s2): with 2+ ranks in roa or jit mode, registrations_started and registrations_completed
 * grew, and bytes_registered by at least bytes (roa) or used_bytes (jit). */
void mp_check_use_registered(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s2,
                             uint64_t bytes, uint64_t used_bytes);

#endif /* WEFT_TESTS_MP_HARNESS_H */
