/*
 * cuda_driver.c - the CUDA driver table, resolved at run time through the CUDA runtime (see
 * cuda_driver.h), and the formatting of driver errors.
 *
 * Design: one resolution per process, under pthread_once. It asks the runtime, in order, for
 * the driver version (0 means the driver library is absent: the runtime loads it lazily, so
 * nothing fails before this point), the number of devices, then every entry point of the table
 * at WEFT_CUDA_DRIVER_ABI. The first step that fails leaves a reason in a static buffer and the
 * table unresolved; weft_cuda_driver_get() then reports WEFT_ERR_UNSUPPORTED with that reason
 * to every caller, each in its own last-error text.
 *
 * Entry points are written into the table through their offsets (a memcpy of the address the
 * runtime returns), from one list of field names below; the field types in cuda_driver.h pin
 * each signature.
 *
 * Thread safety: the table, its flag and the reason are written only inside pthread_once and
 * read-only afterwards.
 */
#include "mem/cuda_driver.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define REASON_BYTES 256
#define MESSAGE_BYTES 512

_Static_assert(sizeof(void *) == sizeof(PFN_cuMemCreate_v10020),
               "entry points are stored as data pointers");

/* clang-format off */
#define SYMBOL_(name) {#name, offsetof(weft_cuda_driver_t, name)}
/* clang-format on */
static const struct symbol {
    const char *name;
    size_t offset;
} symbols[] = {
    SYMBOL_(cuGetErrorName),
    SYMBOL_(cuGetErrorString),
    SYMBOL_(cuCtxGetDevice),
    SYMBOL_(cuCtxGetCurrent),
    SYMBOL_(cuCtxSetCurrent),
    SYMBOL_(cuDeviceGetAttribute),
    SYMBOL_(cuPointerGetAttribute),
    SYMBOL_(cuMemGetAllocationGranularity),
    SYMBOL_(cuMemAddressReserve),
    SYMBOL_(cuMemAddressFree),
    SYMBOL_(cuMemCreate),
    SYMBOL_(cuMemRelease),
    SYMBOL_(cuMemMap),
    SYMBOL_(cuMemUnmap),
    SYMBOL_(cuMemSetAccess),
    SYMBOL_(cuMemExportToShareableHandle),
    SYMBOL_(cuMemImportFromShareableHandle),
};
#undef SYMBOL_

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static weft_cuda_driver_t table;
static int table_ok;
static char reason[REASON_BYTES];

/* Resolve one entry point into *fn_out; on failure fill reason and return -1. */
static int lookup(const char *name, void **fn_out)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, WEFT_CUDA_DRIVER_ABI,
                                                       cudaEnableDefault, &found);
#else
    /* Toolkits 12.0 to 12.4 resolve at their own ABI, which for every symbol of the table is
     * the one of CUDA 12.0. */
    cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess) {
        snprintf(reason, sizeof reason, "looking up the driver entry point %s: %s: %s", name,
                 cudaGetErrorName(err), cudaGetErrorString(err));
        return -1;
    }
    if (found != cudaDriverEntryPointSuccess || fn == NULL) {
        snprintf(reason, sizeof reason,
                 "the CUDA driver has no entry point %s at the ABI of CUDA %d.%d (%s)", name,
                 WEFT_CUDA_DRIVER_ABI / 1000, WEFT_CUDA_DRIVER_ABI % 1000 / 10,
                 found == cudaDriverEntryPointVersionNotSufficent ? "version not sufficient"
                                                                  : "symbol not found");
        return -1;
    }
    *fn_out = fn;
    return 0;
}

static void resolve(void)
{
    int version = 0;
    cudaError_t err = cudaDriverGetVersion(&version);
    if (err != cudaSuccess) {
        snprintf(reason, sizeof reason, "cudaDriverGetVersion: %s: %s", cudaGetErrorName(err),
                 cudaGetErrorString(err));
        return;
    }
    if (version == 0) {
        snprintf(reason, sizeof reason, "no CUDA driver is installed: libcuda.so.1 was not found");
        return;
    }
    if (version < WEFT_CUDA_DRIVER_MIN) {
        snprintf(reason, sizeof reason, "the CUDA driver (%d.%d) is older than CUDA %d.%d",
                 version / 1000, version % 1000 / 10, WEFT_CUDA_DRIVER_MIN / 1000,
                 WEFT_CUDA_DRIVER_MIN % 1000 / 10);
        return;
    }
    int count = 0;
    err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(reason, sizeof reason, "no usable CUDA device: cudaGetDeviceCount: %s: %s",
                 cudaGetErrorName(err), cudaGetErrorString(err));
        return;
    }
    if (count < 1) {
        snprintf(reason, sizeof reason, "no CUDA device is visible");
        return;
    }
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *fn;
        if (lookup(symbols[i].name, &fn) != 0)
            return;
        memcpy((char *)&table + symbols[i].offset, &fn, sizeof fn);
    }
    table.driver_version = version;
    table.device_count = count;
    table_ok = 1;
}

