/* cohort_run: datasets, memory plans, placement and the sequential strategy. */
#include "run/run.h"
#include "util/util.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cohort_run_options_init(cohort_run_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->strategy = COHORT_STRATEGY_AUTO;
}

static cohort_status load_data(cohort_run *run, cohort_error *err)
{
    const data_spec *d = &run->plan->data;
    data_options dopt = {d->label_column[0] ? d->label_column : NULL};
    cohort_status st = data_load(d->train, &dopt, &run->train_ds, err);
    if (st)
        return st;
    if (d->test[0] && (st = data_load(d->test, &dopt, &run->test_ds, err)))
        return st;
    if (d->validation[0] && (st = data_load(d->validation, &dopt, &run->val_ds, err)))
        return st;
    if (run->val_ds) {
        run->train = data_view_all(run->train_ds);
        run->val = data_view_all(run->val_ds);
    } else {
        data_split(run->train_ds, d->validation_split, &run->train, &run->val);
    }
    run->has_val = run->val.n > 0;
    if (run->test_ds) {
        run->test = data_view_all(run->test_ds);
        run->has_test = run->test.n > 0;
    }
    if (run->train.n == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: no training samples left after the "
                           "validation split of %g", d->train, d->validation_split);
    run->n_in = (int)run->train_ds->dim;
    run->n_classes = run->train_ds->n_classes;
    const cohort_dataset *other[2] = {run->test_ds, run->val_ds};
    for (int i = 0; i < 2; i++) {
        if (!other[i])
            continue;
        if (other[i]->dim != run->train_ds->dim)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has %lld features per sample but %s has %lld", other[i]->source,
                               (long long)other[i]->dim, d->train, (long long)run->train_ds->dim);
        if (other[i]->n_classes > run->n_classes)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has label %d, but the training data %s has only %d classes",
                               other[i]->source, other[i]->n_classes - 1, d->train, run->n_classes);
    }
    return COHORT_OK;
}

/* Pick the device of each model: its pin, or the first device it fits on. */
static cohort_status place_models(cohort_run *run, cohort_error *err)
{
    int usable[64];
    int n_usable = devices_usable(run->devices, usable, 64);
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        char need[32], lim[32];
        if (e->spec->device[0]) {
            cohort_device *d = devices_find(run->devices, e->spec->device);
            if (!d) {
                char names[512] = "";
                for (int j = 0; j < n_usable; j++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                             j ? ", " : "", run->devices->dev[usable[j]].info.name);
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "%s:%d: model '%s' is pinned to device '%s', which does not "
                                   "exist here (devices: %s)%s%s",
                                   run->plan->path, e->spec->line, e->spec->name, e->spec->device,
                                   names, strncmp(e->spec->device, "gpu", 3) == 0 ? "; " : "",
                                   strncmp(e->spec->device, "gpu", 3) == 0 ? run->devices->gpu_note
                                                                           : "");
            }
            if (!d->pool)
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "%s:%d: model '%s' is pinned to %s, which is split; pin it to "
                                   "one of its parts (%s/0, ...)",
                                   run->plan->path, e->spec->line, e->spec->name, d->info.name,
                                   d->info.name);
            e->device = (int)(d - run->devices->dev);
        } else {
            e->device = usable[0];
            for (int j = 0; j < n_usable; j++)
                if (pool_limit(run->devices->dev[usable[j]].pool) >= e->planned_bytes) {
                    e->device = usable[j];
                    break;
                }
        }
        cohort_device *d = &run->devices->dev[e->device];
        uint64_t limit = pool_limit(d->pool);
        if (e->planned_bytes > limit) {
            e->res.state = MODEL_FAILED;
            e->done = 1;
            double per_row = (double)e->planned_bytes / (double)e->L.B;
            long fit_batch = (long)((double)limit / per_row);
            snprintf(e->res.error, sizeof e->res.error,
                     "model '%s' needs %s but %s has a limit of %s; give it a larger split or a "
                     "smaller batch_size (about %ld would fit)",
                     e->spec->name, format_bytes(e->planned_bytes, need, sizeof need),
                     d->info.name, format_bytes(limit, lim, sizeof lim), fit_batch > 0 ? fit_batch : 0);
        }
    }
    return COHORT_OK;
}

