/*
 * The CPU backend's image ops (im2col, col2im, max and average pooling,
 * batch normalization) and its threaded gemm, through backend_cpu() on
 * contexts of 1 and 2 threads, against plain loops written here (sums in
 * double) over TensorFlow's `valid` and `same` geometries: odd sizes, strides
 * 1 and 2, windows 3x3, 3x2, 2x2, 1x1 and global, 1 to 8 channels, two
 * models with their own inputs and with one input shared (stride 0).
 * Every output starts as NaN (or a junk arg), so a pixel no part writes
 * fails; the two contexts must agree bit for bit, so a split that changes
 * a sum fails. Dilated windows (sequences valid, same and causal, and 2-D)
 * for im2col, col2im and the fused convolutions. Mutations each check
 * catches: a padding off by one (im2col exact, every geometry), padding
 * counted as a pixel (max pooling of negative inputs, average pooling's
 * divisor), `>=` for `>` in max pooling (ties on purpose), a missing term of
 * batch norm's dX (finite differences), a dilation ignored.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/window.h"
#include "check.h"
#include "optim/optim.h"
#include "util/util.h"

#include <cblas.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const backend_ops *be;
static backend_ctx *ctx[2]; /* 1 and 2 threads */
static rng_state rng;

static float *fbuf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    memset(p, 0xff, (n ? n : 1) * sizeof(float)); /* NaN */
    return p;
}

static void fill(float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * rng_uniform(&rng);
}

/* TensorFlow's geometry: `same` puts the odd padded pixel after the image. */
static window_geom geom(int n, int h, int w, int c, int kh, int kw, int sh, int sw, int same)
{
    window_geom g = {n, h, w, c, kh, kw, sh, sw, 0, 0, 0, 0, 1, 1};
    if (same) {
        g.oh = (h + sh - 1) / sh;
        g.ow = (w + sw - 1) / sw;
        int ph = (g.oh - 1) * sh + kh - h, pw = (g.ow - 1) * sw + kw - w;
        g.pad_top = (ph > 0 ? ph : 0) / 2;
        g.pad_left = (pw > 0 ? pw : 0) / 2;
    } else {
        g.oh = (h - kh) / sh + 1;
        g.ow = (w - kw) / sw + 1;
    }
    return g;
}

/* A dilated geometry (taps dh, dw apart) of stride 1, as Keras's Conv1D and
 * Conv2D make it: pad 0 valid, 1 same (the effective window (k - 1)*d + 1),
 * 2 causal (the rows' (kh - 1)*dh padding all before the image). */
static window_geom geom_dil(int n, int h, int w, int c, int kh, int kw, int dh, int dw, int pad)
{
    int eh = (kh - 1) * dh + 1, ew = (kw - 1) * dw + 1;
    window_geom g = geom(n, h, w, c, eh, ew, 1, 1, pad == 1);
    if (pad == 2) {
        g.oh = h;
        g.pad_top = eh - 1;
    }
    g.kh = kh, g.kw = kw, g.dh = dh, g.dw = dw;
    return g;
}

static size_t img_n(const window_geom *g) { return (size_t)g->n * g->h * g->w * g->c; }
static size_t out_n(const window_geom *g) { return (size_t)g->n * g->oh * g->ow * g->c; }
static size_t col_n(const window_geom *g)
{
    return (size_t)g->n * g->oh * g->ow * g->kh * g->kw * g->c;
}

/* The pixel (iy, ix) that output (y, x) reads at (ky, kx), or -1 for padding. */
static long src_pixel(const window_geom *g, int y, int x, int ky, int kx)
{
    int iy = y * g->sh + ky * window_dilation(g->dh) - g->pad_top;
    int ix = x * g->sw + kx * window_dilation(g->dw) - g->pad_left;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return -1;
    return (long)iy * g->w + ix;
}

/* Loops over image i, output (y, x), window (ky, kx), with the source pixel p. */
#define FOR_WINDOW(g)                                                                           \
    for (int i = 0; i < (g)->n; i++)                                                            \
        for (int y = 0; y < (g)->oh; y++)                                                       \
            for (int x = 0; x < (g)->ow; x++)                                                   \
                for (int ky = 0; ky < (g)->kh; ky++)                                            \
                    for (int kx = 0; kx < (g)->kw; kx++)

static size_t out_at(const window_geom *g, int i, int y, int x)
{
    return (((size_t)i * g->oh + y) * g->ow + x) * g->c;
}
static size_t img_at(const window_geom *g, int i, long p)
{
    return ((size_t)i * g->h * g->w + (size_t)p) * g->c;
}

static void ref_im2col(float *col, const float *X, const window_geom *g)
{
    size_t K = (size_t)g->kh * g->kw * g->c;
    FOR_WINDOW(g)
    {
        long p = src_pixel(g, y, x, ky, kx);
        float *d =
            col + (((size_t)i * g->oh + y) * g->ow + x) * K + ((size_t)ky * g->kw + kx) * g->c;
        for (int ch = 0; ch < g->c; ch++)
            d[ch] = p < 0 ? 0.0f : X[img_at(g, i, p) + ch];
    }
}

static void ref_col2im(double *dX, const float *col, const window_geom *g)
{
    size_t K = (size_t)g->kh * g->kw * g->c;
    memset(dX, 0, img_n(g) * sizeof(double));
    FOR_WINDOW(g)
    {
        long p = src_pixel(g, y, x, ky, kx);
        const float *s =
            col + (((size_t)i * g->oh + y) * g->ow + x) * K + ((size_t)ky * g->kw + kx) * g->c;
        for (int ch = 0; ch < g->c && p >= 0; ch++)
            dX[img_at(g, i, p) + ch] += s[ch];
    }
}

static void ref_maxpool(float *Y, int32_t *arg, const float *X, const window_geom *g)
{
    for (size_t o = 0; o < out_n(g); o++) {
        Y[o] = -INFINITY;
        arg[o] = -1;
    }
    FOR_WINDOW(g)
    {
        long p = src_pixel(g, y, x, ky, kx);
        size_t o = out_at(g, i, y, x);
        for (int ch = 0; ch < g->c && p >= 0; ch++)
            if (arg[o + ch] < 0 || X[img_at(g, i, p) + ch] > Y[o + ch]) {
                Y[o + ch] = X[img_at(g, i, p) + ch];
                arg[o + ch] = (int32_t)p;
            }
    }
}

/* Pixels of output (y, x)'s window inside the image. */
static int inside_count(const window_geom *g, int y, int x)
{
    int n = 0;
    for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++)
            n += src_pixel(g, y, x, ky, kx) >= 0;
    return n;
}

static void ref_avgpool(double *Y, const float *X, const window_geom *g)
{
    memset(Y, 0, out_n(g) * sizeof(double));
    FOR_WINDOW(g)
    {
        long p = src_pixel(g, y, x, ky, kx);
        size_t o = out_at(g, i, y, x);
        for (int ch = 0; ch < g->c && p >= 0; ch++)
            Y[o + ch] += X[img_at(g, i, p) + ch] / (double)inside_count(g, y, x);
    }
}

static void ref_avgpool_bwd(double *dX, const float *dY, const window_geom *g)
{
    memset(dX, 0, img_n(g) * sizeof(double));
    FOR_WINDOW(g)
    {
        long p = src_pixel(g, y, x, ky, kx);
        size_t o = out_at(g, i, y, x);
        for (int ch = 0; ch < g->c && p >= 0; ch++)
            dX[img_at(g, i, p) + ch] += dY[o + ch] / (double)inside_count(g, y, x);
    }
}

static void ref_maxpool_bwd(double *dX, const float *dY, const int32_t *arg, const window_geom *g)
{
    memset(dX, 0, img_n(g) * sizeof(double));
    for (int i = 0; i < g->n; i++)
        for (size_t o = 0; o < (size_t)g->oh * g->ow * g->c; o++) {
            size_t q = (size_t)i * g->oh * g->ow * g->c + o;
            if (arg[q] >= 0)
                dX[img_at(g, i, arg[q]) + o % (size_t)g->c] += dY[q];
        }
}

/* Elements of got (n) within tol * (1 + |ref|) of ref; prints the first miss. */
static int near_all(const char *what, const float *got, const double *ref, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= tol * (1.0 + fabs(ref[i])))) {
            fprintf(stderr, "%s: element %zu is %.9g, reference %.9g\n", what, i, (double)got[i],
                    ref[i]);
            return 0;
        }
    return 1;
}

