/* cohort report / cohort compare: look at output directories after (or during) a run. */
#include "cli/cli.h"
#include "io/report.h"
#include "io/results.h"
#include "util/json.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cmd_report(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort report DIR\n\n"
                 "Write DIR/report.html again from DIR/results.json (an output directory of\n"
                 "cohort train) and print its path. The page is self-contained: the table of\n"
                 "models, learning curves, the best model's confusion matrix and the plan.");
            return 0;
        } else if (argv[i][0] == '-') {
            static const char *const opts[] = {"--help", NULL};
            return cli_unknown_option("report", argv[i], NULL, opts, 0);
        } else if (!dir) {
            dir = argv[i];
        } else {
            return cli_usage_error("report", "'%s' is extra: one DIR at a time", argv[i]);
        }
    }
    if (!dir)
        return cli_usage_error("report", "needs DIR, an output directory (see cohort report --help)");
    cohort_error err;
    if (report_write(dir, &err))
        return cli_usage_error("report", "%s", err.message);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    printf("%.*s/report.html\n", (int)n, dir);
    return 0;
}

/* One line of the comparison. */
typedef struct cmp_row {
    const char *dir, *model, *status;
    double params, best_epoch, val_loss, val_acc, test_acc, val_mae, test_mae, seconds;
    double epochs, pruned_epoch, pruned_rung; /* pruned_*: NaN when not pruned */
    size_t exploits;                          /* pbt: entries of its lineage */
    const char *last_from;                    /* the donor of the last exploit */
    size_t order; /* breaks ties: the order of the command line and of each results.json */
} cmp_row;

static int sort_by_val;

static int cmp_key(const cmp_row *r, double *primary, double *secondary)
{
    *primary = sort_by_val ? r->val_acc : r->test_acc;
    *secondary = sort_by_val ? r->test_acc : r->val_acc;
    return isfinite(*primary) ? 2 : isfinite(*secondary) ? 1 : 0;
}

/* Descending by the chosen accuracy, then the other, a row without the other
 * after one with it; rows with neither last; ties keep the order of the
 * command line (the index breaks them). A total order, as qsort needs: had
 * a missing second value tied with any, three rows could form a cycle, and
 * their order would follow the command line's. */
static int cmp_rows(const void *pa, const void *pb)
{
    const cmp_row *a = pa, *b = pb;
    double a1, a2, b1, b2;
    int ka = cmp_key(a, &a1, &a2), kb = cmp_key(b, &b1, &b2);
    if (ka != kb)
        return kb - ka;
    if (ka == 2 && a1 != b1)
        return a1 < b1 ? 1 : -1;
    if (ka >= 1 && isfinite(a2) != isfinite(b2))
        return isfinite(a2) ? -1 : 1;
    if (ka >= 1 && isfinite(a2) && a2 != b2)
        return a2 < b2 ? 1 : -1;
    /* Without accuracies (regression): the lower validation loss first. */
    if (ka == 0 && isfinite(a->val_loss) != isfinite(b->val_loss))
        return isfinite(a->val_loss) ? -1 : 1;
    if (ka == 0 && isfinite(a->val_loss) && a->val_loss != b->val_loss)
        return a->val_loss < b->val_loss ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static void cell(char *buf, size_t n, double v, const char *fmt)
{
    if (isfinite(v))
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "-");
}

