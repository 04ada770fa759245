/*
 * optim/update.h: the per-weight half of the optimizer table, for every
 * backend. Each optimizer's header (optim/NAME.h) holds its scalars, made
 * once per model and step on the host by its entry (optim/NAME.c), and its
 * update of one weight from its gradient, a static inline function of
 * those scalars that C and CUDA compile alike (OPTIM_HD): the CPU loop
 * (backend/cpu/kernels.c), the CUDA kernel (backend/cuda/kernels.cu) and the
 * tests call it, and the CPU's fused dense step mirrors it in vectors.
 */
#ifndef COHORT_OPTIM_UPDATE_H
#define COHORT_OPTIM_UPDATE_H

#include "optim/kind.h"

#include <math.h>

#ifdef __CUDACC__
#define OPTIM_HD __host__ __device__
#else
#define OPTIM_HD
#endif

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/nadam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"

/* One model's scalars of one step, read as its optimizer's member. */
typedef union optim_scalars {
    sgd_scalars sgd;
    adam_scalars adam; /* adam and adamw */
    rmsprop_scalars rmsprop;
    adagrad_scalars adagrad;
    nadam_scalars nadam;
} optim_scalars;

/*
 * Every kind with its member of optim_scalars and its update, for the
 * loops that run the update over a model's weights: X(KIND, member,
 * update) with KIND the name after OPT_. The update's form is
 * update(w, g, s1, s2, &scalars.member) for one weight w, its gradient g
 * and its slots s1, s2 (NULL where the optimizer keeps none).
 */
#define OPTIM_UPDATES(X)                                                                      \
    X(SGD, sgd, sgd_update)                                                                   \
    X(ADAM, adam, adam_update)                                                                \
    X(ADAMW, adam, adam_update)                                                               \
    X(RMSPROP, rmsprop, rmsprop_update)                                                       \
    X(ADAGRAD, adagrad, adagrad_update)                                                       \
    X(NADAM, nadam, nadam_update)

#endif
