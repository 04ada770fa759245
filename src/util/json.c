#include "util/json.h"
#include "util/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_NUMBER 512

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
} parser;

/* Report "line L, column C: what" for byte offset at; always returns -1. */
static int fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t at, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return -1;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %zu, column %zu: %s", line, col, what);
    return -1;
}

/* Describe the byte at pos for a message: "'x'", "byte 0x01" or "end of input". */
static const char *describe(const parser *p, size_t pos, char *buf, size_t n)
{
    if (pos >= p->len)
        snprintf(buf, n, "end of input");
    else {
        unsigned char c = (unsigned char)p->s[pos];
        if (c == '\'')
            snprintf(buf, n, "\"'\"");
        else if (c >= 0x21 && c < 0x7f)
            snprintf(buf, n, "'%c'", c);
        else
            snprintf(buf, n, "byte 0x%02x", c);
    }
    return buf;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static void free_contents(json_value *v)
{
    if (v->type == JSON_STR)
        free(v->str);
    if (v->type == JSON_ARR || v->type == JSON_OBJ) {
        for (size_t i = 0; i < v->n; i++) {
            free_contents(&v->items[i]);
            if (v->keys)
                free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

/* ---- UTF-8 ------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        cp = c & 0x1fu;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        cp = c & 0x0fu;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        cp = c & 0x07u;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

int json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

static size_t utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- strings ---------------------------------------------------------- */

/* Four hex digits at pos into *cp; -1 with a message when they are not. */
static int read_hex4(parser *p, size_t pos, uint32_t *cp)
{
    uint32_t v = 0;
    for (size_t i = 0; i < 4; i++) {
        if (pos + i >= p->len)
            return fail_at(p, pos - 2, "\\u escape needs four hex digits");
        char c = p->s[pos + i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return fail_at(p, pos - 2, "\\u escape needs four hex digits");
        v = (v << 4) | d;
    }
    *cp = v;
    return 0;
}

/* Parse the string literal at p->pos (a '"') into a malloc'd C string. */
static int parse_string(parser *p, char **out, size_t *out_len)
{
    size_t start = p->pos;
    size_t end = start + 1;
    while (end < p->len && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len)
        return fail_at(p, start, "unterminated string");
    /* Escapes only shrink: the raw length bounds the decoded one. */
    char *buf = malloc(end - start);
    if (!buf)
        return fail_at(p, start, "out of memory");
    size_t o = 0, i = start + 1;
    while (i < end) {
        unsigned char c = (unsigned char)p->s[i];
        if (c < 0x20) {
            free(buf);
            return fail_at(p, i, "control character 0x%02x in a string (escape it)", c);
        }
        if (c >= 0x80) {
            size_t k = utf8_seq((const unsigned char *)p->s + i, end - i);
            if (k == 0) {
                free(buf);
                return fail_at(p, i, "invalid UTF-8 in a string");
            }
            memcpy(buf + o, p->s + i, k);
            o += k;
            i += k;
            continue;
        }
        if (c != '\\') {
            buf[o++] = (char)c;
            i++;
            continue;
        }
        char e = p->s[i + 1];
        i += 2;
        switch (e) {
        case '"': buf[o++] = '"'; break;
        case '\\': buf[o++] = '\\'; break;
        case '/': buf[o++] = '/'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (read_hex4(p, i, &cp)) {
                free(buf);
                return -1;
            }
            i += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(buf);
                return fail_at(p, i - 6, "unpaired low surrogate \\u%04X", (unsigned)cp);
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo = 0;
                if (i + 1 >= end || p->s[i] != '\\' || p->s[i + 1] != 'u') {
                    free(buf);
                    return fail_at(p, i - 6, "unpaired high surrogate \\u%04X", (unsigned)cp);
                }
                if (read_hex4(p, i + 2, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo < 0xdc00 || lo > 0xdfff) {
                    free(buf);
                    return fail_at(p, i - 6, "unpaired high surrogate \\u%04X", (unsigned)cp);
                }
                i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                free(buf);
                return fail_at(p, i - 6, "\\u0000 in a string is not supported");
            }
            o += utf8_put(buf + o, cp);
            break;
        }
        default: {
            char what[32];
            free(buf);
            return fail_at(p, i - 2, "invalid escape '\\' followed by %s",
                           describe(p, i - 1, what, sizeof what));
        }
        }
    }
    buf[o] = 0;
    p->pos = end + 1;
    *out = buf;
    if (out_len)
        *out_len = o;
    return 0;
}

/* ---- numbers and literals --------------------------------------------- */

static int is_digit(const parser *p, size_t i) { return i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; }

static int parse_number(parser *p, json_value *v)
{
    size_t start = p->pos, i = start;
    if (i < p->len && p->s[i] == '-')
        i++;
    if (!is_digit(p, i))
        return fail_at(p, start, "invalid number: expected a digit");
    if (p->s[i] == '0') {
        i++;
        if (is_digit(p, i))
            return fail_at(p, start, "invalid number: leading zero");
    } else {
        while (is_digit(p, i))
            i++;
    }
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (!is_digit(p, i))
            return fail_at(p, start, "invalid number: expected a digit after '.'");
        while (is_digit(p, i))
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (!is_digit(p, i))
            return fail_at(p, start, "invalid number: expected a digit in the exponent");
        while (is_digit(p, i))
            i++;
    }
    size_t n = i - start;
    if (n > JSON_MAX_NUMBER)
        return fail_at(p, start, "number is longer than %d characters", JSON_MAX_NUMBER);
    /* A NUL-terminated copy for strtod (the text need not end there), read
     * in the C locale whatever the host program's. */
    char tok[JSON_MAX_NUMBER + 1];
    memcpy(tok, p->s + start, n);
    tok[n] = 0;
    char *endp;
    double d = str_to_double(tok, &endp);
    if (endp != tok + n)
        return fail_at(p, start, "invalid number");
    if (isinf(d))
        return fail_at(p, start, "number out of range");
    v->type = JSON_NUM;
    v->num = d;
    p->pos = i;
    return 0;
}

static int parse_literal(parser *p, json_value *v)
{
    static const struct { const char *word; json_type type; int b; } lit[] = {
        {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t k = 0; k < 3; k++) {
        size_t n = strlen(lit[k].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, lit[k].word, n) == 0) {
            v->type = lit[k].type;
            v->boolean = lit[k].b;
            p->pos += n;
            return 0;
        }
    }
    return fail_at(p, p->pos, "invalid literal (expected true, false or null)");
}

/* ---- arrays and objects ----------------------------------------------- */

typedef struct key_pos { const char *key; size_t pos; } key_pos;

static int key_pos_cmp(const void *a, const void *b)
{
    const key_pos *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Grow v's items (and keys for objects) to hold at least one more. */
static int grow(parser *p, json_value *v, size_t *cap, size_t **kpos, size_t at)
{
    if (v->n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    if (nc > SIZE_MAX / sizeof(json_value))
        return fail_at(p, at, "out of memory");
    json_value *items = realloc(v->items, nc * sizeof *items);
    if (!items)
        return fail_at(p, at, "out of memory");
    v->items = items;
    if (v->type == JSON_OBJ) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (!keys)
            return fail_at(p, at, "out of memory");
        v->keys = keys;
        size_t *kp = realloc(*kpos, nc * sizeof *kp);
        if (!kp)
            return fail_at(p, at, "out of memory");
        *kpos = kp;
    }
    *cap = nc;
    return 0;
}

static int check_duplicates(parser *p, const json_value *v, const size_t *kpos)
{
    if (v->n < 2)
        return 0;
    key_pos *kp = malloc(v->n * sizeof *kp);
    if (!kp)
        return fail_at(p, kpos[0], "out of memory");
    for (size_t i = 0; i < v->n; i++) {
        kp[i].key = v->keys[i];
        kp[i].pos = kpos[i];
    }
    qsort(kp, v->n, sizeof *kp, key_pos_cmp);
    int rc = 0;
    for (size_t i = 1; i < v->n; i++) {
        if (strcmp(kp[i - 1].key, kp[i].key) == 0) {
            rc = fail_at(p, kp[i].pos, "duplicate key \"%.64s\"", kp[i].key);
            break;
        }
    }
    free(kp);
    return rc;
}

static int parse_value(parser *p, json_value *v, int depth);

static int parse_container(parser *p, json_value *v, int depth)
{
    int is_obj = p->s[p->pos] == '{';
    char close = is_obj ? '}' : ']';
    char what[32];
    if (depth > JSON_MAX_DEPTH)
        return fail_at(p, p->pos, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    v->type = is_obj ? JSON_OBJ : JSON_ARR;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    size_t cap = 0, *kpos = NULL;
    for (;;) {
        skip_ws(p);
        if (grow(p, v, &cap, &kpos, p->pos))
            goto fail;
        char *key = NULL;
        size_t key_at = p->pos;
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                fail_at(p, p->pos, "expected a string key, found %s",
                        describe(p, p->pos, what, sizeof what));
                goto fail;
            }
            if (parse_string(p, &key, NULL))
                goto fail;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                fail_at(p, p->pos, "expected ':' after a key, found %s",
                        describe(p, p->pos, what, sizeof what));
                free(key);
                goto fail;
            }
            p->pos++;
        }
        json_value item;
        memset(&item, 0, sizeof item);
        if (parse_value(p, &item, depth)) {
            free(key);
            goto fail;
        }
        v->items[v->n] = item;
        if (is_obj) {
            v->keys[v->n] = key;
            kpos[v->n] = key_at;
        }
        v->n++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        fail_at(p, p->pos, "expected ',' or '%c' in %s, found %s", close,
                is_obj ? "an object" : "an array", describe(p, p->pos, what, sizeof what));
        goto fail;
    }
    if (is_obj && check_duplicates(p, v, kpos))
        goto fail;
    free(kpos);
    return 0;
fail:
    free(kpos);
    free_contents(v);
    return -1;
}

static int parse_value(parser *p, json_value *v, int depth)
{
    char what[32];
    skip_ws(p);
    if (p->pos >= p->len)
        return fail_at(p, p->pos, "expected a value, found end of input");
    char c = p->s[p->pos];
    if (c == '{' || c == '[')
        return parse_container(p, v, depth + 1);
    if (c == '"') {
        if (parse_string(p, &v->str, &v->n))
            return -1;
        v->type = JSON_STR;
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p, v);
    if (c == 't' || c == 'f' || c == 'n')
        return parse_literal(p, v);
    return fail_at(p, p->pos, "expected a value, found %s", describe(p, p->pos, what, sizeof what));
}

json_value *json_parse(const char *text, size_t len, char *errbuf, size_t errlen)
{
    parser p = {text, len, 0, errbuf, errlen};
    if (errbuf && errlen)
        errbuf[0] = 0;
    if (!text) {
        p.len = 0;
        p.s = "";
    }
    json_value *v = calloc(1, sizeof *v);
    if (!v) {
        fail_at(&p, 0, "out of memory");
        return NULL;
    }
    if (parse_value(&p, v, 0)) {
        free(v);
        return NULL;
    }
    skip_ws(&p);
    if (p.pos < p.len) {
        char what[32];
        fail_at(&p, p.pos, "unexpected %s after the JSON value", describe(&p, p.pos, what, sizeof what));
        json_free(v);
        return NULL;
    }
    return v;
}

void json_free(json_value *v)
{
    if (!v)
        return;
    free_contents(v);
    free(v);
}

const json_value *json_get(const json_value *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJ || !key)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

const json_value *json_at(const json_value *arr, size_t i)
{
    if (!arr || arr->type != JSON_ARR || i >= arr->n)
        return NULL;
    return &arr->items[i];
}

double json_num(const json_value *v, double fallback)
{
    return v && v->type == JSON_NUM ? v->num : fallback;
}

const char *json_str(const json_value *v, const char *fallback)
{
    return v && v->type == JSON_STR ? v->str : fallback;
}

int json_bool(const json_value *v, int fallback)
{
    return v && v->type == JSON_BOOL ? v->boolean : fallback;
}

int json_equal(const json_value *a, const json_value *b)
{
    if (!a || !b || a->type != b->type)
        return a == b;
    switch (a->type) {
    case JSON_NULL: return 1;
    case JSON_BOOL: return a->boolean == b->boolean;
    case JSON_NUM: return a->num == b->num;
    case JSON_STR: return a->n == b->n && memcmp(a->str, b->str, a->n) == 0;
    case JSON_ARR:
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            if (!json_equal(&a->items[i], &b->items[i]))
                return 0;
        return 1;
    case JSON_OBJ:
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            if (!json_equal(&a->items[i], json_get(b, a->keys[i])))
                return 0;
        return 1;
    }
    return 0;
}
