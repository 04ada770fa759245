/*
 * report.html: one self-contained page per output directory, drawn from
 * results.json (read by io/results.c). One job, the page, in one file of
 * some 1,200 lines: its sections (header, table, curves as inline SVG,
 * confusion matrix, plan), and the CSS and script it carries.
 */
#include "io/report.h"
#include "io/results.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAX_BYTES ((size_t)1 << 20)
#define COHORT_REPORT_PATH_MAX 4096

typedef results_model rmodel;

typedef struct rctx {
    strbuf *b;
    const json_value *root;
    rmodel *m;
    char (*color)[24]; /* each model's color in the charts, [n] */
    int n;
    int max_epochs;
    int best;
    const char *best_by; /* the metric it was picked by */
    int clip_id;
} rctx;

/* Tableau 10: distinct, and readable on white. Models past ten get hues
 * spread by the golden angle. */
static const char *const palette[10] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#7f7f7f"};

/* Model index's color: the palette's first ten, then hues spread by the
 * golden angle. */
static void model_color(char *buf, size_t n, int index)
{
    if (index < 10)
        snprintf(buf, n, "%s", palette[index]);
    else
        snprintf(buf, n, "hsl(%d,55%%,45%%)", (int)fmod(index * 137.508, 360.0));
}

static const char *const fashion_mnist_classes[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

/* ---- small helpers ---------------------------------------------------- */

static void html_esc(strbuf *b, const char *s)
{
    const char *run = s;
    for (; *s; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        sb_putn(b, run, (size_t)(s - run));
        sb_puts(b, rep);
        run = s + 1;
    }
    sb_putn(b, run, (size_t)(s - run));
}

/* A number from the tree; null and absent are NaN. */
static double jnum(const json_value *v)
{
    return json_num(v, NAN);
}

/* Write v with one decimal, as "%.1f" would for |v| < 1e9, so that it
 * ends just before end; returns where it starts. printf costs ten times
 * more, and a 50-model, 100-epoch report has 80 000 coordinates. */
static char *coord_fmt(char *end, double v)
{
    char *p = end;
    v = v < -1e9 ? -1e9 : v > 1e9 ? 1e9 : v;
    long long t = (long long)((v < 0 ? -v : v) * 10 + 0.5);
    int neg = v < 0 && t != 0;
    *--p = (char)('0' + t % 10);
    *--p = '.';
    t /= 10;
    do {
        *--p = (char)('0' + t % 10);
        t /= 10;
    } while (t);
    if (neg)
        *--p = '-';
    return p;
}

static void put_coord(strbuf *b, double v)
{
    char buf[24];
    char *p = coord_fmt(buf + sizeof buf, v);
    sb_putn(b, p, (size_t)(buf + sizeof buf - p));
}

/* Append tmpl with each '@' replaced by the next of v, as put_coord prints it. */
static void put_svg(strbuf *b, const char *tmpl, const double *v)
{
    for (const char *at; (at = strchr(tmpl, '@')); tmpl = at + 1) {
        sb_putn(b, tmpl, (size_t)(at - tmpl));
        put_coord(b, *v++);
    }
    sb_puts(b, tmpl);
}

static void put_fixed(strbuf *b, double v, int decimals)
{
    if (isfinite(v))
        sb_printf(b, "%.*f", decimals, v);
    else
        sb_puts(b, "&ndash;");
}

/* data-v attribute for sorting: the raw number, or empty when missing. */
static void put_data_v(strbuf *b, double v)
{
    if (isfinite(v))
        sb_printf(b, " data-v=\"%.17g\"", v);
    else
        sb_puts(b, " data-v=\"\"");
}

static void put_int_grouped(strbuf *b, double v)
{
    if (!isfinite(v) || v < 0) {
        sb_puts(b, "&ndash;");
        return;
    }
    char digits[32];
    str_format(digits, sizeof digits, "%.0f", v);
    size_t n = strlen(digits);
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            sb_puts(b, ",");
        sb_putn(b, digits + i, 1);
    }
}

static void put_duration(strbuf *b, double s)
{
    if (!isfinite(s) || s < 0)
        sb_puts(b, "&ndash;");
    else if (s < 60)
        sb_printf(b, "%.1f s", s);
    else if (s < 3600)
        sb_printf(b, "%dm %02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        sb_printf(b, "%dh %02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void put_bytes(strbuf *b, double v)
{
    if (!isfinite(v) || v <= 0) {
        sb_puts(b, "&ndash;");
        return;
    }
    char buf[32];
    sb_puts(b, format_bytes((uint64_t)v, buf, sizeof buf));
}

static int is_status(const rmodel *m, const char *s)
{
    return !strcmp(m->status, s);
}

static int is_failed(const rmodel *m)
{
    return is_status(m, "failed") || is_status(m, "diverged");
}

static void put_status_pill(strbuf *b, const char *status)
{
    /* pruned: stopped by the scheduler, a success, shown apart from failures. */
    const char *cls = !strcmp(status, "ok")       ? "ok"
                      : !strcmp(status, "pruned") ? "cut"
                      : !strcmp(status, "running") || !strcmp(status, "pending") ||
                              !strcmp(status, "interrupted")
                          ? "run"
                          : "bad";
    sb_printf(b, "<span class=\"pill %s\">", cls);
    html_esc(b, status);
    sb_puts(b, "</span>");
}

static void put_swatch(strbuf *b, const char *color)
{
    sb_printf(b, "<span class=\"sw\" style=\"background:%s\"></span>", color);
}

/* The validation metric the run watched: its scheduler's, else the first
 * model's early-stopping monitor where it is a validation one; NULL: none. */
static const char *watched_metric(const json_value *results)
{
    const char *m = json_str(json_get(json_get(results, "scheduler"), "metric"), NULL);
    const json_value *models = json_get(results, "models");
    for (size_t i = 0; !m && models && i < models->n; i++)
        m = json_str(json_get(json_get(json_get(&models->items[i], "config"), "early_stopping"),
                              "monitor"),
                     NULL);
    return m && !strncmp(m, "val_", 4) ? m : NULL;
}

/* The index of the model best by obj[key] (obj: "best" or "test" of each
 * record), higher better where the key is an accuracy; -1 when none has it. */
static int best_by(const json_value *models, const char *obj, const char *key)
{
    int best = -1, up = strstr(key, "accuracy") != NULL;
    double best_v = 0;
    for (size_t i = 0; models && i < models->n; i++) {
        double v = jnum(json_get(json_get(&models->items[i], obj), key));
        if (isfinite(v) && (best < 0 || (up ? v > best_v : v < best_v))) {
            best_v = v;
            best = (int)i;
        }
    }
    return best;
}

int report_best_model(const json_value *results, const char **by)
{
    static const char *const val[] = {"val_loss"}, *const test[] = {"accuracy", "mae", "loss"};
    static const char *const test_by[] = {"test accuracy", "test mae", "test loss"};
    const json_value *models = json_get(results, "models");
    const char *w = watched_metric(results);
    int best = w ? best_by(models, "best", w) : -1;
    const char *how = w;
    for (int k = 0; best < 0 && k < 1; k++)
        if ((best = best_by(models, "best", val[k])) >= 0)
            how = val[k];
    for (int k = 0; best < 0 && k < 3; k++)
        if ((best = best_by(models, "test", test[k])) >= 0)
            how = test_by[k];
    if (by)
        *by = best >= 0 ? how : NULL;
    return best;
}

/* ---- charts ----------------------------------------------------------- */

typedef struct chart_geom {
    double w, h, ml, mr, mt, mb;
    int small;
} chart_geom;

static const chart_geom geom_big = {640, 360, 58, 18, 14, 46, 0};
static const chart_geom geom_small = {340, 130, 46, 10, 8, 30, 1};
static const chart_geom geom_small_top = {340, 116, 46, 10, 8, 16, 1}; /* no x label */

/* One line on a chart: a history array of one model. */
typedef struct series {
    const json_value *arr;
    const rmodel *m;
    int curve;       /* C_* */
    int in_range;    /* counts toward the y range */
} series;

/* The smallest step of 1, 2 or 5 times a power of ten that cuts span into
 * at most target parts. */
static double nice_step(double span, int target)
{
    double p = pow(10, floor(log10(span / target)));
    static const double mult[] = {1, 2, 5, 10, 20};
    for (int i = 0; i < 5; i++)
        if (span / (mult[i] * p) <= target + 1e-9)
            return mult[i] * p;
    return 50 * p;
}

static void tick_label(strbuf *b, double v, double step)
{
    if (fabs(v) < step * 1e-6)
        v = 0;
    if (fabs(v) >= 1e5 || (step < 1e-4 && v != 0)) {
        sb_printf(b, "%.3g", v);
        return;
    }
    int d = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    sb_printf(b, "%.*f", d, v);
}

/* The y range of the series: nice bounds around their finite values. A
 * loss that blows up (a diverging model) would flatten every other curve, so
 * losses past four times the largest first loss do not widen the range;
 * they run off the top of the plot. */
static void y_range(const series *s, int ns, int is_acc, int target, double *y0, double *y1,
                    double *step)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int pass = 0; pass < 2 && lo > hi; pass++) {
        double cap = -INFINITY;
        for (int k = 0; k < ns; k++) {
            if (pass == 0 && !s[k].in_range)
                continue;
            for (size_t i = 0; s[k].arr && i < s[k].arr->n; i++) {
                double v = jnum(&s[k].arr->items[i]);
                if (isfinite(v)) {
                    cap = fmax(cap, v);
                    break;
                }
            }
        }
        cap = !is_acc && cap > 0 ? 4 * cap : INFINITY;
        for (int k = 0; k < ns; k++) {
            if (pass == 0 && !s[k].in_range)
                continue;
            for (size_t i = 0; s[k].arr && i < s[k].arr->n; i++) {
                double v = jnum(&s[k].arr->items[i]);
                if (isfinite(v) && v <= cap) {
                    lo = fmin(lo, v);
                    hi = fmax(hi, v);
                }
            }
        }
    }
    if (lo > hi) {
        lo = 0;
        hi = 1;
    }
    if (hi - lo < 1e-12 * fmax(1, fabs(hi))) {
        double pad = lo != 0 ? fabs(lo) * 0.05 : 0.05;
        lo -= pad;
        hi += pad;
    }
    *step = nice_step(hi - lo, target);
    *y0 = floor(lo / *step + 1e-9) * *step;
    *y1 = ceil(hi / *step - 1e-9) * *step;
    if (is_acc && *y1 > 1 && hi <= 1)
        *y1 = 1;
    if (*y0 < 0 && lo >= 0)
        *y0 = 0;
    if (*y1 <= *y0)
        *y1 = *y0 + *step;
}

