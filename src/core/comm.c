/*
 * comm.c - communicator creation and teardown, health checks, staging scratch.
 *
 * Creation (collective), in order, each step undone in reverse on failure:
 *   rendezvous store -> job secret -> control-socket mesh -> control blocks shared over it ->
 *   shadow window -> registry and registrar thread -> staging scratch (registered) -> exchange
 *   of NUMA nodes -> wait until our registrations are acknowledged -> barrier -> executor ->
 *   store closed.
 *
 * Thread safety: async_error and aborted are atomics written by any thread; everything else is
 * used by the communicator's user thread only. weft_comm_abort may run on another thread while
 * weft_comm_destroy frees the communicator (weft.h): it enters a communicator only while the
 * process-wide list of live communicators holds it (weft_comm_abort_enter, under live_mu), and
 * teardown takes it off the list before it waits for the aborts in flight and frees anything.
 *
 * Fork: the descriptors a communicator keeps (control sockets, the registrar's eventfd, and
 * during creation the store's and the listeners') are opened through util/forksafe.h, so a
 * forked child closes its copies at once and never keeps a rank's connections alive after the
 * rank died. The child's copy of the communicator is refused by every call (weft_comm_owned).
 * live_mu is held across every fork from the library's load on (util/forksafe.h), so a child
 * never inherits it locked.
 */
#include "core/comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm_cuda.h"
#include "core/ctrl.h"
#include "util/array.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/forksafe.h"
#include "util/log.h"

#define HOST_SLICE_DEFAULT (64ull << 30)
#define CUDA_SLICE_DEFAULT (256ull << 30)

/* The number of weft_comm_init calls this process has made (weft_comm_take_generation). */
static _Atomic uint32_t comm_generation;

uint32_t weft_comm_take_generation(void)
{
    return atomic_fetch_add(&comm_generation, 1);
}

void weft_comm_set_async_error(struct weft_comm *comm, weft_status_t status)
{
    int expected = WEFT_SUCCESS;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)status);
    weft_cuda_abort(comm); /* kernels waiting on a dead peer give up at once */
}

void weft_comm_fail(struct weft_comm *comm, weft_status_t status)
{
    atomic_store_explicit(&comm->failure_returned, 1, memory_order_relaxed);
    weft_comm_set_async_error(comm, status);
    weft_registry_shutdown_sockets(comm->registry);
}

weft_status_t weft_comm_owned(const struct weft_comm *comm, const char *call)
{
    if (comm->fork_generation == weft_forksafe_generation())
        return WEFT_SUCCESS;
    return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                      "%s: comm was created by a process this one was forked from; a forked "
                      "child cannot use its parent's communicators (create its own)",
                      call);
}

weft_status_t weft_comm_usable(struct weft_comm *comm, const char *call)
{
    weft_status_t owned = weft_comm_owned(comm, call);
    if (owned != WEFT_SUCCESS)
        return owned;
    if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
        return weft_error(WEFT_ERR_ABORTED, "%s: the communicator was aborted", call);
    int err = atomic_load_explicit(&comm->async_error, memory_order_relaxed);
    if (err != WEFT_SUCCESS) {
        atomic_store_explicit(&comm->failure_returned, 1, memory_order_relaxed);
        return weft_error((weft_status_t)err, "%s: the communicator failed earlier: %s", call,
                          weft_status_string((weft_status_t)err));
    }
    return WEFT_SUCCESS;
}

weft_status_t weft_comm_check(void *arg)
{
    weft_wait_ctx_t *ctx = arg;
    if (atomic_load_explicit(&ctx->comm->aborted, memory_order_relaxed))
        return weft_error(WEFT_ERR_ABORTED, "%s: the communicator was aborted", ctx->what);
    int err = atomic_load_explicit(&ctx->comm->async_error, memory_order_relaxed);
    if (err != WEFT_SUCCESS) {
        atomic_store_explicit(&ctx->comm->failure_returned, 1, memory_order_relaxed);
        return weft_error((weft_status_t)err, "%s: %s (a background error ended the wait)",
                          ctx->what, weft_status_string((weft_status_t)err));
    }
    uint64_t now = weft_now_ns();
    if (ctx->deadline_ns == 0) { /* the first slow poll of the wait starts the clock */
        ctx->deadline_ns = weft_deadline_after_s(ctx->comm->timeout_s);
        if (ctx->cap_ns != 0 && ctx->cap_ns < ctx->deadline_ns)
            ctx->deadline_ns = ctx->cap_ns;
    }
    if (now > ctx->deadline_ns) {
        atomic_store_explicit(&ctx->comm->failure_returned, 1, memory_order_relaxed);
        if (ctx->deadline_ns == ctx->cap_ns)
            return weft_error(WEFT_ERR_TIMEOUT, "%s: not done within the timeout of %.3g s",
                              ctx->what, ctx->comm->timeout_s);
        return weft_error(WEFT_ERR_TIMEOUT, "%s: no progress within %.3g s", ctx->what,
                          ctx->comm->timeout_s);
    }
    return WEFT_SUCCESS;
}

