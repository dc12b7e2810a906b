/*
 * mpi_allreduce.c - MPI_Allreduce (float32, SUM) timed exactly as weft-bench times
 * weft_all_reduce, so the two outputs can be joined row by row on the size column.
 *
 *   mpirun -np 2 mpi_allreduce [-n ITERS] [-w WARMUP] SIZE...
 *
 * SIZE is the all-reduce buffer in bytes (8, 64K, 16M; powers of 1024). For each size: WARMUP
 * calls back to back, then ITERS calls each timed alone (MPI_Barrier, clock_gettime
 * CLOCK_MONOTONIC around the call); each rank takes the median, min and mean of its per-call
 * times, and MPI_Reduce(MAX) brings the maximum over ranks to rank 0, which prints the
 * nccl-tests columns of weft-bench's out-of-place table:
 *
 *     size count type redop root time algbw busbw #wrong
 *
 * After timing, one extra call on small-integer inputs (sums exact in float32) is checked
 * element by element; #wrong is summed over ranks. Buffers are plain malloc, out of place.
 *
 * Exit status: 0 on success, 1 if any element is wrong or MPI fails, 2 on an argument error.
 *
 * Thread safety: single-threaded (MPI_Init, not MPI_Init_thread).
 */
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "util/clock.h"
#include "util/parse_bytes.h"

/* Inputs cycle through this many small integers; 64 * nranks stays exact in float32. */
#define INPUT_MODULUS 64

static float input_value(int rank, size_t i)
{
    return (float)(((i % INPUT_MODULUS) * 7 + (size_t)rank * 13 + 1) % INPUT_MODULUS);
}

static void usage(void)
{
    fprintf(stderr, "usage: mpirun -np N mpi_allreduce [-n ITERS] [-w WARMUP] SIZE...\n");
}

int main(int argc, char **argv)
{
    int iters = 20, warmup = 5, c;
    while ((c = getopt(argc, argv, "n:w:")) != -1) {
        int bad = c == 'n'   ? bench_parse_int(optarg, 1, INT_MAX, &iters)
                  : c == 'w' ? bench_parse_int(optarg, 0, INT_MAX, &warmup)
                             : -1; /* getopt printed what is wrong */
        if (bad) {
            usage();
            return 2;
        }
    }
    size_t nsizes = (size_t)(argc - optind), max_bytes = 4;
    if (nsizes == 0) {
        usage();
        return 2;
    }
    size_t *sizes = calloc(nsizes, sizeof *sizes);
    uint64_t *times = calloc((size_t)iters, sizeof *times);
    if (!sizes || !times) {
        fprintf(stderr, "mpi_allreduce: out of memory\n");
        return 1;
    }
    for (size_t k = 0; k < nsizes; k++) {
        uint64_t v;
        /* MPI_Allreduce takes an int count of floats */
        if (weft_parse_bytes(argv[optind + (int)k], &v) != 0 || v / sizeof(float) > INT_MAX) {
            fprintf(stderr, "mpi_allreduce: bad size '%s' (at most %zu bytes)\n",
                    argv[optind + (int)k], (size_t)INT_MAX * sizeof(float));
            usage();
            return 2;
        }
        sizes[k] = (size_t)v;
        max_bytes = sizes[k] > max_bytes ? sizes[k] : max_bytes;
    }

    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    float *send = malloc(max_bytes), *recv = malloc(max_bytes);
    if (!send || !recv) {
        fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", rank, max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < max_bytes / sizeof(float); i++) {
        send[i] = input_value(rank, i);
        recv[i] = 0;
    }

    int version_len;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &version_len);
    if (rank == 0) {
        char *nl = strchr(version, '\n');
        if (nl)
            *nl = '\0';
        printf("# mpi_allreduce: ranks %d, %s, buffers malloc, iters %d, warmup %d, check 1\n",
               nranks, version, iters, warmup);
        printf("# time: max over ranks of the per-rank median of per-call times\n");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "(B)", "(elements)", "", "", "",
               "(us)", "(GB/s)", "(GB/s)", "");
    }

    unsigned long long wrong_total = 0;
    for (size_t k = 0; k < nsizes; k++) {
        int count = (int)(sizes[k] / sizeof(float));
        for (int w = 0; w < warmup; w++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int it = 0; it < iters; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            uint64_t t0 = weft_now_ns();
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[it] = weft_now_ns() - t0;
        }
        double median = bench_median_u64(times, (size_t)iters); /* sorts: times[0] is the min */
        double sum = 0;
        for (int it = 0; it < iters; it++)
            sum += (double)times[it];
        double local[3] = {median / 1e3, (double)times[0] / 1e3, sum / iters / 1e3}, worst[3];
        MPI_Reduce(local, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        /* One checked call on fresh outputs. */
        for (int i = 0; i < count; i++)
            recv[i] = -1.0f;
        MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        unsigned long long wrong = 0, wrong_sum = 0;
        for (int i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += input_value(r, (size_t)i);
            wrong += recv[i] != want;
        }
        MPI_Reduce(&wrong, &wrong_sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

        if (rank == 0) {
            double bytes = (double)count * sizeof(float);
            double algbw = worst[0] > 0 ? bytes / (worst[0] * 1e3) : 0;
            double busbw = algbw * 2.0 * (nranks - 1) / nranks;
            printf("  %10zu  %12d  %8s  %6s  %6d  %9.2f  %7.2f  %7.2f  %6llu\n",
                   (size_t)count * sizeof(float), count, "float", "sum", -1, worst[0], algbw, busbw,
                   wrong_sum);
            fflush(stdout);
            wrong_total += wrong_sum;
        }
    }
    if (rank == 0)
        printf("# Out of bounds values : %llu %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    free(send);
    free(recv);
    free(times);
    free(sizes);
    MPI_Finalize();
    return wrong_total ? 1 : 0;
}
