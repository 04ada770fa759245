/* errors: a plan's errors, gathered across its stages and said together. */
#include "plan/plan_impl.h"

#include <stdlib.h>
#include <string.h>

/* The part of an error that does not name a model ("... of model 'a'"). */
static size_t unlabeled_len(const char *msg)
{
    const char *m = strstr(msg, "model '");
    return m ? (size_t)(m - msg) : strlen(msg);
}

cohort_status plan_errs_add(plan_errs *pe, const yctx *c, cohort_status st, const yfailed *at)
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

cohort_status plan_errs_finish(plan_errs *pe, const yctx *c)
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
