/* plan: from plan text to a validated cohort_plan: --set overrides, the
 * data/devices/strategy sections, defaults merged into each model, the sweep
 * expanded, every model spec checked, and the whole plan as JSON. */
#include "plan/plan.h"

#include "data/data.h"
#include "layers/layer.h"
#include "optim/optim.h"
#include "plan/yamltree.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAX_NODES ((size_t)1 << 20)
/* The most errors one plan reports at once. */
#define PLAN_MAX_ERRORS 20

const char *const plan_model_keys[] = {
    "name",    "layers", "epochs",         "batch_size", "shuffle",   "seed",
    "optimizer", "loss", "early_stopping", "device",     "init_from", "metrics",
    "class_weight", "reduce_lr_on_plateau", NULL};
const char *const plan_loss_keys[] = {"name", "from_logits", "label_smoothing", "delta", NULL};
const char *const plan_plateau_keys[] = {"monitor", "factor", "patience", "min_delta",
                                         "cooldown", "min_lr", NULL};
const char *const plan_early_stop_keys[] = {"monitor", "patience", "min_delta",
                                            "restore_best_weights", NULL};
static const char *const top_keys[] = {"data",    "defaults", "models",      "sweep", "search",
                                       "scheduler",
                                       "devices", "strategy", "shared_order", NULL};
static const char *const data_keys[] = {"train", "test", "validation", "validation_split",
                                        "label_column", "label_columns", "input_shape", NULL};
static const char *const device_keys[] = {"memory", "split", "memory_limit", NULL};
/* Same order as the enums of model.h and cohort.h. Optimizers are read in any case
 * (their table's names, optim/), as Keras does ("Adam"); a layer's
 * activation and padding likewise (layers/syntax.c). */
/* The losses as Keras names them, aliases after; loss_kinds[i] is names[i]'s. */
static const char *const loss_names[] = {
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "mse", "mae", "huber", "mean_squared_error", "mean_absolute_error", "huber_loss"};
static const loss_kind loss_kinds[] = {LOSS_SCE, LOSS_CCE, LOSS_BCE,   LOSS_MSE,  LOSS_MAE,
                                       LOSS_HUBER, LOSS_MSE, LOSS_MAE, LOSS_HUBER};
/* keras.losses.get's other spellings of them (Keras 3's aliases and class
 * names), taken as they are written there: in that case only. */
static const struct {
    const char *name;
    loss_kind kind;
} keras_losses[] = {{"MSE", LOSS_MSE},
                    {"MAE", LOSS_MAE},
                    {"bce", LOSS_BCE},
                    {"BCE", LOSS_BCE},
                    {"MeanSquaredError", LOSS_MSE},
                    {"MeanAbsoluteError", LOSS_MAE},
                    {"Huber", LOSS_HUBER},
                    {"BinaryCrossentropy", LOSS_BCE},
                    {"CategoricalCrossentropy", LOSS_CCE},
                    {"SparseCategoricalCrossentropy", LOSS_SCE}};
static const char *const monitor_names[] = {"val_loss", "val_accuracy", "loss",    "accuracy",
                                            "val_mae",  "val_rmse",     "mae",     "rmse"};
static const char *const strategy_names[] = {"auto", "sequential", "threads", "processes",
                                             "fused"};
static const char *const memory_names[] = {"grow", "preallocate"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

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

/* ---- --set overrides ------------------------------------------------- */

static cohort_status set_fail(const yctx *c, const char *ov, const char *fmt, ...)
    COHORT_PRINTF(3, 4);

static cohort_status set_fail(const yctx *c, const char *ov, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cohort_fail(c->err, COHORT_ERR_INPUT, "--set %s: %s", ov, msg);
}

/* Apply one "KEY=VALUE" to the tree; takes no ownership of anything. */
static cohort_status apply_override(const yctx *c, ynode *root, const char *ov)
{
    const char *eq = strchr(ov, '=');
    if (!eq)
        return set_fail(c, ov, "expected KEY=VALUE, like defaults.epochs=5");
    size_t klen = (size_t)(eq - ov);
    char key[512];
    if (klen == 0)
        return set_fail(c, ov, "the key before '=' is empty");
    if (klen >= sizeof key)
        return set_fail(c, ov, "the key is too long");
    memcpy(key, ov, klen);
    key[klen] = 0;

    ynode *val = NULL;
    cohort_status st = ytree_parse(eq + 1, strlen(eq + 1), c->file, ov, PLAN_MAX_NODES, &val,
                                   c->err);
    if (st)
        return st;
    if (!val && !(val = ynode_scalar("", 0, ov)))
        return ynode_nomem(c);

    ynode *cur = root;
    char *p = key;
    int under_sweep = 0;
    for (;;) {
        char *dot = under_sweep ? NULL : strchr(p, '.');
        if (dot)
            *dot = 0;
        const char *part = p;
        int last = dot == NULL;
        int plen = p == key ? 0 : (int)(p - key) - 1; /* the path before this part */
        if (!*part) {
            ynode_free(val);
            return set_fail(c, ov, "the key has an empty part");
        }
        if (cur->type == YNODE_MAP) {
            if (last) {
                ynode *k = ynode_scalar(part, 0, ov);
                if (!k || ymap_set(cur, k, val)) {
                    ynode_free(k);
                    ynode_free(val);
                    return ynode_nomem(c);
                }
                return COHORT_OK;
            }
            ynode *child = ymap_get(cur, part);
            if (!child) {
                ynode *k = ynode_scalar(part, 0, ov);
                child = ynode_new(YNODE_MAP, 0, ov);
                if (!k || !child || ynode_append(cur, k, child)) {
                    ynode_free(k);
                    ynode_free(child);
                    ynode_free(val);
                    return ynode_nomem(c);
                }
            }
            under_sweep = cur == root && strcmp(part, "sweep") == 0;
            cur = child;
        } else if (cur->type == YNODE_SEQ) {
            size_t i = 0;
            int digits = 1;
            for (const char *q = part; *q; q++)
                digits = digits && *q >= '0' && *q <= '9';
            if (!digits || strlen(part) > 9) {
                ynode_free(val);
                if (cur->n == 0)
                    return set_fail(c, ov, "'%.*s' is an empty list, not a map", plen, key);
                return set_fail(c, ov, "'%.*s' is a list; use an index from 0 to %zu, not '%s'",
                                plen, key, cur->n - 1, part);
            }
            i = (size_t)atol(part);
            if (i >= cur->n) {
                ynode_free(val);
                return set_fail(c, ov, "index %s is out of range: '%.*s' has %zu item%s", part,
                                plen, key, cur->n, cur->n == 1 ? "" : "s");
            }
            if (last) {
                ynode_free(cur->vals[i]);
                cur->vals[i] = val;
                return COHORT_OK;
            }
            cur = cur->vals[i];
        } else {
            char got[80];
            ynode_free(val);
            return set_fail(c, ov, "'%.*s' is a single value (%s), so it has no part '%s'", plen,
                            key, ynode_describe(cur, got, sizeof got), part);
        }
        *dot = '.';
        p = dot + 1;
    }
}

/* ---- data, devices, strategy ----------------------------------------- */

/* ---- paths ---------------------------------------------------------- */

/* Length of the plan file's folder in c->file ("dir/plan.yaml" -> 3); 0 when
 * the name has no folder (then relative paths are the current directory's). */
static size_t plan_dir_len(const yctx *c)
{
    const char *slash = strrchr(c->file, '/');
    return slash ? (size_t)(slash - c->file) + (slash == c->file) : 0;
}

/* Append path to b, prefixed with the plan's folder when it is relative. */
static void put_path(strbuf *b, const yctx *c, const char *path, size_t len)
{
    size_t dl = plan_dir_len(c);
    if (len && path[0] != '/' && dl) {
        sb_putn(b, c->file, dl);
        if (c->file[dl - 1] != '/')
            sb_puts(b, "/");
    }
    sb_putn(b, path, len);
}

/*
 * Resolve the paths in `buf` (a path, or for data a dataset spec) against
 * the plan file's folder, as compilers do with includes: csv:F, npz:F[:X,Y],
 * npy:X,Y and idx:A,B (each piece between the commas), init_from. Absolute
 * paths, other specs (fashion-mnist:train) and values given by --set (their
 * node has an origin: the command line's paths are the current directory's)
 * stay as they are. A result longer than size - 1 fails at n's line.
 */
static cohort_status resolve_path(const yctx *c, const ynode *n, int is_data, const char *what,
                                  char *buf, size_t size)
{
    if (n->origin || !plan_dir_len(c))
        return COHORT_OK;
    strbuf b;
    sb_init(&b);
    if (!is_data) {
        put_path(&b, c, buf, strlen(buf));
    } else {
        const char *colon = strchr(buf, ':');
        size_t plen = colon ? (size_t)(colon - buf) : 0;
        int one = (plen == 3 && (!memcmp(buf, "csv", 3) || !memcmp(buf, "npz", 3)));
        int pair = (plen == 3 && (!memcmp(buf, "npy", 3) || !memcmp(buf, "idx", 3)));
        if (!one && !pair) {
            sb_free(&b);
            return COHORT_OK;
        }
        sb_putn(&b, buf, plen + 1);
        const char *p = colon + 1;
        if (one) {
            put_path(&b, c, p, strlen(p));
        } else {
            for (;;) {
                const char *comma = strchr(p, ',');
                put_path(&b, c, p, comma ? (size_t)(comma - p) : strlen(p));
                if (!comma)
                    break;
                sb_puts(&b, ",");
                p = comma + 1;
            }
        }
    }
    cohort_status st = COHORT_OK;
    if (b.failed)
        st = ynode_nomem(c);
    else if (str_copy(buf, size, b.data ? b.data : ""))
        st = ynode_fail(c, n, "%s is too long once resolved against the plan's folder (at most "
                              "%zu characters)",
                        what, size - 1);
    sb_free(&b);
    return st;
}

/* yget_str for a dataset spec (is_data) or a path, then resolve_path. */
static cohort_status yget_path(const yctx *c, const ynode *n, int is_data, const char *what,
                               char *buf, size_t size)
{
    cohort_status st = yget_str(c, n, what, buf, size);
    return st ? st : resolve_path(c, n, is_data, what, buf, size);
}

/* yget_path for a dataset spec, whose form is checked here: its errors then
 * give the plan's line, which the reader's (when training starts) cannot. */
static cohort_status yget_dataset(const yctx *c, const ynode *n, const char *what, char *buf,
                                  size_t size)
{
    cohort_status st = yget_path(c, n, 1, what, buf, size);
    cohort_error e;
    if (!st && data_spec_check(buf, 1, &e))
        st = ynode_fail(c, n, "%s: %s", what, e.message);
    return st;
}

/* data.input_shape: [H, W, C] or [D], positive, at most INT32_MAX values in all. */
static cohort_status parse_input_shape(const yctx *c, const ynode *v, data_spec *d)
{
    char got[80];
    if (v->type != YNODE_SEQ || (v->n != 1 && v->n != 3))
        return ynode_fail(c, v, "data.input_shape must be a list of 3 positive integers [H, W, C] "
                                "(an image, channels last) or of 1 [D] (a flat vector), got %s%s",
                          ynode_describe(v, got, sizeof got),
                          v->type == YNODE_SEQ ? (v->n == 2 ? " of 2 (add the channels: [H, W, 1])"
                                                            : " of another length")
                                               : "");
    long long dims[3], total = 1;
    for (size_t i = 0; i < v->n; i++) {
        cohort_status st = yget_int(c, v->vals[i], "each size in data.input_shape", 1, INT32_MAX,
                                    &dims[i]);
        if (st)
            return st;
        if (__builtin_mul_overflow(total, dims[i], &total) || total > INT32_MAX)
            return ynode_fail(c, v, "data.input_shape has more than %d values", INT32_MAX);
    }
    d->input_shape = v->n == 3 ? shape_image((int)dims[0], (int)dims[1], (int)dims[2])
                               : shape_flat((int)dims[0]);
    d->input_shape_line = v->line;
    return COHORT_OK;
}

static cohort_status parse_data(const yctx *c, const ynode *root, data_spec *d)
{
    const ynode *n = ymap_get(root, "data");
    char got[80];
    memset(d, 0, sizeof *d);
    if (!n)
        return ynode_fail(c, root, "the plan has no 'data' section; it needs at least "
                                   "data.train (like train: fashion-mnist:train)");
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "data must be a map with train (and test, validation_split), got %s",
                          ynode_describe(n, got, sizeof got));
    /* {train: npy:a.npy,b.npy} is {train: npy:a.npy, b.npy: null} in YAML. */
    for (size_t i = 1; i < n->n; i++) {
        const ynode *prev = n->vals[i - 1];
        if (!plan_key_in(data_keys, n->keys[i]->str) && ynode_is_null(n->vals[i]) &&
            prev->type == YNODE_SCALAR && prev->plain &&
            (!strncmp(prev->str, "npy:", 4) || !strncmp(prev->str, "idx:", 4)))
            return ynode_fail(c, prev, "data.%s was cut at its comma: in a {...} map a comma ends "
                                       "the value, so '%.100s' became a key; quote the value: "
                                       "%s: '%.100s,%.100s'",
                              n->keys[i - 1]->str, n->keys[i]->str, n->keys[i - 1]->str,
                              prev->str, n->keys[i]->str);
    }
    cohort_status st = plan_check_keys(c, n, data_keys, "in data");
    if (st)
        return st;
    const ynode *v;
    if (!(v = ymap_get(n, "train")))
        return ynode_fail(c, n, "data has no 'train' dataset (like train: fashion-mnist:train)");
    if ((st = yget_dataset(c, v, "data.train", d->train, sizeof d->train)))
        return st;
    d->train_line = v->origin ? 0 : v->line;
    if ((v = ymap_get(n, "test")) && !ynode_is_null(v)) {
        if ((st = yget_dataset(c, v, "data.test", d->test, sizeof d->test)))
            return st;
        d->test_line = v->origin ? 0 : v->line;
    }
    if ((v = ymap_get(n, "validation")) && !ynode_is_null(v)) {
        if ((st = yget_dataset(c, v, "data.validation", d->validation, sizeof d->validation)))
            return st;
        d->validation_line = v->origin ? 0 : v->line;
    }
    if ((v = ymap_get(n, "validation_split")) &&
        (st = yget_num(c, v, "data.validation_split", YR_UNIT, 0, &d->validation_split)))
        return st;
    d->validation_split_line = v && !v->origin ? v->line : 0;
    if (v && d->validation[0] && d->validation_split > 0)
        return ynode_fail(c, v, "data has both validation and validation_split; give one");
    if ((v = ymap_get(n, "label_column")) &&
        (st = yget_str(c, v, "data.label_column", d->label_column, sizeof d->label_column)))
        return st;
    if ((v = ymap_get(n, "label_columns")) && !ynode_is_null(v)) {
        if (d->label_column[0])
            return ynode_fail(c, v, "data has both label_column and label_columns; give one");
        if (v->type != YNODE_SEQ || v->n == 0)
            return ynode_fail(c, v, "data.label_columns must be a list of CSV columns (names or "
                                    "0-based indices) holding real-valued targets, like [y0, y1], "
                                    "got %s",
                              ynode_describe(v, got, sizeof got));
        strbuf b;
        sb_init(&b);
        for (size_t i = 0; i < v->n; i++) {
            const ynode *e = v->vals[i];
            if (e->type != YNODE_SCALAR || !e->str[0] || strchr(e->str, ',')) {
                sb_free(&b);
                return ynode_fail(c, e, "data.label_columns: each entry is one column name or "
                                        "index, got %s",
                                  ynode_describe(e, got, sizeof got));
            }
            sb_printf(&b, "%s%s", i ? "," : "", e->str);
        }
        int too_long = b.failed || str_copy(d->label_columns, sizeof d->label_columns,
                                            b.data ? b.data : "");
        sb_free(&b);
        if (too_long)
            return ynode_fail(c, v, "data.label_columns is too long (at most %zu characters)",
                              sizeof d->label_columns - 1);
    }
    if ((v = ymap_get(n, "input_shape")) && !ynode_is_null(v))
        return parse_input_shape(c, v, d);
    return COHORT_OK;
}

