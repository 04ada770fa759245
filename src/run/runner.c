/* cohort_run: its creation (datasets, devices, the model entries, memory plans,
 * placement, the auto strategy, the output directory), its results read back, and its
 * release. Training is strategy.c's (run/jobs.h). */
#include "layers/layer.h"
#include "run/run.h"
#include "run/shard.h"
#include "util/util.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cohort_run_options_init(cohort_run_options *opt)
{
    if (!opt) /* cohort.h: a NULL out-pointer is refused, never a crash */
        return;
    memset(opt, 0, sizeof *opt);
    opt->strategy = COHORT_STRATEGY_AUTO;
}

/* The test and validation sets, read on a thread of their own while the
 * training set is read (Fashion-MNIST's test set took 0.04 s of the start). */
typedef struct side_load {
    cohort_run *run;
    const data_options *opt;
    cohort_status st;
    cohort_error err;
} side_load;

/* A dataset that could not be opened or read (a missing file, a folder):
 * err gets where the plan names it, "plan.yaml:3: data.test: ", in front,
 * and for a file not found, which folder its relative path is read from. */
static void data_where(const cohort_run *run, const char *key, int line, cohort_status st,
                       cohort_error *err)
{
    if (st != COHORT_ERR_IO)
        return;
    char msg[sizeof err->message];
    memcpy(msg, err->message, sizeof msg);
    const char *path = run->plan->path, *slash = strrchr(path, '/');
    int missing = strstr(msg, strerror(ENOENT)) != NULL;
    if (line > 0 && missing && slash)
        cohort_fail(err, st, "%s:%d: data.%s: %s (a relative path in a plan is read from the "
                             "plan's folder, %.*s/)",
                    path, line, key, msg, (int)(slash - path), path);
    else if (line > 0)
        cohort_fail(err, st, "%s:%d: data.%s: %s", path, line, key, msg);
    else
        cohort_fail(err, st, "--set data.%s: %s%s", key, msg,
                    missing ? " (a path given with --set is read from the current directory)"
                            : "");
}

static void *load_side(void *p)
{
    side_load *l = p;
    const data_spec *d = &l->run->plan->data;
    l->st = COHORT_OK;
    if (d->test[0]) {
        l->st = data_load(d->test, l->opt, &l->run->test_ds, &l->err);
        data_where(l->run, "test", d->test_line, l->st, &l->err);
    }
    if (!l->st && d->validation[0]) {
        l->st = data_load(d->validation, l->opt, &l->run->val_ds, &l->err);
        data_where(l->run, "validation", d->validation_line, l->st, &l->err);
    }
    return NULL;
}

