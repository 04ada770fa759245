/* Tests of safetensors reading and writing: round trips, the exact bytes
 * of a small file, and every way a file can be malformed.
 * Also a helper for tests/t_safetensors_torch.py:
 *   test_safetensors --write-sample PATH   writes the sample file, exits 0
 *   test_safetensors --read-sample PATH    checks the file numpy wrote (0/1)
 */
#include "check.h"
#include "io/io.h"
#include "util/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/cohort_st_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static st_tensor make_tensor(const char *name, int ndim, const int64_t *shape, float *data)
{
    st_tensor t;
    memset(&t, 0, sizeof t);
    str_copy(t.name, sizeof t.name, name);
    t.ndim = ndim;
    for (int d = 0; d < ndim && d < 4; d++)
        t.shape[d] = shape[d];
    t.data = data;
    return t;
}

static char *read_file(const char *path, size_t *len)
{
    char *data = NULL;
    cohort_error err;
    if (file_read_all(path, 1 << 20, &data, len, &err) != COHORT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return NULL;
    }
    return data;
}

/* Write a file of an 8-byte size field (hn, or the header's length when
 * hn is UINT64_MAX), the header text, and data_len bytes of data. */
static void write_raw(const char *path, const char *header, uint64_t hn, size_t data_len)
{
    size_t h = strlen(header);
    if (hn == UINT64_MAX)
        hn = h;
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK_MSG(0, "cannot create a fixture file");
        return;
    }
    unsigned char size[8];
    for (int k = 0; k < 8; k++)
        size[k] = (unsigned char)(hn >> (8 * k));
    fwrite(size, 1, 8, f);
    fwrite(header, 1, h, f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
}

/* Reading a malformed file fails with status st and a message that names
 * the file and contains want; the st_file stays empty. */
static void expect_bad(const char *header, uint64_t hn, size_t data_len, cohort_status st,
                       const char *want)
{
    const char *path = tmp_path("bad.safetensors");
    write_raw(path, header, hn, data_len);
    st_file f;
    cohort_error err;
    memset(&err, 0, sizeof err);
    cohort_status got = st_read(path, &f, &err);
    CHECK_MSG(got == st, "header %.60s: status %d, want %d", header, (int)got, (int)st);
    CHECK_CONTAINS(err.message, path);
    CHECK_CONTAINS(err.message, want);
    CHECK(f.n == 0 && f.t == NULL && f.blob == NULL && f.metadata_json == NULL);
    st_free(&f);
}

/* ---- the sample shared with t_safetensors_torch.py -------------------- */

static cohort_status write_sample(const char *path, cohort_error *err)
{
    float w[12], bias[3] = {0.25f, -0.0f, 3.0e38f}, scalar = 42.5f, big[16];
    for (int i = 0; i < 12; i++)
        w[i] = (float)i * 0.5f - 2.0f;
    for (int i = 0; i < 16; i++)
        big[i] = (float)(i - 8);
    st_tensor t[5];
    t[0] = make_tensor("layers.0.weight", 2, (int64_t[]){3, 4}, w);
    t[1] = make_tensor("layers.0.bias", 1, (int64_t[]){3}, bias);
    t[2] = make_tensor("scalar", 0, NULL, &scalar);
    t[3] = make_tensor("empty", 2, (int64_t[]){0, 5}, NULL);
    t[4] = make_tensor("big", 4, (int64_t[]){2, 2, 2, 2}, big);
    const char *meta[] = {"format", "pt", "cohort_version", COHORT_VERSION, "spec",
                          "{\"layers\":[{\"dense\":4}]}", "note", "na\xc3\xafve \xe2\x9c\x93"};
    return st_write(path, t, 5, meta, 4, err);
}

