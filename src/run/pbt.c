/*
 * pbt: Population Based Training (Jaderberg et al., "Population Based
 * Training of Neural Networks", 2017). The models train in phases of
 * perturbation_interval epochs, as prune.c's rungs: every live model trains
 * to the interval's epoch (the ordinary schedule, any strategy), then the
 * models are ranked by the metric at that epoch, and each of the bottom
 * quantile takes the state of one drawn from the top quantile (exploit) and
 * a perturbation of the donor's settings of hyperparam_mutations (explore).
 * Decisions depend on the histories and the scheduler's seed alone, so they
 * are the same under every strategy and after --resume.
 *
 * The exploit goes through the checkpoints: at the end of a phase every live
 * model has one at the interval's epoch, and the recipient's is rewritten
 * from the donor's (weights, optimizer state, best weights, early-stopping
 * state, history) under the recipient's new config; the next phase resumes
 * from it like any checkpoint, fused or not. Each model keeps its own seed
 * (shuffle order, dropout masks), its own seconds, and the learning rate of
 * its new settings (reduce_lr_on_plateau starts over from it).
 *
 * The journal, DIR/pbt.json, lists the intervals decided and every exploit
 * with its values. It is written before any checkpoint is rewritten, and
 * the next phase starts only once they all are, so after a kill --resume
 * applies it to the settings (before anything is checked against them) and
 * redoes the copies of the last interval whose recipient's checkpoint has
 * not been through as many exploits as its lineage holds (the count each
 * checkpoint records): the donors still stand at that interval.
 */
#include "io/io.h"
#include "run/run.h"
#include "util/json.h"
#include "util/test_hooks.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The most epochs of any model: intervals come before it. */
static int top_epochs(const cohort_run *run)
{
    int top = 0;
    for (int i = 0; i < run->n; i++)
        if (run->m[i].spec->epochs > top)
            top = run->m[i].spec->epochs;
    return top;
}

int run_pbt_intervals(const cohort_run *run, int **epochs)
{
    int T = run->plan->scheduler.interval, top = top_epochs(run);
    int n = T > 0 && top > 1 ? (top - 1) / T : 0;
    *epochs = malloc(((size_t)n + 1) * sizeof **epochs);
    if (!*epochs)
        return -1;
    for (int k = 0; k < n; k++)
        (*epochs)[k] = (k + 1) * T;
    return n;
}

int run_pbt_quantile(const cohort_run *run, int n)
{
    /* Ray Tune's count: the quantile rounded up, at most half the models. */
    int q = (int)ceil((double)n * run->plan->scheduler.quantile - 1e-9);
    return q > n / 2 ? n / 2 : q;
}

/* ---- checks ---------------------------------------------------------------- */

/* Models a and b can take each other's state: the same layers and shapes,
 * the same optimizer and the same buffers. */
static int same_state(const model_entry *a, const model_entry *b)
{
    const model_layout *x = &a->L, *y = &b->L;
    if (a->spec->opt.kind != b->spec->opt.kind || x->n_params != y->n_params ||
        x->opt_slots != y->opt_slots || x->keep_best != y->keep_best || x->n_layers != y->n_layers)
        return 0;
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].kind != y->layers[i].kind || x->layers[i].n_params != y->layers[i].n_params ||
            x->layers[i].n_state != y->layers[i].n_state)
            return 0;
    return 1;
}

