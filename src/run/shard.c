/* Shares of a plan: the split by cost, a run's share, and merging shares' results.json. */
#include "run/shard.h"
#include "util/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the split ---------------------------------------------------------------- */

typedef struct cost_item {
    int i;
    double cost;
    uint64_t bytes;
} cost_item;

static int by_cost(const void *pa, const void *pb)
{
    const cost_item *a = pa, *b = pb;
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    return a->i - b->i;
}

cohort_status shard_split(const cohort_run *run, int n, int *share, cohort_error *err)
{
    if (n < 1 || n > SHARD_MAX)
        return cohort_fail(err, COHORT_ERR_USAGE, "cannot split the models into %d shares "
                           "(1 to %d)", n, SHARD_MAX);
    cost_item *it = malloc((size_t)(run->n ? run->n : 1) * sizeof *it);
    double *load = calloc((size_t)n, sizeof *load);
    uint64_t *mem = calloc((size_t)n, sizeof *mem);
    if (!it || !load || !mem) {
        free(it);
        free(load);
        free(mem);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        it[i].i = i;
        it[i].cost = model_train_flops(&e->L, run->train.n) * e->spec->epochs;
        it[i].bytes = e->planned_bytes;
    }
    qsort(it, (size_t)run->n, sizeof *it, by_cost);
    for (int a = 0; a < run->n; a++) {
        int best = 0;
        for (int s = 1; s < n; s++)
            if (load[s] < load[best] || (load[s] == load[best] && mem[s] < mem[best]))
                best = s;
        share[it[a].i] = best;
        load[best] += it[a].cost;
        mem[best] += it[a].bytes;
    }
    free(it);
    free(load);
    free(mem);
    return COHORT_OK;
}

static void shard_dir_path(char *path, size_t n, const char *dir)
{
    snprintf(path, n, "%s/.shard", dir);
}

cohort_status shard_dir_check(const char *dir, int index, int count, cohort_error *err)
{
    char path[COHORT_PATH_MAX + 16], *text = NULL;
    size_t len = 0;
    shard_dir_path(path, sizeof path, dir);
    if (access(path, F_OK) != 0)
        return COHORT_OK;
    cohort_error lerr;
    int i = -1, n = 0;
    if (file_read_all(path, 64, &text, &len, &lerr) != COHORT_OK ||
        sscanf(text, "%d/%d", &i, &n) != 2 || i < 0 || n < 1 || i >= n) {
        free(text);
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: not a share 'I/N' as cohort writes it; "
                           "a directory of a --shard run holds its share there", path);
    }
    free(text);
    if (i == index && n == count)
        return COHORT_OK;
    if (count == 0)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s holds share %d/%d of the plan's models: resume it with --shard "
                           "%d/%d (without it the whole plan would train there), or merge the "
                           "shares (cohort merge) and resume the merged directory",
                           dir, i, n, i, n);
    return cohort_fail(err, COHORT_ERR_USAGE,
                       "%s holds share %d/%d of the plan's models, not %d/%d: resume it with "
                       "--shard %d/%d, or resume share %d/%d in its own directory",
                       dir, i, n, index, count, i, n, index, count);
}

cohort_status shard_dir_mark(const char *dir, int index, int count, cohort_error *err)
{
    char path[COHORT_PATH_MAX + 16], text[32];
    shard_dir_path(path, sizeof path, dir);
    if (count == 0) {
        unlink(path);
        return COHORT_OK;
    }
    int len = snprintf(text, sizeof text, "%d/%d\n", index, count);
    return file_write_atomic(path, text, (size_t)len, err);
}