/* The file t_safetensors_torch.py writes with numpy (see there). */
static int read_sample(const char *path)
{
    st_file f;
    cohort_error err;
    if (st_read(path, &f, &err) != COHORT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    CHECK(f.n == 4);
    const st_tensor *a = st_find(&f, "a.weight"), *b = st_find(&f, "b.special"), *c = st_find(&f, "c"),
                    *d = st_find(&f, "d.empty");
    CHECK(a && a->ndim == 4 && a->shape[0] == 2 && a->shape[1] == 3 && a->shape[2] == 4 && a->shape[3] == 5);
    if (a && a->ndim == 4) {
        int bad = 0;
        for (int i = 0; i < 120; i++)
            bad += a->data[i] != (float)i * 0.25f - 7.0f;
        CHECK(bad == 0);
    }
    static const uint32_t special[6] = {0x80000000u, 0x7f800000u, 0xff800000u,
                                        0x00000001u, 0x7f7fffffu, 0x7fc00001u};
    CHECK(b && b->ndim == 1 && b->shape[0] == 6);
    if (b && b->ndim == 1 && b->shape[0] == 6)
        for (int i = 0; i < 6; i++)
            CHECK_MSG(bits_of(b->data[i]) == special[i], "b.special[%d] = 0x%08x", i, bits_of(b->data[i]));
    CHECK(c && c->ndim == 0 && c->data[0] == 3.5f);
    CHECK(d && d->ndim == 1 && d->shape[0] == 0);
    char *fmt = st_meta_get(&f, "format"), *note = st_meta_get(&f, "note");
    CHECK(fmt && strcmp(fmt, "pt") == 0);
    /* json.dumps wrote "h\u00e9llo \ud83d\ude00". */
    CHECK(note && strcmp(note, "h\xc3\xa9llo \xf0\x9f\x98\x80") == 0);
    free(fmt);
    free(note);
    st_free(&f);
    return check_done("test_safetensors --read-sample");
}

/* ---- tests ------------------------------------------------------------ */

static void test_round_trip(void)
{
    const char *path = tmp_path("round.safetensors");
    cohort_error err;
    CHECK(write_sample(path, &err) == COHORT_OK);
    st_file f;
    CHECK(st_read(path, &f, &err) == COHORT_OK);
    CHECK(f.n == 5);
    if (f.n != 5) {
        st_free(&f);
        return;
    }
    /* Tensors come back in the order they were written. */
    CHECK(strcmp(f.t[0].name, "layers.0.weight") == 0 && strcmp(f.t[4].name, "big") == 0);
    const st_tensor *w = st_find(&f, "layers.0.weight");
    CHECK(w && w->ndim == 2 && w->shape[0] == 3 && w->shape[1] == 4);
    if (w) {
        CHECK(((uintptr_t)w->data % 4) == 0);
        for (int i = 0; i < 12; i++)
            CHECK(w->data[i] == (float)i * 0.5f - 2.0f);
    }
    const st_tensor *b = st_find(&f, "layers.0.bias");
    CHECK(b && b->ndim == 1 && b->shape[0] == 3);
    if (b) {
        CHECK(b->data[0] == 0.25f && bits_of(b->data[1]) == 0x80000000u && b->data[2] == 3.0e38f);
    }
    const st_tensor *s = st_find(&f, "scalar");
    CHECK(s && s->ndim == 0 && s->data[0] == 42.5f);
    const st_tensor *e = st_find(&f, "empty");
    CHECK(e && e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 5);
    const st_tensor *g = st_find(&f, "big");
    CHECK(g && g->ndim == 4 && g->shape[3] == 2 && g->data[0] == -8.0f && g->data[15] == 7.0f);
    CHECK(st_find(&f, "missing") == NULL);
    CHECK(st_find(&f, "") == NULL);

    char *v = st_meta_get(&f, "cohort_version");
    CHECK(v && strcmp(v, COHORT_VERSION) == 0);
    free(v);
    v = st_meta_get(&f, "spec");
    CHECK(v && strcmp(v, "{\"layers\":[{\"dense\":4}]}") == 0);
    free(v);
    v = st_meta_get(&f, "note");
    CHECK(v && strcmp(v, "na\xc3\xafve \xe2\x9c\x93") == 0);
    free(v);
    CHECK(st_meta_get(&f, "absent") == NULL);
    CHECK_CONTAINS(f.metadata_json, "\"spec\":\"{\\\"layers\\\":[{\\\"dense\\\":4}]}\"");
    st_free(&f);
    CHECK(f.n == 0 && f.t == NULL && f.blob == NULL);
    st_free(&f); /* twice is fine: st_free leaves it zeroed */

    /* No tensors, no metadata: "{}" padded to 8, no __metadata__ key. */
    path = tmp_path("empty.safetensors");
    CHECK(st_write(path, NULL, 0, NULL, 0, &err) == COHORT_OK);
    CHECK(st_read(path, &f, &err) == COHORT_OK);
    CHECK(f.n == 0 && f.metadata_json == NULL && st_meta_get(&f, "x") == NULL);
    st_free(&f);
    size_t len;
    char *raw = read_file(path, &len);
    CHECK(raw && len == 16 && memcmp(raw + 8, "{}      ", 8) == 0);
    free(raw);

    /* Overwriting an existing file works (atomic rename). */
    float one = 1.0f;
    st_tensor t = make_tensor("x", 1, (int64_t[]){1}, &one);
    CHECK(st_write(path, &t, 1, NULL, 0, &err) == COHORT_OK);
    CHECK(st_read(path, &f, &err) == COHORT_OK && f.n == 1 && f.t[0].data[0] == 1.0f);
    st_free(&f);
}

static void test_known_bytes(void)
{
    float x[2] = {1.0f, -2.0f};
    st_tensor t = make_tensor("x", 1, (int64_t[]){2}, x);
    cohort_error err;
    const char *path = tmp_path("known.safetensors");
    CHECK(st_write(path, &t, 1, NULL, 0, &err) == COHORT_OK);
    size_t len;
    char *raw = read_file(path, &len);
    /* 54 bytes of JSON padded to 56 (0x38), then 1.0f and -2.0f little endian. */
    static const char want[] = "\x38\0\0\0\0\0\0\0"
                               "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  "
                               "\x00\x00\x80\x3f\x00\x00\x00\xc0";
    CHECK(raw && len == sizeof want - 1);
    CHECK(raw && len == sizeof want - 1 && memcmp(raw, want, len) == 0);
    free(raw);

    const char *meta[] = {"k", "v"};
    CHECK(st_write(path, &t, 1, meta, 1, &err) == COHORT_OK);
    raw = read_file(path, &len);
    /* 79 bytes padded to 80 (0x50). */
    static const char want2[] = "\x50\0\0\0\0\0\0\0"
                                "{\"__metadata__\":{\"k\":\"v\"},"
                                "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} "
                                "\x00\x00\x80\x3f\x00\x00\x00\xc0";
    CHECK(raw && len == sizeof want2 - 1 && memcmp(raw, want2, len) == 0);
    free(raw);

    /* Names and values with quotes and control characters are escaped. */
    st_tensor q = make_tensor("a\"b\n", 0, NULL, x);
    const char *meta2[] = {"k\\", "tab\there"};
    CHECK(st_write(path, &q, 1, meta2, 1, &err) == COHORT_OK);
    raw = read_file(path, &len);
    CHECK(raw && strstr(raw + 8, "{\"__metadata__\":{\"k\\\\\":\"tab\\there\"},\"a\\\"b\\n\":{\"dtype\":\"F32\","
                                 "\"shape\":[],\"data_offsets\":[0,4]}}") == raw + 8);
    free(raw);
    st_file f;
    CHECK(st_read(path, &f, &err) == COHORT_OK);
    CHECK(st_find(&f, "a\"b\n") != NULL);
    char *v = st_meta_get(&f, "k\\");
    CHECK(v && strcmp(v, "tab\there") == 0);
    free(v);
    st_free(&f);
}

static void test_reader_accepts(void)
{
    cohort_error err;
    st_file f;
    /* Tensors listed out of offset order, an empty one among them, after
     * an odd-sized header (so at unaligned places in the file): the data
     * still comes back 4-byte aligned. */
    const char *h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},\"x\":{\"dtype\":\"F32\","
                    "\"shape\":[1],\"data_offsets\":[8,12],\"extra\":[1]},"
                    "\"__metadata__\":{} }";
    CHECK(strlen(h) % 2 == 1);
    const char *path = tmp_path("odd.safetensors");
    write_raw(path, h, UINT64_MAX, 12);
    CHECK(st_read(path, &f, &err) == COHORT_OK);
    if (f.n == 4) {
        CHECK(strcmp(f.t[0].name, "b") == 0 && strcmp(f.t[1].name, "a") == 0);
        for (int i = 0; i < 4; i++)
            CHECK(((uintptr_t)f.t[i].data % 4) == 0);
        /* write_raw fills data byte i with i. */
        const st_tensor *a = st_find(&f, "a"), *b = st_find(&f, "b"), *x = st_find(&f, "x");
        CHECK(a && bits_of(a->data[0]) == 0x03020100u);
        CHECK(b && bits_of(b->data[0]) == 0x07060504u);
        CHECK(x && bits_of(x->data[0]) == 0x0b0a0908u);
        CHECK_CONTAINS(f.metadata_json, "{}");
    } else {
        CHECK_MSG(0, "odd.safetensors: wrong tensor count");
    }
    st_free(&f);
}

