/*
 * registry.c - allocation table, slice allocator and registrar thread (see registry.h).
 *
 * DESIGN
 *   The caller's path (alloc, free, acquire) only touches the table under the mutex, maps or
 *   unmaps locally, and queues jobs; the registrar thread does everything that involves peers.
 *
 *   alloc (roa)  : create segment -> map in own slice -> record {addr, bytes, ticket} -> job REG
 *                  (the job owns the segment; the registrar exports it, sends a descriptor to
 *                  every peer, then destroys the segment: the mappings keep the memory alive).
 *   alloc (jit)  : as roa, but the segment stays in the record until the first acquire.
 *   alloc (staged, user): the segment is destroyed at once; the buffer is never registered.
 *   free         : unmap locally -> job UNREG (if it was ever registered) -> the range waits in
 *                  `pending` until every peer acknowledged the UNREG ticket, then is reusable.
 *   peer REG     : check the range lies in the sender's slice -> import -> map -> ack.
 *   peer UNREG   : unmap -> ack.
 *
 * THREADS AND LOCKS
 *   `mu` protects allocs, free ranges, pending frees, the job queue and next_ticket. The
 *   registrar owns the sockets, outboxes, peer mappings and acked[] without a lock; it publishes
 *   progress through the `acked_all` flag (futex-wakeable) and atomic counters.
 */
#include "core/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/ctrl.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct alloc_rec {
    uintptr_t addr;
    size_t bytes;
    weft_mem_seg_t seg; /* jit: kept until the first acquire; otherwise seg.fd == -1 */
    uint32_t ticket;    /* 0: not registered */
    int internal;
} alloc_rec_t;

typedef struct range {
    uintptr_t addr;
    size_t bytes;
    uint32_t ticket; /* pending frees: the UNREG ticket to wait for */
} range_t;

typedef struct job {
    uint32_t type; /* WEFT_CTRL_REG, WEFT_CTRL_UNREG, WEFT_CTRL_BYE */
    uint32_t ticket;
    uintptr_t addr;
    size_t bytes;
    weft_mem_seg_t seg; /* REG: owned by the job */
} job_t;

typedef struct outmsg {
    weft_ctrl_msg_t msg;
    int fd; /* owned; closed once sent */
} outmsg_t;

typedef struct outbox {
    outmsg_t *msgs;
    size_t head, n, cap;
} outbox_t;

typedef struct peer_map {
    uintptr_t addr;
    size_t bytes;
} peer_map_t;

typedef struct inflight {
    uint32_t ticket;
    size_t bytes;
} inflight_t;

/* A growable array of T: data, n, cap. */
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *data;                                                                                   \
        size_t n, cap;                                                                             \
    }

static int vec_reserve(void **data, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*data, ncap * elem);
    if (!p)
        return -1;
    *data = p;
    *cap = ncap;
    return 0;
}
#define VEC_RESERVE(v, need)                                                                       \
    vec_reserve((void **)&(v).data, &(v).cap, (need), sizeof *(v).data)

struct weft_registry {
    struct weft_comm *comm;
    weft_window_t win;
    const weft_mem_ops_t *mem;
    int rank, nranks;
    weft_registration_t mode;
    size_t gran;

    pthread_mutex_t mu;
    VEC(alloc_rec_t) allocs; /* sorted by addr */
    VEC(range_t) free;       /* sorted by addr, coalesced */
    VEC(range_t) pending;    /* freed, waiting for UNREG acks */
    VEC(job_t) jobs;         /* FIFO, consumed whole by the registrar */
    uint32_t next_ticket;    /* last ticket issued */

    /* registrar-owned */
    int *socks;
    int *bye; /* peer said BYE */
    int *closed;
    outbox_t *out;
    uint32_t *acked;
    VEC(peer_map_t) maps;
    VEC(inflight_t) inflight; /* REG tickets not yet acknowledged by all */
    int efd;
    pthread_t thread;
    int thread_started;
    _Atomic int stopping;
    uint64_t stop_deadline_ns;

