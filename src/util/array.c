/*
 * array.c - growable arrays (see array.h).
 */
#include "util/array.h"

#include <stdint.h>
#include <stdlib.h>

int weft_array_grow(void **data, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap = ncap <= SIZE_MAX / 2 ? ncap * 2 : need;
    if (elem != 0 && ncap > SIZE_MAX / elem)
        return -1;
    void *p = realloc(*data, ncap * elem);
    if (!p)
        return -1;
    *data = p;
    *cap = ncap;
    return 0;
}