static cohort_status load_data(cohort_run *run, cohort_error *err)
{
    const data_spec *d = &run->plan->data;
    data_options dopt = {.label_column = d->label_column[0] ? d->label_column : NULL,
                         .label_columns = d->label_columns[0] ? d->label_columns : NULL,
                         .memory = run->opt.memory,
                         .n_memory = run->opt.n_memory};
    /* Token ids where a model's first layer takes them: an integer array is
     * read as it is, for every model (run_check_tokens refuses a model that
     * would read uint8 values unscaled without an embedding). */
    for (int i = 0; i < run->plan->n_models; i++)
        dopt.tokens |= run_takes_tokens(&run->plan->models[i]);
    side_load side = {run, &dopt, COHORT_OK, {0}};
    pthread_t t;
    int threaded =
        (d->test[0] || d->validation[0]) && pthread_create(&t, NULL, load_side, &side) == 0;
    if (!threaded)
        load_side(&side);
    cohort_status st = data_load(d->train, &dopt, &run->train_ds, err);
    data_where(run, "train", d->train_line, st, err);
    if (threaded)
        pthread_join(t, NULL);
    /* The training set's error first, as when they were read in turn. */
    if (st)
        return st;
    if (side.st) {
        *err = side.err;
        return side.st;
    }
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
    if (run->train.n == 0 && d->validation_split > 0 && d->validation_split_line)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s:%d: data.validation_split %g leaves none "
                           "of the %lld samples of %s for training; give a smaller fraction",
                           run->plan->path, d->validation_split_line, d->validation_split,
                           (long long)run->train_ds->n, d->train);
    if (run->train.n == 0 && d->validation_split > 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "--set data.validation_split=%g: it leaves "
                           "none of the %lld samples of %s for training; give a smaller fraction",
                           d->validation_split, (long long)run->train_ds->n, d->train);
    if (run->train.n == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: no training samples", d->train);
    /* Only predict reads data without labels (memory: data may have none). */
    const cohort_dataset *sets[3] = {run->train_ds, run->val_ds, run->test_ds};
    for (int i = 0; i < 3; i++)
        if (sets[i] && !sets[i]->has_labels)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has no labels or targets; training and evaluation need them",
                               sets[i]->source);
    run->n_in = (int)run->train_ds->dim;
    run->n_classes = run->train_ds->n_classes;
    data_warn_empty_classes(run->train_ds);
    run->in_shape = run->train.shape;
    if (d->input_shape.rank) {
        char want[64], has[64];
        shape_format(d->input_shape, want, sizeof want);
        shape_format(run->train.shape, has, sizeof has);
        if ((int64_t)shape_size(d->input_shape) != run->train_ds->dim)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s:%d: data.input_shape %s has %zu values, but a sample of %s "
                               "has %lld (shape %s); give a shape of %lld values, like [%lld]",
                               run->plan->path, d->input_shape_line, want,
                               shape_size(d->input_shape), d->train,
                               (long long)run->train_ds->dim, has, (long long)run->train_ds->dim,
                               (long long)run->train_ds->dim);
        /* Every set is read as input_shape: they all have n_in values. */
        run->in_shape = run->train.shape = run->val.shape = run->test.shape = d->input_shape;
    }
    cohort_dataset *other[2] = {run->test_ds, run->val_ds};
    for (int i = 0; i < 2; i++) {
        if (!other[i])
            continue;
        /* Text labels: a test set's "dog" is the training set's "dog". */
        char what[1100];
        snprintf(what, sizeof what, "the training data %s", d->train);
        cohort_status ast = data_align_classes(other[i], run->train_ds->class_names,
                                               run->train_ds->n_classes, what, err);
        if (ast)
            return ast;
        if (other[i]->dim != run->train_ds->dim)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has %lld features per sample but %s has %lld", other[i]->source,
                               (long long)other[i]->dim, d->train, (long long)run->train_ds->dim);
        int64_t want = run->train_ds->t ? run->train_ds->t_dim : 0,
                has = other[i]->t ? other[i]->t_dim : 0;
        if (want != has && !(want <= 1 && has <= 1 && other[i]->n_classes && run->n_classes))
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has %s, but the training data %s has %s", other[i]->source,
                               has ? "real-valued targets" : "class labels", d->train,
                               want ? "real-valued targets" : "class labels");
        if (want > 1 && want != has)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has %lld targets per sample, but the training data %s has %lld",
                               other[i]->source, (long long)has, d->train, (long long)want);
        if (other[i]->n_classes > run->n_classes)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s has label %d, but the training data %s has only %d classes",
                               other[i]->source, other[i]->n_classes - 1, d->train, run->n_classes);
    }
    return COHORT_OK;
}

/* A callback that monitors a column model e's epochs will not have never
 * acts (Keras skips it with a warning): say so, with the plan's line. */
static void warn_monitors(const cohort_run *run, const model_entry *e)
{
    const model_spec *s = e->spec;
    const char *what[2] = {"early_stopping", "reduce_lr_on_plateau"};
    const char *mon[2] = {s->early_stop.monitor, s->plateau.monitor};
    const char *never[2] = {"it never stops early", "its rate never drops"};
    int on[2] = {s->early_stop.enabled, s->plateau.enabled};
    for (int i = 0; i < 2; i++)
        if (on[i] && !fit_monitor_present(&e->L, run->has_val, mon[i]))
            cohort_log(COHORT_LOG_WARN,
                       "%s:%d: model '%s': %s monitors %s, which its epochs do not have (%s%s): "
                       "%s",
                       run->plan->path, s->line, s->name, what[i], mon[i],
                       e->L.metric == METRIC_ERRORS ? "a regression has mae and rmse"
                                                    : "a classifier has accuracy",
                       run->has_val ? "" : "; val_ columns need validation data", never[i]);
}