static const char *gname(const window_geom *g)
{
    static char s[160];
    snprintf(s, sizeof s, "n%d %dx%dx%d k%dx%d s%d,%d d%d,%d pad %d,%d -> %dx%d", g->n, g->h,
             g->w, g->c, g->kh, g->kw, g->sh, g->sw, window_dilation(g->dh),
             window_dilation(g->dw), g->pad_top, g->pad_left, g->oh, g->ow);
    return s;
}

enum { MODELS = 2 };

/* Every window op on geometry g for MODELS models; inputs shared (stride 0)
 * when `shared`. */
static void test_geom(window_geom g, int shared)
{
    const char *name = gname(&g);
    size_t ni = img_n(&g), no = out_n(&g), nc = col_n(&g);
    size_t si = ni + 7, so = no + 5, sc = nc + 3; /* gaps between the models */
    size_t in_si = shared ? 0 : si, in_so = shared ? 0 : so, in_sc = shared ? 0 : sc;
    float *X = fbuf(MODELS * si), *cin = fbuf(MODELS * sc), *dY = fbuf(MODELS * so);
    float *Xq = fbuf(MODELS * si);
    fill(X, MODELS * si, -1.0f, 1.0f);
    fill(cin, MODELS * sc, -1.0f, 1.0f);
    fill(dY, MODELS * so, -1.0f, 1.0f);
    /* Four negative levels: many ties, and a padded zero would win. */
    for (size_t e = 0; e < MODELS * si; e++)
        Xq[e] = -0.5f * (float)(1 + rng_below(&rng, 4));
    float *col[2], *dX[2], *Y[2], *dXp[2], *Ya[2], *dXa[2];
    int32_t *arg[2];
    for (int t = 0; t < 2; t++) {
        col[t] = fbuf(MODELS * sc);
        dX[t] = fbuf(MODELS * si);
        Y[t] = fbuf(MODELS * so);
        dXp[t] = fbuf(MODELS * si);
        Ya[t] = fbuf(MODELS * so);
        dXa[t] = fbuf(MODELS * si);
        arg[t] = malloc(MODELS * so * sizeof(int32_t));
        memset(arg[t], 0x55, MODELS * so * sizeof(int32_t));
        be->im2col(ctx[t], col[t], sc, X, in_si, &g, MODELS);
        be->col2im(ctx[t], dX[t], si, cin, in_sc, &g, MODELS);
        be->maxpool_fwd(ctx[t], Y[t], so, arg[t], so, Xq, in_si, &g, MODELS);
        /* arg from this context's own forward pass, shared as dY is. */
        be->maxpool_bwd(ctx[t], dXp[t], si, dY, in_so, arg[t], in_so, &g, MODELS);
        be->avgpool_fwd(ctx[t], Ya[t], so, X, in_si, &g, MODELS);
        be->avgpool_bwd(ctx[t], dXa[t], si, dY, in_so, &g, MODELS);
    }
    CHECK_MSG(!memcmp(col[0], col[1], MODELS * sc * sizeof(float)), "im2col threads %s", name);
    CHECK_MSG(!memcmp(dX[0], dX[1], MODELS * si * sizeof(float)), "col2im threads %s", name);
    CHECK_MSG(!memcmp(Y[0], Y[1], MODELS * so * sizeof(float)), "maxpool threads %s", name);
    CHECK_MSG(!memcmp(arg[0], arg[1], MODELS * so * sizeof(int32_t)), "maxpool arg threads %s",
              name);
    CHECK_MSG(!memcmp(dXp[0], dXp[1], MODELS * si * sizeof(float)), "maxpool_bwd threads %s",
              name);
    CHECK_MSG(!memcmp(Ya[0], Ya[1], MODELS * so * sizeof(float)), "avgpool threads %s", name);
    CHECK_MSG(!memcmp(dXa[0], dXa[1], MODELS * si * sizeof(float)), "avgpool_bwd threads %s",
              name);

    float *rc = fbuf(nc), *rY = fbuf(no);
    int32_t *rarg = malloc((no ? no : 1) * sizeof(int32_t));
    size_t big = ni > no ? ni : no;
    double *rd = malloc((big ? big : 1) * sizeof(double));
    for (int k = 0; k < MODELS; k++) {
        const float *Xk = X + k * in_si, *Xqk = Xq + k * in_si, *ck = cin + k * in_sc;
        const float *dYk = dY + k * in_so;
        ref_im2col(rc, Xk, &g);
        CHECK_MSG(!memcmp(col[0] + k * sc, rc, nc * sizeof(float)), "im2col %s model %d%s", name,
                  k, shared ? " shared" : "");
        ref_col2im(rd, ck, &g);
        CHECK_MSG(near_all("col2im", dX[0] + k * si, rd, ni, 1e-5), "col2im %s model %d", name, k);
        /* The adjoint: <col2im(C), X> = <C, im2col(X)>. */
        double lhs = 0.0, rhs = 0.0, scale = 0.0;
        for (size_t e = 0; e < ni; e++)
            lhs += (double)dX[0][k * si + e] * Xk[e];
        for (size_t e = 0; e < nc; e++) {
            rhs += (double)ck[e] * rc[e];
            scale += fabs((double)ck[e] * rc[e]);
        }
        CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * scale, "adjoint %s: %.9g vs %.9g", name, lhs, rhs);

        ref_maxpool(rY, rarg, Xqk, &g);
        CHECK_MSG(!memcmp(Y[0] + k * so, rY, no * sizeof(float)), "maxpool %s model %d", name, k);
        CHECK_MSG(!memcmp(arg[0] + k * so, rarg, no * sizeof(int32_t)), "maxpool arg %s model %d",
                  name, k);
        ref_maxpool_bwd(rd, dYk, rarg, &g);
        CHECK_MSG(near_all("maxpool_bwd", dXp[0] + k * si, rd, ni, 1e-5), "maxpool_bwd %s", name);

        ref_avgpool(rd, Xk, &g);
        CHECK_MSG(near_all("avgpool", Ya[0] + k * so, rd, no, 1e-5), "avgpool %s", name);
        ref_avgpool_bwd(rd, dYk, &g);
        CHECK_MSG(near_all("avgpool_bwd", dXa[0] + k * si, rd, ni, 1e-5), "avgpool_bwd %s", name);
    }
    free(rc);
    free(rY);
    free(rarg);
    free(rd);
    for (int t = 0; t < 2; t++) {
        free(col[t]);
        free(dX[t]);
        free(Y[t]);
        free(dXp[t]);
        free(Ya[t]);
        free(dXa[t]);
        free(arg[t]);
    }
    free(X);
    free(Xq);
    free(cin);
    free(dY);
}

/* ---- batch normalization ---- */

static void ref_bn_train(const float *X, const float *gamma, const float *beta, float eps,
                         int rows, int C, double *Y, double *mean, double *var, double *inv)
{
    for (int ch = 0; ch < C; ch++) {
        double s = 0.0, q = 0.0;
        for (int r = 0; r < rows; r++)
            s += X[(size_t)r * C + ch];
        mean[ch] = s / rows;
        for (int r = 0; r < rows; r++) {
            double d = X[(size_t)r * C + ch] - mean[ch];
            q += d * d;
        }
        var[ch] = q / rows;
        inv[ch] = 1.0 / sqrt(var[ch] + eps);
        for (int r = 0; r < rows; r++)
            Y[(size_t)r * C + ch] =
                gamma[ch] * (X[(size_t)r * C + ch] - mean[ch]) * inv[ch] + beta[ch];
    }
}

/* sum(dYfix * Y) of one model's bn_fwd_train, moving statistics discarded. */
static double bn_loss(const float *X, const float *gamma, const float *beta, const float *dYfix,
                      int rows, int C, const bn_step *o)
{
    size_t n = (size_t)rows * C;
    float *Y = fbuf(n), *mm = fbuf(C), *mv = fbuf(C), *st = fbuf(2 * (size_t)C);
    memset(mm, 0, C * sizeof(float));
    memset(mv, 0, C * sizeof(float));
    be->bn_fwd_train(ctx[0], Y, 0, X, 0, gamma, beta, mm, mv, 0, st, 0, rows, C, o, 1);
    double L = 0.0;
    for (size_t e = 0; e < n; e++)
        L += (double)dYfix[e] * Y[e];
    free(Y);
    free(mm);
    free(mv);
    free(st);
    return L;
}