/* A line chart of the series over epochs 1..n_epochs, with ticks, grid and
 * axis labels (no x label when xlabel is 0). */
static void svg_chart(rctx *c, const chart_geom *g, const char *ylabel, int xlabel, const series *s,
                      int ns, int n_epochs, int is_acc)
{
    strbuf *b = c->b;
    double pw = g->w - g->ml - g->mr, ph = g->h - g->mt - g->mb;
    /* one epoch sits in the middle; more span the width */
    double x0 = n_epochs > 1 ? 1 : 0, x1 = n_epochs > 1 ? n_epochs : 2;
    double xpad = g->small ? 6 : 10, xl = g->ml + xpad, xw = pw - 2 * xpad; /* where epochs go */
    double y0, y1, ystep;
    y_range(s, ns, is_acc, g->small ? 4 : 6, &y0, &y1, &ystep);
    int id = ++c->clip_id;
    sb_printf(b, "<svg class=\"chart%s\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"",
              g->small ? " small" : "", g->w, g->h);
    html_esc(b, ylabel);
    sb_printf(b, " by epoch\"><defs><clipPath id=\"clip%d\">", id);
    put_svg(b, "<rect x=\"@\" y=\"@\" width=\"@\" height=\"@\"/></clipPath></defs>",
            (double[]){g->ml, g->mt - 4, pw, ph + 8});
    put_svg(b, "<rect class=\"plot\" x=\"@\" y=\"@\" width=\"@\" height=\"@\"/>",
            (double[]){g->ml, g->mt, pw, ph});
    /* y grid and tick labels */
    for (int k = 0;; k++) {
        double v = y0 + k * ystep;
        if (v > y1 + ystep * 1e-6)
            break;
        double y = g->mt + ph - (v - y0) / (y1 - y0) * ph;
        put_svg(b, "<line class=\"grid\" x1=\"@\" x2=\"@\" y1=\"@\" y2=\"@\"/>",
                (double[]){g->ml, g->ml + pw, y, y});
        put_svg(b, "<text class=\"tick\" x=\"@\" y=\"@\" text-anchor=\"end\" dy=\"0.32em\">",
                (double[]){g->ml - 6, y});
        tick_label(b, v, ystep);
        sb_puts(b, "</text>");
    }
    /* x ticks: whole epochs */
    double xstep = fmax(1, round(nice_step(x1 - x0, g->small ? 4 : 8)));
    for (double e = xstep > 1 ? xstep : 1; e <= x1 + 1e-9 && e <= fmax(n_epochs, 1); e += xstep) {
        double x = xl + (e - x0) / (x1 - x0) * xw;
        put_svg(b, "<line class=\"xtick\" x1=\"@\" x2=\"@\" y1=\"@\" y2=\"@\"/>",
                (double[]){x, x, g->mt + ph, g->mt + ph + 4});
        put_svg(b, "<text class=\"tick\" x=\"@\" y=\"@\" text-anchor=\"middle\">",
                (double[]){x, g->mt + ph + (g->small ? 14 : 17)});
        sb_printf(b, "%d</text>", (int)e);
    }
    put_svg(b, "<line class=\"axis\" x1=\"@\" x2=\"@\" y1=\"@\" y2=\"@\"/>",
            (double[]){g->ml, g->ml + pw, g->mt + ph, g->mt + ph});
    if (xlabel)
        put_svg(b, "<text class=\"label\" x=\"@\" y=\"@\" text-anchor=\"middle\">epoch</text>",
                (double[]){g->ml + pw / 2, g->h - (g->small ? 4 : 8)});
    put_svg(b, "<text class=\"label\" transform=\"translate(@ @) rotate(-90)\" text-anchor=\"middle\">",
            (double[]){g->small ? 11.0 : 14.0, g->mt + ph / 2});
    html_esc(b, ylabel);
    sb_puts(b, "</text>");
    /* the curves, clipped to the plot */
    int markers = n_epochs <= (g->small ? 30 : 20);
    sb_printf(b, "<g clip-path=\"url(#clip%d)\">", id);
    for (int k = 0; k < ns; k++) {
        const json_value *a = s[k].arr;
        int val = s[k].curve >= CURVE_VAL;
        sb_printf(b, "<path class=\"curve %s\" data-model=\"", val ? "val" : "train");
        html_esc(b, s[k].m->name);
        sb_printf(b, "\" data-curve=\"%s\" stroke=\"%s\" d=\"", results_curve_key[s[k].curve], c->color[s[k].m->index]);
        int pen = 0;
        for (size_t i = 0; a && i < a->n; i++) {
            double v = jnum(&a->items[i]);
            if (!isfinite(v)) {
                pen = 0;
                continue;
            }
            double x = xl + ((double)(i + 1) - x0) / (x1 - x0) * xw;
            double y = g->mt + ph - (v - y0) / (y1 - y0) * ph;
            y = y < g->mt - ph ? g->mt - ph : y > g->mt + 2 * ph ? g->mt + 2 * ph : y;
            /* " Lx y", built backwards in one buffer: one append per point */
            char pt[64], *q = coord_fmt(pt + sizeof pt, y);
            *--q = ' ';
            q = coord_fmt(q, x);
            *--q = pen ? 'L' : 'M';
            if (i)
                *--q = ' ';
            sb_putn(b, q, (size_t)(pt + sizeof pt - q));
            pen = 1;
        }
        sb_puts(b, "\"><title>");
        html_esc(b, s[k].m->name);
        sb_printf(b, ": %s</title></path>", results_curve_key[s[k].curve]);
        if (!markers)
            continue;
        for (size_t i = 0; a && i < a->n; i++) {
            double v = jnum(&a->items[i]);
            if (!isfinite(v))
                continue;
            double x = xl + ((double)(i + 1) - x0) / (x1 - x0) * xw;
            double y = g->mt + ph - (v - y0) / (y1 - y0) * ph;
            if (y < g->mt - 4 || y > g->mt + ph + 4)
                continue;
            sb_printf(b, "<circle class=\"dot %s\" data-model=\"", val ? "val" : "train");
            html_esc(b, s[k].m->name);
            put_svg(b, "\" cx=\"@\" cy=\"@\"", (double[]){x, y});
            sb_printf(b, " r=\"%s\" fill=\"%s\" stroke=\"%s\"><title>", g->small ? "2.2" : "3",
                      val ? c->color[s[k].m->index] : "#fff", c->color[s[k].m->index]);
            html_esc(b, s[k].m->name);
            sb_printf(b, ", epoch %zu: %s %.4f</title></circle>", i + 1, results_curve_key[s[k].curve], v);
        }
    }
    sb_puts(b, "</g></svg>");
}

