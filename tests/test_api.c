/*
 * The public C API as a caller sees it (cohort.h only): NULL and
 * out-of-range arguments are refused with COHORT_ERR_USAGE rather than
 * crashing or being taken for something else; a device split that adds up
 * past 2^64 is refused. In-memory data with NaN or inf in x or targets is
 * refused naming the element, as the NPY reader does, for training and for
 * cohort_predict (whose labels are ignored, so not checked). Messages say
 * what happened: a second cohort_run_train says the run has trained; a stop
 * without an output directory claims no results.json nor checkpoint;
 * predict on a checkpoint says it is one. Under the threads strategy events
 * come one at a time, and may stop the run; cohort_run_model_result may be
 * polled from another thread while the run trains, and called from on_event
 * (tests/tsan.sh runs this under ThreadSanitizer). cohort_run_plan_json
 * gives the same groups after training as before. Under a scheduler each
 * model gets one MODEL_END, with its final status. A host program in a
 * decimal-comma locale (setlocale(LC_ALL, "de_DE.UTF-8")) gets its plan's
 * 0.2 read as 0.2, and results.json, the history, report.html and the
 * checkpoints written with '.' (read back with cohort's own JSON reader).
 */
#include "check.h"
#include "cohort.h"
#include "memory_data.h"
#include "util/json.h"

#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/cohort-api-XXXXXX";

static cohort_plan *plan_of(const char *text)
{
    cohort_plan *p = NULL;
    cohort_error err;
    cohort_status st = cohort_plan_parse(text, strlen(text), "api.yaml", NULL, 0, &p, &err);
    CHECK_MSG(st == COHORT_OK, "%s", err.message);
    return p;
}

static const char *PLAN3 =
    "data: {train: 'memory:train', validation_split: 0.25}\n"
    "defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, activation: relu}, "
    "{dense: 3, activation: softmax}]}\n"
    "models: [{name: a}, {name: b, seed: 2}, {name: c, seed: 3}]\n";

/* cohort_run_create, the run freed; returns its status. */
static cohort_status create_with(const cohort_plan *p, const cohort_run_options *opt,
                                 cohort_error *err)
{
    cohort_run *run = (cohort_run *)1;
    cohort_status st = cohort_run_create(p, opt, &run, err);
    CHECK(st == COHORT_OK || run == NULL);
    cohort_run_free(st == COHORT_OK ? run : NULL);
    return st;
}

