/*
 * test_mem_host.c - the host memory provider (src/mem/mem_host.c) as the registry uses it: one
 * sparse memfd of sparse_bytes() (2^62), cut into ranges.
 *
 * - sparse_bytes() is 2^62 without a file size limit (RLIMIT_FSIZE; the test lifts its soft
 *   limit, or exits 77 when the hard limit forbids), 0 under one; create above the limit fails
 *   with WEFT_ERR_NO_MEMORY instead of raising SIGXFSZ, and works up to it.
 * - A memfd of sparse_bytes() takes no memory until touched; two ranges of it mapped at two
 *   addresses of a reservation hold their own bytes (each mapped at its offset, one at the very
 *   end), and destroying a range leaves the memfd open.
 * - Export gives the whole memfd; an import of a range maps exactly the bytes written through
 *   the exporter's mapping of it, at the range's offset.
 * - Import refuses a range past the end of the memfd (also when offset + bytes would wrap) and
 *   a memfd that is not sealed, with an error, and closes the descriptor either way.
 * - Export with no descriptor left (RLIMIT_NOFILE) is WEFT_ERR_NO_MEMORY, the shortage that may
 *   pass (the registrar retries it), not a failure; the segment is left as it was, and exports
 *   once the limit is raised.
 * - Discard gives a range's memory back (fewer blocks) and the file keeps its size (no SIGBUS);
 *   the range then reads zeros through every mapping, the neighbouring range keeps its bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem/mem.h"
#include "util/log.h"
#include "check.h"

#define SPARSE_MAX ((size_t)1 << 62)
#define RANGE_PAGES 16

static size_t file_bytes; /* the sparse memfd's size: sparse_bytes() */

static const weft_mem_ops_t *mem = &weft_mem_host_ops;

/* Bytes of [p, p + bytes) that differ from value. */
static size_t count_not(const uint8_t *p, size_t bytes, uint8_t value)
{
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += p[i] != value;
    return bad;
}

/* 1 when fd is closed. */
static int is_closed(int fd)
{
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* sparse_bytes() follows RLIMIT_FSIZE, and create never goes past it (SIGXFSZ would kill). */
static void test_file_size_limit(size_t gran)
{
    struct rlimit saved, lim;
    if (getrlimit(RLIMIT_FSIZE, &saved) != 0) {
        CHECK(0, "getrlimit: %s", strerror(errno));
        return;
    }
    CHECK(mem->sparse_bytes() == SPARSE_MAX, "sparse_bytes() %zu without a file size limit",
          mem->sparse_bytes());
    lim = saved;
    lim.rlim_cur = 1000 * gran + 1;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
    CHECK(mem->sparse_bytes() == 0, "sparse_bytes() %zu under a limit of %llu bytes",
          mem->sparse_bytes(), (unsigned long long)lim.rlim_cur);
    weft_mem_seg_t seg = {.fd = -7};
    weft_status_t st = mem->create(1001 * gran, &seg);
    CHECK(st == WEFT_ERR_NO_MEMORY && seg.fd == -7 && strstr(weft_last_error(), "ulimit -f"),
          "create past the file size limit: %s (%s)", weft_status_string(st), weft_last_error());
    st = mem->create(1000 * gran, &seg);
    CHECK(st == WEFT_SUCCESS, "create at the file size limit: %s", weft_last_error());
    if (st == WEFT_SUCCESS)
        mem->destroy(&seg);
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0, "restore RLIMIT_FSIZE: %s", strerror(errno));
}

