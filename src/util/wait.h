/*
 * wait.h - waiting on a 64-bit flag word that another thread or process sets.
 *
 * Flags hold sequence numbers that only grow; a wait ends when the flag reaches a target. They are
 * 64 bits, so they never wrap: a line not written for any number of operations still reads as
 * behind (with 32 bits and a wrap-safe comparison, one left alone for 2^31 operations read as
 * ahead, and its wait passed at once). The futex sleeps on the value's low 32 bits. The policy:
 * poll for WEFT_WAIT_SPIN_NS, then sched_yield for WEFT_WAIT_YIELD_NS (no
 * spinning when the host has fewer cores than waiting threads), then sleep on a futex in slices of
 * at most 10 ms. Between slices the waiter calls a check function (peer lost, aborted, timed out)
 * so no wait outlives its deadline or a dead peer.
 *
 * Wake-up protocol (works across processes: the words live in MAP_SHARED memory): a sleeper
 * increments the flag's companion `sleepers` word, re-reads the flag, and sleeps only if it is
 * still short; a setter stores the flag (seq_cst) and calls futex wake only when `sleepers` is
 * non-zero. So the fast path of a setter is a store and a load.
 */
#ifndef WEFT_UTIL_WAIT_H
#define WEFT_UTIL_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "weft.h"

/* A flag and the count of threads sleeping on it; both must be in the same mapping. */
typedef struct weft_flag {
    _Atomic uint64_t value;
    _Atomic uint32_t sleepers;
} weft_flag_t;

/* Flags are shared between processes: their atomics must not hide a lock in this one. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

/* How long a wait polls, then yields, before it sleeps. */
typedef struct weft_wait_policy {
    uint64_t spin_ns;  /* busy polling */
    uint64_t yield_ns; /* sched_yield between polls */
} weft_wait_policy_t;

/* The configured policy (WEFT_WAIT_SPIN_NS, WEFT_WAIT_YIELD_NS). With threads > cpus the waits
 * would spin on a core the thread they wait for needs, so spinning is skipped: yield at once. */
weft_wait_policy_t weft_wait_policy(int threads, int cpus);

/* Called between sleep slices; returns WEFT_SUCCESS to go on waiting, any other status to stop. */
typedef weft_status_t (*weft_wait_check_fn)(void *arg);

/* Store v into the flag (release, and ordered before the sleepers check) and wake sleepers. */
void weft_flag_set(weft_flag_t *flag, uint64_t v);

/* Wait until flag reaches target. check is called every few microseconds once spinning is over
 * (and at least every 10 ms while sleeping). Returns WEFT_SUCCESS or the status check returned.
 * A check that fails ends the wait only if the flags, read again after it, are still short: a
 * flag set just before a failure the check reports (a peer that did its part, then died) counts,
 * so the wait succeeds, though check's own effects (its error text) stay.
 * check NULL: no deadline, and the sleep has no slices (an idle thread waiting for work of its
 * own process, which wakes it; never a wait for a peer, which may die). */
weft_status_t weft_flag_wait(weft_flag_t *flag, uint64_t target, const weft_wait_policy_t *policy,
                             weft_wait_check_fn check, void *arg);

/* Wait until every flag of an array reaches target (flags[i * stride_bytes]); same policy. */
weft_status_t weft_flag_wait_all(weft_flag_t *first, size_t stride_bytes, int count, int skip_index,
                                 uint64_t target, const weft_wait_policy_t *policy,
                                 weft_wait_check_fn check, void *arg);

#endif /* WEFT_UTIL_WAIT_H */