static void print_json(const cmp_row *r, size_t n)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"models\": [");
    for (size_t i = 0; i < n; i++) {
        sb_puts(&b, i ? ",\n  {\"dir\": " : "\n  {\"dir\": ");
        sb_json_str(&b, r[i].dir);
        sb_puts(&b, ", \"model\": ");
        sb_json_str(&b, r[i].model);
        sb_puts(&b, ", \"status\": ");
        sb_json_str(&b, r[i].status);
        sb_puts(&b, ", \"params\": ");
        sb_json_num(&b, r[i].params);
        sb_puts(&b, ", \"best_epoch\": ");
        sb_json_num(&b, r[i].best_epoch);
        sb_puts(&b, ", \"val_loss\": ");
        sb_json_num(&b, r[i].val_loss);
        sb_puts(&b, ", \"val_accuracy\": ");
        sb_json_num(&b, r[i].val_acc);
        sb_puts(&b, ", \"test_accuracy\": ");
        sb_json_num(&b, r[i].test_acc);
        sb_puts(&b, ", \"val_mae\": ");
        sb_json_num(&b, r[i].val_mae);
        sb_puts(&b, ", \"test_mae\": ");
        sb_json_num(&b, r[i].test_mae);
        sb_puts(&b, ", \"seconds\": ");
        sb_json_num(&b, r[i].seconds);
        sb_puts(&b, ", \"epochs_run\": ");
        sb_json_num(&b, r[i].epochs);
        sb_puts(&b, ", \"pruned_at\": ");
        if (isfinite(r[i].pruned_epoch)) {
            sb_puts(&b, "{\"epoch\": ");
            sb_json_num(&b, r[i].pruned_epoch);
            sb_puts(&b, ", \"rung\": ");
            sb_json_num(&b, r[i].pruned_rung);
            sb_puts(&b, "}");
        } else {
            sb_puts(&b, "null");
        }
        sb_printf(&b, ", \"exploits\": %zu}", r[i].exploits);
    }
    sb_puts(&b, n ? "\n]}\n" : "]}\n");
    if (b.data)
        fputs(b.data, stdout);
    sb_free(&b);
}

static void print_table(const cmp_row *r, size_t n)
{
    int wd = 3, wm = 5;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(r[i].dir);
        wd = l > wd ? l : wd;
        l = (int)strlen(r[i].model);
        wm = l > wm ? l : wm;
    }
    int reg = 0, scheduled = 0;
    for (size_t i = 0; i < n; i++) {
        reg |= isfinite(r[i].val_mae) || isfinite(r[i].test_mae);
        scheduled |= isfinite(r[i].pruned_epoch) || r[i].exploits;
    }
    printf("%-*s  %-*s  %-11s  %9s  %6s  %7s  %8s  %8s  %8s", wd, "dir", wm, "model", "status",
           "params", "epochs", "best_ep", "val_loss", "val_acc", "test_acc");
    if (reg)
        printf("  %8s  %8s", "val_mae", "test_mae");
    printf("  %8s%s\n", "seconds", scheduled ? "  scheduler" : "");
    for (size_t i = 0; i < n; i++) {
        char p[32], ep[16], be[16], vl[16], va[16], ta[16], vm[16], tm[16], sec[16];
        cell(p, sizeof p, r[i].params, "%.0f");
        cell(ep, sizeof ep, r[i].epochs, "%.0f");
        cell(be, sizeof be, r[i].best_epoch, "%.0f");
        cell(vl, sizeof vl, r[i].val_loss, "%.4f");
        cell(va, sizeof va, r[i].val_acc, "%.4f");
        cell(ta, sizeof ta, r[i].test_acc, "%.4f");
        cell(vm, sizeof vm, r[i].val_mae, "%.4f");
        cell(tm, sizeof tm, r[i].test_mae, "%.4f");
        cell(sec, sizeof sec, r[i].seconds, "%.1f");
        printf("%-*s  %-*s  %-11s  %9s  %6s  %7s  %8s  %8s  %8s", wd, r[i].dir, wm, r[i].model,
               r[i].status, p, ep, be, vl, va, ta);
        if (reg)
            printf("  %8s  %8s", vm, tm);
        printf("  %8s", sec);
        /* What the scheduler did: asha's or median's cut, pbt's copies. */
        if (isfinite(r[i].pruned_epoch))
            printf("  pruned at epoch %.0f (rung %.0f)", r[i].pruned_epoch, r[i].pruned_rung);
        else if (r[i].exploits)
            printf("  pbt: %zu exploit%s, the last from %s", r[i].exploits,
                   r[i].exploits == 1 ? "" : "s", r[i].last_from);
        printf("\n");
    }
}

