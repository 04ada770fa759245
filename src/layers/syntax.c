/*
 * layers/syntax: what every layer kind shares of the plan's layer syntax,
 * through the table: which kind an entry of `layers` is (a bare name, or
 * the one kind key of its map), the checks and Keras hints that hold for
 * any kind, and the keys several kinds take (activation, use_bias,
 * kernel_regularizer, strides, padding, an [h, w] size), with their JSON;
 * then a layer's JSON, fusion, short form and output description, each
 * from its entry.
 */
#include "layers/layer.h"
#include "plan/keys.h"

#include <stdio.h>
#include <string.h>

/* Same order as act_kind and pad_kind, then swish, Keras's other name of
 * silu. Read in any case: Keras lowercases padding ("SAME"), and torch
 * spells ReLU, Tanh, Sigmoid, GELU, SiLU. */
static const char *const act_names[] = {"linear", "relu",  "sigmoid", "tanh",
                                        "softmax", "gelu", "silu",    "swish"};
#define ACT_NAMES_COUNT ((int)(sizeof act_names / sizeof act_names[0]))
static const char *const pad_names[] = {"valid", "same"};
static const char *const regularizer_keys[] = {"l1", "l2", NULL};

/* "a, b and c" (or "or") of names into buf. */
static void join_names(char *buf, size_t size, const char *const *names, int n, const char *last)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%s", i == 0 ? "" : i == n - 1 ? last : ", ",
                         names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

static int in_list(const char *const *list, const char *k)
{
    for (; list && *list; list++)
        if (strcmp(*list, k) == 0)
            return 1;
    return 0;
}

/* The kinds' names, in table order. */
static int kind_names(const char **names, int max)
{
    int n;
    const layer_ops *const *kinds = layer_kinds(&n);
    for (int k = 0; k < n && k < max; k++)
        names[k] = kinds[k]->name;
    return n < max ? n : max;
}

/* A kind's name that is also another kind's key ('activation'), which is
 * that key wherever the map names another kind. */
static int is_setting(const char *name)
{
    int n;
    const layer_ops *const *kinds = layer_kinds(&n);
    for (int k = 0; k < n; k++)
        if (strcmp(kinds[k]->name, name) != 0 && in_list(kinds[k]->keys, name))
            return 1;
    return 0;
}

/* What a kind that does not take key says it takes. */
static void takes_list(const layer_ops *k, char *buf, size_t size)
{
    if (k->hint) {
        snprintf(buf, size, "%s", k->hint);
        return;
    }
    const char *keys[LAYER_KEYS_MAX];
    int n = 0;
    for (const char *const *key = k->keys; key && *key && n < LAYER_KEYS_MAX; key++)
        keys[n++] = *key;
    if (!n) {
        snprintf(buf, size, "it takes no other settings");
        return;
    }
    char list[400];
    join_names(list, sizeof list, keys, n, " and ");
    snprintf(buf, size, "it takes %s", list);
}

/* The kinds that take an activation, for the message of one that does not. */
static void act_kinds(char *buf, size_t size)
{
    const char *names[LAYER_KEYS_MAX];
    int n, m = 0;
    const layer_ops *const *kinds = layer_kinds(&n);
    for (int k = 0; k < n && m < LAYER_KEYS_MAX; k++)
        if (kinds[k]->with_act)
            names[m++] = kinds[k]->name;
    join_names(buf, size, names, m, " and ");
}

/* A map's keys that Keras users write and cohort spells otherwise: Keras's
 * argument names for a kind's value, Python's tuples (which YAML reads as
 * text), a kind's inner keys written beside it. */
