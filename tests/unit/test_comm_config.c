/*
 * test_comm_config.c - weft_comm_init rejects a bad weft_config_t before any communication, with
 * WEFT_ERR_INVALID_ARGUMENT and a message naming the field: a timeout that is not positive, not
 * finite or so long that the GPU's deadline (now + timeout in ns) would overflow, worker counts
 * outside [1, 256], unknown backend and registration values. One process, one rank.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

static int failures;

static void expect_invalid(const char *what, weft_config_t cfg, const char *field)
{
    weft_comm_t comm = NULL;
    weft_status_t st = weft_comm_init(&comm, &cfg);
    const char *msg = weft_last_error();
    if (st != WEFT_ERR_INVALID_ARGUMENT || comm != NULL || !strstr(msg, "weft_comm_init") ||
        !strstr(msg, field)) {
        printf("FAIL: %s: status %s, comm %p, message \"%s\" (expected %s naming %s)\n", what,
               weft_status_string(st), (void *)comm, msg,
               weft_status_string(WEFT_ERR_INVALID_ARGUMENT), field);
        failures++;
        if (st == WEFT_SUCCESS)
            weft_comm_destroy(comm);
    }
}

int main(void)
{
    weft_config_t base;
    weft_config_default(&base);
    base.rank = 0;
    base.nranks = 1;
    base.backend = WEFT_BACKEND_HOST;
    const double bad_timeouts[] = {0, -1, NAN, INFINITY, 1e30, 1.8e10};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        weft_config_t cfg = base;
        cfg.timeout_s = bad_timeouts[i];
        char what[64];
        snprintf(what, sizeof what, "timeout_s %g", bad_timeouts[i]);
        expect_invalid(what, cfg, "timeout_s");
    }
    weft_config_t cfg = base;
    cfg.host_workers = 0;
    expect_invalid("host_workers 0", cfg, "host_workers");
    cfg.host_workers = 257;
    expect_invalid("host_workers 257", cfg, "host_workers");
    cfg = base;
    cfg.backend = (weft_backend_t)7;
    expect_invalid("backend 7", cfg, "backend");
    cfg = base;
    cfg.registration = (weft_registration_t)9;
    expect_invalid("registration 9", cfg, "registration");
    if (failures) {
        printf("test_comm_config: %d checks failed\n", failures);
        return 1;
    }
    printf("test_comm_config: ok\n");
    return 0;
}