    weft_flag_t acked_all; /* min over peers of acked[]; futex-wakeable */
    _Atomic uint64_t map_epoch;   /* registrar: bumped (release) after every peer map */
    _Atomic uint64_t reads_epoch; /* operations: bumped (release) after their remote reads */
    weft_registry_stats_t stats;
};

/* ---- slice allocator (under mu) -------------------------------------------------------------- */

static int range_take(weft_registry_t *reg, size_t bytes, uintptr_t *addr_out)
{
    for (size_t i = 0; i < reg->free.n; i++) {
        range_t *r = &reg->free.data[i];
        if (r->bytes < bytes)
            continue;
        *addr_out = r->addr;
        r->addr += bytes;
        r->bytes -= bytes;
        if (r->bytes == 0) {
            memmove(r, r + 1, (reg->free.n - i - 1) * sizeof *r);
            reg->free.n--;
        }
        return 0;
    }
    return -1;
}

/* Return [addr, addr + bytes) to the free list, coalescing with neighbours. */
static int range_give(weft_registry_t *reg, uintptr_t addr, size_t bytes)
{
    size_t i = 0;
    while (i < reg->free.n && reg->free.data[i].addr < addr)
        i++;
    range_t *prev = i > 0 ? &reg->free.data[i - 1] : NULL;
    range_t *next = i < reg->free.n ? &reg->free.data[i] : NULL;
    if (prev && prev->addr + prev->bytes == addr) {
        prev->bytes += bytes;
        if (next && addr + bytes == next->addr) {
            prev->bytes += next->bytes;
            memmove(next, next + 1, (reg->free.n - i - 1) * sizeof *next);
            reg->free.n--;
        }
        return 0;
    }
    if (next && addr + bytes == next->addr) {
        next->addr = addr;
        next->bytes += bytes;
        return 0;
    }
    if (VEC_RESERVE(reg->free, reg->free.n + 1) != 0)
        return -1;
    memmove(&reg->free.data[i + 1], &reg->free.data[i], (reg->free.n - i) * sizeof(range_t));
    reg->free.data[i] = (range_t){addr, bytes, 0};
    reg->free.n++;
    return 0;
}

/* Move pending frees whose UNREG every peer acknowledged back to the free list. */
static void reclaim_pending(weft_registry_t *reg)
{
    uint32_t acked = atomic_load_explicit(&reg->acked_all.value, memory_order_acquire);
    size_t keep = 0;
    for (size_t i = 0; i < reg->pending.n; i++) {
        range_t r = reg->pending.data[i];
        if (weft_seq_reached(acked, r.ticket) && range_give(reg, r.addr, r.bytes) == 0)
            continue;
        reg->pending.data[keep++] = r;
    }
    reg->pending.n = keep;
}

