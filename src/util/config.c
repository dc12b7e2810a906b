/*
 * config.c - the configuration table and its parser.
 *
 * Design: one static array of rows; each row names the variable, an optional fallback variable
 * (the torchrun name), the default as a string, the unit, the help text, the parser and the
 * offset of the parsed field in weft_env_t. Parsing runs once under pthread_once: defaults first,
 * then the environment. A row's variable is tried first, then its fallback, each only when set;
 * the first value that parses and is in range is taken, else the default stays, and every value
 * refused on the way is warned about (naming its own variable and what is used instead). So a
 * malformed WEFT_MASTER_PORT under torchrun gives MASTER_PORT's port (+ 1, as when it is unset),
 * never 29500, where torchrun's own store often listens. This file is the only caller of getenv
 * in the library.
 *
 * Numbers are read and written in the C locale, whatever locale the embedding program selected
 * (setlocale(LC_ALL, "") under de_DE would make "0.5" malformed and print "0,5"): decimals are
 * parsed with strtod_l and formatted under uselocale, both with one C locale object made once
 * (pthread_once) and never freed. uselocale changes the calling thread's locale only, and is
 * undone before the formatting function returns, so other threads (and the caller's own later
 * output) keep theirs; a forked child inherits the object with the memory.
 */
#include "util/config.h"

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"
#include "util/parse_bytes.h"

/* CFG_U64: a plain unsigned decimal count (durations in ns); CFG_BYTES also takes "64K". */
typedef enum { CFG_INT, CFG_DOUBLE, CFG_U64, CFG_BYTES, CFG_STRING, CFG_ENUM } cfg_type_t;

typedef struct cfg_row {
    const char *name;
    const char *fallback; /* also read when name is unset (torchrun variables), or NULL */
    const char *def;
    const char *unit;
    cfg_type_t type;
    size_t offset;
    const char *const *choices; /* CFG_ENUM: NULL-terminated names, value = index */
    const char *help;
    double lo, hi; /* numeric types: the accepted range [lo, hi] if lo < hi */
} cfg_row_t;

static const char *const backend_names[] = {"auto", "host", "cuda", NULL};
static const char *const registration_names[] = {"roa", "jit", "staged", NULL};
static const char *const log_names[] = {"none", "error", "warn", "info", "debug", NULL};
/* weft_copy_engine_t and weft_remote_stores_t: never, always, auto */
static const char *const switch_names[] = {"0", "1", "auto", NULL};

#define OFF(field) offsetof(weft_env_t, field)
#define RANGE(lo, hi) (lo), (hi)
#define NO_RANGE 0, 0

