/*
 * layers/recurrent: the recurrent kinds, lstm and gru (Keras's LSTM and GRU
 * with their defaults: activation tanh, recurrent_activation sigmoid,
 * use_bias; the GRU with reset_after), their syntax, spec and compute, which
 * share all but the cell.
 *
 *   {lstm: UNITS, return_sequences: false}   {gru: UNITS, return_sequences: false}
 *
 * A sequence [T, F] in; out the sequence of outputs [T, H] with
 * return_sequences, else the last step's output [H]. Under a token mask
 * (mask_zero) a padded step carries the state over, and its output repeats
 * the previous one (Keras 3's RNN), so the last output is the last unmasked
 * step's and padding before or after a sequence changes nothing.
 *
 * Parameters, in torch.nn.LSTM's and torch.nn.GRU's layout and gate order
 * (LSTM i, f, g, o; GRU r, z, n): W_ih [G*H, F], W_hh [G*H, H], then the
 * bias: the LSTM's one [4H] (Keras's), the GRU's b_ih [3H] and b_hh [3H]
 * (Keras's reset_after bias [2, 3H]). The LSTM's file has torch's two biases,
 * bias_hh_l0 written as zeros; one read from a file is added into the bias.
 *
 * Compute: the input's products for all steps are one GEMM (rows*T rows)
 * plus the bias; then per step the K models' recurrent products are one
 * batched GEMM and the cell one backend op (lstm_fwd, gru_fwd: rnn_cell.h).
 * Kept for backward (BUF_SAVED, per row): the gates of every step (their
 * gradients overwrite them in backward), the LSTM's cells and the GRU's
 * recurrent products, and without return_sequences the outputs of steps
 * 0..T-2 (with it they are the layer's output). Scratch: dL/dh (and dL/dc)
 * of one step.
 */
#include "layers/pass.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- syntax and spec ---- */

typedef struct rnn_settings {
    int units;            /* H */
    int return_sequences; /* Keras's return_sequences (false) */
} rnn_settings;
LAYER_SETTINGS_OF(rnn_settings);

static rnn_settings settings(const layer_spec *ls) { return rnn_settings_of(ls); }

/* The two cells: gates per unit, and whether the bias is torch's two. */
typedef struct rnn_cell {
    const char *name;
    int gates;
    int gru;
} rnn_cell;

static const rnn_cell lstm_cell = {"lstm", 4, 0}, gru_cell = {"gru", 3, 1};

static const rnn_cell *cell_of(const layer_spec *ls)
{
    return strcmp(ls->kind->name, "gru") == 0 ? &gru_cell : &lstm_cell;
}

static const char *const rnn_keys[] = {"return_sequences", NULL};

static const layer_keras_arg rnn_keras[] = {
    {"units", "a recurrent layer's units are its value: {lstm: 64} (Keras's LSTM(units=64))"},
    {NULL, NULL}};

static cohort_status rnn_parse(const layer_syntax *s, layer_spec *ls)
{
    rnn_settings r = {0};
    char what[200];
    long long units;
    snprintf(what, sizeof what, "%s units of %s", ls->kind->name, s->where);
    cohort_status st = yget_int(s->c, s->value, what, 1, LAYER_UNITS_MAX, &units);
    if (st)
        return st;
    r.units = (int)units;
    const ynode *v = s->map ? ymap_get(s->map, "return_sequences") : NULL;
    if (v) {
        snprintf(what, sizeof what, "return_sequences of %s", s->where);
        if ((st = yget_bool(s->c, v, what, &r.return_sequences)))
            return st;
    }
    rnn_settings_put(ls, &r);
    return COHORT_OK;
}

static void rnn_json(const layer_spec *ls, strbuf *b)
{
    sb_printf(b, "\"%s\":%d", ls->kind->name, settings(ls).units);
    if (settings(ls).return_sequences)
        sb_puts(b, ",\"return_sequences\":true");
}

static int rnn_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "%s%d%s", ls->kind->name, settings(ls).units,
                    settings(ls).return_sequences ? "seq" : "");
}

