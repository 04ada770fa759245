/*
 * saved: a model rebuilt from a weights file cohort wrote, for eval and
 * predict (the CLI's and the C API's): its spec, input shape, class names
 * and parameters come from the file; the training-only keys of the spec are
 * dropped, so that nothing about a training plan (validation data for early
 * stopping) is asked of data that is only scored.
 */
#include "io/io.h"
#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void names_free(char **names, int32_t n)
{
    for (int32_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

/* The weights' class_names (a JSON array of strings) into *names; 0 when
 * absent, -1 when malformed or out of memory. */
static int names_parse(const char *json, char ***names, int32_t *n)
{
    *names = NULL;
    *n = 0;
    if (!json)
        return 0;
    json_value *v = json_parse(json, strlen(json), NULL, 0);
    int rc = -1;
    if (v && v->type == JSON_ARR && v->n > 0 && v->n < INT32_MAX) {
        char **out = calloc(v->n, sizeof *out);
        rc = out ? 0 : -1;
        for (size_t i = 0; !rc && i < v->n; i++)
            if (v->items[i].type != JSON_STR || !(out[i] = strdup(v->items[i].str)) ||
                (i && strcmp(out[i - 1], out[i]) >= 0))
                rc = -1;
        if (rc)
            names_free(out, (int32_t)v->n);
        else {
            *names = out;
            *n = (int32_t)v->n;
        }
    } else if (v && v->type == JSON_NULL) {
        rc = 0;
    }
    json_free(v);
    return rc;
}

static void put_json(strbuf *b, const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: sb_puts(b, "null"); return;
    case JSON_BOOL: sb_puts(b, v->boolean ? "true" : "false"); return;
    case JSON_NUM: sb_printf(b, "%.17g", v->num); return;
    case JSON_STR: sb_json_str(b, v->str); return;
    case JSON_ARR:
    case JSON_OBJ:
        sb_puts(b, v->type == JSON_ARR ? "[" : "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                sb_puts(b, ", ");
            if (v->type == JSON_OBJ) {
                sb_json_str(b, v->keys[i]);
                sb_puts(b, ": ");
            }
            put_json(b, &v->items[i]);
        }
        sb_puts(b, v->type == JSON_ARR ? "]" : "}");
        return;
    }
}

/* The keys of a stored model spec that using its weights needs: its
 * structure, its loss (eval's loss) and its batch size (the passes' rows). */
static const char *const kept_keys[] = {"name", "layers", "loss", "batch_size"};

/* A plan holding only the model of `spec` (JSON); NULL when spec is not a
 * JSON object (then the plan parser's message is the one to give). */
static char *eval_plan_json(const char *spec)
{
    json_value *v = json_parse(spec, strlen(spec), NULL, 0);
    if (!v || v->type != JSON_OBJ) {
        json_free(v);
        return NULL;
    }
    strbuf b;
    sb_init(&b);
    /* data.train is required by the plan and never read: the caller loads data itself. */
    sb_puts(&b, "{\"data\": {\"train\": \"memory:unused\"}, \"models\": [{");
    int n = 0;
    for (size_t i = 0; i < v->n; i++)
        for (size_t k = 0; k < sizeof kept_keys / sizeof *kept_keys; k++)
            if (!strcmp(v->keys[i], kept_keys[k])) {
                if (n++)
                    sb_puts(&b, ", ");
                sb_json_str(&b, v->keys[i]);
                sb_puts(&b, ": ");
                put_json(&b, &v->items[i]);
            }
    sb_puts(&b, "}]}");
    json_free(v);
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    return b.data;
}

cohort_status saved_model_open(const char *weights, saved_model *m, cohort_error *err)
{
    memset(m, 0, sizeof *m);
    st_file f;
    if (st_read(weights, &f, err))
        return err->status ? err->status : COHORT_ERR_INPUT;
    char *spec = st_meta_get(&f, "spec");
    /* The image shape the model was trained on shapes flat data (a CSV of
     * pixels) as the plan's data.input_shape did. */
    char *shape = st_meta_get(&f, "input_shape"), *inputs = st_meta_get(&f, "inputs");
    char *names = st_meta_get(&f, "class_names"), *classes = st_meta_get(&f, "classes");
    char *tcols = st_meta_get(&f, "label_columns"), *format = st_meta_get(&f, "format");
    /* A checkpoint holds the optimizer's state beside the weights under
     * other names: building from it would fail on a missing tensor. */
    int checkpoint = format && strcmp(format, "cohort-checkpoint") == 0;
    free(format);
    str_copy(m->label_columns, sizeof m->label_columns, tcols ? tcols : "");
    free(tcols);
    char *lcol = st_meta_get(&f, "label_column");
    str_copy(m->label_column, sizeof m->label_column, lcol ? lcol : "");
    free(lcol);
    /* Trained on class labels: a model of several outputs scores classes
     * (mse on one-hot labels) rather than errors. */
    m->on_classes = classes && strtol(classes, NULL, 10) > 0;
    int names_bad = names_parse(names, &m->names, &m->n_names);
    /* "(h, w, c)" an image, "(T, F)" a sequence. */
    int h, w, c, axes = shape ? sscanf(shape, "(%d, %d, %d)", &h, &w, &c) : 0;
    int image = axes == 3, seq = axes == 2;
    long n_in = inputs ? strtol(inputs, NULL, 10) : 0;
    free(classes);
    free(names);
    free(shape);
    free(inputs);
    st_free(&f);
    if (checkpoint) {
        free(spec);
        saved_model_free(m);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s is a checkpoint (for --resume), not a weights file; give the "
                           "model's weights, DIR/models/NAME.safetensors",
                           weights);
    }
    if (!spec) {
        saved_model_free(m);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: no model spec in its metadata; was it written by cohort? (other "
                           "tools' weights load through init_from in a plan)",
                           weights);
    }
    if (names_bad) {
        free(spec);
        saved_model_free(m);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: its metadata class_names is not a sorted list of text labels",
                           weights);
    }
    if (image && h > 0 && w > 0 && c > 0) {
        m->in = shape_image(h, w, c);
        n_in = (long)h * w * c;
    } else if (seq && h > 0 && w > 0) {
        m->in = shape_seq(h, w);
        n_in = (long)h * w;
    }
    m->n_in = n_in > 0 && n_in <= INT32_MAX ? n_in : 0;
    char *text = eval_plan_json(spec);
    cohort_status st = cohort_plan_parse(text ? text : spec, strlen(text ? text : spec), weights,
                                         NULL, 0, &m->plan, err);
    free(text);
    free(spec);
    if (st) {
        cohort_fail_prefix(err, "%s: its metadata spec", weights);
        saved_model_free(m);
        return st;
    }
    model_spec *sp = &m->plan->models[0];
    if (str_copy(sp->init_from, sizeof sp->init_from, weights)) {
        saved_model_free(m);
        return cohort_fail(err, COHORT_ERR_INPUT, "%.200s...: the path is too long", weights);
    }
    return COHORT_OK;
}