/* The legend for line styles: train dashed, validation solid. */
static void put_style_key(strbuf *b)
{
    sb_puts(b, "<span class=\"key\"><svg width=\"28\" height=\"10\"><path class=\"curve train\" "
               "stroke=\"#555\" d=\"M1 5 L27 5\"/></svg>train</span>"
               "<span class=\"key\"><svg width=\"28\" height=\"10\"><path class=\"curve val\" "
               "stroke=\"#555\" d=\"M1 5 L27 5\"/></svg>validation</span>");
}

/* ---- sections --------------------------------------------------------- */

static void section_header(rctx *c)
{
    strbuf *b = c->b;
    const json_value *r = c->root, *d = json_get(r, "data");
    const char *plan = json_str(json_get(r, "plan"), "run");
    sb_puts(b, "<header><div class=\"brand\">cohort report</div><h1>");
    html_esc(b, plan);
    sb_puts(b, "</h1><p class=\"meta\">");
    sb_printf(b, "%d model%s", c->n, c->n == 1 ? "" : "s");
    const char *strategy = json_str(json_get(r, "strategy"), NULL);
    if (strategy) {
        sb_puts(b, " &middot; strategy ");
        html_esc(b, strategy);
    }
    const char *train = json_str(json_get(d, "train"), NULL);
    if (train) {
        sb_puts(b, " &middot; train <code>");
        html_esc(b, train);
        sb_puts(b, "</code> (");
        put_int_grouped(b, jnum(json_get(d, "train_samples")));
        sb_puts(b, " samples, ");
        put_int_grouped(b, jnum(json_get(d, "validation_samples")));
        sb_puts(b, " validation)");
    }
    const char *test = json_str(json_get(d, "test"), NULL);
    if (test) {
        sb_puts(b, " &middot; test <code>");
        html_esc(b, test);
        sb_puts(b, "</code> (");
        put_int_grouped(b, jnum(json_get(d, "test_samples")));
        sb_puts(b, ")");
    }
    double feat = jnum(json_get(d, "features")), cls = jnum(json_get(d, "classes"));
    if (isfinite(feat))
        sb_printf(b, " &middot; %.0f features", feat);
    if (isfinite(cls) && cls > 0) /* 0: real-valued targets */
        sb_printf(b, " &middot; %.0f classes", cls);
    const char *ver = json_str(json_get(r, "cohort_version"), NULL);
    if (ver) {
        sb_puts(b, " &middot; cohort ");
        html_esc(b, ver);
    }
    sb_puts(b, "</p></header>\n");

    int ok = 0, bad = 0, running = 0;
    double total = 0, epochs = 0;
    for (int i = 0; i < c->n; i++) {
        ok += is_status(&c->m[i], "ok");
        bad += is_failed(&c->m[i]);
        running += is_status(&c->m[i], "running") || is_status(&c->m[i], "pending");
        if (isfinite(c->m[i].seconds))
            total += c->m[i].seconds;
        if (isfinite(c->m[i].epochs_run))
            epochs += c->m[i].epochs_run;
    }
    if (running)
        sb_printf(b, "<div class=\"banner\">Run in progress: %d of %d models finished. This page "
                     "reloads every 10 seconds.</div>\n",
                  c->n - running, c->n);
    sb_puts(b, "<section class=\"kpis\">");
    sb_puts(b, "<div class=\"kpi\"><div class=\"k\">best model</div><div class=\"v\">");
    if (c->best >= 0) {
        const rmodel *m = &c->m[c->best];
        put_swatch(b, c->color[m->index]);
        html_esc(b, m->name);
        sb_puts(b, "</div><div class=\"s\">");
        double v = strncmp(c->best_by, "test ", 5)
                       ? jnum(json_get(json_get(m->j, "best"), c->best_by))
                       : jnum(json_get(json_get(m->j, "test"), c->best_by + 5));
        sb_printf(b, "by %s %.4f", c->best_by, v);
        if (isfinite(m->best_epoch) && strncmp(c->best_by, "test ", 5))
            sb_printf(b, " at its best epoch %.0f", m->best_epoch);
        /* The test score of the weights the pick stands for: the final
         * ones, which are the best epoch's where early stopping restored
         * them. */
        const char *whose = isfinite(m->restored_epoch) ? "restored best weights" : "final weights";
        if (isfinite(m->test_acc))
            sb_printf(b, " &middot; test accuracy %.2f%% (%s)", 100 * m->test_acc, whose);
        else if (isfinite(m->test_mae))
            sb_printf(b, " &middot; test mae %.4f (%s)", m->test_mae, whose);
    } else {
        sb_puts(b, "&ndash;</div><div class=\"s\">no model has a score yet");
    }
    sb_puts(b, "</div></div>");
    sb_printf(b, "<div class=\"kpi\"><div class=\"k\">models</div><div class=\"v\">%d ok</div>"
                 "<div class=\"s\">",
              ok);
    int pruned = 0;
    for (int i = 0; i < c->n; i++)
        pruned += is_status(&c->m[i], "pruned");
    if (pruned)
        sb_printf(b, "%d pruned &middot; ", pruned);
    if (bad)
        sb_printf(b, "<span class=\"badtxt\">%d failed</span>", bad);
    else
        sb_puts(b, "none failed");
    if (running)
        sb_printf(b, " &middot; %d to go", running);
    sb_puts(b, "</div></div>");
    sb_puts(b, "<div class=\"kpi\"><div class=\"k\">training time</div><div class=\"v\">");
    put_duration(b, total);
    sb_printf(b, "</div><div class=\"s\">summed over models &middot; %.0f epochs</div></div>", epochs);
    sb_puts(b, "</section>\n");
}

