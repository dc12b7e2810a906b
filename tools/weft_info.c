/*
 * weft_info.c - weft-info: what this build of weft is and how it is configured.
 *
 *   weft-info                   version, backends built in, the defaults in force
 *   weft-info -c                the configuration table: every environment variable with the
 *                               value in force, its default, unit and meaning
 *   weft-info -c --markdown     the same table as the Markdown page docs/config.md
 *
 * Design: a thin front end over the configuration table (src/util/config.h), which owns every
 * variable; this file never reads the environment itself. It creates no communicator.
 *
 * Thread safety: single-threaded.
 *
 * Exit status: 0 on success, 2 on an argument error.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "util/config.h"
#include "weft.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: weft-info [-c [--markdown]]\n"
                 "  (none)           version and backends\n"
                 "  -c, --config     the configuration table (environment variables)\n"
                 "      --markdown   with -c: print it as Markdown (docs/config.md)\n"
                 "  -h, --help       this text\n");
}

static void print_version(void)
{
    static const char *const backend_names[] = {
        [WEFT_BACKEND_AUTO] = "auto", [WEFT_BACKEND_HOST] = "host", [WEFT_BACKEND_CUDA] = "cuda"};
    const weft_env_t *env = weft_config_get();
    printf("weft %d.%d.%d\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
    printf("backends: host (processes on one host, shared memory)");
#ifdef WEFT_HAVE_CUDA
    printf(", cuda (GPUs of one node)\n");
#else
    printf("; cuda not built in\n");
#endif
    printf("backend selected by WEFT_BACKEND: %s\n", backend_names[env->backend]);
    printf("registration selected by WEFT_REGISTRATION: %s\n",
           env->registration == WEFT_REGISTRATION_ROA   ? "roa"
           : env->registration == WEFT_REGISTRATION_JIT ? "jit"
                                                        : "staged");
    printf("host workers per rank (WEFT_HOST_WORKERS): %d\n", env->host_workers);
    printf("`weft-info -c` lists every configuration variable.\n");
}

int main(int argc, char **argv)
{
    enum { OPT_MARKDOWN = 256 };
    static const struct option longopts[] = {
        {"config", no_argument, NULL, 'c'},
        {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool config = false, markdown = false;
    int c;
    while ((c = getopt_long(argc, argv, "ch", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = true;
            break;
        case OPT_MARKDOWN:
            markdown = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || (markdown && !config)) {
        usage(stderr);
        return 2;
    }
    if (!config)
        print_version();
    else if (markdown)
        weft_config_print_markdown(stdout);
    else
        weft_config_print(stdout);
    return 0;
}
