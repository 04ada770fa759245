/*
 * results.json of an output directory, read: the tree checked as a whole
 * (results_load) and one model's record as named fields
 * (results_model_read). Resume, merge, MPI's gathering, cohort report and
 * report.html read results.json through here; run/output.c writes it.
 */
#ifndef COHORT_IO_RESULTS_H
#define COHORT_IO_RESULTS_H

#include "cohort.h"
#include "util/json.h"

/* Read and check DIR/results.json: an object whose "models" is an array of
 * objects, each with a string "name". On success *out holds the tree (free
 * it with json_free). On error *out is NULL and the status is
 * COHORT_ERR_IO (cannot read) or COHORT_ERR_INPUT (malformed), with a
 * message that starts "DIR/results.json: ". */
cohort_status results_load(const char *out_dir, json_value **out, cohort_error *err);

/* "DIR/file" into path (n bytes), without DIR's trailing slashes
 * (COHORT_ERR_USAGE when it does not fit). */
cohort_status results_dir_file(char *path, size_t n, const char *dir, const char *file,
                               cohort_error *err);

/* The curves of a model's history: accuracy for classification, mae for
 * regression; a validation curve is its training curve + CURVE_VAL. */
enum {
    CURVE_LOSS, CURVE_ACC, CURVE_MAE, CURVE_VAL_LOSS, CURVE_VAL_ACC, CURVE_VAL_MAE,
    N_CURVES, CURVE_VAL = CURVE_VAL_LOSS
};
/* Each curve's key in a record's "history". */
extern const char *const results_curve_key[N_CURVES];

typedef struct results_model {
    const json_value *j;
    const char *name, *status, *error, *device;
    double params, peak_bytes, planned_bytes, seconds, epochs_run;
    int stopped_early;
    double restored_epoch;
    double best_epoch, best_val_loss, best_val_acc, test_loss, test_acc;
    double best_val_mae, test_mae; /* regression */
    double pruned_rung;            /* pruned by the scheduler: at which rung; NaN: not */
    int exploits;                  /* pbt: entries of its lineage */
    double exploit_epoch;          /* pbt: the last one's epoch and donor */
    const char *exploit_from;
    int reg;                       /* "task": "regression": mae in place of accuracy */
    const json_value *curve[N_CURVES]; /* arrays, or NULL */
    int n_epochs;                      /* longest curve */
    int index;                         /* in results.json's "models" */
} results_model;


/* Record j, the model at index in "models", into m. */
void results_model_read(results_model *m, const json_value *j, int index);

#endif
