/*
 * Finite-difference gradient checks of every layer, activation and loss,
 * through the training group (K = 2 models of different seeds, so the
 * batching over models is checked too).
 */
#include "check.h"
#include "device/device.h"
#include "train/train.h"
#include "util/util.h"

static device_registry *reg;

typedef struct tiny_data {
    cohort_dataset ds;
    float x[16 * 6];
    int32_t y[16];
} tiny_data;

static void make_data(tiny_data *t, int classes)
{
    rng_state r;
    rng_seed(&r, 42, 0);
    memset(&t->ds, 0, sizeof t->ds);
    t->ds.n = 16;
    t->ds.dim = 6;
    t->ds.x = t->x;
    t->ds.y = t->y;
    t->ds.n_classes = classes;
    for (int i = 0; i < 16 * 6; i++)
        t->x[i] = 2.0f * rng_uniform(&r) - 1.0f;
    for (int i = 0; i < 16; i++)
        t->y[i] = (int32_t)(i % classes);
}

/* Compare analytic and central-difference gradients for every parameter. */
static void grad_check(const char *what, model_spec *spec, int classes, int dropout)
{
    tiny_data t;
    make_data(&t, classes);
    data_view v = data_view_all(&t.ds);
    model_spec s2 = *spec;
    s2.seed = spec->seed + 7;
    const model_spec *specs[2] = {spec, &s2};
    train_group *g;
    cohort_error err;
    cohort_status st = group_create(specs, 2, shape_flat(6), classes, &reg->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "%s: %s", what, err.message);
    if (st)
        return;
    const model_layout *L = group_layout(g);
    size_t P = L->n_params;
    float *grad = malloc(2 * P * sizeof(float)), *dummy = malloc(2 * P * sizeof(float));
    float *p = malloc(P * sizeof(float));
    double loss[2], lp[2], lm[2];
    /* Biases start at zero, which puts a ReLU whose inputs are all zero
     * exactly on its kink; move every parameter off its initial value. */
    rng_state r;
    rng_seed(&r, 7, 7);
    for (int k = 0; k < 2; k++) {
        group_get_params(g, k, p);
        for (size_t i = 0; i < P; i++)
            p[i] += 0.2f * (rng_uniform(&r) - 0.5f);
        group_set_params(g, k, p);
    }
    group_loss_grad(g, &v, dropout, 3, loss, grad);
    int bad = 0, kinks = 0;
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        group_get_params(g, k, p);
        for (size_t i = 0; i < P; i++) {
            /* Central differences with steps h and h/2: where they disagree
             * the loss is not smooth here (a ReLU crossed its kink), and the
             * parameter is skipped; elsewhere both must match the gradient. */
            float keep = p[i];
            float h = 1e-3f * (fabsf(keep) > 1.0f ? fabsf(keep) : 1.0f);
            double num[2];
            for (int s = 0; s < 2; s++) {
                float hs = s ? h * 0.5f : h;
                p[i] = keep + hs;
                group_set_params(g, k, p);
                group_loss_grad(g, &v, dropout, 3, lp, dummy);
                p[i] = keep - hs;
                group_set_params(g, k, p);
                group_loss_grad(g, &v, dropout, 3, lm, dummy);
                num[s] = (lp[k] - lm[k]) / (2.0 * (double)hs);
            }
            p[i] = keep;
            group_set_params(g, k, p);
            double ana = grad[k * P + i];
            if (fabs(num[0] - num[1]) > 1e-3 + 0.05 * fabs(num[0])) {
                kinks++;
                continue;
            }
            double rel = fabs(num[0] - ana) / fmax(fabs(num[0]) + fabs(ana), 1e-3);
            if (rel > worst)
                worst = rel;
            if (rel > 2e-2 && fabs(num[0] - ana) > 2e-4) {
                if (bad++ < 3)
                    fprintf(stderr, "%s: model %d param %zu: analytic %.6g numeric %.6g\n", what,
                            k, i, ana, num[0]);
            }
        }
    }
    CHECK_MSG(kinks * 10 < (int)(2 * P), "%s: %d of %zu parameters sit on a kink", what, kinks,
              2 * P);
    CHECK_MSG(bad == 0, "%s: %d of %zu gradients off (worst relative error %.3g)", what, bad,
              2 * P, worst);
    /* The two models differ (different seeds), so their gradients must too. */
    int differ = 0;
    for (size_t i = 0; i < P; i++)
        differ |= grad[i] != grad[P + i];
    CHECK_MSG(differ, "%s: both models of the group got the same gradient", what);
    free(grad);
    free(dummy);
    free(p);
    group_free(g);
}

static void spec_mlp(model_spec *s, act_kind hidden, act_kind out, int out_units, loss_kind loss)
{
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, "g");
    s->batch_size = 16;
    s->loss = loss;
    s->n_layers = 3;
    s->layers[0] = (layer_spec){.kind = LAYER_DENSE, .units = 5, .act = hidden};
    s->layers[1] = (layer_spec){.kind = LAYER_DENSE, .units = 4, .act = hidden};
    s->layers[2] = (layer_spec){.kind = LAYER_DENSE, .units = out_units, .act = out};
}

int main(void)
{
    cohort_error err;
    if (devices_discover(&reg, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    model_spec s;
    static const act_kind acts[] = {ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_LINEAR};
    static const char *names[] = {"relu", "sigmoid", "tanh", "linear"};
    for (int a = 0; a < 4; a++) {
        char what[64];
        spec_mlp(&s, acts[a], ACT_SOFTMAX, 3, LOSS_SCE);
        snprintf(what, sizeof what, "%s + softmax/cross-entropy", names[a]);
        grad_check(what, &s, 3, 0);
        spec_mlp(&s, acts[a], ACT_LINEAR, 3, LOSS_MSE);
        snprintf(what, sizeof what, "%s + mse (one-hot)", names[a]);
        grad_check(what, &s, 3, 0);
        spec_mlp(&s, ACT_TANH, acts[a], 1, LOSS_MSE);
        snprintf(what, sizeof what, "%s output + mse (1 unit)", names[a]);
        grad_check(what, &s, 3, 0);
    }
    /* Dropout between dense layers and on the input, with fixed masks. */
    spec_mlp(&s, ACT_SIGMOID, ACT_SOFTMAX, 3, LOSS_SCE);
    s.n_layers = 5;
    s.layers[4] = s.layers[2];
    s.layers[3] = (layer_spec){.kind = LAYER_DROPOUT, .rate = 0.3f};
    s.layers[2] = s.layers[1];
    s.layers[1] = (layer_spec){.kind = LAYER_DROPOUT, .rate = 0.5f};
    grad_check("dense/dropout/dense/dropout/dense", &s, 3, 1);
    s.n_layers = 3;
    s.layers[0] = (layer_spec){.kind = LAYER_DROPOUT, .rate = 0.25f};
    s.layers[1] = (layer_spec){.kind = LAYER_DENSE, .units = 5, .act = ACT_TANH};
    s.layers[2] = (layer_spec){.kind = LAYER_DENSE, .units = 3, .act = ACT_SOFTMAX};
    grad_check("input dropout", &s, 3, 1);
    /* A single layer: softmax regression. */
    spec_mlp(&s, ACT_RELU, ACT_SOFTMAX, 3, LOSS_SCE);
    s.n_layers = 1;
    s.layers[0] = (layer_spec){.kind = LAYER_DENSE, .units = 3, .act = ACT_SOFTMAX};
    grad_check("softmax regression", &s, 3, 0);
    devices_free(reg);
    return check_done("test_grad");
}