weft_status_t weft_cuda_driver_get(const weft_cuda_driver_t **out)
{
    pthread_once(&resolve_once, resolve);
    if (!table_ok)
        return weft_error(WEFT_ERR_UNSUPPORTED, "CUDA backend unavailable: %s", reason);
    *out = &table;
    return WEFT_SUCCESS;
}

int weft_cuda_driver_probe(const char **reason_out)
{
    pthread_once(&resolve_once, resolve);
    if (!table_ok && reason_out)
        *reason_out = reason;
    return table_ok;
}

/* Format fmt, then ": <name>: <description>" of res, into msg. */
static void format_result(char *msg, size_t cap, CUresult res, const char *fmt, va_list ap)
{
    int n = vsnprintf(msg, cap, fmt, ap);
    if (n < 0 || (size_t)n >= cap)
        return;
    const char *name = NULL, *text = NULL;
    if (table_ok && table.cuGetErrorName(res, &name) == CUDA_SUCCESS &&
        table.cuGetErrorString(res, &text) == CUDA_SUCCESS && name && text)
        snprintf(msg + n, cap - (size_t)n, ": %s: %s", name, text);
    else
        snprintf(msg + n, cap - (size_t)n, ": CUDA driver error %d", (int)res);
}

weft_status_t weft_cuda_error(CUresult res, const char *fmt, ...)
{
    char msg[MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    format_result(msg, sizeof msg, res, fmt, ap);
    va_end(ap);
    return weft_error(res == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NO_MEMORY : WEFT_ERR_CUDA, "%s",
                      msg);
}

void weft_cuda_warn(CUresult res, const char *fmt, ...)
{
    char msg[MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    format_result(msg, sizeof msg, res, fmt, ap);
    va_end(ap);
    WEFT_LOG_WARN("%s", msg);
}

weft_status_t weft_cuda_current_device(const weft_cuda_driver_t *drv, CUdevice *dev_out)
{
    CUdevice dev = 0;
    CUresult res = drv->cuCtxGetDevice(&dev);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "cuCtxGetDevice%s",
                               res == CUDA_ERROR_INVALID_CONTEXT
                                   ? " (this thread has no current CUDA context: call "
                                     "cudaSetDevice on it first)"
                                   : "");
    *dev_out = dev;
    return WEFT_SUCCESS;
}

weft_status_t weft_cuda_driver_device(const weft_cuda_driver_t **drv_out, CUdevice *dev_out)
{
    const weft_cuda_driver_t *drv;
    weft_status_t st = weft_cuda_driver_get(&drv);
    if (st != WEFT_SUCCESS)
        return st;
    CUdevice dev = 0;
    st = weft_cuda_current_device(drv, &dev);
    if (st != WEFT_SUCCESS)
        return st;
    *drv_out = drv;
    *dev_out = dev;
    return WEFT_SUCCESS;
}

weft_status_t weft_cuda_device_check(void)
{
    const weft_cuda_driver_t *drv;
    CUdevice dev = 0;
    weft_status_t st = weft_cuda_driver_device(&drv, &dev);
    if (st != WEFT_SUCCESS)
        return st;
    int vmm = 0, posix_fd = 0;
    CUresult res = drv->cuDeviceGetAttribute(
        &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res,
                               "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "
                               "device %d)",
                               (int)dev);
    res = drv->cuDeviceGetAttribute(
        &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res,
                               "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_"
                               "SUPPORTED, device %d)",
                               (int)dev);
    if (!vmm)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "CUDA device %d does not support virtual memory management "
                          "(cuMemCreate, cuMemMap)",
                          (int)dev);
    if (!posix_fd)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "CUDA device %d cannot export memory as POSIX file descriptors",
                          (int)dev);
    return WEFT_SUCCESS;
}