cohort_status run_check_pbt(const cohort_run *run, cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    const char *path = run->plan->path;
    if (run->opt.shard_count > 1)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s:%d: pbt exploits across the whole population, which a shard of "
                           "the plan does not hold; train it in one run",
                           path, sc->line);
    for (int i = 1; i < run->n; i++)
        if (!same_state(&run->m[0], &run->m[i]))
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s:%d: pbt copies weights and optimizer state between models, but "
                               "'%s' and '%s' differ in their layers or optimizer; give every "
                               "model of a pbt run the same layers and optimizer",
                               path, sc->line, run->m[0].spec->name, run->m[i].spec->name);
    /* No value a mutation can reach changes a model's memory plan (sgd's
     * momentum at 0 drops its velocity buffer, for one). */
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        for (int k = 0; k < sc->n_mut; k++) {
            const pbt_mutation *m = &sc->mut[k];
            double ends[PBT_MAX_CHOICES];
            int n = plan_dist_ends(m, ends);
            for (int v = 0; v < n; v++) {
                model_spec s = *e->spec;
                float *f = model_hyper_field(&s, m->path);
                if (!f)
                    continue;
                *f = (float)ends[v];
                model_layout L;
                if (model_layout_make(&s, run->in_shape, run->n_classes, 1, &L, NULL) ||
                    L.total_bytes != e->L.total_bytes || L.opt_slots != e->L.opt_slots)
                    return cohort_fail(err, COHORT_ERR_INPUT,
                                       "%s:%d: scheduler.hyperparam_mutations key '%s' at %g "
                                       "changes the memory plan of model '%s', which pbt cannot "
                                       "do while it trains; narrow the distribution%s",
                                       path, m->line, m->path, ends[v], e->spec->name,
                                       strstr(m->path, "momentum") ? " to keep momentum above 0"
                                                                   : "");
            }
        }
    }
    return COHORT_OK;
}

/* ---- settings ------------------------------------------------------------ */

/* The settings of hyperparam_mutations of e now, into v. */
static void values_of(const cohort_run *run, const model_entry *e, double *v)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    model_spec s = *e->spec;
    for (int k = 0; k < sc->n_mut; k++) {
        const float *f = model_hyper_field(&s, sc->mut[k].path);
        v[k] = f ? (double)*f : NAN;
    }
}

/* Give e the settings v: its own copy of its spec, config_json remade. */
static cohort_status set_values(const cohort_run *run, model_entry *e, const double *v,
                                cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    if (!e->own_spec) {
        if (!(e->own_spec = malloc(sizeof *e->own_spec)))
            return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
        *e->own_spec = *e->spec;
        e->own_spec->config_json = NULL;
    }
    for (int k = 0; k < sc->n_mut; k++) {
        float *f = model_hyper_field(e->own_spec, sc->mut[k].path);
        if (f && isfinite(v[k]))
            *f = (float)v[k];
    }
    char *json = model_spec_to_json(e->own_spec);
    if (!json)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    free(e->own_spec->config_json);
    e->own_spec->config_json = json;
    e->spec = e->own_spec;
    return COHORT_OK;
}

static cohort_status add_step(model_entry *e, int epoch, int from, const double *v, int n_mut,
                              cohort_error *err)
{
    pbt_step *l = realloc(e->lineage, ((size_t)e->n_lineage + 1) * sizeof *l);
    if (!l)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    e->lineage = l;
    pbt_step *s = &l[e->n_lineage++];
    memset(s, 0, sizeof *s);
    s->epoch = epoch;
    s->from = from;
    memcpy(s->values, v, (size_t)n_mut * sizeof *v);
    return COHORT_OK;
}