/* Central differences of bn_loss against bn_bwd's dX, dgamma, dbeta (model 0). */
static void bn_fd(int rows, int C, const float *X, const float *gamma, const float *beta,
                  const float *dYfix, const float *dX, const float *dgamma, const float *dbeta,
                  const bn_step *o)
{
    const float h = 1e-2f;
    size_t n = (size_t)rows * C;
    float *Xp = fbuf(n), *gp = fbuf(C), *bp = fbuf(C);
    memcpy(Xp, X, n * sizeof(float));
    memcpy(gp, gamma, C * sizeof(float));
    memcpy(bp, beta, C * sizeof(float));
    struct {
        const char *what;
        float *v;
        const float *an;
        size_t n;
    } w[3] = {
        {"dX", Xp, dX, n}, {"dgamma", gp, dgamma, (size_t)C}, {"dbeta", bp, dbeta, (size_t)C}};
    for (int a = 0; a < 3; a++) {
        double amax = 0.0, worst = 0.0;
        for (size_t e = 0; e < w[a].n; e++)
            amax = fmax(amax, fabs((double)w[a].an[e]));
        for (size_t e = 0; e < w[a].n; e++) {
            float keep = w[a].v[e];
            w[a].v[e] = keep + h;
            double Lp = bn_loss(Xp, gp, bp, dYfix, rows, C, o);
            w[a].v[e] = keep - h;
            double Lm = bn_loss(Xp, gp, bp, dYfix, rows, C, o);
            w[a].v[e] = keep;
            double fd = (Lp - Lm) / (2.0 * (double)h);
            worst = fmax(worst, fabs(fd - (double)w[a].an[e]));
        }
        CHECK_MSG(worst <= 1e-2 * amax, "bn finite differences %s (%d x %d): off by %g of %g",
                  w[a].what, rows, C, worst, amax);
    }
    free(Xp);
    free(gp);
    free(bp);
}

/* The three batch-norm ops on `count` models of rows x C, X around `center`;
 * X shared when `shared`; finite differences when `fd`. */
static void test_bn(int rows, int C, int count, float center, int shared, int fd)
{
    size_t n = (size_t)rows * C, s = n + 3, sp = (size_t)C + 1, sst = 2 * (size_t)C + 2;
    size_t sg = (size_t)C + 2, sXin = shared ? 0 : s;
    float *X = fbuf(count * s), *dYf = fbuf(count * s), *gamma = fbuf(count * sp),
          *beta = fbuf(count * sp), *mm0 = fbuf(count * sp), *mv0 = fbuf(count * sp);
    fill(X, count * s, center - 1.0f, center + 1.0f);
    fill(dYf, count * s, -1.0f, 1.0f);
    fill(gamma, count * sp, 0.5f, 1.5f);
    fill(beta, count * sp, -0.5f, 0.5f);
    fill(mm0, count * sp, -0.2f, 0.2f);
    fill(mv0, count * sp, 0.5f, 1.5f);
    float mom[4] = {0.9f, 0.99f, 0.5f, 0.0f}, eps[4] = {1e-3f, 1e-5f, 1e-2f, 1e-3f};
    bn_step o = {mom, eps};
    float *Y[2], *mm[2], *mv[2], *st[2], *Yi[2], *dX[2], *dg[2], *db[2], *dg2[2], *db2[2];
    for (int t = 0; t < 2; t++) {
        Y[t] = fbuf(count * s);
        Yi[t] = fbuf(count * s);
        dX[t] = fbuf(count * s);
        st[t] = fbuf(count * sst);
        dg[t] = fbuf(count * sg);
        db[t] = fbuf(count * sg);
        dg2[t] = fbuf(count * sg);
        db2[t] = fbuf(count * sg);
        mm[t] = fbuf(count * sp);
        mv[t] = fbuf(count * sp);
        memcpy(mm[t], mm0, count * sp * sizeof(float));
        memcpy(mv[t], mv0, count * sp * sizeof(float));
        be->bn_fwd_train(ctx[t], Y[t], s, X, sXin, gamma, beta, mm[t], mv[t], sp, st[t], sst, rows,
                         C, &o, count);
        be->bn_fwd_infer(ctx[t], Yi[t], s, X, sXin, gamma, beta, mm0, mv0, sp, rows, C, &o, count);
        be->bn_bwd(ctx[t], dX[t], s, dYf, s, X, sXin, gamma, sp, st[t], sst, dg[t], db[t], sg, rows,
                   C, count);
        be->bn_bwd(ctx[t], NULL, 0, dYf, s, X, sXin, gamma, sp, st[t], sst, dg2[t], db2[t], sg,
                   rows, C, count);
    }
    char name[96];
    snprintf(name, sizeof name, "bn %d x %d, %d models, center %g%s", rows, C, count,
             (double)center, shared ? ", shared X" : "");
    CHECK_MSG(!memcmp(Y[0], Y[1], count * s * sizeof(float)) &&
                  !memcmp(st[0], st[1], count * sst * sizeof(float)) &&
                  !memcmp(mm[0], mm[1], count * sp * sizeof(float)) &&
                  !memcmp(mv[0], mv[1], count * sp * sizeof(float)),
              "%s: bn_fwd_train threads", name);
    CHECK_MSG(!memcmp(Yi[0], Yi[1], count * s * sizeof(float)), "%s: bn_fwd_infer threads", name);
    CHECK_MSG(!memcmp(dX[0], dX[1], count * s * sizeof(float)) &&
                  !memcmp(dg[0], dg[1], count * sg * sizeof(float)) &&
                  !memcmp(db[0], db[1], count * sg * sizeof(float)),
              "%s: bn_bwd threads", name);
    CHECK_MSG(!memcmp(dg2[0], dg[0], count * sg * sizeof(float)) &&
                  !memcmp(db2[0], db[0], count * sg * sizeof(float)),
              "%s: bn_bwd without dX", name);

    double *rY = malloc(n * sizeof(double)), *mean = malloc(C * sizeof(double)),
           *var = malloc(C * sizeof(double)), *inv = malloc(C * sizeof(double)),
           *r2 = malloc(3 * (size_t)C * sizeof(double));
    for (int k = 0; k < count; k++) {
        const float *Xk = X + k * sXin, *gk = gamma + k * sp, *bk = beta + k * sp;
        const float *dYk = dYf + k * s, *stk = st[0] + k * sst;
        ref_bn_train(Xk, gk, bk, eps[k], rows, C, rY, mean, var, inv);
        CHECK_MSG(near_all("bn Y", Y[0] + k * s, rY, n, 1e-5), "%s: Y of model %d", name, k);
        CHECK_MSG(near_all("bn mean", stk, mean, (size_t)C, 1e-5), "%s: mean %d", name, k);
        for (int ch = 0; ch < C; ch++)
            CHECK_MSG(fabs(stk[C + ch] - inv[ch]) <= 1e-5 * inv[ch], "%s: inv_std %d", name, ch);
        for (int ch = 0; ch < C; ch++) {
            r2[ch] = mom[k] * (double)mm0[k * sp + ch] + (1.0 - mom[k]) * mean[ch];
            r2[C + ch] = mom[k] * (double)mv0[k * sp + ch] + (1.0 - mom[k]) * var[ch];
        }
        CHECK_MSG(near_all("moving mean", mm[0] + k * sp, r2, (size_t)C, 1e-5) &&
                      near_all("moving var", mv[0] + k * sp, r2 + C, (size_t)C, 1e-5),
                  "%s: moving statistics %d", name, k);
        /* Inference from the moving statistics given. */
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < C; ch++)
                rY[(size_t)r * C + ch] =
                    gk[ch] * ((double)Xk[(size_t)r * C + ch] - mm0[k * sp + ch]) /
                        sqrt((double)mv0[k * sp + ch] + eps[k]) +
                    bk[ch];
        CHECK_MSG(near_all("bn infer", Yi[0] + k * s, rY, n, 1e-5), "%s: infer %d", name, k);
        /* The gradients, from the saved mean and inv_std. */
        for (int ch = 0; ch < C; ch++) {
            double sb = 0.0, sgm = 0.0, mu = stk[ch], iv = stk[C + ch];
            for (int r = 0; r < rows; r++) {
                double dy = dYk[(size_t)r * C + ch], xh = (Xk[(size_t)r * C + ch] - mu) * iv;
                sb += dy;
                sgm += dy * xh;
            }
            r2[ch] = sgm;
            r2[C + ch] = sb;
            for (int r = 0; r < rows; r++) {
                double dy = dYk[(size_t)r * C + ch], xh = (Xk[(size_t)r * C + ch] - mu) * iv;
                rY[(size_t)r * C + ch] = gk[ch] * iv * (dy - sb / rows - xh * sgm / rows);
            }
        }
        CHECK_MSG(near_all("dgamma", dg[0] + k * sg, r2, (size_t)C, 1e-5) &&
                      near_all("dbeta", db[0] + k * sg, r2 + C, (size_t)C, 1e-5),
                  "%s: dgamma, dbeta %d", name, k);
        CHECK_MSG(near_all("bn dX", dX[0] + k * s, rY, n, 1e-5), "%s: dX %d", name, k);
    }
    if (!shared) { /* in place: Y = X, dX = dY */
        float *Xy = fbuf(count * s), *d = fbuf(count * s);
        memcpy(Xy, X, count * s * sizeof(float));
        memcpy(d, dYf, count * s * sizeof(float));
        memcpy(mm[1], mm0, count * sp * sizeof(float));
        memcpy(mv[1], mv0, count * sp * sizeof(float));
        be->bn_bwd(ctx[1], d, s, d, s, X, s, gamma, sp, st[0], sst, dg[1], db[1], sg, rows, C,
                   count);
        be->bn_fwd_train(ctx[1], Xy, s, Xy, s, gamma, beta, mm[1], mv[1], sp, st[1], sst, rows, C,
                         &o, count);
        for (int k = 0; k < count; k++)
            CHECK_MSG(!memcmp(Xy + k * s, Y[0] + k * s, n * sizeof(float)) &&
                          !memcmp(d + k * s, dX[0] + k * s, n * sizeof(float)),
                      "bn %d x %d in place, model %d", rows, C, k);
        free(Xy);
        free(d);
    }
    if (fd)
        bn_fd(rows, C, X, gamma, beta, dYf, dX[0], dg[0], db[0], &o);
    free(rY);
    free(mean);
    free(var);
    free(inv);
    free(r2);
    for (int t = 0; t < 2; t++) {
        free(Y[t]);
        free(Yi[t]);
        free(dX[t]);
        free(st[t]);
        free(dg[t]);
        free(db[t]);
        free(dg2[t]);
        free(db2[t]);
        free(mm[t]);
        free(mv[t]);
    }
    free(X);
    free(dYf);
    free(gamma);
    free(beta);
    free(mm0);
    free(mv0);
}

