/*
 * layers/recurrent: the recurrent kinds, lstm and gru (Keras's LSTM and GRU
 * with their defaults: activation tanh, recurrent_activation sigmoid,
 * use_bias; the GRU with reset_after) and bidirectional (Keras's
 * Bidirectional with merge_mode concat), their syntax, spec and compute,
 * which share all but the cell.
 *
 *   {lstm: UNITS, return_sequences: false}   {gru: UNITS, return_sequences: false}
 *   {bidirectional: {lstm: UNITS, return_sequences: false}}   (or gru)
 *
 * A sequence [T, F] in; out the sequence of outputs [T, H] with
 * return_sequences, else the last step's output [H]. Under a token mask
 * (mask_zero) a padded step carries the state over, and its output repeats
 * the previous one (Keras 3's RNN), so the last output is the last unmasked
 * step's and padding before or after a sequence changes nothing.
 *
 * bidirectional runs the layer twice, forward and over the steps from the
 * last to the first (Keras's go_backwards, its outputs put back in step
 * order), and concatenates the two: [T, 2H] with return_sequences, else
 * the forward direction's last output and the reverse direction's output at
 * step 0 [2H]. Under a mask the reverse direction starts at the last
 * unmasked step (the padding after it carries its zero state over), and
 * with return_sequences the outputs at padded steps are 0, as Keras's
 * Bidirectional makes them (zero_output_for_mask).
 *
 * Parameters, in torch.nn.LSTM's and torch.nn.GRU's layout and gate order
 * (LSTM i, f, g, o; GRU r, z, n): W_ih [G*H, F], W_hh [G*H, H], then the
 * bias: the LSTM's one [4H] (Keras's), the GRU's b_ih [3H] and b_hh [3H]
 * (Keras's reset_after bias [2, 3H]). The LSTM's file has torch's two biases,
 * bias_hh_l0 written as zeros; one read from a file is added into the bias.
 * bidirectional: the forward direction's, then the reverse one's, whose
 * tensors have torch's _reverse suffix.
 *
 * Compute: where the backend runs a direction's steps at once (rnn_fwd,
 * rnn_bwd: the CPU, each chunk of rows through all its steps on its own,
 * the input's products included), blocks of RNN_BLOCK steps a call; else
 * the input's products for all steps as one GEMM (rows*T rows) plus the
 * bias, then per step the K models' recurrent products as one batched GEMM
 * and the cell as one backend op (lstm_fwd, gru_fwd: rnn_cell.h). In
 * backward the gradients of W_ih, of W_hh (the gates' gradients against
 * the states before them) and of the input are one product each over all
 * rows*T steps (the backend's wgrad where it has one, else a GEMM).
 * Kept for backward (BUF_SAVED, per row): the gates of every step (their
 * gradients overwrite them in backward), the LSTM's cells and the GRU's
 * recurrent products, and the state before each step [T, H] in step order
 * (the previous step's output; 0 before the direction's first step), so
 * that W_hh's gradient is one product. Scratch (BUF_WORK): in forward the
 * last state of a bidirectional direction (which only its output keeps)
 * and W_ih, W_hh transposed for rnn_fwd; in backward dL/dh (and dL/dc) of
 * one step, used by one direction after the other.
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "plan/keys.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- syntax and spec ---- */

