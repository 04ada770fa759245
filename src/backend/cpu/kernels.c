#include "backend/cpu/kernels.h"
#include "backend/cpu/dense_step.h"
#include "util/util.h"

#include <math.h>

void kern_bias_act(float *Y, const float *bias, int rows, int cols, act_kind act)
{
    if (!bias) {
        /* No bias (the Activation layer): the rows are one run of values. */
        kern_bias_act_flat(Y, (size_t)rows * (size_t)cols, act);
        return;
    }
    for (int r = 0; r < rows; r++) {
        float *y = Y + (size_t)r * (size_t)cols;
        switch (act) {
        case ACT_RELU:
            for (int j = 0; j < cols; j++) {
                float z = y[j] + bias[j];
                y[j] = z > 0.0f ? z : 0.0f;
            }
            break;
        case ACT_SIGMOID:
            for (int j = 0; j < cols; j++)
                y[j] = 1.0f / (1.0f + expf(-(y[j] + bias[j])));
            break;
        case ACT_TANH:
            for (int j = 0; j < cols; j++)
                y[j] = tanhf(y[j] + bias[j]);
            break;
        case ACT_LINEAR:
        case ACT_SOFTMAX:
            for (int j = 0; j < cols; j++)
                y[j] += bias[j];
            break;
        }
    }
}

void kern_bias_act_flat(float *Y, size_t n, act_kind act)
{
    switch (act) {
    case ACT_RELU:
        for (size_t i = 0; i < n; i++)
            Y[i] = Y[i] > 0.0f ? Y[i] : 0.0f;
        break;
    case ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            Y[i] = 1.0f / (1.0f + expf(-Y[i]));
        break;
    case ACT_TANH:
        for (size_t i = 0; i < n; i++)
            Y[i] = tanhf(Y[i]);
        break;
    case ACT_LINEAR:
    case ACT_SOFTMAX:
        break;
    }
}

void kern_act_backward(float *d, const float *Y, size_t n, act_kind act)
{
    switch (act) {
    case ACT_RELU:
        for (size_t i = 0; i < n; i++)
            d[i] = Y[i] > 0.0f ? d[i] : 0.0f;
        break;
    case ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            d[i] *= Y[i] * (1.0f - Y[i]);
        break;
    case ACT_TANH:
        for (size_t i = 0; i < n; i++)
            d[i] *= 1.0f - Y[i] * Y[i];
        break;
    case ACT_LINEAR:
    case ACT_SOFTMAX:
        break;
    }
}

void kern_bias_grad(float *db, const float *dZ, int rows, int cols)
{
    for (int j = 0; j < cols; j++)
        db[j] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *d = dZ + (size_t)r * (size_t)cols;
        for (int j = 0; j < cols; j++)
            db[j] += d[j];
    }
}

void kern_dropout_fwd(float *Y, const float *X, float *mask, size_t n, float rate, uint64_t key,
                      uint64_t counter0)
{
    float keep = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < n; i++) {
        float m = rng_hash_uniform(key, counter0 + i) >= rate ? keep : 0.0f;
        mask[i] = m;
        Y[i] = X[i] * m;
    }
}

void kern_softmax_xent(float *Z, const int32_t *y, float *dZ, double *stats, int rows, int cols,
                       float grad_scale)
{
    double loss = 0.0;
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        float *z = Z + (size_t)r * (size_t)cols;
        float mx = z[0];
        int arg = 0;
        for (int j = 1; j < cols; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        double zl = (double)z[y[r]] - (double)mx;
        float sum = 0.0f;
        for (int j = 0; j < cols; j++) {
            z[j] = expf(z[j] - mx);
            sum += z[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < cols; j++)
            z[j] *= inv;
        int label = y[r];
        /* -log p[label] = log(sum) - (z[label] - max): exact where p underflows,
         * and Inf or NaN only when the logits are. */
        loss += log((double)sum) - zl;
        correct += arg == label;
        if (dZ) {
            float *d = dZ + (size_t)r * (size_t)cols;
            for (int j = 0; j < cols; j++)
                d[j] = z[j] * grad_scale;
            d[label] -= grad_scale;
        }
    }
    stats[0] += loss;
    stats[1] += correct;
    stats[2] = rows ? loss / rows : 0.0;
}

void kern_mse(const float *Y, const int32_t *y, float *dY, double *stats, int rows, int cols,
              float grad_scale)
{
    double loss = 0.0;
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        const float *o = Y + (size_t)r * (size_t)cols;
        int label = y[r];
        double se = 0.0;
        int arg = 0;
        for (int j = 0; j < cols; j++) {
            float t = cols == 1 ? (float)label : (j == label ? 1.0f : 0.0f);
            float e = o[j] - t;
            se += (double)e * e;
            if (o[j] > o[arg])
                arg = j;
            if (dY)
                dY[(size_t)r * (size_t)cols + (size_t)j] = 2.0f * e * grad_scale / (float)cols;
        }
        loss += se / cols;
        if (cols == 1)
            correct += lrintf(o[0]) == label;
        else
            correct += arg == label;
    }
    stats[0] += loss;
    stats[1] += correct;
    stats[2] = rows ? loss / rows : 0.0;
}

