/*
 * barrier_device.c - barrier in stream order (CUDA backend): the host handshake checks that every
 * rank called it, then a kernel waits for every peer's device-side ready flag, so the barrier
 * orders the work of every rank's stream, not just the host calls.
 */
#include "op/op.h"

weft_status_t weft_barrier_stream(struct weft_comm *comm, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_barrier", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    weft_op_desc_t desc = {.coll = WEFT_COLL_BARRIER};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    return weft_op_end(&op, weft_op_execute(&op, NULL, 0, st), 0);
}
