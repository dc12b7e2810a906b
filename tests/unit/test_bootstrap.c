/*
 * test_bootstrap.c - the rendezvous store (src/core/bootstrap.c, client; store_server.c, server)
 * across forked processes.
 *
 * Each scenario forks one process per rank; the processes open a store on a port the parent
 * found free (bound to port 0, then released) and check their results exactly. Payloads are
 * random from a seed printed at the start (pass a seed as argv[1] to replay). The parent reaps
 * every child with a deadline and kills them if it passes, so a hang fails the test instead of
 * blocking it. Scenarios: set/get/overwrite/allgather/barrier for 1, 2, 3 and 8 ranks (over
 * 127.0.0.1, "localhost" and ::1 when available), a GET that times out, handshakes rejected for
 * a wrong generation, nranks or a duplicate rank, rank 0 closing before the others have joined,
 * rank 0 failing to join its own server, clients that see the server die, a client (speaking
 * the wire protocol itself) that sends a GET before reading the answer to its last one, and
 * connections that never complete a HELLO: closed within STORE_HELLO_WINDOW_NS, the oldest at
 * once past STORE_PENDING_MAX, and unable to keep ranks out when rank 0 runs out of descriptors.
 * A scenario this machine cannot run (no IPv6 loopback; RLIMIT_NOFILE that cannot be lowered,
 * as under Valgrind) prints a SKIP line, and the summary line counts it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/store_proto.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/splitmix.h"

#define SCENARIO_LIMIT_S 8.0

static uint64_t seed;
static int skipped; /* scenarios that cannot run here (each printed a SKIP line) */

#define CHECK_TRAILER() printf(" [last error: %s]\n", weft_last_error())
#include "check.h"

/* Deterministic per (seed, stream) so every rank can recompute any rank's data. */
static void fill(uint8_t *p, size_t n, uint64_t stream)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)weft_splitmix64(seed ^ (stream << 32) ^ i);
}

static double elapsed_s(uint64_t t0)
{
    return (double)(weft_now_ns() - t0) / 1e9;
}

/* A port that was free a moment ago on the loopback address of the given family. */
static int free_port(int family)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    int port = -1;
    if (bind(fd, (struct sockaddr *)&ss, len) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
    close(fd);
    return port;
}

typedef struct scenario {
    const char *name;
    const char *addr;
    int port;
    int nranks;
    int nprocs; /* processes forked (more than nranks when two claim one rank) */
} scenario_t;

typedef void (*rank_fn)(const scenario_t *sc, int proc);

#define MAX_PROCS 16
#define OVERRAN (-1)

/* Fork sc->nprocs processes running fn (each exits with 1 if a check failed) and reap them,
 * killing them all if they overrun SCENARIO_LIMIT_S. wait_out[p] gets process p's wait status,
 * or OVERRAN. Returns 0, or 1 if fork failed. */
