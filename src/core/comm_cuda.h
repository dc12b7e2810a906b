/*
 * comm_cuda.h - the CUDA backend's part of the communicator (comm_cuda.c).
 *
 * Built without CUDA, every function returns WEFT_ERR_UNSUPPORTED (named stubs in the same
 * file), so the host-only library needs no CUDA at all.
 *
 * Device state per communicator: a device control block (registered device memory, mapped at
 * the same address on every rank) holding the operation counter, the block-arrival counter and
 * the ready / phase / done flags peers write; and a status word and an abort word in mapped
 * pinned host memory, through which kernels report timeouts and mismatches and learn that the
 * host gave up. Kernels run on the caller's stream; nothing waits on the host.
 */
#ifndef WEFT_CORE_COMM_CUDA_H
#define WEFT_CORE_COMM_CUDA_H

#include <stddef.h>

#include "core/bootstrap.h"
#include "exec/work.h"
#include "weft.h"

struct weft_comm;

/* 1 if this library has the CUDA backend and a device is visible. */
int weft_cuda_available(void);

/* Select the device (local_rank modulo the device count) before any CUDA memory is made. */
weft_status_t weft_cuda_select_device(int local_rank);

/* Make the device state after the registry exists (collective: all-gathers the device control
 * blocks' addresses through the store). The caller then waits for the registration of
 * weft_cuda_ctl(comm) like any internal allocation. */
weft_status_t weft_cuda_comm_setup(struct weft_comm *comm, weft_store_t *store);

/* This rank's device control block (registered device memory), or NULL. */
void *weft_cuda_ctl(struct weft_comm *comm);

/* Wait for all work this process queued on the device (teardown: nobody may unmap memory a
 * kernel still reads). Bounded: every kernel's waits have a deadline. */
weft_status_t weft_cuda_synchronize(void);

/* Free the device state. NULL-safe on a communicator whose setup failed halfway. */
void weft_cuda_comm_teardown(struct weft_comm *comm);

/* The first error a kernel reported (timeout, lost peer), made sticky on the communicator:
 * checked at the start of every call. */
weft_status_t weft_cuda_check(struct weft_comm *comm, const char *call);

/* Launch the work with its device-side synchronisation on stream. */
weft_status_t weft_cuda_execute(struct weft_comm *comm, const weft_work_t *work, unsigned sync,
                                weft_status_t mine, void *stream);

/* dst <- src on stream (device memory, or any memory CUDA can copy). */
weft_status_t weft_cuda_local_copy(void *dst, const void *src, size_t bytes, void *stream);

/* Tell running kernels to give up (abort, lost peer): never blocks. */
void weft_cuda_abort(struct weft_comm *comm);

#endif /* WEFT_CORE_COMM_CUDA_H */
