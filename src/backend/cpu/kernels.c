#include "backend/cpu/kernels.h"
#include "backend/cpu/dense_step.h"
#include "backend/cpu/vmath.h"
#include "backend/backend_impl.h"
#include "backend/rnn_cell.h"
#include "backend/cpu/vmath.h"
#include "util/util.h"

#include <math.h>
#include <string.h>

/* The math unit's function for an activation that has one (vmath.h): the
 * transcendental ones, in place over contiguous values. */
static int act_vm_op(act_kind act, vm_op *op)
{
    switch (act) {
    case ACT_SIGMOID: *op = VM_SIGMOID; return 1;
    case ACT_TANH: *op = VM_TANH; return 1;
    case ACT_GELU: *op = VM_GELU; return 1;
    case ACT_SILU: *op = VM_SILU; return 1;
    case ACT_RELU:
    case ACT_LINEAR:
    case ACT_SOFTMAX: break;
    }
    return 0;
}

void kern_bias_act(float *Y, const float *bias, int rows, int cols, act_kind act)
{
    if (!bias) {
        /* No bias (the Activation layer): the rows are one run of values. */
        kern_bias_act_flat(Y, (size_t)rows * (size_t)cols, act);
        return;
    }
    vm_op op = VM_EXP;
    int vm = act_vm_op(act, &op);
    for (int r = 0; r < rows; r++) {
        float *y = Y + (size_t)r * (size_t)cols;
        if (act == ACT_RELU) {
            for (int j = 0; j < cols; j++) {
                float z = y[j] + bias[j];
                y[j] = z > 0.0f ? z : 0.0f;
            }
            continue;
        }
        for (int j = 0; j < cols; j++)
            y[j] += bias[j];
        if (vm)
            vm_map(op, y, y, (size_t)cols);
    }
}

void kern_bias_act_flat(float *Y, size_t n, act_kind act)
{
    vm_op op = VM_EXP;
    if (act == ACT_RELU) {
        for (size_t i = 0; i < n; i++)
            Y[i] = Y[i] > 0.0f ? Y[i] : 0.0f;
    } else if (act_vm_op(act, &op))
        vm_map(op, Y, Y, n);
}

void kern_act_backward(float *d, const float *Y, size_t n, act_kind act)
{
    switch (act) {
    case ACT_RELU:
        for (size_t i = 0; i < n; i++)
            d[i] = Y[i] > 0.0f ? d[i] : 0.0f;
        break;
    case ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            d[i] *= Y[i] * (1.0f - Y[i]);
        break;
    case ACT_TANH:
        for (size_t i = 0; i < n; i++)
            d[i] *= 1.0f - Y[i] * Y[i];
        break;
    case ACT_GELU: /* Y holds the input z (act_needs_input) */
        vm_map(VM_GELU_GRAD, d, Y, n);
        break;
    case ACT_SILU:
        vm_map(VM_SILU_GRAD, d, Y, n);
        break;
    case ACT_LINEAR:
    case ACT_SOFTMAX:
        break;
    }
}

void kern_bias_grad(float *db, const float *dZ, int rows, int cols)
{
    for (int j = 0; j < cols; j++)
        db[j] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *d = dZ + (size_t)r * (size_t)cols;
        for (int j = 0; j < cols; j++)
            db[j] += d[j];
    }
}

void kern_dropout_fwd(float *Y, const float *X, float *mask, size_t n, float rate, uint64_t key,
                      uint64_t counter0)
{
    float keep = 1.0f / (1.0f - rate);
    /* rng_hash_uniform >= rate, as whole numbers: u = b / 2^24 exactly, so
     * u >= rate just when b >= ceil(rate * 2^24). The mask is keep's bits
     * or none, selected without a branch: gcc had made the choice a branch
     * taken at random (at rate 0.5, half of them mispredicted), and the
     * dropout of mnist_convnet's 1600 features was 8.6% of its epoch (perf,
     * Zen 5; 1.4% now). The same mask, bit for bit. */
    uint32_t keep_bits, least = (uint32_t)ceil((double)rate * 16777216.0);
    memcpy(&keep_bits, &keep, sizeof keep_bits);
    for (size_t i = 0; i < n; i++) {
        uint32_t on = -(uint32_t)(rng_hash_bits24(key, counter0 + i) >= least);
        uint32_t bits = keep_bits & on;
        float m;
        memcpy(&m, &bits, sizeof m);
        mask[i] = m;
        Y[i] = X[i] * m;
    }
}

