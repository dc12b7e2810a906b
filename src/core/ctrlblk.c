/*
 * ctrlblk.c - creating and sharing the control blocks at communicator creation.
 *
 * Each rank's control block is a sealed memfd in host memory, whatever the backend: the entry
 * handshake runs on the host (it carries pointers, detects mismatches and returns them as
 * statuses). The descriptor goes to every peer over the control sockets before the registrar
 * owns them; every process maps every block wherever mmap puts it (the handshake uses local
 * pointers, so blocks need no shadow address).
 *
 * Thread safety: init and teardown only.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/ctrl.h"
#include "mem/mem.h"
#include "util/log.h"

static uint8_t *map_block(int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

weft_status_t weft_ctrlblk_share(const int *socks, int rank, int nranks, size_t bytes,
                                 uint64_t deadline_ns, uint8_t **blocks_out)
{
    const weft_mem_ops_t *host = &weft_mem_host_ops;
    size_t gran = host->granularity();
    bytes = (bytes + gran - 1) / gran * gran;
    for (int r = 0; r < nranks; r++)
        blocks_out[r] = NULL;
    int *peer_fds = calloc((size_t)nranks, sizeof *peer_fds);
    if (!peer_fds)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
    weft_mem_seg_t seg;
    weft_status_t st = host->create(bytes, &seg);
    if (st != WEFT_SUCCESS)
        goto err_free;
    blocks_out[rank] = map_block(seg.fd, bytes);
    if (!blocks_out[rank]) {
        st = weft_error_errno(WEFT_ERR_NO_MEMORY, errno, "weft_comm_init: mmap(control block)");
        goto err_destroy;
    }
    st = weft_ctrl_exchange_fd(socks, rank, nranks, seg.fd, bytes, deadline_ns, peer_fds);
    if (st != WEFT_SUCCESS)
        goto err_unmap;
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        weft_mem_seg_t theirs;
        st = host->import_fd(peer_fds[p], 0, bytes, &theirs); /* checks seals and size */
        peer_fds[p] = -1;
        if (st == WEFT_SUCCESS) {
            blocks_out[p] = map_block(theirs.fd, bytes);
            if (!blocks_out[p])
                st = weft_error_errno(WEFT_ERR_NO_MEMORY, errno,
                                      "weft_comm_init: mmap(rank %d's control block)", p);
            host->destroy(&theirs);
        }
        if (st != WEFT_SUCCESS)
            goto err_close_fds;
    }
    host->destroy(&seg);
    free(peer_fds);
    return WEFT_SUCCESS;

err_close_fds:
    for (int p = 0; p < nranks; p++) {
        if (peer_fds[p] >= 0)
            close(peer_fds[p]);
    }
err_unmap:
    weft_ctrlblk_unmap(blocks_out, nranks, bytes);
err_destroy:
    host->destroy(&seg);
err_free:
    free(peer_fds);
    return st;
}

void weft_ctrlblk_unmap(uint8_t **blocks, int nranks, size_t bytes)
{
    size_t gran = weft_mem_host_ops.granularity();
    bytes = (bytes + gran - 1) / gran * gran;
    for (int r = 0; r < nranks; r++) {
        if (blocks[r])
            munmap(blocks[r], bytes);
        blocks[r] = NULL;
    }
}
