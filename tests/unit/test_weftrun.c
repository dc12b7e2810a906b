/*
 * test_weftrun.c - the launcher tools/weftrun.c, run as a program.
 *
 * The path of the weftrun binary comes from the environment variable WEFT_WEFTRUN, which the
 * test registration sets to $<TARGET_FILE:weftrun>. Ranks are small sh scripts that write their
 * pid (and environment) into a temporary directory; the test checks exit statuses, timing
 * against the grace period, the environment of every rank, and that no rank survives: this
 * process is a child subreaper, so a rank weftrun failed to reap would be re-parented here and
 * found alive by kill(pid, 0). Every weftrun run has a watchdog; anything still alive at the
 * end is killed and reported.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "check.h"

#define RUN_LIMIT_S 8.0
#define MAX_RANKS 8

static const char *weftrun;
static int skipped; /* cases whose checks could not run here (each printed a SKIP line) */
static char topdir[] = "/tmp/launcher-test.XXXXXX";

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

static double since_s(uint64_t t0)
{
    return (double)(weft_now_ns() - t0) / 1e9;
}

/* Start weftrun with the given arguments (NULL-terminated, without argv[0]), its stderr into
 * the file err_path unless that is NULL. */
static pid_t spawn_to(const char *const *args, const char *err_path)
{
    const char *argv[32] = {weftrun};
    int n = 1;
    while (args[n - 1] != NULL && n < 31) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (err_path != NULL) {
            int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
                _exit(98);
        }
        execv(weftrun, (char *const *)argv);
        fprintf(stderr, "test_weftrun: cannot execute %s: %s\n", weftrun, strerror(errno));
        _exit(99);
    }
    CHECK(pid > 0, "fork: %s", strerror(errno));
    return pid;
}

static pid_t spawn(const char *const *args)
{
    return spawn_to(args, NULL);
}

/* Wait for pid with the watchdog; returns its wait status, or -1 if it had to be killed. */
static int wait_for(pid_t pid)
{
    uint64_t deadline = weft_deadline_after_s(RUN_LIMIT_S);
    for (;;) {
        int st;
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid)
            return st;
        if (got < 0) {
            CHECK(0, "waitpid: %s", strerror(errno));
            return -1;
        }
        if (weft_now_ns() > deadline) {
            CHECK(0, "weftrun still running after %.0f s; killing it", RUN_LIMIT_S);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_s(0.002);
    }
}

/* Run weftrun to completion; returns its exit code (128+signal if it died of one, -1 if the
 * watchdog killed it) and the elapsed time in *elapsed_out. */
