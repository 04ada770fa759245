/* cohort eval / cohort predict: use saved weights on a dataset. */
#include "cli/cli.h"
#include "io/io.h"
#include "plan/plan.h"
#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct loaded {
    saved_model m;
    cohort_dataset *ds;
    data_view all;   /* every row of ds, shaped as the model's input */
} loaded;

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
    data_free(l->ds);
    saved_model_free(&l->m);
}

/*
 * Rebuild the model saved in `weights` from what the file stores (its spec,
 * input shape and parameters; the number of classes is its last layer's
 * width) and load `data` (relative to the current directory) as its input.
 * labels_optional: predict, which takes data without labels. Returns an
 * exit status; on 0, l holds everything until loaded_free.
 */
static int load_model(const char *cmd, const char *weights, const char *data,
                      const char *label_column, int labels_optional, loaded *l)
{
    memset(l, 0, sizeof *l);
    cohort_error err;
    if (saved_model_open(weights, &l->m, &err))
        return cli_usage_error(cmd, "%s", err.message);
    int64_t n_in = l->m.n_in;
    /* Data without labels is read for both, so that eval can say what it
     * lacks. -1: the input size is not stored (an older file): only npy:X
     * is known to be unlabeled. */
    data_options dopt = {.unlabeled_dim = n_in ? n_in : -1,
                         .label_columns = l->m.label_columns[0] ? l->m.label_columns : NULL};
    /* A CSV's label column: --label-column, else the one training read. */
    dopt.label_column = label_column ? label_column
                        : l->m.label_column[0] ? l->m.label_column : NULL;
    /* An embedding's token ids: read as train read them, and checked, since
     * an id out of range would index past its table. */
    const model_spec *sp = &l->m.plan->models[0];
    dopt.tokens = run_takes_tokens(sp);
    if (data_load(data, &dopt, &l->ds, &err)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    data_tokens scan;
    if (dopt.tokens)
        data_tokens_scan(l->ds, &scan);
    if (dopt.tokens && run_check_tokens(sp, l->ds, &scan, &err)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    l->all = data_view_all(l->ds);
    if (n_in && l->all.dim != n_in) {
        loaded_free(l);
        return cli_usage_error(cmd,
                               "%s has %lld values per sample, but the model of %s takes %lld; "
                               "give data of the shape it was trained on",
                               data, (long long)l->all.dim, weights, (long long)n_in);
    }
    l->all.shape = saved_model_input(&l->m, l->all.shape);
    char what[COHORT_PATH_MAX + 32];
    snprintf(what, sizeof what, "the model of %s", weights);
    if (data_align_classes(l->ds, l->m.names, l->m.n_names, what, &err)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    if (!l->ds->has_labels && !labels_optional) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s has no labels; %s needs them (cohort predict does not)",
                               data, cmd);
    }
    if (saved_model_build(&l->m, l->all.shape, &err)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
    /* Classes come from the weights: a label the last layer has no unit
     * for cannot be scored (mse on one output takes the label as a number). */
    int n_out = group_layout(l->m.g)->n_out;
    /* Real-valued targets must be as wide as the output. */
    if (l->ds->has_labels && group_layout(l->m.g)->metric == METRIC_ERRORS && n_out > 1 &&
        !(l->ds->t && l->ds->t_dim == n_out)) {
        long long has = l->ds->t ? (long long)l->ds->t_dim : 1;
        loaded_free(l);
        return cli_usage_error(cmd,
                               "%s has %lld target%s per sample, but the model of %s gives %d "
                               "values (a CSV's target columns: data.label_columns, stored in "
                               "the weights when the model was trained on them)",
                               data, has, has == 1 ? "" : "s", weights, n_out);
    }
    /* Target rows where the loss takes class labels, or rows of another
     * width, are refused as train refuses them: the model would be scored
     * on y, all zeros under target rows. */
    if (l->ds->has_labels && run_check_targets(sp, n_out, l->ds, &err)) {
        loaded_free(l);
        return cli_usage_error(cmd, "%s", err.message);
    }
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
    const char *weights = NULL, *data = NULL, *label_column = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort eval WEIGHTS --data SPEC [--label-column COL] [--json]\n\n"
                 "Loss and accuracy (regression: mae and rmse) of the model saved in WEIGHTS\n"
                 "(a .safetensors file that cohort wrote) on the dataset SPEC, e.g.\n"
                 "fashion-mnist:test or csv:file.csv. The model is rebuilt from what WEIGHTS\n"
                 "stores (layers, input shape); its classes are its last layer's units, so\n"
                 "the data may hold fewer of them. "
                 "Paths are relative to the current directory.\n\n"
                 "--label-column COL: a CSV's label column, by name or 0-based index, as\n"
                 "data.label_column; by default the one the model was trained on where its\n"
                 "plan named one, else the column named label, else the last.");
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--data", &v)) {
            data = v;
        } else if (cli_opt_value(argc, argv, &i, "--label-column", &v)) {
            label_column = v;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-') {
            static const char *const opts[] = {"--data", "--label-column", "--json", "--help",
                                               NULL};
            return cli_unknown_option("eval", argv[i], NULL, opts, 0);
        } else if (!weights) {
            weights = argv[i];
        } else {
            return cli_usage_error("eval", "'%s' is extra", argv[i]);
        }
    }
    if (!weights || !data)
        return cli_usage_error("eval", "needs WEIGHTS and --data SPEC (see cohort eval --help)");
    loaded l;
    int rc = load_model("eval", weights, data, label_column, 0, &l);
    if (rc)
        return rc;
    eval_metrics m;
    data_view all = l.all;
    if (group_evaluate(l.m.g, &all, &m, NULL) != COHORT_OK) {
        loaded_free(&l);
        fprintf(stderr, "cohort eval: out of host memory evaluating %s on %s\n", weights, data);
        return 1;
    }
    int reg = group_layout(l.m.g)->metric == METRIC_ERRORS;
    if (json) {
        /* Machine-read: the paths as JSON strings (a quote or backslash in
         * one is escaped), the numbers as results.json writes them (nine
         * significant digits, so a loss of 2.6e-05 keeps its digits; null
         * where not finite). */
        strbuf b;
        sb_init(&b);
        sb_puts(&b, "{\"weights\": ");
        sb_json_str(&b, weights);
        sb_puts(&b, ", \"data\": ");
        sb_json_str(&b, data);
        sb_printf(&b, ", \"samples\": %lld, \"loss\": ", (long long)all.n);
        sb_json_num(&b, m.loss);
        sb_puts(&b, reg ? ", \"mae\": " : ", \"accuracy\": ");
        sb_json_num(&b, reg ? m.mae : m.accuracy);
        if (reg) {
            sb_puts(&b, ", \"rmse\": ");
            sb_json_num(&b, m.rmse);
        }
        sb_puts(&b, "}\n");
        if (b.failed) {
            sb_free(&b);
            loaded_free(&l);
            return cli_usage_error("eval", "out of memory");
        }
        fwrite(b.data, 1, b.len, stdout);
        sb_free(&b);
    } else if (reg) {
        printf("%s on %s (%lld samples): loss %.4f mae %.4f rmse %.4f\n", weights, data,
               (long long)all.n, m.loss, m.mae, m.rmse);
    } else {
        printf("%s on %s (%lld samples): loss %.4f accuracy %.4f\n", weights, data,
               (long long)all.n, m.loss, m.accuracy);
    }
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
    for (int j = 0; j < n_out; j++) {
        sb_puts(b, ",");
        if (l->m.names && j < l->m.n_names)
            put_csv_field(b, l->m.names[j]); /* the class's name (text labels) */
        else
            sb_printf(b, "p%d", j);
    }
    sb_puts(b, "\n");
    for (int64_t i = 0; i < all->n; i++) {
        const float *row = p + i * n_out;
        int cls = output_class(group_layout(l->m.g), row);
        sb_printf(b, "%lld,", (long long)i);
        if (l->m.names && cls >= 0 && cls < l->m.n_names)
            put_csv_field(b, l->m.names[cls]);
        else
            sb_printf(b, "%d", cls);
        sb_puts(b, ",");
        if (l->ds->has_labels && l->m.names && all->y[i] < l->m.n_names)
            put_csv_field(b, l->m.names[all->y[i]]);
        else if (l->ds->has_labels && l->ds->n_classes)
            sb_printf(b, "%d", all->y[i]);
        for (int j = 0; j < n_out; j++)
            sb_printf(b, ",%.6g", (double)row[j]);
        sb_puts(b, "\n");
    }
}

