/*
 * bench_opts.c - weft-bench's tables and command line (see bench_opts.h).
 *
 * Thread safety: the tables are constant; parsing runs on the main thread.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "bench_util.h"
#include "util/parse_bytes.h"

const coll_info_t colls[NUM_COLLS] = {
    [COLL_ALL_REDUCE] = {"all_reduce", true, false, true, false, 2},
    [COLL_ALL_GATHER] = {"all_gather", false, false, true, true, 1},
    [COLL_REDUCE_SCATTER] = {"reduce_scatter", true, false, true, true, 1},
    [COLL_BROADCAST] = {"broadcast", false, true, true, false, 0},
    [COLL_ALL_TO_ALL] = {"all_to_all", false, false, false, true, 1},
    [COLL_ALL_TO_ALLV] = {"all_to_allv", false, false, false, true, 3},
    [COLL_BARRIER] = {"barrier", false, false, false, false, -1},
};

const char *const redop_names[WEFT_NUM_REDOPS] = {
    [WEFT_SUM] = "sum", [WEFT_PROD] = "prod", [WEFT_MAX] = "max",
    [WEFT_MIN] = "min", [WEFT_AVG] = "avg",
};
const char *const registration_names[3] = {
    [WEFT_REGISTRATION_ROA] = "roa",
    [WEFT_REGISTRATION_JIT] = "jit",
    [WEFT_REGISTRATION_STAGED] = "staged",
};
const char *const backend_names[3] = {
    [WEFT_BACKEND_AUTO] = "auto", [WEFT_BACKEND_HOST] = "host", [WEFT_BACKEND_CUDA] = "cuda"};

/* ---------------------------------------------------------------------------------------------
 * Argument parsing
 * ------------------------------------------------------------------------------------------- */
void bench_usage(FILE *out)
{
    fprintf(
        out,
        "usage: weftrun -n N weft-bench [options]\n"
        "  -t, --coll NAME        all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|\n"
        "                         all_to_allv|barrier|all (default all; repeat -t for several)\n"
        "  -b, --minbytes SIZE    smallest size, e.g. 8, 1K, 64M (default 8)\n"
        "  -e, --maxbytes SIZE    largest size (default 64M)\n"
        "  -f, --stepfactor F     multiply the size by F each step, F >= 2 (default 2)\n"
        "  -o, --op NAME          sum|prod|max|min|avg (default sum)\n"
        "  -d, --datatype NAME    int8 uint8 int32 uint32 int64 uint64 half bfloat16 float\n"
        "                         double (also float16 bf16 float32 float64; default float)\n"
        "  -r, --root R           broadcast root (default 0)\n"
        "  -n, --iters N          timed calls per size (default 20)\n"
        "  -w, --warmup N         untimed calls per size first (default 5)\n"
        "  -c, --check 0|1        verify one call per size exactly (default 1)\n"
        "      --registration M   roa|jit|staged (default: WEFT_REGISTRATION)\n"
        "      --buffers B        weft (weft_malloc) | malloc (plain memory) (default weft)\n"
        "      --inplace 0|1|2    out of place, in place, or both (default 2)\n"
        "      --json FILE        append one JSON object per size and placement\n"
        "      --backend B        auto|host|cuda (default: WEFT_BACKEND, else auto)\n"
        "  -h, --help             this text\n"
        "Exit status: 0 success, 1 failure or wrong results, 2 bad arguments.\n");
}

