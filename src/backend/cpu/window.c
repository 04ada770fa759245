/*
 * The CPU backend's NHWC image kernels (window.h): im2col, col2im, max and
 * average pooling over images [i0, i1), batch normalization over channels
 * [c0, c1). Channels are last, so a window row inside the image is one
 * contiguous run of (pixels x c) floats: every kernel moves whole runs
 * (memcpy, or a loop over the run that gcc vectorizes) and handles padding
 * once per run, not per element.
 */
#include "backend/cpu/window.h"

#include <math.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <string.h>

/* The part [*a, *b) of [0, k) that start + [0, k) puts inside [0, n). */
static void inside(int start, int k, int n, int *a, int *b)
{
    int lo = start < 0 ? -start : 0;
    int hi = n - start;
    lo = lo < k ? lo : k;
    hi = hi < lo ? lo : hi > k ? k : hi;
    *a = lo;
    *b = hi;
}

static size_t image_floats(const window_geom *g) { return (size_t)g->h * g->w * g->c; }
static size_t out_pixels(const window_geom *g) { return (size_t)g->oh * g->ow; }

static void add_run(float *restrict d, const float *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

/* One image's col rows where no window reads padding (`valid`): each
 * window row a straight copy, with no bounds to work out. The first layer
 * of an image model (one channel, 3 pixels a window row) made its col at
 * 2.6 GB/s through the general loop, the copies being shorter than its
 * bookkeeping. */
static void im2col_valid(float *restrict d, const float *restrict xi, const window_geom *g)
{
    const size_t c = (size_t)g->c, run = (size_t)g->kw * c, stride = (size_t)g->w * c;
    for (int y = 0; y < g->oh; y++)
        for (int x = 0; x < g->ow; x++) {
            const float *s = xi + ((size_t)y * (size_t)g->sh * (size_t)g->w +
                                   (size_t)x * (size_t)g->sw) * c;
            for (int ky = 0; ky < g->kh; ky++, d += run, s += stride) {
                if (run == 3) {
                    d[0] = s[0];
                    d[1] = s[1];
                    d[2] = s[2];
                } else if (run <= 16) {
                    for (size_t e = 0; e < run; e++)
                        d[e] = s[e];
                } else {
                    memcpy(d, s, run * sizeof(float));
                }
            }
        }
}

/* A dilated window (dh or dw above 1): its taps are not adjacent pixels,
 * so each tap is its own run of c floats (a sequence's window, w = 1, is
 * one run of c a tap even undilated), copied or zeroed in col's order. */
static int dilated(const window_geom *g)
{
    return window_dilation(g->dh) > 1 || window_dilation(g->dw) > 1;
}

static void im2col_dilated(float *restrict col, const float *restrict X, const window_geom *g,
                           int i0, int i1)
{
    const size_t c = (size_t)g->c;
    const int dh = window_dilation(g->dh), dw = window_dilation(g->dw);
    float *d = col;
    for (int i = i0; i < i1; i++) {
        const float *xi = X + (size_t)i * image_floats(g);
        for (int y = 0; y < g->oh; y++)
            for (int x = 0; x < g->ow; x++)
                for (int ky = 0; ky < g->kh; ky++) {
                    int iy = y * g->sh + ky * dh - g->pad_top;
                    for (int kx = 0; kx < g->kw; kx++, d += c) {
                        int ix = x * g->sw + kx * dw - g->pad_left;
                        if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                            memset(d, 0, c * sizeof(float));
                        else
                            memcpy(d, xi + ((size_t)iy * g->w + (size_t)ix) * c,
                                   c * sizeof(float));
                    }
                }
    }
}

/* The adjoint of im2col_dilated: images [i0, i1) of dX zeroed, then every
 * tap's run added to its pixel, in col's order. */
static void col2im_dilated(float *restrict dX, const float *restrict col, const window_geom *g,
                           int i0, int i1)
{
    const size_t c = (size_t)g->c;
    const int dh = window_dilation(g->dh), dw = window_dilation(g->dw);
    const float *s = col;
    for (int i = i0; i < i1; i++) {
        float *di = dX + (size_t)i * image_floats(g);
        memset(di, 0, image_floats(g) * sizeof(float));
        for (int y = 0; y < g->oh; y++)
            for (int x = 0; x < g->ow; x++)
                for (int ky = 0; ky < g->kh; ky++) {
                    int iy = y * g->sh + ky * dh - g->pad_top;
                    for (int kx = 0; kx < g->kw; kx++, s += c) {
                        int ix = x * g->sw + kx * dw - g->pad_left;
                        if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w)
                            add_run(di + ((size_t)iy * g->w + (size_t)ix) * c, s, c);
                    }
                }
    }
}

