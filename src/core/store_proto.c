/*
 * store_proto.c - the deadline helpers that the rendezvous store's server (store_server.c) and
 * client (bootstrap.c) share: poll() timeouts bounded by the store's deadline, and the retry
 * backoff.
 *
 * Design: deadlines are absolute CLOCK_MONOTONIC nanoseconds (util/clock.h), so a wait that is
 * interrupted and restarted never extends past the store's deadline.
 *
 * Thread safety: no state; safe from any thread.
 */
#include "core/store_proto.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

#include "util/clock.h"

int weft_store_proto_ms_left(uint64_t deadline_ns)
{
    uint64_t now = weft_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Sleep for ns, or until deadline_ns if that comes first. */
static void sleep_until_min(uint64_t ns, uint64_t deadline_ns)
{
    uint64_t now = weft_now_ns();
    if (now >= deadline_ns)
        return;
    if (deadline_ns - now < ns)
        ns = deadline_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

void weft_store_proto_backoff(uint64_t *backoff_ns, uint64_t deadline_ns)
{
    sleep_until_min(*backoff_ns, deadline_ns);
    *backoff_ns = *backoff_ns * 2 > STORE_BACKOFF_MAX_NS ? STORE_BACKOFF_MAX_NS : *backoff_ns * 2;
}