static void test_import_refusals(const weft_mem_seg_t *file, size_t range_bytes)
{
    const struct {
        const char *what;
        size_t offset, bytes;
    } bad[] = {
        {"past the end", file_bytes - 4096, 2 * 4096},
        {"offset past the end", file_bytes, 4096},
        {"offset + bytes wrapping", SIZE_MAX - 4095, 2 * 4096},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = -1;
        weft_status_t st = mem->export_fd(file, &fd);
        CHECK(st == WEFT_SUCCESS, "export: %s", weft_last_error());
        if (st != WEFT_SUCCESS)
            return;
        weft_mem_seg_t seg = {.fd = -7};
        st = mem->import_fd(fd, bad[i].offset, bad[i].bytes, &seg);
        CHECK(st != WEFT_SUCCESS && seg.fd == -7 && weft_last_error()[0] != '\0',
              "import of a range %s: %s", bad[i].what, weft_status_string(st));
        CHECK(is_closed(fd), "import of a range %s left the descriptor open", bad[i].what);
    }
    /* A memfd without seals could be truncated under the importer's mapping. */
    int fd = memfd_create("weft-test", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)range_bytes) == 0, "memfd: %s", strerror(errno));
    weft_mem_seg_t seg = {.fd = -7};
    weft_status_t st = mem->import_fd(fd, 0, range_bytes, &seg);
    CHECK(st != WEFT_SUCCESS && seg.fd == -7, "import of an unsealed memfd: %s",
          weft_status_string(st));
    CHECK(is_closed(fd), "import of an unsealed memfd left the descriptor open");
}

/* Export while the process has no descriptor left: WEFT_ERR_NO_MEMORY, seg untouched; then,
 * with room again, it exports. */
static void test_export_no_descriptor(const weft_mem_seg_t *seg)
{
    struct rlimit saved;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0, "getrlimit: %s", strerror(errno));
    int lowest = dup(0); /* the lowest free descriptor number */
    close(lowest);
    struct rlimit lim = saved;
    lim.rlim_cur = (rlim_t)lowest;
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s", strerror(errno));
    weft_mem_seg_t before = *seg;
    int fd = -7;
    weft_status_t st = mem->export_fd(seg, &fd);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0, "restore RLIMIT_NOFILE: %s", strerror(errno));
    CHECK(st == WEFT_ERR_NO_MEMORY && fd == -7, "export with no descriptor left: %s (%s), fd %d",
          weft_status_string(st), weft_last_error(), fd);
    CHECK(memcmp(&before, seg, sizeof before) == 0 && !is_closed(seg->fd),
          "a failed export changed the segment");
    st = mem->export_fd(seg, &fd);
    CHECK(st == WEFT_SUCCESS && fd >= 0, "export with room again: %s", weft_last_error());
    if (st == WEFT_SUCCESS)
        close(fd);
}

