/*
 * Exact memory: the bytes planned for a group are the bytes its pool gave
 * it, for every layer type, optimizer, batch size and group size, on flat
 * and image inputs; a convolutional group takes nothing more from the pool
 * while it trains (tests/t_cnn.sh checks the same through fused runs); pools
 * refuse allocations past their limit; 50 models trained one after another
 * leave the pool at zero after each and resident memory flat. And
 * mem_alloc_big, the CPU pools' host memory: 64-byte aligned, whole 2 MiB
 * pages from 1 MiB on, every byte asked for writable.
 */
#include "backend/backend_impl.h"
#include "check.h"
#include "layer_text.h"
#include "device/device.h"
#include "run/run.h"
#include "train/group_impl.h"
#include "train/train.h"
#include "util/util.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static device_registry *reg;

static void spec_base(model_spec *s, int batch)
{
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, "m");
    s->batch_size = batch;
    s->n_layers = 2;
    s->layers[0] = layer_dense(32, ACT_RELU);
    s->layers[1] = layer_dense(10, ACT_SOFTMAX);
}

/* The group of specs[0..K) on samples `in` of `classes` classes takes from
 * the pool exactly what model_layout_make plans for it, and gives all of it
 * back when freed; `what` names it in messages. */
static void check_planned(const char *what, const model_spec *const *specs, int K,
                          sample_shape in, int classes)
{
    model_layout L;
    cohort_error err;
    cohort_status st = model_layout_make(specs[0], in, classes, K, &L, &err);
    CHECK_MSG(st == COHORT_OK, "%s: layout: %s", what, err.message);
    if (st)
        return;
    mem_pool *pool = reg->dev[0].mem_pool;
    uint64_t before = mem_pool_in_use(pool);
    train_group *g;
    st = group_create(specs, K, in, classes, &reg->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "%s: %s", what, err.message);
    if (st)
        return;
    CHECK_MSG(group_peak_bytes(g) == L.total_bytes, "%s: planned %zu, pool gave %llu", what,
              L.total_bytes, (unsigned long long)group_peak_bytes(g));
    CHECK(mem_pool_in_use(pool) - before == L.total_bytes);
    group_free(g);
    CHECK_MSG(mem_pool_in_use(pool) == before, "%s: pool not back to where it was", what);
}

static void planned_equals_peak(void)
{
    static const int batches[] = {1, 7, 64, 1000};
    for (int variant = 0; variant < 7; variant++) {
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            for (int K = 1; K <= 3; K += 2) {
                model_spec s;
                spec_base(&s, batches[b]);
                const char *what = "adam";
                switch (variant) {
                case 1: s.opt.kind = OPT_SGD; s.opt.momentum = 0; what = "sgd"; break;
                case 2: s.opt.kind = OPT_SGD; s.opt.momentum = 0.9f; what = "sgd+momentum"; break;
                case 3: s.opt.kind = OPT_ADAMW; s.opt.weight_decay = 0.004f; what = "adamw"; break;
                case 4:
                    s.n_layers = 4;
                    s.layers[3] = s.layers[1];
                    s.layers[1] = layer_dropout(0.5f);
                    s.layers[2] = layer_dense(16, ACT_TANH);
                    what = "dropout + tanh";
                    break;
                case 5:
                    s.early_stop.enabled = 1;
                    s.early_stop.restore_best = 1;
                    what = "restore_best_weights";
                    break;
                case 6:
                    s.loss = LOSS_MSE;
                    s.layers[1].act = ACT_SIGMOID;
                    what = "mse";
                    break;
                }
                const model_spec *specs[3] = {&s, &s, &s};
                char at[96];
                snprintf(at, sizeof at, "%s, batch %d, K %d", what, batches[b], K);
                check_planned(at, specs, K, shape_flat(20), 10);
            }
        }
    }
}

/* Layers of an image model. */
static layer_spec conv(int filters, int k, int stride, pad_kind pad, act_kind act)
{
    return layer_conv(filters, k, stride, pad, act, 1);
}
static layer_spec pool2(const char *kind, int k, int stride, pad_kind pad)
{
    return layer_pooling(kind, k, stride, pad);
}
static layer_spec plain(const char *kind) { return layer_text("%s", kind); }
static layer_spec bnorm(void) { return layer_bnorm(0.9f, 1e-3f); }
static layer_spec dense(int units, act_kind act) { return layer_dense(units, act); }

/* A convolutional variant: its layers (ending in a softmax over 4 classes)
 * and the image it reads. */
typedef struct cnn_variant {
    const char *what;
    sample_shape in;
    int n;
    layer_spec layers[10];
    opt_kind opt;
    int restore_best;
} cnn_variant;

