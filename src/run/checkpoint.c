/*
 * Checkpoints, resume and the output directory's lock.
 *
 * A checkpoint (DIR/checkpoints/NAME.safetensors) holds one model's
 * parameters, optimizer state and best-epoch parameters as F32 tensors, and
 * in its metadata where training stands (epochs done, steps done of the
 * next, partial sums), its history, its early-stopping state and its
 * reduce_lr_on_plateau state (the rate now, best, wait, cooldown). Shuffle
 * orders and dropout masks are functions of (seed, epoch, step), so no
 * random-number state needs saving: a resumed model continues exactly.
 */
#include "io/io.h"
#include "io/results.h"
#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static void path_of(const cohort_run *run, const model_entry *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s/checkpoints/%s.safetensors", run->out_dir, e->spec->name);
}

static void json_metrics(strbuf *b, const epoch_metrics *m)
{
    sb_puts(b, "[");
    for (int i = 0; i < EPOCH_METRIC_COUNT; i++) {
        double v = epoch_metric_get(m, &epoch_metric_fields[i]);
        if (i)
            sb_puts(b, ",");
        if (isfinite(v))
            sb_printf(b, "%.17g", v);
        else
            sb_puts(b, "null");
    }
    sb_puts(b, "]");
}

static void num17(strbuf *b, const char *key, double v)
{
    sb_printf(b, ",\"%s\":", key);
    if (isfinite(v))
        sb_printf(b, "%.17g", v);
    else
        sb_puts(b, "null");
}

cohort_status ckpt_write(cohort_run *run, const model_entry *e, train_group *g, int k,
                         const train_result *r, int epoch, int64_t step, float *scratch,
                         cohort_error *err)
{
    size_t P = group_layout(g)->n_params;
    int slots = group_opt_slots(g), keep = group_keeps_best(g);
    float *data[4] = {scratch, scratch + P, scratch + 2 * P, scratch + 3 * P};
    group_get_state(g, k, data[0], data[1], data[2], data[3]);
    int have[4] = {1, slots >= 1, slots >= 2, keep};
    return ckpt_write_state(run, e, data, have, r, epoch, step, err);
}