typedef struct rnn_settings {
    int units;            /* H */
    int return_sequences; /* Keras's return_sequences (false) */
    int gru;              /* bidirectional: the layer it runs is a gru, else an lstm */
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

static int is_bidirectional(const layer_spec *ls)
{
    return strcmp(ls->kind->name, "bidirectional") == 0;
}

static const rnn_cell *cell_of(const layer_spec *ls)
{
    int gru = is_bidirectional(ls) ? settings(ls).gru : strcmp(ls->kind->name, "gru") == 0;
    return gru ? &gru_cell : &lstm_cell;
}

static const char *const rnn_keys[] = {"return_sequences", NULL};

static const layer_keras_arg rnn_keras[] = {
    {"units", "a recurrent layer's units are its value: {lstm: 64} (Keras's LSTM(units=64))"},
    {NULL, NULL}};

/* The units (node units) and return_sequences (in map, where it has it) of
 * the layer `kind` at layers.i. */
static cohort_status parse_layer(const layer_syntax *s, const char *kind, const ynode *units,
                                 const ynode *map, rnn_settings *r)
{
    char what[200];
    long long u;
    snprintf(what, sizeof what, "%s units of %s", kind, s->where);
    cohort_status st = yget_int(s->c, units, what, 1, LAYER_UNITS_MAX, &u);
    if (st)
        return st;
    r->units = (int)u;
    const ynode *v = map ? ymap_get(map, "return_sequences") : NULL;
    if (!v)
        return COHORT_OK;
    snprintf(what, sizeof what, "return_sequences of %s", s->where);
    return yget_bool(s->c, v, what, &r->return_sequences);
}

static cohort_status rnn_parse(const layer_syntax *s, layer_spec *ls)
{
    rnn_settings r = {0};
    cohort_status st = parse_layer(s, ls->kind->name, s->value, s->map, &r);
    if (!st)
        rnn_settings_put(ls, &r);
    return st;
}

static const char *const bi_inner_keys[] = {"lstm", "gru", "return_sequences", NULL};

/* {bidirectional: {lstm: 64, return_sequences: true}, merge_mode: concat} */
static cohort_status bi_parse(const layer_syntax *s, layer_spec *ls)
{
    rnn_settings r = {0};
    const ynode *in = s->value;
    if (!in || in->type != YNODE_MAP)
        return ynode_fail(s->c, in ? in : s->node,
                          "bidirectional of %s of %s takes the layer it runs both ways: "
                          "{bidirectional: {lstm: 64}} (Keras's Bidirectional(LSTM(64)))",
                          s->where, s->label);
    cohort_status st = plan_check_keys(s->c, in, bi_inner_keys, "in the bidirectional layer "
                                       "of %s of %s", s->where, s->label);
    if (st)
        return st;
    const ynode *lstm = ymap_get(in, "lstm"), *gru = ymap_get(in, "gru");
    if (!lstm == !gru)
        return ynode_fail(s->c, in, "the bidirectional layer of %s of %s runs one lstm or gru: "
                                    "{bidirectional: {lstm: 64}}", s->where, s->label);
    r.gru = gru != NULL;
    if ((st = parse_layer(s, gru ? "gru" : "lstm", gru ? gru : lstm, in, &r)))
        return st;
    const ynode *mode = s->map ? ymap_get(s->map, "merge_mode") : NULL;
    if (mode) {
        char m[32];
        char what[200];
        snprintf(what, sizeof what, "merge_mode of %s", s->where);
        if ((st = yget_str(s->c, mode, what, m, sizeof m)))
            return st;
        if (strcmp(m, "concat") != 0)
            return ynode_fail(s->c, mode, "merge_mode of %s of %s is '%s'; cohort's "
                                          "bidirectional concatenates (merge_mode: concat, "
                                          "Keras's default) only", s->where, s->label, m);
    }
    rnn_settings_put(ls, &r);
    return COHORT_OK;
}

static void rnn_json(const layer_spec *ls, strbuf *b)
{
    int bi = is_bidirectional(ls);
    if (bi)
        sb_puts(b, "\"bidirectional\":{");
    sb_printf(b, "\"%s\":%d", cell_of(ls)->name, settings(ls).units);
    if (settings(ls).return_sequences)
        sb_puts(b, ",\"return_sequences\":true");
    if (bi)
        sb_puts(b, "}");
}

static int rnn_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "%s%s%d%s", is_bidirectional(ls) ? "bi" : "", cell_of(ls)->name,
                    settings(ls).units, settings(ls).return_sequences ? "seq" : "");
}

static int rnn_fuse_key(const layer_spec *ls, int *key)
{
    key[0] = settings(ls).units;
    key[1] = settings(ls).return_sequences;
    key[2] = settings(ls).gru;
    return 3;
}

/* ---- shapes ---- */

/* One layer's sizes: T steps of F features in, H units, G gates, one or
 * two directions. */
typedef struct rnn_dims {
    int T, F, H, G, seq, gru, dirs;
} rnn_dims;