cohort_status run_check_targets(const model_spec *s, int n_out, const cohort_dataset *ds,
                                cohort_error *err)
{
    if (!ds->t)
        return COHORT_OK; /* class labels: checked with the layout */
    if (s->loss == LOSS_SCE && !ds->n_classes) {
        char which[96] = "";
        for (int64_t i = 0; ds->t_dim == 1 && i < ds->n && !which[0]; i++)
            if (!(ds->t[i] >= 0.0f && ds->t[i] <= 2147483646.0f) || ds->t[i] != floorf(ds->t[i]))
                str_format(which, sizeof which, "; sample %lld's label is %.9g", (long long)i,
                         (double)ds->t[i]);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "model '%s': sparse_categorical_crossentropy takes integer class "
                           "labels in [0, 2147483646], but %s has real-valued targets (%lld per "
                           "sample%s); use loss mse, mae or huber for regression%s",
                           s->name, ds->source, (long long)ds->t_dim, which,
                           ds->t_dim > 1 ? ", or categorical_crossentropy for one-hot rows" : "");
    }
    if (s->loss != LOSS_SCE && ds->t_dim != n_out && !(ds->n_classes && ds->t_dim == 1))
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "model '%s': %s has %lld targets per sample, but the last layer has %d "
                           "units; make it {dense: %lld}",
                           s->name, ds->source, (long long)ds->t_dim, n_out, (long long)ds->t_dim);
    return COHORT_OK;
}

int run_takes_tokens(const model_spec *s)
{
    return s->n_layers > 0 && s->layers[0].kind->tokens != NULL;
}

cohort_status run_check_tokens(const model_spec *s, const cohort_dataset *ds,
                               const data_tokens *scan, cohort_error *err)
{
    const layer_spec *ls = &s->layers[0];
    if (!run_takes_tokens(s)) {
        if (ds->x_ints && strcmp(ds->x_dtype, "uint8") == 0)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "model '%s' reads %s (uint8) as values, scaled by 1/255, but the "
                               "plan's embeddings read it as token ids, unscaled; train them "
                               "from separate plans",
                               s->name, ds->source);
        return COHORT_OK;
    }
    char who[COHORT_NAME_MAX + 64];
    snprintf(who, sizeof who, "model '%s': its %s (layers.0)", s->name, ls->kind->name);
    return data_check_tokens(ds, scan, ls->kind->tokens(ls), who, err);
}

cohort_status devices_apply_plan(device_registry *r, const cohort_plan *plan, cohort_error *err)
{
    for (int i = 0; i < plan->n_devices; i++) {
        const device_spec *d = &plan->devices[i];
        if (!devices_find(r, d->name))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s:%d: device '%s' does not exist here%s%s",
                               plan->path, d->line, d->name,
                               strncmp(d->name, "gpu", 3) == 0 ? "; " : "",
                               strncmp(d->name, "gpu", 3) == 0 ? r->gpu_note : "");
        cohort_status st = d->n_split
                               ? devices_split(r, d->name, d->split, d->n_split, d->policy, err)
                               : devices_set_policy(r, d->name, d->policy, d->memory_limit, err);
        if (st)
            return cohort_fail_prefix(err, "%s:%d", plan->path, d->line);
    }
    return COHORT_OK;
}

/* Rough training throughput of a device in FLOP/s, to balance work. */
static double device_speed(const cohort_device *d)
{
    return d->kind->flops + d->kind->flops_per_core * (d->info.threads > 0 ? d->info.threads : 1);
}