/* ---- gemm ---- */

/* im2col and col2im of a dilated geometry (the convolutions' only window
 * ops that take a dilation) on both contexts, MODELS models, own or shared
 * inputs: im2col exact against the loops here, col2im near their double
 * sums and the adjoint of im2col, 1 and 2 threads bit for bit. Reading
 * every tap one pixel apart (the dilation ignored) fails each. */
static void test_dilated(window_geom g, int shared)
{
    const char *name = gname(&g);
    size_t ni = img_n(&g), nc = col_n(&g), si = ni + 7, sc = nc + 3;
    size_t in_si = shared ? 0 : si, in_sc = shared ? 0 : sc;
    float *X = fbuf(MODELS * si), *cin = fbuf(MODELS * sc), *rc = fbuf(nc);
    double *rd = malloc(ni * sizeof(double));
    fill(X, MODELS * si, -1.0f, 1.0f);
    fill(cin, MODELS * sc, -1.0f, 1.0f);
    float *col[2], *dX[2];
    for (int t = 0; t < 2; t++) {
        col[t] = fbuf(MODELS * sc);
        dX[t] = fbuf(MODELS * si);
        be->im2col(ctx[t], col[t], sc, X, in_si, &g, MODELS);
        be->col2im(ctx[t], dX[t], si, cin, in_sc, &g, MODELS);
    }
    CHECK_MSG(!memcmp(col[0], col[1], MODELS * sc * sizeof(float)), "im2col threads %s", name);
    CHECK_MSG(!memcmp(dX[0], dX[1], MODELS * si * sizeof(float)), "col2im threads %s", name);
    for (int k = 0; k < MODELS; k++) {
        const float *Xk = X + k * in_si, *ck = cin + k * in_sc;
        ref_im2col(rc, Xk, &g);
        CHECK_MSG(!memcmp(col[0] + k * sc, rc, nc * sizeof(float)), "im2col %s model %d", name,
                  k);
        ref_col2im(rd, ck, &g);
        CHECK_MSG(near_all("col2im", dX[0] + k * si, rd, ni, 1e-5), "col2im %s model %d", name, k);
        double lhs = 0.0, rhs = 0.0, scale = 0.0;
        for (size_t e = 0; e < ni; e++)
            lhs += (double)dX[0][k * si + e] * Xk[e];
        for (size_t e = 0; e < nc; e++) {
            rhs += (double)ck[e] * rc[e];
            scale += fabs((double)ck[e] * rc[e]);
        }
        CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * scale, "adjoint %s: %.9g vs %.9g", name, lhs, rhs);
    }
    for (int t = 0; t < 2; t++) {
        free(col[t]);
        free(dX[t]);
    }
    free(X), free(cin), free(rc), free(rd);
}

/* The backend's gemm of `count` problems on both contexts against one
 * cblas_sgemm each (C = 0.7 op(A) op(B) + 0.3 C), and ctx_none (OpenBLAS
 * alone) bit for bit. */
/*
 * The fused convolution ops (conv_fwd, conv_wgrad, conv_bwd_data) against
 * im2col and products in double: F filters, chunks of `chunk` images, ReLU;
 * 1 and 2 threads bit for bit. F % 16 == 0 takes the own kernel forward,
 * kc % 16 == 0 for the input gradient (six rows at a time, and the rows
 * left), F % 8 == 0 with kc <= 12 the small-window weight gradient; the
 * others OpenBLAS.
 */
static void test_conv(window_geom g, int F, int chunk)
{
    size_t kc = (size_t)g.kh * g.kw * g.c, rows = (size_t)g.n * g.oh * g.ow;
    size_t slots = ((size_t)g.n + (size_t)chunk - 1) / (size_t)chunk;
    size_t scratch_n = slots * (size_t)chunk * g.oh * g.ow * kc, part_n = slots * ((size_t)F * kc + F);
    float *X = fbuf(img_n(&g)), *W = fbuf((size_t)F * kc), *bias = fbuf((size_t)F);
    float *col = fbuf(rows * kc), *dYin = fbuf(rows * (size_t)F);
    fill(X, img_n(&g), -1, 1);
    fill(W, (size_t)F * kc, -0.5f, 0.5f);
    fill(bias, (size_t)F, -0.2f, 0.2f);
    fill(dYin, rows * (size_t)F, -1, 1);
    ref_im2col(col, X, &g);
    double *Yr = calloc(rows * (size_t)F, sizeof *Yr), *Gr = calloc((size_t)F * kc, sizeof *Gr);
    double *br = calloc((size_t)F, sizeof *br), *dXr = calloc(img_n(&g), sizeof *dXr);
    double *dcol = calloc(rows * kc, sizeof *dcol), *dZ = calloc(rows * (size_t)F, sizeof *dZ);
    float *dcolf = fbuf(rows * kc);
    for (size_t r = 0; r < rows; r++)
        for (int f = 0; f < F; f++) {
            double z = bias[f];
            for (size_t k = 0; k < kc; k++)
                z += (double)col[r * kc + k] * W[(size_t)f * kc + k];
            Yr[r * F + (size_t)f] = z > 0 ? z : 0;
        }
    float *Y[2], *Gw[2], *db[2], *dX[2], *dY[2];
    for (int t = 0; t < 2; t++) {
        float *scratch = fbuf(scratch_n), *part = fbuf(part_n);
        Y[t] = fbuf(rows * (size_t)F);
        Gw[t] = fbuf((size_t)F * kc);
        db[t] = fbuf((size_t)F);
        dX[t] = fbuf(img_n(&g));
        dY[t] = fbuf(rows * (size_t)F);
        memcpy(dY[t], dYin, rows * (size_t)F * sizeof(float));
        be->conv_fwd(ctx[t], Y[t], scratch, part, X, W, bias, &g, F, ACT_RELU, chunk);
        be->conv_wgrad(ctx[t], Gw[t], db[t], dY[t], Y[t], X, scratch, part, &g, F, ACT_RELU,
                       chunk);
        be->conv_bwd_data(ctx[t], dX[t], scratch, dY[t], W, &g, F, chunk);
        free(scratch);
        free(part);
    }
    /* dZ = dY * relu'(Y), then the gradients in double. */
    for (size_t i = 0; i < rows * (size_t)F; i++)
        dZ[i] = Y[0][i] > 0 ? dYin[i] : 0.0;
    for (size_t r = 0; r < rows; r++)
        for (int f = 0; f < F; f++) {
            double d = dZ[r * F + (size_t)f];
            br[f] += d;
            for (size_t k = 0; k < kc; k++) {
                Gr[(size_t)f * kc + k] += d * col[r * kc + k];
                dcol[r * kc + k] += d * W[(size_t)f * kc + k];
            }
        }
    for (size_t i = 0; i < rows * kc; i++)
        dcolf[i] = (float)dcol[i];
    ref_col2im(dXr, dcolf, &g);
    char what[256];
    snprintf(what, sizeof what, "conv F=%d chunk %d %s", F, chunk, gname(&g));
    CHECK_MSG(near_all(what, Y[0], Yr, rows * (size_t)F, 1e-4), "%s: forward", what);
    CHECK_MSG(near_all(what, Gw[0], Gr, (size_t)F * kc, 1e-4), "%s: weight gradient", what);
    CHECK_MSG(near_all(what, db[0], br, (size_t)F, 1e-4), "%s: bias gradient", what);
    CHECK_MSG(near_all(what, dX[0], dXr, img_n(&g), 1e-4), "%s: input gradient", what);
    CHECK_MSG(!memcmp(Y[0], Y[1], rows * (size_t)F * sizeof(float)) &&
                  !memcmp(Gw[0], Gw[1], (size_t)F * kc * sizeof(float)) &&
                  !memcmp(db[0], db[1], (size_t)F * sizeof(float)) &&
                  !memcmp(dX[0], dX[1], img_n(&g) * sizeof(float)),
              "%s: 1 and 2 threads differ", what);
    for (int t = 0; t < 2; t++) {
        free(Y[t]);
        free(Gw[t]);
        free(db[t]);
        free(dX[t]);
        free(dY[t]);
    }
    free(X), free(W), free(bias), free(col), free(dYin), free(Yr), free(Gr), free(br);
    free(dXr), free(dcol), free(dZ), free(dcolf);
}

