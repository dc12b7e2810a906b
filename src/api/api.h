/*
 * api.h - what the public entry points of src/api share.
 *
 * Thread safety: as the communicator (one user thread at a time).
 */
#ifndef WEFT_API_API_H
#define WEFT_API_API_H

#include "weft.h"

/* No buffer is larger: 64 PiB, what x86-64 and AArch64 user space spans at most (57-bit virtual
 * addresses). A count beyond it is a bad argument, not a buffer to stage: every call checks the
 * byte size of each array it is given against it (the collectives, MoE dispatch and combine). */
#define WEFT_API_MAX_BUFFER_BYTES ((size_t)1 << 56)

/* The checks every communicating call starts with: clears weft_last_error(), then comm is not
 * NULL, is usable (an aborted or failed communicator returns its status, also for calls that
 * would move nothing), and stream is NULL on the host backend. Returns WEFT_SUCCESS or the
 * error, with a message naming call and the argument. */
weft_status_t weft_api_check_comm(const char *call, weft_comm_t comm, void *stream);

/* ptr (the argument named what) is aligned to its elements of esize bytes (a power of two), as
 * C requires of a typed pointer: the reductions load and store whole elements, and a GPU traps on
 * a misaligned one (the context is lost). NULL passes. Returns WEFT_SUCCESS or
 * WEFT_ERR_INVALID_ARGUMENT naming call, what and the element type. */
weft_status_t weft_api_check_aligned(const char *call, const char *what, const void *ptr,
                                     size_t esize, const char *type);

/* 1 if [a, a + alen) and [b, b + blen) overlap (an empty range overlaps nothing). */
int weft_api_overlap(const void *a, size_t alen, const void *b, size_t blen);

#endif /* WEFT_API_API_H */
