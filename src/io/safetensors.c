/*
 * safetensors: reading and writing the weights format of
 * https://github.com/huggingface/safetensors (F32 only): an 8-byte little
 * endian header size N, N bytes of JSON header, then the tensor bytes.
 */
#include "io/io.h"
#include "util/json.h"
#include "util/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER ((uint64_t)100 << 20)
#define ST_MAX_FILE ((uint64_t)8 << 30)
#define ST_NAME_MAX ((int)sizeof(((st_tensor *)0)->name))
/* Integers above 2^53 are not exact in a double: no real file has them. */
#define ST_MAX_INT 9007199254740992.0

static int host_is_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap4(char *p, size_t count)
{
    for (size_t i = 0; i < count; i++, p += 4) {
        char a = p[0], b = p[1];
        p[0] = p[3];
        p[1] = p[2];
        p[2] = b;
        p[3] = a;
    }
}

/* Elements of shape, or -1 when the product does not fit in int64. */
static int64_t shape_count(const int64_t *shape, int ndim)
{
    int64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return -1;
        if (shape[d] && count > INT64_MAX / shape[d])
            return -1;
        count *= shape[d];
    }
    return count;
}

/* ---- writing ---------------------------------------------------------- */

static cohort_status check_tensor(const char *path, const st_tensor *t, const st_tensor *all,
                                  int i, size_t *bytes, cohort_error *err)
{
    if (!memchr(t->name, 0, sizeof t->name))
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensor %d: name is not NUL-terminated", path, i);
    if (strcmp(t->name, "__metadata__") == 0)
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: a tensor cannot be named __metadata__", path);
    if (!json_utf8_valid(t->name, strlen(t->name)))
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensor %d: name is not valid UTF-8", path, i);
    for (int j = 0; j < i; j++)
        if (strcmp(all[j].name, t->name) == 0)
            return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensor name '%s' is used twice", path,
                               t->name);
    if (t->ndim < 0 || t->ndim > 4)
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensor '%s' has %d dimensions; 0 to 4 allowed",
                           path, t->name, t->ndim);
    int64_t count = shape_count(t->shape, t->ndim);
    if (count < 0 || (uint64_t)count > SIZE_MAX / 4)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s: tensor '%s' has a negative dimension or too many elements", path,
                           t->name);
    if (count > 0 && !t->data)
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensor '%s' has no data", path, t->name);
    *bytes = (size_t)count * 4;
    return COHORT_OK;
}

cohort_status st_write(const char *path, const st_tensor *t, int n, const char *const *meta_kv,
                       int n_meta, cohort_error *err)
{
    return st_write_ex(path, t, n, meta_kv, n_meta, FILE_SYNC_DATA | FILE_SYNC_NAME, err);
}

