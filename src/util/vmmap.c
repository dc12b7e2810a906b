/*
 * vmmap.c - the unmapped ranges of this process's address space (see vmmap.h).
 */
#include "util/vmmap.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Record the gap [lo, hi) clipped to [floor, ceil) if it is long enough. Gaps come in ascending
 * order; when out is full the lowest kept one makes room, so out ends with the highest max. */
static void keep_gap(uint64_t lo, uint64_t hi, uint64_t floor, uint64_t ceil, uint64_t min_bytes,
                     weft_vrange_t *out, int max, int *n)
{
    if (lo < floor)
        lo = floor;
    if (hi > ceil)
        hi = ceil;
    if (hi <= lo || hi - lo < min_bytes || max <= 0)
        return;
    if (*n == max) {
        memmove(out, out + 1, (size_t)(max - 1) * sizeof *out);
        (*n)--;
    }
    out[(*n)++] = (weft_vrange_t){lo, hi};
}

int weft_vm_free_ranges_from(FILE *maps, uint64_t floor, uint64_t ceil, uint64_t min_bytes,
                             weft_vrange_t *out, int max)
{
    char *line = NULL;
    size_t cap = 0;
    uint64_t prev_end = 0;
    int n = 0, rc = 0;
    while (getline(&line, &cap, maps) != -1) {
        uint64_t start, end;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64, &start, &end) != 2 || end < start ||
            start < prev_end) {
            rc = -1;
            break;
        }
        keep_gap(prev_end, start, floor, ceil, min_bytes, out, max, &n);
        prev_end = end;
    }
    free(line);
    if (rc != 0)
        return rc;
    keep_gap(prev_end, UINT64_MAX, floor, ceil, min_bytes, out, max, &n);
    for (int i = 0; i < n / 2; i++) { /* ascending -> highest first */
        weft_vrange_t t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    return n;
}

int weft_vm_free_ranges(uint64_t floor, uint64_t ceil, uint64_t min_bytes, weft_vrange_t *out,
                        int max)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -1;
    int n = weft_vm_free_ranges_from(f, floor, ceil, min_bytes, out, max);
    fclose(f);
    return n;
}