static int run(const scenario_t *sc, rank_fn fn, int *wait_out)
{
    pid_t pids[MAX_PROCS];
    fflush(stdout);
    for (int p = 0; p < sc->nprocs; p++) {
        wait_out[p] = OVERRAN;
        pids[p] = fork();
        if (pids[p] < 0) {
            printf("FAIL %s: fork: %s\n", sc->name, strerror(errno));
            for (int q = 0; q < p; q++)
                kill(pids[q], SIGKILL);
            while (waitpid(-1, NULL, 0) > 0)
                continue;
            return 1;
        }
        if (pids[p] == 0) {
            failures = 0;
            fn(sc, p);
            fflush(stdout);
            exit(failures > 0 ? 1 : 0); /* exit, not _exit: LeakSanitizer checks the child */
        }
    }
    uint64_t deadline = weft_deadline_after_s(SCENARIO_LIMIT_S);
    int left = sc->nprocs;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            for (int p = 0; p < sc->nprocs; p++)
                if (pids[p] == pid)
                    wait_out[p] = st;
            left--;
            continue;
        }
        if (weft_now_ns() > deadline) {
            printf("FAIL %s: processes still running after %.0f s; killing them\n", sc->name,
                   SCENARIO_LIMIT_S);
            for (int p = 0; p < sc->nprocs; p++)
                if (wait_out[p] == OVERRAN)
                    kill(pids[p], SIGKILL);
            while (waitpid(-1, NULL, 0) > 0)
                continue;
            return 0;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* How process p ended, in words. */
static const char *describe(int st, char *buf, size_t cap)
{
    if (st == OVERRAN)
        snprintf(buf, cap, "overran the limit");
    else if (WIFEXITED(st))
        snprintf(buf, cap, "exited with %d", WEXITSTATUS(st));
    else
        snprintf(buf, cap, "died of signal %d", WTERMSIG(st));
    return buf;
}

/* Check that process p ended as expected: exit code want_exit, or signal want_sig if > 0. */
static int expect(const scenario_t *sc, const int *st, int p, int want_exit, int want_sig)
{
    int ok = want_sig > 0 ? st[p] != OVERRAN && WIFSIGNALED(st[p]) && WTERMSIG(st[p]) == want_sig
                          : st[p] != OVERRAN && WIFEXITED(st[p]) && WEXITSTATUS(st[p]) == want_exit;
    if (!ok) {
        char buf[64];
        printf("FAIL %s: process %d %s\n", sc->name, p, describe(st[p], buf, sizeof buf));
    }
    return !ok;
}

static int report(const scenario_t *sc, int bad)
{
    printf("%s %s (%d processes)\n", bad ? "FAIL" : "ok  ", sc->name, sc->nprocs);
    return bad;
}

/* Run a scenario whose processes must all exit 0. */
static int run_clean(const scenario_t *sc, rank_fn fn)
{
    int st[MAX_PROCS];
    int bad = run(sc, fn, st);
    for (int p = 0; p < sc->nprocs && !bad; p++)
        bad += expect(sc, st, p, 0, 0);
    return report(sc, bad);
}

/* ---------------------------------------------------------------------------------------------
 * Scenarios (each function runs in one forked process)
 * ------------------------------------------------------------------------------------------- */

static void rank_basic(const scenario_t *sc, int rank)
{
    int n = sc->nranks;
    weft_log_set_rank(rank);
    weft_store_t *st = NULL;
    weft_status_t s = weft_store_open(sc->addr, sc->port, rank, n, 7, 6.0, &st);
    CHECK(s == WEFT_SUCCESS, "open: %s", weft_status_string(s));
    if (s != WEFT_SUCCESS)
        return;

    /* Each rank sets its own key and reads its neighbour's, which may not exist yet. */
    char key[64], val[64], got[64];
    snprintf(key, sizeof key, "k%d", rank);
    snprintf(val, sizeof val, "value of rank %d", rank);
    s = weft_store_set(st, key, val, strlen(val));
    CHECK(s == WEFT_SUCCESS, "set: %s", weft_status_string(s));
    int next = (rank + 1) % n;
    snprintf(key, sizeof key, "k%d", next);
    memset(got, 0x5a, sizeof got);
    size_t len = 999;
    s = weft_store_get(st, key, got, sizeof got, &len);
    snprintf(val, sizeof val, "value of rank %d", next);
    CHECK(s == WEFT_SUCCESS && len == strlen(val) && memcmp(got, val, len) == 0 &&
              (uint8_t)got[len] == 0x5a,
          "get %s: status %s len %zu", key, weft_status_string(s), len);

    /* Overwrite: the value read after the second barrier is the second one, exactly. */
    if (rank == n - 1)
        CHECK(weft_store_set(st, "ow", "first value", 11) == WEFT_SUCCESS, "set ow 1");
    CHECK(weft_store_barrier(st, "ow1") == WEFT_SUCCESS, "barrier ow1");
    if (rank == n - 1)
        CHECK(weft_store_set(st, "ow", "2nd", 3) == WEFT_SUCCESS, "set ow 2");
    CHECK(weft_store_barrier(st, "ow2") == WEFT_SUCCESS, "barrier ow2");
    memset(got, 0x5a, sizeof got);
    s = weft_store_get(st, "ow", got, sizeof got, &len);
    CHECK(s == WEFT_SUCCESS && len == 3 && memcmp(got, "2nd", 3) == 0, "get ow: %s len %zu",
          weft_status_string(s), len);

    /* An empty value, and a value longer than cap (the handle stays usable). */
    if (rank == 0) {
        CHECK(weft_store_set(st, "empty", NULL, 0) == WEFT_SUCCESS, "set empty");
        CHECK(weft_store_set(st, "long", "0123456789", 10) == WEFT_SUCCESS, "set long");
    }
    len = 999;
    s = weft_store_get(st, "empty", got, sizeof got, &len);
    CHECK(s == WEFT_SUCCESS && len == 0, "get empty: %s len %zu", weft_status_string(s), len);
    memset(got, 0x5a, sizeof got);
    s = weft_store_get(st, "long", got, 4, &len);
    CHECK(s == WEFT_ERR_INVALID_ARGUMENT && len == 10 && memcmp(got, "0123", 4) == 0 &&
              (uint8_t)got[4] == 0x5a,
          "get long into 4 bytes: %s len %zu", weft_status_string(s), len);
    s = weft_store_get(st, "long", got, sizeof got, &len);
    CHECK(s == WEFT_SUCCESS && len == 10 && memcmp(got, "0123456789", 10) == 0,
          "get long: %s len %zu", weft_status_string(s), len);

    /* Argument checks. */
    char big_key[300];
    memset(big_key, 'x', sizeof big_key - 1);
    big_key[sizeof big_key - 1] = '\0';
    CHECK(weft_store_set(st, big_key, "v", 1) == WEFT_ERR_INVALID_ARGUMENT, "key of 299 bytes");
    CHECK(weft_store_set(st, "", "v", 1) == WEFT_ERR_INVALID_ARGUMENT, "empty key");
    CHECK(weft_store_set(st, "k", NULL, 1) == WEFT_ERR_INVALID_ARGUMENT, "NULL value");
    CHECK(weft_store_set(st, "k", "v", (16u << 20) + 1) == WEFT_ERR_INVALID_ARGUMENT,
          "value over 16 MiB");
    CHECK(weft_store_barrier(st, "") == WEFT_ERR_INVALID_ARGUMENT, "empty tag");

    /* All-gathers of random payloads: small, odd-sized and large (partial reads and writes). */
    static const size_t sizes[] = {1, 37, 4099, 1 << 20};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t sz = sizes[t];
        uint8_t *mine = malloc(sz);
        uint8_t *all = malloc(sz * (size_t)n + 1);
        uint8_t *want = malloc(sz);
        if (mine == NULL || all == NULL || want == NULL) {
            CHECK(0, "malloc");
            free(mine);
            free(all);
            free(want);
            break;
        }
        fill(mine, sz, t * 1000 + (uint64_t)rank);
        memset(all, 0xa5, sz * (size_t)n + 1);
        char tag[32];
        snprintf(tag, sizeof tag, "ag%zu", t);
        s = weft_store_allgather(st, tag, mine, sz, all);
        CHECK(s == WEFT_SUCCESS, "allgather %zu: %s", sz, weft_status_string(s));
        for (int r = 0; r < n && s == WEFT_SUCCESS; r++) {
            fill(want, sz, t * 1000 + (uint64_t)r);
            CHECK(memcmp(all + (size_t)r * sz, want, sz) == 0,
                  "allgather %zu: rank %d's part differs (seed %llu)", sz, r,
                  (unsigned long long)seed);
        }
        CHECK(all[sz * (size_t)n] == 0xa5, "allgather %zu wrote past the end", sz);
        free(mine);
        free(all);
        free(want);
    }

    /* A mismatched all-gather length is reported, not silently truncated. */
    if (n > 1) {
        uint8_t mine[8] = {0}, all[8 * 8];
        s = weft_store_allgather(st, "agbad", mine, rank == 0 ? 8 : 4, all);
        CHECK(rank == 0 || s == WEFT_ERR_MISMATCH, "mismatched allgather: %s",
              weft_status_string(s));
    }
    s = weft_store_barrier(st, "end");
    CHECK(s == WEFT_SUCCESS, "barrier end: %s", weft_status_string(s));
    weft_store_close(st);
}