/* A double in [0, 1) from 53 random bits. */
static double unit_draw(rng_state *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Explore: from the donor's value v of mutation m, a new one. With
 * probability `resample` a fresh draw of m's distribution; else v times 0.8
 * or 1.2 (a choice: the option next to v's, below or above), kept in m's
 * range. The result is rounded to the float the spec holds. */
static double explore(const pbt_mutation *m, double resample, double v, rng_state *r)
{
    if (unit_draw(r) < resample)
        return (double)(float)plan_dist_draw(m, r);
    int up = (int)rng_below(r, 2);
    if (m->kind == DIST_CHOICE) {
        int at = 0;
        for (int c = 1; c < m->n_choices; c++)
            if (fabs(m->choices[c] - v) < fabs(m->choices[at] - v))
                at = c;
        at += up ? 1 : -1;
        at = at < 0 ? 0 : at >= m->n_choices ? m->n_choices - 1 : at;
        return (double)(float)m->choices[at];
    }
    double hi = m->kind == DIST_RANDINT ? m->hi - 1 : m->hi;
    v *= up ? 1.2 : 0.8;
    if (m->kind == DIST_RANDINT)
        v = floor(v + 0.5);
    v = v < m->lo ? m->lo : v > hi ? hi : v;
    return (double)(float)v;
}

/* ---- the exploit ----------------------------------------------------------- */

/* Copy donor d's checkpoint (at the interval) to recipient e, whose settings
 * are already its new ones, and d's best weights to e's. e keeps its own
 * seconds; its learning rate is its new setting's. */
static cohort_status exploit(cohort_run *run, model_entry *e, const model_entry *d,
                             cohort_error *err)
{
    ckpt c, own;
    char *own_config = NULL;
    cohort_status st = ckpt_read(run, d, &c, err);
    if (!st && !c.found)
        st = cohort_fail(err, COHORT_ERR_IO, "model '%s': its checkpoint at the pbt interval is "
                                             "missing", d->spec->name);
    if (st) {
        ckpt_free(&c);
        return cohort_fail_prefix(err, "pbt");
    }
    /* e's own checkpoint, whatever config it was written for: its seconds. */
    double seconds = e->res.seconds;
    if (!ckpt_read_any(run, e, &own, &own_config, NULL) && own.found)
        seconds = own.res.seconds;
    free(own_config);
    ckpt_free(&own);

    size_t P = e->L.n_params;
    float *data[4] = {c.params, c.params + P, c.params + 2 * P, c.params + 3 * P};
    train_result r = c.res;
    r.history = c.history;
    r.seconds = seconds;
    r.lr = NAN; /* the rate of e's settings, as at a fresh start */
    r.plateau_best = NAN;
    r.plateau_wait = r.plateau_cooldown = 0;
    r.state = MODEL_OK;
    /* The best weights first, the checkpoint last: a checkpoint with e's new
     * config means the exploit is complete. */
    char src[2 * COHORT_PATH_MAX];
    snprintf(src, sizeof src, "%s/models/%s.best.safetensors", run->out_dir, d->spec->name);
    char rel[COHORT_PATH_MAX] = "";
    if (r.best_epoch > 0 && access(src, F_OK) == 0) {
        float *host = malloc((P ? P : 1) * sizeof *host);
        st = host ? model_load_params(d->spec, &d->L, src, host, err)
                  : cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
        if (!st)
            st = run_write_weights(run, e, host, 1, FILE_SYNC_DATA | FILE_SYNC_NAME, rel, err);
        free(host);
    } else {
        char dst[2 * COHORT_PATH_MAX];
        snprintf(dst, sizeof dst, "%s/models/%s.best.safetensors", run->out_dir, e->spec->name);
        unlink(dst);
    }
    if (!st)
        st = ckpt_write_state(run, e, data, c.have, &r, c.epoch, c.step, err);
    if (!st && test_hook_pbt("keep")) {
        /* The state the exploit gave e, kept beside its checkpoint (which
         * the next epoch replaces by a rename, so a link stays as it is). */
        char ck[2 * COHORT_PATH_MAX], keep[2 * COHORT_PATH_MAX + 32];
        snprintf(ck, sizeof ck, "%s/checkpoints/%s.safetensors", run->out_dir, e->spec->name);
        snprintf(keep, sizeof keep, "%s/checkpoints/%s.exploit-%d.safetensors", run->out_dir,
                 e->spec->name, c.epoch);
        unlink(keep);
        if (link(ck, keep) != 0)
            st = cohort_fail(err, COHORT_ERR_IO, "%s: cannot link: %s", keep, strerror(errno));
    }
    if (!st) {
        ckpt_start_from(run, e, &c);
        e->res.seconds = seconds;
        e->res.stopped_early = 0;
        str_copy(e->best_weights, sizeof e->best_weights, rel);
    }
    ckpt_free(&c);
    return st;
}

/* ---- the journal ------------------------------------------------------------ */

static void journal_path(const cohort_run *run, char *buf, size_t n)
{
    snprintf(buf, n, "%s/pbt.json", run->out_dir);
}

/* {"mutation": value, ...} of step s. */
static void values_json(strbuf *b, const cohort_run *run, const pbt_step *s)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    sb_puts(b, "{");
    for (int k = 0; k < sc->n_mut; k++) {
        sb_puts(b, k ? ", " : "");
        sb_json_str(b, sc->mut[k].path);
        sb_puts(b, ": ");
        if (isfinite(s->values[k]))
            sb_json_float(b, (float)s->values[k]);
        else
            sb_puts(b, "null");
    }
    sb_puts(b, "}");
}

void run_pbt_lineage_json(strbuf *b, const cohort_run *run, const model_entry *e)
{
    sb_puts(b, "[");
    for (int i = 0; i < e->n_lineage; i++) {
        const pbt_step *s = &e->lineage[i];
        sb_printf(b, "%s{\"epoch\": %d, \"from\": ", i ? ", " : "", s->epoch);
        sb_json_str(b, run->m[s->from].spec->name);
        sb_puts(b, ", \"values\": ");
        values_json(b, run, s);
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
}

/* DIR/pbt.json from the lineages: the intervals decided, and every exploit
 * in the order of its interval, then of the models. */
static cohort_status journal_write(cohort_run *run, const int *at, cohort_error *err)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"format\": \"cohort-pbt\", \"decided\": [");
    for (int k = 0; k < run->pbt_decided; k++)
        sb_printf(&b, "%s%d", k ? ", " : "", at[k]);
    sb_puts(&b, "],\n \"exploits\": [");
    int first = 1;
    for (int k = 0; k < run->pbt_decided; k++)
        for (int i = 0; i < run->n; i++)
            for (int j = 0; j < run->m[i].n_lineage; j++) {
                const pbt_step *s = &run->m[i].lineage[j];
                if (s->epoch != at[k])
                    continue;
                sb_puts(&b, first ? "\n  {\"model\": " : ",\n  {\"model\": ");
                first = 0;
                sb_json_str(&b, run->m[i].spec->name);
                sb_printf(&b, ", \"epoch\": %d, \"from\": ", s->epoch);
                sb_json_str(&b, run->m[s->from].spec->name);
                sb_puts(&b, ", \"values\": ");
                values_json(&b, run, s);
                sb_puts(&b, "}");
            }
    sb_puts(&b, "]}\n");
    char path[COHORT_PATH_MAX + 16];
    journal_path(run, path, sizeof path);
    cohort_status st = b.failed ? cohort_fail(err, COHORT_ERR_NOMEM, "out of memory")
                                : file_write_atomic(path, b.data, b.len, err);
    sb_free(&b);
    return st;
}