weft_wait_ctx_t weft_comm_wait_ctx(struct weft_comm *comm, const char *what)
{
    return (weft_wait_ctx_t){.comm = comm, .deadline_ns = 0, .cap_ns = 0, .what = what};
}

/* ---- live communicators (file comment) ------------------------------------------------------ */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct weft_comm **live; /* under live_mu */
static size_t nlive, live_cap;

/* A fork copies live_mu as it is: it is held across every fork from the library's load on, so a
 * child never inherits it locked (util/forksafe.h). */
__attribute__((constructor)) static void live_guard(void)
{
    weft_forksafe_guard(&live_mu, NULL);
}

/* List comm. Returns 0, or -1 when out of memory. */
static int live_add(struct weft_comm *comm)
{
    pthread_mutex_lock(&live_mu);
    int rc = weft_array_grow((void **)&live, &live_cap, nlive + 1, sizeof *live);
    if (rc == 0)
        live[nlive++] = comm;
    pthread_mutex_unlock(&live_mu);
    return rc;
}

/* comm's index in the list, or nlive if it is not listed; under live_mu. */
static size_t live_index(const struct weft_comm *comm)
{
    size_t i = 0;
    while (i < nlive && live[i] != comm)
        i++;
    return i;
}

/* Take comm off the list; from then on no abort enters it. */
static void live_remove(struct weft_comm *comm)
{
    pthread_mutex_lock(&live_mu);
    size_t i = live_index(comm);
    if (i < nlive)
        live[i] = live[--nlive];
    pthread_mutex_unlock(&live_mu);
}

int weft_comm_abort_enter(struct weft_comm *comm)
{
    pthread_mutex_lock(&live_mu);
    int found = live_index(comm) < nlive;
    if (found)
        atomic_fetch_add(&comm->aborts_in_flight, 1);
    pthread_mutex_unlock(&live_mu);
    return found;
}

void weft_comm_abort_leave(struct weft_comm *comm)
{
    atomic_fetch_sub(&comm->aborts_in_flight, 1);
}

void weft_comm_mark_aborted(struct weft_comm *comm)
{
    atomic_store(&comm->aborted, 1);
    weft_cuda_abort(comm);
    weft_registry_shutdown_sockets(comm->registry);
}

/* The per-job secret: WEFT_JOB_SECRET if set (weftrun sets one), else random bytes of rank 0
 * shared through the store. */
static weft_status_t job_secret(weft_store_t *store, int rank, uint8_t out[WEFT_CTRL_SECRET_BYTES])
{
    const char *s = weft_config_get()->job_secret;
    memset(out, 0, WEFT_CTRL_SECRET_BYTES);
    if (s[0] != '\0') {
        size_t n = strlen(s);
        memcpy(out, s, n < WEFT_CTRL_SECRET_BYTES ? n : WEFT_CTRL_SECRET_BYTES);
        return WEFT_SUCCESS;
    }
    if (rank == 0) {
        if (getrandom(out, WEFT_CTRL_SECRET_BYTES, 0) != WEFT_CTRL_SECRET_BYTES)
            return weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: getrandom");
        return weft_store_set(store, "secret", out, WEFT_CTRL_SECRET_BYTES);
    }
    size_t len;
    return weft_store_get(store, "secret", out, WEFT_CTRL_SECRET_BYTES, &len);
}