static int rnn_fuse_key(const layer_spec *ls, int *key)
{
    key[0] = settings(ls).units;
    key[1] = settings(ls).return_sequences;
    return 2;
}

/* ---- shapes ---- */

/* One layer's sizes: T steps of F features in, H units, G gates. */
typedef struct rnn_dims {
    int T, F, H, G, seq, gru;
} rnn_dims;

static rnn_dims dims_of(const layer_spec *ls, const layer_plan *lp)
{
    const rnn_cell *c = cell_of(ls);
    rnn_dims d = {lp->in.h, lp->in.c, settings(ls).units, c->gates,
                  settings(ls).return_sequences, c->gru};
    return d;
}

/* Per row of BUF_SAVED: the gates of every step, the LSTM's cells or the
 * GRU's recurrent products, the outputs of steps 0..T-2 where the layer's
 * output is the last alone. */
static size_t saved_gates(const rnn_dims *d) { return (size_t)d->T * (size_t)(d->G * d->H); }
static size_t saved_second(const rnn_dims *d)
{
    return (size_t)d->T * (size_t)(d->gru ? 3 * d->H : d->H);
}
static size_t saved_outputs(const rnn_dims *d)
{
    return d->seq ? 0 : (size_t)(d->T - 1) * (size_t)d->H;
}

static int rnn_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    const char *name = ls->kind->name;
    if (lp->in.rank != 2) {
        char s[48];
        shape_format(lp->in, s, sizeof s);
        snprintf(msg, len,
                 "%s needs a sequence [steps, features], and gets %s %s: %s", name,
                 lp->in.rank == 1 ? "a flat input" : "an image", s,
                 lp->in.rank == 1 ? "give the recurrent layer before it return_sequences: true, "
                                    "or feed it sequence data ([n, T, F] NPY, or an embedding)"
                                  : "recurrent layers read sequences, not images");
        return 1;
    }
    rnn_dims d = dims_of(ls, lp);
    size_t F = (size_t)d.F, H = (size_t)d.H, GH = (size_t)d.G * H;
    lp->out = d.seq ? shape_seq(d.T, d.H) : shape_flat(d.H);
    lp->n_params = GH * F + GH * H + GH * (d.gru ? 2 : 1);
    lp->n_saved = saved_gates(&d) + saved_second(&d) + saved_outputs(&d);
    lp->n_work = (d.gru ? 1 : 2) * H;
    return 0;
}

static int plan_is_gru(const layer_plan *lp) { return strcmp(lp->kind->name, "gru") == 0; }

static double rnn_macs(const layer_plan *lp)
{
    double F = lp->in.c, H = lp->out.c, T = lp->in.h;
    return T * (plan_is_gru(lp) ? 3.0 : 4.0) * H * (F + H);
}

/* ---- init: Keras's glorot_uniform kernel, orthogonal recurrent kernel,
 * zero bias (the LSTM's forget gate 1: unit_forget_bias) ---- */

/* A seeded orthogonal matrix as Keras's Orthogonal: the Q of the QR
 * decomposition of a standard normal matrix with the signs of R's diagonal
 * (modified Gram-Schmidt, whose R has a positive diagonal). W_hh [G*H, H]
 * is Keras's recurrent kernel [H, G*H] transposed: its H columns are
 * orthonormal. */
static void orthogonal(float *W, int rows, int cols, rng_state *r)
{
    size_t n = (size_t)rows * (size_t)cols;
    double *a = malloc(n * sizeof *a);
    if (!a) {
        memset(W, 0, n * sizeof *W);
        return;
    }
    for (size_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - (double)rng_uniform(r), u2 = (double)rng_uniform(r);
        double m = sqrt(-2.0 * log(u1));
        a[i] = m * cos(6.283185307179586 * u2);
        if (i + 1 < n)
            a[i + 1] = m * sin(6.283185307179586 * u2);
    }
    for (int j = 0; j < cols; j++) {
        for (int q = 0; q < j; q++) {
            double dot = 0.0;
            for (int i = 0; i < rows; i++)
                dot += a[(size_t)i * cols + j] * a[(size_t)i * cols + q];
            for (int i = 0; i < rows; i++)
                a[(size_t)i * cols + j] -= dot * a[(size_t)i * cols + q];
        }
        double norm = 0.0;
        for (int i = 0; i < rows; i++)
            norm += a[(size_t)i * cols + j] * a[(size_t)i * cols + j];
        norm = norm > 0.0 ? 1.0 / sqrt(norm) : 0.0;
        for (int i = 0; i < rows; i++)
            a[(size_t)i * cols + j] *= norm;
    }
    for (size_t i = 0; i < n; i++)
        W[i] = (float)a[i];
    free(a);
}

