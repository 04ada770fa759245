/* The output directory: results.json, weights, per-model history. */
#include "io/io.h"
#include "run/run.h"
#include "layers/layer.h"
#include "util/test_hooks.h"
#include "util/util.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int run_restored_epoch(const model_entry *e)
{
    const early_stop_spec *es = &e->spec->early_stop;
    return e->res.state == MODEL_OK && es->enabled && es->restore_best && e->res.best_epoch > 0
               ? e->res.best_epoch
               : 0;
}

static void json_metric_array(strbuf *b, const train_result *r, size_t field)
{
    sb_puts(b, "[");
    for (int e = 0; e < r->epochs_run; e++) {
        if (e)
            sb_puts(b, ", ");
        sb_json_num(b, *(const double *)((const char *)&r->history[e] + field));
    }
    sb_puts(b, "]");
}

/* The history's columns of e (results.json and history/NAME.csv): every
 * metric of its task, seconds and lr. */
static const char *const *history_keys(const model_entry *e, int *n)
{
    static const char *const cls_keys[] = {"loss",         "accuracy", "val_loss",
                                           "val_accuracy", "seconds",  "lr"};
    static const char *const reg_keys[] = {"loss",     "mae",     "rmse", "val_loss",
                                           "val_mae",  "val_rmse", "seconds", "lr"};
    int reg = e->L.metric == METRIC_ERRORS;
    *n = reg ? 8 : 6;
    return reg ? reg_keys : cls_keys;
}

static void json_model(strbuf *b, const cohort_run *run, const model_entry *e)
{
    const train_result *r = &e->res;
    const char *dev = e->device >= 0 ? run->devices->dev[e->device].info.name : NULL;
    sb_puts(b, "    {\n      \"name\": ");
    sb_json_str(b, e->spec->name);
    sb_puts(b, ",\n      \"status\": ");
    sb_json_str(b, model_state_str(r->state));
    sb_puts(b, ",\n      \"error\": ");
    if (r->error[0])
        sb_json_str(b, r->error);
    else
        sb_puts(b, "null");
    sb_puts(b, ",\n      \"device\": ");
    if (dev)
        sb_json_str(b, dev);
    else
        sb_puts(b, "null");
    sb_printf(b, ",\n      \"plan_index\": %d, \"plan_models\": %d",
              e->plan_index, run->plan->n_models);
    sb_puts(b, ",\n      \"config\": ");
    sb_puts(b, e->spec->config_json ? e->spec->config_json : "null");
    sb_printf(b, ",\n      \"params\": %zu,\n      \"epochs_run\": %d,\n      \"stopped_early\": %s",
              e->L.n_params, r->epochs_run, r->stopped_early ? "true" : "false");
    if (r->state == MODEL_PRUNED)
        sb_printf(b, ",\n      \"pruned_at\": {\"epoch\": %d, \"rung\": %d}", r->epochs_run,
                  e->pruned_rung);
    if (run->plan->scheduler.kind == PRUNE_PBT) {
        sb_puts(b, ",\n      \"lineage\": ");
        run_pbt_lineage_json(b, run, e);
    }
    int restored = run_restored_epoch(e);
    if (restored)
        sb_printf(b, ",\n      \"restored_epoch\": %d", restored);
    else
        sb_puts(b, ",\n      \"restored_epoch\": null");
    int reg = e->L.metric == METRIC_ERRORS;
    sb_printf(b, ",\n      \"task\": \"%s\"", reg ? "regression" : "classification");
    int nk;
    const char *const *keys = history_keys(e, &nk);
    sb_puts(b, ",\n      \"history\": {");
    for (int i = 0; i < nk; i++) {
        sb_printf(b, "%s\"%s\": ", i ? ", " : "", keys[i]);
        json_metric_array(b, r, epoch_metric_find(keys[i])->off);
    }
    sb_puts(b, "},\n      \"best\": ");
    if (r->best_epoch > 0) {
        sb_printf(b, "{\"epoch\": %d", r->best_epoch);
        for (int i = 0; i < nk; i++) {
            if (strcmp(keys[i], "seconds") == 0 || strcmp(keys[i], "lr") == 0)
                continue;
            sb_printf(b, ", \"%s\": ", keys[i]);
            sb_json_num(b, epoch_metric_get(&r->best, epoch_metric_find(keys[i])));
        }
        sb_puts(b, "}");
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ",\n      \"test\": ");
    if (run->has_test && isfinite(e->test_loss)) {
        sb_puts(b, "{\"loss\": ");
        sb_json_num(b, e->test_loss);
        if (reg) {
            sb_puts(b, ", \"mae\": ");
            sb_json_num(b, e->test_mae);
            sb_puts(b, ", \"rmse\": ");
            sb_json_num(b, e->test_rmse);
        } else {
            sb_puts(b, ", \"accuracy\": ");
            sb_json_num(b, e->test_accuracy);
        }
        sb_puts(b, "}");
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ",\n      \"confusion\": ");
    if (e->confusion) {
        int C = run->n_classes;
        sb_puts(b, "[");
        for (int i = 0; i < C; i++) {
            sb_puts(b, i ? ", [" : "[");
            for (int j = 0; j < C; j++)
                sb_printf(b, "%s%lld", j ? ", " : "", (long long)e->confusion[i * C + j]);
            sb_puts(b, "]");
        }
        sb_puts(b, "]");
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ",\n      \"seconds\": ");
    sb_json_num(b, r->seconds);
    sb_printf(b, ",\n      \"planned_bytes\": %llu,\n      \"peak_bytes\": ",
              (unsigned long long)e->planned_bytes);
    if (e->peak_bytes == RUN_PEAK_UNKNOWN)
        sb_puts(b, "null");
    else
        sb_printf(b, "%llu", (unsigned long long)e->peak_bytes);
    sb_puts(b, ",\n      \"weights\": ");
    if (e->weights[0])
        sb_json_str(b, e->weights);
    else
        sb_puts(b, "null");
    sb_puts(b, ",\n      \"best_weights\": ");
    if (e->best_weights[0])
        sb_json_str(b, e->best_weights);
    else
        sb_puts(b, "null");
    sb_puts(b, "\n    }");
}

