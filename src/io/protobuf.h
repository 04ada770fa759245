/*
 * protobuf: a writer of Protocol Buffers' wire format, enough for a model
 * file (onnx.c): varints, 32-bit floats, length-delimited bytes and nested
 * messages. A message is written field by field into one growable buffer; a
 * nested message is opened, filled and closed, and closing puts its length
 * in front of it. Nothing here knows a schema: the callers give field
 * numbers.
 */
#ifndef COHORT_PROTOBUF_H
#define COHORT_PROTOBUF_H

#include "util/util.h"

#include <stddef.h>
#include <stdint.h>

#define PB_MAX_DEPTH 8

typedef struct pb_writer {
    strbuf b;                    /* the message so far; b.failed: out of memory */
    int depth;                   /* nested messages open */
    size_t open[PB_MAX_DEPTH];   /* where each one's contents start */
} pb_writer;

void pb_init(pb_writer *w);
void pb_free(pb_writer *w);

/* A varint field (wire type 0): int32, int64 (negative: ten bytes, as
 * protobuf writes them), uint64, bool, enum. */
void pb_varint(pb_writer *w, int field, int64_t v);
/* A float field (wire type 5, little endian). */
void pb_float(pb_writer *w, int field, float v);
/* A length-delimited field (wire type 2): bytes, or a string without its NUL. */
void pb_bytes(pb_writer *w, int field, const void *data, size_t n);
void pb_string(pb_writer *w, int field, const char *s);
/* Floats as little-endian bytes in a length-delimited field (ONNX's raw_data). */
void pb_floats_raw(pb_writer *w, int field, const float *v, size_t n);
/* A repeated varint field written packed (one length-delimited field). */
void pb_packed_varints(pb_writer *w, int field, const int64_t *v, int n);

/* A nested message in field `field`: its fields follow, up to pb_end. At
 * most PB_MAX_DEPTH open at once (deeper: b.failed). */
void pb_begin(pb_writer *w, int field);
void pb_end(pb_writer *w);

#endif
