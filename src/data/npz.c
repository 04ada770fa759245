/*
 * npz: NumPy's .npz, a zip archive of .npy members. Reads the zip central
 * directory (with Zip64 records, which numpy writes for large arrays) and
 * streams the chosen members, stored or deflated, into the NPY reader.
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP_EOCD64_SIG 0x06064b50u
#define ZIP_LOC64_SIG 0x07064b50u
#define ZIP_CEN_SIG 0x02014b50u
#define ZIP_LOC_SIG 0x04034b50u
#define ZIP_MAX_CD ((uint64_t)256 << 20)
/* Deflate cannot expand data by more than about 1032:1. */
#define ZIP_MAX_RATIO 1032u

typedef struct zip_entry {
    const char *name; /* points into the central directory buffer */
    size_t name_len;
    unsigned flags, method;
    uint32_t crc;
    uint64_t csize, usize, offset;
} zip_entry;

typedef struct zip_archive {
    const char *path;
    FILE *f;
    uint64_t size;
    unsigned char *cd;
    zip_entry *entries;
    uint64_t n;
} zip_archive;

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static cohort_status read_at(zip_archive *z, uint64_t off, void *buf, size_t n, const char *what,
                             cohort_error *err)
{
    if (off > z->size || n > z->size - off)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated %s (needs %zu bytes at offset %llu, the file has %llu)",
                           z->path, what, n, (unsigned long long)off,
                           (unsigned long long)z->size);
    if (fseeko(z->f, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, n, z->f) != n)
        return cohort_fail(err, COHORT_ERR_IO, "%s: read failed: %s", z->path, strerror(errno));
    return COHORT_OK;
}

/* Find the end-of-central-directory record; fill the directory's place. */
static cohort_status find_directory(zip_archive *z, uint64_t *cd_off, uint64_t *cd_size,
                                    uint64_t *entries, cohort_error *err)
{
    if (z->size < 22) {
        unsigned char m[6];
        if (z->size >= 6 && read_at(z, 0, m, 6, "file", err) == COHORT_OK &&
            memcmp(m, "\x93NUMPY", 6) == 0)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: this is an .npy file, not an .npz; use npy:X,Y", z->path);
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: not a zip archive (too short)", z->path);
    }
    size_t tail_len = z->size < 22 + 65535 ? (size_t)z->size : 22 + 65535;
    uint64_t tail_off = z->size - tail_len;
    unsigned char *tail = malloc(tail_len);
    if (!tail)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", z->path);
    cohort_status st = read_at(z, tail_off, tail, tail_len, "file", err);
    if (st) {
        free(tail);
        return st;
    }
    size_t pos = tail_len - 22 + 1;
    int found = 0;
    while (pos-- > 0) {
        if (le32(tail + pos) == ZIP_EOCD_SIG && pos + 22 + le16(tail + pos + 20) <= tail_len) {
            found = 1;
            break;
        }
    }
    if (!found) {
        int npy = tail_off == 0 && memcmp(tail, "\x93NUMPY", 6) == 0;
        free(tail);
        if (npy)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: this is an .npy file, not an .npz; use npy:X,Y", z->path);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: not a zip archive (no end-of-central-directory record)",
                           z->path);
    }
    const unsigned char *e = tail + pos;
    uint64_t eocd_off = tail_off + pos;
    unsigned disk = le16(e + 4), cd_disk = le16(e + 6);
    *entries = le16(e + 10);
    *cd_size = le32(e + 12);
    *cd_off = le32(e + 16);
    free(tail);
    if (disk != 0 || cd_disk != 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: multi-volume zip archives are not supported",
                           z->path);
    if (*entries == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        unsigned char loc[20], rec[56];
        if (eocd_off < 20)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: missing Zip64 locator", z->path);
        if ((st = read_at(z, eocd_off - 20, loc, sizeof loc, "Zip64 locator", err)))
            return st;
        if (le32(loc) != ZIP_LOC64_SIG)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: missing Zip64 locator", z->path);
        if ((st = read_at(z, le64(loc + 8), rec, sizeof rec, "Zip64 end record", err)))
            return st;
        if (le32(rec) != ZIP_EOCD64_SIG)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: bad Zip64 end record", z->path);
        *entries = le64(rec + 32);
        *cd_size = le64(rec + 40);
        *cd_off = le64(rec + 48);
    }
    if (*cd_off > z->size || *cd_size > z->size - *cd_off)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated central directory (%llu bytes at offset %llu, the file "
                           "has %llu)",
                           z->path, (unsigned long long)*cd_size, (unsigned long long)*cd_off,
                           (unsigned long long)z->size);
    if (*cd_size > ZIP_MAX_CD)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: central directory of %llu bytes is too big",
                           z->path, (unsigned long long)*cd_size);
    if (*entries > *cd_size / 46)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated central directory (%llu entries cannot fit in %llu "
                           "bytes)",
                           z->path, (unsigned long long)*entries, (unsigned long long)*cd_size);
    return COHORT_OK;
}