static void th(strbuf *b, const char *label, int num, const char *title)
{
    sb_printf(b, "<th%s", num ? " class=\"num\" data-type=\"num\"" : "");
    if (title)
        sb_printf(b, " title=\"%s\"", title);
    sb_printf(b, ">%s</th>", label);
}

static void td_num(strbuf *b, double v, int decimals, int strong)
{
    sb_puts(b, "<td class=\"num\"");
    put_data_v(b, v);
    sb_puts(b, strong ? "><b>" : ">");
    put_fixed(b, v, decimals);
    sb_puts(b, strong ? "</b></td>" : "</td>");
}

/* Which columns the table has, and the figures it puts in bold. */
typedef struct table_cols {
    int any_cls, any_reg;     /* accuracy columns; mean absolute error columns */
    double top_val, top_test; /* the best validation and test accuracies */
} table_cols;

static table_cols table_columns(const rctx *c)
{
    table_cols t = {0, 0, -INFINITY, -INFINITY};
    for (int i = 0; i < c->n; i++) {
        if (isfinite(c->m[i].best_val_acc))
            t.top_val = fmax(t.top_val, c->m[i].best_val_acc);
        if (isfinite(c->m[i].test_acc))
            t.top_test = fmax(t.top_test, c->m[i].test_acc);
        t.any_cls |= !c->m[i].reg;
        t.any_reg |= c->m[i].reg;
    }
    return t;
}

/* The section's title and the note on how its figures and the best model
 * were chosen. */
static void table_intro(const rctx *c)
{
    strbuf *b = c->b;
    sb_puts(b, "<section class=\"card\"><h2>Models</h2><p class=\"hint\">Click a column to sort. "
               "Validation figures are those of the best epoch; test figures those of the final "
               "weights (the best epoch's where early stopping restored them). The best model is "
               "picked ");
    if (c->best >= 0 && strncmp(c->best_by, "test ", 5))
        sb_printf(b, "by %s, never by the test set.", c->best_by);
    else if (c->best >= 0)
        sb_printf(b, "by %s: no model has a validation figure.", c->best_by);
    else
        sb_puts(b, "once a model has a score.");
    sb_puts(b, "</p>");
}

static void table_head(strbuf *b, const table_cols *t)
{
    sb_puts(b, "<div class=\"scroll\"><table class=\"models sortable\" id=\"models\"><thead><tr>");
    th(b, "#", 1, "order in the plan");
    th(b, "model", 0, NULL);
    th(b, "status", 0, NULL);
    th(b, "device", 0, NULL);
    th(b, "params", 1, "trainable parameters");
    th(b, "memory", 1, "peak bytes used on the device (planned in the tooltip)");
    th(b, "time", 1, "seconds of training");
    th(b, "epochs", 1, "epochs run");
    th(b, "best epoch", 1, NULL);
    th(b, "val loss", 1, "validation loss at the best epoch");
    if (t->any_cls)
        th(b, "val acc", 1, "validation accuracy at the best epoch");
    th(b, "test loss", 1, "test loss of the final weights (restored best weights where early "
                          "stopping restored them)");
    if (t->any_cls)
        th(b, "test acc", 1, "test accuracy of the final weights (restored best weights where "
                             "early stopping restored them)");
    if (t->any_reg) {
        th(b, "val mae", 1, "validation mean absolute error at the best epoch (regression)");
        th(b, "test mae", 1, "test mean absolute error (regression)");
    }
    sb_puts(b, "</tr></thead><tbody>\n");
}

/* A numeric cell's opening, up to its text: sorted by v. */
static void td_num_open(strbuf *b, double v)
{
    sb_puts(b, "<td class=\"num\"");
    put_data_v(b, v);
}

/* Model i's row opening, its place in the plan and its name: a star for the
 * best model, its error below the name. */
static void td_name(const rctx *c, int i)
{
    strbuf *b = c->b;
    const rmodel *m = &c->m[i];
    sb_printf(b, "<tr%s data-model=\"", i == c->best ? " class=\"best\"" : "");
    html_esc(b, m->name);
    sb_printf(b, "\"><td class=\"num\" data-v=\"%d\">%d</td><td class=\"name\" data-v=\"", i + 1,
              i + 1);
    html_esc(b, m->name);
    sb_puts(b, "\">");
    put_swatch(b, c->color[m->index]);
    html_esc(b, m->name);
    if (i == c->best)
        sb_puts(b, " <span class=\"star\" title=\"best model\">&#9733;</span>");
    if (m->error) {
        sb_puts(b, "<div class=\"err\">");
        html_esc(b, m->error);
        sb_puts(b, "</div>");
    }
    sb_puts(b, "</td>");
}

/* Status, device, parameters, memory (planned in the tooltip) and time. */
static void td_run(strbuf *b, const rmodel *m)
{
    sb_puts(b, "<td data-v=\"");
    html_esc(b, m->status);
    sb_puts(b, "\">");
    put_status_pill(b, m->status);
    sb_puts(b, "</td><td data-v=\"");
    html_esc(b, m->device ? m->device : "");
    sb_puts(b, "\">");
    html_esc(b, m->device ? m->device : "-");
    sb_puts(b, "</td>");
    td_num_open(b, m->params);
    sb_puts(b, ">");
    put_int_grouped(b, m->params);
    sb_puts(b, "</td>");
    td_num_open(b, m->peak_bytes);
    sb_puts(b, " title=\"planned ");
    put_bytes(b, m->planned_bytes);
    sb_puts(b, "\">");
    put_bytes(b, m->peak_bytes);
    sb_puts(b, "</td>");
    td_num_open(b, m->seconds);
    sb_puts(b, ">");
    put_duration(b, m->seconds);
    sb_puts(b, "</td>");
}

/* Epochs run, and why the model ended where it did: stopped early (and the
 * epoch restored), pruned at a rung, or PBT's last exploit. */
static void td_epochs(strbuf *b, const rmodel *m)
{
    td_num_open(b, m->epochs_run);
    sb_puts(b, ">");
    put_fixed(b, m->epochs_run, 0);
    if (m->stopped_early && is_status(m, "ok")) {
        sb_puts(b, " <span class=\"hint note\">stopped early");
        if (isfinite(m->restored_epoch))
            sb_printf(b, ", restored %.0f", m->restored_epoch);
        sb_puts(b, "</span>");
    } else if (is_status(m, "pruned") && isfinite(m->pruned_rung)) {
        sb_printf(b, " <span class=\"hint note\">pruned at rung %.0f</span>", m->pruned_rung);
    } else if (m->exploits > 0) {
        sb_printf(b, " <span class=\"hint note\">pbt: %d exploit%s, the last at epoch %.0f from ",
                  m->exploits, m->exploits == 1 ? "" : "s", m->exploit_epoch);
        html_esc(b, m->exploit_from);
        sb_puts(b, "</span>");
    }
    sb_puts(b, "</td>");
}