/* clang-format off */
static const cfg_row_t rows[] = {
    {"WEFT_RANK", "RANK", "-1", "", CFG_INT, OFF(rank), NULL,
     "rank of this process in the job", NO_RANGE},
    {"WEFT_NRANKS", "WORLD_SIZE", "-1", "", CFG_INT, OFF(nranks), NULL,
     "number of ranks in the job", NO_RANGE},
    {"WEFT_LOCAL_RANK", "LOCAL_RANK", "-1", "", CFG_INT, OFF(local_rank), NULL,
     "rank within the node; picks the GPU on the CUDA backend (-1: the rank)",
     RANGE(-1, INT_MAX)},
    {"WEFT_MASTER_ADDR", "MASTER_ADDR", "127.0.0.1", "", CFG_STRING, OFF(master_addr), NULL,
     "address of the rendezvous store hosted by rank 0", NO_RANGE},
    {"WEFT_MASTER_PORT", "MASTER_PORT", "29500", "", CFG_INT, OFF(master_port), NULL,
     "TCP port of the rendezvous store (under torchrun, whose store holds MASTER_PORT: it + 1)",
     RANGE(1, 65535)},
    {"WEFT_JOB_SECRET", NULL, "", "", CFG_STRING, OFF(job_secret), NULL,
     "per-job secret checked on every control socket (weftrun sets it; empty: rank 0 makes one)",
     NO_RANGE},
    {"WEFT_BACKEND", NULL, "auto", "", CFG_ENUM, OFF(backend), backend_names,
     "auto|host|cuda; auto picks cuda when a GPU is present", NO_RANGE},
    {"WEFT_REGISTRATION", NULL, "roa", "", CFG_ENUM, OFF(registration), registration_names,
     "roa: register at allocation; jit: at first use; staged: copy through scratch", NO_RANGE},
    {"WEFT_TIMEOUT_S", NULL, "300", "s", CFG_DOUBLE, OFF(timeout_s), NULL,
     "deadline of every wait; past it an operation fails with WEFT_ERR_TIMEOUT", RANGE(WEFT_TIMEOUT_S_MIN, WEFT_TIMEOUT_S_MAX)},
    {"WEFT_LOG_LEVEL", NULL, "warn", "", CFG_ENUM, OFF(log_level), log_names,
     "none|error|warn|info|debug", NO_RANGE},
    {"WEFT_WINDOW_SLICE_BYTES", NULL, "0", "bytes", CFG_BYTES, OFF(window_slice_bytes), NULL,
     "size of each rank's slice of the shadow window (0: 64G host, 256G cuda); every rank "
     "reserves (never commits) all ranks' slices at one address, so lower it where address "
     "space is scarce (sanitizers: make test-tsan uses 8G); the same on every rank", NO_RANGE},
    {"WEFT_STAGING_BYTES", NULL, "4M", "bytes", CFG_BYTES, OFF(staging_bytes), NULL,
     "initial size of the registered staging scratch (grows on demand)",
     RANGE(4096, 0x1p40)},
    {"WEFT_REGISTRATION_BACKLOG", NULL, "64", "jobs", CFG_INT, OFF(registration_backlog), NULL,
     "registrations of a rank the registrar sends before every peer acknowledged them; later "
     "ones wait in its queue (weft_malloc never waits): bounds the descriptors a burst of "
     "allocations holds (one exported, and one in flight per peer, per registration)",
     RANGE(1, 65536)},
    {"WEFT_HOST_WORKERS", NULL, "1", "threads", CFG_INT, OFF(host_workers), NULL,
     "threads per rank that move data on the host backend (the caller is one of them)",
     RANGE(1, 256)},
    {"WEFT_INLINE_BYTES", NULL, "256", "bytes", CFG_BYTES, OFF(inline_bytes), NULL,
     "host backend: payloads up to this size travel inside the handshake slot (at most 256; "
     "the same on every rank)", RANGE(0, 256)},
    {"WEFT_ALLREDUCE_TWOSHOT_BYTES", NULL, "auto", "bytes", CFG_BYTES,
     OFF(allreduce_twoshot_bytes), NULL,
     "out-of-place all-reduce uses the two-shot form from this size up; auto: the measured "
     "crossover, 2M from 3 ranks, never with 2 (CUDA with ranks on several GPUs: 512K, 2 ranks "
     "4M); the same on every rank", NO_RANGE},
    {"WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES", NULL, "auto", "bytes", CFG_BYTES,
     OFF(allreduce_inplace_twoshot_bytes), NULL,
     "in-place all-reduce uses the two-shot form (no input copy) from this size up; auto: the "
     "measured crossover, 1M (CUDA with ranks on several GPUs: 128K); the same on every rank",
     NO_RANGE},
    {"WEFT_REMOTE_STORES", NULL, "auto", "", CFG_ENUM, OFF(remote_stores), switch_names,
     "all-gather, all-to-all and two-shot all-reduce write their results into every rank's "
     "output instead of each rank reading them from its peers, when every rank's output is weft "
     "memory (for all-gather and all-to-all: and no input is staged, and no rank's copies run on "
     "the copy engines): 0 never, 1 always, auto on "
     "the CUDA backend (on the host, reading measured faster)", NO_RANGE},
    {"WEFT_WAIT_SPIN_NS", NULL, "20000", "ns", CFG_U64, OFF(wait_spin_ns), NULL,
     "a wait polls this long before it yields the CPU (0 when threads outnumber cores)",
     RANGE(0, 1e12)},
    {"WEFT_WAIT_YIELD_NS", NULL, "200000", "ns", CFG_U64, OFF(wait_yield_ns), NULL,
     "a wait yields this long before it sleeps on a futex", RANGE(0, 1e12)},
    {"WEFT_TIER_SELF_LAT_US", NULL, "0.2", "us", CFG_DOUBLE, OFF(tier_self_lat_us), NULL,
     "cost model: latency of a local copy unit", RANGE(0, 1e9)},
    {"WEFT_TIER_SELF_BW_GBPS", NULL, "10", "GB/s", CFG_DOUBLE, OFF(tier_self_bw_gbps), NULL,
     "cost model: bandwidth of a local copy", RANGE(1e-6, 1e9)},
    {"WEFT_TIER_PEER_LAT_US", NULL, "0.5", "us", CFG_DOUBLE, OFF(tier_peer_lat_us), NULL,
     "cost model: latency of a unit read from a peer on the same NUMA node", RANGE(0, 1e9)},
    {"WEFT_TIER_PEER_BW_GBPS", NULL, "8", "GB/s", CFG_DOUBLE, OFF(tier_peer_bw_gbps), NULL,
     "cost model: bandwidth from a peer on the same NUMA node", RANGE(1e-6, 1e9)},
    {"WEFT_TIER_REMOTE_NUMA_LAT_US", NULL, "1.0", "us", CFG_DOUBLE,
     OFF(tier_remote_numa_lat_us), NULL,
     "cost model: latency of a unit read from a peer on another NUMA node", RANGE(0, 1e9)},
    {"WEFT_TIER_REMOTE_NUMA_BW_GBPS", NULL, "5", "GB/s", CFG_DOUBLE,
     OFF(tier_remote_numa_bw_gbps), NULL,
     "cost model: bandwidth from a peer on another NUMA node", RANGE(1e-6, 1e9)},
    {"WEFT_PART_UNIT_BYTES", NULL, "256K", "bytes", CFG_BYTES, OFF(part_unit_bytes), NULL,
     "partitioner: remote slices are cut into units of this size (larger where a slice would "
     "make more than 64 units per worker)",
     RANGE(1, 0x1p40)},
    {"WEFT_PART_FANOUT", NULL, "2", "workers", CFG_INT, OFF(part_fanout), NULL,
     "partitioner: at most this many workers target one peer", RANGE(1, 65536)},
    {"WEFT_PLAN_CACHE_ENTRIES", NULL, "8", "plans", CFG_INT, OFF(plan_cache_entries), NULL,
     "partitioner: plans of this many distinct recent call shapes are kept for reuse (0: "
     "partition every call; at most 256)", RANGE(0, 256)},
    {"WEFT_CUDA_MAX_BLOCKS", NULL, "32", "blocks", CFG_INT, OFF(cuda_max_blocks), NULL,
     "CUDA: thread blocks per launch and rank (also capped so every rank on a GPU co-resides)",
     RANGE(1, 128)},
    {"WEFT_CUDA_UNIT_BYTES", NULL, "1M", "bytes", CFG_BYTES, OFF(cuda_unit_bytes), NULL,
     "CUDA: partitioner unit size (smaller so every block gets work, larger past the launch's "
     "unit capacity)",
     RANGE(1, 1ull << 40)},
    {"WEFT_CUDA_FANOUT", NULL, "0", "blocks", CFG_INT, OFF(cuda_fanout), NULL,
     "CUDA: at most this many blocks read one peer at once (0: no cap)", RANGE(0, 65536)},
    {"WEFT_CUDA_MOE_BLOCKS", NULL, "0", "blocks", CFG_INT, OFF(cuda_moe_blocks), NULL,
     "CUDA: thread blocks of the MoE gather and combine kernels, which never wait for a peer "
     "(0: two per SM of this rank's share of the GPU)", RANGE(0, 65536)},
    {"WEFT_CUDA_COPY_ENGINE", NULL, "auto", "", CFG_ENUM, OFF(cuda_copy_engine), switch_names,
     "CUDA: pure copies (all-gather, all-to-all(v), broadcast, the second step of a two-shot "
     "all-reduce) on the copy engines, holding no SM: 0 never, 1 always, auto when the "
     "communicator spans GPUs and a rank copies at least WEFT_CUDA_COPY_ENGINE_BYTES", NO_RANGE},
    {"WEFT_CUDA_COPY_ENGINE_BYTES", NULL, "64M", "bytes", CFG_BYTES, OFF(cuda_copy_engine_bytes),
     NULL, "CUDA: the threshold of WEFT_CUDA_COPY_ENGINE=auto (bytes one rank copies in a call)",
     NO_RANGE},
    {"WEFT_CUDA_FUSED_COPY_BYTES", NULL, "1M", "bytes", CFG_BYTES, OFF(cuda_fused_copy_bytes),
     NULL,
     "CUDA: an operation's local copy (in-place input, staging) up to this size runs inside its "
     "kernel; larger ones, and all with WEFT_CUDA_COPY_ENGINE=1, on a copy engine", NO_RANGE},
    {"WEFT_CUDA_PUSH_BYTES", NULL, "auto", "bytes", CFG_BYTES, OFF(cuda_push_bytes), NULL,
     "CUDA: collectives whose payload per pair of ranks is at most this size push it to the "
     "peers as flagged 8-byte words (one one-way trip, no staging); each rank's control block "
     "grows by 5 x ranks x this; the ranks use their smallest value (auto: 64K, 512K for two "
     "ranks on two GPUs; 0: off, as with WEFT_CUDA_COPY_ENGINE=1; at most 16M; rounded down to "
     "a multiple of 256)",
     RANGE(0, 16777216)},
    {"WEFT_CUDA_CHUNK_BYTES", NULL, "64M", "bytes", CFG_BYTES, OFF(cuda_chunk_bytes), NULL,
     "CUDA: device memory is registered in chunks of at least this size (doubling up to 1G; 0: "
     "every allocation is a chunk of its own)",
     NO_RANGE},
    {"WEFT_SEQ_START", NULL, "0", "", CFG_BYTES, OFF(seq_start), NULL,
     "For tests: every communicator's operation numbers (the host handshake's, and on CUDA the "
     "device counter) start at this number, to reach 2^31, 2^32 and the 32-bit wrap of the push "
     "path's words without running that many operations; the same on every rank; at most 2^62, "
     "so the numbers, which a wait compares as 64-bit counts that never wrap, stay far from 2^64",
     RANGE(0, 0x1p62)},
    {"WEFT_RUN_GRACE_S", NULL, "30", "s", CFG_DOUBLE, OFF(run_grace_s), NULL,
     "weftrun: after a rank fails, how long the others get to exit before they are killed",
     RANGE(0, 1e7)},
};
/* clang-format on */

