/*
 * weftrun.c - launch N local ranks of a program:
 * `weftrun -n N [--grace S] [--kill-wait S] [--] prog [args...]`.
 *
 * Each rank is fork+exec'd with the rank variables weft and torchrun read (WEFT_RANK,
 * WEFT_NRANKS, WEFT_LOCAL_RANK, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), the address of
 * weft's rendezvous store (WEFT_MASTER_ADDR=127.0.0.1 and a WEFT_MASTER_PORT found free by
 * binding port 0), MASTER_ADDR=127.0.0.1 and a second free port as MASTER_PORT for the
 * program's own use (torch.distributed's store), so the two stores never meet, and a fresh
 * WEFT_JOB_SECRET of 32 hex digits from getrandom(). weftrun always sets these, whatever the
 * caller's environment holds, so a stale value there cannot win over them. Ranks inherit stdout
 * and stderr; rank 0 inherits stdin, the others read /dev/null.
 *
 * Design. weftrun is single-threaded. It blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * before forking and waits for them on a signalfd in poll(), whose timeout is the end of the
 * grace period when one runs: no busy loop. The ranks stay in weftrun's process group, so a
 * Ctrl-C at the terminal reaches every rank from the kernel; a SIGINT or SIGQUIT the kernel
 * generated for the terminal's process group (si_code SI_KERNEL) is therefore not forwarded
 * again, any other signal (kill(1), a batch system, the SIGHUP of a hangup, which reaches only
 * the session leader) is forwarded to every running rank. When a rank exits non-zero or by a
 * signal, or weftrun receives a termination signal, the others get the grace period
 * (WEFT_RUN_GRACE_S, or --grace) to exit on their own; then weftrun sends SIGKILL to the rest.
 * A second termination signal sends SIGKILL at once; the same signal from the same sender
 * within 100 ms is one signal that came twice (`timeout` signals weftrun, then its process
 * group). An inherited ignored SIGCHLD is reset to the default, or the kernel would reap the
 * ranks unseen. weftrun is a child subreaper, so what a
 * rank leaves behind (a background process, or the program a wrapper script ran when the
 * script was killed) becomes weftrun's child; once every rank is reaped, weftrun kills and reaps
 * those too. Each rank also has PR_SET_PDEATHSIG = SIGKILL, so no rank outlives weftrun even if
 * weftrun itself is killed with SIGKILL. A process SIGKILL does not end (one in uninterruptible
 * sleep in a driver, or a zombie a tracer holds) could keep weftrun waiting forever: after each
 * SIGKILL weftrun waits at most the kill wait (--kill-wait, 10 s by default) for the processes it
 * killed to be reaped, then names those still there and gives up on them.
 *
 * Exit status: 0 when every rank exits 0; 77 (skipped, as CTest reads it) only when every rank
 * exits 77; otherwise the first failure's, a skip (exit 77) not counting as one: a rank's exit
 * code, or 128 + the signal that killed it, or 128 + the signal weftrun received if that came
 * first; 137 for a rank killed after the grace period that followed another rank's skip; 1 when
 * some ranks skipped and the others exited 0 (a partial skip is no skip). A rank still not
 * reaped at the end of the kill wait leaves the first failure's status, or 137 after a skip; a
 * left-behind process still not reaped at the end of its kill wait turns a 0 or 77 into 1.
 * 2 for a usage error, 1 if the job could not be started.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/exec_cuda.h" /* WEFT_CUDA_MAX_RANKS, for --help */
#include "exec/work.h"      /* WEFT_MAX_RANKS, for --help */
#include "util/clock.h"
#include "util/config.h"

#define WEFTRUN_MAX_RANKS 4096
#define WEFTRUN_SECRET_BYTES 16
#define WEFTRUN_EXIT_USAGE 2
#define WEFTRUN_EXIT_START 1
#define WEFTRUN_EXIT_SKIP 77 /* a rank that skipped its test (CTest's SKIP_RETURN_CODE) */
#define WEFTRUN_EXIT_PARTIAL_SKIP 1
#define WEFTRUN_EXIT_UNREAPED 1  /* a left-behind process could not be reaped */
#define WEFTRUN_KILL_WAIT_S 10.0 /* default of --kill-wait */
#define WEFTRUN_MAX_WAIT_S 1e7   /* --grace and --kill-wait at most (WEFT_RUN_GRACE_S too) */
/* 10 ms: how often waitpid is polled where no wait on the signalfd is possible. */
#define WEFTRUN_REAP_POLL_NS 10000000
/* A signal repeated this soon by the same sender is the same one: `timeout`, Slurm and
 * `kill -- -PGID` signal weftrun and then its process group, which holds weftrun too. */