static cohort_status keras_hints(const yctx *c, const ynode *n, const char *where,
                                  const char *label)
{
    int n_kinds;
    const layer_ops *const *kinds = layer_kinds(&n_kinds);
    /* An inner key of a kind the map names ({embedding: 30, input_dim: 30})
     * goes inside that kind's value, whatever else the key may mean. */
    for (size_t j = 0; j < n->n; j++)
        for (int k = 0; k < n_kinds; k++)
            if (ymap_get(n, kinds[k]->name) && in_list(kinds[k]->inner, n->keys[j]->str))
                return ynode_fail(c, n->keys[j], "'%s' in %s of %s goes inside %s: %s",
                                  n->keys[j]->str, where, label, kinds[k]->name,
                                  kinds[k]->hint ? kinds[k]->hint
                                                 : "give them in its value's map");
    for (size_t j = 0; j < n->n; j++) {
        const char *key = n->keys[j]->str;
        for (int k = 0; k < n_kinds; k++)
            for (const layer_keras_arg *a = kinds[k]->keras_args; a && a->arg; a++)
                if (strcmp(key, a->arg) == 0)
                    return ynode_fail(c, n->keys[j], "unknown key '%s' in %s of %s: %s",
                                      a->arg, where, label, a->hint);
        if (strcmp(key, "input_shape") == 0 || strcmp(key, "input_dim") == 0)
            return ynode_fail(c, n->keys[j], "unknown key '%s' in %s of %s: the input %s "
                                             "is the data's (data.input_shape reshapes flat data)",
                              key, where, label, key[6] == 's' ? "shape" : "size");
        const ynode *v = n->vals[j];
        if (v->type == YNODE_SCALAR && v->plain && v->str[0] == '(')
            return ynode_fail(c, v, "%s of %s of %s is a Python tuple ('%.20s'), which "
                                    "YAML does not have; write a list: %s: [h, w]",
                              key, where, label, v->str, key);
    }
    for (size_t j = 0; j < n->n; j++)
        for (int k = 0; k < n_kinds; k++)
            if (in_list(kinds[k]->inner, n->keys[j]->str))
                return ynode_fail(c, n->keys[j], "'%s' in %s of %s goes inside %s: %s",
                                  n->keys[j]->str, where, label, kinds[k]->name,
                                  kinds[k]->hint ? kinds[k]->hint : "give them in its value's map");
    return COHORT_OK;
}

/* Which kind a layer is: a bare name, or the one kind key of its map
 * ('activation' is the Activation layer only when no other kind is there). */
static cohort_status kind_of(const yctx *c, const ynode *n, const char *where, const char *label,
                             const layer_ops **kind)
{
    char got[80];
    if (n->type == YNODE_SCALAR) {
        const layer_ops *k = layer_find(n->str);
        if (!k) {
            const char *names[LAYER_KEYS_MAX];
            const char *near = ysuggest(n->str, names, kind_names(names, LAYER_KEYS_MAX));
            char hint[80] = "";
            if (near)
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
            return ynode_fail(c, n, "%s of %s must be a map like {dense: 10, activation: "
                                    "softmax}, or the name of a layer without settings (flatten, "
                                    "global_average_pooling2d, batch_normalization, "
                                    "max_pooling2d), got %s%s",
                              where, label, ynode_describe(n, got, sizeof got), hint);
        }
        if (k->example)
            return ynode_fail(c, n, "%s of %s: %s needs a value; write it as %s", where, label,
                              k->name, k->example);
        *kind = k;
        return COHORT_OK;
    }
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "%s of %s must be a map like {dense: 10, activation: "
                                "softmax}, or the name of a layer without settings (like "
                                "flatten), got %s",
                          where, label, ynode_describe(n, got, sizeof got));
    cohort_status st = keras_hints(c, n, where, label);
    if (st)
        return st;
    const char *all[LAYER_KEYS_MAX];
    layer_all_keys(all, LAYER_KEYS_MAX);
    st = plan_check_keys(c, n, all, "in %s of %s", where, label);
    if (st)
        return st;
    const layer_ops *found = NULL, *setting = NULL;
    for (size_t j = 0; j < n->n; j++) {
        const layer_ops *k = layer_find(n->keys[j]->str);
        if (k && is_setting(k->name)) {
            setting = k;
            continue;
        }
        if (!k)
            continue;
        if (found)
            return ynode_fail(c, n, "%s of %s has both '%s' and '%s'; a layer is one kind "
                                    "(give each its own entry)",
                              where, label, found->name, k->name);
        found = k;
    }
    if (!found && !setting) {
        const char *names[LAYER_KEYS_MAX];
        char list[600];
        join_names(list, sizeof list, names, kind_names(names, LAYER_KEYS_MAX), " or ");
        return ynode_fail(c, n, "%s of %s has no layer kind; give one of %s (like "
                                "{conv2d: 32, kernel_size: 3})",
                          where, label, list);
    }
    *kind = found ? found : setting;
    for (size_t j = 0; j < n->n; j++) {
        const char *key = n->keys[j]->str;
        if (strcmp(key, (*kind)->name) == 0 || in_list((*kind)->keys, key))
            continue;
        char takes[600];
        if (setting && strcmp(key, setting->name) == 0) {
            act_kinds(takes, sizeof takes);
            return ynode_fail(c, n->keys[j], "'%s' applies only to %s layers (%s of %s "
                                             "is %s); put {%s: %s} after it as a layer of its own",
                              key, takes, where, label, (*kind)->name, key,
                              n->vals[j]->type == YNODE_SCALAR ? n->vals[j]->str : "relu");
        }
        takes_list(*kind, takes, sizeof takes);
        return ynode_fail(c, n->keys[j], "'%s' does not apply to %s layers (%s of %s); %s",
                          key, (*kind)->name, where, label, takes);
    }
    return COHORT_OK;
}

