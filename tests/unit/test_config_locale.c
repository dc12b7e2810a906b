/*
 * test_config_locale.c - decimal values are read and written the same whatever locale the
 * program that embeds weft chose. Under de_DE.UTF-8 (decimal comma), selected with setlocale
 * before weft's first call: "0.25" and "12.5" are taken exactly and without a warning, the
 * decimal defaults ("0.5", "1.0") hold, "0,75" is malformed (as in the C locale; one warning, about
 * it alone), weft_config_print writes "0.25" and the range "0.001 to 10000000" (and so does
 * weft_config_print_markdown, called first, before anything else read the configuration), and
 * the program's own locale is still in force afterwards ("%g" of 0.5 is "0,5").
 *
 * de_DE.UTF-8 is the system's when installed; otherwise the test builds it with localedef into a
 * temporary directory and points LOCPATH there (about a second). Where neither works (localedef
 * missing, or no locale sources: Debian's `locales` package) the test prints a SKIP line with the
 * reason and exits 77. The configuration is read once per process, so this case has a process
 * of its own.
 */
#include <ftw.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/config.h"

#define LOCALE_NAME "de_DE.UTF-8"
#define SKIP_EXIT 77

static char tmpdir[256]; /* the localedef output, removed at exit; "" when none was made */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmpdir(void)
{
    if (tmpdir[0])
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Select LOCALE_NAME for the whole process, building it if the system lacks it. Returns 0, or -1
 * with the reason in why. */
static int select_locale(char *why, size_t len)
{
    if (setlocale(LC_ALL, LOCALE_NAME))
        return 0;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/weft_locale.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        snprintf(why, len, "%s is not installed and mkdtemp(%s) failed", LOCALE_NAME, tmpdir);
        tmpdir[0] = '\0';
        return -1;
    }
    char cmd[512], out[512] = "";
    snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/%s 2>&1", tmpdir, LOCALE_NAME);
    FILE *p = popen(cmd, "r");
    if (p) {
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0'; /* its first line says why it failed */
    }
    int status = p ? pclose(p) : -1;
    int rc = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    /* localedef exits 1 after mere warnings with the locale written: setlocale decides. */
    setenv("LOCPATH", tmpdir, 1);
    if (setlocale(LC_ALL, LOCALE_NAME))
        return 0;
    snprintf(why, len,
             "%s is not installed and `localedef -i de_DE -f UTF-8` could not build it (exit "
             "status %d: %s)",
             LOCALE_NAME, rc, out[0] ? out : "no output");
    return -1;
}

/* The warnings weft_config_get prints on stderr, read back from a file standing in for it. */
static const weft_env_t *config_get_capturing(char *warnings, size_t len)
{
    warnings[0] = '\0';
    FILE *cap = tmpfile();
    int saved = dup(2);
    fflush(stderr);
    if (!cap || saved < 0 || dup2(fileno(cap), 2) < 0) {
        CHECK(0, "cannot capture stderr");
        return weft_config_get();
    }
    const weft_env_t *env = weft_config_get();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(cap);
    size_t got = fread(warnings, 1, len - 1, cap);
    warnings[got] = '\0';
    fclose(cap);
    fputs(warnings, stderr); /* as they were, for the log */
    return env;
}

/* The line of weft_config_print about name. */
static void printed_line(const char *name, char *line, size_t len)
{
    static char buf[32768];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    line[0] = '\0';
    if (!f) {
        CHECK(0, "fmemopen failed");
        return;
    }
    weft_config_print(f);
    fclose(f);
    buf[sizeof buf - 1] = '\0';
    char want[64];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr(buf, want);
    if (!at)
        return;
    at++;
    size_t n = strcspn(at, "\n");
    snprintf(line, len, "%.*s", (int)n, at);
}

