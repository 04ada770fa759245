/* cohort eval / cohort predict: use saved weights on a dataset. */
#include "cli/cli.h"
#include "io/io.h"
#include "plan/plan.h"
#include "run/run.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded {
    cohort_plan *plan;
    cohort_run *run;
    train_group *g;
} loaded;

static void loaded_free(loaded *l)
{
    group_free(l->g);
    cohort_run_free(l->run);
    cohort_plan_free(l->plan);
}

/* Rebuild the model saved in `weights` (its spec is in the metadata) and
 * load `data` as its dataset. Returns an exit status. */
static int load_model(const char *cmd, const char *weights, const char *data, loaded *l)
{
    memset(l, 0, sizeof *l);
    cohort_error err;
    st_file f;
    if (st_read(weights, &f, &err))
        return cli_usage_error(cmd, "%s", err.message);
    char *spec = st_meta_get(&f, "spec");
    /* The image shape the model was trained on shapes flat data (a CSV of
     * pixels) as the plan's data.input_shape did. */
    char *shape = st_meta_get(&f, "input_shape");
    int h, w, c, image = shape && sscanf(shape, "(%d, %d, %d)", &h, &w, &c) == 3;
    free(shape);
    st_free(&f);
    if (!spec)
        return cli_usage_error(cmd,
                               "%s: no model spec in its metadata; was it written by cohort? "
                               "(other tools' weights load through init_from in a plan)",
                               weights);
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"data\": {\"train\": ");
    sb_json_str(&b, data);
    if (image)
        sb_printf(&b, ", \"input_shape\": [%d, %d, %d]", h, w, c);
    sb_puts(&b, "}, \"models\": [");
    sb_puts(&b, spec);
    sb_puts(&b, "]}");
    free(spec);
    char init[COHORT_PATH_MAX + 32];
    snprintf(init, sizeof init, "models.0.init_from=%s", weights);
    const char *sets[] = {init, "models.0.device=cpu:0"};
    cohort_status st = cohort_plan_parse(b.data ? b.data : "", b.len, weights, sets, 2, &l->plan, &err);
    sb_free(&b);
    if (st)
        return cli_usage_error(cmd, "%s: its metadata spec: %s", weights, err.message);
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    if ((st = cohort_run_create(l->plan, &opt, &l->run, &err))) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    model_entry *e = &l->run->m[0];
    const model_spec *sp = e->spec;
    st = group_create(&sp, 1, l->run->in_shape, l->run->n_classes, &l->run->devices->dev[e->device], 0,
                      &l->g, &err);
    if (st) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
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
                 "Loss and accuracy of the model saved in WEIGHTS (a .safetensors file that\n"
                 "cohort wrote) on the dataset SPEC, e.g. fashion-mnist:test or csv:file.csv.");
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
    int rc = load_model("eval", weights, data, &l);
    if (rc)
        return rc;
    double loss, acc;
    data_view all = data_view_all(l.run->train_ds);
    group_evaluate(l.g, &all, &loss, &acc, NULL);
    if (json)
        printf("{\"weights\": \"%s\", \"data\": \"%s\", \"samples\": %lld, \"loss\": %.6f, "
               "\"accuracy\": %.6f}\n",
               weights, data, (long long)all.n, loss, acc);
    else
        printf("%s on %s (%lld samples): loss %.4f accuracy %.4f\n", weights, data,
               (long long)all.n, loss, acc);
    loaded_free(&l);
    return 0;
}

int cmd_predict(int argc, char **argv)
{
    const char *weights = NULL, *data = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort predict WEIGHTS --data SPEC [--out FILE]\n\n"
                 "Predictions of the model saved in WEIGHTS for every sample of SPEC, as CSV:\n"
                 "index,prediction,label,p0,p1,... (probabilities; values for mse models).\n"
                 "Written to FILE (atomically) or to standard output.");
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
    int rc = load_model("predict", weights, data, &l);
    if (rc)
        return rc;
    data_view all = data_view_all(l.run->train_ds);
    int n_out = group_layout(l.g)->n_out;
    float *p = malloc((size_t)all.n * (size_t)n_out * sizeof(float) + 1);
    if (!p) {
        loaded_free(&l);
        return cli_usage_error("predict", "out of memory");
    }
    group_predict(l.g, 0, &all, p);
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "index,prediction,label");
    for (int j = 0; j < n_out; j++)
        sb_printf(&b, ",p%d", j);
    sb_puts(&b, "\n");
    for (int64_t i = 0; i < all.n; i++) {
        const float *row = p + i * n_out;
        sb_printf(&b, "%lld,%d,%d", (long long)i, output_class(row, n_out), all.y[i]);
        for (int j = 0; j < n_out; j++)
            sb_printf(&b, ",%.6g", (double)row[j]);
        sb_puts(&b, "\n");
    }
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