/* No window reads padding (an undilated window's test: kern_im2col
 * checks `dilated` first, conv_fwd_own_ok as well). */
static int window_valid(const window_geom *g)
{
    return g->pad_top == 0 && g->pad_left == 0 && (g->oh - 1) * g->sh + g->kh <= g->h &&
           (g->ow - 1) * g->sw + g->kw <= g->w;
}

/* col rows of image i: (oh*ow, kh*kw*c) from X's image (h, w, c). */
void kern_im2col(float *col, const float *X, const window_geom *g, int i0, int i1)
{
    if (dilated(g)) {
        im2col_dilated(col, X, g, i0, i1);
        return;
    }
    int valid = window_valid(g);
    const size_t c = (size_t)g->c, run = (size_t)g->kw * c, K = (size_t)g->kh * run;
    for (int i = i0; i < i1; i++) {
        const float *xi = X + (size_t)i * image_floats(g);
        float *ci = col + (size_t)(i - i0) * out_pixels(g) * K;
        if (g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pad_top == 0 &&
            g->pad_left == 0 && g->oh == g->h && g->ow == g->w) {
            memcpy(ci, xi, image_floats(g) * sizeof(float)); /* a 1x1 window: col is X */
            continue;
        }
        if (valid) {
            im2col_valid(ci, xi, g);
            continue;
        }
        for (int y = 0; y < g->oh; y++) {
            int iy0 = y * g->sh - g->pad_top;
            for (int x = 0; x < g->ow; x++) {
                int ix0 = x * g->sw - g->pad_left, kx0, kx1;
                inside(ix0, g->kw, g->w, &kx0, &kx1);
                float *row = ci + ((size_t)y * g->ow + x) * K;
                for (int ky = 0; ky < g->kh; ky++) {
                    float *d = row + (size_t)ky * run;
                    int iy = iy0 + ky;
                    if (iy < 0 || iy >= g->h || kx0 == kx1) {
                        memset(d, 0, run * sizeof(float));
                        continue;
                    }
                    /* kx0..kx1 are adjacent pixels of one image row: one run. */
                    const float *src = xi + ((size_t)iy * g->w + (ix0 + kx0)) * c;
                    size_t a = (size_t)kx0 * c, b = (size_t)kx1 * c;
                    if (run <= 16) {
                        /* A short run (one channel, 3 pixels): calls to memcpy
                         * cost more than the copy (measured: 8% of a Keras
                         * convnet's step). */
                        if (a == 0 && b == run)
                            for (size_t e = 0; e < run; e++)
                                d[e] = src[e];
                        else
                            for (size_t e = 0; e < run; e++)
                                d[e] = e >= a && e < b ? src[e - a] : 0.0f;
                        continue;
                    }
                    memset(d, 0, a * sizeof(float));
                    memcpy(d + a, src, (b - a) * sizeof(float));
                    memset(d + b, 0, (run - b) * sizeof(float));
                }
            }
        }
    }
}

/* dX's image (h, w, c) += every col row (kh*kw*c) of it, rows in order. */
void kern_col2im(float *dX, const float *col, const window_geom *g, int i0, int i1)
{
    if (dilated(g)) {
        col2im_dilated(dX, col, g, i0, i1);
        return;
    }
    const size_t c = (size_t)g->c, run = (size_t)g->kw * c, K = (size_t)g->kh * run;
    for (int i = i0; i < i1; i++) {
        float *di = dX + (size_t)i * image_floats(g);
        const float *ci = col + (size_t)(i - i0) * out_pixels(g) * K;
        memset(di, 0, image_floats(g) * sizeof(float));
        for (int y = 0; y < g->oh; y++) {
            int iy0 = y * g->sh - g->pad_top, ky0, ky1;
            inside(iy0, g->kh, g->h, &ky0, &ky1);
            for (int x = 0; x < g->ow; x++) {
                int ix0 = x * g->sw - g->pad_left, kx0, kx1;
                inside(ix0, g->kw, g->w, &kx0, &kx1);
                if (kx0 == kx1)
                    continue;
                const float *row = ci + ((size_t)y * g->ow + x) * K;
                for (int ky = ky0; ky < ky1; ky++)
                    add_run(di + ((size_t)(iy0 + ky) * g->w + (ix0 + kx0)) * c,
                            row + (size_t)ky * run + (size_t)kx0 * c, (size_t)(kx1 - kx0) * c);
            }
        }
    }
}

