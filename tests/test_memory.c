/*
 * Exact memory: the bytes planned for a group are the bytes its pool gave
 * it, for every layer type, optimizer, batch size and group size; pools
 * refuse allocations past their limit; 50 models trained one after another
 * leave the pool at zero after each and resident memory flat.
 */
#include "check.h"
#include "device/device.h"
#include "run/run.h"
#include "train/train.h"
#include "util/util.h"

#include <unistd.h>

static device_registry *reg;

static void spec_base(model_spec *s, int batch)
{
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, "m");
    s->batch_size = batch;
    s->n_layers = 2;
    s->layers[0] = (layer_spec){.kind = LAYER_DENSE, .units = 32, .act = ACT_RELU};
    s->layers[1] = (layer_spec){.kind = LAYER_DENSE, .units = 10, .act = ACT_SOFTMAX};
}

static void planned_equals_peak(void)
{
    static const int batches[] = {1, 7, 64, 1000};
    for (int variant = 0; variant < 7; variant++) {
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            for (int K = 1; K <= 3; K += 2) {
                model_spec s;
                spec_base(&s, batches[b]);
                const char *what = "adam";
                switch (variant) {
                case 1: s.opt.kind = OPT_SGD; s.opt.momentum = 0; what = "sgd"; break;
                case 2: s.opt.kind = OPT_SGD; s.opt.momentum = 0.9f; what = "sgd+momentum"; break;
                case 3: s.opt.kind = OPT_ADAMW; s.opt.weight_decay = 0.004f; what = "adamw"; break;
                case 4:
                    s.n_layers = 4;
                    s.layers[3] = s.layers[1];
                    s.layers[1] = (layer_spec){.kind = LAYER_DROPOUT, .rate = 0.5f};
                    s.layers[2] = (layer_spec){.kind = LAYER_DENSE, .units = 16, .act = ACT_TANH};
                    what = "dropout + tanh";
                    break;
                case 5:
                    s.early_stop.enabled = 1;
                    s.early_stop.restore_best = 1;
                    what = "restore_best_weights";
                    break;
                case 6:
                    s.loss = LOSS_MSE;
                    s.layers[1].act = ACT_SIGMOID;
                    what = "mse";
                    break;
                }
                const model_spec *specs[3] = {&s, &s, &s};
                model_layout L;
                cohort_error err;
                CHECK(model_layout_make(&s, shape_flat(20), 10, K, &L, &err) == COHORT_OK);
                cohort_pool *pool = reg->dev[0].pool;
                uint64_t before = pool_in_use(pool);
                train_group *g;
                cohort_status st = group_create(specs, K, shape_flat(20), 10, &reg->dev[0], 1, &g, &err);
                CHECK_MSG(st == COHORT_OK, "%s: %s", what, err.message);
                if (st)
                    continue;
                CHECK_MSG(group_peak_bytes(g) == L.total_bytes,
                          "%s, batch %d, K %d: planned %zu, pool gave %llu", what, batches[b], K,
                          L.total_bytes, (unsigned long long)group_peak_bytes(g));
                CHECK(pool_in_use(pool) - before == L.total_bytes);
                group_free(g);
                CHECK_MSG(pool_in_use(pool) == before, "%s: pool not back to where it was", what);
            }
        }
    }
}

static void pool_limits(void)
{
    cohort_error err;
    for (int policy = 0; policy < 2; policy++) {
        cohort_pool *p;
        CHECK(pool_create("test:0", backend_cpu(), 0, 4096, (cohort_mem_policy)policy, &p, &err) ==
              COHORT_OK);
        pool_account acct = {0, 0};
        void *a = pool_alloc(p, 1000, &acct, "a", &err); /* rounds up to 1024 */
        void *b = pool_alloc(p, 3072, &acct, "b", &err);
        CHECK(a && b);
        CHECK(pool_in_use(p) == 4096);
        void *c = pool_alloc(p, 1, &acct, "model 'c'", &err);
        CHECK(c == NULL);
        CHECK(err.status == COHORT_ERR_NOMEM);
        CHECK_CONTAINS(err.message, "model 'c': needs 64 B on test:0 but only 0 B of its limit is free");
        pool_release(p, a, &acct);
        CHECK(pool_in_use(p) == 3072 && acct.current == 3072 && acct.peak == 4096);
        void *d = pool_alloc(p, 1024, &acct, "d", &err);
        CHECK(d != NULL);
        pool_release(p, b, &acct);
        pool_release(p, d, &acct);
        CHECK(pool_in_use(p) == 0 && pool_peak(p) == 4096);
        /* After every block is back, the slab is whole again. */
        void *e = pool_alloc(p, 4096, &acct, "e", &err);
        CHECK_MSG(e != NULL, "policy %d: freed blocks did not merge", policy);
        pool_release(p, e, &acct);
        pool_fail_after(p, 2);
        void *f = pool_alloc(p, 64, NULL, "f", &err);
        void *g = pool_alloc(p, 64, NULL, "g", &err);
        CHECK(f != NULL && g == NULL);
        CHECK_CONTAINS(err.message, "injected");
        pool_release(p, f, NULL);
        pool_free(p);
    }
    cohort_pool *p;
    CHECK(pool_create("huge:0", backend_cpu(), 0, (uint64_t)1 << 50, COHORT_MEM_PREALLOCATE, &p,
                      &err) == COHORT_ERR_NOMEM);
    CHECK_CONTAINS(err.message, "cannot preallocate");
}

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

