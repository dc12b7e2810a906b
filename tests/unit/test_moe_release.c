/*
 * test_moe_release.c - weft_moe_handle_release (src/op/moe_dispatch.c) of an attached CUDA
 * handle whose communicator's device cannot be made current: nothing may synchronise or free the
 * device memory (in whatever context is current, a synchronisation may wait for nothing, and
 * the free would pull memory from under the communicator's kernels); the switch's error comes
 * back, the device memory is left to the communicator's teardown, the rest of the handle is
 * freed. And, for contrast, the same release when the switch works: synchronise, then free.
 *
 * The CUDA calls are stubbed with -Wl,--wrap (tests/CMakeLists.txt) on weft_cuda_device_enter,
 * weft_cuda_device_leave, weft_cuda_synchronize, weft_registry_free and weft_comm_owned, so the
 * test needs no GPU and no real communicator: a zeroed struct weft_comm is enough for the
 * release's bookkeeping (the handle is not listed).
 */
#include <stdlib.h>

#include "check.h"
#include "op/moe.h"
#include "util/log.h"

static weft_status_t enter_status; /* what the stubbed device switch returns */
static int enters, leaves, syncs, frees;

weft_status_t __wrap_weft_cuda_device_enter(const struct weft_comm *comm, const char *call,
                                            weft_cuda_prev_t *prev);
void __wrap_weft_cuda_device_leave(weft_cuda_prev_t prev);
weft_status_t __wrap_weft_cuda_synchronize(const char *call);
weft_status_t __wrap_weft_registry_free(weft_registry_t *reg, void *ptr);
weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call);

weft_status_t __wrap_weft_cuda_device_enter(const struct weft_comm *comm, const char *call,
                                            weft_cuda_prev_t *prev)
{
    enters++;
    *prev = (weft_cuda_prev_t){NULL, 0};
    if (enter_status != WEFT_SUCCESS)
        return weft_error(enter_status, "%s: making device 0's context current (stub)", call);
    *prev = (weft_cuda_prev_t){NULL, 1};
    return WEFT_SUCCESS;
}

void __wrap_weft_cuda_device_leave(weft_cuda_prev_t prev)
{
    leaves += prev.restore;
}

weft_status_t __wrap_weft_cuda_synchronize(const char *call)
{
    syncs++;
    return WEFT_SUCCESS;
}

weft_status_t __wrap_weft_registry_free(weft_registry_t *reg, void *ptr)
{
    frees++;
    return WEFT_SUCCESS;
}

weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call)
{
    return WEFT_SUCCESS;
}

/* Release an attached CUDA handle of comm with the device switch returning st. */
static weft_status_t release(struct weft_comm *comm, weft_status_t st)
{
    struct weft_moe_handle *h = calloc(1, sizeof *h);
    CHECK(h != NULL, "out of memory");
    if (!h)
        return WEFT_ERR_NO_MEMORY;
    h->comm = comm;
    h->dev = (void *)(uintptr_t)0x100000; /* never dereferenced: the frees are stubbed */
    enter_status = st;
    enters = leaves = syncs = frees = 0;
    return weft_moe_handle_release(h);
}

int main(void)
{
    struct weft_comm *comm = calloc(1, sizeof *comm);
    if (!comm) {
        printf("FAIL: out of memory\n");
        return 1;
    }

    /* The switch fails: its error, and no synchronisation or free in the wrong context. */
    weft_status_t st = release(comm, WEFT_ERR_CUDA);
    CHECK(st == WEFT_ERR_CUDA, "release returned %s, expected the switch's error",
          weft_status_string(st));
    CHECK(enters == 1, "%d device switches", enters);
    CHECK(syncs == 0, "%d synchronisations after the switch failed (another context's)", syncs);
    CHECK(frees == 0, "%d frees of the device memory after the switch failed", frees);
    CHECK(leaves == 0, "%d context restores without a switch", leaves);
    CHECK(comm->moe_releases == 0, "moe_releases is %d after the release", comm->moe_releases);

    /* The switch works: synchronise, free, give the context back. */
    st = release(comm, WEFT_SUCCESS);
    CHECK(st == WEFT_SUCCESS, "release returned %s", weft_status_string(st));
    CHECK(syncs == 1 && frees == 1 && leaves == 1, "%d synchronisations, %d frees, %d restores",
          syncs, frees, leaves);
    CHECK(comm->moe_releases == 0, "moe_releases is %d after the release", comm->moe_releases);

    free(comm);
    if (failures == 0)
        printf("PASS test_moe_release\n");
    return failures != 0;
}