/* y, a (c) = the larger of themselves and pixel p (index idx); a tie keeps
 * the earlier pixel. */
static void max_run(float *restrict y, int32_t *restrict a, const float *restrict p, int32_t idx,
                    size_t c)
{
    for (size_t ch = 0; ch < c; ch++) {
        float v = p[ch];
        int better = v > y[ch];
        y[ch] = better ? v : y[ch];
        a[ch] = better ? idx : a[ch];
    }
}

/* Y, arg (oh, ow, c) of image i from X's (h, w, c). */
/* The common window, 2 x 2 at stride 2 wholly inside the image: the four
 * pixels compared at once, one pass over the output (the general loop below
 * makes four, through memcpy and max_run). Same results, ties included. */
static void maxpool_2x2(float *restrict yo, int32_t *restrict ao, const float *restrict xi,
                        int32_t p00, int w, size_t c)
{
    const float *a = xi + (size_t)p00 * c, *b = a + c, *d = a + (size_t)w * c, *e = d + c;
    for (size_t ch = 0; ch < c; ch++) {
        float m = a[ch];
        int32_t at = p00;
        if (b[ch] > m) {
            m = b[ch];
            at = p00 + 1;
        }
        if (d[ch] > m) {
            m = d[ch];
            at = p00 + w;
        }
        if (e[ch] > m) {
            m = e[ch];
            at = p00 + w + 1;
        }
        yo[ch] = m;
        ao[ch] = at;
    }
}

void kern_maxpool_fwd(float *Y, int32_t *arg, const float *X, const window_geom *g, int i0, int i1)
{
    const size_t c = (size_t)g->c;
    int fast = g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2;
    for (int i = i0; i < i1; i++) {
        const float *xi = X + (size_t)i * image_floats(g);
        for (int y = 0; y < g->oh; y++) {
            int iy0 = y * g->sh - g->pad_top, ky0, ky1;
            inside(iy0, g->kh, g->h, &ky0, &ky1);
            for (int x = 0; x < g->ow; x++) {
                int ix0 = x * g->sw - g->pad_left, kx0, kx1;
                inside(ix0, g->kw, g->w, &kx0, &kx1);
                size_t o = (((size_t)i * g->oh + y) * g->ow + x) * c;
                float *yo = Y + o;
                int32_t *ao = arg + o;
                if (ky0 == ky1 || kx0 == kx1) {
                    for (size_t ch = 0; ch < c; ch++) {
                        yo[ch] = 0.0f;
                        ao[ch] = -1;
                    }
                    continue;
                }
                int32_t first = (iy0 + ky0) * g->w + ix0 + kx0;
                if (fast && ky1 - ky0 == 2 && kx1 - kx0 == 2) {
                    maxpool_2x2(yo, ao, xi, first, g->w, c);
                    continue;
                }
                memcpy(yo, xi + (size_t)first * c, c * sizeof(float));
                for (size_t ch = 0; ch < c; ch++)
                    ao[ch] = first;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = ky == ky0 ? kx0 + 1 : kx0; kx < kx1; kx++) {
                        int32_t idx = (iy0 + ky) * g->w + ix0 + kx;
                        max_run(yo, ao, xi + (size_t)idx * c, idx, c);
                    }
            }
        }
    }
}

/* The 2 x 2, stride-2 `valid` windows tile the image but for an odd last
 * row or column: each window's four pixels written at once (the gradient
 * at its maximum, 0 at the others), and only the untiled rest zeroed,
 * instead of zeroing the image and adding into it. */
