/*
 * splitmix.h - splitmix64 (Steele, Lea and Flood, 2014): a 64-bit mixing function and the
 * generator built on it, for seeded test data, benchmarks and replayable random cases.
 *
 * Not cryptographic. Header only; no state of its own.
 */
#ifndef WEFT_UTIL_SPLITMIX_H
#define WEFT_UTIL_SPLITMIX_H

#include <stdint.h>

#define WEFT_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

/* The hash of x: the value the generator returns from state x. */
static inline uint64_t weft_splitmix64(uint64_t x)
{
    x += WEFT_SPLITMIX_GAMMA;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next value of the generator whose state is *state (which advances). */
static inline uint64_t weft_splitmix64_next(uint64_t *state)
{
    uint64_t z = weft_splitmix64(*state);
    *state += WEFT_SPLITMIX_GAMMA;
    return z;
}

#endif /* WEFT_UTIL_SPLITMIX_H */
