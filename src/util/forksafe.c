/*
 * forksafe.c - the table of descriptors closed in a forked child, the fork generation, and the
 * guarded locks (see forksafe.h).
 *
 * One set of fork handlers serves the table and the guards; a constructor registers it when the
 * library is loaded. The guards are a fixed array filled by the modules' constructors, in any
 * order relative to this file's: it is static data, needing no initialisation. The table is a
 * plain array of descriptor numbers: a process holds a few per communicator (one control socket
 * per peer and an eventfd), and rank 0 briefly one store connection per rank while a
 * communicator is created, so linear removal is cheap.
 */
#include "util/forksafe.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/array.h"

static int handlers_err; /* pthread_atfork's result; written once, at load time */

typedef struct guard {
    pthread_mutex_t *mu;
    void (*child_reset)(void);
} guard_t;

/* Written by constructors only. A fork on another thread of a program that loads the library
 * (dlopen) may run the handlers while they are written: the count is published after its entry,
 * and the handlers of one fork use the count its prepare handler read. */
static guard_t guards[WEFT_FORKSAFE_GUARDS_MAX];
static _Atomic size_t nguards;
/* The guards the prepare handler of this thread's fork took, for its parent or child handler
 * (same thread; the child's copy). Per thread: glibc lets the prepare handlers of two forks run
 * at once (it releases its own lock around each), and the second then waits for the guards. */
static _Thread_local size_t nheld;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static int *table;       /* open descriptors to close in a child; under table_mu */
static size_t table_n;   /* entries in use */
static size_t table_cap; /* entries allocated */

static _Atomic uint32_t generation;

static void before_fork(void)
{
    nheld = atomic_load_explicit(&nguards, memory_order_acquire);
    for (size_t i = 0; i < nheld; i++)
        pthread_mutex_lock(guards[i].mu);
    pthread_mutex_lock(&table_mu);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&table_mu);
    for (size_t i = nheld; i-- > 0;)
        pthread_mutex_unlock(guards[i].mu);
}

/* The child has one thread, this one, which holds every guard and table_mu since before_fork. */
static void after_fork_child(void)
{
    for (size_t i = 0; i < table_n; i++)
        close(table[i]);
    table_n = 0;
    atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed);
    pthread_mutex_unlock(&table_mu);
    for (size_t i = nheld; i-- > 0;) {
        if (guards[i].child_reset)
            guards[i].child_reset();
        pthread_mutex_unlock(guards[i].mu);
    }
}

__attribute__((constructor)) static void register_handlers(void)
{
    handlers_err = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void weft_forksafe_guard(pthread_mutex_t *mu, void (*child_reset)(void))
{
    size_t n = atomic_load_explicit(&nguards, memory_order_relaxed);
    if (n == WEFT_FORKSAFE_GUARDS_MAX) {
        fputs("weft: weft_forksafe_guard: more than WEFT_FORKSAFE_GUARDS_MAX guards\n", stderr);
        abort();
    }
    guards[n] = (guard_t){mu, child_reset};
    atomic_store_explicit(&nguards, n + 1, memory_order_release);
}

/* Lock the table with room for one more entry. 0, or -1 with errno set (nothing locked). */
static int table_begin(void)
{
    if (handlers_err != 0) {
        errno = handlers_err;
        return -1;
    }
    pthread_mutex_lock(&table_mu);
    if (weft_array_grow((void **)&table, &table_cap, table_n + 1, sizeof *table) != 0) {
        pthread_mutex_unlock(&table_mu);
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* Enter fd (the result of the system call made since table_begin; -1 if it failed) and unlock.
 * Returns fd, with the system call's errno. */
static int table_end(int fd)
{
    int err = errno;
    if (fd >= 0)
        table[table_n++] = fd;
    pthread_mutex_unlock(&table_mu);
    errno = err;
    return fd;
}

int weft_forksafe_socket(int domain, int type, int protocol)
{
    if (table_begin() != 0)
        return -1;
    return table_end(socket(domain, type, protocol));
}

int weft_forksafe_accept(int lsock, int flags)
{
    if (table_begin() != 0)
        return -1;
    return table_end(accept4(lsock, NULL, NULL, flags));
}

int weft_forksafe_eventfd(unsigned int initval, int flags)
{
    if (table_begin() != 0)
        return -1;
    return table_end(eventfd(initval, flags));
}

void weft_forksafe_close(int fd)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&table_mu);
    for (size_t i = 0; i < table_n; i++) {
        if (table[i] == fd) {
            table[i] = table[--table_n];
            break;
        }
    }
    close(fd);
    pthread_mutex_unlock(&table_mu);
}

uint32_t weft_forksafe_generation(void)
{
    return atomic_load_explicit(&generation, memory_order_relaxed);
}
