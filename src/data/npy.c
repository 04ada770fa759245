/*
 * npy: NumPy's .npy format (versions 1.0, 2.0, 3.0): the header dict, the
 * conversion of numeric arrays (either byte order, C or Fortran order) into
 * x floats and y labels, and the byte source that also feeds .npz members
 * (see npz.c).
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the NPY reader assumes a little-endian host"
#endif

#define SRC_CHUNK ((size_t)1 << 16)
#define NPY_MAX_HEADER ((uint32_t)1 << 20)
#define NPY_MAX_DIMS 32

/* ---- byte sources ---------------------------------------------------- */

cohort_status data_src_open(data_src *src, FILE *f, const char *name, uint64_t left,
                            int deflated, uint64_t in_left, cohort_error *err)
{
    memset(src, 0, sizeof *src);
    src->f = f;
    str_copy(src->name, sizeof src->name, name);
    src->left = left;
    src->deflated = deflated;
    src->in_left = in_left;
    src->crc = (uint32_t)crc32(0L, Z_NULL, 0);
    if (!deflated)
        return COHORT_OK;
    src->in = malloc(SRC_CHUNK);
    if (!src->in)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", name);
    if (inflateInit2(&src->zs, -MAX_WBITS) != Z_OK) {
        free(src->in);
        src->in = NULL;
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: cannot start inflate", name);
    }
    src->z_live = 1;
    return COHORT_OK;
}

void data_src_close(data_src *src)
{
    if (src->z_live)
        inflateEnd(&src->zs);
    src->z_live = 0;
    free(src->in);
    src->in = NULL;
}

static cohort_status src_read_stored(data_src *src, unsigned char *buf, size_t n, size_t *got,
                                     cohort_error *err)
{
    size_t r = fread(buf, 1, n, src->f);
    if (r < n && ferror(src->f))
        return cohort_fail(err, COHORT_ERR_IO, "%s: read failed: %s", src->name,
                           strerror(errno));
    *got = r;
    return COHORT_OK;
}

static cohort_status src_read_deflated(data_src *src, unsigned char *buf, size_t n, size_t *got,
                                       cohort_error *err)
{
    *got = 0;
    while (*got < n && !src->z_end) {
        if (src->zs.avail_in == 0 && src->in_left > 0) {
            size_t want = src->in_left < SRC_CHUNK ? (size_t)src->in_left : SRC_CHUNK;
            size_t r = fread(src->in, 1, want, src->f);
            if (r < want && ferror(src->f))
                return cohort_fail(err, COHORT_ERR_IO, "%s: read failed: %s", src->name,
                                   strerror(errno));
            if (r == 0) {
                src->in_left = 0;
                break;
            }
            src->in_left -= r;
            src->zs.next_in = src->in;
            src->zs.avail_in = (uInt)r;
        }
        size_t room = n - *got;
        if (room > UINT_MAX)
            room = UINT_MAX;
        src->zs.next_out = buf + *got;
        src->zs.avail_out = (uInt)room;
        int ret = inflate(&src->zs, Z_NO_FLUSH);
        size_t made = room - src->zs.avail_out;
        *got += made;
        if (ret == Z_STREAM_END)
            src->z_end = 1;
        else if (ret == Z_MEM_ERROR)
            return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory inflating", src->name);
        else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: corrupt deflate data: %s", src->name,
                               src->zs.msg ? src->zs.msg : "invalid stream");
        else if (made == 0 && src->zs.avail_in == 0 && src->in_left == 0)
            break; /* input exhausted before the stream ended */
    }
    return COHORT_OK;
}

cohort_status data_src_read(data_src *src, void *buf, size_t n, size_t *got, cohort_error *err)
{
    *got = 0;
    if (n > src->left)
        n = (size_t)src->left;
    if (n == 0)
        return COHORT_OK;
    cohort_status st = src->deflated ? src_read_deflated(src, buf, n, got, err)
                                     : src_read_stored(src, buf, n, got, err);
    if (st)
        return st;
    src->left -= *got;
    if (src->check_crc) {
        const unsigned char *p = buf;
        size_t done = 0;
        while (done < *got) {
            size_t step = *got - done > UINT_MAX ? UINT_MAX : *got - done;
            src->crc = (uint32_t)crc32(src->crc, p + done, (uInt)step);
            done += step;
        }
    }
    return COHORT_OK;
}

