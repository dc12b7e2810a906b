/*
 * select.h - the op layer's entry points used by the API: each picks an algorithm (select.c).
 * Arguments must have been checked (api/); count > 0. stream: a cudaStream_t on the CUDA
 * backend, NULL on the host.
 */
#ifndef WEFT_OP_SELECT_H
#define WEFT_OP_SELECT_H

#include <stddef.h>

#include "weft.h"

struct weft_comm;

weft_status_t weft_select_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t op,
                                     void *stream);
weft_status_t weft_select_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, void *stream);
weft_status_t weft_select_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                         void *stream);
weft_status_t weft_select_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, int root, void *stream);
weft_status_t weft_select_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, void *stream);
weft_status_t weft_select_all_to_allv(struct weft_comm *comm, const void *sendbuf,
                                      const size_t *sendcounts, const size_t *sdispls,
                                      void *recvbuf, const size_t *recvcounts,
                                      const size_t *rdispls, weft_dtype_t dtype, void *stream);
weft_status_t weft_select_barrier(struct weft_comm *comm, void *stream);

/* A collective called with a count of 0 (coll a weft_coll_t, not all_to_allv; root for a
 * broadcast, else 0; op 0 where none): it moves nothing and enqueues nothing, but takes its turn
 * in the handshake (one round of flags, the descriptor's header alone), so that ranks where some
 * pass 0 and others more all get WEFT_ERR_MISMATCH, instead of the zero call returning at once
 * and its peers' call pairing with this rank's next operation. */
weft_status_t weft_select_empty(struct weft_comm *comm, const char *call, int coll,
                                weft_dtype_t dtype, weft_redop_t op, int root);

#endif /* WEFT_OP_SELECT_H */