cohort_status st_write_ex(const char *path, const st_tensor *t, int n, const char *const *meta_kv,
                          int n_meta, int sync, cohort_error *err)
{
    if (!path || n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta_kv))
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: st_write: invalid arguments",
                           path ? path : "(null)");
    for (int i = 0; i < 2 * n_meta; i++) {
        if (!meta_kv[i])
            return cohort_fail(err, COHORT_ERR_USAGE, "%s: metadata entry %d is NULL", path, i / 2);
        if (!json_utf8_valid(meta_kv[i], strlen(meta_kv[i])))
            return cohort_fail(err, COHORT_ERR_USAGE, "%s: metadata entry %d is not valid UTF-8",
                               path, i / 2);
    }
    for (int i = 0; i < n_meta; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(meta_kv[2 * i], meta_kv[2 * j]) == 0)
                return cohort_fail(err, COHORT_ERR_USAGE, "%s: metadata key '%s' is used twice",
                                   path, meta_kv[2 * i]);

    /* The header: the layout of the reference writer (compact JSON,
     * __metadata__ first, dtype/shape/data_offsets), tensors in order. */
    strbuf h;
    sb_init(&h);
    sb_putn(&h, "{", 1);
    if (n_meta > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i)
                sb_putn(&h, ",", 1);
            sb_json_str(&h, meta_kv[2 * i]);
            sb_putn(&h, ":", 1);
            sb_json_str(&h, meta_kv[2 * i + 1]);
        }
        sb_putn(&h, "}", 1);
    }
    size_t data_len = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = 0;
        cohort_status st = check_tensor(path, &t[i], t, i, &bytes, err);
        if (st) {
            sb_free(&h);
            return st;
        }
        if (bytes > SIZE_MAX / 2 - data_len) {
            sb_free(&h);
            return cohort_fail(err, COHORT_ERR_USAGE, "%s: tensors are too large to write", path);
        }
        if (i || n_meta > 0)
            sb_putn(&h, ",", 1);
        sb_json_str(&h, t[i].name);
        sb_puts(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++)
            sb_printf(&h, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%zu,%zu]}", data_len, data_len + bytes);
        data_len += bytes;
    }
    sb_putn(&h, "}", 1);
    while (h.len % 8 && !h.failed)
        sb_putn(&h, " ", 1);
    if (h.failed) {
        sb_free(&h);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    if (h.len > ST_MAX_HEADER) {
        sb_free(&h);
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: header of %zu bytes is over the 100 MiB limit",
                           path, h.len);
    }

    /* The length and the header, then the tensors: on a little-endian
     * host as they lie in memory, written from there; else swapped in a
     * copy of them all. */
    int le = host_is_little_endian();
    size_t head = 8 + h.len, copy = le ? 0 : data_len;
    char *buf = malloc(head + copy);
    file_part *parts = malloc((size_t)(n + 1) * sizeof *parts);
    if (!buf || !parts) {
        free(buf);
        free(parts);
        sb_free(&h);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory for %zu bytes", path,
                           head + copy);
    }
    uint64_t hn = h.len;
    for (int k = 0; k < 8; k++)
        buf[k] = (char)((hn >> (8 * k)) & 0xff);
    memcpy(buf + 8, h.data, h.len);
    sb_free(&h);
    int np = 0;
    parts[np++] = (file_part){buf, head + copy};
    char *p = buf + head;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)shape_count(t[i].shape, t[i].ndim) * 4;
        if (!bytes)
            continue;
        if (le) {
            parts[np++] = (file_part){t[i].data, bytes};
        } else {
            memcpy(p, t[i].data, bytes);
            swap4(p, bytes / 4);
            p += bytes;
        }
    }
    cohort_status st = file_write_atomic_ex(path, parts, np, sync, err);
    free(parts);
    free(buf);
    return st;
}

/* ---- reading ---------------------------------------------------------- */

typedef struct span { uint64_t begin, end; int idx; } span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* A non-negative integer that a double holds exactly; 0 on success. */
static int json_uint(const json_value *v, uint64_t *out)
{
    if (!v || v->type != JSON_NUM || !(v->num >= 0) || v->num >= ST_MAX_INT || v->num != floor(v->num))
        return -1;
    *out = (uint64_t)v->num;
    return 0;
}

static void format_shape(char *buf, size_t n, const uint64_t *shape, int ndim)
{
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRIu64, d ? ", " : "", shape[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

/* Check one tensor entry of the header and fill *t and *s (not t->data). */
static cohort_status read_entry(const char *path, const char *name, const json_value *e,
                                uint64_t buf_len, st_tensor *t, span *s, cohort_error *err)
{
    size_t name_len = strlen(name);
    if (name_len >= (size_t)ST_NAME_MAX)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor name '%.40s...' is %zu bytes; at most %d allowed",
                           path, name, name_len, ST_NAME_MAX - 1);
    memcpy(t->name, name, name_len + 1);
    if (e->type != JSON_OBJ)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s' is not a JSON object", path, name);
    const json_value *dtype = json_get(e, "dtype"), *shape = json_get(e, "shape"),
                     *offs = json_get(e, "data_offsets");
    if (!dtype || dtype->type != JSON_STR)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s' has no \"dtype\" string", path, name);
    if (strcmp(dtype->str, "F32") != 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s' has dtype %.32s; cohort reads F32 only",
                           path, name, dtype->str);
    if (!shape || shape->type != JSON_ARR)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s' has no \"shape\" array", path, name);
    if (shape->n > 4)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s' has %zu dimensions; cohort reads at most 4",
                           path, name, shape->n);
    uint64_t dims[4], count = 1;
    int overflow = 0;
    t->ndim = (int)shape->n;
    for (int d = 0; d < t->ndim; d++) {
        if (json_uint(json_at(shape, (size_t)d), &dims[d]))
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
        t->shape[d] = (int64_t)dims[d];
        if (dims[d] && count > UINT64_MAX / dims[d])
            overflow = 1;
        else
            count *= dims[d];
    }
    char shape_text[128];
    format_shape(shape_text, sizeof shape_text, dims, t->ndim);
    if (overflow || count > UINT64_MAX / 4)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor '%s': shape %s has too many elements", path,
                           name, shape_text);
    uint64_t begin, end;
    if (!offs || offs->type != JSON_ARR || offs->n != 2 || json_uint(json_at(offs, 0), &begin) ||
        json_uint(json_at(offs, 1), &end))
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: tensor '%s': \"data_offsets\" must be two non-negative integers", path, name);
    if (begin > end)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                           path, name, begin, end);
    if (end > buf_len)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] run past the end of the data (%" PRIu64 " bytes); is the file truncated?",
                           path, name, begin, end, buf_len);
    if (count * 4 != end - begin)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: tensor '%s': shape %s needs %" PRIu64 " bytes but data_offsets [%" PRIu64
                           ", %" PRIu64 "] hold %" PRIu64,
                           path, name, shape_text, count * 4, begin, end, end - begin);
    s->begin = begin;
    s->end = end;
    return COHORT_OK;
}