static model_entry *by_name(cohort_run *run, const char *name)
{
    int i = run_model_index(run, name);
    return i >= 0 ? &run->m[i] : NULL;
}

cohort_status run_pbt_replay(cohort_run *run, cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    char path[COHORT_PATH_MAX + 16];
    journal_path(run, path, sizeof path);
    if (access(path, F_OK) != 0)
        return COHORT_OK; /* killed before the first interval */
    char *text;
    size_t len;
    cohort_status st = file_read_all(path, (size_t)256 << 20, &text, &len, err);
    if (st)
        return st;
    char jerr[128];
    json_value *j = json_parse(text, len, jerr, sizeof jerr);
    free(text);
    int *at = NULL, n_at = run_pbt_intervals(run, &at);
    const json_value *decided = json_get(j, "decided"), *ex = json_get(j, "exploits");
    if (n_at < 0)
        st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    else if (!j || strcmp(json_str(json_get(j, "format"), ""), "cohort-pbt") || !decided ||
             decided->type != JSON_ARR || !ex || ex->type != JSON_ARR)
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: not a pbt journal%s%s", path, j ? "" : ": ",
                         j ? "" : jerr);
    else if (decided->n > (size_t)n_at)
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: %zu intervals decided, but this plan has "
                                                "%d; train into a new --out directory",
                         path, decided->n, n_at);
    for (size_t k = 0; !st && k < decided->n; k++)
        if ((int)json_num(json_at(decided, k), -1) != at[k])
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s: decided at epoch %g, but this plan's "
                                                    "interval %zu is at epoch %d; train into a "
                                                    "new --out directory",
                             path, json_num(json_at(decided, k), -1), k + 1, at[k]);
    int last = !st && decided->n ? at[decided->n - 1] : -1;
    for (size_t x = 0; !st && x < ex->n; x++) {
        const json_value *r = json_at(ex, x), *vals = json_get(r, "values");
        model_entry *e = by_name(run, json_str(json_get(r, "model"), ""));
        model_entry *d = by_name(run, json_str(json_get(r, "from"), ""));
        int epoch = (int)json_num(json_get(r, "epoch"), -1);
        if (!e || !d || e == d || epoch < 1 || epoch > last || !vals || vals->type != JSON_OBJ) {
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s: exploit %zu names a model or an epoch "
                                                    "this plan does not have; train into a new "
                                                    "--out directory",
                             path, x + 1);
            break;
        }
        double v[PBT_MAX_KEYS];
        for (int k = 0; k < sc->n_mut; k++)
            v[k] = json_num(json_get(vals, sc->mut[k].path), NAN);
        if (!(st = set_values(run, e, v, err)))
            st = add_step(e, epoch, d->index, v, sc->n_mut, err);
    }
    /* The last interval's copies a kill may have cut short. */
    for (int i = 0; !st && i < run->n; i++) {
        model_entry *e = &run->m[i];
        const pbt_step *s = e->n_lineage ? &e->lineage[e->n_lineage - 1] : NULL;
        if (!s || s->epoch != last)
            continue;
        ckpt c;
        char *config = NULL;
        st = ckpt_read_any(run, e, &c, &config, err);
        /* Done when the checkpoint's state went through every exploit of
         * the lineage. A checkpoint older than that record: by its config,
         * which is right unless the new settings equal the old. */
        int done = !st && c.found &&
                   (c.exploits >= 0 ? c.exploits == e->n_lineage
                                    : config && !strcmp(config, e->spec->config_json));
        free(config);
        ckpt_free(&c);
        if (!st && !done)
            st = exploit(run, e, &run->m[s->from], err);
    }
    if (!st)
        run->pbt_decided = (int)decided->n;
    json_free(j);
    free(at);
    return st;
}