static void rnn_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    rnn_dims d = dims_of(ls, lp);
    size_t F = (size_t)d.F, H = (size_t)d.H, GH = (size_t)d.G * H;
    float *W = P + lp->p_off;
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    /* Keras's kernel is [F, G*H]: fan_in F, fan_out G*H. */
    float limit = sqrtf(6.0f / (float)(F + GH));
    for (size_t i = 0; i < GH * F; i++)
        W[i] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
    orthogonal(W + GH * F, (int)GH, (int)H, &r);
    float *b = W + GH * F + GH * H;
    memset(b, 0, GH * (d.gru ? 2 : 1) * sizeof(float));
    if (!d.gru)
        for (size_t j = H; j < 2 * H; j++)
            b[j] = 1.0f;
}

/* ---- forward and backward ---- */

/* Where a pass's tensors lie: the parameters of model 0 of the range (the
 * others at + k*sP), the saved regions (model stride s_saved; rows of the
 * batch B apart), the outputs of each step. */
typedef struct rnn_pass {
    rnn_dims d;
    const float *Wih, *Whh, *b, *bh; /* bh: the GRU's recurrent bias */
    float *Gih, *Ghh, *Gb;
    float *Z;   /* [B, T, G*H] gates */
    float *S;   /* [B, T, H] cells, or [B, T, 3H] recurrent products */
    float *Hs;  /* step outputs: Y with return_sequences, else [B, T-1, H] */
    int ld_z, ld_s, ld_hs;
    size_t s_hs;
} rnn_pass;

static rnn_pass pass_of(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    rnn_pass q;
    q.d = dims_of(p->ls[0], lp);
    size_t F = (size_t)q.d.F, H = (size_t)q.d.H, GH = (size_t)q.d.G * H, B = (size_t)p->batch;
    q.Wih = p->W + lp->p_off;
    q.Whh = q.Wih + GH * F;
    q.b = q.Whh + GH * H;
    q.bh = q.d.gru ? q.b + GH : NULL;
    q.Gih = p->G + lp->p_off;
    q.Ghh = q.Gih + GH * F;
    q.Gb = q.Ghh + GH * H;
    q.Z = p->saved;
    q.S = q.Z + B * saved_gates(&q.d);
    q.ld_z = q.d.T * (int)GH;
    q.ld_s = q.d.T * (int)(q.d.gru ? 3 * H : H);
    if (q.d.seq) {
        q.Hs = p->Y;
        q.ld_hs = q.d.T * (int)H;
        q.s_hs = p->sY;
    } else {
        q.Hs = q.S + B * saved_second(&q.d);
        q.ld_hs = (q.d.T - 1) * (int)H;
        q.s_hs = p->s_saved;
    }
    return q;
}

/* The step t's operands, forward (the output into Y at the last step of a
 * layer without return_sequences). */
