/* cohort eval / cohort predict: use saved weights on a dataset. */
#include "cli/cli.h"
#include "io/io.h"
#include "plan/plan.h"
#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded {
    cohort_plan *plan;
    device_registry *devices;
    cohort_dataset *ds;
    train_group *g;
    data_view all;   /* every row of ds, shaped as the model's input */
    char **names;    /* the classes' text labels from the weights, or NULL */
    int32_t n_names;
} loaded;

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

/* s as one CSV field: quoted, with quotes doubled, when it needs it. */
static void put_csv_field(strbuf *b, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        sb_puts(b, s);
        return;
    }
    sb_puts(b, "\"");
    for (const char *p = s; *p; p++) {
        sb_putn(b, p, 1);
        if (*p == '"')
            sb_puts(b, "\"");
    }
    sb_puts(b, "\"");
}

static void loaded_free(loaded *l)
{
    names_free(l->names, l->n_names);
    group_free(l->g);
    data_free(l->ds);
    devices_free(l->devices);
    cohort_plan_free(l->plan);
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
 * structure, its loss (eval's loss) and its batch size (the passes' rows).
 * The training-only keys (epochs, optimizer, early_stopping, device,
 * init_from, ...) are dropped: their checks are about a training plan
 * (early stopping on val_loss wants validation data) that eval has not. */
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
    /* data.train is required by the plan and never read: eval loads --data itself. */
    sb_puts(&b, "{\"data\": {\"train\": \"unused\"}, \"models\": [{");
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

/*
 * Rebuild the model saved in `weights` from what the file stores (its spec,
 * input shape and parameters; the number of classes is its last layer's
 * width) and load `data` (relative to the current directory) as its input.
 * labels_optional: predict, which takes data without labels. Returns an
 * exit status; on 0, l holds everything until loaded_free.
 */
static int load_model(const char *cmd, const char *weights, const char *data,
                      int labels_optional, loaded *l)
{
    memset(l, 0, sizeof *l);
    cohort_error err;
    st_file f;
    if (st_read(weights, &f, &err))
        return cli_usage_error(cmd, "%s", err.message);
    char *spec = st_meta_get(&f, "spec");
    /* The image shape the model was trained on shapes flat data (a CSV of
     * pixels) as the plan's data.input_shape did. */
    char *shape = st_meta_get(&f, "input_shape"), *inputs = st_meta_get(&f, "inputs");
    char *names = st_meta_get(&f, "class_names"), *classes = st_meta_get(&f, "classes");
    /* Trained on class labels: a model of several outputs scores classes
     * (mse on one-hot labels) rather than errors. */
    int on_classes = classes && strtol(classes, NULL, 10) > 0;
    free(classes);
    int names_bad = names_parse(names, &l->names, &l->n_names);
    free(names);
    int h, w, c, image = shape && sscanf(shape, "(%d, %d, %d)", &h, &w, &c) == 3;
    long n_in = inputs ? strtol(inputs, NULL, 10) : 0;
    free(shape);
    free(inputs);
    st_free(&f);
    if (!spec) {
        loaded_free(l);
        return cli_usage_error(cmd,
                               "%s: no model spec in its metadata; was it written by cohort? "
                               "(other tools' weights load through init_from in a plan)",
                               weights);
    }
    if (names_bad) {
        free(spec);
        loaded_free(l);
        return cli_usage_error(cmd, "%s: its metadata class_names is not a sorted list of text "
                                    "labels",
                               weights);
    }
    if (image && (h <= 0 || w <= 0 || c <= 0))
        image = 0;
    if (image)
        n_in = (long)h * w * c;
    if (n_in <= 0 || n_in > INT32_MAX)
        n_in = 0;
    char *text = eval_plan_json(spec);
    cohort_status st = cohort_plan_parse(text ? text : spec, strlen(text ? text : spec), weights,
                                         NULL, 0, &l->plan, &err);
    free(text);
    free(spec);
    if (st)
        return cli_usage_error(cmd, "%s: its metadata spec: %s", weights, err.message);
    model_spec *sp = &l->plan->models[0];
    if (str_copy(sp->init_from, sizeof sp->init_from, weights)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%.200s...: the path is too long", weights);
    }
    /* Data without labels is read for both, so that eval can say what it
     * lacks. -1: the input size is not stored (an older file): only npy:X
     * is known to be unlabeled. */
    data_options dopt = {.unlabeled_dim = n_in ? n_in : -1};
    if ((st = data_load(data, &dopt, &l->ds, &err))) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    l->all = data_view_all(l->ds);
    if (n_in && l->all.dim != n_in) {
        loaded_free(l);
        return cli_usage_error(cmd,
                               "%s has %lld values per sample, but the model of %s takes %ld; "
                               "give data of the shape it was trained on",
                               data, (long long)l->all.dim, weights, n_in);
    }
    if (image)
        l->all.shape = shape_image(h, w, c);
    char what[COHORT_PATH_MAX + 32];
    snprintf(what, sizeof what, "the model of %s", weights);
    if ((st = data_align_classes(l->ds, l->names, l->n_names, what, &err))) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    if (!l->ds->has_labels && !labels_optional) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s has no labels; %s needs them (cohort predict does not)",
                               data, cmd);
    }
    if ((st = devices_discover(&l->devices, &err))) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    cohort_device *dev = devices_find(l->devices, "cpu:0");
    if (!dev) {
        loaded_free(l);
        return cli_usage_error(cmd, "no cpu:0 device");
    }
    const model_spec *csp = sp;
    model_layout alone;
    int n_classes = 0;
    if (on_classes && model_layout_make(sp, l->all.shape, 0, 1, &alone, NULL) == COHORT_OK)
        n_classes = alone.n_out;
    if ((st = group_create(&csp, 1, l->all.shape, n_classes, dev, 0, &l->g, &err))) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    /* Classes come from the weights: a label the last layer has no unit
     * for cannot be scored (mse on one output takes the label as a number). */
    int n_out = group_layout(l->g)->n_out;
    if (l->ds->has_labels && (sp->loss == LOSS_SCE || n_out > 1) && l->ds->n_classes > n_out) {
        int64_t row = 0;
        while (row < l->all.n && l->all.y[row] < n_out)
            row++;
        int label = row < l->all.n ? l->all.y[row] : l->ds->n_classes - 1;
        loaded_free(l);
        return cli_usage_error(cmd,
                               "%s: sample %lld has label %d, but the model of %s has %d classes "
                               "(0 to %d, its last layer's units)",
                               data, (long long)row, label, weights, n_out, n_out - 1);
    }
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    const char *weights = NULL, *data = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort eval WEIGHTS --data SPEC [--json]\n\n"
                 "Loss and accuracy (regression: mae and rmse) of the model saved in WEIGHTS\n"
                 "(a .safetensors file that\n"
                 "cohort wrote) on the dataset SPEC, e.g. fashion-mnist:test or csv:file.csv.\n"
                 "The model is rebuilt from what WEIGHTS stores (layers, input shape); its\n"
                 "classes are its last layer's units, so the data may hold fewer of them.\n"
                 "Paths are relative to the current directory.");
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--data", &v)) {
            data = v;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("eval", "unknown option '%s'", argv[i]);
        } else if (!weights) {
            weights = argv[i];
        } else {
            return cli_usage_error("eval", "'%s' is extra", argv[i]);
        }
    }
    if (!weights || !data)
        return cli_usage_error("eval", "needs WEIGHTS and --data SPEC (see cohort eval --help)");
    loaded l;
    int rc = load_model("eval", weights, data, 0, &l);
    if (rc)
        return rc;
    eval_metrics m;
    data_view all = l.all;
    if (group_evaluate(l.g, &all, &m, NULL) != COHORT_OK) {
        loaded_free(&l);
        fprintf(stderr, "cohort eval: out of host memory evaluating %s on %s\n", weights, data);
        return 1;
    }
    int reg = group_layout(l.g)->metric == METRIC_ERRORS;
    if (json && reg)
        printf("{\"weights\": \"%s\", \"data\": \"%s\", \"samples\": %lld, \"loss\": %.6f, "
               "\"mae\": %.6f, \"rmse\": %.6f}\n",
               weights, data, (long long)all.n, m.loss, m.mae, m.rmse);
    else if (json)
        printf("{\"weights\": \"%s\", \"data\": \"%s\", \"samples\": %lld, \"loss\": %.6f, "
               "\"accuracy\": %.6f}\n",
               weights, data, (long long)all.n, m.loss, m.accuracy);
    else if (reg)
        printf("%s on %s (%lld samples): loss %.4f mae %.4f rmse %.4f\n", weights, data,
               (long long)all.n, m.loss, m.mae, m.rmse);
    else
        printf("%s on %s (%lld samples): loss %.4f accuracy %.4f\n", weights, data,
               (long long)all.n, m.loss, m.accuracy);
    loaded_free(&l);
    return 0;
}

