/* keys: a plan map checked against its list of keys (see keys.h). */
#include "plan/keys.h"

#include "plan/yamltree.h"

#include <stdarg.h>
#include <string.h>

int plan_key_count(const char *const *keys)
{
    int n = 0;
    while (keys[n])
        n++;
    return n;
}

int plan_key_in(const char *const *keys, const char *k)
{
    for (int i = 0; keys[i]; i++)
        if (strcmp(k, keys[i]) == 0)
            return 1;
    return 0;
}

cohort_status plan_check_keys(const yctx *c, const ynode *map, const char *const *keys,
                              const char *where, ...)
{
    if (!map || map->type != YNODE_MAP)
        return COHORT_OK;
    for (size_t i = 0; i < map->n; i++) {
        const ynode *k = map->keys[i];
        if (plan_key_in(keys, k->str))
            continue;
        char place[512];
        va_list ap;
        va_start(ap, where);
        str_vformat(place, sizeof place, where, ap);
        va_end(ap);
        const char *near = ysuggest(k->str, keys, plan_key_count(keys));
        if (near)
            return ynode_fail(c, k, "unknown key '%.100s' %s (did you mean '%s'?)", k->str, place,
                              near);
        char list[400] = "";
        size_t len = 0;
        for (int j = 0; keys[j] && len < sizeof list; j++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "",
                                    keys[j]);
        return ynode_fail(c, k, "unknown key '%.100s' %s; it takes %s", k->str, place, list);
    }
    return COHORT_OK;
}