#define NROWS (sizeof rows / sizeof rows[0])

static weft_env_t env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
/* The C locale numbers are read and written in (file comment); (locale_t)0 if newlocale failed
 * (c_locale_err: its errno), and then the program's locale is used, as parse_all warns. Set
 * under c_locale_once. */
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;
static int c_locale_err;

static void make_c_locale(void)
{
    /* glibc and musl return their static C locale here, without allocating. Should it fail all
     * the same, decimals go through the program's locale, as they did before this object: with
     * a decimal comma "0.25" is then malformed and the decimal defaults ("0.2") read as 0. */
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    c_locale_err = c_locale ? 0 : errno;
}

/* The C locale object, or (locale_t)0. */
static locale_t c_numbers(void)
{
    pthread_once(&c_locale_once, make_c_locale);
    return c_locale;
}

/* Whether a CFG_BYTES row takes "auto" (WEFT_CONFIG_AUTO): those whose default it is. */
static int takes_auto(const cfg_row_t *row)
{
    return row->type == CFG_BYTES && strcmp(row->def, "auto") == 0;
}

enum { PARSE_OK = 0, PARSE_MALFORMED = -1, PARSE_OUT_OF_RANGE = -2 };

static int in_range(const cfg_row_t *row, double v)
{
    return !(row->lo < row->hi) || (v >= row->lo && v <= row->hi);
}

