/*
 * idx: the IDX format of MNIST and Fashion-MNIST (big-endian header, uint8
 * data), plain or gzip-compressed; gzip is detected by its magic bytes, not
 * by the file name, since zlib's gzread passes plain files through. Where
 * libdeflate is built in, a gzip file is inflated in one call (about three
 * times zlib's speed: 0.12 s against 0.38 s for Fashion-MNIST's training
 * images); anything it does not take whole (several members, a size that
 * does not match, corrupt data) goes through zlib, which gives the errors.
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#ifdef COHORT_HAVE_LIBDEFLATE
#include <fcntl.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#define IDX_CHUNK ((size_t)1 << 24)

typedef struct idx_file {
    const char *path;
    gzFile gz;
    unsigned char *mem; /* the file inflated at once, or NULL: read from gz */
    size_t mem_len, mem_pos;
    gz_cache_map cached; /* mem's mapping, where mem is a cache file's bytes */
    unsigned char *data; /* what idx_read_data returned, if it is not in mem */
    int ndims;
    uint32_t dims[8];
    uint64_t count; /* product of dims[1..] */
    uint64_t n;     /* dims[0] */
} idx_file;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Read up to n bytes; *got tells how many. Fails only on a zlib error. */
static cohort_status idx_read(idx_file *f, void *buf, size_t n, size_t *got, cohort_error *err)
{
    *got = 0;
    if (f->mem) {
        size_t left = f->mem_len - f->mem_pos;
        *got = n < left ? n : left;
        memcpy(buf, f->mem + f->mem_pos, *got);
        f->mem_pos += *got;
        return COHORT_OK;
    }
    unsigned char *p = buf;
    while (*got < n) {
        size_t want = n - *got;
        if (want > IDX_CHUNK)
            want = IDX_CHUNK;
        int r = gzread(f->gz, p + *got, (unsigned)want);
        if (r < 0) {
            int code;
            const char *msg = gzerror(f->gz, &code);
            if (code == Z_ERRNO)
                return cohort_fail(err, COHORT_ERR_IO, "%s: read failed: %s", f->path,
                                   strerror(errno));
            /* zlib's message starts with the name it was opened by, which
             * gzdopen makes "<fd:N>": dropped, the path is said below. */
            const char *sep = msg && !strncmp(msg, "<fd:", 4) ? strstr(msg, ">: ") : NULL;
            if (sep)
                msg = sep + 3;
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: corrupt gzip data: %s", f->path,
                               msg ? msg : "unknown error");
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return COHORT_OK;
}

#ifdef COHORT_HAVE_LIBDEFLATE
/*
 * The whole of a one-member gzip file into f->mem; 0 (and nothing kept) when
 * the file is not gzip, cannot be read, or is anything but one member whose
 * trailer's size is what it inflates to: zlib then reads it as a stream.
 * The inflated bytes of a file at least GZ_CACHE_MIN long come from the
 * cache (gz_cache.c) where it has them, and go there where it has not.
 */
static int idx_inflate_all(idx_file *f)
{
    int fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned char *in = NULL, *out = NULL;
    struct stat sb;
    size_t n = 0;
    int ok = 0, mapped = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 18 ||
        (uint64_t)sb.st_size > SIZE_MAX)
        goto done;
    n = (size_t)sb.st_size;
    /* A plain file goes to zlib unread: it is read once, there. */
    unsigned char magic[2];
    if (pread(fd, magic, 2, 0) != 2 || magic[0] != 0x1f || magic[1] != 0x8b)
        goto done;
    /* The trailer: CRC-32 and ISIZE, the size mod 2^32, little-endian. */
    unsigned char t[8];
    if (pread(fd, t, 8, (off_t)(n - 8)) != 8)
        goto done;
    uint32_t crc = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                   (uint32_t)t[3] << 24;
    size_t isize = (size_t)t[4] | (size_t)t[5] << 8 | (size_t)t[6] << 16 | (size_t)t[7] << 24;
    if (isize >= GZ_CACHE_MIN && gz_cache_get(&sb, crc, (uint32_t)isize, &f->cached)) {
        f->mem = (unsigned char *)f->cached.data;
        f->mem_len = f->cached.len;
        ok = 1;
        goto done;
    }
    /* Mapped, its pages those of the page cache: read into fresh memory,
     * Fashion-MNIST's 26 MB of training images cost the start of a run 49
     * ms of zeroing pages on a VM whose host had not backed them yet (7 ms
     * where it had), mapped 1 ms. As for the CSV reader, which maps its
     * files too, a file cut short by another process while it is inflated
     * raises SIGBUS. Where it cannot be mapped, it is read into a block on
     * huge pages (4 KiB pages took a fault each). */
    void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
        in = map;
        mapped = 1;
    } else {
        if (!(in = mem_alloc_big(n)))
            goto done;
        for (size_t got = 0; got < n;) {
            ssize_t r = read(fd, in + got, n - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                goto done; /* zlib reads it again and names the error */
            got += (size_t)r;
        }
    }
    /* Deflate inflates at most 1032:1, so a larger ISIZE is corrupt or
     * wrapped, and zlib will say which. */
    if (isize / 1032 > n || !(out = mem_alloc_big(isize)))
        goto done;
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    if (!d)
        goto done;
    size_t used_in = 0, used_out = 0;
    enum libdeflate_result r =
        libdeflate_gzip_decompress_ex(d, in, n, out, isize, &used_in, &used_out);
    libdeflate_free_decompressor(d);
    if (r == LIBDEFLATE_SUCCESS && used_in == n && used_out == isize) {
        if (isize >= GZ_CACHE_MIN)
            gz_cache_put(&sb, crc, out, isize);
        f->mem = out;
        f->mem_len = isize;
        out = NULL;
        ok = 1;
    }
done:
    if (mapped)
        munmap(in, n);
    else
        free(in);
    free(out);
    close(fd);
    return ok;
}
#else
static int idx_inflate_all(idx_file *f)
{
    (void)f;
    return 0;
}
#endif