cohort_status data_src_read_exact(data_src *src, void *buf, size_t n, const char *what,
                                  cohort_error *err)
{
    size_t got;
    cohort_status st = data_src_read(src, buf, n, &got, err);
    if (st)
        return st;
    if (got < n)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: truncated: expected %zu bytes of %s, got %zu", src->name, n, what,
                           got);
    return COHORT_OK;
}

cohort_status data_src_finish(data_src *src, cohort_error *err)
{
    if (!src->check_crc)
        return COHORT_OK;
    unsigned char tmp[4096];
    for (;;) {
        size_t got;
        cohort_status st = data_src_read(src, tmp, sizeof tmp, &got, err);
        if (st)
            return st;
        if (got == 0)
            break;
    }
    if (src->left > 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: truncated: %llu bytes missing", src->name,
                           (unsigned long long)src->left);
    if (src->crc != src->want_crc)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: CRC-32 mismatch (0x%08x, expected 0x%08x): the file is corrupt",
                           src->name, src->crc, src->want_crc);
    return COHORT_OK;
}

/* ---- the header ------------------------------------------------------ */

typedef enum npy_kind { NPY_F16, NPY_F32, NPY_F64, NPY_INT, NPY_UINT, NPY_BOOL } npy_kind;

typedef struct npy_header {
    char descr[64];
    int fortran;
    int swap; /* items of more than a byte in the other order than the host's */
    int ndim;
    uint64_t shape[NPY_MAX_DIMS];
    int have_descr, have_fortran, have_shape;
    npy_kind kind;
    size_t itemsize;
} npy_header;

typedef struct npy_parser {
    const char *p, *end;
} npy_parser;

static void skip_ws(npy_parser *ps)
{
    while (ps->p < ps->end && isspace((unsigned char)*ps->p))
        ps->p++;
}

static int accept(npy_parser *ps, char c)
{
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return 1;
    }
    return 0;
}

/* A Python string literal, '...' or "...", without escapes. */
static int parse_string(npy_parser *ps, char *out, size_t n)
{
    skip_ws(ps);
    if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
        return 0;
    char q = *ps->p++;
    size_t len = 0;
    while (ps->p < ps->end && *ps->p != q) {
        if (*ps->p == '\\' || len + 1 >= n)
            return 0;
        out[len++] = *ps->p++;
    }
    if (ps->p >= ps->end)
        return 0;
    ps->p++;
    out[len] = 0;
    return 1;
}

static int parse_word(npy_parser *ps, const char *w)
{
    skip_ws(ps);
    size_t len = strlen(w);
    if ((size_t)(ps->end - ps->p) >= len && memcmp(ps->p, w, len) == 0) {
        ps->p += len;
        return 1;
    }
    return 0;
}

/* (a, b, ...) with an optional trailing comma; () is a scalar. */
static int parse_shape(npy_parser *ps, npy_header *h)
{
    if (!accept(ps, '('))
        return 0;
    h->ndim = 0;
    for (;;) {
        if (accept(ps, ')'))
            return 1;
        skip_ws(ps);
        if (ps->p >= ps->end || !isdigit((unsigned char)*ps->p) || h->ndim == NPY_MAX_DIMS)
            return 0;
        uint64_t v = 0;
        while (ps->p < ps->end && isdigit((unsigned char)*ps->p)) {
            if (v > (uint64_t)INT64_MAX / 10)
                return 0;
            v = v * 10 + (uint64_t)(*ps->p++ - '0');
        }
        if (ps->p < ps->end && *ps->p == 'L')
            ps->p++;
        h->shape[h->ndim++] = v;
        if (accept(ps, ')'))
            return 1;
        if (!accept(ps, ','))
            return 0;
    }
}

