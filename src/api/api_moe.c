/*
 * api_moe.c - public MoE dispatch and combine: every argument a caller can get wrong is checked
 * here and rejected with WEFT_ERR_INVALID_ARGUMENT and a message naming the call and the
 * argument, before any communication (so the communicator stays usable); then the op layer runs
 * (op/moe.h). Expert ids out of range are not checked here: they fail every rank in the op
 * (the host backend's verdict, the CUDA backend's device check), so that the peers of a rank
 * with a bad routing do not wait for it.
 *
 * Unlike the other collectives, a count of 0 (num_tokens) does not return at once: the call
 * still takes part in the exchange, since peers may send this rank tokens.
 *
 * Thread safety: as the communicator (one user thread at a time).
 */
#include <stdint.h>
#include <stdlib.h>

#include "api/api.h"
#include "core/comm.h"
#include "exec/moe_cuda.h"
#include "op/moe.h"
#include "util/dtype.h"
#include "util/log.h"

#define INVALID(...) weft_error(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static int is_float_dtype(weft_dtype_t dtype)
{
    return dtype == WEFT_FLOAT32 || dtype == WEFT_FLOAT16 || dtype == WEFT_BFLOAT16;
}

/* One array of a MoE call: its extent, its elements, and whether the call writes it. */
typedef struct moe_array {
    const char *what;
    const void *ptr;
    size_t bytes;
    size_t esize;
    const char *type;
    int written;
} moe_array_t;

/* Every array aligned to its elements (weft_api_check_aligned), and none that the call writes
 * overlapping another array (NULL ones, not given, overlap nothing): peers read the inputs while
 * this rank writes its outputs, so a dispatch or combine is never in place. */
static weft_status_t check_arrays(const char *call, const moe_array_t *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        weft_status_t st = weft_api_check_aligned(call, a[i].what, a[i].ptr, a[i].esize, a[i].type);
        if (st != WEFT_SUCCESS)
            return st;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            if ((a[i].written || a[j].written) && a[i].ptr && a[j].ptr &&
                weft_api_overlap(a[i].ptr, a[i].bytes, a[j].ptr, a[j].bytes))
                return INVALID("%s: %s and %s overlap (MoE calls are not in place)", call,
                               a[i].what, a[j].what);
        }
    }
    return WEFT_SUCCESS;
}

/* A handle given to call as `what` was made by a dispatch on comm: WEFT_ERR_INVALID_ARGUMENT
 * when its communicator was destroyed (the handle is detached: op/moe.h; so a later
 * communicator at the same address is never taken for it) or is another one. */
static weft_status_t check_handle(const char *call, const char *what,
                                  const struct weft_moe_handle *h, const struct weft_comm *comm)
{
    const struct weft_comm *mine = weft_moe_handle_comm(h);
    if (!mine)
        return INVALID("%s: %s belongs to a destroyed communicator (weft_moe_handle_destroy is "
                       "all it is good for)",
                       call, what);
    if (mine != comm)
        return INVALID("%s: %s comes from a dispatch on another communicator", call, what);
    return WEFT_SUCCESS;
}

#define MAX_BYTES WEFT_API_MAX_BUFFER_BYTES

/* The array `array` of `rows` rows (the argument `arg`) of row_bytes (>= 1) bytes each within
 * MAX_BYTES, else WEFT_ERR_INVALID_ARGUMENT naming arg and the array. */
static weft_status_t check_rows(const char *call, const char *arg, size_t rows, size_t row_bytes,
                                const char *array)
{
    if (rows <= MAX_BYTES / row_bytes)
        return WEFT_SUCCESS;
    return INVALID("%s: %s %zu rows of %zu bytes (%s) exceed the %zu bytes a process can address",
                   call, arg, rows, row_bytes, array, MAX_BYTES);
}