static cohort_status get_size(const yctx *c, const ynode *n, const char *what, uint64_t *out)
{
    char got[80];
    if (n->type == YNODE_SCALAR && parse_bytes(n->str, out) == 0 && *out > 0)
        return COHORT_OK;
    return ynode_fail(c, n, "%s must be a size like 4GiB, 512MiB or a number of bytes, got %s",
                      what, ynode_describe(n, got, sizeof got));
}

/* "cpu:N" or "gpu:N". */
static int device_name_ok(const char *s, int allow_part)
{
    if (strncmp(s, "cpu:", 4) != 0 && strncmp(s, "gpu:", 4) != 0)
        return 0;
    const char *p = s + 4;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) {
        p++;
        digits++;
    }
    if (!digits)
        return 0;
    if (allow_part && *p == '/') {
        p++;
        digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 7) {
            p++;
            digits++;
        }
        if (!digits)
            return 0;
    }
    return *p == 0;
}

static cohort_status parse_device(const yctx *c, const ynode *key, const ynode *n,
                                  device_spec *d)
{
    char got[80], what[96];
    memset(d, 0, sizeof *d);
    if (!device_name_ok(key->str, 0) || str_copy(d->name, sizeof d->name, key->str))
        return ynode_fail(c, key, "device name must be cpu:N or gpu:N (like gpu:0), got %s",
                          ynode_describe(key, got, sizeof got));
    d->line = key->line;
    d->policy = COHORT_MEM_GROW;
    if (ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "device %s must be a map like {memory: grow}, got %s", d->name,
                          ynode_describe(n, got, sizeof got));
    cohort_status st = plan_check_keys(c, n, device_keys, "in device %s", d->name);
    if (st)
        return st;
    const ynode *v;
    if ((v = ymap_get(n, "memory"))) {
        int policy;
        snprintf(what, sizeof what, "memory of %s", d->name);
        if ((st = yget_enum(c, v, what, memory_names, COUNT(memory_names), &policy)))
            return st;
        d->policy = policy ? COHORT_MEM_PREALLOCATE : COHORT_MEM_GROW;
    }
    if ((v = ymap_get(n, "memory_limit"))) {
        snprintf(what, sizeof what, "memory_limit of %s", d->name);
        if ((st = get_size(c, v, what, &d->memory_limit)))
            return st;
    }
    const ynode *split = ymap_get(n, "split");
    if (split) {
        if (split->type != YNODE_SEQ || split->n == 0)
            return ynode_fail(c, split, "split of %s must be a non-empty list of sizes "
                                        "(like [4GiB, 4GiB]), got %s",
                              d->name, ynode_describe(split, got, sizeof got));
        if (split->n > COHORT_MAX_SPLIT)
            return ynode_fail(c, split->vals[COHORT_MAX_SPLIT],
                              "split of %s has more than %d parts", d->name, COHORT_MAX_SPLIT);
        uint64_t sum = 0;
        snprintf(what, sizeof what, "each part in split of %s", d->name);
        for (size_t i = 0; i < split->n; i++) {
            if ((st = get_size(c, split->vals[i], what, &d->split[i])))
                return st;
            sum = sum + d->split[i] < sum ? UINT64_MAX : sum + d->split[i];
        }
        d->n_split = (int)split->n;
        if (d->memory_limit && sum > d->memory_limit) {
            char a[32], b[32];
            return ynode_fail(c, split, "the parts of %s add up to %s, more than its memory_limit %s",
                              d->name, format_bytes(sum, a, sizeof a),
                              format_bytes(d->memory_limit, b, sizeof b));
        }
    }
    return COHORT_OK;
}

static cohort_status parse_devices(const yctx *c, const ynode *root, cohort_plan *plan)
{
    const ynode *n = ymap_get(root, "devices");
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "devices must be a map like {gpu:0: {memory: grow}}, got %s",
                          ynode_describe(n, got, sizeof got));
    if (n->n > COHORT_MAX_DEVICE_SPECS)
        return ynode_fail(c, n->keys[COHORT_MAX_DEVICE_SPECS], "more than %d devices",
                          COHORT_MAX_DEVICE_SPECS);
    for (size_t i = 0; i < n->n; i++) {
        cohort_status st = parse_device(c, n->keys[i], n->vals[i], &plan->devices[i]);
        if (st)
            return st;
        plan->n_devices++;
    }
    return COHORT_OK;
}

/* ---- one model ------------------------------------------------------- */

/* Key k of an optimizer map applies to every optimizer. */
static int opt_common_key(const char *k)
{
    static const char *const common[] = {"lr", "clipnorm", "global_clipnorm", "clipvalue",
                                          "schedule", NULL};
    for (int i = 0; common[i]; i++)
        if (strcmp(k, common[i]) == 0)
            return 1;
    return 0;
}

/* The gradient clip of an optimizer map: at most one of clipnorm,
 * global_clipnorm and clipvalue (Keras refuses more); null is not set. */