static void maxpool_bwd_2x2(float *restrict di, const float *restrict dy,
                            const int32_t *restrict a, const window_geom *g)
{
    const size_t c = (size_t)g->c, w = (size_t)g->w;
    for (int y = 0; y < g->oh; y++) {
        for (int x = 0; x < g->ow; x++) {
            size_t o = ((size_t)y * g->ow + x) * c;
            int32_t p00 = (int32_t)((size_t)(2 * y) * w + (size_t)(2 * x));
            float *q00 = di + (size_t)p00 * c, *q01 = q00 + c, *q10 = q00 + w * c,
                  *q11 = q10 + c;
            for (size_t ch = 0; ch < c; ch++) {
                float v = dy[o + ch];
                int32_t at = a[o + ch];
                q00[ch] = at == p00 ? v : 0.0f;
                q01[ch] = at == p00 + 1 ? v : 0.0f;
                q10[ch] = at == p00 + (int32_t)w ? v : 0.0f;
                q11[ch] = at == p00 + (int32_t)w + 1 ? v : 0.0f;
            }
        }
        if (g->w > 2 * g->ow) /* the odd last column of the two rows */
            for (int r = 0; r < 2; r++)
                memset(di + ((size_t)(2 * y + r) * w + (size_t)(2 * g->ow)) * c, 0,
                       (w - (size_t)(2 * g->ow)) * c * sizeof(float));
    }
    if (g->h > 2 * g->oh) /* the odd last rows */
        memset(di + (size_t)(2 * g->oh) * w * c, 0,
               (size_t)(g->h - 2 * g->oh) * w * c * sizeof(float));
}

/* dX's image (h, w, c) = the scatter of dY (oh, ow, c) to the arg pixels. */
void kern_maxpool_bwd(float *dX, const float *dY, const int32_t *arg, const window_geom *g, int i0,
                      int i1)
{
    const size_t c = (size_t)g->c, per = out_pixels(g) * c;
    int tiles = g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->pad_top == 0 &&
                g->pad_left == 0 && 2 * g->oh <= g->h && 2 * g->ow <= g->w;
    for (int i = i0; i < i1; i++) {
        float *di = dX + (size_t)i * image_floats(g);
        const float *dy = dY + (size_t)i * per;
        const int32_t *a = arg + (size_t)i * per;
        if (tiles) {
            maxpool_bwd_2x2(di, dy, a, g);
            continue;
        }
        memset(di, 0, image_floats(g) * sizeof(float));
        for (size_t o = 0; o < per; o += c)
            for (size_t ch = 0; ch < c; ch++)
                if (a[o + ch] >= 0)
                    di[(size_t)a[o + ch] * c + ch] += dy[o + ch];
    }
}

/* Y (oh, ow, c) of image i: window sums run by run, then times 1/pixels. */
void kern_avgpool_fwd(float *Y, const float *X, const window_geom *g, int i0, int i1)
{
    const size_t c = (size_t)g->c;
    for (int i = i0; i < i1; i++) {
        const float *xi = X + (size_t)i * image_floats(g);
        for (int y = 0; y < g->oh; y++) {
            int iy0 = y * g->sh - g->pad_top, ky0, ky1;
            inside(iy0, g->kh, g->h, &ky0, &ky1);
            for (int x = 0; x < g->ow; x++) {
                int ix0 = x * g->sw - g->pad_left, kx0, kx1;
                inside(ix0, g->kw, g->w, &kx0, &kx1);
                float *yo = Y + (((size_t)i * g->oh + y) * g->ow + x) * c;
                memset(yo, 0, c * sizeof(float));
                int pixels = (ky1 - ky0) * (kx1 - kx0);
                if (!pixels)
                    continue;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++)
                        add_run(yo, xi + ((size_t)(iy0 + ky) * g->w + (ix0 + kx)) * c, c);
                float inv = 1.0f / (float)pixels;
                for (size_t ch = 0; ch < c; ch++)
                    yo[ch] *= inv;
            }
        }
    }
}

/* d (c) += s (c) * f. */
static void axpy_run(float *restrict d, const float *restrict s, float f, size_t c)
{
    for (size_t ch = 0; ch < c; ch++)
        d[ch] += s[ch] * f;
}

/* dX's image (h, w, c) from dY (oh, ow, c): each output's share added to
 * its window's pixels inside the image. */