static int run(const char *const *args, double *elapsed_out)
{
    uint64_t t0 = weft_now_ns();
    pid_t pid = spawn(args);
    int st = pid > 0 ? wait_for(pid) : -1;
    if (elapsed_out != NULL)
        *elapsed_out = since_s(t0);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A fresh directory under topdir for one case. */
static void case_dir(char *dir, size_t cap, const char *name)
{
    snprintf(dir, cap, "%s/%s", topdir, name);
    CHECK(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
}

/* The shell snippet that records a rank's pid in dir/pid.<rank>. echo is a builtin (no child
 * process) and writes the line with one write(), so a reader sees an empty file or the pid. */
static void pid_snippet(char *buf, size_t cap, const char *dir)
{
    snprintf(buf, cap, "echo $$ > %s/pid.$WEFT_RANK", dir);
}

/* Read dir/pid.<r> for r < n into pids (0 where missing). Returns how many were found. */
static int read_pids(const char *dir, int n, pid_t *pids)
{
    int found = 0;
    for (int r = 0; r < n; r++) {
        char path[256];
        snprintf(path, sizeof path, "%s/pid.%d", dir, r);
        pids[r] = 0;
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        int v;
        if (fscanf(f, "%d", &v) == 1 && v > 0) {
            pids[r] = (pid_t)v;
            found++;
        }
        fclose(f);
    }
    return found;
}

/* Wait (up to 3 s) until all n ranks have written their pid. */
static int wait_pids(const char *dir, int n, pid_t *pids)
{
    uint64_t deadline = weft_deadline_after_s(3.0);
    while (read_pids(dir, n, pids) < n && weft_now_ns() < deadline)
        sleep_s(0.005);
    return read_pids(dir, n, pids);
}

/* Check that every recorded rank is gone; kill and reap any survivor (re-parented to us). */
static void check_gone(const char *what, const pid_t *pids, int n)
{
    for (int r = 0; r < n; r++) {
        if (pids[r] <= 0)
            continue;
        if (kill(pids[r], 0) == 0 || errno != ESRCH) {
            CHECK(0, "%s: rank %d (pid %d) is still alive after weftrun exited", what, r,
                  (int)pids[r]);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    }
}

static void test_all_succeed(void)
{
    double dt;
    const char *args[] = {"-n", "4", "sh", "-c", "exit 0", NULL};
    int rc = run(args, &dt);
    CHECK(rc == 0, "-n 4 sh -c 'exit 0': exit %d", rc);
    const char *args1[] = {"-n", "1", "--", "sh", "-c", "exit 5", NULL};
    rc = run(args1, &dt);
    CHECK(rc == 5, "-n 1 -- sh -c 'exit 5': exit %d", rc);
}

/* Rank 1 exits 3 while the others sleep 30 s: weftrun exits 3 after the 1 s grace and kills
 * the sleepers. */
static void test_failure_grace(void)
{
    char dir[128], pid_cmd[512], script[1024];
    case_dir(dir, sizeof dir, "grace");
    pid_snippet(pid_cmd, sizeof pid_cmd, dir);
    snprintf(script, sizeof script, "%s; if [ \"$WEFT_RANK\" = 1 ]; then exit 3; fi; exec sleep 30",
             pid_cmd);
    const char *args[] = {"--grace", "1", "-n", "3", "sh", "-c", script, NULL};
    double dt;
    int rc = run(args, &dt);
    CHECK(rc == 3, "rank 1 exits 3: weftrun exit %d", rc);
    CHECK(dt > 0.9 && dt < 4.0, "weftrun took %.3f s with a grace of 1 s", dt);
    pid_t pids[3];
    CHECK(read_pids(dir, 3, pids) == 3, "not every rank wrote its pid");
    check_gone("grace", pids, 3);
}

/* A rank killed by SIGKILL: exit 137; the sleeping rank is killed after the grace. */
static void test_rank_sigkill(void)
{
    const char *script = "if [ \"$WEFT_RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 30";
    const char *args[] = {"--grace=0.5", "-n", "2", "sh", "-c", script, NULL};
    double dt;
    int rc = run(args, &dt);
    CHECK(rc == 137, "rank 0 killed by SIGKILL: weftrun exit %d", rc);
    CHECK(dt > 0.4 && dt < 4.0, "weftrun took %.3f s with a grace of 0.5 s", dt);
}

/* Exit code 77 (a skipped test) is the job's only when every rank skipped: a rank that fails,
 * dies of a signal or is killed after the grace period wins over another's skip, and a partial
 * skip (the others exit 0) is a failure (1). The skipping rank exits first. */
static void test_skip(void)
{
    static const struct {
        const char *name;
        const char *other; /* what rank 1 does */
        int want;
    } cases[] = {
        {"every rank skips", "exit 77", 77},
        {"rank 1 fails", "sleep 0.2; exit 3", 3},
        {"rank 1 crashes", "sleep 0.2; kill -SEGV $$", 128 + SIGSEGV},
        {"rank 1 passes", "sleep 0.2; exit 0", 1},
        {"rank 1 hangs", "exec sleep 30", 128 + SIGKILL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char script[512];
        snprintf(script, sizeof script, "if [ \"$WEFT_RANK\" = 0 ]; then exit 77; fi; %s",
                 cases[i].other);
        const char *args[] = {"--grace", "0.5", "-n", "2", "sh", "-c", script, NULL};
        double dt;
        int rc = run(args, &dt);
        CHECK(rc == cases[i].want, "skip: rank 0 exits 77, %s (%s): weftrun exit %d, expected %d",
              cases[i].name, cases[i].other, rc, cases[i].want);
        CHECK(dt < 4.0, "skip: %s: weftrun took %.3f s", cases[i].name, dt);
    }
}

/* Whether the file at path contains text. */
static int file_has(const char *path, const char *text)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* A process that SIGKILL does not end (one in uninterruptible sleep in a driver) must not keep
 * weftrun waiting: this test traces one process of the job (PTRACE_SEIZE) and does not wait for
 * it, so once killed it stays a zombie that only its tracer sees, and weftrun cannot reap it.
 * rank: rank 1 is traced and killed after the grace period that rank 0's exit 3 starts; weftrun
 * must name it (once: not again as a process left behind) and exit 3 about --kill-wait after
 * the kill. leftover: rank 0 leaves a traced background process and exits 0; weftrun must name
 * it and exit 1 about --kill-wait later. Where PTRACE_SEIZE is refused the case cannot be made:
 * it prints a SKIP line, and the summary line counts it. */
static void test_unreaped(const char *name, int rank_case)
{
    char dir[128], err[256], script[1024];
    case_dir(dir, sizeof dir, name);
    snprintf(err, sizeof err, "%s/stderr", dir);
    if (rank_case)
        snprintf(script, sizeof script,
                 "echo $$ > %s/pid.$WEFT_RANK; if [ \"$WEFT_RANK\" = 1 ]; then exec sleep 30; fi; "
                 "while [ ! -e %s/go ]; do sleep 0.02; done; exit 3",
                 dir, dir);
    else
        snprintf(script, sizeof script,
                 "sleep 30 & echo $! > %s/pid.$WEFT_RANK; "
                 "while [ ! -e %s/go ]; do sleep 0.02; done; exit 0",
                 dir, dir);
    const char *args[] = {"--grace", "0.2", "--kill-wait", "1",    "-n",
                          "2",       "sh",  "-c",          script, NULL};
    pid_t pid = spawn_to(args, err);
    if (pid <= 0)
        return;
    pid_t pids[2];
    CHECK(wait_pids(dir, 2, pids) == 2, "%s: ranks did not start", name);
    pid_t traced = pids[rank_case ? 1 : 0];
    int seized = traced > 0 && ptrace(PTRACE_SEIZE, traced, NULL, NULL) == 0;
    if (!seized) {
        /* Not the launcher's fault (a seccomp filter, a missing CAP_SYS_PTRACE, the rank already
         * traced): this case's checks cannot run, and the summary says so. */
        printf("SKIP: test_weftrun: %s: PTRACE_SEIZE of pid %d failed (%s); its checks did not "
               "run\n",
               name, (int)traced, strerror(errno));
        skipped++;
    }
    char go[256];
    snprintf(go, sizeof go, "%s/go", dir);
    FILE *f = fopen(go, "w");
    CHECK(f != NULL, "%s: create %s: %s", name, go, strerror(errno));
    if (f != NULL)
        fclose(f);
    uint64_t t0 = weft_now_ns();
    int st = wait_for(pid);
    double dt = since_s(t0);
    int rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (seized) {
        int want = rank_case ? 3 : 1;
        char text[128];
        if (rank_case)
            snprintf(text, sizeof text, "rank 1 (pid %d) is still not reaped 1 s after SIGKILL",
                     (int)traced);
        else
            snprintf(text, sizeof text, "process %d the ranks left behind is still not reaped",
                     (int)traced);
        CHECK(rc == want, "%s: weftrun exit %d, expected %d", name, rc, want);
        CHECK(dt < 5.0, "%s: weftrun took %.3f s with a kill wait of 1 s", name, dt);
        CHECK(file_has(err, text), "%s: weftrun's stderr does not say \"%s\"", name, text);
        /* A rank given up on is not killed and waited for again as a process left behind. */
        CHECK(!rank_case || !file_has(err, "left behind"),
              "%s: weftrun waited again for the rank it gave up on, as a process left behind",
              name);
    }
    /* weftrun is gone: the traced zombie is this process's child now (the subreaper). */
    if (traced > 0) {
        kill(traced, SIGKILL);
        uint64_t deadline = weft_deadline_after_s(3.0);
        while (waitpid(traced, NULL, WNOHANG) != -1 && weft_now_ns() < deadline)
            sleep_s(0.005);
    }
    unlink(err);
    unlink(go);
}

/* Split a file of lines into fields; returns the number of lines read. */
static int read_lines(const char *path, char lines[][80], int max)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int n = 0;
    while (n < max && fgets(lines[n], sizeof lines[n], f) != NULL) {
        lines[n][strcspn(lines[n], "\n")] = '\0';
        n++;
    }
    fclose(f);
    return n;
}

/* Every rank's variables are set, distinct where they should be, shared where they should be,
 * and override stale values from the caller's environment. secret_out gets the job
 * secret rank 0 saw. */
static void test_env(const char *name, char secret_out[80])
{
    enum { NR = 3, NVARS = 12 };
    static const char *const vars[NVARS] = {
        "WEFT_RANK",        "RANK",        "WEFT_LOCAL_RANK",  "LOCAL_RANK",
        "WEFT_NRANKS",      "WORLD_SIZE",  "LOCAL_WORLD_SIZE", "MASTER_ADDR",
        "WEFT_MASTER_ADDR", "MASTER_PORT", "WEFT_MASTER_PORT", "WEFT_JOB_SECRET"};
    char dir[128], script[1024];
    case_dir(dir, sizeof dir, name);
    int off = snprintf(script, sizeof script, "printf '%%s\\n'");
    for (int v = 0; v < NVARS; v++)
        off += snprintf(script + off, sizeof script - (size_t)off, " \"$%s\"", vars[v]);
    snprintf(script + off, sizeof script - (size_t)off, " > %s/env.$RANK", dir);

    /* Stale values weftrun must replace. */
    setenv("MASTER_ADDR", "10.9.9.9", 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("WEFT_MASTER_PORT", "2", 1);
    setenv("WEFT_RANK", "77", 1);
    setenv("WEFT_JOB_SECRET", "stale", 1);

    const char *args[] = {"-n", "3", "sh", "-c", script, NULL};
    int rc = run(args, NULL);
    CHECK(rc == 0, "env: weftrun exit %d", rc);
    char port0[80] = "", weft_port0[80] = "", secret0[80] = "";
    for (int r = 0; r < NR; r++) {
        char path[256], lines[NVARS][80];
        snprintf(path, sizeof path, "%s/env.%d", dir, r);
        int n = read_lines(path, lines, NVARS);
        CHECK(n == NVARS, "rank %d: %d of %d variables in %s", r, n, NVARS, path);
        if (n != NVARS)
            continue;
        char want[16];
        snprintf(want, sizeof want, "%d", r);
        for (int v = 0; v < 4; v++)
            CHECK(strcmp(lines[v], want) == 0, "rank %d: %s=%s", r, vars[v], lines[v]);
        for (int v = 4; v < 7; v++)
            CHECK(strcmp(lines[v], "3") == 0, "rank %d: %s=%s", r, vars[v], lines[v]);
        for (int v = 7; v < 9; v++)
            CHECK(strcmp(lines[v], "127.0.0.1") == 0, "rank %d: %s=%s", r, vars[v], lines[v]);
        /* Two ports: weft's store must not meet torch.distributed's (env:// reads MASTER_PORT). */
        int port = atoi(lines[9]), weft_port = atoi(lines[10]);
        CHECK(port > 2 && port <= 65535 && weft_port > 2 && weft_port <= 65535 && port != weft_port,
              "rank %d: MASTER_PORT=%s WEFT_MASTER_PORT=%s", r, lines[9], lines[10]);
        const char *sec = lines[11];
        CHECK(strlen(sec) == 32 && strspn(sec, "0123456789abcdef") == 32,
              "rank %d: WEFT_JOB_SECRET=%s", r, sec);
        if (r == 0) {
            snprintf(port0, sizeof port0, "%s", lines[9]);
            snprintf(weft_port0, sizeof weft_port0, "%s", lines[10]);
            snprintf(secret0, sizeof secret0, "%s", sec);
        } else {
            CHECK(strcmp(lines[9], port0) == 0, "rank %d: port %s, rank 0 %s", r, lines[9], port0);
            CHECK(strcmp(lines[10], weft_port0) == 0, "rank %d: weft's port %s, rank 0 %s", r,
                  lines[10], weft_port0);
            CHECK(strcmp(sec, secret0) == 0, "rank %d: secret differs from rank 0's", r);
        }
    }
    memcpy(secret_out, secret0, sizeof secret0);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("WEFT_MASTER_PORT");
    unsetenv("WEFT_RANK");
    unsetenv("WEFT_JOB_SECRET");
}

/* Start a job whose ranks record their pid then sleep, send weftrun the given signals (the
 * second after 0.2 s) and check its exit status, the time it took and that the ranks are gone. */
static void test_signal(const char *name, const char *grace, const char *prelude, int sig,
                        int twice, int want_rc, double max_s)
{
    char dir[128], pid_cmd[512], script[1024];
    case_dir(dir, sizeof dir, name);
    pid_snippet(pid_cmd, sizeof pid_cmd, dir);
    snprintf(script, sizeof script, "%s%s; exec sleep 30", prelude, pid_cmd);
    const char *args[] = {"--grace", grace, "-n", "2", "sh", "-c", script, NULL};
    pid_t pid = spawn(args);
    if (pid <= 0)
        return;
    pid_t pids[2];
    int found = wait_pids(dir, 2, pids);
    CHECK(found == 2, "%s: %d of 2 ranks started", name, found);
    uint64_t t0 = weft_now_ns();
    kill(pid, sig);
    if (twice) {
        sleep_s(0.2);
        kill(pid, sig);
    }
    int st = wait_for(pid);
    double dt = since_s(t0);
    int rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(rc == want_rc, "%s: weftrun exit %d, expected %d", name, rc, want_rc);
    CHECK(dt < max_s, "%s: weftrun took %.3f s after the signal (at most %.1f)", name, dt, max_s);
    check_gone(name, pids, 2);
}

/* Start `weftrun --grace 5 -n 2 sh -c script` as the session leader of a new pseudo-terminal
 * (its controlling terminal, weftrun's process group in the foreground). Returns weftrun's pid
 * and the terminal's master end in *master_out, or -1 (checked) with nothing left open. */
static pid_t spawn_on_pty(const char *name, const char *script, int *master_out)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 || ptsname(master) == NULL) {
        CHECK(0, "%s: no pseudo-terminal: %s", name, strerror(errno));
        if (master >= 0)
            close(master);
        return -1;
    }
    char slave_name[128];
    snprintf(slave_name, sizeof slave_name, "%s", ptsname(master));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* Session leader opening a terminal without O_NOCTTY: it becomes the controlling
         * terminal, with this process group in the foreground. */
        int slave = setsid() < 0 ? -1 : open(slave_name, O_RDWR);
        if (slave < 0 || dup2(slave, STDIN_FILENO) < 0)
            _exit(98);
        execl(weftrun, weftrun, "--grace", "5", "-n", "2", "sh", "-c", script, (char *)NULL);
        _exit(99);
    }
    CHECK(pid > 0, "fork: %s", strerror(errno));
    if (pid <= 0) {
        close(master);
        return -1;
    }
    *master_out = master;
    return pid;
}

/* Ctrl-C typed at a terminal: weftrun runs as the session leader of a new pseudo-terminal, the
 * kernel sends SIGINT to the foreground process group, which holds the ranks too, so they die at
 * once and weftrun exits 130 long before the 5 s grace. */
static void test_ctrl_c(void)
{
    char dir[128], pid_cmd[512], script[1024];
    case_dir(dir, sizeof dir, "ctrl-c");
    pid_snippet(pid_cmd, sizeof pid_cmd, dir);
    snprintf(script, sizeof script, "%s; exec sleep 30", pid_cmd);
    int master;
    pid_t pid = spawn_on_pty("ctrl-c", script, &master);
    if (pid <= 0)
        return;
    pid_t pids[2];
    CHECK(wait_pids(dir, 2, pids) == 2, "ctrl-c: ranks did not start");
    uint64_t t0 = weft_now_ns();
    CHECK(write(master, "\x03", 1) == 1, "ctrl-c: write to the terminal: %s", strerror(errno));
    int st = wait_for(pid);
    double dt = since_s(t0);
    int rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(rc == 128 + SIGINT, "ctrl-c: weftrun exit %d, expected %d", rc, 128 + SIGINT);
    CHECK(dt < 2.0, "ctrl-c: weftrun took %.3f s after Ctrl-C", dt);
    check_gone("ctrl-c", pids, 2);
    close(master);
}

/* Ranks that trap sig and, 0.3 s later, record it in dir/got.<rank> and exit 3 (a rank killed
 * before its handler finished records nothing): the script. */
static void trapping_script(char *script, size_t cap, const char *dir, const char *sig)
{
    char pid_cmd[512];
    pid_snippet(pid_cmd, sizeof pid_cmd, dir);
    snprintf(script, cap,
             "trap 'sleep 0.3; echo got > %s/got.$WEFT_RANK; exit 3' %s; %s; sleep 30 & wait $!",
             dir, sig, pid_cmd);
}

/* 1 when every rank of 2 recorded its signal in dir/got.<rank>. */
static int both_got(const char *dir)
{
    for (int r = 0; r < 2; r++) {
        char path[256];
        snprintf(path, sizeof path, "%s/got.%d", dir, r);
        if (access(path, F_OK) != 0)
            return 0;
    }
    return 1;
}

/* After weftrun (pid) was sent sig at t0: it must exit 128 + sig within max_s, every rank's
 * handler must have finished (both_got) and no rank may be left. */
static void check_trapped(const char *name, pid_t pid, int sig, uint64_t t0, double max_s,
                          const char *dir, const pid_t *pids)
{
    int st = wait_for(pid);
    double dt = since_s(t0);
    int rc = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(rc == 128 + sig, "%s: weftrun exit %d, expected %d", name, rc, 128 + sig);
    CHECK(both_got(dir), "%s: a rank's handler of signal %d did not finish (killed early?)", name,
          sig);
    CHECK(dt < max_s, "%s: weftrun took %.3f s after the signal (at most %.1f)", name, dt, max_s);
    check_gone(name, pids, 2);
}

/* One SIGTERM that reaches weftrun twice from the same sender (as `timeout` signals weftrun and
 * then its process group): still one signal, so the ranks run their handlers within the grace
 * instead of being killed at once as after a second signal. */
static void test_same_signal_twice(void)
{
    char dir[128], script[1024];
    case_dir(dir, sizeof dir, "same-signal");
    trapping_script(script, sizeof script, dir, "TERM");
    const char *args[] = {"--grace", "5", "-n", "2", "sh", "-c", script, NULL};
    pid_t pid = spawn(args);
    if (pid <= 0)
        return;
    pid_t pids[2];
    CHECK(wait_pids(dir, 2, pids) == 2, "same-signal: ranks did not start");
    uint64_t t0 = weft_now_ns();
    kill(pid, SIGTERM);
    sleep_s(0.02); /* read by weftrun by now: not merged with the first by the kernel */
    kill(pid, SIGTERM);
    check_trapped("same-signal", pid, SIGTERM, t0, 4.0, dir, pids);
}

/* weftrun started with SIGCHLD ignored (inherited through exec): it still sees its ranks exit. */
static void test_sigchld_ignored(void)
{
    fflush(stdout);
    uint64_t t0 = weft_now_ns();
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGCHLD, SIG_IGN);
        execl(weftrun, weftrun, "-n", "2", "true", (char *)NULL);
        _exit(99);
    }
    CHECK(pid > 0, "fork: %s", strerror(errno));
    if (pid <= 0)
        return;
    int st = wait_for(pid);
    double dt = since_s(t0);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "sigchld-ignored: weftrun status %d, expected exit 0", st);
    CHECK(dt < 3.0, "sigchld-ignored: weftrun took %.3f s", dt);
}

