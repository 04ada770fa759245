/*
 * test_layer_table: a layer kind is its entry's file and one line of the
 * table. A kind that only this binary has (tests/layers/scaled_identity.c,
 * added with layer_register, this binary's table line) parses, plans,
 * trains fused and alone to the same bits, saves, loads and prints, with
 * no edit anywhere else; the plan's messages list it, and its mistakes are
 * errors at file:line. Also: the table's own checks (a name twice, the key
 * list, a fusion key).
 */
#include "check.h"
#include "cohort.h"
#include "io/io.h"
#include "layer_text.h"
#include "memory_data.h"
#include "plan/plan.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const layer_ops layer_scaled_identity_ops;

static const char *PLAN =
    "data: {train: 'memory:train', validation_split: 0.25}\n"
    "defaults: {epochs: 3, batch_size: 16, optimizer: {name: sgd, lr: 0.1, momentum: 0.9}}\n"
    "models:\n"
    "  - name: a\n"
    "    layers: [{dense: 8, activation: tanh}, {scaled_identity: 0.5}, "
    "{dense: 3, activation: softmax}]\n"
    "  - name: b\n"
    "    seed: 2\n"
    "    layers: [{dense: 8, activation: tanh}, {scaled_identity: 2}, "
    "{dense: 3, activation: softmax}]\n"
    "  - name: c\n"
    "    seed: 3\n"
    "    layers: [{dense: 8, activation: tanh}, scaled_identity, "
    "{dense: 3, activation: softmax}]\n";

static cohort_plan *parse(const char *text, cohort_error *err)
{
    cohort_plan *p = NULL;
    if (cohort_plan_parse(text, strlen(text), "plan.yaml", NULL, 0, &p, err) != COHORT_OK)
        return NULL;
    return p;
}

/* The plan with `layer` as model a's second layer fails at plan.yaml:LINE
 * with a message holding frag. */
static void expect_layer_error(const char *layer, int line, const char *frag)
{
    char text[1024], where[32];
    snprintf(text, sizeof text,
             "data: {train: 'memory:train'}\n"
             "models:\n"
             "  - name: a\n"
             "    layers:\n"
             "      - {dense: 8}\n"
             "      - %s\n"
             "      - {dense: 3, activation: softmax}\n",
             layer);
    cohort_error err;
    cohort_plan *p = parse(text, &err);
    CHECK_MSG(p == NULL, "%s parsed", layer);
    cohort_plan_free(p);
    if (p)
        return;
    snprintf(where, sizeof where, "plan.yaml:%d: ", line);
    CHECK_MSG(strstr(err.message, where) && strstr(err.message, frag), "%s: %s", layer,
              err.message);
}

static void syntax(void)
{
    cohort_error err;
    cohort_plan *p = parse(PLAN, &err);
    CHECK_MSG(p != NULL, "%s", err.message);
    if (!p)
        return;
    /* Its JSON (results, weight files' metadata), Keras's default for a
     * bare name, its short form in cohort plan. */
    const model_spec *a = &p->models[0], *c = &p->models[2];
    CHECK_CONTAINS(a->config_json,
                   "{\"dense\":8,\"activation\":\"tanh\"},{\"scaled_identity\":0.5},");
    CHECK_CONTAINS(c->config_json, "{\"scaled_identity\":1},");
    char s[32];
    CHECK(layer_abbrev(&a->layers[1], s, sizeof s) > 0 && strcmp(s, "sid0.5") == 0);
    CHECK(a->layers[1].kind == &layer_scaled_identity_ops && a->layers[1].line == 5);
    /* The settings need not agree for the models to fuse: it has no fusion
     * key; another kind at its place does not fuse. */
    CHECK(model_can_fuse(a, c));
    model_spec other = *a;
    other.layers[1] = layer_dropout(0.5f);
    CHECK(!model_can_fuse(a, &other));
    cohort_plan_free(p);

    /* Its mistakes, and the messages that list every kind. */
    expect_layer_error("{scaled_identity: -1}", 6, "scaled_identity scale of layers.1");
    expect_layer_error("{scaled_identity: 2, padding: same}", 6,
                       "'padding' does not apply to scaled_identity layers (layers.1 of model "
                       "'a'); it takes no other settings");
    expect_layer_error("scaled_identiy", 6, "(did you mean 'scaled_identity'?)");
    /* The table's kinds, the registered one last (the built-in list grows). */

    /* The table's kinds in order, the registered one last (issue 37's kinds
     * come between). */
    expect_layer_error("{kernel_size: 3}", 6,
                       "has no layer kind; give one of dense, dropout, conv2d, max_pooling2d, "
                       "average_pooling2d, global_average_pooling2d, flatten, "
                       "batch_normalization, activation, ");
    expect_layer_error("{kernel_size: 3}", 6, " or scaled_identity (like {conv2d: 32, ");
    expect_layer_error("{scaled_identity: 1, activation: relu}", 6,
                       "'activation' applies only to dense, conv2d, activation and conv1d "
                       "layers (layers.1 of model 'a' is scaled_identity)");
    /* A sweep may name its value (layers.N.KEY takes every kind's name). */
    char text[1024];
    const char *bare = strstr(PLAN, "scaled_identity, "); /* c's, as a map a sweep can set */
    snprintf(text, sizeof text, "%.*s{scaled_identity: 1}%ssweep: {layers.1.scaled_identity: "
             "[0.25, 4]}\n", (int)(bare - PLAN), PLAN, bare + strlen("scaled_identity"));
    p = parse(text, &err);
    CHECK_MSG(p && cohort_plan_model_count(p) == 6, "%s", p ? "" : err.message);
    if (p)
        CHECK_CONTAINS(p->models[1].config_json, "{\"scaled_identity\":4}");
    cohort_plan_free(p);
}

