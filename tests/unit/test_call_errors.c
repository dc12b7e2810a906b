/*
 * test_call_errors.c - an error raised inside a public call by an internal function that does not
 * know the call reaches the caller with a message that starts with the call's name (weft.h),
 * keeping the inner detail after it.
 *
 * weft_comm_init: the host executor's helper thread cannot start. pthread_create is wrapped
 * (-Wl,--wrap=pthread_create, see tests/CMakeLists.txt): a first init counts the threads an init
 * starts, the helper being the last (the executor is created last, WEFT_HOST_WORKERS 2 makes one
 * helper); a second init fails that one with EAGAIN, as a thread limit would. With `staging` as
 * its argument (CTest runs it so with a 2 MiB window slice and an 8 MiB WEFT_STAGING_BYTES),
 * only the init whose staging scratch cannot fit: the registry's message must come named after
 * weft_comm_init and the scratch, not after weft_malloc.
 *
 * weft_malloc: the host provider's mapping of the memfd fails (mmap is wrapped too, failing the
 * MAP_FIXED mappings of a descriptor while armed): the provider's "mmap(memfd, ...)" text must
 * come after "weft_malloc: ". weft_free of a pointer it never returned: the registry's message
 * after "weft_free: ".
 *
 * One process, one rank. Also weft_error_prefix itself: the prefix, a text that has it already,
 * an empty text, and a text that has to be truncated to fit.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/log.h"
#include "weft.h"

#define CHECK_TRAILER() printf(" [last error: %s]\n", weft_last_error())
#include "check.h"

int __real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);

static int creates; /* calls so far; the thread calling weft_comm_init makes them all */
static int fail_at; /* the call that fails with EAGAIN, 0: none */

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

static int fail_fd_maps; /* armed: MAP_FIXED mappings of a descriptor fail with ENOMEM */

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (fail_fd_maps && fd >= 0 && (flags & MAP_FIXED)) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg)
{
    if (++creates == fail_at)
        return EAGAIN;
    return __real_pthread_create(thread, attr, fn, arg);
}

static void test_prefix(void)
{
    weft_error(WEFT_ERR_NO_MEMORY, "weft_partition: cannot allocate %d units", 512);
    CHECK(weft_error_prefix(WEFT_ERR_NO_MEMORY, "weft_all_gather") == WEFT_ERR_NO_MEMORY,
          "status not returned");
    CHECK(strcmp(weft_last_error(), "weft_all_gather: weft_partition: cannot allocate 512 units") ==
              0,
          "prefixed");
    weft_error_prefix(WEFT_ERR_NO_MEMORY, "weft_all_gather");
    CHECK(strcmp(weft_last_error(), "weft_all_gather: weft_partition: cannot allocate 512 units") ==
              0,
          "prefixed twice");
    weft_error_clear();
    weft_error_prefix(WEFT_ERR_SYSTEM, "weft_barrier");
    CHECK(strncmp(weft_last_error(), "weft_barrier: ", 14) == 0 && strlen(weft_last_error()) > 14,
          "empty text");
    char longer[1024];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    weft_error(WEFT_ERR_SYSTEM, "%s", longer);
    size_t full = strlen(weft_last_error());
    weft_error_prefix(WEFT_ERR_SYSTEM, "weft_broadcast");
    const char *msg = weft_last_error();
    CHECK(strncmp(msg, "weft_broadcast: xxx", 19) == 0 && strlen(msg) == full,
          "truncated: %zu bytes, %zu before", strlen(msg), full);
}

/* The configuration of the tests' communicators: one rank, host backend, defaults otherwise. */
static weft_config_t one_rank_config(void)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.nranks = 1;
    cfg.backend = WEFT_BACKEND_HOST;
    return cfg;
}