void weft_comm_model_from_config(weft_cost_model_t *m, const weft_env_t *cfg)
{
    uint64_t unit = cfg->part_unit_bytes; /* config.c's ranges: at least 1 */
    int fanout = cfg->part_fanout;
    m->tier[WEFT_TIER_SELF] =
        (weft_tier_params_t){cfg->tier_self_lat_us, cfg->tier_self_bw_gbps, unit, fanout};
    m->tier[WEFT_TIER_PEER] =
        (weft_tier_params_t){cfg->tier_peer_lat_us, cfg->tier_peer_bw_gbps, unit, fanout};
    m->tier[WEFT_TIER_REMOTE_NUMA] = (weft_tier_params_t){
        cfg->tier_remote_numa_lat_us, cfg->tier_remote_numa_bw_gbps, unit, fanout};
}

/* WEFT_PLAN_CACHE_ENTRIES, clamped to what the cache takes. */
static int plan_cache_entries(const weft_env_t *env)
{
    int n = env->plan_cache_entries;
    return n < 0 ? 0 : n > WEFT_PLAN_CACHE_MAX_ENTRIES ? WEFT_PLAN_CACHE_MAX_ENTRIES : n;
}

typedef struct rank_info {
    int32_t numa;
} rank_info_t;

/* Settings that decide a protocol between the ranks: the backend, where each rank's slice of
 * the shadow window lies, which algorithm a call takes (ranks that picked different ones
 * would post matching descriptors, then run different protocols against each other: wrong
 * results, or a wait until the timeout), and the first operation number (ranks that start at
 * different numbers read each other's slots and signals of other operations as their own), and
 * whether the job secret comes from WEFT_JOB_SECRET (a rank without it waits for the secret rank
 * 0 publishes only without it). They come from each process's own environment, so weft_comm_init
 * compares them and fails on every rank when they differ. */
enum {
    SHARED_BACKEND,
    SHARED_WINDOW_SLICE,
    SHARED_INLINE,
    SHARED_TWOSHOT,
    SHARED_INPLACE_TWOSHOT,
    SHARED_SEQ_START,
    SHARED_JOB_SECRET, /* whether WEFT_JOB_SECRET is set: else rank 0 makes one (job_secret) */
    NUM_SHARED
};

static const char *const shared_names[NUM_SHARED] = {
    [SHARED_BACKEND] = "the backend (WEFT_BACKEND or weft_config_t.backend)",
    [SHARED_WINDOW_SLICE] = "WEFT_WINDOW_SLICE_BYTES",
    [SHARED_INLINE] = "WEFT_INLINE_BYTES",
    [SHARED_TWOSHOT] = "WEFT_ALLREDUCE_TWOSHOT_BYTES",
    [SHARED_INPLACE_TWOSHOT] = "WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES",
    [SHARED_SEQ_START] = "WEFT_SEQ_START",
    [SHARED_JOB_SECRET] = "WEFT_JOB_SECRET",
};

static void shared_value_string(int i, uint64_t v, char *buf, size_t len)
{
    if (i == SHARED_BACKEND)
        snprintf(buf, len, "%s", v == WEFT_BACKEND_CUDA ? "cuda" : "host");
    else if (i == SHARED_JOB_SECRET)
        snprintf(buf, len, "%s", v ? "set" : "unset");
    else if (v == WEFT_CONFIG_AUTO)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* Every rank's settings against rank 0's; the same verdict (and message) on every rank. */
static weft_status_t agree_settings(weft_store_t *store, int nranks,
                                    const uint64_t mine[NUM_SHARED])
{
    uint64_t(*all)[NUM_SHARED] = calloc((size_t)nranks, sizeof *all);
    if (!all)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
    weft_status_t st =
        weft_store_allgather(store, "settings", mine, sizeof(uint64_t[NUM_SHARED]), all);
    for (int r = 1; r < nranks && st == WEFT_SUCCESS; r++) {
        for (int i = 0; i < NUM_SHARED; i++) {
            if (all[r][i] == all[0][i])
                continue;
            char v0[32], vr[32];
            shared_value_string(i, all[0][i], v0, sizeof v0);
            shared_value_string(i, all[r][i], vr, sizeof vr);
            st = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "weft_comm_init: %s is %s on rank 0 but %s on rank %d; every rank "
                            "must use the same value",
                            shared_names[i], v0, vr, r);
            break;
        }
    }
    free(all);
    return st;
}