/* Train the plan under strategy s into dir; returns its plan JSON (malloc'd). */
static char *train(const char *dir, cohort_strategy s)
{
    cohort_error err;
    cohort_plan *p = parse(PLAN, &err);
    CHECK_MSG(p != NULL, "%s", err.message);
    if (!p)
        return NULL;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, s);
    opt.threads = 1;
    opt.out_dir = dir;
    cohort_run *run = NULL;
    char *json = NULL;
    cohort_status st = cohort_run_create(p, &opt, &run, &err);
    CHECK_MSG(st == COHORT_OK, "%s", err.message);
    if (st == COHORT_OK) {
        st = cohort_run_train(run, &err);
        CHECK_MSG(st == COHORT_OK, "%s", err.message);
        json = cohort_run_plan_json(run, &err);
        for (int i = 0; i < cohort_run_model_count(run); i++) {
            cohort_model_result r;
            CHECK(cohort_run_model_result(run, i, &r) == COHORT_OK && !strcmp(r.status, "ok"));
            CHECK_MSG(r.final_accuracy > 0.6, "%s: accuracy %g", r.name, r.final_accuracy);
        }
    }
    cohort_run_free(run);
    cohort_plan_free(p);
    return json;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b && len > 0 ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

/* The model's outputs from its weight file's tensors, by hand. */
static void forward_by_hand(const st_file *f, const float *x, float *out)
{
    const st_tensor *w0 = st_find(f, "layers.0.weight"), *b0 = st_find(f, "layers.0.bias");
    const st_tensor *g = st_find(f, "layers.1.weight");
    const st_tensor *w2 = st_find(f, "layers.2.weight"), *b2 = st_find(f, "layers.2.bias");
    CHECK(w0 && b0 && g && w2 && b2);
    if (!(w0 && b0 && g && w2 && b2))
        return;
    CHECK(g->ndim == 1 && g->shape[0] == 8);
    double h[8], z[3], m = -INFINITY, sum = 0;
    for (int j = 0; j < 8; j++) {
        double v = b0->data[j];
        for (int i = 0; i < D; i++)
            v += (double)w0->data[j * D + i] * x[i];
        h[j] = tanh(v) * g->data[j];
    }
    for (int o = 0; o < 3; o++) {
        z[o] = b2->data[o];
        for (int j = 0; j < 8; j++)
            z[o] += (double)w2->data[o * 8 + j] * h[j];
        m = z[o] > m ? z[o] : m;
    }
    for (int o = 0; o < 3; o++)
        sum += exp(z[o] - m);
    for (int o = 0; o < 3; o++)
        out[o] = (float)(exp(z[o] - m) / sum);
}

