/*
 * clock.h - monotonic time in nanoseconds and deadlines.
 */
#ifndef WEFT_UTIL_CLOCK_H
#define WEFT_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t weft_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The absolute deadline timeout_s seconds from now (saturating). */
static inline uint64_t weft_deadline_after_s(double timeout_s)
{
    double ns = timeout_s * 1e9;
    uint64_t now = weft_now_ns();
    if (ns >= (double)(UINT64_MAX - now))
        return UINT64_MAX;
    return now + (uint64_t)ns;
}

#endif /* WEFT_UTIL_CLOCK_H */