static cohort_status parse_dict(const char *name, const char *text, size_t len, npy_header *h,
                                cohort_error *err)
{
    npy_parser ps = {text, text + len};
    if (!accept(&ps, '{'))
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: NPY header is not a dict", name);
    while (!accept(&ps, '}')) {
        char key[64];
        if (!parse_string(&ps, key, sizeof key) || !accept(&ps, ':'))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: malformed NPY header", name);
        if (strcmp(key, "descr") == 0) {
            skip_ws(&ps);
            if (ps.p < ps.end && *ps.p == '[')
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "%s: structured dtypes are not supported; save a plain "
                                   "numeric array",
                                   name);
            if (!parse_string(&ps, h->descr, sizeof h->descr))
                return cohort_fail(err, COHORT_ERR_INPUT, "%s: malformed 'descr' in NPY header",
                                   name);
            h->have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&ps, "True"))
                h->fortran = 1;
            else if (parse_word(&ps, "False"))
                h->fortran = 0;
            else
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "%s: malformed 'fortran_order' in NPY header", name);
            h->have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!parse_shape(&ps, h))
                return cohort_fail(err, COHORT_ERR_INPUT, "%s: malformed 'shape' in NPY header",
                                   name);
            h->have_shape = 1;
        } else {
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: unexpected key '%s' in NPY header",
                               name, key);
        }
        if (!accept(&ps, ',')) {
            if (!accept(&ps, '}'))
                return cohort_fail(err, COHORT_ERR_INPUT, "%s: malformed NPY header", name);
            break;
        }
    }
    if (!h->have_descr || !h->have_fortran || !h->have_shape)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: NPY header lacks %s", name,
                           !h->have_descr ? "'descr'" : !h->have_fortran ? "'fortran_order'"
                                                                          : "'shape'");
    return COHORT_OK;
}

/* Map descr to a kind and item size; 0 when unsupported. */
static int parse_descr(npy_header *h)
{
    const char *d = h->descr;
    /* The byte order: '<', '>', '|' (none), or '=' or nothing for the
     * host's, as numpy reads 'f4' and '=f4' (other writers than numpy's own
     * leave it out). */
    char order = *d == '<' || *d == '>' || *d == '|' || *d == '=' ? *d++ : '=';
    if (strlen(d) < 2)
        return 0;
    char kind = d[0];
    char *end;
    long size = strtol(d + 1, &end, 10);
    if (*end || size <= 0 || d[1] < '0' || d[1] > '9')
        return 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    int host_big = 1;
#else
    int host_big = 0;
#endif
    h->itemsize = (size_t)size;
    h->swap = size > 1 && (order == '>' ? !host_big : order == '<' ? host_big : 0);
    switch (kind) {
    case 'f':
        h->kind = size == 2 ? NPY_F16 : size == 4 ? NPY_F32 : NPY_F64;
        return size == 2 || size == 4 || size == 8;
    case 'i':
        h->kind = NPY_INT;
        return size == 1 || size == 2 || size == 4 || size == 8;
    case 'u':
        h->kind = NPY_UINT;
        return size == 1 || size == 2 || size == 4 || size == 8;
    case 'b':
        h->kind = NPY_BOOL;
        return size == 1;
    default:
        return 0;
    }
}

static void format_shape(const npy_header *h, char *buf, size_t n)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < h->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%llu", i ? ", " : "",
                                (unsigned long long)h->shape[i]);
    if (len < n)
        snprintf(buf + len, n - len, "%s)", h->ndim == 1 ? "," : "");
}

static cohort_status read_header(data_src *src, npy_header *h, cohort_error *err)
{
    memset(h, 0, sizeof *h);
    unsigned char pre[12];
    size_t got;
    cohort_status st = data_src_read(src, pre, 10, &got, err);
    if (st)
        return st;
    if (got >= 4 && memcmp(pre, "PK\3\4", 4) == 0)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: not an NPY file: it is a zip archive (an .npz?); use npz:FILE",
                           src->name);
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: not an NPY file (it does not start with \\x93NUMPY)", src->name);
    int major = pre[6];
    uint32_t hlen;
    if (major == 1) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        if ((st = data_src_read_exact(src, pre + 10, 2, "NPY header", err)))
            return st;
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
               (uint32_t)pre[11] << 24;
    } else {
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: NPY version %d.%d is not supported",
                           src->name, major, pre[7]);
    }
    if (hlen > NPY_MAX_HEADER)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: NPY header of %u bytes is too long",
                           src->name, hlen);
    char *text = malloc(hlen + 1);
    if (!text)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", src->name);
    st = data_src_read_exact(src, text, hlen, "NPY header", err);
    if (!st) {
        text[hlen] = 0;
        st = parse_dict(src->name, text, hlen, h, err);
    }
    free(text);
    return st;
}