static void refuse(cohort_run *run, model_entry *e, const cohort_device *d)
{
    char need[32], lim[32], ctx_s[32];
    uint64_t limit = mem_pool_limit(d->mem_pool), ctx = device_ctx_bytes(d);
    /* What the model itself may take: its context's bytes come from the
     * same pool (a GPU's cuBLAS workspace and scratch). */
    uint64_t room = limit > ctx ? limit - ctx : 0;
    e->res.state = MODEL_FAILED;
    e->done = 1;
    /* What would fit: the batch size whose plan is under the limit. */
    long fit = 0;
    for (long b = e->L.B - 1; b >= 1; b = b > 16 ? b * 3 / 4 : b - 1) {
        model_spec s = *e->spec;
        model_layout L;
        s.batch_size = (int)b;
        if (model_layout_make(&s, run->in_shape, run->n_classes, 1, &L, NULL) == COHORT_OK &&
            L.total_bytes <= room) {
            fit = b;
            break;
        }
    }
    char hint[320];
    model_spec one = *e->spec;
    model_layout L1;
    one.batch_size = 1;
    if (fit > 0) {
        snprintf(hint, sizeof hint, "or a batch_size of %ld", fit);
    } else if (model_layout_make(&one, run->in_shape, run->n_classes, 1, &L1, NULL) == COHORT_OK) {
        /* What no batch size shrinks: one copy of the parameters, their
         * gradients, the optimizer's state and the best epoch's copy. */
        char all[32], p[32], g[32], o[32], b[32] = "";
        size_t fixed = L1.buf_bytes[BUF_PARAMS] + L1.buf_bytes[BUF_GRADS] +
                       L1.buf_bytes[BUF_OPT] + L1.buf_bytes[BUF_BEST];
        format_bytes(fixed, all, sizeof all);
        format_bytes(L1.buf_bytes[BUF_PARAMS], p, sizeof p);
        format_bytes(L1.buf_bytes[BUF_GRADS], g, sizeof g);
        format_bytes(L1.buf_bytes[BUF_OPT], o, sizeof o);
        if (L1.buf_bytes[BUF_BEST])
            format_bytes(L1.buf_bytes[BUF_BEST], b, sizeof b);
        snprintf(hint, sizeof hint, "no batch size fits: its parameters (%s), their gradients "
                                    "(%s) and the optimizer's state (%s)%s%s%s take %s at any "
                                    "batch size",
                 p, g, o, b[0] ? " with the best epoch's copy (" : "", b, b[0] ? ")" : "", all);
    } else {
        snprintf(hint, sizeof hint, "no batch size fits");
    }
    char with[80] = "";
    if (ctx)
        snprintf(with, sizeof with, " (%s of it its context's: cuBLAS's workspace and scratch)",
                 format_bytes(ctx, ctx_s, sizeof ctx_s));
    format_bytes(e->planned_bytes + ctx, need, sizeof need);
    snprintf(e->res.error, sizeof e->res.error,
             "model '%s' needs %s%s but %s has a limit of %s; give it a device or split of at "
             "least %s, %s",
             e->spec->name, need, with, d->info.name, format_bytes(limit, lim, sizeof lim), need,
             hint);
}

/*
 * Placement. A pinned model goes to its device. The others, largest memory
 * plan first, go to the device they fit on with the least work assigned so
 * far (FLOPs over the device's speed), so that devices finish together. A
 * model that fits nowhere is refused before anything trains.
 */
static cohort_status place_models(cohort_run *run, cohort_error *err)
{
    int usable[COHORT_MAX_DEVICES];
    int n_usable = devices_usable(run->devices, usable, COHORT_MAX_DEVICES);
    double load[COHORT_MAX_DEVICES] = {0};
    int *ord = malloc((size_t)(run->n ? run->n : 1) * sizeof *ord);
    if (!ord)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    int n_free = 0;
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        double cost = model_train_flops(&e->L, run->train.n) * e->spec->epochs;
        if (!e->spec->device[0]) {
            ord[n_free++] = i;
            continue;
        }
        cohort_device *d = devices_find(run->devices, e->spec->device);
        if (!d) {
            char names[512] = "";
            for (int j = 0; j < n_usable; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "",
                         run->devices->dev[usable[j]].info.name);
            int gpu = strncmp(e->spec->device, "gpu", 3) == 0;
            free(ord);
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s:%d: model '%s' is pinned to device '%s', which does not exist "
                               "here (devices: %s)%s%s",
                               run->plan->path, e->spec->line, e->spec->name, e->spec->device, names,
                               gpu ? "; " : "", gpu ? run->devices->gpu_note : "");
        }
        if (!d->mem_pool) {
            free(ord);
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s:%d: model '%s' is pinned to %s, which is split; pin it to one "
                               "of its parts (%s/0, ...)",
                               run->plan->path, e->spec->line, e->spec->name, d->info.name,
                               d->info.name);
        }
        e->device = (int)(d - run->devices->dev);
        if (e->planned_bytes + device_ctx_bytes(d) > mem_pool_limit(d->mem_pool))
            refuse(run, e, d);
        else
            load[e->device] += cost / device_speed(d);
    }
    /* Largest first (first-fit decreasing), ties by plan order. */
    for (int a = 1; a < n_free; a++) {
        int x = ord[a], b = a;
        while (b > 0 && run->m[ord[b - 1]].planned_bytes < run->m[x].planned_bytes) {
            ord[b] = ord[b - 1];
            b--;
        }
        ord[b] = x;
    }
    for (int a = 0; a < n_free; a++) {
        model_entry *e = &run->m[ord[a]];
        double cost = model_train_flops(&e->L, run->train.n) * e->spec->epochs;
        int best = -1, biggest = usable[0];
        double best_finish = 0;
        for (int j = 0; j < n_usable; j++) {
            const cohort_device *d = &run->devices->dev[usable[j]];
            if (mem_pool_limit(d->mem_pool) > mem_pool_limit(run->devices->dev[biggest].mem_pool))
                biggest = usable[j];
            if (mem_pool_limit(d->mem_pool) < e->planned_bytes + device_ctx_bytes(d))
                continue;
            double finish = load[usable[j]] + cost / device_speed(d);
            if (best < 0 || finish < best_finish) {
                best = usable[j];
                best_finish = finish;
            }
        }
        if (best < 0) {
            e->device = biggest;
            refuse(run, e, &run->devices->dev[biggest]);
            continue;
        }
        e->device = best;
        load[best] = best_finish;
    }
    free(ord);
    return COHORT_OK;
}