/* Rank 1 waits for a key nobody sets: WEFT_ERR_TIMEOUT at its deadline (0.5 s), sticky
 * afterwards. Rank 0 (deadline 4 s) closes at once, so its close waits for rank 1 to leave. */
static void rank_get_timeout(const scenario_t *sc, int rank)
{
    weft_store_t *st = NULL;
    uint64_t t0 = weft_now_ns();
    weft_status_t s =
        weft_store_open(sc->addr, sc->port, rank, sc->nranks, 0, rank == 0 ? 4.0 : 0.5, &st);
    CHECK(s == WEFT_SUCCESS, "open: %s", weft_status_string(s));
    if (s != WEFT_SUCCESS)
        return;
    if (rank == 0) {
        weft_store_close(st);
        double dt = elapsed_s(t0);
        CHECK(dt > 0.45 && dt < 2.0, "rank 0 close returned after %.3f s (rank 1 leaves at 0.5)",
              dt);
        return;
    }
    char buf[8];
    size_t len = 777;
    s = weft_store_get(st, "never-set", buf, sizeof buf, &len);
    double dt = elapsed_s(t0);
    CHECK(s == WEFT_ERR_TIMEOUT && len == 777, "get: %s len %zu", weft_status_string(s), len);
    CHECK(dt > 0.45 && dt < 1.5, "get timed out after %.3f s (timeout 0.5 s)", dt);
    s = weft_store_set(st, "after", "x", 1);
    CHECK(s == WEFT_ERR_TIMEOUT, "set after a timeout: %s", weft_status_string(s));
    t0 = weft_now_ns();
    weft_store_close(st);
    CHECK(elapsed_s(t0) < 0.5, "close took %.3f s", elapsed_s(t0));
}

/* Process 1 first tries a wrong generation, then a wrong nranks (both time out), then joins
 * correctly; rank 0 serves throughout. */
