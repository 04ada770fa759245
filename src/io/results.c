/* results.json read: see io/results.h. */
#include "io/results.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RESULTS_MAX_BYTES ((size_t)1 << 28)
#define RESULTS_PATH_MAX 4096

const char *const results_curve_key[N_CURVES] = {"loss",     "accuracy",     "mae",
                                                 "val_loss", "val_accuracy", "val_mae"};

/* A number from the tree; null and absent are NaN. */
static double jnum(const json_value *v)
{
    return json_num(v, NAN);
}

void results_model_read(results_model *m, const json_value *j, int index)
{
    memset(m, 0, sizeof *m);
    m->j = j;
    m->name = json_str(json_get(j, "name"), "?");
    m->status = json_str(json_get(j, "status"), "unknown");
    m->error = json_str(json_get(j, "error"), NULL);
    m->device = json_str(json_get(j, "device"), NULL);
    m->params = jnum(json_get(j, "params"));
    m->peak_bytes = jnum(json_get(j, "peak_bytes"));
    m->planned_bytes = jnum(json_get(j, "planned_bytes"));
    m->seconds = jnum(json_get(j, "seconds"));
    m->epochs_run = jnum(json_get(j, "epochs_run"));
    m->stopped_early = json_bool(json_get(j, "stopped_early"), 0);
    m->restored_epoch = jnum(json_get(j, "restored_epoch"));
    const json_value *best = json_get(j, "best");
    m->best_epoch = jnum(json_get(best, "epoch"));
    m->best_val_loss = jnum(json_get(best, "val_loss"));
    m->best_val_acc = jnum(json_get(best, "val_accuracy"));
    const json_value *test = json_get(j, "test");
    m->test_loss = jnum(json_get(test, "loss"));
    m->test_acc = jnum(json_get(test, "accuracy"));
    m->best_val_mae = jnum(json_get(best, "val_mae"));
    m->pruned_rung = jnum(json_get(json_get(j, "pruned_at"), "rung"));
    const json_value *lineage = json_get(j, "lineage");
    if (lineage && lineage->type == JSON_ARR && lineage->n > 0) {
        const json_value *last = json_at(lineage, lineage->n - 1);
        m->exploits = (int)lineage->n;
        m->exploit_epoch = jnum(json_get(last, "epoch"));
        m->exploit_from = json_str(json_get(last, "from"), "?");
    }
    m->test_mae = jnum(json_get(test, "mae"));
    m->reg = strcmp(json_str(json_get(j, "task"), ""), "regression") == 0;
    const json_value *h = json_get(j, "history");
    for (int c = 0; c < N_CURVES; c++) {
        const json_value *a = json_get(h, results_curve_key[c]);
        m->curve[c] = a && a->type == JSON_ARR ? a : NULL;
        if (m->curve[c] && (int)a->n > m->n_epochs)
            m->n_epochs = (int)a->n;
    }
    m->index = index;
}

/* "DIR/file" into path (n bytes), without DIR's trailing slashes. */
cohort_status results_dir_file(char *path, size_t n, const char *dir, const char *file,
                               cohort_error *err)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    size_t fl = strlen(file);
    if (dl + fl + 2 > n)
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: path too long", dir);
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, file, fl + 1);
    return COHORT_OK;
}

cohort_status results_load(const char *out_dir, json_value **out, cohort_error *err)
{
    *out = NULL;
    char path[RESULTS_PATH_MAX];
    char *text;
    size_t len;
    cohort_status st = results_dir_file(path, sizeof path, out_dir, "results.json", err);
    if (!st)
        st = file_read_all(path, RESULTS_MAX_BYTES, &text, &len, err);
    if (st)
        return st;
    char msg[256];
    json_value *root = json_parse(text, len, msg, sizeof msg);
    free(text);
    if (!root)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: %s", path, msg);
    const json_value *models = json_get(root, "models");
    if (root->type != JSON_OBJ) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: not a JSON object", path);
    } else if (!models || models->type != JSON_ARR) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: no \"models\" array", path);
    } else {
        for (size_t i = 0; i < models->n && !st; i++) {
            const json_value *m = &models->items[i];
            if (m->type != JSON_OBJ)
                st = cohort_fail(err, COHORT_ERR_INPUT, "%s: models[%zu] is not an object", path, i);
            else if (!json_str(json_get(m, "name"), NULL))
                st = cohort_fail(err, COHORT_ERR_INPUT, "%s: models[%zu] has no string \"name\"",
                                 path, i);
        }
    }
    if (st) {
        json_free(root);
        return st;
    }
    *out = root;
    return COHORT_OK;
}

