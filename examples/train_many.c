/*
 * train_many: train the models of a plan through cohort's C API, in one
 * program, and print each model's result.
 *
 *     train_many [PLAN] [--out DIR] [KEY=VALUE]...
 *
 * PLAN defaults to examples/seed.yaml; KEY=VALUE override plan keys as
 * `cohort train --set` does (e.g. defaults.epochs=1).
 */
#include <cohort.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static void on_event(const cohort_event *ev, void *user)
{
    (void)user;
    if (ev->kind == COHORT_EVENT_EPOCH_END)
        printf("%-14s epoch %2d/%d  loss %.4f  accuracy %.4f  val_accuracy %.4f\n", ev->name,
               ev->epoch, ev->epochs, ev->loss, ev->accuracy, ev->val_accuracy);
    else if (ev->kind == COHORT_EVENT_MODEL_END && strcmp(ev->status, "ok") != 0)
        printf("%-14s %s: %s\n", ev->name, ev->status, ev->error);
}

int main(int argc, char **argv)
{
    const char *path = "examples/seed.yaml", *out = NULL;
    const char *sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (strchr(argv[i], '=') && n_sets < 64)
            sets[n_sets++] = argv[i];
        else
            path = argv[i];
    }

    cohort_error err;
    cohort_plan *plan;
    if (cohort_plan_load(path, sets, n_sets, &plan, &err) != COHORT_OK) {
        fprintf(stderr, "train_many: %s\n", err.message);
        return 2;
    }
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    opt.out_dir = out;
    opt.on_event = on_event;
    cohort_run *run;
    if (cohort_run_create(plan, &opt, &run, &err) != COHORT_OK) {
        fprintf(stderr, "train_many: %s\n", err.message);
        cohort_plan_free(plan);
        return 2;
    }
    cohort_status st = cohort_run_train(run, &err);
    printf("\n%-14s %-8s %10s %10s %10s %8s\n", "model", "status", "params", "val_acc", "test_acc",
           "seconds");
    for (int i = 0; i < cohort_run_model_count(run); i++) {
        cohort_model_result r;
        cohort_run_model_result(run, i, &r);
        printf("%-14s %-8s %10llu %10.4f %10.4f %8.1f\n", r.name, r.status,
               (unsigned long long)r.params, r.best_val_accuracy, r.test_accuracy, r.seconds);
    }
    if (st != COHORT_OK)
        fprintf(stderr, "train_many: %s\n", err.message);
    cohort_run_free(run);
    cohort_plan_free(plan);
    return st == COHORT_OK ? 0 : st == COHORT_ERR_PARTIAL ? 1 : 2;
}