static void invalid_arguments(void)
{
    cohort_plan *p = plan_of(PLAN3);
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_AUTO);
    cohort_error err;
    cohort_run *run = NULL;

    memset(&err, 0, sizeof err);
    CHECK(cohort_run_create(NULL, &opt, &run, &err) == COHORT_ERR_USAGE);
    CHECK(err.status == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "cohort_run_create");
    CHECK(cohort_run_create(p, &opt, NULL, &err) == COHORT_ERR_USAGE);
    CHECK(cohort_run_create(NULL, &opt, &run, NULL) == COHORT_ERR_USAGE); /* err may be NULL */
    CHECK(cohort_run_train(NULL, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "cohort_run_train");
    CHECK(cohort_run_model_count(NULL) == 0);
    cohort_run_request_stop(NULL);
    cohort_run_options_init(NULL); /* a NULL out-pointer: nothing done (it had crashed) */
    cohort_model_result r;
    CHECK(cohort_run_model_result(NULL, 0, &r) == COHORT_ERR_USAGE);

    /* memory NULL with a count, a negative count */
    cohort_run_options bad = opt;
    bad.memory = NULL;
    CHECK(create_with(p, &bad, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "n_memory is 1 but memory is NULL");
    bad = opt;
    bad.n_memory = -1;
    CHECK(create_with(p, &bad, &err) == COHORT_ERR_USAGE);

    /* values outside their enums and ranges */
    bad = opt;
    bad.strategy = (cohort_strategy)42;
    CHECK(create_with(p, &bad, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "strategy 42 is not a cohort_strategy");
    bad.strategy = (cohort_strategy)-1;
    CHECK(create_with(p, &bad, &err) == COHORT_ERR_USAGE);
    bad = opt;
    bad.threads = -5;
    CHECK(create_with(p, &bad, &err) == COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "threads is -5");

    /* a good run's result, into NULL */
    if (cohort_run_create(p, &opt, &run, &err) == COHORT_OK) {
        CHECK(cohort_run_model_count(run) == 3);
        CHECK(cohort_run_model_result(run, 0, NULL) == COHORT_ERR_USAGE);
        CHECK(cohort_run_model_result(run, 3, &r) == COHORT_ERR_USAGE);
        CHECK(cohort_run_model_result(run, 0, &r) == COHORT_OK);
        cohort_run_free(run);
    } else {
        CHECK_MSG(0, "%s", err.message);
    }
    cohort_plan_free(p);
}

static void devices(void)
{
    cohort_devices *d = NULL;
    cohort_error err;
    CHECK(cohort_devices_discover(NULL, &err) == COHORT_ERR_USAGE);
    if (cohort_devices_discover(&d, &err)) {
        CHECK_MSG(0, "%s", err.message);
        return;
    }
    CHECK(cohort_devices_count(NULL) == 0);
    cohort_device_info info;
    CHECK(cohort_devices_info(d, 0, NULL) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_info(NULL, 0, &info) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_set_policy(d, NULL, COHORT_MEM_GROW, 0, &err) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_set_policy(NULL, "cpu:0", COHORT_MEM_GROW, 0, &err) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_set_policy(d, "cpu:0", (cohort_mem_policy)7, 0, &err) ==
          COHORT_ERR_USAGE);
    CHECK_CONTAINS(err.message, "policy 7 is not a cohort_mem_policy");
    uint64_t two[2] = {1 << 20, 1 << 20};
    CHECK(cohort_devices_split(d, NULL, two, 2, COHORT_MEM_GROW, &err) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_split(d, "cpu:0", NULL, 2, COHORT_MEM_GROW, &err) == COHORT_ERR_USAGE);
    CHECK(cohort_devices_split(d, "cpu:0", two, 2, (cohort_mem_policy)-3, &err) ==
          COHORT_ERR_USAGE);
    /* UINT64_MAX + 2 wraps to 1: still more than the device has. */
    uint64_t wrap[2] = {UINT64_MAX, 2};
    CHECK(cohort_devices_split(d, "cpu:0", wrap, 2, COHORT_MEM_GROW, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "cpu:0: the split adds up to more than");
    /* the device is whole still: a fitting split works */
    CHECK_MSG(cohort_devices_split(d, "cpu:0", two, 2, COHORT_MEM_GROW, &err) == COHORT_OK, "%s",
              err.message);
    cohort_devices_free(d);
}

/* Train PLAN3's model a for one epoch into dir/trained; its weights path into w. */
static int train_one(char *w, size_t n)
{
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                             "defaults: {epochs: 1, batch_size: 16, layers: [{dense: 8, "
                             "activation: relu}, {dense: 3, activation: softmax}]}\n"
                             "models: [{name: a}]\n");
    if (!p)
        return -1;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_AUTO);
    char out[128];
    snprintf(out, sizeof out, "%s/trained", dir);
    opt.out_dir = out;
    cohort_run *run;
    cohort_error err;
    cohort_status st = cohort_run_create(p, &opt, &run, &err);
    if (!st)
        st = cohort_run_train(run, &err);
    CHECK_MSG(st == COHORT_OK, "%s", err.message);
    cohort_run_free(st ? NULL : run);
    cohort_plan_free(p);
    snprintf(w, n, "%s/models/a.safetensors", out);
    return st ? -1 : 0;
}

static void non_finite(void)
{
    cohort_plan *p = plan_of(PLAN3);
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_AUTO);
    cohort_error err;
    float keep = X[3 * D + 2];
    X[3 * D + 2] = NAN;
    CHECK(create_with(p, &opt, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "memory:train: x[3, 2] is nan");
    X[3 * D + 2] = -INFINITY;
    CHECK(create_with(p, &opt, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "memory:train: x[3, 2] is -inf");
    X[3 * D + 2] = keep;
    /* images [n, 1, 2, 3]: element 10 is sample 1's (0, 1, 1) */
    d.sample_rank = 3;
    d.sample_shape[0] = 1;
    d.sample_shape[1] = 2;
    d.sample_shape[2] = 3;
    keep = X[10];
    X[10] = INFINITY;
    CHECK(create_with(p, &opt, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "memory:train: x[1, 0, 1, 1] is inf");
    X[10] = keep;
    cohort_plan_free(p);

    static float t[N * 2];
    for (int i = 0; i < N * 2; i++)
        t[i] = (float)(i % 7);
    t[2 * 2 + 1] = NAN;
    p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                "models: [{name: r, epochs: 1, loss: mse, layers: [{dense: 2}]}]\n");
    d = train_data();
    d.labels = NULL;
    d.targets = t;
    d.target_dim = 2;
    CHECK(create_with(p, &opt, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "memory:train: targets[2, 1] is nan");
    cohort_plan_free(p);

    char w[256];
    if (train_one(w, sizeof w))
        return;
    d = train_data();
    static float out[N * 3];
    int n_out = 0;
    static int32_t unknown[N];
    for (int i = 0; i < N; i++)
        unknown[i] = -1;
    d.labels = unknown; /* ignored */
    CHECK_MSG(cohort_predict(w, &d, out, N * 3, &n_out, &err) == COHORT_OK, "%s", err.message);
    CHECK(n_out == 3);
    X[5 * D] = NAN;
    CHECK(cohort_predict(w, &d, out, N * 3, &n_out, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "memory:train: x[5, 0] is nan");
    X[5 * D] = 0.5f;
}

static cohort_run *stopping;
static void stop_at_epoch(const cohort_event *ev, void *user)
{
    (void)user;
    if (ev->kind == COHORT_EVENT_EPOCH_END)
        cohort_run_request_stop(stopping);
}

static void messages(void)
{
    cohort_plan *p = plan_of(PLAN3);
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_SEQUENTIAL);
    cohort_error err;
    cohort_run *run;
    if (cohort_run_create(p, &opt, &run, &err) == COHORT_OK) {
        CHECK_MSG(cohort_run_train(run, &err) == COHORT_OK, "%s", err.message);
        CHECK(cohort_run_train(run, &err) == COHORT_ERR_USAGE);
        CHECK_CONTAINS(err.message, "cohort_run_train: this run has trained already");
        cohort_run_free(run);
    }

    /* stopped after epoch 1 of 2, with no out_dir: nothing was saved */
    opt.on_event = stop_at_epoch;
    if (cohort_run_create(p, &opt, &run, &err) == COHORT_OK) {
        stopping = run;
        CHECK(cohort_run_train(run, &err) == COHORT_ERR_INTERRUPTED);
        CHECK_MSG(!strstr(err.message, "results.json"), "%s", err.message);
        CHECK_CONTAINS(err.message, "nothing was saved (no output directory)");
        cohort_model_result r;
        CHECK(cohort_run_model_result(run, 0, &r) == COHORT_OK);
        CHECK(strcmp(r.status, "interrupted") == 0);
        CHECK_CONTAINS(r.error, "stopped after 1 of 2 epochs");
        CHECK_MSG(!strstr(r.error, "checkpoint"), "%s", r.error);
        cohort_run_free(run);
    }
    cohort_plan_free(p);

    char w[256], ckpt[256];
    if (train_one(w, sizeof w))
        return;
    snprintf(ckpt, sizeof ckpt, "%s/trained/checkpoints/a.safetensors", dir);
    int n_out;
    d = train_data();
    CHECK(cohort_predict(ckpt, &d, NULL, 0, &n_out, &err) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "a.safetensors is a checkpoint (for --resume), not a weights file");
}

typedef struct threaded {
    cohort_run *run;
    atomic_int inside, overlapped, events, results_in_event, stop_after;
    atomic_int done;
} threaded;

static void threaded_event(const cohort_event *ev, void *user)
{
    threaded *t = user;
    if (atomic_fetch_add(&t->inside, 1) != 0)
        atomic_fetch_add(&t->overlapped, 1);
    usleep(200); /* long enough for another thread's event to overlap, were they not serialized */
    int n = atomic_fetch_add(&t->events, 1) + 1;
    cohort_model_result r;
    /* From the callback, which runs under the run's lock: must not deadlock. */
    if (cohort_run_model_result(t->run, ev->model, &r) == COHORT_OK && r.name &&
        strcmp(r.name, ev->name) == 0)
        atomic_fetch_add(&t->results_in_event, 1);
    if (t->stop_after && n == t->stop_after)
        cohort_run_request_stop(t->run);
    atomic_fetch_sub(&t->inside, 1);
}

static void *poll_results(void *user)
{
    threaded *t = user;
    double sum = 0;
    while (!atomic_load(&t->done)) {
        for (int i = 0; i < cohort_run_model_count(t->run); i++) {
            cohort_model_result r;
            if (cohort_run_model_result(t->run, i, &r) == COHORT_OK)
                sum += r.epochs_run + (double)strlen(r.error) + (double)strlen(r.status);
        }
        usleep(500);
    }
    return sum < 0 ? user : NULL;
}

static void threads_strategy(void)
{
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                             "defaults: {epochs: 4, batch_size: 8, layers: [{dense: 16, "
                             "activation: relu}, {dense: 3, activation: softmax}]}\n"
                             "models: [{name: a}, {name: b, seed: 2}, {name: c, seed: 3}, "
                             "{name: d, seed: 4}]\n");
    if (!p)
        return;
    cohort_data d = train_data();
    for (int stop = 0; stop < 2; stop++) {
        cohort_run_options opt = options_on(&d, COHORT_STRATEGY_THREADS);
        opt.threads = 2;
        threaded t;
        memset(&t, 0, sizeof t);
        t.stop_after = stop ? 6 : 0;
        opt.on_event = threaded_event;
        opt.user = &t;
        cohort_error err;
        if (cohort_run_create(p, &opt, &t.run, &err)) {
            CHECK_MSG(0, "%s", err.message);
            break;
        }
        pthread_t poller;
        int polling = pthread_create(&poller, NULL, poll_results, &t) == 0;
        cohort_status st = cohort_run_train(t.run, &err);
        atomic_store(&t.done, 1);
        if (polling)
            pthread_join(poller, NULL);
        CHECK_MSG(st == (stop ? COHORT_ERR_INTERRUPTED : COHORT_OK), "stop %d: %s", stop,
                  err.message);
        CHECK_MSG(atomic_load(&t.overlapped) == 0, "%d events overlapped",
                  atomic_load(&t.overlapped));
        CHECK(atomic_load(&t.events) > 0);
        CHECK(atomic_load(&t.results_in_event) == atomic_load(&t.events));
        cohort_run_free(t.run);
    }
    cohort_plan_free(p);
}

/* Under a scheduler the models train in phases, a job a rung: each model
 * still gets one COHORT_EVENT_MODEL_END, when it has ended, with the status
 * its result has (a pruned model's "pruned"; the phases had each sent an
 * "ok", at epoch 1 of 6 for a model that went on, and none for a prune). */
typedef struct ends {
    int n[8];
    char status[8][16];
} ends;

static void count_ends(const cohort_event *ev, void *user)
{
    ends *e = user;
    if (ev->kind == COHORT_EVENT_MODEL_END && ev->model >= 0 && ev->model < 8) {
        e->n[ev->model]++;
        snprintf(e->status[ev->model], sizeof e->status[0], "%s", ev->status);
    }
}

static void scheduler_model_end(void)
{
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                             "defaults: {epochs: 6, batch_size: 16, layers: [{dense: 8, "
                             "activation: relu}, {dense: 3, activation: softmax}]}\n"
                             "models: [{name: m}]\n"
                             "search: {samples: 6, seed: 3, space: {optimizer.lr: "
                             "{loguniform: [1.0e-4, 1.0e-1]}}}\n"
                             "scheduler: {name: asha, grace_period: 1, reduction_factor: 3}\n");
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_SEQUENTIAL);
    char out[64];
    snprintf(out, sizeof out, "%s/asha", dir);
    opt.out_dir = out;
    ends e;
    memset(&e, 0, sizeof e);
    opt.on_event = count_ends;
    opt.user = &e;
    cohort_error err;
    cohort_run *run;
    if (cohort_run_create(p, &opt, &run, &err)) {
        CHECK_MSG(0, "%s", err.message);
        cohort_plan_free(p);
        return;
    }
    CHECK_MSG(cohort_run_train(run, &err) == COHORT_OK, "%s", err.message);
    int pruned = 0;
    for (int i = 0; i < cohort_run_model_count(run); i++) {
        cohort_model_result r;
        CHECK(cohort_run_model_result(run, i, &r) == COHORT_OK);
        CHECK_MSG(e.n[i] == 1, "model %s: %d MODEL_END events", r.name, e.n[i]);
        CHECK_MSG(strcmp(e.status[i], r.status) == 0, "model %s: MODEL_END says '%s', its "
                  "result '%s'", r.name, e.status[i], r.status);
        pruned += strcmp(r.status, "pruned") == 0;
    }
    CHECK(pruned > 0);
    cohort_run_free(run);
    cohort_plan_free(p);
}