static weft_status_t resolve_config(const weft_config_t *cfg, weft_config_t *out)
{
    weft_config_default(out);
    if (cfg) {
        if (cfg->size < offsetof(weft_config_t, host_workers) + sizeof(int) ||
            cfg->size > sizeof *out)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "weft_comm_init: cfg->size %zu is not a weft_config_t size "
                              "(use weft_config_default)",
                              cfg->size);
        memcpy(out, cfg, cfg->size);
    }
    const weft_env_t *env = weft_config_get();
    if (out->rank < 0)
        out->rank = env->rank;
    if (out->nranks < 0)
        out->nranks = env->nranks;
    if (out->nranks < 1 || out->nranks > WEFT_MAX_RANKS)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_comm_init: nranks %d is not in [1, %d] (set WEFT_NRANKS or "
                          "WORLD_SIZE, or launch with weftrun)",
                          out->nranks, WEFT_MAX_RANKS);
    if (out->rank < 0 || out->rank >= out->nranks)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_comm_init: rank %d is not in [0, %d) (set WEFT_RANK or RANK)",
                          out->rank, out->nranks);
    if ((unsigned)out->backend > WEFT_BACKEND_CUDA)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init: backend %d is unknown",
                          (int)out->backend);
    if ((unsigned)out->registration > WEFT_REGISTRATION_STAGED)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init: registration %d is unknown",
                          (int)out->registration);
    if (!(out->timeout_s >= WEFT_TIMEOUT_S_MIN && out->timeout_s <= WEFT_TIMEOUT_S_MAX))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_comm_init: timeout_s %g is not in [%g, %g] s", out->timeout_s,
                          WEFT_TIMEOUT_S_MIN, WEFT_TIMEOUT_S_MAX);
    if (out->host_workers < 1 || out->host_workers > 256)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_comm_init: host_workers %d is not in [1, 256]", out->host_workers);
    if (out->backend == WEFT_BACKEND_AUTO)
        out->backend = weft_cuda_available() ? WEFT_BACKEND_CUDA : WEFT_BACKEND_HOST;
    return WEFT_SUCCESS;
}

weft_status_t weft_comm_create(const weft_config_t *cfg_in, uint32_t generation,
                               struct weft_comm **comm_out)
{
    weft_config_t cfg;
    weft_status_t st = resolve_config(cfg_in, &cfg);
    if (st != WEFT_SUCCESS)
        return st;
    const weft_env_t *env = weft_config_get();
    weft_log_set_rank(cfg.rank);

    struct weft_comm *comm = calloc(1, sizeof *comm);
    int *fds = calloc((size_t)cfg.nranks, sizeof *fds);
    rank_info_t *infos = calloc((size_t)cfg.nranks, sizeof *infos);
    if (!comm || !fds || !infos) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
        goto err_free;
    }
    for (int i = 0; i < cfg.nranks; i++)
        fds[i] = -1;
    comm->rank = cfg.rank;
    comm->nranks = cfg.nranks;
    comm->fork_generation = weft_forksafe_generation();
    comm->generation = generation;
    comm->backend = cfg.backend;
    comm->device = -1; /* the CUDA backend selects one below */
    comm->registration = cfg.registration;
    comm->timeout_s = cfg.timeout_s;
    /* 0 but in tests: operation numbers past 2^31 and 2^32. At most 2^62 (config.c), so no
     * number wraps to 0, which every flag reads as reached; the ranks agree on it below. */
    comm->seq = env->seq_start;
    comm->inline_bytes = env->inline_bytes < WEFT_INLINE_MAX ? env->inline_bytes : WEFT_INLINE_MAX;
    comm->allreduce_twoshot_bytes = env->allreduce_twoshot_bytes;
    comm->allreduce_inplace_twoshot_bytes = env->allreduce_inplace_twoshot_bytes;
    comm->remote_stores =
        env->remote_stores == WEFT_REMOTE_STORES_ALWAYS ||
        (env->remote_stores == WEFT_REMOTE_STORES_AUTO && cfg.backend == WEFT_BACKEND_CUDA);
    comm->mem = &weft_mem_host_ops;
#ifdef WEFT_HAVE_CUDA
    if (cfg.backend == WEFT_BACKEND_CUDA)
        comm->mem = &weft_mem_cuda_ops;