/* Target j of a row: the label one-hot (or, for one output, the label as
 * a number) or the row's own value. */
static inline float target_at(const int32_t *y, const float *t, int r, int j, int cols)
{
    if (t)
        return t[(size_t)r * (size_t)cols + (size_t)j];
    return cols == 1 ? (float)y[r] : (j == y[r] ? 1.0f : 0.0f);
}

/* The class of a row for its class weight: the label, the argmax of a
 * target row, or a single target rounded; clamped into [0, n). */
static int row_class(const int32_t *y, const float *t, int r, int cols, int n)
{
    int c = 0;
    if (!t) {
        c = y[r];
    } else if (cols == 1) {
        c = (int)lrintf(t[r]);
    } else {
        const float *tr = t + (size_t)r * (size_t)cols;
        for (int j = 1; j < cols; j++)
            if (tr[j] > tr[c])
                c = j;
    }
    return c < 0 ? 0 : c >= n ? n - 1 : c;
}

static int argmax_of(const float *z, int cols)
{
    int a = 0;
    for (int j = 1; j < cols; j++)
        if (z[j] > z[a])
            a = j;
    return a;
}

/* Softmax cross-entropy of logits z against targets t' = t(1 - s) + s/C:
 * loss = sum t'_j (log sum exp z - z_j), dz_j = p_j sum t' - t'_j. z becomes
 * the probabilities when keep_logits is 0. */
static double xent_row(float *z, const int32_t *y, const float *t, int r, int cols, float s,
                       float *d, float scale, int keep_logits)
{
    float mx = z[0];
    for (int j = 1; j < cols; j++)
        mx = z[j] > mx ? z[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j < cols; j++)
        sum += expf(z[j] - mx);
    double lse = log((double)sum) + (double)mx, loss = 0.0, tsum = 0.0;
    float inv = 1.0f / sum, off = s / (float)cols;
    for (int j = 0; j < cols; j++) {
        float tj = target_at(y, t, r, j, cols) * (1.0f - s) + off;
        float p = expf(z[j] - mx) * inv;
        /* t_j (lse - z_j): exact where p underflows, and Inf or NaN only when
         * the logits are. A zero target adds nothing, even for an infinite term. */
        if (tj != 0.0f)
            loss += (double)tj * (lse - (double)z[j]);
        tsum += tj;
        if (d)
            d[j] = p * scale; /* times sum t' below */
        if (!keep_logits)
            z[j] = p;
    }
    if (d)
        for (int j = 0; j < cols; j++)
            d[j] = d[j] * (float)tsum - (target_at(y, t, r, j, cols) * (1.0f - s) + off) * scale;
    return loss;
}

/* Binary cross-entropy of logits z (Keras's from logits, as TensorFlow's
 * sigmoid_cross_entropy_with_logits), the mean over the row's outputs:
 * max(z, 0) - z t + log(1 + exp(-|z|)), dz = (sigmoid(z) - t) / cols. */
static double bce_row(float *z, const int32_t *y, const float *t, int r, int cols, float s,
                      float *d, float scale, int keep_logits, double *right)
{
    double loss = 0.0;
    int ok = 0;
    for (int j = 0; j < cols; j++) {
        float raw = target_at(y, t, r, j, cols), tj = raw * (1.0f - s) + 0.5f * s;
        float zj = z[j], p = 1.0f / (1.0f + expf(-zj));
        loss += (double)(zj > 0.0f ? zj : 0.0f) - (double)zj * tj + log1p(exp(-fabs((double)zj)));
        ok += raw == (zj > 0.0f ? 1.0f : 0.0f); /* Keras's binary_accuracy: p > 0.5 */
        if (d)
            d[j] = (p - tj) * scale / (float)cols;
        if (!keep_logits)
            z[j] = p;
    }
    *right += (double)ok / cols;
    return loss / cols;
}