/* A stop in a scheduler's last phase, asked as the first model ends: that
 * model trained all its epochs and stays ok (it had been marked
 * interrupted, "stopped at a rung of the scheduler"); the other, not
 * started, is interrupted. */
static void stop_on_end(const cohort_event *ev, void *user)
{
    if (ev->kind == COHORT_EVENT_MODEL_END)
        cohort_run_request_stop(*(cohort_run **)user);
}

static void scheduler_stop_after_last_epoch(void)
{
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                             "defaults: {batch_size: 16, layers: [{dense: 8, activation: relu}, "
                             "{dense: 3, activation: softmax}]}\n"
                             "models: [{name: short, epochs: 1}, {name: long, epochs: 3}]\n"
                             "scheduler: {name: asha, grace_period: 3, max_t: 3}\n");
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_SEQUENTIAL);
    char out[64];
    snprintf(out, sizeof out, "%s/asha-stop", dir);
    opt.out_dir = out;
    cohort_run *run = NULL;
    opt.on_event = stop_on_end;
    opt.user = &run; /* set before the first event, by cohort_run_create */
    cohort_error err;
    if (cohort_run_create(p, &opt, &run, &err)) {
        CHECK_MSG(0, "%s", err.message);
        cohort_plan_free(p);
        return;
    }
    CHECK(cohort_run_train(run, &err) == COHORT_ERR_INTERRUPTED);
    cohort_model_result r;
    CHECK(cohort_run_model_result(run, 0, &r) == COHORT_OK);
    CHECK_MSG(strcmp(r.status, "ok") == 0 && r.epochs_run == 1, "short: %s (%s), %d epochs",
              r.status, r.error, r.epochs_run);
    CHECK(cohort_run_model_result(run, 1, &r) == COHORT_OK);
    CHECK_MSG(strcmp(r.status, "interrupted") == 0, "long: %s", r.status);
    cohort_run_free(run);
    cohort_plan_free(p);
}