#endif
    comm->exec_ops = &weft_exec_host_ops;
    comm->layout = weft_ctrlblk_layout(cfg.nranks);
    weft_comm_model_from_config(&comm->model, env);
    cpu_set_t cpus;
    int ncpus = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    comm->wait_policy = weft_wait_policy(cfg.nranks * cfg.host_workers, ncpus);
    weft_steal_init(&comm->steal);
    st = weft_plan_cache_create(plan_cache_entries(env), &comm->plans);
    if (st != WEFT_SUCCESS)
        goto err_free;
    uint64_t deadline = weft_deadline_after_s(cfg.timeout_s);

    weft_store_t *store;
    st = weft_store_open(env->master_addr, env->master_port, cfg.rank, cfg.nranks, comm->generation,
                         cfg.timeout_s, &store);
    if (st != WEFT_SUCCESS)
        goto err_free;
    size_t slice = env->window_slice_bytes            ? env->window_slice_bytes
                   : cfg.backend == WEFT_BACKEND_CUDA ? CUDA_SLICE_DEFAULT
                                                      : HOST_SLICE_DEFAULT;
    const uint64_t shared[NUM_SHARED] = {
        [SHARED_BACKEND] = (uint64_t)cfg.backend,
        [SHARED_WINDOW_SLICE] = slice,
        [SHARED_INLINE] = comm->inline_bytes,
        [SHARED_TWOSHOT] = comm->allreduce_twoshot_bytes,
        [SHARED_INPLACE_TWOSHOT] = comm->allreduce_inplace_twoshot_bytes,
        [SHARED_SEQ_START] = env->seq_start,
        [SHARED_JOB_SECRET] = env->job_secret[0] != '\0',
    };
    st = agree_settings(store, cfg.nranks, shared);
    if (st != WEFT_SUCCESS)
        goto err_close_store;
    uint8_t secret[WEFT_CTRL_SECRET_BYTES];
    st = job_secret(store, cfg.rank, secret);
    if (st != WEFT_SUCCESS)
        goto err_close_store;
    st = weft_ctrl_connect(store, cfg.rank, cfg.nranks, secret, deadline, fds);
    if (st != WEFT_SUCCESS)
        goto err_close_store;
    comm->blocks = calloc((size_t)cfg.nranks, sizeof *comm->blocks);
    comm->peer_tier = calloc((size_t)cfg.nranks, sizeof *comm->peer_tier);
    if (!comm->blocks || !comm->peer_tier) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
        goto err_close_fds;
    }
    st = weft_ctrlblk_share(fds, cfg.rank, cfg.nranks, comm->layout.bytes, deadline, comm->blocks);
    if (st != WEFT_SUCCESS)
        goto err_close_fds;
    if (cfg.backend == WEFT_BACKEND_CUDA) {
        st = weft_cuda_select_device(env->local_rank >= 0 ? env->local_rank : cfg.rank,
                                     &comm->device);
        if (st != WEFT_SUCCESS)
            goto err_unmap_blocks;
    }
    st = weft_window_reserve(store, comm->mem, cfg.nranks, slice, &comm->window);
    if (st != WEFT_SUCCESS)
        goto err_unmap_blocks;
    /* The CUDA provider registers chunks (an export costs ~0.7 ms and is serialised in the
     * driver); on the host every allocation is its own range of the rank's memfd. */
    size_t chunk_min = cfg.backend == WEFT_BACKEND_CUDA ? env->cuda_chunk_bytes : 0;
    st = weft_registry_create(comm, &comm->window, cfg.rank, cfg.nranks, cfg.registration,
                              chunk_min, (unsigned)env->registration_backlog, fds, &comm->registry);
    if (st != WEFT_SUCCESS)
        goto err_release_window;

    /* Staging scratch: internal, registered at once; weft_registry_destroy unmaps it. */
    comm->staging_bytes = env->staging_bytes; /* at least 4096 (config.c) */
    st = weft_registry_alloc(comm->registry, comm->staging_bytes, 1, &comm->staging);
    if (st != WEFT_SUCCESS) {
        weft_error_prefix(st, "the staging scratch (WEFT_STAGING_BYTES)");
        goto err_destroy_registry;
    }

    unsigned cpu = 0, node = 0;
    (void)getcpu(&cpu, &node);
    rank_info_t mine = {.numa = (int32_t)node};
    st = weft_store_allgather(store, "ranks", &mine, sizeof mine, infos);
    if (st != WEFT_SUCCESS)
        goto err_destroy_registry;
    for (int r = 0; r < cfg.nranks; r++) {
        comm->peer_tier[r] = r == cfg.rank                ? WEFT_TIER_SELF
                             : infos[r].numa == mine.numa ? WEFT_TIER_PEER
                                                          : WEFT_TIER_REMOTE_NUMA;
    }
    /* Each acquire is a wait of its own, but init as a whole ends by its deadline (weft.h). Its
     * waits are no collective's first use: not counted. */
    weft_wait_ctx_t ctx = {.comm = comm, .cap_ns = deadline, .what = "weft_comm_init"};
    int ready;
    uint64_t waited_ns = 0;
    st = weft_comm_acquire(comm, comm->staging, comm->staging_bytes, &ctx, &ready, &waited_ns);
    if (st == WEFT_SUCCESS && cfg.backend == WEFT_BACKEND_CUDA) {
        st = weft_cuda_comm_setup(comm, store);
        if (st == WEFT_SUCCESS)
            st = weft_comm_acquire(comm, weft_cuda_ctl(comm), weft_cuda_ctl_bytes(comm), &ctx,
                                   &ready, &waited_ns);
    }
    if (st != WEFT_SUCCESS)
        goto err_destroy_registry;
    /* Everything that can fail on this rank alone comes before the barrier, which commits: a
     * rank that fails after its peers passed it would leave them a communicator they take for
     * whole (weft.h: init fails on every rank or on none). Listed, the communicator can be
     * aborted, but only through a pointer no caller has before we return. */
    st = comm->exec_ops->create(cfg.host_workers, &comm->wait_policy, &comm->exec);
    if (st != WEFT_SUCCESS)
        goto err_destroy_registry;
    if (live_add(comm) != 0) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: the list of live communicators");
        goto err_destroy_exec;
    }
    /* Our registrations are acknowledged: after this barrier every staging scratch is mapped
     * everywhere. */
    st = weft_store_barrier(store, "ready");
    if (st != WEFT_SUCCESS)
        goto err_unlist;
    memset(&comm->stats, 0, sizeof comm->stats); /* init's own waits are not first uses */
    weft_store_close(store);
    free(fds);
    free(infos);
    *comm_out = comm;
    return WEFT_SUCCESS;