/* A terminal hangup: weftrun is the session leader of a pseudo-terminal whose master closes.
 * The kernel sends SIGHUP to the session leader only; weftrun must forward it, so the ranks run
 * their handlers long before the 5 s grace ends. */
static void test_hangup(void)
{
    char dir[128], script[1024];
    case_dir(dir, sizeof dir, "hangup");
    trapping_script(script, sizeof script, dir, "HUP");
    int master;
    pid_t pid = spawn_on_pty("hangup", script, &master);
    if (pid <= 0)
        return;
    pid_t pids[2];
    CHECK(wait_pids(dir, 2, pids) == 2, "hangup: ranks did not start");
    uint64_t t0 = weft_now_ns();
    close(master);
    check_trapped("hangup", pid, SIGHUP, t0, 3.0, dir, pids); /* grace: 5 s */
}

/* weftrun killed with SIGKILL: its ranks die too (PR_SET_PDEATHSIG); as the subreaper, this
 * process reaps them and sees SIGKILL. */
static void test_weftrun_killed(void)
{
    char dir[128], pid_cmd[512], script[1024];
    case_dir(dir, sizeof dir, "killed");
    pid_snippet(pid_cmd, sizeof pid_cmd, dir);
    snprintf(script, sizeof script, "%s; exec sleep 30", pid_cmd);
    const char *args[] = {"-n", "2", "sh", "-c", script, NULL};
    pid_t pid = spawn(args);
    if (pid <= 0)
        return;
    pid_t pids[2];
    CHECK(wait_pids(dir, 2, pids) == 2, "killed: ranks did not start");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int r = 0; r < 2; r++) {
        if (pids[r] <= 0)
            continue;
        uint64_t deadline = weft_deadline_after_s(3.0);
        int st = 0;
        pid_t got;
        while ((got = waitpid(pids[r], &st, WNOHANG)) == 0 && weft_now_ns() < deadline)
            sleep_s(0.005);
        CHECK(got == pids[r] && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "killed: rank %d (pid %d) did not die of SIGKILL with weftrun", r, (int)pids[r]);
        if (got == 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    }
}