cohort_status cohort_run_create(const cohort_plan *plan, const cohort_run_options *opt,
                                cohort_run **out, cohort_error *err)
{
    *out = NULL;
    cohort_run *run = calloc(1, sizeof *run);
    if (!run)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    run->plan = plan;
    cohort_run_options_init(&run->opt);
    if (opt)
        run->opt = *opt;
    pthread_mutex_init(&run->lock, NULL);
    run->strategy = run->opt.strategy != COHORT_STRATEGY_AUTO ? run->opt.strategy : plan->strategy;
    if (run->strategy == COHORT_STRATEGY_AUTO) {
        run->strategy = COHORT_STRATEGY_SEQUENTIAL;
        str_copy(run->strategy_why, sizeof run->strategy_why,
                 "auto: sequential, every core on one model at a time");
    }
    if (run->opt.out_dir)
        str_copy(run->out_dir, sizeof run->out_dir, run->opt.out_dir);
    cohort_status st = load_data(run, err);
    if (!st)
        st = devices_discover(&run->devices, err);
    if (!st) {
        run->n = plan->n_models;
        run->m = calloc((size_t)run->n, sizeof *run->m);
        if (!run->m)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; !st && i < run->n; i++) {
        model_entry *e = &run->m[i];
        e->spec = &plan->models[i];
        e->index = i;
        e->device = -1;
        e->test_loss = e->test_accuracy = NAN;
        e->res.state = MODEL_PENDING;
        st = model_layout_make(e->spec, run->n_in, run->n_classes, 1, &e->L, err);
        if (st)
            cohort_fail_prefix(err, "%s:%d", plan->path, e->spec->line);
        e->planned_bytes = e->L.total_bytes;
    }
    if (!st)
        st = place_models(run, err);
    if (!st && run->out_dir[0]) {
        char sub[COHORT_PATH_MAX + 16];
        st = dir_make(run->out_dir, err);
        snprintf(sub, sizeof sub, "%s/models", run->out_dir);
        if (!st)
            st = dir_make(sub, err);
        snprintf(sub, sizeof sub, "%s/history", run->out_dir);
        if (!st)
            st = dir_make(sub, err);
    }
    if (st) {
        cohort_run_free(run);
        return st;
    }
    *out = run;
    return COHORT_OK;
}

void cohort_run_free(cohort_run *run)
{
    if (!run)
        return;
    for (int i = 0; run->m && i < run->n; i++) {
        free(run->m[i].res.history);
        free(run->m[i].confusion);
    }
    free(run->m);
    devices_free(run->devices);
    data_free(run->train_ds);
    data_free(run->test_ds);
    data_free(run->val_ds);
    pthread_mutex_destroy(&run->lock);
    free(run);
}

int cohort_run_model_count(const cohort_run *run) { return run->n; }

void cohort_run_request_stop(cohort_run *run) { run->stop = 1; }

cohort_status cohort_run_model_result(const cohort_run *run, int i, cohort_model_result *out)
{
    if (i < 0 || i >= run->n)
        return COHORT_ERR_USAGE;
    const model_entry *e = &run->m[i];
    memset(out, 0, sizeof *out);
    out->name = e->spec->name;
    out->status = model_state_str(e->res.state);
    out->error = e->res.error;
    out->device = e->device >= 0 ? run->devices->dev[e->device].info.name : "";
    out->epochs_run = e->res.epochs_run;
    out->best_epoch = e->res.best_epoch;
    out->best_val_loss = e->res.best_epoch ? e->res.best.val_loss : NAN;
    out->best_val_accuracy = e->res.best_epoch ? e->res.best.val_accuracy : NAN;
    out->final_loss = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].loss : NAN;
    out->final_accuracy = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].accuracy : NAN;
    out->test_loss = e->test_loss;
    out->test_accuracy = e->test_accuracy;
    out->seconds = e->res.seconds;
    out->params = e->L.n_params;
    out->planned_bytes = e->planned_bytes;
    out->peak_bytes = e->peak_bytes;
    return COHORT_OK;
}