/* Apply a Zip64 extra field to the sizes and offset that overflowed. */
static int apply_zip64(zip_entry *ze, const unsigned char *extra, size_t len)
{
    size_t p = 0;
    while (p + 4 <= len) {
        unsigned id = le16(extra + p), sz = le16(extra + p + 2);
        if (p + 4 + sz > len)
            return 0;
        if (id == 0x0001) {
            const unsigned char *q = extra + p + 4;
            size_t left = sz;
            uint64_t *fields[3] = {&ze->usize, &ze->csize, &ze->offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xffffffffu)
                    continue;
                if (left < 8)
                    return 0;
                *fields[i] = le64(q);
                q += 8;
                left -= 8;
            }
            return 1;
        }
        p += 4 + sz;
    }
    return ze->usize != 0xffffffffu && ze->csize != 0xffffffffu && ze->offset != 0xffffffffu;
}

/* A member's name as a key: without its ".npy", as numpy's np.load names it. */
static size_t key_len(const zip_entry *e)
{
    size_t n = e->name_len;
    return n >= 4 && memcmp(e->name + n - 4, ".npy", 4) == 0 ? n - 4 : n;
}

static int by_key(const void *a, const void *b)
{
    const zip_entry *x = *(const zip_entry *const *)a, *y = *(const zip_entry *const *)b;
    size_t xl = key_len(x), yl = key_len(y);
    int c = memcmp(x->name, y->name, xl < yl ? xl : yl);
    return c ? c : (xl > yl) - (xl < yl);
}

static void entry_name(const zip_entry *e, char *buf, size_t n);

/* No two members with one name (x.npy twice, or x and x.npy): cohort would
 * read the first, numpy the last. Sorted, so that a directory of millions of
 * entries costs n log n. */
static cohort_status check_unique(const zip_archive *z, const char *path, cohort_error *err)
{
    if (z->n < 2)
        return COHORT_OK;
    const zip_entry **order = malloc((size_t)z->n * sizeof *order);
    if (!order)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    for (uint64_t i = 0; i < z->n; i++)
        order[i] = &z->entries[i];
    qsort(order, (size_t)z->n, sizeof *order, by_key);
    cohort_status st = COHORT_OK;
    for (uint64_t i = 1; i < z->n && !st; i++)
        if (by_key(&order[i - 1], &order[i]) == 0) {
            char a[256], b[256];
            entry_name(order[i - 1], a, sizeof a);
            entry_name(order[i], b, sizeof b);
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s: two members are named %s%s%s (numpy reads the last, other "
                             "readers the first); write the archive again with one of each",
                             path, a, strcmp(a, b) ? " and " : "", strcmp(a, b) ? b : "");
        }
    free(order);
    return st;
}

static cohort_status zip_open(zip_archive *z, const char *path, cohort_error *err)
{
    memset(z, 0, sizeof *z);
    z->path = path;
    z->f = file_fopen_regular(path, err);
    if (!z->f)
        return COHORT_ERR_IO;
    struct stat sb;
    if (fstat(fileno(z->f), &sb) != 0)
        return cohort_fail(err, COHORT_ERR_IO, "%s: not a regular file", path);
    z->size = (uint64_t)sb.st_size;
    uint64_t cd_off = 0, cd_size = 0, entries = 0;
    cohort_status st = find_directory(z, &cd_off, &cd_size, &entries, err);
    if (st)
        return st;
    z->cd = malloc(cd_size ? (size_t)cd_size : 1);
    z->entries = calloc(entries ? (size_t)entries : 1, sizeof *z->entries);
    if (!z->cd || !z->entries)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    if ((st = read_at(z, cd_off, z->cd, (size_t)cd_size, "central directory", err)))
        return st;
    size_t p = 0;
    for (uint64_t i = 0; i < entries; i++) {
        const unsigned char *c = z->cd + p;
        if (cd_size - p < 46 || le32(c) != ZIP_CEN_SIG)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: truncated central directory (entry %llu of %llu is missing "
                               "or corrupt)",
                               path, (unsigned long long)i + 1, (unsigned long long)entries);
        size_t nl = le16(c + 28), el = le16(c + 30), cl = le16(c + 32);
        if (cd_size - p - 46 < nl + el + cl)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: truncated central directory (entry %llu runs past its end)",
                               path, (unsigned long long)i + 1);
        zip_entry *ze = &z->entries[i];
        ze->flags = le16(c + 8);
        ze->method = le16(c + 10);
        ze->crc = le32(c + 16);
        ze->csize = le32(c + 20);
        ze->usize = le32(c + 24);
        ze->offset = le32(c + 42);
        ze->name = (const char *)c + 46;
        ze->name_len = nl;
        if (!apply_zip64(ze, c + 46 + nl, el))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: entry %llu has a bad Zip64 field", path,
                               (unsigned long long)i + 1);
        p += 46 + nl + el + cl;
        z->n++;
    }
    return check_unique(z, path, err);
}