/* Index of the allocation containing addr, or -1. */
static long find_alloc(const weft_registry_t *reg, uintptr_t addr)
{
    size_t lo = 0, hi = reg->allocs.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (reg->allocs.data[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const alloc_rec_t *a = &reg->allocs.data[lo - 1];
    return addr - a->addr < a->bytes ? (long)(lo - 1) : -1;
}

/* ---- jobs (under mu) ------------------------------------------------------------------------- */

static void wake_registrar(weft_registry_t *reg)
{
    uint64_t one = 1;
    ssize_t n = write(reg->efd, &one, sizeof one);
    (void)n; /* a full eventfd counter already means "wake up" */
}

/* Queue a job with the next ticket; returns the ticket, or 0 if the queue cannot grow. */
static uint32_t push_job(weft_registry_t *reg, uint32_t type, uintptr_t addr, size_t bytes,
                         weft_mem_seg_t seg)
{
    if (VEC_RESERVE(reg->jobs, reg->jobs.n + 1) != 0)
        return 0;
    uint32_t ticket = ++reg->next_ticket;
    if (ticket == 0) /* 0 means "unregistered": skip it on wrap-around */
        ticket = ++reg->next_ticket;
    reg->jobs.data[reg->jobs.n++] =
        (job_t){.type = type, .ticket = ticket, .addr = addr, .bytes = bytes, .seg = seg};
    if (type == WEFT_CTRL_REG) {
        atomic_fetch_add(&reg->stats.registrations_started, 1);
    }
    if (reg->nranks == 1) /* no peer to wait for */
        weft_flag_set(&reg->acked_all, ticket);
    else
        wake_registrar(reg);
    return ticket;
}

/* ---- registrar thread ------------------------------------------------------------------------ */

static void outbox_push(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg, int fd)
{
    outbox_t *ob = &reg->out[peer];
    if (ob->head == ob->n) {
        ob->head = ob->n = 0;
    }
    if (vec_reserve((void **)&ob->msgs, &ob->cap, ob->n + 1, sizeof *ob->msgs) != 0) {
        if (fd >= 0)
            close(fd);
        weft_comm_set_async_error(reg->comm, weft_error(WEFT_ERR_NO_MEMORY,
                                                        "registrar: outbox to rank %d", peer));
        return;
    }
    ob->msgs[ob->n++] = (outmsg_t){*msg, fd};
}

static void peer_lost(weft_registry_t *reg, int peer, const char *why)
{
    if (reg->closed[peer])
        return;
    reg->closed[peer] = 1;
    outbox_t *ob = &reg->out[peer];
    for (size_t i = ob->head; i < ob->n; i++) {
        if (ob->msgs[i].fd >= 0)
            close(ob->msgs[i].fd);
    }
    ob->head = ob->n = 0;
    if (!reg->bye[peer] && !atomic_load(&reg->stopping))
        weft_comm_set_async_error(reg->comm,
                                  weft_error(WEFT_ERR_PEER_LOST, "rank %d lost: %s", peer, why));
}

static void receive_from(weft_registry_t *reg, int peer);

static void flush_outbox(weft_registry_t *reg, int peer)
{
    outbox_t *ob = &reg->out[peer];
    while (ob->head < ob->n && !reg->closed[peer]) {
        outmsg_t *m = &ob->msgs[ob->head];
        weft_status_t st = weft_ctrl_send(reg->socks[peer], &m->msg, m->fd);
        if (st == WEFT_ERR_TIMEOUT)
            return; /* socket full: POLLOUT will bring us back */
        if (st != WEFT_SUCCESS) {
            /* Read what the peer sent before it closed: a BYE makes the close orderly. */
            receive_from(reg, peer);
            peer_lost(reg, peer, "control socket send failed");
            return;
        }
        if (m->fd >= 0)
            close(m->fd);
        ob->head++;
    }
}

static void run_job(weft_registry_t *reg, job_t *job)
{
    weft_ctrl_msg_t msg = {.type = job->type,
                           .ticket = job->ticket,
                           .addr = job->addr,
                           .bytes = job->bytes,
                           .handle_bytes = job->bytes};
    int fd = -1;
    if (job->type == WEFT_CTRL_REG) {
        weft_status_t st = reg->mem->export_fd(&job->seg, &fd);
        reg->mem->destroy(&job->seg);
        if (st != WEFT_SUCCESS) {
            weft_comm_set_async_error(reg->comm, st);
            return;
        }
        if (VEC_RESERVE(reg->inflight, reg->inflight.n + 1) == 0)
            reg->inflight.data[reg->inflight.n++] = (inflight_t){job->ticket, job->bytes};
    }
    for (int p = 0; p < reg->nranks; p++) {
        if (p == reg->rank || reg->closed[p])
            continue;
        int pfd = -1;
        if (fd >= 0) {
            pfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
            if (pfd < 0) {
                weft_comm_set_async_error(
                    reg->comm, weft_error_errno(WEFT_ERR_SYSTEM, errno, "registrar: dup"));
                continue;
            }
        }
        outbox_push(reg, p, &msg, pfd);
    }
    if (fd >= 0)
        close(fd);
}

static void drain_jobs(weft_registry_t *reg)
{
    uint64_t count;
    ssize_t n = read(reg->efd, &count, sizeof count);
    (void)n;
    pthread_mutex_lock(&reg->mu);
    size_t njobs = reg->jobs.n;
    job_t *jobs = NULL;
    if (njobs > 0) {
        jobs = reg->jobs.data; /* take the array; the caller side starts a new one */
        reg->jobs.data = NULL;
        reg->jobs.n = reg->jobs.cap = 0;
    }
    pthread_mutex_unlock(&reg->mu);
    for (size_t i = 0; i < njobs; i++)
        run_job(reg, &jobs[i]);
    free(jobs);
}

static void update_acked(weft_registry_t *reg)
{
    uint32_t min = 0;
    int first = 1;
    for (int p = 0; p < reg->nranks; p++) {
        if (p == reg->rank)
            continue;
        if (first || !weft_seq_reached(reg->acked[p], min))
            min = reg->acked[p];
        first = 0;
    }
    size_t keep = 0;
    for (size_t i = 0; i < reg->inflight.n; i++) {
        inflight_t f = reg->inflight.data[i];
        if (weft_seq_reached(min, f.ticket)) {
            atomic_fetch_add(&reg->stats.registrations_completed, 1);
            atomic_fetch_add(&reg->stats.bytes_registered, f.bytes);
        } else {
            reg->inflight.data[keep++] = f;
        }
    }
    reg->inflight.n = keep;
    weft_flag_set(&reg->acked_all, min);
}

/* A peer asks us to map its segment: check, import, map, acknowledge. */
static void handle_reg(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg, int fd)
{
    uintptr_t slice = weft_window_slice(&reg->win, peer);
    if (fd < 0 || msg->addr < slice || msg->bytes == 0 || msg->bytes > reg->win.slice_bytes ||
        msg->addr - slice > reg->win.slice_bytes - msg->bytes || msg->addr % reg->gran != 0) {
        if (fd >= 0)
            close(fd);
        peer_lost(reg, peer, "malformed registration");
        return;
    }
    weft_mem_seg_t seg;
    weft_status_t st = reg->mem->import_fd(fd, msg->bytes, &seg);
    if (st == WEFT_SUCCESS) {
        st = reg->mem->map(&seg, (void *)msg->addr);
        reg->mem->destroy(&seg);
    }
    if (st == WEFT_SUCCESS && VEC_RESERVE(reg->maps, reg->maps.n + 1) != 0) {
        reg->mem->unmap((void *)msg->addr, msg->bytes);
        st = weft_error(WEFT_ERR_NO_MEMORY, "registrar: peer mapping table");
    }
    if (st != WEFT_SUCCESS) {
        weft_comm_set_async_error(reg->comm, st);
        return;
    }
    reg->maps.data[reg->maps.n++] = (peer_map_t){msg->addr, msg->bytes};
    atomic_fetch_add_explicit(&reg->map_epoch, 1, memory_order_release);
    atomic_fetch_add(&reg->stats.peer_mappings, 1);
    weft_ctrl_msg_t ack = {.type = WEFT_CTRL_REG_ACK, .ticket = msg->ticket};
    outbox_push(reg, peer, &ack, -1);
}

static void handle_unreg(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg)
{
    for (size_t i = 0; i < reg->maps.n; i++) {
        peer_map_t *m = &reg->maps.data[i];
        if (m->addr == msg->addr && m->bytes == msg->bytes &&
            weft_window_owner(&reg->win, m->addr) == peer) {
            (void)atomic_load_explicit(&reg->reads_epoch, memory_order_acquire);
            weft_status_t st = reg->mem->unmap((void *)m->addr, m->bytes);
            if (st != WEFT_SUCCESS)
                weft_comm_set_async_error(reg->comm, st);
            *m = reg->maps.data[--reg->maps.n];
            atomic_fetch_sub(&reg->stats.peer_mappings, 1);
            break;
        }
    }
    weft_ctrl_msg_t ack = {.type = WEFT_CTRL_UNREG_ACK, .ticket = msg->ticket};
    outbox_push(reg, peer, &ack, -1);
}

static void receive_from(weft_registry_t *reg, int peer)
{
    for (;;) {
        weft_ctrl_msg_t msg;
        int fd;
        weft_status_t st = weft_ctrl_recv(reg->socks[peer], &msg, &fd);
        if (st == WEFT_ERR_TIMEOUT)
            return;
        if (st != WEFT_SUCCESS) {
            peer_lost(reg, peer, "control socket closed");
            return;
        }
        if (fd >= 0 && msg.type != WEFT_CTRL_REG) {
            close(fd);
            fd = -1;
        }
        switch (msg.type) {
        case WEFT_CTRL_REG:
            handle_reg(reg, peer, &msg, fd);
            break;
        case WEFT_CTRL_UNREG:
            handle_unreg(reg, peer, &msg);
            break;
        case WEFT_CTRL_REG_ACK:
        case WEFT_CTRL_UNREG_ACK:
            reg->acked[peer] = msg.ticket;
            update_acked(reg);
            break;
        case WEFT_CTRL_BYE:
            reg->bye[peer] = 1;
            break;
        default:
            peer_lost(reg, peer, "unknown control message");
            return;
        }
        if (reg->closed[peer])
            return;
    }
}

/* Ready to close: everything queued was sent, and every peer still connected said BYE (so it is
 * stopping too, and our EOF cannot look like a loss to it). */
static int ready_to_close(const weft_registry_t *reg)
{
    for (int p = 0; p < reg->nranks; p++) {
        if (p == reg->rank || reg->closed[p])
            continue;
        if (reg->out[p].head < reg->out[p].n || !reg->bye[p])
            return 0;
    }
    return 1;
}

static void *registrar_main(void *arg)
{
    weft_registry_t *reg = arg;
    pthread_setname_np(pthread_self(), "weft-registrar");
    weft_status_t attached = reg->mem->attach_thread();
    if (attached != WEFT_SUCCESS) {
        weft_comm_set_async_error(reg->comm, attached);
        return NULL;
    }
    struct pollfd *pfds = calloc((size_t)reg->nranks + 1, sizeof *pfds);
    int *who = calloc((size_t)reg->nranks + 1, sizeof *who);
    if (!pfds || !who) {
        weft_comm_set_async_error(reg->comm, weft_error(WEFT_ERR_NO_MEMORY, "registrar: calloc"));
        free(pfds);
        free(who);
        return NULL;
    }
    for (;;) {
        int stopping = atomic_load(&reg->stopping);
        int timeout_ms = -1;
        if (stopping) {
            /* Send what is queued (the BYE last of all), then leave. */
            drain_jobs(reg);
            for (int p = 0; p < reg->nranks; p++) {
                if (p != reg->rank && !reg->closed[p])
                    flush_outbox(reg, p);
            }
            if (ready_to_close(reg))
                break;
            uint64_t now = weft_now_ns();
            if (now >= reg->stop_deadline_ns)
                break;
            timeout_ms = (int)((reg->stop_deadline_ns - now) / 1000000 + 1);
        }
        int n = 0;
        pfds[n] = (struct pollfd){.fd = reg->efd, .events = POLLIN};
        who[n++] = -1;
        for (int p = 0; p < reg->nranks; p++) {
            if (p == reg->rank || reg->closed[p])
                continue;
            short ev = POLLIN;
            if (reg->out[p].head < reg->out[p].n)
                ev |= POLLOUT;
            pfds[n] = (struct pollfd){.fd = reg->socks[p], .events = ev};
            who[n++] = p;
        }
        int ready = poll(pfds, (nfds_t)n, timeout_ms);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            weft_comm_set_async_error(reg->comm,
                                      weft_error_errno(WEFT_ERR_SYSTEM, errno, "registrar: poll"));
            break;
        }
        for (int i = 0; i < n; i++) {
            if (pfds[i].revents == 0)
                continue;
            if (who[i] < 0) {
                drain_jobs(reg);
                continue;
            }
            int p = who[i];
            if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))
                receive_from(reg, p);
            if (!reg->closed[p] && (pfds[i].revents & POLLOUT))
                flush_outbox(reg, p);
        }
        /* New jobs or acks may have filled outboxes: try to send right away. */
        for (int p = 0; p < reg->nranks; p++) {
            if (p != reg->rank && !reg->closed[p])
                flush_outbox(reg, p);
        }
    }
    free(pfds);
    free(who);
    return NULL;
}