/*
 * Open an IDX file and read its header. Labels have one dimension (magic
 * 0x00000801); images 2..8 (0x00000803 for MNIST).
 */
static cohort_status idx_open(idx_file *f, const char *path, int labels, cohort_error *err)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    const char *what = labels ? "label" : "image";
    if (!idx_inflate_all(f)) {
        /* A stream from a checked descriptor: gzopen would wait forever on
         * a FIFO with no writer. */
        int fd = file_open_regular(path, O_RDONLY, err);
        if (fd < 0)
            return COHORT_ERR_IO;
        errno = 0;
        if (!(f->gz = gzdopen(fd, "rb"))) {
            int e = errno;
            close(fd);
            if (e == 0)
                return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory opening", path);
            return cohort_fail(err, COHORT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        }
    }
    if (f->gz)
        gzbuffer(f->gz, 1u << 20);
    unsigned char head[4 + 4 * 8];
    size_t got;
    cohort_status st = idx_read(f, head, 4, &got, err);
    if (st)
        return st;
    uint32_t magic = got == 4 ? be32(head) : 0;
    int ndims = (int)(magic & 0xff);
    int ok = got == 4 && (magic >> 16) == 0 && ((magic >> 8) & 0xff) == 0x08 &&
             (labels ? ndims == 1 : ndims >= 2 && ndims <= 8);
    if (!ok) {
        if (got == 4 && (magic >> 16) == 0 && ((magic >> 8) & 0xff) != 0x08)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: IDX element type 0x%02x is not supported (only unsigned "
                               "bytes, 0x08)",
                               path, (magic >> 8) & 0xff);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x)", path, what,
                           magic, labels ? 0x801u : 0x803u);
    }
    if ((st = idx_read(f, head + 4, 4 * (size_t)ndims, &got, err)))
        return st;
    if (got != 4 * (size_t)ndims)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: truncated IDX header", path);
    f->ndims = ndims;
    f->count = 1;
    for (int i = 0; i < ndims; i++) {
        f->dims[i] = be32(head + 4 + 4 * i);
        if (f->dims[i] == 0 || f->dims[i] > INT32_MAX)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: dimension %d is %u; it must be in 1..2147483647", path, i,
                               f->dims[i]);
        if (i > 0 && __builtin_mul_overflow(f->count, (uint64_t)f->dims[i], &f->count))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: sample size overflows", path);
    }
    f->n = f->dims[0];
    return COHORT_OK;
}

