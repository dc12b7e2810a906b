/*
 * reg_cost.c - what each step of a CUDA registration costs, per allocation size
 * (on one H200: export 0.6-0.9 ms, import + map + set-access 0.1-0.4 ms per allocation, about
 * 1000 exports/s per process whatever the thread count; docs/cuda.md, "Registration cost").
 *
 *   reg-cost [-b MIN] [-e MAX] [-n REPEATS] [-k HANDLES] [-p PEER_DEVICE] [--json FILE]
 *
 * Two processes, as two ranks: the owner (this process, device 0) and a peer (this binary run
 * again with --peer, started with fork + exec because CUDA cannot be used across fork, on
 * PEER_DEVICE: by default device 1 if it can reach device 0, else device 0 as under MPS). They
 * agree on a base address free in both, as the core's window does, and reserve MAX bytes there.
 * For each size from MIN, times 4, up to MAX (MAX itself always included; default 2 MiB to
 * 1 GiB), after one untimed round, REPEATS rounds of the core's order of calls are timed, each
 * call alone:
 *
 *   owner: create (cuMemCreate), map (cuMemMap), set-access (cuMemSetAccess), export
 *          (cuMemExportToShareableHandle), release (cuMemRelease: the handle only, the mapping
 *          keeps the memory), then sends the descriptor to the peer (SCM_RIGHTS) and waits;
 *   peer:  import (cuMemImportFromShareableHandle + close of the descriptor), map, set-access,
 *          release, unmap (cuMemUnmap), then replies with its times;
 *   owner: close-fd (close of the exported descriptor), then unmap, which drops the last
 *          reference and so also frees the memory.
 *
 * create, export, import, release and unmap go through the provider (weft_mem_cuda_ops); map and
 * set-access, one provider call, are timed apart through the driver table with the provider's
 * arguments. Each cell is the median over REPEATS, in microseconds.
 *
 * Export serialisation: HANDLES segments of the granularity are created, then exported (and
 * each descriptor closed) from 1 thread and from 4 threads splitting the same handles; the rate
 * is HANDLES over the wall time from the first thread's start to the last one's end, and the
 * mean time inside one export call and one close are printed beside it.
 *
 * Output: a table (lines starting with # are comments) and, with --json FILE, the same numbers
 * with min and max as JSON. Exit status: 0 on success, 1 on a failure, 2 on an argument error,
 * 77 when there is no CUDA device ("SKIP: no CUDA device (<reason>)").
 *
 * Thread safety: single-threaded apart from the export workers, which share only read-only
 * handles and write their own slot of the results.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "gpu_prog.h"
#include "mem/cuda_driver.h"
#include "mem/mem.h"
#include "util/clock.h"
#include "util/fdpass.h"
#include "util/log.h"
#include "util/parse_bytes.h"

#define MAX_SIZES 32
#define MAX_REPEATS 10000
#define EXPORT_THREADS_MAX 4
#define PEER_TIMEOUT_MS 120000
#define AGREE_ROUNDS 8

enum { O_CREATE, O_MAP, O_ACCESS, O_EXPORT, O_RELEASE, O_CLOSE, O_UNMAP, OWNER_STEPS };
enum { P_IMPORT, P_MAP, P_ACCESS, P_RELEASE, P_UNMAP, PEER_STEPS };
static const char *const owner_names[OWNER_STEPS] = {"create",  "map",      "set-access", "export",
                                                     "release", "close-fd", "unmap"};
static const char *const peer_names[PEER_STEPS] = {"import", "map", "set-access", "release",
                                                   "unmap"};

static const weft_mem_ops_t *const ops = &weft_mem_cuda_ops;

/* ---------------------------------------------------------------------------------------------
 * Messages between owner and peer: fixed records over a SOCK_SEQPACKET socketpair, at most one
 * descriptor each.
 * ------------------------------------------------------------------------------------------- */
enum { MSG_PROPOSE = 1, MSG_SEG, MSG_DONE, MSG_REPLY };