#define WEFTRUN_SAME_SIGNAL_NS 100000000

typedef struct rank_proc {
    pid_t pid;
    int running;
} rank_proc_t;

/* The state of a job while weftrun waits for it. */
typedef struct job {
    rank_proc_t *ranks;
    int nranks;
    int running;
    double grace_s;
    uint64_t kill_at_ns; /* UINT64_MAX: no grace period is running */
    int killed;          /* SIGKILL has been sent to the survivors */
    double kill_wait_s;  /* how long killed ranks get to be reaped */
    uint64_t reap_by_ns; /* once killed: when weftrun gives up on ranks not reaped */
    int exit_code;       /* of the first failure (a skip is none); 0 while there is none */
    int skipped;         /* ranks that exited WEFTRUN_EXIT_SKIP */
    int signals;         /* termination signals received */
    int last_signo;      /* the last one, its sender and when it came (WEFTRUN_SAME_SIGNAL_NS) */
    uint32_t last_sender;
    uint64_t last_signal_ns;
} job_t;

#define WEFTRUN_USAGE "usage: weftrun -n N [--grace S] [--kill-wait S] [--] prog [args...]\n"

/* The command line. */
typedef struct run_opts {
    int nranks;
    double grace_s;     /* --grace */
    double kill_wait_s; /* --kill-wait */
    int prog_index;     /* argv index of prog */
} run_opts_t;

static void usage_short(void)
{
    fputs(WEFTRUN_USAGE "Try 'weftrun --help'.\n", stderr);
}

static void print_help(void)
{
    printf(WEFTRUN_USAGE
           "\n"
           "Launch N local ranks of prog with the weft and torchrun variables set:\n"
           "WEFT_RANK, WEFT_NRANKS, WEFT_LOCAL_RANK, RANK, WORLD_SIZE, LOCAL_RANK,\n"
           "LOCAL_WORLD_SIZE, MASTER_ADDR/WEFT_MASTER_ADDR=127.0.0.1,\n"
           "WEFT_MASTER_PORT=<a free port> (weft's store), MASTER_PORT=<another free\n"
           "port> (the program's own), WEFT_JOB_SECRET=<32 random hex digits>.\n"
           "\n"
           "  -n N            number of ranks (1 to %d; weft_comm_init accepts at most\n"
           "                  %d, the CUDA backend at most %d)\n"
           "  --grace S       seconds the other ranks get to exit after one fails, before\n"
           "                  they are killed (default: WEFT_RUN_GRACE_S, now %g)\n"
           "  --kill-wait S   seconds killed processes get to be reaped, before weftrun\n"
           "                  names those still there and gives up on them (default %g)\n"
           "  -h, --help      print this help\n"
           "  --              end of weftrun's options (needed only if prog starts with -)\n"
           "\n"
           "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank; a second one\n"
           "kills them. Exit status: 0 if every rank exits 0; 77 (skipped) if every rank\n"
           "exits 77; else the first failing rank's exit code or 128+signal, a rank's 77 not\n"
           "counting as a failure (1 if the others exited 0); 2 for a usage error; 1 if the\n"
           "job could not be started.\n",
           WEFTRUN_MAX_RANKS, WEFT_MAX_RANKS, WEFT_CUDA_MAX_RANKS, weft_config_get()->run_grace_s,
           WEFTRUN_KILL_WAIT_S);
}

/* Seconds >= 0 from an option's value written in decimal ("1", "0.5", ".5", "2e-3"); -1 if it
 * is not one. strtod alone would also take a sign, leading blanks and hexadecimal ("0x10"). */