/* The best epoch's validation figures and the test figures. */
static void td_scores(strbuf *b, const rmodel *m, const table_cols *t)
{
    td_num(b, m->best_epoch, 0, 0);
    td_num(b, m->best_val_loss, 4, 0);
    if (t->any_cls)
        td_num(b, m->best_val_acc, 4, m->best_val_acc == t->top_val);
    td_num(b, m->test_loss, 4, 0);
    if (t->any_cls)
        td_num(b, m->test_acc, 4, m->test_acc == t->top_test);
    if (t->any_reg) {
        td_num(b, m->best_val_mae, 4, 0);
        td_num(b, m->test_mae, 4, 0);
    }
}

/* The table of models, a row each in the plan's order, sortable by column. */
static void section_table(rctx *c)
{
    const table_cols t = table_columns(c);
    table_intro(c);
    table_head(c->b, &t);
    for (int i = 0; i < c->n; i++) {
        td_name(c, i);
        td_run(c->b, &c->m[i]);
        td_epochs(c->b, &c->m[i]);
        td_scores(c->b, &c->m[i], &t);
        sb_puts(c->b, "</tr>\n");
    }
    sb_puts(c->b, "</tbody></table></div></section>\n");
}

static void put_legend(rctx *c)
{
    strbuf *b = c->b;
    sb_puts(b, "<div class=\"legend\">");
    for (int i = 0; i < c->n; i++) {
        if (!c->m[i].n_epochs)
            continue;
        sb_puts(b, "<span class=\"item\" data-model=\"");
        html_esc(b, c->m[i].name);
        sb_puts(b, "\">");
        put_swatch(b, c->color[i]);
        html_esc(b, c->m[i].name);
        sb_puts(b, "</span>");
    }
    put_style_key(b);
    sb_puts(b, "</div>");
}

/* Two charts of every model: loss, accuracy; train and validation. */
static cohort_status section_curves(rctx *c, cohort_error *err)
{
    strbuf *b = c->b;
    series *s = calloc((size_t)(2 * c->n + 1), sizeof *s);
    if (!s)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory drawing the report");
    int any_ok = 0;
    for (int i = 0; i < c->n; i++)
        any_ok |= !is_failed(&c->m[i]) && c->m[i].n_epochs > 0;
    sb_puts(b, "<section class=\"card fig\"><h2>Learning curves</h2>");
    if (!c->max_epochs) {
        sb_puts(b, "<p class=\"hint\">No epoch has finished yet.</p></section>\n");
        free(s);
        return COHORT_OK;
    }
    put_legend(c);
    /* Loss for every model; accuracy for classifiers, mean absolute error
     * for regressions, each a chart of its own where the plan has them. */
    int has[2] = {0, 0};
    for (int i = 0; i < c->n; i++)
        has[c->m[i].reg] = 1;
    sb_puts(b, "<div class=\"pair\">");
    for (int chart = 0; chart < 3; chart++) {
        int reg = chart == 2, metric = chart > 0;
        if (metric && !has[reg])
            continue;
        int cur = !metric ? CURVE_LOSS : reg ? CURVE_MAE : CURVE_ACC;
        int ns = 0;
        for (int i = 0; i < c->n; i++) {
            const rmodel *m = &c->m[i];
            if (!m->n_epochs || (metric && m->reg != reg))
                continue;
            int in_range = !any_ok || !is_failed(m);
            s[ns++] = (series){m->curve[cur], m, cur, in_range};
            s[ns++] = (series){m->curve[cur + CURVE_VAL], m, cur + CURVE_VAL, in_range};
        }
        const char *title = !metric ? "Loss" : reg ? "Mean absolute error" : "Accuracy";
        sb_printf(b, "<figure><figcaption>%s</figcaption>", title);
        svg_chart(c, &geom_big, !metric ? "loss" : reg ? "mae" : "accuracy", 1, s, ns,
                  c->max_epochs, chart == 1);
        sb_puts(b, "</figure>");
    }
    sb_puts(b, "</div></section>\n");

    sb_puts(b, "<section class=\"card\"><h2>Each model</h2><div class=\"grid\">");
    for (int i = 0; i < c->n; i++) {
        const rmodel *m = &c->m[i];
        sb_printf(b, "<div class=\"mcard%s\" data-model=\"", is_failed(m) ? " failed" : "");
        html_esc(b, m->name);
        sb_puts(b, "\"><div class=\"mhead\">");
        put_swatch(b, c->color[m->index]);
        sb_puts(b, "<b>");
        html_esc(b, m->name);
        sb_puts(b, "</b>");
        put_status_pill(b, m->status);
        sb_puts(b, "<span class=\"mstat\">");
        if (isfinite(m->best_epoch) && m->reg)
            sb_printf(b, "best epoch %.0f &middot; val mae %.4f", m->best_epoch, m->best_val_mae);
        else if (isfinite(m->best_epoch))
            sb_printf(b, "best epoch %.0f &middot; val acc %.4f", m->best_epoch, m->best_val_acc);
        if (isfinite(m->test_acc))
            sb_printf(b, " &middot; test acc %.4f", m->test_acc);
        if (isfinite(m->test_mae))
            sb_printf(b, " &middot; test mae %.4f", m->test_mae);
        sb_puts(b, "</span></div>");
        if (m->error) {
            sb_puts(b, "<div class=\"err\">");
            html_esc(b, m->error);
            sb_puts(b, "</div>");
        }
        if (m->n_epochs) {
            sb_puts(b, "<div class=\"stack\">");
            for (int acc = 0; acc < 2; acc++) {
                int cur = !acc ? CURVE_LOSS : m->reg ? CURVE_MAE : CURVE_ACC;
                series two[2] = {{m->curve[cur], m, cur, 1},
                                 {m->curve[cur + CURVE_VAL], m, cur + CURVE_VAL, 1}};
                svg_chart(c, acc ? &geom_small : &geom_small_top,
                          !acc ? "loss" : m->reg ? "mae" : "accuracy", acc, two, 2, m->n_epochs,
                          acc && !m->reg);
            }
            sb_puts(b, "</div>");
        } else if (!m->error) {
            sb_puts(b, "<p class=\"hint\">No epoch finished yet.</p>");
        }
        sb_puts(b, "</div>");
    }
    sb_puts(b, "</div></section>\n");
    free(s);
    return COHORT_OK;
}