/* The regression losses, the mean over the row's outputs of e = z - t:
 * mse e^2 (dz 2e), mae |e| (dz sign e), huber 0.5 e^2 within delta, else
 * delta (|e| - 0.5 delta) (dz e, or delta sign e). */
static double error_row(const loss_params *p, const float *z, const int32_t *y, const float *t,
                        int r, int cols, float *d, float scale, double *abs_sum, double *sq_sum)
{
    double loss = 0.0, ae = 0.0, se = 0.0;
    float delta = p->delta;
    for (int j = 0; j < cols; j++) {
        float e = z[j] - target_at(y, t, r, j, cols), a = fabsf(e);
        float sign = e > 0.0f ? 1.0f : e < 0.0f ? -1.0f : 0.0f, g;
        ae += a;
        se += (double)e * e;
        switch (p->kind) {
        case LOSS_MAE:
            loss += a;
            g = sign;
            break;
        case LOSS_HUBER:
            loss += a <= delta ? 0.5 * (double)e * e : (double)delta * (a - 0.5 * (double)delta);
            g = a <= delta ? e : delta * sign;
            break;
        default:
            loss += (double)e * e;
            g = 2.0f * e;
            break;
        }
        if (d)
            d[j] = g * scale / (float)cols;
    }
    *abs_sum += ae / cols;
    *sq_sum += se / cols;
    return loss / cols;
}

void kern_loss(const loss_params *p, float *Z, const int32_t *y, const float *t, float *dZ,
               double *stats, int rows, int cols, float grad_scale)
{
    double loss = 0.0, right = 0.0, abs_sum = 0.0, sq = 0.0;
    int keep = p->out_act == ACT_LINEAR;
    for (int r = 0; r < rows; r++) {
        float *z = Z + (size_t)r * (size_t)cols;
        float *d = dZ ? dZ + (size_t)r * (size_t)cols : NULL;
        float w = p->cw ? p->cw[row_class(y, t, r, cols, p->n_cw)] : 1.0f, scale = grad_scale * w;
        /* The argmax is of the logits: the same class as of the probabilities. */
        int arg = p->metric == METRIC_ARGMAX ? argmax_of(z, cols) : 0;
        double l;
        switch (p->kind) {
        case LOSS_SCE:
        case LOSS_CCE: l = xent_row(z, y, t, r, cols, p->smoothing, d, scale, keep); break;
        case LOSS_BCE: l = bce_row(z, y, t, r, cols, p->smoothing, d, scale, keep, &right); break;
        default: l = error_row(p, z, y, t, r, cols, d, scale, &abs_sum, &sq); break;
        }
        if (p->metric == METRIC_ARGMAX) {
            int want = t ? argmax_of(t + (size_t)r * (size_t)cols, cols) : y[r];
            right += arg == want;
        }
        loss += (double)w * l;
    }
    stats[STAT_LOSS_SUM] += loss;
    stats[STAT_RIGHT] += p->metric == METRIC_ERRORS ? abs_sum : right;
    stats[STAT_BATCH_LOSS] = rows ? loss / rows : 0.0;
    stats[STAT_SQ_SUM] += sq;
}

/* The loops of kern_optimize: `update` over n weights with the scalars c, a
 * local copy (stores to w cannot change it), one loop for each set of slots
 * so that none tests a slot per weight. */
#define OPTIMIZE_LOOP(update, c)                                                              \
    do {                                                                                      \
        if (s2)                                                                               \
            for (size_t i = 0; i < n; i++)                                                    \
                update(w + i, g[i], s1 + i, s2 + i, c);                                       \
        else if (s1)                                                                          \
            for (size_t i = 0; i < n; i++)                                                    \
                update(w + i, g[i], s1 + i, NULL, c);                                         \
        else                                                                                  \
            for (size_t i = 0; i < n; i++)                                                    \
                update(w + i, g[i], NULL, NULL, c);                                           \
    } while (0)

