/*
 * Out of memory everywhere: the whole path from plan text to trained,
 * saved models runs again and again, with the n-th host allocation failing
 * (n = 1, 2, ...) and then with the n-th device-pool allocation failing.
 * Every run must end with an error status or succeed, never crash; under
 * AddressSanitizer (make test-asan) LeakSanitizer proves nothing leaks.
 * The host allocator is wrapped at link time (-Wl,--wrap=malloc, ...).
 */
#include "check.h"
#include "layer_text.h"
#include "device/device.h"
#include "run/run.h"
#include "util/util.h"

#include <unistd.h>

static long countdown = -1; /* allocations left before one fails; -1: never */
static long injected;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);

static int fail_now(void)
{
    if (countdown < 0)
        return 0;
    if (countdown-- == 0) {
        injected++;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return fail_now() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(a, n); }

static char plan_text[2048];
static size_t plan_len;
static char out_dir[256];
static cohort_devices *devices; /* discovered once, shared by every run */

/* One whole run; returns its status. */
static cohort_status one_run(int pool_fail)
{
    cohort_error err;
    cohort_plan *p = NULL;
    cohort_status st = cohort_plan_parse(plan_text, plan_len, "oom.yaml", NULL, 0, &p, &err);
    if (st)
        return st;
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    opt.out_dir = out_dir;
    opt.threads = 1;
    opt.strategy = COHORT_STRATEGY_FUSED;
    opt.devices = devices;
    cohort_run *run = NULL;
    st = cohort_run_create(p, &opt, &run, &err);
    if (!st) {
        if (pool_fail)
            mem_pool_fail_after(run->devices->dev[0].mem_pool, pool_fail);
        st = cohort_run_train(run, &err);
    }
    cohort_run_free(run);
    cohort_plan_free(p);
    mem_pool_fail_after(devices->dev[0].mem_pool, 0);
    CHECK_MSG(mem_pool_in_use(devices->dev[0].mem_pool) == 0, "a run left %llu bytes in the pool",
              (unsigned long long)mem_pool_in_use(devices->dev[0].mem_pool));
    return st;
}

/* group_evaluate out of host memory (a batch over 1024 rows takes its index
 * array from malloc): an error and no loss, never a loss of 0. */
static void evaluate_oom(void)
{
    enum { N = 1100, D = 4 };
    static float x[N * D];
    static int32_t y[N];
    for (int i = 0; i < N; i++) {
        y[i] = i % 3;
        for (int j = 0; j < D; j++)
            x[i * D + j] = (float)((i * 7 + j) % 5) - 2.0f;
    }
    cohort_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = N;
    ds.dim = D;
    ds.x = x;
    ds.y = y;
    ds.n_classes = 3;
    data_view v = data_view_all(&ds);
    model_spec s;
    model_spec_defaults(&s);
    str_copy(s.name, sizeof s.name, "big");
    s.batch_size = 2048;
    s.n_layers = 1;
    s.layers[0] = layer_dense(3, ACT_SOFTMAX);
    const model_spec *specs[1] = {&s};
    train_group *g = NULL;
    cohort_error err;
    cohort_status st = group_create(specs, 1, shape_flat(D), 3, &devices->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "%s", err.message);
    if (st)
        return;
    eval_metrics m = {0.0, 0.0, 0.0, 0.0};
    countdown = 0;
    st = group_evaluate(g, &v, &m, NULL);
    countdown = -1;
    CHECK_MSG(st == COHORT_ERR_NOMEM && isnan(m.loss) && isnan(m.accuracy),
              "group_evaluate out of memory: status %s, loss %g, accuracy %g",
              cohort_status_str(st), m.loss, m.accuracy);
    st = group_evaluate(g, &v, &m, NULL);
    CHECK_MSG(st == COHORT_OK && isfinite(m.loss) && m.loss > 0.0,
              "group_evaluate: status %s, loss %g", cohort_status_str(st), m.loss);
    group_free(g);
}

int main(void)
{
    char dir[] = "/tmp/cohort-oom-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char csv[300];
    snprintf(csv, sizeof csv, "%s/d.csv", dir);
    snprintf(out_dir, sizeof out_dir, "%s/out", dir);
    FILE *f = fopen(csv, "w");
    for (int i = 0; i < 120; i++)
        fprintf(f, "%d,%d,%d,%d\n", i % 3 == 0, i % 3 == 1, (i * 7) % 5, i % 3);
    fclose(f);
    plan_len = (size_t)snprintf(
        plan_text, sizeof plan_text,
        "data: {train: 'csv:%s', test: 'csv:%s', validation_split: 0.25}\n"
        "defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, activation: relu}, "
        "{dropout: 0.1}, {dense: 3, activation: softmax}]}\n"
        "models: [{name: a}, {name: b, optimizer: {name: sgd, lr: 0.1, momentum: 0.9}}]\n"
        "sweep: {seed: [1, 2]}\n",
        csv, csv);

    file_set_durable(0); /* a thousand runs: skip the fsyncs */
    cohort_error err;
    if (cohort_devices_discover(&devices, &err) != COHORT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    evaluate_oom();
    CHECK(one_run(0) == COHORT_OK); /* the run works when nothing fails */
    long n, runs = 0, failed_cleanly = 0;
    for (n = 0;; n++) {
        countdown = n;
        injected = 0;
        cohort_status st = one_run(0);
        countdown = -1;
        runs++;
        if (!injected) {
            CHECK(st == COHORT_OK);
            break;
        }
        failed_cleanly += st != COHORT_OK;
        CHECK_MSG(st != COHORT_ERR_INTERNAL, "allocation %ld: internal error", n);
    }
    int pool_runs = 0;
    for (int k = 1; k <= 8; k++, pool_runs++) {
        cohort_status st = one_run(k);
        CHECK_MSG(st == COHORT_OK || st == COHORT_ERR_PARTIAL || st == COHORT_ERR_NOMEM,
                  "pool failure %d: status %s", k, cohort_status_str(st));
    }
    printf("test_oom: %ld runs with the n-th host allocation failing (%ld allocations in a whole "
           "run; %ld ended in an error, the rest recovered), %d runs with a failing pool\n",
           runs, n, failed_cleanly, pool_runs);
    cohort_devices_free(devices);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return check_done("test_oom");
}
