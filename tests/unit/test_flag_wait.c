/*
 * test_flag_wait.c - weft_flag_wait_all (util/wait.h): when a wait ends, and what it returns.
 *
 * The case that matters is a race of a peer's failure with its own flag: the peer sets its flag,
 * leaves, and fails at once (a local error shuts its sockets); the waiter, which read the flag
 * just before it was set, then runs its check, which reports the peer as lost. The flag was set,
 * so the wait must succeed; it used to return the check's failure. Here the check itself sets
 * the flags before it fails, which makes the race deterministic.
 *
 * Cases: flags already reached (check never runs); the race above; a check that fails while a
 * flag is still short (the failure is returned); flags set by another thread while the waiter
 * sleeps on the futex.
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "util/wait.h"

#include "check.h"

#define NFLAGS 4
#define SELF 1 /* the waiter's own flag: skipped */

typedef struct probe {
    weft_flag_t *flags;
    uint64_t target;
    int set_first;        /* flags [0, set_first) are set (to target) by the first failing check */
    weft_status_t status; /* what each check returns */
    int calls;
} probe_t;

static weft_status_t probe_check(void *arg)
{
    probe_t *p = arg;
    p->calls++;
    if (p->status != WEFT_SUCCESS) {
        for (int i = 0; i < p->set_first; i++)
            weft_flag_set(&p->flags[i], p->target);
    }
    return p->status;
}

static const weft_wait_policy_t no_spin = {0, 0}; /* to the futex sleep at once */

static void reset(weft_flag_t *flags, uint64_t v)
{
    for (int i = 0; i < NFLAGS; i++)
        atomic_store(&flags[i].value, v);
}

static weft_status_t wait_all(weft_flag_t *flags, uint64_t target, probe_t *p)
{
    return weft_flag_wait_all(flags, sizeof flags[0], NFLAGS, SELF, target, &no_spin, probe_check,
                              p);
}

typedef struct setter {
    weft_flag_t *flags;
    uint64_t target;
} setter_t;

static void *set_later(void *arg)
{
    setter_t *s = arg;
    struct timespec ts = {0, 30 * 1000000L}; /* 30 ms: the waiter is asleep by then */
    nanosleep(&ts, NULL);
    for (int i = NFLAGS - 1; i >= 0; i--)
        if (i != SELF)
            weft_flag_set(&s->flags[i], s->target);
    return NULL;
}

int main(void)
{
    weft_flag_t flags[NFLAGS];
    reset(flags, 0);

    /* Reached (one flag past the target, the skipped one short): no check at all. */
    reset(flags, 7);
    atomic_store(&flags[2].value, 9);
    atomic_store(&flags[SELF].value, 0);
    probe_t p = {flags, 7, 0, WEFT_ERR_PEER_LOST, 0};
    weft_status_t st = wait_all(flags, 7, &p);
    CHECK(st == WEFT_SUCCESS && p.calls == 0, "reached flags: %s after %d checks",
          weft_status_string(st), p.calls);

    /* The race: the check that fails has just seen every flag set. */
    reset(flags, 7);
    p = (probe_t){flags, 8, NFLAGS, WEFT_ERR_PEER_LOST, 0};
    st = wait_all(flags, 8, &p);
    CHECK(st == WEFT_SUCCESS, "flags set before the failure was seen: %s", weft_status_string(st));
    CHECK(p.calls == 1, "%d checks, expected 1", p.calls);

    /* The failure stands while a later flag is short (flag 0 set, flags 2 and 3 not). */
    reset(flags, 7);
    p = (probe_t){flags, 8, 1, WEFT_ERR_PEER_LOST, 0};
    st = wait_all(flags, 8, &p);
    CHECK(st == WEFT_ERR_PEER_LOST, "a short flag after a failed check: %s",
          weft_status_string(st));
    /* ... and while the flag being waited on is short (none set). */
    reset(flags, 7);
    p = (probe_t){flags, 8, 0, WEFT_ERR_TIMEOUT, 0};
    st = wait_all(flags, 8, &p);
    CHECK(st == WEFT_ERR_TIMEOUT, "no flag set, check failing: %s", weft_status_string(st));

    /* A passing check and flags set by another thread while the waiter sleeps. */
    reset(flags, 7);
    setter_t s = {flags, 8};
    pthread_t t;
    if (pthread_create(&t, NULL, set_later, &s) != 0) {
        printf("FAIL: pthread_create\n");
        return 1;
    }
    p = (probe_t){flags, 8, 0, WEFT_SUCCESS, 0};
    st = wait_all(flags, 8, &p);
    pthread_join(t, NULL);
    CHECK(st == WEFT_SUCCESS, "flags set by another thread: %s", weft_status_string(st));
    CHECK(p.calls >= 2, "the waiter checked %d times in 30 ms of sleeping", p.calls);

    printf("test_flag_wait: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