static double parse_seconds(const char *s)
{
    if ((!isdigit((unsigned char)s[0]) && s[0] != '.') || strpbrk(s, "xX") != NULL)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < 0)
        return -1;
    return v;
}

/* Parse the command line into *o. Returns 0; -1 after printing --help; or WEFTRUN_EXIT_USAGE
 * after printing what is wrong. */
static int parse_args(int argc, char **argv, run_opts_t *o)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"grace", required_argument, NULL, 'g'},
        {"kill-wait", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    *o =
        (run_opts_t){.grace_s = weft_config_get()->run_grace_s, .kill_wait_s = WEFTRUN_KILL_WAIT_S};
    int opt;
    /* "+": stop at the first non-option, so prog's own options are left alone. */
    while ((opt = getopt_long(argc, argv, "+hn:", longopts, NULL)) != -1) {
        char *end;
        switch (opt) {
        case 'h':
            print_help();
            return -1;
        case 'n': {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            /* Digits only: strtol would also take a sign and leading blanks. */
            if (!isdigit((unsigned char)optarg[0]) || *end != '\0' || errno != 0 || v < 1 ||
                v > WEFTRUN_MAX_RANKS) {
                fprintf(stderr, "weftrun: -n %s: expected a number of ranks from 1 to %d\n", optarg,
                        WEFTRUN_MAX_RANKS);
                return WEFTRUN_EXIT_USAGE;
            }
            o->nranks = (int)v;
            break;
        }
        case 'g':
        case 'k': {
            double v = parse_seconds(optarg);
            if (v < 0 || v > WEFTRUN_MAX_WAIT_S) {
                fprintf(stderr, "weftrun: --%s %s: expected seconds in [0, %g]\n",
                        opt == 'g' ? "grace" : "kill-wait", optarg, WEFTRUN_MAX_WAIT_S);
                return WEFTRUN_EXIT_USAGE;
            }
            *(opt == 'g' ? &o->grace_s : &o->kill_wait_s) = v;
            break;
        }
        default: /* getopt_long printed what is wrong */
            return WEFTRUN_EXIT_USAGE;
        }
    }
    if (o->nranks == 0) {
        fprintf(stderr, "weftrun: -n N is required\n");
        return WEFTRUN_EXIT_USAGE;
    }
    if (optind >= argc) {
        fprintf(stderr, "weftrun: no program to run\n");
        return WEFTRUN_EXIT_USAGE;
    }
    o->prog_index = optind;
    return 0;
}

/* Two distinct TCP ports on 127.0.0.1 that were free a moment ago (each bound with port 0 while
 * the other was held, then both released): one for weft's store, one for MASTER_PORT, which a
 * program may also give torch.distributed (env://), whose store must not meet weft's. Another
 * process may take one before a rank binds it; the window is short. Returns 0, or -1 after
 * printing why. */
