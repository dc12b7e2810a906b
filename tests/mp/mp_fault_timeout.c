/*
 * mp_fault_timeout.c - an operation that a peer joins too late times out.
 *
 * A first communicator (default timeout) synchronises the ranks and is destroyed.
 *
 * Each wait of an operation has the whole timeout. On a communicator with timeout_s = 3, rank 0
 * stops every other rank (SIGSTOP), allocates a buffer (whose registration the stopped peers
 * cannot acknowledge) and broadcasts from it; a thread continues the peers after 2 s, and they
 * join the broadcast 4 s after the start. Rank 0's first-use wait and its handshake wait each
 * last about 2 s, 4 s together: the broadcast must succeed (and count one first-use wait), and
 * every rank must hold the data. (The margins are wide: ctest runs other jobs beside this one.)
 *
 * Then, on a communicator with timeout_s = 1, rank 0 sleeps 3 s before joining a broadcast from
 * rank 1. The others must get WEFT_ERR_TIMEOUT after about 1 s (between 0.9 and 2.5 s) - or,
 * from 3 ranks, WEFT_ERR_PEER_LOST at that time, when another waiting rank timed out first and
 * closed its connections - and their next operation must fail as well (the communicator is
 * unusable). They then free their buffers (the root's is the one rank 0 would read) and stay
 * alive. Rank 0's late broadcast must fail too (WEFT_ERR_PEER_LOST or WEFT_ERR_TIMEOUT: its
 * peers have given up) within 2.5 s, without reading the freed buffer: a rank that fails closes
 * its connections, so no unmap of its buffers reaches a peer (before, rank 0 saw no error, read
 * the unmapped buffer and crashed). All ranks destroy the communicator and exit 0 with a PASS
 * line (mp_fault.sh checks them). Needs at least 2 ranks.
 */
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "harness.h"

#define TIMEOUT_S 1.0
#define LATE_MS 3000.0
#define COUNT 4099
#define WAITS_TIMEOUT_S 3.0 /* two_waits' communicator */
#define STOP_MS 2000.0      /* the peers are stopped this long, then join STOP_MS later */

/* Sleep until mp_now_s() reaches t (CLOCK_MONOTONIC, absolute: a stop in between does not
 * delay the end). */