/* The sizes of a dispatch (dtype and topk already checked), each within MAX_BYTES as the
 * collectives' buffers are: a row, x and recv_x, topk_idx and recv_topk_idx (the larger of the
 * routing arrays), and for a fresh dispatch the layout it builds (host: the lists it stages, at
 * most min(n, topk) per token of 8 + 12 topk bytes; CUDA: the handle memory, exec/moe_cuda.h).
 * On the CUDA backend num_tokens and max_recv_tokens are at most INT32_MAX besides: its layout
 * kernel numbers tokens with 32-bit positions. */
static weft_status_t check_sizes(const char *call, const struct weft_comm *comm, size_t num_tokens,
                                 size_t hidden, weft_dtype_t dtype, int topk,
                                 size_t max_recv_tokens, int fresh)
{
    size_t esize = weft_dtype_size(dtype), k = (size_t)topk;
    const char *type = weft_dtype_name(dtype);
    if (hidden > MAX_BYTES / esize)
        return INVALID("%s: hidden %zu elements of %s exceed the %zu bytes a process can address",
                       call, hidden, type, MAX_BYTES);
    size_t row_bytes = hidden * esize, routing_bytes = sizeof(int64_t) * k;
    weft_status_t st = check_rows(call, "num_tokens", num_tokens, row_bytes, "x");
    if (st == WEFT_SUCCESS)
        st = check_rows(call, "num_tokens", num_tokens, routing_bytes, "topk_idx");
    if (st == WEFT_SUCCESS)
        st = check_rows(call, "max_recv_tokens", max_recv_tokens, row_bytes, "recv_x");
    if (st == WEFT_SUCCESS)
        st = check_rows(call, "max_recv_tokens", max_recv_tokens, routing_bytes, "recv_topk_idx");
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks;
    if (comm->backend == WEFT_BACKEND_CUDA) {
        if (num_tokens > INT32_MAX || max_recv_tokens > INT32_MAX)
            return INVALID("%s: %s %zu is more than the CUDA backend takes (%d: its layout "
                           "numbers tokens with 32-bit positions)",
                           call, num_tokens > INT32_MAX ? "num_tokens" : "max_recv_tokens",
                           num_tokens > INT32_MAX ? num_tokens : max_recv_tokens, INT32_MAX);
        if (fresh && weft_moe_dev_layout_bytes(num_tokens, n, topk, MAX_BYTES) == 0)
            return INVALID("%s: num_tokens %zu with topk %d on %d ranks needs handle memory past "
                           "the %zu bytes a process can address",
                           call, num_tokens, topk, n, MAX_BYTES);
        return WEFT_SUCCESS;
    }
    size_t dests = (size_t)n < k ? (size_t)n : k, per_token = 8 + 12 * k; /* k is an int */
    if (fresh && num_tokens > MAX_BYTES / dests / per_token)
        return INVALID("%s: num_tokens %zu with topk %d on %d ranks needs a layout (up to %zu "
                       "lists of %zu bytes a token) past the %zu bytes a process can address",
                       call, num_tokens, topk, n, dests, per_token, MAX_BYTES);
    return WEFT_SUCCESS;
}

/* A WEFT_MOE_REUSE dispatch: the handle to reuse, whose shape the call must repeat. */
static weft_status_t check_reuse(const char *call, weft_comm_t comm, weft_moe_handle_t *handle,
                                 size_t num_tokens, size_t hidden, weft_dtype_t dtype)
{
    if (!handle || !*handle)
        return INVALID("%s: topk is WEFT_MOE_REUSE but %s is NULL (no layout to reuse)", call,
                       !handle ? "handle" : "*handle");
    const struct weft_moe_handle *h = *handle;
    weft_status_t st = check_handle(call, "*handle", h, comm);
    if (st != WEFT_SUCCESS)
        return st;
    if (num_tokens != h->num_tokens)
        return INVALID("%s: num_tokens %zu differs from the reused layout's %zu", call, num_tokens,
                       h->num_tokens);
    if (hidden != h->hidden)
        return INVALID("%s: hidden %zu differs from the reused layout's %zu", call, hidden,
                       h->hidden);
    if (dtype != h->dtype)
        return INVALID("%s: dtype %s differs from the reused layout's %s", call,
                       weft_dtype_name(dtype), weft_dtype_name(h->dtype));
    return WEFT_SUCCESS;
}

