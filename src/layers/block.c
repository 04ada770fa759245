/*
 * layers/block: what the kinds that hold layers (a residual) share. A
 * model spec keeps one flat list of layers, so that the layout, the
 * trainer, fusion and every pass over layers stay one loop: a block is its
 * kind's entry, the layers of its value, then the entry of its kind's
 * block_end. Here: reading a `layers` list into that form, each layer's
 * path (its weight names: layers.i, or layers.i.j inside the block at i),
 * the block's list of a plan's layer map (sweep and --set paths), and the
 * list back as the JSON a spec stores and as `cohort plan`'s short form.
 */
#include "layers/layer.h"

#include <stdio.h>
#include <string.h>

int layer_path_name(const int *path, char *buf, size_t size)
{
    if (path[1] < 0)
        return snprintf(buf, size, "layers.%d", path[0]);
    return snprintf(buf, size, "layers.%d.%d", path[0], path[1]);
}

int layer_plan_name(const layer_plan *lp, char *buf, size_t size)
{
    int path[2] = {lp->path[0], lp->inner ? lp->path[1] : -1};
    return layer_path_name(path, buf, size);
}

/* The list of a block's map: the value of its kind's key. */
static const ynode *block_value(const ynode *layer, const layer_ops **kind)
{
    if (!layer || layer->type != YNODE_MAP)
        return NULL;
    for (size_t k = 0; k < layer->n; k++) {
        const layer_ops *ops = layer_find(layer->keys[k]->str);
        if (ops && ops->block_end && layer->vals[k]->type == YNODE_SEQ) {
            if (kind)
                *kind = ops;
            return layer->vals[k];
        }
    }
    return NULL;
}

ynode *layer_block_list(const ynode *layer)
{
    return (ynode *)block_value(layer, NULL);
}

/* The closing entry of the block k opens. */
static layer_spec block_close(const layer_ops *k, int line)
{
    layer_spec ls;
    memset(&ls, 0, sizeof ls);
    ls.kind = k->block_end;
    ls.line = line;
    ls.act = ACT_LINEAR;
    return ls;
}

static cohort_status too_many(const yctx *c, const ynode *at, const char *label, int max)
{
    return ynode_fail(c, at, "%s has more than the %d layers allowed (each residual counts as "
                             "its layers and two more)",
                      label, max);
}

cohort_status layer_parse_list(const yctx *c, const ynode *list, const char *label,
                               layer_spec *ls, int max, int *n)
{
    *n = 0;
    for (size_t i = 0; i < list->n; i++) {
        const ynode *e = list->vals[i];
        int path[2] = {(int)i, -1};
        if (*n >= max)
            return too_many(c, e, label, max);
        cohort_status st = layer_parse_at(c, e, path, i + 1 == list->n, label, &ls[*n]);
        if (st)
            return st;
        const layer_ops *k = ls[(*n)++].kind;
        if (!k->block_end)
            continue;
        const ynode *inner = block_value(e, NULL);
        if (!inner || inner->n == 0)
            return ynode_fail(c, inner ? inner : e, "layers.%zu of %s: the %s is empty; give it "
                                                    "the layers of f in x + f(x), like %s",
                              i, label, k->name, k->example ? k->example : "[...]");
        for (size_t j = 0; j < inner->n; j++) {
            const ynode *x = inner->vals[j];
            const layer_ops *nested = NULL;
            if (block_value(x, &nested))
                return ynode_fail(c, x, "layers.%zu.%zu of %s is a %s inside a %s; blocks do not "
                                        "nest: put them one after the other in the model's layers",
                                  i, j, label, nested->name, k->name);
            if (*n >= max)
                return too_many(c, x, label, max);
            path[1] = (int)j;
            if ((st = layer_parse_at(c, x, path, 0, label, &ls[*n])))
                return st;
            if (ls[*n].kind->block_end)
                return ynode_fail(c, x, "layers.%zu.%zu of %s: the value of %s is a list of "
                                        "layers",
                                  i, j, label, ls[*n].kind->name);
            (*n)++;
        }
        if (*n >= max)
            return too_many(c, e, label, max);
        ls[(*n)++] = block_close(k, e->line);
    }
    return COHORT_OK;
}

int layer_paths(const layer_spec *ls, int n, int (*path)[2])
{
    const layer_ops *open = NULL; /* the kind of the block we are in */
    int top = -1, inner = 0;
    for (int i = 0; i < n; i++) {
        const layer_ops *k = ls[i].kind;
        if (open && k == open->block_end) {
            path[i][0] = top;
            path[i][1] = -1;
            open = NULL;
        } else if (open) {
            if (k->block_end)
                return -1;
            path[i][0] = top;
            path[i][1] = inner++;
        } else {
            path[i][0] = ++top;
            path[i][1] = -1;
            if (k->block_end) {
                open = k;
                inner = 0;
            }
        }
    }
    return open ? -1 : 0;
}

int layer_at_path(const layer_spec *ls, int n, int i, int j)
{
    int path[COHORT_MAX_LAYERS][2];
    if (n > COHORT_MAX_LAYERS || layer_paths(ls, n, path))
        return -1;
    for (int k = 0; k < n; k++)
        if (path[k][0] == i && path[k][1] == j)
            return k;
    return -1;
}

void layer_list_to_json(const layer_spec *ls, int n, strbuf *b)
{
    const layer_ops *open = NULL;
    int first = 1;
    sb_putn(b, "[", 1);
    for (int i = 0; i < n; i++) {
        const layer_ops *k = ls[i].kind;
        if (open && k == open->block_end) {
            sb_puts(b, "]}");
            open = NULL;
            first = 0;
            continue;
        }
        if (!first)
            sb_putn(b, ",", 1);
        first = 0;
        if (k->block_end && !open) {
            sb_putn(b, "{", 1);
            sb_json_str(b, k->name);
            sb_puts(b, ":[");
            open = k;
            first = 1;
            continue;
        }
        layer_to_json(&ls[i], b);
    }
    sb_putn(b, "]", 1);
}

int layer_list_abbrev(const layer_spec *ls, int n, char *buf, size_t size)
{
    const layer_ops *open = NULL;
    size_t len = 0;
    for (int i = 0; i < n && len < size; i++) {
        const layer_ops *k = ls[i].kind;
        int w;
        if (open && k == open->block_end) {
            w = snprintf(buf + len, size - len, "]");
            open = NULL;
        } else {
            /* A dash between layers, none after a block's '['. */
            int sep = i > 0 && !(open && ls[i - 1].kind == open);
            if (sep && (len += (size_t)snprintf(buf + len, size - len, "-")) >= size)
                break;
            w = layer_abbrev(&ls[i], buf + len, size - len);
            if (w >= 0 && k->block_end && !open) {
                len += (size_t)w;
                w = len < size ? snprintf(buf + len, size - len, "[") : 0;
                open = k;
            }
        }
        if (w < 0)
            return -1;
        len += (size_t)w;
    }
    return (int)len;
}