static cohort_status build_clip(const yctx *c, const ynode *o, const char *label,
                                optim_spec *out)
{
    static const char *const names[] = {"clipnorm", "global_clipnorm", "clipvalue"};
    float *dst[3] = {&out->clipnorm, &out->global_clipnorm, &out->clipvalue};
    const ynode *first = NULL;
    for (int i = 0; i < 3; i++) {
        int at = ymap_find(o, names[i]);
        if (at < 0 || ynode_is_null(o->vals[at]))
            continue;
        if (first)
            return ynode_fail(c, o->keys[at], "the optimizer of %s has both '%s' and '%s'; only "
                                              "one of clipnorm, clipvalue and global_clipnorm "
                                              "can be set (as in Keras)",
                              label, first->str, names[i]);
        first = o->keys[at];
        double d;
        cohort_status st = yget_num(c, o->vals[at], names[i], YR_POSITIVE, 1, &d);
        if (st)
            return st;
        *dst[i] = (float)d;
    }
    return COHORT_OK;
}

static const char *const schedule_names[] = {"cosine_decay", "exponential_decay",
                                             "piecewise_constant"};
static const char *const cosine_keys[] = {"decay_steps", "alpha", "warmup_steps",
                                          "warmup_target", NULL};
static const char *const exp_keys[] = {"decay_steps", "decay_rate", "staircase", NULL};
static const char *const piece_keys[] = {"boundaries", "values", NULL};

/* A required key of a schedule's map. */
static cohort_status sched_need(const yctx *c, const ynode *m, const char *key,
                                const char *kind, const ynode **v)
{
    if ((*v = ymap_get(m, key)))
        return COHORT_OK;
    return ynode_fail(c, m, "%s needs %s (like {%s: {decay_steps: 1000%s}})", kind, key, kind,
                      strcmp(kind, "exponential_decay") == 0 ? ", decay_rate: 0.96" : "");
}

static cohort_status build_piecewise(const yctx *c, const ynode *m, lr_schedule *s)
{
    const ynode *b, *v;
    char got[80];
    cohort_status st;
    if ((st = sched_need(c, m, "boundaries", "piecewise_constant", &b)) ||
        (st = sched_need(c, m, "values", "piecewise_constant", &v)))
        return st;
    if (b->type != YNODE_SEQ || b->n == 0 || b->n > COHORT_MAX_PIECES)
        return ynode_fail(c, b, "boundaries of piecewise_constant must be a list of 1 to %d "
                                "step numbers, like [1500, 3000], got %s",
                          COHORT_MAX_PIECES, ynode_describe(b, got, sizeof got));
    if (v->type != YNODE_SEQ || v->n != b->n + 1)
        return ynode_fail(c, v, "values of piecewise_constant must be a list of %zu learning "
                                "rates (one more than the boundaries), got %s",
                          b->n + 1, ynode_describe(v, got, sizeof got));
    s->n_bounds = (int)b->n;
    for (size_t i = 0; i < b->n; i++) {
        long long ll;
        if ((st = yget_int(c, b->vals[i], "a boundary of piecewise_constant", 0, INT64_MAX,
                           &ll)))
            return st;
        if (i > 0 && ll <= s->bounds[i - 1])
            return ynode_fail(c, b->vals[i], "boundaries of piecewise_constant must increase "
                                             "strictly; %lld follows %lld",
                              ll, (long long)s->bounds[i - 1]);
        s->bounds[i] = ll;
    }
    /* Kept in double for the spec's JSON; the rate is a float at run time. */
    for (size_t i = 0; i < v->n; i++) {
        if ((st = yget_num(c, v->vals[i], "a value of piecewise_constant", YR_POSITIVE, 0,
                           &s->values[i])))
            return st;
        if ((float)s->values[i] < FLT_MIN)
            return ynode_fail(c, v->vals[i], YNUM_TINY_MSG, "a value of piecewise_constant",
                              ynode_describe(v->vals[i], got, sizeof got));
    }
    return COHORT_OK;
}

/* optimizer.schedule: null, or a map of one of Keras's schedules. */
static cohort_status build_schedule(const yctx *c, const ynode *n, lr_schedule *s)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP || n->n != 1)
        return ynode_fail(c, n, "schedule must be a map of one schedule, like {cosine_decay: "
                                "{decay_steps: 1000}}, {exponential_decay: {decay_steps: 1000, "
                                "decay_rate: 0.96}} or {piecewise_constant: {boundaries: [1000], "
                                "values: [0.001, 0.0001]}}, got %s",
                          ynode_describe(n, got, sizeof got));
    int kind;
    cohort_status st = yget_enum(c, n->keys[0], "schedule", schedule_names,
                                 COUNT(schedule_names), &kind);
    if (st)
        return st;
    const char *name = schedule_names[kind];
    const ynode *m = n->vals[0], *v;
    if (m->type != YNODE_MAP)
        return ynode_fail(c, m, "%s must be a map of its settings, got %s", name,
                          ynode_describe(m, got, sizeof got));
    const char *const *keys = kind == 0 ? cosine_keys : kind == 1 ? exp_keys : piece_keys;
    if ((st = plan_check_keys(c, m, keys, "in %s", name)))
        return st;
    long long ll;
    s->kind = kind == 0 ? SCHED_COSINE : kind == 1 ? SCHED_EXPONENTIAL : SCHED_PIECEWISE;
    if (s->kind == SCHED_PIECEWISE)
        return build_piecewise(c, m, s);
    if ((st = sched_need(c, m, "decay_steps", name, &v)) ||
        (st = yget_int(c, v, "decay_steps", 1, INT64_MAX, &ll)))
        return st;
    s->decay_steps = ll;
    if (s->kind == SCHED_EXPONENTIAL) {
        if ((st = sched_need(c, m, "decay_rate", name, &v)) ||
            (st = yget_num(c, v, "decay_rate", YR_POSITIVE, 0, &s->decay_rate)))
            return st;
        if ((v = ymap_get(m, "staircase")) && (st = yget_bool(c, v, "staircase", &s->staircase)))
            return st;
        return COHORT_OK;
    }
    if ((v = ymap_get(m, "alpha")) && (st = yget_num(c, v, "alpha", YR_NONNEG, 0, &s->alpha)))
        return st;
    if ((v = ymap_get(m, "warmup_steps"))) {
        if ((st = yget_int(c, v, "warmup_steps", 0, INT64_MAX, &ll)))
            return st;
        s->warmup_steps = ll;
    }
    /* As Keras: a target with no warmup steps starts the cosine from it. */
    if ((v = ymap_get(m, "warmup_target")) && !ynode_is_null(v) &&
        (st = yget_num(c, v, "warmup_target", YR_NONNEG, 0, &s->warmup_target)))
        return st;
    return COHORT_OK;
}

/* Key k of optimizer map o (a key its entry names) into out. */
static cohort_status opt_key_value(const yctx *c, const ynode *v, const optim_key *k,
                                   optim_spec *out)
{
    if (k->range == OPTIM_BOOL)
        return yget_bool(c, v, k->name, optim_field(out, k));
    static const yrange ranges[] = {[OPTIM_POSITIVE] = YR_POSITIVE, [OPTIM_NONNEG] = YR_NONNEG,
                                    [OPTIM_UNIT] = YR_UNIT};
    double d;
    cohort_status st = yget_num(c, v, k->name, ranges[k->range], 1, &d);
    if (!st)
        *(float *)optim_field(out, k) = (float)d;
    return st;
}

static cohort_status build_optimizer(const yctx *c, const ynode *o, const char *label,
                                     optim_spec *out)
{
    char got[80], list[160];
    const char *names[OPT_KIND_COUNT];
    size_t at = 0;
    for (int i = 0; i < OPT_KIND_COUNT; i++) {
        names[i] = opt_name((opt_kind)i);
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s",
                               i ? ", " : "", names[i]);
    }
    const ynode *name = NULL;
    if (o && o->type == YNODE_SCALAR)
        name = o;
    else if (o && o->type == YNODE_MAP)
        name = ymap_get(o, "name");
    else if (o)
        return ynode_fail(c, o, "optimizer of %s must be a name (%s) or a map like {name: adam, "
                                "lr: 0.001}, got %s",
                          label, list, ynode_describe(o, got, sizeof got));
    int kind = OPT_ADAM;
    cohort_status st;
    if (name && !(o->type == YNODE_SCALAR && ynode_is_null(o)) &&
        (st = yget_enum_anycase(c, name, "optimizer", names, OPT_KIND_COUNT, &kind)))
        return st;
    optim_defaults(out, (opt_kind)kind); /* Keras's, from the optimizer's entry */
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i]->str;
        double d;
        if (strcmp(k, "lr") == 0) {
            if ((st = yget_num(c, o->vals[i], k, YR_POSITIVE, 1, &d)))
                return st;
            out->lr = (float)d;
            continue;
        }
        if (strcmp(k, "name") == 0 || opt_common_key(k))
            continue; /* the clips and the schedule: below */
        const optim_key *key = optim_key_of(out->kind, k);
        if (!key) {
            if (o->keys[i]->inherited)
                continue; /* a default meant for another optimizer */
            return ynode_fail(c, o->keys[i], "'%s' does not apply to optimizer '%s' of %s (it "
                                             "takes %s, and clipnorm, global_clipnorm, "
                                             "clipvalue, schedule)",
                              k, names[kind], label, optim_keys_list(out->kind, list, sizeof list));
        }
        if ((st = opt_key_value(c, o->vals[i], key, out)))
            return st;
    }
    const optim_entry *e = optim_entry_of(out->kind);
    const char *why = e->check ? e->check(out) : NULL;
    if (why)
        return ynode_fail(c, o, "optimizer %s of %s: %s", names[kind], label, why);
    if ((st = build_clip(c, o, label, out)))
        return st;
    return build_schedule(c, ymap_get(o, "schedule"), &out->schedule);
}

/* A metric of the history that a callback may watch. */
static cohort_status get_monitor(const yctx *c, const ynode *v, const char *what, char *out,
                                 size_t size)
{
    int idx;
    cohort_status st = yget_enum(c, v, what, monitor_names, COUNT(monitor_names), &idx);
    if (st)
        return st;
    str_copy(out, size, monitor_names[idx]);
    return COHORT_OK;
}

static int is_cross_entropy(loss_kind l) { return l == LOSS_SCE || l == LOSS_CCE || l == LOSS_BCE; }