static void train_save_load(void)
{
    char fused[] = "/tmp/cohort-layer-table-XXXXXX", alone[] = "/tmp/cohort-layer-table-XXXXXX";
    CHECK(mkdtemp(fused) && mkdtemp(alone));
    char *json = train(fused, COHORT_STRATEGY_FUSED);
    /* One group of the three, each layer named by its kind. */
    CHECK(json && strstr(json, "\"models\": [\"a\", \"b\", \"c\"]"));
    CHECK(json && strstr(json, "\"kind\": \"scaled_identity\""));
    free(json);
    free(train(alone, COHORT_STRATEGY_SEQUENTIAL));

    const char *names[] = {"a", "b", "c"};
    const float start[] = {0.5f, 2.0f, 1.0f};
    for (int m = 0; m < 3; m++) {
        char pf[256], pa[256];
        snprintf(pf, sizeof pf, "%s/models/%s.safetensors", fused, names[m]);
        snprintf(pa, sizeof pa, "%s/models/%s.safetensors", alone, names[m]);
        size_t nf = 0, na = 0;
        unsigned char *bf = slurp(pf, &nf), *ba = slurp(pa, &na);
        CHECK_MSG(bf && ba && nf > 0 && nf == na && memcmp(bf, ba, nf) == 0,
                  "%s: fused and alone differ", names[m]);
        free(bf);
        free(ba);

        /* Saved: its tensor, trained away from where it started; loaded:
         * cohort_predict reads it back through the entry and gives what
         * the file's tensors give by hand. */
        st_file f;
        cohort_error err;
        if (st_read(pf, &f, &err) != COHORT_OK) {
            CHECK_MSG(0, "%s", err.message);
            continue;
        }
        const st_tensor *g = st_find(&f, "layers.1.weight");
        int moved = 0;
        for (int j = 0; g && j < 8; j++)
            moved |= g->data[j] != start[m];
        CHECK_MSG(moved, "%s: the gain did not train", names[m]);
        char *meta = st_meta_get(&f, "spec");
        CHECK_MSG(meta && strstr(meta, "scaled_identity"), "%s", meta ? meta : "no spec");
        free(meta);
        cohort_data x;
        memset(&x, 0, sizeof x);
        x.name = "x";
        x.x = X;
        x.n = 5;
        x.sample_rank = 1;
        x.sample_shape[0] = D;
        float out[5 * 3];
        int n_out = 0;
        cohort_status st = cohort_predict(pf, &x, out, 5 * 3, &n_out, &err);
        CHECK_MSG(st == COHORT_OK && n_out == 3, "%s", err.message);
        for (int i = 0; st == COHORT_OK && i < 5; i++) {
            float want[3];
            forward_by_hand(&f, X + i * D, want);
            for (int o = 0; o < 3; o++)
                CHECK_NEAR(out[i * 3 + o], want[o], 1e-5);
        }
        st_free(&f);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", fused, alone);
    CHECK(system(cmd) == 0);
}

/* The table's own rules. */
static void table(void)
{
    CHECK(layer_register(&layer_scaled_identity_ops) == -1); /* its name is taken */
    int n;
    const layer_ops *const *kinds = layer_kinds(&n);
    CHECK(n >= 10 && kinds[n - 1] == &layer_scaled_identity_ops);
    CHECK(layer_find("scaled_identity") == &layer_scaled_identity_ops && !layer_find("no_such_kind"));
    const char *keys[LAYER_KEYS_MAX];
    int count = layer_all_keys(keys, LAYER_KEYS_MAX), names = 0, strides = 0;
    for (int i = 0; i < count; i++) {
        names += !strcmp(keys[i], "scaled_identity");
        strides += !strcmp(keys[i], "strides");
    }
    CHECK(names == 1 && strides == 1 && keys[count] == NULL);
    /* Every kind: a name, shapes and passes; a fusion key within its room. */
    for (int k = 0; k < n; k++) {
        CHECK_MSG(kinds[k]->name && kinds[k]->plan && kinds[k]->forward && kinds[k]->backward,
                  "kind %d", k);
        CHECK_MSG(!kinds[k]->example || !kinds[k]->parse || kinds[k]->to_json, "%s",
                  kinds[k]->name);
    }
    layer_spec c1 = layer_conv(4, 3, 1, PAD_SAME, ACT_RELU, 1);
    layer_spec c2 = layer_conv(4, 3, 1, PAD_VALID, ACT_RELU, 1);
    layer_spec c3 = layer_conv(4, 3, 1, PAD_SAME, ACT_RELU, 1);
    c3.l2 = 0.01f; /* a regularizer may differ within a group */
    CHECK(!layer_can_fuse(&c1, &c2) && layer_can_fuse(&c1, &c3));
    layer_spec d1 = layer_dropout(0.1f), d2 = layer_dropout(0.4f);
    CHECK(layer_can_fuse(&d1, &d2));
    /* A kind that gives no fusion key fuses only equal settings: one that
     * forgot its key never puts different shapes in one group. */
    static layer_ops strict;
    strict = layer_scaled_identity_ops;
    strict.name = "strict_identity";
    strict.fuse_key = NULL;
    CHECK(layer_register(&strict) == 0);
    layer_spec s1 = layer_text("{strict_identity: 0.5}"), s2 = layer_text("{strict_identity: 2}");
    layer_spec s3 = layer_text("{strict_identity: 0.5}");
    CHECK(!layer_can_fuse(&s1, &s2) && layer_can_fuse(&s1, &s3));
    layer_spec i1 = layer_text("{scaled_identity: 0.5}"), i2 = layer_text("{scaled_identity: 2}");
    CHECK(layer_can_fuse(&i1, &i2));
}

int main(void)
{
    CHECK(layer_register(&layer_scaled_identity_ops) == 0);
    make_data(7);
    syntax();
    train_save_load();
    table();
    return check_done("test_layer_table");
}
