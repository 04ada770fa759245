/*
 * test_data: the dataset readers. Writes small IDX (plain and gzip), CSV,
 * NPY and NPZ (stored, deflated, Zip64 fields) files into a temp dir, reads
 * them back against known values, walks every error path with its message,
 * loads fashion-mnist:train and checks the split.
 */
#include "check.h"
#include "backend/backend_impl.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "util/util.h"

#include <dirent.h>
#include <locale.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[64];

static const char *tpath(char *buf, const char *name)
{
    snprintf(buf, 512, "%s/%s", tmpdir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* mode "wb": a new file; "ab": one more gzip member after what is there. */
static void gz_to(const char *path, const char *mode, const void *data, size_t len)
{
    gzFile g = gzopen(path, mode);
    if (!g || gzwrite(g, data, (unsigned)len) != (int)len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    gzclose(g);
}

static void write_gz(const char *path, const void *data, size_t len) { gz_to(path, "wb", data, len); }

static void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

/* Overwrite n bytes of a file at off from whence (SEEK_SET, SEEK_END). */
static void patch_file(const char *path, long off, int whence, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, off, whence) != 0 || fwrite(bytes, 1, n, f) != n) {
        fprintf(stderr, "cannot patch %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* ---- IDX ------------------------------------------------------------- */

/* An IDX file: magic, dims (big endian), then `len` data bytes. */
static size_t make_idx(unsigned char *buf, uint32_t magic, const uint32_t *dims, int ndims,
                       const unsigned char *data, size_t len)
{
    size_t p = 0;
    for (int s = 24; s >= 0; s -= 8)
        buf[p++] = (unsigned char)(magic >> s);
    for (int i = 0; i < ndims; i++)
        for (int s = 24; s >= 0; s -= 8)
            buf[p++] = (unsigned char)(dims[i] >> s);
    if (len)
        memcpy(buf + p, data, len);
    return p + len;
}

static const unsigned char IMG[12] = {0, 200, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const unsigned char LBL[3] = {1, 0, 2};

/* The three 2 x 2 images of IMG as an IDX file in buf (28 bytes); its size. */
static size_t small_images(unsigned char *buf)
{
    uint32_t d3[3] = {3, 2, 2};
    return make_idx(buf, 0x803, d3, 3, IMG, 12);
}

static void write_idx_pair(const char *img_path, const char *lbl_path, int gz, uint32_t n_img,
                           size_t img_bytes, uint32_t n_lbl)
{
    unsigned char buf[256];
    uint32_t d3[3] = {n_img, 2, 2}, d1[1] = {n_lbl};
    size_t len = make_idx(buf, 0x803, d3, 3, IMG, img_bytes);
    if (gz)
        write_gz(img_path, buf, len);
    else
        write_file(img_path, buf, len);
    len = make_idx(buf, 0x801, d1, 1, LBL, n_lbl < 3 ? n_lbl : 3);
    if (gz)
        write_gz(lbl_path, buf, len);
    else
        write_file(lbl_path, buf, len);
}

static void check_small_idx(const cohort_dataset *ds)
{
    CHECK(ds != NULL);
    if (!ds)
        return;
    CHECK(ds->n == 3);
    CHECK(ds->dim == 4);
    CHECK(ds->n_classes == 3);
    /* The pixels stay bytes; a batch's gather scales them by 1/255. */
    CHECK(ds->x == NULL && ds->x8 != NULL);
    if (!ds->x8)
        return;
    CHECK(ds->x8[0] == 0 && ds->x8[1] == 200 && ds->x8[2] == 255 && ds->x8[11] == 9);
    float row[12];
    host_row_of_bytes(row, ds->x8, 12);
    CHECK(row[0] == 0.0f);
    CHECK_NEAR(row[1], 200.0 / 255.0, 1e-7);
    CHECK(row[2] == 1.0f);
    CHECK_NEAR(row[11], 9.0 / 255.0, 1e-7);
    /* Every byte, alone (the scalar loop) and in one row (the vector one),
     * is the quotient byte / 255 correctly rounded, whatever the loop
     * computes it with. */
    uint8_t all[256 + 3];
    float all_f[256 + 3];
    for (int v = 0; v < 256 + 3; v++)
        all[v] = (uint8_t)(v < 256 ? v : 255 - v % 256);
    host_row_of_bytes(all_f, all, 256 + 3);
    int wrong = 0;
    for (int v = 0; v < 256 + 3; v++) {
        volatile float num = (float)all[v];
        float q = num / 255.0f;
        uint8_t b = all[v];
        float f;
        host_row_of_bytes(&f, &b, 1);
        wrong += f != q || all_f[v] != q;
    }
    CHECK_MSG(wrong == 0, "%d bytes are not byte / 255 correctly rounded", wrong);
    CHECK(ds->y[0] == 1 && ds->y[1] == 0 && ds->y[2] == 2);
    /* The dataset keeps the block it read into: the data alone, or a gzip
     * file inflated at once, x8 then after its 16-byte header (ASan checks
     * the free). */
    CHECK(ds->x8 == (const uint8_t *)ds->x8_block ||
          ds->x8 == (const uint8_t *)ds->x8_block + 16);
}

static void test_idx(void)
{
    char a[512], b[512];
    cohort_error err;
    cohort_dataset *ds = (cohort_dataset *)1;

    write_idx_pair(tpath(a, "img"), tpath(b, "lbl"), 0, 3, 12, 3);
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
    check_small_idx(ds);
    CHECK_CONTAINS(ds ? ds->source : NULL, "idx:");
    data_free(ds);

    /* gzip is found by its magic, not by the name. */
    write_idx_pair(tpath(a, "img_gz"), tpath(b, "lbl_gz"), 1, 3, 12, 3);
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
    check_small_idx(ds);
    data_free(ds);

    /* Two gzip members of 14 bytes each, as `cat a.gz b.gz` makes: read
     * through zlib, since libdeflate takes one member at a time (and the
     * last member's length, all the trailer tells, is the first's too). */
    {
        unsigned char buf[64];
        size_t len = small_images(buf);
        write_gz(a, buf, len / 2);
        gz_to(a, "ab", buf + len / 2, len - len / 2);
        write_idx_pair(tpath(b, "img_unused"), tpath(b, "lbl"), 0, 3, 12, 3);
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
        check_small_idx(ds);
        data_free(ds);
    }

    /* A gzip trailer whose length is wrong: corrupt, whichever inflater. */
    {
        unsigned char buf[64];
        write_gz(a, buf, small_images(buf));
        unsigned char one = 0x01; /* ISIZE's low byte: 28 becomes 1 */
        patch_file(a, -4, SEEK_END, &one, 1);
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "corrupt gzip data");
        CHECK(ds == NULL);
    }

    /* A gzip stream larger than the first read buffer. */
    {
        const uint32_t n = 3000;
        size_t bytes = (size_t)n * 784;
        unsigned char *buf = malloc(16 + bytes), *lb = malloc(8 + n);
        CHECK(buf && lb);
        if (buf && lb) {
            uint32_t d3[3] = {n, 28, 28}, d1[1] = {n};
            size_t len = make_idx(buf, 0x803, d3, 3, NULL, 0);
            for (size_t i = 0; i < bytes; i++)
                buf[len + i] = (unsigned char)((i * 7) % 251);
            write_gz(a, buf, len + bytes);
            len = make_idx(lb, 0x801, d1, 1, NULL, 0);
            for (uint32_t i = 0; i < n; i++)
                lb[len + i] = (unsigned char)(i % 13);
            write_gz(b, lb, len + n);
            CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
            if (ds) {
                CHECK(ds->n == 3000 && ds->dim == 784 && ds->n_classes == 13);
                size_t last = bytes - 1;
                CHECK(ds->x8 && ds->x8[last] == (last * 7) % 251);
                CHECK(ds->x8 && ds->x8[1234567] == (1234567u * 7) % 251);
                CHECK(ds->y[2999] == 2999 % 13);
            }
            data_free(ds);
        }
        free(buf);
        free(lb);
    }

    /* Truncated image data, plain and gzip. */
    write_idx_pair(tpath(a, "img"), tpath(b, "lbl"), 0, 3, 10, 3);
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
    CHECK(ds == NULL);
    CHECK_CONTAINS(err.message, "truncated: expected 12 bytes of image data, got 10");
    CHECK_CONTAINS(err.message, a);
    write_idx_pair(tpath(a, "img_gz"), tpath(b, "lbl_gz"), 1, 3, 10, 3);
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "truncated: expected 12 bytes of image data, got 10");

    /* A gzip claim of 784 MB with 12 bytes behind it fails without reading that much. */
    {
        unsigned char buf[64];
        uint32_t d3[3] = {1000000, 28, 28}, d1[1] = {1000000};
        write_gz(tpath(a, "big_gz"), buf, make_idx(buf, 0x803, d3, 3, IMG, 12));
        write_gz(tpath(b, "big_lbl_gz"), buf, make_idx(buf, 0x801, d1, 1, LBL, 3));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "truncated: expected 784000000 bytes of image data, got 12");
    }

    /* Labels truncated. */
    write_idx_pair(tpath(a, "img"), tpath(b, "lbl"), 0, 3, 12, 3);
    {
        unsigned char buf[64];
        uint32_t d1[1] = {3};
        write_file(b, buf, make_idx(buf, 0x801, d1, 1, LBL, 2));
    }
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "truncated: expected 3 bytes of label data, got 2");

    /* Count mismatch. */
    write_idx_pair(tpath(a, "img"), tpath(b, "lbl"), 0, 3, 12, 2);
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "has 3 images but");
    CHECK_CONTAINS(err.message, "has 2 labels");

    /* Bad magic: random, a label file as images, an unsupported type. */
    {
        unsigned char buf[64];
        uint32_t d3[3] = {3, 2, 2}, d1[1] = {3};
        write_file(a, buf, make_idx(buf, 0x12345678, d3, 3, IMG, 12));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "not an IDX image file (magic 0x12345678, expected 0x00000803)");
        write_file(a, buf, make_idx(buf, 0x801, d1, 1, LBL, 3));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "magic 0x00000801, expected 0x00000803");
        write_file(a, buf, make_idx(buf, 0x0d03, d3, 3, IMG, 12));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "IDX element type 0x0d is not supported");
        write_file(a, buf, small_images(buf));
        write_file(b, buf, small_images(buf));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "not an IDX label file");
        write_file(a, "", 0);
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "not an IDX image file (magic 0x00000000");
        write_file(a, buf, 7);
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "truncated IDX header");
    }

    /* Absurd dimensions: 2^31-1 cubed overflows; 2^31 is out of range; 0 is refused. */
    {
        unsigned char buf[64];
        uint32_t big[3] = {0x7fffffff, 0x7fffffff, 0x7fffffff}, d1[1] = {0x7fffffff};
        write_file(a, buf, make_idx(buf, 0x803, big, 3, NULL, 0));
        write_file(b, buf, make_idx(buf, 0x801, d1, 1, NULL, 0));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "2147483647 samples of 4611686014132420609 values are more "
                                    "than the limit of 16 GiB of float32 data");
        uint32_t big4[4] = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
        write_file(a, buf, make_idx(buf, 0x804, big4, 4, NULL, 0));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "sample size overflows");
        uint32_t big2[3] = {0x7fffffff, 2048, 1024};
        write_file(a, buf, make_idx(buf, 0x803, big2, 3, NULL, 0));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "more than the limit of 16 GiB of float32 data");
        uint32_t neg[3] = {0x80000000u, 0x80000000u, 1};
        write_file(a, buf, make_idx(buf, 0x803, neg, 3, NULL, 0));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "dimension 0 is 2147483648; it must be in 1..2147483647");
        uint32_t zero[3] = {3, 0, 2};
        write_file(a, buf, make_idx(buf, 0x803, zero, 3, NULL, 0));
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "dimension 1 is 0");
    }

    /* Corrupt gzip stream. */
    {
        unsigned char buf[64];
        write_gz(a, buf, small_images(buf));
        unsigned char junk[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        patch_file(a, 10, SEEK_SET, junk, sizeof junk);
        write_idx_pair(tpath(b, "img_unused"), tpath(b, "lbl"), 0, 3, 12, 3);
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "corrupt gzip data");
    }

    /* Missing file. */
    CHECK(data_read_idx(tpath(a, "nope"), b, &ds, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "nope: cannot open: No such file");
    CHECK(ds == NULL);
}

