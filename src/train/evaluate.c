/*
 * Evaluation and prediction: the forward pass in inference mode (no
 * dropout, batch normalization from the moving statistics) over a dataset
 * in batches, with the loss and accuracy of every model of the group.
 */
#include "train/group_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Forward and loss of the batch in the input region for every model: one
 * model after another on a CPU, op by op over the group elsewhere. */
static void infer_batch(train_group *g, int rows)
{
    int step = g->be->model_major ? 1 : g->K;
    for (int k0 = 0; k0 < g->K; k0 += step) {
        krange r = {k0, step};
        group_forward(g, r, rows, 0, 0);
        group_loss_pass(g, r, rows, 0);
    }
}

eval_metrics metrics_of_stats(const model_layout *L, const double *st, double n)
{
    eval_metrics m = {NAN, NAN, NAN, NAN};
    if (!(n > 0))
        return m;
    m.loss = st[STAT_LOSS_SUM] / n;
    if (L->metric == METRIC_ERRORS) {
        m.mae = st[STAT_RIGHT] / n;
        m.rmse = sqrt(st[STAT_SQ_SUM] / n);
    } else {
        m.accuracy = st[STAT_RIGHT] / n;
    }
    return m;
}

cohort_status group_evaluate(train_group *g, const data_view *d, eval_metrics *em, int32_t *pred)
{
    int K = g->K, B = g->L.B, n_out = g->L.n_out;
    int64_t idx[1024];
    double st[COHORT_MAX_GROUP * STATS_PER_MODEL];
    g->be->memzero(g->ctx, g->stats, (size_t)K * STATS_PER_MODEL * sizeof(double));
    int64_t *ix = B <= 1024 ? idx : malloc((size_t)B * sizeof *ix);
    if (!ix) {
        /* No loss rather than a loss of 0 that looks like a perfect model. */
        for (int k = 0; k < K; k++)
            em[k] = metrics_of_stats(&g->L, st, 0);
        return COHORT_ERR_NOMEM;
    }
    /* The outputs (probabilities after loss_pass) of every model, per batch. */
    size_t out_n = (size_t)K * (size_t)B * (size_t)n_out;
    float *out = pred ? malloc(out_n * sizeof *out) : NULL;
    krange all = {0, K};
    size_t so;
    const float *res = group_act(g, g->L.n_layers, all, &so);
    if (pred && !out)
        for (int64_t i = 0; i < (int64_t)K * d->n; i++)
            pred[i] = -1; /* out of memory: no class rather than a wrong one */
    for (int64_t r0 = 0; r0 < d->n; r0 += B) {
        int rows = (int)(d->n - r0 < B ? d->n - r0 : B);
        for (int r = 0; r < rows; r++)
            ix[r] = r0 + r;
        group_load_batch(g, d, ix, 0, rows);
        infer_batch(g, rows);
        if (!out)
            continue;
        g->be->copy_d2h(g->ctx, out, res, out_n * sizeof *out);
        for (int k = 0; k < K; k++)
            for (int r = 0; r < rows; r++)
                pred[(int64_t)k * d->n + r0 + r] =
                    output_class(&g->L, out + ((size_t)k * (size_t)B + (size_t)r) * (size_t)n_out);
    }
    free(out);
    if (ix != idx)
        free(ix);
    /* Keras's evaluate reports the regularized loss too. */
    group_reg_penalty(g, all, (int)d->n);
    group_read_stats(g, st);
    for (int k = 0; k < K; k++)
        em[k] = metrics_of_stats(&g->L, st + STATS_PER_MODEL * k, (double)d->n);
    return COHORT_OK;
}

void group_predict(train_group *g, int k, const data_view *d, float *out)
{
    int B = g->L.B, n_out = g->L.n_out;
    int64_t *ix = malloc((size_t)B * sizeof *ix);
    if (!ix)
        return;
    krange one = {k, 1};
    size_t so;
    float *res = group_act(g, g->L.n_layers, one, &so);
    for (int64_t r0 = 0; r0 < d->n; r0 += B) {
        int rows = (int)(d->n - r0 < B ? d->n - r0 : B);
        for (int r = 0; r < rows; r++)
            ix[r] = r0 + r;
        group_load_batch(g, d, ix, 0, rows);
        group_forward(g, one, rows, 0, 0);
        group_loss_pass(g, one, rows, 0); /* applies softmax to the logits */
        g->be->copy_d2h(g->ctx, out + r0 * n_out, res, (size_t)rows * (size_t)n_out * sizeof(float));
    }
    free(ix);
}

int output_class(const model_layout *L, const float *row)
{
    int n_out = L->n_out;
    /* A from_logits model's output is a logit, not a probability: rounding
     * it made classes like 5 and -4 of a binary model. */
    if (n_out == 1 && L->metric == METRIC_BINARY)
        return L->out_act == ACT_LINEAR ? row[0] > 0.0f : row[0] > 0.5f;
    if (n_out == 1)
        return (int)lrintf(row[0]);
    int arg = 0;
    for (int j = 1; j < n_out; j++)
        if (row[j] > row[arg])
            arg = j;
    return arg;
}