typedef struct msg {
    uint32_t type;
    uint32_t status; /* replies: 0 = ok; to PROPOSE: 1 = no, addr holds a counter-offer */
    uint64_t addr;
    uint64_t bytes;
    uint64_t ns[PEER_STEPS]; /* reply to SEG: the peer's step times */
} msg_t;

static int send_msg(int sock, const msg_t *m, int fd)
{
    ssize_t n = weft_fdpass_send(sock, m, sizeof *m, fd, true);
    if (n != (ssize_t)sizeof *m) {
        fprintf(stderr, "reg-cost: sendmsg: %s\n", n < 0 ? strerror(errno) : "short write");
        return -1;
    }
    return 0;
}

/* Receive one message within PEER_TIMEOUT_MS; *fd_out gets the attached descriptor or -1. */
static int recv_msg(int sock, msg_t *m, int *fd_out)
{
    ssize_t n = weft_fdpass_recv(sock, m, sizeof *m, PEER_TIMEOUT_MS, fd_out);
    if (n == (ssize_t)sizeof *m)
        return 0;
    if (n < 0 && errno == ETIMEDOUT)
        fprintf(stderr, "reg-cost: no message from the other process within %d ms\n",
                PEER_TIMEOUT_MS);
    else
        fprintf(stderr, "reg-cost: recvmsg: %s\n",
                n < 0    ? strerror(errno)
                : n == 0 ? "the other process is gone"
                         : "bad message");
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Steps shared by both sides
 * ------------------------------------------------------------------------------------------- */
typedef struct ctx {
    const weft_cuda_driver_t *drv;
    CUdevice dev;
    size_t gran;
} ctx_t;

static int fail(const char *what)
{
    fprintf(stderr, "reg-cost: %s failed: %s\n", what, weft_last_error());
    return -1;
}

static int ctx_init(ctx_t *c, int device)
{
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) {
        fprintf(stderr, "reg-cost: cudaSetDevice(%d): %s\n", device, cudaGetErrorString(err));
        return -1;
    }
    if (weft_cuda_driver_get(&c->drv) != WEFT_SUCCESS || weft_cuda_device_check() != WEFT_SUCCESS ||
        weft_cuda_current_device(c->drv, &c->dev) != WEFT_SUCCESS)
        return fail("CUDA setup");
    c->gran = ops->granularity();
    if (c->gran == 0)
        return fail("granularity");
    return 0;
}

/* map then set-access, as the provider's map does, timed apart into ns[0] and ns[1]. */
static int map_timed(const ctx_t *c, const weft_mem_seg_t *seg, void *addr, uint64_t ns[2])
{
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)addr;
    uint64_t t0 = weft_now_ns();
    CUresult res =
        c->drv->cuMemMap(ptr, seg->bytes, 0, (CUmemGenericAllocationHandle)seg->handle, 0);
    uint64_t t1 = weft_now_ns();
    if (res != CUDA_SUCCESS) {
        weft_cuda_error(res, "cuMemMap(%zu bytes at %p)", seg->bytes, addr);
        return fail("map");
    }
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)c->dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    res = c->drv->cuMemSetAccess(ptr, seg->bytes, &access, 1);
    uint64_t t2 = weft_now_ns();
    if (res != CUDA_SUCCESS) {
        weft_cuda_error(res, "cuMemSetAccess(%zu bytes at %p)", seg->bytes, addr);
        c->drv->cuMemUnmap(ptr, seg->bytes);
        return fail("set-access");
    }
    ns[0] = t1 - t0;
    ns[1] = t2 - t1;
    return 0;
}

/* Reserve total + align anywhere, release it, and return the aligned base inside (0 on error). */
static uintptr_t find_free(size_t total, size_t align)
{
    void *p;
    if (ops->reserve(NULL, total + align, 0, &p) != WEFT_SUCCESS) {
        fail("reserve");
        return 0;
    }
    ops->release(p, total + align);
    return ((uintptr_t)p + align - 1) / align * align;
}

/* ---------------------------------------------------------------------------------------------
 * The peer (--peer SOCK DEVICE)
 * ------------------------------------------------------------------------------------------- */
