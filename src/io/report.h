/*
 * report: report.html of an output directory, drawn from its results.json
 * alone: the summary table, learning curves as inline SVG, the confusion
 * matrix of the best model and the plan that ran. No network, no libraries.
 */
#ifndef COHORT_REPORT_H
#define COHORT_REPORT_H

#include "cohort.h"
#include "util/json.h"
#include "util/util.h"

/* Index in results' "models" of the best model, picked on validation data as
 * a model is chosen (the test set judges the choice, it does not make it):
 * by the metric the run watched (its scheduler's, else the first model's
 * early-stopping monitor), else val_loss, each at the model's best epoch;
 * only where no model has that figure, by the test set (accuracy, else mae,
 * else loss). The first wins a tie. -1 when no model has any. *by (may be
 * NULL) receives the metric picked by ("val_loss", "test accuracy", ...). */
int report_best_model(const json_value *results, const char **by);

/* Append the HTML page for results (a tree that results_load
 * accepted) to out. plan_text (may be NULL) is the plan file's text, shown
 * verbatim. Returns COHORT_ERR_NOMEM when out could not grow. */
cohort_status report_render(const json_value *results, const char *plan_text, strbuf *out,
                            cohort_error *err);

/* Read DIR/results.json (and DIR/plan.yaml when present) and write
 * DIR/report.html atomically. On error the old report is left as it was
 * and err says which file and why. */
cohort_status report_write(const char *out_dir, cohort_error *err);

#endif
