/*
 * array.h - growable arrays (the small containers of the util layer).
 */
#ifndef WEFT_UTIL_ARRAY_H
#define WEFT_UTIL_ARRAY_H

#include <stddef.h>

/* Make room for need elements of elem bytes in *data (capacity *cap, doubled as needed, at least
 * 16). Returns 0, or -1 when out of memory (the array is left as it was). */
int weft_array_grow(void **data, size_t *cap, size_t need, size_t elem);

#endif /* WEFT_UTIL_ARRAY_H */