weft_status_t weft_moe_dispatch(weft_comm_t comm, const void *x, size_t num_tokens, size_t hidden,
                                weft_dtype_t dtype, const int64_t *topk_idx,
                                const float *topk_weights, int topk, int num_experts, void *recv_x,
                                int64_t *recv_topk_idx, float *recv_topk_weights,
                                int64_t *recv_expert_counts, size_t max_recv_tokens,
                                int64_t *num_recv_tokens, weft_moe_handle_t *handle, void *stream)
{
    static const char call[] = "weft_moe_dispatch";
    weft_status_t st = weft_api_check_comm(call, comm, stream);
    if (st != WEFT_SUCCESS)
        return st;
    struct weft_moe_handle *reuse = NULL;
    if (topk == WEFT_MOE_REUSE) { /* the routing is the handle's */
        st = check_reuse(call, comm, handle, num_tokens, hidden, dtype);
        if (st != WEFT_SUCCESS)
            return st;
        reuse = *handle;
        topk = reuse->topk;
        num_experts = reuse->num_experts;
    }
    int n = comm->nranks;
    if (!is_float_dtype(dtype))
        return INVALID("%s: dtype %s is not float32, float16 or bfloat16", call,
                       weft_dtype_name(dtype));
    if (hidden == 0)
        return INVALID("%s: hidden is 0", call);
    if (num_experts < 1 || num_experts % n != 0)
        return INVALID("%s: num_experts %d is not a positive multiple of the rank count %d", call,
                       num_experts, n);
    if (topk < 1 || topk > num_experts)
        return INVALID("%s: topk %d is not in [1, num_experts = %d]", call, topk, num_experts);
    st = check_sizes(call, comm, num_tokens, hidden, dtype, topk, max_recv_tokens, !reuse);
    if (st != WEFT_SUCCESS)
        return st;
    size_t row_bytes = hidden * weft_dtype_size(dtype);
    if (num_tokens > 0 && !x)
        return INVALID("%s: x is NULL with num_tokens %zu", call, num_tokens);
    if (num_tokens > 0 && !reuse && (!topk_idx || !topk_weights))
        return INVALID("%s: %s is NULL with num_tokens %zu", call,
                       !topk_idx ? "topk_idx" : "topk_weights", num_tokens);
    if (max_recv_tokens > 0 && !recv_x)
        return INVALID("%s: recv_x is NULL with max_recv_tokens %zu", call, max_recv_tokens);
    if (max_recv_tokens > 0 && !reuse && (!recv_topk_idx || !recv_topk_weights))
        return INVALID("%s: %s is NULL with max_recv_tokens %zu", call,
                       !recv_topk_idx ? "recv_topk_idx" : "recv_topk_weights", max_recv_tokens);
    if ((!recv_expert_counts && !reuse) || !num_recv_tokens || !handle)
        return INVALID("%s: %s is NULL", call,
                       !num_recv_tokens ? "num_recv_tokens"
                       : !handle        ? "handle"
                                        : "recv_expert_counts");
    /* A reuse reads no routing (topk_idx, topk_weights are not looked at), but writes the
     * routing outputs it is given, as the first dispatch did. */
    size_t esize = weft_dtype_size(dtype), routes = (size_t)topk;
    size_t experts_here = (size_t)(num_experts / n);
    const char *type = weft_dtype_name(dtype);
    const moe_array_t arrays[] = {
        {"x", x, num_tokens * row_bytes, esize, type, 0},
        {"topk_idx", reuse ? NULL : topk_idx, num_tokens * routes * sizeof(int64_t),
         sizeof(int64_t), "int64", 0},
        {"topk_weights", reuse ? NULL : topk_weights, num_tokens * routes * sizeof(float),
         sizeof(float), "float32", 0},
        {"recv_x", recv_x, max_recv_tokens * row_bytes, esize, type, 1},
        {"recv_topk_idx", recv_topk_idx, max_recv_tokens * routes * sizeof(int64_t),
         sizeof(int64_t), "int64", 1},
        {"recv_topk_weights", recv_topk_weights, max_recv_tokens * routes * sizeof(float),
         sizeof(float), "float32", 1},
        {"recv_expert_counts", recv_expert_counts, experts_here * sizeof(int64_t), sizeof(int64_t),
         "int64", 1},
        {"num_recv_tokens", num_recv_tokens, sizeof(int64_t), sizeof(int64_t), "int64", 1},
    };
    st = check_arrays(call, arrays, sizeof arrays / sizeof arrays[0]);
    if (st != WEFT_SUCCESS)
        return st;
    if (comm->backend == WEFT_BACKEND_CUDA) /* asynchronous: the counts stay on the device */
        return weft_moe_dispatch_dev(comm, x, num_tokens, hidden, dtype, topk_idx, topk_weights,
                                     topk, num_experts, recv_x, recv_topk_idx, recv_topk_weights,
                                     recv_expert_counts, max_recv_tokens, reuse, num_recv_tokens,
                                     handle, stream);
    struct weft_moe_handle *h;
    int64_t num_recv;
    st = weft_moe_dispatch_mesh(comm, x, num_tokens, hidden, dtype, topk_idx, topk_weights, topk,
                                num_experts, recv_x, recv_topk_idx, recv_topk_weights,
                                recv_expert_counts, max_recv_tokens, reuse, &num_recv, &h);
    if (st != WEFT_SUCCESS)
        return st;
    *num_recv_tokens = num_recv;
    *handle = h;
    return WEFT_SUCCESS;
}