int main(void)
{
    char why[768];
    if (select_locale(why, sizeof why) != 0) {
        remove_tmpdir();
        printf("SKIP: test_config_locale: %s\n", why);
        return SKIP_EXIT;
    }
    const char *point = localeconv()->decimal_point;
    if (strcmp(point, ",") != 0) {
        remove_tmpdir();
        printf("SKIP: test_config_locale: %s has the decimal point \"%s\", not a comma\n",
               LOCALE_NAME, point);
        return SKIP_EXIT;
    }

    /* The Markdown page before anything else: it reads no value, only the table. */
    static char page[65536];
    FILE *f = fmemopen(page, sizeof page, "w");
    if (f) {
        weft_config_print_markdown(f);
        fclose(f);
        page[sizeof page - 1] = '\0';
    }
    CHECK(f && strstr(page, "(range: 0.001 to 10000000)"),
          "weft_config_print_markdown, called first, has no \"(range: 0.001 to 10000000)\" for "
          "WEFT_TIMEOUT_S");

    setenv("WEFT_LOG_LEVEL", "warn", 1); /* the warnings must be printed, whatever ctest inherits */
    setenv("WEFT_TIER_SELF_LAT_US", "0.25", 1);
    setenv("WEFT_TIMEOUT_S", "12.5", 1);
    setenv("WEFT_TIER_PEER_BW_GBPS", "0,75", 1); /* the locale's form: malformed, default 8 */
    unsetenv("WEFT_TIER_PEER_LAT_US");           /* default "0.5" */
    unsetenv("WEFT_TIER_REMOTE_NUMA_LAT_US");    /* default "1.0" */
    char warnings[16384];
    const weft_env_t *env = config_get_capturing(warnings, sizeof warnings);

    CHECK(env->tier_self_lat_us == 0.25, "tier_self_lat_us %g, expected 0.25 (\"0.25\")",
          env->tier_self_lat_us);
    CHECK(env->timeout_s == 12.5, "timeout_s %g, expected 12.5 (\"12.5\")", env->timeout_s);
    CHECK(env->tier_peer_bw_gbps == 8.0, "tier_peer_bw_gbps %g, expected the default 8 (\"0,75\")",
          env->tier_peer_bw_gbps);
    CHECK(env->tier_peer_lat_us == 0.5, "tier_peer_lat_us %g, expected the default 0.5",
          env->tier_peer_lat_us);
    CHECK(env->tier_remote_numa_lat_us == 1.0,
          "tier_remote_numa_lat_us %g, expected the default 1.0", env->tier_remote_numa_lat_us);
    const char *nl = strchr(warnings, '\n');
    CHECK(strstr(warnings, "WEFT_TIER_PEER_BW_GBPS=\"0,75\" is malformed") == warnings + 11 && nl &&
              nl[1] == '\0',
          "expected exactly one warning, that WEFT_TIER_PEER_BW_GBPS=\"0,75\" is malformed; got "
          "\"%s\"",
          warnings);

    char line[1024];
    printed_line("WEFT_TIER_SELF_LAT_US", line, sizeof line);
    char want[128];
    snprintf(want, sizeof want, "%-30s %-12s ", "WEFT_TIER_SELF_LAT_US", "0.25");
    CHECK(strncmp(line, want, strlen(want)) == 0, "weft_config_print: \"%s\", expected \"%s...\"",
          line, want);
    printed_line("WEFT_TIMEOUT_S", line, sizeof line);
    CHECK(strstr(line, "(range: 0.001 to 10000000)") && strstr(line, " 12.5 "),
          "weft_config_print: \"%s\", expected the value 12.5 and \"(range: 0.001 to 10000000)\"",
          line);

    /* weft's formatting left the program's locale as it was. */
    const char *numeric = setlocale(LC_NUMERIC, NULL);
    CHECK(numeric && strcmp(numeric, LOCALE_NAME) == 0, "LC_NUMERIC is \"%s\" afterwards",
          numeric ? numeric : "(null)");
    char half[16];
    snprintf(half, sizeof half, "%g", 0.5);
    CHECK(strcmp(half, "0,5") == 0, "the program's \"%%g\" of 0.5 is \"%s\" afterwards", half);

    remove_tmpdir();
    if (failures) {
        printf("test_config_locale: %d checks failed\n", failures);
        return 1;
    }
    printf("test_config_locale: ok (%s%s)\n", LOCALE_NAME,
           tmpdir[0] ? ", built with localedef" : ", installed");
    return 0;
}
