#include "plan/yamltree.h"

#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* ---- nodes ----------------------------------------------------------- */

ynode *ynode_new(ynode_type type, int line, const char *origin)
{
    ynode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->str = calloc(1, 1);
    if (!n->str) {
        free(n);
        return NULL;
    }
    n->type = type;
    n->line = line;
    n->origin = origin;
    n->plain = 1;
    return n;
}

static ynode *ynode_scalar_n(const char *s, size_t len, int line, const char *origin)
{
    ynode *n = ynode_new(YNODE_SCALAR, line, origin);
    if (!n)
        return NULL;
    char *str = malloc(len + 1);
    if (!str) {
        ynode_free(n);
        return NULL;
    }
    memcpy(str, s, len);
    str[len] = 0;
    free(n->str);
    n->str = str;
    return n;
}

ynode *ynode_scalar(const char *s, int line, const char *origin)
{
    return ynode_scalar_n(s, strlen(s), line, origin);
}

void ynode_free(ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++) {
        if (n->keys)
            ynode_free(n->keys[i]);
        ynode_free(n->vals[i]);
    }
    free(n->keys);
    free(n->vals);
    free(n->str);
    free(n);
}

int ynode_append(ynode *parent, ynode *key, ynode *val)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(ynode *))
            return -1;
        ynode **vals = realloc(parent->vals, cap * sizeof *vals);
        if (!vals)
            return -1;
        parent->vals = vals;
        if (parent->type == YNODE_MAP) {
            ynode **keys = realloc(parent->keys, cap * sizeof *keys);
            if (!keys)
                return -1;
            parent->keys = keys;
        }
        parent->cap = cap;
    }
    if (parent->type == YNODE_MAP)
        parent->keys[parent->n] = key;
    parent->vals[parent->n] = val;
    parent->n++;
    return 0;
}

ynode *ynode_clone(const ynode *n, int mark_inherited)
{
    ynode *c = n->type == YNODE_SCALAR ? ynode_scalar(n->str, n->line, n->origin)
                                       : ynode_new(n->type, n->line, n->origin);
    if (!c)
        return NULL;
    c->plain = n->plain;
    c->inherited = mark_inherited ? 1 : n->inherited;
    for (size_t i = 0; i < n->n; i++) {
        ynode *k = NULL;
        if (n->type == YNODE_MAP) {
            k = ynode_clone(n->keys[i], mark_inherited);
            if (!k) {
                ynode_free(c);
                return NULL;
            }
        }
        ynode *v = ynode_clone(n->vals[i], mark_inherited);
        if (!v || ynode_append(c, k, v)) {
            ynode_free(k);
            ynode_free(v);
            ynode_free(c);
            return NULL;
        }
    }
    return c;
}

int ymap_find(const ynode *map, const char *key)
{
    if (!map || map->type != YNODE_MAP)
        return -1;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->str, key) == 0)
            return (int)i;
    return -1;
}

ynode *ymap_get(const ynode *map, const char *key)
{
    int i = ymap_find(map, key);
    return i < 0 ? NULL : map->vals[i];
}

int ymap_set(ynode *map, ynode *key, ynode *val)
{
    int i = ymap_find(map, key->str);
    if (i < 0)
        return ynode_append(map, key, val);
    ynode_free(map->keys[i]);
    ynode_free(map->vals[i]);
    map->keys[i] = key;
    map->vals[i] = val;
    return 0;
}

void ymap_remove(ynode *map, size_t i)
{
    if (i >= map->n)
        return;
    ynode_free(map->keys[i]);
    ynode_free(map->vals[i]);
    memmove(map->keys + i, map->keys + i + 1, (map->n - i - 1) * sizeof *map->keys);
    memmove(map->vals + i, map->vals + i + 1, (map->n - i - 1) * sizeof *map->vals);
    map->n--;
}

/* ---- parsing --------------------------------------------------------- */

/* Keys of one map. Duplicates are found by a linear search per key, so an
 * unbounded map (a 16 MiB plan holds 500000 keys) would take hours. */
#define YTREE_MAX_MAP_KEYS 256

typedef struct yparse {
    const char *name, *origin;
    cohort_error *err;
    ynode *root;
    ynode *stack[YTREE_MAX_DEPTH];
    ynode *pending[YTREE_MAX_DEPTH]; /* a map's key waiting for its value */
    int depth;
    size_t nodes, max_nodes;
} yparse;