static rnn_step step_of(const layer_pass *p, const rnn_pass *q, int t)
{
    int H = q->d.H;
    rnn_step s;
    memset(&s, 0, sizeof s);
    s.rows = p->rows;
    s.H = H;
    s.count = p->count;
    s.gates = q->Z + (size_t)t * (size_t)(q->d.G * H);
    s.ld_g = q->ld_z;
    s.s_g = p->s_saved;
    float *second = q->S + (size_t)t * (size_t)(q->d.gru ? 3 * H : H);
    if (q->d.gru) {
        s.rec = second;
        s.ld_r = q->ld_s;
        s.s_r = p->s_saved;
        s.bias = q->bh;
        s.s_b = p->sP;
    } else {
        s.c = second;
        s.c_prev = t ? second - H : NULL;
        s.ld_c = q->ld_s;
        s.s_c = p->s_saved;
    }
    if (!q->d.seq && t == q->d.T - 1) {
        s.h = p->Y;
        s.ld_h = H;
        s.s_h = p->sY;
    } else {
        s.h = q->Hs + (size_t)t * (size_t)H;
        s.ld_h = q->ld_hs;
        s.s_h = q->s_hs;
    }
    s.h_prev = t ? q->Hs + (size_t)(t - 1) * (size_t)H : NULL;
    s.ld_hp = q->ld_hs;
    s.s_hp = q->s_hs;
    if (p->tokens) {
        s.tok = p->tokens + t;
        s.ld_t = q->d.T;
        s.s_t = p->s_tokens;
    }
    return s;
}

static void rnn_forward(const layer_pass *p)
{
    const backend_ops *be = p->be;
    rnn_pass q = pass_of(p);
    int T = q.d.T, F = q.d.F, H = q.d.H, GH = q.d.G * H, rows = p->rows;
    /* The input's products for all steps, and the (input's) bias. */
    be->gemm(p->ctx, 0, 1, rows * T, GH, F, 1.0f, p->X, F, p->sX, q.Wih, F, p->sP, 0.0f, q.Z, GH,
             p->s_saved, p->count);
    be->bias_act(p->ctx, q.Z, p->s_saved, q.b, p->sP, rows * T, GH, ACT_LINEAR, p->count);
    for (int t = 0; t < T; t++) {
        rnn_step s = step_of(p, &q, t);
        if (t) {
            /* The LSTM adds its recurrent products to the gates' sums; the
             * GRU keeps them apart (its n gate scales them by r). */
            float *into = q.d.gru ? s.rec : s.gates;
            int ld = q.d.gru ? s.ld_r : s.ld_g;
            be->gemm(p->ctx, 0, 1, rows, GH, H, 1.0f, s.h_prev, s.ld_hp, s.s_hp, q.Whh, H, p->sP,
                     q.d.gru ? 0.0f : 1.0f, into, ld, p->s_saved, p->count);
        }
        (q.d.gru ? be->gru_fwd : be->lstm_fwd)(p->ctx, &s);
    }
}

static int rnn_backward(const layer_pass *p)
{
    const backend_ops *be = p->be;
    rnn_pass q = pass_of(p);
    int T = q.d.T, F = q.d.F, H = q.d.H, GH = q.d.G * H, rows = p->rows;
    float *dh = p->work, *dc = q.d.gru ? NULL : p->work + (size_t)p->batch * (size_t)H;
    /* Back through the steps: each step's gates become their gradients, and
     * dL/dh of the step before gets their product with W_hh. */
    for (int t = T - 1; t >= 0; t--) {
        rnn_step s = step_of(p, &q, t);
        s.first = t == T - 1;
        if (q.d.seq) {
            s.dy = p->dY + (size_t)t * (size_t)H;
            s.ld_dy = T * H;
            s.s_dy = p->sd;
        } else if (t == T - 1) {
            s.dy = p->dY;
            s.ld_dy = H;
            s.s_dy = p->sd;
        }
        s.dh = dh;
        s.dc = dc;
        s.s_d = p->s_work;
        (q.d.gru ? be->gru_bwd : be->lstm_bwd)(p->ctx, &s);
        if (t) {
            const float *dr = q.d.gru ? s.rec : s.gates;
            int ld = q.d.gru ? s.ld_r : s.ld_g;
            be->gemm(p->ctx, 0, 0, rows, H, GH, 1.0f, dr, ld, p->s_saved, q.Whh, H, p->sP, 1.0f,
                     dh, H, p->s_work, p->count);
        }
    }
    /* W_hh's gradient: the recurrent products' gradients of steps 1..T-1
     * against the outputs of steps 0..T-2 (step 0's h_prev is 0). */
    const float *dR = q.d.gru ? q.S : q.Z;
    int ld_r = q.d.gru ? q.ld_s : q.ld_z;
    if (T == 1)
        for (int k = 0; k < p->count; k++)
            be->memzero(p->ctx, q.Ghh + (size_t)k * p->sP, (size_t)GH * (size_t)H * sizeof(float));
    for (int t = 1; t < T; t++)
        be->gemm(p->ctx, 1, 0, GH, H, rows, 1.0f, dR + (size_t)t * (size_t)GH, ld_r, p->s_saved,
                 q.Hs + (size_t)(t - 1) * (size_t)H, q.ld_hs, q.s_hs, t == 1 ? 0.0f : 1.0f, q.Ghh,
                 H, p->sP, p->count);
    /* The input's: one GEMM over all steps, and the biases. */
    be->gemm(p->ctx, 1, 0, GH, F, rows * T, 1.0f, q.Z, GH, p->s_saved, p->X, F, p->sX, 0.0f,
             q.Gih, F, p->sP, p->count);
    be->bias_grad(p->ctx, q.Gb, p->sP, q.Z, p->s_saved, rows * T, GH, p->count);
    if (q.d.gru)
        be->bias_grad(p->ctx, q.Gb + GH, p->sP, q.S, p->s_saved, rows * T, GH, p->count);
    if (p->dX)
        be->gemm(p->ctx, 0, 0, rows * T, F, GH, 1.0f, q.Z, GH, p->s_saved, q.Wih, F, p->sP, 0.0f,
                 p->dX, F, p->sd, p->count);
    return 0;
}