static void test_gemm(backend_ctx *ctx_none, int M, int N, int Kd, int count)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : Kd) + 3, ldb = (tb ? Kd : N) + 1, ldc = N + 2;
            size_t sA = (size_t)(ta ? Kd : M) * lda + 5, sB = (size_t)(tb ? N : Kd) * ldb + 1;
            size_t sC = (size_t)M * ldc + 7;
            float *A = fbuf(count * sA), *B = fbuf(count * sB), *C0 = fbuf(count * sC);
            float *C[3], *ref = fbuf(count * sC);
            fill(A, count * sA, -1.0f, 1.0f);
            fill(B, count * sB, -1.0f, 1.0f);
            fill(C0, count * sC, -1.0f, 1.0f);
            memcpy(ref, C0, count * sC * sizeof(float));
            for (int k = 0; k < count; k++)
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, M, N, Kd, 0.7f, A + k * sA, lda,
                            B + k * sB, ldb, 0.3f, ref + k * sC, ldc);
            for (int t = 0; t < 3; t++) {
                C[t] = fbuf(count * sC);
                memcpy(C[t], C0, count * sC * sizeof(float));
                be->gemm(t < 2 ? ctx[t] : ctx_none, ta, tb, M, N, Kd, 0.7f, A, lda, sA, B, ldb, sB,
                         0.3f, C[t], ldc, sC, count);
            }
            CHECK_MSG(!memcmp(C[0], C[1], count * sC * sizeof(float)),
                      "gemm %d x %d x %d (%d%d) x%d: threads differ", M, N, Kd, ta, tb, count);
            CHECK_MSG(!memcmp(C[2], ref, count * sC * sizeof(float)),
                      "gemm without kernels %d x %d x %d differs from cblas", M, N, Kd);
            double worst = 0.0;
            for (size_t e = 0; e < count * sC; e++)
                worst = fmax(worst, fabs((double)C[0][e] - ref[e]) / (1.0 + fabs((double)ref[e])));
            CHECK_MSG(worst <= 1e-5, "gemm %d x %d x %d (%d%d) x%d: off by %g", M, N, Kd, ta, tb,
                      count, worst);
            for (int t = 0; t < 3; t++)
                free(C[t]);
            free(A);
            free(B);
            free(C0);
            free(ref);
        }
}

/*
 * Not an image kernel, but this file has the contexts of 1 and 2 threads:
 * the pool's threads flush denormals as the calling thread does while it
 * trains. Adam's step with every gradient zero adds (0 - m) * 0.1 to m:
 * from m = 1.2e-38 a denormal, flushed to 0, so m stays as it was (without
 * the flush, 0.9 of it: a denormal). The 2-thread context, whose worker
 * takes its share of the rows of W, must give the 1-thread one's slots bit
 * for bit over steps, each from the same tiny m and v.
 */
