/*
 * json: a small strict RFC 8259 reader into a tree of json_value, for
 * safetensors headers and results.json. Owns the trees it parses; every
 * limit (depth, number length) is checked, and it never recurses past 64.
 */
#ifndef COHORT_JSON_H
#define COHORT_JSON_H

#include <stddef.h>

#define JSON_MAX_DEPTH 64

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    int boolean;       /* JSON_BOOL: 0 or 1 */
    double num;        /* JSON_NUM */
    char *str;         /* JSON_STR: UTF-8, NUL-terminated */
    size_t n;          /* items in ARR/OBJ; JSON_STR: bytes in str */
    json_value *items; /* ARR/OBJ values, n of them */
    char **keys;       /* OBJ keys, n of them, in the order of the text */
};

/*
 * Parse len bytes of text (need not be NUL-terminated) as one JSON value.
 * Returns the tree (free it with json_free), or NULL on error with errbuf
 * (may be NULL) set to "line L, column C: what" (column counts bytes).
 * Strict: no trailing garbage, no comments, no NaN, no leading zeros, no
 * raw control characters or invalid UTF-8 in strings, no lone surrogates,
 * no duplicate keys. Also refused: \u0000 (strings are C strings), numbers
 * over 512 characters or beyond the range of a double, nesting deeper than
 * JSON_MAX_DEPTH arrays and objects.
 */
json_value *json_parse(const char *text, size_t len, char *errbuf, size_t errlen);

/* Free a tree from json_parse. NULL is a no-op. */
void json_free(json_value *v);
/* Deep equality: same types, numbers, strings, items; objects regardless of
 * key order. NULL equals only NULL. */
int json_equal(const json_value *a, const json_value *b);

/* The value of key in obj (the first if repeated), or NULL when obj is
 * NULL, not an object, or lacks the key. */
const json_value *json_get(const json_value *obj, const char *key);

/* Item i of arr, or NULL when arr is NULL, not an array or too short. */
const json_value *json_at(const json_value *arr, size_t i);

/* v's number, or fallback when v is NULL or not a number. */
double json_num(const json_value *v, double fallback);

/* v's string (owned by the tree), or fallback when v is NULL or not a string. */
const char *json_str(const json_value *v, const char *fallback);

/* v's boolean (0 or 1), or fallback when v is NULL or not a boolean. */
int json_bool(const json_value *v, int fallback);

/* 1 when the n bytes at s are valid UTF-8 (no overlong forms, no
 * surrogates, nothing past U+10FFFF), else 0. */
int json_utf8_valid(const char *s, size_t n);

#endif