static void plan_json_after_training(void)
{
    cohort_plan *p = plan_of(PLAN3);
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_FUSED);
    cohort_error err;
    cohort_run *run;
    if (cohort_run_create(p, &opt, &run, &err)) {
        CHECK_MSG(0, "%s", err.message);
        cohort_plan_free(p);
        return;
    }
    char *before = cohort_run_plan_json(run, &err);
    CHECK(cohort_run_train(run, &err) == COHORT_OK);
    char *after = cohort_run_plan_json(run, &err);
    const char *gb = before ? strstr(before, "\"groups\"") : NULL;
    const char *ga = after ? strstr(after, "\"groups\"") : NULL;
    CHECK_CONTAINS(gb, "\"models\": [\"a\"");
    CHECK_MSG(gb && ga && strcmp(gb, ga) == 0, "groups before: %s\nafter: %s", gb ? gb : "(none)",
              ga ? ga : "(none)");
    cohort_free(before);
    cohort_free(after);
    cohort_run_free(run);
    cohort_plan_free(p);
}

/* The cores each model's events came from, by the thread's binding then. */
typedef struct bindings {
    int events[2];
    cpu_set_t set[2];
    int mixed; /* a model's events came from two different bindings */
} bindings;

static void record_binding(const cohort_event *ev, void *user)
{
    bindings *b = user;
    if (ev->model < 0 || ev->model > 1)
        return;
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof now, &now) != 0)
        return;
    if (b->events[ev->model]++ == 0)
        b->set[ev->model] = now;
    else if (!CPU_EQUAL(&now, &b->set[ev->model]))
        b->mixed++;
}