/* The training set's text labels as a JSON array of strings (class i is
 * item i), appended to b; "null" when its labels are numbers. */
static void put_class_names(strbuf *b, const cohort_run *run)
{
    const cohort_dataset *ds = run->train_ds;
    if (!ds || !ds->class_names) {
        sb_puts(b, "null");
        return;
    }
    sb_puts(b, "[");
    for (int32_t i = 0; i < ds->n_classes; i++) {
        if (i)
            sb_puts(b, ", ");
        sb_json_str(b, ds->class_names[i]);
    }
    sb_puts(b, "]");
}

void run_data_json(strbuf *b, const cohort_run *run)
{
    sb_puts(b, "{\"train\": ");
    sb_json_str(b, run->plan->data.train);
    sb_printf(b, ", \"train_samples\": %lld, \"validation_samples\": %lld, \"test\": ",
              (long long)run->train.n, (long long)run->val.n);
    if (run->has_test)
        sb_json_str(b, run->plan->data.test);
    else
        sb_puts(b, "null");
    sb_printf(b, ", \"test_samples\": %lld, \"features\": %d, \"classes\": %d",
              (long long)run->test.n, run->n_in, run->n_classes);
    sb_puts(b, ", \"class_names\": ");
    put_class_names(b, run);
    sb_puts(b, "}");
}