static int peer_segment(const ctx_t *c, const msg_t *m, int fd, msg_t *reply)
{
    void *addr = (void *)(uintptr_t)m->addr;
    weft_mem_seg_t seg;
    uint64_t t0 = weft_now_ns();
    weft_status_t st = ops->import_fd(fd, 0, m->bytes, &seg);
    reply->ns[P_IMPORT] = weft_now_ns() - t0;
    if (st != WEFT_SUCCESS)
        return fail("import");
    uint64_t ns[2];
    if (map_timed(c, &seg, addr, ns) != 0) {
        ops->destroy(&seg);
        return -1;
    }
    reply->ns[P_MAP] = ns[0];
    reply->ns[P_ACCESS] = ns[1];
    t0 = weft_now_ns();
    ops->destroy(&seg);
    uint64_t t1 = weft_now_ns();
    st = ops->unmap(addr, m->bytes);
    uint64_t t2 = weft_now_ns();
    if (st != WEFT_SUCCESS)
        return fail("unmap");
    reply->ns[P_RELEASE] = t1 - t0;
    reply->ns[P_UNMAP] = t2 - t1;
    return 0;
}

static int peer_main(int sock, int device)
{
    ctx_t c;
    if (ctx_init(&c, device) != 0)
        return 1;
    void *base = NULL;
    size_t total = 0;
    int rc = 0;
    for (;;) {
        msg_t m, reply = {.type = MSG_REPLY};
        int fd;
        if (recv_msg(sock, &m, &fd) != 0) {
            rc = 1;
            break;
        }
        if (m.type == MSG_DONE)
            break;
        if (m.type == MSG_PROPOSE) {
            if (base == NULL &&
                ops->reserve((void *)(uintptr_t)m.addr, m.bytes, 1, &base) == WEFT_SUCCESS) {
                total = m.bytes;
            } else {
                reply.status = 1;
                reply.addr = find_free(m.bytes, c.gran);
            }
        } else if (m.type == MSG_SEG && fd >= 0 && base != NULL && m.addr >= (uintptr_t)base &&
                   m.bytes <= total - (m.addr - (uintptr_t)base)) {
            reply.status = peer_segment(&c, &m, fd, &reply) != 0;
            fd = -1; /* import_fd took it */
        } else {
            fprintf(stderr, "reg-cost: peer: unexpected message %u\n", m.type);
            reply.status = 1;
        }
        if (fd >= 0)
            close(fd);
        if (send_msg(sock, &reply, -1) != 0) {
            rc = 1;
            break;
        }
    }
    if (base)
        ops->release(base, total);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The owner
 * ------------------------------------------------------------------------------------------- */
typedef struct summary {
    double median_us, min_us, max_us;
} summary_t;

/* Median, minimum and maximum of ns[0..n) in us; sorts ns. */
static summary_t summarise(uint64_t *ns, int n)
{
    double median = bench_median_u64(ns, (size_t)n);
    return (summary_t){median / 1e3, (double)ns[0] / 1e3, (double)ns[n - 1] / 1e3};
}

typedef struct size_result {
    size_t bytes;
    summary_t owner[OWNER_STEPS];
    summary_t peer[PEER_STEPS];
} size_result_t;

typedef struct export_result {
    int threads;
    double wall_ms;
    double exports_per_s; /* handles over the wall time, closes included */
    double export_us;     /* mean time in one export call */
    double close_us;      /* mean time in one close of an exported descriptor */
} export_result_t;

static pid_t start_peer(int *sock_out, int device)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        fprintf(stderr, "reg-cost: socketpair: %s\n", strerror(errno));
        return -1;
    }
    char sock_arg[16], dev_arg[16];
    snprintf(sock_arg, sizeof sock_arg, "%d", sv[1]);
    snprintf(dev_arg, sizeof dev_arg, "%d", device);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls until exec: this process inherited a CUDA runtime. */
        if (fcntl(sv[1], F_SETFD, 0) == 0)
            execl("/proc/self/exe", "reg-cost", "--peer", sock_arg, dev_arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (pid < 0) {
        fprintf(stderr, "reg-cost: fork: %s\n", strerror(errno));
        close(sv[0]);
        return -1;
    }
    *sock_out = sv[0];
    return pid;
}