/*
 * strategy: auto. What bench/ measured on CPUs: small models' GEMMs scale
 * badly over cores, so several models side by side, one core each (threads),
 * beat one model at a time on every core. A fused group shares no arithmetic
 * on a CPU (each model has its own weights), and since idle threads help
 * running models, threads and fused are level: bench/fused measured fused at
 * 0.91x to 1.09x the threads strategy for 1 to 64 models, under shared_order
 * too (2026-12-02; 0.94x and 0.91x for 32 and 64), and threads holds only as
 * many models in memory as there are cores. So a CPU gets threads, fused or
 * not. On a GPU, fusing same-shaped models removes the per-model launch
 * overhead, so groups of two or more are fused there.
 */
static void choose_strategy(cohort_run *run)
{
    int trainable = 0, gpu_pairs = 0;
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        if (e->done)
            continue;
        trainable++;
        if (!run->devices->dev[e->device].kind->auto_fuse)
            continue;
        for (int j = 0; j < i; j++)
            if (!run->m[j].done && run->m[j].device == e->device &&
                model_can_fuse(run->m[j].spec, e->spec)) {
                gpu_pairs++;
                break;
            }
    }
    int cores = run->opt.threads > 0 ? run->opt.threads : run->devices->dev[0].info.threads;
    /* The models that can train side by side: on a CPU part, no more than
     * its cores (the others wait for one); elsewhere the run's cores bound
     * them. */
    int side = 0, part_cores = 0, on_parts = 0;
    for (int d = 0; d < run->devices->n; d++) {
        int here = 0;
        for (int i = 0; i < run->n; i++)
            here += !run->m[i].done && run->m[i].device == d;
        int own = run_device_cores(run, d);
        if (here && own != INT_MAX) {
            part_cores += own;
            on_parts += here;
        }
        side += here < own ? here : own;
    }
    if (on_parts == trainable && part_cores < cores)
        cores = part_cores; /* every model is on CPU parts: theirs are the cores */
    if (side > cores)
        side = cores;
    if (gpu_pairs > 0) {
        run->strategy = COHORT_STRATEGY_FUSED;
        snprintf(run->strategy_why, sizeof run->strategy_why,
                 "auto: fused, since same-shaped models share a GPU");
    } else if (trainable > 1 && side > 1) {
        run->strategy = COHORT_STRATEGY_THREADS;
        snprintf(run->strategy_why, sizeof run->strategy_why,
                 "auto: threads, %d models side by side on %d cores, one core each%s", side,
                 cores, on_parts ? ", a CPU part's models on its own cores" : "");
    } else {
        run->strategy = COHORT_STRATEGY_SEQUENTIAL;
        snprintf(run->strategy_why, sizeof run->strategy_why, "auto: sequential, %s",
                 trainable < 2                 ? "one model"
                 : on_parts == trainable       ? "the models' CPU part has one core"
                                               : "one core");
    }
}

/* Values outside the enums and counts would be taken for something they
 * are not (a strategy of 42 ran as auto would not): refused here. */
static cohort_status check_options(const cohort_run_options *opt, cohort_error *err)
{
    if (opt && (opt->strategy < COHORT_STRATEGY_AUTO || opt->strategy > COHORT_STRATEGY_FUSED))
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_run_create: strategy %d is not a cohort_strategy (0 to %d)",
                           (int)opt->strategy, (int)COHORT_STRATEGY_FUSED);
    if (opt && opt->threads < 0)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_run_create: threads is %d; give 0 (every core) or more",
                           opt->threads);
    if (opt && (opt->n_memory < 0 || (opt->n_memory > 0 && !opt->memory)))
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_run_create: n_memory is %d but memory is %s", opt->n_memory,
                           opt->memory ? "set" : "NULL");
    return COHORT_OK;
}

