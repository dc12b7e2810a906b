/*
 * mem.h - memory providers behind one ops table.
 *
 * A provider makes physical memory, maps it at a chosen address inside a reserved virtual
 * range, and turns it into a file descriptor that another process can import and map at the
 * same address. It knows nothing of ranks, windows or registration: that is core's job.
 *
 *   host: memfd_create (sealed against shrink and grow) + mmap(MAP_FIXED | MAP_SHARED) inside a
 *         PROT_NONE reservation; the descriptor is the memfd itself. Sparse: a memfd takes
 *         memory only where it is touched, so one huge memfd can back every allocation of a
 *         rank, each a range of it (weft_mem_range) holding no descriptor of its own.
 *   cuda: cuMemCreate with POSIX file-descriptor handles + cuMemMap inside cuMemAddressReserve,
 *         cuMemSetAccess; the descriptor comes from cuMemExportToShareableHandle. Not sparse:
 *         cuMemCreate commits its memory at once.
 *
 * Every slot is filled; a slot a provider cannot do points to a named stub returning
 * WEFT_ERR_UNSUPPORTED. All functions are thread-safe (they touch no shared state).
 */
#ifndef WEFT_MEM_MEM_H
#define WEFT_MEM_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* One piece of physical memory: a range of a memfd (host) or a VMM handle (cuda). */
typedef struct weft_mem_seg {
    int fd;          /* host: the memfd holding the memory; cuda: -1 (exported on demand) */
    int fd_borrowed; /* host: fd belongs to the segment this one is a range of: destroy leaves it */
    uint64_t handle; /* cuda: CUmemGenericAllocationHandle; host: 0 */
    size_t offset;   /* host: where the segment starts in fd; cuda: 0 */
    size_t bytes;    /* a multiple of the provider's granularity */
} weft_mem_seg_t;

typedef struct weft_mem_ops {
    const char *name;

    /* Sparse providers (host): the largest segment create makes, which takes memory only where
     * it is touched, can be cut into ranges (weft_mem_range) and gives a range's memory back
     * with discard (host: 2^62 bytes). 0 for the others: cuda (cuMemCreate commits its memory
     * at once), and host under a file size limit (ulimit -f) below 2^62, which would then bound
     * the memory of all segments together instead of each one's. */
    size_t (*sparse_bytes)(void);

    /* Make the calling thread able to use the provider for device (cuda: that device's primary
     * context becomes current; the host provider ignores it). Called by a thread of weft's own
     * (the registrar) before its first map or export, with its communicator's device. */
    weft_status_t (*attach_thread)(int device);

    /* Granularity of sizes and addresses (host: the page size; cuda: the minimum VMM
     * granularity, usually 2 MiB); 0 when it cannot be known, the reason in weft_last_error(). */
    size_t (*granularity)(void);

    /* Reserve bytes of address space with no access. exact != 0: exactly at hint or fail with
     * WEFT_ERR_NO_MEMORY without disturbing existing mappings (MAP_FIXED_NOREPLACE); exact == 0:
     * anywhere (hint may be NULL). */
    weft_status_t (*reserve)(void *hint, size_t bytes, int exact, void **addr_out);
    /* Give back a reservation made by reserve (whole). */
    weft_status_t (*release)(void *addr, size_t bytes);

    /* Make physical memory of bytes (a multiple of the granularity). */
    weft_status_t (*create)(size_t bytes, weft_mem_seg_t *seg_out);
    /* Free a segment's handle; mappings keep the memory alive until unmapped. A segment with
     * fd == -1 and handle == 0 (already given away), or one whose fd is borrowed, is left
     * alone (its memory stays with the segment it is a range of: see discard). */
    void (*destroy)(weft_mem_seg_t *seg);
    /* Sparse providers: give back the memory of [offset, offset + bytes) of seg (granularity
     * multiples, relative to seg's start). The range then reads as zeros, through every mapping
     * of it in any process. Others: WEFT_ERR_UNSUPPORTED. */
    weft_status_t (*discard)(const weft_mem_seg_t *seg, size_t offset, size_t bytes);

    /* Map seg read/write at addr, which lies inside a reservation made by reserve. */
    weft_status_t (*map)(const weft_mem_seg_t *seg, void *addr);
    /* Undo map: the range returns to the reservation (no access). */
    weft_status_t (*unmap)(void *addr, size_t bytes);

    /* A new descriptor for seg that another process can import (caller closes it). For a range
     * of a sparse provider's segment it is the descriptor of the whole: the importer learns the
     * range's offset and size from elsewhere (the core: the registration message).
     * WEFT_ERR_NO_MEMORY is a shortage that may pass, worth retrying (host: no descriptor left,
     * EMFILE or ENFILE; cuda: CUDA_ERROR_OUT_OF_MEMORY, whatever the driver ran out of); other
     * statuses are failures (host: WEFT_ERR_SYSTEM; cuda: WEFT_ERR_CUDA). seg is unchanged
     * either way. */
    weft_status_t (*export_fd)(const weft_mem_seg_t *seg, int *fd_out);
    /* Import [offset, offset + bytes) of what a descriptor received from a peer holds (offset
     * must be 0 unless the provider is sparse). The host provider checks that the descriptor
     * holds that much; the CUDA driver does not tell an imported handle's size, so there a short
     * one fails later, at map (WEFT_ERR_CUDA). Takes ownership of fd in every case. */
    weft_status_t (*import_fd)(int fd, size_t offset, size_t bytes, weft_mem_seg_t *seg_out);
} weft_mem_ops_t;

/* The range [offset, offset + bytes) of a sparse provider's segment whole, as a segment that
 * borrows whole's descriptor: whole must outlive it, and discard gives its memory back. */
static inline weft_mem_seg_t weft_mem_range(const weft_mem_seg_t *whole, size_t offset,
                                            size_t bytes)
{
    return (weft_mem_seg_t){
        .fd = whole->fd, .fd_borrowed = 1, .offset = whole->offset + offset, .bytes = bytes};
}

extern const weft_mem_ops_t weft_mem_host_ops;
extern const weft_mem_ops_t weft_mem_cuda_ops; /* defined only in builds with CUDA */

#endif /* WEFT_MEM_MEM_H */