/* Agree with the peer on a base where both hold an exact reservation of total bytes. */
static void *agree_base(int sock, size_t total, size_t gran)
{
    uintptr_t cand = find_free(total, gran);
    for (int round = 0; round < AGREE_ROUNDS && cand != 0; round++) {
        void *got;
        if (ops->reserve((void *)cand, total, 1, &got) != WEFT_SUCCESS) {
            cand = find_free(total, gran);
            continue;
        }
        msg_t m = {.type = MSG_PROPOSE, .addr = cand, .bytes = total}, reply;
        int fd;
        if (send_msg(sock, &m, -1) != 0 || recv_msg(sock, &reply, &fd) != 0) {
            ops->release(got, total);
            return NULL;
        }
        if (reply.status == 0)
            return got;
        ops->release(got, total);
        cand = (uintptr_t)reply.addr;
    }
    fprintf(stderr, "reg-cost: no address range of %zu bytes is free in both processes\n", total);
    return NULL;
}

/* One round of one size at base; fills owner[] and peer[] (nanoseconds). */
static int owner_round(const ctx_t *c, int sock, void *base, size_t bytes,
                       uint64_t owner[OWNER_STEPS], uint64_t peer[PEER_STEPS])
{
    weft_mem_seg_t seg;
    uint64_t t0 = weft_now_ns();
    if (ops->create(bytes, &seg) != WEFT_SUCCESS)
        return fail("create");
    owner[O_CREATE] = weft_now_ns() - t0;
    uint64_t ns[2];
    if (map_timed(c, &seg, base, ns) != 0) {
        ops->destroy(&seg);
        return -1;
    }
    owner[O_MAP] = ns[0];
    owner[O_ACCESS] = ns[1];
    int fd;
    t0 = weft_now_ns();
    weft_status_t st = ops->export_fd(&seg, &fd);
    uint64_t t1 = weft_now_ns();
    ops->destroy(&seg);
    uint64_t t2 = weft_now_ns();
    owner[O_EXPORT] = t1 - t0;
    owner[O_RELEASE] = t2 - t1;
    int rc = 0;
    if (st != WEFT_SUCCESS) {
        rc = fail("export");
    } else {
        msg_t m = {.type = MSG_SEG, .addr = (uintptr_t)base, .bytes = bytes}, reply;
        int rfd;
        if (send_msg(sock, &m, fd) != 0 || recv_msg(sock, &reply, &rfd) != 0 || reply.status != 0) {
            fprintf(stderr, "reg-cost: the peer failed on %zu bytes\n", bytes);
            rc = -1;
        } else {
            memcpy(peer, reply.ns, sizeof reply.ns);
        }
        t0 = weft_now_ns();
        close(fd);
        owner[O_CLOSE] = weft_now_ns() - t0;
    }
    /* The peer has unmapped and released: this drops the last reference. */
    t0 = weft_now_ns();
    st = ops->unmap(base, bytes);
    owner[O_UNMAP] = weft_now_ns() - t0;
    if (st != WEFT_SUCCESS)
        rc = fail("unmap");
    return rc;
}

static int run_sizes(const ctx_t *c, int sock, void *base, const size_t *sizes, int nsizes,
                     int repeats, size_result_t *out)
{
    uint64_t *owner = malloc(sizeof(uint64_t) * OWNER_STEPS * (size_t)repeats);
    uint64_t *peer = malloc(sizeof(uint64_t) * PEER_STEPS * (size_t)repeats);
    int rc = owner && peer ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "reg-cost: out of memory\n");
    for (int s = 0; s < nsizes && rc == 0; s++) {
        uint64_t o[OWNER_STEPS], p[PEER_STEPS];
        rc = owner_round(c, sock, base, sizes[s], o, p); /* warm-up, not counted */
        for (int r = 0; r < repeats && rc == 0; r++) {
            rc = owner_round(c, sock, base, sizes[s], o, p);
            for (int k = 0; k < OWNER_STEPS; k++)
                owner[k * repeats + r] = o[k];
            for (int k = 0; k < PEER_STEPS; k++)
                peer[k * repeats + r] = p[k];
        }
        if (rc != 0)
            break;
        out[s].bytes = sizes[s];
        for (int k = 0; k < OWNER_STEPS; k++)
            out[s].owner[k] = summarise(owner + k * repeats, repeats);
        for (int k = 0; k < PEER_STEPS; k++)
            out[s].peer[k] = summarise(peer + k * repeats, repeats);
    }
    free(owner);
    free(peer);
    return rc;
}

