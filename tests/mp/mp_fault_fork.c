/*
 * mp_fault_fork.c - a forked child (a DataLoader worker, say) and its parent's communicator.
 *
 * A forked child inherits every descriptor; if it kept a rank's control sockets, the rank's
 * peers would see no end-of-file when the rank dies, and notice only at their timeout. Cases
 * (MP_FORK_CASE, a test-only variable):
 *
 *   kill (default), exit: the last rank forks a child that only sleeps, then dies: SIGKILL, or
 *      exit(0) without weft_comm_destroy. Every survivor's next barrier must return
 *      WEFT_ERR_PEER_LOST within DETECT_LIMIT_S (the suite runs it with WEFT_TIMEOUT_S=60), then
 *      weft_comm_destroy must return promptly. Survivors print a PASS line; the victim's child
 *      outlives the job until weftrun kills what the ranks left behind. Needs 2 ranks.
 *   calls: rank 0 forks a child that calls the public functions on the inherited communicator
 *      (weft_torch_bind too, which before checked only the backend).
 *      Each must return WEFT_ERR_INVALID_ARGUMENT within CHILD_CALL_LIMIT_S, saying the
 *      communicator was forked (weft.h, "Fork"), while the weft memory the child inherited stays
 *      readable; the child reports through a pipe within CHILD_LIMIT_S. Then every rank
 *      all-reduces the buffer the child tried to free: the child's calls (weft_comm_abort and
 *      weft_comm_destroy included) must have left the parent's communicator untouched.
 *
 * Run through mp_fault.sh: weftrun exits 137 after the SIGKILL, 0 otherwise.
 */
#include "harness.h"
#include "weft_torch.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT 4099
#define CHILD_CALL_LIMIT_S 2.0
#define CHILD_LIMIT_S 10.0
#define DETECT_LIMIT_S 10.0
#define SLEEPER_S 600 /* longer than any timeout: only weftrun ends the victim's child */

/* One refused call in the child: WEFT_ERR_INVALID_ARGUMENT naming call, fast. */
static void expect_refused(mp_ctx_t *ctx, weft_status_t st, double dt, const char *call)
{
    if (mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, call, call))
        mp_check(ctx, strstr(weft_last_error(), "fork") != NULL,
                 "%s: weft_last_error() \"%s\" does not say the communicator was forked", call,
                 weft_last_error());
    mp_check(ctx, dt < CHILD_CALL_LIMIT_S, "%s took %.2f s in the forked child", call, dt);
}

/* Rank 0's child: every call on the inherited communicator is refused; the inherited memory
 * still reads what rank 0 wrote. Writes 'P' or 'F' to report_fd and exits. */
static void child_calls(mp_ctx_t *ctx, float *buf, int report_fd) __attribute__((noreturn));

