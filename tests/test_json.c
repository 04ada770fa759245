/* Tests of the JSON reader: good inputs and their trees, bad inputs and
 * their messages (line, column, what). */
#include "check.h"
#include "util/json.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

static json_value *parse(const char *s) { return json_parse(s, strlen(s), NULL, 0); }

/* Parse s, expecting failure with a message that contains want. */
static void check_bad(const char *s, size_t len, const char *want)
{
    char err[256] = "untouched";
    json_value *v = json_parse(s, len, err, sizeof err);
    CHECK_MSG(v == NULL, "parsed %s", s);
    json_free(v);
    CHECK_CONTAINS(err, want);
}

static void test_scalars(void)
{
    json_value *v = parse("  true ");
    CHECK(v && v->type == JSON_BOOL && v->boolean == 1);
    CHECK(json_bool(v, -1) == 1);
    json_free(v);
    v = parse("false");
    CHECK(v && v->type == JSON_BOOL && v->boolean == 0);
    json_free(v);
    v = parse("null");
    CHECK(v && v->type == JSON_NULL);
    CHECK(json_bool(v, -1) == -1);
    json_free(v);

    static const struct { const char *text; double want; } nums[] = {
        {"0", 0.0},         {"-0", -0.0},     {"1.5e3", 1500.0},     {"-1E-2", -0.01},
        {"123456789", 123456789.0},           {"1e308", 1e308},      {"2.5E+2", 250.0},
        {"0.125", 0.125},   {"1e-400", 0.0},  {"9007199254740993", 9007199254740992.0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        v = parse(nums[i].text);
        CHECK_MSG(v && v->type == JSON_NUM && v->num == nums[i].want, "%s", nums[i].text);
        json_free(v);
    }
    v = parse("-0");
    CHECK(v && signbit(v->num));
    json_free(v);

    /* The length bounds the text: no NUL needed, nothing past len read. */
    v = json_parse("123456", 3, NULL, 0);
    CHECK(v && v->num == 123.0);
    json_free(v);
    v = json_parse("\"ab\"cd", 4, NULL, 0);
    CHECK(v && v->type == JSON_STR && strcmp(v->str, "ab") == 0 && v->n == 2);
    json_free(v);
}

static void test_strings(void)
{
    json_value *v = parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t\"");
    CHECK(v && v->type == JSON_STR && strcmp(v->str, "q\" b\\ s/ \b\f\n\r\t") == 0);
    json_free(v);
    /* U+00E9 is C3 A9, U+20AC is E2 82 AC, U+1F600 (D83D DE00) is F0 9F 98 80. */
    v = parse("\"\\u00e9\\u20AC\\ud83d\\ude00\\u0041\"");
    CHECK(v && strcmp(v->str, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "A") == 0);
    CHECK(v && v->n == 10);
    json_free(v);
    /* Raw UTF-8 passes through unchanged. */
    v = parse("\"na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80\"");
    CHECK(v && strcmp(v->str, "na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80") == 0);
    json_free(v);
    v = parse("\"\"");
    CHECK(v && v->type == JSON_STR && v->str[0] == 0 && v->n == 0);
    CHECK(strcmp(json_str(v, "fb"), "") == 0);
    json_free(v);
    CHECK(json_utf8_valid("abc\xc3\xa9", 5) == 1);
    CHECK(json_utf8_valid("\xc3", 1) == 0);
    CHECK(json_utf8_valid("\xed\xa0\x80", 3) == 0);
    CHECK(json_utf8_valid("\xf4\x90\x80\x80", 4) == 0);
}

