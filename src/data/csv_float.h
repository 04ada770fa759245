/*
 * csv_float: decimal text to float32 as numpy reads a CSV, np.loadtxt (or
 * pandas) then astype(np.float32): the decimal rounded to the nearest double,
 * then to the nearest float (ties to even both times), without strtod's cost.
 * A CSV of 20 million fields spends most of its read here. The fast path,
 * inline, is here; data_float_parse (csv_float.c) adds strtod for the rest.
 *
 * The fast path takes [+-]digits[.digits][(e|E)[+-]digits] of at most 19
 * digits w and a power of ten 10^q, |q| <= 44: w converted to double (exact
 * below 2^53) times the double nearest 10^q (exact for 0 <= q <= 22) is
 * three roundings at most, each within 2^-53 of its result, so the double d
 * is within 3.01 units in its last place (ulps) of X = w * 10^q, and the
 * double nearest X within 3.51 ulps of d. The float nearest that double is
 * the float nearest d unless a float midpoint (where rounding to float
 * changes) lies within 3.51 ulps of d. From 2^-126 to 2^128 a float keeps 24
 * of d's 53 significant bits, so the midpoints are the doubles whose low 29
 * bits are exactly 1 << 28; where d's low 29 bits are within CSV_FLOAT_SLACK
 * of that, the fast path cannot tell and strtod decides (about 1 in 16
 * million numbers). So do subnormals, numbers past FLT_MAX (inf or FLT_MAX:
 * the CSV reader refuses the first), long mantissas, large exponents and the
 * other syntax strtod takes (hex, inf, nan): rare in data files. A multiplication by a rounded
 * 10^-k costs one rounding more than a division by an exact 10^k, well within
 * the slack, and is several times cheaper.
 */
#ifndef COHORT_CSV_FLOAT_H
#define COHORT_CSV_FLOAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 1 when [s, e) is hexadecimal after its sign (0x1f, -0X1p3): strtod takes
 * it, numpy's loadtxt, Python's float and pandas do not, and a column of IDs
 * written so is no number to train on. */
static inline int data_float_hex(const char *s, const char *e)
{
    if (s < e && (*s == '-' || *s == '+'))
        s++;
    return e - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
}

/* Ulps of d within which a midpoint sends a number to strtod: 3.51 would do. */
#define CSV_FLOAT_SLACK 16

/* 10^-44 .. 10^44, each the double nearest (exact from 10^0 to 10^22). */
static const double pow10_near[89] = {
    1e-44, 1e-43, 1e-42, 1e-41, 1e-40, 1e-39, 1e-38, 1e-37, 1e-36, 1e-35, 1e-34, 1e-33,
    1e-32, 1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26, 1e-25, 1e-24, 1e-23, 1e-22, 1e-21,
    1e-20, 1e-19, 1e-18, 1e-17, 1e-16, 1e-15, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9, 1e-8,
    1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8,
    1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23,
    1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37,
    1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44};

/* w * 10^q rounded to float, when that is certain from double arithmetic;
 * 0 when strtod must decide. w > 0, |q| <= 44. */
static inline int scale_to_float(uint64_t w, int q, float *out)
{
    double d = (double)w * pow10_near[q + 44];
    if (d < 0x1p-126 || d > 0x1.fffffep127)
        return 0; /* subnormal, where floats keep fewer bits; or past FLT_MAX */
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint64_t low = bits & ((UINT64_C(1) << 29) - 1);
    if (low - ((UINT64_C(1) << 28) - CSV_FLOAT_SLACK) <= 2 * CSV_FLOAT_SLACK)
        return 0;
    *out = (float)d;
    return 1;
}

/* The digits from p on (before e) appended to *w; returns where they end. */
static inline const char *digits(const char *p, const char *e, uint64_t *w)
{
    while (p < e && (unsigned)(*p - '0') < 10)
        *w = *w * 10 + (uint64_t)(*p++ - '0');
    return p;
}

static const uint64_t pow10_int[9] = {1,      10,      100,      1000,     10000,
                                       100000, 1000000, 10000000, 100000000};

#define BYTES(b) (UINT64_C(0x0101010101010101) * (b))

/*
 * As digits, eight bytes at a time where the line has them: a branch per
 * eight digits, not one per digit that mispredicts at the end of every
 * number. For the fraction, where most digits are: this file's 184 MB CSV
 * (6 digits a number) parsed in 27% less time, its 243 MB one (9 digits) 10%.
 */
static inline const char *digits8(const char *p, const char *e, uint64_t *w)
{
    while (e - p >= 8) {
        uint64_t x;
        memcpy(&x, p, sizeof x); /* the first character in the lowest byte */
        /* A digit is a byte 0x3_ that adding 6 leaves 0x3_. A carry out of a
         * byte that is no digit spoils only the bytes after it. */
        uint64_t bad = ((x & BYTES(0xF0)) ^ BYTES(0x30)) |
                       (((x + BYTES(0x06)) & BYTES(0xF0)) ^ BYTES(0x30));
        int n = bad ? __builtin_ctzll(bad) / 8 : 8;
        if (n == 0)
            return p;
        /* The n digits to the top bytes, zeros (as leading zeros) below them;
         * then pairs, fours and all eight combined. */
        uint64_t v = (x - BYTES(0x30)) << (8 * (8 - n));
        v = (v * 10 + (v >> 8)) & UINT64_C(0x00FF00FF00FF00FF);
        v = (v * 100 + (v >> 16)) & UINT64_C(0x0000FFFF0000FFFF);
        v = (v * 10000 + (v >> 32)) & UINT64_C(0xFFFFFFFF);
        *w = *w * pow10_int[n] + v;
        p += n;
        if (n < 8)
            return p;
    }
    return digits(p, e, w);
}

/*
 * Read the longest [+-]digits[.digits][(e|E)[+-]digits] at s, before e,
 * into *out and return where it ends; NULL when it cannot be sure of the
 * float (then strtod must decide) or finds no number. The byte at e must be
 * readable. Inline: the CSV reader calls it for every field, and read its
 * 184 MB file with 7 to 10% less CPU time for it.
 */
static inline const char *data_float_scan(const char *s, const char *e, float *out)
{
    const char *p = s;
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    /* Every digit into w, leading zeros too: more than 19 of them (which
     * may wrap w) go to strtod. */
    uint64_t w = 0;
    const char *d0 = p;
    p = digits(p, e, &w);
    ptrdiff_t n = p - d0, frac = 0;
    if (p < e && *p == '.') {
        const char *f0 = ++p;
        p = digits8(p, e, &w);
        frac = p - f0;
    }
    if (n + frac == 0 || n + frac > 19)
        return NULL;
    int q = -(int)frac;
    if (p < e && (*p == 'e' || *p == 'E')) {
        const char *x = p + 1;
        int eneg = 0, ex = 0;
        if (x < e && (*x == '-' || *x == '+'))
            eneg = *x++ == '-';
        const char *x0 = x;
        while (x < e && (unsigned)(*x - '0') < 10 && x - x0 < 5)
            ex = ex * 10 + (*x++ - '0');
        if (x == x0 || (x < e && (unsigned)(*x - '0') < 10))
            return NULL; /* "1e" (strtod stops before the e), or 6 digits and more */
        q += eneg ? -ex : ex;
        p = x;
    }
    float v = 0.0f;
    if (w != 0 && (q < -44 || q > 44 || !scale_to_float(w, q, &v)))
        return NULL;
    *out = neg ? -v : v;
    return p;
}

#endif