/* ---- the standard datasets ------------------------------------------- */

static void check_counts(const cohort_dataset *ds, int64_t n, int64_t each)
{
    int64_t counts[10] = {0};
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->y[i] >= 0 && ds->y[i] < 10)
            counts[ds->y[i]]++;
    int ok = 1;
    for (int c = 0; c < 10; c++)
        ok &= counts[c] == each;
    CHECK_MSG(ok && ds->n == n, "label counts of %s are not %lld each", ds->source,
              (long long)each);
}

/* ---- the inflated-file cache (gz_cache.c) ------------------------------ */

enum { CACHE_N = 1400 }; /* images of 28 x 28: 1.1 MB inflated, past GZ_CACHE_MIN */

/* Images whose byte j of image i is a function of (i, j, salt); labels i % 10. */
static void write_cache_pair(const char *img, const char *lbl, unsigned salt)
{
    size_t px = (size_t)CACHE_N * 784;
    unsigned char *buf = malloc(16 + px), lb[8 + CACHE_N];
    if (!buf)
        exit(1);
    uint32_t d3[3] = {CACHE_N, 28, 28}, d1[1] = {CACHE_N};
    size_t len = make_idx(buf, 0x803, d3, 3, NULL, 0);
    for (size_t k = 0; k < px; k++)
        buf[len + k] = (unsigned char)((k * 7 + k / 777 + salt) & 0xff);
    write_gz(img, buf, len + px);
    len = make_idx(lb, 0x801, d1, 1, NULL, 0);
    for (int i = 0; i < CACHE_N; i++)
        lb[len + (size_t)i] = (unsigned char)(i % 10);
    write_gz(lbl, lb, len + CACHE_N);
    free(buf);
}

/* Read the pair: 1 when every byte and label is what write_cache_pair
 * wrote with salt; *mapped says whether the bytes came from the cache. */
static int read_cache_pair(const char *img, const char *lbl, unsigned salt, int *mapped)
{
    cohort_error err;
    cohort_dataset *ds = NULL;
    *mapped = -1;
    if (data_read_idx(img, lbl, &ds, &err) != COHORT_OK) {
        printf("  %s\n", err.message);
        return 0;
    }
    int ok = ds->n == CACHE_N && ds->dim == 784 && ds->x8 != NULL;
    for (size_t k = 0; ok && k < (size_t)CACHE_N * 784; k++)
        ok = ds->x8[k] == (unsigned char)((k * 7 + k / 777 + salt) & 0xff);
    for (int i = 0; ok && i < CACHE_N; i++)
        ok = ds->y[i] == i % 10;
    *mapped = ds->x8_map_len != 0;
    data_free(ds); /* ASan: a mapping unmapped, an allocation freed */
    return ok;
}

/* The regular files of dir named gz-* (temporaries included); the last one's
 * path in last. */
static int cache_files(const char *dir, char *last, size_t cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "gz-", 3) == 0) {
            snprintf(last, cap, "%s/%s", dir, e->d_name);
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static void test_gz_cache(void)
{
    if (!gz_cache_built()) {
        printf("test_data: note: built without libdeflate, so without the data cache; "
               "skipping its checks\n");
        return;
    }
    char img[512], lbl[512], dir[512], file[1200], blocker[512], saved[1024] = "";
    const char *env = getenv("COHORT_CACHE_DIR");
    int had_env = env != NULL, mapped;
    if (env)
        snprintf(saved, sizeof saved, "%s", env);
    tpath(dir, "cache/sub");
    setenv("COHORT_CACHE_DIR", dir, 1);
    write_cache_pair(tpath(img, "cimg"), tpath(lbl, "clbl"), 0);

    /* A miss inflates and keeps the images (not the labels: too small). */
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 0);
    CHECK_MSG(cache_files(dir, file, sizeof file) == 1, "%s: expected one cache file", dir);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    CHECK(stat(file, &sb) == 0 && (sb.st_mode & 0777) == 0600 &&
          sb.st_size == GZ_CACHE_HEAD + 16 + (off_t)CACHE_N * 784);
    /* A hit maps them. */
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 1);

    /* A byte changed in the cache file: its CRC-32 fails, the source is
     * inflated again and the file replaced. */
    patch_file(file, GZ_CACHE_HEAD + 5000, SEEK_SET, "\x5a\xa5", 2);
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 0);
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 1);
    /* Cut short: the same. */
    CHECK(truncate(file, GZ_CACHE_HEAD + 1000) == 0);
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 0);
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 1);
    /* A header whose CRC field does not match the source's trailer. */
    patch_file(file, 72, SEEK_SET, "\x01", 1);
    CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 0);
    CHECK(cache_files(dir, file, sizeof file) == 1);
    /* Another user's file (where this test may give it away: as root). */
    if (geteuid() == 0 && chown(file, 65534, 65534) == 0) {
        CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 0);
        CHECK(stat(file, &sb) == 0 && sb.st_uid == 0); /* replaced by one of this user */
        CHECK(read_cache_pair(img, lbl, 0, &mapped) && mapped == 1);
    }

    /* The source rewritten in place, to the same size: its new bytes. */
    write_cache_pair(img, lbl, 3);
    CHECK(read_cache_pair(img, lbl, 3, &mapped) && mapped == 0);
    CHECK(read_cache_pair(img, lbl, 3, &mapped) && mapped == 1);
    /* A corrupt source is an error whatever the cache holds for it. */
    patch_file(img, -8, SEEK_END, "\0\0\0\0", 4);
    cohort_error err;
    cohort_dataset *ds = NULL;
    CHECK(data_read_idx(img, lbl, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "corrupt gzip data");
    data_free(ds);
    write_cache_pair(img, lbl, 3);

    /* Off, and a directory that cannot be made: read as without a cache. */
    setenv("COHORT_CACHE_DIR", "off", 1);
    CHECK(read_cache_pair(img, lbl, 3, &mapped) && mapped == 0);
    write_file(tpath(blocker, "cache_blocker"), "x", 1);
    snprintf(file, sizeof file, "%s/sub", blocker);
    setenv("COHORT_CACHE_DIR", file, 1);
    CHECK(read_cache_pair(img, lbl, 3, &mapped) && mapped == 0);
    CHECK(read_cache_pair(img, lbl, 3, &mapped) && mapped == 0);

    if (had_env)
        setenv("COHORT_CACHE_DIR", saved, 1);
    else
        unsetenv("COHORT_CACHE_DIR");
    cache_files(dir, file, sizeof file);
    unlink(file);
    rmdir(dir);
    rmdir(tpath(dir, "cache"));
    unlink(blocker);
    unlink(img);
    unlink(lbl);
}

static void test_fashion_mnist(void)
{
    struct stat sb;
    cohort_error err;
    cohort_dataset *ds = NULL;
    double t0 = now_seconds();
    cohort_status st = data_load("fashion-mnist:train", NULL, &ds, &err);
    double t = now_seconds() - t0;
    if (st == COHORT_ERR_IO && stat("/usr/share/datasets/fashion-mnist", &sb) != 0) {
        printf("test_data: note: no fashion-mnist here (%s); skipping its checks\n",
               err.message);
        CHECK_CONTAINS(err.message, "apt-get install dataset-fashion-mnist");
        return;
    }
    CHECK_MSG(st == COHORT_OK, "%s", err.message);
    if (st)
        return;
    printf("test_data: fashion-mnist:train loaded in %.3f s\n", t);
    CHECK(ds->n == 60000);
    CHECK(ds->dim == 784);
    CHECK(ds->shape.rank == 3 && ds->shape.h == 28 && ds->shape.w == 28 && ds->shape.c == 1);
    CHECK(ds->n_classes == 10);
    CHECK(strcmp(ds->source, "fashion-mnist:train") == 0);
    check_counts(ds, 60000, 6000);
    int lo = 255, hi = 0;
    for (int64_t i = 0; ds->x8 && i < ds->n * ds->dim; i++) {
        lo = ds->x8[i] < lo ? ds->x8[i] : lo;
        hi = ds->x8[i] > hi ? ds->x8[i] : hi;
    }
    CHECK(lo == 0 && hi == 255);
    /* The first training image of Fashion-MNIST is an ankle boot (class 9). */
    CHECK(ds->y[0] == 9);
    data_view tr, va;
    data_split(ds, 0.2, &tr, &va);
    CHECK(tr.n == 48000 && va.n == 12000);
    data_free(ds);

    CHECK(data_load("fashion-mnist:test", NULL, &ds, &err) == COHORT_OK);
    if (ds) {
        CHECK(ds->n == 10000 && ds->dim == 784 && ds->n_classes == 10);
        check_counts(ds, 10000, 1000);
    }
    data_free(ds);
}

