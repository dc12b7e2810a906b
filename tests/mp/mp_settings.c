/*
 * mp_settings.c - ranks whose environments disagree on a setting every rank must share.
 *
 * MP_SETTING=NAME=VALUE is applied to the last rank's environment only, before its first weft
 * call (the configuration is read once per process). weft_comm_init must then fail on every rank
 * with WEFT_ERR_INVALID_ARGUMENT, within the timeout and without a hang, and weft_last_error()
 * must name the setting and the disagreeing rank. Needs at least 2 ranks. Does not use mp_init,
 * whose communicator would already fail.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INIT_LIMIT_S 30.0 /* the suite's WEFT_TIMEOUT_S is 60: a disagreement must not wait */

int main(void)
{
    mp_ctx_t ctx;
    mp_init_without_comm(&ctx, "mp_settings");
    const char *setting = getenv("MP_SETTING");
    if (!setting || !strchr(setting, '=') || strchr(setting, '=') == setting)
        mp_fatal(&ctx, "MP_SETTING must be NAME=VALUE");
    size_t name_len = (size_t)(strchr(setting, '=') - setting);
    char name[64];
    if (name_len >= sizeof name)
        mp_fatal(&ctx, "MP_SETTING's name is too long");
    memcpy(name, setting, name_len);
    name[name_len] = '\0';
    int last = ctx.nranks - 1;
    if (ctx.rank == last && setenv(name, setting + name_len + 1, 1) != 0)
        mp_fatal(&ctx, "setenv %s", setting);

    mp_case(&ctx, "weft_comm_init with %s on rank %d only", setting, last);
    weft_comm_t comm = NULL;
    double t0 = mp_now_s();
    weft_status_t st = weft_comm_init(&comm, NULL);
    double dt = mp_now_s() - t0;
    const char *msg = weft_last_error();
    char rank_word[32];
    snprintf(rank_word, sizeof rank_word, "rank %d", last);
    mp_check(&ctx, st == WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init returned %s, expected %s: %s",
             weft_status_string(st), weft_status_string(WEFT_ERR_INVALID_ARGUMENT), msg);
    mp_check(&ctx, strstr(msg, name) && strstr(msg, rank_word),
             "weft_last_error() does not name %s and %s: \"%s\"", name, rank_word, msg);
    mp_check(&ctx, dt < INIT_LIMIT_S, "weft_comm_init took %.1f s (limit %.0f s)", dt,
             INIT_LIMIT_S);
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
    return mp_finish(&ctx);
}
