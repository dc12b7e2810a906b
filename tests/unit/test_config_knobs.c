/*
 * test_config_knobs.c - the variables the mp tests' .knobs and .seq<start> variants set
 * (tests/mp/CMakeLists.txt) reach the communicator: with WEFT_HOST_WORKERS=3,
 * WEFT_PART_UNIT_BYTES=4K and WEFT_SEQ_START=2^62 (the highest start the configuration takes,
 * whose low 32 bits are 0) in the environment, a one-rank host communicator made by
 * weft_comm_init from weft_config_default has an executor of 3 workers, a partition unit of
 * 4096 bytes in every tier of its cost model, and operation numbers that start at 2^62: the
 * communicator's last number is 2^62 after init and 2^62 + 1 after its first all-reduce. Without
 * these checks a library that ignored the variables would pass every one of those variants.
 *
 * The configuration is read once per process, on first use: the variables are set before any
 * weft call, so this case has a process of its own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/comm.h"
#include "weft.h"

#define CHECK_TRAILER() printf(" [last error: %s]\n", weft_last_error())
#include "check.h"

#define WORKERS 3
#define UNIT_BYTES 4096
#define SEQ_START ((uint64_t)1 << 62)

int main(void)
{
    if (setenv("WEFT_HOST_WORKERS", "3", 1) != 0 || setenv("WEFT_PART_UNIT_BYTES", "4K", 1) != 0 ||
        setenv("WEFT_SEQ_START", "4611686018427387904", 1) != 0) {
        perror("test_config_knobs: setenv");
        return 1;
    }
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.nranks = 1;
    cfg.backend = WEFT_BACKEND_HOST;
    CHECK(cfg.host_workers == WORKERS, "weft_config_default: host_workers %d, expected %d",
          cfg.host_workers, WORKERS);

    weft_comm_t comm = NULL;
    weft_status_t st = weft_comm_init(&comm, &cfg);
    CHECK(st == WEFT_SUCCESS, "weft_comm_init: %s", weft_status_string(st));
    if (st != WEFT_SUCCESS) {
        printf("test_config_knobs: %d checks failed\n", failures);
        return 1;
    }

    int workers = comm->exec_ops->nworkers(comm->exec);
    CHECK(workers == WORKERS, "the executor has %d workers, expected %d", workers, WORKERS);
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        CHECK(comm->model.tier[t].unit_bytes == UNIT_BYTES,
              "tier %d: partition unit %llu bytes, expected %d", t,
              (unsigned long long)comm->model.tier[t].unit_bytes, UNIT_BYTES);
    CHECK(comm->seq == SEQ_START, "last operation number after init %llu, expected %llu",
          (unsigned long long)comm->seq, (unsigned long long)SEQ_START);

    /* The first operation takes the next number. */
    int32_t in = 7, out = -1;
    st = weft_all_reduce(comm, &in, &out, 1, WEFT_INT32, WEFT_SUM, NULL);
    CHECK(st == WEFT_SUCCESS && out == 7, "weft_all_reduce: %s, result %d (expected 7)",
          weft_status_string(st), (int)out);
    CHECK(comm->seq == SEQ_START + 1,
          "operation number of the first all-reduce %llu, expected %llu",
          (unsigned long long)comm->seq, (unsigned long long)(SEQ_START + 1));

    st = weft_comm_destroy(comm);
    CHECK(st == WEFT_SUCCESS, "weft_comm_destroy: %s", weft_status_string(st));
    if (failures != 0) {
        printf("test_config_knobs: %d checks failed\n", failures);
        return 1;
    }
    printf("test_config_knobs: PASS\n");
    return 0;
}