/* ---- training one model ------------------------------------------------- */

typedef struct fit_ctx {
    cohort_run *run;
    model_entry *e;
    train_group *g;
    float *host; /* [P] scratch for saving weights */
} fit_ctx;

static void emit(cohort_run *run, cohort_event *ev)
{
    if (!run->opt.on_event)
        return;
    pthread_mutex_lock(&run->lock);
    run->opt.on_event(ev, run->opt.user);
    pthread_mutex_unlock(&run->lock);
}

static void event_init(cohort_event *ev, cohort_event_kind kind, const cohort_run *run,
                       const model_entry *e)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->model = e->index;
    ev->name = e->spec->name;
    ev->device = e->device >= 0 ? run->devices->dev[e->device].info.name : "";
    ev->epochs = e->spec->epochs;
    ev->loss = ev->accuracy = ev->val_loss = ev->val_accuracy = NAN;
}

static void on_step(void *user, int k, int epoch, int64_t step, int64_t steps, double loss,
                    double accuracy)
{
    fit_ctx *f = user;
    (void)k;
    cohort_event ev;
    event_init(&ev, COHORT_EVENT_STEP, f->run, f->e);
    ev.epoch = epoch;
    ev.step = step;
    ev.steps = steps;
    ev.loss = loss;
    ev.accuracy = accuracy;
    emit(f->run, &ev);
}

static int on_epoch(void *user, int k, int epoch, const epoch_metrics *m, int is_best,
                    cohort_error *err)
{
    fit_ctx *f = user;
    cohort_run *run = f->run;
    model_entry *e = f->e;
    (void)k;
    cohort_event ev;
    event_init(&ev, COHORT_EVENT_EPOCH_END, run, e);
    ev.epoch = epoch;
    ev.loss = m->loss;
    ev.accuracy = m->accuracy;
    ev.val_loss = m->val_loss;
    ev.val_accuracy = m->val_accuracy;
    ev.seconds = now_seconds();
    emit(run, &ev);
    if (!run->out_dir[0])
        return 0;
    cohort_status st = COHORT_OK;
    if (is_best) {
        group_get_params(f->g, 0, f->host);
        st = run_write_weights(run, e, f->host, 1, err);
    }
    if (!st)
        st = run_write_history(run, e, err);
    if (!st) {
        pthread_mutex_lock(&run->lock);
        st = run_write_results(run, err);
        pthread_mutex_unlock(&run->lock);
    }
    return st != COHORT_OK;
}

/* The confusion matrix of model e on the test set. Without memory for it,
 * results.json simply has none. */
static void test_confusion(cohort_run *run, model_entry *e, train_group *g)
{
    int n_out = group_layout(g)->n_out, C = run->n_classes;
    float *p = malloc((size_t)run->test.n * (size_t)n_out * sizeof(float));
    free(e->confusion);
    e->confusion = calloc((size_t)C * (size_t)C, sizeof(int64_t));
    if (!p || !e->confusion) {
        free(p);
        free(e->confusion);
        e->confusion = NULL;
        return;
    }
    group_predict(g, 0, &run->test, p);
    for (int64_t i = 0; i < run->test.n; i++) {
        const float *row = p + i * n_out;
        int arg = 0;
        for (int j = 1; j < n_out; j++)
            if (row[j] > row[arg])
                arg = j;
        if (n_out == 1)
            arg = (int)lrintf(row[0]);
        if (arg >= 0 && arg < C)
            e->confusion[run->test.y[i] * C + arg]++;
    }
    free(p);
}