void kern_optimize(opt_kind kind, float *w, const float *g, float *s1, float *s2, size_t n,
                   const optim_scalars *s)
{
    switch (kind) {
#define OPTIMIZE_CASE(KIND, member, update)                                                   \
    case OPT_##KIND: {                                                                        \
        const optim_scalars c = *s;                                                           \
        OPTIMIZE_LOOP(update, &c.member);                                                     \
        break;                                                                                \
    }
        OPTIM_UPDATES(OPTIMIZE_CASE)
#undef OPTIMIZE_CASE
    case OPT_KIND_COUNT: break;
    }
}

double kern_sum_sq(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    return acc;
}

double kern_sum_abs(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += fabs((double)x[i]);
    return acc;
}

void kern_scale(float *x, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= f;
}

void kern_clip_value(float *x, size_t n, float c)
{
    for (size_t i = 0; i < n; i++)
        x[i] = fminf(fmaxf(x[i], -c), c);
}

void kern_reg_grad(float *g, const float *w, size_t n, float l1, float l2)
{
    float two_l2 = 2.0f * l2;
    for (size_t i = 0; i < n; i++) {
        float sign = (float)((w[i] > 0.0f) - (w[i] < 0.0f));
        g[i] += two_l2 * w[i] + l1 * sign;
    }
}

float clip_norm_factor(double sum_sq, float c)
{
    double norm = sqrt(sum_sq);
    return (float)((double)c / (norm > (double)c ? norm : (double)c));
}

/* ---- the recurrent layers' steps ---- */

/* Row r of operand x (leading dimension ld, model stride st) of model k. */
#define RNN_ROW(x, ld, st, k, r) ((x) + (size_t)(k) * (st) + (size_t)(r) * (size_t)(ld))

static int rnn_padded(const rnn_step *s, int k, int r)
{
    return s->tok && *RNN_ROW(s->tok, s->ld_t, s->s_t, k, r) == 0.0f;
}

/* The output's copy in y, where the step has one. */
static void rnn_out(const rnn_step *s, int k, int r, int pad, const float *h)
{
    if (!s->y)
        return;
    float *y = RNN_ROW(s->y, s->ld_y, s->s_y, k, r);
    for (int j = 0; j < s->H; j++)
        y[j] = pad && s->zero_out ? 0.0f : h[j];
}

/* This step's output gradient of row r, or NULL. */
static const float *rnn_dy(const rnn_step *s, int k, int r, int pad)
{
    return s->dy && !(pad && s->zero_out) ? RNN_ROW(s->dy, s->ld_dy, s->s_dy, k, r) : NULL;
}

/*
 * The cells' transcendental functions go through vmath's arrays (a row's
 * gate blocks are contiguous H floats in torch's order), the rest is
 * rnn_cell.h's arithmetic in the same order, in loops gcc vectorizes. The
 * CUDA plugin runs rnn_cell.h's scalar units: the two differ by a few ulps.
 */

/* Units of a row taken at a time where a step needs room for tanh(c). */
#define RNN_SPAN 64