void kern_avgpool_bwd(float *dX, const float *dY, const window_geom *g, int i0, int i1)
{
    const size_t c = (size_t)g->c;
    for (int i = i0; i < i1; i++) {
        float *di = dX + (size_t)i * image_floats(g);
        memset(di, 0, image_floats(g) * sizeof(float));
        for (int y = 0; y < g->oh; y++) {
            int iy0 = y * g->sh - g->pad_top, ky0, ky1;
            inside(iy0, g->kh, g->h, &ky0, &ky1);
            for (int x = 0; x < g->ow; x++) {
                int ix0 = x * g->sw - g->pad_left, kx0, kx1;
                inside(ix0, g->kw, g->w, &kx0, &kx1);
                int pixels = (ky1 - ky0) * (kx1 - kx0);
                if (!pixels)
                    continue;
                const float *dy = dY + (((size_t)i * g->oh + y) * g->ow + x) * c;
                float inv = 1.0f / (float)pixels;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++)
                        axpy_run(di + ((size_t)(iy0 + ky) * g->w + (ix0 + kx)) * c, dy, inv, c);
            }
        }
    }
}

/* Sequences: a step is taken unless its token is 0 (padding). */
static int step_taken(const float *tok, int t) { return !tok || tok[t] != 0.0f; }

void kern_seq_pool_fwd(int max, float *Y, int32_t *arg, const float *X, const float *tokens,
                       int T, int C, int i0, int i1)
{
    const size_t c = (size_t)C;
    for (int i = i0; i < i1; i++) {
        const float *xi = X + (size_t)i * (size_t)T * c;
        const float *tok = tokens ? tokens + (size_t)i * (size_t)T : NULL;
        float *yo = Y + (size_t)i * c;
        int taken = 0;
        memset(yo, 0, c * sizeof(float));
        if (max) {
            int32_t *ao = arg + (size_t)i * c;
            for (size_t ch = 0; ch < c; ch++)
                ao[ch] = -1;
            for (int t = 0; t < T; t++) {
                if (!step_taken(tok, t))
                    continue;
                if (taken++ == 0) {
                    memcpy(yo, xi + (size_t)t * c, c * sizeof(float));
                    for (size_t ch = 0; ch < c; ch++)
                        ao[ch] = t;
                } else {
                    max_run(yo, ao, xi + (size_t)t * c, t, c);
                }
            }
            continue;
        }
        for (int t = 0; t < T; t++)
            if (step_taken(tok, t)) {
                add_run(yo, xi + (size_t)t * c, c);
                taken++;
            }
        if (taken)
            for (size_t ch = 0; ch < c; ch++)
                yo[ch] /= (float)taken;
    }
}

void kern_seq_pool_bwd(int max, float *dX, const float *dY, const int32_t *arg,
                       const float *tokens, int T, int C, int i0, int i1)
{
    const size_t c = (size_t)C;
    for (int i = i0; i < i1; i++) {
        float *di = dX + (size_t)i * (size_t)T * c;
        const float *dy = dY + (size_t)i * c;
        const float *tok = tokens ? tokens + (size_t)i * (size_t)T : NULL;
        memset(di, 0, (size_t)T * c * sizeof(float));
        if (max) {
            const int32_t *a = arg + (size_t)i * c;
            for (size_t ch = 0; ch < c; ch++)
                if (a[ch] >= 0)
                    di[(size_t)a[ch] * c + ch] = dy[ch];
            continue;
        }
        int taken = 0;
        for (int t = 0; t < T; t++)
            taken += step_taken(tok, t);
        for (int t = 0; t < T; t++)
            if (step_taken(tok, t)) {
                float *d = di + (size_t)t * c;
                for (size_t ch = 0; ch < c; ch++)
                    d[ch] = dy[ch] / (float)taken;
            }
    }
}

/* Channels per block of the batch-norm kernels: their per-channel sums
 * (doubles) stay on the stack, and each row of X is read a block at a time. */
#define BN_BLOCK 256

/* y (m) = (x - mean) * scale + shift over rows x m of stride C; y may be x. */
static void bn_apply(float *Y, const float *X, const float *mean, const float *scale,
                     const float *shift, int rows, int C, int m)
{
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * C;
        float *y = Y + (size_t)r * C;
        if (y == x) /* a separate loop, so gcc's overlap check does not refuse to vectorize */
            for (int j = 0; j < m; j++)
                y[j] = (y[j] - mean[j]) * scale[j] + shift[j];
        else
            for (int j = 0; j < m; j++)
                y[j] = (x[j] - mean[j]) * scale[j] + shift[j];
    }
}

/* X is (rows, C): each channel's sum and sum of squares about its first
 * row's value (which keeps the variance exact for a large mean), in double. */
