/*
 * Training progress. On a terminal: one live line per running model (epoch,
 * progress bar, loss, accuracy, ETA), redrawn in place at most 10 times a
 * second, with a line per finished epoch above it. Elsewhere: the epoch
 * lines only.
 */
#include "cli/cli.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct live_line {
    int model;
    char name[64], device[32];
    int epoch, epochs;
    int64_t step, steps;
    double loss, accuracy, start, epoch_start;
} live_line;

struct progress {
    FILE *out;
    int quiet, tty, n_models, drawn;
    int n_live;
    live_line live[64];
    double last_draw;
};

progress *progress_create(FILE *out, int quiet, int n_models)
{
    progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->out = out;
    p->quiet = quiet;
    p->tty = isatty(fileno(out));
    p->n_models = n_models;
    return p;
}

static void clear_live(progress *p)
{
    if (!p->tty)
        return;
    for (int i = 0; i < p->drawn; i++)
        fputs("\x1b[1A\x1b[2K", p->out);
    p->drawn = 0;
}

static void draw_live(progress *p)
{
    if (!p->tty)
        return;
    clear_live(p);
    double now = now_seconds();
    for (int i = 0; i < p->n_live; i++) {
        live_line *l = &p->live[i];
        double frac = l->steps ? (double)l->step / (double)l->steps : 0.0;
        char bar[21];
        int filled = (int)(frac * 20.0);
        for (int j = 0; j < 20; j++)
            bar[j] = j < filled ? '#' : '.';
        bar[20] = 0;
        double elapsed = now - l->epoch_start;
        double eta = frac > 0.0 ? elapsed / frac - elapsed : NAN;
        fprintf(p->out, "  %-20.20s %-7s epoch %d/%d [%s] %3.0f%%  loss %.4f", l->name,
                l->device, l->epoch, l->epochs, bar, frac * 100.0, l->loss);
        if (isfinite(l->accuracy))
            fprintf(p->out, "  acc %.4f", l->accuracy);
        if (isfinite(eta))
            fprintf(p->out, "  ETA %.0fs", eta);
        fputc('\n', p->out);
    }
    p->drawn = p->n_live;
    fflush(p->out);
    p->last_draw = now;
}

static live_line *find_live(progress *p, int model)
{
    for (int i = 0; i < p->n_live; i++)
        if (p->live[i].model == model)
            return &p->live[i];
    return NULL;
}

void progress_event(const cohort_event *ev, void *user)
{
    progress *p = user;
    if (!p || p->quiet)
        return;
    live_line *l = find_live(p, ev->model);
    switch (ev->kind) {
    case COHORT_EVENT_MODEL_START:
        if (!l && p->n_live < 64) {
            l = &p->live[p->n_live++];
            memset(l, 0, sizeof *l);
            l->model = ev->model;
            str_copy(l->name, sizeof l->name, ev->name);
            str_copy(l->device, sizeof l->device, ev->device);
            l->epochs = ev->epochs;
            l->epoch = 1;
            l->start = l->epoch_start = now_seconds();
        }
        break;
    case COHORT_EVENT_STEP:
        if (l) {
            if (ev->epoch != l->epoch)
                l->epoch_start = now_seconds();
            l->epoch = ev->epoch;
            l->step = ev->step;
            l->steps = ev->steps;
            l->loss = ev->loss;
            l->accuracy = ev->accuracy;
            if (now_seconds() - p->last_draw > 0.1)
                draw_live(p);
        }
        break;
    case COHORT_EVENT_EPOCH_END: {
        clear_live(p);
        double secs = l ? now_seconds() - l->epoch_start : NAN;
        fprintf(p->out, "%s epoch %d/%d: loss %.4f", ev->name, ev->epoch, ev->epochs, ev->loss);
        int reg = isfinite(ev->mae);
        if (reg)
            fprintf(p->out, " mae %.4f rmse %.4f", ev->mae, ev->rmse);
        else
            fprintf(p->out, " accuracy %.4f", ev->accuracy);
        if (isfinite(ev->val_loss) && reg)
            fprintf(p->out, " val_loss %.4f val_mae %.4f val_rmse %.4f", ev->val_loss, ev->val_mae,
                    ev->val_rmse);
        else if (isfinite(ev->val_loss))
            fprintf(p->out, " val_loss %.4f val_accuracy %.4f", ev->val_loss, ev->val_accuracy);
        if (isfinite(secs))
            fprintf(p->out, " (%.1fs)", secs);
        fputc('\n', p->out);
        if (l) {
            l->epoch = ev->epoch + 1;
            l->step = 0;
            l->epoch_start = now_seconds();
        }
        draw_live(p);
        fflush(p->out);
        break;
    }
    case COHORT_EVENT_MODEL_END:
        clear_live(p);
        if (strcmp(ev->status, "pruned") == 0)
            fprintf(p->out, "%s pruned at epoch %d\n", ev->name, ev->epoch);
        else if (strcmp(ev->status, "ok") != 0)
            fprintf(p->out, "%s %s: %s\n", ev->name, ev->status, ev->error);
        else if (ev->stopped_early && ev->restored_epoch)
            fprintf(p->out, "%s stopped early at epoch %d, restored epoch %d\n", ev->name,
                    ev->epoch, ev->restored_epoch);
        else if (ev->stopped_early)
            fprintf(p->out, "%s stopped early at epoch %d\n", ev->name, ev->epoch);
        if (l) {
            *l = p->live[--p->n_live];
        }
        draw_live(p);
        fflush(p->out);
        break;
    }
}

void progress_finish(progress *p)
{
    if (p)
        clear_live(p);
}

void progress_free(progress *p) { free(p); }
