/* overrides: `--set KEY=VALUE`, written into the plan's tree before anything is
 * checked. */
#include "plan/plan_impl.h"

#include "layers/layer.h"

#include <stdlib.h>
#include <string.h>

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

cohort_status plan_apply_override(const yctx *c, ynode *root, const char *ov)
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
        /* layers.N.J: layer J inside the residual at layers.N. */
        ynode *block = part[strspn(part, "0123456789")] == 0 ? layer_block_list(cur) : NULL;
        if (block)
            cur = block;
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