/* Ranks that leave processes behind: weftrun kills them once the ranks are reaped, both when
 * the ranks exit 0 (background jobs) and when a wrapper script is killed after the grace (its
 * child is orphaned). */
static void test_leftovers(void)
{
    char dir[128], script[1024];
    case_dir(dir, sizeof dir, "background");
    snprintf(script, sizeof script, "sleep 30 & echo $! > %s/pid.$WEFT_RANK; exit 0", dir);
    const char *args[] = {"-n", "2", "sh", "-c", script, NULL};
    double dt;
    int rc = run(args, &dt);
    pid_t pids[2];
    CHECK(rc == 0 && dt < 3.0, "background: weftrun exit %d after %.3f s", rc, dt);
    CHECK(read_pids(dir, 2, pids) == 2, "background: not every rank wrote its child's pid");
    check_gone("background", pids, 2);

    case_dir(dir, sizeof dir, "wrapper");
    snprintf(script, sizeof script,
             "if [ \"$WEFT_RANK\" = 0 ]; then sleep 0.2; exit 4; fi; "
             "sleep 30 & echo $! > %s/pid.$WEFT_RANK; wait",
             dir);
    const char *args2[] = {"--grace", "0.3", "-n", "2", "sh", "-c", script, NULL};
    rc = run(args2, &dt);
    CHECK(rc == 4 && dt < 3.0, "wrapper: weftrun exit %d after %.3f s", rc, dt);
    CHECK(read_pids(dir, 2, pids) == 1 && pids[1] > 0, "wrapper: rank 1 did not write its pid");
    check_gone("wrapper", pids, 2);
}

