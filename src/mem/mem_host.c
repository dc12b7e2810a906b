/*
 * mem_host.c - the host memory provider: memfd segments mapped inside PROT_NONE reservations.
 *
 * Segments are memfds sealed against shrinking and growing (a peer can never truncate memory
 * under our mapping and turn a load into SIGBUS) and passed by descriptor, never by name, so
 * nothing is left in /dev/shm or the file system whatever way a process ends.
 *
 * Sparse (unless a file size limit, ulimit -f, is set): a memfd takes memory only for the pages
 * touched, so one memfd of 2^62 bytes can back every allocation of a rank. A range of it
 * (weft_mem_range) is mapped with its offset, exported as the whole memfd (the peer maps only the
 * range it is told), and its memory is given back by punching a hole (fallocate): the size never
 * changes, so a mapping of a discarded range reads zeros instead of faulting.
 *
 * Thread safety: stateless; every function may be called from any thread.
 */
#include "mem/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/log.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static weft_status_t host_attach_thread(int device)
{
    (void)device; /* no device */
    return WEFT_SUCCESS;
}

static size_t host_granularity(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

#define HOST_SPARSE_MAX ((size_t)1 << 62)

/* The file size limit (RLIMIT_FSIZE): ftruncate past it raises SIGXFSZ, which kills. */
static size_t file_size_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_FSIZE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
        lim.rlim_cur > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)lim.rlim_cur;
}

static size_t host_sparse_bytes(void)
{
    /* Under a file size limit one memfd would bound all memory together: not sparse then, so
     * that every segment is a memfd of its own, which the limit bounds one by one. */
    return file_size_limit() < HOST_SPARSE_MAX ? 0 : HOST_SPARSE_MAX;
}

static weft_status_t host_reserve(void *hint, size_t bytes, int exact, void **addr_out)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (exact)
        flags |= MAP_FIXED_NOREPLACE;
    void *p = mmap(hint, bytes, PROT_NONE, flags, -1, 0);
    if (p == MAP_FAILED) {
        if (exact && errno == EEXIST)
            return WEFT_ERR_NO_MEMORY; /* expected during window agreement: not logged */
        return weft_error_errno(WEFT_ERR_NO_MEMORY, errno, "mmap(PROT_NONE, %zu bytes)", bytes);
    }
    if (exact && p != hint) { /* kernels before 4.17 ignore MAP_FIXED_NOREPLACE */
        munmap(p, bytes);
        return WEFT_ERR_NO_MEMORY;
    }
    *addr_out = p;
    return WEFT_SUCCESS;
}

static weft_status_t host_release(void *addr, size_t bytes)
{
    if (munmap(addr, bytes) != 0)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "munmap(%p, %zu)", addr, bytes);
    return WEFT_SUCCESS;
}

static weft_status_t host_create(size_t bytes, weft_mem_seg_t *seg_out)
{
    if (bytes > file_size_limit())
        return weft_error(WEFT_ERR_NO_MEMORY,
                          "memfd of %zu bytes: above the file size limit (ulimit -f, %zu bytes)",
                          bytes, file_size_limit());
    int fd = memfd_create("weft", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "memfd_create");
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int err = errno;
        close(fd);
        return weft_error_errno(err == ENOSPC || err == EFBIG ? WEFT_ERR_NO_MEMORY
                                                              : WEFT_ERR_SYSTEM,
                                err, "ftruncate(memfd, %zu)", bytes);
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int err = errno;
        close(fd);
        return weft_error_errno(WEFT_ERR_SYSTEM, err, "fcntl(F_ADD_SEALS)");
    }
    *seg_out = (weft_mem_seg_t){.fd = fd, .bytes = bytes};
    return WEFT_SUCCESS;
}

static void host_destroy(weft_mem_seg_t *seg)
{
    if (seg->fd >= 0 && !seg->fd_borrowed)
        close(seg->fd);
    seg->fd = -1;
}

static weft_status_t host_discard(const weft_mem_seg_t *seg, size_t offset, size_t bytes)
{
    if (offset > seg->bytes || bytes > seg->bytes - offset)
        return weft_error(WEFT_ERR_INTERNAL, "discard [%zu, +%zu) past a segment of %zu bytes",
                          offset, bytes, seg->bytes);
    if (fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)(seg->offset + offset), (off_t)bytes) != 0)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "fallocate(memfd, punch %zu bytes)", bytes);
    return WEFT_SUCCESS;
}

static weft_status_t host_map(const weft_mem_seg_t *seg, void *addr)
{
    void *p = mmap(addr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, seg->fd,
                   (off_t)seg->offset);
    if (p == MAP_FAILED)
        return weft_error_errno(WEFT_ERR_NO_MEMORY, errno, "mmap(memfd, %zu bytes at %p)",
                                seg->bytes, addr);
    return WEFT_SUCCESS;
}

static weft_status_t host_unmap(void *addr, size_t bytes)
{
    /* Replace the mapping by a fresh reservation in one step: the range never becomes free
     * for another mmap in between. */
    void *p = mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
    if (p == MAP_FAILED)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "mmap(PROT_NONE over %p, %zu)", addr,
                                bytes);
    return WEFT_SUCCESS;
}

static weft_status_t host_export(const weft_mem_seg_t *seg, int *fd_out)
{
    int fd = fcntl(seg->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno; /* no descriptor left: a shortage that may pass (mem.h) */
        return weft_error_errno(err == EMFILE || err == ENFILE ? WEFT_ERR_NO_MEMORY
                                                               : WEFT_ERR_SYSTEM,
                                err, "dup(memfd)");
    }
    *fd_out = fd;
    return WEFT_SUCCESS;
}

static weft_status_t host_import(int fd, size_t offset, size_t bytes, weft_mem_seg_t *seg_out)
{
    /* The peer's memfd must be sealed and hold the whole range, or a mapping could fault
     * later. */
    int seals = fcntl(fd, F_GET_SEALS);
    off_t size = lseek(fd, 0, SEEK_END);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
        size < 0 || (size_t)size < bytes || (size_t)size - bytes < offset) {
        close(fd);
        return weft_error(WEFT_ERR_INTERNAL,
                          "imported segment is not a sealed memfd holding [%zu, +%zu bytes)",
                          offset, bytes);
    }
    *seg_out = (weft_mem_seg_t){.fd = fd, .offset = offset, .bytes = bytes};
    return WEFT_SUCCESS;
}

const weft_mem_ops_t weft_mem_host_ops = {
    .name = "host",
    .sparse_bytes = host_sparse_bytes,
    .attach_thread = host_attach_thread,
    .granularity = host_granularity,
    .reserve = host_reserve,
    .release = host_release,
    .create = host_create,
    .destroy = host_destroy,
    .discard = host_discard,
    .map = host_map,
    .unmap = host_unmap,
    .export_fd = host_export,
    .import_fd = host_import,
};