/* One entry of a layers list at path (i, j) (j -1: at the top): a map like
 * {conv2d: 32, kernel_size: 3} or a bare name like flatten, with Keras's
 * defaults, into ls. A block's entry (a residual) takes its value's list
 * as it is: layer_parse_list reads the layers in it. */
cohort_status layer_parse_at(const yctx *c, const ynode *n, const int *path, int last,
                             const char *label, layer_spec *ls)
{
    char got[80], where[32];
    const layer_ops *kind = NULL;
    memset(ls, 0, sizeof *ls);
    layer_path_name(path, where, sizeof where);
    cohort_status st = kind_of(c, n, where, label, &kind);
    if (st)
        return st;
    const ynode *map = n->type == YNODE_MAP ? n : NULL;
    layer_syntax s = {c, n, map, map ? ymap_get(map, kind->name) : NULL, path[0], last, label,
                      where};
    ls->kind = kind;
    ls->line = n->line;
    ls->act = ACT_LINEAR;
    if (kind->block_end && (!s.value || s.value->type != YNODE_SEQ))
        return ynode_fail(c, s.value ? s.value : n, "%s of %s: the value of %s is a list of "
                                                    "layers, like %s",
                          where, label, kind->name, kind->example ? kind->example : "[...]");
    if (kind->parse)
        return kind->parse(&s, ls);
    if (!kind->block_end && !layer_no_settings(s.value))
        return ynode_fail(c, s.value, "%s takes no settings; write it as %s, got %s", kind->name,
                          kind->name, ynode_describe(s.value, got, sizeof got));
    return COHORT_OK;
}

/* Text parsed as one YAML node, handed to f. */
static cohort_status parse_text(const char *text, cohort_error *err,
                                cohort_status (*f)(const yctx *c, const ynode *root, void *arg),
                                void *arg)
{
    ynode *root = NULL;
    cohort_error mine;
    if (!err)
        err = &mine;
    cohort_status st = ytree_parse(text, strlen(text), "layer", NULL, 1024, &root, err);
    if (st)
        return st;
    if (!root)
        return cohort_fail(err, COHORT_ERR_INPUT, "layer: empty");
    yctx c = {"layer", err, NULL};
    st = f(&c, root, arg);
    ynode_free(root);
    return st;
}

static cohort_status one_layer(const yctx *c, const ynode *root, void *arg)
{
    static const int path[2] = {0, -1};
    return layer_parse_at(c, root, path, 1, "the layer", arg);
}

cohort_status layer_parse_text(const char *text, layer_spec *ls, cohort_error *err)
{
    return parse_text(text, err, one_layer, ls);
}

typedef struct list_arg {
    layer_spec *ls;
    int max, *n;
} list_arg;

static cohort_status layer_list(const yctx *c, const ynode *root, void *arg)
{
    const list_arg *a = arg;
    if (root->type != YNODE_SEQ)
        return ynode_fail(c, root, "a list of layers is a YAML list");
    return layer_parse_list(c, root, "the layers", a->ls, a->max, a->n);
}

cohort_status layer_parse_list_text(const char *text, layer_spec *ls, int max, int *n,
                                    cohort_error *err)
{
    list_arg a = {ls, max, n};
    return parse_text(text, err, layer_list, &a);
}

int layer_no_settings(const ynode *v)
{
    return !v || ynode_is_null(v) || (v->type == YNODE_MAP && v->n == 0);
}

cohort_status layer_get_hw(const yctx *c, const ynode *n, const char *what, int *h, int *w)
{
    char got[80];
    long long a, b;
    cohort_status st;
    if (n->type == YNODE_SEQ) {
        if (n->n != 2)
            return ynode_fail(c, n, "%s must be an integer or a list of 2 integers [h, w], got a "
                                    "list of %zu",
                              what, n->n);
        if ((st = yget_int(c, n->vals[0], what, 1, LAYER_WINDOW_MAX, &a)) ||
            (st = yget_int(c, n->vals[1], what, 1, LAYER_WINDOW_MAX, &b)))
            return st;
    } else if (n->type == YNODE_SCALAR) {
        if ((st = yget_int(c, n, what, 1, LAYER_WINDOW_MAX, &a)))
            return st;
        b = a;
    } else {
        return ynode_fail(c, n, "%s must be an integer or a list of 2 integers [h, w], got %s",
                          what, ynode_describe(n, got, sizeof got));
    }
    *h = (int)a;
    *w = (int)b;
    return COHORT_OK;
}