cohort_status run_shard_select(cohort_run *run, cohort_error *err)
{
    int index = run->opt.shard_index, count = run->opt.shard_count;
    if (count == 0 && index == 0)
        return COHORT_OK;
    if (count < 1 || count > SHARD_MAX || index < 0)
        return cohort_fail(err, COHORT_ERR_USAGE, "shard %d/%d: the count must be 1 to %d and "
                           "the index at least 0", index, count, SHARD_MAX);
    if (index >= count)
        return cohort_fail(err, COHORT_ERR_USAGE, "shard %d/%d: index must be below the count",
                           index, count);
    int *share = malloc((size_t)(run->n ? run->n : 1) * sizeof *share);
    if (!share)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    cohort_status st = shard_split(run, count, share, err);
    if (st) {
        free(share);
        return st;
    }
    int kept = 0;
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        if (share[i] != index) {
            free(e->res.history);
            free(e->confusion);
            continue;
        }
        run->m[kept] = *e;
        /* Reports name a model by its place in run->m. */
        run->m[kept].index = kept;
        kept++;
    }
    free(share);
    run->n = kept;
    return COHORT_OK;
}

/* ---- writing JSON back ---------------------------------------------------------- */

/* The shortest of %.9g, %.15g, %.17g that reads back as v: numbers
 * written by cohort come back as they were. */
static void put_num(strbuf *b, double v)
{
    if (!isfinite(v)) {
        sb_puts(b, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        sb_printf(b, "%.0f", v);
        return;
    }
    static const int digits[] = {9, 15, 17};
    char buf[64];
    for (int i = 0; i < 3; i++) {
        str_format(buf, sizeof buf, "%.*g", digits[i], v);
        if (str_to_double(buf, NULL) == v)
            break;
    }
    sb_puts(b, buf);
}

static void put_value(strbuf *b, const json_value *v)
{
    switch (v->type) {
    case JSON_NULL: sb_puts(b, "null"); return;
    case JSON_BOOL: sb_puts(b, v->boolean ? "true" : "false"); return;
    case JSON_NUM: put_num(b, v->num); return;
    case JSON_STR: sb_json_str(b, v->str); return;
    case JSON_ARR:
        sb_puts(b, "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                sb_puts(b, ", ");
            put_value(b, &v->items[i]);
        }
        sb_puts(b, "]");
        return;
    case JSON_OBJ:
        sb_puts(b, "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                sb_puts(b, ", ");
            sb_json_str(b, v->keys[i]);
            sb_puts(b, ": ");
            put_value(b, &v->items[i]);
        }
        sb_puts(b, "}");
        return;
    }
}

/* A scheduler's pruned model ended too: its record is written when it is
 * stopped, and --resume keeps it. */
static int ended(const json_value *r)
{
    const char *s = json_str(json_get(r, "status"), "");
    return !strcmp(s, "ok") || !strcmp(s, "pruned") || !strcmp(s, "diverged");
}

/* A model record, one member a line, as results.json has it. */
static void put_record(strbuf *b, const json_value *r, const shard_source *src)
{
    const char *st = json_str(json_get(r, "status"), "");
    int fail = src->unfinished && !ended(r) && strcmp(st, "failed") != 0;
    sb_puts(b, "    {");
    int first = 1;
    for (size_t i = 0; i < r->n; i++) {
        const char *k = r->keys[i];
        if (src->rank >= 0 && !strcmp(k, "rank"))
            continue;
        sb_puts(b, first ? "\n      " : ",\n      ");
        first = 0;
        sb_json_str(b, k);
        sb_puts(b, ": ");
        if (fail && !strcmp(k, "status"))
            sb_json_str(b, "failed");
        else if (fail && !strcmp(k, "error"))
            sb_json_str(b, src->unfinished);
        else
            put_value(b, &r->items[i]);
        if (src->rank >= 0 && !strcmp(k, "device"))
            sb_printf(b, ",\n      \"rank\": %d", src->rank);
    }
    sb_puts(b, "\n    }");
}


/* ---- merging -------------------------------------------------------------------- */

typedef struct rec {
    const json_value *r;
    const char *name;
    int src;
    int plan_index;  /* -1 when the record does not say */
    int order;       /* of appearance */
} rec;

static int by_plan_index(const void *pa, const void *pb)
{
    const rec *a = pa, *b = pb;
    if (a->plan_index != b->plan_index)
        return a->plan_index < b->plan_index ? -1 : 1;
    return a->order - b->order;
}

static int int_of(const json_value *v, int fallback)
{
    double d = json_num(v, NAN);
    return isfinite(d) && d >= 0 && d < 1e9 && d == floor(d) ? (int)d : fallback;
}

/* Every source is the results of one plan, each record named; *total
 * gets how many records they hold. */
static cohort_status check_sources(const shard_source *src, int n, size_t *total,
                                   cohort_error *err)
{
    const json_value *first = src[0].results;
    *total = 0;
    for (int s = 0; s < n; s++) {
        const json_value *models = json_get(src[s].results, "models");
        if (!src[s].results || src[s].results->type != JSON_OBJ || !models ||
            models->type != JSON_ARR)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: not the results of cohort train (no "
                               "\"models\" array)", src[s].name);
        for (size_t i = 0; i < models->n; i++)
            if (!json_str(json_get(&models->items[i], "name"), NULL))
                return cohort_fail(err, COHORT_ERR_INPUT, "%s: model record %zu has no name",
                                   src[s].name, i);
        const char *p0 = json_str(json_get(first, "plan"), ""),
                   *ps = json_str(json_get(src[s].results, "plan"), "");
        if (strcmp(p0, ps))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s and %s are shards of different plans "
                               "('%s' and '%s')", src[0].name, src[s].name, p0, ps);
        if (!json_equal(json_get(first, "data"), json_get(src[s].results, "data")))
            return cohort_fail(err, COHORT_ERR_INPUT, "%s and %s are shards of different plans: "
                               "their data differ", src[0].name, src[s].name);
        *total += models->n;
    }
    return COHORT_OK;
}