typedef struct exporter {
    pthread_t thread;
    const weft_mem_seg_t *segs;
    int count;
    uint64_t start_ns, end_ns;
    uint64_t export_ns, close_ns; /* summed over the thread's calls */
    int failed;
} exporter_t;

static void *export_worker(void *arg)
{
    exporter_t *e = arg;
    if (ops->attach_thread(0) != WEFT_SUCCESS) { /* the owner is device 0 */
        fail("attach_thread");
        e->failed = 1;
        return NULL;
    }
    e->start_ns = weft_now_ns();
    uint64_t t0 = e->start_ns;
    for (int i = 0; i < e->count; i++) {
        int fd;
        weft_status_t st = ops->export_fd(&e->segs[i], &fd);
        uint64_t t1 = weft_now_ns();
        e->export_ns += t1 - t0;
        if (st != WEFT_SUCCESS) {
            fail("export");
            e->failed = 1;
            break;
        }
        close(fd);
        t0 = weft_now_ns();
        e->close_ns += t0 - t1;
    }
    e->end_ns = weft_now_ns();
    return NULL;
}

/* Export the same handles from nthreads threads at once; the rate is over the wall time. */
static int run_exports(int handles, int nthreads, const weft_mem_seg_t *segs, export_result_t *out)
{
    exporter_t ex[EXPORT_THREADS_MAX];
    int started = 0, rc = 0;
    for (int t = 0; t < nthreads; t++) {
        int first = handles * t / nthreads, last = handles * (t + 1) / nthreads;
        ex[t] = (exporter_t){.segs = segs + first, .count = last - first};
        if (pthread_create(&ex[t].thread, NULL, export_worker, &ex[t]) != 0) {
            fprintf(stderr, "reg-cost: pthread_create failed\n");
            rc = -1;
            break;
        }
        started++;
    }
    uint64_t start = UINT64_MAX, end = 0, export_ns = 0, close_ns = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(ex[t].thread, NULL);
        if (ex[t].failed)
            rc = -1;
        start = ex[t].start_ns < start ? ex[t].start_ns : start;
        end = ex[t].end_ns > end ? ex[t].end_ns : end;
        export_ns += ex[t].export_ns;
        close_ns += ex[t].close_ns;
    }
    if (rc == 0) {
        out->threads = nthreads;
        out->wall_ms = (double)(end - start) / 1e6;
        out->exports_per_s = handles / ((double)(end - start) / 1e9);
        out->export_us = (double)export_ns / handles / 1e3;
        out->close_us = (double)close_ns / handles / 1e3;
    }
    return rc;
}

