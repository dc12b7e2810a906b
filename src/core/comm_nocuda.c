/*
 * comm_nocuda.c - the CUDA backend's entry points in a library built without CUDA: named stubs
 * that say so (comm_cuda.c replaces this file's contents when CUDA is built).
 */
#include "core/comm_cuda.h"

#ifndef WEFT_HAVE_CUDA

#include "util/log.h"

static weft_status_t not_built(const char *call)
{
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: this library was built without CUDA", call);
}

int weft_cuda_available(void)
{
    return 0;
}

weft_status_t weft_cuda_select_device(int local_rank, int *device_out)
{
    (void)device_out;
    return not_built("weft_comm_init");
}

weft_status_t weft_cuda_comm_setup(struct weft_comm *comm, weft_store_t *store)
{
    return not_built("weft_comm_init");
}

void *weft_cuda_ctl(struct weft_comm *comm)
{
    return NULL;
}

size_t weft_cuda_ctl_bytes(const struct weft_comm *comm)
{
    return 0;
}

weft_status_t weft_cuda_device_enter(const struct weft_comm *comm, const char *call,
                                     weft_cuda_prev_t *prev)
{
    *prev = (weft_cuda_prev_t){NULL, 0};
    return WEFT_SUCCESS;
}

void weft_cuda_device_leave(weft_cuda_prev_t prev) {}

weft_status_t weft_cuda_synchronize(const char *call)
{
    return not_built(call);
}

void weft_cuda_comm_teardown(struct weft_comm *comm) {}

weft_status_t weft_cuda_check(struct weft_comm *comm, const char *call)
{
    return not_built(call);
}

weft_moe_dev_fail_t weft_cuda_moe_fail(struct weft_comm *comm)
{
    return (weft_moe_dev_fail_t){NULL, NULL};
}

size_t weft_cuda_push_bytes(const struct weft_comm *comm)
{
    return 0;
}

weft_status_t weft_cuda_execute(struct weft_comm *comm, const weft_work_t *work, unsigned sync,
                                weft_status_t mine, weft_cuda_copy_t *pending,
                                const weft_cuda_push_t *push, void *stream,
                                weft_cuda_usage_t *usage)
{
    return not_built("a collective");
}

weft_status_t weft_cuda_local_copy(struct weft_comm *comm, weft_cuda_copy_t *pending, void *dst,
                                   const void *src, size_t bytes, void *stream)
{
    return not_built("a collective");
}

void weft_cuda_abort(struct weft_comm *comm) {}

weft_status_t weft_cuda_enter(struct weft_comm *comm, weft_cuda_copy_t *pending, void *stream,
                              weft_cuda_usage_t *usage)
{
    return not_built("a collective");
}

weft_status_t weft_cuda_leave(struct weft_comm *comm, void *stream)
{
    return not_built("a collective");
}

int weft_cuda_device(const struct weft_comm *comm)
{
    return -1;
}

int weft_cuda_blocks(const struct weft_comm *comm)
{
    return 1;
}

int weft_cuda_spans_gpus(const struct weft_comm *comm)
{
    return 0;
}

int weft_cuda_copy_engine_takes(const struct weft_comm *comm, uint64_t bytes)
{
    return 0;
}

int weft_cuda_moe_blocks(const struct weft_comm *comm)
{
    return 1;
}

void *weft_cuda_moe_report(struct weft_comm *comm)
{
    return NULL;
}

uint32_t weft_cuda_moe_rejections(struct weft_comm *comm, void *last_out)
{
    return 0;
}

#endif /* WEFT_HAVE_CUDA */