/* Train model e alone on its device, evaluate it, save its outputs, and give
 * every byte back to the pool. Failures stay with the model. */
static void train_one(cohort_run *run, model_entry *e, int threads)
{
    cohort_device *dev = &run->devices->dev[e->device];
    cohort_event ev;
    cohort_error err;
    err.message[0] = 0;
    event_init(&ev, COHORT_EVENT_MODEL_START, run, e);
    emit(run, &ev);

    train_group *g = NULL;
    const model_spec *spec = e->spec;
    fit_ctx f = {run, e, NULL, NULL};
    cohort_status st = group_create(&spec, 1, run->n_in, run->n_classes, dev, threads, &g, &err);
    if (!st) {
        f.g = g;
        f.host = malloc(group_layout(g)->n_params * sizeof(float));
        if (!f.host)
            st = cohort_fail(&err, COHORT_ERR_NOMEM, "out of host memory");
    }
    if (!st) {
        train_callbacks cb = {on_step, on_epoch, &f, &run->stop};
        cohort_status fst = group_fit(g, &run->train, run->has_val ? &run->val : NULL, &cb,
                                      &e->res, &err);
        (void)fst;
        if (e->res.state == MODEL_OK && run->has_test) {
            double l, a;
            group_evaluate(g, &run->test, &l, &a);
            e->test_loss = l;
            e->test_accuracy = a;
            test_confusion(run, e, g);
        }
        if (e->res.state == MODEL_OK && run->out_dir[0]) {
            group_get_params(g, 0, f.host);
            if (run_write_weights(run, e, f.host, 0, &err)) {
                e->res.state = MODEL_FAILED;
                str_copy(e->res.error, sizeof e->res.error, err.message);
            }
        }
        e->peak_bytes = group_peak_bytes(g);
    } else {
        e->res.state = MODEL_FAILED;
        str_copy(e->res.error, sizeof e->res.error, err.message);
    }
    free(f.host);
    group_free(g);
    e->done = 1;
    if (run->out_dir[0]) {
        run_write_history(run, e, &err);
        pthread_mutex_lock(&run->lock);
        run_write_results(run, &err);
        pthread_mutex_unlock(&run->lock);
    }
    event_init(&ev, COHORT_EVENT_MODEL_END, run, e);
    ev.status = model_state_str(e->res.state);
    ev.error = e->res.error;
    ev.epoch = e->res.epochs_run;
    ev.seconds = e->res.seconds;
    emit(run, &ev);
}

static int count_failed(const cohort_run *run)
{
    int n = 0;
    for (int i = 0; i < run->n; i++)
        n += run->m[i].res.state != MODEL_OK;
    return n;
}

cohort_status cohort_run_train(cohort_run *run, cohort_error *err)
{
    int cores = run->devices->dev[0].info.threads;
    int threads = run->opt.threads > 0 ? run->opt.threads : cores;
    openblas_set_num_threads(threads);
    if (run->out_dir[0]) {
        cohort_status st = run_write_results(run, err);
        if (st)
            return st;
    }
    int trainable = 0;
    for (int i = 0; i < run->n; i++)
        trainable += !run->m[i].done;
    if (trainable == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "no model can be trained: %s",
                           run->n ? run->m[0].res.error : "the plan has no models");
    for (int i = 0; i < run->n && !run->stop; i++)
        if (!run->m[i].done)
            train_one(run, &run->m[i], threads);
    if (run->stop)
        return cohort_fail(err, COHORT_ERR_INTERRUPTED, "interrupted");
    int failed = count_failed(run);
    if (failed)
        return cohort_fail(err, COHORT_ERR_PARTIAL, "%d of %d models did not finish", failed,
                           run->n);
    return COHORT_OK;
}