cohort_status run_write_results(cohort_run *run, cohort_error *err)
{
    if (!run->out_dir[0])
        return COHORT_OK;
    /* results.json names the finished models' files as a record does: the
     * records (and the folders they name) go to disk first. */
    cohort_status fst = run_flush_records(run, 1, err);
    if (fst)
        return fst;
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\n  \"cohort_version\": \"" COHORT_VERSION "\",\n  \"plan\": ");
    sb_json_str(&b, run->plan->name);
    sb_puts(&b, ",\n  \"strategy\": ");
    sb_json_str(&b, cohort_strategy_str(run->strategy));
    sb_puts(&b, ",\n  \"data\": ");
    run_data_json(&b, run);
    sb_puts(&b, ",\n");
    sb_puts(&b, "  \"models\": [\n");
    for (int i = 0; i < run->n; i++) {
        if (i)
            sb_puts(&b, ",\n");
        json_model(&b, run, &run->m[i]);
    }
    sb_puts(&b, "\n  ]\n}\n");
    if (b.failed) {
        sb_free(&b);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory writing results.json");
    }
    char path[COHORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.json", run->out_dir);
    cohort_status st = file_write_atomic(path, b.data, b.len, err);
    sb_free(&b);
    return st;
}

double run_write_every(void)
{
    const char *v = getenv("COHORT_CHECKPOINT_EVERY");
    char *end;
    double s = v && *v ? strtod(v, &end) : WRITE_EVERY;
    return v && *v && (*end || !(s >= 0) || s > 1e9) ? WRITE_EVERY : s;
}