static void test_cohort_data(void)
{
    char a[512], b[512];
    cohort_error err;
    cohort_dataset *ds = NULL;
    char *old = getenv("COHORT_DATA") ? str_dup(getenv("COHORT_DATA")) : NULL;

    /* Unzipped names under $COHORT_DATA/mnist. */
    CHECK(mkdir(tpath(a, "mnist"), 0700) == 0);
    write_idx_pair(tpath(a, "mnist/train-images-idx3-ubyte"),
                   tpath(b, "mnist/train-labels-idx1-ubyte"), 0, 3, 12, 3);
    setenv("COHORT_DATA", tmpdir, 1);
    CHECK(data_load("mnist:train", NULL, &ds, &err) == COHORT_OK);
    check_small_idx(ds);
    CHECK(ds && strcmp(ds->source, "mnist:train") == 0);
    data_free(ds);

    /* Gzip names straight in $COHORT_DATA. */
    write_idx_pair(tpath(a, "t10k-images-idx3-ubyte.gz"), tpath(b, "t10k-labels-idx1-ubyte.gz"),
                   1, 3, 12, 3);
    CHECK(data_load("mnist:test", NULL, &ds, &err) == COHORT_OK);
    check_small_idx(ds);
    data_free(ds);

    /* Missing: the message names the path and what to do. */
    CHECK(data_load("mnist:train", NULL, &ds, &err) == COHORT_OK);
    data_free(ds);
    CHECK(unlink(tpath(a, "mnist/train-images-idx3-ubyte")) == 0);
    CHECK(unlink(tpath(a, "mnist/train-labels-idx1-ubyte")) == 0);
    CHECK(rmdir(tpath(a, "mnist")) == 0);
    struct stat sb;
    if (stat("/usr/share/datasets/mnist", &sb) != 0) {
        CHECK(data_load("mnist:train", NULL, &ds, &err) == COHORT_ERR_IO);
        CHECK(ds == NULL);
        CHECK_CONTAINS(err.message, "/usr/share/datasets/mnist/train-images-idx3-ubyte.gz: not found");
        CHECK_CONTAINS(err.message, tmpdir);
        CHECK_CONTAINS(err.message, "set COHORT_DATA");
    }
    /* The images are there but the labels are not. */
    CHECK(unlink(tpath(b, "t10k-labels-idx1-ubyte.gz")) == 0);
    CHECK(data_load("mnist:test", NULL, &ds, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "t10k-labels-idx1-ubyte.gz: not found");
    CHECK(unlink(tpath(a, "t10k-images-idx3-ubyte.gz")) == 0);

    if (old) {
        setenv("COHORT_DATA", old, 1);
        free(old);
    } else {
        unsetenv("COHORT_DATA");
    }
    CHECK(data_load("fashion-mnist:valid", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "expected fashion-mnist:train or fashion-mnist:test");
}

/* ---- CSV ------------------------------------------------------------- */

static cohort_dataset *csv(const char *text, const char *label, cohort_status want,
                           cohort_error *err)
{
    char p[512];
    cohort_dataset *ds = (cohort_dataset *)1;
    write_text(tpath(p, "t.csv"), text);
    cohort_status st = data_read_csv(p, label, &ds, err);
    CHECK_MSG(st == want, "csv status %d, wanted %d: %s", st, want, st ? err->message : "");
    if (st)
        CHECK(ds == NULL);
    return st ? NULL : ds;
}

static void test_csv(void)
{
    cohort_error err;
    cohort_dataset *ds;

    /* No header, label last, no trailing newline. */
    ds = csv("1,2,3\n4,5.5,6", NULL, COHORT_OK, &err);
    if (ds) {
        CHECK(ds->n == 2 && ds->dim == 2 && ds->n_classes == 7);
        CHECK(ds->x[0] == 1 && ds->x[1] == 2 && ds->x[2] == 4 && ds->x[3] == 5.5f);
        CHECK(ds->y[0] == 3 && ds->y[1] == 6);
    }
    data_free(ds);

    /* Header with "label", \r\n, a blank line, spaces, quoted names. */
    ds = csv("\"a\",label, b\r\n0.5,1,2\r\n\r\n-1.5e1, 0 ,3\r\n", NULL, COHORT_OK, &err);
    if (ds) {
        CHECK(ds->n == 2 && ds->dim == 2 && ds->n_classes == 2);
        CHECK(ds->x[0] == 0.5f && ds->x[1] == 2 && ds->x[2] == -15.0f && ds->x[3] == 3);
        CHECK(ds->y[0] == 1 && ds->y[1] == 0);
    }
    data_free(ds);

    /* Label by name and by index. */
    ds = csv("a,b,c\n7,8,9\n", "b", COHORT_OK, &err);
    if (ds) {
        CHECK(ds->dim == 2 && ds->x[0] == 7 && ds->x[1] == 9 && ds->y[0] == 8);
        CHECK(ds->n_classes == 9);
    }
    data_free(ds);
    ds = csv("4,8,9\n2,1,0\n", "0", COHORT_OK, &err);
    if (ds) {
        CHECK(ds->y[0] == 4 && ds->y[1] == 2 && ds->x[0] == 8 && ds->x[3] == 0);
        CHECK(ds->n_classes == 5);
    }
    data_free(ds);
    /* An integral float label is fine. */
    ds = csv("1,2.0\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->y[0] == 2);
    data_free(ds);

    /* A UTF-8 byte order mark before the header. */
    ds = csv("\xef\xbb\xbfx,label\n1,2\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->n == 1 && ds->x[0] == 1 && ds->y[0] == 2);
    data_free(ds);

    /* Errors. */
    csv("1,2,3\n4,5\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: expected 3 fields, found 2");
    csv("a,b,c\n1,2,3\n\n4,5,6,7\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:4: expected 3 fields, found 4");
    csv("1,2,3\n4,x y,6\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 1 (counted from 0, as label_column is): 'x y' is not a number");
    csv("1,2,3\r\n4,,6\r\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 1 (counted from 0, as label_column is): '' is not a number");
    csv("1,2,3\n4,1e999,6\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 1 (counted from 0, as label_column is): '1e999' is not a finite number");
    /* The label's column, counted from 0 as label_column counts (column 2 here). */
    csv("a,b,label\n1,2,nan\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 2 (counted from 0, as label_column is), the "
                                "label: 'nan' is not a finite number; labels must be integers from 0");
    csv("a,b,c\n1,inf,0\n", "1", COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 1 (counted from 0, as label_column is), the label:");
    /* Past FLT_MAX is inf as a float32: refused, on the fast path's numbers too. */
    csv("1,2,0\n4,3.5e38,1\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 1 (counted from 0, as label_column is): '3.5e38' "
                                "is beyond float32's range");
    csv("1,2,0.5\n4,3,-1e39\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:2: column 2 (counted from 0, as label_column is), the "
                                "label: '-1e39' is beyond float32's range");
    ds = csv("1,2,0\n4,3.4028234e38,1\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->x[3] == 3.4028234e38f);
    data_free(ds);
    /* A value missing from the first row does not make it a header. */
    csv("1,,0\n3,4,1\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:1: column 1 (counted from 0, as label_column is): '' is not a number");
    /* An unnamed column (pandas' index) in a header is still a header. */
    ds = csv(",a,label\n0,1.5,1\n1,2,0\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->n == 2 && ds->dim == 2 && ds->x[1] == 1.5f && ds->y[0] == 1);
    data_free(ds);
    csv("a,b,label\r1,2,0\r", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv:1: a carriage return (\\r) inside the line");
    csv("a\tb\tlabel\n1\t2\t0\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv: the first line has no comma, and looks separated by tabs");

    /* Text labels are classes in sorted order; a test set is renumbered as
     * the training set's classes. */
    ds = csv("a,label\n1,dog\n2,cat\n3,dog\n4,emu\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->n == 4 && ds->n_classes == 3 && ds->class_names &&
          !strcmp(ds->class_names[0], "cat") && !strcmp(ds->class_names[2], "emu"));
    CHECK(ds && ds->y[0] == 1 && ds->y[1] == 0 && ds->y[2] == 1 && ds->y[3] == 2 && ds->x[3] == 4);
    cohort_dataset *t = csv("a,label\n5,emu\n6,dog\n", NULL, COHORT_OK, &err);
    CHECK(t && t->n_classes == 2 && t->y[0] == 1);
    if (ds && t) {
        CHECK(data_align_classes(t, ds->class_names, ds->n_classes, "train", &err) == COHORT_OK);
        CHECK(t->n_classes == 3 && t->y[0] == 2 && t->y[1] == 1 && !t->class_names);
    }
    data_free(t);
    t = csv("a,label\n5,gnu\n", NULL, COHORT_OK, &err);
    if (ds && t) {
        CHECK(data_align_classes(t, ds->class_names, ds->n_classes, "train", &err) ==
              COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "has label 'gnu', which train does not have (its labels: cat, dog, emu)");
    }
    data_free(t);
    t = csv("a,label\n5,0\n", NULL, COHORT_OK, &err);
    if (ds && t) {
        CHECK(data_align_classes(t, ds->class_names, ds->n_classes, "train", &err) ==
              COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "has numeric labels, but train has text labels");
    }
    data_free(t);
    data_free(ds);
    csv("", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.csv: empty file");
    csv("\r\n\n  \n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "empty file");
    csv("a,b,label\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "no data rows");
    csv("1\n2\n", NULL, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "only one column");
    /* Labels that are not classes are real-valued targets (regression). */
    ds = csv("1,2,-1\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->t && ds->t_dim == 1 && ds->t[0] == -1.0f && ds->n_classes == 0 && ds->y[0] == 0);
    data_free(ds);
    ds = csv("1,2,3\n1,2,2.5\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->t && ds->t[0] == 3.0f && ds->t[1] == 2.5f && ds->n_classes == 0);
    data_free(ds);
    ds = csv("1,2,3\n1,2,1\n", NULL, COHORT_OK, &err);
    CHECK(ds && ds->t && ds->n_classes == 4 && ds->y[0] == 3 && ds->y[1] == 1);
    data_free(ds);
    csv("1,2,3\n", "3", COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "label column 3 is out of range: the file has 3 columns (0 to 2)");
    csv("1,2,3\n", "b", COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "label column 'b' is given by name, but the file has no header row");
    csv("a,b,c\n1,2,3\n", "zz", COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "no column named 'zz' in the header");

    char p[512];
    CHECK(data_read_csv(tpath(p, "none.csv"), NULL, &ds, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "none.csv: cannot open");
}

/*
 * A CSV of `rows` rows (a header, blank and \r\n lines among them) into b:
 * row i's label is i % 7 (or a word), bad_* put a fault in row bad_* (-1:
 * none): a value that is not a number, a label out of range, a line with a
 * field too few. *line_of gets the line number of each row.
 */
static void chunk_csv(strbuf *b, int rows, int words, int bad_value, int bad_label,
                      int bad_count, int *line_of)
{
    static const char *const word[] = {"cat", "dog", "emu", "gnu", "yak", "ant", "bee"};
    rng_state r;
    rng_seed(&r, 7, 0);
    sb_init(b);
    sb_puts(b, "a,b,c,label\n");
    int line = 1;
    for (int i = 0; i < rows; i++) {
        if (i % 97 == 5) {
            sb_puts(b, i % 2 ? "\n" : " \t\r\n");
            line++;
        }
        line_of[i] = ++line;
        for (int c = 0; c < 3; c++) {
            if (i == bad_count && c == 2)
                break;
            if (i == bad_value && c == 1)
                sb_puts(b, "1.5x,");
            else
                sb_printf(b, "%.9g,", (double)(rng_uniform(&r) * 200 - 100));
        }
        if (i == bad_label)
            sb_puts(b, "2147483647");
        else if (words)
            sb_puts(b, word[i % 7]);
        else
            sb_printf(b, "%d", i % 7);
        sb_puts(b, i % 3 ? "\n" : "\r\n");
    }
}

/* The same rows, values, classes and message for any split into chunks. */
/* label_columns: real-valued target rows, by header name or 0-based index. */
static void test_csv_targets(void)
{
    char p[512];
    cohort_error err;
    cohort_dataset *ds = NULL;
    write_text(tpath(p, "r.csv"), "a,y0,b,y1\n1,0.5,2,-3\n4,1.5,5,6.25\n");
    const char *specs[] = {"y0,y1", "1,3", "y0,3"};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(data_read_csv_cols(p, NULL, specs[i], 0, &ds, &err) == COHORT_OK, "%s: %s",
                  specs[i], err.message);
        if (!ds)
            continue;
        CHECK(ds->dim == 2 && ds->n == 2 && ds->t && ds->t_dim == 2 && ds->n_classes == 0);
        CHECK(ds->x[0] == 1.0f && ds->x[1] == 2.0f && ds->x[2] == 4.0f && ds->x[3] == 5.0f);
        CHECK(ds->t[0] == 0.5f && ds->t[1] == -3.0f && ds->t[2] == 1.5f && ds->t[3] == 6.25f);
        data_free(ds);
        ds = NULL;
    }
    /* The order of label_columns is the targets' order. */
    CHECK(data_read_csv_cols(p, NULL, "y1,y0", 0, &ds, &err) == COHORT_OK && ds &&
          ds->t[0] == -3.0f && ds->t[1] == 0.5f);
    data_free(ds);
    ds = (cohort_dataset *)1;
    CHECK(data_read_csv_cols(p, NULL, "y0,z", 0, &ds, &err) == COHORT_ERR_INPUT && !ds);
    CHECK_CONTAINS(err.message, "no column named 'z' in the header");
    CHECK(data_read_csv_cols(p, NULL, "y0,1", 0, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "label_columns names column 1 twice");
    CHECK(data_read_csv_cols(p, NULL, "0,1,2,3", 0, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "label_columns takes every column");
    write_text(tpath(p, "r2.csv"), "a,y0\n1,x\n");
    CHECK(data_read_csv_cols(p, NULL, "y0", 0, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "r2.csv:2: column 1 (counted from 0, as label_column is): 'x' is "
                                "not a number");
}

/* A host program's LC_NUMERIC (setlocale(LC_ALL, "") in German, where 0,5 is
 * a half) changes nothing: '.' is a CSV's decimal point. strtod in that
 * locale stopped at the '.': 0.5 labels became text classes, and the
 * numbers its fast path leaves to strtod were refused. The locale is made
 * with localedef where the system has none; the check is skipped without. */
static void test_csv_locale(void)
{
    char p[512], loc[512], cmd[1300];
    const char *name = "de_DE.UTF-8";
    tpath(loc, "locale");
    if (!setlocale(LC_NUMERIC, name)) {
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s && localedef -i de_DE -f UTF-8 %s/%s >/dev/null 2>&1", loc, loc,
                 name);
        if (system(cmd) == 0)
            setenv("LOCPATH", loc, 1);
        if (!setlocale(LC_NUMERIC, name)) {
            printf("test_data: no de_DE locale here: the CSV locale check is skipped\n");
            unsetenv("LOCPATH");
            return;
        }
    }
    CHECK(strcmp(localeconv()->decimal_point, ",") == 0);
    cohort_error err;
    cohort_dataset *ds = NULL;
    write_text(tpath(p, "de.csv"), "a,b,label\n1.5,1.000000178813934326,0.5\n2,3,1.25\n");
    CHECK_MSG(data_read_csv(p, NULL, &ds, &err) == COHORT_OK, "%s", err.message);
    if (ds) {
        CHECK(ds->n_classes == 0 && !ds->class_names && ds->t && ds->t_dim == 1);
        CHECK(ds->t && ds->t[0] == 0.5f && ds->t[1] == 1.25f);
        CHECK(ds->x[0] == 1.5f && ds->x[1] == 0x1.000004p0f && ds->x[3] == 3.0f);
        data_free(ds);
    }
    setlocale(LC_NUMERIC, "C");
    unsetenv("LOCPATH");
    unlink(p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", loc);
    if (system(cmd) != 0)
        fprintf(stderr, "test_data: could not remove %s\n", loc);
}

static void test_csv_chunks(void)
{
    static const size_t min_chunk[] = {1, 7, 100, 1000, 1};
    static const int threads[] = {1, 2, 3, 4, 16};
    enum { ROWS = 3000 };
    static int line_of[ROWS];
    char p[512], want[256];
    cohort_error err, err0;
    strbuf b;
    for (int words = 0; words < 2; words++) {
        chunk_csv(&b, ROWS, words, -1, -1, -1, line_of);
        write_text(tpath(p, "chunks.csv"), b.data);
        sb_free(&b);
        cohort_dataset *ds0, *ds;
        CHECK(data_read_csv(p, NULL, &ds0, &err) == COHORT_OK);
        CHECK(ds0->n == ROWS && ds0->dim == 3 && ds0->n_classes == 7);
        CHECK(ds0->y[9] == (words ? 4 : 9 % 7)); /* emu: ant bee cat dog emu */
        for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
            data_csv_set_split(min_chunk[k], threads[k]);
            CHECK(data_read_csv(p, NULL, &ds, &err) == COHORT_OK);
            CHECK(ds->n == ds0->n && ds->dim == ds0->dim && ds->n_classes == ds0->n_classes);
            CHECK(memcmp(ds->x, ds0->x, (size_t)ds0->n * 3 * sizeof(float)) == 0);
            CHECK(memcmp(ds->y, ds0->y, (size_t)ds0->n * sizeof(int32_t)) == 0);
            CHECK(!words || strcmp(ds->class_names[6], "yak") == 0);
            data_free(ds);
        }
        data_csv_set_split(0, 0);
        data_free(ds0);
    }
    /* Faults, the first in the file wins: a field count before any value,
     * a value or a number label by line, a text label anywhere leaves only
     * the values. */
    struct {
        int words, value, label, count;
        const char *what;
        int row;
    } faults[] = {
        {0, 2900, 2000, 2500, "expected 4 fields, found 3", 2500},
        /* A label past the classes makes real targets, not a fault. */
        {0, 2900, 2000, -1, "column 1 (counted from 0, as label_column is): '1.5x' is not a "
                            "number", 2900},
        {0, 1200, 2000, -1, "column 1 (counted from 0, as label_column is): '1.5x' is not a "
                            "number", 1200},
        {1, 2900, 20, -1, "column 1 (counted from 0, as label_column is): '1.5x' is not a "
                          "number", 2900},
    };
    for (size_t f = 0; f < sizeof faults / sizeof *faults; f++) {
        chunk_csv(&b, ROWS, faults[f].words, faults[f].value, faults[f].label, faults[f].count,
                  line_of);
        write_text(tpath(p, "chunks.csv"), b.data);
        sb_free(&b);
        cohort_dataset *ds = (cohort_dataset *)1;
        CHECK(data_read_csv(p, NULL, &ds, &err0) == COHORT_ERR_INPUT && ds == NULL);
        snprintf(want, sizeof want, "chunks.csv:%d: ", line_of[faults[f].row]);
        CHECK_CONTAINS(err0.message, want);
        CHECK_CONTAINS(err0.message, faults[f].what);
        for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
            data_csv_set_split(min_chunk[k], threads[k]);
            CHECK(data_read_csv(p, NULL, &ds, &err) == COHORT_ERR_INPUT);
            CHECK_MSG(strcmp(err.message, err0.message) == 0, "split %zu: '%s', not '%s'", k,
                      err.message, err0.message);
        }
        data_csv_set_split(0, 0);
    }
}

/* ---- NPY ------------------------------------------------------------- */

/* An .npy image in buf (version 1 or 2): header dict `dict`, then data. */
static size_t make_npy(unsigned char *buf, int version, const char *dict, const void *data,
                       size_t len)
{
    size_t pre = version == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64; /* header padded to 64, ending in \n */
    size_t hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    if (version == 1) {
        buf[8] = (unsigned char)hlen;
        buf[9] = (unsigned char)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++)
            buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    }
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    if (len)
        memcpy(buf + total, data, len);
    return total + len;
}

static void write_npy(const char *path, int version, const char *dict, const void *data,
                      size_t len)
{
    unsigned char *buf = malloc(len + 1024);
    CHECK(buf != NULL);
    if (!buf)
        return;
    write_file(path, buf, make_npy(buf, version, dict, data, len));
    free(buf);
}

static const float XF[12] = {0.5f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -11.25f};
static const int64_t YI8[3] = {2, 0, 4};

static cohort_dataset *npy_pair(const char *xdict, const void *xd, size_t xl, const char *ydict,
                                const void *yd, size_t yl, cohort_status want, cohort_error *err)
{
    char a[512], b[512];
    cohort_dataset *ds = (cohort_dataset *)1;
    write_npy(tpath(a, "x.npy"), 1, xdict, xd, xl);
    write_npy(tpath(b, "y.npy"), 1, ydict, yd, yl);
    cohort_status st = data_read_npy(a, b, &ds, err);
    CHECK_MSG(st == want, "npy status %d, wanted %d: %s", st, want, st ? err->message : "");
    if (st)
        CHECK(ds == NULL);
    return st ? NULL : ds;
}

static void test_npy(void)
{
    cohort_error err;
    cohort_dataset *ds;
    char a[512], b[512];
    const char *y3 = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";

    /* float32 [3, 2, 2] with int64 labels. */
    ds = npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 2), }", XF,
                  sizeof XF, y3, YI8, sizeof YI8, COHORT_OK, &err);
    if (ds) {
        CHECK(ds->n == 3 && ds->dim == 4 && ds->n_classes == 5);
        CHECK(ds->x[0] == 0.5f && ds->x[11] == -11.25f && ds->x[5] == 5);
        CHECK(ds->y[0] == 2 && ds->y[1] == 0 && ds->y[2] == 4);
    }
    data_free(ds);

    /* float64 [2, 3] (version 2 header) with uint8 labels of shape (2, 1). */
    {
        double xd[6] = {0.25, -1, 1e-3, 3, 4, 5};
        unsigned char yu[2] = {1, 3};
        write_npy(tpath(a, "x.npy"), 2, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2, 3)}",
                  xd, sizeof xd);
        write_npy(tpath(b, "y.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1), }",
                  yu, sizeof yu);
        ds = NULL;
        CHECK(data_read_npy(a, b, &ds, &err) == COHORT_OK);
        if (ds) {
            CHECK(ds->n == 2 && ds->dim == 3 && ds->n_classes == 4);
            CHECK(ds->x[0] == 0.25f && ds->x[1] == -1 && ds->x[2] == 1e-3f && ds->x[5] == 5);
            CHECK(ds->y[0] == 1 && ds->y[1] == 3);
        }
        data_free(ds);
    }

    /* uint8 [2, 2] scaled by 1/255, uint16 labels. */
    {
        unsigned char xu[4] = {0, 200, 255, 51};
        uint16_t yu[2] = {7, 65535};
        ds = npy_pair("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", xu, 4,
                      "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", yu, 4,
                      COHORT_OK, &err);
        if (ds) {
            CHECK(ds->dim == 2 && ds->n_classes == 65536);
            CHECK(ds->x[0] == 0 && ds->x[2] == 1.0f);
            CHECK_NEAR(ds->x[1], 200.0 / 255.0, 1e-7);
            CHECK_NEAR(ds->x[3], 0.2, 1e-7);
            CHECK(ds->y[1] == 65535);
        }
        data_free(ds);
    }

    /* int32 x (taken as is, shape (2,): one feature), float32 integral labels, int16. */
    {
        int32_t xi[2] = {7, -3};
        float yf[2] = {1, 0};
        ds = npy_pair("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", xi, 8,
                      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", yf, 8,
                      COHORT_OK, &err);
        if (ds) {
            CHECK(ds->n == 2 && ds->dim == 1 && ds->x[0] == 7 && ds->x[1] == -3);
            CHECK(ds->y[0] == 1 && ds->y[1] == 0 && ds->n_classes == 2);
        }
        data_free(ds);
        int16_t ys[2] = {0, 9};
        ds = npy_pair("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", xi, 8,
                      "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", ys, 4,
                      COHORT_OK, &err);
        CHECK(ds && ds->n_classes == 10);
        data_free(ds);
    }

    /* int8 and bool x, uint64 and int8 labels. */
    {
        int8_t xi[4] = {-128, 127, 0, 5};
        uint64_t yu[2] = {3, 1};
        ds = npy_pair("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }", xi, 4,
                      "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", yu, 16,
                      COHORT_OK, &err);
        CHECK(ds && ds->x[0] == -128 && ds->x[1] == 127 && ds->y[0] == 3 && ds->n_classes == 4);
        data_free(ds);
        unsigned char xb[2] = {1, 0};
        int8_t yi[2] = {0, 1};
        ds = npy_pair("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 1), }", xb, 2,
                      "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }", yi, 2,
                      COHORT_OK, &err);
        CHECK(ds && ds->x[0] == 1 && ds->x[1] == 0 && ds->y[1] == 1);
        data_free(ds);
        uint64_t ybig[2] = {3, (uint64_t)1 << 63};
        npy_pair("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }", xi, 4,
                 "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", ybig, 16,
                 COHORT_ERR_INPUT, &err);
        CHECK_CONTAINS(err.message, "y.npy: label 1 is 9.22337");
        /* Booleans are targets (0/1 for binary_crossentropy), and class labels too. */
        cohort_dataset *bd = npy_pair("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }",
                                      xi, 4, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                                      xb, 2, COHORT_OK, &err);
        CHECK(bd && bd->t && bd->t_dim == 1 && bd->t[0] == (float)(xb[0] != 0) &&
              bd->t[1] == (float)(xb[1] != 0) && bd->n_classes >= 1);
        data_free(bd);
    }

    const char *xf = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    /* Errors. */
    write_text(tpath(a, "x.npy"), "NOTNUMPY at all, no");
    write_npy(tpath(b, "y.npy"), 1, y3, YI8, sizeof YI8);
    CHECK(data_read_npy(a, b, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "x.npy: not an NPY file");

    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (100, 784), }", XF, 16, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message,
                   "header claims shape (100, 784) of '<f4' (313600 bytes), but only 16 bytes "
                   "follow the header");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 2147483648), }", XF,
             16, y3, YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "more than the limit of 16 GiB");
    /* Fortran order (np.save of a transpose): element (i, j) is the file's
     * value i + 3 j. */
    ds = npy_pair("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", XF, sizeof XF,
                  y3, YI8, sizeof YI8, COHORT_OK, &err);
    for (int i = 0; ds && i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK_MSG(ds->x[i * 4 + j] == XF[i + 3 * j], "x[%d, %d]", i, j);
    data_free(ds);
    /* Big-endian: each value's bytes reversed. */
    unsigned char xbe[sizeof XF];
    for (size_t i = 0; i < sizeof XF; i++)
        xbe[i] = ((const unsigned char *)XF)[i / 4 * 4 + 3 - i % 4];
    ds = npy_pair("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }", xbe, sizeof xbe,
                  y3, YI8, sizeof YI8, COHORT_OK, &err);
    CHECK(ds && memcmp(ds->x, XF, sizeof XF) == 0);
    data_free(ds);
    /* NaN in x: refused with its index, in C order where the file is not. */
    float xnan[12];
    memcpy(xnan, XF, sizeof xnan);
    xnan[7] = NAN;
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", xnan, sizeof xnan, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x.npy: x[1, 3] is nan; cohort trains on finite numbers only");
    npy_pair("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", xnan, sizeof xnan, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x.npy: x[1, 2] is nan");
    /* Two of them: the message names the first in C order, with its own
     * value (file element 1 is x[1, 0] = inf, file element 3 x[0, 1] = nan). */
    memcpy(xnan, XF, sizeof xnan);
    xnan[1] = INFINITY;
    xnan[3] = NAN;
    npy_pair("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", xnan, sizeof xnan, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x.npy: x[0, 1] is nan");
    npy_pair("{'descr': '<c8', 'fortran_order': False, 'shape': (3, 2), }", XF, sizeof XF, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "dtype '<c8' is not supported for x");
    npy_pair("{'descr': '>c8', 'fortran_order': False, 'shape': (3, 2), }", XF, sizeof XF, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "dtype '>c8' is not supported for x");
    npy_pair("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", XF, 12, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "structured dtypes are not supported");
    npy_pair("{'descr': '<f4', 'shape': (3, 4), }", XF, sizeof XF, y3, YI8, sizeof YI8,
             COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "NPY header lacks 'fortran_order'");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }", XF, sizeof XF, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "malformed 'shape'");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'extra': 1}", XF,
             sizeof XF, y3, YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "unexpected key 'extra' in NPY header");
    npy_pair("('descr', '<f4')", XF, sizeof XF, y3, YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "NPY header is not a dict");
    npy_pair("{'descr': <f4, 'fortran_order': False, 'shape': (3, 4)}", XF, sizeof XF, y3, YI8,
             sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "malformed 'descr'");
    npy_pair("{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 4)}", XF, sizeof XF, y3, YI8,
             sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "malformed 'fortran_order'");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4) 'x'}", XF, sizeof XF, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "malformed NPY header");
    ds = npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L)}", XF, sizeof XF,
                  y3, YI8, sizeof YI8, COHORT_OK, &err);
    CHECK(ds && ds->n == 3 && ds->dim == 4);
    data_free(ds);
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 4)}", XF,
             sizeof XF, y3, YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "malformed 'shape'");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
             XF, sizeof XF, y3, YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "shape (4294967296, 4294967296, 4294967296) overflows");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }", XF, sizeof XF, y3,
             YI8, sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x is empty (shape (3, 0))");
    npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", XF, 4, y3, YI8,
             sizeof YI8, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x is a scalar");
    {
        /* Rows of several values are target rows [n, d]: not classes. */
        cohort_dataset *td = npy_pair(xf, XF, sizeof XF,
                                      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                                      XF, 24, COHORT_OK, &err);
        CHECK(td && td->t && td->t_dim == 2 && td->n_classes == 0 && td->has_labels);
        for (int i = 0; td && i < 6; i++)
            CHECK(td->t[i] == XF[i]);
        data_free(td);
    }
    npy_pair(xf, XF, sizeof XF, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
             YI8, 16, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "x has 3 rows, y has 2");
    {
        int32_t yn[3] = {0, -1, 2};
        npy_pair(xf, XF, sizeof XF, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                 yn, 12, COHORT_ERR_INPUT, &err);
        CHECK_CONTAINS(err.message, "y.npy: label 1 is -1; labels must be integers in [0, 2147483646]");
        /* Floats are real-valued targets; classes only where all are class numbers. */
        float yf[3] = {0, 1.5f, 2}, yk[3] = {2, 0, 1};
        cohort_dataset *fd = npy_pair(xf, XF, sizeof XF,
                                      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                      yf, 12, COHORT_OK, &err);
        CHECK(fd && fd->t && fd->t_dim == 1 && fd->t[1] == 1.5f && fd->n_classes == 0);
        data_free(fd);
        fd = npy_pair(xf, XF, sizeof XF, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                      yk, 12, COHORT_OK, &err);
        CHECK(fd && fd->t && fd->n_classes == 3 && fd->y[0] == 2 && fd->y[2] == 1);
        data_free(fd);
        int64_t yb[3] = {0, (int64_t)1 << 40, 2};
        npy_pair(xf, XF, sizeof XF, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 yb, 24, COHORT_ERR_INPUT, &err);
        CHECK_CONTAINS(err.message, "label 1 is 1099511627776");
    }
    /* Version 9, and a header length past the end of the file. */
    {
        unsigned char buf[256];
        size_t len = make_npy(buf, 1, xf, XF, 8);
        buf[6] = 9;
        write_file(tpath(a, "x.npy"), buf, len);
        CHECK(data_read_npy(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "NPY version 9.0 is not supported");
        buf[6] = 1;
        buf[8] = 0xff;
        buf[9] = 0x7f;
        write_file(a, buf, len);
        CHECK(data_read_npy(a, b, &ds, &err) == COHORT_ERR_INPUT);
        CHECK_CONTAINS(err.message, "truncated: expected 32767 bytes of NPY header");
    }
    CHECK(data_read_npy(tpath(a, "missing.npy"), b, &ds, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "missing.npy: cannot open");
}

/* ---- NPZ ------------------------------------------------------------- */

typedef struct zmember {
    const char *name;
    const unsigned char *data;
    size_t len;
    int deflate;
    int zip64;     /* write the sizes and offset as a Zip64 extra field */
    uint32_t crc_xor; /* corrupt the CRC */
} zmember;

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}
static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static size_t deflate_raw(const unsigned char *in, size_t len, unsigned char *out, size_t cap)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    zs.next_in = (unsigned char *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int r = deflate(&zs, Z_FINISH);
    size_t n = cap - zs.avail_out;
    deflateEnd(&zs);
    return r == Z_STREAM_END ? n : 0;
}