static cohort_status idx_truncated(const idx_file *f, uint64_t total, uint64_t got,
                                   cohort_error *err)
{
    return cohort_fail(err, COHORT_ERR_INPUT,
                       "%s: truncated: expected %llu bytes of %s data, got %llu", f->path,
                       (unsigned long long)total, f->ndims == 1 ? "label" : "image",
                       (unsigned long long)got);
}

/*
 * The `total` bytes of data after the header, in *out, which f owns until
 * idx_close: in place when the file was inflated at once. A plain file is
 * checked against its size before anything is allocated; a gzip stream
 * cannot be, so the buffer grows as data arrives and a short stream fails
 * without a huge allocation.
 */
static cohort_status idx_read_data(idx_file *f, uint64_t total, const unsigned char **out,
                                   cohort_error *err)
{
    *out = NULL;
    if (total > SIZE_MAX)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: too large for this machine", f->path);
    if (f->mem) {
        size_t have = f->mem_len - f->mem_pos;
        if (have < total)
            return idx_truncated(f, total, have, err);
        *out = f->mem + f->mem_pos;
        f->mem_pos += (size_t)total;
        return COHORT_OK;
    }
    int sized = 0;
    struct stat sb;
    if (gzdirect(f->gz) && stat(f->path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        uint64_t head = 4 + 4 * (uint64_t)f->ndims;
        uint64_t have = (uint64_t)sb.st_size > head ? (uint64_t)sb.st_size - head : 0;
        if (have < total)
            return idx_truncated(f, total, have, err);
        sized = 1;
    }
    /* Known to be there: all at once. A stream: 1 MiB, doubled as it comes.
     * Blocks of mem_alloc_big, which the dataset can keep as they are. */
    size_t start = sized ? (size_t)total : ((size_t)1 << 20);
    size_t cap = total < start ? (size_t)total : start;
    size_t len = 0;
    unsigned char *buf = mem_alloc_big(cap ? cap : 1);
    if (!buf)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", f->path);
    while (len < total) {
        if (len == cap) {
            size_t ncap = cap * 2 < total ? cap * 2 : (size_t)total;
            unsigned char *nb = mem_alloc_big(ncap);
            if (!nb) {
                free(buf);
                return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory reading %llu bytes",
                                   f->path, (unsigned long long)total);
            }
            memcpy(nb, buf, len);
            free(buf);
            buf = nb;
            cap = ncap;
        }
        size_t got;
        cohort_status st = idx_read(f, buf + len, cap - len, &got, err);
        if (st) {
            free(buf);
            return st;
        }
        int short_read = got < cap - len;
        len += got;
        if (short_read)
            break; /* the stream ended before the buffer filled */
    }
    if (len < total) {
        free(buf);
        return idx_truncated(f, total, len, err);
    }
    free(f->data);
    f->data = buf;
    *out = buf;
    return COHORT_OK;
}

/*
 * After the data of a gzip stream read through zlib: read on to its end, so
 * that zlib checks the trailer (the CRC-32 and the length) that the data
 * stop short of. A file cut in its trailer, or with data whose CRC does not
 * match, is an error; bytes after the data are left unread, as in a plain
 * file. Nothing to do for a plain file or one inflated at once (libdeflate
 * checked the trailer).
 */