static void section_confusion(rctx *c)
{
    strbuf *b = c->b;
    sb_puts(b, "<section class=\"card\"><h2>Confusion matrix");
    const rmodel *m = c->best >= 0 ? &c->m[c->best] : NULL;
    const json_value *cm = m ? json_get(m->j, "confusion") : NULL;
    size_t C = cm && cm->type == JSON_ARR ? cm->n : 0;
    for (size_t i = 0; i < C; i++) {
        const json_value *row = &cm->items[i];
        if (row->type != JSON_ARR || row->n != C)
            C = 0;
    }
    if (!C) {
        sb_puts(b, "</h2><p class=\"hint\">No confusion matrix: it needs test data "
                   "(<code>data.test</code> in the plan) and a model that finished.</p></section>\n");
        return;
    }
    sb_puts(b, " &middot; ");
    html_esc(b, m->name);
    sb_printf(b, "</h2><p class=\"hint\">The best model (by %s), its final weights on the test "
                 "set", c->best_by);
    if (isfinite(m->test_acc))
        sb_printf(b, " (test accuracy %.4f)", m->test_acc);
    sb_puts(b, ". Rows are the true class, columns the predicted one; the shade is the share of the "
               "row. Blue: right, red: wrong.</p>");
    const json_value *d = json_get(c->root, "data");
    const char *train = json_str(json_get(d, "train"), "");
    const char *const *names =
        C == 10 && !strncmp(train, "fashion-mnist:", 14) ? fashion_mnist_classes : NULL;
    /* The run's own class names (text labels) where results.json has them. */
    const json_value *cn = json_get(d, "class_names");
    const char **own = cn && cn->type == JSON_ARR && cn->n == C ? calloc(C, sizeof *own) : NULL;
    for (size_t i = 0; own && i < C; i++)
        if (!(own[i] = json_str(&cn->items[i], NULL))) {
            free(own);
            own = NULL;
        }
    if (own)
        names = own;
    double *colsum = calloc(C, sizeof *colsum);
    double total = 0, right = 0;
    sb_puts(b, "<div class=\"scroll\"><table class=\"cm\"><thead><tr><th colspan=\"2\" "
               "rowspan=\"2\"></th>");
    sb_printf(b, "<th colspan=\"%zu\" class=\"axis\">predicted class</th><th rowspan=\"2\" "
                 "class=\"rc\">recall</th></tr><tr>",
              C);
    for (size_t j = 0; j < C; j++) {
        sb_printf(b, "<th class=\"col\" title=\"class %zu\">", j);
        if (names)
            html_esc(b, names[j]);
        else
            sb_printf(b, "%zu", j);
        sb_puts(b, "</th>");
    }
    sb_puts(b, "</tr></thead><tbody>");
    for (size_t i = 0; i < C; i++) {
        const json_value *row = &cm->items[i];
        double rs = 0;
        for (size_t j = 0; j < C; j++) {
            double v = jnum(&row->items[j]);
            if (isfinite(v)) {
                rs += v;
                if (colsum)
                    colsum[j] += v;
            }
        }
        total += rs;
        right += isfinite(jnum(&row->items[i])) ? jnum(&row->items[i]) : 0;
        sb_puts(b, "<tr>");
        if (i == 0)
            sb_printf(b, "<th rowspan=\"%zu\" class=\"axis vert\"><span>true class</span></th>", C);
        sb_puts(b, "<th class=\"row\">");
        if (names)
            html_esc(b, names[i]);
        else
            sb_printf(b, "%zu", i);
        sb_puts(b, "</th>");
        for (size_t j = 0; j < C; j++) {
            double v = jnum(&row->items[j]);
            double f = rs > 0 && isfinite(v) ? v / rs : 0;
            double a = i == j ? 0.10 + 0.90 * f : (f > 0 ? fmin(1, 0.08 + 1.6 * sqrt(f)) : 0);
            const char *rgb = i == j ? "37,99,235" : "220,38,38";
            sb_printf(b, "<td style=\"background:rgba(%s,%.3f)%s\" title=\"true %zu, predicted %zu: ",
                      rgb, a, a > 0.55 ? ";color:#fff" : (v == 0 ? ";color:#b8bfc8" : ""), i, j);
            put_fixed(b, v, 0);
            sb_printf(b, " (%.1f%% of the row)\">", 100 * f);
            put_fixed(b, v, 0);
            sb_puts(b, "</td>");
        }
        double rec = rs > 0 ? jnum(&row->items[i]) / rs : NAN;
        sb_puts(b, "<td class=\"rc\">");
        if (isfinite(rec))
            sb_printf(b, "%.1f%%", 100 * rec);
        else
            sb_puts(b, "&ndash;");
        sb_puts(b, "</td></tr>");
    }
    sb_puts(b, "<tr class=\"prec\"><th></th><th class=\"row\">precision</th>");
    for (size_t j = 0; j < C; j++) {
        double p = colsum && colsum[j] > 0 ? jnum(&cm->items[j].items[j]) / colsum[j] : NAN;
        if (isfinite(p))
            sb_printf(b, "<td>%.1f%%</td>", 100 * p);
        else
            sb_puts(b, "<td>&ndash;</td>");
    }
    sb_puts(b, "<td class=\"rc\">");
    if (total > 0)
        sb_printf(b, "<b>%.1f%%</b>", 100 * right / total);
    sb_puts(b, "</td></tr></tbody></table></div></section>\n");
    free(colsum);
    free(own);
}

/* ---- the plan: pretty-printed configs ---------------------------------- */

/* A string YAML reads back as the same string when unquoted: a word that
 * does not look like a number, a boolean or null. */
static int plain_scalar(const char *s)
{
    if (!*s || strchr("0123456789+-.", s[0]) || !strcmp(s, "true") || !strcmp(s, "false") ||
        !strcmp(s, "null") || !strcmp(s, "yes") || !strcmp(s, "no") || !strcmp(s, "on") ||
        !strcmp(s, "off"))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.' || *s == '/'))
            return 0;
    return 1;
}

/* v as one line of JSON (YAML flow style for plain strings); html: colored
 * and escaped. */
static void json_put(strbuf *b, const json_value *v, int html)
{
    switch (v->type) {
    case JSON_NULL: sb_puts(b, html ? "<span class=\"jn\">null</span>" : "null"); return;
    case JSON_BOOL:
        sb_puts(b, html ? "<span class=\"jn\">" : "");
        sb_puts(b, v->boolean ? "true" : "false");
        sb_puts(b, html ? "</span>" : "");
        return;
    case JSON_NUM:
        sb_puts(b, html ? "<span class=\"jv\">" : "");
        sb_json_num(b, v->num);
        sb_puts(b, html ? "</span>" : "");
        return;
    case JSON_STR: {
        if (plain_scalar(v->str)) {
            sb_puts(b, html ? "<span class=\"js\">" : "");
            html_esc(b, v->str);
            sb_puts(b, html ? "</span>" : "");
            return;
        }
        if (!html) {
            sb_json_str(b, v->str);
            return;
        }
        strbuf t;
        sb_init(&t);
        sb_json_str(&t, v->str);
        sb_puts(b, "<span class=\"js\">");
        html_esc(b, t.data ? t.data : "");
        sb_puts(b, "</span>");
        b->failed |= t.failed;
        sb_free(&t);
        return;
    }
    default: break;
    }
    int obj = v->type == JSON_OBJ;
    sb_puts(b, obj ? "{" : "[");
    for (size_t i = 0; i < v->n; i++) {
        if (i)
            sb_puts(b, ", ");
        if (obj) {
            sb_puts(b, html ? "<span class=\"jk\">" : "");
            html_esc(b, v->keys[i]);
            sb_puts(b, html ? "</span>: " : ": ");
        }
        json_put(b, &v->items[i], html);
    }
    sb_puts(b, obj ? "}" : "]");
}

