/*
 * vmmap.h - the unmapped ranges of this process's virtual address space, read from
 * /proc/self/maps (Linux).
 *
 * The shadow window (core/window.c) must sit at an address free in every rank; each rank
 * reports what is free in its own address space and the ranks intersect the reports, instead of
 * guessing one rank's free address and probing it in the others.
 *
 * A range read here is only a snapshot: another thread may map into it a moment later, so a
 * caller still reserves with "fail if occupied" semantics and retries.
 *
 * Thread safety: reentrant.
 */
#ifndef WEFT_UTIL_VMMAP_H
#define WEFT_UTIL_VMMAP_H

#include <stdint.h>
#include <stdio.h>

/* The half-open address range [lo, hi). */
typedef struct weft_vrange {
    uint64_t lo;
    uint64_t hi;
} weft_vrange_t;

/* The unmapped ranges of at least min_bytes inside [floor, ceil), clipped to it, highest first;
 * at most max of them (the highest). maps is text in the format of /proc/<pid>/maps (one mapping
 * per line, "start-end ..." in hex, ascending). Returns how many were written to out, or -1 when
 * a line does not parse or the mappings are not in ascending order. */
int weft_vm_free_ranges_from(FILE *maps, uint64_t floor, uint64_t ceil, uint64_t min_bytes,
                             weft_vrange_t *out, int max);

/* The same for this process, from /proc/self/maps; -1 when it cannot be read. */
int weft_vm_free_ranges(uint64_t floor, uint64_t ceil, uint64_t min_bytes, weft_vrange_t *out,
                        int max);

#endif /* WEFT_UTIL_VMMAP_H */