err_unlist:
    live_remove(comm);
err_destroy_exec:
    comm->exec_ops->destroy(comm->exec);
err_destroy_registry:
    weft_registry_destroy(comm->registry, 0, 0); /* joins the registrar first; peers see a loss */
    comm->registry = NULL;
    weft_cuda_comm_teardown(comm);
err_release_window:
    weft_window_release(&comm->window);
err_unmap_blocks:
    weft_ctrlblk_unmap(comm->blocks, cfg.nranks, comm->layout.bytes);
err_close_fds:
    for (int i = 0; i < cfg.nranks; i++)
        weft_forksafe_close(fds[i]);
err_close_store:
    weft_store_close_failed(store); /* on rank 0: peers waiting for our keys fail at once */
err_free:
    if (comm) {
        free(comm->blocks);
        free(comm->peer_tier);
        weft_steal_fini(&comm->steal);
        weft_plan_cache_destroy(comm->plans);
    }
    free(comm);
    free(fds);
    free(infos);
    return st;
}

weft_status_t weft_comm_teardown(struct weft_comm *comm)
{
    weft_status_t st = WEFT_SUCCESS;
    int healthy = !atomic_load(&comm->aborted) && atomic_load(&comm->async_error) == WEFT_SUCCESS;
    if (comm->backend == WEFT_BACKEND_CUDA) {
        /* Kernels may still read peers' memory: let them finish (their waits have deadlines)
         * before anyone unmaps anything. */
        weft_status_t synced = weft_cuda_synchronize("weft_comm_destroy");
        if (synced != WEFT_SUCCESS) {
            healthy = 0;
            st = synced; /* a device error: results may be wrong */
        }
        /* A kernel that failed (a timeout, a lost peer) after the last call that could have
         * told: this is the caller's last chance to learn that an operation's result is wrong.
         * Not after an abort, nor once a call returned the communicator's failure. */
        if (synced == WEFT_SUCCESS && !atomic_load(&comm->aborted) &&
            !atomic_load(&comm->failure_returned)) {
            st = weft_cuda_check(comm, "weft_comm_destroy");
            healthy &= st == WEFT_SUCCESS;
        }
    }
    if (healthy) {
        /* The last handshake is a barrier: after it nobody touches another rank's memory. */
        uint64_t seq = ++comm->seq;
        weft_wait_ctx_t ctx = weft_comm_wait_ctx(comm, "weft_comm_destroy");
        weft_op_desc_t desc = {.coll = WEFT_COLL_DESTROY};
        for (int p = 0; p < comm->nranks; p++) {
            if (p != comm->rank)
                weft_hs_post(comm, p, seq, &desc, NULL);
        }
        st = weft_hs_wait_posted(comm, seq, &ctx);
        if (st == WEFT_SUCCESS)
            st = weft_hs_check_match(comm, seq, &desc, NULL, NULL, "weft_comm_destroy", NULL);
        healthy = st == WEFT_SUCCESS;
    }
    /* From here the parts go away: an abort on another thread (it never blocks) finishes first,
     * and a later one does not find the communicator. An abort during the handshake above still
     * ends its waits. */
    live_remove(comm);
    while (atomic_load(&comm->aborts_in_flight) > 0)
        sched_yield();
    comm->exec_ops->destroy(comm->exec);
    /* Healthy peers are destroying too: exchange BYEs, for a few seconds at most. After an error
     * nobody is waited for and no BYE is sent: the sockets are shut down, so peers that still
     * wait on this rank fail with WEFT_ERR_PEER_LOST at once rather than at their timeout. The
     * registrar stops first: until it is joined it may record an error, which raises the CUDA
     * state's abort word. */
    double bye_s = comm->timeout_s < 5 ? comm->timeout_s : 5;
    weft_registry_destroy(comm->registry, healthy, healthy ? weft_deadline_after_s(bye_s) : 0);
    weft_cuda_comm_teardown(comm);
    weft_window_release(&comm->window);
    weft_ctrlblk_unmap(comm->blocks, comm->nranks, comm->layout.bytes);
    weft_steal_fini(&comm->steal);
    weft_plan_cache_destroy(comm->plans);
    free(comm->blocks);
    free(comm->peer_tier);
    free(comm);
    return st;
}