void kern_step(float *w, const float *g, float *s1, float *s2, size_t n, const step_scalars *o)
{
    float lr = o->lr, momentum = o->momentum;
    switch (o->kind) {
    case STEP_SGD:
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * g[i];
        break;
    case STEP_MOMENTUM:
        for (size_t i = 0; i < n; i++) {
            s1[i] = momentum * s1[i] - lr * g[i];
            w[i] += s1[i];
        }
        break;
    case STEP_NESTEROV:
        for (size_t i = 0; i < n; i++) {
            s1[i] = momentum * s1[i] - lr * g[i];
            w[i] += momentum * s1[i] - lr * g[i];
        }
        break;
    case STEP_ADAM: {
        float alpha = o->alpha, c1 = o->c1, c2 = o->c2, eps = o->eps;
        if (o->decay != 0.0f) {
            float d = o->decay;
            for (size_t i = 0; i < n; i++)
                w[i] -= w[i] * d;
        }
        for (size_t i = 0; i < n; i++) {
            float gi = g[i];
            s1[i] += (gi - s1[i]) * c1;
            s2[i] += (gi * gi - s2[i]) * c2;
            w[i] -= alpha * s1[i] / (sqrtf(s2[i]) + eps);
        }
        break;
    }
    }
}

void kern_sgd(float *w, const float *g, float *v, size_t n, float lr, float momentum, int nesterov)
{
    step_scalars o;
    sgd_scalars(lr, momentum, nesterov, v != NULL, &o);
    kern_step(w, g, v, NULL, n, &o);
}

void kern_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int64_t t)
{
    step_scalars o;
    adam_scalars(lr, beta1, beta2, eps, weight_decay, t, &o);
    kern_step(w, g, m, v, n, &o);
}

void kern_rmsprop(float *w, const float *g, float *vel, float *s2, size_t n, float lr, float rho,
                  float momentum, int centered, float eps)
{
    /* 1 - rho in double, then rounded once, as Keras computes it. */
    float c = (float)(1.0 - (double)rho);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        vel[i] = rho * vel[i] + c * (gi * gi);
        float d = vel[i] + eps;
        if (centered) {
            s2[i] = rho * s2[i] + c * gi;
            d = vel[i] - s2[i] * s2[i] + eps;
        }
        float inc = lr * gi / sqrtf(d);
        if (momentum > 0.0f) {
            s2[i] = momentum * s2[i] + inc;
            inc = s2[i];
        }
        w[i] -= inc;
    }
}

void kern_adagrad(float *w, const float *g, float *acc, size_t n, float lr, float eps)
{
    for (size_t i = 0; i < n; i++) {
        acc[i] += g[i] * g[i];
        w[i] -= lr * g[i] / sqrtf(acc[i] + eps);
    }
}

void kern_nadam(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float nm, float ng, float nv)
{
    float c1 = (float)(1.0 - (double)beta1), c2 = (float)(1.0 - (double)beta2);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] += (gi - m[i]) * c1;
        v[i] += (gi * gi - v[i]) * c2;
        float mhat = nm * m[i] + ng * gi;
        w[i] -= lr * mhat / (sqrtf(v[i] * nv) + eps);
    }
}

double kern_sum_sq(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    return acc;
}

double kern_sum_abs(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += fabs((double)x[i]);
    return acc;
}

void kern_scale(float *x, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= f;
}

void kern_clip_value(float *x, size_t n, float c)
{
    for (size_t i = 0; i < n; i++)
        x[i] = fminf(fmaxf(x[i], -c), c);
}

void kern_reg_grad(float *g, const float *w, size_t n, float l1, float l2)
{
    float two_l2 = 2.0f * l2;
    for (size_t i = 0; i < n; i++) {
        float sign = (float)((w[i] > 0.0f) - (w[i] < 0.0f));
        g[i] += two_l2 * w[i] + l1 * sign;
    }
}

float clip_norm_factor(double sum_sq, float c)
{
    double norm = sqrt(sum_sq);
    return (float)((double)c / (norm > (double)c ? norm : (double)c));
}