static cohort_status yp_fail(yparse *p, int line, const char *fmt, ...) COHORT_PRINTF(3, 4);

static cohort_status yp_fail(yparse *p, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->origin)
        return cohort_fail(p->err, COHORT_ERR_INPUT, "--set %s: cannot parse the value: %s",
                           p->origin, msg);
    return cohort_fail(p->err, COHORT_ERR_INPUT, "%s:%d: %s", p->name, line, msg);
}

static cohort_status yp_nomem(yparse *p)
{
    if (p->origin)
        return cohort_fail(p->err, COHORT_ERR_NOMEM, "--set %s: out of memory", p->origin);
    return cohort_fail(p->err, COHORT_ERR_NOMEM, "%s: out of memory reading the plan", p->name);
}

static int mark_line(size_t line0)
{
    return line0 >= (size_t)0x7fffffff ? 0x7fffffff : (int)line0 + 1;
}

/* Line of a byte offset, for reader errors that have no mark. */
static int offset_line(const char *text, size_t len, size_t off)
{
    size_t line = 0;
    for (size_t i = 0; i < off && i < len; i++)
        if (text[i] == '\n')
            line++;
    return mark_line(line);
}

/* Attach a finished node to the tree; takes ownership of node, on error too. */
static cohort_status yp_add(yparse *p, ynode *node)
{
    if (p->depth == 0) {
        if (p->root) {
            ynode_free(node);
            return yp_fail(p, node->line, "more than one root value");
        }
        p->root = node;
        return COHORT_OK;
    }
    ynode *top = p->stack[p->depth - 1];
    if (top->type == YNODE_SEQ) {
        if (ynode_append(top, NULL, node)) {
            ynode_free(node);
            return yp_nomem(p);
        }
        return COHORT_OK;
    }
    ynode *key = p->pending[p->depth - 1];
    if (!key) {
        if (node->type != YNODE_SCALAR) {
            int line = node->line;
            ynode_free(node);
            return yp_fail(p, line, "a key must be plain text, not a map or a list");
        }
        if (top->n >= YTREE_MAX_MAP_KEYS) {
            int line = node->line;
            ynode_free(node);
            return yp_fail(p, line, "a map with more than %d keys; no plan needs that many",
                           YTREE_MAX_MAP_KEYS);
        }
        int i = ymap_find(top, node->str);
        if (i >= 0) {
            cohort_status st = yp_fail(p, node->line, "duplicate key '%.200s' (first at line %d)",
                                       node->str, top->keys[i]->line);
            ynode_free(node);
            return st;
        }
        p->pending[p->depth - 1] = node;
        return COHORT_OK;
    }
    if (ynode_append(top, key, node)) {
        ynode_free(node);
        return yp_nomem(p);
    }
    p->pending[p->depth - 1] = NULL;
    return COHORT_OK;
}

static cohort_status yp_event(yparse *p, const yaml_event_t *ev, int *docs, int *done)
{
    int line = mark_line(ev->start_mark.line);
    const yaml_char_t *anchor = NULL;
    ynode *node = NULL;
    switch (ev->type) {
    case YAML_NO_EVENT:
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
        return COHORT_OK;
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return COHORT_OK;
    case YAML_DOCUMENT_START_EVENT:
        if (++*docs > 1)
            return yp_fail(p, line, "more than one YAML document; a plan is one document");
        return COHORT_OK;
    case YAML_ALIAS_EVENT:
        return yp_fail(p, line, "aliases (*%.100s) are not supported; use 'defaults' to share settings",
                       (const char *)ev->data.alias.anchor);
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        if (p->depth == 0)
            return cohort_fail(p->err, COHORT_ERR_INTERNAL, "%s: unbalanced YAML events", p->name);
        ynode *done_node = p->stack[--p->depth];
        p->stack[p->depth] = NULL;
        if (p->pending[p->depth]) { /* cannot happen with libyaml; be safe */
            ynode_free(p->pending[p->depth]);
            p->pending[p->depth] = NULL;
        }
        return yp_add(p, done_node);
    }
    }
    if (anchor)
        return yp_fail(p, line, "anchors (&%.100s) are not supported; use 'defaults' to share settings",
                       (const char *)anchor);
    if (++p->nodes > p->max_nodes)
        return yp_fail(p, line, "too many values (more than %zu)", p->max_nodes);
    if (ev->type == YAML_SCALAR_EVENT) {
        const char *s = (const char *)ev->data.scalar.value;
        size_t len = ev->data.scalar.length;
        if (memchr(s, 0, len))
            return yp_fail(p, line, "a value contains a NUL character");
        node = ynode_scalar_n(s, len, line, p->origin);
        if (!node)
            return yp_nomem(p);
        node->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        return yp_add(p, node);
    }
    if (p->depth >= YTREE_MAX_DEPTH)
        return yp_fail(p, line, "values nested deeper than %d levels", YTREE_MAX_DEPTH);
    node = ynode_new(ev->type == YAML_SEQUENCE_START_EVENT ? YNODE_SEQ : YNODE_MAP, line,
                     p->origin);
    if (!node)
        return yp_nomem(p);
    p->pending[p->depth] = NULL;
    p->stack[p->depth++] = node;
    return COHORT_OK;
}

