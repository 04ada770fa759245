/*
 * test_csv_float: the CSV reader's float parser (data_float_parse) against
 * (float)strtod, numpy's loadtxt then astype(float32), to the bit, on about
 * two million strings: every float's shortest and longer forms, the decimal
 * midpoints between floats and numbers a hair either side of them (where
 * rounding once, as strtof, and twice, as numpy, differ), long mantissas,
 * exponents near float's limits, subnormals, random decimal strings, and the
 * syntax strtod takes or refuses (which must be the same set). Catches: a
 * parser that rounds once (strtof) or a fast path that rounds its inexact
 * double without the midpoint check (the near-midpoint cases), a slack too
 * small, an off-by-one in the exponent or the digit count, a refused or
 * accepted syntax that strtod does not refuse or accept, eight-digits-at-once arithmetic that combines the
 * wrong bytes or takes ':' to '?' (0x3a-0x3f) for digits.
 */
#include "check.h"
#include "data/csv_float.h"
#include "data/data_impl.h"
#include "util/util.h"

#include <ctype.h>
#include <float.h>
#include <stdint.h>

static long compared, mismatches;

/* One string: the same verdict and, when a number, the same bits as
 * (float)strtod on the whole string; and as the start of a CSV line (digits
 * after a comma within the eight bytes the scan reads at a time), a scan that
 * ends at the comma has that value. */
static void same(const char *s)
{
    size_t len = strlen(s);
    char *end;
    float want = (float)strtod(s, &end);
    /* Hexadecimal is strtod's, not numpy's: refused. */
    const char *h = s + (s[0] == '-' || s[0] == '+');
    int hex = h[0] == '0' && (h[1] == 'x' || h[1] == 'X');
    int want_ok = len > 0 && end == s + len && !isspace((unsigned char)s[0]) && !hex;
    float got = 0.0f;
    int ok = data_float_parse(s, s + len, &got);
    compared++;
    int same_value = !want_ok || (isnan(want) && isnan(got)) || memcmp(&want, &got, 4) == 0;
    if (ok != want_ok || !same_value) {
        if (mismatches++ < 20)
            fprintf(stderr, "'%s': parsed %d (%a), strtod %d (%a)\n", s, ok, (double)got, want_ok,
                    (double)want);
    }
    char line[1300];
    if (len + 10 > sizeof line)
        return;
    snprintf(line, sizeof line, "%s,12345678", s);
    const char *stop = data_float_scan(line, line + len + 9, &got);
    if (stop == line + len && !(want_ok && memcmp(&want, &got, 4) == 0)) {
        if (mismatches++ < 20)
            fprintf(stderr, "'%s': scanned to the comma as %a, strtod %d (%a)\n", line,
                    (double)got, want_ok, (double)want);
    }
}

static float float_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Every finite float of a random sample, in the forms a file has. */
static void test_floats(rng_state *r, int n)
{
    char s[128];
    for (int i = 0; i < n; i++) {
        float f = float_of((uint32_t)rng_next(r));
        if (!isfinite(f))
            continue;
        int p = 1 + (int)rng_below(r, 17); /* 1 to 17 significant digits */
        snprintf(s, sizeof s, "%.*g", p, (double)f);
        same(s);
        snprintf(s, sizeof s, "%.*e", p, (double)f);
        same(s);
    }
}

/*
 * The midpoint between a float and the next one up, written exactly (it has
 * a finite decimal expansion) and rounded to 9 to 20 digits either side:
 * the strings where one rounding too many changes the float.
 */
static void test_midpoints(rng_state *r, int n)
{
    char s[1200];
    for (int i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)rng_next(r) & 0x7f7fffffu; /* below inf */
        if (i % 8 == 0)
            bits &= 0x007fffffu; /* subnormal */
        else if (i % 8 == 1)
            bits = (bits & 0x007fffffu) | 0x7f000000u; /* near FLT_MAX */
        float f = float_of(bits);
        double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2; /* exact */
        snprintf(s, sizeof s, "%.*e", 1 + (int)rng_below(r, 900), mid); /* up to exact */
        same(s);
        int p = 9 + (int)rng_below(r, 12);
        snprintf(s, sizeof s, "%.*e", p - 1, mid);
        same(s);
        snprintf(s, sizeof s, "%.*e", p - 1, nextafter(mid, 0)); /* a hair below */
        same(s);
        snprintf(s, sizeof s, "%.*e", p - 1, nextafter(mid, INFINITY)); /* above */
        same(s);
        snprintf(s, sizeof s, "-%.*g", p, mid);
        same(s);
    }
}

/* Decimal strings built digit by digit: 1 to 25 digits, a point anywhere
 * or none, leading zeros, an exponent from -60 to 60 or none. */
