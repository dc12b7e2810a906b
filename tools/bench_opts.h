/*
 * bench_opts.h - weft-bench's tables (collectives, reductions, registration modes, backends) and
 * its command line: what a sweep measures, parsed from argv (bench_opts.c). Shared by weft-bench
 * and weft-bench-nccl (built with WEFT_BENCH_NCCL, which rejects what NCCL cannot measure).
 *
 * Thread safety: the tables are constant; parsing runs on the main thread.
 */
#ifndef WEFT_TOOLS_BENCH_OPTS_H
#define WEFT_TOOLS_BENCH_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "bench_data.h"
#include "weft.h"

/* ---------------------------------------------------------------------------------------------
 * Tables: collectives, dtypes, reductions
 * ------------------------------------------------------------------------------------------- */
typedef struct coll_info {
    const char *name;
    bool reduces;     /* takes a redop */
    bool rooted;      /* takes a root */
    bool has_inplace; /* the API defines an in-place form */
    bool per_rank;    /* size rounded to a multiple of nranks elements */
    /* 2: 2(n-1)/n, 1: (n-1)/n, 0: 1 (broadcast), 3: the share of the buffer that leaves the
     * rank (all-to-allv, whose block to itself is the smallest), -1: no bandwidth */
    int busbw_kind;
} coll_info_t;

extern const coll_info_t colls[NUM_COLLS];
extern const char *const redop_names[WEFT_NUM_REDOPS];
extern const char *const registration_names[3]; /* by weft_registration_t */
extern const char *const backend_names[3];      /* by weft_backend_t */

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */
typedef struct bench_opts {
    bool coll_selected[NUM_COLLS];
    size_t min_bytes, max_bytes;
    size_t factor;
    weft_redop_t op;
    weft_dtype_t dtype;
    int root;
    int iters, warmup;
    bool check;
    bool registration_set; /* else the configuration default (WEFT_REGISTRATION) */
    weft_registration_t registration;
    bool weft_buffers;
    bool run_outofplace, run_inplace;
    const char *json_path;
    bool backend_set; /* else the configuration default (WEFT_BACKEND) */
    weft_backend_t backend;
} bench_opts_t;

/* Print the usage text to out. */
void bench_usage(FILE *out);

/* Parse argv into opt (defaults first). Returns 0, or -1 after printing what is wrong (the caller
 * prints the usage), or 1 for --help. */
int bench_parse_args(int argc, char **argv, bench_opts_t *opt);

#endif /* WEFT_TOOLS_BENCH_OPTS_H */