/* ---- public functions ------------------------------------------------------------------------ */

weft_status_t weft_registry_create(struct weft_comm *comm, const weft_window_t *win, int rank,
                                   int nranks, weft_registration_t mode, int *ctrl_fds,
                                   weft_registry_t **reg_out)
{
    weft_status_t st;
    weft_registry_t *reg = calloc(1, sizeof *reg);
    if (!reg)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry");
    reg->comm = comm;
    reg->win = *win;
    reg->mem = win->mem;
    reg->rank = rank;
    reg->nranks = nranks;
    reg->mode = mode;
    reg->gran = win->mem->granularity();
    reg->efd = -1;
    pthread_mutex_init(&reg->mu, NULL);
    reg->socks = calloc((size_t)nranks, sizeof *reg->socks);
    reg->bye = calloc((size_t)nranks, sizeof *reg->bye);
    reg->closed = calloc((size_t)nranks, sizeof *reg->closed);
    reg->out = calloc((size_t)nranks, sizeof *reg->out);
    reg->acked = calloc((size_t)nranks, sizeof *reg->acked);
    if (!reg->socks || !reg->bye || !reg->closed || !reg->out || !reg->acked) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry arrays");
        goto err_free;
    }
    for (int p = 0; p < nranks; p++)
        reg->socks[p] = -1;
    if (range_give(reg, weft_window_slice(win, rank), win->slice_bytes) != 0) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry free list");
        goto err_free;
    }
    reg->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (reg->efd < 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: eventfd");
        goto err_free;
    }
    for (int p = 0; p < nranks; p++) {
        reg->socks[p] = ctrl_fds[p];
        ctrl_fds[p] = -1;
    }
    int err = pthread_create(&reg->thread, NULL, registrar_main, reg);
    if (err != 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, err, "weft_comm_init: pthread_create(registrar)");
        goto err_close;
    }
    reg->thread_started = 1;
    *reg_out = reg;
    return WEFT_SUCCESS;

