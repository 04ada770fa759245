/*
 * memory_data.h: the in-memory training set of the tests that run the
 * public API on a small classification (test_api, test_layer_table): N
 * samples of D features in 3 classes, one feature raised per class, as the
 * plan's memory:train.
 */
#ifndef COHORT_TEST_MEMORY_DATA_H
#define COHORT_TEST_MEMORY_DATA_H

#include "cohort.h"

#include <stdint.h>
#include <string.h>

#define N 240
#define D 6
static float X[N * D];
static int32_t Y[N];

/* Fill X and Y; the features' noise from `seed`. */
static inline void make_data(unsigned seed)
{
    unsigned s = seed;
    for (int i = 0; i < N; i++) {
        Y[i] = i % 3;
        for (int j = 0; j < D; j++) {
            s = s * 1103515245u + 12345u;
            X[i * D + j] = (float)((s >> 16) % 1000) / 1000.0f + (j == Y[i] ? 1.0f : 0.0f);
        }
    }
}

/* X and Y as the data set "train". */
static inline cohort_data train_data(void)
{
    cohort_data d;
    memset(&d, 0, sizeof d);
    d.name = "train";
    d.x = X;
    d.n = N;
    d.sample_rank = 1;
    d.sample_shape[0] = D;
    d.labels = Y;
    return d;
}

/* Run options with d as memory:train, under strategy s. */
static inline cohort_run_options options_on(cohort_data *d, cohort_strategy s)
{
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    opt.memory = d;
    opt.n_memory = 1;
    opt.strategy = s;
    return opt;
}

#endif
