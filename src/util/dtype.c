/*
 * dtype.c - element sizes and names.
 */
#include "util/dtype.h"

static const struct {
    size_t size;
    const char *name;
} dtypes[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = {1, "int8"},       [WEFT_UINT8] = {1, "uint8"},
    [WEFT_INT32] = {4, "int32"},     [WEFT_UINT32] = {4, "uint32"},
    [WEFT_INT64] = {8, "int64"},     [WEFT_UINT64] = {8, "uint64"},
    [WEFT_FLOAT16] = {2, "float16"}, [WEFT_BFLOAT16] = {2, "bfloat16"},
    [WEFT_FLOAT32] = {4, "float32"}, [WEFT_FLOAT64] = {8, "float64"},
};

size_t weft_dtype_size(weft_dtype_t dtype)
{
    return weft_dtype_valid(dtype) ? dtypes[dtype].size : 0;
}

const char *weft_dtype_name(weft_dtype_t dtype)
{
    return weft_dtype_valid(dtype) ? dtypes[dtype].name : "?";
}