/* Regression: index, the predicted values y0.., the targets t0.. */
static void put_values(strbuf *b, const data_view *all, int labeled, const float *p, int n_out)
{
    sb_puts(b, "index");
    for (int j = 0; j < n_out; j++)
        sb_printf(b, ",y%d", j);
    for (int j = 0; labeled && j < n_out; j++)
        sb_printf(b, ",t%d", j);
    sb_puts(b, "\n");
    for (int64_t i = 0; i < all->n; i++) {
        sb_printf(b, "%lld", (long long)i);
        for (int j = 0; j < n_out; j++)
            sb_printf(b, ",%.9g", (double)p[i * n_out + j]);
        for (int j = 0; labeled && j < n_out; j++) {
            double t = all->t && all->t_dim == n_out ? (double)all->t[i * n_out + j] : (double)all->y[i];
            sb_printf(b, ",%.9g", t);
        }
        sb_puts(b, "\n");
    }
}

/* Classification: index, the class, the label, the output of each unit. */
static void put_classes(strbuf *b, const loaded *l, const data_view *all, const float *p,
                        int n_out)
{
    sb_puts(b, "index,prediction,label");
    for (int j = 0; j < n_out; j++)
        sb_printf(b, ",p%d", j);
    sb_puts(b, "\n");
    for (int64_t i = 0; i < all->n; i++) {
        const float *row = p + i * n_out;
        int cls = output_class(row, n_out);
        sb_printf(b, "%lld,", (long long)i);
        if (l->names && cls >= 0 && cls < l->n_names)
            put_csv_field(b, l->names[cls]);
        else
            sb_printf(b, "%d", cls);
        sb_puts(b, ",");
        if (l->ds->has_labels && l->names && all->y[i] < l->n_names)
            put_csv_field(b, l->names[all->y[i]]);
        else if (l->ds->has_labels && l->ds->n_classes)
            sb_printf(b, "%d", all->y[i]);
        for (int j = 0; j < n_out; j++)
            sb_printf(b, ",%.6g", (double)row[j]);
        sb_puts(b, "\n");
    }
}