static int find_free_ports(int ports[2])
{
    int fds[2] = {-1, -1}, rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&sa, &len) != 0) {
            fprintf(stderr, "weftrun: finding a free port on 127.0.0.1: %s\n", strerror(errno));
            rc = -1;
        } else {
            ports[i] = ntohs(sa.sin_port);
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

/* Fill hex (2 * WEFTRUN_SECRET_BYTES + 1 bytes) with a random secret. Returns 0 on success. */
static int make_secret(char *hex)
{
    unsigned char raw[WEFTRUN_SECRET_BYTES];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "weftrun: getrandom: %s\n", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int set_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    return setenv(name, buf, 1);
}

/* Set the variables every rank shares: ports[0] is weft's store, ports[1] MASTER_PORT. Returns
 * 0 on success. */
static int set_job_env(int nranks, const int ports[2], const char *secret)
{
    int rc = 0;
    rc |= set_int("WEFT_NRANKS", nranks);
    rc |= set_int("WORLD_SIZE", nranks);
    rc |= set_int("LOCAL_WORLD_SIZE", nranks);
    rc |= setenv("MASTER_ADDR", "127.0.0.1", 1);
    rc |= setenv("WEFT_MASTER_ADDR", "127.0.0.1", 1);
    rc |= set_int("MASTER_PORT", ports[1]);
    rc |= set_int("WEFT_MASTER_PORT", ports[0]);
    rc |= setenv("WEFT_JOB_SECRET", secret, 1);
    if (rc != 0)
        fprintf(stderr, "weftrun: setenv: %s\n", strerror(errno));
    return rc;
}

/* In the child: become rank `rank` and exec prog. Never returns. */
static void exec_rank(int rank, pid_t parent, const sigset_t *orig_mask, char **argv)
{
    /* Die with weftrun, even if it is killed with SIGKILL (checked against the race where it
     * died before the prctl). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(WEFTRUN_EXIT_START);
    if (rank > 0) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || dup2(fd, STDIN_FILENO) < 0) {
            fprintf(stderr, "weftrun: rank %d: /dev/null as stdin: %s\n", rank, strerror(errno));
            _exit(WEFTRUN_EXIT_START);
        }
        close(fd);
    }
    if (set_int("WEFT_RANK", rank) != 0 || set_int("RANK", rank) != 0 ||
        set_int("WEFT_LOCAL_RANK", rank) != 0 || set_int("LOCAL_RANK", rank) != 0) {
        fprintf(stderr, "weftrun: rank %d: setenv: %s\n", rank, strerror(errno));
        _exit(WEFTRUN_EXIT_START);
    }
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execvp(argv[0], argv);
    int err = errno;
    fprintf(stderr, "weftrun: rank %d: cannot execute %s: %s\n", rank, argv[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

static void signal_running(job_t *job, int sig)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->ranks[r].running)
            kill(job->ranks[r].pid, sig);
}

/* Start the grace period unless one already runs. */
static void start_grace(job_t *job)
{
    if (job->kill_at_ns != UINT64_MAX || job->running == 0)
        return;
    job->kill_at_ns = weft_deadline_after_s(job->grace_s);
    fprintf(stderr, "weftrun: waiting up to %g s for the %d other rank(s) to exit\n", job->grace_s,
            job->running);
}

static void kill_survivors(job_t *job, const char *why)
{
    if (job->killed || job->running == 0)
        return;
    fprintf(stderr, "weftrun: %s: killing %d rank(s) still running\n", why, job->running);
    signal_running(job, SIGKILL);
    job->killed = 1;
    job->reap_by_ns = weft_deadline_after_s(job->kill_wait_s);
}

/* Reap every exited rank and act on failures. */
static void reap(job_t *job)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int r = 0;
        while (r < job->nranks && job->ranks[r].pid != pid)
            r++;
        if (r == job->nranks || !job->ranks[r].running)
            continue;
        job->ranks[r].running = 0;
        job->running--;
        int code;
        if (WIFEXITED(status)) {
            code = WEXITSTATUS(status);
            if (code == 0)
                continue;
            if (code == WEFTRUN_EXIT_SKIP) {
                /* Not a failure by itself; the others may wait for this rank, so the grace
                 * period starts as for a failure. */
                fprintf(stderr, "weftrun: rank %d (pid %d) skipped (exit code %d)\n", r, (int)pid,
                        code);
                job->skipped++;
                start_grace(job);
                continue;
            }
            fprintf(stderr, "weftrun: rank %d (pid %d) exited with code %d\n", r, (int)pid, code);
        } else {
            int sig = WTERMSIG(status);
            code = 128 + sig;
            /* Killed by weftrun: after a failure, which decides the exit status, or after a
             * skip, when this rank did not skip and so fails the job. */
            if (job->killed && sig == SIGKILL && job->exit_code != 0)
                continue;
            fprintf(stderr, "weftrun: rank %d (pid %d) was killed by signal %d (%s)%s\n", r,
                    (int)pid, sig, strsignal(sig),
                    job->killed && sig == SIGKILL ? " after the grace period" : "");
        }
        if (job->exit_code == 0)
            job->exit_code = code;
        start_grace(job);
    }
}