/* A CPU split in two: each part's models train on threads bound to the
 * part's share of the cores the process may use, disjoint from the other
 * part's, under sequential and threads; the calling thread is bound as it
 * was before when the run returns. */
static void cpu_parts_bound(void)
{
    cpu_set_t all, before, after;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2) {
        printf("test_api: cpu_parts_bound skipped: fewer than 2 cores to split\n");
        return;
    }
    int n = CPU_COUNT(&all);
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.25}\n"
                             "devices: {cpu:0: {split: [1GiB, 1GiB]}}\n"
                             "defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, "
                             "activation: relu}, {dense: 3, activation: softmax}]}\n"
                             "models: [{name: a, device: cpu:0/0}, {name: b, seed: 2, "
                             "device: cpu:0/1}]\n");
    if (!p)
        return;
    cohort_data d = train_data();
    cohort_strategy strategies[] = {COHORT_STRATEGY_SEQUENTIAL, COHORT_STRATEGY_THREADS};
    for (int k = 0; k < 2; k++) {
        cohort_run_options opt = options_on(&d, strategies[k]);
        bindings b;
        memset(&b, 0, sizeof b);
        opt.on_event = record_binding;
        opt.user = &b;
        cohort_run *run = NULL;
        cohort_error err;
        sched_getaffinity(0, sizeof before, &before);
        if (cohort_run_create(p, &opt, &run, &err) != COHORT_OK) {
            CHECK_MSG(0, "%s", err.message);
            break;
        }
        CHECK_MSG(cohort_run_train(run, &err) == COHORT_OK, "%s", err.message);
        cohort_run_free(run);
        sched_getaffinity(0, sizeof after, &after);
        CHECK_MSG(CPU_EQUAL(&before, &after), "strategy %d: the calling thread's binding changed",
                  k);
        CHECK(b.events[0] > 0 && b.events[1] > 0 && b.mixed == 0);
        cpu_set_t both;
        CPU_AND(&both, &b.set[0], &b.set[1]);
        CHECK_MSG(CPU_COUNT(&b.set[0]) == n / 2 && CPU_COUNT(&b.set[1]) == n - n / 2,
                  "strategy %d: parts bound to %d and %d of %d cores", k, CPU_COUNT(&b.set[0]),
                  CPU_COUNT(&b.set[1]), n);
        CHECK_MSG(CPU_COUNT(&both) == 0, "strategy %d: the parts share a core", k);
        CPU_OR(&both, &b.set[0], &b.set[1]);
        CPU_AND(&both, &both, &all);
        CHECK(CPU_COUNT(&both) == n);
    }
    cohort_plan_free(p);
}

