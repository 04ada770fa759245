/* The table of results printed after training. */
#include "cli/cli.h"
#include "run/run.h"

#include <math.h>
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
    int w = 5;
    for (int i = 0; i < run->n; i++) {
        int l = (int)strlen(run->m[i].spec->name);
        if (l > w)
            w = l;
    }
    int notes = 0, cls = 0, reg = 0;
    for (int i = 0; i < run->n; i++) {
        notes |= (run->m[i].res.state == MODEL_OK && run->m[i].res.stopped_early) ||
                 run->m[i].res.state == MODEL_PRUNED;
        reg |= run->m[i].L.metric == METRIC_ERRORS;
        cls |= run->m[i].L.metric != METRIC_ERRORS;
    }
    /* Accuracy columns for classification, error columns for regression. */
    fprintf(out, "%-*s  %-11s  %-7s  %9s  %6s  %8s  %8s", w, "model", "status", "device",
            "params", "epochs", "best_ep", "val_loss");
    if (cls)
        fprintf(out, "  %8s  %8s", "val_acc", "test_acc");
    if (reg)
        fprintf(out, "  %8s  %8s", "val_mae", "test_mae");
    fprintf(out, "  %8s%s\n", "seconds", notes ? "  note" : "");
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        char vl[16], va[16], ta[16], vm[16], tm[16], sec[16], be[16];
        cell_num(vl, sizeof vl, e->res.best_epoch ? e->res.best.val_loss : NAN, "%.4f");
        cell_num(va, sizeof va, e->res.best_epoch ? e->res.best.val_accuracy : NAN, "%.4f");
        cell_num(ta, sizeof ta, e->test_accuracy, "%.4f");
        cell_num(vm, sizeof vm, e->res.best_epoch ? e->res.best.val_mae : NAN, "%.4f");
        cell_num(tm, sizeof tm, e->test_mae, "%.4f");
        cell_num(sec, sizeof sec, e->res.seconds, "%.1f");
        cell_num(be, sizeof be, e->res.best_epoch ? (double)e->res.best_epoch : NAN, "%.0f");
        char note[96] = "";
        int restored = run_restored_epoch(e);
        if (e->res.state == MODEL_OK && e->res.stopped_early && restored)
            snprintf(note, sizeof note, "  stopped early at %d, restored %d", e->res.epochs_run,
                     restored);
        else if (e->res.state == MODEL_OK && e->res.stopped_early)
            snprintf(note, sizeof note, "  stopped early at %d", e->res.epochs_run);
        else if (e->res.state == MODEL_PRUNED)
            snprintf(note, sizeof note, "  pruned at epoch %d (rung %d)", e->res.epochs_run,
                     e->pruned_rung);
        fprintf(out, "%-*s  %-11s  %-7s  %9zu  %6d  %8s  %8s", w, e->spec->name,
                model_state_str(e->res.state),
                e->device >= 0 ? run->devices->dev[e->device].info.name : "-", e->L.n_params,
                e->res.epochs_run, be, vl);
        if (cls)
            fprintf(out, "  %8s  %8s", va, ta);
        if (reg)
            fprintf(out, "  %8s  %8s", vm, tm);
        fprintf(out, "  %8s%s\n", sec, note);
    }
}