/* in_range for an unsigned count, compared exactly: as a double, 2^62 + 1 would round to 2^62.
 * The bounds of such rows are whole numbers in [0, 2^63], which convert exactly. */
static int in_range_u64(const cfg_row_t *row, uint64_t v)
{
    return !(row->lo < row->hi) || (v >= (uint64_t)row->lo && v <= (uint64_t)row->hi);
}

/* Parse text into the row's field: PARSE_OK, or an error with the field untouched. */
static int parse_row(const cfg_row_t *row, const char *text)
{
    void *field = (char *)&env + row->offset;
    char *end;
    switch (row->type) {
    case CFG_INT: {
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX)
            return PARSE_MALFORMED;
        if (!in_range(row, (double)v))
            return PARSE_OUT_OF_RANGE;
        *(int *)field = (int)v;
        return PARSE_OK;
    }
    case CFG_DOUBLE: {
        errno = 0;
        locale_t c = c_numbers();
        double v = c ? strtod_l(text, &end, c) : strtod(text, &end);
        if (end == text || *end != '\0' || errno != 0 || !isfinite(v) || v < 0)
            return PARSE_MALFORMED;
        if (!in_range(row, v))
            return PARSE_OUT_OF_RANGE;
        *(double *)field = v;
        return PARSE_OK;
    }
    case CFG_U64: {
        /* strtoull would take a '-' and negate; only digits pass (parse_all trimmed blanks) */
        if (*text < '0' || *text > '9')
            return PARSE_MALFORMED;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end != '\0' || errno != 0)
            return PARSE_MALFORMED;
        if (!in_range_u64(row, v))
            return PARSE_OUT_OF_RANGE;
        *(uint64_t *)field = v;
        return PARSE_OK;
    }
    case CFG_BYTES: {
        if (takes_auto(row) && strcasecmp(text, "auto") == 0) {
            *(uint64_t *)field = WEFT_CONFIG_AUTO;
            return PARSE_OK;
        }
        uint64_t v;
        if (weft_parse_bytes(text, &v) != 0)
            return PARSE_MALFORMED;
        if (!in_range_u64(row, v))
            return PARSE_OUT_OF_RANGE;
        *(uint64_t *)field = v;
        return PARSE_OK;
    }
    case CFG_STRING:
        if (strlen(text) >= WEFT_CONFIG_STR_BYTES)
            return PARSE_MALFORMED;
        strcpy((char *)field, text);
        return PARSE_OK;
    case CFG_ENUM:
        for (int i = 0; row->choices[i]; i++) {
            if (strcasecmp(text, row->choices[i]) == 0) {
                *(int *)field = i;
                return PARSE_OK;
            }
        }
        return PARSE_MALFORMED;
    }
    return PARSE_MALFORMED;
}