/* YAML-like: one key per line, values that fit on one line stay on it. */
static void json_pretty(strbuf *b, const json_value *v, int indent)
{
    strbuf t;
    sb_init(&t);
    json_put(&t, v, 0);
    int fits = !t.failed && t.len + (size_t)indent <= 56;
    b->failed |= t.failed;
    sb_free(&t);
    if (fits || (v->type != JSON_OBJ && v->type != JSON_ARR) || v->n == 0) {
        json_put(b, v, 1);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        sb_printf(b, "\n%*s", indent, "");
        if (v->type == JSON_OBJ) {
            sb_puts(b, "<span class=\"jk\">");
            html_esc(b, v->keys[i]);
            sb_puts(b, "</span>: ");
        } else {
            sb_puts(b, "- ");
        }
        json_pretty(b, &v->items[i], indent + 2);
    }
}

static void section_plan(rctx *c, const char *plan_text)
{
    strbuf *b = c->b;
    sb_puts(b, "<section class=\"card\"><h2>The plan that ran</h2>");
    if (plan_text) {
        sb_puts(b, "<pre class=\"plan\">");
        html_esc(b, plan_text);
        sb_puts(b, "</pre><h3>Each model, expanded</h3>");
    } else {
        sb_puts(b, "<p class=\"hint\">Each model's configuration as it ran, with the plan's defaults "
                   "and sweep applied.</p>");
    }
    sb_puts(b, "<div class=\"grid configs\">");
    for (int i = 0; i < c->n; i++) {
        const rmodel *m = &c->m[i];
        const json_value *cfg = json_get(m->j, "config");
        sb_puts(b, "<div class=\"mcard\"><div class=\"mhead\">");
        put_swatch(b, c->color[m->index]);
        sb_puts(b, "<b>");
        html_esc(b, m->name);
        sb_puts(b, "</b></div><pre class=\"cfg\">");
        if (cfg && cfg->type == JSON_OBJ) {
            for (size_t k = 0; k < cfg->n; k++) {
                const json_value *v = &cfg->items[k];
                if (!strcmp(cfg->keys[k], "name") || v->type == JSON_NULL)
                    continue;
                sb_puts(b, "<span class=\"jk\">");
                html_esc(b, cfg->keys[k]);
                sb_puts(b, "</span>: ");
                json_pretty(b, v, 2);
                sb_puts(b, "\n");
            }
        } else if (cfg) {
            json_put(b, cfg, 1);
        } else {
            sb_puts(b, "(no config recorded)");
        }
        sb_puts(b, "</pre></div>");
    }
    sb_puts(b, "</div></section>\n");
}

/* ---- the page --------------------------------------------------------- */

static const char page_css[] =
    ":root{--bg:#f5f6f8;--card:#fff;--ink:#1d2530;--muted:#667085;--line:#e4e7ec;"
    "--accent:#2563eb;--bad:#c0262d;--ok:#137a3d}"
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.5 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'Helvetica Neue','Noto Sans','Liberation Sans','DejaVu Sans',Arial,"
    "sans-serif;-webkit-font-smoothing:antialiased}"
    "main{max-width:1320px;margin:0 auto;padding:28px 28px 40px}"
    "header{margin-bottom:18px}"
    ".brand{font-size:12px;font-weight:600;letter-spacing:.08em;text-transform:uppercase;"
    "color:var(--accent)}"
    "h1{font-size:28px;margin:2px 0 4px;letter-spacing:-.01em}"
    "h2{font-size:17px;margin:0 0 4px}"
    "h3{font-size:14px;margin:18px 0 8px;color:var(--muted)}"
    ".meta{color:var(--muted);margin:0}"
    "code,pre{font-family:ui-monospace,'SFMono-Regular','DejaVu Sans Mono','Liberation Mono',"
    "Menlo,Consolas,monospace;font-size:12.5px}"
    ".meta code{background:#eaecf0;border-radius:4px;padding:1px 5px}"
    ".card{background:var(--card);border:1px solid var(--line);border-radius:12px;"
    "padding:18px 20px;margin:0 0 18px;box-shadow:0 1px 2px rgba(16,24,40,.04)}"
    ".hint{color:var(--muted);margin:0 0 12px;font-size:13px}"
    ".banner{background:#eff6ff;border:1px solid #bfdbfe;color:#1e40af;border-radius:10px;"
    "padding:10px 14px;margin-bottom:18px}"
    ".kpis{display:grid;grid-template-columns:repeat(3,1fr);gap:18px;margin-bottom:18px}"
    ".kpi{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:14px 18px}"
    ".kpi .k{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted)}"
    ".kpi .v{font-size:22px;font-weight:650;margin:2px 0}"
    ".kpi .s{color:var(--muted);font-size:13px}"
    ".badtxt{color:var(--bad);font-weight:600}"
    ".sw{display:inline-block;width:10px;height:10px;border-radius:3px;margin-right:7px;"
    "vertical-align:baseline}"
    ".kpi .sw{width:14px;height:14px;border-radius:4px}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse}"
    "table.models{width:100%;font-variant-numeric:tabular-nums}"
    ".models th{font-size:12px;font-weight:600;color:var(--muted);text-align:left;"
    "padding:8px 10px;border-bottom:2px solid var(--line);cursor:pointer;user-select:none;"
    "white-space:nowrap}"
    ".models th:hover{color:var(--ink)}"
    ".models th[aria-sort=ascending]::after{content:' \\25B2';font-size:9px}"
    ".models th[aria-sort=descending]::after{content:' \\25BC';font-size:9px}"
    ".models td{padding:6px 10px;border-bottom:1px solid var(--line);vertical-align:top}"
    ".models tr:hover td{background:#f9fafb}"
    ".models tr.best td{background:#f0f6ff}"
    ".num{text-align:right!important;white-space:nowrap}"
    /* A scheduler's note under a number wraps in a narrow block: a pbt note
     * on one line pushed the test columns off a 1400 px page. */
    ".models td .note{display:block;white-space:normal;max-width:11em;margin-left:auto;"
    "font-size:12px;line-height:1.3}"
    "td.name{font-weight:600}"
    ".star{color:#e0a800}"
    ".err{color:var(--bad);font-weight:400;font-size:12.5px;margin-top:3px;max-width:520px;"
    "white-space:normal}"
    ".pill{display:inline-block;font-size:11.5px;font-weight:600;padding:1px 8px;"
    "border-radius:999px;line-height:18px}"
    ".pill.ok{background:#dcfae6;color:var(--ok)}"
    ".pill.bad{background:#fee4e2;color:var(--bad)}"
    ".pill.run{background:#e0eaff;color:#1e40af}"
    ".pill.cut{background:#eef0f3;color:#475467}"
    ".legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0 8px;font-size:13px}"
    ".legend .item{cursor:default;white-space:nowrap}"
    ".legend .key{color:var(--muted);white-space:nowrap}"
    ".legend .key svg{vertical-align:middle;margin-right:5px}"
    ".pair{display:grid;grid-template-columns:1fr 1fr;gap:14px}"
    ".stack svg+svg{margin-top:2px}"
    "figure{margin:0}"
    "figcaption{font-weight:600;font-size:13px;margin:4px 0 2px 4px}"
    "svg.chart{width:100%;height:auto;display:block}"
    ".chart text{font-size:12px;fill:#667085}"
    ".chart.small text{font-size:10.5px}"
    ".chart .label{fill:#475467;font-weight:500}"
    ".chart .plot{fill:#fcfcfd;stroke:none}"
    ".chart .grid{stroke:#eaecf0;stroke-width:1}"
    ".chart .axis,.chart .xtick{stroke:#98a2b3;stroke-width:1}"
    "path.curve{fill:none;stroke-linejoin:round;stroke-linecap:round;transition:opacity .15s}"
    "path.curve.val{stroke-width:2.2}"
    "path.curve.train{stroke-width:1.6;stroke-dasharray:5 4}"
    ".chart.small path.curve.val{stroke-width:1.8}"
    ".chart.small path.curve.train{stroke-width:1.3;stroke-dasharray:4 3}"
    "circle.dot{stroke-width:1.5}"
    ".fig.hl path.curve,.fig.hl circle.dot{opacity:.12}"
    ".fig.hl .on{opacity:1!important}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:14px}"
    ".mcard{border:1px solid var(--line);border-radius:10px;padding:10px 12px;background:#fff}"
    ".mcard.failed{border-color:#fecdca;background:#fffbfa}"
    ".mhead{display:flex;align-items:center;gap:8px;flex-wrap:wrap;margin-bottom:4px}"
    ".mhead .sw{margin-right:0}"
    ".mstat{color:var(--muted);font-size:12.5px;flex-basis:100%}"
    ".cm{font-variant-numeric:tabular-nums;font-size:13px}"
    ".cm td{min-width:64px;height:40px;text-align:center;border:2px solid #fff;border-radius:6px;"
    "font-weight:600}"
    ".cm th{font-size:12px;font-weight:600;color:#475467;padding:4px 6px}"
    ".cm th.col{vertical-align:bottom;white-space:nowrap;font-size:11.5px}"
    ".cm th.row{text-align:right;white-space:nowrap}"
    ".cm th.axis{color:var(--muted);font-weight:500;text-transform:uppercase;font-size:11px;"
    "letter-spacing:.06em}"
    ".cm th.vert{width:22px;padding:0}"
    ".cm th.vert span{display:inline-block;transform:rotate(-90deg);white-space:nowrap}"
    ".cm td.rc,.cm tr.prec td{color:var(--muted);font-weight:500;background:#f9fafb}"
    ".cm th.rc{color:var(--muted);vertical-align:bottom}"
    "pre{margin:0;white-space:pre-wrap;word-break:break-word}"
    "pre.plan{background:#f9fafb;border:1px solid var(--line);border-radius:8px;padding:12px 14px;"
    "max-height:640px;overflow:auto}"
    "pre.cfg{font-size:12px;line-height:1.55;color:#344054}"
    ".configs{grid-template-columns:repeat(auto-fill,minmax(300px,1fr))}"
    ".jk{color:#155eef}.js{color:#087443}.jv{color:#b54708}.jn{color:#98a2b3}"
    "footer{color:var(--muted);font-size:12.5px;text-align:center;margin-top:8px}"
    "@media (max-width:900px){.pair,.kpis{grid-template-columns:1fr}}";