err_close:
    for (int p = 0; p < nranks; p++) {
        ctrl_fds[p] = reg->socks[p]; /* ownership goes back on failure */
        reg->socks[p] = -1;
    }
    close(reg->efd);
err_free:
    free(reg->socks);
    free(reg->bye);
    free(reg->closed);
    free(reg->out);
    free(reg->acked);
    free(reg->free.data);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
    return st;
}

void weft_registry_shutdown_sockets(weft_registry_t *reg)
{
    if (!reg)
        return;
    for (int p = 0; p < reg->nranks; p++) {
        if (reg->socks[p] >= 0)
            shutdown(reg->socks[p], SHUT_RDWR);
    }
}

void weft_registry_destroy(weft_registry_t *reg, uint64_t deadline_ns)
{
    if (!reg)
        return;
    if (reg->thread_started) {
        pthread_mutex_lock(&reg->mu);
        (void)push_job(reg, WEFT_CTRL_BYE, 0, 0, (weft_mem_seg_t){.fd = -1});
        pthread_mutex_unlock(&reg->mu);
        reg->stop_deadline_ns = deadline_ns;
        atomic_store(&reg->stopping, 1);
        wake_registrar(reg);
        pthread_join(reg->thread, NULL);
    }
    for (size_t i = 0; i < reg->jobs.n; i++) {
        if (reg->jobs.data[i].type == WEFT_CTRL_REG)
            reg->mem->destroy(&reg->jobs.data[i].seg);
    }
    for (int p = 0; p < reg->nranks; p++) {
        outbox_t *ob = &reg->out[p];
        for (size_t i = ob->head; i < ob->n; i++) {
            if (ob->msgs[i].fd >= 0)
                close(ob->msgs[i].fd);
        }
        free(ob->msgs);
        if (reg->socks[p] >= 0)
            close(reg->socks[p]);
    }
    for (size_t i = 0; i < reg->maps.n; i++)
        reg->mem->unmap((void *)reg->maps.data[i].addr, reg->maps.data[i].bytes);
    for (size_t i = 0; i < reg->allocs.n; i++) {
        alloc_rec_t *a = &reg->allocs.data[i];
        reg->mem->unmap((void *)a->addr, a->bytes);
        reg->mem->destroy(&a->seg);
    }
    close(reg->efd);
    free(reg->jobs.data);
    free(reg->maps.data);
    free(reg->inflight.data);
    free(reg->allocs.data);
    free(reg->free.data);
    free(reg->pending.data);
    free(reg->socks);
    free(reg->bye);
    free(reg->closed);
    free(reg->out);
    free(reg->acked);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

weft_status_t weft_registry_alloc(weft_registry_t *reg, size_t bytes, int internal,
                                   void **ptr_out)
{
    if (bytes > reg->win.slice_bytes)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_malloc: %zu bytes exceed the window slice",
                          bytes);
    size_t size = (bytes + reg->gran - 1) / reg->gran * reg->gran;
    weft_mem_seg_t seg;
    weft_status_t st = reg->mem->create(size, &seg);
    if (st != WEFT_SUCCESS)
        return st;

    pthread_mutex_lock(&reg->mu);
    reclaim_pending(reg);
    uintptr_t addr;
    if (VEC_RESERVE(reg->allocs, reg->allocs.n + 1) != 0) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_malloc: allocation table");
        goto err_unlock;
    }
    if (range_take(reg, size, &addr) != 0) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_malloc: %zu bytes: the window slice is full",
                        bytes);
        goto err_unlock;
    }
    st = reg->mem->map(&seg, (void *)addr);
    if (st != WEFT_SUCCESS)
        goto err_give;

    alloc_rec_t rec = {.addr = addr, .bytes = size, .seg = seg, .ticket = 0, .internal = internal};
    if (internal || reg->mode == WEFT_REGISTRATION_ROA) {
        rec.ticket = push_job(reg, WEFT_CTRL_REG, addr, size, seg);
        if (rec.ticket == 0) {
            st = weft_error(WEFT_ERR_NO_MEMORY, "weft_malloc: registration queue");
            goto err_unmap;
        }
        rec.seg = (weft_mem_seg_t){.fd = -1}; /* the job owns the segment now */
    } else if (reg->mode == WEFT_REGISTRATION_STAGED) {
        reg->mem->destroy(&rec.seg); /* never registered: the mapping keeps the memory */
    }
    size_t i = reg->allocs.n;
    while (i > 0 && reg->allocs.data[i - 1].addr > addr)
        i--;
    memmove(&reg->allocs.data[i + 1], &reg->allocs.data[i],
            (reg->allocs.n - i) * sizeof(alloc_rec_t));
    reg->allocs.data[i] = rec;
    reg->allocs.n++;
    pthread_mutex_unlock(&reg->mu);
    *ptr_out = (void *)addr;
    return WEFT_SUCCESS;