/* numpy's name of the dtype ("uint8", "float32", "bool"), for messages. */
static void dtype_name(const npy_header *h, char *buf, size_t n)
{
    static const char *const kinds[] = {"float", "float", "float", "int", "uint", "bool"};
    if (h->kind == NPY_BOOL)
        snprintf(buf, n, "bool");
    else
        snprintf(buf, n, "%s%zu", kinds[h->kind], 8 * h->itemsize);
}

/* ---- conversion ------------------------------------------------------ */

/* IEEE half precision to float: exact, subnormals, inf and NaN too. */
static float half_to_float(uint16_t v)
{
    uint32_t sign = (uint32_t)(v >> 15) << 31, e = (v >> 10) & 0x1f, m = v & 0x3ff;
    float f;
    if (e == 0x1f) {
        uint32_t bits = sign | 0x7f800000u | m << 13;
        memcpy(&f, &bits, 4);
        return f;
    }
    f = e ? ldexpf((float)(m | 0x400), (int)e - 25) : ldexpf((float)m, -24);
    return sign ? -f : f;
}

/* Reverse the bytes of each of the k items of a chunk (big-endian data). */
static void swap_items(unsigned char *buf, size_t k, size_t size)
{
    for (size_t i = 0; i < k; i++) {
        unsigned char *p = buf + i * size;
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
    }
}

/* An element (in host byte order) as a double (integers up to 2^53 exactly). */
static double elem_double(const npy_header *h, const unsigned char *p)
{
    switch (h->kind) {
    case NPY_F16: { uint16_t v; memcpy(&v, p, 2); return half_to_float(v); }
    case NPY_F32: { float v; memcpy(&v, p, 4); return v; }
    case NPY_F64: { double v; memcpy(&v, p, 8); return v; }
    case NPY_BOOL: return p[0] != 0;
    case NPY_INT:
        switch (h->itemsize) {
        case 1: return (int8_t)p[0];
        case 2: { int16_t v; memcpy(&v, p, 2); return v; }
        case 4: { int32_t v; memcpy(&v, p, 4); return v; }
        default: { int64_t v; memcpy(&v, p, 8); return (double)v; }
        }
    case NPY_UINT:
        switch (h->itemsize) {
        case 1: return p[0];
        case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
        case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
        default: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
        }
    }
    return 0;
}

/* Element as a label, or -1 when it is not an integer in range. */
static int64_t elem_label(const npy_header *h, const unsigned char *p)
{
    if (h->kind == NPY_INT && h->itemsize == 8) {
        int64_t v;
        memcpy(&v, p, 8);
        return v >= 0 && v <= DATA_MAX_LABEL ? v : -1;
    }
    if (h->kind == NPY_UINT && h->itemsize == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v <= DATA_MAX_LABEL ? (int64_t)v : -1;
    }
    double v = elem_double(h, p);
    if (!(v >= 0 && v <= DATA_MAX_LABEL) || v != (double)(int64_t)v)
        return -1;
    return (int64_t)v;
}

/* An element as the float nearest it: 64-bit integers in one rounding, as
 * numpy's astype(float32) (through double, 2^62 + 2^38 + 1 would round twice). */
static float elem_float(const npy_header *h, const unsigned char *p)
{
    if (h->kind == NPY_INT && h->itemsize == 8) {
        int64_t v;
        memcpy(&v, p, 8);
        return (float)v;
    }
    if (h->kind == NPY_UINT && h->itemsize == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return (float)v;
    }
    return (float)elem_double(h, p);
}

/* The first value of an array that is not a finite float32 (NaN, inf, or a
 * float64 beyond float32's range), for the message: none when at is count. */
typedef struct npy_bad {
    uint64_t at;
    double value;
} npy_bad;

/*
 * count values as floats into x; uint8 inputs are scaled to [0, 1] where
 * scale_u8 is set (targets are taken as they are). *bad gets the first value
 * that is not finite as a float (only float types can hold one): cohort would
 * train on NaN, and the loss would become NaN with no word about the data.
 */
