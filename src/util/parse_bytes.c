/*
 * parse_bytes.c - byte sizes written as text (see parse_bytes.h).
 *
 * The grammar is the union of the two it replaces, the configuration table's (K M G T, "KiB")
 * and the benchmarks' (a bare "B" or "b" after the number or unit): every size either accepted
 * parses to the same value, except a negative number after blanks, which strtoull wrapped.
 */
#include "util/parse_bytes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int weft_parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    /* strtoull negates a "-n" (after blanks, too) instead of failing. */
    if (end == s || errno != 0 || memchr(s, '-', (size_t)(end - s)) != NULL)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) {
        end++;
        if (*end == 'i')
            end++;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