/* loss: a name, or {name: N, from_logits, label_smoothing, delta}. */
static cohort_status build_loss(const yctx *c, const ynode *n, const char *label, model_spec *s)
{
    char got[80];
    const ynode *name = n && n->type == YNODE_MAP ? ymap_get(n, "name") : n;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if ((n->type != YNODE_SCALAR && n->type != YNODE_MAP) || !name)
        return ynode_fail(c, n, "loss of %s must be a name like mse or a map like {name: huber, "
                                "delta: 1.0}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    int idx = -1;
    cohort_status st = COHORT_OK;
    for (size_t i = 0; name->type == YNODE_SCALAR && i < COUNT(keras_losses); i++)
        if (strcmp(name->str, keras_losses[i].name) == 0)
            idx = (int)i;
    if (idx >= 0)
        s->loss = keras_losses[idx].kind;
    else if ((st = yget_enum(c, name, "loss", loss_names, COUNT(loss_names), &idx)))
        return st;
    else
        s->loss = loss_kinds[idx];
    if (n->type != YNODE_MAP)
        return COHORT_OK;
    if ((st = plan_check_keys(c, n, plan_loss_keys, "in the loss of %s", label)))
        return st;
    for (size_t i = 0; i < n->n; i++) {
        const char *k = n->keys[i]->str;
        const ynode *v = n->vals[i];
        double d;
        if (strcmp(k, "name") == 0)
            continue;
        int ce = is_cross_entropy(s->loss);
        if ((strcmp(k, "from_logits") == 0 || strcmp(k, "label_smoothing") == 0) && !ce)
            return ynode_fail(c, n->keys[i], "'%s' applies to the cross-entropy losses, not to "
                                             "loss %s of %s",
                              k, loss_name(s->loss), label);
        if (strcmp(k, "delta") == 0 && s->loss != LOSS_HUBER)
            return ynode_fail(c, n->keys[i], "'delta' applies to loss huber, not to loss %s of %s",
                              loss_name(s->loss), label);
        if (strcmp(k, "from_logits") == 0) {
            if ((st = yget_bool(c, v, "from_logits", &s->from_logits)))
                return st;
        } else if (strcmp(k, "label_smoothing") == 0) {
            /* [0, 1] as Keras and torch: 1 makes every target uniform. */
            if ((st = yget_num(c, v, "label_smoothing", YR_UNIT_ALL, 1, &d)))
                return st;
            s->label_smoothing = (float)d;
        } else if (strcmp(k, "delta") == 0) {
            if ((st = yget_num(c, v, "delta", YR_POSITIVE, 1, &d)))
                return st;
            s->huber_delta = (float)d;
        }
    }
    return COHORT_OK;
}

/* An entry of `metrics`: accepted for Keras plans, as Keras's compile reads it
 * ("accuracy" and "acc" in any case; the accuracies and errors by their
 * function and class names), though the task decides what is reported. */
static cohort_status check_metric(const yctx *c, const ynode *n, const char *label)
{
    static const char *const names[] = {
        "accuracy",           "mae",         "rmse",
        "sparse_categorical_accuracy",       "categorical_accuracy",
        "binary_accuracy",    "MAE",         "mean_absolute_error",
        "MeanAbsoluteError",  "RootMeanSquaredError"};
    char got[80];
    if (n->type == YNODE_SCALAR) {
        if (strcasecmp(n->str, "accuracy") == 0 || strcasecmp(n->str, "acc") == 0)
            return COHORT_OK;
        for (size_t i = 0; i < COUNT(names); i++)
            if (strcmp(n->str, names[i]) == 0)
                return COHORT_OK;
    }
    const char *near = n->type == YNODE_SCALAR ? ysuggest(n->str, names, COUNT(names)) : NULL;
    char hint[80] = "";
    if (n->type == YNODE_SCALAR && (strcasecmp(n->str, "mse") == 0 ||
                                    strcmp(n->str, "mean_squared_error") == 0 ||
                                    strcmp(n->str, "MeanSquaredError") == 0))
        snprintf(hint, sizeof hint, " (it reports rmse, mse's square root)");
    else if (near)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    return ynode_fail(c, n, "metrics of %s: %s is not a metric cohort reports%s; it reports the "
                            "loss and accuracy for classification, the loss, mae and rmse for "
                            "regression: list accuracy, mae or rmse, or leave metrics out",
                      label, ynode_describe(n, got, sizeof got), hint);
}

/* class_weight: {CLASS: WEIGHT, ...} over classes 0..n-1, as Keras's fit. */
static cohort_status build_class_weight(const yctx *c, const ynode *n, const char *label,
                                        model_spec *s)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP || n->n == 0)
        return ynode_fail(c, n, "class_weight of %s must be a map of class to weight like "
                                "{0: 1.0, 1: 5.0}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    if (n->n > COHORT_MAX_CLASS_WEIGHTS)
        return ynode_fail(c, n, "class_weight of %s names %zu classes, more than the %d allowed",
                          label, n->n, COHORT_MAX_CLASS_WEIGHTS);
    unsigned char seen[COHORT_MAX_CLASS_WEIGHTS] = {0};
    for (size_t i = 0; i < n->n; i++) {
        long long cls;
        double w;
        cohort_status st = yget_int(c, n->keys[i], "a class of class_weight", 0,
                                    (long long)n->n - 1, &cls);
        if (st)
            return st;
        if (seen[cls])
            return ynode_fail(c, n->keys[i], "class_weight of %s gives class %lld twice", label,
                              cls);
        if ((st = yget_num(c, n->vals[i], "class_weight", YR_NONNEG, 1, &w)))
            return st;
        seen[cls] = 1;
        s->class_weight[cls] = (float)w;
    }
    s->n_class_weight = (int)n->n;
    return COHORT_OK;
}

/* The last layer gives what the loss takes: a softmax for the categorical
 * cross-entropies, a sigmoid for binary_crossentropy, logits (a linear
 * layer) with from_logits. */
static cohort_status check_output(const yctx *c, const ynode *layer, const char *label,
                                  const model_spec *s)
{
    const layer_spec *l = &s->layers[s->n_layers - 1];
    act_kind want = model_loss_act(s);
    if (!is_cross_entropy(s->loss))
        return COHORT_OK;
    act_kind have = l->act;
    if (have == want)
        return COHORT_OK;
    char is[80], fix[120];
    const char *act = act_name(want);
    layer_describe_output(l, want, s->loss == LOSS_BCE, is, sizeof is, fix, sizeof fix);
    if (s->from_logits)
        return ynode_fail(c, layer, "%s: loss %s with from_logits: true takes logits, but the "
                                    "last layer is %s; %s (or drop from_logits)",
                          label, loss_name(s->loss), is, fix);
    return ynode_fail(c, layer, "%s: loss %s needs the model's output to be a %s, but the last "
                                "layer is %s; %s%s",
                      label, loss_name(s->loss), act, is, fix,
                      have == ACT_LINEAR ? " (or give the loss from_logits: true)" : "");
}

static cohort_status build_early_stop(const yctx *c, const ynode *n, const char *label,
                                      const data_spec *data, early_stop_spec *es)
{
    char got[80];
    int on = 0;
    const ynode *at = n;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type == YNODE_SCALAR) {
        if (yget_bool(c, n, "early_stopping", &on) != COHORT_OK)
            return ynode_fail(c, n, "early_stopping must be a map like {monitor: val_loss, "
                                    "patience: 3}, or true or false, got %s",
                              ynode_describe(n, got, sizeof got));
        es->enabled = on;
    } else if (n->type == YNODE_MAP) {
        es->enabled = 1;
        cohort_status st;
        const ynode *v;
        long long ll;
        double d;
        if ((v = ymap_get(n, "monitor"))) {
            if ((st = get_monitor(c, v, "early_stopping.monitor", es->monitor,
                                  sizeof es->monitor)))
                return st;
            at = v;
        }
        if ((v = ymap_get(n, "patience"))) {
            if ((st = yget_int(c, v, "early_stopping.patience", 0, 1000000, &ll)))
                return st;
            es->patience = (int)ll;
        }
        if ((v = ymap_get(n, "min_delta"))) {
            if ((st = yget_num(c, v, "early_stopping.min_delta", YR_NONNEG, 0, &d)))
                return st;
            es->min_delta = d;
        }
        if ((v = ymap_get(n, "restore_best_weights")) &&
            (st = yget_bool(c, v, "early_stopping.restore_best_weights", &es->restore_best)))
            return st;
    } else {
        return ynode_fail(c, n, "early_stopping must be a map like {monitor: val_loss, "
                                "patience: 3}, or true or false, got %s",
                          ynode_describe(n, got, sizeof got));
    }
    if (es->enabled && strncmp(es->monitor, "val_", 4) == 0 && !data->validation[0] &&
        data->validation_split <= 0)
        return ynode_fail(c, at, "early_stopping of %s monitors %s, but the plan has no "
                                 "validation data (set data.validation_split or "
                                 "data.validation, or monitor loss)",
                          label, es->monitor);
    return COHORT_OK;
}

/* reduce_lr_on_plateau: null, or a map of Keras's ReduceLROnPlateau
 * settings with its defaults. A schedule owns the learning rate, so the two
 * cannot be combined (Keras cannot set the rate of a schedule either). */
static cohort_status build_plateau(const yctx *c, const ynode *n, const char *label,
                                   const data_spec *data, const optim_spec *opt,
                                   plateau_spec *p)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "reduce_lr_on_plateau of %s must be a map like {monitor: "
                                "val_loss, factor: 0.1, patience: 10}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    p->enabled = 1;
    str_copy(p->monitor, sizeof p->monitor, "val_loss");
    p->factor = 0.1;
    p->patience = 10;
    p->min_delta = 1e-4;
    const ynode *v, *at = n;
    cohort_status st;
    long long ll;
    if ((v = ymap_get(n, "monitor"))) {
        if ((st = get_monitor(c, v, "reduce_lr_on_plateau.monitor", p->monitor,
                              sizeof p->monitor)))
            return st;
        at = v;
    }
    if ((v = ymap_get(n, "factor"))) {
        if ((st = yget_num(c, v, "reduce_lr_on_plateau.factor", YR_UNIT, 0, &p->factor)))
            return st;
        if (p->factor == 0.0)
            return ynode_fail(c, v, "reduce_lr_on_plateau.factor must be in (0, 1), got 0");
    }
    if ((v = ymap_get(n, "patience"))) {
        if ((st = yget_int(c, v, "reduce_lr_on_plateau.patience", 0, 1000000, &ll)))
            return st;
        p->patience = (int)ll;
    }
    if ((v = ymap_get(n, "cooldown"))) {
        if ((st = yget_int(c, v, "reduce_lr_on_plateau.cooldown", 0, 1000000, &ll)))
            return st;
        p->cooldown = (int)ll;
    }
    if ((v = ymap_get(n, "min_delta")) &&
        (st = yget_num(c, v, "reduce_lr_on_plateau.min_delta", YR_NONNEG, 0, &p->min_delta)))
        return st;
    if ((v = ymap_get(n, "min_lr")) &&
        (st = yget_num(c, v, "reduce_lr_on_plateau.min_lr", YR_NONNEG, 0, &p->min_lr)))
        return st;
    if (opt->schedule.kind != SCHED_NONE)
        return ynode_fail(c, n, "%s has both optimizer.schedule and reduce_lr_on_plateau; a "
                                "schedule sets the learning rate of every step, so keep one",
                          label);
    if (strncmp(p->monitor, "val_", 4) == 0 && !data->validation[0] &&
        data->validation_split <= 0)
        return ynode_fail(c, at, "reduce_lr_on_plateau of %s monitors %s, but the plan has no "
                                 "validation data (set data.validation_split or "
                                 "data.validation, or monitor loss)",
                          label, p->monitor);
    return COHORT_OK;
}

