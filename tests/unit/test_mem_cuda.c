/*
 * test_mem_cuda.c - unit test of the CUDA memory provider (mem_cuda.c) and the driver table
 * (cuda_driver.c), across two processes.
 *
 * Without a usable CUDA device (or without the CUDA backend built in) it checks the no-device
 * paths: the driver table reports WEFT_ERR_UNSUPPORTED with its reason, every provider call
 * returns that status and leaves its outputs alone, import_fd closes the descriptor it was
 * given, and driver errors are formatted and mapped to statuses. It then prints
 * "SKIP: no CUDA device (<reason>)" and exits 77 (ctest's SKIP_RETURN_CODE).
 *
 * With a device, the parent and a peer process (this binary run again with --child, started
 * with fork + exec because CUDA cannot be used across fork) agree on one address range free in
 * both, as the core's window does, and each reserves it exactly. The parent creates and maps a
 * 2 MiB and a 64 MiB segment there, checks them with cudaMemset and cudaMemcpy against seeded
 * random bytes, exports them, releases its handles (as the core does) and passes the
 * descriptors over a socketpair (SCM_RIGHTS). The peer imports and maps each at the SAME
 * address, checks the bytes, overwrites them with its own pattern and unmaps; the parent then
 * reads the peer's pattern through its own mapping, which proves both map the same memory.
 * The peer uses a second GPU when there is one that can reach the first (NVLink path),
 * otherwise the same GPU (as under MPS). Error paths: an exact reservation over an occupied
 * range fails with WEFT_ERR_NO_MEMORY, records nothing and leaves the mapping intact; a
 * segment size off the granularity fails; importing a descriptor that is not a CUDA handle
 * fails and still closes it; after unmap the range stays reserved, after release it is free; a
 * thread without a current context gets an error naming cudaSetDevice, and works after
 * attach_thread.
 *
 * Usage: test_mem_cuda [seed]. Exit status 0 pass, 1 fail, 77 skip.
 */
#include <stdio.h>

#ifndef WEFT_HAVE_CUDA

int main(void)
{
    printf("SKIP: no CUDA device (weft was built without the CUDA backend)\n");
    return 77;
}

#else

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mem/cuda_driver.h"
#include "mem/mem.h"
#include "util/fdpass.h"
#include "util/log.h"
#include "util/splitmix.h"

#define SKIP_EXIT 77
#define SMALL_BYTES (2u << 20)
#define LARGE_BYTES (64u << 20)
#define CHILD_XOR 0x5deece66dull /* the peer's pattern is seeded with seed ^ CHILD_XOR */
#define PEER_TIMEOUT_MS 60000
#define AGREE_ROUNDS 8
#define POISON 0xa5

static const char *role = "parent "; /* which process failed a check: "parent " or "peer " */

#define CHECK_PREFIX role
#define CHECK_TRAILER() printf(" [last error: %s]\n", weft_last_error())
#include "check.h"

/* A CUDA runtime call that must succeed; the test goes on after a failure (counted). */
#define CHECK_RT(call)                                                                             \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        CHECK(err_ == cudaSuccess, "%s: %s", cudaGetErrorName(err_), cudaGetErrorString(err_));    \
    } while (0)

static const weft_mem_ops_t *const ops = &weft_mem_cuda_ops;

/* ---------------------------------------------------------------------------------------------
 * Seeded bytes (splitmix64 over the word index, so any process regenerates them).
 * ------------------------------------------------------------------------------------------- */
static void fill_pattern(uint8_t *buf, size_t bytes, uint64_t seed)
{
    for (size_t i = 0; i < bytes / 8; i++) {
        uint64_t w = weft_splitmix64(seed ^ weft_splitmix64(i));
        memcpy(buf + 8 * i, &w, 8);
    }
}

/* Index of the first byte of buf that differs from the pattern, or bytes if none does. */
static size_t first_mismatch(const uint8_t *buf, size_t bytes, uint64_t seed)
{
    for (size_t i = 0; i < bytes / 8; i++) {
        uint64_t w = weft_splitmix64(seed ^ weft_splitmix64(i));
        if (memcmp(buf + 8 * i, &w, 8) != 0)
            return 8 * i;
    }
    return bytes;
}