/* The 1-based column (in bytes) of the tab that made libyaml stop on the
 * 0-based line line0: the byte at `index`, or one in the line's indentation;
 * 0 when there is none. libyaml's own words ("found character that cannot
 * start any token") do not say that the character is a tab. */
static int tab_column(const char *text, size_t len, size_t line0, size_t index)
{
    if (index < len && text[index] == '\t') {
        size_t s = index;
        while (s > 0 && text[s - 1] != '\n')
            s--;
        return index - s >= 0x7ffffffe ? 0 : (int)(index - s) + 1;
    }
    size_t s = 0;
    for (size_t l = 0; l < line0 && s < len; s++)
        if (text[s] == '\n')
            l++;
    for (size_t i = s; i < len && (text[i] == ' ' || text[i] == '\t'); i++)
        if (text[i] == '\t')
            return i - s >= 0x7ffffffe ? 0 : (int)(i - s) + 1;
    return 0;
}

static cohort_status yp_syntax_error(yparse *p, const yaml_parser_t *yp, const char *text,
                                     size_t len)
{
    if (yp->error == YAML_MEMORY_ERROR)
        return yp_nomem(p);
    const char *problem = yp->problem ? yp->problem : "invalid YAML";
    int line, tab_col;
    if (yp->error != YAML_READER_ERROR &&
        (tab_col = tab_column(text, len, yp->problem_mark.line, yp->problem_mark.index)) > 0)
        return yp_fail(p, mark_line(yp->problem_mark.line),
                       "a tab at line %d, column %d: YAML forbids tabs for indentation; "
                       "indent with spaces",
                       mark_line(yp->problem_mark.line), tab_col);
    if (yp->error == YAML_READER_ERROR)
        line = offset_line(text, len, yp->problem_offset);
    else
        line = mark_line(yp->problem_mark.line);
    /* libyaml's words for a line indented wrongly (or a key without ": "),
     * which do not say so. */
    static const char *const indent_problems[] = {
        "did not find expected '-' indicator", "did not find expected key",
        "mapping values are not allowed in this context", "could not find expected ':'"};
    const char *hint = "";
    for (size_t i = 0; i < sizeof indent_problems / sizeof indent_problems[0]; i++)
        if (strcmp(problem, indent_problems[i]) == 0)
            hint = "; check the indentation: the keys of one map, and the '- ' items of one "
                   "list, start in one column, and a key is followed by ': ' (a value holding "
                   "': ' needs quotes)";
    if (yp->context)
        return yp_fail(p, line, "%s (%s at line %d)%s", problem, yp->context,
                       mark_line(yp->context_mark.line), hint);
    return yp_fail(p, line, "%s%s", problem, hint);
}

cohort_status ytree_parse(const char *text, size_t len, const char *name, const char *origin,
                          size_t max_nodes, ynode **out, cohort_error *err)
{
    *out = NULL;
    yparse p;
    memset(&p, 0, sizeof p);
    p.name = name ? name : "<plan>";
    p.origin = origin;
    p.err = err;
    p.max_nodes = max_nodes;

    yaml_parser_t yp;
    if (!yaml_parser_initialize(&yp))
        return yp_nomem(&p);
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    cohort_status st = COHORT_OK;
    int docs = 0, done = 0;
    while (!done && st == COHORT_OK) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&yp, &ev)) {
            st = yp_syntax_error(&p, &yp, text, len);
            break;
        }
        st = yp_event(&p, &ev, &docs, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&yp);
    for (int i = 0; i < p.depth; i++) {
        ynode_free(p.pending[i]);
        ynode_free(p.stack[i]);
    }
    if (st != COHORT_OK) {
        ynode_free(p.root);
        return st;
    }
    *out = p.root;
    return COHORT_OK;
}