void kern_lstm_fwd(const rnn_step *s, int k, int r0, int r1)
{
    int H = s->H;
    for (int r = r0; r < r1; r++) {
        float *z = RNN_ROW(s->gates, s->ld_g, s->s_g, k, r);
        float *c = RNN_ROW(s->c, s->ld_c, s->s_c, k, r);
        float *h = RNN_ROW(s->h, s->ld_h, s->s_h, k, r);
        const float *cp = s->c_prev ? RNN_ROW(s->c_prev, s->ld_c, s->s_c, k, r) : NULL;
        const float *hp = s->h_prev ? RNN_ROW(s->h_prev, s->ld_hp, s->s_hp, k, r) : NULL;
        int pad = rnn_padded(s, k, r);
        if (pad) {
            for (int j = 0; j < H; j++) {
                c[j] = cp ? cp[j] : 0.0f;
                h[j] = hp ? hp[j] : 0.0f;
            }
        } else {
            /* i, f = sigmoid; g = tanh; o = sigmoid; c = f c_prev + i g;
             * h = o tanh(c) (lstm_unit_fwd's terms). */
            const float *zi = z, *zf = z + H, *zg = z + 2 * H, *zo = z + 3 * H;
            vm_sigmoid(z, z, (size_t)(2 * H));
            vm_tanh(z + 2 * H, z + 2 * H, (size_t)H);
            vm_sigmoid(z + 3 * H, z + 3 * H, (size_t)H);
            if (cp)
                for (int j = 0; j < H; j++)
                    c[j] = zf[j] * cp[j] + zi[j] * zg[j];
            else
                for (int j = 0; j < H; j++)
                    c[j] = zf[j] * 0.0f + zi[j] * zg[j];
            vm_tanh(h, c, (size_t)H);
            for (int j = 0; j < H; j++)
                h[j] = zo[j] * h[j];
        }
        rnn_out(s, k, r, pad, h);
    }
}

/* lstm_unit_bwd's terms over n units of a row, tanh(c) in tc, from vmath,
 * the previous cells cp (zeros before the first step); restrict, and no
 * branch inside: gcc vectorizes it. */
static void lstm_span_bwd(float *restrict z, int H, const float *restrict cp,
                          const float *restrict tc, float *restrict dh, float *restrict dc, int n)
{
    float *restrict zi = z, *restrict zf = z + H, *restrict zg = z + 2 * H;
    float *restrict zo = z + 3 * H;
    for (int e = 0; e < n; e++) {
        float i = zi[e], f = zf[e], gg = zg[e], o = zo[e], t = tc[e], g = dh[e];
        float dct = dc[e] + g * o * (1.0f - t * t);
        zi[e] = dct * gg * i * (1.0f - i);
        zf[e] = dct * cp[e] * f * (1.0f - f);
        zg[e] = dct * i * (1.0f - gg * gg);
        zo[e] = g * t * o * (1.0f - o);
        dc[e] = dct * f;
        dh[e] = 0.0f;
    }
}

void kern_lstm_bwd(const rnn_step *s, int k, int r0, int r1)
{
    static const float zeros[RNN_SPAN];
    int H = s->H;
    float tc[RNN_SPAN];
    for (int r = r0; r < r1; r++) {
        float *z = RNN_ROW(s->gates, s->ld_g, s->s_g, k, r);
        const float *c = RNN_ROW(s->c, s->ld_c, s->s_c, k, r);
        const float *cp = s->c_prev ? RNN_ROW(s->c_prev, s->ld_c, s->s_c, k, r) : NULL;
        float *dh = RNN_ROW(s->dh, H, s->s_d, k, r), *dc = RNN_ROW(s->dc, H, s->s_d, k, r);
        int pad = rnn_padded(s, k, r);
        const float *dy = rnn_dy(s, k, r, pad);
        if (s->first)
            for (int j = 0; j < H; j++)
                dh[j] = dc[j] = 0.0f;
        if (dy)
            for (int j = 0; j < H; j++)
                dh[j] = dh[j] + dy[j];
        if (pad) { /* dL/dh and dL/dc pass on unchanged */
            memset(z, 0, (size_t)(4 * H) * sizeof *z);
            continue;
        }
        for (int j0 = 0; j0 < H; j0 += RNN_SPAN) {
            int n = H - j0 < RNN_SPAN ? H - j0 : RNN_SPAN;
            vm_tanh(tc, c + j0, (size_t)n);
            lstm_span_bwd(z + j0, H, cp ? cp + j0 : zeros, tc, dh + j0, dc + j0, n);
        }
    }
}