/* ---- the weight file: torch.nn.LSTM's and torch.nn.GRU's tensors ---- */

static int rnn_tensors(const layer_plan *lp, layer_tensor *t)
{
    int gru = plan_is_gru(lp);
    int64_t F = lp->in.c, H = lp->out.c, G = gru ? 3 : 4;
    size_t GH = (size_t)(G * H), off = lp->p_off;
    t[0] = (layer_tensor){"weight_ih_l0", 2, {G * H, F}, off, GH * (size_t)F};
    off += GH * (size_t)F;
    t[1] = (layer_tensor){"weight_hh_l0", 2, {G * H, H}, off, GH * (size_t)H};
    off += GH * (size_t)H;
    t[2] = (layer_tensor){"bias_ih_l0", 1, {G * H}, off, GH};
    /* The LSTM's bias_hh_l0 is a file's alone: it lies over the one bias
     * (written as zeros, added in when read). */
    t[3] = (layer_tensor){"bias_hh_l0", 1, {G * H}, gru ? off + GH : off, GH};
    return 4;
}

static void rnn_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[4];
    rnn_tensors(lp, t);
    float *mine = P + t[i].off;
    int lstm_hh = i == 3 && t[3].off == t[2].off;
    if (lstm_hh && to_file)
        memset(file, 0, t[i].n * sizeof(float));
    else if (lstm_hh)
        for (size_t j = 0; j < t[i].n; j++)
            mine[j] += file[j];
    else if (to_file)
        memcpy(file, mine, t[i].n * sizeof(float));
    else
        memcpy(mine, file, t[i].n * sizeof(float));
}

#define RNN_OPS(NAME)                                                                            \
    {                                                                                            \
        .name = #NAME, .keys = rnn_keys, .example = "{" #NAME ": UNITS}",                        \
        .keras_args = rnn_keras, .parse = rnn_parse, .to_json = rnn_json,                        \
        .abbrev = rnn_abbrev, .fuse_key = rnn_fuse_key, .plan = rnn_plan, .init = rnn_init,     \
        .forward = rnn_forward, .backward = rnn_backward, .reads_output = 1,                     \
        .shares_input = 1, .takes_mask = 1, .takes_sequence = 1, .tensors = rnn_tensors,         \
        .convert = rnn_convert, .macs = rnn_macs,                                                \
    }

const layer_ops layer_lstm_ops = RNN_OPS(lstm);
const layer_ops layer_gru_ops = RNN_OPS(gru);