/* A model's layers, each parsed by its kind's entry (layers/syntax.c), and
 * the last one checked against the loss. */
static cohort_status build_layers(const yctx *c, const ynode *t, const char *label,
                                  model_spec *s)
{
    char got[80];
    const ynode *n = ymap_get(t, "layers");
    if (!n)
        return ynode_fail(c, t, "%s has no layers (like layers: [{dense: 10, activation: "
                                "softmax}])",
                          label);
    if (n->type != YNODE_SEQ)
        return ynode_fail(c, n, "layers of %s must be a list of layers, got %s", label,
                          ynode_describe(n, got, sizeof got));
    if (n->n == 0)
        return ynode_fail(c, n, "layers of %s is empty; give at least one layer, like "
                                "[{dense: 10, activation: softmax}]",
                          label);
    if (n->n > COHORT_MAX_LAYERS)
        return ynode_fail(c, n->vals[COHORT_MAX_LAYERS], "%s has %zu layers, more than the %d allowed",
                          label, n->n, COHORT_MAX_LAYERS);
    for (size_t i = 0; i < n->n; i++) {
        cohort_status st = layer_parse(c, n->vals[i], (int)i, i + 1 == n->n, label, &s->layers[i]);
        if (st)
            return st;
    }
    s->n_layers = (int)n->n;
    return check_output(c, n->vals[n->n - 1], label, s);
}

static int name_char_ok(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("_.=+-", ch));
}

static cohort_status check_name(const yctx *c, const ynode *n, char *out)
{
    cohort_status st = yget_str(c, n, "name", out, COHORT_NAME_MAX);
    if (st)
        return st;
    for (const char *p = out; *p; p++)
        if (!name_char_ok((unsigned char)*p))
            return ynode_fail(c, n, "model name '%s' may hold only letters, digits and _ . = + - "
                                    "(it becomes a file name)",
                              out);
    /* ".", ".." and hidden files: --overwrite clears a run's files but not
     * hidden ones, which would then mix with the next run's. */
    if (out[0] == '.')
        return ynode_fail(c, n, "model name '%s' starts with '.'; it becomes a file name, and "
                                "one starting with '.' is hidden (or the folder itself): start "
                                "it with a letter or digit",
                          out);
    return COHORT_OK;
}

/* The maps a model holds besides its optimizer (optim_plan_keys), with their
 * keys and how messages call them. */
static const struct {
    const char *key;
    const char *const *keys;
    const char *what;
} model_maps[] = {{"loss", plan_loss_keys, "the loss"},
                  {"early_stopping", plan_early_stop_keys, "early_stopping"},
                  {"reduce_lr_on_plateau", plan_plateau_keys, "reduce_lr_on_plateau"}};

/* Keys of a model's map (its own, defaults, or merged and swept) and of the
 * maps it holds. `where` names the map ("in model 'm'"), label its owner
 * ("model 'm'", "defaults"). */
static cohort_status check_model_keys(const yctx *c, const ynode *m, const char *where,
                                      const char *label)
{
    cohort_status st = plan_check_keys(c, m, plan_model_keys, "%s", where);
    if (!st)
        st = plan_check_keys(c, ymap_get(m, "optimizer"), optim_plan_keys(),
                             "in the optimizer of %s", label);
    for (int i = 0; i < COUNT(model_maps) && !st; i++)
        st = plan_check_keys(c, ymap_get(m, model_maps[i].key), model_maps[i].keys, "in %s of %s",
                             model_maps[i].what, label);
    return st;
}

/* Fill s from a merged (and swept) model tree t; name is final. */
static cohort_status build_model(const yctx *c, const ynode *t, const char *name,
                                 const data_spec *data, model_spec *s)
{
    char label[COHORT_NAME_MAX + 16], where[COHORT_NAME_MAX + 24], got[80];
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, name);
    s->line = t->line;
    snprintf(label, sizeof label, "model '%s'", s->name);
    cohort_status st;
    const ynode *v;
    long long ll;
    /* Again on the merged model: a sweep or search value can be a map. */
    snprintf(where, sizeof where, "in %s", label);
    if ((st = check_model_keys(c, t, where, label)))
        return st;
    if ((st = build_loss(c, ymap_get(t, "loss"), label, s)))
        return st;
    if ((st = build_class_weight(c, ymap_get(t, "class_weight"), label, s)))
        return st;
    if ((st = build_layers(c, t, label, s)))
        return st;
    if ((v = ymap_get(t, "epochs"))) {
        if ((st = yget_int(c, v, "epochs", 1, 100000, &ll)))
            return st;
        s->epochs = (int)ll;
    }
    if ((v = ymap_get(t, "batch_size"))) {
        if ((st = yget_int(c, v, "batch_size", 1, 1 << 20, &ll)))
            return st;
        s->batch_size = (int)ll;
    }
    if ((v = ymap_get(t, "shuffle")) && (st = yget_bool(c, v, "shuffle", &s->shuffle)))
        return st;
    if ((v = ymap_get(t, "seed"))) {
        unsigned long long seed;
        if ((st = yget_u64(c, v, "seed", &seed)))
            return st;
        s->seed = seed;
    }
    if ((st = build_optimizer(c, ymap_get(t, "optimizer"), label, &s->opt)))
        return st;
    if ((st = build_early_stop(c, ymap_get(t, "early_stopping"), label, data, &s->early_stop)))
        return st;
    if ((st = build_plateau(c, ymap_get(t, "reduce_lr_on_plateau"), label, data, &s->opt,
                            &s->plateau)))
        return st;
    if ((v = ymap_get(t, "device")) && !ynode_is_null(v)) {
        if (v->type != YNODE_SCALAR || !device_name_ok(v->str, 1) ||
            str_copy(s->device, sizeof s->device, v->str))
            return ynode_fail(c, v, "device of %s must be like cpu:0, gpu:1 or gpu:1/0, got %s",
                              label, ynode_describe(v, got, sizeof got));
    }
    if ((v = ymap_get(t, "init_from")) && !ynode_is_null(v) &&
        (st = yget_path(c, v, 0, "init_from", s->init_from, sizeof s->init_from)))
        return st;
    if ((v = ymap_get(t, "metrics"))) {
        if (v->type != YNODE_SEQ || v->n == 0)
            return ynode_fail(c, v, "metrics of %s must be a list of accuracy, mae, rmse (the "
                                    "loss and accuracy are always reported for classification, "
                                    "mae and rmse for regression), got %s",
                              label, ynode_describe(v, got, sizeof got));
        for (size_t i = 0; i < v->n; i++)
            if ((st = check_metric(c, v->vals[i], label)))
                return st;
    }
    return COHORT_OK;
}

/* ---- defaults -------------------------------------------------------- */

/* Spell learning_rate as lr in an optimizer map; a --set value beats the
 * file's, two in the file are an error. */
static cohort_status canon_optimizer(const yctx *c, ynode *o)
{
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    int b = ymap_find(o, "learning_rate");
    if (b < 0)
        return COHORT_OK;
    int a = ymap_find(o, "lr");
    if (a >= 0) {
        int a_set = o->keys[a]->origin != NULL, b_set = o->keys[b]->origin != NULL;
        if (a_set == b_set)
            return ynode_fail(c, o->keys[b], "the optimizer has both 'lr' and 'learning_rate' "
                                             "(the same setting); keep one");
        if (a_set) {
            ymap_remove(o, (size_t)b);
            return COHORT_OK;
        }
        ymap_remove(o, (size_t)a);
        b = ymap_find(o, "learning_rate");
    }
    char *lr = str_dup("lr");
    if (!lr)
        return ynode_nomem(c);
    free(o->keys[b]->str);
    o->keys[b]->str = lr;
    return COHORT_OK;
}

/* The defaults' optimizer/early_stopping/reduce_lr_on_plateau value d made a map the model's map
 * can merge into: "adam" becomes {name: adam}, a switch becomes {}. */
static ynode *as_merge_map(ynode *d, int optimizer)
{
    if (d->type == YNODE_MAP)
        return d;
    ynode *m = ynode_new(YNODE_MAP, d->line, d->origin);
    if (!m)
        return NULL;
    m->inherited = d->inherited;
    if (optimizer && d->type == YNODE_SCALAR && !ynode_is_null(d)) {
        ynode *k = ynode_scalar("name", d->line, d->origin);
        ynode *v = ynode_clone(d, 0);
        if (!k || !v || ynode_append(m, k, v)) {
            ynode_free(k);
            ynode_free(v);
            ynode_free(m);
            return NULL;
        }
        k->inherited = d->inherited;
    }
    return m;
}

/* A new tree: defaults (marked inherited) with the model's keys on top;
 * optimizer and early_stopping maps merge key by key. */
static cohort_status merge_model(const yctx *c, const ynode *defaults, const ynode *own,
                                 ynode **out)
{
    *out = NULL;
    ynode *m = defaults ? ynode_clone(defaults, 1) : ynode_new(YNODE_MAP, own->line, own->origin);
    if (!m)
        return ynode_nomem(c);
    m->line = own->line;
    m->origin = own->origin;
    m->inherited = 0;
    for (size_t i = 0; i < own->n; i++) {
        const ynode *k = own->keys[i], *v = own->vals[i];
        int is_opt = strcmp(k->str, "optimizer") == 0;
        int di = ymap_find(m, k->str);
        int by_key = is_opt || strcmp(k->str, "early_stopping") == 0 ||
                     strcmp(k->str, "reduce_lr_on_plateau") == 0;
        if (by_key && v->type == YNODE_MAP && di >= 0) {
            ynode *d = as_merge_map(m->vals[di], is_opt);
            if (!d) {
                ynode_free(m);
                return ynode_nomem(c);
            }
            if (d != m->vals[di]) {
                ynode_free(m->vals[di]);
                m->vals[di] = d;
            }
            for (size_t j = 0; j < v->n; j++) {
                ynode *sk = ynode_clone(v->keys[j], 0), *sv = ynode_clone(v->vals[j], 0);
                if (!sk || !sv || ymap_set(d, sk, sv)) {
                    ynode_free(sk);
                    ynode_free(sv);
                    ynode_free(m);
                    return ynode_nomem(c);
                }
            }
            continue;
        }
        ynode *ck = ynode_clone(k, 0), *cv = ynode_clone(v, 0);
        if (!ck || !cv || ymap_set(m, ck, cv)) {
            ynode_free(ck);
            ynode_free(cv);
            ynode_free(m);
            return ynode_nomem(c);
        }
    }
    *out = m;
    return COHORT_OK;
}