/* A library run into a directory a --shard run left (its DIR/.shard) is
 * no share: the marker goes, so that the command line's --resume there
 * later is not refused as another share's. */
static void stale_shard_marker(void)
{
    cohort_plan *p = plan_of(PLAN3);
    if (!p)
        return;
    char out[64], mark[96];
    snprintf(out, sizeof out, "%s/shard", dir);
    snprintf(mark, sizeof mark, "%s/.shard", out);
    CHECK(mkdir(out, 0755) == 0);
    FILE *f = fopen(mark, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("0/2\n", f);
        fclose(f);
    }
    cohort_data d = train_data();
    cohort_run_options opt = options_on(&d, COHORT_STRATEGY_SEQUENTIAL);
    opt.out_dir = out;
    cohort_error err;
    cohort_run *run;
    if (cohort_run_create(p, &opt, &run, &err) == COHORT_OK) {
        CHECK_MSG(cohort_run_train(run, &err) == COHORT_OK, "%s", err.message);
        cohort_run_free(run);
    } else {
        CHECK_MSG(0, "%s", err.message);
    }
    CHECK_MSG(access(mark, F_OK) != 0, "%s is left after a run of the whole plan", mark);
    cohort_plan_free(p);
}

/* Switch the whole process to a decimal-comma locale, as a host program's
 * setlocale(LC_ALL, "") in German does: de_DE.UTF-8, compiled with localedef
 * into dir/locale where the system has none. 0 on success. */
static int use_comma_locale(void)
{
    if (setlocale(LC_ALL, "de_DE.UTF-8"))
        return 0;
    char loc[128], cmd[400];
    snprintf(loc, sizeof loc, "%s/locale", dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", loc, loc);
    if (system(cmd) != 0)
        return -1;
    setenv("LOCPATH", loc, 1);
    return setlocale(LC_ALL, "de_DE.UTF-8") ? 0 : -1;
}

/* The file at dir/rel, malloc'd and NUL-terminated; NULL (a failed check) if unreadable. */
static char *read_out(const char *rel, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/comma/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (s = malloc((size_t)n + 1)) && fread(s, 1, (size_t)n, f) == (size_t)n) {
        s[n] = 0;
        *len = (size_t)n;
    } else {
        free(s);
        s = NULL;
    }
    if (f)
        fclose(f);
    CHECK_MSG(s, "cannot read %s", path);
    return s;
}

