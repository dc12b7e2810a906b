/*
 * test_config_range.c - numeric variables outside their accepted range, or not finite, keep
 * their default (with a warning) instead of reaching the library: a zero bandwidth, an infinite
 * latency, too many workers, a push limit above 16M, a zero partition unit (host and CUDA), a
 * local rank below -1, a first operation
 * number past 2^62 (by one: counts are compared exactly, not as doubles); values inside the
 * range still parse. Durations in ns are plain counts: a byte unit ("20K", once read as 20480 ns)
 * is malformed there. Blanks around a value are ignored, and a value of blanks only counts as
 * unset (the fallback variable is read); a negative block count is out of range. A job secret
 * too long to hold is malformed, and its warning (stderr, captured) must not show it.
 * A refused value of a variable with a fallback (the torchrun names) gives the fallback's value
 * when that is valid, else the default, and each refused value's warning names its own variable
 * and what is used instead: WEFT_RANK malformed takes RANK; WEFT_MASTER_PORT out of range under
 * torchrun takes MASTER_PORT + 1, as when it is unset (before: 29500, torchrun's usual port);
 * WORLD_SIZE malformed (WEFT_NRANKS unset) is named as itself; WEFT_LOCAL_RANK and LOCAL_RANK both
 * out of range leave the default, with a warning each.
 * The configuration is read once per process, so this case has a process of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/config.h"

static int failures;

static void expect_double(const char *what, double got, double want)
{
    if (got != want) {
        printf("FAIL: %s = %g, expected %g\n", what, got, want);
        failures++;
    }
}

static void expect_u64(const char *what, uint64_t got, uint64_t want)
{
    if (got != want) {
        printf("FAIL: %s = %llu, expected %llu\n", what, (unsigned long long)got,
               (unsigned long long)want);
        failures++;
    }
}

int main(void)
{
    setenv("WEFT_TIER_PEER_BW_GBPS", "0", 1);          /* below 1e-6: default 8 */
    setenv("WEFT_TIER_PEER_LAT_US", "inf", 1);         /* not finite: default 0.5 */
    setenv("WEFT_TIER_SELF_BW_GBPS", "nan", 1);        /* not finite: default 10 */
    setenv("WEFT_TIMEOUT_S", "0", 1);                  /* below 1e-3: default 300 */
    setenv("WEFT_HOST_WORKERS", "1000", 1);            /* above 256: default 1 */
    setenv("WEFT_CUDA_PUSH_BYTES", "32M", 1);          /* above 16M: default auto */
    setenv("WEFT_PART_UNIT_BYTES", "0", 1);            /* below 1: default 256K */
    setenv("WEFT_INLINE_BYTES", "257", 1);             /* above 256: default 256 */
    setenv("WEFT_TIER_REMOTE_NUMA_BW_GBPS", "2.5", 1); /* in range */
    setenv("WEFT_PLAN_CACHE_ENTRIES", "256", 1);       /* the upper end, in range */
    setenv("WEFT_STAGING_BYTES", "4096", 1);           /* the lower end, in range */
    setenv("WEFT_WAIT_SPIN_NS", "20K", 1);             /* a byte unit: default 20000 */
    setenv("WEFT_WAIT_YIELD_NS", "150000 ", 1);        /* a count, a blank after it: parsed */
    setenv("WEFT_CUDA_FANOUT", "-3", 1);               /* negative: default 0 */
    setenv("WEFT_CUDA_MOE_BLOCKS", "\t7", 1);          /* a blank before it: parsed */
    setenv("WEFT_CUDA_UNIT_BYTES", "0", 1);            /* below 1: default 1M */
    setenv("WEFT_LOCAL_RANK", "-7", 1);                /* below -1: LOCAL_RANK, */
    setenv("LOCAL_RANK", "-5", 1);                     /* below -1 too: default -1 (the rank) */
    setenv("WEFT_RANK", "two", 1);                     /* malformed: RANK */
    setenv("RANK", "3", 1);
    unsetenv("WEFT_NRANKS");
    setenv("WORLD_SIZE", "4x", 1);          /* malformed: default -1 */
    setenv("WEFT_MASTER_PORT", "70000", 1); /* above 65535: MASTER_PORT, + 1 under torchrun */
    setenv("MASTER_PORT", "31234", 1);
    setenv("TORCHELASTIC_RUN_ID", "test-run", 1);
    setenv("WEFT_CUDA_MAX_BLOCKS", " 24\n", 1); /* blanks around it: parsed */
    setenv("WEFT_MASTER_ADDR", " ", 1);         /* blanks only: unset, so the fallback */
    setenv("MASTER_ADDR", "10.0.0.5", 1);
    /* 2^62 + 1: above 2^62, compared exactly (as a double it rounds to 2^62): default 0 */
    setenv("WEFT_SEQ_START", "4611686018427387905", 1);
    char secret[301];
    memset(secret, 'k', sizeof secret - 1); /* past WEFT_CONFIG_STR_BYTES: malformed */
    memcpy(secret, "TOPSECRET", 9);
    secret[sizeof secret - 1] = '\0';
    setenv("WEFT_JOB_SECRET", secret, 1);
    setenv("WEFT_LOG_LEVEL", "warn", 1); /* the warnings must be printed, whatever ctest inherits */
    /* The warnings go to stderr: read them from a file standing in for it. */
    FILE *cap = tmpfile();
    int saved = dup(2);
    if (!cap || saved < 0 || dup2(fileno(cap), 2) < 0) {
        printf("FAIL: cannot capture stderr\n");
        return 1;
    }
    const weft_env_t *env = weft_config_get();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char warnings[16384];
    rewind(cap);
    size_t got = fread(warnings, 1, sizeof warnings - 1, cap);
    warnings[got] = '\0';
    fclose(cap);
    fputs(warnings, stderr); /* as they were, for the log */
    if (strstr(warnings, "TOPSECRET") || !strstr(warnings, "WEFT_JOB_SECRET")) {
        printf("FAIL: the warning about WEFT_JOB_SECRET is missing or shows its value\n");
        failures++;
    }
    if (env->job_secret[0] != '\0') {
        printf("FAIL: a malformed WEFT_JOB_SECRET was kept\n");
        failures++;
    }
    expect_double("tier_peer_bw_gbps (0)", env->tier_peer_bw_gbps, 8.0);
    expect_double("tier_peer_lat_us (inf)", env->tier_peer_lat_us, 0.5);
    expect_double("tier_self_bw_gbps (nan)", env->tier_self_bw_gbps, 10.0);
    expect_double("timeout_s (0)", env->timeout_s, 300.0);
    expect_u64("host_workers (1000)", (uint64_t)env->host_workers, 1);
    expect_u64("cuda_push_bytes (32M)", env->cuda_push_bytes, WEFT_CONFIG_AUTO);
    expect_u64("part_unit_bytes (0)", env->part_unit_bytes, 256u << 10);
    expect_u64("inline_bytes (257)", env->inline_bytes, 256);
    expect_double("tier_remote_numa_bw_gbps (2.5)", env->tier_remote_numa_bw_gbps, 2.5);
    expect_u64("plan_cache_entries (256)", (uint64_t)env->plan_cache_entries, 256);
    expect_u64("staging_bytes (4096)", env->staging_bytes, 4096);
    expect_u64("wait_spin_ns (20K)", env->wait_spin_ns, 20000);
    expect_u64("wait_yield_ns (150000)", env->wait_yield_ns, 150000);
    expect_u64("cuda_fanout (-3)", (uint64_t)env->cuda_fanout, 0);
    expect_u64("cuda_moe_blocks (\\t7)", (uint64_t)env->cuda_moe_blocks, 7);
    expect_u64("cuda_unit_bytes (0)", env->cuda_unit_bytes, 1u << 20);
    expect_u64("local_rank (-7)", (uint64_t)(int64_t)env->local_rank, (uint64_t)(int64_t)-1);
    expect_u64("cuda_max_blocks ( 24\\n)", (uint64_t)env->cuda_max_blocks, 24);
    if (strcmp(env->master_addr, "10.0.0.5") != 0) {
        printf("FAIL: master_addr = \"%s\", expected MASTER_ADDR's 10.0.0.5\n", env->master_addr);
        failures++;
    }
    expect_u64("seq_start (2^62 + 1)", env->seq_start, 0);
    expect_u64("rank (WEFT_RANK=two, RANK=3)", (uint64_t)env->rank, 3);
    expect_u64("nranks (WORLD_SIZE=4x)", (uint64_t)(int64_t)env->nranks, (uint64_t)(int64_t)-1);
    expect_u64("master_port (WEFT_MASTER_PORT=70000, MASTER_PORT=31234, torchrun)",
               (uint64_t)env->master_port, 31235);
    static const char *const want[] = {
        "weft WARN: WEFT_RANK=\"two\" is malformed; using RANK=\"3\"\n",
        "weft WARN: WORLD_SIZE=\"4x\" is malformed; using the default \"-1\"\n",
        "weft WARN: WEFT_LOCAL_RANK=\"-7\" is outside [-1, 2147483647]; using the default \"-1\"\n",
        "weft WARN: LOCAL_RANK=\"-5\" is outside [-1, 2147483647]; using the default \"-1\"\n",
        "weft WARN: WEFT_MASTER_PORT=\"70000\" is outside [1, 65535]; using "
        "MASTER_PORT=\"31234\"\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!strstr(warnings, want[i])) {
            printf("FAIL: no warning \"%.*s\"\n", (int)strlen(want[i]) - 1, want[i]);
            failures++;
        }
    }
    if (strstr(warnings, "WEFT_NRANKS")) {
        printf("FAIL: a warning names WEFT_NRANKS, which is unset (WORLD_SIZE was refused)\n");
        failures++;
    }
    if (failures) {
        printf("test_config_range: %d checks failed\n", failures);
        return 1;
    }
    printf("test_config_range: ok\n");
    return 0;
}