/* Sorting the table and highlighting one model's curves: the only script. */
static const char page_js[] =
    "(function(){"
    "document.querySelectorAll('table.sortable').forEach(function(t){"
    "var hs=t.tHead.rows[0].cells;"
    "Array.prototype.forEach.call(hs,function(h,i){h.addEventListener('click',function(){"
    "var num=h.dataset.type==='num',asc=h.getAttribute('aria-sort')!=='ascending';"
    "Array.prototype.forEach.call(hs,function(o){o.removeAttribute('aria-sort')});"
    "h.setAttribute('aria-sort',asc?'ascending':'descending');"
    "var b=t.tBodies[0],rs=Array.prototype.slice.call(b.rows);"
    "rs.sort(function(x,y){var a=x.cells[i].dataset.v,c=y.cells[i].dataset.v;"
    "if(a===''||c==='')return (a==='')-(c==='');"
    "var r=num?parseFloat(a)-parseFloat(c):a.localeCompare(c);return asc?r:-r});"
    "rs.forEach(function(r){b.appendChild(r)})})})});"
    "document.querySelectorAll('.fig').forEach(function(f){"
    "f.querySelectorAll('.legend .item').forEach(function(it){"
    "var m=it.dataset.model;"
    "it.addEventListener('mouseenter',function(){f.classList.add('hl');"
    "f.querySelectorAll('[data-model]').forEach(function(e){"
    "if(e.dataset.model===m)e.classList.add('on')})});"
    "it.addEventListener('mouseleave',function(){f.classList.remove('hl');"
    "f.querySelectorAll('.on').forEach(function(e){e.classList.remove('on')})})})})"
    "})();";

cohort_status report_render(const json_value *results, const char *plan_text, strbuf *out,
                            cohort_error *err)
{
    const json_value *models = json_get(results, "models");
    rctx c = {.b = out, .root = results, .n = models ? (int)models->n : 0};
    c.m = calloc((size_t)c.n + 1, sizeof *c.m);
    c.color = calloc((size_t)c.n + 1, sizeof *c.color);
    if (!c.m || !c.color) {
        free(c.m);
        free(c.color);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory drawing the report");
    }
    int running = 0;
    for (int i = 0; i < c.n; i++) {
        results_model_read(&c.m[i], &models->items[i], i);
        model_color(c.color[i], sizeof c.color[i], i);
        if (c.m[i].n_epochs > c.max_epochs)
            c.max_epochs = c.m[i].n_epochs;
        running |= is_status(&c.m[i], "running") || is_status(&c.m[i], "pending");
    }
    c.best = report_best_model(results, &c.best_by);

    sb_puts(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">");
    if (running)
        sb_puts(out, "<meta http-equiv=\"refresh\" content=\"10\">");
    sb_puts(out, "<title>cohort report: ");
    html_esc(out, json_str(json_get(results, "plan"), "run"));
    sb_puts(out, "</title><style>");
    sb_puts(out, page_css);
    sb_puts(out, "</style></head>\n<body><main>\n");
    section_header(&c);
    section_table(&c);
    cohort_status st = section_curves(&c, err);
    if (!st) {
        section_confusion(&c);
        section_plan(&c, plan_text);
        sb_puts(out, "<footer>Written by cohort from results.json. Regenerate with "
                     "<code>cohort report DIR</code>.</footer>\n</main><script>");
        sb_puts(out, page_js);
        sb_puts(out, "</script></body></html>\n");
    }
    free(c.m);
    free(c.color);
    if (!st && out->failed)
        st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory drawing the report");
    return st;
}

cohort_status report_write(const char *out_dir, cohort_error *err)
{
    json_value *root;
    cohort_status st = results_load(out_dir, &root, err);
    if (st)
        return st;
    char path[COHORT_REPORT_PATH_MAX];
    char *plan = NULL;
    size_t plan_len;
    cohort_error ignored;
    if (results_dir_file(path, sizeof path, out_dir, "plan.yaml", &ignored) == COHORT_OK &&
        file_read_all(path, PLAN_MAX_BYTES, &plan, &plan_len, &ignored) == COHORT_OK &&
        !json_utf8_valid(plan, plan_len)) {
        free(plan);
        plan = NULL;
    }
    strbuf b;
    sb_init(&b);
    st = report_render(root, plan, &b, err);
    free(plan);
    json_free(root);
    if (!st)
        st = results_dir_file(path, sizeof path, out_dir, "report.html", err);
    if (!st)
        st = file_write_atomic(path, b.data, b.len, err);
    sb_free(&b);
    return st;
}