static void test_containers(void)
{
    const char *text = "{\"name\": \"m1\", \"lr\": 0.001, \"layers\": [128, 10],\n"
                       " \"nested\": {\"a\": [], \"b\": {}}, \"ok\": true, \"none\": null}";
    json_value *v = parse(text);
    CHECK(v && v->type == JSON_OBJ && v->n == 6);
    if (!v)
        return;
    CHECK(strcmp(v->keys[0], "name") == 0 && strcmp(v->keys[5], "none") == 0);
    CHECK(strcmp(json_str(json_get(v, "name"), "?"), "m1") == 0);
    CHECK(json_num(json_get(v, "lr"), -1) == 0.001);
    const json_value *layers = json_get(v, "layers");
    CHECK(layers && layers->type == JSON_ARR && layers->n == 2);
    CHECK(json_num(json_at(layers, 0), -1) == 128 && json_num(json_at(layers, 1), -1) == 10);
    CHECK(json_at(layers, 2) == NULL);
    CHECK(json_at(v, 0) == NULL); /* not an array */
    const json_value *nested = json_get(v, "nested");
    CHECK(json_get(nested, "a") && json_get(nested, "a")->type == JSON_ARR && json_get(nested, "a")->n == 0);
    CHECK(json_get(nested, "b") && json_get(nested, "b")->type == JSON_OBJ && json_get(nested, "b")->n == 0);
    CHECK(json_bool(json_get(v, "ok"), 0) == 1);
    CHECK(json_get(v, "none") && json_get(v, "none")->type == JSON_NULL);
    CHECK(json_get(v, "missing") == NULL);
    CHECK(json_get(layers, "name") == NULL); /* not an object */
    CHECK(json_get(NULL, "x") == NULL && json_at(NULL, 0) == NULL);
    CHECK(json_num(json_get(v, "name"), 7.5) == 7.5);
    CHECK(strcmp(json_str(json_get(v, "lr"), "fb"), "fb") == 0);
    CHECK(json_str(NULL, NULL) == NULL && json_num(NULL, 2) == 2);
    json_free(v);
    json_free(NULL);

    /* Many items: the arrays grow past their first capacity. */
    char big[8192];
    size_t o = 0;
    o += (size_t)snprintf(big + o, sizeof big - o, "{");
    for (int i = 0; i < 500; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"k%d\":[%d]", i ? "," : "", i, i);
    snprintf(big + o, sizeof big - o, "}");
    v = parse(big);
    CHECK(v && v->n == 500);
    CHECK(json_num(json_at(json_get(v, "k499"), 0), -1) == 499);
    CHECK(json_num(json_at(json_get(v, "k0"), 0), -1) == 0);
    json_free(v);
}

static void test_depth(void)
{
    char deep[300];
    for (int d = 64; d <= 65; d++) {
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        deep[2 * d] = 0;
        json_value *v = parse(deep);
        if (d == 64)
            CHECK(v != NULL);
        else
            CHECK(v == NULL);
        json_free(v);
    }
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    check_bad(deep, 130, "line 1, column 65: nesting deeper than 64 levels");
    /* Far too deep must fail just as cleanly (no recursion past the limit). */
    static char huge[200001];
    memset(huge, '[', sizeof huge - 1);
    check_bad(huge, sizeof huge - 1, "nesting deeper than 64");
    memset(huge, '{', sizeof huge - 1);
    check_bad(huge, sizeof huge - 1, "expected a string key");
    for (size_t i = 0; i + 5 < sizeof huge; i += 5)
        memcpy(huge + i, "{\"a\":", 5);
    check_bad(huge, sizeof huge - 1, "nesting deeper than 64");
}