/* ---- the models ------------------------------------------------------ */

typedef struct name_ref {
    const char *name;
    int index;
} name_ref;

static int cmp_name_ref(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* Names must be unique: report the first model (in plan order) whose name an
 * earlier model already has. */
/* per_entry: the models each entry of the models list makes (the sweep's
 * combinations times the search's draws), in the order of the list. */
static cohort_status check_unique_names(const yctx *c, const cohort_plan *plan, size_t per_entry)
{
    int n = plan->n_models;
    /* models/NAME.best.safetensors holds model NAME's best epoch: a model
     * named NAME.best would write its weights over them. */
    for (int i = 0; i < n; i++) {
        const model_spec *m = &plan->models[i];
        size_t len = strlen(m->name);
        if (len >= 5 && strcmp(m->name + len - 5, ".best") == 0)
            return cohort_fail(c->err, COHORT_ERR_INPUT,
                               "%s:%d: model name '%s' ends in .best, which names a model's "
                               "best-epoch weights (models/NAME.best.safetensors); choose another",
                               c->file, m->line, m->name);
    }
    name_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs)
        return ynode_nomem(c);
    for (int i = 0; i < n; i++)
        refs[i] = (name_ref){plan->models[i].name, i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    int dup = -1, first = -1;
    for (int i = 1; i < n; i++) {
        /* Sorted by (name, index): the second of a run of equal names is its
         * earliest repeat, the first is the original. */
        if (strcmp(refs[i].name, refs[i - 1].name) == 0 &&
            (i < 2 || strcmp(refs[i - 1].name, refs[i - 2].name) != 0) &&
            (dup < 0 || refs[i].index < dup)) {
            dup = refs[i].index;
            first = refs[i - 1].index;
        }
    }
    free(refs);
    if (dup < 0)
        return COHORT_OK;
    const model_spec *d = &plan->models[dup], *f = &plan->models[first];
    /* Two models of one entry have their names from the sweep; two entries
     * on one line (a flow list, JSON) are the plan's own duplicate. */
    if ((size_t)dup / per_entry == (size_t)first / per_entry)
        return cohort_fail(c->err, COHORT_ERR_INPUT,
                           "%s:%d: the sweep gives two models the name '%s'; model names must be "
                           "unique",
                           c->file, d->line, d->name);
    if (d->line == f->line)
        return cohort_fail(c->err, COHORT_ERR_INPUT,
                           "%s:%d: duplicate model name '%s' (models.%zu and models.%zu); model "
                           "names must be unique",
                           c->file, d->line, d->name, (size_t)first / per_entry,
                           (size_t)dup / per_entry);
    return cohort_fail(c->err, COHORT_ERR_INPUT,
                       "%s:%d: duplicate model name '%s' (first at line %d); model names must be "
                       "unique",
                       c->file, d->line, d->name, f->line);
}

/* Model `i` of the plan's list (own), merged with defaults and swept, into
 * plan->models; the first error of its combinations, if any. */
static cohort_status build_plan_model(const yctx *c, ynode *own, size_t i, const ynode *defaults,
                                      const plan_sweep *sw, const plan_sweep *search,
                                      cohort_plan *plan)
{
    char got[80];
    cohort_status st = COHORT_OK;
    char base[COHORT_NAME_MAX], label[COHORT_NAME_MAX + 32], where[COHORT_NAME_MAX + 48];
    if (own->type != YNODE_MAP)
        return ynode_fail(c, own, "models.%zu must be a map with a name and layers, got %s", i,
                          ynode_describe(own, got, sizeof got));
    const ynode *name = ymap_get(own, "name");
    if (!name)
        return ynode_fail(c, own, "models.%zu has no name", i);
    if ((st = check_name(c, name, base)))
        return st;
    snprintf(label, sizeof label, "model '%s'", base);
    snprintf(where, sizeof where, "in model '%s'", base);
    if ((st = check_model_keys(c, own, where, label)) ||
        (st = canon_optimizer(c, ymap_get(own, "optimizer"))))
        return st;
    ynode *merged;
    if ((st = merge_model(c, defaults, own, &merged)))
        return st;
    /* The sweep's combinations, each with every draw of the search. */
    for (size_t k = 0; k < sw->combos * search->combos && st == COHORT_OK; k++) {
        ynode *t = sw->n || search->n ? ynode_clone(merged, 0) : merged;
        char suffix[COHORT_NAME_MAX + 64], drawn[COHORT_NAME_MAX + 64];
        char full[3 * COHORT_NAME_MAX + 192];
        suffix[0] = drawn[0] = 0;
        if (!t) {
            st = ynode_nomem(c);
            break;
        }
        if (sw->n)
            st = plan_sweep_apply(c, sw, k / search->combos, t, label, suffix, sizeof suffix);
        if (!st && search->n)
            st = plan_sweep_apply(c, search, k % search->combos, t, label, drawn, sizeof drawn);
        if (st == COHORT_OK) {
            snprintf(full, sizeof full, "%s%s%s", base, suffix, drawn);
            if (strlen(full) >= COHORT_NAME_MAX)
                st = ynode_fail(c, name, "the name the sweep gives %s, '%.60s...', is too long "
                                         "(at most %d characters)",
                                label, full, COHORT_NAME_MAX - 1);
        }
        model_spec *s = &plan->models[plan->n_models];
        if (st == COHORT_OK)
            st = build_model(c, t, full, &plan->data, s);
        if (st == COHORT_OK) {
            s->shared_order = plan->shared_order;
            if ((s->config_json = model_spec_to_json(s)))
                plan->n_models++;
            else
                st = ynode_nomem(c);
        }
        if (t != merged)
            ynode_free(t);
    }
    ynode_free(merged);
    return st;
}

/* ---- errors: every one found, at once --------------------------------- */

/*
 * The errors of a plan, reported together as a compiler does: one file:line
 * a line, up to PLAN_MAX_ERRORS, then how many there were. Each stage (the
 * top, data, devices, the scheduler, defaults, each model) adds its first
 * error and the next stage runs all the same, unless it needs what failed.
 * A mistake in defaults is one error, however many models inherit it: an
 * error at an inherited node is kept once, with the number of models it
 * stopped.
 */
typedef struct plan_errs {
    int n;       /* errors found */
    int kept;    /* entries of e, at most PLAN_MAX_ERRORS */
    struct {
        char *msg;          /* owned */
        int inherited;      /* at a node the model has from defaults: */
        int line;           /* the node's line */
        const char *origin; /* and origin */
        int models;         /* models it stopped */
    } e[PLAN_MAX_ERRORS];
} plan_errs;

/* The part of an error that does not name a model ("... of model 'a'"). */
static size_t unlabeled_len(const char *msg)
{
    const char *m = strstr(msg, "model '");
    return m ? (size_t)(m - msg) : strlen(msg);
}

/* Add the error of a stage that returned st (c->err's message), which was
 * at `at` (NULL or no node: unknown). Returns COHORT_OK to go on, or st when it
 * is not an input error (out of memory): then the plan stops at once. */
static cohort_status errs_add(plan_errs *pe, const yctx *c, cohort_status st, const yfailed *at)
{
    if (st != COHORT_ERR_INPUT)
        return st;
    const char *msg = c->err->message;
    int inherited = at && at->node && at->inherited;
    for (int i = 0; i < pe->kept; i++) {
        const char *old = pe->e[i].msg;
        size_t len = unlabeled_len(old);
        if (inherited && pe->e[i].inherited && pe->e[i].line == at->line &&
            (pe->e[i].origin == at->origin ||
             (pe->e[i].origin && at->origin && !strcmp(pe->e[i].origin, at->origin))) &&
            len == unlabeled_len(msg) && !strncmp(old, msg, len)) {
            pe->e[i].models++;
            return COHORT_OK;
        }
        if (!strcmp(old, msg))
            return COHORT_OK;
    }
    if (pe->n++ >= PLAN_MAX_ERRORS)
        return COHORT_OK;
    int i = pe->kept;
    if (!(pe->e[i].msg = str_dup(msg)))
        return ynode_nomem(c);
    pe->e[i].inherited = inherited;
    pe->e[i].line = inherited ? at->line : 0;
    pe->e[i].origin = inherited ? at->origin : NULL;
    pe->e[i].models = 1;
    pe->kept++;
    return COHORT_OK;
}

/* The errors as one message in c->err (COHORT_ERR_INPUT), or COHORT_OK when
 * there were none; frees pe's entries. */
static cohort_status errs_finish(plan_errs *pe, const yctx *c)
{
    strbuf b;
    sb_init(&b);
    for (int i = 0; i < pe->kept; i++) {
        sb_printf(&b, "%s%s", i ? "\n" : "", pe->e[i].msg);
        if (pe->e[i].models > 1)
            sb_printf(&b, " (inherited from defaults by %d models)", pe->e[i].models);
        free(pe->e[i].msg);
    }
    if (pe->n > PLAN_MAX_ERRORS)
        sb_printf(&b, "\n... and %d more", pe->n - PLAN_MAX_ERRORS);
    if (pe->n > 1)
        sb_printf(&b, "\n%d errors in the plan", pe->n);
    cohort_status st = COHORT_OK;
    if (b.failed)
        st = ynode_nomem(c);
    else if (pe->n)
        st = cohort_fail(c->err, COHORT_ERR_INPUT, "%s", b.data);
    sb_free(&b);
    pe->kept = pe->n = 0;
    return st;
}

/* Run one stage of the plan into pe: c->failed cleared, the call made, its
 * error added (and the plan goes on) unless it is not an input error.
 * Returns what errs_add returns. */
#define PLAN_STAGE(pe, c, call)                                                             \
    ((c)->failed->node = NULL, errs_add((pe), (c), (call), (c)->failed))

/* Remove the entry whose key is `key` from map or from a map it holds;
 * returns whether it was found. */
static int drop_key(ynode *map, const ynode *key)
{
    for (size_t i = 0; i < map->n; i++) {
        if (map->keys[i] == key) {
            ymap_remove(map, i);
            return 1;
        }
        if (map->vals[i]->type == YNODE_MAP && drop_key(map->vals[i], key))
            return 1;
    }
    return 0;
}

/* Models of the plan: each merged with defaults and swept. Every error goes
 * into pe; the return is not COHORT_OK only to stop at once (out of
 * memory). *built: every model was built, so the checks across models can
 * run. */
static cohort_status build_models(const yctx *c, plan_errs *pe, ynode *root,
                                  cohort_plan *plan, int *built)
{
    char got[80];
    *built = 0;
    ynode *models = ymap_get(root, "models");
    cohort_status st = COHORT_OK;
    if (!models)
        st = ynode_fail(c, root, "the plan has no 'models' list");
    else if (models->type != YNODE_SEQ)
        st = ynode_fail(c, models, "models must be a list of models, got %s",
                        ynode_describe(models, got, sizeof got));
    else if (models->n == 0)
        st = ynode_fail(c, models, "models is empty; give at least one model with a name and "
                                   "layers");
    else if (models->n > COHORT_MAX_MODELS)
        st = ynode_fail(c, models, "the plan has %zu models, more than the %d allowed",
                        models->n, COHORT_MAX_MODELS);
    if (st)
        return errs_add(pe, c, st, NULL);

    /* Defaults' own mistakes are reported once here; a model that inherits
     * one fails at the same line, which errs_add counts, not repeats. */
    ynode *defaults = ymap_get(root, "defaults");
    if (defaults && ynode_is_null(defaults))
        defaults = NULL;
    if (defaults) {
        if (defaults->type != YNODE_MAP) {
            st = ynode_fail(c, defaults, "defaults must be a map of model keys, got %s",
                            ynode_describe(defaults, got, sizeof got));
            return errs_add(pe, c, st, NULL);
        }
        int ni = ymap_find(defaults, "name");
        if (ni >= 0 && (st = PLAN_STAGE(pe, c,
                                        ynode_fail(c, defaults->keys[ni], "'name' cannot be in "
                                                   "defaults; each model has its own"))))
            return st;
        /* Each unknown key is reported and dropped, so that the models
         * inherit none of them and report their own mistakes. */
        for (int k = 0; k < PLAN_MAX_ERRORS; k++) {
            c->failed->node = NULL;
            st = check_model_keys(c, defaults, "in defaults", "defaults");
            if (!st || (st = errs_add(pe, c, st, c->failed)) || !c->failed->node ||
                !drop_key(defaults, c->failed->node))
                break;
        }
        if (st || (st = PLAN_STAGE(pe, c, canon_optimizer(c, ymap_get(defaults, "optimizer")))))
            return st;
    }

    const ynode *sweep_node = ymap_get(root, "sweep"), *search_node = ymap_get(root, "search");
    plan_sweep sweep, search;
    int before = pe->n;
    if ((st = PLAN_STAGE(pe, c, plan_search_parse(c, search_node, &search))) ||
        (st = PLAN_STAGE(pe, c, plan_sweep_parse(c, sweep_node, &sweep)))) {
        plan_sweep_free(&search);
        return st;
    }
    if (pe->n > before) { /* the sweep or search: no model can be named */
        plan_sweep_free(&search);
        plan_sweep_free(&sweep);
        return COHORT_OK;
    }
    /* Each factor is at most COHORT_MAX_MODELS: the product fits a size_t. */
    size_t per_entry = sweep.combos * search.combos;
    size_t total = models->n * per_entry;
    if (total > COHORT_MAX_MODELS || !(plan->models = calloc(total, sizeof *plan->models))) {
        plan_sweep_free(&sweep);
        plan_sweep_free(&search);
        if (total <= COHORT_MAX_MODELS)
            return ynode_nomem(c);
        st = ynode_fail(c, search.n ? search_node : sweep_node,
                        "the %s makes %zu models, more than the %d allowed",
                        search.n && sweep.n ? "sweep with the search" : search.n ? "search" : "sweep",
                        total, COHORT_MAX_MODELS);
        return errs_add(pe, c, st, NULL);
    }

    /* A model's error does not stop the others'. */
    before = pe->n;
    for (size_t i = 0; i < models->n && st == COHORT_OK; i++)
        st = PLAN_STAGE(pe, c,
                        build_plan_model(c, models->vals[i], i, defaults, &sweep, &search, plan));
    plan_sweep_free(&sweep);
    plan_sweep_free(&search);
    if (st || pe->n > before)
        return st;
    if ((st = PLAN_STAGE(pe, c, check_unique_names(c, plan, per_entry))))
        return st;
    *built = pe->n == before;
    return COHORT_OK;
}

/* ---- the plan -------------------------------------------------------- */

static char *plan_to_json(const cohort_plan *p)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"name\":");
    sb_json_str(&b, p->name);
    sb_puts(&b, ",\"path\":");
    sb_json_str(&b, p->path);
    sb_puts(&b, ",\"data\":{\"train\":");
    sb_json_str(&b, p->data.train);
    const char *opt[][2] = {{"test", p->data.test}, {"validation", p->data.validation}};
    for (int i = 0; i < 2; i++) {
        sb_printf(&b, ",\"%s\":", opt[i][0]);
        if (opt[i][1][0])
            sb_json_str(&b, opt[i][1]);
        else
            sb_puts(&b, "null");
    }
    sb_puts(&b, ",\"validation_split\":");
    sb_json_num(&b, p->data.validation_split);
    sb_puts(&b, ",\"label_column\":");
    if (p->data.label_column[0])
        sb_json_str(&b, p->data.label_column);
    else
        sb_puts(&b, "null");
    if (p->data.label_columns[0]) {
        sb_puts(&b, ",\"label_columns\":");
        sb_json_str(&b, p->data.label_columns);
    }
    const sample_shape *is = &p->data.input_shape;
    if (is->rank == 3)
        sb_printf(&b, ",\"input_shape\":[%d,%d,%d]", is->h, is->w, is->c);
    else if (is->rank == 1)
        sb_printf(&b, ",\"input_shape\":[%d]", is->c);
    sb_printf(&b, "},\"strategy\":\"%s\",\"shared_order\":%s,\"devices\":{",
              cohort_strategy_str(p->strategy), p->shared_order ? "true" : "false");
    for (int i = 0; i < p->n_devices; i++) {
        const device_spec *d = &p->devices[i];
        if (i)
            sb_puts(&b, ",");
        sb_json_str(&b, d->name);
        sb_printf(&b, ":{\"memory\":\"%s\",\"split\":",
                  d->policy == COHORT_MEM_PREALLOCATE ? "preallocate" : "grow");
        if (d->n_split) {
            sb_puts(&b, "[");
            for (int j = 0; j < d->n_split; j++)
                sb_printf(&b, "%s%llu", j ? "," : "", (unsigned long long)d->split[j]);
            sb_puts(&b, "]");
        } else {
            sb_puts(&b, "null");
        }
        if (d->memory_limit)
            sb_printf(&b, ",\"memory_limit\":%llu}", (unsigned long long)d->memory_limit);
        else
            sb_puts(&b, ",\"memory_limit\":null}");
    }
    sb_puts(&b, "},\"models\":[");
    for (int i = 0; i < p->n_models; i++) {
        if (i)
            sb_puts(&b, ",");
        sb_puts(&b, p->models[i].config_json);
    }
    sb_puts(&b, "]}");
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    return b.data;
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