static void test_reader_rejects(void)
{
    cohort_error err;
    st_file f;
    CHECK(st_read(tmp_path("does-not-exist.safetensors"), &f, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "does-not-exist.safetensors: cannot open");
    CHECK(f.n == 0 && f.blob == NULL);
    CHECK(st_read(tmpdir, &f, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "not a regular file");

    /* Truncated: fewer than 8 bytes. */
    const char *path = tmp_path("short.safetensors");
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite("\x10\0\0", 1, 3, fp);
        fclose(fp);
    }
    CHECK(st_read(path, &f, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "short.safetensors: file is 3 bytes, too short for a safetensors header");

    const char *t1 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_bad(t1, 200, 8, COHORT_ERR_INPUT, "header size 200 is larger than the 62 bytes after the size field");
    expect_bad(t1, (uint64_t)1 << 62, 8, COHORT_ERR_INPUT, "is over the 100 MiB limit");
    expect_bad(t1, ((uint64_t)100 << 20) + 1, 8, COHORT_ERR_INPUT, "header size 104857601 is over the 100 MiB limit");
    expect_bad(t1, UINT64_MAX, 7, COHORT_ERR_INPUT,
               "tensor 'x': data_offsets [0, 8] run past the end of the data (7 bytes)");
    expect_bad("{\"x\":", UINT64_MAX, 0, COHORT_ERR_INPUT,
               "header is not valid JSON: line 1, column 6: expected a value, found end of input");
    expect_bad("{\"x\":{}}xyz", 8, 3, COHORT_ERR_INPUT, "tensor 'x' has no \"dtype\" string");
    expect_bad("{\"x\":{}}xyz", 11, 0, COHORT_ERR_INPUT, "header is not valid JSON: line 1, column 9: unexpected 'x'");
    expect_bad("[1, 2]", UINT64_MAX, 0, COHORT_ERR_INPUT, "header is not a JSON object");
    expect_bad("{\"x\":[]}", UINT64_MAX, 0, COHORT_ERR_INPUT, "tensor 'x' is not a JSON object");
    expect_bad("{\"x\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", UINT64_MAX, 4,
               COHORT_ERR_INPUT, "tensor 'x' has dtype F16; cohort reads F32 only");
    expect_bad("{\"x\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", UINT64_MAX, 8, COHORT_ERR_INPUT,
               "tensor 'x' has no \"dtype\" string");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", UINT64_MAX, 8, COHORT_ERR_INPUT,
               "tensor 'x' has no \"shape\" array");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", UINT64_MAX, 8, COHORT_ERR_INPUT,
               "tensor 'x': \"data_offsets\" must be two non-negative integers");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "\"data_offsets\" must be two non-negative integers");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "\"data_offsets\" must be two non-negative integers");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "tensor 'x': data_offsets [8, 0] end before they begin");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "\"data_offsets\" must be two non-negative integers");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "data_offsets [8, 16] run past the end of the data (8 bytes)");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", UINT64_MAX, 24,
               COHORT_ERR_INPUT, "tensor 'x': shape [2, 3] needs 24 bytes but data_offsets [0, 20] hold 20");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "shape [] needs 4 bytes but data_offsets [0, 0] hold 0");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "tensor 'x': shape [4294967296, 4294967296] has too many elements");
    /* 2^62 elements fit a u64, but not 4 bytes each. */
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "shape [2147483648, 2147483648] has too many elements");
    /* 2^64 / 4 * 4 wraps to 0: must not pass as "0 bytes". */
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,0]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "has too many elements");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "tensor 'x' has 5 dimensions; cohort reads at most 4");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "tensor 'x': shape[0] is not a non-negative integer");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,4]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "tensor 'x': shape[1] is not a non-negative integer");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "shape[0] is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               UINT64_MAX, 12, COHORT_ERR_INPUT,
               "tensors 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])");
    expect_bad("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
               UINT64_MAX, 12, COHORT_ERR_INPUT, "tensors 'a' and 'b' overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "tensors 'a' and 'b' overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               UINT64_MAX, 16, COHORT_ERR_INPUT, "header is not valid JSON: line 1, column 55: duplicate key \"a\"");
    /* The format's data is indexed whole: no gap between tensors, nothing
     * after the last one (the reference reader refuses both). */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               UINT64_MAX, 12, COHORT_ERR_INPUT,
               "tensor 'b' starts at byte 8 of the data, but the tensors before it end at 4: a gap of 4 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", UINT64_MAX, 8,
               COHORT_ERR_INPUT, "tensor 'a' starts at byte 4 of the data, but the tensors before it end at 0");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 9,
               COHORT_ERR_INPUT, "5 bytes after the last tensor (the tensors end at byte 4 of 9 after the header)");
    /* An empty tensor counts too: not inside another's bytes. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "tensors 'a' and 'z' overlap (data_offsets [0, 8] and [4, 4])");
    expect_bad("{}", UINT64_MAX, 1, COHORT_ERR_INPUT, "1 byte after the last tensor (the tensors end at byte 0 of 1");
    char longname[400];
    snprintf(longname, sizeof longname, "{\"%0128d\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 0);
    expect_bad(longname, UINT64_MAX, 4, COHORT_ERR_INPUT, "is 128 bytes; at most 127 allowed");
    snprintf(longname, sizeof longname, "{\"%0127d\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 0);
    write_raw(tmp_path("name127.safetensors"), longname, UINT64_MAX, 4);
    CHECK(st_read(tmp_path("name127.safetensors"), &f, &err) == COHORT_OK && f.n == 1 &&
          strlen(f.t[0].name) == 127);
    st_free(&f);
    expect_bad("{\"__metadata__\":{\"k\":1}}", UINT64_MAX, 0, COHORT_ERR_INPUT,
               "__metadata__ value 'k' is not a string");
    expect_bad("{\"__metadata__\":[\"k\"]}", UINT64_MAX, 0, COHORT_ERR_INPUT, "__metadata__ is not a JSON object");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"__metadata__\":{\"k\":\"v\"},"
               "\"y\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
               UINT64_MAX, 8, COHORT_ERR_INPUT, "tensor 'y' has dtype BF16");
}

static void test_writer_rejects(void)
{
    float x[4] = {0};
    cohort_error err;
    const char *path = tmp_path("w.safetensors");
    st_tensor t[2];
    t[0] = make_tensor("a", 1, (int64_t[]){4}, x);
    t[1] = make_tensor("a", 1, (int64_t[]){4}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "w.safetensors: tensor name 'a' is used twice");
    t[1] = make_tensor("__metadata__", 1, (int64_t[]){4}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "a tensor cannot be named __metadata__");
    t[1] = make_tensor("b", 5, (int64_t[]){1, 1, 1, 1, 1}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "tensor 'b' has 5 dimensions; 0 to 4 allowed");
    t[1] = make_tensor("b", 2, (int64_t[]){2, -2}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "tensor 'b' has a negative dimension or too many elements");
    t[1] = make_tensor("b", 2, (int64_t[]){INT64_MAX / 2, 4}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "too many elements");
    /* 2^64 elements: a wrapping product would be 0. */
    t[1] = make_tensor("b", 2, (int64_t[]){4294967296LL, 4294967296LL}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "too many elements");
    t[1] = make_tensor("b", 1, (int64_t[]){2}, NULL);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "tensor 'b' has no data");
    t[1] = make_tensor("b\xff", 1, (int64_t[]){2}, x);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "tensor 1: name is not valid UTF-8");
    t[1] = make_tensor("b", 1, (int64_t[]){2}, x);
    memset(t[1].name, 'n', sizeof t[1].name);
    CHECK(st_write(path, t, 2, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "tensor 1: name is not NUL-terminated");
    const char *dup[] = {"k", "1", "k", "2"};
    CHECK(st_write(path, t, 1, dup, 2, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "metadata key 'k' is used twice");
    const char *nul[] = {"k", NULL};
    CHECK(st_write(path, t, 1, nul, 1, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "metadata entry 0 is NULL");
    const char *bad_utf8[] = {"k", "\xc3("};
    CHECK(st_write(path, t, 1, bad_utf8, 1, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "metadata entry 0 is not valid UTF-8");
    CHECK(st_write(path, NULL, 1, NULL, 0, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "invalid arguments");
    /* None of the failures above left a file behind. */
    CHECK(access(path, F_OK) != 0);
    CHECK(st_write(tmp_path("no-such-dir/w.safetensors"), t, 1, NULL, 0, &err) == COHORT_ERR_IO);
    CHECK_CONTAINS(err.message, "no-such-dir/w.safetensors");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        cohort_error err;
        if (write_sample(argv[2], &err) != COHORT_OK) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--read-sample") == 0)
        return read_sample(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_safetensors [--write-sample PATH | --read-sample PATH]\n");
        return 2;
    }
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "test_safetensors: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_round_trip();
    test_known_bytes();
    test_reader_accepts();
    test_reader_rejects();
    test_writer_rejects();
    const char *files[] = {"round.safetensors", "empty.safetensors", "known.safetensors", "odd.safetensors",
                           "short.safetensors", "bad.safetensors", "name127.safetensors", "w.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        unlink(tmp_path(files[i]));
    CHECK(rmdir(tmpdir) == 0);
    return check_done("test_safetensors");
}