static int export_rates(const ctx_t *c, int handles, export_result_t out[2])
{
    weft_mem_seg_t *segs = calloc((size_t)handles, sizeof *segs);
    if (!segs) {
        fprintf(stderr, "reg-cost: out of memory\n");
        return -1;
    }
    int made = 0, rc = 0;
    for (; made < handles; made++) {
        if (ops->create(c->gran, &segs[made]) != WEFT_SUCCESS) {
            rc = fail("create");
            break;
        }
    }
    static const int threads[2] = {1, EXPORT_THREADS_MAX};
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = run_exports(handles, threads[i], segs, &out[i]);
    for (int i = 0; i < made; i++)
        ops->destroy(&segs[i]);
    free(segs);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------------- */
static void print_table(const size_result_t *res, int nsizes, const export_result_t ex[2],
                        int handles)
{
    printf("# median microseconds per call; owner = the allocating process, peer = the "
           "importing one\n");
    printf("#%11s", "bytes");
    for (int k = 0; k < OWNER_STEPS; k++)
        printf(" %11s", owner_names[k]);
    printf(" |");
    for (int k = 0; k < PEER_STEPS; k++)
        printf(" %11s", peer_names[k]);
    printf("\n");
    for (int s = 0; s < nsizes; s++) {
        printf("%12zu", res[s].bytes);
        for (int k = 0; k < OWNER_STEPS; k++)
            printf(" %11.1f", res[s].owner[k].median_us);
        printf(" |");
        for (int k = 0; k < PEER_STEPS; k++)
            printf(" %11.1f", res[s].peer[k].median_us);
        printf("\n");
    }
    printf("# export of %d handles of one granule each, descriptors closed at once\n", handles);
    printf("#%7s %10s %12s %12s %12s\n", "threads", "wall(ms)", "exports/s", "export(us)",
           "close(us)");
    for (int i = 0; i < 2; i++)
        printf("%8d %10.1f %12.0f %12.1f %12.1f\n", ex[i].threads, ex[i].wall_ms,
               ex[i].exports_per_s, ex[i].export_us, ex[i].close_us);
}

static void json_steps(FILE *f, const char *side, size_t bytes, const char *const *names,
                       const summary_t *sum, int n, int *first)
{
    for (int k = 0; k < n; k++) {
        fprintf(f,
                "%s\n    {\"bytes\": %zu, \"side\": \"%s\", \"step\": \"%s\", \"median_us\": %.3f, "
                "\"min_us\": %.3f, \"max_us\": %.3f}",
                *first ? "" : ",", bytes, side, names[k], sum[k].median_us, sum[k].min_us,
                sum[k].max_us);
        *first = 0;
    }
}

static int write_json(const char *path, const char *device_name, const ctx_t *c, int peer_dev,
                      int repeats, const size_result_t *res, int nsizes,
                      const export_result_t ex[2], int handles)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "reg-cost: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f,
            "{\n  \"bench\": \"reg-cost\",\n  \"device\": \"%s\",\n  \"driver_version\": %d,\n"
            "  \"granularity\": %zu,\n  \"owner_device\": 0,\n  \"peer_device\": %d,\n"
            "  \"repeats\": %d,\n  \"steps\": [",
            device_name, c->drv->driver_version, c->gran, peer_dev, repeats);
    int first = 1;
    for (int s = 0; s < nsizes; s++) {
        json_steps(f, "owner", res[s].bytes, owner_names, res[s].owner, OWNER_STEPS, &first);
        json_steps(f, "peer", res[s].bytes, peer_names, res[s].peer, PEER_STEPS, &first);
    }
    fprintf(f, "\n  ],\n  \"exports\": [");
    for (int i = 0; i < 2; i++)
        fprintf(f,
                "%s\n    {\"threads\": %d, \"handles\": %d, \"wall_ms\": %.3f, "
                "\"exports_per_s\": %.1f, \"export_us\": %.3f, \"close_us\": %.3f}",
                i ? "," : "", ex[i].threads, handles, ex[i].wall_ms, ex[i].exports_per_s,
                ex[i].export_us, ex[i].close_us);
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "reg-cost: writing %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------------------------- */
static void usage(FILE *f)
{
    fprintf(f, "usage: reg-cost [-b MIN] [-e MAX] [-n REPEATS] [-k HANDLES] [-p PEER_DEVICE]\n"
               "                [--json FILE]\n"
               "  -b, --min SIZE       smallest allocation (default 2M; rounded up to the\n"
               "                       granularity)\n"
               "  -e, --max SIZE       largest allocation (default 1G); sizes grow by 4\n"
               "  -n, --repeats N      timed rounds per size (default 10)\n"
               "  -k, --handles K      handles exported in the export-rate test (default 256)\n"
               "  -p, --peer-device D  the peer's GPU (default 1 if it can reach 0, else 0)\n"
               "      --json FILE      also write the results as JSON\n");
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "--peer") == 0)
        return peer_main(atoi(argv[2]), atoi(argv[3]));

    uint64_t min_bytes = 2u << 20, max_bytes = 1u << 30;
    int repeats = 10, handles = 256, peer_dev = -1;
    const char *json = NULL;
    static const struct option longopts[] = {{"min", required_argument, NULL, 'b'},
                                             {"max", required_argument, NULL, 'e'},
                                             {"repeats", required_argument, NULL, 'n'},
                                             {"handles", required_argument, NULL, 'k'},
                                             {"peer-device", required_argument, NULL, 'p'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "b:e:n:k:p:h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'b':
            bad = weft_parse_bytes(optarg, &min_bytes) != 0 || min_bytes == 0;
            break;
        case 'e':
            bad = weft_parse_bytes(optarg, &max_bytes) != 0 || max_bytes == 0;
            break;
        case 'n':
            bad = bench_parse_int(optarg, 1, MAX_REPEATS, &repeats) != 0;
            break;
        case 'k':
            bad = bench_parse_int(optarg, EXPORT_THREADS_MAX, 1 << 20, &handles) != 0;
            break;
        case 'p':
            bad = bench_parse_int(optarg, 0, 1 << 16, &peer_dev) != 0;
            break;
        case 'j':
            json = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || min_bytes > max_bytes) {
        usage(stderr);
        return 2;
    }

    const char *reason = NULL;
    if (!weft_cuda_driver_probe(&reason)) {
        printf("SKIP: no CUDA device (%s)\n", reason);
        return 77;
    }
    ctx_t c;
    if (ctx_init(&c, 0) != 0)
        return 1;
    int can = 0;
    if (peer_dev < 0)
        peer_dev =
            c.drv->device_count > 1 && cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess && can
                ? 1
                : 0;
    if (peer_dev >= c.drv->device_count) {
        fprintf(stderr, "reg-cost: peer device %d: only %d device(s)\n", peer_dev,
                c.drv->device_count);
        return 2;
    }

    /* Sizes: MIN rounded up to the granularity, times 4 while below MAX, then MAX. */
    size_t sizes[MAX_SIZES];
    int nsizes = 0;
    uint64_t top = (max_bytes + c.gran - 1) / c.gran * c.gran;
    for (uint64_t b = (min_bytes + c.gran - 1) / c.gran * c.gran; b < top && nsizes < MAX_SIZES - 1;
         b *= 4)
        sizes[nsizes++] = (size_t)b;
    sizes[nsizes++] = (size_t)top;

    struct cudaDeviceProp prop;
    const char *name = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "unknown";
    printf("# reg-cost: %s, driver %d.%d, granularity %zu, owner on device 0, peer on device %d,"
           " %d repeats\n",
           name, c.drv->driver_version / 1000, c.drv->driver_version % 1000 / 10, c.gran, peer_dev,
           repeats);
    fflush(stdout);

    size_result_t res[MAX_SIZES];
    export_result_t ex[2];
    int sock = -1, rc = 1;
    pid_t pid = start_peer(&sock, peer_dev);
    if (pid < 0)
        return 1;
    void *base = agree_base(sock, (size_t)top, c.gran);
    if (base) {
        if (run_sizes(&c, sock, base, sizes, nsizes, repeats, res) == 0 &&
            export_rates(&c, handles, ex) == 0)
            rc = 0;
        ops->release(base, (size_t)top);
    }
    msg_t done = {.type = MSG_DONE};
    send_msg(sock, &done, -1);
    close(sock);
    int wstatus = 0;
    if (waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        fprintf(stderr, "reg-cost: the peer ended with status 0x%x\n", wstatus);
        rc = 1;
    }
    if (rc != 0)
        return 1;
    print_table(res, nsizes, ex, handles);
    if (json && write_json(json, name, &c, peer_dev, repeats, res, nsizes, ex, handles) != 0)
        return 1;
    return 0;
}