static void zip_close(zip_archive *z)
{
    if (z->f)
        fclose(z->f);
    free(z->cd);
    free(z->entries);
    memset(z, 0, sizeof *z);
}

/* The entry named `base` or `base.npy`, or NULL. */
static const zip_entry *zip_find(const zip_archive *z, const char *base)
{
    size_t bl = strlen(base);
    for (uint64_t i = 0; i < z->n; i++) {
        const zip_entry *e = &z->entries[i];
        if (e->name_len >= bl && memcmp(e->name, base, bl) == 0 &&
            (e->name_len == bl || (e->name_len == bl + 4 && memcmp(e->name + bl, ".npy", 4) == 0)))
            return e;
    }
    return NULL;
}

static void entry_name(const zip_entry *e, char *buf, size_t n)
{
    size_t len = e->name_len < n - 1 ? e->name_len : n - 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)e->name[i];
        buf[i] = c >= 32 && c < 127 ? (char)c : '?';
    }
    buf[len] = 0;
}

static cohort_status read_member(zip_archive *z, const zip_entry *e, data_npy_role role,
                                 data_npy_array *out, cohort_error *err)
{
    memset(out, 0, sizeof *out);
    char mname[256], label[1200];
    entry_name(e, mname, sizeof mname);
    snprintf(label, sizeof label, "%s: member %s", z->path, mname);
    if (e->flags & 1)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: encrypted members are not supported",
                           label);
    if (e->method != 0 && e->method != 8)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: compression method %u is not supported (only stored and "
                           "deflated)",
                           label, e->method);
    unsigned char loc[30];
    cohort_status st = read_at(z, e->offset, loc, sizeof loc, "local header", err);
    if (st)
        return st;
    if (le32(loc) != ZIP_LOC_SIG)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: bad local header at offset %llu", label,
                           (unsigned long long)e->offset);
    uint64_t data_off = e->offset + 30 + le16(loc + 26) + le16(loc + 28);
    if (data_off > z->size || e->csize > z->size - data_off)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated: %llu bytes of data at offset %llu, the file has %llu",
                           label, (unsigned long long)e->csize, (unsigned long long)data_off,
                           (unsigned long long)z->size);
    if (e->method == 0 && e->csize != e->usize)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: stored member has %llu bytes but claims %llu", label,
                           (unsigned long long)e->csize, (unsigned long long)e->usize);
    if (e->method == 8 && e->usize / ZIP_MAX_RATIO > e->csize + 1)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: claims %llu bytes from %llu compressed bytes, more than deflate "
                           "can produce",
                           label, (unsigned long long)e->usize, (unsigned long long)e->csize);
    if (fseeko(z->f, (off_t)data_off, SEEK_SET) != 0)
        return cohort_fail(err, COHORT_ERR_IO, "%s: seek failed: %s", label, strerror(errno));
    data_src src;
    if ((st = data_src_open(&src, z->f, label, e->usize, e->method == 8, e->csize, err)))
        return st;
    src.check_crc = 1;
    src.want_crc = e->crc;
    st = data_npy_read(&src, role, out, err);
    data_src_close(&src);
    return st;
}

/* The members' names ("x_train, y_train, x_test, y_test"), at most n - 1 bytes. */
static void member_names(const zip_archive *z, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (uint64_t i = 0; i < z->n && at + 4 < n; i++) {
        char name[256];
        entry_name(&z->entries[i], name, sizeof name);
        size_t len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, ".npy") == 0)
            name[len - 4] = 0;
        int w = snprintf(buf + at, n - at, "%s%s", i ? ", " : "", name);
        if (w < 0 || (size_t)w >= n - at) {
            snprintf(buf + (at < n - 4 ? at : n - 4), 4, "...");
            return;
        }
        at += (size_t)w;
    }
}

/* The members named xname and yname (yname NULL: none), or an error that
 * lists the names the file has. */