static rnn_dims dims_of(const layer_spec *ls, const layer_plan *lp)
{
    const rnn_cell *c = cell_of(ls);
    rnn_dims d = {lp->in.h, lp->in.c, settings(ls).units, c->gates,
                  settings(ls).return_sequences, c->gru, is_bidirectional(ls) ? 2 : 1};
    return d;
}

/* A direction's parameters: W_ih, W_hh, the bias(es). */
static size_t dir_params(const rnn_dims *d)
{
    size_t GH = (size_t)d->G * (size_t)d->H;
    return GH * (size_t)d->F + GH * (size_t)d->H + GH * (d->gru ? 2 : 1);
}

/* Per row of BUF_SAVED: the gates of every step, the LSTM's cells or the
 * GRU's recurrent products, the state before every step. */
static size_t saved_gates(const rnn_dims *d) { return (size_t)d->T * (size_t)(d->G * d->H); }
static size_t saved_second(const rnn_dims *d)
{
    return (size_t)d->T * (size_t)(d->gru ? 3 * d->H : d->H);
}
static size_t saved_outputs(const rnn_dims *d) { return (size_t)d->T * (size_t)d->H; }

/* A direction's saved floats per sample. */
static size_t dir_saved(const rnn_dims *d)
{
    return saved_gates(d) + saved_second(d) + saved_outputs(d);
}

/* Scratch per row of a batch of B: forward, a row's last state (H) and
 * W_ih and W_hh transposed (G*H*(F+H) over the batch); backward, dL/dh
 * (and dL/dc). */
static size_t work_per_row(const rnn_dims *d, int batch)
{
    size_t B = (size_t)(batch > 0 ? batch : 1), H = (size_t)d->H;
    size_t wt = (size_t)d->G * H * ((size_t)d->F + H);
    size_t fwd = H + (wt + B - 1) / B, bwd = (size_t)(d->gru ? 1 : 2) * H;
    return fwd > bwd ? fwd : bwd;
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
    int width = d.dirs * d.H;
    lp->out = d.seq ? shape_seq(d.T, width) : shape_flat(width);
    lp->n_params = (size_t)d.dirs * dir_params(&d);
    lp->n_saved = (size_t)d.dirs * dir_saved(&d);
    lp->n_work = work_per_row(&d, lp->batch);
    return 0;
}

/* A plan's directions and cell, which the spec says and the plan shows: two
 * directions for bidirectional; a direction keeps 7 T H floats a sample
 * for the GRU (gates 3H, recurrent products 3H, states H a step), 6 T H
 * for the LSTM (gates 4H, cells H, states H). */
static int plan_dirs(const layer_plan *lp)
{
    return strcmp(lp->kind->name, "bidirectional") == 0 ? 2 : 1;
}
static int plan_units(const layer_plan *lp) { return lp->out.c / plan_dirs(lp); }
static int plan_is_gru(const layer_plan *lp)
{
    return lp->n_saved == (size_t)plan_dirs(lp) * 7 * (size_t)lp->in.h * (size_t)plan_units(lp);
}