/* Copy the device range at dev into host (poisoned first) and check it holds pattern seed. */
static void check_device_pattern(const void *dev, size_t bytes, uint64_t seed, uint8_t *host,
                                 const char *what)
{
    memset(host, ~POISON & 0xff, bytes);
    CHECK_RT(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    size_t bad = first_mismatch(host, bytes, seed);
    CHECK(bad == bytes, "%s: %zu bytes at %p differ from pattern 0x%" PRIx64 " at offset %zu", what,
          bytes, dev, seed, bad);
}

/* Fill the device range with cudaMemset (checked) and then with pattern seed. */
static void write_device_pattern(void *dev, size_t bytes, uint64_t seed, uint8_t *host)
{
    CHECK_RT(cudaMemset(dev, POISON, bytes));
    memset(host, 0, bytes);
    CHECK_RT(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    size_t i = 0;
    while (i < bytes && host[i] == POISON)
        i++;
    CHECK(i == bytes, "cudaMemset of %zu bytes at %p: byte %zu is 0x%02x", bytes, dev, i,
          i < bytes ? host[i] : 0);
    fill_pattern(host, bytes, seed);
    CHECK_RT(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

/* ---------------------------------------------------------------------------------------------
 * Messages between the parent and the peer: fixed records over a SOCK_SEQPACKET socketpair,
 * at most one descriptor each.
 * ------------------------------------------------------------------------------------------- */
enum { MSG_PROPOSE = 1, MSG_SEG, MSG_DONE, MSG_REPLY };

typedef struct msg {
    uint32_t type;
    uint32_t status; /* replies: 0 = ok, else the peer's failure count or "no" */
    uint64_t addr;   /* PROPOSE: the base; SEG: where to map; REPLY to PROPOSE: a counter-offer */
    uint64_t bytes;
    uint64_t seed;
} msg_t;

static int send_msg(int sock, const msg_t *m, int fd)
{
    ssize_t n = weft_fdpass_send(sock, m, sizeof *m, fd, true);
    CHECK(n == (ssize_t)sizeof *m, "sendmsg: %s", n < 0 ? strerror(errno) : "short");
    return n == (ssize_t)sizeof *m ? 0 : -1;
}

/* Receive one message within PEER_TIMEOUT_MS; *fd_out gets the attached descriptor or -1. */
static int recv_msg(int sock, msg_t *m, int *fd_out)
{
    ssize_t n = weft_fdpass_recv(sock, m, sizeof *m, PEER_TIMEOUT_MS, fd_out);
    if (n == (ssize_t)sizeof *m)
        return 0;
    if (n < 0 && errno == ETIMEDOUT)
        CHECK(0, "no message from the other process within %d ms", PEER_TIMEOUT_MS);
    else
        CHECK(0, "recvmsg: %s",
              n < 0    ? strerror(errno)
              : n == 0 ? "the other process is gone"
                       : "bad message");
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Shared checks
 * ------------------------------------------------------------------------------------------- */

/* Import a descriptor that is not a CUDA handle (a pipe's read end): the call must fail (with
 * expected, or with any status when expected is WEFT_SUCCESS) and still close it, which the
 * write end then sees as EPIPE. */
static void check_import_bad_fd(weft_status_t expected)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        CHECK(0, "pipe2: %s", strerror(errno));
        return;
    }
    weft_mem_seg_t seg = {.fd = -7, .handle = 7, .bytes = 7};
    weft_status_t st = ops->import_fd(p[0], 0, SMALL_BYTES, &seg);
    if (expected == WEFT_SUCCESS)
        CHECK(st != WEFT_SUCCESS, "import_fd(pipe) succeeded");
    else
        CHECK(st == expected, "import_fd(pipe) returned %s, expected %s", weft_status_string(st),
              weft_status_string(expected));
    CHECK(weft_last_error()[0] != '\0', "import_fd(pipe) failed without a message");
    CHECK(seg.fd == -7 && seg.handle == 7 && seg.bytes == 7, "import_fd(pipe) wrote seg_out");
    char byte = 0;
    ssize_t n = write(p[1], &byte, 1);
    CHECK(n < 0 && errno == EPIPE, "import_fd did not close the descriptor it was given");
    close(p[1]);
}

/* Reserve total + align anywhere, release it, and return the aligned base inside (0 on error):
 * a range this process has free, to propose as a common base. */
static uintptr_t find_free(size_t total, size_t align)
{
    void *p;
    weft_status_t st = ops->reserve(NULL, total + align, 0, &p);
    CHECK(st == WEFT_SUCCESS, "reserve(anywhere, %zu bytes)", total + align);
    if (st != WEFT_SUCCESS)
        return 0;
    CHECK(ops->release(p, total + align) == WEFT_SUCCESS, "release(%p)", p);
    return ((uintptr_t)p + align - 1) / align * align;
}

/* An exact reservation over a range that is reserved already must fail quietly. */
static void check_exact_over_occupied(void *addr, size_t bytes, const char *what)
{
    void *got = (void *)(uintptr_t)0x1234;
    weft_error_clear();
    weft_status_t st = ops->reserve(addr, bytes, 1, &got);
    CHECK(st == WEFT_ERR_NO_MEMORY, "exact reserve over %s at %p returned %s", what, addr,
          weft_status_string(st));
    CHECK(got == (void *)(uintptr_t)0x1234, "exact reserve over %s wrote addr_out", what);
    CHECK(weft_last_error()[0] == '\0', "exact reserve over %s recorded an error", what);
    if (st == WEFT_SUCCESS)
        ops->release(got, bytes);
}

static void check_pointer(const weft_cuda_driver_t *drv, const void *addr, const char *what)
{
    unsigned int memtype = 0;
    CUresult res = drv->cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                              (CUdeviceptr)(uintptr_t)addr);
    CHECK(res == CUDA_SUCCESS && memtype == CU_MEMORYTYPE_DEVICE,
          "%s at %p: memory type %u (result %d), expected device", what, addr, memtype, (int)res);
    uint64_t types = 0;
    res = drv->cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                     (CUdeviceptr)(uintptr_t)addr);
    CHECK(res == CUDA_SUCCESS && (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "%s at %p: allowed handle types 0x%" PRIx64 " (result %d) lack POSIX fd", what, addr,
          types, (int)res);
}

/* ---------------------------------------------------------------------------------------------
 * Without a device
 * ------------------------------------------------------------------------------------------- */
static int run_without_device(const char *reason)
{
    CHECK(reason && reason[0], "the probe failed without a reason");
    const weft_cuda_driver_t *drv = NULL;
    weft_error_clear();
    weft_status_t st = weft_cuda_driver_get(&drv);
    CHECK(st == WEFT_ERR_UNSUPPORTED && drv == NULL, "weft_cuda_driver_get returned %s",
          weft_status_string(st));
    CHECK(strstr(weft_last_error(), "CUDA backend unavailable: ") == weft_last_error() &&
              strstr(weft_last_error(), reason) != NULL,
          "weft_cuda_driver_get: message does not give the reason \"%s\"", reason);
    CHECK(weft_cuda_device_check() == WEFT_ERR_UNSUPPORTED, "weft_cuda_device_check");

    CHECK(strcmp(ops->name, "cuda") == 0, "provider name \"%s\"", ops->name);
    CHECK(ops->attach_thread(0) == WEFT_ERR_UNSUPPORTED, "attach_thread");
    CHECK(ops->granularity() == 0, "granularity() without a device");
    void *addr = (void *)(uintptr_t)0x1234;
    CHECK(ops->reserve(NULL, SMALL_BYTES, 0, &addr) == WEFT_ERR_UNSUPPORTED &&
              addr == (void *)(uintptr_t)0x1234,
          "reserve");
    CHECK(ops->reserve((void *)(uintptr_t)(1ull << 40), SMALL_BYTES, 1, &addr) ==
              WEFT_ERR_UNSUPPORTED,
          "exact reserve");
    CHECK(ops->release((void *)(uintptr_t)(1ull << 40), SMALL_BYTES) == WEFT_ERR_UNSUPPORTED,
          "release");
    weft_mem_seg_t seg = {.fd = -7, .handle = 7, .bytes = 7};
    CHECK(ops->create(SMALL_BYTES, &seg) == WEFT_ERR_UNSUPPORTED && seg.fd == -7 &&
              seg.handle == 7 && seg.bytes == 7,
          "create");
    weft_mem_seg_t given_away = {.fd = -1, .handle = 0, .bytes = SMALL_BYTES};
    ops->destroy(&given_away);
    CHECK(given_away.fd == -1 && given_away.handle == 0, "destroy of a given-away segment");
    CHECK(ops->sparse_bytes() == 0 && ops->discard(&seg, 0, SMALL_BYTES) == WEFT_ERR_UNSUPPORTED,
          "a sparse provider, or discard");
    CHECK(ops->map(&seg, (void *)(uintptr_t)(1ull << 40)) == WEFT_ERR_UNSUPPORTED, "map");
    CHECK(ops->unmap((void *)(uintptr_t)(1ull << 40), SMALL_BYTES) == WEFT_ERR_UNSUPPORTED,
          "unmap");
    int fd = -7;
    CHECK(ops->export_fd(&seg, &fd) == WEFT_ERR_UNSUPPORTED && fd == -7, "export_fd");
    check_import_bad_fd(WEFT_ERR_UNSUPPORTED);

    /* Driver results without a table: the numeric code, and the status mapping. */
    st = weft_cuda_error(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate(%d bytes)", 42);
    CHECK(st == WEFT_ERR_NO_MEMORY, "out of memory maps to %s", weft_status_string(st));
    CHECK(strcmp(weft_last_error(), "cuMemCreate(42 bytes): CUDA driver error 2") == 0,
          "message \"%s\"", weft_last_error());
    st = weft_cuda_error(CUDA_ERROR_INVALID_VALUE, "cuMemMap");
    CHECK(st == WEFT_ERR_CUDA, "invalid value maps to %s", weft_status_string(st));

    if (failures)
        return 1;
    printf("SKIP: no CUDA device (%s)\n", reason);
    return SKIP_EXIT;
}

/* ---------------------------------------------------------------------------------------------
 * The peer (--child SOCK DEVICE)
 * ------------------------------------------------------------------------------------------- */

/* Import, map at the same address, check the owner's bytes, write the peer's, unmap. */
static void child_segment(const msg_t *m, int fd, uint8_t *host)
{
    void *addr = (void *)(uintptr_t)m->addr;
    weft_mem_seg_t seg = {.fd = -1, .handle = 0, .bytes = 0};
    weft_status_t st = ops->import_fd(fd, 0, m->bytes, &seg);
    CHECK(st == WEFT_SUCCESS, "import_fd(%zu bytes)", (size_t)m->bytes);
    if (st != WEFT_SUCCESS)
        return;
    CHECK(seg.fd == -1 && seg.handle != 0 && seg.bytes == m->bytes, "imported seg");
    st = ops->map(&seg, addr);
    CHECK(st == WEFT_SUCCESS, "map(imported %zu bytes at %p)", (size_t)m->bytes, addr);
    ops->destroy(&seg); /* the mapping keeps the memory, as in the core */
    CHECK(seg.handle == 0, "destroy left the handle");
    if (st != WEFT_SUCCESS)
        return;
    check_device_pattern(addr, m->bytes, m->seed, host, "imported segment");
    fill_pattern(host, m->bytes, m->seed ^ CHILD_XOR);
    CHECK_RT(cudaMemcpy(addr, host, m->bytes, cudaMemcpyHostToDevice));
    CHECK_RT(cudaDeviceSynchronize());
    CHECK(ops->unmap(addr, m->bytes) == WEFT_SUCCESS, "unmap(imported at %p)", addr);
}

static int child_main(int sock, int device)
{
    role = "peer ";
    CHECK_RT(cudaSetDevice(device));
    if (failures)
        return 1;
    size_t gran = ops->granularity();
    CHECK(gran > 0, "granularity() in the peer");
    if (gran == 0)
        return 1;
    void *base = NULL;
    size_t total = 0;
    uint8_t *host = NULL; /* total bytes, once a base is agreed */
    for (;;) {
        msg_t m, reply = {.type = MSG_REPLY};
        int fd;
        if (recv_msg(sock, &m, &fd) != 0)
            break;
        if (m.type != MSG_SEG && fd >= 0) {
            close(fd);
            fd = -1;
        }
        if (m.type == MSG_PROPOSE) {
            void *got = NULL;
            if (base == NULL &&
                ops->reserve((void *)(uintptr_t)m.addr, m.bytes, 1, &got) == WEFT_SUCCESS) {
                CHECK(got == (void *)(uintptr_t)m.addr, "exact reserve placed at %p", got);
                base = got;
                total = m.bytes;
                host = malloc(total);
                CHECK(host != NULL, "malloc(%zu)", total);
            } else {
                reply.status = 1;
                reply.addr = find_free(m.bytes, gran);
            }
        } else if (m.type == MSG_SEG) {
            int ok = fd >= 0 && host != NULL && m.addr >= (uintptr_t)base &&
                     m.bytes <= total - (m.addr - (uintptr_t)base);
            CHECK(ok, "segment message without a descriptor or outside the agreed range");
            if (ok)
                child_segment(&m, fd, host);
            else if (fd >= 0)
                close(fd);
            reply.status = (uint32_t)failures;
        } else if (m.type == MSG_DONE) {
            CHECK(base != NULL, "done before a base was agreed");
            if (base) {
                check_exact_over_occupied(base, total, "the peer's reservation");
                CHECK(ops->release(base, total) == WEFT_SUCCESS, "release in the peer");
            }
            check_import_bad_fd(WEFT_SUCCESS);
            reply.status = (uint32_t)failures;
            send_msg(sock, &reply, -1);
            break;
        }
        if (send_msg(sock, &reply, -1) != 0)
            break;
    }
    free(host);
    return failures ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * The parent
 * ------------------------------------------------------------------------------------------- */
static pid_t start_peer(int *sock_out, int device)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        CHECK(0, "socketpair: %s", strerror(errno));
        return -1;
    }
    char sock_arg[16], dev_arg[16];
    snprintf(sock_arg, sizeof sock_arg, "%d", sv[1]);
    snprintf(dev_arg, sizeof dev_arg, "%d", device);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls until exec: this process inherited a CUDA runtime. */
        if (fcntl(sv[1], F_SETFD, 0) == 0)
            execl("/proc/self/exe", "test_mem_cuda", "--child", sock_arg, dev_arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    if (pid < 0) {
        CHECK(0, "fork: %s", strerror(errno));
        close(sv[0]);
        return -1;
    }
    *sock_out = sv[0];
    return pid;
}

/* Agree with the peer on a base where both hold an exact reservation of total bytes (the
 * core's window protocol, for two processes). Returns the base, or NULL. */
static void *agree_base(int sock, size_t total, size_t gran)
{
    uintptr_t cand = find_free(total, gran);
    for (int round = 0; round < AGREE_ROUNDS && cand != 0; round++) {
        void *got = NULL;
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
        printf("# round %d: the peer cannot reserve 0x%" PRIxPTR ", it proposes 0x%" PRIx64 "\n",
               round, cand, reply.addr);
        ops->release(got, total);
        cand = (uintptr_t)reply.addr;
    }
    CHECK(0, "no common base for %zu bytes after %d rounds", total, AGREE_ROUNDS);
    return NULL;
}

/* A thread that never selected a device has no current context: the provider must say so, and
 * work once attach_thread made device 0 current (the registrar's case, with its communicator's
 * device); a negative device is refused. */
typedef struct context_probe {
    size_t before, after; /* granularity() before and after attach_thread */
    char message[512];    /* the last error after the first call */
    weft_status_t attach;
    int device; /* cudaGetDevice after attach_thread */
} context_probe_t;

static void *context_probe_thread(void *arg)
{
    context_probe_t *p = arg;
    p->before = ops->granularity();
    snprintf(p->message, sizeof p->message, "%s", weft_last_error());
    p->attach = ops->attach_thread(0);
    p->after = ops->granularity();
    if (cudaGetDevice(&p->device) != cudaSuccess)
        p->device = -1;
    return NULL;
}

static void check_thread_without_context(size_t gran)
{
    CHECK(ops->attach_thread(0) == WEFT_SUCCESS, "attach_thread on a thread with a context");
    CHECK(ops->attach_thread(-1) == WEFT_ERR_INTERNAL, "attach_thread(-1)");
    context_probe_t p = {.before = 1, .device = -2};
    pthread_t t;
    if (pthread_create(&t, NULL, context_probe_thread, &p) != 0) {
        CHECK(0, "pthread_create");
        return;
    }
    pthread_join(t, NULL);
    CHECK(p.before == 0 && strstr(p.message, "cuCtxGetDevice") != NULL &&
              strstr(p.message, "cudaSetDevice") != NULL,
          "granularity() on a thread without a context returned %zu, message \"%s\"", p.before,
          p.message);
    CHECK(p.attach == WEFT_SUCCESS && p.after == gran && p.device == 0,
          "after attach_thread (%s): granularity() %zu, device %d", weft_status_string(p.attach),
          p.after, p.device);
}

typedef struct segment {
    size_t bytes;
    void *addr;
    uint64_t seed;
    weft_mem_seg_t seg;
    int mapped;
} segment_t;

static int run_with_device(uint64_t seed)
{
    CHECK_RT(cudaSetDevice(0));
    CHECK(weft_cuda_device_check() == WEFT_SUCCESS, "weft_cuda_device_check");
    const weft_cuda_driver_t *drv;
    if (failures || weft_cuda_driver_get(&drv) != WEFT_SUCCESS)
        return 1;
    int ndev = drv->device_count, peer_dev = 0, can = 0;
    if (ndev > 1 && cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess && can)
        peer_dev = 1;
    size_t gran = ops->granularity();
    CHECK(gran > 0 && (gran & (gran - 1)) == 0, "granularity %zu", gran);
    if (gran == 0)
        return 1;
    printf("# driver %d.%d, %d device(s), granularity %zu, peer on device %d, seed %" PRIu64 "\n",
           drv->driver_version / 1000, drv->driver_version % 1000 / 10, ndev, gran, peer_dev, seed);
    check_thread_without_context(gran);

    /* The driver's messages name the result, then describe it. */
    static const char expect[] = "cuMemMap(1): CUDA_ERROR_INVALID_VALUE: ";
    CHECK(weft_cuda_error(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%d)", 1) == WEFT_ERR_CUDA &&
              strncmp(weft_last_error(), expect, sizeof expect - 1) == 0 &&
              strlen(weft_last_error()) > sizeof expect - 1,
          "message \"%s\"", weft_last_error());

    segment_t segs[2] = {
        {.bytes = (SMALL_BYTES + gran - 1) / gran * gran, .seed = seed},
        {.bytes = (LARGE_BYTES + gran - 1) / gran * gran, .seed = weft_splitmix64(seed)},
    };
    size_t total = segs[0].bytes + segs[1].bytes;
    uint8_t *host = malloc(segs[1].bytes);
    CHECK(host != NULL, "malloc");
    int sock = -1;
    pid_t pid = host ? start_peer(&sock, peer_dev) : -1;
    if (pid < 0) {
        free(host);
        return 1;
    }
    void *base = agree_base(sock, total, gran);

    if (base) {
        printf("# common base %p, %zu bytes\n", base, total);
        segs[0].addr = base;
        segs[1].addr = (char *)base + segs[0].bytes;

        weft_mem_seg_t odd = {.fd = -7, .handle = 7, .bytes = 7};
        CHECK(ops->create(gran / 2, &odd) != WEFT_SUCCESS && odd.handle == 7,
              "create(%zu bytes), off the granularity", gran / 2);

        for (int i = 0; i < 2; i++) {
            segment_t *s = &segs[i];
            weft_status_t st = ops->create(s->bytes, &s->seg);
            CHECK(st == WEFT_SUCCESS, "create(%zu)", s->bytes);
            if (st != WEFT_SUCCESS)
                continue;
            CHECK(s->seg.fd == -1 && s->seg.handle != 0 && s->seg.bytes == s->bytes,
                  "created seg {fd %d, handle 0x%" PRIx64 ", %zu bytes}", s->seg.fd, s->seg.handle,
                  s->seg.bytes);
            st = ops->map(&s->seg, s->addr);
            CHECK(st == WEFT_SUCCESS, "map(%zu bytes at %p)", s->bytes, s->addr);
            s->mapped = st == WEFT_SUCCESS;
            if (!s->mapped)
                continue;
            check_pointer(drv, s->addr, "mapped segment");
            write_device_pattern(s->addr, s->bytes, s->seed, host);
        }
        check_exact_over_occupied(base, total, "mapped segments");
        check_exact_over_occupied(segs[1].addr, gran, "the middle of the reservation");
        for (int i = 0; i < 2; i++) {
            if (segs[i].mapped)
                check_device_pattern(segs[i].addr, segs[i].bytes, segs[i].seed, host,
                                     "own segment after the failed reservations");
        }

        for (int i = 0; i < 2; i++) {
            segment_t *s = &segs[i];
            if (!s->mapped)
                continue;
            int fd = -1;
            weft_status_t st = ops->export_fd(&s->seg, &fd);
            CHECK(st == WEFT_SUCCESS && fd >= 0, "export_fd(%zu bytes)", s->bytes);
            if (st != WEFT_SUCCESS)
                continue;
            CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC, "the exported fd is not close-on-exec");
            ops->destroy(&s->seg); /* as the core does: the mapping and the fd keep the memory */
            CHECK(s->seg.handle == 0, "destroy left the handle");
            msg_t m = {.type = MSG_SEG,
                       .addr = (uintptr_t)s->addr,
                       .bytes = s->bytes,
                       .seed = s->seed},
                  reply;
            int rfd;
            if (send_msg(sock, &m, fd) == 0 && recv_msg(sock, &reply, &rfd) == 0)
                CHECK(reply.status == 0, "the peer failed %u check(s) on the %zu-byte segment",
                      reply.status, s->bytes);
            close(fd);
            check_device_pattern(s->addr, s->bytes, s->seed ^ CHILD_XOR, host,
                                 "own segment after the peer wrote it");
        }
    }

    msg_t done = {.type = MSG_DONE}, reply;
    int rfd;
    if (send_msg(sock, &done, -1) == 0 && recv_msg(sock, &reply, &rfd) == 0)
        CHECK(reply.status == 0, "the peer failed %u check(s)", reply.status);
    close(sock);
    int wstatus = 0;
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
    int waited_ms = 0;
    pid_t w;
    while ((w = waitpid(pid, &wstatus, WNOHANG)) == 0 && waited_ms < PEER_TIMEOUT_MS) {
        nanosleep(&nap, NULL);
        waited_ms += 10;
    }
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &wstatus, 0);
    }
    CHECK(w == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
          "the peer ended with status 0x%x", wstatus);

    if (base) {
        for (int i = 0; i < 2; i++) {
            if (segs[i].mapped)
                CHECK(ops->unmap(segs[i].addr, segs[i].bytes) == WEFT_SUCCESS, "unmap(%p)",
                      segs[i].addr);
            ops->destroy(&segs[i].seg); /* left only if export failed */
        }
        check_exact_over_occupied(base, total, "the unmapped reservation");
        CHECK(ops->release(base, total) == WEFT_SUCCESS, "release(%p, %zu)", base, total);
        void *again = NULL;
        weft_status_t st = ops->reserve(base, total, 1, &again);
        CHECK(st == WEFT_SUCCESS && again == base, "exact reserve of the released range: %s",
              weft_status_string(st));
        if (st == WEFT_SUCCESS)
            ops->release(again, total);
    }
    free(host);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child_main(atoi(argv[2]), atoi(argv[3]));
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);

    const char *reason = NULL;
    int rc = weft_cuda_driver_probe(&reason) ? run_with_device(seed) : run_without_device(reason);
    if (rc == 0)
        printf("PASS: test_mem_cuda\n");
    return rc;
}

#endif /* WEFT_HAVE_CUDA */