static cohort_status read_x(data_src *src, const npy_header *h, uint64_t count, float *x,
                            int scale_u8, npy_bad *bad, cohort_error *err)
{
    bad->at = count;
    int floats = h->kind == NPY_F16 || h->kind == NPY_F32 || h->kind == NPY_F64;
    if (h->kind == NPY_F32 && !h->swap) {
        cohort_status st = data_src_read_exact(src, x, (size_t)count * 4, "array data", err);
        for (uint64_t i = 0; !st && i < count; i++)
            if (!isfinite(x[i])) {
                *bad = (npy_bad){i, x[i]};
                break;
            }
        return st;
    }
    unsigned char *buf = malloc(SRC_CHUNK * 16);
    if (!buf)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", src->name);
    size_t per = SRC_CHUNK * 16 / h->itemsize;
    int u8 = scale_u8 && h->kind == NPY_UINT && h->itemsize == 1;
    cohort_status st = COHORT_OK;
    for (uint64_t i = 0; i < count && !st;) {
        size_t k = count - i < per ? (size_t)(count - i) : per;
        st = data_src_read_exact(src, buf, k * h->itemsize, "array data", err);
        if (st)
            break;
        if (h->swap)
            swap_items(buf, k, h->itemsize);
        if (u8) {
            for (size_t j = 0; j < k; j++)
                x[i + j] = (float)buf[j] / 255.0f;
        } else if (h->kind == NPY_F64) {
            for (size_t j = 0; j < k; j++) {
                double v;
                memcpy(&v, buf + 8 * j, 8);
                x[i + j] = (float)v;
                if (!isfinite(x[i + j]) && bad->at == count)
                    *bad = (npy_bad){i + j, v};
            }
        } else {
            for (size_t j = 0; j < k; j++)
                x[i + j] = elem_float(h, buf + j * h->itemsize);
            for (size_t j = 0; floats && bad->at == count && j < k; j++)
                if (!isfinite(x[i + j]))
                    *bad = (npy_bad){i + j, x[i + j]};
        }
        i += k;
    }
    free(buf);
    return st;
}

/*
 * x, read in Fortran order (the first index fastest), into C order (the last
 * fastest), in place through a copy. Fails only when the copy cannot be
 * allocated.
 */
static cohort_status fortran_to_c(float *x, const npy_header *h, uint64_t count,
                                  const char *name, cohort_error *err)
{
    int big = 0; /* with at most one dimension above 1 the orders agree */
    for (int i = 0; i < h->ndim; i++)
        big += h->shape[i] > 1;
    if (big < 2)
        return COHORT_OK;
    float *from = malloc((size_t)count * sizeof *from);
    if (!from)
        return cohort_fail(err, COHORT_ERR_NOMEM,
                           "%s: out of memory reordering a fortran_order array", name);
    memcpy(from, x, (size_t)count * sizeof *from);
    uint64_t stride[NPY_MAX_DIMS], idx[NPY_MAX_DIMS] = {0}, to = 0;
    stride[h->ndim - 1] = 1;
    for (int k = h->ndim - 1; k > 0; k--)
        stride[k - 1] = stride[k] * h->shape[k];
    /* Walk the file's order with an odometer of indices, the first
     * fastest, keeping `to`, the C-order offset of the index. */
    for (uint64_t s = 0; s < count; s++) {
        x[to] = from[s];
        for (int k = 0; k < h->ndim; k++) {
            to += stride[k];
            if (++idx[k] < h->shape[k])
                break;
            to -= stride[k] * h->shape[k];
            idx[k] = 0;
        }
    }
    free(from);
    return COHORT_OK;
}

/* The error for a value that is not a finite float32; bad.at counts in C order. */
static cohort_status bad_value(const char *name, const char *who, const npy_header *h,
                               npy_bad bad, cohort_error *err)
{
    return data_not_finite(name, who, h->shape, h->ndim, bad.at, bad.value, err);
}

/* Class labels from one target per row where every one is an integer in
 * [0, DATA_MAX_LABEL] (labels saved as floats); else NULL. */
static int32_t *labels_of_targets(const float *t, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!(t[i] >= 0.0f && t[i] <= (float)DATA_MAX_LABEL) || t[i] != floorf(t[i]))
            return NULL;
    int32_t *y = mem_alloc_big(n * sizeof *y);
    for (uint64_t i = 0; y && i < n; i++)
        y[i] = (int32_t)t[i];
    return y;
}

