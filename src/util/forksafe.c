/*
 * forksafe.c - the table of descriptors closed in a forked child, and the fork generation (see
 * forksafe.h).
 *
 * The fork handlers are registered once, by the first call that creates a descriptor (so a
 * process that never opens a communicator, weftrun for one, registers none). The table is a
 * plain array of descriptor numbers: a process holds a few per communicator (one control socket
 * per peer and an eventfd), and rank 0 briefly one store connection per rank while a
 * communicator is created, so linear removal is cheap.
 */
#include "util/forksafe.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/array.h"

static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static int handlers_err; /* pthread_atfork's result; written once, under handlers_once */

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static int *table;       /* open descriptors to close in a child; under table_mu */
static size_t table_n;   /* entries in use */
static size_t table_cap; /* entries allocated */

static _Atomic uint32_t generation;

static void before_fork(void)
{
    pthread_mutex_lock(&table_mu);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&table_mu);
}

/* The child has one thread, this one, which holds table_mu since before_fork. */
static void after_fork_child(void)
{
    for (size_t i = 0; i < table_n; i++)
        close(table[i]);
    table_n = 0;
    atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed);
    pthread_mutex_unlock(&table_mu);
}

static void register_handlers(void)
{
    handlers_err = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Lock the table with room for one more entry. 0, or -1 with errno set (nothing locked). */
static int table_begin(void)
{
    pthread_once(&handlers_once, register_handlers);
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
