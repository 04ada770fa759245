/*
 * gz_cache: a gzip file's inflated bytes, kept in a file of their own so that
 * the next run maps them instead of inflating again. Inflating Fashion-MNIST's
 * training images (26 MB of gzip, 47 MB inflated) took 70-190 ms on one core
 * of a Zen 5 VM, a tenth of a three-epoch seed run; mapping the inflated
 * bytes and checking their CRC-32 takes 6-8 ms. torchvision keeps its MNIST
 * the same way, inflated once into files of its own.
 *
 * Where: $COHORT_CACHE_DIR, else $XDG_CACHE_HOME/cohort, else
 * $HOME/.cache/cohort; COHORT_CACHE_DIR=off (or empty) turns it off. One
 * file per source file, named by its device and inode, "gz-<dev>-<ino>",
 * created 0600 in a directory made 0700. Only files of at least
 * GZ_CACHE_MIN inflated bytes are kept: smaller ones inflate in under a
 * millisecond.
 *
 * A cache file is used only when everything it records matches: the source's
 * device, inode, size, modification and change times (any write to the source
 * changes the last), and the CRC-32 and length of the gzip trailer, which are
 * also checked against the mapped bytes themselves. So a cache file cut short
 * or corrupted, or written by a crash before it reached the disk, is inflated
 * again and replaced, and one not owned by this user is never read. It is
 * written to a temporary name and renamed over the old one, so readers see
 * the old file or the new, never a part: processes that miss at once each
 * write a whole file and the last rename stands. Nothing about the cache is
 * an error: where it cannot be read or written, the source is inflated as
 * without it. As the IDX reader's mapped gzip files, a cache file cut short
 * by another process while mapped raises SIGBUS; cohort itself only renames
 * over it, which leaves the mapped file whole.
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#ifdef COHORT_HAVE_LIBDEFLATE
#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define GZ_CACHE_MAGIC 0x3148435a54524843ull /* "CHRTZCH1" read little-endian */

/* Before the inflated bytes; native byte order (a file of another order
 * has another magic, and is a miss). */
typedef struct gz_cache_head {
    uint64_t magic;
    uint64_t dev, ino, size;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t len;  /* inflated bytes after this header */
    uint32_t crc;  /* their CRC-32, the gzip trailer's */
    uint32_t pad0;
    unsigned char pad[48];
} gz_cache_head;

_Static_assert(sizeof(gz_cache_head) == GZ_CACHE_HEAD, "gz_cache_head is GZ_CACHE_HEAD bytes");

/* The directory in dir, or 0 where the cache is off or has no place. */
static int cache_dir(char *dir, size_t cap)
{
    const char *d = getenv("COHORT_CACHE_DIR");
    int n;
    if (d) {
        if (!d[0] || strcmp(d, "off") == 0)
            return 0;
        n = snprintf(dir, cap, "%s", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && d[0] == '/') {
        n = snprintf(dir, cap, "%s/cohort", d);
    } else if ((d = getenv("HOME")) && d[0]) {
        n = snprintf(dir, cap, "%s/.cache/cohort", d);
    } else {
        return 0;
    }
    return n > 0 && (size_t)n < cap;
}

/* The cache file of src in dir. */
static int cache_path(char *path, size_t cap, const char *dir, const struct stat *src)
{
    int n = snprintf(path, cap, "%s/gz-%llx-%llx", dir, (unsigned long long)src->st_dev,
                     (unsigned long long)src->st_ino);
    return n > 0 && (size_t)n < cap;
}

static void head_of(gz_cache_head *h, const struct stat *src, uint32_t crc, uint64_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = GZ_CACHE_MAGIC;
    h->dev = (uint64_t)src->st_dev;
    h->ino = (uint64_t)src->st_ino;
    h->size = (uint64_t)src->st_size;
    h->mtime_s = (int64_t)src->st_mtim.tv_sec;
    h->mtime_ns = (int64_t)src->st_mtim.tv_nsec;
    h->ctime_s = (int64_t)src->st_ctim.tv_sec;
    h->ctime_ns = (int64_t)src->st_ctim.tv_nsec;
    h->len = len;
    h->crc = crc;
}

int gz_cache_get(const struct stat *src, uint32_t crc, uint32_t isize, gz_cache_map *out)
{
    memset(out, 0, sizeof *out);
    char dir[PATH_MAX], path[PATH_MAX];
    if (!cache_dir(dir, sizeof dir) || !cache_path(path, sizeof path, dir, src))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    struct stat sb;
    gz_cache_head h, want;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
             (uint64_t)sb.st_size > GZ_CACHE_HEAD && (uint64_t)sb.st_size <= SIZE_MAX &&
             pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
    uint64_t len = ok ? (uint64_t)sb.st_size - GZ_CACHE_HEAD : 0;
    head_of(&want, src, crc, len);
    /* The trailer's ISIZE is the length mod 2^32. */
    ok = ok && memcmp(&h, &want, sizeof h) == 0 && (uint32_t)len == isize;
    void *map = MAP_FAILED;
    if (ok)
        map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 0;
    const unsigned char *data = (const unsigned char *)map + GZ_CACHE_HEAD;
    if ((uint32_t)libdeflate_crc32(0, data, (size_t)len) != crc) {
        munmap(map, (size_t)sb.st_size);
        return 0;
    }
    out->base = map;
    out->map_len = (size_t)sb.st_size;
    out->data = data;
    out->len = (size_t)len;
    return 1;
}

/* mkdir -p, the directories it makes 0700. 0 when path is not a directory
 * at the end. */
static int make_dirs(char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0)
        return S_ISDIR(sb.st_mode);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        int r = mkdir(path, 0700);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return 0;
    }
    return (mkdir(path, 0700) == 0 || errno == EEXIST) && stat(path, &sb) == 0 &&
           S_ISDIR(sb.st_mode);
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        len -= (size_t)w;
    }
    return 1;
}

void gz_cache_put(const struct stat *src, uint32_t crc, const void *data, size_t len)
{
    static _Atomic unsigned serial;
    char dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 64];
    if (len < GZ_CACHE_MIN || !cache_dir(dir, sizeof dir) || !make_dirs(dir) ||
        !cache_path(path, sizeof path, dir, src))
        return;
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
                     atomic_fetch_add(&serial, 1u));
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    /* No fsync: a file the machine lost part of fails its CRC at the next
     * read and is written again. */
    gz_cache_head h;
    head_of(&h, src, crc, len);
    int ok = write_all(fd, &h, sizeof h) && write_all(fd, data, len);
    ok = close(fd) == 0 && ok;
    /* A link or anything else not a regular file at path is left alone. */
    if (!ok || file_check_replaceable(path, NULL) || rename(tmp, path) != 0)
        unlink(tmp);
}

int gz_cache_built(void) { return 1; }

void gz_cache_release(gz_cache_map *m)
{
    if (m->base)
        munmap(m->base, m->map_len);
    memset(m, 0, sizeof *m);
}
#else
int gz_cache_get(const struct stat *src, uint32_t crc, uint32_t isize, gz_cache_map *out)
{
    (void)src, (void)crc, (void)isize;
    memset(out, 0, sizeof *out);
    return 0;
}

void gz_cache_put(const struct stat *src, uint32_t crc, const void *data, size_t len)
{
    (void)src, (void)crc, (void)data, (void)len;
}

void gz_cache_release(gz_cache_map *m) { memset(m, 0, sizeof *m); }

int gz_cache_built(void) { return 0; }
#endif
