/*
 * forksafe.h - the descriptors a forked child must not keep, the fork generation that tells a
 * process whether it created a communicator or inherited it, and the process-wide locks held
 * across fork().
 *
 * fork() copies every descriptor, and a connection stays open while any process holds an end of
 * it. A child that keeps a copy of a control or store socket (a PyTorch DataLoader worker, say)
 * therefore keeps its parent's connections alive: when the parent dies, its peers see no
 * end-of-file while the child lives and notice the loss only at their timeout. Close-on-exec
 * (every descriptor weft opens has it) helps only a child that execs. So every socket and eventfd
 * that weft keeps is created through this module, which enters it in a process-wide table, and a
 * pthread_atfork child handler closes every descriptor of the table in the child. Closing drops
 * only the child's reference: the parent's connections are untouched (the child never calls
 * shutdown, which would end them for the parent too).
 *
 * Memory segments (memfds, the mappings of the shadow window and of the control blocks) are not
 * entered: a child that keeps them keeps memory alive, never a connection, and it may go on
 * reading weft memory it inherited (arrays over it in a DataLoader worker). They are not marked
 * MADV_DONTFORK for the same reason: the child would fault on those arrays.
 *
 * The child handler also advances the fork generation (0 in a process no fork() made). A
 * communicator records the generation it was created in and refuses every call in a process
 * whose generation differs (weft.h, "Fork").
 *
 * Only fork() runs the handlers: a child of vfork, posix_spawn or a raw clone keeps the
 * descriptors until it execs, when close-on-exec closes them.
 *
 * Locks: a fork copies every mutex as it is, and a copy held by a thread the child does not have
 * stays locked for ever. So each module's process-wide mutex is registered here as a guard
 * (weft_forksafe_guard): the prepare handler takes every guard and the table's mutex, the parent
 * and child handlers release them (glibc's recommended pattern), and in the child a guard's own
 * reset runs first. The one set of handlers is registered by a constructor when the library is
 * loaded, and the modules register their guards from constructors too: both are in place before
 * any weft function can be called, so no weft call can take a guarded mutex before the handlers
 * cover it. (Registered at first use instead, they missed a fork that another thread had begun:
 * glibc runs only the handlers registered when the fork began.) A process that never opens a
 * communicator, weftrun for one, thus takes a few free mutexes at each fork.
 *
 * Thread safety: every function is thread-safe. One mutex guards the table, so a fork never
 * copies the table in the middle of a change, and a descriptor is entered in the same critical
 * section as the system call that creates it (and removed in the one that closes it): no fork
 * sees it open but absent, or closed but present. The mutex is held across non-blocking system
 * calls only. The child handler itself makes only async-signal-safe calls (close), besides the
 * guards' resets. Lock order: the prepare handler takes the guards in the order they were
 * registered (the constructors', that is link order), then the table's; no thread may hold one
 * of them while it takes another, so that no order can deadlock with a fork.
 */
#ifndef WEFT_UTIL_FORKSAFE_H
#define WEFT_UTIL_FORKSAFE_H

#include <pthread.h>
#include <stdint.h>

/* The most guards weft_forksafe_guard takes: one per module with a process-wide mutex. */
#define WEFT_FORKSAFE_GUARDS_MAX 8

/* Hold mu across every fork() of the process, so that neither copy is ever taken in the middle
 * of a change; in the child, child_reset (NULL: none) runs first, while mu is still held and this
 * is the child's only thread, then mu is released. child_reset starts the module's state afresh
 * (no waiter, nothing in flight: the threads behind them are not in the child) and may make only
 * the calls a fork child handler may.
 *
 * Call it only from a constructor (__attribute__((constructor))) of the module that owns mu; no
 * thread may take another guarded mutex or call a function of this header while it holds mu
 * (Lock order, above). At most WEFT_FORKSAFE_GUARDS_MAX guards in all: one more aborts, a
 * programming error caught at load time. Never blocks. If the handlers could not be registered
 * (pthread_atfork out of memory at load time), no guard is held across forks; the descriptor
 * functions below then fail, so no communicator can be created, and only calls that need none
 * (weft_torch_alloc and weft_torch_free without a bound communicator) take a guarded mutex,
 * briefly. */
void weft_forksafe_guard(pthread_mutex_t *mu, void (*child_reset)(void));

/* socket(2), with the descriptor entered in the table. Returns it, or -1 with errno set (ENOMEM:
 * the table or the fork handlers could not be set up; nothing was opened). */
int weft_forksafe_socket(int domain, int type, int protocol);

/* accept4(2) on lsock, which must be non-blocking (the table's mutex is held across the call), with
 * the descriptor entered in the table. Returns it, or -1 with errno set (EAGAIN: nothing to accept;
 * ENOMEM as for weft_forksafe_socket). */
int weft_forksafe_accept(int lsock, int flags);

/* eventfd(2), with the descriptor entered in the table. Returns it, or -1 with errno set. */
int weft_forksafe_eventfd(unsigned int initval, int flags);

/* Remove fd from the table and close it. fd < 0 is a no-op. Every descriptor made by the
 * functions above must be closed with this, never with close(2): a number left in the table
 * would close an unrelated descriptor that reuses it in a later child. */
void weft_forksafe_close(int fd);

/* How many fork() calls led to this process: 0 in a process that no fork() made, its parent's
 * generation + 1 in a child. Never blocks. */
uint32_t weft_forksafe_generation(void);

#endif /* WEFT_UTIL_FORKSAFE_H */