/* The JSON text of metadata key in the safetensors file at dir/rel, parsed;
 * NULL (a failed check) where the header or that text is not JSON. */
static json_value *st_meta_json(const char *rel, const char *key)
{
    size_t len;
    char *s = read_out(rel, &len), err[160] = "";
    uint64_t n = 0;
    json_value *head = NULL, *v = NULL;
    if (s && len >= 8) {
        for (int i = 7; i >= 0; i--)
            n = n << 8 | (unsigned char)s[i];
        if (n <= len - 8)
            head = json_parse(s + 8, (size_t)n, err, sizeof err);
    }
    const char *text = json_str(json_get(json_get(head, "__metadata__"), key), NULL);
    if (text)
        v = json_parse(text, strlen(text), err, sizeof err);
    CHECK_MSG(v, "%s: %s: %s", rel, key, err);
    json_free(head);
    free(s);
    return v;
}

/*
 * A plan's 0.2 is 0.2 and cohort's files are read anywhere, whatever the
 * host program's locale: in de_DE (decimal comma) strtod stopped at the '.'
 * of "validation_split: 0.2" (the plan refused), and printf wrote
 * results.json's numbers as 0,992845186 (invalid JSON), the history's with
 * a comma more per number, report.html's sort keys and the checkpoints'
 * state so that --resume could not read them. The threads strategy, so that
 * threads the library starts (in the global locale) write too. Also: the
 * history's metrics have results.json's nine digits ("%.6f" cut a loss of
 * 2.6e-05 to two).
 */
