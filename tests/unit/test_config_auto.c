/*
 * test_config_auto.c - byte-size variables whose default is "auto" take "auto" (any case) as
 * WEFT_CONFIG_AUTO and print it back as "auto"; explicit sizes still parse; "auto" in a byte
 * variable without that default is malformed (the default stays, with a warning). The
 * configuration is read once per process, so this case has a process of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"

static int failures;

static void expect_u64(const char *what, uint64_t got, uint64_t want)
{
    if (got != want) {
        printf("FAIL: %s = %llu, expected %llu\n", what, (unsigned long long)got,
               (unsigned long long)want);
        failures++;
    }
}

/* The line weft_config_print gives name, with its value column. */
static void expect_printed(const char *name, const char *value)
{
    char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    if (!f) {
        printf("FAIL: fmemopen\n");
        failures++;
        return;
    }
    weft_config_print(f);
    fclose(f);
    buf[sizeof buf - 1] = '\0';
    char want[128];
    snprintf(want, sizeof want, "\n%-30s %-12s ", name, value);
    if (!strstr(buf, want)) {
        printf("FAIL: weft_config_print has no line \"%s\"\n", want + 1);
        failures++;
    }
}

int main(void)
{
    setenv("WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES", "AUTO", 1);
    unsetenv("WEFT_CUDA_PUSH_BYTES");
    setenv("WEFT_ALLREDUCE_TWOSHOT_BYTES", "3M", 1);
    setenv("WEFT_STAGING_BYTES", "auto", 1); /* its default is 4M: malformed */
    const weft_env_t *env = weft_config_get();
    expect_u64("allreduce_inplace_twoshot_bytes (AUTO)", env->allreduce_inplace_twoshot_bytes,
               WEFT_CONFIG_AUTO);
    expect_u64("allreduce_twoshot_bytes (3M)", env->allreduce_twoshot_bytes, 3u << 20);
    expect_u64("cuda_push_bytes (unset)", env->cuda_push_bytes, WEFT_CONFIG_AUTO);
    expect_u64("staging_bytes (auto, not allowed)", env->staging_bytes, 4u << 20);
    expect_printed("WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES", "auto");
    expect_printed("WEFT_ALLREDUCE_TWOSHOT_BYTES", "3145728");
    expect_printed("WEFT_STAGING_BYTES", "4194304");
    expect_printed("WEFT_CUDA_PUSH_BYTES", "auto");
    return failures ? 1 : 0;
}