cohort_status layer_parse_window(const layer_syntax *s, int *sh, int *sw, pad_kind *pad)
{
    char what[200];
    const ynode *v;
    cohort_status st;
    if (s->map && (v = ymap_get(s->map, "strides"))) {
        snprintf(what, sizeof what, "strides of %s", s->where);
        if ((st = layer_get_hw(s->c, v, what, sh, sw)))
            return st;
    }
    if (s->map && (v = ymap_get(s->map, "padding"))) {
        int p;
        snprintf(what, sizeof what, "padding of %s", s->where);
        if ((st = yget_enum_anycase(s->c, v, what, pad_names, 2, &p)))
            return st;
        *pad = (pad_kind)p;
    }
    return COHORT_OK;
}

cohort_status layer_get_len(const yctx *c, const ynode *n, const char *what, int *v)
{
    char got[80];
    long long a;
    cohort_status st;
    if (n->type == YNODE_SEQ && n->n != 1)
        return ynode_fail(c, n, "%s must be an integer or a list of 1 integer, got a list of %zu",
                          what, n->n);
    if (n->type == YNODE_SEQ)
        n = n->vals[0];
    if (n->type != YNODE_SCALAR)
        return ynode_fail(c, n, "%s must be an integer, got %s", what,
                          ynode_describe(n, got, sizeof got));
    if ((st = yget_int(c, n, what, 1, LAYER_WINDOW_MAX, &a)))
        return st;
    *v = (int)a;
    return COHORT_OK;
}

static const char *const pad1d_names[] = {"valid", "same", "causal"};

cohort_status layer_parse_window1d(const layer_syntax *s, int causal, int *strides,
                                   pad_kind *pad)
{
    char what[200];
    const ynode *v;
    cohort_status st;
    if (s->map && (v = ymap_get(s->map, "strides"))) {
        snprintf(what, sizeof what, "strides of %s", s->where);
        if ((st = layer_get_len(s->c, v, what, strides)))
            return st;
    }
    if (s->map && (v = ymap_get(s->map, "padding"))) {
        int p;
        snprintf(what, sizeof what, "padding of %s", s->where);
        if ((st = yget_enum_anycase(s->c, v, what, pad1d_names, causal ? 3 : 2, &p)))
            return st;
        *pad = (pad_kind)p;
    }
    return COHORT_OK;
}

cohort_status layer_parse_use_bias(const layer_syntax *s, int *use_bias)
{
    char what[200];
    const ynode *v;
    *use_bias = 1;
    if (!s->map || !(v = ymap_get(s->map, "use_bias")))
        return COHORT_OK;
    snprintf(what, sizeof what, "use_bias of %s", s->where);
    return yget_bool(s->c, v, what, use_bias);
}

/* kernel_regularizer: null, Keras's shorthands l1 and l2 (a factor of
 * 0.01, as keras.regularizers.get gives them), or a map {l1: x, l2: y}. */
cohort_status layer_parse_regularizer(const layer_syntax *s, layer_spec *ls)
{
    char got[80], what[64];
    const yctx *c = s->c;
    const ynode *v = s->map ? ymap_get(s->map, "kernel_regularizer") : NULL;
    if (!v || ynode_is_null(v))
        return COHORT_OK;
    if (v->type == YNODE_SCALAR && strcmp(v->str, "l1") == 0) {
        ls->l1 = 0.01f;
        return COHORT_OK;
    }
    if (v->type == YNODE_SCALAR && strcmp(v->str, "l2") == 0) {
        ls->l2 = 0.01f;
        return COHORT_OK;
    }
    if (v->type != YNODE_MAP)
        return ynode_fail(c, v, "kernel_regularizer of %s of %s must be l1, l2 or a map "
                                "like {l2: 0.0001, l1: 0}, got %s",
                          s->where, s->label, ynode_describe(v, got, sizeof got));
    cohort_status st = plan_check_keys(c, v, regularizer_keys, "in kernel_regularizer of "
                                       "%s of %s", s->where, s->label);
    for (int j = 0; !st && j < 2; j++) {
        const ynode *x = ymap_get(v, regularizer_keys[j]);
        double d;
        snprintf(what, sizeof what, "kernel_regularizer.%s of %s", regularizer_keys[j],
                 s->where);
        if (x && !(st = yget_num(c, x, what, YR_NONNEG, 1, &d)))
            *(j ? &ls->l2 : &ls->l1) = (float)d;
    }
    return st;
}