static cohort_status read_metadata(const char *path, const json_value *m, char **out, cohort_error *err)
{
    if (m->type != JSON_OBJ)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: __metadata__ is not a JSON object", path);
    strbuf b;
    sb_init(&b);
    sb_putn(&b, "{", 1);
    for (size_t i = 0; i < m->n; i++) {
        if (m->items[i].type != JSON_STR) {
            sb_free(&b);
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: __metadata__ value '%.64s' is not a string",
                               path, m->keys[i]);
        }
        if (i)
            sb_putn(&b, ",", 1);
        sb_json_str(&b, m->keys[i]);
        sb_putn(&b, ":", 1);
        sb_json_str(&b, m->items[i].str);
    }
    sb_putn(&b, "}", 1);
    if (b.failed) {
        sb_free(&b);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    }
    *out = b.data;
    return COHORT_OK;
}

/* Validate the parsed header against the buf_len data bytes at file +
 * data_at and fill out. On success file (perhaps moved by a shrinking
 * realloc) becomes out->blob; on error file is untouched and still the
 * caller's, and out may hold partial results for st_free. */
static cohort_status read_header(const char *path, const json_value *h, char *file, size_t data_at,
                                 uint64_t buf_len, st_file *out, cohort_error *err)
{
    if (h->type != JSON_OBJ)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: header is not a JSON object", path);
    size_t n = h->n;
    const json_value *meta = json_get(h, "__metadata__");
    if (meta)
        n--;
    if (n > (size_t)INT32_MAX)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: too many tensors", path);
    if (meta) {
        cohort_status st = read_metadata(path, meta, &out->metadata_json, err);
        if (st)
            return st;
    }
    out->t = calloc(n ? n : 1, sizeof *out->t);
    span *spans = calloc(n ? n : 1, sizeof *spans);
    if (!out->t || !spans) {
        free(spans);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory for %zu tensors", path, n);
    }
    int k = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (&h->items[i] == meta)
            continue;
        cohort_status st = read_entry(path, h->keys[i], &h->items[i], buf_len, &out->t[k], &spans[k], err);
        if (st) {
            free(spans);
            return st;
        }
        spans[k].idx = k;
        k++;
    }
    out->n = k;
    qsort(spans, (size_t)k, sizeof *spans, span_cmp);
    /* The tensors' bytes tile the data exactly, as the format's reference
     * reader requires (it refuses a gap, or bytes after the last tensor):
     * such a file is damaged or not what it claims, and torch's
     * safetensors.torch.load_file would refuse it too. */
    const span *prev = NULL;
    uint64_t end = 0;
    for (int i = 0; i < k; i++) {
        const span *s = &spans[i];
        cohort_status st = COHORT_OK;
        if (prev && s->begin < end)
            st = cohort_fail(
                err, COHORT_ERR_INPUT,
                "%s: tensors '%s' and '%s' overlap (data_offsets [%" PRIu64 ", %" PRIu64 "] and [%" PRIu64
                ", %" PRIu64 "])",
                path, out->t[prev->idx].name, out->t[s->idx].name, prev->begin, prev->end, s->begin, s->end);
        else if (s->begin > end)
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s: tensor '%s' starts at byte %" PRIu64 " of the data, but the "
                             "tensors before it end at %" PRIu64 ": a gap of %" PRIu64 " bytes, "
                             "which a safetensors file does not have",
                             path, out->t[s->idx].name, s->begin, end, s->begin - end);
        if (st) {
            free(spans);
            return st;
        }
        if (s->begin != s->end) {
            prev = s;
            end = s->end;
        }
    }
    if (end != buf_len) {
        free(spans);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: %" PRIu64 " byte%s after the last tensor (the tensors end at byte "
                           "%" PRIu64 " of %" PRIu64 " after the header); a safetensors file ends "
                           "with its last tensor: damaged, or two files joined?",
                           path, buf_len - end, buf_len - end == 1 ? "" : "s", end, buf_len);
    }
    /* Pack the tensors, in offset order, at the front of the file's buffer:
     * the header before them is parsed already, every destination lies at
     * or before its source, and offsets that are multiples of 4 from a
     * malloc'd start keep every float aligned whatever the header size. */
    size_t cursor = 0;
    size_t *at = calloc((size_t)k + 1, sizeof *at);
    if (!at) {
        free(spans);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < k; i++) {
        const span *s = &spans[i];
        size_t bytes = (size_t)(s->end - s->begin);
        if (bytes)
            memmove(file + cursor, file + data_at + s->begin, bytes);
        at[s->idx] = cursor;
        cursor += bytes;
    }
    free(spans);
    char *blob = file;
    if (cursor > 0) {
        char *shrunk = realloc(file, cursor);
        if (shrunk)
            blob = shrunk;
    }
    out->blob = blob;
    for (int i = 0; i < k; i++)
        out->t[i].data = (float *)(void *)(blob + at[i]);
    free(at);
    if (!host_is_little_endian())
        swap4(blob, cursor / 4);
    return COHORT_OK;
}