/* ---- typed values ---------------------------------------------------- */

cohort_status ynode_fail(const yctx *c, const ynode *n, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->failed && n)
        *c->failed = (yfailed){n, n->line, n->inherited, n->origin};
    if (n && n->origin)
        return cohort_fail(c->err, COHORT_ERR_INPUT, "--set %s: %s", n->origin, msg);
    return cohort_fail(c->err, COHORT_ERR_INPUT, "%s:%d: %s", c->file, n && n->line ? n->line : 1,
                       msg);
}

cohort_status ynode_nomem(const yctx *c)
{
    return cohort_fail(c->err, COHORT_ERR_NOMEM, "%s: out of memory reading the plan", c->file);
}

int ynode_is_null(const ynode *n)
{
    return n->type == YNODE_SCALAR && n->plain &&
           (n->str[0] == 0 || strcmp(n->str, "~") == 0 || strcmp(n->str, "null") == 0 ||
            strcmp(n->str, "Null") == 0 || strcmp(n->str, "NULL") == 0);
}

const char *ynode_describe(const ynode *n, char *buf, size_t size)
{
    if (n->type == YNODE_MAP)
        snprintf(buf, size, "a map");
    else if (n->type == YNODE_SEQ)
        snprintf(buf, size, "a list");
    else if (n->plain && n->str[0] == 0)
        snprintf(buf, size, "nothing");
    else if (strlen(n->str) > 60)
        snprintf(buf, size, "'%.57s...'", n->str);
    else
        snprintf(buf, size, "'%s'", n->str);
    return buf;
}

/* Parse a whole decimal integer (optional sign); 0 on success. */
static int parse_ll(const char *s, long long *out)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

cohort_status yget_int(const yctx *c, const ynode *n, const char *what, long long lo,
                       long long hi, long long *out)
{
    char got[80];
    long long v = 0;
    int ok = n->type == YNODE_SCALAR && parse_ll(n->str, &v) == 0;
    if (ok && v >= lo && v <= hi) {
        *out = v;
        return COHORT_OK;
    }
    ynode_describe(n, got, sizeof got);
    if (ok && v > hi)
        return ynode_fail(c, n, "%s must be at most %lld, got %s", what, hi, got);
    if (lo == 1)
        return ynode_fail(c, n, "%s must be a positive integer, got %s", what, got);
    if (lo == 0)
        return ynode_fail(c, n, "%s must be a non-negative integer, got %s", what, got);
    return ynode_fail(c, n, "%s must be an integer from %lld to %lld, got %s", what, lo, hi, got);
}

cohort_status yget_u64(const yctx *c, const ynode *n, const char *what, unsigned long long *out)
{
    char got[80];
    int ok = n->type == YNODE_SCALAR && n->str[0] != 0;
    const char *p = n->str;
    if (ok && *p == '+')
        p++;
    ok = ok && *p != 0;
    for (const char *q = p; ok && *q; q++)
        ok = *q >= '0' && *q <= '9';
    if (ok) {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (!errno && !*end) {
            *out = v;
            return COHORT_OK;
        }
        return ynode_fail(c, n, "%s must be at most 18446744073709551615, got %s", what,
                          ynode_describe(n, got, sizeof got));
    }
    return ynode_fail(c, n, "%s must be a non-negative integer, got %s", what,
                      ynode_describe(n, got, sizeof got));
}

