/*
 * memcpy_bw.c - the plain-memcpy baseline for the copy collectives.
 *
 *   memcpy_bw [-t THREADS] [-n ITERS] [-w WARMUP] SIZE...
 *
 * In an all-gather or all-to-all of nccl-tests size SIZE, every rank writes SIZE bytes into its
 * receive buffer. This program copies SIZE bytes with memcpy, in THREADS threads at once (one
 * per rank, each with its own source and destination, so they contend for memory bandwidth as
 * the ranks do), timed like weft-bench: WARMUP copies, then ITERS copies each timed alone after
 * a barrier of the threads; per thread the median, and the printed time is the maximum over
 * threads. GB/s = SIZE / time, comparable with weft-bench's algbw (multiply by (n-1)/n for
 * busbw).
 *
 * Output, one row per size:  size  time(us)  GB/s  (lines starting with # are comments).
 *
 * Thread safety: each thread owns its buffers and time array; results are read after join.
 *
 * Exit status: 0 on success, 1 on a system failure, 2 on an argument error.
 */
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "util/clock.h"
#include "util/parse_bytes.h"

#define MAX_THREADS 256
#define BUFFER_ALIGN 4096

typedef struct copier {
    pthread_t thread;
    pthread_barrier_t *barrier;
    size_t bytes;
    int iters, warmup;
    char *src, *dst;
    uint64_t *times_ns;
    double median_us;
} copier_t;

static void *copier_main(void *arg)
{
    copier_t *c = arg;
    for (int w = 0; w < c->warmup; w++)
        memcpy(c->dst, c->src, c->bytes);
    for (int it = 0; it < c->iters; it++) {
        pthread_barrier_wait(c->barrier);
        uint64_t t0 = weft_now_ns();
        memcpy(c->dst, c->src, c->bytes);
        /* Keep the copy from being elided or moved past the clock read. */
        __asm__ volatile("" : : "r"(c->dst) : "memory");
        c->times_ns[it] = weft_now_ns() - t0;
    }
    c->median_us = bench_median_u64(c->times_ns, (size_t)c->iters) / 1e3;
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: memcpy_bw [-t THREADS] [-n ITERS] [-w WARMUP] SIZE...\n");
}

int main(int argc, char **argv)
{
    int threads = 1, iters = 20, warmup = 5, c;
    while ((c = getopt(argc, argv, "t:n:w:")) != -1) {
        int bad = c == 't'   ? bench_parse_int(optarg, 1, MAX_THREADS, &threads)
                  : c == 'n' ? bench_parse_int(optarg, 1, INT_MAX, &iters)
                  : c == 'w' ? bench_parse_int(optarg, 0, INT_MAX, &warmup)
                             : -1; /* getopt printed what is wrong */
        if (bad) {
            usage();
            return 2;
        }
    }
    if (optind == argc) {
        usage();
        return 2;
    }
    size_t max_bytes = 1;
    for (int k = optind; k < argc; k++) {
        uint64_t s;
        if (weft_parse_bytes(argv[k], &s) != 0 || s > SIZE_MAX) {
            fprintf(stderr, "memcpy_bw: bad size '%s'\n", argv[k]);
            usage();
            return 2;
        }
        max_bytes = s > max_bytes ? (size_t)s : max_bytes;
    }

    copier_t cs[MAX_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    int status = 0, made = 0;
    for (; made < threads; made++) {
        copier_t *cp = &cs[made];
        *cp = (copier_t){.barrier = &barrier, .iters = iters, .warmup = warmup};
        cp->times_ns = calloc((size_t)iters, sizeof *cp->times_ns);
        if (!cp->times_ns || posix_memalign((void **)&cp->src, BUFFER_ALIGN, max_bytes) != 0 ||
            posix_memalign((void **)&cp->dst, BUFFER_ALIGN, max_bytes) != 0) {
            fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", max_bytes);
            made++; /* free what this one got */
            status = 1;
            goto out_free;
        }
        memset(cp->src, 0x5a, max_bytes); /* first touch outside the timed region */
        memset(cp->dst, 0, max_bytes);
    }

    printf("# memcpy_bw: threads %d, iters %d, warmup %d\n", threads, iters, warmup);
    printf("# time: max over threads of the per-thread median of per-copy times\n");
    printf("# %10s  %9s  %7s\n", "size", "time", "GB/s");
    printf("# %10s  %9s  %7s\n", "(B)", "(us)", "");
    for (int k = optind; k < argc; k++) {
        uint64_t v;
        (void)weft_parse_bytes(argv[k], &v); /* validated above */
        size_t bytes = (size_t)v;
        for (int t = 0; t < threads; t++) {
            cs[t].bytes = bytes;
            int err = pthread_create(&cs[t].thread, NULL, copier_main, &cs[t]);
            if (err != 0) {
                fprintf(stderr, "memcpy_bw: pthread_create: %s\n", strerror(err));
                /* The barrier would wait forever for the missing thread. */
                exit(1);
            }
        }
        double worst = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(cs[t].thread, NULL);
            worst = cs[t].median_us > worst ? cs[t].median_us : worst;
        }
        printf("  %10zu  %9.2f  %7.2f\n", bytes, worst,
               worst > 0 ? (double)bytes / (worst * 1e3) : 0.0);
        fflush(stdout);
    }

out_free:
    for (int t = 0; t < made; t++) {
        free(cs[t].dst);
        free(cs[t].src);
        free(cs[t].times_ns);
    }
    pthread_barrier_destroy(&barrier);
    return status;
}