static cohort_status read_y(data_src *src, const npy_header *h, uint64_t count, int32_t *y,
                            cohort_error *err)
{
    unsigned char *buf = malloc(SRC_CHUNK);
    if (!buf)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", src->name);
    size_t per = SRC_CHUNK / h->itemsize;
    cohort_status st = COHORT_OK;
    for (uint64_t i = 0; i < count && !st;) {
        size_t k = count - i < per ? (size_t)(count - i) : per;
        st = data_src_read_exact(src, buf, k * h->itemsize, "array data", err);
        if (!st && h->swap)
            swap_items(buf, k, h->itemsize);
        for (size_t j = 0; j < k && !st; j++) {
            int64_t v = elem_label(h, buf + j * h->itemsize);
            if (v < 0) {
                double d = elem_double(h, buf + j * h->itemsize);
                st = cohort_fail(err, COHORT_ERR_INPUT,
                                 "%s: label %llu is %.17g; labels must be integers in [0, %d]",
                                 src->name, (unsigned long long)(i + j), d, DATA_MAX_LABEL);
            }
            else
                y[i + j] = (int32_t)v;
        }
        i += k;
    }
    free(buf);
    return st;
}

cohort_status data_npy_read(data_src *src, data_npy_role role, data_npy_array *out,
                            cohort_error *err)
{
    memset(out, 0, sizeof *out);
    npy_header h;
    cohort_status st = read_header(src, &h, err);
    if (st)
        return st;
    int is_x = role != DATA_NPY_Y;
    const char *who = is_x ? "x" : "y";
    if (!parse_descr(&h))
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: dtype '%s' is not supported for %s (%s)", src->name, h.descr,
                           who,
                           is_x ? "float16, float32, float64, an integer type or bool"
                                              : "integer class labels, or float or bool targets");
    char shape[256];
    format_shape(&h, shape, sizeof shape);
    if (h.ndim == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: %s is a scalar; expected shape %s",
                           src->name, who, is_x ? "(n, ...)" : "(n,)");
    uint64_t n = h.shape[0], dim = 1;
    for (int i = 1; i < h.ndim; i++)
        if (__builtin_mul_overflow(dim, h.shape[i], &dim))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: shape %s overflows", src->name,
                               shape);
    if (n == 0 || dim == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: %s is empty (shape %s)", src->name, who,
                           shape);
    /* y: integer class labels [n] or [n, 1]; anything else (floats, rows
     * of several values, booleans) is real-valued targets [n, dim]. */
    int targets = role == DATA_NPY_Y && (dim != 1 || h.kind == NPY_F16 || h.kind == NPY_F32 ||
                                         h.kind == NPY_F64 ||
                                         h.kind == NPY_BOOL);
    st = is_x || targets ? data_check_x(n, dim, src->name, err)
                                       : data_check_x(n, 1, src->name, err);
    if (st)
        return st;
    uint64_t count = n * dim, bytes;
    if (__builtin_mul_overflow(count, (uint64_t)h.itemsize, &bytes))
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: shape %s overflows", src->name, shape);
    if (src->left < bytes)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: header claims shape %s of '%s' (%llu bytes), but only %llu bytes "
                           "follow the header",
                           src->name, shape, h.descr, (unsigned long long)bytes,
                           (unsigned long long)src->left);
    npy_bad bad = {count, 0};
    if (is_x || targets) {
        float **to = is_x ? &out->x : &out->t;
        if ((st = data_alloc_x(n, dim, src->name, to, err)))
            return st;
        st = read_x(src, &h, count, *to, role == DATA_NPY_X, &bad, err);
        if (!st && h.fortran)
            st = fortran_to_c(*to, &h, count, src->name, err);
        if (!st && bad.at < count) {
            if (h.fortran) { /* the first in C order, as numpy prints the array */
                for (bad.at = 0; isfinite((*to)[bad.at]); bad.at++)
                    ;
                bad.value = (*to)[bad.at]; /* that element's, not the file's first */
            }
            st = bad_value(src->name, who, &h, bad, err);
        }
        if (!st && targets && dim == 1)
            out->y = labels_of_targets(out->t, n);
    } else {
        if ((st = data_alloc_y(n, src->name, &out->y, err)))
            return st;
        st = read_y(src, &h, count, out->y, err);
    }
    if (!st)
        st = data_src_finish(src, err);
    if (st) {
        free(out->x);
        free(out->y);
        free(out->t);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->n = (int64_t)n;
    out->dim = (int64_t)dim;
    out->shape = data_shape_of(h.shape + 1, h.ndim - 1);
    dtype_name(&h, out->dtype, sizeof out->dtype);
    out->ints = role == DATA_NPY_TOKENS && (h.kind == NPY_INT || h.kind == NPY_UINT);
    return COHORT_OK;
}