cohort_status layer_parse_act(const layer_syntax *s, layer_spec *ls)
{
    char what[200];
    const ynode *act = s->map ? ymap_get(s->map, "activation") : NULL;
    if (!act)
        return COHORT_OK;
    int a;
    snprintf(what, sizeof what, "activation of %s", s->where);
    cohort_status st = yget_enum_anycase(s->c, act, what, act_names, ACT_NAMES_COUNT, &a);
    if (st)
        return st;
    ls->act = a == ACT_NAMES_COUNT - 1 ? ACT_SILU : (act_kind)a; /* swish */
    if (ls->act == ACT_SOFTMAX && !s->last)
        return ynode_fail(s->c, act, "%s of %s: softmax is allowed only on the last layer",
                          s->where, s->label);
    return COHORT_OK;
}

float *layer_l1_field(layer_spec *ls) { return &ls->l1; }
float *layer_l2_field(layer_spec *ls) { return &ls->l2; }

static void json_key(strbuf *b, const char *key)
{
    sb_putn(b, ",", 1);
    sb_json_str(b, key);
    sb_putn(b, ":", 1);
}

void layer_json_hw(strbuf *b, const char *key, int h, int w)
{
    json_key(b, key);
    sb_printf(b, "[%d,%d]", h, w);
}

void layer_json_padding(strbuf *b, pad_kind pad)
{
    sb_printf(b, ",\"padding\":\"%s\"",
              pad == PAD_SAME ? "same" : pad == PAD_CAUSAL ? "causal" : "valid");
}

void layer_json_act(strbuf *b, act_kind act)
{
    sb_puts(b, ",\"activation\":");
    sb_json_str(b, act_name(act));
}

void layer_json_use_bias(strbuf *b, int use_bias)
{
    if (!use_bias)
        sb_puts(b, ",\"use_bias\":false");
}

void layer_json_regularizer(strbuf *b, const layer_spec *ls)
{
    if (ls->l1 == 0.0f && ls->l2 == 0.0f)
        return;
    sb_puts(b, ",\"kernel_regularizer\":{\"l1\":");
    sb_json_float(b, ls->l1);
    sb_puts(b, ",\"l2\":");
    sb_json_float(b, ls->l2);
    sb_putn(b, "}", 1);
}

void layer_to_json(const layer_spec *ls, strbuf *b)
{
    sb_putn(b, "{", 1);
    if (ls->kind->to_json) {
        ls->kind->to_json(ls, b);
    } else {
        sb_json_str(b, ls->kind->name);
        sb_puts(b, ":null");
    }
    sb_putn(b, "}", 1);
}

int layer_fuse_any(const layer_spec *ls, int *key)
{
    (void)ls;
    (void)key;
    return 0;
}

int layer_can_fuse(const layer_spec *a, const layer_spec *b)
{
    if (a->kind != b->kind)
        return 0;
    if (!a->kind->fuse_key)
        return a->act == b->act && memcmp(&a->settings, &b->settings, sizeof a->settings) == 0;
    int ka[LAYER_FUSE_KEY_MAX], kb[LAYER_FUSE_KEY_MAX];
    int na = a->kind->fuse_key(a, ka), nb = b->kind->fuse_key(b, kb);
    return na == nb && memcmp(ka, kb, (size_t)na * sizeof ka[0]) == 0;
}

int layer_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return ls->kind->abbrev ? ls->kind->abbrev(ls, buf, n) : snprintf(buf, n, "%s", ls->kind->name);
}

void layer_describe_output(const layer_spec *ls, act_kind want, int binary, char *is,
                           size_t is_len, char *fix, size_t fix_len)
{
    const layer_ops *k = ls->kind;
    if (k->act_is_value)
        snprintf(is, is_len, "%s %s", k->name, act_name(ls->act));
    else if (k->with_act)
        snprintf(is, is_len, "%s with activation %s", k->name, act_name(ls->act));
    else
        snprintf(is, is_len, "%s", k->name);
    if (k->with_act)
        k->with_act(ls, want, fix, fix_len);
    else
        snprintf(fix, fix_len, "end with {dense: %s, activation: %s}", binary ? "1" : "CLASSES",
                 act_name(want));
}