#define CNN_VARIANTS 18
static void cnn_variant_get(int v, cnn_variant *c)
{
    sample_shape odd = shape_image(9, 7, 2), rgb = shape_image(8, 8, 3);
    switch (v) {
    case 0:
        *c = (cnn_variant){"conv valid s1 + flatten", odd, 3,
                           {conv(4, 3, 1, PAD_VALID, ACT_RELU), plain("flatten"),
                            dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 1:
        *c = (cnn_variant){"conv same s2 + flatten", odd, 3,
                           {conv(5, 3, 2, PAD_SAME, ACT_TANH), plain("flatten"),
                            dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 2:
        *c = (cnn_variant){"conv valid s2 + max pool 2 + flatten", rgb, 4,
                           {conv(6, 3, 2, PAD_VALID, ACT_RELU),
                            pool2("max_pooling2d", 2, 2, PAD_VALID), plain("flatten"),
                            dense(4, ACT_SOFTMAX)}, OPT_SGD, 0};
        break;
    case 3:
        *c = (cnn_variant){"conv same s1 + avg pool 3 s1 same + global avg pool", odd, 4,
                           {conv(3, 2, 1, PAD_SAME, ACT_SIGMOID),
                            pool2("average_pooling2d", 3, 1, PAD_SAME),
                            plain("global_average_pooling2d"), dense(4, ACT_SOFTMAX)}, OPT_ADAMW, 0};
        break;
    case 4:
        *c = (cnn_variant){"conv no bias + batch norm + relu + max pool + flatten + dropout",
                           rgb, 7,
                           {conv(8, 3, 1, PAD_SAME, ACT_LINEAR), bnorm(),
                            layer_act(ACT_RELU),
                            pool2("max_pooling2d", 2, 2, PAD_VALID), plain("flatten"),
                            layer_dropout(0.3f),
                            dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        c->layers[0] = layer_conv(8, 3, 1, PAD_SAME, ACT_LINEAR, 0);
        break;
    case 5:
        *c = (cnn_variant){"dense on an image", rgb, 2,
                           {dense(16, ACT_RELU), dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 6:
        *c = (cnn_variant){"batch norm on the input + conv + max pool same + global avg", odd, 5,
                           {bnorm(), conv(4, 3, 1, PAD_VALID, ACT_RELU),
                            pool2("max_pooling2d", 2, 1, PAD_SAME),
                            plain("global_average_pooling2d"), dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 7:
        *c = (cnn_variant){"conv + conv + avg pool + flatten + dense no bias, restore_best",
                           rgb, 6,
                           {conv(4, 3, 1, PAD_SAME, ACT_RELU), conv(6, 3, 2, PAD_VALID, ACT_RELU),
                            pool2("average_pooling2d", 2, 2, PAD_SAME), plain("flatten"),
                            dense(8, ACT_RELU), dense(4, ACT_SOFTMAX)}, OPT_SGD, 1};
        c->layers[4] = layer_text("{dense: 8, activation: relu, use_bias: false}");
        break;
    case 8:
        *c = (cnn_variant){"1x1 conv s2 + batch norm + tanh + flatten + batch norm", odd, 6,
                           {conv(3, 1, 2, PAD_VALID, ACT_LINEAR), bnorm(),
                            layer_act(ACT_TANH),
                            plain("flatten"), bnorm(), dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 9:
        *c = (cnn_variant){"conv same, even kernel, s2 + flatten + dropout + dense",
                           shape_image(12, 12, 1), 5,
                           {conv(8, 4, 2, PAD_SAME, ACT_RELU), plain("flatten"),
                            layer_dropout(0.5f),
                            dense(12, ACT_TANH), dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 11: /* gelu and silu keep their inputs (saved) */
        *c = (cnn_variant){"conv gelu + flatten + dense silu + gelu + dense", odd, 5,
                           {conv(4, 3, 1, PAD_SAME, ACT_GELU), plain("flatten"),
                            dense(6, ACT_SILU), layer_act(ACT_GELU), dense(4, ACT_SOFTMAX)},
                           OPT_ADAM, 0};
        break;
    case 12: /* layer normalization keeps each vector's mean and 1/std */
        *c = (cnn_variant){"layer norm on channels + conv + flatten + layer norm + dense", odd, 5,
                           {plain("layer_normalization"), conv(3, 3, 1, PAD_VALID, ACT_RELU),
                            plain("flatten"), plain("layer_normalization"),
                            dense(4, ACT_SOFTMAX)},
                           OPT_ADAM, 0};
        break;
    case 13: /* attention keeps Q, K, V, the weights, their mask and the context */
        *c = (cnn_variant){"attention + layer norm + flatten + dense", shape_seq(5, 6), 4,
                           {layer_text("{multi_head_attention: {num_heads: 2, key_dim: 3}}"),
                            plain("layer_normalization"), plain("flatten"),
                            dense(4, ACT_SOFTMAX)},
                           OPT_ADAM, 0};
        break;
    case 14:
        *c = (cnn_variant){"attention causal with dropout + attention + flatten", shape_seq(9, 4),
                           4,
                           {layer_text("{multi_head_attention: {num_heads: 3, key_dim: 4, "
                                       "value_dim: 2, dropout: 0.1, causal: true}}"),
                            layer_text("{multi_head_attention: {num_heads: 1, key_dim: 4, "
                                       "use_bias: false}}"),
                            plain("flatten"), dense(4, ACT_SOFTMAX)},
                           OPT_SGD, 1};
        break;
    case 10:
        *c = (cnn_variant){"dropout on the image + conv 5x5 + max pool 3 s3 + flatten",
                           shape_image(10, 10, 1), 5,
                           {layer_dropout(0.2f),
                            conv(4, 5, 1, PAD_VALID, ACT_RELU),
                            pool2("max_pooling2d", 3, 3, PAD_VALID), plain("flatten"),
                            dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    /* Sequences [T, C]: conv1d and the 1-D poolings. */
    case 15:
        *c = (cnn_variant){"conv1d causal dilated + max pool 1d + global avg 1d",
                           shape_seq(12, 3), 4,
                           {layer_text("{conv1d: 4, kernel_size: 3, padding: causal, "
                                       "dilation_rate: 2, activation: relu}"),
                            layer_text("{max_pooling1d: 2}"), plain("global_average_pooling1d"),
                            dense(4, ACT_SOFTMAX)}, OPT_ADAM, 0};
        break;
    case 16:
        *c = (cnn_variant){"conv1d same dilated + avg pool 1d same + global max 1d",
                           shape_seq(11, 2), 4,
                           {layer_text("{conv1d: 5, kernel_size: 2, padding: same, "
                                       "dilation_rate: 3, activation: tanh}"),
                            layer_text("{average_pooling1d: 3, strides: 1, padding: same}"),
                            plain("global_max_pooling1d"), dense(4, ACT_SOFTMAX)}, OPT_SGD, 0};
        break;
    default:
        *c = (cnn_variant){"conv1d valid s2 no bias + conv1d + flatten + dropout",
                           shape_seq(13, 4), 5,
                           {layer_text("{conv1d: 6, kernel_size: 3, strides: 2, use_bias: "
                                       "false}"),
                            layer_text("{conv1d: 16, kernel_size: 2, activation: relu}"),
                            plain("flatten"), layer_dropout(0.2f), dense(4, ACT_SOFTMAX)},
                           OPT_ADAM, 0};
        break;
    }
}

static void cnn_spec(const cnn_variant *c, int batch, uint64_t seed, model_spec *s)
{
    model_spec_defaults(s);
    snprintf(s->name, sizeof s->name, "cnn%llu", (unsigned long long)seed);
    s->batch_size = batch;
    s->seed = seed;
    s->n_layers = c->n;
    for (int i = 0; i < c->n; i++)
        s->layers[i] = c->layers[i];
    s->opt.kind = c->opt;
    s->opt.momentum = c->opt == OPT_SGD ? 0.9f : 0.0f;
    s->opt.weight_decay = c->opt == OPT_ADAMW ? 0.004f : 0.0f;
    if (c->restore_best) {
        s->early_stop.enabled = 1;
        s->early_stop.restore_best = 1;
    }
}

/* The same as planned_equals_peak for convolutional models on images and
 * on sequences. */
static void cnn_planned_equals_peak(void)
{
    static const int batches[] = {1, 7, 64};
    for (int v = 0; v < CNN_VARIANTS; v++) {
        cnn_variant c;
        cnn_variant_get(v, &c);
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            for (int K = 1; K <= 3; K += 2) {
                model_spec s[3];
                const model_spec *specs[3];
                for (int k = 0; k < 3; k++) {
                    cnn_spec(&c, batches[b], 1 + (uint64_t)k, &s[k]);
                    specs[k] = &s[k];
                }
                char at[160];
                snprintf(at, sizeof at, "%s, batch %d, K %d", c.what, batches[b], K);
                check_planned(at, specs, K, c.in, 4);
            }
        }
    }
}

/* Two epochs of a group of 3 convolutional models on 50 random images (40 to
 * train at batch 16, so a last batch of 8 rows; 10 to validate): the pool
 * gives the group nothing past the plan while it trains and evaluates. */
static void cnn_fit_within_plan(void)
{
    enum { N = 50 };
    static const int pick[] = {4, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17};
    for (size_t v = 0; v < sizeof pick / sizeof pick[0]; v++) {
        cnn_variant c;
        cnn_variant_get(pick[v], &c);
        int64_t dim = (int64_t)shape_size(c.in);
        float *x = malloc((size_t)(N * dim) * sizeof *x);
        int32_t *y = malloc(N * sizeof *y);
        rng_state r;
        rng_seed(&r, 5, 0);
        for (int64_t i = 0; i < N * dim; i++)
            x[i] = 2.0f * rng_uniform(&r) - 1.0f;
        for (int i = 0; i < N; i++)
            y[i] = i % 4;
        cohort_dataset ds;
        memset(&ds, 0, sizeof ds);
        ds.n = N;
        ds.dim = dim;
        ds.shape = c.in;
        ds.x = x;
        ds.y = y;
        ds.n_classes = 4;
        data_view train, val;
        data_split(&ds, 0.2, &train, &val);
        model_spec s[3];
        const model_spec *specs[3];
        for (int k = 0; k < 3; k++) {
            cnn_spec(&c, 16, 1 + (uint64_t)k, &s[k]);
            s[k].epochs = 2;
            specs[k] = &s[k];
        }
        mem_pool *pool = reg->dev[0].mem_pool;
        uint64_t before = mem_pool_in_use(pool);
        train_group *g;
        cohort_error err;
        cohort_status st = group_create(specs, 3, c.in, 4, &reg->dev[0], 1, &g, &err);
        CHECK_MSG(st == COHORT_OK, "%s: %s", c.what, err.message);
        if (st == COHORT_OK) {
            size_t planned = group_layout(g)->total_bytes;
            train_result res[3];
            epoch_metrics hist[3][2];
            memset(res, 0, sizeof res);
            for (int k = 0; k < 3; k++)
                res[k].history = hist[k];
            st = group_fit(g, &train, &val, NULL, NULL, res, &err);
            CHECK_MSG(st == COHORT_OK, "%s: fit: %s", c.what, err.message);
            for (int k = 0; k < 3; k++)
                CHECK_MSG(res[k].state == MODEL_OK && res[k].epochs_run == 2,
                          "%s: model %d: %s after %d epochs (%s)", c.what, k,
                          model_state_str(res[k].state), res[k].epochs_run, res[k].error);
            eval_metrics em[3];
            group_evaluate(g, &val, em, NULL);
            CHECK_MSG(group_peak_bytes(g) == planned,
                      "%s: planned %zu bytes, the group's account peaked at %llu while training",
                      c.what, planned, (unsigned long long)group_peak_bytes(g));
            CHECK_MSG(mem_pool_in_use(pool) - before == planned,
                      "%s: the pool holds %llu bytes for the group after training, planned %zu",
                      c.what, (unsigned long long)(mem_pool_in_use(pool) - before), planned);
            group_free(g);
        }
        CHECK(mem_pool_in_use(pool) == before);
        free(x);
        free(y);
    }
}

/* ---- the recurrent layers ---- */

/* A recurrent model on sequences [T, 3]: v 0..5 = lstm, lstm with
 * return_sequences + gru, gru, gru with return_sequences + flatten,
 * bidirectional lstm, bidirectional gru with return_sequences + lstm. */
enum { RNN_VARIANTS = 6 };
static const char *rnn_what[RNN_VARIANTS] = {"lstm", "lstm seq + gru", "gru", "gru seq + flatten",
                                             "bidirectional lstm", "bidirectional gru seq + lstm"};

static void rnn_spec(int v, int batch, uint64_t seed, model_spec *s)
{
    model_spec_defaults(s);
    snprintf(s->name, sizeof s->name, "rnn%llu", (unsigned long long)seed);
    s->batch_size = batch;
    s->seed = seed;
    s->n_layers = 0;
    switch (v) {
    case 0: s->layers[s->n_layers++] = layer_text("{lstm: 5}"); break;
    case 1:
        s->layers[s->n_layers++] = layer_text("{lstm: 6, return_sequences: true}");
        s->layers[s->n_layers++] = layer_text("{gru: 4}");
        break;
    case 2: s->layers[s->n_layers++] = layer_text("{gru: 7}"); break;
    case 4: s->layers[s->n_layers++] = layer_text("{bidirectional: {lstm: 5}}"); break;
    case 5:
        s->layers[s->n_layers++] = layer_text("{bidirectional: {gru: 3, return_sequences: true}}");
        s->layers[s->n_layers++] = layer_text("{lstm: 2}");
        break;
    default:
        s->layers[s->n_layers++] = layer_text("{gru: 3, return_sequences: true}");
        s->layers[s->n_layers++] = layer_text("flatten");
        break;
    }
    s->layers[s->n_layers++] = layer_dense(4, ACT_SOFTMAX);
}

/* The floats a recurrent layer keeps per sample, as its header comment
 * says: its gates at every step (4H, 3H), the LSTM's cells or the GRU's
 * recurrent products (H, 3H) and the state before every step (H), per
 * direction; scratch per sample of a batch of B: the larger of forward's
 * (a last state, and W_ih and W_hh transposed, G*H*(F+H) over the batch)
 * and backward's (dL/dh, and the LSTM's dL/dc). */
static void rnn_sizes(int gru, int dirs, int T, int F, int H, int B, size_t *saved, size_t *work)
{
    size_t G = gru ? 3 : 4;
    *saved = (size_t)dirs * ((size_t)T * (size_t)H * (gru ? 7 : 6));
    size_t fwd = (size_t)H + (G * (size_t)H * (size_t)(F + H) + (size_t)B - 1) / (size_t)B;
    size_t bwd = (size_t)H * (gru ? 1 : 2);
    *work = fwd > bwd ? fwd : bwd;
}

/* planned == peak for batch sizes x K x sequence lengths; each recurrent
 * layer's saved and scratch sizes are the ones above; and a training pass
 * of a full batch writes every float of the saved region planned (filled
 * with a NaN pattern first): nothing planned is left unused. */
static void rnn_planned_equals_peak(void)
{
    static const int batches[] = {1, 7, 64}, steps[] = {1, 4, 9};
    for (int v = 0; v < RNN_VARIANTS; v++)
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
            for (size_t t = 0; t < sizeof steps / sizeof *steps; t++)
                for (int K = 1; K <= 3; K += 2) {
                    model_spec s[3];
                    const model_spec *specs[3];
                    for (int k = 0; k < 3; k++) {
                        rnn_spec(v, batches[b], 1 + (uint64_t)k, &s[k]);
                        specs[k] = &s[k];
                    }
                    sample_shape in = shape_seq(steps[t], 3);
                    model_layout L;
                    cohort_error err;
                    cohort_status st = model_layout_make(&s[0], in, 4, K, &L, &err);
                    CHECK_MSG(st == COHORT_OK, "%s: layout: %s", rnn_what[v], err.message);
                    if (st)
                        continue;
                    for (int i = 0; i < L.n_layers; i++) {
                        const layer_plan *lp = &L.layers[i];
                        const char *kind = lp->kind->name;
                        int bi = strcmp(kind, "bidirectional") == 0;
                        if (strcmp(kind, "lstm") && strcmp(kind, "gru") && !bi)
                            continue;
                        /* The variants' bidirectional gru is v 5's. */
                        int gru = bi ? v == 5 : strcmp(kind, "gru") == 0;
                        size_t sv, wk;
                        rnn_sizes(gru, bi ? 2 : 1, lp->in.h, lp->in.c, lp->out.c / (bi ? 2 : 1),
                                  batches[b], &sv, &wk);
                        CHECK_MSG(lp->n_saved == sv && lp->n_work == wk,
                                  "%s T %d layer %d: saved %zu work %zu per sample, expected %zu "
                                  "and %zu", rnn_what[v], steps[t], i, lp->n_saved, lp->n_work, sv,
                                  wk);
                    }
                    mem_pool *pool = reg->dev[0].mem_pool;
                    uint64_t before = mem_pool_in_use(pool);
                    train_group *g;
                    st = group_create(specs, K, in, 4, &reg->dev[0], 1, &g, &err);
                    CHECK_MSG(st == COHORT_OK, "%s: %s", rnn_what[v], err.message);
                    if (st)
                        continue;
                    CHECK_MSG(group_peak_bytes(g) == L.total_bytes,
                              "%s, batch %d, T %d, K %d: planned %zu, pool gave %llu",
                              rnn_what[v], batches[b], steps[t], K, L.total_bytes,
                              (unsigned long long)group_peak_bytes(g));
                    CHECK(mem_pool_in_use(pool) - before == L.total_bytes);
                    /* One full batch: every saved float written. */
                    int n = batches[b];
                    size_t dim = shape_size(in), n_saved = (size_t)K * (size_t)n * L.saved_width;
                    float *x = malloc((size_t)n * dim * sizeof *x);
                    int32_t *y = malloc((size_t)n * sizeof *y);
                    float *grad = malloc((size_t)K * L.n_params * sizeof *grad);
                    rng_state r;
                    rng_seed(&r, 4, 4);
                    for (size_t i = 0; i < (size_t)n * dim; i++)
                        x[i] = 2.0f * rng_uniform(&r) - 1.0f;
                    for (int i = 0; i < n; i++)
                        y[i] = i % 4;
                    cohort_dataset ds;
                    memset(&ds, 0, sizeof ds);
                    ds.n = n;
                    ds.dim = (int64_t)dim;
                    ds.shape = in;
                    ds.x = x;
                    ds.y = y;
                    ds.n_classes = 4;
                    data_view dv = data_view_all(&ds);
                    const uint32_t pattern = 0x7fc0beefu;
                    for (size_t i = 0; i < n_saved; i++)
                        memcpy(&g->saved[i], &pattern, sizeof pattern);
                    double loss[3];
                    group_loss_grad(g, &dv, 1, 1, loss, grad);
                    size_t unused = 0;
                    for (size_t i = 0; i < n_saved; i++)
                        unused += memcmp(&g->saved[i], &pattern, sizeof pattern) == 0;
                    CHECK_MSG(unused == 0, "%s, batch %d, T %d, K %d: %zu of %zu saved floats "
                              "planned but never written", rnn_what[v], n, steps[t], K, unused,
                              n_saved);
                    CHECK_MSG(group_peak_bytes(g) == L.total_bytes,
                              "%s: the account went past the plan in a training pass",
                              rnn_what[v]);
                    free(x);
                    free(y);
                    free(grad);
                    group_free(g);
                    CHECK(mem_pool_in_use(pool) == before);
                }
}

/* Residual blocks: planned == peak for batch sizes 1, 7 and 64 and groups
 * of 1 and 3; the saved bytes are the add's one row of the block's width per
 * sample (the gradient that skips f, kept for the residual's backward) and
 * the dropout's mask, nothing for the residual itself; and two epochs of a
 * group of 3 take nothing from the pool past the plan. */
static void residual_within_plan(void)
{
    static const int batches[] = {1, 7, 64};
    enum { N = 50, D = 12 };
    const char *text = "[{dense: 16, activation: relu}, {residual: [{dense: 24, activation: "
                       "tanh}, {dropout: 0.2}, {dense: 16}]}, {residual: [{activation: relu}]}, "
                       "{dense: 4, activation: softmax}]";
    model_spec s[3];
    const model_spec *specs[3];
    for (int k = 0; k < 3; k++) {
        model_spec_defaults(&s[k]);
        snprintf(s[k].name, sizeof s[k].name, "res%d", k);
        s[k].seed = 1 + (uint64_t)k;
        s[k].epochs = 2;
        layers_text(&s[k], text);
        specs[k] = &s[k];
    }
    mem_pool *pool = reg->dev[0].mem_pool;
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        for (int K = 1; K <= 3; K += 2) {
            for (int k = 0; k < 3; k++)
                s[k].batch_size = batches[b];
            model_layout L;
            cohort_error err;
            cohort_status st = model_layout_make(&s[0], shape_flat(D), 4, K, &L, &err);
            CHECK_MSG(st == COHORT_OK, "residual: layout: %s", err.message);
            if (st)
                continue;
            CHECK_MSG(L.saved_width == 24 + 16 + 16, "residual: saved %zu floats a sample",
                      L.saved_width);
            uint64_t before = mem_pool_in_use(pool);
            train_group *g;
            st = group_create(specs, K, shape_flat(D), 4, &reg->dev[0], 1, &g, &err);
            CHECK_MSG(st == COHORT_OK, "residual: %s", err.message);
            if (st)
                continue;
            CHECK_MSG(group_peak_bytes(g) == L.total_bytes,
                      "residual, batch %d, K %d: planned %zu, pool gave %llu", batches[b], K,
                      L.total_bytes, (unsigned long long)group_peak_bytes(g));
            CHECK(mem_pool_in_use(pool) - before == L.total_bytes);
            group_free(g);
            CHECK(mem_pool_in_use(pool) == before);
        }
    }
    float *x = malloc(N * D * sizeof *x);
    int32_t *y = malloc(N * sizeof *y);
    rng_state r;
    rng_seed(&r, 5, 0);
    for (int i = 0; i < N * D; i++)
        x[i] = 2.0f * rng_uniform(&r) - 1.0f;
    for (int i = 0; i < N; i++)
        y[i] = i % 4;
    cohort_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = N;
    ds.dim = D;
    ds.shape = shape_flat(D);
    ds.x = x;
    ds.y = y;
    ds.n_classes = 4;
    data_view train, val;
    data_split(&ds, 0.2, &train, &val);
    for (int k = 0; k < 3; k++)
        s[k].batch_size = 16;
    uint64_t before = mem_pool_in_use(pool);
    train_group *g;
    cohort_error err;
    cohort_status st = group_create(specs, 3, shape_flat(D), 4, &reg->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "residual: %s", err.message);
    if (st == COHORT_OK) {
        size_t planned = group_layout(g)->total_bytes;
        train_result res[3];
        epoch_metrics hist[3][2];
        memset(res, 0, sizeof res);
        for (int k = 0; k < 3; k++)
            res[k].history = hist[k];
        st = group_fit(g, &train, &val, NULL, NULL, res, &err);
        CHECK_MSG(st == COHORT_OK, "residual: fit: %s", err.message);
        for (int k = 0; k < 3; k++)
            CHECK_MSG(res[k].state == MODEL_OK && res[k].epochs_run == 2,
                      "residual: model %d: %s after %d epochs", k, model_state_str(res[k].state),
                      res[k].epochs_run);
        CHECK_MSG(group_peak_bytes(g) == planned,
                  "residual: planned %zu bytes, the group's account peaked at %llu", planned,
                  (unsigned long long)group_peak_bytes(g));
        group_free(g);
    }
    CHECK(mem_pool_in_use(pool) == before);
    free(x);
    free(y);
}

/* Token models (an embedding first; a position embedding in place over its
 * output, or a copy after a dense layer): planned == the pool's, for batch
 * sizes, group sizes and sequence lengths, and two epochs of a group of 3
 * on token data take nothing past the plan. */
static void token_spec(int v, int T, int batch, uint64_t seed, model_spec *s)
{
    model_spec_defaults(s);
    snprintf(s->name, sizeof s->name, "tok%d", v);
    s->batch_size = batch;
    s->seed = seed;
    s->opt.kind = OPT_ADAM;
    int n = 0;
    s->layers[n++] = layer_text("{embedding: [11, 6]}");
    if (v == 1)
        s->layers[n++] = layer_text("{position_embedding: %d}", T + 3);
    if (v == 2) {
        s->layers[n++] = dense(5, ACT_RELU);
        s->layers[n++] = layer_text("{position_embedding: %d}", T);
    }
    s->layers[n++] = plain("flatten");
    s->layers[n++] = dense(4, ACT_SOFTMAX);
    s->n_layers = n;
}

static void token_planned_equals_peak(void)
{
    static const int batches[] = {1, 7, 64}, lengths[] = {1, 5, 16};
    for (int v = 0; v < 3; v++)
        for (size_t t = 0; t < 3; t++)
            for (size_t b = 0; b < 3; b++)
                for (int K = 1; K <= 3; K += 2) {
                    model_spec s[3];
                    const model_spec *specs[3];
                    for (int k = 0; k < 3; k++) {
                        token_spec(v, lengths[t], batches[b], 1 + (uint64_t)k, &s[k]);
                        specs[k] = &s[k];
                    }
                    char at[96];
                    snprintf(at, sizeof at, "token variant %d, T %d, batch %d, K %d", v,
                             lengths[t], batches[b], K);
                    check_planned(at, specs, K, shape_flat(lengths[t]), 4);
                }
    /* Two epochs on ids, last batch short. */
    enum { N = 50, T = 7 };
    float x[N * T];
    int32_t y[N];
    rng_state r;
    rng_seed(&r, 5, 1);
    for (int i = 0; i < N * T; i++)
        x[i] = (float)(rng_next(&r) % 11);
    for (int i = 0; i < N; i++)
        y[i] = i % 4;
    cohort_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = N;
    ds.dim = T;
    ds.shape = shape_flat(T);
    ds.x = x;
    ds.y = y;
    ds.n_classes = 4;
    data_view train, val;
    data_split(&ds, 0.2, &train, &val);
    for (int v = 0; v < 3; v++) {
        model_spec s[3];
        const model_spec *specs[3];
        for (int k = 0; k < 3; k++) {
            token_spec(v, T, 16, 1 + (uint64_t)k, &s[k]);
            s[k].epochs = 2;
            specs[k] = &s[k];
        }
        train_group *g;
        cohort_error err;
        cohort_status st = group_create(specs, 3, ds.shape, 4, &reg->dev[0], 1, &g, &err);
        CHECK_MSG(st == COHORT_OK, "token variant %d: %s", v, err.message);
        if (st)
            continue;
        size_t planned = group_layout(g)->total_bytes;
        train_result res[3];
        epoch_metrics hist[3][2];
        memset(res, 0, sizeof res);
        for (int k = 0; k < 3; k++)
            res[k].history = hist[k];
        st = group_fit(g, &train, &val, NULL, NULL, res, &err);
        CHECK_MSG(st == COHORT_OK, "token variant %d: fit: %s", v, st ? err.message : "");
        for (int k = 0; k < 3; k++)
            CHECK(res[k].state == MODEL_OK && res[k].epochs_run == 2);
        CHECK_MSG(group_peak_bytes(g) == planned,
                  "token variant %d: planned %zu bytes, the group's account peaked at %llu", v,
                  planned, (unsigned long long)group_peak_bytes(g));
        group_free(g);
    }
}

static void mem_pool_limits(void)
{
    cohort_error err;
    for (int policy = 0; policy < 2; policy++) {
        mem_pool *p;
        CHECK(mem_pool_create("test:0", backend_cpu(), 0, 4096, (cohort_mem_policy)policy, &p, &err) ==
              COHORT_OK);
        mem_account acct = {0, 0};
        void *a = mem_pool_alloc(p, 1000, &acct, "a", &err); /* rounds up to 1024 */
        void *b = mem_pool_alloc(p, 3072, &acct, "b", &err);
        CHECK(a && b);
        CHECK(mem_pool_in_use(p) == 4096);
        void *c = mem_pool_alloc(p, 1, &acct, "model 'c'", &err);
        CHECK(c == NULL);
        CHECK(err.status == COHORT_ERR_NOMEM);
        CHECK_CONTAINS(err.message, "model 'c': needs 64 B on test:0 but only 0 B of its limit is free");
        mem_pool_release(p, a, &acct);
        CHECK(mem_pool_in_use(p) == 3072 && acct.current == 3072 && acct.peak == 4096);
        void *d = mem_pool_alloc(p, 1024, &acct, "d", &err);
        CHECK(d != NULL);
        mem_pool_release(p, b, &acct);
        mem_pool_release(p, d, &acct);
        CHECK(mem_pool_in_use(p) == 0 && mem_pool_peak(p) == 4096);
        /* After every block is back, the slab is whole again. */
        void *e = mem_pool_alloc(p, 4096, &acct, "e", &err);
        CHECK_MSG(e != NULL, "policy %d: freed blocks did not merge", policy);
        mem_pool_release(p, e, &acct);
        mem_pool_fail_after(p, 2);
        void *f = mem_pool_alloc(p, 64, NULL, "f", &err);
        void *g = mem_pool_alloc(p, 64, NULL, "g", &err);
        CHECK(f != NULL && g == NULL);
        CHECK_CONTAINS(err.message, "injected");
        mem_pool_release(p, f, NULL);
        mem_pool_free(p);
    }
    mem_pool *p;
    CHECK(mem_pool_create("huge:0", backend_cpu(), 0, (uint64_t)1 << 50, COHORT_MEM_PREALLOCATE, &p,
                      &err) == COHORT_ERR_NOMEM);
    CHECK_CONTAINS(err.message, "cannot preallocate");
}

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

typedef struct watch {
    cohort_run *run;
    int ended, mem_pool_not_zero;
    long rss[64];
} watch;

static void on_event(const cohort_event *ev, void *user)
{
    watch *w = user;
    if (!w->run)
        return;
    /* A model starts before its group allocates: the previous one must have
     * given every byte back. */
    if (ev->kind == COHORT_EVENT_MODEL_START)
        for (int i = 0; i < w->run->devices->n; i++)
            if (w->run->devices->dev[i].mem_pool && mem_pool_in_use(w->run->devices->dev[i].mem_pool) != 0)
                w->mem_pool_not_zero++;
    if (ev->kind != COHORT_EVENT_MODEL_END)
        return;
    if (w->ended < 64)
        w->rss[w->ended] = rss_bytes();
    w->ended++;
}

static void fifty_in_a_row(void)
{
    char dir[] = "/tmp/cohort-mem-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char csv[128], plan[2048];
    snprintf(csv, sizeof csv, "%s/d.csv", dir);
    FILE *f = fopen(csv, "w");
    rng_state r;
    rng_seed(&r, 1, 1);
    for (int i = 0; i < 2000; i++) {
        int c = i % 4;
        for (int j = 0; j < 32; j++)
            fprintf(f, "%f,", (double)rng_uniform(&r) + (j % 4 == c));
        fprintf(f, "%d\n", c);
    }
    fclose(f);
    int n = snprintf(plan, sizeof plan,
                     "data: {train: 'csv:%s', validation_split: 0.1}\n"
                     "defaults: {epochs: 1, batch_size: 32, layers: [{dense: 256, activation: relu}, "
                     "{dense: 4, activation: softmax}]}\n"
                     "models: [{name: m}]\n"
                     "sweep: {seed: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,"
                     "24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,"
                     "49,50]}\n",
                     csv);
    cohort_error err;
    cohort_plan *p;
    CHECK(cohort_plan_parse(plan, (size_t)n, "fifty.yaml", NULL, 0, &p, &err) == COHORT_OK);
    watch w;
    memset(&w, 0, sizeof w);
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    opt.strategy = COHORT_STRATEGY_SEQUENTIAL;
    opt.on_event = on_event;
    opt.user = &w;
    opt.threads = 1;
    cohort_run *run;
    CHECK(cohort_run_create(p, &opt, &run, &err) == COHORT_OK);
    w.run = run;
    CHECK(cohort_run_train(run, &err) == COHORT_OK);
    CHECK(w.ended == 50);
    CHECK(mem_pool_in_use(run->devices->dev[0].mem_pool) == 0);
    CHECK_MSG(w.mem_pool_not_zero == 0, "the pool held memory after %d of 50 models", w.mem_pool_not_zero);
    for (int i = 0; i < run->n; i++)
        CHECK(run->m[i].peak_bytes == run->m[i].planned_bytes);
    long growth = w.rss[49] - w.rss[9];
    printf("test_memory: resident memory after model 10: %.1f MiB, after model 50: %.1f MiB "
           "(growth %ld KiB; bound 1024 KiB)\n",
           (double)w.rss[9] / 1048576.0, (double)w.rss[49] / 1048576.0, growth / 1024);
    if (!getenv("COHORT_SANITIZED")) /* the sanitizers keep freed memory in quarantine */
        CHECK_MSG(growth < 1024 * 1024, "resident memory grew by %ld KiB over 40 models",
                  growth / 1024);
    cohort_run_free(run);
    cohort_plan_free(p);
    unlink(csv);
    rmdir(dir);
}

static void big_blocks(void)
{
    const size_t mib = (size_t)1 << 20;
    const size_t sizes[] = {0, 1, 63, 65, mib - 1, mib, mib + 1, 2 * mib, 5 * mib + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = mem_alloc_big(n);
        CHECK_MSG(p != NULL, "mem_alloc_big(%zu) failed", n);
        if (!p)
            continue;
        uintptr_t a = (uintptr_t)p;
        CHECK_MSG(a % 64 == 0, "mem_alloc_big(%zu): %p not 64-byte aligned", n, (void *)p);
        if (n >= mib)
            CHECK_MSG(a % (2 * mib) == 0, "mem_alloc_big(%zu): %p not on a 2 MiB boundary", n,
                      (void *)p);
        memset(p, 0xa5, n); /* ASan: every byte asked for is there */
        free(p);
    }
}

int main(void)
{
    cohort_error err;
    if (devices_discover(&reg, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    big_blocks();
    planned_equals_peak();
    cnn_planned_equals_peak();
    cnn_fit_within_plan();
    rnn_planned_equals_peak();
    residual_within_plan();
    token_planned_equals_peak();
    mem_pool_limits();
    devices_free(reg);
    fifty_in_a_row();
    return check_done("test_memory");
}
