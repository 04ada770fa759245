/*
 * plan/keys: the one check of a plan's map against the keys it takes. Every
 * map of a plan (the top, data, a device, a model and defaults, its loss,
 * optimizer, schedule, early_stopping, reduce_lr_on_plateau, a layer, the
 * scheduler, search, ...) has one named, NULL-terminated list of its keys,
 * and the code that reads the map calls plan_check_keys on it before reading
 * any key. Reading the map where it is used (the merged model, not the text)
 * checks a key however it got there: the file, defaults, a sweep or search
 * value, or --set.
 *
 * To give a new map (a layer kind, an optimizer) its keys:
 *
 *     static const char *const my_keys[] = {"units", "activation", NULL};
 *     if ((st = plan_check_keys(c, map, my_keys, "in layers.%d of %s", i, label)))
 *         return st;
 */
#ifndef COHORT_PLAN_KEYS_H
#define COHORT_PLAN_KEYS_H

#include "cohort.h"
#include "util/util.h"

struct ynode;
struct yctx;

/* Entries of a NULL-terminated key list. */
int plan_key_count(const char *const *keys);
/* Whether k is one of the NULL-terminated keys. */
int plan_key_in(const char *const *keys, const char *k);

/*
 * Check that every key of `map` is one of `keys` (NULL-terminated). `where`
 * (a printf format and its arguments) names the map as messages say it:
 * "in the loss of model 'm'". The first other key is COHORT_ERR_INPUT at
 * that key's line, c->err saying
 *     FILE:LINE: unknown key 'K' WHERE (did you mean 'X'?)
 * when a key is close to K (ysuggest), else
 *     FILE:LINE: unknown key 'K' WHERE; it takes A, B, C
 * ("--set KEY=VALUE: ..." for a key given by --set). A node that is not a
 * map (NULL included) passes: its reader says what it must be.
 */
cohort_status plan_check_keys(const struct yctx *c, const struct ynode *map,
                              const char *const *keys, const char *where, ...)
    COHORT_PRINTF(4, 5);

#endif