cohort_status ckpt_write_state(cohort_run *run, const model_entry *e, float *const data[4],
                               const int have[4], const train_result *r, int epoch, int64_t step,
                               cohort_error *err)
{
    size_t P = e->L.n_params;
    st_tensor t[4];
    int n = 0;
    const char *names[4] = {"params", "opt.m", "opt.v", "best"};
    for (int i = 0; i < 4; i++) {
        if (!have[i])
            continue;
        memset(&t[n], 0, sizeof t[n]);
        str_copy(t[n].name, sizeof t[n].name, names[i]);
        t[n].ndim = 1;
        t[n].shape[0] = (int64_t)P;
        t[n].data = data[i];
        n++;
    }
    strbuf s;
    sb_init(&s);
    sb_printf(&s, "{\"epoch\":%d,\"step\":%lld,\"state\":\"%s\",\"best_epoch\":%d,\"wait\":%d,"
                  "\"stopped_early\":%d",
              epoch, (long long)step, model_state_str(r->state), r->best_epoch, r->wait,
              r->stopped_early);
    num17(&s, "part_loss", r->part_loss);
    num17(&s, "part_correct", r->part_correct);
    num17(&s, "part_sq", r->part_sq);
    num17(&s, "best_value", r->best_value);
    num17(&s, "seconds", r->seconds);
    num17(&s, "lr", r->lr);
    num17(&s, "plateau_best", r->plateau_best);
    sb_printf(&s, ",\"plateau_wait\":%d,\"plateau_cooldown\":%d", r->plateau_wait,
              r->plateau_cooldown);
    /* pbt: how many exploits made this state. --resume finishes an exploit
     * a kill cut short by this count, which a comparison of configs cannot
     * tell when the new settings equal the old. */
    if (run->plan->scheduler.kind == PRUNE_PBT)
        sb_printf(&s, ",\"exploits\":%d", e->n_lineage);
    sb_puts(&s, ",\"best\":");
    json_metrics(&s, &r->best);
    sb_puts(&s, ",\"history\":[");
    for (int i = 0; i < epoch && i < e->spec->epochs; i++) {
        if (i)
            sb_puts(&s, ",");
        json_metrics(&s, &r->history[i]);
    }
    sb_puts(&s, "]}");
    if (s.failed) {
        sb_free(&s);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    const char *meta[] = {"format", "cohort-checkpoint", "spec",
                          e->spec->config_json ? e->spec->config_json : "{}", "state", s.data};
    char path[2 * COHORT_PATH_MAX];
    path_of(run, e, path, sizeof path);
    cohort_status st = st_write(path, t, n, meta, 3, err);
    sb_free(&s);
    return st;
}

static void metrics_from(const json_value *a, epoch_metrics *m)
{
    for (int i = 0; i < EPOCH_METRIC_COUNT; i++)
        *epoch_metric(m, &epoch_metric_fields[i]) = json_num(json_at(a, (size_t)i), NAN);
}

void ckpt_start_from(const cohort_run *run, model_entry *e, const ckpt *c)
{
    /* A model resumed after kill -9 whose best epoch came before the kill
     * has its best weights on disk, but not yet in its entry: results.json
     * said best_weights null, and Python's Result had none. */
    char best[2 * COHORT_PATH_MAX];
    snprintf(best, sizeof best, "%s/models/%s.best.safetensors", run->out_dir, e->spec->name);
    if (c->res.best_epoch > 0 && !e->best_weights[0] && run->out_dir[0] && access(best, F_OK) == 0)
        snprintf(e->best_weights, sizeof e->best_weights, "models/%s.best.safetensors",
                 e->spec->name);
    e->start_epoch = c->epoch;
    e->start_step = c->step;
    e->res.epochs_run = c->epoch;
    memcpy(e->res.history, c->history, (size_t)c->epoch * sizeof(epoch_metrics));
    e->res.best_epoch = c->res.best_epoch;
    e->res.best = c->res.best;
    e->res.seconds = c->res.seconds;
}

void ckpt_free(ckpt *c)
{
    free(c->params);
    free(c->history);
    memset(c, 0, sizeof *c);
}

/* ckpt_read; config: receives the checkpoint's config instead of its
 * check against e's when not NULL. */
static cohort_status read_checkpoint(const cohort_run *run, const model_entry *e, ckpt *c,
                                     char **config, cohort_error *err)
{
    memset(c, 0, sizeof *c);
    if (config)
        *config = NULL;
    char path[2 * COHORT_PATH_MAX];
    path_of(run, e, path, sizeof path);
    if (access(path, F_OK) != 0)
        return COHORT_OK; /* no checkpoint: c->found stays 0 */
    st_file f;
    cohort_status st = st_read(path, &f, err);
    if (st)
        return st;
    char *spec = st_meta_get(&f, "spec"), *state = st_meta_get(&f, "state");
    size_t P = e->L.n_params;
    json_value *j = NULL;
    char jerr[128];
    if (!spec || !state || !(j = json_parse(state, strlen(state), jerr, sizeof jerr))) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: not a cohort checkpoint", path);
    } else if (!config && (!e->spec->config_json || strcmp(spec, e->spec->config_json) != 0)) {
        st = cohort_fail(err, COHORT_ERR_INPUT,
                         "%s: model '%s' has changed since this checkpoint was written; train "
                         "into a new --out directory, or remove %s/checkpoints to start over",
                         path, e->spec->name, run->out_dir);
    } else {
        c->params = calloc(4 * P, sizeof(float));
        c->history = calloc((size_t)e->spec->epochs, sizeof(epoch_metrics));
        if (!c->params || !c->history)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory reading %s", path);
        const char *names[4] = {"params", "opt.m", "opt.v", "best"};
        for (int i = 0; !st && i < 4; i++) {
            const st_tensor *t = st_find(&f, names[i]);
            if (!t)
                continue;
            if (t->ndim != 1 || (size_t)t->shape[0] != P) {
                st = cohort_fail(err, COHORT_ERR_INPUT, "%s: tensor %s has the wrong shape", path,
                                 names[i]);
                break;
            }
            memcpy(c->params + (size_t)i * P, t->data, P * sizeof(float));
            c->have[i] = 1;
        }
        if (!st && !c->have[0])
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s: no params tensor", path);
    }
    if (!st) {
        train_result *r = &c->res;
        c->epoch = (int)json_num(json_get(j, "epoch"), 0);
        c->step = (int64_t)json_num(json_get(j, "step"), 0);
        r->best_epoch = (int)json_num(json_get(j, "best_epoch"), 0);
        r->wait = (int)json_num(json_get(j, "wait"), 0);
        r->stopped_early = (int)json_num(json_get(j, "stopped_early"), 0);
        r->part_loss = json_num(json_get(j, "part_loss"), 0);
        r->part_correct = json_num(json_get(j, "part_correct"), 0);
        r->part_sq = json_num(json_get(j, "part_sq"), 0);
        r->best_value = json_num(json_get(j, "best_value"), NAN);
        r->seconds = json_num(json_get(j, "seconds"), 0);
        r->lr = json_num(json_get(j, "lr"), NAN);
        r->plateau_best = json_num(json_get(j, "plateau_best"), NAN);
        r->plateau_wait = (int)json_num(json_get(j, "plateau_wait"), 0);
        r->plateau_cooldown = (int)json_num(json_get(j, "plateau_cooldown"), 0);
        c->exploits = (int)json_num(json_get(j, "exploits"), -1);
        metrics_from(json_get(j, "best"), &r->best);
        const json_value *h = json_get(j, "history");
        if (c->epoch < 0 || c->epoch > e->spec->epochs || c->step < 0 || !h ||
            h->type != JSON_ARR || h->n != (size_t)c->epoch)
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s: inconsistent training state", path);
        for (int i = 0; !st && i < c->epoch; i++)
            metrics_from(json_at(h, (size_t)i), &c->history[i]);
        r->epochs_run = c->epoch;
        c->found = !st;
    }
    json_free(j);
    if (!st && config) {
        *config = spec;
        spec = NULL;
    }
    free(spec);
    free(state);
    st_free(&f);
    if (st)
        ckpt_free(c);
    return st;
}

