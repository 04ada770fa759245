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

/* Index in results' "models" of the best model: the highest test accuracy,
 * else (when no model has one) the highest best-epoch val_accuracy; the
 * first wins a tie. -1 when no model has either. */
int report_best_model(const json_value *results);

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
