/*
 * hello.c - a program built against an installed weft (pkg-config and CMake package): every
 * rank contributes rank + 1 and checks the all-reduced sum n(n+1)/2 on weft_malloc memory.
 */
#include <stdio.h>
#include <weft.h>

int main(void)
{
    weft_comm_t comm;
    weft_status_t st = weft_comm_init(&comm, NULL);
    if (st != WEFT_SUCCESS) {
        fprintf(stderr, "weft_comm_init: %s: %s\n", weft_status_string(st), weft_last_error());
        return 1;
    }
    int rank = weft_comm_rank(comm), n = weft_comm_size(comm);
    double *x = NULL;
    int ok = weft_malloc(comm, (void **)&x, 1000 * sizeof *x) == WEFT_SUCCESS;
    for (int i = 0; ok && i < 1000; i++)
        x[i] = rank + 1 + i;
    ok = ok && weft_all_reduce(comm, x, x, 1000, WEFT_FLOAT64, WEFT_SUM, NULL) == WEFT_SUCCESS;
    for (int i = 0; ok && i < 1000; i++)
        ok = x[i] == n * (n + 1) / 2.0 + (double)n * i;
    ok = ok && weft_free(comm, x) == WEFT_SUCCESS;
    ok = weft_comm_destroy(comm) == WEFT_SUCCESS && ok;
    printf("%s rank %d of %d\n", ok ? "PASS" : "FAIL", rank, n);
    return ok ? 0 : 1;
}