int cmd_compare(int argc, char **argv)
{
    int json = 0, n_dirs = 0;
    sort_by_val = 1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort compare DIR... [--by val|test] [--json]\n\n"
                 "One table of the models of several output directories of cohort train:\n"
                 "dir, model, status, params, epochs trained, best epoch, its val loss, best\n"
                 "val accuracy, test accuracy (for regression also val and test mae) and\n"
                 "seconds, best first. --by val (the default) sorts by the best epoch's val\n"
                 "accuracy, then test accuracy: a model is chosen on validation data, and the\n"
                 "test set judges the choice. --by test the other way round. test_acc is the\n"
                 "final weights' (the best epoch's where early stopping restored them).\n"
                 "--json prints the rows as JSON.");
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (cli_opt_value(argc, argv, &i, "--by", &v)) {
            if (strcmp(v, "test") && strcmp(v, "val"))
                return cli_usage_error("compare", "--by takes test or val, not '%s'", v);
            sort_by_val = !strcmp(v, "val");
        } else if (argv[i][0] == '-') {
            static const char *const opts[] = {"--by", "--json", "--help", NULL};
            return cli_unknown_option("compare", argv[i], NULL, opts, 0);
        } else {
            n_dirs++;
        }
    }
    if (!n_dirs)
        return cli_usage_error("compare", "needs at least one DIR (see cohort compare --help)");
    json_value **trees = calloc((size_t)argc, sizeof *trees);
    if (!trees)
        return cli_usage_error("compare", "out of memory");
    size_t n_rows = 0, cap = 0;
    cmp_row *rows = NULL;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        if (argv[i][0] == '-') {
            if (!strcmp(argv[i], "--by"))
                i++;
            continue;
        }
        cohort_error err;
        if (results_load(argv[i], &trees[i], &err)) {
            rc = cli_usage_error("compare", "%s", err.message);
            break;
        }
        const json_value *models = json_get(trees[i], "models");
        for (size_t k = 0; k < models->n; k++) {
            if (n_rows == cap) {
                size_t nc = cap ? 2 * cap : 16;
                cmp_row *nr = realloc(rows, nc * sizeof *nr);
                if (!nr) {
                    rc = cli_usage_error("compare", "out of memory");
                    break;
                }
                rows = nr;
                cap = nc;
            }
            const json_value *m = &models->items[k];
            cmp_row *r = &rows[n_rows++];
            r->order = n_rows - 1;
            r->dir = argv[i];
            r->model = json_str(json_get(m, "name"), "?");
            r->status = json_str(json_get(m, "status"), "?");
            r->params = json_num(json_get(m, "params"), NAN);
            r->best_epoch = json_num(json_get(json_get(m, "best"), "epoch"), NAN);
            r->val_loss = json_num(json_get(json_get(m, "best"), "val_loss"), NAN);
            r->val_acc = json_num(json_get(json_get(m, "best"), "val_accuracy"), NAN);
            r->test_acc = json_num(json_get(json_get(m, "test"), "accuracy"), NAN);
            r->val_mae = json_num(json_get(json_get(m, "best"), "val_mae"), NAN);
            r->test_mae = json_num(json_get(json_get(m, "test"), "mae"), NAN);
            r->seconds = json_num(json_get(m, "seconds"), NAN);
            r->epochs = json_num(json_get(m, "epochs_run"), NAN);
            const json_value *pa = json_get(m, "pruned_at");
            r->pruned_epoch = json_num(json_get(pa, "epoch"), NAN);
            r->pruned_rung = json_num(json_get(pa, "rung"), NAN);
            const json_value *lin = json_get(m, "lineage");
            r->exploits = lin && lin->type == JSON_ARR ? lin->n : 0;
            r->last_from = r->exploits ? json_str(json_get(&lin->items[lin->n - 1], "from"), "?")
                                       : "";
        }
    }
    if (!rc) {
        if (n_rows)
            qsort(rows, n_rows, sizeof *rows, cmp_rows);
        if (json)
            print_json(rows, n_rows);
        else
            print_table(rows, n_rows);
    }
    free(rows);
    for (int i = 0; i < argc; i++)
        json_free(trees[i]);
    free(trees);
    return rc;
}