int main(void)
{
    size_t gran = mem->granularity();
    size_t range_bytes = RANGE_PAGES * gran;
    struct rlimit lim; /* the checks below need no file size limit */
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
        lim.rlim_cur = lim.rlim_max;
        if (lim.rlim_max != RLIM_INFINITY || setrlimit(RLIMIT_FSIZE, &lim) != 0) {
            printf("SKIP: a hard file size limit (ulimit -Hf) is set\n");
            return 77;
        }
    }
    test_file_size_limit(gran);
    file_bytes = mem->sparse_bytes();
    CHECK(file_bytes >= ((size_t)1 << 40), "sparse_bytes() %zu", file_bytes);
    if (file_bytes < 4 * range_bytes)
        return 1;
    weft_mem_seg_t file;
    weft_status_t st = mem->create(file_bytes, &file);
    CHECK(st == WEFT_SUCCESS, "create(%zu bytes): %s", file_bytes, weft_last_error());
    if (st != WEFT_SUCCESS)
        return 1;
    struct stat sb;
    CHECK(fstat(file.fd, &sb) == 0 && (uint64_t)sb.st_size == file_bytes && sb.st_blocks == 0,
          "a fresh sparse memfd: size %lld, %lld blocks", (long long)sb.st_size,
          (long long)sb.st_blocks);

    /* Two ranges, far apart in the file, mapped side by side. */
    void *base = NULL;
    st = mem->reserve(NULL, 2 * range_bytes, 0, &base);
    CHECK(st == WEFT_SUCCESS, "reserve: %s", weft_last_error());
    if (st != WEFT_SUCCESS)
        return 1;
    const size_t offsets[2] = {3 * range_bytes, file_bytes - range_bytes};
    weft_mem_seg_t ranges[2];
    uint8_t *maps[2];
    for (int i = 0; i < 2; i++) {
        ranges[i] = weft_mem_range(&file, offsets[i], range_bytes);
        maps[i] = (uint8_t *)base + (size_t)i * range_bytes;
        st = mem->map(&ranges[i], maps[i]);
        CHECK(st == WEFT_SUCCESS, "map range %d: %s", i, weft_last_error());
        if (st != WEFT_SUCCESS)
            return 1;
        memset(maps[i], 0x5a + i, range_bytes);
    }

    /* An importer of each range sees what was written through the exporter's mapping. */
    for (int i = 0; i < 2; i++) {
        int fd = -1;
        st = mem->export_fd(&ranges[i], &fd);
        CHECK(st == WEFT_SUCCESS, "export range %d: %s", i, weft_last_error());
        weft_mem_seg_t theirs;
        st = mem->import_fd(fd, offsets[i], range_bytes, &theirs);
        CHECK(st == WEFT_SUCCESS && theirs.offset == offsets[i], "import range %d: %s", i,
              weft_last_error());
        if (st != WEFT_SUCCESS)
            continue;
        uint8_t *view =
            mmap(NULL, range_bytes, PROT_READ, MAP_SHARED, theirs.fd, (off_t)theirs.offset);
        CHECK(view != MAP_FAILED, "mmap of the import: %s", strerror(errno));
        if (view != MAP_FAILED) {
            size_t bad = count_not(view, range_bytes, (uint8_t)(0x5a + i));
            CHECK(bad == 0, "range %d: the importer sees %zu wrong bytes", i, bad);
            munmap(view, range_bytes);
        }
        mem->destroy(&theirs);
        CHECK(is_closed(fd), "destroying an imported range left its descriptor open");
    }
    test_import_refusals(&file, range_bytes);
    test_export_no_descriptor(&ranges[0]);

    /* Discard range 0: zeros through the mapping, memory given back, range 1 intact. */
    CHECK(fstat(file.fd, &sb) == 0, "fstat");
    long long blocks_before = (long long)sb.st_blocks;
    st = mem->discard(&file, offsets[0], range_bytes);
    CHECK(st == WEFT_SUCCESS, "discard: %s", weft_last_error());
    CHECK(fstat(file.fd, &sb) == 0 && (uint64_t)sb.st_size == file_bytes &&
              (long long)sb.st_blocks < blocks_before,
          "after discard: size %lld, %lld blocks (before: %lld)", (long long)sb.st_size,
          (long long)sb.st_blocks, blocks_before);
    /* (Reading after the size check: a read fault on a hole of a memfd allocates a page.) */
    CHECK(count_not(maps[0], range_bytes, 0) == 0, "a discarded range does not read zeros");
    CHECK(count_not(maps[1], range_bytes, 0x5b) == 0, "discard touched the other range");
    CHECK(mem->discard(&file, file_bytes - gran, 2 * gran) != WEFT_SUCCESS,
          "discard past the end succeeded");

    /* Ranges borrow the file's descriptor: destroying one leaves it open. */
    int file_fd = file.fd;
    for (int i = 0; i < 2; i++) {
        CHECK(mem->unmap(maps[i], range_bytes) == WEFT_SUCCESS, "unmap %d", i);
        mem->destroy(&ranges[i]);
    }
    CHECK(!is_closed(file_fd), "destroying a range closed the file's descriptor");
    mem->destroy(&file);
    CHECK(is_closed(file_fd), "destroying the file left its descriptor open");
    CHECK(mem->release(base, 2 * range_bytes) == WEFT_SUCCESS, "release");
    if (failures == 0)
        printf("PASS test_mem_host\n");
    return failures != 0;
}
