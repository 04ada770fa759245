/* data: the plan's data and devices sections, and its paths, resolved against
 * the plan's folder. */
#include "plan/plan_impl.h"

#include "data/data.h"

#include <stdint.h>
#include <string.h>

static const char *const data_keys[] = {"train", "test", "validation", "validation_split",
                                        "label_column", "label_columns", "input_shape", NULL};

static const char *const device_keys[] = {"memory", "split", "memory_limit", NULL};

static const char *const memory_names[] = {"grow", "preallocate"};

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

cohort_status plan_yget_path(const yctx *c, const ynode *n, int is_data, const char *what,
                             char *buf, size_t size)
{
    cohort_status st = yget_str(c, n, what, buf, size);
    return st ? st : resolve_path(c, n, is_data, what, buf, size);
}

/* plan_yget_path for a dataset spec, whose form is checked here: its errors then
 * give the plan's line, which the reader's (when training starts) cannot. */
static cohort_status yget_dataset(const yctx *c, const ynode *n, const char *what, char *buf,
                                  size_t size)
{
    cohort_status st = plan_yget_path(c, n, 1, what, buf, size);
    cohort_error e;
    if (!st && data_spec_check(buf, 1, &e))
        st = ynode_fail(c, n, "%s: %s", what, e.message);
    return st;
}

/* data.input_shape: [H, W, C], [T, F] or [D], positive, at most INT32_MAX
 * values in all. */
static cohort_status parse_input_shape(const yctx *c, const ynode *v, data_spec *d)
{
    char got[80], len[40] = "";
    if (v->type == YNODE_SEQ)
        snprintf(len, sizeof len, " of %zu", v->n);
    if (v->type != YNODE_SEQ || v->n < 1 || v->n > 3)
        return ynode_fail(c, v, "data.input_shape must be a list of 3 positive integers [H, W, C] "
                                "(an image, channels last), of 2 [T, F] (a sequence of T steps of "
                                "F features) or of 1 [D] (a flat vector), got %s%s",
                          ynode_describe(v, got, sizeof got), len);
    long long dims[3], total = 1;
    for (size_t i = 0; i < v->n; i++) {
        cohort_status st = yget_int(c, v->vals[i], "each size in data.input_shape", 1, INT32_MAX,
                                    &dims[i]);
        if (st)
            return st;
        if (__builtin_mul_overflow(total, dims[i], &total) || total > INT32_MAX)
            return ynode_fail(c, v, "data.input_shape has more than %d values", INT32_MAX);
    }
    d->input_shape = v->n == 3   ? shape_image((int)dims[0], (int)dims[1], (int)dims[2])
                     : v->n == 2 ? shape_seq((int)dims[0], (int)dims[1])
                                 : shape_flat((int)dims[0]);
    d->input_shape_line = v->line;
    return COHORT_OK;
}

cohort_status plan_parse_data(const yctx *c, const ynode *root, data_spec *d)
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

int plan_device_name_ok(const char *s, int allow_part)
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
    if (!plan_device_name_ok(key->str, 0) || str_copy(d->name, sizeof d->name, key->str))
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

cohort_status plan_parse_devices(const yctx *c, const ynode *root, cohort_plan *plan)
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
