/*
 * optim/kind.h: the optimizer kinds, in the order of the optimizer table
 * (optim/table.c). The list of every optimizer is here, in update.h's
 * OPTIM_UPDATES and in table.c's entries: nothing else names a kind but
 * the backends' fused kernels (see docs/design.md, "How to add an optimizer").
 */
#ifndef COHORT_OPTIM_KIND_H
#define COHORT_OPTIM_KIND_H

typedef enum opt_kind {
    OPT_SGD,
    OPT_ADAM,
    OPT_ADAMW,
    OPT_RMSPROP,
    OPT_ADAGRAD,
    OPT_NADAM,
    OPT_KIND_COUNT
} opt_kind;

/* The optimizer of a model whose plan names none. */
#define OPT_DEFAULT OPT_ADAM

#endif