/* ---- the phases --------------------------------------------------------------- */

typedef struct ranked {
    double v;
    int i;
} ranked;

static int maximize_sort;
static int by_value(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    int xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn)
        return xn - yn; /* NaN last */
    if (!xn && x->v != y->v)
        return (maximize_sort ? x->v > y->v : x->v < y->v) ? -1 : 1;
    return x->i - y->i; /* ties: the plan's order */
}

/* The interval at epoch R (its k-th, 0-based): rank the live models at R,
 * journal the exploits, then make them. */
static cohort_status decide(cohort_run *run, const unsigned char *live, const int *at, int k,
                            cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    int R = at[k];
    const metric_field *f = epoch_metric_find(sc->metric);
    ranked *r = malloc(((size_t)run->n + 1) * sizeof *r);
    if (!r || !f) {
        free(r);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        if (live[i] && e->res.epochs_run == R)
            r[n++] = (ranked){epoch_metric_get(&e->res.history[R - 1], f), i};
    }
    maximize_sort = sc->maximize;
    qsort(r, (size_t)n, sizeof *r, by_value);
    int q = run_pbt_quantile(run, n);
    cohort_status st = COHORT_OK;
    /* Draws first, from the donors' settings before any change; one stream
     * per (interval, recipient), so a draw depends on nothing else. */
    for (int b = n - q; b < n; b++) {
        const model_entry *e = &run->m[r[b].i];
        rng_state g;
        rng_seed(&g, sc->seed, (uint64_t)R * (uint64_t)(COHORT_MAX_MODELS + 1) +
                                   (uint64_t)e->plan_index);
        int donor = r[rng_below(&g, (uint64_t)q)].i;
        double nv[PBT_MAX_KEYS], cur[PBT_MAX_KEYS];
        values_of(run, &run->m[donor], cur);
        for (int m = 0; m < sc->n_mut; m++)
            nv[m] = isfinite(cur[m]) ? explore(&sc->mut[m], sc->resample, cur[m], &g) : NAN;
        st = add_step(&run->m[r[b].i], R, donor, nv, sc->n_mut, err);
        if (st)
            break;
    }
    if (!st) {
        run->pbt_decided = k + 1;
        st = journal_write(run, at, err);
    }
    for (int b = n - q; !st && b < n; b++) {
        model_entry *e = &run->m[r[b].i];
        const pbt_step *s = &e->lineage[e->n_lineage - 1];
        pthread_mutex_lock(&run->lock); /* a poller reads the entry */
        if (!(st = set_values(run, e, s->values, err)))
            st = exploit(run, e, &run->m[s->from], err);
        pthread_mutex_unlock(&run->lock);
        if (!st && k == 0 && test_hook_pbt("crash"))
            raise(SIGKILL);
    }
    free(r);
    return st;
}