static void test_usage(void)
{
    static const struct {
        const char *args[8];
        int want;
    } cases[] = {
        {{NULL}, 2},
        {{"-n", "0", "true", NULL}, 2},
        {{"-n", "abc", "true", NULL}, 2},
        {{"-n", "100000", "true", NULL}, 2},
        {{"-n", "2", NULL}, 2},
        {{"true", NULL}, 2},
        {{"--bogus", "-n", "1", "true", NULL}, 2},
        {{"--grace", "-1", "-n", "1", "true", NULL}, 2},
        {{"--grace", "nan", "-n", "1", "true", NULL}, 2},
        {{"--kill-wait", "-1", "-n", "1", "true", NULL}, 2},
        {{"--kill-wait", "x", "-n", "1", "true", NULL}, 2},
        {{"-n", "+2", "true", NULL}, 2},
        {{"-n", " 2", "true", NULL}, 2},
        {{"--grace", "0x10", "-n", "1", "true", NULL}, 2},
        {{"--grace", "+1", "-n", "1", "true", NULL}, 2},
        {{"--kill-wait", " 1", "-n", "1", "true", NULL}, 2},
        {{"--grace", "1e300", "-n", "1", "true", NULL}, 2}, /* a deadline past 2^64 ns */
        {{"--kill-wait", "10000001", "-n", "1", "true", NULL}, 2},
        {{"--grace", ".5", "--kill-wait", "2e-1", "-n", "1", "true", NULL}, 0},
        {{"-n", NULL}, 2},
        {{"--help", NULL}, 0},
        {{"-h", NULL}, 0},
        {{"-n", "2", "--grace", "0", "/nonexistent/weft-test-prog", NULL}, 127},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args, NULL);
        CHECK(rc == cases[i].want, "usage case %zu (weftrun %s ...): exit %d, expected %d", i,
              cases[i].args[0] != NULL ? cases[i].args[0] : "", rc, cases[i].want);
    }
}