weft_status_t weft_moe_combine(weft_comm_t comm, weft_moe_handle_t handle, const void *y, void *out,
                               void *stream)
{
    static const char call[] = "weft_moe_combine";
    weft_status_t st = weft_api_check_comm(call, comm, stream);
    if (st != WEFT_SUCCESS)
        return st;
    if (!handle)
        return INVALID("%s: handle is NULL", call);
    st = check_handle(call, "handle", handle, comm);
    if (st != WEFT_SUCCESS)
        return st;
    if (handle->num_tokens > 0 && !out)
        return INVALID("%s: out is NULL with num_tokens %zu", call, handle->num_tokens);
    /* On CUDA the received count is on the device and y may hold just that many rows, none at
     * all on a rank that received nothing: its overlap with out is not checked there. */
    size_t esize = weft_dtype_size(handle->dtype), row_bytes = handle->hidden * esize;
    size_t y_rows = comm->backend != WEFT_BACKEND_CUDA ? handle->num_recv : 0;
    const char *type = weft_dtype_name(handle->dtype);
    const moe_array_t arrays[] = {
        {"y", y, y_rows * row_bytes, esize, type, 0},
        {"out", out, handle->num_tokens * row_bytes, esize, type, 1},
    };
    st = check_arrays(call, arrays, sizeof arrays / sizeof arrays[0]);
    if (st != WEFT_SUCCESS)
        return st;
    if (comm->backend == WEFT_BACKEND_CUDA) /* the received count is on the device, which
                                                 checks y NULL (op/moe.h) */
        return weft_moe_combine_dev(comm, handle, y, out, stream);
    if (handle->num_recv > 0 && !y)
        return INVALID("%s: y is NULL with %zu received tokens", call, handle->num_recv);
    return weft_moe_combine_mesh(comm, handle, y, out);
}

weft_status_t weft_moe_handle_destroy(weft_moe_handle_t handle)
{
    weft_error_clear();
    if (!handle)
        return WEFT_SUCCESS;
    return weft_moe_handle_release(handle);
}