static double rnn_macs(const layer_plan *lp)
{
    double F = lp->in.c, H = plan_units(lp), T = lp->in.h;
    return plan_dirs(lp) * T * (plan_is_gru(lp) ? 3.0 : 4.0) * H * (F + H);
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
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    for (int dir = 0; dir < d.dirs; dir++) {
        float *W = P + lp->p_off + (size_t)dir * dir_params(&d);
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
}

/* ---- forward and backward ---- */

/* Where one direction's tensors lie: the parameters of model 0 of the range
 * (the others at + k*sP), the saved regions (model stride s_saved; rows of
 * the batch B apart), the state of each step and where the outputs go. */
typedef struct rnn_pass {
    rnn_dims d;
    int dir;      /* 1: the reverse direction, steps T-1 down to 0 */
    const float *Wih, *Whh, *b, *bh; /* bh: the GRU's recurrent bias */
    float *Gih, *Ghh, *Gb;
    float *Z;   /* [B, T, G*H] gates */
    float *S;   /* [B, T, H] cells, or [B, T, 3H] recurrent products */
    float *Hs;  /* [B, T, H]: at step t the state before it (the previous step's
                 * output in the direction's order; 0 before the first step) */
    int ld_z, ld_s, ld_hs;
} rnn_pass;

static rnn_pass pass_of(const layer_pass *p, int dir)
{
    const layer_plan *lp = p->lp;
    rnn_pass q;
    q.d = dims_of(p->ls[0], lp);
    q.dir = dir;
    size_t F = (size_t)q.d.F, H = (size_t)q.d.H, GH = (size_t)q.d.G * H, B = (size_t)p->batch;
    size_t at = lp->p_off + (size_t)dir * dir_params(&q.d);
    q.Wih = p->W + at;
    q.Whh = q.Wih + GH * F;
    q.b = q.Whh + GH * H;
    q.bh = q.d.gru ? q.b + GH : NULL;
    q.Gih = p->G + at;
    q.Ghh = q.Gih + GH * F;
    q.Gb = q.Ghh + GH * H;
    q.Z = p->saved + (size_t)dir * B * dir_saved(&q.d);
    q.S = q.Z + B * saved_gates(&q.d);
    q.ld_z = q.d.T * (int)GH;
    q.ld_s = q.d.T * (int)(q.d.gru ? 3 * H : H);
    q.Hs = q.S + B * saved_second(&q.d);
    q.ld_hs = q.d.T * (int)H;
    return q;
}

/* The step of the i-th iteration (step i forward, T-1-i in reverse), and
 * the step before it in the direction's order. */
static int step_at(const rnn_pass *q, int i) { return q->dir ? q->d.T - 1 - i : i; }
static int step_before(const rnn_pass *q, int t) { return q->dir ? t + 1 : t - 1; }

/* The operands of iteration i (step t): the state before it from Hs, its
 * output into Hs as the state before the next step and, where the layer
 * returns every step, into Y too. The last iteration's output goes into Y
 * (a bidirectional layer's into the scratch, Y taking its copy y). */
static rnn_step step_of(const layer_pass *p, const rnn_pass *q, int i)
{
    int H = q->d.H, T = q->d.T, t = step_at(q, i), tp = step_before(q, t);
    rnn_step s;
    memset(&s, 0, sizeof s);
    s.rows = p->rows;
    s.H = H;
    s.count = p->count;
    s.gates = q->Z + (size_t)t * (size_t)(q->d.G * H);
    s.ld_g = q->ld_z;
    s.s_g = p->s_saved;
    size_t second = (size_t)(q->d.gru ? 3 * H : H);
    float *S = q->S + (size_t)t * second;
    if (q->d.gru) {
        s.rec = S;
        s.ld_r = q->ld_s;
        s.s_r = p->s_saved;
        s.bias = q->bh;
        s.s_b = p->sP;
    } else {
        s.c = S;
        s.c_prev = i ? q->S + (size_t)tp * second : NULL;
        s.ld_c = q->ld_s;
        s.s_c = p->s_saved;
    }
    s.h_prev = i ? q->Hs + (size_t)t * (size_t)H : NULL;
    s.ld_hp = q->ld_hs;
    s.s_hp = p->s_saved;
    int last = i == T - 1, width = q->d.dirs * H;
    if (!last) {
        s.h = q->Hs + (size_t)step_at(q, i + 1) * (size_t)H;
        s.ld_h = q->ld_hs;
        s.s_h = p->s_saved;
    } else if (q->d.dirs == 1) {
        s.h = q->d.seq ? p->Y + (size_t)t * (size_t)H : p->Y;
        s.ld_h = q->d.seq ? T * H : H;
        s.s_h = p->sY;
    } else {
        s.h = p->work;
        s.ld_h = H;
        s.s_h = p->s_work;
    }
    if (q->d.dirs == 1 && q->d.seq && !last) {
        s.y = p->Y + (size_t)t * (size_t)H;
        s.ld_y = T * H;
        s.s_y = p->sY;
    } else if (q->d.dirs == 2 && q->d.seq) {
        s.y = p->Y + (size_t)t * (size_t)width + (size_t)(q->dir * H);
        s.ld_y = T * width;
        s.s_y = p->sY;
        s.zero_out = 1;
    } else if (q->d.dirs == 2 && last) {
        s.y = p->Y + (size_t)(q->dir * H);
        s.ld_y = width;
        s.s_y = p->sY;
    }
    if (p->tokens) {
        s.tok = p->tokens + t;
        s.ld_t = T;
        s.s_t = p->s_tokens;
    }
    return s;
}

/* Steps a call of the backend's rnn_fwd and rnn_bwd takes (their operands
 * on the stack). */
#define RNN_BLOCK 32

/* The steps' operands of iterations [i0, i0 + n) into s. */
static void steps_of(const layer_pass *p, const rnn_pass *q, int i0, int n, rnn_step *s)
{
    for (int i = 0; i < n; i++)
        s[i] = step_of(p, q, i0 + i);
}

static void dir_forward(const layer_pass *p, int dir)
{
    const backend_ops *be = p->be;
    rnn_pass q = pass_of(p, dir);
    int T = q.d.T, F = q.d.F, H = q.d.H, GH = q.d.G * H, rows = p->rows;
    /* The states before each step: the steps write all but the first's 0. */
    for (int k = 0; k < p->count; k++)
        be->memzero(p->ctx, q.Hs + (size_t)k * p->s_saved,
                    (size_t)rows * (size_t)T * (size_t)H * sizeof(float));
    if (be->rnn_fwd) {
        /* Each chunk of rows through its steps, the input's products too. */
        rnn_step s[RNN_BLOCK];
        for (int i0 = 0; i0 < T; i0 += RNN_BLOCK) {
            int n = T - i0 < RNN_BLOCK ? T - i0 : RNN_BLOCK;
            steps_of(p, &q, i0, n, s);
            rnn_seq o = {.gru = q.d.gru, .n = n, .steps = s, .Wih = q.Wih, .Whh = q.Whh,
                         .b = q.b, .sW = p->sP,
                         .X = p->X + (size_t)step_at(&q, i0) * (size_t)F,
                         .x_next = dir ? -(ptrdiff_t)F : (ptrdiff_t)F, .F = F, .ld_x = T * F,
                         .sX = p->sX, .wt = p->work + (size_t)p->batch * (size_t)H,
                         .s_wt = p->s_work, .fill_wt = i0 == 0};
            be->rnn_fwd(p->ctx, &o);
        }
        return;
    }
    /* The input's products for all steps, and the (input's) bias. */
    be->gemm(p->ctx, 0, 1, rows * T, GH, F, 1.0f, p->X, F, p->sX, q.Wih, F, p->sP, 0.0f, q.Z, GH,
             p->s_saved, p->count);
    be->bias_act(p->ctx, q.Z, p->s_saved, q.b, p->sP, rows * T, GH, ACT_LINEAR, p->count);
    for (int i = 0; i < T; i++) {
        rnn_step s = step_of(p, &q, i);
        if (i) {
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

static void rnn_forward(const layer_pass *p)
{
    for (int dir = 0; dir < dims_of(p->ls[0], p->lp).dirs; dir++)
        dir_forward(p, dir);
}

/* Iteration i's operands for backward: its output gradient and dL/dh, dL/dc. */
static rnn_step back_step_of(const layer_pass *p, const rnn_pass *q, int i)
{
    rnn_step s = step_of(p, q, i);
    int T = q->d.T, H = q->d.H, t = step_at(q, i), width = q->d.dirs * H;
    s.first = i == T - 1;
    if (q->d.seq) {
        s.dy = p->dY + (size_t)t * (size_t)width + (size_t)(q->dir * H);
        s.ld_dy = T * width;
        s.s_dy = p->sd;
    } else if (i == T - 1) {
        s.dy = p->dY + (size_t)(q->dir * H);
        s.ld_dy = width;
        s.s_dy = p->sd;
    }
    s.dh = p->work;
    s.dc = q->d.gru ? NULL : p->work + (size_t)p->batch * (size_t)H;
    s.s_d = p->s_work;
    return s;
}

/* G [n_out, n_in] = dZᵀ·X over n rows (dZ in the saved tensors, leading
 * dimension n_out; X's leading dimension n_in, stride sX): the backend's
 * wgrad where it has one, else a GEMM. */
static void weight_grad(const layer_pass *p, float *G, const float *dZ, const float *X,
                        size_t sX, int n, int n_out, int n_in)
{
    const backend_ops *be = p->be;
    if (be->wgrad && be->wgrad(p->ctx, G, p->sP, dZ, n_out, p->s_saved, X, n_in, sX, n, n_out,
                               n_in, p->count))
        return;
    be->gemm(p->ctx, 1, 0, n_out, n_in, n, 1.0f, dZ, n_out, p->s_saved, X, n_in, sX, 0.0f, G,
             n_in, p->sP, p->count);
}

static void dir_backward(const layer_pass *p, int dir)
{
    const backend_ops *be = p->be;
    rnn_pass q = pass_of(p, dir);
    int T = q.d.T, F = q.d.F, H = q.d.H, GH = q.d.G * H, rows = p->rows;
    /* Back through the steps: each step's gates become their gradients, and
     * dL/dh of the step before gets their product with W_hh. */
    if (be->rnn_bwd) {
        rnn_step s[RNN_BLOCK];
        for (int end = T; end > 0; end -= RNN_BLOCK) {
            int n = end < RNN_BLOCK ? end : RNN_BLOCK;
            for (int i = 0; i < n; i++)
                s[i] = back_step_of(p, &q, end - n + i);
            rnn_seq o = {.gru = q.d.gru, .n = n, .steps = s, .Wih = q.Wih, .Whh = q.Whh,
                         .b = q.b, .sW = p->sP};
            be->rnn_bwd(p->ctx, &o);
        }
    } else {
        for (int i = T - 1; i >= 0; i--) {
            rnn_step s = back_step_of(p, &q, i);
            (q.d.gru ? be->gru_bwd : be->lstm_bwd)(p->ctx, &s);
            if (i) {
                const float *dr = q.d.gru ? s.rec : s.gates;
                int ld = q.d.gru ? s.ld_r : s.ld_g;
                be->gemm(p->ctx, 0, 0, rows, H, GH, 1.0f, dr, ld, p->s_saved, q.Whh, H, p->sP,
                         1.0f, s.dh, H, p->s_work, p->count);
            }
        }
    }
    /* W_hh's gradient: the recurrent products' gradients of all steps
     * against the states before them (0 before the first step), one GEMM
     * over rows*T. The LSTM's are its gates', the GRU's its own. */
    const float *dR = q.d.gru ? q.S : q.Z;
    weight_grad(p, q.Ghh, dR, q.Hs, p->s_saved, rows * T, GH, H);
    /* The input's: one GEMM over all steps, and the biases; the input
     * gradient sums the two directions'. */
    weight_grad(p, q.Gih, q.Z, p->X, p->sX, rows * T, GH, F);
    be->bias_grad(p->ctx, q.Gb, p->sP, q.Z, p->s_saved, rows * T, GH, p->count);
    if (q.d.gru)
        be->bias_grad(p->ctx, q.Gb + GH, p->sP, q.S, p->s_saved, rows * T, GH, p->count);
    if (p->dX)
        be->gemm(p->ctx, 0, 0, rows * T, F, GH, 1.0f, q.Z, GH, p->s_saved, q.Wih, F, p->sP,
                 dir ? 1.0f : 0.0f, p->dX, F, p->sd, p->count);
}

static int rnn_backward(const layer_pass *p)
{
    for (int dir = 0; dir < dims_of(p->ls[0], p->lp).dirs; dir++)
        dir_backward(p, dir);
    return 0;
}

/* ---- the weight file: torch.nn.LSTM's and torch.nn.GRU's tensors ---- */

static const char *const tensor_names[2][4] = {
    {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"},
    {"weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
     "bias_hh_l0_reverse"}};

static int rnn_tensors(const layer_plan *lp, layer_tensor *t)
{
    int gru = plan_is_gru(lp), dirs = plan_dirs(lp);
    int64_t F = lp->in.c, H = plan_units(lp), G = gru ? 3 : 4;
    size_t GH = (size_t)(G * H), off = lp->p_off;
    for (int dir = 0; dir < dirs; dir++) {
        const char *const *name = tensor_names[dir];
        layer_tensor *d = t + 4 * dir;
        d[0] = (layer_tensor){name[0], 2, {G * H, F}, off, GH * (size_t)F};
        off += GH * (size_t)F;
        d[1] = (layer_tensor){name[1], 2, {G * H, H}, off, GH * (size_t)H};
        off += GH * (size_t)H;
        d[2] = (layer_tensor){name[2], 1, {G * H}, off, GH};
        /* The LSTM's bias_hh_l0 is a file's alone: it lies over the one bias
         * (written as zeros, added in when read). */
        d[3] = (layer_tensor){name[3], 1, {G * H}, gru ? off + GH : off, GH};
        off += GH * (gru ? 2 : 1);
    }
    return 4 * dirs;
}

static void rnn_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[LAYER_TENSORS_MAX];
    rnn_tensors(lp, t);
    float *mine = P + t[i].off;
    int lstm_hh = i % 4 == 3 && t[i].off == t[i - 1].off;
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

/* ---- export: ONNX's LSTM and GRU operators ----
 * Their tensors are torch's with the gate blocks in ONNX's order (LSTM i, o,
 * f, c from torch's i, f, g, o; GRU z, r, h from r, z, n), both directions
 * stacked [dirs, G*H, ...], the biases [dirs, 2*G*H] (input's, then
 * recurrent's); the GRU with linear_before_reset (torch's, Keras's
 * reset_after). The operators take [T, N, F]. Under a token mask the steps
 * that are tokens are packed first (onnx_mask_pack) and sequence_lens says
 * how many: the forward direction runs over them, the reverse one from the
 * last of them back, as cohort's carry over padding does wherever it lies;
 * return_sequences puts each step's output back (onnx_mask_unpack: a
 * padded step repeats the output before it, or is 0 under bidirectional). */

/* Direction dir's tensor k (W_ih, W_hh, b_ih, b_hh) into dst, its G blocks
 * of n floats in ONNX's order. 0 where the weights lack it. */
static int onnx_gates(onnx_graph *g, const layer_plan *lp, int dir, int k, float *dst, size_t n)
{
    static const int lstm_order[4] = {0, 3, 1, 2}, gru_order[3] = {1, 0, 2};
    int gru = plan_is_gru(lp), G = gru ? 3 : 4;
    const float *src = onnx_tensor(g, lp, tensor_names[dir][k]);
    if (!src)
        return 0;
    for (int j = 0; j < G; j++)
        memcpy(dst + (size_t)j * n, src + (size_t)(gru ? gru_order : lstm_order)[j] * n,
               n * sizeof(float));
    return 1;
}

static int rnn_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    rnn_dims d = dims_of(ls, lp);
    int i = lp->index, D = d.dirs, masked = lp->mask_in;
    size_t H = (size_t)d.H, F = (size_t)d.F, GH = (size_t)d.G * H;
    size_t nw = (size_t)D * GH * F, nr = (size_t)D * GH * H, nb = (size_t)D * 2 * GH;
    float *buf = malloc((nw + nr + nb) * sizeof(float));
    if (!buf) {
        snprintf(msg, len, "out of memory");
        return 1;
    }
    float *W = buf, *R = W + nw, *B = R + nr;
    int ok = 1;
    for (int dir = 0; dir < D && ok; dir++)
        ok = onnx_gates(g, lp, dir, 0, W + (size_t)dir * GH * F, H * F) &&
             onnx_gates(g, lp, dir, 1, R + (size_t)dir * GH * H, H * H) &&
             onnx_gates(g, lp, dir, 2, B + (size_t)dir * 2 * GH, H) &&
             onnx_gates(g, lp, dir, 3, B + (size_t)dir * 2 * GH + GH, H);
    char wn[ONNX_NAME_MAX], rn[ONNX_NAME_MAX], bn[ONNX_NAME_MAX];
    if (ok) {
        int64_t dw[3] = {D, (int64_t)GH, (int64_t)F}, dr[3] = {D, (int64_t)GH, (int64_t)H},
                db[2] = {D, 2 * (int64_t)GH};
        onnx_floats(g, W, dw, 3, wn, i, "rnn.W");
        onnx_floats(g, R, dr, 3, rn, i, "rnn.R");
        onnx_floats(g, B, db, 2, bn, i, "rnn.B");
    }
    free(buf);
    if (!ok)
        return 1;
    /* [N, T, F] (packed under a mask) to [T, N, F]. */
    static const int64_t tnf[3] = {1, 0, 2};
    char packed[ONNX_NAME_MAX], lens[ONNX_NAME_MAX] = "", xt[ONNX_NAME_MAX];
    const char *seq = x;
    if (masked) {
        onnx_mask_pack(g, x, d.T, packed, lens, i);
        seq = packed;
    }
    onnx_transpose(g, seq, tnf, 3, xt, i, "rnn.tnf");
    char ys[ONNX_NAME_MAX], yh[ONNX_NAME_MAX], a[ONNX_NAME_MAX], b[ONNX_NAME_MAX];
    onnx_value_name(ys, i, "rnn.Y");
    onnx_value_name(yh, i, "rnn.Y_h");
    const char *in[5] = {xt, wn, rn, bn, lens}, *out[2] = {d.seq ? ys : "", yh};
    onnx_node_begin_outs(g, d.gru ? "GRU" : "LSTM", in, masked ? 5 : 4, out, d.seq ? 1 : 2);
    onnx_attr_int(g, "hidden_size", d.H);
    onnx_attr_string(g, "direction", D == 2 ? "bidirectional" : "forward");
    if (d.gru)
        onnx_attr_int(g, "linear_before_reset", 1);
    onnx_node_end(g);
    int64_t width = (int64_t)D * d.H;
    if (d.seq) {
        /* Y [T, D, N, H] to [N, T, D*H]: the directions side by side. */
        static const int64_t ntdh[4] = {2, 0, 1, 3};
        int64_t shape[3] = {-1, d.T, width};
        onnx_transpose(g, ys, ntdh, 4, a, i, "rnn.ntdh");
        if (!masked) {
            onnx_reshape(g, a, shape, 3, y, i, "rnn.out");
            return 0;
        }
        onnx_reshape(g, a, shape, 3, b, i, "rnn.packed_out");
        onnx_mask_unpack(g, b, D == 2, y, i);
        return 0;
    }
    /* Y_h [D, N, H] to [N, D*H]; 0 for a sample of padding alone. */
    static const int64_t ndh[3] = {1, 0, 2};
    int64_t shape[2] = {-1, width};
    onnx_transpose(g, yh, ndh, 3, a, i, "rnn.ndh");
    if (!masked) {
        onnx_reshape(g, a, shape, 2, y, i, "rnn.out");
        return 0;
    }
    onnx_reshape(g, a, shape, 2, b, i, "rnn.last");
    char zero[ONNX_NAME_MAX];
    float z = 0.0f;
    int64_t scalar = 0;
    onnx_floats(g, &z, &scalar, 0, zero, i, "rnn.zero");
    const char *w[3] = {onnx_mask(g, ONNX_MASK_ANY), b, zero};
    onnx_op(g, "Where", w, 3, y, i, "rnn.out");
    return 0;
}

#define RNN_OPS(NAME, PARSE, KEYS, EXAMPLE)                                                      \
    {                                                                                            \
        .name = #NAME, .keys = KEYS, .example = EXAMPLE, .keras_args = rnn_keras,                \
        .parse = PARSE, .to_json = rnn_json, .abbrev = rnn_abbrev, .fuse_key = rnn_fuse_key,     \
        .plan = rnn_plan, .init = rnn_init, .forward = rnn_forward, .backward = rnn_backward,   \
        .reads_output = 1, .shares_input = 1, .takes_mask = 1, .takes_sequence = 1,              \
        .tensors = rnn_tensors, .convert = rnn_convert, .macs = rnn_macs, .onnx = rnn_onnx,      \
    }

static const char *const bi_keys[] = {"merge_mode", NULL};

const layer_ops layer_lstm_ops = RNN_OPS(lstm, rnn_parse, rnn_keys, "{lstm: UNITS}");
const layer_ops layer_gru_ops = RNN_OPS(gru, rnn_parse, rnn_keys, "{gru: UNITS}");
const layer_ops layer_bidirectional_ops =
    RNN_OPS(bidirectional, bi_parse, bi_keys, "{bidirectional: {lstm: UNITS}}");