static const char *const sched_keys[] = {"name",
                                         "metric",
                                         "mode",
                                         "grace_period",
                                         "reduction_factor",
                                         "max_t",
                                         "perturbation_interval",
                                         "quantile_fraction",
                                         "resample_probability",
                                         "hyperparam_mutations",
                                         "seed",
                                         NULL};
/* The keys of sched_keys from here on are pbt's; the ones before
 * "perturbation_interval" from grace_period on are the pruning rules'. */
#define SCHED_FIRST_PRUNE_KEY 3
#define SCHED_FIRST_PBT_KEY 6
static const char *const sched_names[] = {"none", "asha", "median", "hyperband", "pbt"};

const char *prune_kind_name(prune_kind k)
{
    switch (k) {
    case PRUNE_NONE: return "none";
    case PRUNE_ASHA: return "asha";
    case PRUNE_MEDIAN: return "median";
    case PRUNE_HYPERBAND: return "hyperband";
    case PRUNE_PBT: return "pbt";
    }
    return "unknown";
}

/* The values mutation m can take are values its setting allows. */
static cohort_status check_mutation_values(const yctx *c, const ynode *key, const pbt_mutation *m)
{
    double ends[PBT_MAX_CHOICES];
    int n = plan_dist_ends(m, ends);
    char range[64];
    for (int i = 0; i < n; i++)
        if (!model_hyper_allows(m->path, ends[i], range, sizeof range))
            return ynode_fail(c, key, "scheduler.hyperparam_mutations: %s takes values in %s, "
                                      "but its distribution reaches %g",
                              key->str, range, ends[i]);
    return COHORT_OK;
}

/* pbt's settings: perturbation_interval, quantile_fraction,
 * resample_probability, seed and hyperparam_mutations. */