static void comma_locale(void)
{
    if (use_comma_locale() != 0) {
        printf("test_api: no de_DE locale here (localedef failed): the locale check is skipped\n");
        return;
    }
    CHECK(strcmp(localeconv()->decimal_point, ",") == 0);
    static const char *const name[2] = {"m-lr=0.001-s00-dropout=0.", "m-lr=0.0025-s00-dropout=0."};
    static const double lr[2] = {0.001, 0.0025};
    cohort_plan *p = plan_of("data: {train: 'memory:train', validation_split: 0.2}\n"
                             "defaults: {epochs: 2, batch_size: 16, optimizer: {name: adam, "
                             "lr: 0.001}, layers: [{dense: 8, activation: relu}, {dropout: 0.25}, "
                             "{dense: 3, activation: softmax}]}\n"
                             "models: [{name: m}]\n"
                             "sweep: {optimizer.lr: [0.001, 0.0025]}\n"
                             "search: {samples: 1, space: "
                             "{layers.1.dropout: {uniform: [0.1, 0.4]}}}\n");
    cohort_model_result r[2];
    char rname[2][64] = {"", ""};
    if (p) {
        cohort_data d = train_data();
        cohort_run_options opt = options_on(&d, COHORT_STRATEGY_THREADS);
        char out[128];
        snprintf(out, sizeof out, "%s/comma", dir);
        opt.out_dir = out;
        cohort_run *run;
        cohort_error err;
        cohort_status st = cohort_run_create(p, &opt, &run, &err);
        if (!st)
            st = cohort_run_train(run, &err);
        CHECK_MSG(st == COHORT_OK, "%s", err.message);
        for (int i = 0; i < 2 && !st; i++) {
            CHECK(cohort_run_model_result(run, i, &r[i]) == COHORT_OK);
            snprintf(rname[i], sizeof rname[i], "%s", r[i].name); /* the plan's */
        }
        cohort_run_free(st ? NULL : run);
        cohort_plan_free(p);
    }
    setlocale(LC_ALL, "C"); /* the checks read as any program would */
    unsetenv("LOCPATH");
    if (!rname[1][0])
        return;

    size_t len;
    char *text = read_out("results.json", &len), err[160] = "";
    json_value *res = text ? json_parse(text, len, err, sizeof err) : NULL;
    CHECK_MSG(res, "results.json: %s", err);
    const json_value *data = json_get(res, "data");
    CHECK(json_num(json_get(data, "train_samples"), 0) == 192);
    CHECK(json_num(json_get(data, "validation_samples"), 0) == 48);
    for (int i = 0; res && i < 2; i++) {
        const json_value *m = json_at(json_get(res, "models"), (size_t)i);
        const char *mname = json_str(json_get(m, "name"), "");
        CHECK_MSG(strncmp(mname, name[i], strlen(name[i])) == 0, "%s", mname);
        CHECK(strcmp(mname, rname[i]) == 0);
        const json_value *cfg = json_get(m, "config");
        CHECK(json_num(json_get(json_get(cfg, "optimizer"), "lr"), 0) == lr[i]);
        /* the draw, as its name says */
        double drop = json_num(json_get(json_at(json_get(cfg, "layers"), 1), "dropout"), 0);
        const char *dn = strstr(mname, "dropout=");
        CHECK_MSG(dn && drop >= 0.1 && drop <= 0.4 && drop == strtod(dn + 8, NULL), "%s: %g",
                  mname, drop);
        const json_value *best = json_get(m, "best");
        CHECK_NEAR(json_num(json_get(best, "val_loss"), NAN), r[i].best_val_loss,
                   1e-8 * r[i].best_val_loss);
        /* 48 validation samples */
        double right = json_num(json_get(best, "val_accuracy"), NAN) * 48;
        CHECK_NEAR(right, r[i].best_val_accuracy * 48, 1e-6);
        CHECK_NEAR(right, round(right), 1e-6);

        /* history/NAME.csv: as many fields as the header, each metric
         * results.json's number exactly (both nine significant digits) */
        char rel[160];
        snprintf(rel, sizeof rel, "history/%s.csv", mname);
        char *csv = read_out(rel, &len);
        const char *line = csv ? strchr(csv, '\n') : NULL;
        const char *head = "epoch,loss,accuracy,val_loss,val_accuracy,seconds,lr\n";
        CHECK_MSG(csv && strncmp(csv, head, strlen(head)) == 0, "%s", csv ? csv : "");
        static const char *const key[] = {"loss", "accuracy", "val_loss", "val_accuracy"};
        for (size_t e = 0; line && line[1]; e++, line = strchr(line + 1, '\n')) {
            char *q = (char *)line + 1;
            CHECK(strtol(q, &q, 10) == (long)e + 1);
            for (int k = 0; k < 4; k++) {
                double v = *q == ',' ? strtod(q + 1, &q) : NAN;
                double want = json_num(json_at(json_get(json_get(m, "history"), key[k]), e), NAN);
                CHECK_MSG(v == want, "%s epoch %zu: %s %.17g in the CSV, %.17g in results.json",
                          mname, e + 1, key[k], v, want);
            }
            size_t commas = 0;
            for (const char *c = line + 1; *c && *c != '\n'; c++)
                commas += *c == ',';
            CHECK_MSG(commas == 6, "%s: %.60s", rel, line + 1);
        }
        free(csv);

        /* the checkpoint's state (what --resume reads) and the weights' spec */
        snprintf(rel, sizeof rel, "checkpoints/%s.safetensors", mname);
        json_value *state = st_meta_json(rel, "state");
        CHECK(json_get(state, "history") && json_get(state, "history")->n == 2);
        json_free(state);
        snprintf(rel, sizeof rel, "models/%s.safetensors", mname);
        json_value *spec = st_meta_json(rel, "spec");
        CHECK(json_num(json_get(json_get(spec, "optimizer"), "lr"), 0) == lr[i]);
        json_free(spec);
    }
    json_free(res);
    free(text);

    /* report.html: every numeric sort key a number to its end */
    text = read_out("report.html", &len);
    int keys = 0;
    for (const char *k = text; k && (k = strstr(k, "data-v=\"")); ) {
        k += 8;
        if ((*k < '0' || *k > '9') && *k != '-')
            continue;
        char *end;
        strtod(k, &end);
        CHECK_MSG(*end == '"', "report.html: data-v=\"%.20s", k);
        keys++;
    }
    CHECK(keys > 0);
    free(text);
}

int main(void)
{
    /* A checkpoint after every epoch, the last too (by default a model's
     * last epoch has none, and short ones none at all): the checks of a
     * checkpoint's text under a comma locale and of predict refusing one
     * read a finished run's. */
    setenv("COHORT_CHECKPOINT_EVERY", "0", 1);
    make_data(1);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    invalid_arguments();
    devices();
    non_finite();
    messages();
    threads_strategy();
    plan_json_after_training();
    scheduler_model_end();
    scheduler_stop_after_last_epoch();
    cpu_parts_bound();
    stale_shard_marker();
    comma_locale();
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_api: could not remove %s\n", dir);
    return check_done("test_api");
}