/* Write the Zip64 end record and locator, with the classic record saturated. */
static int zip_eocd64;

/* A zip archive of the members into buf (cap bytes); returns its length.
 * *cd_at gets the offset of the end-of-central-directory record. */
static size_t make_zip(unsigned char *buf, size_t cap, const zmember *m, int n, size_t *eocd_at)
{
    size_t p = 0, offsets[8], csizes[8];
    uint32_t crcs[8];
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(m[i].name);
        offsets[i] = p;
        crcs[i] = (uint32_t)crc32(0, m[i].data, (uInt)m[i].len) ^ m[i].crc_xor;
        unsigned char *h = buf + p;
        memset(h, 0, 30);
        put32(h, 0x04034b50);
        put16(h + 4, 20);
        put16(h + 8, m[i].deflate ? 8 : 0);
        put32(h + 14, crcs[i]);
        put16(h + 26, (unsigned)nl);
        put16(h + 28, 4); /* an empty extra field, as a reader must skip */
        memcpy(h + 30, m[i].name, nl);
        put16(h + 30 + nl, 0xcafe);
        put16(h + 32 + nl, 0);
        p += 30 + nl + 4;
        if (m[i].deflate)
            csizes[i] = deflate_raw(m[i].data, m[i].len, buf + p, cap - p);
        else {
            memcpy(buf + p, m[i].data, m[i].len);
            csizes[i] = m[i].len;
        }
        put32(h + 18, (uint32_t)csizes[i]);
        put32(h + 22, (uint32_t)m[i].len);
        p += csizes[i];
    }
    size_t cd = p;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(m[i].name);
        unsigned char *c = buf + p;
        memset(c, 0, 46);
        put32(c, 0x02014b50);
        put16(c + 4, 20);
        put16(c + 6, 20);
        put16(c + 10, m[i].deflate ? 8 : 0);
        put32(c + 16, crcs[i]);
        put16(c + 28, (unsigned)nl);
        memcpy(c + 46, m[i].name, nl);
        if (m[i].zip64) {
            put32(c + 20, 0xffffffffu);
            put32(c + 24, 0xffffffffu);
            put32(c + 42, 0xffffffffu);
            unsigned char *e = c + 46 + nl;
            put16(e, 0x0001);
            put16(e + 2, 24);
            put64(e + 4, m[i].len);
            put64(e + 12, csizes[i]);
            put64(e + 20, offsets[i]);
            put16(c + 30, 28);
            p += 46 + nl + 28;
        } else {
            put32(c + 20, (uint32_t)csizes[i]);
            put32(c + 24, (uint32_t)m[i].len);
            put32(c + 42, (uint32_t)offsets[i]);
            p += 46 + nl;
        }
    }
    size_t cd_size = p - cd;
    if (zip_eocd64) {
        unsigned char *r = buf + p;
        memset(r, 0, 76);
        put32(r, 0x06064b50);
        put64(r + 4, 44);
        put16(r + 12, 45);
        put16(r + 14, 45);
        put64(r + 24, (uint64_t)n);
        put64(r + 32, (uint64_t)n);
        put64(r + 40, cd_size);
        put64(r + 48, cd);
        put32(r + 56, 0x07064b50);
        put64(r + 64, p);
        put32(r + 72, 1);
        p += 76;
    }
    unsigned char *e = buf + p;
    memset(e, 0, 22);
    put32(e, 0x06054b50);
    put16(e + 8, zip_eocd64 ? 0xffff : (unsigned)n);
    put16(e + 10, zip_eocd64 ? 0xffff : (unsigned)n);
    put32(e + 12, zip_eocd64 ? 0xffffffffu : (uint32_t)cd_size);
    put32(e + 16, zip_eocd64 ? 0xffffffffu : (uint32_t)cd);
    *eocd_at = p;
    return p + 22;
}