cohort_status run_scheduler_pbt(cohort_run *run, cohort_error *err)
{
    if (!run->out_dir[0])
        return cohort_fail(err, COHORT_ERR_USAGE, "pbt copies models through their checkpoints "
                                                  "and needs an output directory");
    int *at = NULL, n_at = run_pbt_intervals(run, &at), top = top_epochs(run);
    unsigned char *live = calloc((size_t)run->n + 1, 1);
    if (n_at < 0 || !live) {
        free(at);
        free(live);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    /* Live: every model not finished for good. */
    for (int i = 0; i < run->n; i++)
        live[i] = !run->m[i].done;
    cohort_status st = COHORT_OK;
    for (int k = 0; k <= n_at && !st; k++) {
        int R = k < n_at ? at[k] : top;
        /* A model already there (resumed at or past it) waits: it trains
         * no epoch in this phase, and goes on in a later one. The last
         * phase has no later one: a model resumed at its last epoch ends in
         * it (its weights, its record), as prune.c's last rung does. */
        st = scheduler_phase(run, live, R, k < n_at, err);
        if (st || run->stop)
            break;
        if (k < n_at && k >= run->pbt_decided)
            st = decide(run, live, at, k, err);
        if (st && file_out_of_space()) {
            /* The journal or a copy found the disk full: the run stops as
             * at any other full disk (exit 1, what is stale, --resume),
             * and --resume makes the copies the stop cut short. */
            pthread_mutex_lock(&run->lock);
            run->disk_full = 1;
            run->stop = 1;
            pthread_mutex_unlock(&run->lock);
            st = COHORT_OK;
            break;
        }
    }
    /* Stopped by Ctrl-C (or a full disk) between intervals: the models
     * waiting at one go on with --resume. */
    scheduler_mark_waiting(run, live,
                       run->disk_full ? "stopped at an interval of pbt: the disk is full; "
                                        "--resume continues from its last checkpoint"
                                      : "stopped at an interval of pbt");
    free(at);
    free(live);
    return st;
}