static cohort_status find_named(const zip_archive *z, const char *xname, const char *yname,
                                const zip_entry **x, const zip_entry **y, cohort_error *err)
{
    const char *names[2] = {xname, yname};
    const zip_entry **found[2] = {x, y};
    *y = NULL;
    for (int i = 0; i < 2 && names[i]; i++)
        if (!(*found[i] = zip_find(z, names[i]))) {
            char have[512];
            member_names(z, have, sizeof have);
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: has no array '%s' (it has %s)",
                               z->path, names[i], have);
        }
    return COHORT_OK;
}

/* The file's spelling of an input array's name: X_train (scikit-learn's
 * capital X) where it has that and not x_train. */
static const char *x_named(const zip_archive *z, const char *lower, const char *upper)
{
    return !zip_find(z, lower) && zip_find(z, upper) ? upper : lower;
}

static cohort_status pick_members(const zip_archive *z, const zip_entry **x, const zip_entry **y,
                                  cohort_error *err)
{
    /* x, y, and scikit-learn's spelling of x */
    static const char *pairs[][3] = {{"x", "y", "X"}, {"x_train", "y_train", "X_train"}};
    /* A Keras-style file holds both sets: reading x_train as a test set
     * (or x_test as training data) would give wrong numbers silently. */
    if ((zip_find(z, "x_train") || zip_find(z, "y_train")) &&
        (zip_find(z, "x_test") || zip_find(z, "y_test"))) {
        char have[512];
        member_names(z, have, sizeof have);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: holds both training and test arrays (%s); name the two to read, "
                           "like npz:%s:%s,y_train or npz:%s:%s,y_test",
                           z->path, have, z->path, x_named(z, "x_train", "X_train"), z->path,
                           x_named(z, "x_test", "X_test"));
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        *x = zip_find(z, pairs[i][0]);
        *y = zip_find(z, pairs[i][1]);
        if (*x && *y)
            return COHORT_OK;
        if (*x || *y) {
            char have[512];
            member_names(z, have, sizeof have);
            /* The example names what the file has, a placeholder the rest. */
            const char *xs = *x ? pairs[i][0] : zip_find(z, pairs[i][2]) ? pairs[i][2] : "INPUTS";
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: has %s.npy but no %s.npy (it has %s); name the inputs and the "
                               "labels to read, like npz:%s:%s,%s",
                               z->path, *x ? pairs[i][0] : pairs[i][1],
                               *x ? pairs[i][1] : pairs[i][0], have, z->path, xs,
                               *x ? "LABELS" : pairs[i][1]);
        }
    }
    if (z->n >= 2) {
        *x = &z->entries[0];
        *y = &z->entries[1];
        return COHORT_OK;
    }
    return cohort_fail(err, COHORT_ERR_INPUT,
                       "%s: holds %llu array%s; expected x and y (or x_train and y_train)",
                       z->path, (unsigned long long)z->n, z->n == 1 ? "" : "s");
}

/*
 * Read x and y from an .npz: members "x.npy" and "y.npy", else "x_train.npy"
 * and "y_train.npy", else the first two members of the central directory (x
 * first); a file with both x_train/y_train and x_test/y_test is refused (name
 * them: data_read_npz_named). Members may be stored or deflated; their CRC-32
 * is checked. On error *out is NULL: COHORT_ERR_IO when the file cannot be
 * opened, COHORT_ERR_INPUT when it is not a well-formed archive of suitable
 * arrays.
 */
cohort_status data_read_npz(const char *path, cohort_dataset **out, cohort_error *err)
{
    return data_read_npz_named(path, NULL, NULL, out, err);
}

cohort_status data_read_npz_named(const char *path, const char *xname, const char *yname,
                                  cohort_dataset **out, cohort_error *err)
{
    return data_read_npz_as(path, xname, yname, 0, out, err);
}

cohort_status data_read_npz_as(const char *path, const char *xname, const char *yname,
                               int tokens, cohort_dataset **out, cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_npz: out is NULL");
    *out = NULL;
    if (!path)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_npz: missing path");
    zip_archive z;
    const zip_entry *ex, *ey;
    data_npy_array x = {0}, y = {0};
    cohort_status st = zip_open(&z, path, err);
    if (!st)
        st = xname ? find_named(&z, xname, yname, &ex, &ey, err) : pick_members(&z, &ex, &ey, err);
    if (!st)
        st = read_member(&z, ex, tokens ? DATA_NPY_TOKENS : DATA_NPY_X, &x, err);
    if (!st && ey)
        st = read_member(&z, ey, DATA_NPY_Y, &y, err);
    zip_close(&z);
    if (st) {
        free(x.x);
        free(y.y);
        return st;
    }
    char source[1100];
    snprintf(source, sizeof source, "npz:%s", path);
    if (!ey)
        return data_npy_alone(&x, source, out, err);
    return data_npy_pair(&x, &y, source, out, err);
}