cohort_status st_read(const char *path, st_file *out, cohort_error *err)
{
    memset(out, 0, sizeof *out);
    char *file;
    size_t len;
    size_t cap = ST_MAX_FILE < SIZE_MAX ? (size_t)ST_MAX_FILE : SIZE_MAX;
    cohort_status st = file_read_all(path, cap, &file, &len, err);
    if (st)
        return st;
    if (len < 8) {
        free(file);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: file is %zu bytes, too short for a safetensors header (8 bytes at least)",
                           path, len);
    }
    uint64_t hn = 0;
    for (int k = 7; k >= 0; k--)
        hn = (hn << 8) | (unsigned char)file[k];
    if (hn > ST_MAX_HEADER) {
        free(file);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: header size %" PRIu64 " is over the 100 MiB limit; not a safetensors file?",
                           path, hn);
    }
    if (hn > len - 8) {
        free(file);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: header size %" PRIu64 " is larger than the %zu bytes after the size field; "
                           "is the file truncated?",
                           path, hn, len - 8);
    }
    char msg[300];
    json_value *h = json_parse(file + 8, (size_t)hn, msg, sizeof msg);
    if (!h) {
        free(file);
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: header is not valid JSON: %s", path, msg);
    }
    size_t data_at = 8 + (size_t)hn;
    /* On success file (perhaps shrunk) has become out->blob. */
    st = read_header(path, h, file, data_at, len - data_at, out, err);
    json_free(h);
    if (st) {
        free(file);
        st_free(out);
    }
    return st;
}

char *st_meta_get(const st_file *f, const char *key)
{
    if (!f || !f->metadata_json || !key)
        return NULL;
    json_value *m = json_parse(f->metadata_json, strlen(f->metadata_json), NULL, 0);
    const char *v = json_str(json_get(m, key), NULL);
    char *copy = v ? str_dup(v) : NULL;
    json_free(m);
    return copy;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

void st_free(st_file *f)
{
    if (!f)
        return;
    free(f->t);
    free(f->metadata_json);
    free(f->blob);
    memset(f, 0, sizeof *f);
}