static void sleep_until(double t)
{
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Whether process pid is stopped (its state in /proc/PID/stat is 'T'). */
static int is_stopped(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int stopped = 0;
    if (fgets(line, sizeof line, f)) {
        const char *end = strrchr(line, ')'); /* the name may hold spaces and parentheses */
        stopped = end && end[1] == ' ' && end[2] == 'T';
    }
    fclose(f);
    return stopped;
}

/* The other ranks' pids, continued by resume_main at resume_at. */
typedef struct stopped {
    const int64_t *pids;
    int nranks;
    double resume_at;
} stopped_t;

static void *resume_main(void *arg)
{
    const stopped_t *s = arg;
    sleep_until(s->resume_at);
    for (int r = 1; r < s->nranks; r++)
        kill((pid_t)s->pids[r], SIGCONT);
    return NULL;
}

/* Two waits of one broadcast, each shorter than the timeout, together longer (file comment). */
static void two_waits(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "a broadcast whose first-use and handshake waits take %.0f ms each", STOP_MS);
    int64_t mine = getpid(), pids[64];
    if (n > 64)
        mp_fatal(ctx, "two_waits: at most 64 ranks");
    mp_ok(ctx, weft_all_gather(ctx->comm, &mine, pids, 1, WEFT_INT64, NULL), "weft_all_gather");
    /* When the peers join: rank 0's clock, shared (CLOCK_MONOTONIC is one clock per host). */
    double join_at = mp_now_s() + 2 * STOP_MS / 1e3;
    mp_ok(ctx, weft_broadcast(ctx->comm, &join_at, &join_at, 1, WEFT_FLOAT64, 0, NULL),
          "weft_broadcast");
    int32_t *buf = NULL;
    if (ctx->rank != 0) {
        sleep_until(join_at); /* stopped for the first half of it, wherever the stop lands */
        mp_ok(ctx, weft_malloc(ctx->comm, (void **)&buf, COUNT * 4), "weft_malloc");
        if (!buf)
            mp_fatal(ctx, "weft_malloc returned NULL");
        mp_ok(ctx, weft_broadcast(ctx->comm, buf, buf, COUNT, WEFT_INT32, 0, NULL),
              "weft_broadcast");
    } else {
        /* kill() only queues the stop: wait until it took effect, or a peer's registrar could
         * still acknowledge the registration below. */
        for (int r = 1; r < n; r++) {
            kill((pid_t)pids[r], SIGSTOP);
            double give_up = mp_now_s() + 10.0;
            while (!is_stopped((pid_t)pids[r]) && mp_now_s() < give_up)
                mp_sleep_ms(1);
            mp_check(ctx, is_stopped((pid_t)pids[r]), "rank %d (pid %lld) did not stop", r,
                     (long long)pids[r]);
        }
        stopped_t s = {pids, n, join_at - STOP_MS / 1e3};
        pthread_t th;
        if (pthread_create(&th, NULL, resume_main, &s) != 0)
            mp_fatal(ctx, "pthread_create");
        weft_stats_t before, after;
        mp_stats(ctx, &before);
        mp_ok(ctx, weft_malloc(ctx->comm, (void **)&buf, COUNT * 4), "weft_malloc");
        if (!buf)
            mp_fatal(ctx, "weft_malloc returned NULL");
        for (int i = 0; i < COUNT; i++)
            buf[i] = i * 7 + 1;
        double t0 = mp_now_s();
        weft_status_t st = weft_broadcast(ctx->comm, buf, buf, COUNT, WEFT_INT32, 0, NULL);
        double dt = mp_now_s() - t0;
        char why[256];
        snprintf(why, sizeof why, "%s", weft_last_error());
        pthread_join(th, NULL);
        mp_stats(ctx, &after);
        mp_check(ctx, st == WEFT_SUCCESS,
                 "broadcast with two %.0f ms waits (timeout %.1f s) returned %s after %.2f s: %s",
                 STOP_MS, WAITS_TIMEOUT_S, weft_status_string(st), dt, why);
        mp_check(ctx, dt > WAITS_TIMEOUT_S,
                 "the broadcast took %.2f s: the waits were not that long", dt);
        mp_check(ctx, after.first_use_waits == before.first_use_waits + 1,
                 "first_use_waits +%llu, not +1",
                 (unsigned long long)(after.first_use_waits - before.first_use_waits));
    }
    size_t wrong = 0;
    for (int i = 0; buf && i < COUNT; i++)
        wrong += buf[i] != i * 7 + 1;
    mp_check(ctx, wrong == 0, "%zu of %d broadcast elements wrong", wrong, COUNT);
    mp_ok(ctx, weft_free(ctx->comm, buf), "weft_free");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_timeout");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_reopen_with_timeout(&ctx, WAITS_TIMEOUT_S);
    two_waits(&ctx);
    mp_comm_reopen_with_timeout(&ctx, TIMEOUT_S);
    void *buf = NULL;
    mp_ok(&ctx, weft_malloc(ctx.comm, &buf, COUNT * 4), "weft_malloc");
    if (!buf)
        mp_fatal(&ctx, "weft_malloc returned NULL");
    mp_case(&ctx, "barrier with a 1 s timeout, everyone on time");
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");

    if (ctx.rank == 0) {
        mp_sleep_ms(LATE_MS);
        mp_case(&ctx, "broadcast from rank 1 joined %.0f ms late", LATE_MS);
        double t0 = mp_now_s();
        weft_status_t st = weft_broadcast(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, 1, NULL);
        double dt = mp_now_s() - t0;
        mp_check(&ctx, mp_lost_peer(st),
                 "late broadcast returned %s, expected peer lost or timeout",
                 weft_status_string(st));
        mp_check(&ctx, dt < 2.5, "late broadcast took %.2f s", dt);
    } else {
        mp_case(&ctx, "broadcast from rank 1 waiting for rank 0 (%.0f ms late)", LATE_MS);
        double t0 = mp_now_s();
        weft_status_t st = weft_broadcast(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, 1, NULL);
        double dt = mp_now_s() - t0;
        mp_check(&ctx, st == WEFT_ERR_TIMEOUT || (st == WEFT_ERR_PEER_LOST && ctx.nranks > 2),
                 "broadcast returned %s, expected %s: %s", weft_status_string(st),
                 weft_status_string(WEFT_ERR_TIMEOUT), weft_last_error());
        mp_check(&ctx, dt >= 0.9 * TIMEOUT_S && dt < 2.5,
                 "broadcast gave up after %.2f s with a %.1f s timeout", dt, TIMEOUT_S);
        /* Freed while rank 0 may still join and read it: the failed communicator must tell rank
         * 0 (its connections close) rather than unmap the buffer under its reads. */
        mp_ok(&ctx, weft_free(ctx.comm, buf), "weft_free after the timeout");
        mp_case(&ctx, "next operation after the timeout");
        t0 = mp_now_s();
        st = weft_barrier(ctx.comm, NULL);
        dt = mp_now_s() - t0;
        mp_check(&ctx, mp_lost_peer(st), "barrier after a timeout returned %s",
                 weft_status_string(st));
        mp_check(&ctx, dt < 2.5, "barrier after a timeout took %.2f s", dt);
        mp_sleep_ms(LATE_MS); /* alive (not destroyed) while rank 0 joins late */
    }
    /* weft_comm_destroy frees the weft_malloc buffer too; after the error it is local. */
    mp_case(&ctx, "weft_comm_destroy after the timeout");
    mp_comm_close_within(&ctx, 2.5);
    return mp_finish(&ctx);
}