/* The records of every source into r (*nr of them), each model once: a
 * model in two sources is an error, or with SHARD_MERGE_PREFER_ENDED the
 * record that ended wins. *plan_models: the plan's model count where the
 * records say; *all_indexed: every record has its plan_index. */
static cohort_status collect_records(const shard_source *src, int n, int flags, rec *r, int *nr,
                                     int *plan_models, int *all_indexed, cohort_error *err)
{
    cohort_status st = COHORT_OK;
    for (int s = 0; s < n && !st; s++) {
        const json_value *models = json_get(src[s].results, "models");
        for (size_t i = 0; i < models->n && !st; i++) {
            const json_value *m = &models->items[i];
            rec x = {m, json_str(json_get(m, "name"), ""), s, int_of(json_get(m, "plan_index"), -1),
                     *nr};
            *all_indexed &= x.plan_index >= 0;
            int pm = int_of(json_get(m, "plan_models"), 0);
            if (pm && *plan_models && pm != *plan_models)
                st = cohort_fail(err, COHORT_ERR_INPUT, "%s and %s are shards of different "
                                 "plans: of %d and of %d models", src[0].name, src[s].name,
                                 *plan_models, pm);
            if (pm)
                *plan_models = pm;
            int dup = -1;
            for (int k = 0; k < *nr && dup < 0 && !st; k++) {
                if (!strcmp(r[k].name, x.name))
                    dup = k;
                else if (x.plan_index >= 0 && r[k].plan_index == x.plan_index)
                    st = cohort_fail(err, COHORT_ERR_INPUT, "%s and %s are shards of different "
                                     "plans: model %d of the plan is '%s' in one, '%s' in the "
                                     "other", src[r[k].src].name, src[s].name, x.plan_index,
                                     r[k].name, x.name);
            }
            if (st)
                break;
            if (dup >= 0 && !(flags & SHARD_MERGE_PREFER_ENDED)) {
                st = cohort_fail(err, COHORT_ERR_INPUT, "model '%s' is in both %s and %s: merge "
                                 "shards of one split, each once", x.name, src[r[dup].src].name,
                                 src[s].name);
                break;
            }
            if (dup >= 0) {
                if (ended(m) || !ended(r[dup].r)) {
                    x.order = r[dup].order;
                    r[dup] = x;
                }
                continue;
            }
            r[(*nr)++] = x;
        }
    }
    return st;
}