static void child_calls(mp_ctx_t *ctx, float *buf, int report_fd)
{
    uint64_t failures = ctx->failures;
    weft_comm_t comm = ctx->comm;
    double t0;
    weft_status_t st;

    mp_case(ctx, "weft calls in a forked child");
    size_t wrong = 0;
    for (size_t i = 0; i < COUNT; i++)
        wrong += buf[i] != 1.0f;
    mp_check(ctx, wrong == 0, "%zu of %d elements of the inherited weft memory changed", wrong,
             COUNT);

    t0 = mp_now_s();
    st = weft_barrier(comm, NULL);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_barrier");
    t0 = mp_now_s();
    st = weft_all_reduce(comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_all_reduce");
    void *p = NULL;
    t0 = mp_now_s();
    st = weft_malloc(comm, &p, 4096);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_malloc");
    mp_check(ctx, p == NULL, "weft_malloc set *ptr to %p in the forked child", p);
    weft_stats_t stats;
    t0 = mp_now_s();
    st = weft_get_stats(comm, &stats);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_get_stats");
    t0 = mp_now_s();
    st = weft_free(comm, buf);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_free");
    t0 = mp_now_s();
    st = weft_torch_bind(comm);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_torch_bind");
    t0 = mp_now_s();
    st = weft_comm_abort(comm);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_comm_abort");
    t0 = mp_now_s();
    st = weft_comm_destroy(comm);
    expect_refused(ctx, st, mp_now_s() - t0, "weft_comm_destroy");
    mp_check(ctx, weft_comm_rank(comm) == ctx->rank && weft_comm_size(comm) == ctx->nranks,
             "weft_comm_rank/size gave %d of %d in the forked child", weft_comm_rank(comm),
             weft_comm_size(comm));

    char verdict = ctx->failures == failures ? 'P' : 'F';
    ssize_t n = write(report_fd, &verdict, 1);
    (void)n; /* nothing read: rank 0 reports the child as failed */
    _exit(0);
}

/* Rank 0: fork the calling child and wait for its report; the child is reaped here. */
static void run_calling_child(mp_ctx_t *ctx, float *buf)
{
    mp_case(ctx, "fork a child that calls weft");
    int fds[2];
    if (pipe(fds) != 0)
        mp_fatal(ctx, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        mp_fatal(ctx, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        child_calls(ctx, buf, fds[1]);
    }
    close(fds[1]);
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    char verdict = 0;
    if (poll(&pfd, 1, (int)(CHILD_LIMIT_S * 1000)) == 1 && read(fds[0], &verdict, 1) != 1)
        verdict = 0;
    close(fds[0]);
    if (verdict == 'P')
        ctx->checks++;
    else if (verdict == 'F')
        mp_fail(ctx, "the forked child's weft calls failed their checks (its FAIL lines above)");
    else
        mp_fail(ctx, "the forked child did not report within %.0f s (a weft call hung?)",
                CHILD_LIMIT_S);
    if (verdict != 'P')
        kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        continue;
}

/* MP_FORK_CASE=calls: rank 0's child calls weft, then every rank checks its communicator. */
static void case_calls(mp_ctx_t *ctx, float *buf)
{
    if (ctx->rank == 0)
        run_calling_child(ctx, buf);
    mp_case(ctx, "all_reduce after the child's calls");
    mp_ok(ctx, weft_all_reduce(ctx->comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL),
          "weft_all_reduce");
    size_t wrong = 0;
    for (size_t i = 0; i < COUNT; i++)
        wrong += buf[i] != (float)ctx->nranks;
    mp_check(ctx, wrong == 0, "%zu of %d elements are not %d", wrong, COUNT, ctx->nranks);
}

/* MP_FORK_CASE=kill or exit: the last rank forks a sleeping child, then dies (SIGKILL, or exit
 * without weft_comm_destroy); the survivors must notice at once. */
static void case_victim(mp_ctx_t *ctx, int by_exit)
{
    int victim = ctx->nranks - 1;
    if (ctx->rank == victim) {
        pid_t pid = fork();
        if (pid < 0)
            mp_fatal(ctx, "fork: %s", strerror(errno));
        if (pid == 0) {
            sleep(SLEEPER_S); /* holds whatever descriptors it inherited */
            _exit(0);
        }
        mp_sleep_ms(200);
        if (by_exit)
            exit(0); /* no weft_comm_destroy, no PASS line */
        kill(getpid(), SIGKILL);
    }

    mp_case(ctx, "barrier while rank %d dies with a forked child alive", victim);
    double t0 = mp_now_s();
    weft_status_t st = weft_barrier(ctx->comm, NULL);
    double dt = mp_now_s() - t0;
    mp_check(ctx, st == WEFT_ERR_PEER_LOST, "barrier returned %s, expected peer lost: %s",
             weft_status_string(st), weft_last_error());
    mp_check(ctx, dt < DETECT_LIMIT_S, "barrier took %.2f s to notice the dead peer", dt);
    mp_note(ctx, "barrier -> %s after %.2f s", weft_status_string(st), dt);

    mp_case(ctx, "weft_comm_destroy after the peer died");
    mp_comm_close_within(ctx, DETECT_LIMIT_S);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_fork");
    const char *which = getenv("MP_FORK_CASE"); /* test-only: calls, kill (default) or exit */
    if (!which || which[0] == '\0')
        which = "kill";
    int calls = strcmp(which, "calls") == 0;
    if (!calls && strcmp(which, "kill") != 0 && strcmp(which, "exit") != 0)
        mp_fatal(&ctx, "MP_FORK_CASE=%s is not calls, kill or exit", which);
    if (!calls && ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
    float *buf = NULL;
    mp_ok(&ctx, weft_malloc(ctx.comm, (void **)&buf, COUNT * sizeof *buf), "weft_malloc");
    if (!buf)
        mp_fatal(&ctx, "weft_malloc returned NULL");
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = 1.0f;
    mp_case(&ctx, "barrier before the fork");
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");
    if (calls)
        case_calls(&ctx, buf);
    else
        case_victim(&ctx, strcmp(which, "exit") == 0);
    return mp_finish(&ctx);
}
