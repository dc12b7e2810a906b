/*
 * test_call_errors.c - an error raised inside a public call by an internal function that does not
 * know the call reaches the caller with a message that starts with the call's name (API.md),
 * keeping the inner detail after it.
 *
 * weft_comm_init: the host executor's helper thread cannot start. pthread_create is wrapped
 * (-Wl,--wrap=pthread_create, see tests/CMakeLists.txt): a first init counts the threads an init
 * starts, the helper being the last (the executor is created last, WEFT_HOST_WORKERS 2 makes one
 * helper); a second init fails that one with EAGAIN, as a thread limit would. One process, one
 * rank. Also weft_error_prefix itself: the prefix, a text that has it already, an empty text, and
 * a text that has to be truncated to fit.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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

static void test_init_executor(void)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.nranks = 1;
    cfg.backend = WEFT_BACKEND_HOST;
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

int main(void)
{
    test_prefix();
    test_init_executor();
    if (failures != 0)
        printf("test_call_errors: %d checks failed\n", failures);
    else
        printf("test_call_errors: PASS\n");
    return failures != 0;
}