/* The merged results.json into out: the first source's keys (not how an
 * earlier merge was made), extra, and the records; *not_ok and *pruned
 * count them as cohort train's exit status does. */
static void write_merged(strbuf *out, const shard_source *src, const char *extra, const rec *r,
                         int nr, int *not_ok, int *pruned)
{
    const json_value *first = src[0].results;
    sb_puts(out, "{\n");
    for (size_t i = 0; i < first->n; i++) {
        /* How an earlier merge was made is not this one's. */
        const char *k = first->keys[i];
        if (!strcmp(k, "models") || !strcmp(k, "ranks") || !strcmp(k, "merged_from"))
            continue;
        sb_puts(out, "  ");
        sb_json_str(out, first->keys[i]);
        sb_puts(out, ": ");
        put_value(out, &first->items[i]);
        sb_puts(out, ",\n");
    }
    if (extra && *extra)
        sb_printf(out, "  %s,\n", extra);
    sb_puts(out, "  \"models\": [\n");
    *not_ok = *pruned = 0;
    for (int k = 0; k < nr; k++) {
        if (k)
            sb_puts(out, ",\n");
        const shard_source *from = &src[r[k].src];
        put_record(out, r[k].r, from);
        /* As cohort train's exit status counts them: pruned is a success. */
        const char *s = json_str(json_get(r[k].r, "status"), "");
        int good = (!strcmp(s, "ok") || !strcmp(s, "pruned")) &&
                   !(from->unfinished && !ended(r[k].r));
        *not_ok += !good;
        *pruned += good && !strcmp(s, "pruned");
    }
    sb_puts(out, "\n  ]\n}\n");
}

/* The plan's models in none of the records, into info. */
static void note_missing(shard_merge_info *info, const rec *r, int nr, int plan_models)
{
    for (int p = 0; p < plan_models; p++) {
        int found = 0;
        for (int k = 0; k < nr && !found; k++)
            found = r[k].plan_index == p;
        if (found)
            continue;
        size_t len = strlen(info->missing_list);
        if (len + 16 < sizeof info->missing_list)
            snprintf(info->missing_list + len, sizeof info->missing_list - len, "%s%d",
                     info->missing ? ", " : "", p);
        else if (!strstr(info->missing_list, "..."))
            str_copy(info->missing_list + len, sizeof info->missing_list - len, ", ...");
        info->missing++;
    }
}

cohort_status shard_merge(const shard_source *src, int n, int flags, const char *extra,
                          strbuf *out, shard_merge_info *info, cohort_error *err)
{
    if (n < 1)
        return cohort_fail(err, COHORT_ERR_USAGE, "nothing to merge");
    size_t total;
    cohort_status st = check_sources(src, n, &total, err);
    if (st)
        return st;
    rec *r = calloc(total ? total : 1, sizeof *r);
    if (!r)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    int nr = 0, plan_models = 0, all_indexed = 1;
    st = collect_records(src, n, flags, r, &nr, &plan_models, &all_indexed, err);
    if (st) {
        free(r);
        return st;
    }
    /* Without every plan_index, the order of appearance (r's order) stays. */
    if (all_indexed)
        qsort(r, (size_t)nr, sizeof *r, by_plan_index);
    size_t old_len = out->len;
    int not_ok, pruned;
    write_merged(out, src, extra, r, nr, &not_ok, &pruned);
    if (out->failed) {
        out->len = old_len;
        free(r);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory merging results");
    }
    if (info) {
        memset(info, 0, sizeof *info);
        info->models = nr;
        info->not_ok = not_ok;
        info->pruned = pruned;
        info->plan_models = plan_models;
        note_missing(info, r, nr, plan_models);
    }
    free(r);
    return COHORT_OK;
}

/* ---- launched by MPI? ------------------------------------------------------------ */

int mpi_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                 "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return 1;
    }
    return 0;
}