cohort_status ckpt_read(const cohort_run *run, const model_entry *e, ckpt *c, cohort_error *err)
{
    return read_checkpoint(run, e, c, NULL, err);
}

cohort_status ckpt_read_any(const cohort_run *run, const model_entry *e, ckpt *c, char **config,
                            cohort_error *err)
{
    return read_checkpoint(run, e, c, config, err);
}

/* ---- resuming finished models from results.json --------------------------- */

static void fill_history(model_entry *e, const json_value *h, int n)
{
    for (int i = 0; i < n && i < e->spec->epochs; i++) {
        epoch_metrics *m = &e->res.history[i];
        for (int j = 0; j < EPOCH_METRIC_COUNT; j++) {
            const metric_field *f = &epoch_metric_fields[j];
            *epoch_metric(m, f) = json_num(json_at(json_get(h, f->name), (size_t)i), NAN);
        }
    }
}

/* The record's config is the model's config now. */
static int same_config(const model_entry *e, const json_value *config)
{
    if (!e->spec->config_json)
        return 0;
    json_value *now = json_parse(e->spec->config_json, strlen(e->spec->config_json), NULL, 0);
    int same = now && json_equal(now, config);
    json_free(now);
    return same;
}

/* Take model e finished from its record r (results.json's or its journal's,
 * records/NAME.json); path names the file in messages. Returns 1 when it
 * was taken, 0 when the record is not of a finished model, -1 (with err)
 * when the model changed since. */