static void test_pooling_denormals(void)
{
    enum { ROWS = 64, OUT = 64, IN = 256, STEPS = 20 };
    size_t n = (size_t)OUT * IN;
    float *W[2], *m[2], *v[2];
    float *dZ = fbuf((size_t)ROWS * OUT), *X = fbuf((size_t)ROWS * IN);
    fill(X, (size_t)ROWS * IN, -1.0f, 1.0f);
    for (size_t i = 0; i < (size_t)ROWS * OUT; i++)
        dZ[i] = 0.0f;
    optim_spec os;
    optim_defaults(&os, OPT_ADAM); /* lr 1e-3, betas 0.9, 0.999, epsilon 1e-7 */
    optim_memo memo = {0, 0};
    unsigned char active = 1;
    unsigned fp = fp_flush_denormals();
    size_t differ = 0, denormal = 0;
    for (int c = 0; c < 2; c++) {
        W[c] = fbuf(n);
        m[c] = fbuf(n);
        v[c] = fbuf(n);
        for (size_t i = 0; i < n; i++)
            W[c][i] = 0.5f;
    }
    for (int64_t t = 1; t <= STEPS; t++) {
        optim_scalars sc;
        optim_entry_of(OPT_ADAM)->scalars(&os, os.lr, t, &memo, &sc);
        optim_step o = {&sc, &active};
        for (int c = 0; c < 2; c++) {
            for (size_t i = 0; i < n; i++) {
                m[c][i] = 1.2e-38f;
                v[c][i] = 1.2e-38f;
            }
            CHECK(be->dense_step(ctx[c], OPT_ADAM, W[c], m[c], v[c], n, dZ, OUT, 0, X, IN, 0,
                                 ROWS, OUT, IN, &o, 1));
        }
        differ += memcmp(m[0], m[1], n * sizeof(float)) != 0 ||
                  memcmp(v[0], v[1], n * sizeof(float)) != 0 ||
                  memcmp(W[0], W[1], n * sizeof(float)) != 0;
        for (int c = 0; c < 2; c++)
            for (size_t i = 0; i < n; i++) {
                uint32_t u; /* by its bits: with DAZ on, a comparison sees 0 */
                memcpy(&u, &m[c][i], sizeof u);
                denormal += (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
            }
    }
    fp_restore(fp);
    CHECK_MSG(differ == 0, "pool denormals: 2 threads differ from 1 in %zu of %d Adam steps",
              differ, STEPS);
    CHECK_MSG(denormal == 0, "pool denormals: %zu denormal values of m kept", denormal);
    for (int c = 0; c < 2; c++) {
        free(W[c]);
        free(m[c]);
        free(v[c]);
    }
    free(dZ);
    free(X);
}

/* Dropout on contexts of 1 and 2 threads: every mask element is keep =
 * 1/(1 - rate) where rng_hash_uniform(key, counter) >= rate and +0 where
 * not, bit for bit, and Y = X * mask, over rates whose threshold falls on
 * and between the hash's 2^-24 steps, with tails past the vectors and the
 * pool's blocks of 1024. */
static void test_dropout(void)
{
    static const float rates[] = {0.0f, 0.1f, 0.25f, 0.5f, 1.0f / 3.0f, 0.9f, 0.99999994f};
    const size_t n = 2500, s = 2507;
    const int count = 2;
    float rate[2];
    uint64_t key[2] = {0x9e3779b97f4a7c15ULL, 12345};
    float *X = fbuf(s * count), *Y = fbuf(s * count), *M = fbuf(s * count);
    fill(X, s * count, -2.0f, 2.0f);
    for (size_t r = 0; r < sizeof rates / sizeof *rates; r++)
        for (int t = 0; t < 2; t++) {
            rate[0] = rates[r];
            rate[1] = rates[(r + 3) % (sizeof rates / sizeof *rates)];
            uint64_t counter0 = 1000003ULL * r + 17;
            be->dropout_fwd(ctx[t], Y, X, M, s, n, rate, key, counter0, count);
            size_t bad = 0, kept = 0;
            for (int k = 0; k < count; k++) {
                float keep = 1.0f / (1.0f - rate[k]);
                for (size_t i = 0; i < n; i++) {
                    float m = rng_hash_uniform(key[k], counter0 + i) >= rate[k] ? keep : 0.0f;
                    float y = X[k * s + i] * m;
                    bad += memcmp(&m, &M[k * s + i], sizeof m) != 0 ||
                           memcmp(&y, &Y[k * s + i], sizeof y) != 0;
                    kept += k == 0 && m != 0.0f;
                }
            }
            CHECK_MSG(bad == 0, "dropout rate %g, %d threads: %zu elements differ", rates[r],
                      t + 1, bad);
            double frac = (double)kept / (double)n, want = 1.0 - rates[r];
            CHECK_MSG(fabs(frac - want) < 0.05, "dropout rate %g keeps %.3f", rates[r], frac);
        }
    /* On the boundary: a rate equal to an element's own draw keeps it, the
     * next float above drops it. */
    for (uint64_t c = 0; c < 40; c++) {
        uint64_t counter0 = 777 + 1000 * c;
        float u = rng_hash_uniform(key[0], counter0);
        rate[0] = rate[1] = u;
        be->dropout_fwd(ctx[0], Y, X, M, s, 1, rate, key, counter0, count);
        CHECK_MSG(M[0] == 1.0f / (1.0f - u), "dropout at rate == draw %.9g dropped it", u);
        rate[0] = rate[1] = nextafterf(u, 1.0f);
        be->dropout_fwd(ctx[0], Y, X, M, s, 1, rate, key, counter0, count);
        CHECK_MSG(M[0] == 0.0f, "dropout at rate just above draw %.9g kept it", u);
    }
    free(X);
    free(Y);
    free(M);
}

/*
 * The convolutions' own kernels bit for bit against one fmaf a term in k
 * (or row) order, for each vector ISA the CPU has: kern_conv_fwd_own (the
 * forward product read straight from X) over images [i0, n), and
 * kern_gemm_own over kern_im2col's rows, must both give those bits, which
 * is what lets the backend take either; kern_conv_small_wgrad with 8, 16,
 * 32 and 48 filters (AVX-512's two vectors a pass, one, and AVX2's).
 */
static void test_conv_own_exact(window_geom g, int F, int i0)
{
    size_t kc = (size_t)g.kh * g.kw * g.c, pix = (size_t)g.oh * g.ow;
    size_t rows = (size_t)(g.n - i0) * pix;
    float *X = fbuf(img_n(&g)), *wt = fbuf(kc * (size_t)F), *col = fbuf(rows * kc);
    float *ref = fbuf(rows * (size_t)F), *Y = fbuf(rows * (size_t)F);
    float *dY = fbuf(rows * (size_t)F), *G = fbuf((size_t)F * kc), *Gr = fbuf((size_t)F * kc);
    fill(X, img_n(&g), -1, 1);
    fill(wt, kc * (size_t)F, -0.5f, 0.5f);
    fill(dY, rows * (size_t)F, -1, 1);
    kern_im2col(col, X, &g, i0, g.n);
    for (size_t r = 0; r < rows; r++)
        for (int f = 0; f < F; f++) {
            float y = 0.0f;
            for (size_t k = 0; k < kc; k++)
                y = fmaf(col[r * kc + k], wt[k * (size_t)F + (size_t)f], y);
            ref[r * (size_t)F + (size_t)f] = y;
        }
    for (int f = 0; f < F; f++)
        for (size_t k = 0; k < kc; k++) {
            float s = 0.0f;
            for (size_t r = 0; r < rows; r++)
                s = fmaf(dY[r * (size_t)F + (size_t)f], col[r * kc + k], s);
            Gr[(size_t)f * kc + k] = s;
        }
    char what[256];
    snprintf(what, sizeof what, "F=%d from image %d of %s", F, i0, gname(&g));
    CHECK_MSG(conv_fwd_own_ok(&g, F) == (F % 16 == 0), "%s: conv_fwd_own_ok", what);
    cpu_isa best = cpu_isa_detect();
    for (cpu_isa isa = ISA_AVX2; isa <= best; isa++) {
        if (conv_fwd_own_ok(&g, F)) {
            memset(Y, 0xff, rows * (size_t)F * sizeof(float));
            kern_conv_fwd_own(isa, Y, (size_t)F, X, &g, i0, g.n, wt, (size_t)F, F);
            CHECK_MSG(!memcmp(Y, ref, rows * (size_t)F * sizeof(float)),
                      "%s %s: kern_conv_fwd_own differs from the fmaf sums", cpu_isa_name(isa), what);
            memset(Y, 0xff, rows * (size_t)F * sizeof(float));
            kern_gemm_own(isa, Y, (size_t)F, col, kc, 1, wt, (size_t)F, (int)rows, F, (int)kc);
            CHECK_MSG(!memcmp(Y, ref, rows * (size_t)F * sizeof(float)),
                      "%s %s: kern_gemm_own differs from the fmaf sums", cpu_isa_name(isa), what);
        }
        if (conv_small_ok((int)kc, F)) {
            memset(G, 0xff, (size_t)F * kc * sizeof(float));
            kern_conv_small_wgrad(isa, G, dY, col, (int)rows, F, (int)kc);
            CHECK_MSG(!memcmp(G, Gr, (size_t)F * kc * sizeof(float)),
                      "%s %s: kern_conv_small_wgrad differs from the fmaf sums", cpu_isa_name(isa),
                      what);
        }
    }
    free(X), free(wt), free(col), free(ref), free(Y), free(dY), free(G), free(Gr);
}


/*
 * Layer normalization and attention's softmax (norm_attn.c) on contexts of 1
 * and 2 threads against the row functions that the CUDA plugin runs
 * (norm_rows.h, attn_rows.h) called one row or column at a time here: bit
 * for bit, so a split, an interleaving or a column sum that changes an
 * order fails. Rows past the interleaved groups and the parts' units,
 * columns past a unit of LN_COLS, two models, shapes large enough for the
 * pool to split them; masked keys and queries, causal or not.
 */
#include "backend/attn_rows.h"
#include "backend/norm_rows.h"

static void test_layer_norm_threads(int rows, int C, int count)
{
    size_t sX = (size_t)rows * C + 3, sp = (size_t)C + 1, sst = 2 * (size_t)rows + 1;
    size_t nX = sX * count, nst = sst * count, np = sp * count;
    float *X = fbuf(nX), *dY = fbuf(nX), *gam = fbuf(np), *bet = fbuf(np);
    fill(X, nX, -2, 2);
    fill(dY, nX, -1, 1);
    fill(gam, np, 0.5f, 1.5f);
    fill(bet, np, -1, 1);
    float eps[2] = {1e-3f, 1e-5f};
    float *Y[3], *st[3], *dX[3], *dg[3];
    for (int t = 0; t < 3; t++) {
        Y[t] = fbuf(nX), st[t] = fbuf(nst), dX[t] = fbuf(nX), dg[t] = fbuf(2 * np);
        memset(Y[t], 0, nX * sizeof(float));
        memset(st[t], 0, nst * sizeof(float));
        memset(dX[t], 0, nX * sizeof(float));
        memset(dg[t], 0, 2 * np * sizeof(float));
    }
    for (int t = 0; t < 2; t++) {
        be->ln_fwd(ctx[t], Y[t], sX, X, sX, gam, bet, sp, st[t], sst, eps, rows, C, count);
        be->ln_bwd(ctx[t], dX[t], sX, dY, sX, X, sX, gam, sp, st[t], sst, dg[t], dg[t] + sp,
                   2 * sp, rows, C, count);
    }
    for (int k = 0; k < count; k++) {
        for (int r = 0; r < rows; r++) {
            size_t o = k * sX + (size_t)r * C;
            ln_row_fwd(Y[2] + o, X + o, gam + k * sp, bet + k * sp, st[2] + k * sst + 2 * (size_t)r,
                       eps[k], C);
            ln_row_bwd(dX[2] + o, dY + o, X + o, gam + k * sp, st[2] + k * sst + 2 * (size_t)r, C);
        }
        for (int j = 0; j < C; j++)
            ln_col_grad(dg[2] + k * 2 * sp + j, dg[2] + k * 2 * sp + sp + j, dY + k * sX, C,
                        X + k * sX, C, st[2] + k * sst, rows, j);
    }
    for (int t = 0; t < 2; t++) {
        CHECK_MSG(!memcmp(Y[t], Y[2], nX * sizeof(float)) &&
                      !memcmp(st[t], st[2], nst * sizeof(float)),
                  "ln_fwd %d x %d x%d, %d thread(s): not ln_row_fwd's bits", rows, C, count, t + 1);
        CHECK_MSG(!memcmp(dX[t], dX[2], nX * sizeof(float)),
                  "ln_bwd %d x %d x%d, %d thread(s): dX not ln_row_bwd's bits", rows, C, count,
                  t + 1);
        CHECK_MSG(!memcmp(dg[t], dg[2], 2 * np * sizeof(float)),
                  "ln_bwd %d x %d x%d, %d thread(s): dgamma, dbeta not ln_col_grad's bits", rows,
                  C, count, t + 1);
    }
    for (int t = 0; t < 3; t++)
        free(Y[t]), free(st[t]), free(dX[t]), free(dg[t]);
    free(X), free(dY), free(gam), free(bet);
}

static void test_attn_softmax_threads(int n, int H, int T, int causal, int masked, int count)
{
    size_t sS = (size_t)H * n * T * T + 5, stok = (size_t)n * T + 1, nS = sS * count;
    float *S0 = fbuf(nS), *dS0 = fbuf(nS), *tok = fbuf(stok * count);
    fill(S0, nS, -4, 4);
    fill(dS0, nS, -1, 1);
    for (int k = 0; k < count; k++)
        for (int b = 0; b < n; b++)
            for (int t = 0; t < T; t++) /* b % T tokens of padding, before or after */
                tok[k * stok + (size_t)b * T + t] =
                    (b % 2 ? t < b % T : t >= T - b % T) ? 0.0f : 1.0f + (float)(t % 3);
    const float *tk = masked ? tok : NULL;
    float *S[3], *dS[3];
    for (int t = 0; t < 3; t++) {
        S[t] = fbuf(nS), dS[t] = fbuf(nS);
        memcpy(S[t], S0, nS * sizeof(float));
        memcpy(dS[t], dS0, nS * sizeof(float));
    }
    for (int t = 0; t < 2; t++) {
        be->attn_softmax_fwd(ctx[t], S[t], sS, tk, stok, n, H, T, causal, count);
        be->attn_softmax_bwd(ctx[t], dS[t], sS, S[t], sS, n, H, T, count);
    }
    for (int k = 0; k < count; k++)
        for (size_t r = 0; r < (size_t)H * n * T; r++) {
            size_t b = r / (size_t)T % (size_t)n, o = k * sS + r * (size_t)T;
            attn_row_softmax(S[2] + o, tk ? tk + k * stok + b * (size_t)T : NULL, causal,
                             (int)(r % (size_t)T), T);
            attn_row_softmax_bwd(dS[2] + o, S[2] + o, T);
        }
    for (int t = 0; t < 2; t++)
        CHECK_MSG(!memcmp(S[t], S[2], nS * sizeof(float)) &&
                      !memcmp(dS[t], dS[2], nS * sizeof(float)),
                  "attn_softmax n %d H %d T %d causal %d masked %d x%d, %d thread(s): not the "
                  "rows' bits",
                  n, H, T, causal, masked, count, t + 1);
    for (int t = 0; t < 3; t++)
        free(S[t]), free(dS[t]);
    free(S0), free(dS0), free(tok);
}


/* bias_act and act_backward on contexts of 1 and 2 threads against one call
 * of the kernels over all of each model's values, bit for bit: every
 * element's own function, whatever the split (two models, rows past the
 * parts' units, a run of values past ACT_UNIT). */
#include "backend/cpu/kernels.h"

static void test_act_threads(act_kind act, int rows, int cols, int with_bias)
{
    enum { COUNT = 2 };
    size_t sY = (size_t)rows * cols + 7, n = sY * COUNT, sb = (size_t)cols + 1;
    float *Z = fbuf(n), *dY = fbuf(n), *bias = fbuf(sb * COUNT), *Y[3], *d[3];
    fill(Z, n, -4, 4);
    fill(dY, n, -1, 1);
    fill(bias, sb * COUNT, -0.5f, 0.5f);
    for (int t = 0; t < 3; t++) {
        Y[t] = fbuf(n), d[t] = fbuf(n);
        memcpy(Y[t], Z, n * sizeof(float));
        memcpy(d[t], dY, n * sizeof(float));
    }
    const float *b = with_bias ? bias : NULL;
    size_t m = (size_t)rows * cols;
    for (int t = 0; t < 2; t++) {
        be->bias_act(ctx[t], Y[t], sY, b, sb, rows, cols, act, COUNT);
        be->act_backward(ctx[t], d[t], sY, Z, sY, m, act, COUNT);
    }
    for (int k = 0; k < COUNT; k++) {
        kern_bias_act(Y[2] + k * sY, b ? b + k * sb : NULL, rows, cols, act);
        kern_act_backward(d[2] + k * sY, Z + k * sY, m, act);
    }
    for (int t = 0; t < 2; t++)
        CHECK_MSG(!memcmp(Y[t], Y[2], n * sizeof(float)) && !memcmp(d[t], d[2], n * sizeof(float)),
                  "%s %d x %d%s, %d thread(s): bias_act or act_backward differ from one call",
                  act_name(act), rows, cols, with_bias ? " with bias" : "", t + 1);
    for (int t = 0; t < 3; t++)
        free(Y[t]), free(d[t]);
    free(Z), free(dY), free(bias);
}


/* Many tiny products in one call (a Transformer's attention: a head's
 * scores and contexts over the samples, at strides of their own, alpha 1
 * or 1/sqrt(dk)), which the pool now splits by problem: 1 and 2 threads
 * bit for bit, and each problem against one cblas_sgemm within rounding. */
static void test_gemm_many(int M, int N, int Kd, int count, float alpha)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : Kd) + 5, ldb = (tb ? Kd : N) + 3, ldc = N + 1;
            size_t sA = (size_t)(ta ? Kd : M) * lda, sB = (size_t)(tb ? N : Kd) * ldb + 2;
            size_t sC = (size_t)M * ldc + 3;
            float *A = fbuf(count * sA), *B = fbuf(count * sB), *C[2], *ref = fbuf(count * sC);
            fill(A, count * sA, -1.0f, 1.0f);
            fill(B, count * sB, -1.0f, 1.0f);
            memset(ref, 0, count * sC * sizeof(float));
            for (int k = 0; k < count; k++)
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, M, N, Kd, alpha, A + k * sA, lda,
                            B + k * sB, ldb, 0.0f, ref + k * sC, ldc);
            for (int t = 0; t < 2; t++) {
                C[t] = fbuf(count * sC);
                memset(C[t], 0, count * sC * sizeof(float));
                be->gemm(ctx[t], ta, tb, M, N, Kd, alpha, A, lda, sA, B, ldb, sB, 0.0f, C[t], ldc,
                         sC, count);
            }
            CHECK_MSG(!memcmp(C[0], C[1], count * sC * sizeof(float)),
                      "gemm %d x %d x %d (%d%d) x%d alpha %g: threads differ", M, N, Kd, ta, tb,
                      count, alpha);
            double worst = 0.0;
            for (size_t e = 0; e < count * sC; e++)
                worst = fmax(worst, fabs((double)C[1][e] - ref[e]) / (1.0 + fabs((double)ref[e])));
            CHECK_MSG(worst <= 1e-5, "gemm %d x %d x %d (%d%d) x%d alpha %g: off by %g", M, N, Kd,
                      ta, tb, count, alpha, worst);
            free(C[0]), free(C[1]), free(A), free(B), free(ref);
        }
}