static void rank_mismatch(const scenario_t *sc, int rank)
{
    weft_store_t *st = NULL;
    weft_status_t s;
    if (rank == 1) {
        uint64_t t0 = weft_now_ns();
        s = weft_store_open(sc->addr, sc->port, 1, 2, 4, 0.3, &st);
        double dt = elapsed_s(t0);
        CHECK(s == WEFT_ERR_TIMEOUT && dt > 0.28 && dt < 1.0, "generation 4: %s after %.3f s",
              weft_status_string(s), dt);
        t0 = weft_now_ns();
        s = weft_store_open(sc->addr, sc->port, 1, 3, 3, 0.3, &st);
        dt = elapsed_s(t0);
        CHECK(s == WEFT_ERR_TIMEOUT && dt > 0.28 && dt < 1.0, "nranks 3: %s after %.3f s",
              weft_status_string(s), dt);
    }
    s = weft_store_open(sc->addr, sc->port, rank, 2, 3, 4.0, &st);
    CHECK(s == WEFT_SUCCESS, "open: %s", weft_status_string(s));
    if (s != WEFT_SUCCESS)
        return;
    uint32_t mine = 0xc0de0000u + (uint32_t)rank, all[2] = {0, 0};
    s = weft_store_allgather(st, "ids", &mine, sizeof mine, all);
    CHECK(s == WEFT_SUCCESS && all[0] == 0xc0de0000u && all[1] == 0xc0de0001u,
          "allgather: %s %#x %#x", weft_status_string(s), all[0], all[1]);
    weft_store_close(st);
}

/* Processes 1 and 2 both claim rank 1: exactly one joins, the other is refused until its
 * deadline. They report which through their exit path; the joined one meets rank 0. */
static void rank_duplicate(const scenario_t *sc, int proc)
{
    weft_store_t *st = NULL;
    int rank = proc == 0 ? 0 : 1;
    double timeout = proc == 0 ? 4.0 : 1.0;
    weft_status_t s = weft_store_open(sc->addr, sc->port, rank, 2, 0, timeout, &st);
    if (proc == 0) {
        CHECK(s == WEFT_SUCCESS, "rank 0 open: %s", weft_status_string(s));
    } else if (s == WEFT_SUCCESS) {
        printf("     duplicate: process %d joined as rank 1\n", proc);
    } else {
        CHECK(s == WEFT_ERR_TIMEOUT, "second claimant: %s", weft_status_string(s));
        printf("     duplicate: process %d refused\n", proc);
        /* Exit 3: the parent counts exactly one refusal. */
        fflush(stdout);
        exit(failures > 0 ? 1 : 3);
    }
    if (s != WEFT_SUCCESS)
        return;
    s = weft_store_barrier(st, "dup");
    CHECK(s == WEFT_SUCCESS, "barrier: %s", weft_status_string(s));
    if (proc != 0) {
        /* Hold the connection until the other claimant has given up. */
        struct timespec ts = {1, 100000000};
        nanosleep(&ts, NULL);
    }
    weft_store_close(st);
}

/* Rank 0 sets a key and closes at once; the others join later and still read it. */
static void rank_early_close(const scenario_t *sc, int rank)
{
    weft_store_t *st = NULL;
    if (rank != 0) {
        struct timespec ts = {0, 150000000};
        nanosleep(&ts, NULL);
    }
    weft_status_t s = weft_store_open(sc->addr, sc->port, rank, sc->nranks, 1, 4.0, &st);
    CHECK(s == WEFT_SUCCESS, "open: %s", weft_status_string(s));
    if (s != WEFT_SUCCESS)
        return;
    if (rank == 0) {
        CHECK(weft_store_set(st, "late", "still here", 10) == WEFT_SUCCESS, "set");
        uint64_t t0 = weft_now_ns();
        weft_store_close(st);
        double dt = elapsed_s(t0);
        CHECK(dt > 0.1 && dt < 2.0, "rank 0 close returned after %.3f s (others join at 0.15 s)",
              dt);
        return;
    }
    char buf[16];
    size_t len = 0;
    s = weft_store_get(st, "late", buf, sizeof buf, &len);
    CHECK(s == WEFT_SUCCESS && len == 10 && memcmp(buf, "still here", 10) == 0, "get: %s",
          weft_status_string(s));
    weft_store_close(st);
}

/* Rank 0 dies (SIGKILL) after a barrier; the others, waiting for a key, see PEER_LOST quickly
 * (the deadline is far away). */
