/*
 * reduce_host.h - element-wise reductions on the CPU for every dtype and reduction op.
 *
 * Semantics (weft.h): 16-bit floats (IEEE binary16, bfloat16) are widened to float32, reduced
 * in float32 and rounded once to nearest even; float32 reduces in float32, float64 in float64;
 * integers reduce in their own type with wrap-around (unsigned) semantics for SUM/PROD.
 * AVG = SUM divided by avg_divisor: integers truncate toward zero, floats divide in their
 * accumulation type. MAX/MIN select, folding the sources in order: the accumulator is replaced
 * by a later source that compares strictly greater (MAX) / smaller (MIN) or, on floats, that is
 * not NaN where the accumulator is. So a NaN is ignored unless every source holds one (then
 * srcs[0]'s NaN comes out), as fmaxf/fminf and NCCL do; of equal values (+0 and -0) the
 * earliest is kept.
 *
 * Sources are combined in the order given (srcs[0], srcs[1], ...), so every rank that reduces
 * the same inputs in the same order gets bit-identical results.
 *
 * Pure computation: no allocation, thread-safe. dst may alias any source exactly (in place),
 * but must not partially overlap one.
 */
#ifndef WEFT_EXEC_REDUCE_HOST_H
#define WEFT_EXEC_REDUCE_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* dst[i] = op(srcs[0][i], ..., srcs[nsrcs-1][i]) for i < count; for WEFT_AVG the result is
 * divided by avg_divisor (>= 1). nsrcs >= 1. dtype and op must be valid (checked by callers). */
void weft_reduce_host(void *dst, const void *const *srcs, int nsrcs, size_t count,
                      weft_dtype_t dtype, weft_redop_t op, int avg_divisor);

/* Conversions used by the reductions (exact, round to nearest even on narrowing). */
float weft_half_to_float(uint16_t h);
uint16_t weft_float_to_half(float f);
float weft_bf16_to_float(uint16_t b);
uint16_t weft_float_to_bf16(float f);

#endif /* WEFT_EXEC_REDUCE_HOST_H */
