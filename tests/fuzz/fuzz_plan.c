/*
 * fuzz_plan: cohort_plan_parse on the input in memory (YAML or JSON), with
 * one --set override chosen by byte 0, so the override path is fuzzed too.
 */
#include "cohort.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const sets[] = {"defaults.epochs=1", "models.0.optimizer.lr=0.5",
                                       "sweep.batch_size=[8,16]", "data.train=csv:x.csv"};
    int n_sets = data[0] < 4 ? 1 : 0;
    const char *const *over = n_sets ? &sets[data[0]] : NULL;
    char *copy = malloc(size - 1 ? size - 1 : 1);
    if (!copy)
        return 0;
    memcpy(copy, data + 1, size - 1);
    cohort_plan *plan = NULL;
    cohort_error err;
    err.message[0] = 0;
    if (cohort_plan_parse(copy, size - 1, "fuzz.yaml", over, n_sets, &plan, &err) == COHORT_OK) {
        if (!plan || cohort_plan_model_count(plan) < 1)
            abort();
        for (int i = 0; i < cohort_plan_model_count(plan); i++)
            if (!cohort_plan_model_name(plan, i))
                abort();
        cohort_plan_free(plan);
    } else if (plan || !err.message[0]) {
        abort();
    }
    free(copy);
    return 0;
}