/* Model e's record as JSON text (malloc'd), or NULL when out of memory. */
static char *record_text(const cohort_run *run, const model_entry *e, size_t *len)
{
    strbuf b;
    sb_init(&b);
    json_model(&b, run, e);
    sb_puts(&b, "\n");
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

static cohort_status write_record_text(cohort_run *run, const model_entry *e, const char *text,
                                       int sync, cohort_error *err)
{
    char path[2 * COHORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/records/%s.json", run->out_dir, e->spec->name);
    file_part part = {text, strlen(text)};
    cohort_status st = file_write_atomic_ex(path, &part, 1, sync, err);
    /* Tests kill a run at an exact point of a phase (t_pbt.sh). */
    if (!st)
        test_hook_record_written();
    return st;
}

/* fsync of DIR/sub. */
static void sync_sub(const cohort_run *run, const char *sub)
{
    char dir[COHORT_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/%s", run->out_dir, sub);
    file_sync_dir(dir);
}

cohort_status run_flush_records(cohort_run *run, int force, cohort_error *err)
{
    if (!run->out_dir[0] || run->n_pending == 0)
        return COHORT_OK;
    double now = now_seconds();
    if (!force && run->write_every > 0 && now < run->next_flush)
        return COHORT_OK;
    /* The weights and histories the records name were fsynced before their
     * renames; their names become durable here, before any record can. */
    sync_sub(run, "models");
    sync_sub(run, "history");
    cohort_status st = COHORT_OK;
    for (int i = 0; i < run->n_pending; i++) {
        model_entry *e = &run->m[run->pending[i]];
        /* Not fsynced one by one: a record the machine's crash left
         * unreadable is no record (--resume trains that model again), and
         * one readable names files that are on disk. */
        if (!st && e->pending_record)
            st = write_record_text(run, e, e->pending_record,
                                   run->write_every > 0 ? 0 : FILE_SYNC_DATA, err);
        free(e->pending_record);
        e->pending_record = NULL;
    }
    run->n_pending = 0;
    sync_sub(run, "records");
    double took = now_seconds() - now;
    run->next_flush = now + (10.0 * took > run->write_every ? 10.0 * took : run->write_every);
    return st;
}

cohort_status run_queue_record(cohort_run *run, model_entry *e, cohort_error *err)
{
    if (!run->out_dir[0])
        return COHORT_OK;
    size_t len;
    char *text = record_text(run, e, &len);
    if (!text)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory writing a record");
    if (!run->pending && !(run->pending = malloc((size_t)run->n * sizeof *run->pending))) {
        free(text);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory writing a record");
    }
    if (!e->pending_record)
        run->pending[run->n_pending++] = e->index;
    free(e->pending_record);
    e->pending_record = text;
    return run_flush_records(run, 0, err);
}

cohort_status run_write_record(cohort_run *run, const model_entry *e, cohort_error *err)
{
    if (!run->out_dir[0])
        return COHORT_OK;
    cohort_status st = run_flush_records(run, 1, err);
    if (st)
        return st;
    size_t len;
    char *text = record_text(run, e, &len);
    if (!text)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory writing a record");
    /* The files it names, written without their folders' sync, first. */
    sync_sub(run, "models");
    sync_sub(run, "history");
    st = write_record_text(run, e, text, FILE_SYNC_DATA | FILE_SYNC_NAME, err);
    free(text);
    return st;
}

cohort_status run_tick_results(cohort_run *run, cohort_error *err)
{
    double now = now_seconds();
    if (!run->out_dir[0] || now < run->next_results)
        return COHORT_OK;
    cohort_status st = run_write_results(run, err);
    double took = now_seconds() - now;
    run->next_results = now + (10.0 * took > RESULTS_EVERY ? 10.0 * took : RESULTS_EVERY);
    return st;
}

cohort_status run_write_weights(cohort_run *run, const model_entry *e, const float *params,
                                int best, int sync, char *rel, cohort_error *err)
{
    const model_layout *L = &e->L;
    st_tensor t[LAYER_TENSORS_MAX * COHORT_MAX_LAYERS];
    int n = 0;
    /* Each layer's tensors in the file's layout: written from params where
     * they lie there as they are, else converted into one copy. */
    size_t n_convert = 0;
    for (int i = 0; i < L->n_layers; i++) {
        const layer_plan *lp = &L->layers[i];
        const layer_ops *ops = lp->kind;
        layer_tensor lt[LAYER_TENSORS_MAX];
        int m = ops->tensors && ops->convert ? ops->tensors(lp, lt) : 0;
        for (int j = 0; j < m; j++)
            n_convert += lt[j].n;
    }
    float *file = malloc((n_convert ? n_convert : 1) * sizeof(float));
    if (!file)
        return cohort_fail(err, COHORT_ERR_NOMEM, "model '%s': out of memory writing its weights",
                           e->spec->name);
    size_t at = 0;
    for (int i = 0; i < L->n_layers; i++) {
        const layer_plan *lp = &L->layers[i];
        const layer_ops *ops = lp->kind;
        layer_tensor lt[LAYER_TENSORS_MAX];
        int m = ops->tensors ? ops->tensors(lp, lt) : 0;
        for (int j = 0; j < m; j++) {
            st_tensor *w = &t[n++];
            memset(w, 0, sizeof *w);
            char prefix[32];
            layer_plan_name(lp, prefix, sizeof prefix);
            snprintf(w->name, sizeof w->name, "%s.%s", prefix, lt[j].suffix);
            w->ndim = lt[j].ndim;
            for (int d = 0; d < lt[j].ndim; d++)
                w->shape[d] = lt[j].shape[d];
            if (ops->convert) {
                ops->convert(lp, j, (float *)params, file + at, 1);
                w->data = file + at;
                at += lt[j].n;
            } else {
                w->data = (float *)(params + lt[j].off); /* the writer only reads it */
            }
        }
    }
    char shape[64], classes[32];
    shape_format(L->in_shape, shape, sizeof shape);
    snprintf(classes, sizeof classes, "%d", run->n_classes);
    char n_in[32];
    snprintf(n_in, sizeof n_in, "%d", L->n_in);
    strbuf names;
    sb_init(&names);
    put_class_names(&names, run);
    const char *meta[16] = {"format", "cohort", "cohort_version", COHORT_VERSION,
                            "spec", e->spec->config_json ? e->spec->config_json : "{}",
                            "inputs", n_in, "input_shape", shape, "classes", classes};
    int n_meta = 6;
    /* class_names only for text labels, label_columns only for CSV targets:
     * other tools' files need not change. */
    if (run->train_ds && run->train_ds->class_names) {
        meta[2 * n_meta] = "class_names";
        meta[2 * n_meta++ + 1] = names.data ? names.data : "null";
    }
    if (run->plan->data.label_columns[0]) {
        meta[2 * n_meta] = "label_columns";
        meta[2 * n_meta++ + 1] = run->plan->data.label_columns;
    }
    /* The label column, where the plan named one: eval and predict read
     * the same column of a CSV by default. */
    if (run->plan->data.label_column[0]) {
        meta[2 * n_meta] = "label_column";
        meta[2 * n_meta++ + 1] = run->plan->data.label_column;
    }
    snprintf(rel, COHORT_PATH_MAX, "models/%s%s.safetensors", e->spec->name, best ? ".best" : "");
    char path[2 * COHORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", run->out_dir, rel);
    cohort_status st = names.failed ? cohort_fail(err, COHORT_ERR_NOMEM, "out of memory")
                                    : st_write_ex(path, t, n, meta, n_meta, sync, err);
    sb_free(&names);
    free(file);
    if (st)
        rel[0] = 0;
    return st;
}

cohort_status run_write_history(cohort_run *run, model_entry *e, int sync, cohort_error *err)
{
    strbuf b;
    sb_init(&b);
    int nk;
    const char *const *keys = history_keys(e, &nk);
    sb_puts(&b, "epoch");
    for (int k = 0; k < nk; k++)
        sb_printf(&b, ",%s", keys[k]);
    sb_puts(&b, "\n");
    /* Validation columns are empty in epochs without validation; lr where unknown.
     * Metrics have results.json's nine significant digits: "%.6f" had cut a
     * loss of 2.6e-05 to 0.000026, two digits. */
    for (int i = 0; i < e->res.epochs_run; i++) {
        const epoch_metrics *m = &e->res.history[i];
        sb_printf(&b, "%d", i + 1);
        for (int k = 0; k < nk; k++) {
            double v = epoch_metric_get(m, epoch_metric_find(keys[k]));
            if (!strcmp(keys[k], "seconds"))
                sb_printf(&b, ",%.3f", v);
            else if (!strcmp(keys[k], "lr") && isfinite(v)) {
                /* The float32 rate, in the fewest digits that give it back
                 * (0.0025, where "%.8g" wrote 0.0024999999). */
                sb_puts(&b, ",");
                sb_json_float(&b, (float)v);
            }
            else if (!strcmp(keys[k], "lr"))
                sb_puts(&b, ",");
            else if (!strncmp(keys[k], "val_", 4) && !isfinite(m->val_loss))
                sb_puts(&b, ",");
            else
                sb_printf(&b, ",%.9g", v);
        }
        sb_puts(&b, "\n");
    }
    char path[2 * COHORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/history/%s.csv", run->out_dir, e->spec->name);
    cohort_status st = b.failed ? cohort_fail(err, COHORT_ERR_NOMEM, "out of memory")
                                : file_write_atomic_ex(path, &(file_part){b.data, b.len}, 1, sync, err);
    sb_free(&b);
    return st;
}

/* ---- the memory plan as JSON (cohort plan --json, cohort_run_plan_json) ---- */

/* Every member of g draws the same shuffle order (shared_order). */
int run_group_shares_order(const cohort_run *run, const run_group_info *g)
{
    for (int k = 1; k < g->n; k++)
        if (!model_same_order(run->m[g->idx[0]].spec, run->m[g->idx[k]].spec))
            return 0;
    return g->n > 1;
}

uint64_t run_group_share(uint64_t bytes, int n)
{
    return n > 1 ? (bytes + (uint64_t)n - 1) / (uint64_t)n : bytes;
}

static int group_has(const run_group_info *g, int i)
{
    for (int k = 0; k < g->n; k++)
        if (g->idx[k] == i)
            return 1;
    return 0;
}

uint64_t run_model_planned(const cohort_run *run, const run_group_info *g, int n_groups, int i)
{
    int at = run->m[i].group;
    if (at < 0 || at >= n_groups || !group_has(&g[at], i))
        for (at = 0; at < n_groups && !group_has(&g[at], i); at++)
            ;
    return at < n_groups ? run_group_share(g[at].bytes, g[at].n) : run->m[i].planned_bytes;
}

char *run_plan_json(const cohort_run *run, const run_group_info *g, int n_groups)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\n  \"plan\": ");
    sb_json_str(&b, run->plan->name);
    sb_puts(&b, ",\n  \"strategy\": ");
    sb_json_str(&b, cohort_strategy_str(run->strategy));
    sb_printf(&b, ",\n  \"data\": {\"train_samples\": %lld, \"validation_samples\": %lld, "
                  "\"test_samples\": %lld, \"features\": %d, \"classes\": %d},\n",
              (long long)run->train.n, (long long)run->val.n, (long long)run->test.n, run->n_in,
              run->n_classes);
    sb_puts(&b, "  \"models\": [\n");
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        sb_puts(&b, i ? ",\n    {\"name\": " : "    {\"name\": ");
        sb_json_str(&b, e->spec->name);
        sb_printf(&b, ", \"params\": %zu, \"planned_bytes\": %llu, \"bytes\": {", e->L.n_params,
                  (unsigned long long)run_model_planned(run, g, n_groups, i));
        for (int j = 0; j < BUF_COUNT; j++)
            sb_printf(&b, "%s\"%s\": %zu", j ? ", " : "", model_buf_name(j), e->L.buf_bytes[j]);
        sb_puts(&b, "}, \"device\": ");
        if (e->device >= 0)
            sb_json_str(&b, run->devices->dev[e->device].info.name);
        else
            sb_puts(&b, "null");
        sb_printf(&b, ", \"fits\": %s, \"error\": ", e->res.error[0] ? "false" : "true");
        if (e->res.error[0])
            sb_json_str(&b, e->res.error);
        else
            sb_puts(&b, "null");
        sb_puts(&b, ", \"layers\": [");
        for (int l = 0; l < e->L.n_layers; l++) {
            const layer_plan *lp = &e->L.layers[l];
            size_t rows = (size_t)e->L.B * sizeof(float);
            sb_printf(&b, "%s{\"kind\": \"%s\", \"output_shape\": ", l ? ", " : "",
                      lp->kind->name);
            if (lp->out.rank == 3)
                sb_printf(&b, "[%d, %d, %d]", lp->out.h, lp->out.w, lp->out.c);
            else
                sb_printf(&b, "[%d]", lp->out.c);
            sb_printf(&b, ", \"params\": %zu, \"state\": %zu, \"saved_bytes\": %zu, "
                          "\"workspace_bytes\": %zu}",
                      lp->n_params, lp->n_state, lp->n_saved * rows, lp->n_work * rows);
        }
        sb_printf(&b, "], \"flops_per_epoch\": %.0f, \"config\": %s}",
                  model_train_flops(&e->L, run->train.n),
                  e->spec->config_json ? e->spec->config_json : "null");
    }
    sb_puts(&b, "\n  ],\n  \"devices\": [\n");
    int first = 1;
    for (int d = 0; d < run->devices->n; d++) {
        const cohort_device *dev = &run->devices->dev[d];
        if (!dev->mem_pool)
            continue;
        uint64_t planned = 0;
        for (int i = 0; i < run->n; i++)
            if (run->m[i].device == d && !run->m[i].res.error[0])
                planned += run_model_planned(run, g, n_groups, i);
        sb_puts(&b, first ? "    {\"name\": " : ",\n    {\"name\": ");
        first = 0;
        /* Beside the models: each job's context and, under processes on a
         * GPU, its worker's (run_job_room). */
        uint64_t beside = 0;
        for (int i = 0; i < n_groups; i++)
            if (g[i].device == d && g[i].n > 0)
                beside += run_job_room(run, d, g[i].bytes) - g[i].bytes;
        sb_json_str(&b, dev->info.name);
        sb_printf(&b, ", \"limit_bytes\": %llu, \"planned_bytes\": %llu, \"context_bytes\": %llu}",
                  (unsigned long long)mem_pool_limit(dev->mem_pool), (unsigned long long)planned,
                  (unsigned long long)beside);
    }
    sb_puts(&b, "\n  ],\n  \"scheduler\": ");
    const scheduler_spec *sc = &run->plan->scheduler;
    if (sc->kind == PRUNE_NONE) {
        sb_puts(&b, "null");
    } else if (sc->kind == PRUNE_PBT) {
        int *at = NULL, n_at = run_pbt_intervals(run, &at);
        sb_printf(&b, "{\"name\": \"pbt\", \"metric\": \"%s\", \"mode\": \"%s\", "
                      "\"perturbation_interval\": %d, \"quantile_fraction\": %g, "
                      "\"resample_probability\": %g, \"seed\": %llu, \"population\": %d, "
                      "\"intervals\": [",
                  sc->metric, sc->maximize ? "max" : "min", sc->interval, sc->quantile,
                  sc->resample, (unsigned long long)sc->seed, run->n);
        for (int k = 0; k < n_at; k++)
            sb_printf(&b, "%s%d", k ? ", " : "", at[k]);
        free(at);
        sb_puts(&b, "], \"hyperparam_mutations\": [");
        for (int k = 0; k < sc->n_mut; k++) {
            sb_puts(&b, k ? ", " : "");
            sb_json_str(&b, sc->mut[k].path);
        }
        long long epochs, full;
        run_scheduler_budget(run, &epochs, &full);
        sb_printf(&b, "], \"max_epochs\": %lld, \"full_epochs\": %lld}", epochs, full);
    } else {
        long long epochs, full;
        run_scheduler_budget(run, &epochs, &full);
        sb_printf(&b, "{\"name\": \"%s\", \"metric\": \"%s\", \"mode\": \"%s\", "
                      "\"grace_period\": %d, \"reduction_factor\": %d, \"max_epochs\": %lld, "
                      "\"full_epochs\": %lld}",
                  prune_kind_name(sc->kind), sc->metric,
                  sc->maximize ? "max" : "min", sc->grace, sc->eta, epochs, full);
    }
    sb_puts(&b, ",\n  \"groups\": [");
    for (int i = 0; i < n_groups; i++) {
        sb_puts(&b, i ? ",\n    {\"device\": " : "\n    {\"device\": ");
        sb_json_str(&b, run->devices->dev[g[i].device].info.name);
        sb_puts(&b, ", \"models\": [");
        for (int k = 0; k < g[i].n; k++) {
            sb_puts(&b, k ? ", " : "");
            sb_json_str(&b, run->m[g[i].idx[k]].spec->name);
        }
        sb_printf(&b, "], \"planned_bytes\": %llu, \"shared_order\": %s}",
                  (unsigned long long)g[i].bytes, run_group_shares_order(run, &g[i]) ? "true" : "false");
    }
    sb_puts(&b, "\n  ]\n}\n");
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    return b.data;
}

char *cohort_run_plan_json(cohort_run *run, cohort_error *err)
{
    run_group_info *groups = NULL;
    int n_groups = 0;
    if (!run) {
        cohort_fail(err, COHORT_ERR_USAGE, "cohort_run_plan_json: run is NULL");
        return NULL;
    }
    if (run_plan_groups(run, &groups, &n_groups, err))
        return NULL;
    char *json = run_plan_json(run, groups, n_groups);
    free(groups);
    if (!json)
        cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    return json;
}