static void on_signal(job_t *job, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;
    if (sig == SIGCHLD) {
        reap(job);
        return;
    }
    uint64_t now = weft_now_ns();
    if (job->signals > 0 && sig == job->last_signo && si->ssi_pid == job->last_sender &&
        now - job->last_signal_ns < WEFTRUN_SAME_SIGNAL_NS)
        return; /* one signal that reached weftrun twice, not a second one */
    job->signals++;
    job->last_signo = sig;
    job->last_sender = si->ssi_pid;
    job->last_signal_ns = now;
    if (job->exit_code == 0)
        job->exit_code = 128 + sig;
    if (job->signals > 1) {
        kill_survivors(job, "second signal");
        return;
    }
    /* A terminal's SIGINT or SIGQUIT (SI_KERNEL) already reached every rank of the foreground
     * process group; a hangup's SIGHUP reaches only the session leader, which weftrun may be. */
    int forward = si->ssi_code != SI_KERNEL || sig == SIGHUP;
    if (forward)
        signal_running(job, sig);
    fprintf(stderr, "weftrun: received signal %d (%s)%s\n", sig, strsignal(sig),
            forward ? ", forwarded to every rank" : "");
    start_grace(job);
}

static void sleep_poll(void)
{
    struct timespec ts = {0, WEFTRUN_REAP_POLL_NS};
    nanosleep(&ts, NULL);
}

/* Whether pid is a rank that weftrun gave up on (still running after the kill wait). */
static int given_up_rank(const job_t *job, int pid)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->ranks[r].running && job->ranks[r].pid == pid)
            return 1;
    return 0;
}

/* Send SIGKILL to every child listed in /proc (zombies included) but the ranks weftrun gave up
 * on (named already, and killed); with give_up_s >= 0, name each as one weftrun gives up on after
 * that many seconds. Returns how many were listed, 0 also when the list cannot be read. */
static int kill_children(const job_t *job, double give_up_s)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int pid, n = 0;
    while (fscanf(f, "%d", &pid) == 1) {
        if (given_up_rank(job, pid))
            continue;
        kill(pid, SIGKILL);
        if (give_up_s >= 0)
            fprintf(stderr,
                    "weftrun: process %d the ranks left behind is still not reaped %g s after "
                    "SIGKILL; giving up on it\n",
                    pid, give_up_s);
        n++;
    }
    fclose(f);
    return n;
}

/* Kill and reap the processes the ranks left behind (re-parented to weftrun, the subreaper),
 * for at most wait_s. Each round kills every child but the ranks given up on, then reaps those
 * that exited; a child's own orphans join the next round. waitpid is polled (every 10 ms) rather
 * than blocking, so a process that SIGKILL does not end cannot hold weftrun. Returns how many
 * children were still there at the end of wait_s (each named on stderr), 0 when all are reaped. */
static int kill_leftovers(const job_t *job, double wait_s)
{
    int n = kill_children(job, -1);
    if (n > 0)
        fprintf(stderr, "weftrun: killing %d process(es) the ranks left behind\n", n);
    uint64_t give_up_at = weft_deadline_after_s(wait_s);
    while (n > 0) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);
        if (pid < 0 && errno != EINTR)
            break; /* ECHILD: none left */
        if (pid == 0) {
            if (weft_now_ns() >= give_up_at)
                return kill_children(job, wait_s);
            sleep_poll();
        }
        n = kill_children(job, -1);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        continue;
    return 0;
}

/* The exit status of a job whose ranks have all been reaped (see the top of the file). */
static int job_status(const job_t *job)
{
    if (job->exit_code != 0 || job->skipped == 0)
        return job->exit_code;
    if (job->skipped == job->nranks)
        return WEFTRUN_EXIT_SKIP;
    fprintf(stderr,
            "weftrun: %d of %d rank(s) skipped (exit code %d) and the others exited 0: a partial "
            "skip is a failure\n",
            job->skipped, job->nranks, WEFTRUN_EXIT_SKIP);
    return WEFTRUN_EXIT_PARTIAL_SKIP;
}

/* The end of the kill wait with ranks still not reaped: name them and give up on them. Returns
 * the job's exit status: its first failure's, or 128 + SIGKILL when only skips came before. */
static int give_up(const job_t *job)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->ranks[r].running)
            fprintf(stderr,
                    "weftrun: rank %d (pid %d) is still not reaped %g s after SIGKILL "
                    "(uninterruptible sleep, or held by a tracer?); giving up on it\n",
                    r, (int)job->ranks[r].pid, job->kill_wait_s);
    return job->exit_code != 0 ? job->exit_code : 128 + SIGKILL;
}