static int resume_record(cohort_run *run, model_entry *e, const json_value *r, const char *path,
                         cohort_error *err)
{
    const char *status = json_str(json_get(r, "status"), "");
    /* Only models that ended for good are kept; the rest train again, from
     * their checkpoint when they have one. */
    if (e->done || (strcmp(status, "ok") && strcmp(status, "diverged") && strcmp(status, "pruned")))
        return 0;
    /* pbt: a model ok before its last epoch waits at an interval, and its
     * record may hold the settings it had before an exploit; it goes on
     * from its checkpoint, which holds its state now. */
    if (run->plan->scheduler.kind == PRUNE_PBT && !strcmp(status, "ok") &&
        !json_bool(json_get(r, "stopped_early"), 0) &&
        (int)json_num(json_get(r, "epochs_run"), 0) < e->spec->epochs)
        return 0;
    if (!same_config(e, json_get(r, "config"))) {
        cohort_fail(err, COHORT_ERR_INPUT,
                    "%s: model '%s' has changed since it was trained there; train into a new "
                    "--out directory, or run without --resume to start over",
                    path, e->spec->name);
        return -1;
    }
    e->res.state = !strcmp(status, "ok") ? MODEL_OK : !strcmp(status, "pruned") ? MODEL_PRUNED
                                                                               : MODEL_DIVERGED;
    e->pruned_rung = (int)json_num(json_get(json_get(r, "pruned_at"), "rung"), 0);
    str_copy(e->res.error, sizeof e->res.error, json_str(json_get(r, "error"), ""));
    int n = (int)json_num(json_get(r, "epochs_run"), 0);
    e->res.epochs_run = n < 0 ? 0 : n > e->spec->epochs ? e->spec->epochs : n;
    fill_history(e, json_get(r, "history"), e->res.epochs_run);
    e->res.stopped_early = json_bool(json_get(r, "stopped_early"), 0);
    const json_value *b = json_get(r, "best");
    if (b && b->type == JSON_OBJ) {
        e->res.best_epoch = (int)json_num(json_get(b, "epoch"), 0);
        epoch_metrics_clear(&e->res.best);
        for (int mi = 0; mi < EPOCH_METRIC_COUNT; mi++) {
            const metric_field *f = &epoch_metric_fields[mi];
            *epoch_metric(&e->res.best, f) = json_num(json_get(b, f->name), NAN);
        }
    }
    const json_value *t = json_get(r, "test");
    e->test_loss = json_num(json_get(t, "loss"), NAN);
    e->test_accuracy = json_num(json_get(t, "accuracy"), NAN);
    e->test_mae = json_num(json_get(t, "mae"), NAN);
    e->test_rmse = json_num(json_get(t, "rmse"), NAN);
    e->res.seconds = json_num(json_get(r, "seconds"), 0);
    /* What the run that trained it planned: a fused group's share, which a
     * model alone (its layout, what e holds now) plans otherwise. */
    const json_value *planned = json_get(r, "planned_bytes");
    if (planned && planned->type == JSON_NUM && planned->num > 0)
        e->planned_bytes = (uint64_t)planned->num;
    const json_value *peak = json_get(r, "peak_bytes");
    e->peak_bytes = peak && peak->type == JSON_NULL ? RUN_PEAK_UNKNOWN
                                                    : (uint64_t)json_num(peak, 0);
    str_copy(e->weights, sizeof e->weights, json_str(json_get(r, "weights"), ""));
    str_copy(e->best_weights, sizeof e->best_weights, json_str(json_get(r, "best_weights"), ""));
    const json_value *c = json_get(r, "confusion");
    int C = run->n_classes;
    if (c && c->type == JSON_ARR && c->n == (size_t)C &&
        (e->confusion = calloc((size_t)C * (size_t)C, sizeof(int64_t))))
        for (int a = 0; a < C; a++)
            for (int bb = 0; bb < C; bb++)
                e->confusion[a * C + bb] =
                    (int64_t)json_num(json_at(json_at(c, (size_t)a), (size_t)bb), 0);
    e->done = 1;
    e->resumed = 1;
    return 1;
}

/* Whether the data of run are those the run in path trained on (its
 * results.json's "data", was): the same counts of samples in each set, of
 * features and of classes, and the same class names. The specs may differ
 * (data moved, given by another path). COHORT_ERR_INPUT naming the first
 * difference when not: the models resumed would go on with other batches,
 * and those taken finished would keep the test results of another test set. */
static cohort_status check_same_data(const cohort_run *run, const json_value *was,
                                     const char *path, cohort_error *err)
{
    strbuf b;
    sb_init(&b);
    run_data_json(&b, run);
    json_value *now = b.failed ? NULL : json_parse(b.data, b.len, NULL, 0);
    sb_free(&b);
    if (!now)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    cohort_status st = COHORT_OK;
    for (size_t i = 0; i < now->n && !st; i++) {
        const char *key = now->keys[i];
        const json_value *a = json_get(was, key), *v = &now->items[i];
        if (!strcmp(key, "train") || !strcmp(key, "test") || (a && json_equal(a, v)))
            continue;
        if (v->type == JSON_NUM && a && a->type == JSON_NUM)
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "cannot resume: %s: the run there trained on other data (%s %.0f "
                             "there, %.0f now); give it the same data and validation_split, "
                             "or train into a new --out directory",
                             path, key, a->num, v->num);
        else
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "cannot resume: %s: the run there trained on other data (other "
                             "%s); give it the same data, or train into a new --out directory",
                             path, key);
    }
    json_free(now);
    return st;
}