static void test_init_executor(void)
{
    weft_config_t cfg = one_rank_config();
    cfg.host_workers = 2;

    weft_comm_t comm = NULL;
    creates = 0;
    weft_status_t st = weft_comm_init(&comm, &cfg);
    CHECK(st == WEFT_SUCCESS, "counting init: %s", weft_status_string(st));
    if (st != WEFT_SUCCESS)
        return;
    int per_init = creates;
    weft_comm_destroy(comm);

    comm = NULL;
    creates = 0;
    fail_at = per_init;
    st = weft_comm_init(&comm, &cfg);
    fail_at = 0;
    const char *msg = weft_last_error();
    CHECK(st == WEFT_ERR_SYSTEM && comm == NULL, "failed helper thread: status %s",
          weft_status_string(st));
    CHECK(strncmp(msg, "weft_comm_init: ", 16) == 0, "the message does not start with the call");
    CHECK(strstr(msg, "pthread_create") && strstr(msg, strerror(EAGAIN)),
          "the inner detail is lost");
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);

    /* Nothing is left behind: the next init succeeds. */
    st = weft_comm_init(&comm, &cfg);
    CHECK(st == WEFT_SUCCESS, "init after the failure: %s", weft_status_string(st));
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
}

/* A communicator of one_rank_config; NULL (a failed check) if init fails. */
static weft_comm_t open_comm(void)
{
    weft_config_t cfg = one_rank_config();
    weft_comm_t comm = NULL;
    weft_status_t st = weft_comm_init(&comm, &cfg);
    CHECK(st == WEFT_SUCCESS, "init: %s", weft_status_string(st));
    return st == WEFT_SUCCESS ? comm : NULL;
}

static void test_malloc_free(void)
{
    weft_comm_t comm = open_comm();
    if (!comm)
        return;
    void *p = NULL;
    fail_fd_maps = 1;
    weft_status_t st = weft_malloc(comm, &p, (size_t)1 << 20);
    fail_fd_maps = 0;
    const char *msg = weft_last_error();
    CHECK(st == WEFT_ERR_NO_MEMORY && p == NULL, "weft_malloc with mmap failing: %s, ptr %p",
          weft_status_string(st), p);
    CHECK(strncmp(msg, "weft_malloc: ", 13) == 0, "the message does not start with the call");
    CHECK(strstr(msg, "mmap(memfd") && strstr(msg, strerror(ENOMEM)), "the inner detail is lost");

    /* Nothing is left behind: the next allocation succeeds. */
    st = weft_malloc(comm, &p, (size_t)1 << 20);
    CHECK(st == WEFT_SUCCESS && p != NULL, "weft_malloc after the failure: %s",
          weft_status_string(st));
    st = weft_free(comm, (char *)p + 64);
    msg = weft_last_error();
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "weft_free of an interior pointer: %s",
          weft_status_string(st));
    CHECK(strncmp(msg, "weft_free: ", 11) == 0 && strstr(msg, "is not the start"),
          "weft_free's message");
    CHECK(weft_free(comm, p) == WEFT_SUCCESS, "weft_free: %s", weft_last_error());
    CHECK(weft_comm_destroy(comm) == WEFT_SUCCESS, "destroy: %s", weft_last_error());
}

/* Run with a 2 MiB window slice and an 8 MiB staging scratch (tests/CMakeLists.txt). */
static void test_init_staging(void)
{
    weft_comm_t comm = NULL;
    weft_config_t cfg = one_rank_config();
    weft_status_t st = weft_comm_init(&comm, &cfg);
    const char *msg = weft_last_error();
    CHECK(st == WEFT_ERR_NO_MEMORY && comm == NULL, "init with a scratch past the slice: %s",
          weft_status_string(st));
    const char *want = "weft_comm_init: the staging scratch (WEFT_STAGING_BYTES): ";
    CHECK(strncmp(msg, want, strlen(want)) == 0, "the message does not start with \"%s\"", want);
    CHECK(strstr(msg, "exceed the window slice") && !strstr(msg, "weft_malloc"),
          "the inner detail is lost or names weft_malloc");
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (strcmp(argv[1], "staging") != 0) {
            fprintf(stderr, "usage: test_call_errors [staging]\n");
            return 2;
        }
        test_init_staging();
        printf("test_call_errors staging: %s\n", failures ? "FAIL" : "PASS");
        return failures != 0;
    }
    test_prefix();
    test_init_executor();
    test_malloc_free();
    if (failures != 0)
        printf("test_call_errors: %d checks failed\n", failures);
    else
        printf("test_call_errors: PASS\n");
    return failures != 0;
}
