/* protobuf: Protocol Buffers' wire format, written (see protobuf.h). */
#include "io/protobuf.h"

#include <string.h>

enum { WIRE_VARINT = 0, WIRE_LEN = 2, WIRE_I32 = 5 };

void pb_init(pb_writer *w)
{
    memset(w, 0, sizeof *w);
    sb_init(&w->b);
}

void pb_free(pb_writer *w) { sb_free(&w->b); }

/* v as a varint into out (at most 10 bytes); returns its length. */
static size_t varint_encode(uint64_t v, unsigned char *out)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

static void put_varint(pb_writer *w, uint64_t v)
{
    unsigned char tmp[10];
    sb_putn(&w->b, (const char *)tmp, varint_encode(v, tmp));
}

static void put_key(pb_writer *w, int field, int wire)
{
    put_varint(w, ((uint64_t)(uint32_t)field << 3) | (uint64_t)wire);
}

void pb_varint(pb_writer *w, int field, int64_t v)
{
    put_key(w, field, WIRE_VARINT);
    put_varint(w, (uint64_t)v);
}

static void put_u32le(pb_writer *w, uint32_t u)
{
    unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                           (unsigned char)(u >> 24)};
    sb_putn(&w->b, (const char *)le, 4);
}

void pb_float(pb_writer *w, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    put_key(w, field, WIRE_I32);
    put_u32le(w, u);
}

void pb_bytes(pb_writer *w, int field, const void *data, size_t n)
{
    put_key(w, field, WIRE_LEN);
    put_varint(w, n);
    sb_putn(&w->b, (const char *)data, n);
}

void pb_string(pb_writer *w, int field, const char *s) { pb_bytes(w, field, s, strlen(s)); }

void pb_floats_raw(pb_writer *w, int field, const float *v, size_t n)
{
    put_key(w, field, WIRE_LEN);
    put_varint(w, (uint64_t)n * 4);
    for (size_t i = 0; i < n && !w->b.failed; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_u32le(w, u);
    }
}

void pb_packed_varints(pb_writer *w, int field, const int64_t *v, int n)
{
    pb_begin(w, field);
    for (int i = 0; i < n; i++)
        put_varint(w, (uint64_t)v[i]);
    pb_end(w);
}

void pb_begin(pb_writer *w, int field)
{
    if (w->depth == PB_MAX_DEPTH) {
        w->b.failed = 1;
        return;
    }
    put_key(w, field, WIRE_LEN);
    w->open[w->depth++] = w->b.len;
}

void pb_end(pb_writer *w)
{
    if (w->depth == 0 || w->b.failed)
        return;
    size_t start = w->open[--w->depth], n = w->b.len - start;
    unsigned char len[10];
    size_t k = varint_encode(n, len);
    /* Room for the length, then the contents moved up behind it. */
    sb_putn(&w->b, (const char *)len, k);
    if (w->b.failed)
        return;
    memmove(w->b.data + start + k, w->b.data + start, n);
    memcpy(w->b.data + start, len, k);
}