void kern_gru_fwd(const rnn_step *s, int k, int r0, int r1)
{
    int H = s->H;
    const float *b = s->bias + (size_t)k * s->s_b;
    for (int r = r0; r < r1; r++) {
        float *x = RNN_ROW(s->gates, s->ld_g, s->s_g, k, r);
        float *R = RNN_ROW(s->rec, s->ld_r, s->s_r, k, r);
        float *h = RNN_ROW(s->h, s->ld_h, s->s_h, k, r);
        const float *hp = s->h_prev ? RNN_ROW(s->h_prev, s->ld_hp, s->s_hp, k, r) : NULL;
        if (hp)
            for (int j = 0; j < 3 * H; j++)
                R[j] = R[j] + b[j];
        else
            for (int j = 0; j < 3 * H; j++)
                R[j] = 0.0f + b[j];
        int pad = rnn_padded(s, k, r);
        if (pad) {
            for (int j = 0; j < H; j++)
                h[j] = hp ? hp[j] : 0.0f;
        } else {
            /* r, z = sigmoid(x + hh); n = tanh(x_n + r hh_n); h = z h_prev +
             * (1 - z) n (gru_unit_fwd's terms). */
            for (int j = 0; j < 2 * H; j++)
                x[j] = x[j] + R[j];
            vm_sigmoid(x, x, (size_t)(2 * H));
            for (int j = 0; j < H; j++)
                x[2 * H + j] = x[2 * H + j] + x[j] * R[2 * H + j];
            vm_tanh(x + 2 * H, x + 2 * H, (size_t)H);
            const float *z = x + H, *n = x + 2 * H;
            if (hp)
                for (int j = 0; j < H; j++)
                    h[j] = z[j] * hp[j] + (1.0f - z[j]) * n[j];
            else
                for (int j = 0; j < H; j++)
                    h[j] = z[j] * 0.0f + (1.0f - z[j]) * n[j];
        }
        rnn_out(s, k, r, pad, h);
    }
}

/* gru_unit_bwd's terms over a row's units (restrict: gcc vectorizes it). */
static void gru_row_bwd(float *restrict x, float *restrict R, const float *restrict hp,
                        float *restrict dh, int H)
{
    float *restrict xr = x, *restrict xz = x + H, *restrict xn = x + 2 * H;
    float *restrict Rr = R, *restrict Rz = R + H, *restrict Rn = R + 2 * H;
    for (int j = 0; j < H; j++) {
        float g = dh[j], rr = xr[j], z = xz[j], n = xn[j], hn = Rn[j];
        float dn = g * (1.0f - z) * (1.0f - n * n);
        float dr = dn * hn * rr * (1.0f - rr);
        float dz = g * ((hp ? hp[j] : 0.0f) - n) * z * (1.0f - z);
        xr[j] = dr;
        Rr[j] = dr;
        xz[j] = dz;
        Rz[j] = dz;
        xn[j] = dn;
        Rn[j] = dn * rr;
        dh[j] = g * z;
    }
}

void kern_gru_bwd(const rnn_step *s, int k, int r0, int r1)
{
    int H = s->H;
    for (int r = r0; r < r1; r++) {
        float *x = RNN_ROW(s->gates, s->ld_g, s->s_g, k, r);
        float *R = RNN_ROW(s->rec, s->ld_r, s->s_r, k, r);
        const float *hp = s->h_prev ? RNN_ROW(s->h_prev, s->ld_hp, s->s_hp, k, r) : NULL;
        float *dh = RNN_ROW(s->dh, H, s->s_d, k, r);
        int pad = rnn_padded(s, k, r);
        const float *dy = rnn_dy(s, k, r, pad);
        if (s->first)
            for (int j = 0; j < H; j++)
                dh[j] = 0.0f;
        if (dy)
            for (int j = 0; j < H; j++)
                dh[j] = dh[j] + dy[j];
        if (pad) { /* dL/dh passes on unchanged */
            memset(x, 0, (size_t)(3 * H) * sizeof *x);
            memset(R, 0, (size_t)(3 * H) * sizeof *R);
            continue;
        }
        gru_row_bwd(x, R, hp, dh, H);
    }
}