err_unmap:
    reg->mem->unmap((void *)addr, size);
err_give:
    (void)range_give(reg, addr, size);
err_unlock:
    pthread_mutex_unlock(&reg->mu);
    reg->mem->destroy(&seg);
    return st;
}

weft_status_t weft_registry_free(weft_registry_t *reg, void *ptr)
{
    pthread_mutex_lock(&reg->mu);
    long i = find_alloc(reg, (uintptr_t)ptr);
    if (i < 0 || reg->allocs.data[i].addr != (uintptr_t)ptr) {
        pthread_mutex_unlock(&reg->mu);
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_free: ptr %p is not the start of a weft_malloc allocation", ptr);
    }
    alloc_rec_t rec = reg->allocs.data[i];
    memmove(&reg->allocs.data[i], &reg->allocs.data[i + 1],
            (reg->allocs.n - (size_t)i - 1) * sizeof(alloc_rec_t));
    reg->allocs.n--;
    weft_status_t st = reg->mem->unmap((void *)rec.addr, rec.bytes);
    reg->mem->destroy(&rec.seg);
    if (st == WEFT_SUCCESS) {
        uint32_t ticket = 0;
        if (rec.ticket != 0 && VEC_RESERVE(reg->pending, reg->pending.n + 1) == 0)
            ticket = push_job(reg, WEFT_CTRL_UNREG, rec.addr, rec.bytes,
                              (weft_mem_seg_t){.fd = -1});
        if (ticket != 0)
            reg->pending.data[reg->pending.n++] = (range_t){rec.addr, rec.bytes, ticket};
        else if (rec.ticket == 0)
            (void)range_give(reg, rec.addr, rec.bytes);
        /* else: out of memory for the bookkeeping: the range is leaked, never reused unsafely */
    }
    pthread_mutex_unlock(&reg->mu);
    return st;
}

