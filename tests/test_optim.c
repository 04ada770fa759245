/* Optimizer steps against values worked out by hand (Keras's formulas), each
 * through its table entry's scalars and the CPU loop over its per-weight
 * function; the losses and the gradient ops likewise. */
#include "backend/cpu/kernels.h"
#include "check.h"
#include "optim/optim.h"

#include <string.h>

/* o: optimizer kind's defaults at rate lr, momentum and nesterov (sgd,
 * rmsprop), weight_decay (adamw), centered (rmsprop). */
static optim_spec spec_of(opt_kind kind, float lr, float momentum, int nesterov, float wd,
                          int centered)
{
    optim_spec o;
    optim_defaults(&o, kind);
    o.lr = lr;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weight_decay = wd;
    o.centered = centered;
    return o;
}

/* Step t of one weight w (gradient g, slots s1, s2) by o's optimizer. */
static void step1(const optim_spec *o, int64_t t, float *w, float g, float *s1, float *s2)
{
    optim_memo memo = {0, 0};
    optim_scalars sc;
    optim_entry_of(o->kind)->scalars(o, o->lr, t, &memo, &sc);
    kern_optimize(o->kind, w, &g, s1, s2, 1, &sc);
}

static void sgd(float *w, float g, float *v, float lr, float momentum, int nesterov)
{
    optim_spec o = spec_of(OPT_SGD, lr, momentum, nesterov, 0.0f, 0);
    step1(&o, 1, w, g, v, NULL);
}

static void adam(float *w, float g, float *m, float *v, float lr, float wd, int64_t t)
{
    optim_spec o = spec_of(wd != 0.0f ? OPT_ADAMW : OPT_ADAM, lr, 0.0f, 0, wd, 0);
    step1(&o, t, w, g, m, v);
}

static void rmsprop(float *w, float g, float *vel, float *s2, float lr, float momentum,
                    int centered)
{
    optim_spec o = spec_of(OPT_RMSPROP, lr, momentum, 0, 0.0f, centered);
    step1(&o, 1, w, g, vel, s2);
}

/* Keras's Nadam momentum factor u_i = beta1 (1 - 0.5 * 0.96^i), in double. */
static double nadam_u(double b1, int i) { return b1 * (1.0 - 0.5 * pow(0.96, i)); }

/* The table: names, defaults, keys, slots. */
static void test_table(void)
{
    const char *const *keys = optim_plan_keys();
    for (int kind = 0; kind < OPT_KIND_COUNT; kind++) {
        const optim_entry *e = optim_entry_of((opt_kind)kind);
        CHECK(strcmp(opt_name((opt_kind)kind), e->name) == 0);
        optim_spec o;
        optim_defaults(&o, (opt_kind)kind);
        CHECK(o.kind == (opt_kind)kind && o.lr == e->lr && o.clipnorm == 0.0f &&
              o.schedule.kind == SCHED_NONE);
        int slots = optim_slots(&o);
        CHECK_MSG(slots >= 0 && slots <= 2, "%s: %d slots", e->name, slots);
        /* Every key is in the plan's list, at its default, and found by name. */
        for (int i = 0; i < e->n_keys; i++) {
            const optim_key *k = &e->keys[i];
            int listed = 0;
            for (int j = 0; keys[j]; j++)
                listed |= strcmp(keys[j], k->name) == 0;
            CHECK_MSG(listed, "%s: key %s not in the plan's list", e->name, k->name);
            CHECK(optim_key_of((opt_kind)kind, k->name) == k);
            /* A name means one setting: the same range and PBT rule wherever. */
            const optim_key *any = optim_key_any(k->name);
            CHECK_MSG(any && any->range == k->range && any->pbt == k->pbt && any->offset == k->offset,
                      "%s: key %s differs from another optimizer's", e->name, k->name);
            if (k->range == OPTIM_BOOL)
                CHECK(*(const int *)optim_field_c(&o, k) == (k->def != 0.0f));
            else
                CHECK(*(const float *)optim_field_c(&o, k) == k->def);
        }
        CHECK(optim_key_of((opt_kind)kind, "lr") == NULL);
    }
    CHECK(strcmp(opt_name(OPT_KIND_COUNT), "unknown") == 0);
    /* Slots grow with what the settings keep. */
    optim_spec o = spec_of(OPT_SGD, 0.1f, 0.0f, 0, 0.0f, 0);
    CHECK(optim_slots(&o) == 0);
    o.momentum = 0.9f;
    CHECK(optim_slots(&o) == 1);
    o = spec_of(OPT_RMSPROP, 0.1f, 0.0f, 0, 0.0f, 0);
    CHECK(optim_slots(&o) == 1 && !optim_entry_of(OPT_RMSPROP)->check(&o));
    o.centered = 1;
    CHECK(optim_slots(&o) == 2 && !optim_entry_of(OPT_RMSPROP)->check(&o));
    o.momentum = 0.5f;
    CHECK(optim_entry_of(OPT_RMSPROP)->check(&o) != NULL);
    o = spec_of(OPT_ADAGRAD, 0.1f, 0.0f, 0, 0.0f, 0);
    CHECK(optim_entry_of(OPT_ADAGRAD)->slot_init(&o) == 0.1f);
}