cohort_status run_resume(cohort_run *run, cohort_error *err)
{
    char path[2 * COHORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/results.json", run->out_dir);
    if (access(path, F_OK) != 0)
        return COHORT_OK; /* nothing to resume: train everything */
    json_value *j;
    cohort_status st = results_load(run->out_dir, &j, err);
    if (st)
        return cohort_fail_prefix(err, "cannot resume");
    const json_value *data = json_get(j, "data");
    if (data && data->type == JSON_OBJ && (st = check_same_data(run, data, path, err))) {
        json_free(j);
        return st;
    }
    /* The journal first: a model's record is written as it finishes, while
     * results.json may be up to RESULTS_EVERY seconds older. */
    for (int m = 0; m < run->n; m++) {
        model_entry *e = &run->m[m];
        char rec[2 * COHORT_PATH_MAX];
        snprintf(rec, sizeof rec, "%s/records/%s.json", run->out_dir, e->spec->name);
        char *text;
        size_t len;
        if (access(rec, F_OK) != 0 || file_read_all(rec, (size_t)64 << 20, &text, &len, NULL))
            continue;
        json_value *r = json_parse(text, len, NULL, 0);
        free(text);
        int got = r ? resume_record(run, e, r, rec, err) : 0;
        json_free(r);
        if (got < 0) {
            json_free(j);
            return COHORT_ERR_INPUT;
        }
    }
    const json_value *models = json_get(j, "models");
    for (size_t i = 0; models && i < models->n; i++) {
        const json_value *r = json_at(models, i);
        const char *name = json_str(json_get(r, "name"), "");
        int m = run_model_index(run, name);
        model_entry *e = m >= 0 ? &run->m[m] : NULL;
        if (e && resume_record(run, e, r, path, err) < 0) {
            json_free(j);
            return COHORT_ERR_INPUT;
        }
    }
    json_free(j);
    return COHORT_OK;
}

/* ---- the lock ----------------------------------------------------------------- */

cohort_status out_dir_lock(const char *dir, int *fd_out, cohort_error *err)
{
    char path[COHORT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/.lock", dir);
    /* Not followed: a link planted at DIR/.lock would have its target
     * truncated and overwritten with the pid. */
    int fd = file_open_regular(path, O_RDWR | O_CREAT | O_NOFOLLOW, err);
    if (fd < 0)
        return COHORT_ERR_IO;
    /* flock is released by the kernel when its holders die: a lock left by
     * a killed run is free again, and is simply taken over. */
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0, e = errno;
    if (!locked && e != EWOULDBLOCK) {
        close(fd);
        return cohort_fail(err, COHORT_ERR_IO,
                           "%s: cannot lock: %s (a filesystem without flock, such as Lustre "
                           "mounted without -o flock?)",
                           path, strerror(e));
    } else if (!locked) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s is in use by another cohort train (pid %s); wait for it to end, "
                           "or train into another --out directory",
                           dir, pid[0] ? pid : "unknown");
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        close(fd);
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    *fd_out = fd;
    return COHORT_OK;
}

/* Whether name is a temporary file's: PATH.tmp.PID (file_write_atomic,
 * merge) or PATH.tmp.PID.N (the data cache's). A model may be named
 * "m.tmp.1": its files end in .safetensors, .csv or .json, so they are not. */
static int is_temporary(const char *name)
{
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) {
        const char *q = p + 5;
        int dots = 0, digits = 0;
        for (; *q; q++) {
            if (*q >= '0' && *q <= '9')
                digits++;
            else if (*q == '.' && digits && !dots++)
                digits = 0;
            else
                break;
        }
        if (!*q && digits)
            return 1;
    }
    return 0;
}

void out_dir_remove_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (is_temporary(de->d_name)) {
            char p[2 * COHORT_PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
}

cohort_status run_lock(cohort_run *run, cohort_error *err)
{
    cohort_status st = out_dir_lock(run->out_dir, &run->lock_fd, err);
    if (st)
        return st;
    /* Holding the lock, any temporary file left here is from a killed run. */
    const char *subs[] = {"", "/checkpoints", "/models", "/history", "/records"};
    for (int i = 0; i < 5; i++) {
        char dir[COHORT_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s%s", run->out_dir, subs[i]);
        out_dir_remove_temporaries(dir);
    }
    return COHORT_OK;
}