typedef struct watch {
    cohort_run *run;
    int ended, pool_not_zero;
    long rss[64];
} watch;

static void on_event(const cohort_event *ev, void *user)
{
    watch *w = user;
    if (!w->run)
        return;
    /* A model starts before its group allocates: the previous one must have
     * given every byte back. */
    if (ev->kind == COHORT_EVENT_MODEL_START)
        for (int i = 0; i < w->run->devices->n; i++)
            if (w->run->devices->dev[i].pool && pool_in_use(w->run->devices->dev[i].pool) != 0)
                w->pool_not_zero++;
    if (ev->kind != COHORT_EVENT_MODEL_END)
        return;
    if (w->ended < 64)
        w->rss[w->ended] = rss_bytes();
    w->ended++;
}

static void fifty_in_a_row(void)
{
    char dir[] = "/tmp/cohort-mem-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char csv[128], plan[2048];
    snprintf(csv, sizeof csv, "%s/d.csv", dir);
    FILE *f = fopen(csv, "w");
    rng_state r;
    rng_seed(&r, 1, 1);
    for (int i = 0; i < 2000; i++) {
        int c = i % 4;
        for (int j = 0; j < 32; j++)
            fprintf(f, "%f,", (double)rng_uniform(&r) + (j % 4 == c));
        fprintf(f, "%d\n", c);
    }
    fclose(f);
    int n = snprintf(plan, sizeof plan,
                     "data: {train: 'csv:%s', validation_split: 0.1}\n"
                     "defaults: {epochs: 1, batch_size: 32, layers: [{dense: 256, activation: relu}, "
                     "{dense: 4, activation: softmax}]}\n"
                     "models: [{name: m}]\n"
                     "sweep: {seed: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,"
                     "24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,"
                     "49,50]}\n",
                     csv);
    cohort_error err;
    cohort_plan *p;
    CHECK(cohort_plan_parse(plan, (size_t)n, "fifty.yaml", NULL, 0, &p, &err) == COHORT_OK);
    watch w;
    memset(&w, 0, sizeof w);
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    opt.strategy = COHORT_STRATEGY_SEQUENTIAL;
    opt.on_event = on_event;
    opt.user = &w;
    opt.threads = 1;
    cohort_run *run;
    CHECK(cohort_run_create(p, &opt, &run, &err) == COHORT_OK);
    w.run = run;
    CHECK(cohort_run_train(run, &err) == COHORT_OK);
    CHECK(w.ended == 50);
    CHECK(pool_in_use(run->devices->dev[0].pool) == 0);
    CHECK_MSG(w.pool_not_zero == 0, "the pool held memory after %d of 50 models", w.pool_not_zero);
    for (int i = 0; i < run->n; i++)
        CHECK(run->m[i].peak_bytes == run->m[i].planned_bytes);
    long growth = w.rss[49] - w.rss[9];
    printf("test_memory: resident memory after model 10: %.1f MiB, after model 50: %.1f MiB "
           "(growth %ld KiB; bound 1024 KiB)\n",
           (double)w.rss[9] / 1048576.0, (double)w.rss[49] / 1048576.0, growth / 1024);
    if (!getenv("COHORT_SANITIZED")) /* the sanitizers keep freed memory in quarantine */
        CHECK_MSG(growth < 1024 * 1024, "resident memory grew by %ld KiB over 40 models",
                  growth / 1024);
    cohort_run_free(run);
    cohort_plan_free(p);
    unlink(csv);
    rmdir(dir);
}

int main(void)
{
    cohort_error err;
    if (devices_discover(&reg, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    planned_equals_peak();
    pool_limits();
    devices_free(reg);
    fifty_in_a_row();
    return check_done("test_memory");
}