weft_status_t weft_registry_acquire(weft_registry_t *reg, const void *ptr, size_t bytes,
                                    const weft_wait_policy_t *policy, weft_wait_check_fn check,
                                    void *arg,
                                    weft_buf_state_t *state_out, uint64_t *waited_ns_out)
{
    *waited_ns_out = 0;
    *state_out = WEFT_BUF_STAGED;
    uintptr_t addr = (uintptr_t)ptr;
    if (weft_window_owner(&reg->win, addr) != reg->rank)
        return WEFT_SUCCESS;
    pthread_mutex_lock(&reg->mu);
    long i = find_alloc(reg, addr);
    if (i < 0) {
        pthread_mutex_unlock(&reg->mu);
        return WEFT_SUCCESS;
    }
    alloc_rec_t *a = &reg->allocs.data[i];
    if (bytes > a->bytes - (addr - a->addr)) { /* runs past the allocation */
        pthread_mutex_unlock(&reg->mu);
        return WEFT_SUCCESS;
    }
    uint64_t t0 = 0; /* when this call started waiting for the registration */
    if (a->ticket == 0) {
        if (reg->mode != WEFT_REGISTRATION_JIT) {
            pthread_mutex_unlock(&reg->mu);
            return WEFT_SUCCESS; /* staged mode: never registered */
        }
        /* jit: this first use registers the buffer, so it waits whatever the timing. */
        t0 = weft_now_ns();
        a->ticket = push_job(reg, WEFT_CTRL_REG, a->addr, a->bytes, a->seg);
        if (a->ticket == 0) {
            pthread_mutex_unlock(&reg->mu);
            return weft_error(WEFT_ERR_NO_MEMORY, "registration queue");
        }
        a->seg = (weft_mem_seg_t){.fd = -1};
    }
    uint32_t ticket = a->ticket;
    pthread_mutex_unlock(&reg->mu);

    if (!weft_seq_reached(atomic_load_explicit(&reg->acked_all.value, memory_order_acquire),
                          ticket)) {
        if (t0 == 0)
            t0 = weft_now_ns();
        weft_status_t st = weft_flag_wait(&reg->acked_all, ticket, policy, check, arg);
        if (st != WEFT_SUCCESS)
            return st;
    }
    if (t0 != 0)
        *waited_ns_out = weft_now_ns() - t0 + 1;
    *state_out = WEFT_BUF_READY;
    return WEFT_SUCCESS;
}

void weft_registry_observe_mappings(weft_registry_t *reg)
{
    (void)atomic_load_explicit(&reg->map_epoch, memory_order_acquire);
}

void weft_registry_reads_done(weft_registry_t *reg)
{
    atomic_fetch_add_explicit(&reg->reads_epoch, 1, memory_order_release);
}

const weft_registry_stats_t *weft_registry_stats(const weft_registry_t *reg)
{
    return &reg->stats;
}
