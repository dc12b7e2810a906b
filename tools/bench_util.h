/*
 * bench_util.h - what the benchmark and tool programs share besides the GPU error exits
 * (gpu_prog.h): medians of measured times, JSON string escaping, and option values (integers in
 * a range, comma-separated lists). Byte sizes are parsed by util/parse_bytes.h.
 *
 * Plain C with no dependency on weft or CUDA: bench/vs_mpi.sh compiles this file into programs
 * built with mpicc and cc that do not link weft (bench/mpi_allreduce.c, bench/memcpy_bw.c).
 *
 * Thread safety: every function is reentrant; each works only on what it is given.
 */
#ifndef WEFT_TOOLS_BENCH_UTIL_H
#define WEFT_TOOLS_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Median of v[0..n), n >= 1: the middle value, or the mean of the two middle values when n is
 * even. Sorts v in place (ascending), so afterwards v[0] is the minimum and v[n - 1] the
 * maximum. */
double bench_median_double(double *v, size_t n);
double bench_median_u64(uint64_t *v, size_t n);

/* Write s to f as a JSON string: quoted, with '"' and '\' escaped by a backslash and control
 * characters as \u00XX; other bytes (UTF-8 included) as they are. */
void bench_json_string(FILE *f, const char *s);

/* Parse a decimal int in [lo, hi] (the whole string). Returns 0, or -1 if it is malformed or
 * out of range (*out untouched). */
int bench_parse_int(const char *s, int lo, int hi, int *out);

/* Split text (shorter than 1024 bytes) at commas and call item(token, ctx) for each non-empty
 * token, in order, stopping at the first that returns nonzero. Returns 0 if there was at least
 * one token and item took them all, else -1. */
int bench_parse_list(const char *text, int (*item)(const char *token, void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TOOLS_BENCH_UTIL_H */
