/*
 * yamltree: a YAML document (via libyaml) as a small tree of maps, lists and
 * text values, each node remembering the line it came from, and typed
 * readers of those values whose errors say "file:line: ..." about the node.
 */
#ifndef COHORT_YAMLTREE_H
#define COHORT_YAMLTREE_H

#include "cohort.h"

#include <stddef.h>

#define YTREE_MAX_DEPTH 64

typedef enum ynode_type { YNODE_SCALAR, YNODE_SEQ, YNODE_MAP } ynode_type;

typedef struct ynode {
    ynode_type type;
    int line;            /* 1-based line in its source; 0 when made by code */
    const char *origin;  /* NULL: the plan file; else the "--set KEY=VALUE" text */
    int inherited;       /* copied from the plan's defaults */
    int plain;           /* scalar written without quotes */
    char *str;           /* scalar: the text, NUL-terminated (never NULL) */
    size_t n, cap;       /* map entries or list items */
    struct ynode **keys; /* map: the key scalars, n of them */
    struct ynode **vals; /* map: the values; list: the items */
} ynode;

/*
 * Parse YAML text into a tree. *out is the root, or NULL for an empty
 * document. Rejects anchors and aliases, more than one document, duplicate
 * keys, non-text keys, nesting deeper than YTREE_MAX_DEPTH and more than
 * max_nodes nodes. Every node gets `origin`. On error (COHORT_ERR_INPUT, or
 * COHORT_ERR_NOMEM) *out is NULL and err says "NAME:LINE: problem", or
 * "ORIGIN: cannot parse the value: problem" when origin is not NULL.
 * The caller owns the tree (ynode_free).
 */
cohort_status ytree_parse(const char *text, size_t len, const char *name, const char *origin,
                          size_t max_nodes, ynode **out, cohort_error *err);

/* A new empty node (scalar text ""), or NULL on out of memory. */
ynode *ynode_new(ynode_type type, int line, const char *origin);
/* A new scalar holding a copy of s, or NULL on out of memory. */
ynode *ynode_scalar(const char *s, int line, const char *origin);
/* Deep copy, or NULL on out of memory. `inherited` is set on every copied
 * node when mark_inherited is nonzero, else kept. */
ynode *ynode_clone(const ynode *n, int mark_inherited);
/* Free a node and everything below it; NULL is fine. */
void ynode_free(ynode *n);

/* Append an item to a list (key NULL) or an entry to a map. Takes ownership
 * of key and val on success only; returns 0, or -1 on out of memory. */
int ynode_append(ynode *parent, ynode *key, ynode *val);
/* Index of key in a map, or -1 (also when map is not a map). */
int ymap_find(const ynode *map, const char *key);
/* Value of key in a map, or NULL. */
ynode *ymap_get(const ynode *map, const char *key);
/* Set key in a map, replacing (and freeing) an existing entry. Takes
 * ownership of key and val on success only; returns 0, or -1 on out of
 * memory. */
int ymap_set(ynode *map, ynode *key, ynode *val);
/* Remove and free entry i of a map. */
void ymap_remove(ynode *map, size_t i);

/* ---- typed values, with errors located at the node ---- */

/* Where errors go: the file name used in "FILE:LINE: message". */
/* The node of the last error, as ynode_fail saw it. */
typedef struct yfailed {
    const struct ynode *node; /* NULL: none; valid only while its tree is */
    int line, inherited;      /* the node's, kept after the tree is freed */
    const char *origin;
} yfailed;

typedef struct yctx {
    const char *file;
    cohort_error *err;
    yfailed *failed; /* NULL, or where ynode_fail says which node failed */
} yctx;

/* Fill c->err with COHORT_ERR_INPUT and "FILE:LINE: message" (or
 * "--set KEY=VALUE: message" for a node from an override), and c->failed
 * with n; returns it. */
cohort_status ynode_fail(const yctx *c, const ynode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Out of memory, said for the file; returns COHORT_ERR_NOMEM. */
cohort_status ynode_nomem(const yctx *c);

/* How a node reads in a message: "'abc'", "nothing", "a map", "a list". */
const char *ynode_describe(const ynode *n, char *buf, size_t size);
/* An empty plain scalar, "~" or "null". */
int ynode_is_null(const ynode *n);

/* An integer in [lo, hi]. what names the value ("batch_size"). */
cohort_status yget_int(const yctx *c, const ynode *n, const char *what, long long lo,
                       long long hi, long long *out);
/* A non-negative integer up to 2^64 - 1. */
cohort_status yget_u64(const yctx *c, const ynode *n, const char *what, unsigned long long *out);

typedef enum yrange {
    YR_POSITIVE, /* > 0 */
    YR_NONNEG,   /* >= 0 */
    YR_UNIT,     /* in [0, 1) */
    YR_UNIT_ALL  /* in [0, 1] */
} yrange;
/* A finite number in range; as_float: also finite (and in range) as a float,
 * and when positive at least FLT_MIN (training flushes denormals to zero). */
cohort_status yget_num(const yctx *c, const ynode *n, const char *what, yrange range,
                       int as_float, double *out);
/* The error of a positive float setting below FLT_MIN: its name, then the
 * value as given. */
#define YNUM_TINY_MSG                                                                      \
    "%s must be at least 1.17549435e-38, float32's smallest normal number (training "    \
    "flushes smaller ones to zero), got %s"
/* true/false/yes/no, any case. */
cohort_status yget_bool(const yctx *c, const ynode *n, const char *what, int *out);
/* A non-empty text value that fits in buf (size bytes, NUL included). */
cohort_status yget_str(const yctx *c, const ynode *n, const char *what, char *buf, size_t size);
/* One of names[0..count); *out is its index. Suggests the closest name. */
cohort_status yget_enum(const yctx *c, const ynode *n, const char *what,
                        const char *const *names, int count, int *out);
/* As yget_enum, in any case ("SAME", "Adam", "ReLU"). */
cohort_status yget_enum_anycase(const yctx *c, const ynode *n, const char *what,
                                const char *const *names, int count, int *out);

/* The name in names[0..count) that word spells in another case or with
 * other underscores ("MaxPooling2D": max_pooling2d), else the closest by edit
 * distance, when it is close enough to be a likely typo; else NULL. */
const char *ysuggest(const char *word, const char *const *names, int count);
/* A map's keys are checked by plan_check_keys (plan/keys.h). */

#endif