static unsigned char npx[512], npy_[512];
static size_t npx_len, npy_len;

static cohort_dataset *npz(const zmember *m, int n, cohort_status want, cohort_error *err)
{
    static unsigned char zip[8192];
    char p[512];
    size_t eocd;
    size_t len = make_zip(zip, sizeof zip, m, n, &eocd);
    write_file(tpath(p, "t.npz"), zip, len);
    cohort_dataset *ds = (cohort_dataset *)1;
    cohort_status st = data_read_npz(p, &ds, err);
    CHECK_MSG(st == want, "npz status %d, wanted %d: %s", st, want, st ? err->message : "");
    if (st)
        CHECK(ds == NULL);
    return st ? NULL : ds;
}

static void check_npz_ds(const cohort_dataset *ds)
{
    CHECK(ds != NULL);
    if (!ds)
        return;
    CHECK(ds->n == 3 && ds->dim == 4 && ds->n_classes == 5);
    CHECK(ds->x[0] == 0.5f && ds->x[11] == -11.25f);
    CHECK(ds->y[0] == 2 && ds->y[2] == 4);
}

static void test_npz(void)
{
    cohort_error err;
    cohort_dataset *ds;
    npx_len = make_npy(npx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", XF,
                       sizeof XF);
    npy_len = make_npy(npy_, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", YI8,
                       sizeof YI8);
    unsigned char other[256];
    size_t other_len = make_npy(other, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1), }",
                                "\x07", 1);

    zmember stored[2] = {{"x.npy", npx, npx_len, 0, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    ds = npz(stored, 2, COHORT_OK, &err);
    check_npz_ds(ds);
    CHECK(ds && strstr(ds->source, "npz:") == ds->source);
    data_free(ds);

    /* Deflated, y first, with Zip64 fields in the central directory. */
    zmember deflated[2] = {{"y.npy", npy_, npy_len, 1, 1, 0}, {"x.npy", npx, npx_len, 1, 0, 0}};
    ds = npz(deflated, 2, COHORT_OK, &err);
    check_npz_ds(ds);
    data_free(ds);

    /* The directory found through the Zip64 end record. */
    zip_eocd64 = 1;
    ds = npz(deflated, 2, COHORT_OK, &err);
    check_npz_ds(ds);
    data_free(ds);
    zip_eocd64 = 0;

    /* A Keras-style file (mnist.npz) holds both sets: unnamed, it is refused
     * with the names it has (it used to read x_train, even as test data);
     * named, each pair reads. */
    zmember keras[4] = {{"x_test.npy", other, other_len, 1, 0, 0},
                        {"x_train.npy", npx, npx_len, 1, 0, 0},
                        {"y_train.npy", npy_, npy_len, 0, 0, 0},
                        {"y_test.npy", other, other_len, 0, 0, 0}};
    npz(keras, 4, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz: holds both training and test arrays (x_test, x_train, "
                                "y_train, y_test); name the two to read, like npz:");
    char kp[512], spec[600];
    snprintf(spec, sizeof spec, "npz:%s:x_train,y_train", tpath(kp, "t.npz"));
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    check_npz_ds(ds);
    data_free(ds);
    snprintf(spec, sizeof spec, "npz:%s:x_test,y_test.npy", kp);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->n == 1 && ds->dim == 1 && ds->y[0] == 7 && ds->has_labels);
    data_free(ds);
    snprintf(spec, sizeof spec, "npz:%s:x_test,y_valid", kp);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_ERR_INPUT && !ds);
    CHECK_CONTAINS(err.message, "t.npz: has no array 'y_valid' (it has x_test, x_train, y_train, y_test)");
    snprintf(spec, sizeof spec, "npz:%s:x_test", kp);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_ERR_INPUT && !ds);
    CHECK_CONTAINS(err.message, "name two arrays, inputs and labels");
    data_options unl = {.unlabeled_dim = 1};
    CHECK(data_load(spec, &unl, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->n == 1 && !ds->has_labels && ds->n_classes == 0);
    data_free(ds);

    /* Otherwise the first two members, x first. */
    zmember firsttwo[3] = {{"arr_0.npy", npx, npx_len, 0, 0, 0},
                           {"arr_1.npy", npy_, npy_len, 1, 0, 0},
                           {"arr_2.npy", other, other_len, 0, 0, 0}};
    ds = npz(firsttwo, 3, COHORT_OK, &err);
    check_npz_ds(ds);
    data_free(ds);

    /* Missing members. */
    npz(stored, 1, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz: has x.npy but no y.npy");
    zmember ytrain[2] = {{"y_train.npy", npy_, npy_len, 0, 0, 0}, {"b.npy", npx, npx_len, 0, 0, 0}};
    npz(ytrain, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "has y_train.npy but no x_train.npy");
    /* scikit-learn's capital X: the message says how to name it. */
    zmember sk[2] = {{"X.npy", npx, npx_len, 0, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    npz(sk, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz: has y.npy but no x.npy (it has X, y); name the inputs and "
                                "the labels to read, like npz:");
    CHECK_CONTAINS(err.message, "t.npz:X,y");
    /* The same for x_train, and a placeholder where the file has neither
     * spelling (it had suggested x and x, which the files did not have). */
    zmember sk2[2] = {{"X_train.npy", npx, npx_len, 0, 0, 0}, {"y_train.npy", npy_, npy_len, 0, 0, 0}};
    npz(sk2, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz:X_train,y_train");
    zmember feats[2] = {{"feats.npy", npx, npx_len, 0, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    npz(feats, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz:INPUTS,y");
    zmember sk4[4] = {{"X_train.npy", npx, npx_len, 0, 0, 0}, {"X_test.npy", npx, npx_len, 0, 0, 0},
                      {"y_train.npy", npy_, npy_len, 0, 0, 0}, {"y_test.npy", npy_, npy_len, 0, 0, 0}};
    npz(sk4, 4, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz:X_train,y_train or npz:");
    CHECK_CONTAINS(err.message, "t.npz:X_test,y_test");
    npz(firsttwo + 2, 1, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "holds 1 array; expected x and y (or x_train and y_train)");

    /* Bad CRC, bad member content. */
    zmember badcrc[2] = {{"x.npy", npx, npx_len, 1, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 1}};
    npz(badcrc, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz: member y.npy: CRC-32 mismatch");
    zmember notnpy[2] = {{"x.npy", (const unsigned char *)"hello, world", 12, 1, 0, 0},
                         {"y.npy", npy_, npy_len, 0, 0, 0}};
    npz(notnpy, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "t.npz: member x.npy: not an NPY file");
    /* Deflated data that runs out before the array does. */
    zmember shortx[2] = {{"x.npy", npx, npx_len - 8, 1, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    npz(shortx, 2, COHORT_ERR_INPUT, &err);
    CHECK_CONTAINS(err.message, "member x.npy: header claims shape (3, 4) of '<f4' (48 bytes), but only 40");

    /* Hand-damaged archives. */
    static unsigned char zip[8192];
    char p[512];
    size_t eocd, len = make_zip(zip, sizeof zip, stored, 2, &eocd);
    tpath(p, "bad.npz");

    write_file(p, zip, eocd + 10); /* cut inside the end record */
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "not a zip archive (no end-of-central-directory record)");

    unsigned char *e = zip + eocd;
    uint32_t cd_size = (uint32_t)e[12] | (uint32_t)e[13] << 8;
    put32(e + 12, cd_size + 1000); /* the directory runs past the end of the file */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "truncated central directory");
    put32(e + 12, cd_size - 3); /* the directory ends inside the second entry's name */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "truncated central directory (entry 2 runs past its end)");
    put32(e + 12, cd_size);
    put16(e + 10, 3); /* three entries claimed, two present */
    put32(e + 12, cd_size + 46);
    put32(e + 16, (uint32_t)(eocd - cd_size - 46));
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK(strstr(err.message, "central directory") != NULL || strstr(err.message, "local header") != NULL);

    zip_eocd64 = 1;
    len = make_zip(zip, sizeof zip, stored, 2, &eocd);
    zip_eocd64 = 0;
    put64(zip + eocd - 20 + 8, 1u << 20); /* the Zip64 end record past the end of the file */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "truncated Zip64 end record");
    put32(zip + eocd - 20, 0x12345678);
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "missing Zip64 locator");

    len = make_zip(zip, sizeof zip, deflated, 2, &eocd);
    /* Corrupt the first member's deflate stream. */
    memset(zip + 30 + 5 + 4, 0xff, 6);
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member y.npy: corrupt deflate data");

    len = make_zip(zip, sizeof zip, stored, 2, &eocd);
    size_t cd = eocd - (46 + 5) * 2;
    put16(zip + cd + 10, 12); /* bzip2 */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member x.npy: compression method 12 is not supported");
    put16(zip + cd + 8, 1); /* encrypted */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member x.npy: encrypted members are not supported");
    put16(zip + cd + 8, 0);
    put16(zip + cd + 10, 8);
    put32(zip + cd + 24, 0x7fffffff); /* 2 GB from a few hundred bytes */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "more than deflate can produce");
    put16(zip + cd + 10, 0);
    put32(zip + cd + 24, (uint32_t)npx_len + 1);
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "stored member has");
    put32(zip + cd + 24, (uint32_t)npx_len);
    put32(zip + cd + 42, 7); /* local header offset into nowhere */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member x.npy: bad local header");
    put32(zip + cd + 42, 0);
    put32(zip + cd + 20, 1u << 30); /* data past the end of the file */
    put32(zip + cd + 24, 1u << 30);
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member x.npy: truncated");

    len = make_zip(zip, sizeof zip, stored, 2, &eocd);
    put32(zip + cd + 42, 0xffffffffu); /* Zip64 marker without a Zip64 field */
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "entry 1 has a bad Zip64 field");
    len = make_zip(zip, sizeof zip, stored, 2, &eocd);
    put16(zip + eocd + 4, 1);
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "multi-volume zip archives are not supported");

    /* A deflated member that claims more bytes than its stream holds. */
    zmember defl[2] = {{"x.npy", npx, npx_len, 1, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    len = make_zip(zip, sizeof zip, defl, 2, &eocd);
    {
        size_t c0 = eocd - (46 + 5) * 2;
        put32(zip + c0 + 24, (uint32_t)npx_len + 10);
    }
    write_file(p, zip, len);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "member x.npy: truncated: 10 bytes missing");

    write_npy(p, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", YI8, sizeof YI8);
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "this is an .npy file, not an .npz; use npy:X,Y");
    write_text(p, "tiny");
    CHECK(data_read_npz(p, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "not a zip archive (too short)");
    CHECK(data_read_npz(tpath(p, "nothere.npz"), &ds, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "nothere.npz: cannot open");
    unlink(tpath(p, "bad.npz"));
}

/* ---- sample shapes --------------------------------------------------- */

static int shape_is(sample_shape s, int rank, int h, int w, int c)
{
    return s.rank == rank && s.h == h && s.w == w && s.c == c;
}

static void check_shape_at(int line, const cohort_dataset *ds, int rank, int h, int w, int c)
{
    if (ds && shape_is(ds->shape, rank, h, w, c)) {
        check_passed++;
        return;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: want shape of rank %d (%d, %d, %d), got ", __FILE__, line, rank, h, w,
            c);
    if (ds)
        fprintf(stderr, "rank %d (%d, %d, %d)\n", ds->shape.rank, ds->shape.h, ds->shape.w,
                ds->shape.c);
    else
        fprintf(stderr, "no dataset\n");
}
#define CHECK_SHAPE(ds, rank, h, w, c) check_shape_at(__LINE__, ds, rank, h, w, c)

/* Each reader keeps the shape of a sample: images (H, W, C), channels last;
 * the rest flat. dim stays the product. */
static void test_shapes(void)
{
    char a[512], b[512];
    unsigned char buf[256];
    cohort_error err;
    cohort_dataset *ds;

    /* IDX [3, 2, 2] is (2, 2, 1), as Keras reads MNIST. */
    write_idx_pair(tpath(a, "simg"), tpath(b, "slbl"), 1, 3, 12, 3);
    ds = NULL;
    CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
    CHECK_SHAPE(ds, 3, 2, 2, 1);
    data_free(ds);
    /* IDX [3, 4] is flat; [3, 1, 2, 2] is (1, 2, 2); [3, 1, 1, 2, 2] is flattened. */
    {
        uint32_t d2[2] = {3, 4}, d4[4] = {3, 1, 2, 2}, d5[5] = {3, 1, 1, 2, 2};
        tpath(a, "simg_other");
        write_file(a, buf, make_idx(buf, 0x802, d2, 2, IMG, 12));
        ds = NULL;
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
        CHECK_SHAPE(ds, 1, 1, 1, 4);
        CHECK(ds && ds->dim == 4);
        data_free(ds);
        write_file(a, buf, make_idx(buf, 0x804, d4, 4, IMG, 12));
        ds = NULL;
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
        CHECK_SHAPE(ds, 3, 1, 2, 2);
        data_free(ds);
        write_file(a, buf, make_idx(buf, 0x805, d5, 5, IMG, 12));
        ds = NULL;
        CHECK(data_read_idx(a, b, &ds, &err) == COHORT_OK);
        CHECK_SHAPE(ds, 1, 1, 1, 4);
        data_free(ds);
    }

    /* NPY: [n, H, W] is (H, W, 1), [n, H, W, C] is (H, W, C), [n, d] and [n] flat. */
    const char *y3 = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
    static const struct {
        const char *shape;
        int rank, h, w, c;
    } npys[] = {
        {"(3, 2, 2)", 3, 2, 2, 1},    {"(3, 1, 2, 2)", 3, 1, 2, 2}, {"(3, 2, 1, 2)", 3, 2, 1, 2},
        {"(3, 4)", 1, 1, 1, 4},       {"(3, 4, 1)", 3, 4, 1, 1},    {"(3, 1, 1, 2, 2)", 1, 1, 1, 4},
    };
    for (size_t i = 0; i < sizeof npys / sizeof npys[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                 npys[i].shape);
        ds = npy_pair(dict, XF, sizeof XF, y3, YI8, sizeof YI8, COHORT_OK, &err);
        CHECK_MSG(ds && shape_is(ds->shape, npys[i].rank, npys[i].h, npys[i].w, npys[i].c) &&
                      ds->dim == 4,
                  "npy %s: shape of rank %d (%d, %d, %d)", npys[i].shape, ds ? ds->shape.rank : -1,
                  ds ? ds->shape.h : -1, ds ? ds->shape.w : -1, ds ? ds->shape.c : -1);
        data_free(ds);
    }
    {
        float x1[3] = {1, 2, 3};
        ds = npy_pair("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", x1, sizeof x1,
                      y3, YI8, sizeof YI8, COHORT_OK, &err);
        CHECK_SHAPE(ds, 1, 1, 1, 1);
        data_free(ds);
    }

    /* NPZ: the same rules; a flat x stays flat. */
    unsigned char img[512];
    size_t img_len = make_npy(img, 1, "{'descr': '<f4', 'fortran_order': False, "
                                      "'shape': (3, 2, 1, 2), }",
                              XF, sizeof XF);
    npy_len = make_npy(npy_, 1, y3, YI8, sizeof YI8);
    zmember im[2] = {{"x.npy", img, img_len, 1, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    ds = npz(im, 2, COHORT_OK, &err);
    CHECK_SHAPE(ds, 3, 2, 1, 2);
    data_free(ds);
    img_len = make_npy(img, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 2), }",
                       XF, sizeof XF);
    ds = npz(im, 2, COHORT_OK, &err);
    CHECK_SHAPE(ds, 3, 2, 2, 1);
    data_free(ds);
    img_len = make_npy(img, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", XF,
                       sizeof XF);
    zmember flat[2] = {{"x.npy", img, img_len, 0, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    ds = npz(flat, 2, COHORT_OK, &err);
    CHECK_SHAPE(ds, 1, 1, 1, 4);
    data_free(ds);

    /* CSV is flat, through data_load too. */
    ds = csv("label,a,b,c\n1,2,3,4\n0,5,6,7\n", NULL, COHORT_OK, &err);
    CHECK_SHAPE(ds, 1, 1, 1, 3);
    data_free(ds);

    /* The split and views keep the shape. */
    ds = NULL;
    char spec[1200], c2[512];
    snprintf(spec, sizeof spec, "idx:%s,%s", tpath(a, "simg"), tpath(c2, "slbl"));
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    CHECK_SHAPE(ds, 3, 2, 2, 1);
    if (ds) {
        data_view tr, va, all = data_view_all(ds);
        data_split(ds, 0.34, &tr, &va);
        CHECK(tr.n == 1 && va.n == 2);
        CHECK(shape_is(tr.shape, 3, 2, 2, 1) && shape_is(va.shape, 3, 2, 2, 1));
        CHECK(shape_is(all.shape, 3, 2, 2, 1));
    }
    data_free(ds);

    /* The shape helper, and data_make's checks. */
    uint64_t dims[3] = {5, 6, 7};
    CHECK(shape_is(data_shape_of(dims, 0), 1, 1, 1, 1));
    CHECK(shape_is(data_shape_of(dims, 1), 1, 1, 1, 5));
    CHECK(shape_is(data_shape_of(dims, 2), 3, 5, 6, 1));
    CHECK(shape_is(data_shape_of(dims, 3), 3, 5, 6, 7));
    uint64_t big[2] = {65536, 65536};
    CHECK(data_shape_of(big, 2).rank == 0);
    ds = (cohort_dataset *)1;
    CHECK(data_make(NULL, NULL, 0, (int64_t)INT32_MAX + 1, NULL, "t", &ds, &err) ==
          COHORT_ERR_INPUT);
    CHECK(ds == NULL);
    CHECK_CONTAINS(err.message, "t: a sample holds 2147483648 values, more than the 2147483647 a "
                                "model input can take");
    sample_shape s = shape_image(2, 2, 1);
    CHECK(data_make(NULL, NULL, 0, 5, &s, "t", &ds, &err) == COHORT_ERR_INTERNAL);
    CHECK(data_make(NULL, NULL, 0, 4, &s, "t", &ds, &err) == COHORT_OK);
    CHECK_SHAPE(ds, 3, 2, 2, 1);
    data_free(ds);
}

/* ---- split and dispatch ---------------------------------------------- */

static void test_split(void)
{
    float x[20];
    int32_t y[10];
    for (int i = 0; i < 20; i++)
        x[i] = (float)i;
    for (int i = 0; i < 10; i++)
        y[i] = i;
    cohort_dataset ds = {.n = 10, .dim = 2, .x = x, .y = y, .n_classes = 10};
    data_view tr, va;
    data_split(&ds, 0.2, &tr, &va);
    CHECK(tr.n == 8 && va.n == 2);
    CHECK(tr.x == x && tr.y == y && tr.dim == 2);
    CHECK(va.x == x + 16 && va.y == y + 8 && va.dim == 2);
    CHECK(va.x[0] == 16 && va.y[1] == 9);
    data_split(&ds, 0.0, &tr, &va);
    CHECK(tr.n == 10 && va.n == 0);
    data_split(&ds, 1.0, &tr, &va);
    CHECK(tr.n == 0 && va.n == 10 && va.x == x);
    ds.n = 3;
    data_split(&ds, 0.5, &tr, &va); /* int(3 * 0.5) = 1 */
    CHECK(tr.n == 1 && va.n == 2);
    ds.n = 7;
    data_split(&ds, 0.1, &tr, &va); /* int(7 * 0.9) = int(6.3) = 6 */
    CHECK(tr.n == 6 && va.n == 1);
    data_split(&ds, -1.0, &tr, &va);
    CHECK(tr.n == 7 && va.n == 0);
    data_split(&ds, 1.5, &tr, &va);
    CHECK(tr.n == 0 && va.n == 7);
    data_split(&ds, NAN, &tr, &va);
    CHECK(tr.n == 7 && va.n == 0);
    data_view all = data_view_all(&ds);
    CHECK(all.n == 7 && all.x == x && all.y == y && all.dim == 2);
    CHECK(all.shape.rank == 1 && all.shape.c == 2); /* made without a shape: flat */
    all = data_view_all(NULL);
    CHECK(all.n == 0 && all.x == NULL);
    data_free(NULL);
}

static void test_load(void)
{
    cohort_error err;
    cohort_dataset *ds = (cohort_dataset *)1;
    char a[512], b[512], spec[1200];

    CHECK(data_load("foo:bar", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK(ds == NULL);
    CHECK_CONTAINS(err.message, "unknown dataset 'foo:bar': expected fashion-mnist:, mnist:, idx:, "
                                "csv:, npy: or npz:");
    CHECK(data_load("train.csv", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "(did you mean csv:train.csv?)");
    CHECK(data_load("d.npz", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "(did you mean npz:d.npz?)");
    CHECK(data_load("fashion-mnist", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "unknown dataset 'fashion-mnist'");
    CHECK(data_load("idx:only-one", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "expected idx:IMAGES,LABELS");
    CHECK(data_load("npy:,y.npy", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "expected npy:X,Y");
    CHECK(data_load("csv:", NULL, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "expected csv:FILE");
    CHECK(data_load("", NULL, &ds, &err) == COHORT_ERR_USAGE);
    CHECK(data_load(NULL, NULL, &ds, &err) == COHORT_ERR_USAGE);

    /* idx: with a comma in the images path. */
    write_idx_pair(tpath(a, "im,g"), tpath(b, "lbl"), 1, 3, 12, 3);
    snprintf(spec, sizeof spec, "idx:%s,%s", a, b);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    check_small_idx(ds);
    CHECK(ds && strcmp(ds->source, spec) == 0);
    data_free(ds);
    unlink(a);
    unlink(b);

    write_text(tpath(a, "l.csv"), "y,a,b\n1,2,3\n0,5,6\n");
    snprintf(spec, sizeof spec, "csv:%s", a);
    data_options opt = {.label_column = "y"};
    CHECK(data_load(spec, &opt, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->dim == 2 && ds->y[0] == 1 && ds->x[0] == 2 && strcmp(ds->source, spec) == 0);
    data_free(ds);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK); /* no "label": the last column */
    CHECK(ds && ds->y[0] == 3 && ds->y[1] == 6 && ds->x[0] == 1 && ds->n_classes == 7);
    data_free(ds);
    unlink(a);

    write_npy(tpath(a, "x.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
              XF, sizeof XF);
    write_npy(tpath(b, "y.npy"), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
              YI8, sizeof YI8);
    snprintf(spec, sizeof spec, "npy:%s,%s", a, b);
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    check_npz_ds(ds);
    data_free(ds);
    unlink(a);
    unlink(b);

    zmember stored[2] = {{"x.npy", npx, npx_len, 1, 0, 0}, {"y.npy", npy_, npy_len, 0, 0, 0}};
    ds = npz(stored, 2, COHORT_OK, &err);
    data_free(ds);
    snprintf(spec, sizeof spec, "npz:%s", tpath(a, "t.npz"));
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    check_npz_ds(ds);
    CHECK(ds && strcmp(ds->source, spec) == 0);
    data_free(ds);
}

static void cleanup(void)
{
    static const char *files[] = {"img", "lbl", "img_gz", "lbl_gz", "big_gz", "big_lbl_gz",
                                  "img_unused", "t.csv", "chunks.csv", "x.npy", "y.npy", "t.npz",
                                  "simg", "slbl", "simg_other", "r.csv", "r2.csv",
                                  "tx.npy", "ty.npy", "timg", "tlbl"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        unlink(tpath(p, files[i]));
    if (rmdir(tmpdir) != 0)
        fprintf(stderr, "test_data: could not remove %s\n", tmpdir);
}

/* ---- token ids (an embedding's input): read as they are, checked ---- */

/* ds read from spec with opt, checked as token ids in [0, limit): the
 * status, and the message in err. */
static cohort_status tokens_check(const char *spec, int tokens, int64_t limit,
                                  cohort_dataset **out, cohort_error *err)
{
    data_options opt = {.tokens = tokens};
    cohort_status st = data_load(spec, &opt, out, err);
    CHECK_MSG(st == COHORT_OK, "%s: %s", spec, st ? err->message : "");
    if (st)
        return st;
    data_tokens scan;
    data_tokens_scan(*out, &scan);
    return data_check_tokens(*out, &scan, limit, "model 'm': its embedding (layers.0)", err);
}

static void test_tokens(void)
{
    cohort_error err;
    cohort_dataset *ds = NULL;
    char a[512], b[512], spec[1200];
    const char *y2 = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
    int64_t yl[2] = {0, 1};
    write_npy(tpath(b, "ty.npy"), 1, y2, yl, sizeof yl);

    /* uint8 [2, 3]: as they are with tokens, scaled by 1/255 without. */
    unsigned char xu[6] = {0, 200, 255, 3, 1, 29};
    write_npy(tpath(a, "tx.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }",
              xu, sizeof xu);
    snprintf(spec, sizeof spec, "npy:%s,%s", a, b);
    CHECK(tokens_check(spec, 1, 256, &ds, &err) == COHORT_OK);
    if (ds) {
        CHECK(ds->x_ints && strcmp(ds->x_dtype, "uint8") == 0);
        CHECK(ds->x[0] == 0 && ds->x[1] == 200 && ds->x[2] == 255 && ds->x[5] == 29);
    }
    data_free(ds);
    CHECK(tokens_check(spec, 1, 255, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "model 'm': its embedding (layers.0) takes token ids in [0, 255), "
                                "but npy:");
    CHECK_CONTAINS(err.message, "has x[0, 2] = 255 (its largest id is 255: input_dim must be at "
                                "least 256)");
    data_free(ds);
    ds = NULL;
    CHECK(data_load(spec, NULL, &ds, &err) == COHORT_OK);
    if (ds) {
        CHECK(!ds->x_ints && strcmp(ds->x_dtype, "uint8") == 0);
        CHECK(ds->x[2] == 1.0f && ds->x[3] == 3.0f / 255.0f);
    }
    data_free(ds);
    ds = NULL;

    /* int64 and int16, big-endian: exact; the first id too large is named. */
    int64_t xl[6] = {5, 0, 16777215, 7, 30, 31};
    write_npy(a, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", xl, sizeof xl);
    CHECK(tokens_check(spec, 1, 16777216, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->x[2] == 16777215.0f && strcmp(ds->x_dtype, "int64") == 0 && ds->x_ints);
    data_free(ds);
    CHECK(tokens_check(spec, 1, 30, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "has x[0, 2] = 16777215");
    data_free(ds);
    unsigned char be[12] = {0, 1, 0, 2, 0, 3, 0, 4, 0xff, 0xfe, 0, 6}; /* 1 2 3 4 -2 6 */
    write_npy(a, 1, "{'descr': '>i2', 'fortran_order': False, 'shape': (2, 3), }", be, sizeof be);
    CHECK(tokens_check(spec, 1, 30, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "has x[1, 1] = -2, a negative id");
    CHECK(ds && ds->x[0] == 1 && ds->x[5] == 6);
    data_free(ds);

    /* Float and bool arrays are refused, even of whole numbers. */
    float xf[6] = {1, 2, 3, 4, 5, 6};
    write_npy(a, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", xf, sizeof xf);
    CHECK(tokens_check(spec, 1, 30, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "holds float32 values (x[0, 0] is 1); save the ids as an integer "
                                "array (x.astype(np.int32))");
    data_free(ds);
    xf[4] = 2.5f;
    write_npy(a, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", xf, sizeof xf);
    CHECK(tokens_check(spec, 1, 30, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "holds float32 values (x[1, 1] is 2.5)");
    data_free(ds);
    unsigned char xb[6] = {1, 0, 1, 1, 0, 0};
    write_npy(a, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", xb, sizeof xb);
    CHECK(tokens_check(spec, 1, 30, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "holds bool values");
    data_free(ds);

    /* NPZ: uint8 as it is too. */
    unsigned char zx[256], zy[256], zip[4096];
    size_t zxl = make_npy(zx, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }",
                          xu, sizeof xu);
    size_t zyl = make_npy(zy, 1, y2, yl, sizeof yl);
    zmember m[2] = {{"x.npy", zx, zxl, 1, 0, 0}, {"y.npy", zy, zyl, 0, 0, 0}};
    size_t eocd, zl = make_zip(zip, sizeof zip, m, 2, &eocd);
    write_file(tpath(a, "t.npz"), zip, zl);
    snprintf(spec, sizeof spec, "npz:%s", a);
    CHECK(tokens_check(spec, 1, 256, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->x_ints && ds->x[1] == 200 && ds->x[2] == 255);
    data_free(ds);
    snprintf(spec, sizeof spec, "npz:%s:x,y", a);
    CHECK(tokens_check(spec, 1, 256, &ds, &err) == COHORT_OK);
    CHECK(ds && ds->x_ints && ds->x[1] == 200);
    data_free(ds);

    /* CSV: integers are ids; a fraction is named by its element. */
    const char *csv = "a,b,c,label\n1,2,3,0\n4,0,6,1\n";
    write_file(tpath(a, "t.csv"), csv, strlen(csv));
    snprintf(spec, sizeof spec, "csv:%s", a);
    CHECK(tokens_check(spec, 1, 7, &ds, &err) == COHORT_OK);
    CHECK(ds && !ds->x_ints && ds->x_dtype[0] == 0 && ds->x[3] == 4);
    data_free(ds);
    csv = "a,b,c,label\n1,2,3,0\n4,0.5,6,1\n";
    write_file(a, csv, strlen(csv));
    CHECK(tokens_check(spec, 1, 7, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "has x[1, 1] = 0.5, not an integer");
    data_free(ds);

    /* IDX images are pixels. */
    write_idx_pair(tpath(a, "timg"), tpath(b, "tlbl"), 1, 3, 12, 3);
    snprintf(spec, sizeof spec, "idx:%s,%s", a, b);
    CHECK(tokens_check(spec, 1, 256, &ds, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "holds IDX images");
    data_free(ds);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_data.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_csv_targets();
    test_idx();
    test_gz_cache();
    test_fashion_mnist();
    test_cohort_data();
    test_csv();
    test_csv_locale();
    test_csv_chunks();
    test_npy();
    test_npz();
    test_shapes();
    test_split();
    test_load();
    test_tokens();
    cleanup();
    return check_done("test_data");
}