cohort_status data_npy_pair(data_npy_array *x, data_npy_array *y, const char *source,
                            cohort_dataset **out, cohort_error *err)
{
    *out = NULL;
    if (x->n != y->n) {
        free(x->x);
        free(y->y);
        free(y->t);
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: x has %lld rows, y has %lld", source,
                           (long long)x->n, (long long)y->n);
    }
    int classes = y->y != NULL;
    int32_t *labels = y->y;
    cohort_status st = COHORT_OK;
    if (!labels && (labels = mem_alloc_big((size_t)x->n * sizeof *labels)) != NULL)
        memset(labels, 0, (size_t)x->n * sizeof *labels);
    if (!labels) {
        free(x->x);
        free(y->t);
        st = cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", source);
    } else {
        st = data_make(x->x, labels, x->n, x->dim, &x->shape, source, out, err);
    }
    if (!st) {
        str_copy((*out)->x_dtype, sizeof (*out)->x_dtype, x->dtype);
        (*out)->x_ints = x->ints;
    }
    if (!st && y->t) {
        (*out)->t = y->t;
        (*out)->t_dim = y->dim;
        if (!classes)
            (*out)->n_classes = 0; /* real values, not classes */
    } else if (st) {
        free(y->t);
    }
    x->x = NULL;
    y->y = NULL;
    y->t = NULL;
    return st;
}

cohort_status data_npy_alone(data_npy_array *x, const char *source, cohort_dataset **out,
                             cohort_error *err)
{
    cohort_status st = data_make_unlabeled(x->x, x->n, x->dim, &x->shape, source, out, err);
    x->x = NULL;
    if (!st) {
        str_copy((*out)->x_dtype, sizeof (*out)->x_dtype, x->dtype);
        (*out)->x_ints = x->ints;
    }
    return st;
}

/* One .npy file as a byte source; COHORT_ERR_IO when it cannot be opened. */
static cohort_status read_npy_file(const char *path, data_npy_role role, data_npy_array *out,
                                   cohort_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = file_fopen_regular(path, err);
    if (!f)
        return COHORT_ERR_IO;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return cohort_fail(err, COHORT_ERR_IO, "%s: not a regular file", path);
    }
    data_src src;
    cohort_status st = data_src_open(&src, f, path, (uint64_t)sb.st_size, 0, 0, err);
    if (!st)
        st = data_npy_read(&src, role, out, err);
    data_src_close(&src);
    fclose(f);
    return st;
}

/*
 * Read x from x_path and y from y_path (.npy files). On error *out is NULL
 * and err names the file: COHORT_ERR_IO when one cannot be opened,
 * COHORT_ERR_INPUT when its content is wrong.
 */
cohort_status data_read_npy(const char *x_path, const char *y_path, cohort_dataset **out,
                            cohort_error *err)
{
    return data_read_npy_as(x_path, y_path, 0, out, err);
}

cohort_status data_read_npy_as(const char *x_path, const char *y_path, int tokens,
                               cohort_dataset **out, cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_npy: out is NULL");
    *out = NULL;
    if (!x_path)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_npy: missing path");
    data_npy_array x, y;
    cohort_status st = read_npy_file(x_path, tokens ? DATA_NPY_TOKENS : DATA_NPY_X, &x, err);
    if (st)
        return st;
    if (!y_path) {
        char src1[1100];
        snprintf(src1, sizeof src1, "npy:%s", x_path);
        return data_npy_alone(&x, src1, out, err);
    }
    if ((st = read_npy_file(y_path, DATA_NPY_Y, &y, err))) {
        free(x.x);
        return st;
    }
    char source[2100];
    snprintf(source, sizeof source, "npy:%s,%s", x_path, y_path);
    return data_npy_pair(&x, &y, source, out, err);
}
