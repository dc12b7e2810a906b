/*
 * dtype.h - element types and reduction operators: sizes, names and validity.
 */
#ifndef WEFT_UTIL_DTYPE_H
#define WEFT_UTIL_DTYPE_H

#include <stddef.h>

#include "weft.h"

/* 1 if dtype / op is a value of its enum. */
static inline int weft_dtype_valid(weft_dtype_t dtype)
{
    return (unsigned)dtype < WEFT_NUM_DTYPES;
}
static inline int weft_redop_valid(weft_redop_t op)
{
    return (unsigned)op < WEFT_NUM_REDOPS;
}

/* Short names ("float32"); "?" for invalid values. */
const char *weft_dtype_name(weft_dtype_t dtype);

#endif /* WEFT_UTIL_DTYPE_H */