static void test_bad(void)
{
    check_bad("", 0, "line 1, column 1: expected a value, found end of input");
    check_bad(" \n ", 3, "line 2, column 2: expected a value, found end of input");
    check_bad("[1,]", 4, "line 1, column 4: expected a value, found ']'");
    check_bad("{\"a\":1,}", 8, "line 1, column 8: expected a string key, found '}'");
    check_bad("{1:2}", 5, "line 1, column 2: expected a string key, found '1'");
    check_bad("{\"a\" 1}", 7, "line 1, column 6: expected ':' after a key, found '1'");
    check_bad("[1 2]", 5, "line 1, column 4: expected ',' or ']' in an array, found '2'");
    check_bad("{\"a\":1 \"b\":2}", 13, "line 1, column 8: expected ',' or '}' in an object, found '\"'");
    check_bad("[1,2", 4, "line 1, column 5: expected ',' or ']' in an array, found end of input");
    check_bad("[\n  1,\n  x]", 11, "line 3, column 3: expected a value, found 'x'");
    check_bad("01", 2, "line 1, column 1: invalid number: leading zero");
    check_bad("-01", 3, "invalid number: leading zero");
    check_bad("1.", 2, "invalid number: expected a digit after '.'");
    check_bad(".5", 2, "expected a value, found '.'");
    check_bad("-", 1, "invalid number: expected a digit");
    check_bad("-x", 2, "invalid number: expected a digit");
    check_bad("1e", 2, "expected a digit in the exponent");
    check_bad("1e+", 3, "expected a digit in the exponent");
    check_bad("+1", 2, "expected a value, found '+'");
    check_bad("0x10", 4, "line 1, column 2: unexpected 'x' after the JSON value");
    check_bad("NaN", 3, "expected a value, found 'N'");
    check_bad("Infinity", 8, "expected a value, found 'I'");
    check_bad("-Infinity", 9, "invalid number: expected a digit");
    check_bad("1e400", 5, "number out of range");
    check_bad("-1e400", 6, "number out of range");
    char longnum[600];
    memset(longnum, '1', sizeof longnum);
    check_bad(longnum, sizeof longnum, "number is longer than 512 characters");
    check_bad("tru", 3, "invalid literal");
    check_bad("nul", 3, "invalid literal");
    check_bad("True", 4, "expected a value, found 'T'");
    check_bad("truex", 5, "line 1, column 5: unexpected 'x' after the JSON value");
    check_bad("1 2", 3, "line 1, column 3: unexpected '2' after the JSON value");
    check_bad("[1] x", 5, "unexpected 'x' after the JSON value");
    check_bad("{} {}", 5, "unexpected '{' after the JSON value");
    check_bad("\"abc", 4, "line 1, column 1: unterminated string");
    check_bad("\"abc\\\"", 6, "unterminated string");
    check_bad("\"abc\\", 5, "unterminated string");
    check_bad("\"a\nb\"", 5, "line 1, column 3: control character 0x0a in a string");
    check_bad("\"a\tb\"", 5, "control character 0x09 in a string");
    check_bad("\"\\x\"", 4, "line 1, column 2: invalid escape '\\' followed by 'x'");
    check_bad("\"\\'\"", 4, "invalid escape");
    check_bad("\"\\u12\"", 6, "line 1, column 2: \\u escape needs four hex digits");
    check_bad("\"\\u12g4\"", 8, "\\u escape needs four hex digits");
    check_bad("\"\\u", 3, "unterminated string");
    check_bad("\"\\ud800\"", 8, "line 1, column 2: unpaired high surrogate \\uD800");
    check_bad("\"ab\\udc00\"", 10, "line 1, column 4: unpaired low surrogate \\uDC00");
    check_bad("\"\\ud800\\u0041\"", 14, "unpaired high surrogate \\uD800");
    check_bad("\"\\ud800\\n\"", 10, "unpaired high surrogate");
    check_bad("\"\\ud800\\u00\"", 12, "line 1, column 8: \\u escape needs four hex digits");
    check_bad("\"\\u0000\"", 8, "\\u0000 in a string is not supported");
    check_bad("\"\xff\"", 3, "line 1, column 2: invalid UTF-8 in a string");
    check_bad("\"\xc0\xaf\"", 4, "invalid UTF-8"); /* overlong '/' */
    check_bad("\"\xe0\x80\xaf\"", 5, "invalid UTF-8"); /* overlong, 3 bytes */
    check_bad("\"\xed\xa0\x80\"", 5, "invalid UTF-8"); /* UTF-8 of a surrogate */
    check_bad("\"\xf4\x90\x80\x80\"", 6, "invalid UTF-8"); /* past U+10FFFF */
    check_bad("\"\xc3\"", 3, "invalid UTF-8"); /* cut before the closing quote */
    check_bad("\"a\x80\"", 4, "invalid UTF-8"); /* lone continuation byte */
    check_bad("\xef\xbb\xbf{}", 5, "expected a value, found byte 0xef"); /* BOM */
    check_bad("[1,\x00]", 5, "line 1, column 4: expected a value, found byte 0x00");
    check_bad("{\"a\":1,\"b\":2,\n\"a\":3}", 20, "line 2, column 1: duplicate key \"a\"");
    check_bad("[1] // comment", 14, "unexpected '/' after the JSON value");
    check_bad("[1,/*c*/2]", 10, "expected a value, found '/'");
    check_bad("'a'", 3, "expected a value, found \"'\"");
    check_bad("[\"a\", \"b\" ,, 3]", 15, "line 1, column 12: expected a value, found ','");

    /* Without an error buffer a failure is still just NULL. */
    CHECK(json_parse("[", 1, NULL, 0) == NULL);
    char tiny[8];
    CHECK(json_parse("[", 1, tiny, sizeof tiny) == NULL);
    CHECK(strlen(tiny) == 7);
    /* An errbuf is cleared on success. */
    char err[64] = "stale";
    json_value *v = json_parse("1", 1, err, sizeof err);
    CHECK(v && err[0] == 0);
    json_free(v);
}

/* Switch LC_NUMERIC to a decimal-comma locale: an installed one, else one
 * compiled with localedef into dir (found through LOCPATH). 0 on success. */
static int use_comma_locale(const char *dir)
{
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8"))
        return 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
    if (system(cmd) != 0)
        return -1;
    setenv("LOCPATH", dir, 1);
    return setlocale(LC_NUMERIC, "de_DE.UTF-8") ? 0 : -1;
}

static void test_locale(void)
{
    /* A locale with a decimal comma must not change how numbers read. */
    char dir[] = "/tmp/cohort_json_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    if (use_comma_locale(dir) != 0) {
        printf("test_json: no decimal-comma locale (localedef failed); locale check not run\n");
    } else {
        CHECK(strcmp(localeconv()->decimal_point, ",") == 0);
        json_value *v = parse("[1.5, 2.25e1, -0.125]");
        CHECK(v && json_num(json_at(v, 0), 0) == 1.5 && json_num(json_at(v, 1), 0) == 22.5 &&
              json_num(json_at(v, 2), 0) == -0.125);
        json_free(v);
        setlocale(LC_NUMERIC, "C");
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_scalars();
    test_strings();
    test_containers();
    test_depth();
    test_bad();
    test_locale();
    return check_done("test_json");
}