#define BLANKS " \t\r\n"

/* Whether an environment value counts as set: present and more than blanks. */
static int has_value(const char *v)
{
    return v && v[strspn(v, BLANKS)] != '\0';
}

/* snprintf in the C locale (file comment): the calling thread's locale is restored before it
 * returns. */
__attribute__((format(printf, 3, 4))) static void format_c(char *buf, size_t len, const char *fmt,
                                                           ...)
{
    locale_t c = c_numbers();
    locale_t prev = c ? uselocale(c) : (locale_t)0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (prev)
        uselocale(prev);
}

/* A bound of the row's range, as its values are written: counts in full (2^62 has 19 digits,
 * past what %.15g writes exactly), other numbers with 15 significant digits. */
static void format_bound(const cfg_row_t *row, double v, char *buf, size_t len)
{
    if (row->type == CFG_DOUBLE)
        format_c(buf, len, "%.15g", v);
    else
        format_c(buf, len, "%.0f", v);
}

/* Whether name is set to a non-empty value. */
static int is_set(const char *name)
{
    return has_value(getenv(name));
}

/* text without the blanks around it (a value pasted from an env file keeps a trailing one), in
 * buf; text itself when it does not fit, and then fails to parse as it would have. */
static const char *trimmed(const char *text, char *buf, size_t cap)
{
    text += strspn(text, BLANKS);
    size_t len = strlen(text);
    while (len > 0 && strchr(BLANKS, text[len - 1]) != NULL)
        len--;
    if (len >= cap)
        return text;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return buf;
}