/* Nadam's factors of steps 1 to 3, carried from step to step in the memo,
 * and made afresh for a step that does not follow the last (a resume). */
static void test_nadam_factors(void)
{
    optim_spec o = spec_of(OPT_NADAM, 0.01f, 0.0f, 0, 0.0f, 0);
    optim_memo memo = {0, 0};
    double p = 1.0;
    for (int t = 1; t <= 3; t++) {
        optim_scalars s;
        optim_entry_of(OPT_NADAM)->scalars(&o, o.lr, t, &memo, &s);
        double u = nadam_u(0.9f, t), un = nadam_u(0.9f, t + 1);
        p *= u;
        CHECK_NEAR(s.nadam.nm, un / (1.0 - p * un), 1e-6);
        CHECK_NEAR(s.nadam.ng, (1.0 - u) / (1.0 - p), 1e-6);
        CHECK_NEAR(s.nadam.nv, 1.0 / (1.0 - pow(0.999f, t)), 1e-3);
        CHECK(s.nadam.lr == 0.01f && s.nadam.eps == 1e-7f);
    }
    optim_scalars a, b;
    optim_memo fresh = {0, 0};
    optim_entry_of(OPT_NADAM)->scalars(&o, o.lr, 7, &memo, &a);
    optim_entry_of(OPT_NADAM)->scalars(&o, o.lr, 7, &fresh, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

int main(void)
{
    test_table();
    test_nadam_factors();
    /* SGD, no momentum: w -= lr * g. */
    float w = 1.0f, g = 0.5f, v = 0.0f;
    sgd(&w, g, NULL, 0.1f, 0.0f, 0);
    CHECK_NEAR(w, 0.95, 1e-7);

    /* SGD with momentum 0.9, lr 0.1, g = 0.5 twice:
     * v1 = -0.05, w1 = 0.95; v2 = 0.9 * -0.05 - 0.05 = -0.095, w2 = 0.855. */
    w = 1.0f;
    v = 0.0f;
    sgd(&w, g, &v, 0.1f, 0.9f, 0);
    CHECK_NEAR(v, -0.05, 1e-7);
    CHECK_NEAR(w, 0.95, 1e-7);
    sgd(&w, g, &v, 0.1f, 0.9f, 0);
    CHECK_NEAR(v, -0.095, 1e-7);
    CHECK_NEAR(w, 0.855, 1e-6);

    /* Nesterov: v1 = -0.05, w1 = 1 + 0.9 * -0.05 - 0.05 = 0.905;
     * v2 = -0.095, w2 = 0.905 + 0.9 * -0.095 - 0.05 = 0.7695. */
    w = 1.0f;
    v = 0.0f;
    sgd(&w, g, &v, 0.1f, 0.9f, 1);
    CHECK_NEAR(w, 0.905, 1e-6);
    sgd(&w, g, &v, 0.1f, 0.9f, 1);
    CHECK_NEAR(w, 0.7695, 1e-6);

    /* Adam, t = 1, g = 0.5, lr 0.001, betas 0.9/0.999, eps 1e-7:
     * m = 0.05, v = 0.00025, alpha = 0.001 * sqrt(0.001) / 0.1 = 3.16227766e-4,
     * step = alpha * 0.05 / (0.0158113883 + 1e-7) = 9.99993675e-4. */
    float m = 0.0f, vv = 0.0f;
    w = 1.0f;
    adam(&w, g, &m, &vv, 0.001f, 0.0f, 1);
    CHECK_NEAR(m, 0.05, 2e-8); /* float32: 1 - 0.9f is 0.1 to 2.4e-7 */
    CHECK_NEAR(vv, 0.00025, 1e-8); /* beta_2 is 0.999f: 1 - beta_2 = 0.99999e-3 */
    CHECK_NEAR(w, 1.0 - 9.99993675e-4, 2e-7);
    /* t = 2 with g = -0.25: m = 0.9*0.05 + 0.1*-0.25 = 0.02,
     * v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225,
     * alpha = 0.001*sqrt(1-0.998001)/(1-0.81) = 2.35315e-4,
     * step = alpha * 0.02 / (0.0176706 + 1e-7) = 2.66330e-4. */
    float g2 = -0.25f;
    double w_before = w;
    adam(&w, g2, &m, &vv, 0.001f, 0.0f, 2);
    CHECK_NEAR(m, 0.02, 2e-8);
    CHECK_NEAR(vv, 0.00031225, 1e-8);
    double alpha2 = 0.001 * sqrt(1.0 - 0.999 * 0.999) / (1.0 - 0.81);
    double step2 = alpha2 * 0.02 / (sqrt(0.00031225) + 1e-7);
    CHECK_NEAR(w, w_before - step2, 2e-7);

    /* AdamW: decoupled decay w -= w * wd * lr first (wd 0.004, lr 0.001):
     * w = 1 - 4e-6, then the same Adam step as above. */
    m = vv = 0.0f;
    w = 1.0f;
    adam(&w, g, &m, &vv, 0.001f, 0.004f, 1);
    CHECK_NEAR(w, 1.0 - 4e-6 - 9.99993675e-4, 3e-7);

    /* Softmax cross-entropy of logits (1, 2, 3), label 2:
     * p = (0.0900306, 0.2447285, 0.6652410), loss = -ln 0.6652410 = 0.4076059. */
    float z[3] = {1.0f, 2.0f, 3.0f}, dz[3];
    int32_t y = 2;
    double stats[4] = {0};
    loss_params sce = {LOSS_SCE, ACT_SOFTMAX, METRIC_ARGMAX, 0.0f, 1.0f, NULL, 0};
    kern_loss(&sce, z, &y, NULL, dz, stats, 1, 3, 1.0f);
    CHECK_NEAR(z[0], 0.0900306, 1e-6);
    CHECK_NEAR(z[2], 0.6652410, 1e-6);
    CHECK_NEAR(stats[0], 0.4076059, 1e-6);
    CHECK_NEAR(stats[1], 1.0, 0);
    CHECK_NEAR(dz[2], 0.6652410 - 1.0, 1e-6);
    CHECK_NEAR(dz[1], 0.2447285, 1e-6);

    /* Label smoothing 0.1 over 3 classes: targets (1/30, 1/30, 0.9 + 1/30);
     * loss = sum t_j (lse - z_j), dz = p - t. The same with one-hot rows
     * (categorical_crossentropy) and from_logits (z stays the logits). */
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0)), tt[3] = {0.1 / 3, 0.1 / 3, 0.9 + 0.1 / 3};
    double want = 0.0;
    for (int j = 0; j < 3; j++)
        want += tt[j] * (lse - (j + 1));
    float onehot[3] = {0.0f, 0.0f, 1.0f};
    for (int rows_t = 0; rows_t < 2; rows_t++) {
        float zz[3] = {1.0f, 2.0f, 3.0f};
        double st[4] = {0};
        loss_params p = {rows_t ? LOSS_CCE : LOSS_SCE, rows_t ? ACT_LINEAR : ACT_SOFTMAX,
                         METRIC_ARGMAX, 0.1f, 1.0f, NULL, 0};
        kern_loss(&p, zz, &y, rows_t ? onehot : NULL, dz, st, 1, 3, 1.0f);
        CHECK_NEAR(st[0], want, 1e-6);
        CHECK_NEAR(st[1], 1.0, 0);
        CHECK_NEAR(dz[0], exp(1.0 - lse) - tt[0], 1e-6);
        CHECK_NEAR(dz[2], exp(3.0 - lse) - tt[2], 1e-6);
        CHECK_NEAR(zz[0], rows_t ? 1.0 : exp(1.0 - lse), 1e-6);
    }

    /* Binary cross-entropy of logits (0.5, -1, 2) against (1, 0, 0), the mean
     * over the outputs; 2 of 3 right at p > 0.5; dz = (sigmoid - t) / 3. */
    {
        float zz[3] = {0.5f, -1.0f, 2.0f}, t[3] = {1.0f, 0.0f, 0.0f};
        double st[4] = {0}, l = 0.0;
        for (int j = 0; j < 3; j++) {
            double p = 1.0 / (1.0 + exp(-(double)zz[j]));
            l -= t[j] ? log(p) : log(1.0 - p);
        }
        loss_params p = {LOSS_BCE, ACT_SIGMOID, METRIC_BINARY, 0.0f, 1.0f, NULL, 0};
        kern_loss(&p, zz, NULL, t, dz, st, 1, 3, 0.5f);
        CHECK_NEAR(st[0], l / 3, 1e-6);
        CHECK_NEAR(st[1], 2.0 / 3, 1e-12);
        CHECK_NEAR(zz[2], 1.0 / (1.0 + exp(-2.0)), 1e-6);
        CHECK_NEAR(dz[0], (1.0 / (1.0 + exp(-0.5)) - 1.0) * 0.5 / 3, 1e-7);
    }

    /* Huber (delta 1) of errors (0.5, -2): (0.125 + 1.5) / 2; dz = (0.5, -1) / 2;
     * mae |e| mean 1.25, dz = sign / 2; mse 2.125, dz = e; errors in stats. */
    {
        float t[2] = {1.0f, 1.0f};
        loss_kind kinds[3] = {LOSS_HUBER, LOSS_MAE, LOSS_MSE};
        double wl[3] = {0.8125, 1.25, 2.125}, wd0[3] = {0.25, 0.5, 0.5}, wd1[3] = {-0.5, -0.5, -2.0};
        for (int i = 0; i < 3; i++) {
            float zz[2] = {1.5f, -1.0f};
            double st[4] = {0};
            loss_params p = {kinds[i], ACT_LINEAR, METRIC_ERRORS, 0.0f, 1.0f, NULL, 0};
            kern_loss(&p, zz, NULL, t, dz, st, 1, 2, 1.0f);
            CHECK_NEAR(st[0], wl[i], 1e-7);
            CHECK_NEAR(st[1], 1.25, 1e-7);
            CHECK_NEAR(st[3], 2.125, 1e-7);
            CHECK_NEAR(dz[0], wd0[i], 1e-7);
            CHECK_NEAR(dz[1], wd1[i], 1e-7);
        }
    }

    /* Class weights scale each row's loss and gradient (Keras: the weighted
     * sum over the batch size): rows of classes 0 and 1, weights 2 and 0.5. */
    {
        float zz[4] = {0.0f, 1.0f, 2.0f, -1.0f}, cwt[2] = {2.0f, 0.5f};
        int32_t yy[2] = {0, 1};
        double st[4] = {0}, l0 = log(1.0 + exp(1.0)), l1 = 3.0 + log(1.0 + exp(-3.0));
        loss_params p = {LOSS_SCE, ACT_SOFTMAX, METRIC_ARGMAX, 0.0f, 1.0f, cwt, 2};
        float d4[4];
        kern_loss(&p, zz, yy, NULL, d4, st, 2, 2, 0.5f);
        CHECK_NEAR(st[0], 2.0 * l0 + 0.5 * l1, 1e-6);
        CHECK_NEAR(st[2], (2.0 * l0 + 0.5 * l1) / 2, 1e-6);
        CHECK_NEAR(st[1], 0.0, 0); /* row 0 predicts 1, row 1 predicts 0 */
        CHECK_NEAR(d4[0], 2.0 * 0.5 * (1.0 / (1.0 + exp(1.0)) - 1.0), 1e-6);
    }
    /* RMSprop, lr 0.1, rho 0.9, g = 0.5 from vel = 0: vel = 0.1 * 0.25 = 0.025,
     * w = 1 - 0.1 * 0.5 / sqrt(0.025 + 1e-7) (Keras: epsilon inside the root). */
    {
        float w1 = 1.0f, vel = 0.0f;
        rmsprop(&w1, g, &vel, NULL, 0.1f, 0.0f, 0);
        CHECK_NEAR(vel, 0.025, 1e-8);
        CHECK_NEAR(w1, 1.0 - 0.05 / sqrt(0.025 + 1e-7), 1e-6);
        /* centered, from avg = 0: avg = 0.05, d = 0.025 - 0.0025 + 1e-7 */
        float w2 = 1.0f, vel2 = 0.0f, avg = 0.0f;
        rmsprop(&w2, g, &vel2, &avg, 0.1f, 0.0f, 1);
        CHECK_NEAR(avg, 0.05, 1e-7); /* 1 - 0.9f rounds up */
        CHECK_NEAR(w2, 1.0 - 0.05 / sqrt(0.0225 + 1e-7), 1e-6);
        /* momentum 0.5 twice: mom1 = inc1, mom2 = 0.5 mom1 + inc2 */
        float w3 = 1.0f, vel3 = 0.0f, mom = 0.0f;
        rmsprop(&w3, g, &vel3, &mom, 0.1f, 0.5f, 0);
        rmsprop(&w3, g, &vel3, &mom, 0.1f, 0.5f, 0);
        double inc1 = 0.05 / sqrt(0.025 + 1e-7), inc2 = 0.05 / sqrt(0.0475 + 1e-7);
        CHECK_NEAR(mom, 0.5 * inc1 + inc2, 1e-6);
        CHECK_NEAR(w3, 1.0 - inc1 - (0.5 * inc1 + inc2), 1e-6);
    }
    /* Adagrad from the accumulator 0.1: acc = 0.35, w = 1 - 0.05 / sqrt(0.35 + 1e-7). */
    {
        optim_spec o = spec_of(OPT_ADAGRAD, 0.1f, 0.0f, 0, 0.0f, 0);
        float w1 = 1.0f, acc = optim_entry_of(OPT_ADAGRAD)->slot_init(&o);
        step1(&o, 1, &w1, g, &acc, NULL);
        CHECK_NEAR(acc, 0.35, 1e-7);
        CHECK_NEAR(w1, 1.0 - 0.05 / sqrt(0.35 + 1e-7), 1e-6);
    }
    /* Nadam's step from given factors: m = 0.05, v = 0.00025 (beta 0.9, 0.999),
     * w = 1 - lr (nm m + ng g) / (sqrt(v nv) + eps). */
    {
        float w1 = 1.0f, nm = 0.0f, nv = 0.0f;
        optim_scalars sc = {.nadam = {0.01f, (float)(1.0 - 0.9f), (float)(1.0 - 0.999f), 1e-7f,
                                      2.0f, 3.0f, 1000.0f}};
        kern_optimize(OPT_NADAM, &w1, &g, &nm, &nv, 1, &sc);
        CHECK_NEAR(nm, 0.05, 1e-7);
        CHECK_NEAR(nv, 0.00025, 1e-8);
        CHECK_NEAR(w1, 1.0 - 0.01 * (2.0 * 0.05 + 3.0 * 0.5) / (sqrt(0.25) + 1e-7), 1e-6);
    }
    /* Clips and the regularizer's gradient. */
    CHECK_NEAR(clip_norm_factor(4.0, 1.0f), 0.5, 1e-7);   /* norm 2 clipped to 1 */
    CHECK_NEAR(clip_norm_factor(0.25, 1.0f), 1.0, 0);     /* norm 0.5: unchanged */
    {
        float x[3] = {-2.0f, 0.3f, 5.0f}, gw[3] = {0.5f, 0.5f, 0.5f}, zero = 0.0f, gz = 1.0f;
        kern_clip_value(x, 3, 1.0f);
        CHECK(x[0] == -1.0f && x[1] == 0.3f && x[2] == 1.0f);
        float wr[3] = {-2.0f, 0.5f, 0.0f};
        kern_reg_grad(gw, wr, 3, 0.1f, 0.01f); /* g += 2 l2 w + l1 sign(w) */
        CHECK_NEAR(gw[0], 0.5 - 0.04 - 0.1, 1e-7);
        CHECK_NEAR(gw[1], 0.5 + 0.01 + 0.1, 1e-7);
        CHECK_NEAR(gw[2], 0.5, 0); /* sign(0) = 0 */
        kern_reg_grad(&gz, &zero, 1, 0.1f, 0.0f);
        CHECK_NEAR(gz, 1.0, 0);
        CHECK_NEAR(kern_sum_sq(wr, 3), 4.25, 0);
        CHECK_NEAR(kern_sum_abs(wr, 3), 2.5, 0);
    }
    return check_done("test_optim");
}