/* Kill and reap any child still running (listed by /proc), reporting each as a failure. */
static void kill_leftovers(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    int pid;
    while (f != NULL && fscanf(f, "%d", &pid) == 1) {
        char cmd[256] = "", cpath[64];
        snprintf(cpath, sizeof cpath, "/proc/%d/cmdline", pid);
        FILE *c = fopen(cpath, "r");
        if (c != NULL) {
            size_t n = fread(cmd, 1, sizeof cmd - 1, c);
            cmd[n] = '\0';
            fclose(c);
        }
        CHECK(0, "process %d (%s) was left running", pid, cmd);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (f != NULL)
        fclose(f);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        CHECK(0, "a process was left behind and re-parented to the test");
}

/* Remove the temporary tree (one level of case directories holding plain files). */
static void remove_tree(void)
{
    DIR *top = opendir(topdir);
    if (top == NULL)
        return;
    struct dirent *d;
    while ((d = readdir(top)) != NULL) {
        if (d->d_name[0] == '.')
            continue;
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s", topdir, d->d_name);
        DIR *s = opendir(sub);
        struct dirent *f;
        while (s != NULL && (f = readdir(s)) != NULL) {
            if (f->d_name[0] == '.')
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
            unlink(path);
        }
        if (s != NULL)
            closedir(s);
        rmdir(sub);
    }
    closedir(top);
    rmdir(topdir);
}

int main(void)
{
    weftrun = getenv("WEFT_WEFTRUN");
    if (weftrun == NULL || weftrun[0] == '\0') {
        printf("FAIL: WEFT_WEFTRUN is not set (the test registration sets it to the weftrun "
               "binary)\n");
        return 1;
    }
    if (mkdtemp(topdir) == NULL) {
        printf("FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    /* Orphaned ranks come to this process, so a survivor is seen (and reaped) here. */
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    unsetenv("WEFT_RUN_GRACE_S");

    test_all_succeed();
    test_usage();
    test_failure_grace();
    test_rank_sigkill();
    test_skip();
    char secret1[80] = "", secret2[80] = "";
    test_env("env1", secret1);
    test_env("env2", secret2);
    CHECK(strcmp(secret1, secret2) != 0, "two jobs got the same secret %s", secret1);
    /* SIGTERM forwarded: the ranks die of it at once, long before the 5 s grace. */
    test_signal("sigterm", "5", "", SIGTERM, 0, 128 + SIGTERM, 2.0);
    /* Ranks that ignore SIGTERM are killed when the 1 s grace ends. */
    test_signal("sigterm-ignored", "1", "trap '' TERM; ", SIGTERM, 0, 128 + SIGTERM, 4.0);
    /* A second signal kills at once, long before the 20 s grace. */
    test_signal("second-signal", "20", "trap '' INT; ", SIGINT, 1, 128 + SIGINT, 2.0);
    test_ctrl_c();
    test_same_signal_twice();
    test_sigchld_ignored();
    test_hangup();
    test_leftovers();
    test_weftrun_killed();
    test_unreaped("unreaped-rank", 1);
    test_unreaped("unreaped-leftover", 0);

    kill_leftovers();
    remove_tree();
    if (skipped)
        printf("test_weftrun: %s, %d case(s) skipped (see the SKIP lines)\n",
               failures ? "FAILED" : "passed", skipped);
    else
        printf("test_weftrun: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
