/*
 * api_comm.c - public communicator, memory and statistics functions: argument checks, then the
 * core layer.
 */
#include <string.h>

#include "api/api.h"
#include "core/comm.h"
#include "core/comm_cuda.h"
#include "core/registry.h"
#include "op/moe.h"
#include "util/config.h"
#include "util/log.h"

void weft_config_default(weft_config_t *cfg)
{
    if (!cfg)
        return;
    const weft_env_t *env = weft_config_get();
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->rank = -1;
    cfg->nranks = -1;
    cfg->backend = env->backend;
    cfg->registration = env->registration;
    cfg->timeout_s = env->timeout_s;
    cfg->host_workers = env->host_workers;
}

weft_status_t weft_comm_init(weft_comm_t *comm, const weft_config_t *cfg)
{
    weft_error_clear();
    /* Before any check: every call counts, a NULL comm too (weft.h). */
    uint32_t generation = weft_comm_take_generation();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init: comm is NULL");
    weft_status_t st = weft_comm_create(cfg, generation, comm);
    if (st != WEFT_SUCCESS) /* inner steps (the store, the registry) do not know the call */
        weft_error_prefix(st, "weft_comm_init");
    return st;
}

weft_status_t weft_comm_destroy(weft_comm_t comm)
{
    weft_error_clear();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_destroy: comm is NULL");
    weft_status_t st = weft_comm_owned(comm, "weft_comm_destroy");
    if (st != WEFT_SUCCESS)
        return st; /* a forked child's copy: the parent's threads, peers and memory stay as is */
    /* MoE handles may outlive the communicator: from here they hold only host memory. */
    weft_moe_handles_detach(comm);
    weft_cuda_prev_t prev;
    st = weft_cuda_device_enter(comm, "weft_comm_destroy", &prev);
    if (st == WEFT_SUCCESS) /* else: no CUDA call can work; still tear down, never leak */
        st = weft_comm_teardown(comm);
    else
        (void)weft_comm_teardown(comm);
    weft_cuda_device_leave(prev);
    return st;
}

weft_status_t weft_comm_abort(weft_comm_t comm)
{
    weft_error_clear();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_abort: comm is NULL");
    if (!weft_comm_abort_enter(comm))
        return WEFT_SUCCESS; /* its teardown is past the point of aborts (weft.h): nothing to do */
    weft_status_t st = weft_comm_owned(comm, "weft_comm_abort");
    if (st == WEFT_SUCCESS) /* else shutting the inherited sockets would end the parent's */
        weft_comm_mark_aborted(comm);
    weft_comm_abort_leave(comm);
    return st;
}

int weft_comm_rank(weft_comm_t comm)
{
    return comm ? comm->rank : -1;
}

int weft_comm_size(weft_comm_t comm)
{
    return comm ? comm->nranks : -1;
}

weft_backend_t weft_comm_backend(weft_comm_t comm)
{
    return comm ? comm->backend : WEFT_BACKEND_AUTO;
}

int weft_comm_device(weft_comm_t comm)
{
    return comm ? weft_cuda_device(comm) : -1;
}

weft_status_t weft_malloc(weft_comm_t comm, void **ptr, size_t bytes)
{
    weft_error_clear();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_malloc: comm is NULL");
    if (!ptr)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_malloc: ptr is NULL");
    weft_status_t st = weft_comm_usable(comm, "weft_malloc");
    if (st != WEFT_SUCCESS)
        return st;
    if (bytes == 0) {
        *ptr = NULL;
        return WEFT_SUCCESS;
    }
    if (bytes > WEFT_API_MAX_BUFFER_BYTES)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_malloc: bytes %zu exceeds the %zu bytes a process can address",
                          bytes, WEFT_API_MAX_BUFFER_BYTES);
    weft_cuda_prev_t prev;
    st = weft_cuda_device_enter(comm, "weft_malloc", &prev);
    if (st == WEFT_SUCCESS)
        st = weft_registry_alloc(comm->registry, bytes, 0, ptr);
    weft_cuda_device_leave(prev);
    if (st != WEFT_SUCCESS) /* the registry's and the provider's messages do not know the call */
        weft_error_prefix(st, "weft_malloc");
    return st;
}

weft_status_t weft_free(weft_comm_t comm, void *ptr)
{
    weft_error_clear();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_free: comm is NULL");
    weft_status_t st = weft_comm_owned(comm, "weft_free");
    if (st != WEFT_SUCCESS)
        return st;
    if (!ptr)
        return WEFT_SUCCESS;
    weft_cuda_prev_t prev;
    st = weft_cuda_device_enter(comm, "weft_free", &prev);
    if (st == WEFT_SUCCESS)
        st = weft_registry_free(comm->registry, ptr);
    weft_cuda_device_leave(prev);
    if (st != WEFT_SUCCESS) /* the registry's messages do not know the call */
        weft_error_prefix(st, "weft_free");
    return st;
}

weft_status_t weft_get_stats(weft_comm_t comm, weft_stats_t *out)
{
    weft_error_clear();
    if (!comm)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_get_stats: comm is NULL");
    if (!out)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_get_stats: out is NULL");
    weft_status_t st = weft_comm_owned(comm, "weft_get_stats");
    if (st != WEFT_SUCCESS)
        return st;
    const weft_registry_stats_t *r = weft_registry_stats(comm->registry);
    const weft_comm_stats_t *c = &comm->stats;
    *out = (weft_stats_t){
        .registrations_started = atomic_load(&r->registrations_started),
        .registrations_completed = atomic_load(&r->registrations_completed),
        .bytes_registered = atomic_load(&r->bytes_registered),
        .first_use_waits = atomic_load(&c->first_use_waits),
        .first_use_wait_ns = atomic_load(&c->first_use_wait_ns),
        .zero_copy_ops = atomic_load(&c->zero_copy_ops),
        .staged_ops = atomic_load(&c->staged_ops),
        .peer_mappings = atomic_load(&r->peer_mappings),
        .staging_bytes = comm->staging_bytes,
        .inline_ops = atomic_load(&c->inline_ops),
        .remote_store_ops = atomic_load(&c->remote_store_ops),
        .copy_engine_ops = atomic_load(&c->copy_engine_ops),
        .sm_blocks = atomic_load(&c->sm_blocks),
    };
    return WEFT_SUCCESS;
}
