/*
 * exec_cuda.h - the CUDA executor: one kernel launch runs a work item (work.h) on the caller's
 * stream together with its device-side synchronisation with the peers. C interface to the
 * kernels of exec_cuda.cu (extern "C" launchers returning a status).
 *
 * Device control block (one per rank, registered device memory at the same address on every
 * rank): the operation counter and block-arrival counter, used by this rank only, and the
 * ready / phase / done flags that every peer writes with system-scope release stores and this
 * rank polls with acquire loads. Flags hold operation numbers, which only grow, so graph
 * replays stay correct: the counter lives in device memory and every launch reads it. They are
 * 64-bit and never wrap: a flag that no operation set for any number of operations (the push
 * path sets none) still reads as behind. The push path's words carry the low 32 bits, matched
 * for equality: a word of a slot left unwritten for exactly 2^32 operations (2^31 of its parity)
 * would match (a push, no push covering that word for 2^32 operations, then one: about a day of
 * back-to-back calls), as in NCCL's LL protocol; weft accepts that limit.
 *
 * A launch: every block reads seq = counter + 1; unless WEFT_SYNC_CONTINUE, block 0 sets
 * ready[me] = seq in every peer's block and every block waits until all peers' ready flags
 * reached seq (their inputs are complete in their stream order); the blocks run their units;
 * the last block to arrive runs the phase or done signal (set the flag in every peer, wait for
 * every peer's), resets the arrival counter and, when the operation is over, stores seq into
 * the counter.
 *
 * A launch may carry the operation's local copy (pre_bytes > 0: the input copied into the
 * staging scratch that peers will read, weft_cuda_local_copy). Then every block first copies its
 * share of it, the last block to finish (a second arrival counter) sets ready[me] in every
 * peer's block and in this rank's own, and every block waits for all ranks' ready flags, its
 * own included: no block, here or on a peer, reads the copy before all of it is written. This
 * saves a separate copy submission per operation. It is the one wait between blocks of one
 * launch on one rank, so such a launch needs all its blocks resident at once: at most
 * WEFT_CUDA_MAX_BLOCKS, and no more than the SMs the rank's share of the GPU has (sharing
 * ranks counted: comm_cuda.c); SMs held by kernels that wait on something of this rank (another
 * communicator's collective spinning on another stream) are not counted, and such a launch then
 * ends at the timeout.
 *
 * The push path (small payloads, NCCL's LL protocol): each rank's control block is followed by
 * push_headers_bytes of header words, per parity (seq & 1) and sender, then per parity and
 * sender an LL slot of 2 * push_slot_bytes, then one unpacked area of push_slot_bytes per
 * sender. A launch with push_bytes > 0 moves the payloads of every pair of ranks (this rank's
 * for peer r: push_send[r] bytes at src[r]; from peer r: push_recv[r] bytes; 0: none; push_bytes
 * is the largest of them and of push_send[rank]) as 8-byte words of 4 payload bytes and seq,
 * stored into the receiver's slot with no ordering between them: a receiver polls each word
 * until it holds seq (the storing thread fences afterwards only so that the stores leave
 * promptly). Every block owns the same byte range of every pair, so it unpacks and computes
 * those bytes (a REDUCE, whose payloads are all push_bytes long, into dst[0] from src[rank] and
 * the unpacked peers; a COPY unpacks into dst[r] and copies push_send[rank] bytes of src[rank]
 * to dst[rank]) without waiting for another block; block 0 also exchanges a header word with
 * every peer. Nobody reads this rank's buffers and there are no ready or closing flags: one
 * one-way trip per call. Two
 * parities suffice: a sender reuses a slot two operations later, after its intermediate
 * operation received the receiver's header or ready flag, which the receiver sends only once
 * its stream has finished the operation that read the slot (no operation of a communicator
 * completes before every peer has started it, and operations are stream-ordered).
 *
 * Every wait polls a deadline (%globaltimer) and the host's abort word; on either it stores a
 * status into the mapped status word (first one wins) and its device copy (ctl->failed), and
 * the kernel ends without a closing signal; every later launch of this kernel on the rank finds
 * ctl->failed set and posts and moves nothing. So do the MoE staging, gather and combine
 * kernels (exec/moe_cuda.h): they read ctl->failed first and return, since a peer whose ready
 * flag never came may not have written the handle memory they would read, or may have freed it
 * (the gather writes only *num_recv_out = -1), and they use no value read from a peer outside
 * the bounds the handshake gave, failing the rank instead as a failed wait does. What still runs
 * is the copy-engine copies queued between an entry kernel and its closing kernel, which cannot
 * be cancelled (they read peers and write only this rank's memory: no store form runs on the
 * copy engines, weft_cuda_copy_engine_takes in core/comm_cuda.h). So all ranks' kernels must be
 * co-resident: blocks per launch are bounded (WEFT_CUDA_MAX_BLOCKS).
 *
 * Copies on the copy engines (cudaMemcpyAsync from peers' memory into this rank's, between an
 * entry and a closing launch of one operation) are ordered before the closing launch's flags by
 * the stream: the closing kernel starts only after the copies completed, so a peer that sees
 * this rank's closing flag may reuse its input. gpu_collectives (copy engine) checks every byte
 * the engines copied once the closing flags let the stream go on.
 */