void kern_bn_fwd_train(float *Y, const float *X, const float *gamma, const float *beta,
                       float *mov_mean, float *mov_var, float *stat, int rows, int C,
                       float momentum, float eps, int c0, int c1)
{
    double s1[BN_BLOCK], s2[BN_BLOCK];
    float ref[BN_BLOCK], mean[BN_BLOCK], scale[BN_BLOCK];
    double n = rows > 0 ? (double)rows : 1.0;
    for (int a = c0; a < c1; a += BN_BLOCK) {
        int m = c1 - a < BN_BLOCK ? c1 - a : BN_BLOCK;
        for (int j = 0; j < m; j++) {
            ref[j] = rows > 0 ? X[a + j] : 0.0f;
            s1[j] = s2[j] = 0.0;
        }
        for (int r = 0; r < rows; r++) {
            const float *x = X + (size_t)r * C + a;
            for (int j = 0; j < m; j++) {
                double d = (double)x[j] - (double)ref[j];
                s1[j] += d;
                s2[j] += d * d;
            }
        }
        for (int j = 0; j < m; j++) {
            int ch = a + j;
            double dm = s1[j] / n, var = s2[j] / n - dm * dm;
            var = var > 0.0 ? var : 0.0;
            double mu = (double)ref[j] + dm, inv = 1.0 / sqrt(var + (double)eps);
            mean[j] = (float)mu;
            scale[j] = (float)((double)gamma[ch] * inv);
            stat[ch] = mean[j];
            stat[C + ch] = (float)inv;
            mov_mean[ch] = momentum * mov_mean[ch] + (1.0f - momentum) * (float)mu;
            mov_var[ch] = momentum * mov_var[ch] + (1.0f - momentum) * (float)var;
        }
        bn_apply(Y + a, X + a, mean, scale, beta + a, rows, C, m);
    }
}

void kern_bn_fwd_infer(float *Y, const float *X, const float *gamma, const float *beta,
                       const float *mov_mean, const float *mov_var, int rows, int C, float eps,
                       int c0, int c1)
{
    float scale[BN_BLOCK];
    for (int a = c0; a < c1; a += BN_BLOCK) {
        int m = c1 - a < BN_BLOCK ? c1 - a : BN_BLOCK;
        for (int j = 0; j < m; j++)
            scale[j] =
                (float)((double)gamma[a + j] / sqrt((double)mov_var[a + j] + (double)eps));
        bn_apply(Y + a, X + a, mov_mean + a, scale, beta + a, rows, C, m);
    }
}

/* dX = A*dY + B*(X - mean) + D per channel: A = gamma*inv_std,
 * B = -A*inv_std*dgamma/rows, D = -A*dbeta/rows; dX may be dY. */
static void bn_dx(float *dX, const float *dY, const float *X, const float *mean, const float *A,
                  const float *B, const float *D, int rows, int C, int m)
{
    for (int r = 0; r < rows; r++) {
        const float *dy = dY + (size_t)r * C, *x = X + (size_t)r * C;
        float *dx = dX + (size_t)r * C;
        if (dx == dy)
            for (int j = 0; j < m; j++)
                dx[j] = A[j] * dx[j] + B[j] * (x[j] - mean[j]) + D[j];
        else
            for (int j = 0; j < m; j++)
                dx[j] = A[j] * dy[j] + B[j] * (x[j] - mean[j]) + D[j];
    }
}

void kern_bn_bwd(float *dX, const float *dY, const float *X, const float *gamma, const float *stat,
                 float *dgamma, float *dbeta, int rows, int C, int c0, int c1)
{
    double sdy[BN_BLOCK], sdx[BN_BLOCK], mu[BN_BLOCK];
    float mean[BN_BLOCK], A[BN_BLOCK], B[BN_BLOCK], D[BN_BLOCK];
    double n = rows > 0 ? (double)rows : 1.0;
    for (int a = c0; a < c1; a += BN_BLOCK) {
        int m = c1 - a < BN_BLOCK ? c1 - a : BN_BLOCK;
        for (int j = 0; j < m; j++) {
            mean[j] = stat[a + j];
            mu[j] = (double)mean[j];
            sdy[j] = sdx[j] = 0.0;
        }
        for (int r = 0; r < rows; r++) {
            const float *dy = dY + (size_t)r * C + a, *x = X + (size_t)r * C + a;
            for (int j = 0; j < m; j++) {
                sdy[j] += (double)dy[j];
                sdx[j] += (double)dy[j] * ((double)x[j] - mu[j]);
            }
        }
        for (int j = 0; j < m; j++) {
            int ch = a + j;
            double inv = (double)stat[C + ch], dg = sdx[j] * inv, ga = (double)gamma[ch] * inv;
            dgamma[ch] = (float)dg;
            dbeta[ch] = (float)sdy[j];
            A[j] = (float)ga;
            B[j] = (float)(-ga * inv * dg / n);
            D[j] = (float)(-ga * sdy[j] / n);
        }
        if (dX)
            bn_dx(dX + a, dY + a, X + a, mean, A, B, D, rows, C, m);
    }
}