/* Whether path is (or links to) a FIFO or a character device: written
 * through, as a shell's > would, where a regular file is replaced
 * atomically. */
static int stream_at(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode));
}

/* Write data to the FIFO or device at path (a reader of a FIFO is waited
 * for, as any writer waits). Never creates, truncates or replaces a file. */
static cohort_status write_through(const char *path, const char *data, size_t len,
                                   cohort_error *err)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
        close(fd);
        return cohort_fail(err, COHORT_ERR_IO, "%s: changed while it was opened", path);
    }
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return cohort_fail(err, COHORT_ERR_IO, "%s: write failed: %s", path, strerror(e));
        }
        data += w;
        len -= (size_t)w;
    }
    return close(fd) != 0 ? cohort_fail(err, COHORT_ERR_IO, "%s: close failed: %s", path,
                                        strerror(errno))
                          : COHORT_OK;
}

int cmd_predict(int argc, char **argv)
{
    const char *weights = NULL, *data = NULL, *out = NULL, *label_column = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort predict WEIGHTS --data SPEC [--out FILE] [--label-column COL]\n\n"
                 "Predictions of the model saved in WEIGHTS for every sample of SPEC, as CSV:\n"
                 "index,prediction,label,p0,p1,... (the class and each output unit's\n"
                 "probability, each column named for its class where the model was trained\n"
                 "on text labels; for regression, real-valued targets, index,y0,y1,...,t0,t1,...:\n"
                 "the predicted values and the targets).\n"
                 "Written to FILE (atomically: a new file replaces it; a link to one, a directory or\n"
                 "a socket is refused), through to a FIFO or device, or to standard\n"
                 "output (no --out, or --out -).\n\n"
                 "The data may have no labels: npy:X alone, or a CSV whose columns are only\n"
                 "the model's inputs (as many columns as it takes, none named label); the\n"
                 "label column of the output is then empty. A model trained on text labels\n"
                 "(cat, dog) gives its predictions and labels as those names.\n\n"
                 "--label-column COL: a CSV's label column, as for cohort eval (by default\n"
                 "the one the model was trained on where its plan named one).");
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--data", &v)) {
            data = v;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (cli_opt_value(argc, argv, &i, "--label-column", &v)) {
            label_column = v;
        } else if (argv[i][0] == '-') {
            static const char *const opts[] = {"--data", "--out", "--label-column", "--help",
                                               NULL};
            return cli_unknown_option("predict", argv[i], NULL, opts, 0);
        } else if (!weights) {
            weights = argv[i];
        } else {
            return cli_usage_error("predict", "'%s' is extra", argv[i]);
        }
    }
    if (!weights || !data)
        return cli_usage_error("predict", "needs WEIGHTS and --data SPEC (see --help)");
    loaded l;
    int rc = load_model("predict", weights, data, label_column, 1, &l);
    if (rc)
        return rc;
    data_view all = l.all;
    int n_out = group_layout(l.m.g)->n_out;
    float *p = malloc((size_t)all.n * (size_t)n_out * sizeof(float) + 1);
    if (!p) {
        loaded_free(&l);
        return cli_usage_error("predict", "out of memory");
    }
    group_predict(l.m.g, 0, &all, p);
    strbuf b;
    sb_init(&b);
    if (group_layout(l.m.g)->metric == METRIC_ERRORS)
        put_values(&b, &all, l.ds->has_labels, p, n_out);
    else
        put_classes(&b, &l, &all, p, n_out);
    free(p);
    cohort_error err;
    rc = 0;
    if (b.failed)
        rc = cli_usage_error("predict", "out of memory");
    else if (out && strcmp(out, "-") && !stream_at(out)) {
        if (file_write_atomic(out, b.data, b.len, &err))
            rc = cli_usage_error("predict", "%s", err.message);
    } else if (out && strcmp(out, "-")) {
        if (write_through(out, b.data, b.len, &err))
            rc = cli_usage_error("predict", "%s", err.message);
    } else if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
        rc = cli_usage_error("predict", "writing to standard output failed: %s", strerror(errno));
    }
    sb_free(&b);
    loaded_free(&l);
    return rc;
}
