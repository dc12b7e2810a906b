/*
 * parse_bytes.h - byte sizes written as text ("64K", "2MiB"), as the configuration table and the
 * benchmark programs' options take them.
 *
 * Dependency-free (the C library only), so that programs built without weft (bench/vs_mpi.sh
 * compiles bench/mpi_allreduce.c and bench/memcpy_bw.c with this file) parse sizes the same way.
 *
 * Thread safety: reentrant (errno is thread-local).
 */
#ifndef WEFT_UTIL_PARSE_BYTES_H
#define WEFT_UTIL_PARSE_BYTES_H

#include <stdint.h>

/* Parse a byte size: decimal digits, then an optional unit K, M, G or T (either case, powers of
 * 1024) with an optional "i" after it, then an optional B or b: "4096", "8B", "64K", "64KiB",
 * "2M", "1GB", "1T". Leading blanks and a '+' pass, as strtoull takes them. Returns 0 and sets
 * *out, or -1 (*out untouched) when s has no digits, a '-', anything else after the size, or a
 * value past UINT64_MAX. */
int weft_parse_bytes(const char *s, uint64_t *out);

#endif /* WEFT_UTIL_PARSE_BYTES_H */