/* Wait until every rank has been reaped, or the kill wait after SIGKILL has ended. */
static int wait_job(job_t *job, int sfd)
{
    while (job->running > 0) {
        /* The grace period before SIGKILL, then the kill wait after it. */
        uint64_t deadline = job->killed ? job->reap_by_ns : job->kill_at_ns;
        int timeout_ms = -1;
        if (deadline != UINT64_MAX) {
            uint64_t now = weft_now_ns();
            if (now >= deadline) {
                if (job->killed)
                    return give_up(job);
                kill_survivors(job, "grace period over");
                continue;
            }
            uint64_t ms = (deadline - now + 999999u) / 1000000u;
            timeout_ms = ms > INT_MAX ? INT_MAX : (int)ms;
        }
        struct pollfd p = {.fd = sfd, .events = POLLIN};
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "weftrun: poll: %s\n", strerror(errno));
            if (job->exit_code == 0)
                job->exit_code = WEFTRUN_EXIT_START;
            kill_survivors(job, "cannot wait for the ranks");
            while (job->running > 0 && weft_now_ns() < job->reap_by_ns) {
                reap(job);
                if (job->running > 0)
                    sleep_poll();
            }
            if (job->running > 0)
                give_up(job);
            return WEFTRUN_EXIT_START;
        }
        if (n <= 0)
            continue;
        struct signalfd_siginfo si[8];
        ssize_t got = read(sfd, si, sizeof si);
        for (ssize_t i = 0; got > 0 && i < got / (ssize_t)sizeof si[0]; i++)
            on_signal(job, &si[i]);
    }
    return job_status(job);
}

int main(int argc, char **argv)
{
    run_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) {
        if (rc == WEFTRUN_EXIT_USAGE)
            usage_short();
        return rc < 0 ? 0 : rc;
    }

    char secret[2 * WEFTRUN_SECRET_BYTES + 1];
    int ports[2];
    if (find_free_ports(ports) != 0 || make_secret(secret) != 0 ||
        set_job_env(o.nranks, ports, secret) != 0)
        return WEFTRUN_EXIT_START;

    job_t job = {.nranks = o.nranks,
                 .grace_s = o.grace_s,
                 .kill_wait_s = o.kill_wait_s,
                 .kill_at_ns = UINT64_MAX,
                 .reap_by_ns = UINT64_MAX};
    job.ranks = calloc((size_t)o.nranks, sizeof *job.ranks);
    if (job.ranks == NULL) {
        fprintf(stderr, "weftrun: out of memory for %d ranks\n", o.nranks);
        return WEFTRUN_EXIT_START;
    }

    /* SIGCHLD ignored (inherited through exec: SIG_IGN, or SA_NOCLDWAIT) would reap the ranks
     * behind weftrun's back and never signal their exit: restore the default. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, NULL);

    /* Block the signals before the first fork, so none is lost between fork and the wait. */
    sigset_t set, orig_mask;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
    sigprocmask(SIG_BLOCK, &set, &orig_mask);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "weftrun: signalfd: %s\n", strerror(errno));
        free(job.ranks);
        return WEFTRUN_EXIT_START;
    }

    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        fprintf(stderr,
                "weftrun: PR_SET_CHILD_SUBREAPER: %s (processes the ranks leave behind "
                "will not be cleaned up)\n",
                strerror(errno));
    fflush(NULL);
    pid_t self = getpid();
    for (int r = 0; r < o.nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "weftrun: fork for rank %d: %s\n", r, strerror(errno));
            job.exit_code = WEFTRUN_EXIT_START;
            kill_survivors(&job, "cannot start the job");
            break;
        }
        if (pid == 0)
            exec_rank(r, self, &orig_mask, argv + o.prog_index);
        job.ranks[r] = (rank_proc_t){.pid = pid, .running = 1};
        job.running++;
    }
    rc = wait_job(&job, sfd);
    if (kill_leftovers(&job, o.kill_wait_s) > 0 && (rc == 0 || rc == WEFTRUN_EXIT_SKIP))
        rc = WEFTRUN_EXIT_UNREAPED;
    close(sfd);
    free(job.ranks);
    return rc;
}