static cohort_status parse_pbt(const yctx *c, const ynode *n, scheduler_spec *s)
{
    const ynode *v;
    cohort_status st;
    long long ll;
    s->quantile = 0.25;
    s->resample = 0.25;
    s->seed = 1;
    if (!(v = ymap_get(n, "perturbation_interval")))
        return ynode_fail(c, n, "scheduler pbt needs perturbation_interval, the epochs between "
                                "two exploits, like {name: pbt, perturbation_interval: 2, "
                                "hyperparam_mutations: {optimizer.lr: {loguniform: [1.0e-4, "
                                "1.0e-1]}}}");
    if ((st = yget_int(c, v, "scheduler.perturbation_interval", 1, 100000, &ll)))
        return st;
    s->interval = (int)ll;
    if ((v = ymap_get(n, "quantile_fraction"))) {
        if ((st = yget_num(c, v, "scheduler.quantile_fraction", YR_POSITIVE, 0, &s->quantile)))
            return st;
        if (s->quantile > 0.5)
            return ynode_fail(c, v, "scheduler.quantile_fraction must be at most 0.5 (the bottom "
                                    "fraction copies the top one), got %g",
                              s->quantile);
    }
    if ((v = ymap_get(n, "resample_probability"))) {
        if ((st = yget_num(c, v, "scheduler.resample_probability", YR_NONNEG, 0, &s->resample)))
            return st;
        if (s->resample > 1)
            return ynode_fail(c, v, "scheduler.resample_probability must be in [0, 1], got %g",
                              s->resample);
    }
    unsigned long long seed;
    if ((v = ymap_get(n, "seed"))) {
        if ((st = yget_u64(c, v, "scheduler.seed", &seed)))
            return st;
        s->seed = seed;
    }
    const ynode *muts = ymap_get(n, "hyperparam_mutations");
    char got[80];
    if (!muts || muts->type != YNODE_MAP || muts->n == 0)
        return ynode_fail(c, muts ? muts : n,
                          "scheduler pbt needs hyperparam_mutations, a map from model keys to "
                          "distributions like {optimizer.lr: {loguniform: [1.0e-4, 1.0e-1]}}%s%s",
                          muts ? ", got " : "", muts ? ynode_describe(muts, got, sizeof got) : "");
    if (muts->n > PBT_MAX_KEYS)
        return ynode_fail(c, muts->keys[PBT_MAX_KEYS], "scheduler.hyperparam_mutations has more "
                                                       "than %d keys",
                          PBT_MAX_KEYS);
    for (size_t i = 0; i < muts->n; i++) {
        pbt_mutation *m = &s->mut[i];
        const ynode *key = muts->keys[i];
        m->line = key->line;
        if ((st = plan_key_path(c, key, "scheduler.hyperparam_mutations key", m->path,
                                sizeof m->path)))
            return st;
        if (!model_hyper_known(m->path))
            return ynode_fail(c, key, "scheduler.hyperparam_mutations key '%s' would change the "
                                      "model's shapes or memory, which pbt cannot do while a "
                                      "model trains; it mutates optimizer.lr, .momentum, "
                                      ".beta_1, .beta_2, .epsilon, .weight_decay, .rho, "
                                      "layers.N.dropout and layers.N.kernel_regularizer.l1/.l2",
                              key->str);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->mut[j].path, m->path))
                return ynode_fail(c, key, "scheduler.hyperparam_mutations key '%s' mutates the "
                                          "same setting as line %d",
                                  key->str, s->mut[j].line);
        if ((st = plan_dist_parse(c, key, muts->vals[i], m)) ||
            (st = check_mutation_values(c, key, m)))
            return st;
        s->n_mut = (int)i + 1;
    }
    return COHORT_OK;
}

/* scheduler: {name, metric, mode, grace_period, reduction_factor, max_t}, or
 * for pbt {name, metric, mode, perturbation_interval, quantile_fraction,
 * resample_probability, hyperparam_mutations, seed}. */
static cohort_status parse_scheduler(const yctx *c, const ynode *root, cohort_plan *plan)
{
    scheduler_spec *s = &plan->scheduler;
    memset(s, 0, sizeof *s);
    s->grace = 1;
    s->eta = 4; /* Ray Tune's ASHA default */
    const ynode *n = ymap_get(root, "scheduler"), *v;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    char got[80];
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "scheduler must be a map like {name: asha, metric: val_loss, "
                                "grace_period: 1}, got %s",
                          ynode_describe(n, got, sizeof got));
    cohort_status st = plan_check_keys(c, n, sched_keys, "in scheduler");
    if (st)
        return st;
    s->line = n->line;
    int kind = 0, idx;
    if (!(v = ymap_get(n, "name")))
        return ynode_fail(c, n, "scheduler needs a name: asha, hyperband, median, pbt or none");
    if ((st = yget_enum(c, v, "scheduler.name", sched_names, COUNT(sched_names), &kind)))
        return st;
    static const prune_kind kinds[] = {PRUNE_NONE, PRUNE_ASHA, PRUNE_MEDIAN, PRUNE_HYPERBAND,
                                       PRUNE_PBT};
    s->kind = kinds[kind];
    /* A setting of the other family is a mistake, not something to ignore. */
    for (int i = SCHED_FIRST_PRUNE_KEY; sched_keys[i]; i++) {
        int pbt_key = i >= SCHED_FIRST_PBT_KEY;
        if ((v = ymap_get(n, sched_keys[i])) && pbt_key != (s->kind == PRUNE_PBT))
            return ynode_fail(c, v, "scheduler.%s is a setting of %s, not of scheduler %s",
                              sched_keys[i], pbt_key ? "pbt" : "asha, median and hyperband",
                              sched_names[kind]);
    }
    int has_val = plan->data.validation[0] || plan->data.validation_split > 0.0;
    str_copy(s->metric, sizeof s->metric, has_val ? "val_loss" : "loss");
    if ((v = ymap_get(n, "metric"))) {
        if ((st = get_monitor(c, v, "scheduler.metric", s->metric, sizeof s->metric)))
            return st;
        if (!strncmp(s->metric, "val_", 4) && !has_val)
            return ynode_fail(c, v, "the scheduler watches %s, but the plan has no validation "
                                    "data; give data.validation or data.validation_split, or "
                                    "watch %s",
                              s->metric, s->metric + 4);
    }
    s->maximize = strstr(s->metric, "accuracy") != NULL;
    if ((v = ymap_get(n, "mode"))) {
        static const char *const modes[] = {"min", "max"};
        if ((st = yget_enum(c, v, "scheduler.mode", modes, 2, &idx)))
            return st;
        s->maximize = idx;
    }
    if (s->kind == PRUNE_PBT)
        return parse_pbt(c, n, s);
    long long ll;
    if ((v = ymap_get(n, "grace_period"))) {
        if ((st = yget_int(c, v, "scheduler.grace_period", 1, 100000, &ll)))
            return st;
        s->grace = (int)ll;
    }
    if ((v = ymap_get(n, "reduction_factor"))) {
        if ((st = yget_int(c, v, "scheduler.reduction_factor", 2, 1000, &ll)))
            return st;
        s->eta = (int)ll;
        /* median has no rungs to space: the setting would be ignored. */
        if (s->kind == PRUNE_MEDIAN)
            return ynode_fail(c, v, "scheduler.reduction_factor is a setting of asha and "
                                    "hyperband, not of scheduler median");
    }
    if ((v = ymap_get(n, "max_t"))) {
        if ((st = yget_int(c, v, "scheduler.max_t", 1, 100000, &ll)))
            return st;
        s->max_t = (int)ll;
        if (s->grace > s->max_t)
            return ynode_fail(c, v, "scheduler.grace_period (%d) is more than max_t (%d): no "
                                    "model could be stopped",
                              s->grace, s->max_t);
    }
    return COHORT_OK;
}

/* Every key of pbt's hyperparam_mutations is a setting the models have
 * (they all have the same layers and optimizer: run_check_scheduler). */
static cohort_status check_mutation_keys(const yctx *c, const ynode *root, cohort_plan *plan)
{
    const scheduler_spec *s = &plan->scheduler;
    if (s->kind != PRUNE_PBT)
        return COHORT_OK;
    const ynode *muts = ymap_get(ymap_get(root, "scheduler"), "hyperparam_mutations");
    for (int i = 0; i < s->n_mut; i++) {
        int has = 0;
        for (int m = 0; m < plan->n_models && !has; m++)
            has = model_hyper_field(&plan->models[m], s->mut[i].path) != NULL;
        if (!has)
            return ynode_fail(c, muts->keys[i], "scheduler.hyperparam_mutations key '%s': no "
                                                "model has it (%s)",
                              muts->keys[i]->str,
                              !strncmp(s->mut[i].path, "layers.", 7)
                                  ? "the layer is missing or of another kind"
                                  : "the models' optimizer does not take it");
    }
    return COHORT_OK;
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

/* A warning for each key of defaults' optimizer that no model's optimizer
 * takes (weight_decay with only adam models): build_optimizer passes over
 * an inherited key its optimizer does not take, meant for another model's,
 * so a key that is every model's other optimizer's would vanish unsaid. */
static cohort_status warn_unused_defaults(const yctx *c, const ynode *root,
                                          const cohort_plan *plan)
{
    const ynode *o = ymap_get(ymap_get(root, "defaults"), "optimizer");
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i]->str;
        if (!optim_key_any(k))
            continue; /* name, lr, the clips, the schedule: every optimizer's */
        int used = 0;
        for (int m = 0; m < plan->n_models && !used; m++)
            used = optim_key_of(plan->models[m].opt.kind, k) != NULL;
        if (used)
            continue;
        /* The models, by optimizer: "adam: a, b, c; sgd: d". */
        strbuf b;
        sb_init(&b);
        for (int kind = 0; kind < OPT_KIND_COUNT; kind++) {
            int n = 0;
            for (int m = 0; m < plan->n_models; m++) {
                if ((int)plan->models[m].opt.kind != kind)
                    continue;
                if (n < 4)
                    sb_printf(&b, "%s%s%s", n ? ", " : b.len ? "; " : "",
                              n ? "" : opt_name((opt_kind)kind), n ? "" : ": ");
                if (n < 4)
                    sb_puts(&b, plan->models[m].name);
                else if (n == 4)
                    sb_puts(&b, ", ...");
                n++;
            }
        }
        if (b.failed) {
            sb_free(&b);
            return ynode_nomem(c);
        }
        const ynode *key = o->keys[i];
        char where[COHORT_PATH_MAX + 32];
        if (key->origin)
            snprintf(where, sizeof where, "--set %s", key->origin);
        else
            snprintf(where, sizeof where, "%s:%d", c->file, key->line);
        cohort_log(COHORT_LOG_WARN, "%s: defaults.optimizer.%s is used by none of the models: "
                                    "no model's optimizer takes it (%s)",
                   where, k, b.data);
        sb_free(&b);
    }
    return COHORT_OK;
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
        if ((st = apply_override(c, root, overrides[i])))
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
    if ((st = PLAN_STAGE(&pe, &sc, parse_data(&sc, root, &plan->data))))
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
    if ((st = PLAN_STAGE(&pe, &sc, parse_devices(&sc, root, plan))))
        goto out;
    int sched_errors = pe.n;
    if ((st = PLAN_STAGE(&pe, &sc, parse_scheduler(&sc, root, plan))))
        goto out;
    int sched_ok = pe.n == sched_errors;
    if ((st = build_models(&sc, &pe, root, plan, &models_built)))
        goto out;
    if (sched_ok && models_built)
        st = PLAN_STAGE(&pe, &sc, check_mutation_keys(&sc, root, plan));
    if (!st && !pe.n)
        st = warn_unused_defaults(&sc, root, plan);
out:
    if (st) {
        for (int i = 0; i < pe.kept; i++)
            free(pe.e[i].msg);
        return st;
    }
    return errs_finish(&pe, &sc);
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