/* Whether the row's value must never be shown (weft_config_print, warnings). */
static int row_is_secret(const cfg_row_t *r)
{
    return strcmp(r->name, "WEFT_JOB_SECRET") == 0;
}

/* Where a row's value came from. Its variable and then its fallback are tried in turn, each only
 * when set (more than blanks), until one parses and is in range; the default holds when none
 * does. A fallback is not read once the variable itself was taken. */
typedef struct row_source {
    const char *text[2]; /* the values tried: the variable's, then the fallback's; NULL: not */
    int parsed[2];       /* PARSE_OK or why text[k] was refused (for each text[k] tried) */
    int taken;           /* k of the value in force, or -1: the default */
} row_source_t;

/* The variable row_source_t's index k stands for. */
static const char *source_var(const cfg_row_t *row, int k)
{
    return k == 0 ? row->name : row->fallback;
}

/* Parse the row from the environment (row_source_t) into its field, recording how in src. */
static void parse_env(const cfg_row_t *row, row_source_t *src)
{
    src->taken = -1;
    for (int k = 0; k < 2; k++) {
        const char *var = source_var(row, k);
        const char *v = var && src->taken < 0 ? getenv(var) : NULL;
        src->text[k] = has_value(v) ? v : NULL;
        src->parsed[k] = PARSE_OK;
        if (!src->text[k])
            continue;
        char buf[512];
        src->parsed[k] = parse_row(row, trimmed(src->text[k], buf, sizeof buf));
        if (src->parsed[k] == PARSE_OK)
            src->taken = k;
    }
}

/* The warnings about the values of a row the environment gave and the parse refused, each
 * naming its variable and what is in force instead. */
static void warn_row(const cfg_row_t *row, const row_source_t *src)
{
    int secret = row_is_secret(row);
    char using[64 + WEFT_CONFIG_STR_BYTES]; /* a taken value fits in the field */
    if (src->taken < 0)
        snprintf(using, sizeof using, "the default \"%s\"", row->def);
    else if (secret)
        snprintf(using, sizeof using, "%s (not shown)", source_var(row, src->taken));
    else
        snprintf(using, sizeof using, "%s=\"%s\"", source_var(row, src->taken),
                 src->text[src->taken]);
    for (int k = 0; k < 2; k++) {
        const char *var = source_var(row, k), *v = src->text[k];
        if (!v || src->parsed[k] == PARSE_OK)
            continue;
        if (src->parsed[k] == PARSE_MALFORMED && secret)
            fprintf(stderr, "weft WARN: %s (%zu bytes, not shown) is malformed; using %s\n", var,
                    strlen(v), using);
        else if (src->parsed[k] == PARSE_MALFORMED)
            fprintf(stderr, "weft WARN: %s=\"%s\" is malformed; using %s\n", var, v, using);
        else {
            char lo[32], hi[32];
            format_bound(row, row->lo, lo, sizeof lo);
            format_bound(row, row->hi, hi, sizeof hi);
            fprintf(stderr, "weft WARN: %s=\"%s\" is outside [%s, %s]; using %s\n", var, v, lo, hi,
                    using);
        }
    }
}

/* The index of the row named name (which exists). */
static size_t row_index(const char *name)
{
    size_t i = 0;
    while (strcmp(rows[i].name, name) != 0)
        i++;
    return i;
}