cohort_status yget_num(const yctx *c, const ynode *n, const char *what, yrange range,
                       int as_float, double *out)
{
    char got[80];
    double v = 0;
    int ok = 0;
    if (n->type == YNODE_SCALAR && n->str[0] && n->str[0] != ' ') {
        errno = 0;
        char *end;
        v = str_to_double(n->str, &end);
        ok = !*end && isfinite(v);
    }
    if (ok && as_float) {
        float f = (float)v;
        ok = isfinite(f);
        v = (double)f;
    }
    /* Training flushes denormals to zero (fit.c), so a positive float below
     * the smallest normal would act as 0: a clip off, an epsilon of 0. */
    int tiny = 0;
    if (ok) {
        switch (range) {
        case YR_POSITIVE:
            ok = v > 0 && !(tiny = as_float && v < FLT_MIN);
            break;
        case YR_NONNEG: ok = v >= 0; break;
        case YR_UNIT: ok = v >= 0 && v < 1; break;
        case YR_UNIT_ALL: ok = v >= 0 && v <= 1; break;
        }
    }
    if (ok) {
        *out = v == 0 ? 0.0 : v; /* no -0 */
        return COHORT_OK;
    }
    ynode_describe(n, got, sizeof got);
    if (tiny)
        return ynode_fail(c, n, YNUM_TINY_MSG, what, got);
    switch (range) {
    case YR_POSITIVE:
        return ynode_fail(c, n, "%s must be a positive number, got %s", what, got);
    case YR_NONNEG:
        return ynode_fail(c, n, "%s must be a number >= 0, got %s", what, got);
    case YR_UNIT_ALL:
        return ynode_fail(c, n, "%s must be a number in [0, 1], got %s", what, got);
    case YR_UNIT:
        break;
    }
    return ynode_fail(c, n, "%s must be a number in [0, 1), got %s", what, got);
}

cohort_status yget_bool(const yctx *c, const ynode *n, const char *what, int *out)
{
    if (n->type == YNODE_SCALAR) {
        if (strcasecmp(n->str, "true") == 0 || strcasecmp(n->str, "yes") == 0) {
            *out = 1;
            return COHORT_OK;
        }
        if (strcasecmp(n->str, "false") == 0 || strcasecmp(n->str, "no") == 0) {
            *out = 0;
            return COHORT_OK;
        }
    }
    char got[80];
    return ynode_fail(c, n, "%s must be true or false, got %s", what,
                      ynode_describe(n, got, sizeof got));
}

cohort_status yget_str(const yctx *c, const ynode *n, const char *what, char *buf, size_t size)
{
    char got[80];
    if (n->type != YNODE_SCALAR || n->str[0] == 0)
        return ynode_fail(c, n, "%s must be text, got %s", what,
                          ynode_describe(n, got, sizeof got));
    if (str_copy(buf, size, n->str))
        return ynode_fail(c, n, "%s is too long (at most %zu characters)", what, size - 1);
    return COHORT_OK;
}

static cohort_status enum_get(const yctx *c, const ynode *n, const char *what,
                              const char *const *names, int count, int anycase, int *out)
{
    if (n->type == YNODE_SCALAR)
        for (int i = 0; i < count; i++)
            if ((anycase ? strcasecmp(n->str, names[i]) : strcmp(n->str, names[i])) == 0) {
                *out = i;
                return COHORT_OK;
            }
    char list[512] = "", got[80];
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    ynode_describe(n, got, sizeof got);
    const char *near = n->type == YNODE_SCALAR ? ysuggest(n->str, names, count) : NULL;
    if (near)
        return ynode_fail(c, n, "%s must be one of %s, got %s (did you mean '%s'?)", what, list,
                          got, near);
    return ynode_fail(c, n, "%s must be one of %s, got %s", what, list, got);
}

cohort_status yget_enum(const yctx *c, const ynode *n, const char *what,
                        const char *const *names, int count, int *out)
{
    return enum_get(c, n, what, names, count, 0, out);
}

cohort_status yget_enum_anycase(const yctx *c, const ynode *n, const char *what,
                                const char *const *names, int count, int *out)
{
    return enum_get(c, n, what, names, count, 1, out);
}

/* Optimal string alignment distance (edits and swaps of neighbours). */
static size_t edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAXLEN || lb > MAXLEN)
        return SIZE_MAX;
    size_t d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* a and b are equal but for case and underscores ("MaxPooling2D" and
 * "max_pooling2d", "SAME" and "same"): Keras's class names of cohort's words. */
static int same_but_case(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_')
            a++;
        while (*b == '_')
            b++;
        if (!*a || !*b)
            return !*a && !*b;
        if (tolower((unsigned char)*a++) != tolower((unsigned char)*b++))
            return 0;
    }
}

const char *ysuggest(const char *word, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (same_but_case(word, names[i]))
            return names[i];
    size_t len = strlen(word);
    size_t limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (int i = 0; i < count; i++) {
        size_t d = edit_distance(word, names[i]);
        /* A long enough start of a name ("restore_best") is as good as one typo. */
        if (len >= 4 && strncmp(word, names[i], len) == 0 && d > 1)
            d = 1;
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    if (!best || best_d > limit || best_d >= len)
        return NULL;
    return best;
}
