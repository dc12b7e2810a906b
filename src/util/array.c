/*
 * array.c - growable arrays (see array.h).
 */
#include "util/array.h"

#include <stdlib.h>

int weft_array_grow(void **data, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*data, ncap * elem);
    if (!p)
        return -1;
    *data = p;
    *cap = ncap;
    return 0;
}