/* A byte size (util/parse_bytes.h) into a size_t. Returns 0 on success. */
static int parse_size(const char *s, size_t *out)
{
    uint64_t v;
    if (weft_parse_bytes(s, &v) != 0 || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* Index of name in names[0..n), or -1. */
static int lookup(const char *name, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

#ifdef WEFT_BENCH_NCCL
/* Whether some collective is selected. */
static bool parse_coll_any(const bench_opts_t *opt)
{
    for (int c = 0; c < NUM_COLLS; c++)
        if (opt->coll_selected[c])
            return true;
    return false;
}
#endif

/* One -t: the first replaces the default selection (all), later ones add to it. */
static int parse_coll(const char *s, bench_opts_t *opt, bool first)
{
    bool known = strcmp(s, "all") == 0;
    for (int c = 0; c < NUM_COLLS; c++) {
        bool match = strcmp(s, "all") == 0 || strcmp(s, colls[c].name) == 0;
        known = known || match;
        opt->coll_selected[c] = match || (!first && opt->coll_selected[c]);
    }
    return known ? 0 : -1;
}

static int parse_dtype(const char *s, weft_dtype_t *out)
{
    for (int d = 0; d < WEFT_NUM_DTYPES; d++) {
        if (strcmp(s, dtypes[d].name) == 0 || strcmp(s, dtypes[d].alias) == 0) {
            *out = (weft_dtype_t)d;
            return 0;
        }
    }
    return -1;
}

int bench_parse_args(int argc, char **argv, bench_opts_t *opt)
{
    enum { OPT_REGISTRATION = 256, OPT_BUFFERS, OPT_INPLACE, OPT_JSON, OPT_BACKEND };
    static const struct option longopts[] = {
        {"coll", required_argument, NULL, 't'},
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"op", required_argument, NULL, 'o'},
        {"datatype", required_argument, NULL, 'd'},
        {"root", required_argument, NULL, 'r'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"registration", required_argument, NULL, OPT_REGISTRATION},
        {"buffers", required_argument, NULL, OPT_BUFFERS},
        {"inplace", required_argument, NULL, OPT_INPLACE},
        {"json", required_argument, NULL, OPT_JSON},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *opt = (bench_opts_t){
        .min_bytes = 8,
        .max_bytes = 64u << 20,
        .factor = 2,
        .op = WEFT_SUM,
        .dtype = WEFT_FLOAT32,
        .root = 0,
        .iters = 20,
        .warmup = 5,
        .check = true,
        .weft_buffers = true,
        .run_outofplace = true,
        .run_inplace = true,
    };
    (void)parse_coll("all", opt, true);
#ifdef WEFT_BENCH_NCCL
    opt->weft_buffers = false;
    opt->backend = WEFT_BACKEND_CUDA;
    opt->backend_set = true;
#endif

    int c, v = 0;
    bool coll_given = false;
    while ((c = getopt_long(argc, argv, "t:b:e:f:o:d:r:n:w:c:h", longopts, NULL)) != -1) {
        const char *a = optarg;
        int bad = 0;
        switch (c) {
        case 't':
            bad = parse_coll(a, opt, !coll_given);
            coll_given = true;
            break;
        case 'b':
            bad = parse_size(a, &opt->min_bytes);
            break;
        case 'e':
            bad = parse_size(a, &opt->max_bytes);
            break;
        case 'f':
            bad = bench_parse_int(a, 2, 1 << 20, &v);
            opt->factor = (size_t)v;
            break;
        case 'o':
            v = lookup(a, redop_names, WEFT_NUM_REDOPS);
            bad = v < 0;
            opt->op = (weft_redop_t)v;
            break;
        case 'd':
            bad = parse_dtype(a, &opt->dtype);
            break;
        case 'r':
            bad = bench_parse_int(a, 0, 1 << 20, &opt->root);
            break;
        case 'n':
            bad = bench_parse_int(a, 1, 1 << 24, &opt->iters);
            break;
        case 'w':
            bad = bench_parse_int(a, 0, 1 << 24, &opt->warmup);
            break;
        case 'c':
            bad = bench_parse_int(a, 0, 1, &v);
            opt->check = v == 1;
            break;
        case OPT_REGISTRATION:
            v = lookup(a, registration_names, 3);
            bad = v < 0;
            opt->registration = (weft_registration_t)v;
            opt->registration_set = true;
            break;
        case OPT_BUFFERS:
            bad = strcmp(a, "weft") != 0 && strcmp(a, "malloc") != 0;
            opt->weft_buffers = strcmp(a, "weft") == 0;
            break;
        case OPT_INPLACE:
            bad = bench_parse_int(a, 0, 2, &v);
            opt->run_outofplace = v != 1;
            opt->run_inplace = v != 0;
            break;
        case OPT_JSON:
            opt->json_path = a;
            break;
        case OPT_BACKEND:
            v = lookup(a, backend_names, 3);
            bad = v < 0;
            opt->backend = (weft_backend_t)v;
            opt->backend_set = true;
            break;
        case 'h':
            return 1;
        default:
            return -1; /* getopt printed the message */
        }
        if (bad) {
            const struct option *o = longopts;
            while (o->val != c)
                o++;
            fprintf(stderr, "weft-bench: bad value '%s' for --%s\n", a, o->name);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
#ifdef WEFT_BENCH_NCCL
    opt->coll_selected[COLL_BARRIER] = false;
    if (opt->backend != WEFT_BACKEND_CUDA) {
        fprintf(stderr, "weft-bench-nccl: NCCL runs on the CUDA backend only\n");
        return -1;
    }
    if (!parse_coll_any(opt)) {
        fprintf(stderr, "weft-bench-nccl: NCCL has no barrier to measure\n");
        return -1;
    }
    /* The checks expect weft's results: 16-bit floats summed in float32, AVG a sum then a
     * division. NCCL adds 16-bit floats in 16 bits and averages floats by scaling each input
     * first, so its exact-by-design results differ from these there. */
    bool half = opt->dtype == WEFT_FLOAT16 || opt->dtype == WEFT_BFLOAT16;
    bool floating = half || opt->dtype == WEFT_FLOAT32 || opt->dtype == WEFT_FLOAT64;
    bool rounds =
        (half && opt->op != WEFT_MAX && opt->op != WEFT_MIN) || (floating && opt->op == WEFT_AVG);
    if (opt->check && rounds &&
        (opt->coll_selected[COLL_ALL_REDUCE] || opt->coll_selected[COLL_REDUCE_SCATTER])) {
        fprintf(stderr,
                "weft-bench-nccl: NCCL's %s %s rounds differently from the exact result "
                "weft-bench checks; time it with -c 0\n",
                dtypes[opt->dtype].name, redop_names[opt->op]);
        return -1;
    }
#endif
    bool measurable = false; /* some selected collective in some selected placement */
    for (int k = 0; k < NUM_COLLS; k++)
        measurable =
            measurable || (opt->coll_selected[k] &&
                           (opt->run_outofplace || (opt->run_inplace && colls[k].has_inplace)));
    if (!measurable) {
        fprintf(stderr, "weft-bench: --inplace 1 and none of the selected collectives has an "
                        "in-place form: nothing to measure\n");
        return -1;
    }
    if (opt->min_bytes == 0 && opt->max_bytes > 0) { /* 0 times the factor stays 0 */
        fprintf(stderr, "weft-bench: -b 0 sweeps nothing past 0; give -b a positive size, or "
                        "-b 0 -e 0 for the empty call alone\n");
        return -1;
    }
    if (opt->min_bytes > opt->max_bytes) {
        fprintf(stderr, "weft-bench: -b %zu is larger than -e %zu\n", opt->min_bytes,
                opt->max_bytes);
        return -1;
    }
    return 0;
}
