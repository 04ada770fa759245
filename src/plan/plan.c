/* plan: the public API of plans (cohort_plan_parse, _load, _free and the
 * accessors) and the order of the stages that check one: the top's keys, data,
 * strategy, devices, the scheduler, the models, reported together (errors.c).
 * Its text must be UTF-8 and a plan. */
#include "plan/plan_impl.h"

#include <stdlib.h>
#include <string.h>

static const char *const top_keys[] = {"data",    "defaults", "models",      "sweep", "search",
                                       "scheduler",
                                       "devices", "strategy", "shared_order", NULL};

static const char *const strategy_names[] = {"auto", "sequential", "threads", "processes",
                                             "fused"};

/* Index of s in the strategy names, or -1 when unknown. */
int strategy_parse(const char *s)
{
    for (int i = 0; i < COUNT(strategy_names); i++)
        if (strcmp(s, strategy_names[i]) == 0)
            return i;
    return -1;
}

/* Name of a strategy ("auto", "sequential", ...); "unknown" for a bad value. */
const char *cohort_strategy_str(cohort_strategy s)
{
    if ((int)s >= 0 && (int)s < COUNT(strategy_names))
        return strategy_names[s];
    return "unknown";
}

/* "dir/seed.yaml" -> "seed". */
static void plan_name_from_path(const char *path, char *out, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    str_copy(out, size, base[0] ? base : "plan");
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = 0;
}

/* The top's keys. A model's setting there (--set epochs=1) is one for
 * defaults or a model, whatever key of the top it looks like. */
static cohort_status check_top_keys(const yctx *c, const ynode *root)
{
    for (size_t i = 0; i < root->n; i++) {
        const char *k = root->keys[i]->str;
        if (!plan_key_in(top_keys, k) && plan_key_in(plan_model_keys, k))
            return ynode_fail(c, root->keys[i], "unknown key '%s' at the top of the plan (did you "
                                                "mean 'defaults.%s'? a model's setting goes in "
                                                "defaults, for every model, or in a model)",
                              k, k);
    }
    return plan_check_keys(c, root, top_keys, "at the top of the plan");
}

/* The file's top holds no key of a plan, nor one close to a plan's: it is
 * some other file (`cohort plan /etc/shadow`), whose text is not quoted. */
static int not_a_plan(const ynode *root)
{
    for (size_t i = 0; i < root->n; i++)
        if (plan_key_in(top_keys, root->keys[i]->str) ||
            ysuggest(root->keys[i]->str, top_keys, plan_key_count(top_keys)))
            return 0;
    return root->n > 0;
}

static cohort_status plan_build(const yctx *c, ynode *root, const char *const *overrides,
                                int n_overrides, cohort_plan *plan)
{
    cohort_status st;
    if (not_a_plan(root))
        return ynode_fail(c, root, "this is not a plan: none of its top keys is a plan's (data, "
                                   "defaults, models, sweep, search, scheduler, devices, "
                                   "strategy, shared_order)");
    for (int i = 0; i < n_overrides; i++) {
        if (!overrides[i])
            return cohort_fail(c->err, COHORT_ERR_USAGE, "override %d is NULL", i);
        if ((st = plan_apply_override(c, root, overrides[i])))
            return st;
    }
    /* The stages below report their errors together (plan_errs); each
     * runs whether or not an earlier one failed, but for what needs it. */
    yfailed at = {0};
    yctx sc = {c->file, c->err, &at};
    plan_errs pe = {0};
    const ynode *v;
    int models_built = 0;
    if ((st = PLAN_STAGE(&pe, &sc, check_top_keys(&sc, root))))
        goto out;
    if ((st = PLAN_STAGE(&pe, &sc, plan_parse_data(&sc, root, &plan->data))))
        goto out;
    /* A data section in error: the models and the scheduler are checked as
     * if it had validation data, so that they add no error about it. */
    if (pe.n)
        plan->data.validation_split = 0.5;
    if ((v = ymap_get(root, "strategy"))) {
        int s = 0;
        if ((st = PLAN_STAGE(&pe, &sc,
                             yget_enum(&sc, v, "strategy", strategy_names,
                                       COUNT(strategy_names), &s))))
            goto out;
        plan->strategy = (cohort_strategy)s;
    }
    if ((v = ymap_get(root, "shared_order")) &&
        (st = PLAN_STAGE(&pe, &sc,
                         yget_bool(&sc, v, "shared_order", &plan->shared_order))))
        goto out;
    if ((st = PLAN_STAGE(&pe, &sc, plan_parse_devices(&sc, root, plan))))
        goto out;
    int scheduler_errors = pe.n;
    if ((st = PLAN_STAGE(&pe, &sc, plan_parse_scheduler(&sc, root, plan))))
        goto out;
    int scheduler_ok = pe.n == scheduler_errors;
    if ((st = plan_build_models(&sc, &pe, root, plan, &models_built)))
        goto out;
    if (scheduler_ok && models_built)
        st = PLAN_STAGE(&pe, &sc, plan_check_mutation_keys(&sc, root, plan));
    if (!st && !pe.n)
        st = plan_warn_unused_defaults(&sc, root, plan);
out:
    if (st) {
        for (int i = 0; i < pe.kept; i++)
            free(pe.e[i].msg);
        return st;
    }
    return plan_errs_finish(&pe, &sc);
}

/* "UTF-16"/"UTF-32" and the byte order when text is in one of them (by its
 * byte order mark, or the zero bytes that ASCII text has in them), else
 * NULL. libyaml would read UTF-16 with a mark, but the plan's text is kept
 * and copied into the run's folder as a C string, which UTF-16 is not. */
