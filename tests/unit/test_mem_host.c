/*
 * test_mem_host.c - the host memory provider (src/mem/mem_host.c) as the registry uses it: one
 * sparse memfd the size of a slice, cut into ranges.
 *
 * - A memfd of 64 GiB takes no memory until touched; two ranges of it mapped at two addresses
 *   of a reservation hold their own bytes (each mapped at its offset), and destroying a range
 *   leaves the memfd open.
 * - Export gives the whole memfd; an import of a range maps exactly the bytes written through
 *   the exporter's mapping of it, at the range's offset.
 * - Import refuses a range past the end of the memfd (also when offset + bytes would wrap) and
 *   a memfd that is not sealed, with an error, and closes the descriptor either way.
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
#include <sys/stat.h>
#include <unistd.h>

#include "mem/mem.h"
#include "util/log.h"
#include "check.h"

#define SLICE_BYTES (64ull << 30)
#define RANGE_PAGES 16

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

static void test_import_refusals(const weft_mem_seg_t *file, size_t range_bytes)
{
    static const struct {
        const char *what;
        size_t offset, bytes;
    } bad[] = {
        {"past the end", SLICE_BYTES - 4096, 2 * 4096},
        {"offset past the end", SLICE_BYTES, 4096},
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

int main(void)
{
    size_t gran = mem->granularity();
    size_t range_bytes = RANGE_PAGES * gran;
    CHECK(mem->sparse, "the host provider is not sparse");
    weft_mem_seg_t file;
    weft_status_t st = mem->create(SLICE_BYTES, &file);
    CHECK(st == WEFT_SUCCESS, "create(64 GiB): %s", weft_last_error());
    if (st != WEFT_SUCCESS)
        return 1;
    struct stat sb;
    CHECK(fstat(file.fd, &sb) == 0 && (uint64_t)sb.st_size == SLICE_BYTES && sb.st_blocks == 0,
          "a fresh memfd of 64 GiB: size %lld, %lld blocks", (long long)sb.st_size,
          (long long)sb.st_blocks);

    /* Two ranges, far apart in the file, mapped side by side. */
    void *base = NULL;
    st = mem->reserve(NULL, 2 * range_bytes, 0, &base);
    CHECK(st == WEFT_SUCCESS, "reserve: %s", weft_last_error());
    if (st != WEFT_SUCCESS)
        return 1;
    const size_t offsets[2] = {3 * range_bytes, SLICE_BYTES - range_bytes};
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

    /* Discard range 0: zeros through the mapping, memory given back, range 1 intact. */
    CHECK(fstat(file.fd, &sb) == 0, "fstat");
    long long blocks_before = (long long)sb.st_blocks;
    st = mem->discard(&file, offsets[0], range_bytes);
    CHECK(st == WEFT_SUCCESS, "discard: %s", weft_last_error());
    CHECK(fstat(file.fd, &sb) == 0 && (uint64_t)sb.st_size == SLICE_BYTES &&
              (long long)sb.st_blocks < blocks_before,
          "after discard: size %lld, %lld blocks (before: %lld)", (long long)sb.st_size,
          (long long)sb.st_blocks, blocks_before);
    /* (Reading after the size check: a read fault on a hole of a memfd allocates a page.) */
    CHECK(count_not(maps[0], range_bytes, 0) == 0, "a discarded range does not read zeros");
    CHECK(count_not(maps[1], range_bytes, 0x5b) == 0, "discard touched the other range");
    CHECK(mem->discard(&file, SLICE_BYTES - gran, 2 * gran) != WEFT_SUCCESS,
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
