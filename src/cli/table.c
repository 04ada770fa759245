/* The table of results printed after training, from the run's summaries of its models. */
#include "cli/cli.h"
#include "run/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void cell_num(char *buf, size_t n, double v, const char *fmt)
{
    if (isfinite(v))
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "-");
}

void print_results_table(FILE *out, const cohort_run *run)
{
    int n = cohort_run_model_count(run), w = 5;
    run_model_summary *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    if (!m)
        return;
    for (int i = 0; i < n; i++) {
        run_model_summary_of(run, i, &m[i]);
        int l = (int)strlen(m[i].name);
        if (l > w)
            w = l;
    }
    int notes = 0, cls = 0, reg = 0;
    for (int i = 0; i < n; i++) {
        notes |= (m[i].state == MODEL_OK && m[i].stopped_early) || m[i].state == MODEL_PRUNED ||
                 m[i].exploits > 0;
        reg |= m[i].regression;
        cls |= !m[i].regression;
    }
    /* Accuracy columns for classification, error columns for regression. */
    fprintf(out, "%-*s  %-11s  %-7s  %9s  %6s  %8s  %8s", w, "model", "status", "device",
            "params", "epochs", "best_ep", "val_loss");
    if (cls)
        fprintf(out, "  %8s  %8s", "val_acc", "test_acc");
    if (reg)
        fprintf(out, "  %8s  %8s", "val_mae", "test_mae");
    fprintf(out, "  %8s%s\n", "seconds", notes ? "  note" : "");
    for (int i = 0; i < n; i++) {
        const run_model_summary *e = &m[i];
        char vl[16], va[16], ta[16], vm[16], tm[16], sec[16], be[16];
        cell_num(vl, sizeof vl, e->best_val_loss, "%.4f");
        cell_num(va, sizeof va, e->best_val_accuracy, "%.4f");
        cell_num(ta, sizeof ta, e->test_accuracy, "%.4f");
        cell_num(vm, sizeof vm, e->best_val_mae, "%.4f");
        cell_num(tm, sizeof tm, e->test_mae, "%.4f");
        cell_num(sec, sizeof sec, e->seconds, "%.1f");
        cell_num(be, sizeof be, e->best_epoch ? (double)e->best_epoch : NAN, "%.0f");
        char note[COHORT_NAME_MAX + 96] = "";
        if (e->state == MODEL_OK && e->stopped_early && e->restored_epoch)
            snprintf(note, sizeof note, "  stopped early at %d, restored %d", e->epochs_run,
                     e->restored_epoch);
        else if (e->state == MODEL_OK && e->stopped_early)
            snprintf(note, sizeof note, "  stopped early at %d", e->epochs_run);
        else if (e->state == MODEL_PRUNED)
            snprintf(note, sizeof note, "  pruned at epoch %d (rung %d)", e->epochs_run,
                     e->pruned_rung);
        else if (e->exploits > 0)
            snprintf(note, sizeof note, "  pbt: %d exploit%s, the last at epoch %d from %s",
                     e->exploits, e->exploits == 1 ? "" : "s", e->exploit_epoch,
                     e->exploit_from);
        fprintf(out, "%-*s  %-11s  %-7s  %9zu  %6d  %8s  %8s", w, e->name,
                model_state_str(e->state), e->device, e->params, e->epochs_run, be, vl);
        if (cls)
            fprintf(out, "  %8s  %8s", va, ta);
        if (reg)
            fprintf(out, "  %8s  %8s", vm, tm);
        fprintf(out, "  %8s%s\n", sec, note);
    }
    free(m);
}
