/*
 * test_fork_guard.c - weft's process-wide locks are held across fork() from the library's load
 * on, so a fork on one thread while another thread makes the first weft call that takes one
 * never gives the child a copy of it locked.
 *
 * Before, each module registered its fork handlers at its first use (pthread_once), and a fork
 * that was already under way missed them: glibc (2.35 on) lets a prepare handler run while other
 * threads register handlers, and runs only those registered when the fork began. The test makes
 * that interleaving on purpose: a prepare handler of its own, registered in main (after weft's,
 * which run at load time now, so it runs before them), has another thread make the first call
 * of a module and waits until that thread holds the module's lock, stalled in a wrapped function
 * (-Wl,--wrap, tests/CMakeLists.txt) for 0.3 s. The child then takes the same lock, under a 3 s
 * alarm: it must get it (weft's prepare handler waited for the stall to end; the child handler
 * released it), not die of SIGALRM on a copy held by a thread it does not have. Two modules:
 *   - util/forksafe.c's descriptor table: weft_forksafe_socket, stalled in weft_array_grow;
 *   - op/moe_dispatch.c's handle list: weft_moe_handle_release of a CUDA handle, stalled in
 *     weft_comm_owned (which then refuses the release, so nothing reaches CUDA).
 * core/comm.c's list of live communicators and api/api_torch.c's allocator state are guarded
 * the same way (util/forksafe.h) but have no call to stall under their locks without a real
 * communicator.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "op/moe.h"
#include "util/clock.h"
#include "util/forksafe.h"
#include "util/log.h"

#define STALL_NS 300000000ull /* how long the first call holds the module's lock */
#define WAIT_NS 5000000000ull /* the prepare handler's wait for the stall to begin */
#define CHILD_ALARM_S 3       /* the child's limit for taking the lock */

static _Atomic int fork_armed; /* the next fork's prepare handler starts the call */
static _Atomic int go;         /* the calling thread may make its call */
static _Atomic int stall;      /* the next wrapped call stalls, holding the lock */
static _Atomic int stalled;    /* it is stalling now (or has) */

int __real_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem);
int __wrap_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem);
weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call);

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Stall here when armed: the caller holds its module's lock. */
static void maybe_stall(void)
{
    int expected = 1;
    if (!atomic_compare_exchange_strong(&stall, &expected, 0))
        return;
    atomic_store(&stalled, 1);
    uint64_t until = weft_now_ns() + STALL_NS;
    while (weft_now_ns() < until)
        sleep_ms(1);
}

int __wrap_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem)
{
    maybe_stall();
    return __real_weft_array_grow(data, cap, need, elem);
}

weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call)
{
    maybe_stall();
    return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: refused by the test's stub", call);
}

static void prepare(void)
{
    int expected = 1;
    if (!atomic_compare_exchange_strong(&fork_armed, &expected, 0))
        return;
    atomic_store(&go, 1);
    uint64_t until = weft_now_ns() + WAIT_NS;
    while (!atomic_load(&stalled) && weft_now_ns() < until)
        sleep_ms(1);
}

typedef struct scenario {
    const char *name;
    void (*first_call)(void);     /* on another thread, during the fork's prepare handlers */
    int (*child_take_lock)(void); /* in the child: takes the lock once; 0 on success */
} scenario_t;

static void *caller(void *arg)
{
    const scenario_t *s = arg;
    while (!atomic_load(&go))
        sleep_ms(1);
    s->first_call();
    return NULL;
}

static void run(const scenario_t *s)
{
    atomic_store(&go, 0);
    atomic_store(&stalled, 0);
    atomic_store(&stall, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, caller, (void *)s) != 0) {
        CHECK(0, "%s: pthread_create failed", s->name);
        return;
    }
    atomic_store(&fork_armed, 1);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(CHILD_ALARM_S);
        _exit(s->child_take_lock() == 0 ? 0 : 2);
    }
    CHECK(atomic_load(&stalled), "%s: the first call did not reach its stall during the fork",
          s->name);
    pthread_join(t, NULL);
    if (pid < 0) {
        CHECK(0, "%s: fork failed", s->name);
        return;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "%s: the child %s taking the lock (the fork copied it held by the other thread)", s->name,
          WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung (SIGALRM after 3 s)"
                                                             : "failed");
}

/* util/forksafe.c: the descriptor table. */
static void forksafe_first(void)
{
    weft_forksafe_close(weft_forksafe_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static int forksafe_child(void)
{
    int fd = weft_forksafe_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    weft_forksafe_close(fd);
    return fd >= 0 ? 0 : -1;
}

/* op/moe_dispatch.c: the handle list. A CUDA handle (dev set) of a zeroed communicator, whose
 * release asks weft_comm_owned under the lock. */
static struct weft_comm *moe_comm;
static struct weft_moe_handle *moe_handle;

static void moe_first(void)
{
    (void)weft_moe_handle_release(moe_handle); /* refused by the stub: the handle stays */
}

static int moe_child(void)
{
    return weft_moe_handle_comm(moe_handle) == moe_comm ? 0 : -1;
}

int main(void)
{
    if (pthread_atfork(prepare, NULL, NULL) != 0) {
        printf("FAIL: pthread_atfork failed\n");
        return 1;
    }
    moe_comm = calloc(1, sizeof *moe_comm);
    moe_handle = calloc(1, sizeof *moe_handle);
    if (!moe_comm || !moe_handle) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    moe_handle->comm = moe_comm;
    moe_handle->dev = (void *)(uintptr_t)0x100000; /* never dereferenced: the release is refused */

    static const scenario_t scenarios[] = {
        {"forksafe table (weft_forksafe_socket)", forksafe_first, forksafe_child},
        {"MoE handle list (weft_moe_handle_release)", moe_first, moe_child},
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        run(&scenarios[i]);

    free(moe_handle);
    free(moe_comm);
    if (failures) {
        printf("test_fork_guard: %d checks failed\n", failures);
        return 1;
    }
    printf("test_fork_guard: ok\n");
    return 0;
}
