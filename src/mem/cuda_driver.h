/*
 * cuda_driver.h - the CUDA driver functions weft calls, resolved at run time.
 *
 * weft never links the driver library (libcuda): the table below is filled once per process
 * through the CUDA runtime's cudaGetDriverEntryPointByVersion (cudaGetDriverEntryPoint with
 * toolkits before 12.5), so libweft loads, and its host backend runs, on machines without a
 * driver or a GPU. Every symbol is requested at the ABI of CUDA 12.0 (WEFT_CUDA_DRIVER_ABI) and
 * stored with the matching explicitly versioned typedef of cudaTypedefs.h: a newer driver can
 * then never hand back a function whose signature changed (cuCtxGetDevice took a second
 * argument in CUDA 13.0). <cuda.h> is included for its types only.
 *
 * Only compiled with WEFT_HAVE_CUDA. Thread safety: the table is resolved under pthread_once
 * and read-only afterwards; every function here may be called from any thread.
 */
#ifndef WEFT_MEM_CUDA_DRIVER_H
#define WEFT_MEM_CUDA_DRIVER_H

#include <cudaTypedefs.h> /* includes <cuda.h> */

#include "mem/mem.h"
#include "util/log.h"
#include "weft.h"

/* The driver ABI every entry point is requested at (1000 * major + 10 * minor). */
#define WEFT_CUDA_DRIVER_ABI 12000
/* The oldest driver accepted: CUDA 12.1 (R530) takes kernel parameters above 4 KiB, which the
 * collective kernel's long form uses (exec_cuda.cu). */
#define WEFT_CUDA_DRIVER_MIN 12010

typedef struct weft_cuda_driver {
    int driver_version; /* of the installed driver, 1000 * major + 10 * minor */
    int device_count;   /* devices visible to this process, at least 1 */

    PFN_cuGetErrorName_v6000 cuGetErrorName;
    PFN_cuGetErrorString_v6000 cuGetErrorString;
    PFN_cuCtxGetDevice_v2000 cuCtxGetDevice;
    PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent;
    PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
    PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
    PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute;
    PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity;
    PFN_cuMemAddressReserve_v10020 cuMemAddressReserve;
    PFN_cuMemAddressFree_v10020 cuMemAddressFree;
    PFN_cuMemCreate_v10020 cuMemCreate;
    PFN_cuMemRelease_v10020 cuMemRelease;
    PFN_cuMemMap_v10020 cuMemMap;
    PFN_cuMemUnmap_v10020 cuMemUnmap;
    PFN_cuMemSetAccess_v10020 cuMemSetAccess;
    PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle;
    PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle;
} weft_cuda_driver_t;

/* The process-wide driver table. The first call resolves it (it initialises the CUDA runtime;
 * never call it in a child between fork and exec). Statuses: WEFT_ERR_UNSUPPORTED, with a
 * message saying why (no driver installed, a driver older than CUDA 12.1, no device visible,
 * a missing entry point), whenever the table could not be resolved; every later call returns
 * the same status and message. *out is set only on success. */
weft_status_t weft_cuda_driver_get(const weft_cuda_driver_t **out);

/* Silent probe for backend selection: 1 when weft_cuda_driver_get would succeed; otherwise 0,
 * and *reason_out (if not NULL) points to a static text saying why. Records and logs nothing. */
int weft_cuda_driver_probe(const char **reason_out);

/* Record a failed driver call: the message is the formatted text followed by ": <name>:
 * <description>" of res (e.g. "cuMemCreate(2097152 bytes on device 0):
 * CUDA_ERROR_OUT_OF_MEMORY: out of memory"), or by ": CUDA driver error <number>" when the table
 * is not resolved (call it after weft_cuda_driver_get, as every table call is). Returns
 * WEFT_ERR_NO_MEMORY for CUDA_ERROR_OUT_OF_MEMORY and WEFT_ERR_CUDA for every other result
 * (res != CUDA_SUCCESS). */
weft_status_t weft_cuda_error(CUresult res, const char *fmt, ...) WEFT_PRINTF(2, 3);

/* Like weft_cuda_error, but only logs at WARN and leaves the last-error text alone: for a call
 * that fails while an earlier error is being unwound. */
void weft_cuda_warn(CUresult res, const char *fmt, ...) WEFT_PRINTF(2, 3);

/* The device of the calling thread's current context (cudaSetDevice makes one current).
 * Statuses: WEFT_ERR_CUDA when the thread has no current context. */
weft_status_t weft_cuda_current_device(const weft_cuda_driver_t *drv, CUdevice *dev_out);

/* weft_cuda_driver_get, then weft_cuda_current_device: the table and the device of the calling
 * thread's current context, both set only on success. Statuses: those of the two calls. */
weft_status_t weft_cuda_driver_device(const weft_cuda_driver_t **drv_out, CUdevice *dev_out);

/* Check that the device of the calling thread's current context can do what the CUDA memory
 * provider needs: virtual memory management and POSIX file-descriptor handles. Statuses:
 * WEFT_ERR_UNSUPPORTED (no driver, or the device lacks a feature), WEFT_ERR_CUDA. */
weft_status_t weft_cuda_device_check(void);

/*
 * The CUDA memory provider, weft_mem_cuda_ops (declared in mem.h, defined in mem_cuda.c),
 * implements mem.h with the virtual memory management API: reserve = cuMemAddressReserve,
 * create = cuMemCreate (pinned device memory exportable as a POSIX file descriptor), map =
 * cuMemMap + cuMemSetAccess, export = cuMemExportToShareableHandle. Beyond mem.h:
 *
 * - Each call works on the device of the calling thread's current context (cudaSetDevice makes
 *   one current); attach_thread(device) makes device's primary context current on the calling
 *   thread (WEFT_ERR_INTERNAL for a negative device). The provider keeps no device of its own:
 *   communicators of one process may use different devices.
 * - Every call returns WEFT_ERR_UNSUPPORTED when weft_cuda_driver_get fails.
 * - granularity() returns 0, with the error recorded, when there is no driver or no current
 *   context.
 * - reserve with exact != 0 returns WEFT_ERR_NO_MEMORY without recording anything when the
 *   driver placed the range elsewhere (the range is given back first).
 * - Driver failures are WEFT_ERR_CUDA, or WEFT_ERR_NO_MEMORY for CUDA_ERROR_OUT_OF_MEMORY.
 */

#endif /* WEFT_MEM_CUDA_DRIVER_H */
