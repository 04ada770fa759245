/*
 * Whose output directory: a directory that holds another run's results.json
 * (another plan, or other models) is refused, unless the run resumes it or
 * was told to overwrite it; overwriting removes the files that run wrote,
 * so none of them is left beside the new run's.
 */
#include "io/results.h"
#include "run/run.h"
#include "util/json.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether the record list `models` names exactly the run's models. */
static int same_models(const cohort_run *run, const json_value *models)
{
    if (!models || models->type != JSON_ARR || models->n != (size_t)run->n)
        return 0;
    for (int i = 0; i < run->n; i++) {
        int found = 0;
        for (size_t j = 0; j < models->n && !found; j++)
            found = !strcmp(json_str(json_get(json_at(models, j), "name"), ""),
                            run->m[i].spec->name);
        if (!found)
            return 0;
    }
    return 1;
}

static void remove_file(const char *dir, const char *sub, const char *name, const char *ext)
{
    char path[3 * COHORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s%s%s", dir, sub, name, ext);
    unlink(path);
}

/* Remove what the run of results `j` wrote in dir: its models' weights,
 * histories and checkpoints, its results.json, report.html and plan.yaml. */
static void remove_run(const char *dir, const json_value *j)
{
    const json_value *models = json_get(j, "models");
    for (size_t i = 0; models && models->type == JSON_ARR && i < models->n; i++) {
        const char *name = json_str(json_get(json_at(models, i), "name"), "");
        /* A name from the file becomes a path: only the names a plan allows. */
        if (!name[0] || strchr(name, '/') || name[0] == '.')
            continue;
        remove_file(dir, "models/", name, ".safetensors");
        remove_file(dir, "models/", name, ".best.safetensors");
        remove_file(dir, "history/", name, ".csv");
        remove_file(dir, "checkpoints/", name, ".safetensors");
        remove_file(dir, "records/", name, ".json");
    }
    remove_file(dir, "", "results", ".json");
    remove_file(dir, "", "report", ".html");
    remove_file(dir, "", "plan", ".yaml");
}

cohort_status run_claim_out_dir(cohort_run *run, cohort_error *err)
{
    char path[COHORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.json", run->out_dir);
    if (access(path, F_OK) != 0)
        return COHORT_OK;
    json_value *j = NULL;
    cohort_error lerr;
    if (run->opt.resume) {
        /* --resume continues the run there: every model it holds must be
         * one of this run's (the models may have grown, as a search's
         * samples). Another plan's run would be taken over, its models'
         * files left beside the new ones and their records gone from
         * results.json. The plan is judged by its models, not its file's
         * name: the copy the run keeps (DIR/plan.yaml), or a renamed file,
         * resumes it. An unreadable results.json is run_resume's to report. */
        cohort_status st = COHORT_OK;
        int share = run->opt.shard_count > 0;
        if (results_load(run->out_dir, &j, &lerr) == COHORT_OK && share) {
            /* A share (--shard, an MPI rank) holds part of the plan, and a
             * rank's folder the part of an earlier split, as many ranks as
             * the run had then: there the plan's name is the test. */
            const char *was = json_str(json_get(j, "plan"), "");
            if (was[0] && strcmp(was, run->plan->name))
                st = cohort_fail(err, COHORT_ERR_USAGE,
                                 "cannot resume: %s holds the results of plan '%s', not '%s'; "
                                 "give that plan to --resume, train with --overwrite (without "
                                 "--resume) to replace its run, or train into another --out "
                                 "directory",
                                 run->out_dir, was, run->plan->name);
        } else if (j) {
            const json_value *models = json_get(j, "models");
            for (size_t i = 0; !st && models && models->type == JSON_ARR && i < models->n; i++) {
                const char *name = json_str(json_get(json_at(models, i), "name"), "");
                if (run_model_index(run, name) < 0)
                    st = cohort_fail(err, COHORT_ERR_USAGE,
                                     "cannot resume: %s holds model '%s' of plan '%s', which "
                                     "this run (plan '%s') does not have; give that run's plan "
                                     "to --resume (its copy is %s/plan.yaml), train with "
                                     "--overwrite (without --resume) to replace it, or train "
                                     "into another --out directory",
                                     run->out_dir, name, json_str(json_get(j, "plan"), "?"),
                                     run->plan->name, run->out_dir);
            }
        }
        json_free(j);
        return st;
    }
    if (results_load(run->out_dir, &j, &lerr) != COHORT_OK) {
        if (!run->opt.overwrite)
            return cohort_fail(err, COHORT_ERR_USAGE,
                               "%s holds a results.json that cannot be read (%s); give "
                               "--overwrite to replace it, or train into another --out directory",
                               run->out_dir, lerr.message);
        remove_run(run->out_dir, NULL);
        return COHORT_OK;
    }
    const char *plan = json_str(json_get(j, "plan"), "");
    const json_value *models = json_get(j, "models");
    /* The same plan's models again: every file of the old run is replaced. */
    if (!strcmp(plan, run->plan->name) && same_models(run, models)) {
        json_free(j);
        return COHORT_OK;
    }
    if (run->opt.overwrite) {
        remove_run(run->out_dir, j);
        json_free(j);
        return COHORT_OK;
    }
    size_t n = models && models->type == JSON_ARR ? models->n : 0;
    char names[256] = "";
    for (size_t i = 0; i < n && strlen(names) < 200; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 json_str(json_get(json_at(models, i), "name"), "?"));
    if (strlen(names) >= 200)
        snprintf(names + strlen(names), sizeof names - strlen(names), ", ...");
    cohort_fail(err, COHORT_ERR_USAGE,
                "%s holds the results of another run (plan '%s', models %s); give --resume "
                "to continue that run, --overwrite to replace it, or train into another --out "
                "directory",
                run->out_dir, plan, n ? names : "none");
    json_free(j);
    return COHORT_ERR_USAGE;
}