static void rank_server_dies(const scenario_t *sc, int rank)
{
    weft_store_t *st = NULL;
    weft_status_t s = weft_store_open(sc->addr, sc->port, rank, sc->nranks, 0, 6.0, &st);
    CHECK(s == WEFT_SUCCESS, "open: %s", weft_status_string(s));
    if (s != WEFT_SUCCESS)
        return;
    s = weft_store_barrier(st, "up");
    if (rank == 0) {
        CHECK(s == WEFT_SUCCESS, "barrier: %s", weft_status_string(s));
        raise(SIGKILL);
    }
    uint64_t t0 = weft_now_ns();
    if (s == WEFT_SUCCESS) {
        char buf[4];
        s = weft_store_get(st, "never-set", buf, sizeof buf, NULL);
    }
    double dt = elapsed_s(t0);
    CHECK(s == WEFT_ERR_PEER_LOST, "get after the server died: %s", weft_status_string(s));
    CHECK(dt < 2.0, "PEER_LOST took %.3f s", dt);
    CHECK(weft_store_set(st, "x", "y", 1) == WEFT_ERR_PEER_LOST, "later call not PEER_LOST");
    weft_store_close(st);
}

/* Nobody serves the port: the client keeps retrying and times out at its deadline. */
static void rank_no_server(const scenario_t *sc, int rank)
{
    weft_store_t *st = NULL;
    uint64_t t0 = weft_now_ns();
    weft_status_t s = weft_store_open(sc->addr, sc->port, 1, 2, 0, 0.4, &st);
    double dt = elapsed_s(t0);
    CHECK(s == WEFT_ERR_TIMEOUT && dt > 0.38 && dt < 1.5, "open with no server: %s after %.3f s",
          weft_status_string(s), dt);
}

/* Rank 0 runs out of descriptors after its server started (listening socket and eventfd fit,
 * its own client socket does not): weft_store_open fails with WEFT_ERR_SYSTEM at once, the
 * server is stopped without waiting for the 5 s deadline, and nothing leaks. */
static void rank_no_fds(const scenario_t *sc, int rank)
{
    int lowest = dup(0);
    CHECK(lowest >= 0, "dup: %s", strerror(errno));
    close(lowest);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)lowest + 2;
    /* nofile_lowerable() said this works here. */
    int err = setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : errno;
    CHECK(err == 0, "setrlimit(RLIMIT_NOFILE, %d): %s", lowest + 2, strerror(err));
    if (err != 0)
        return;
    weft_store_t *st = NULL;
    uint64_t t0 = weft_now_ns();
    weft_status_t s = weft_store_open(sc->addr, sc->port, 0, sc->nranks, 0, 5.0, &st);
    double dt = elapsed_s(t0);
    CHECK(s == WEFT_ERR_SYSTEM && st == NULL, "open with no descriptor left: %s",
          weft_status_string(s));
    CHECK(dt < 1.0, "failed open took %.3f s (deadline 5 s)", dt);
    if (s == WEFT_SUCCESS)
        weft_store_close(st);
}

/* Send all of buf on fd (blocking). Returns 0, or -1. */
static int send_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A GET message for key into buf; returns its length. */
static size_t get_message(uint8_t *buf, const char *key)
{
    size_t key_len = strlen(key);
    store_put_u32(buf, (uint32_t)(3 + key_len));
    buf[STORE_HDR_BYTES] = STORE_MSG_GET;
    store_put_u16(buf + STORE_HDR_BYTES + 1, (uint16_t)key_len);
    memcpy(buf + STORE_HDR_BYTES + 3, key, key_len);
    return STORE_HDR_BYTES + 3 + key_len;
}

/* Process 1 speaks the wire protocol itself: it joins as rank 1, then sends a second GET while
 * its first waits for a key nobody sets (a client must read each answer before it sends again).
 * The server must drop the connection at once rather than park GETs without bound; rank 0's
 * close then returns as soon as rank 1 is gone. */