static void test_random_decimals(rng_state *r, int n)
{
    char s[128];
    for (int i = 0; i < n; i++) {
        int k = 0;
        if (rng_below(r, 4) == 0)
            s[k++] = rng_below(r, 2) ? '-' : '+';
        int nd = 1 + (int)rng_below(r, 25);
        int point = (int)rng_below(r, (uint64_t)nd + 2) - 1; /* -1: none */
        int zeros = rng_below(r, 4) == 0 ? (int)rng_below(r, 30) : 0;
        for (int z = 0; z < zeros; z++)
            s[k++] = '0';
        for (int d = 0; d < nd; d++) {
            if (d == point)
                s[k++] = '.';
            s[k++] = (char)('0' + rng_below(r, 10));
        }
        if (point == nd)
            s[k++] = '.';
        if (rng_below(r, 2))
            k += snprintf(s + k, sizeof s - (size_t)k, "%s%d", rng_below(r, 2) ? "e" : "E",
                          (int)rng_below(r, 121) - 60);
        s[k] = 0;
        same(s);
    }
}

/* Integers around 2^24, where floats are 2 apart and halves are ties. */
static void test_integers(void)
{
    char s[64];
    for (int64_t v = (1 << 24) - 300; v < (1 << 24) + 3000; v++) {
        snprintf(s, sizeof s, "%lld", (long long)v);
        same(s);
        snprintf(s, sizeof s, "%lld.5", (long long)v);
        same(s);
    }
    for (int64_t v = 1; v < INT64_MAX / 3; v = v * 3 + 1) {
        snprintf(s, sizeof s, "%lld", (long long)v);
        same(s);
    }
}

/* Limits and syntax, one by one. */
static void test_cases(void)
{
    static const char *const cases[] = {
        "0", "-0", "+0", "0.0", "-0.0e5", "00000", "1", "-1", "+1", ".5", "5.", "-.5e-3",
        "1e5", "1E+05", "1e-05", "12345678", "123456789", "1234567890123456789",
        "12345678901234567890", "0.1", "0.3", "3.14159274", "2.7182817", "1e38", "1e39",
        "3.4028234e38", "3.40282347e38", "3.4028235e38", "3.40282357e38", "3.402823567e38",
        "3.40282357e+38", "3.4028236e38", "1e-38", "1.17549435e-38", "1.1754942e-38",
        "1.17549428e-38", "1e-39", "1e-44", "1e-45", "1.4e-45", "1.401298464e-45",
        "7.006492321624085e-46", "7.006492321624086e-46", "7e-46", "1e-46", "1e-50",
        "1e-400", "1e400", "1e308", "1e309", "1e44", "1e45", "1e-44", "9e-45",
        "1e99999", "1e-99999", "0e99999999", "1e000000000000000000000000005",
        "0.000000000000000000000000000000000000000000000000001234",
        "123456789012345678901234567890e-20", "00000000000000000000000000001.5",
        "1.00000005960464477539062500", "1.000000059604644775390625",
        "1.0000000596046447753906249", "16777217", "16777216.5", "16777218.999999999",
        /* syntax strtod takes (hexadecimal refused, as numpy does) */
        "0x1p3", "0X1.8P-1", "-0x10", "+0X1", "0x", "0x.", "inf", "INF", "-inf", "Infinity", "infinit",
        "nan", "NaN", "-nan", "nan(123)", "nan(", "nan()",
        /* refused, or taken only in part */
        "", ".", "-", "+", "e5", "E", "1e", "1e+", "1e-", "1.5.5", "1e5e5", "--1", "+-1",
        "1,5", " 1", "\t1", "1 ", "1x", "x1", "1d5", "1f", "0..1", "1e5.5", "\v1", "\f1",
        "1_000", "\"1\"",
        /* bytes beside the digits' 0x30-0x39, inside the eight read at once */
        "1.1234567:", "1.12345;78", "0.1234<567", "2.5=123456", "3.1>345678", "4.12?45678",
        "1.1234567/", "1.12345\x80" "78", "1.123456\xb9" "8", "1.1234567\xff"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        same(cases[i]);
}

/* A field inside a longer line: the parse stops at e, the byte there (a
 * comma) is no part of the number. */
static void test_bounded(void)
{
    const char line[] = "1.5,-2e3,7x,,0x10,3.40282357e38";
    float v;
    CHECK(data_float_parse(line, line + 3, &v) && v == 1.5f);
    CHECK(data_float_parse(line + 4, line + 8, &v) && v == -2000.0f);
    CHECK(!data_float_parse(line + 9, line + 11, &v));
    CHECK(!data_float_parse(line + 12, line + 12, &v));
    CHECK(!data_float_parse(line + 13, line + 17, &v)); /* 0x10: hexadecimal, as numpy */
    CHECK(data_float_parse(line + 18, line + sizeof line - 1, &v) && isinf(v));
    const char *end = data_float_scan(line, line + sizeof line - 1, &v);
    CHECK(end == line + 3 && v == 1.5f);
    CHECK(data_float_scan(line + 12, line + 12, &v) == NULL);
}

int main(void)
{
    rng_state r;
    rng_seed(&r, 22, 0);
    int scale = getenv("COHORT_SANITIZED") ? 1 : 3;
    test_cases();
    test_bounded();
    test_integers();
    test_floats(&r, 150000 * scale);
    test_midpoints(&r, 40000 * scale);
    test_random_decimals(&r, 200000 * scale);
    CHECK_MSG(mismatches == 0, "%ld of %ld strings parsed unlike (float)strtod", mismatches,
              compared);
    printf("test_csv_float: %ld strings, each as (float)strtod\n", compared);
    return check_done("test_csv_float");
}