int conv_small_ok(int kc, int F)
{
#if defined(__AVX2__) && defined(__FMA__)
    return kc >= 1 && kc <= CONV_SMALL_KC && F % 8 == 0;
#else
    (void)kc;
    (void)F;
    return 0;
#endif
}

int gemm_own_ok(int N)
{
#if defined(__AVX2__) && defined(__FMA__)
    return N > 0 && N % 16 == 0;
#else
    (void)N;
    return 0;
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
#define GEMM_B_NEAR (256 * 1024) /* bytes of B that every row group reads whole */
#define SFX avx512
#define TGT __attribute__((target("avx512f")))
#define VT __m512
#define VL 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, x) _mm512_storeu_ps(p, x)
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO() _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#include "backend/cpu/window_isa.h"

#define SFX avx2
#define TGT
#define VT __m256
#define VL 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, x) _mm256_storeu_ps(p, x)
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO() _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "backend/cpu/window_isa.h"

/* AVX-512: rows of six by 32 columns; AVX2: by 16 (N % 16 == 0: whole). */
void kern_gemm_own(cpu_isa isa, float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                   const float *B, size_t ldb, int M, int N, int K)
{
    if (isa == ISA_AVX512)
        gemm_own_avx512(Y, ldy, A, ar, ac, B, ldb, M, N, K);
    else
        gemm_own_avx2(Y, ldy, A, ar, ac, B, ldb, M, N, K);
}

int conv_fwd_own_ok(const window_geom *g, int N)
{
    return gemm_own_ok(N) && !dilated(g) && window_valid(g);
}

void kern_conv_fwd_own(cpu_isa isa, float *Y, size_t ldy, const float *X, const window_geom *g,
                       int i0, int i1, const float *B, size_t ldb, int N)
{
    if (isa == ISA_AVX512)
        conv_fwd_own_avx512(Y, ldy, X, g, i0, i1, B, ldb, N);
    else
        conv_fwd_own_avx2(Y, ldy, X, g, i0, i1, B, ldb, N);
}

/* Sixteen filters at a time with AVX-512, then eight (F % 8 == 0). */
void kern_conv_small_wgrad(cpu_isa isa, float *G, const float *dY, const float *col, int rows,
                           int F, int kc)
{
    int f0 = 0;
    if (isa == ISA_AVX512)
        conv_small_wgrad_avx512(G, dY, col, rows, F, kc, &f0);
    conv_small_wgrad_avx2(G, dY, col, rows, F, kc, &f0);
}
#else
int conv_fwd_own_ok(const window_geom *g, int N)
{
    (void)g, (void)N;
    return 0;
}
void kern_conv_fwd_own(cpu_isa isa, float *Y, size_t ldy, const float *X, const window_geom *g,
                       int i0, int i1, const float *B, size_t ldb, int N)
{
    (void)isa, (void)Y, (void)ldy, (void)X, (void)g, (void)i0, (void)i1, (void)B, (void)ldb,
        (void)N;
}
void kern_gemm_own(cpu_isa isa, float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                   const float *B, size_t ldb, int M, int N, int K)
{
    (void)isa, (void)Y, (void)ldy, (void)A, (void)ar, (void)ac, (void)B, (void)ldb, (void)M,
        (void)N, (void)K;
}
void kern_conv_small_wgrad(cpu_isa isa, float *G, const float *dY, const float *col, int rows,
                           int F, int kc)
{
    (void)isa, (void)G, (void)dY, (void)col, (void)rows, (void)F, (void)kc;
}
#endif
