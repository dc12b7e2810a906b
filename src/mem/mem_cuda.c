/*
 * mem_cuda.c - the CUDA memory provider: device memory made with the virtual memory management
 * API (VMM) and mapped inside cuMemAddressReserve reservations.
 *
 * A segment is a cuMemCreate handle of pinned memory on the current device, created exportable
 * as a POSIX file descriptor (a segment's fd stays -1: descriptors are made on demand by
 * export_fd, one per call). map = cuMemMap + cuMemSetAccess (read/write for the current
 * device); a peer imports the descriptor, maps it at the same address and grants access to its
 * own device, which then reaches the owner's memory over NVLink. Releasing a handle does not
 * free memory that is still mapped or exported: the driver frees it when the last mapping,
 * handle and descriptor are gone, which is what lets the core destroy segments right after
 * mapping or exporting them (mem.h).
 *
 * The device is the one of the calling thread's current context, looked up on every call, so
 * a thread without a context gets a clear error rather than a silently wrong device; the
 * core's registrar thread makes its communicator's device current with attach_thread. There is
 * no state of the provider's own: communicators of one process may use different devices.
 *
 * Thread safety: every function may be called from any thread; the driver table is resolved
 * once and read-only afterwards.
 */
#include "mem/mem.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "mem/cuda_driver.h"
#include "util/log.h"

/* Pinned device memory on dev, exportable as a POSIX file descriptor. The granularity is asked
 * for with the same properties as the allocation. */
static CUmemAllocationProp device_prop(CUdevice dev)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    return prop;
}

static inline CUdeviceptr dptr(const void *addr)
{
    return (CUdeviceptr)(uintptr_t)addr;
}

static weft_status_t cuda_attach_thread(int device)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    if (device < 0)
        return weft_error(WEFT_ERR_INTERNAL,
                          "CUDA memory provider: attach_thread(%d): not a device", device);
    /* cudaSetDevice makes the device's primary context current on this thread. */
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess)
        return weft_error(WEFT_ERR_CUDA, "cudaSetDevice(%d) for this thread: %s: %s", device,
                          cudaGetErrorName(err), cudaGetErrorString(err));
    return WEFT_SUCCESS;
}

static size_t cuda_granularity(void)
{
    const weft_cuda_driver_t *drv;
    CUdevice dev = 0;
    if (weft_cuda_driver_device(&drv, &dev) != WEFT_SUCCESS)
        return 0;
    CUmemAllocationProp prop = device_prop(dev);
    size_t gran = 0;
    CUresult res =
        drv->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (res != CUDA_SUCCESS) {
        weft_cuda_error(res, "cuMemGetAllocationGranularity(device %d)", (int)dev);
        return 0;
    }
    return gran;
}

static weft_status_t cuda_reserve(void *hint, size_t bytes, int exact, void **addr_out)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    /* The driver treats a non-zero address as a hint only: an exact request is checked below. */
    CUdeviceptr p = 0;
    CUresult res = drv->cuMemAddressReserve(&p, bytes, 0, dptr(hint), 0);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemAddressReserve(%zu bytes at %p)", bytes, hint);
    if (exact && p != dptr(hint)) {
        res = drv->cuMemAddressFree(p, bytes);
        if (res != CUDA_SUCCESS)
            weft_cuda_warn(res, "cuMemAddressFree(0x%llx, %zu) of a misplaced reservation",
                           (unsigned long long)p, bytes);
        return WEFT_ERR_NO_MEMORY; /* expected during window agreement: not logged */
    }
    *addr_out = (void *)(uintptr_t)p;
    return WEFT_SUCCESS;
}

static weft_status_t cuda_release(void *addr, size_t bytes)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    CUresult res = drv->cuMemAddressFree(dptr(addr), bytes);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemAddressFree(%p, %zu)", addr, bytes);
    return WEFT_SUCCESS;
}

static weft_status_t cuda_create(size_t bytes, weft_mem_seg_t *seg_out)
{
    const weft_cuda_driver_t *drv;
    CUdevice dev = 0;
    weft_status_t st = weft_cuda_driver_device(&drv, &dev);
    if (st != WEFT_SUCCESS)
        return st;
    CUmemAllocationProp prop = device_prop(dev);
    CUmemGenericAllocationHandle handle;
    CUresult res = drv->cuMemCreate(&handle, bytes, &prop, 0);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemCreate(%zu bytes on device %d)", bytes, (int)dev);
    *seg_out = (weft_mem_seg_t){.fd = -1, .handle = (uint64_t)handle, .bytes = bytes};
    return WEFT_SUCCESS;
}