sample_shape saved_model_input(const saved_model *m, sample_shape data)
{
    if (m->in.rank)
        return m->in;
    /* Trained on flat data: the first dense layer's columns are in the
     * flat order it trained on. Data of an image shape would have them read
     * as torch's (C, H, W) and reordered into (H, W, C). */
    if (m->n_in)
        return shape_flat((int)m->n_in);
    return data;
}

cohort_status saved_model_build(saved_model *m, sample_shape in, cohort_error *err)
{
    cohort_status st = devices_discover(&m->devices, err);
    if (st)
        return st;
    cohort_device *dev = devices_find(m->devices, "cpu:0");
    if (!dev)
        return cohort_fail(err, COHORT_ERR_DEVICE, "no cpu:0 device");
    const model_spec *sp = &m->plan->models[0];
    model_layout alone;
    int n_classes = 0;
    if (m->on_classes && model_layout_make(sp, in, 0, 1, &alone, NULL) == COHORT_OK)
        n_classes = alone.n_out;
    return group_create(&sp, 1, in, n_classes, dev, 0, &m->g, err);
}

void saved_model_free(saved_model *m)
{
    names_free(m->names, m->n_names);
    group_free(m->g);
    devices_free(m->devices);
    cohort_plan_free(m->plan);
    memset(m, 0, sizeof *m);
}

cohort_status cohort_predict(const char *weights, const cohort_data *x, float *out,
                             int64_t out_len, int *n_out, cohort_error *err)
{
    if (!weights || !x || !n_out || (out && out_len < 0))
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_predict: invalid arguments");
    saved_model m;
    cohort_status st = saved_model_open(weights, &m, err);
    if (st)
        return st;
    /* Labels and targets are ignored, so not checked either: a caller may
     * pass its test set as it is, unknown labels (-1) and all. */
    cohort_data inputs = *x;
    inputs.labels = NULL;
    inputs.targets = NULL;
    cohort_dataset *ds = NULL;
    if ((st = data_from_memory(&inputs, &ds, err))) {
        saved_model_free(&m);
        return st;
    }
    data_view all = data_view_all(ds);
    if (m.n_in && all.dim != m.n_in)
        st = cohort_fail(err, COHORT_ERR_INPUT,
                         "memory:%s has %lld values per sample, but the model of %s takes %lld",
                         x->name ? x->name : "?", (long long)all.dim, weights,
                         (long long)m.n_in);
    if (!st) {
        all.shape = saved_model_input(&m, all.shape);
        st = saved_model_build(&m, all.shape, err);
    }
    if (!st) {
        *n_out = group_layout(m.g)->n_out;
        if (out && out_len < all.n * *n_out)
            st = cohort_fail(err, COHORT_ERR_USAGE,
                             "cohort_predict: out holds %lld floats, %lld needed",
                             (long long)out_len, (long long)(all.n * *n_out));
        else if (out)
            group_predict(m.g, 0, &all, out);
    }
    data_free(ds);
    saved_model_free(&m);
    return st;
}