int main(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rng_seed(&rng, 42, 0);
    openblas_set_num_threads(backend_cpu_blas_threads(2));
    be = backend_cpu();
    cohort_error err;
    CHECK(be->model_major == 1 && be->stats_every == 1);
    CHECK(be->ctx_create(0, 1, &ctx[0], &err) == COHORT_OK);
    CHECK(be->ctx_create(0, 2, &ctx[1], &err) == COHORT_OK);
    setenv("COHORT_CPU_KERNELS", "blas", 1);
    backend_ctx *ctx_none = NULL;
    CHECK(be->ctx_create(0, 2, &ctx_none, &err) == COHORT_OK);
    unsetenv("COHORT_CPU_KERNELS");
    if (!ctx[0] || !ctx[1] || !ctx_none)
        return check_done("test_window");
    test_dropout();
    test_layer_norm_threads(2053, 32, 2);
    test_layer_norm_threads(1031, 19, 2);
    test_layer_norm_threads(6, 5, 1);
    for (int causal = 0; causal < 2; causal++)
        for (int masked = 0; masked < 2; masked++)
            test_attn_softmax_threads(130, 4, 16, causal, masked, 2);
    test_attn_softmax_threads(3, 2, 7, 1, 1, 1);
    for (int a = ACT_GELU; a <= ACT_SILU; a++)
        for (int with_bias = 0; with_bias < 2; with_bias++)
            test_act_threads((act_kind)a, 2053, 128, with_bias);
    test_act_threads(ACT_SIGMOID, 1031, 33, 1);
    test_act_threads(ACT_RELU, 9001, 128, 1);
    test_act_threads(ACT_TANH, 3, 5, 0);

    /* n, h, w, c, kh, kw, sh, sw, same */
    static const int geoms[][9] = {
        {2, 7, 5, 3, 3, 3, 1, 1, 1}, {2, 7, 5, 3, 3, 3, 2, 2, 1}, {2, 7, 5, 1, 3, 3, 2, 2, 0},
        {2, 7, 5, 3, 3, 3, 1, 1, 0}, {2, 6, 6, 3, 3, 3, 2, 2, 1}, {3, 6, 6, 3, 2, 2, 2, 2, 0},
        {2, 7, 5, 3, 2, 2, 2, 2, 1}, {2, 7, 5, 1, 2, 2, 1, 1, 1}, {2, 5, 7, 1, 1, 1, 1, 1, 0},
        {2, 5, 7, 3, 1, 1, 2, 2, 1}, {2, 7, 5, 3, 3, 2, 2, 1, 1}, {1, 4, 4, 2, 3, 3, 1, 1, 0},
        {2, 5, 7, 4, 5, 7, 1, 1, 0}, /* global pooling */
        {1, 3, 2, 2, 5, 5, 1, 1, 1}, /* a window larger than the image */
        {8, 16, 16, 3, 3, 3, 1, 1, 1}, {16, 16, 16, 8, 2, 2, 2, 2, 0}, /* big: split */
        {9, 15, 13, 5, 3, 3, 2, 2, 1}, {2, 7, 5, 3, 2, 2, 2, 2, 0}, {1, 9, 7, 4, 2, 2, 2, 2, 0},
    };
    for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++) {
        const int *q = geoms[i];
        window_geom g = geom(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8]);
        test_geom(g, 0);
        test_geom(g, 1);
    }
    /* Dilated windows: a sequence (w = 1) valid, same and causal, dilation
     * 2 and 3; a dilation in both axes; a dilated window wider than the
     * image's own padding. */
    static const int dgeoms[][9] = {
        /* n, h, w, c, kh, kw, dh, dw, pad (0 valid, 1 same, 2 causal) */
        {3, 11, 1, 4, 3, 1, 2, 1, 0}, {3, 11, 1, 4, 3, 1, 2, 1, 1}, {3, 11, 1, 4, 3, 1, 2, 1, 2},
        {2, 9, 1, 3, 2, 1, 3, 1, 2},  {2, 10, 1, 5, 4, 1, 3, 1, 1}, {2, 7, 8, 2, 2, 3, 3, 2, 1},
        {2, 7, 8, 2, 3, 2, 2, 3, 0},  {40, 30, 1, 16, 5, 1, 2, 1, 2}, /* big: split */
    };
    for (size_t i = 0; i < sizeof dgeoms / sizeof dgeoms[0]; i++) {
        const int *q = dgeoms[i];
        window_geom g = geom_dil(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8]);
        test_dilated(g, 0);
        test_dilated(g, 1);
    }
    test_conv(geom_dil(12, 13, 1, 4, 3, 1, 2, 1, 2), 16, 4); /* kc 12: small wgrad, own fwd */
    test_conv(geom_dil(9, 11, 1, 16, 3, 1, 3, 1, 1), 16, 2); /* kc 48: own fwd and dX */
    test_conv(geom_dil(7, 12, 1, 5, 2, 1, 4, 1, 0), 6, 3);   /* OpenBLAS's */

    /* Fused convolutions: small windows (kc <= 12, F % 8 == 0) and OpenBLAS's. */
    test_conv(geom(12, 9, 8, 1, 3, 3, 1, 1, 0), 16, 4);
    test_conv(geom(12, 9, 8, 1, 3, 3, 1, 1, 1), 8, 5);
    test_conv(geom(7, 9, 8, 1, 2, 2, 2, 2, 0), 24, 3);
    test_conv(geom(10, 7, 5, 3, 3, 3, 1, 1, 1), 16, 1);
    test_conv(geom(9, 7, 5, 3, 3, 3, 2, 2, 0), 6, 2);
    test_conv(geom(64, 12, 12, 1, 3, 3, 1, 1, 0), 32, 2); /* big enough to split */
    test_conv(geom(5, 9, 9, 8, 3, 3, 1, 1, 0), 32, 2);    /* kc 72: own forward only */
    test_conv(geom(4, 7, 6, 16, 3, 3, 1, 1, 1), 16, 2);   /* kc 144: own forward and dX */
    test_conv(geom(3, 6, 5, 8, 2, 2, 1, 1, 0), 24, 1);    /* kc 32: own dX only */
    if (cpu_isa_detect() != ISA_NONE) {
        /* valid windows: the forward without col; kc 9 for the small weight gradient */
        static const int exact[][9] = {
            {3, 8, 7, 1, 3, 3, 1, 1, 0}, {2, 9, 8, 2, 3, 2, 2, 1, 0}, {3, 7, 6, 3, 3, 3, 1, 1, 0},
            {2, 6, 6, 32, 3, 3, 1, 1, 0}, {2, 8, 9, 1, 3, 3, 2, 2, 0}, {2, 5, 5, 4, 1, 1, 1, 1, 1},
        };
        static const int filters[] = {8, 16, 32, 48, 64};
        for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
            for (size_t f = 0; f < sizeof filters / sizeof filters[0]; f++) {
                const int *q = exact[i];
                window_geom g = geom(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8]);
                test_conv_own_exact(g, filters[f], 0);
                test_conv_own_exact(g, filters[f], 1);
            }
        /* `same` padding reads zeros, a dilated window is no run: the forward keeps col */
        window_geom same = geom(2, 7, 5, 3, 3, 3, 1, 1, 1), dil = geom_dil(2, 9, 9, 2, 3, 3, 2, 2, 0);
        CHECK(!conv_fwd_own_ok(&same, 16));
        CHECK(!conv_fwd_own_ok(&dil, 16)); /* a dilated window's taps are not one run */
    }

    if (be->dense_step)
        test_pooling_denormals();

    /* The padding of `same`: the odd pixel after the image. */
    window_geom g = geom(1, 6, 6, 1, 3, 3, 2, 2, 1);
    CHECK(g.oh == 3 && g.pad_top == 0 && g.pad_left == 0);
    g = geom(1, 7, 5, 1, 3, 3, 1, 1, 1);
    CHECK(g.oh == 7 && g.ow == 5 && g.pad_top == 1 && g.pad_left == 1);

    test_bn(12, 3, 1, 0.0f, 0, 1);
    test_bn(12, 3, 2, 3.0f, 0, 1);
    test_bn(7, 300, 2, 0.0f, 1, 0);   /* channels past one block of 256 */
    test_bn(1024, 40, 1, 0.0f, 0, 0); /* split inside a model */
    test_bn(1024, 40, 3, 0.0f, 1, 0);
    test_bn(500, 17, 2, 100.0f, 0, 0); /* a large mean */
    test_bn(5000, 24, 1, 0.0f, 0, 0);  /* several row blocks, split among the threads */
    test_bn(9000, 8, 2, 50.0f, 1, 0);

    test_gemm(ctx_none, 1000, 70, 100, 1); /* tiled by rows and columns */
    test_gemm(ctx_none, 40, 900, 150, 1);  /* few rows: tiled by columns */
    test_gemm(ctx_none, 300, 64, 300, 1);
    test_gemm(ctx_none, 400, 100, 120, 2); /* tiled, two problems */
    test_gemm(ctx_none, 100, 50, 100, 4);  /* split by problem */
    test_gemm(ctx_none, 5, 3, 7, 3);       /* small */
    test_gemm_many(16, 16, 8, 200, 1.0f);  /* many tiny problems, split by problem */
    test_gemm_many(16, 8, 16, 200, 0.35f);
    test_gemm_many(7, 16, 5, 301, 1.0f);

    for (int t = 0; t < 2; t++)
        be->ctx_free(ctx[t]);
    be->ctx_free(ctx_none);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("test_window: %.2f s\n", (double)(t1.tv_sec - t0.tv_sec) +
                                        (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return check_done("test_window");
}