static cohort_status idx_finish(idx_file *f, cohort_error *err)
{
    if (!f->gz || gzdirect(f->gz))
        return COHORT_OK;
    unsigned char byte;
    size_t got;
    cohort_status st = idx_read(f, &byte, 1, &got, err);
    int code = Z_OK;
    if (!st && got == 0)
        gzerror(f->gz, &code);
    /* gzread reports a stream cut short only here, as Z_BUF_ERROR. */
    if (code == Z_BUF_ERROR)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated: the gzip stream ends before its trailer (CRC-32 "
                           "and length)",
                           f->path);
    return st;
}

static void idx_close(idx_file *f)
{
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
    if (f->cached.base)
        gz_cache_release(&f->cached);
    else
        free(f->mem);
    f->mem = NULL;
    free(f->data);
    f->data = NULL;
}

/*
 * Read IDX images (uint8, [n, d1, ...], kept as bytes in x8 [n, d1*...],
 * each standing for byte / 255: the gather of a batch scales them; a
 * sample of [n, H, W] is (H, W, 1), of [n, H, W, C] (H, W, C))
 * and labels (uint8 [n]). The counts must agree. On error *out is NULL and
 * err names the file; COHORT_ERR_IO when a file cannot be opened.
 */
cohort_status data_read_idx(const char *images, const char *labels, cohort_dataset **out,
                            cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_idx: out is NULL");
    *out = NULL;
    if (!images || !labels)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_idx: missing path");

    idx_file fi, fl;
    const unsigned char *img = NULL, *lbl = NULL;
    uint8_t *x8 = NULL;
    void *block = NULL; /* what x8 points into */
    size_t block_map_len = 0; /* block is a mapping of this many bytes; 0: allocated */
    int32_t *y = NULL;
    memset(&fl, 0, sizeof fl);
    cohort_status st = idx_open(&fi, images, 0, err);
    if (st)
        goto done;
    if ((st = idx_open(&fl, labels, 1, err)))
        goto done;
    if (fi.n != fl.n) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s has %llu images but %s has %llu labels",
                         images, (unsigned long long)fi.n, labels, (unsigned long long)fl.n);
        goto done;
    }
    /* Refuse absurd claims before reading a byte of data. */
    if ((st = data_check_x(fi.n, fi.count, images, err)))
        goto done;
    if ((st = idx_read_data(&fi, fi.n * fi.count, &img, err)))
        goto done;
    if ((st = idx_read_data(&fl, fl.n, &lbl, err)))
        goto done;
    if ((st = idx_finish(&fi, err)) || (st = idx_finish(&fl, err)))
        goto done;
    if ((st = data_alloc_y(fl.n, labels, &y, err)))
        goto done;
    /* The dataset keeps the block the bytes were read into: the file
     * inflated at once (header and all), or the data alone. A copy of them
     * had been 47 MB of page faults and copying for Fashion-MNIST, a third
     * of the time it took to read. */
    x8 = (uint8_t *)img;
    if (fi.cached.base) {
        block = fi.cached.base;
        block_map_len = fi.cached.map_len;
        memset(&fi.cached, 0, sizeof fi.cached);
        fi.mem = NULL;
    } else if (fi.mem) {
        block = fi.mem;
        fi.mem = NULL;
    } else {
        block = fi.data;
        fi.data = NULL;
    }
    for (size_t i = 0; i < (size_t)fl.n; i++)
        y[i] = lbl[i];

    char source[2100];
    snprintf(source, sizeof source, "idx:%s,%s", images, labels);
    uint64_t dims[8];
    for (int i = 1; i < fi.ndims; i++)
        dims[i - 1] = fi.dims[i];
    sample_shape shape = data_shape_of(dims, fi.ndims - 1);
    st = data_make(NULL, y, (int64_t)fi.n, (int64_t)fi.count, &shape, source, out, err);
    y = NULL;
    if (!st) {
        (*out)->x8 = x8;
        (*out)->x8_block = block;
        (*out)->x8_map_len = block_map_len;
        block = NULL;
    }
done:
    idx_close(&fi);
    idx_close(&fl);
    data_block_free(block, block_map_len);
    free(y);
    return st;
}