static void parse_all(void)
{
    row_source_t src[NROWS];
    for (size_t i = 0; i < NROWS; i++)
        (void)parse_row(&rows[i], rows[i].def); /* defaults are valid by construction */
    for (size_t i = 0; i < NROWS; i++)
        parse_env(&rows[i], &src[i]);
    /* Said once every row is parsed, so that WEFT_LOG_LEVEL (a row too) silences them. */
    int warn = env.log_level >= WEFT_LOG_WARN;
    if (!c_numbers() && warn)
        fprintf(stderr,
                "weft WARN: newlocale(\"C\") failed (%s): decimal values are read and written in "
                "the program's locale\n",
                strerror(c_locale_err));
    for (size_t i = 0; i < NROWS && warn; i++)
        warn_row(&rows[i], &src[i]);
    /* torchrun (it sets TORCHELASTIC_RUN_ID) keeps its own store listening on MASTER_PORT for
     * the whole job: weft's store takes the next port, the same on every rank. A
     * WEFT_MASTER_PORT that was refused counts as unset: the port is then MASTER_PORT's + 1 (the
     * default's + 1 when MASTER_PORT was refused too). */
    const row_source_t *port = &src[row_index("WEFT_MASTER_PORT")];
    if (port->taken != 0 && is_set("MASTER_PORT") && is_set("TORCHELASTIC_RUN_ID")) {
        if (env.master_port < 65535)
            env.master_port++;
        else if (warn)
            fprintf(stderr, "weft WARN: MASTER_PORT=65535 under torchrun: weft's store cannot "
                            "take the next port and meets torchrun's; set WEFT_MASTER_PORT\n");
    }
}

const weft_env_t *weft_config_get(void)
{
    pthread_once(&env_once, parse_all);
    return &env;
}

/* Format the row's value in force into buf. */
static void format_value(const cfg_row_t *row, char *buf, size_t len)
{
    const void *field = (const char *)weft_config_get() + row->offset;
    switch (row->type) {
    case CFG_INT:
        snprintf(buf, len, "%d", *(const int *)field);
        break;
    case CFG_DOUBLE:
        format_c(buf, len, "%g", *(const double *)field);
        break;
    case CFG_U64:
    case CFG_BYTES:
        if (takes_auto(row) && *(const uint64_t *)field == WEFT_CONFIG_AUTO)
            snprintf(buf, len, "auto");
        else
            snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        break;
    case CFG_STRING:
        snprintf(buf, len, "%s", (const char *)field);
        break;
    case CFG_ENUM:
        snprintf(buf, len, "%s", row->choices[*(const int *)field]);
        break;
    }
}

/* " (range: lo to hi)" for a bounded row, after its help text. */
static void print_range(FILE *out, const cfg_row_t *row)
{
    if (row->lo < row->hi) {
        char lo[32], hi[32];
        format_bound(row, row->lo, lo, sizeof lo);
        format_bound(row, row->hi, hi, sizeof hi);
        fprintf(out, " (range: %s to %s)", lo, hi);
    }
}

void weft_config_print(FILE *out)
{
    fprintf(out, "%-30s %-12s %-10s %-8s %s\n", "VARIABLE", "VALUE", "DEFAULT", "UNIT", "HELP");
    for (size_t i = 0; i < NROWS; i++) {
        char value[WEFT_CONFIG_STR_BYTES];
        format_value(&rows[i], value, sizeof value);
        if (row_is_secret(&rows[i]) && value[0])
            snprintf(value, sizeof value, "(set)");
        fprintf(out, "%-30s %-12s %-10s %-8s %s", rows[i].name, value, rows[i].def, rows[i].unit,
                rows[i].help);
        print_range(out, &rows[i]);
        if (rows[i].fallback)
            fprintf(out, " (also read from %s)", rows[i].fallback);
        fputc('\n', out);
    }
}

void weft_config_print_markdown(FILE *out)
{
    fprintf(out, "# weft configuration\n\n"
                 "Generated by `weft-info -c --markdown`; every variable is read once, at the "
                 "first weft call of the process. Blanks around a value are ignored, and a value "
                 "of blanks only counts as unset. A value that is malformed or outside the "
                 "variable's range is not taken, with a warning on stderr (unless "
                 "`WEFT_LOG_LEVEL` is below `warn`) that names what is used instead: the variable "
                 "it is also read from, when that is set to a valid value, else the default. "
                 "Numbers are written as in the C locale (`0.5`), whatever the locale of the "
                 "program.\n\n"
                 "| variable | default | unit | meaning |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < NROWS; i++) {
        fprintf(out, "| `%s` | `%s` | %s | %s", rows[i].name, rows[i].def, rows[i].unit,
                rows[i].help);
        print_range(out, &rows[i]);
        if (rows[i].fallback)
            fprintf(out, " (also read from `%s`)", rows[i].fallback);
        fprintf(out, " |\n");
    }
}