weft_status_t weft_comm_acquire(struct weft_comm *comm, const void *ptr, size_t bytes,
                                weft_wait_ctx_t *ctx, int *ready_out, uint64_t *waited_ns)
{
    weft_buf_state_t state;
    uint64_t waited;
    weft_status_t st =
        weft_registry_acquire(comm->registry, ptr, bytes, &comm->wait_policy, weft_comm_check,
                              weft_wait_begin(ctx), &state, &waited);
    *waited_ns += waited;
    *ready_out = state == WEFT_BUF_READY;
    return st;
}

weft_status_t weft_comm_staging(struct weft_comm *comm, size_t bytes, weft_wait_ctx_t *ctx,
                                void **ptr_out, uint64_t *waited_ns)
{
    if (bytes > comm->staging_bytes) {
        size_t grown = comm->staging_bytes * 2 > bytes ? comm->staging_bytes * 2 : bytes;
        void *fresh;
        weft_status_t st = weft_registry_alloc(comm->registry, grown, 1, &fresh);
        if (st != WEFT_SUCCESS) {
            char why[256];
            snprintf(why, sizeof why, "%s", weft_last_error());
            return weft_error(st,
                              "%s: a buffer not from weft_malloc takes the staged path, whose "
                              "scratch cannot grow to %zu bytes (%s); pass weft_malloc memory",
                              ctx->what, bytes, why);
        }
        /* On the device the old scratch stays until destroy: queued operations may still use it
         * (this rank's or, through their kernels, its peers'), and so does every replay of a
         * CUDA graph captured with it, its address baked into the kernels' parameters. Growth
         * at least doubles, so the kept ones add up to less than the scratch in use. On the
         * host every operation finished before returning. */
        if (comm->backend != WEFT_BACKEND_CUDA)
            (void)weft_registry_free(comm->registry, comm->staging);
        comm->staging = fresh;
        comm->staging_bytes = grown;
    }
    int ready;
    weft_status_t st = weft_comm_acquire(comm, comm->staging, bytes, ctx, &ready, waited_ns);
    if (st != WEFT_SUCCESS)
        return st;
    *ptr_out = comm->staging;
    return WEFT_SUCCESS;
}