/* The model entries of the plan: each one's layout, its targets checked
 * against the data, its init_from file read; errors at the plan's line. */
static cohort_status make_entries(cohort_run *run, cohort_error *err)
{
    const cohort_plan *plan = run->plan;
    run->n = plan->n_models;
    run->m = calloc((size_t)run->n, sizeof *run->m);
    if (!run->m)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    cohort_status st = COHORT_OK;
    /* Each dataset's token ids scanned once, for every model that reads them. */
    const cohort_dataset *sets[3] = {run->train_ds, run->val_ds, run->test_ds};
    data_tokens scans[3];
    int scanned = 0;
    for (int i = 0; !st && i < run->n; i++) {
        model_entry *e = &run->m[i];
        e->spec = &plan->models[i];
        e->index = e->plan_index = i;
        e->device = -1;
        e->test_loss = e->test_accuracy = e->test_mae = e->test_rmse = NAN;
        e->res.state = MODEL_PENDING;
        st = model_layout_make(e->spec, run->in_shape, run->n_classes, 1, &e->L, err);
        if (!st)
            st = run_check_targets(e->spec, e->L.n_out, run->train_ds, err);
        for (int d = 0; !scanned && run_takes_tokens(e->spec) && d < 3; d++)
            if (sets[d])
                data_tokens_scan(sets[d], &scans[d]);
        scanned |= run_takes_tokens(e->spec);
        for (int d = 0; !st && d < 3; d++)
            if (sets[d] && (st = run_check_tokens(e->spec, sets[d], &scans[d], err)) &&
                run_takes_tokens(e->spec))
                e->L.error_line = e->spec->layers[0].line;
        if (!st)
            warn_monitors(run, e);
        /* An init_from file that does not fit the model is bad input, found
         * before anything trains (exit 2), not a model failing later. */
        if (!st && e->spec->init_from[0]) {
            float *tmp = malloc((e->L.n_params ? e->L.n_params : 1) * sizeof *tmp);
            st = tmp ? model_load_params(e->spec, &e->L, e->spec->init_from, tmp, err)
                     : cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
            free(tmp);
        }
        if (st)
            cohort_fail_prefix(err, "%s:%d", plan->path,
                               e->L.error_line ? e->L.error_line : e->spec->line);
        e->planned_bytes = e->L.total_bytes;
        e->res.history = calloc((size_t)e->spec->epochs, sizeof(epoch_metrics));
        if (!st && !e->res.history)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    return st;
}

/* The output directory claimed and made, its earlier run's journal and
 * checkpoints removed, or, with --resume, read back. */
static cohort_status prepare_out_dir(cohort_run *run, cohort_error *err)
{
    char sub[COHORT_PATH_MAX + 16];
    cohort_status st = dir_make(run->out_dir, err);
    if (!st)
        st = run_lock(run, err);
    if (!st)
        st = run_claim_out_dir(run, err);
    /* A run that does not resume is no earlier share's: the CLI marks
     * its own share again after this (shard_dir_mark). */
    if (!st && !run->opt.resume)
        st = shard_dir_mark(run->out_dir, 0, 0, err);
    const char *subs[] = {"models", "history", "checkpoints", "records"};
    for (int i = 0; !st && i < 4; i++) {
        snprintf(sub, sizeof sub, "%s/%s", run->out_dir, subs[i]);
        st = dir_make(sub, err);
    }
    /* A run that does not resume starts its journal and checkpoints
     * afresh: an old record would pass for a model of this run on a
     * later --resume, and an old checkpoint of a model this run has not
     * reached yet would be resumed from, or, written under other
     * settings, make that --resume refuse the whole run. */
    for (int i = 0; !st && !run->opt.resume && i < run->n; i++) {
        char rec[2 * COHORT_PATH_MAX];
        snprintf(rec, sizeof rec, "%s/records/%s.json", run->out_dir, run->m[i].spec->name);
        unlink(rec);
        snprintf(rec, sizeof rec, "%s/checkpoints/%s.safetensors", run->out_dir,
                 run->m[i].spec->name);
        unlink(rec);
    }
    char journal[COHORT_PATH_MAX + 16];
    snprintf(journal, sizeof journal, "%s/pbt.json", run->out_dir);
    if (!st && !run->opt.resume)
        unlink(journal);
    /* pbt's settings as its journal left them, before any record or
     * checkpoint is checked against them. */
    if (!st && run->opt.resume && run->plan->scheduler.kind == PRUNE_PBT)
        st = run_pbt_replay(run, err);
    if (!st && run->opt.resume)
        st = run_resume(run, err);
    for (int i = 0; !st && run->opt.resume && i < run->n; i++) {
        model_entry *e = &run->m[i];
        if (e->done)
            continue;
        ckpt c;
        st = ckpt_read(run, e, &c, err);
        if (!st && c.found)
            ckpt_start_from(run, e, &c);
        ckpt_free(&c);
    }
    return st;
}

cohort_status cohort_run_create(const cohort_plan *plan, const cohort_run_options *opt,
                                cohort_run **out, cohort_error *err)
{
    if (!plan || !out)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_run_create: invalid arguments");
    *out = NULL;
    cohort_status st = check_options(opt, err);
    if (st)
        return st;
    cohort_run *run = calloc(1, sizeof *run);
    if (!run)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    run->plan = plan;
    run->lock_fd = -1;
    cohort_run_options_init(&run->opt);
    if (opt)
        run->opt = *opt;
    pthread_mutex_init(&run->lock, NULL);
    run->strategy = run->opt.strategy != COHORT_STRATEGY_AUTO ? run->opt.strategy : plan->strategy;
    run->write_every = run_write_every();

    if (run->opt.out_dir)
        str_copy(run->out_dir, sizeof run->out_dir, run->opt.out_dir);
    st = load_data(run, err);
    if (!st && run->opt.devices) {
        run->devices = run->opt.devices;
    } else if (!st) {
        st = devices_discover(&run->devices, err);
        run->own_devices = !st;
        if (!st)
            st = devices_apply_plan(run->devices, plan, err);
    }
    if (!st)
        st = make_entries(run, err);
    if (!st && plan->scheduler.kind != PRUNE_NONE)
        st = run_check_scheduler(run, err);
    if (!st)
        st = run_shard_select(run, err);
    if (!st)
        st = place_models(run, err);
    if (!st && run->strategy == COHORT_STRATEGY_AUTO)
        choose_strategy(run);
    /* Refused before the output directory is claimed: --overwrite would
     * have removed the earlier run, and a new journal its records. With
     * --resume the journal may hold finished models: cohort_run_train
     * checks then, before it writes anything. An empty shard (more shares
     * than models) is no error: the caller writes its empty results. */
    if (!st && run->out_dir[0] && !run->opt.resume && run->n > 0)
        st = run_check_trainable(run, err);
    if (!st && run->out_dir[0])
        st = prepare_out_dir(run, err);
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
    /* Records still waiting for their batch (a run that stopped before its
     * final results.json) are journaled while the directory is ours. */
    cohort_error ignored;
    if (run->lock_fd >= 0 && !run->disk_full && !file_out_of_space())
        run_flush_records(run, 1, &ignored);
    for (int i = 0; run->m && i < run->n; i++) {
        free(run->m[i].pending_record);
        free(run->m[i].res.history);
        free(run->m[i].confusion);
        if (run->m[i].own_spec)
            free(run->m[i].own_spec->config_json);
        free(run->m[i].own_spec);
        free(run->m[i].lineage);
        free(run->m[i].result_error);
    }
    free(run->m);
    free(run->pending);
    for (int i = 0; i < run->n_old_errors; i++)
        free(run->old_errors[i]);
    free(run->old_errors);
    free(run->trained_groups);
    if (run->own_devices)
        devices_free(run->devices);
    if (run->lock_fd >= 0)
        close(run->lock_fd);
    data_free(run->train_ds);
    data_free(run->test_ds);
    data_free(run->val_ds);
    pthread_mutex_destroy(&run->lock);
    free(run);
}

int cohort_run_model_count(const cohort_run *run) { return run ? run->n : 0; }

void run_model_summary_of(const cohort_run *run, int i, run_model_summary *out)
{
    const model_entry *e = &run->m[i];
    int best = e->res.best_epoch != 0;
    out->name = e->spec->name;
    out->state = e->res.state;
    out->error = e->res.error;
    out->device = e->device >= 0 ? run->devices->dev[e->device].info.name : "-";
    out->params = e->L.n_params;
    out->epochs_run = e->res.epochs_run;
    out->best_epoch = e->res.best_epoch;
    out->stopped_early = e->res.stopped_early;
    out->restored_epoch = run_restored_epoch(e);
    out->pruned_rung = e->pruned_rung;
    out->regression = e->L.metric == METRIC_ERRORS;
    out->best_val_loss = best ? e->res.best.val_loss : NAN;
    out->best_val_accuracy = best ? e->res.best.val_accuracy : NAN;
    out->best_val_mae = best ? e->res.best.val_mae : NAN;
    out->test_accuracy = e->test_accuracy;
    out->test_mae = e->test_mae;
    out->seconds = e->res.seconds;
    out->exploits = e->n_lineage;
    out->exploit_epoch = e->n_lineage ? e->lineage[e->n_lineage - 1].epoch : 0;
    out->exploit_from = e->n_lineage ? run->m[e->lineage[e->n_lineage - 1].from].spec->name : "";
}

cohort_strategy run_strategy(const cohort_run *run) { return run->strategy; }

const char *run_strategy_why(const cohort_run *run) { return run->strategy_why; }

int run_disk_was_full(const cohort_run *run) { return run->disk_full; }

void cohort_run_request_stop(cohort_run *run)
{
    if (run)
        run->stop = 1;
}

void cohort_free(void *p) { free(p); }

cohort_status cohort_run_model_result(const cohort_run *run, int i, cohort_model_result *out)
{
    if (!run || !out || i < 0 || i >= run->n)
        return COHORT_ERR_USAGE;
    /* Another thread may poll while the jobs write the entries: read them
     * under the lock (held already inside on_event). The lock is the run's
     * own state, not what callers see of it, hence the casts. */
    cohort_run *mut = (cohort_run *)run;
    int lock = !run_in_event(run);
    if (lock)
        pthread_mutex_lock(&mut->lock);
    model_entry *e = &mut->m[i];
    memset(out, 0, sizeof *out);
    /* The plan's name: a pbt exploit replaces e->spec. */
    out->name = run->plan->models[e->plan_index].name;
    out->status = model_state_str(e->res.state);
    /* A copy, made anew only when the error changes (res.error is written by
     * the jobs without regard to a caller still reading it); the copy it
     * replaces is kept, for a caller still reading that one. */
    if (!e->result_error || strcmp(e->result_error, e->res.error) != 0) {
        char *copy = strdup(e->res.error);
        char **kept = realloc(mut->old_errors, (size_t)(mut->n_old_errors + 1) * sizeof *kept);
        if (kept)
            mut->old_errors = kept;
        if (copy && kept) {
            if (e->result_error)
                kept[mut->n_old_errors++] = e->result_error;
            e->result_error = copy;
        } else {
            free(copy); /* out of memory: the last copy stays (or none) */
        }
    }
    out->error = e->result_error ? e->result_error : "";
    out->device = e->device >= 0 ? run->devices->dev[e->device].info.name : "";
    out->epochs_run = e->res.epochs_run;
    out->best_epoch = e->res.best_epoch;
    out->best_val_loss = e->res.best_epoch ? e->res.best.val_loss : NAN;
    out->best_val_accuracy = e->res.best_epoch ? e->res.best.val_accuracy : NAN;
    out->final_loss = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].loss : NAN;
    out->final_accuracy = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].accuracy : NAN;
    out->test_loss = e->test_loss;
    out->test_accuracy = e->test_accuracy;
    out->best_val_mae = e->res.best_epoch ? e->res.best.val_mae : NAN;
    out->best_val_rmse = e->res.best_epoch ? e->res.best.val_rmse : NAN;
    out->final_mae = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].mae : NAN;
    out->final_rmse = e->res.epochs_run ? e->res.history[e->res.epochs_run - 1].rmse : NAN;
    out->test_mae = e->test_mae;
    out->test_rmse = e->test_rmse;
    out->seconds = e->res.seconds;
    out->params = e->L.n_params;
    out->planned_bytes = e->planned_bytes;
    out->peak_bytes = e->peak_bytes == RUN_PEAK_UNKNOWN ? 0 : e->peak_bytes;
    if (lock)
        pthread_mutex_unlock(&mut->lock);
    return COHORT_OK;
}

int run_model_index(const cohort_run *run, const char *name)
{
    for (int i = 0; i < run->n; i++)
        if (!strcmp(run->m[i].spec->name, name))
            return i;
    return -1;
}