static const char *wide_encoding(const char *text, size_t len)
{
    const unsigned char *u = (const unsigned char *)text;
    unsigned char b[4] = {0};
    memcpy(b, u, len < 4 ? len : 4);
    /* An ASCII character, as the first of a plan's is. */
    int a0 = b[0] == '\t' || b[0] == '\n' || b[0] == '\r' || (b[0] >= 0x20 && b[0] < 0x7F);
    int a1 = b[1] == '\t' || b[1] == '\n' || b[1] == '\r' || (b[1] >= 0x20 && b[1] < 0x7F);
    int a3 = b[3] == '\t' || b[3] == '\n' || b[3] == '\r' || (b[3] >= 0x20 && b[3] < 0x7F);
    if (len >= 4 && ((!b[0] && !b[1] && b[2] == 0xFE && b[3] == 0xFF) ||
                     (!b[0] && !b[1] && !b[2] && a3)))
        return "UTF-32 (big-endian)";
    if (len >= 4 && ((b[0] == 0xFF && b[1] == 0xFE) || (a0 && !b[1])) && !b[2] && !b[3])
        return "UTF-32 (little-endian)";
    if (len >= 2 && ((b[0] == 0xFE && b[1] == 0xFF) || (!b[0] && a1)))
        return "UTF-16 (big-endian)";
    if (len >= 2 && ((b[0] == 0xFF && b[1] == 0xFE) || (a0 && !b[1])))
        return "UTF-16 (little-endian)";
    return NULL;
}

/* Parse plan text; see cohort.h. On error *out is NULL and nothing is kept. */
cohort_status cohort_plan_parse(const char *text, size_t len, const char *name,
                                const char *const *overrides, int n_overrides,
                                cohort_plan **out, cohort_error *err)
{
    if (out)
        *out = NULL;
    if (!out || (!text && len) || n_overrides < 0 || (n_overrides > 0 && !overrides))
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_plan_parse: invalid arguments");
    if (!text)
        text = "";
    if (!name)
        name = "<plan>";
    if (len > COHORT_PLAN_MAX_BYTES)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: the plan is %zu bytes, more than the %u "
                                                  "allowed",
                           name, len, COHORT_PLAN_MAX_BYTES);
    const char *wide = wide_encoding(text, len);
    if (wide)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: the plan is %s text; cohort reads plans in "
                                                  "UTF-8 (or ASCII): save it as UTF-8, like "
                                                  "iconv -f %.6s -t UTF-8",
                           name, wide, wide);
    cohort_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", name);
    if (str_copy(plan->path, sizeof plan->path, name)) {
        free(plan);
        return cohort_fail(err, COHORT_ERR_INPUT, "%.200s...: the path is too long", name);
    }
    plan_name_from_path(name, plan->name, sizeof plan->name);
    yctx c = {name, err, NULL};
    plan->source = malloc(len + 1);
    if (!plan->source) {
        cohort_plan_free(plan);
        return ynode_nomem(&c);
    }
    memcpy(plan->source, text, len);
    plan->source[len] = 0;

    ynode *root = NULL;
    cohort_status st = ytree_parse(text, len, name, NULL, PLAN_MAX_NODES, &root, err);
    if (st == COHORT_OK && !root && !(root = ynode_new(YNODE_MAP, 1, NULL)))
        st = ynode_nomem(&c);
    /* What the file holds is not quoted: it may not be a plan at all. */
    if (st == COHORT_OK && root->type != YNODE_MAP)
        st = ynode_fail(&c, root, "a plan must be a map of keys (data, models, ...), got %s",
                        root->type == YNODE_SEQ ? "a list" : "a single value");
    if (st == COHORT_OK)
        st = plan_build(&c, root, overrides, n_overrides, plan);
    ynode_free(root);
    if (st == COHORT_OK && !(plan->json = plan_to_json(plan)))
        st = ynode_nomem(&c);
    if (st) {
        cohort_plan_free(plan);
        return st;
    }
    *out = plan;
    return COHORT_OK;
}

/* Read and parse a plan file; see cohort.h. A missing file is COHORT_ERR_IO
 * "path: cannot open: ...". */
cohort_status cohort_plan_load(const char *path, const char *const *overrides, int n_overrides,
                               cohort_plan **out, cohort_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_plan_load: invalid arguments");
    char *text;
    size_t len;
    cohort_status st = file_read_all(path, COHORT_PLAN_MAX_BYTES, &text, &len, err);
    if (st)
        return st;
    st = cohort_plan_parse(text, len, path, overrides, n_overrides, out, err);
    free(text);
    return st;
}

/* Free a plan and everything it owns; NULL is fine. */
void cohort_plan_free(cohort_plan *plan)
{
    if (!plan)
        return;
    for (int i = 0; i < plan->n_models; i++)
        free(plan->models[i].config_json);
    free(plan->models);
    free(plan->source);
    free(plan->json);
    free(plan);
}

/* Number of models after the sweep; 0 for NULL. */
int cohort_plan_model_count(const cohort_plan *plan)
{
    return plan ? plan->n_models : 0;
}

/* Name of model i, or NULL when i is out of range. */
const char *cohort_plan_model_name(const cohort_plan *plan, int i)
{
    if (!plan || i < 0 || i >= plan->n_models)
        return NULL;
    return plan->models[i].name;
}

/* The plan's name (file name without directory and extension); "" for NULL. */
const char *cohort_plan_name(const cohort_plan *plan)
{
    return plan ? plan->name : "";
}