int cmd_predict(int argc, char **argv)
{
    const char *weights = NULL, *data = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort predict WEIGHTS --data SPEC [--out FILE]\n\n"
                 "Predictions of the model saved in WEIGHTS for every sample of SPEC, as CSV:\n"
                 "index,prediction,label,p0,p1,... (the class and each output unit's\n"
                 "probability; for regression, real-valued targets, index,y0,y1,...,t0,t1,...:\n"
                 "the predicted values and the targets).\n"
                 "Written to FILE (atomically) or to standard output.\n\n"
                 "The data may have no labels: npy:X alone, or a CSV whose columns are only\n"
                 "the model's inputs (as many columns as it takes, none named label); the\n"
                 "label column of the output is then empty. A model trained on text labels\n"
                 "(cat, dog) gives its predictions and labels as those names.");
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--data", &v)) {
            data = v;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("predict", "unknown option '%s'", argv[i]);
        } else if (!weights) {
            weights = argv[i];
        } else {
            return cli_usage_error("predict", "'%s' is extra", argv[i]);
        }
    }
    if (!weights || !data)
        return cli_usage_error("predict", "needs WEIGHTS and --data SPEC (see --help)");
    loaded l;
    int rc = load_model("predict", weights, data, 1, &l);
    if (rc)
        return rc;
    data_view all = l.all;
    int n_out = group_layout(l.g)->n_out;
    float *p = malloc((size_t)all.n * (size_t)n_out * sizeof(float) + 1);
    if (!p) {
        loaded_free(&l);
        return cli_usage_error("predict", "out of memory");
    }
    group_predict(l.g, 0, &all, p);
    strbuf b;
    sb_init(&b);
    if (group_layout(l.g)->metric == METRIC_ERRORS)
        put_values(&b, &all, l.ds->has_labels, p, n_out);
    else
        put_classes(&b, &l, &all, p, n_out);
    free(p);
    cohort_error err;
    rc = 0;
    if (b.failed)
        rc = cli_usage_error("predict", "out of memory");
    else if (out) {
        if (file_write_atomic(out, b.data, b.len, &err))
            rc = cli_usage_error("predict", "%s", err.message);
    } else {
        fwrite(b.data, 1, b.len, stdout);
    }
    sb_free(&b);
    loaded_free(&l);
    return rc;
}