static void cuda_destroy(weft_mem_seg_t *seg)
{
    if (seg->handle == 0)
        return;
    /* A handle exists only if the table was resolved, so this cannot fail here. */
    const weft_cuda_driver_t *drv;
    if (weft_cuda_driver_get(&drv) != WEFT_SUCCESS)
        return;
    CUresult res = drv->cuMemRelease((CUmemGenericAllocationHandle)seg->handle);
    if (res != CUDA_SUCCESS)
        weft_cuda_warn(res, "cuMemRelease(%zu bytes)", seg->bytes); /* often while unwinding */
    seg->handle = 0;
}

static size_t cuda_sparse_bytes(void)
{
    return 0; /* cuMemCreate commits its memory at once */
}

static weft_status_t cuda_discard_unsupported(const weft_mem_seg_t *seg, size_t offset,
                                              size_t bytes)
{
    (void)seg;
    return weft_error(WEFT_ERR_UNSUPPORTED,
                      "cuda memory provider: discard [%zu, +%zu): segments are not sparse", offset,
                      bytes);
}

static weft_status_t cuda_map(const weft_mem_seg_t *seg, void *addr)
{
    const weft_cuda_driver_t *drv;
    CUdevice dev = 0;
    weft_status_t st = weft_cuda_driver_device(&drv, &dev);
    if (st != WEFT_SUCCESS)
        return st;
    CUresult res =
        drv->cuMemMap(dptr(addr), seg->bytes, 0, (CUmemGenericAllocationHandle)seg->handle, 0);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemMap(%zu bytes at %p)", seg->bytes, addr);
    CUmemAccessDesc access = {
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev},
        .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    res = drv->cuMemSetAccess(dptr(addr), seg->bytes, &access, 1);
    if (res != CUDA_SUCCESS) {
        st = weft_cuda_error(res, "cuMemSetAccess(%zu bytes at %p, read/write for device %d)",
                             seg->bytes, addr, (int)dev);
        goto err_unmap;
    }
    return WEFT_SUCCESS;

err_unmap:
    res = drv->cuMemUnmap(dptr(addr), seg->bytes);
    if (res != CUDA_SUCCESS)
        weft_cuda_warn(res, "cuMemUnmap(%p, %zu) after a failed cuMemSetAccess", addr, seg->bytes);
    return st;
}

static weft_status_t cuda_unmap(void *addr, size_t bytes)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    /* The range becomes a bare reservation again; a later map must grant access anew. */
    CUresult res = drv->cuMemUnmap(dptr(addr), bytes);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemUnmap(%p, %zu)", addr, bytes);
    return WEFT_SUCCESS;
}

static weft_status_t cuda_export(const weft_mem_seg_t *seg, int *fd_out)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    int fd = -1;
    CUresult res = drv->cuMemExportToShareableHandle(&fd, (CUmemGenericAllocationHandle)seg->handle,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuMemExportToShareableHandle(%zu bytes, POSIX fd)",
                               seg->bytes);
    /* Like every descriptor weft holds, it must not leak into programs this process execs. */
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "fcntl(exported CUDA fd %d, FD_CLOEXEC)", fd);
        goto err_close_fd;
    }
    *fd_out = fd;
    return WEFT_SUCCESS;

err_close_fd:
    close(fd);
    return st;
}

static weft_status_t cuda_import(int fd, size_t offset, size_t bytes, weft_mem_seg_t *seg_out)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        goto out_close_fd;
    if (offset != 0) {
        st = weft_error(WEFT_ERR_INTERNAL, "cuda import at offset %zu: segments are whole", offset);
        goto out_close_fd;
    }
    /* For POSIX descriptors the "OS handle" is the descriptor's value itself. The imported
     * handle holds its own reference to the memory, so the descriptor is closed either way. */
    CUmemGenericAllocationHandle handle;
    CUresult res = drv->cuMemImportFromShareableHandle(&handle, (void *)(uintptr_t)fd,
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (res != CUDA_SUCCESS) {
        st = weft_cuda_error(res, "cuMemImportFromShareableHandle(fd %d, %zu bytes)", fd, bytes);
        goto out_close_fd;
    }
    *seg_out = (weft_mem_seg_t){.fd = -1, .handle = (uint64_t)handle, .bytes = bytes};

out_close_fd:
    if (fd >= 0)
        close(fd);
    return st;
}

const weft_mem_ops_t weft_mem_cuda_ops = {
    .name = "cuda",
    .attach_thread = cuda_attach_thread,
    .granularity = cuda_granularity,
    .reserve = cuda_reserve,
    .release = cuda_release,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .sparse_bytes = cuda_sparse_bytes,
    .discard = cuda_discard_unsupported,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .export_fd = cuda_export,
    .import_fd = cuda_import,
};