static void rank_get_flood(const scenario_t *sc, int rank)
{
    if (rank == 0) {
        weft_store_t *st = NULL;
        weft_status_t s = weft_store_open(sc->addr, sc->port, 0, sc->nranks, 5, 4.0, &st);
        CHECK(s == WEFT_SUCCESS, "rank 0 open: %s", weft_status_string(s));
        if (s == WEFT_SUCCESS)
            weft_store_close(st);
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sc->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = -1;
    uint64_t deadline = weft_deadline_after_s(3.0);
    while (weft_now_ns() < deadline) { /* until rank 0's server listens */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        close(fd);
        fd = -1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK(fd >= 0, "could not connect to rank 0's server");
    if (fd < 0)
        return;
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t msg[64], reply[STORE_HDR_BYTES + STORE_WELCOME_BYTES];
    store_put_u32(msg, STORE_HELLO_BYTES);
    msg[STORE_HDR_BYTES] = STORE_MSG_HELLO;
    const uint32_t hello[] = {STORE_MAGIC, STORE_VERSION, 1, (uint32_t)sc->nranks, 5};
    for (int i = 0; i < 5; i++)
        store_put_u32(msg + STORE_HDR_BYTES + 1 + 4 * i, hello[i]);
    CHECK(send_all(fd, msg, STORE_HDR_BYTES + STORE_HELLO_BYTES) == 0 &&
              recv(fd, reply, sizeof reply, MSG_WAITALL) == (ssize_t)sizeof reply &&
              reply[STORE_HDR_BYTES] == STORE_MSG_WELCOME,
          "handshake as rank 1 failed");
    CHECK(send_all(fd, msg, get_message(msg, "never-set")) == 0, "first GET not sent");
    CHECK(send_all(fd, msg, get_message(msg, "second")) == 0, "second GET not sent");
    uint64_t t0 = weft_now_ns();
    ssize_t n = recv(fd, reply, 1, 0);
    double dt = elapsed_s(t0);
    CHECK(n == 0 || (n < 0 && errno == ECONNRESET),
          "a GET sent before the answer to the last one: the connection stayed open (recv %zd, "
          "%s, after %.3f s)",
          n, n < 0 ? strerror(errno) : "data", dt);
    close(fd);
}

/* Connect to the loopback port, retrying until rank 0's server listens (3 s at most). Returns the
 * socket (blocking), or -1. */
static int connect_loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint64_t deadline = weft_deadline_after_s(3.0);
    while (weft_now_ns() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#define IDLE_CONNS (STORE_PENDING_MAX(2) + 2)
#define HELLO_WINDOW_S ((double)STORE_HELLO_WINDOW_NS / 1e9)

/* Process 2 opens IDLE_CONNS connections to rank 0's server that never complete a HELLO (the
 * last two send part of one: two bytes of a header, and a header with half its body), two more
 * than the server keeps waiting; rank 1 joins after them. Every idle connection must be closed
 * within the HELLO window (plus 1 s) of its opening, the two oldest within 1 s (the cap), while
 * the ranks hold the store open far longer; and the ranks must join and meet. */
static void rank_idle(const scenario_t *sc, int proc)
{
    if (proc < 2) {
        weft_store_t *st = NULL;
        if (proc == 1)
            sleep_s(0.5); /* after the idle connections */
        weft_status_t s = weft_store_open(sc->addr, sc->port, proc, 2, 6, 7.0, &st);
        CHECK(s == WEFT_SUCCESS, "rank %d open: %s", proc, weft_status_string(s));
        if (s != WEFT_SUCCESS)
            return;
        s = weft_store_barrier(st, "up");
        CHECK(s == WEFT_SUCCESS, "barrier up: %s", weft_status_string(s));
        sleep_s(HELLO_WINDOW_S + 2.0); /* the server runs on while the idle ones are checked */
        s = weft_store_barrier(st, "down");
        CHECK(s == WEFT_SUCCESS, "barrier down: %s", weft_status_string(s));
        weft_store_close(st);
        return;
    }
    int fds[IDLE_CONNS];
    double closed_s[IDLE_CONNS];
    int n = 0;
    for (; n < IDLE_CONNS; n++) {
        fds[n] = connect_loopback(sc->port);
        closed_s[n] = -1;
        if (fds[n] < 0)
            break;
    }
    CHECK(n == IDLE_CONNS, "connection %d of %d to rank 0's server failed", n, IDLE_CONNS);
    uint64_t t0 = weft_now_ns(); /* every connection is open */
    uint8_t part[STORE_HDR_BYTES + 8];
    store_put_u32(part, STORE_HELLO_BYTES);
    part[STORE_HDR_BYTES] = STORE_MSG_HELLO;
    store_put_u32(part + STORE_HDR_BYTES + 1, STORE_MAGIC);
    if (n == IDLE_CONNS) {
        CHECK(send_all(fds[n - 2], part, 2) == 0, "part of a header not sent");
        CHECK(send_all(fds[n - 1], part, sizeof part) == 0, "part of a HELLO not sent");
    }
    int open = n;
    while (open > 0 && elapsed_s(t0) < HELLO_WINDOW_S + 1.0) {
        struct pollfd p[IDLE_CONNS];
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = closed_s[i] < 0 ? fds[i] : -1, .events = POLLIN};
        if (poll(p, (nfds_t)n, 20) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (p[i].revents == 0)
                continue;
            uint8_t b;
            ssize_t got = recv(fds[i], &b, 1, MSG_DONTWAIT);
            CHECK(got <= 0, "the server wrote to connection %d, which sent no HELLO", i);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                closed_s[i] = elapsed_s(t0);
                open--;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        CHECK(closed_s[i] >= 0, "idle connection %d of %d still open after %.1f s (window %.1f s)",
              i, n, elapsed_s(t0), HELLO_WINDOW_S);
        if (i < 2)
            CHECK(closed_s[i] >= 0 && closed_s[i] < 1.0,
                  "connection %d, one of the two oldest past the cap of %d, closed after %.3f s", i,
                  STORE_PENDING_MAX(2), closed_s[i]);
        close(fds[i]);
    }
}

/* Rank 0 has descriptors for its store and for rank 1's connection, and two more. Process 2
 * opens many connections that never speak before rank 1 joins: they fill rank 0's descriptors,
 * so accept fails (EMFILE). The server must shed them and keep accepting, and rank 1 must join
 * and meet rank 0. */
static void rank_idle_no_fds(const scenario_t *sc, int proc)
{
    if (proc == 2) {
        sleep_s(0.2); /* rank 0 has joined its own server */
        int fds[16];
        int n = 0;
        for (; n < 16; n++)
            if ((fds[n] = connect_loopback(sc->port)) < 0)
                break;
        CHECK(n == 16, "connection %d of 16 to rank 0's server failed", n);
        sleep_s(3.0); /* until after rank 1 joined (or gave up) */
        for (int i = 0; i < n; i++)
            close(fds[i]);
        return;
    }
    struct rlimit old;
    if (proc == 0) {
        /* The numbers store_open takes: listener, eventfd, rank 0's socket and the server's end
         * of it, rank 1's; and two more. */
        int taken[7];
        int k = 0;
        while (k < 7 && (taken[k] = dup(0)) >= 0)
            k++;
        int top = k > 0 ? taken[k - 1] : -1;
        while (k > 0)
            close(taken[--k]);
        getrlimit(RLIMIT_NOFILE, &old);
        struct rlimit rl = old;
        rl.rlim_cur = (rlim_t)top + 1;
        /* nofile_lowerable() said this works here. */
        int err = top < 0 ? EMFILE : setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : errno;
        CHECK(err == 0, "setrlimit(RLIMIT_NOFILE, %d): %s", top + 1, strerror(err));
        if (err != 0)
            return;
    } else {
        sleep_s(0.6); /* after the idle connections */
    }
    weft_store_t *st = NULL;
    weft_status_t s = weft_store_open(sc->addr, sc->port, proc, 2, 8, 5.0, &st);
    CHECK(s == WEFT_SUCCESS, "rank %d open: %s", proc, weft_status_string(s));
    if (s == WEFT_SUCCESS) {
        s = weft_store_barrier(st, "joined");
        CHECK(s == WEFT_SUCCESS, "rank %d barrier: %s", proc, weft_status_string(s));
        weft_store_close(st);
    }
    if (proc == 0)
        setrlimit(RLIMIT_NOFILE, &old); /* room for what the exit needs (LeakSanitizer) */
}

/* Whether a process may lower its own RLIMIT_NOFILE to a few descriptors, as the two scenarios
 * that run rank 0 out of descriptors do (Valgrind, for one, refuses: it keeps descriptors of its
 * own). Tried in a child, so this process keeps its limit. With 0, why gets the reason. */
static int nofile_lowerable(char *why, size_t cap)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, cap, "fork: %s", strerror(errno));
        return 0;
    }
    if (pid == 0) {
        int lowest = dup(0);
        if (lowest < 0)
            _exit(255);
        close(lowest);
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = (rlim_t)lowest + 2;
        _exit(setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : errno & 0xff);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        continue;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    if (code == 0)
        return 1;
    if (code == 255)
        snprintf(why, cap, "the probe process failed (wait status %d)", st);
    else
        snprintf(why, cap, "setrlimit(RLIMIT_NOFILE) to a few descriptors: %s", strerror(code));
    return 0;
}

static void check_open_arguments(void)
{
    weft_store_t *st = (weft_store_t *)&st;
    weft_store_t *const poison = st;
    CHECK(weft_store_open(NULL, 1234, 0, 1, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT, "NULL addr");
    CHECK(weft_store_open("", 1234, 0, 1, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT, "empty addr");
    CHECK(weft_store_open("127.0.0.1", 0, 0, 1, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "port 0");
    CHECK(weft_store_open("127.0.0.1", 65536, 0, 1, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "port 65536");
    CHECK(weft_store_open("127.0.0.1", 1234, 1, 1, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "rank 1 of 1");
    CHECK(weft_store_open("127.0.0.1", 1234, -1, 2, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "rank -1");
    CHECK(weft_store_open("127.0.0.1", 1234, 0, 0, 0, 1.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "nranks 0");
    CHECK(weft_store_open("127.0.0.1", 1234, 0, 1, 0, 0.0, &st) == WEFT_ERR_INVALID_ARGUMENT,
          "timeout 0");
    CHECK(weft_store_open("127.0.0.1", 1234, 0, 1, 0, 1.0, NULL) == WEFT_ERR_INVALID_ARGUMENT,
          "NULL store_out");
    CHECK(st == poison, "store_out written on failure");
    CHECK(weft_store_set(NULL, "k", "v", 1) == WEFT_ERR_INVALID_ARGUMENT, "NULL store");
    weft_store_close(NULL);
}

int main(int argc, char **argv)
{
    seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    printf("test_bootstrap: seed %llu\n", (unsigned long long)seed);
    /* Expected failures (timeouts, refused handshakes) would otherwise log as errors; the checks
     * print weft_last_error() when something unexpected fails. */
    setenv("WEFT_LOG_LEVEL", "none", 0);
    signal(SIGPIPE, SIG_IGN);

    int bad = 0;
    check_open_arguments();
    bad += failures;

    static const int counts[] = {1, 2, 3, 8};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "basic n=%d", counts[i]);
        scenario_t sc = {name, "127.0.0.1", free_port(AF_INET), counts[i], counts[i]};
        bad += run_clean(&sc, rank_basic);
    }
    scenario_t host = {"basic n=3 localhost", "localhost", free_port(AF_INET), 3, 3};
    bad += run_clean(&host, rank_basic);
    int port6 = free_port(AF_INET6);
    if (port6 > 0) {
        scenario_t v6 = {"basic n=2 ::1", "::1", port6, 2, 2};
        bad += run_clean(&v6, rank_basic);
    } else {
        printf("SKIP: basic n=2 ::1: no IPv6 loopback\n");
        skipped++;
    }

    scenario_t timeout = {"get timeout", "127.0.0.1", free_port(AF_INET), 2, 2};
    bad += run_clean(&timeout, rank_get_timeout);
    scenario_t mismatch = {"handshake mismatch", "127.0.0.1", free_port(AF_INET), 2, 2};
    bad += run_clean(&mismatch, rank_mismatch);
    scenario_t early = {"rank 0 closes early", "127.0.0.1", free_port(AF_INET), 3, 3};
    bad += run_clean(&early, rank_early_close);
    scenario_t none = {"no server", "127.0.0.1", free_port(AF_INET), 2, 1};
    bad += run_clean(&none, rank_no_server);

    scenario_t flood = {"GET before the last answer", "127.0.0.1", free_port(AF_INET), 2, 2};
    bad += run_clean(&flood, rank_get_flood);

    char why[128];
    int lowerable = nofile_lowerable(why, sizeof why);
    scenario_t nofd = {"rank 0 out of descriptors", "127.0.0.1", free_port(AF_INET), 2, 1};
    if (lowerable) {
        bad += run_clean(&nofd, rank_no_fds);
    } else {
        printf("SKIP: %s: %s\n", nofd.name, why);
        skipped++;
    }

    scenario_t idle = {"connections without a HELLO", "127.0.0.1", free_port(AF_INET), 2, 3};
    bad += run_clean(&idle, rank_idle);
    scenario_t idle_nofd = {"idle connections fill rank 0's descriptors", "127.0.0.1",
                            free_port(AF_INET), 2, 3};
    if (lowerable) {
        bad += run_clean(&idle_nofd, rank_idle_no_fds);
    } else {
        printf("SKIP: %s: %s\n", idle_nofd.name, why);
        skipped++;
    }

    int st[MAX_PROCS];
    /* Rank 0 dies of SIGKILL on purpose; the others must pass. */
    scenario_t dies = {"server dies", "127.0.0.1", free_port(AF_INET), 3, 3};
    int b = run(&dies, rank_server_dies, st);
    if (!b) {
        b += expect(&dies, st, 0, 0, SIGKILL);
        b += expect(&dies, st, 1, 0, 0);
        b += expect(&dies, st, 2, 0, 0);
    }
    bad += report(&dies, b);

    /* Duplicate rank: rank 0 passes, and of the two claimants of rank 1 one joins (exit 0) and
     * the other is refused (exit 3). */
    scenario_t dup = {"duplicate rank", "127.0.0.1", free_port(AF_INET), 2, 3};
    b = run(&dup, rank_duplicate, st);
    if (!b) {
        b += expect(&dup, st, 0, 0, 0);
        int first_joined = st[1] != OVERRAN && WIFEXITED(st[1]) && WEXITSTATUS(st[1]) == 0;
        b += expect(&dup, st, 1, first_joined ? 0 : 3, 0);
        b += expect(&dup, st, 2, first_joined ? 3 : 0, 0);
    }
    bad += report(&dup, b);

    if (skipped)
        printf("test_bootstrap: %s, %d scenario(s) skipped (see the SKIP lines)\n",
               bad ? "FAILED" : "passed", skipped);
    else
        printf("test_bootstrap: %s\n", bad ? "FAILED" : "passed");
    return bad ? 1 : 0;
}