#ifndef WEFT_EXEC_EXEC_CUDA_H
#define WEFT_EXEC_EXEC_CUDA_H

#include <stdint.h>

#include "exec/work.h"
#include "weft.h"

#define WEFT_CUDA_MAX_RANKS 16
#define WEFT_CUDA_MAX_UNITS 256
#define WEFT_CUDA_MAX_BLOCKS 128
#define WEFT_CUDA_THREADS 512

typedef struct weft_cuda_flag {
    uint64_t v;
    uint64_t pad[7]; /* one flag per 64-byte line */
} weft_cuda_flag_t;

typedef struct weft_cuda_ctl {
    weft_cuda_flag_t seq;    /* last finished operation (this rank only) */
    weft_cuda_flag_t failed; /* nonzero once a kernel of this rank reported an error: the
                                status word's device copy, read where the mapped host word
                                would cost a PCIe round trip (this rank only) */
    weft_cuda_flag_t arrive; /* blocks of the current launch that finished (this rank only);
                                a block that failed adds ARRIVE_FAILED too */
    weft_cuda_flag_t copied; /* blocks that finished their share of the local copy (ditto) */
    weft_cuda_flag_t ready[WEFT_CUDA_MAX_RANKS];
    weft_cuda_flag_t phase[WEFT_CUDA_MAX_RANKS];
    weft_cuda_flag_t done[WEFT_CUDA_MAX_RANKS];
} weft_cuda_ctl_t;

typedef struct weft_cuda_unit {
    uint32_t slice;
    uint32_t pad;
    uint64_t offset;
    uint64_t bytes;
} weft_cuda_unit_t;

/* Everything a launch needs, passed by value as the kernel's parameter. */
typedef struct weft_cuda_params {
    int32_t kind;  /* weft_work_kind_t, or -1: no work */
    uint32_t sync; /* WEFT_SYNC_* */
    int32_t rank, nranks;
    int32_t dtype, redop, avg_divisor, nsrcs;
    int32_t ndsts; /* REDUCE, FANOUT: destinations (dst[0 .. ndsts - 1]); COPY: 0 */
    uint64_t timeout_ns;
    weft_cuda_ctl_t *ctl[WEFT_CUDA_MAX_RANKS]; /* every rank's control block */
    int32_t *status;                           /* mapped host word: first error, 0 while healthy */
    const int32_t *abort;                    /* mapped host word: non-zero once the host gave up */
    const uint8_t *src[WEFT_CUDA_MAX_RANKS]; /* the work's; push path: src[r] for peer r too */
    uint8_t *dst[WEFT_CUDA_MAX_RANKS];
    uint64_t off[WEFT_CUDA_MAX_RANKS];
    uint8_t *pre_dst; /* the local copy run before the ready signal (pre_bytes 0: none) */
    const uint8_t *pre_src;
    uint64_t pre_bytes;
    uint64_t push_bytes;         /* the push path's largest payload of a pair; 0: not the path */
    uint64_t push_slot_bytes;    /* the communicator's largest payload (agreed by the ranks) */
    uint64_t push_headers_bytes; /* the header words' region */
    uint32_t push_send[WEFT_CUDA_MAX_RANKS]; /* bytes to rank r, from src[r] (own block: rank) */
    uint32_t push_recv[WEFT_CUDA_MAX_RANKS]; /* bytes from rank r */
    uint16_t block_begin[WEFT_CUDA_MAX_BLOCKS + 1]; /* units of block b: [begin[b], begin[b+1]) */
    weft_cuda_unit_t units[WEFT_CUDA_MAX_UNITS];
} weft_cuda_params_t;

#ifdef __cplusplus
extern "C" {
#endif

/* Launch one collective step with nblocks blocks on stream (a cudaStream_t). The launch has
 * units [0, block_begin[nblocks]) (so block_begin must be filled for all nblocks + 1 entries);
 * only those are passed to the device. Statuses: WEFT_ERR_CUDA when the launch fails (with the
 * CUDA error in the message). */
weft_status_t weft_cuda_launch(const weft_cuda_params_t *params, int nblocks, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_EXEC_EXEC_CUDA_H */
