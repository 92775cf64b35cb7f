/* delta bench's plots (see bench.h). The data go to OUT/data/, the gnuplot
 * script to OUT/plots.gp (so a plot can be restyled and redrawn with
 * `gnuplot OUT/plots.gp`), the PNGs beside the tables.
 *
 * The memory timeline comes from the traced runs' Chrome traces: the
 * session marks each training step's start ("step" instants, trace.h) and
 * the runtime writes the "device memory" counter at every allocation and
 * release; the last step's points, from its marker on, are one step in
 * the steady state. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "bench.h"
#include "gnuplot.h"
#include "outfile.h"

#define MIB (1024.0 * 1024.0)

const char *bench_trace_path(const bench *b, int i, int p, char *buf,
                             size_t n) {
    snprintf(buf, n, "%s/traces/%s.%s.json", b->out, b->m[i].name,
             p == b->n_policies ? "keep-unlimited" : b->policies[p]);
    return buf;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool named(const cJSON *o, const char *key, const char *want) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}

/* Writes the last step's memory points of trace `in` as "ms MiB" lines
 * into `out`; *budget gets the counter's budget in MiB. false when the
 * trace has no step or no point. */
static bool write_step_memory(const char *in, const char *out,
                              double *budget) {
    char *text = read_all(in);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    double start = NAN;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        if (named(e, "ph", "i") && named(e, "cat", "step"))
            start = num(e, "ts");
    }
    char err[1024];
    FILE *f = isnan(start) ? NULL
                           : outfile_open("--out", out, "w", err, sizeof err);
    int points = 0;
    if (f) {
        fprintf(f, "# ms_into_step device_MiB_in_use\n");
        cJSON_ArrayForEach(e, evs) {
            if (!named(e, "ph", "C") || !named(e, "name", "device memory"))
                continue;
            double ts = num(e, "ts");
            if (!(ts >= start)) continue;
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
            fprintf(f, "%.6f %.4f\n", (ts - start) / 1e3,
                    num(a, "in_use") / MIB);
            *budget = num(a, "budget") / MIB;
            points++;
        }
        if (fclose(f) != 0) points = 0;
    }
    cJSON_Delete(doc);
    return points > 0;
}

/* The budget of cell k in % of the model's peak (NAN: unlimited). */
static double budget_pct(const bench *b, const bench_model *bm, int k) {
    const delta_budget *s = &b->budgets[k];
    if (s->kind == DELTA_BUDGET_PERCENT) return s->percent;
    if (s->kind == DELTA_BUDGET_BYTES && bm->ref.baseline_peak_bytes)
        return 100.0 * (double)s->bytes / (double)bm->ref.baseline_peak_bytes;
    return NAN;
}

/* OUT/data/overhead_MODEL.dat (budget %, then a column per policy; "-"
 * where it did not run) and its plot command; *clauses counts the policies
 * with a point. */
static bool overhead_data(const bench *b, const bench_model *bm,
                          const char *path, FILE *gp, int *clauses) {
    char err[1024];
    FILE *f = outfile_open("--out", path, "w", err, sizeof err);
    if (!f) {
        fprintf(stderr, "delta bench: %s\n", err);
        return false;
    }
    fprintf(f, "budget_pct");
    for (int p = 0; p < b->n_policies; p++) fprintf(f, " %s", b->policies[p]);
    fputc('\n', f);
    /* rows by budget, largest first (the order budgets usually come in) */
    bool used[BENCH_MAX_BUDGETS] = {0};
    bool any[BENCH_MAX_POLICIES] = {0};
    for (;;) {
        int k = -1;
        for (int j = 0; j < b->n_budgets; j++)
            if (!used[j] && !isnan(budget_pct(b, bm, j)) &&
                (k < 0 || budget_pct(b, bm, j) > budget_pct(b, bm, k)))
                k = j;
        if (k < 0) break;
        used[k] = true;
        fprintf(f, "%g", budget_pct(b, bm, k));
        for (int p = 0; p < b->n_policies; p++) {
            double ov = bench_overhead(bm, &bm->cells[p][k]);
            if (isnan(ov)) fprintf(f, " -");
            else fprintf(f, " %.4f", ov);
            any[p] |= !isnan(ov);
        }
        fputc('\n', f);
    }
    bool ok = fclose(f) == 0;
    *clauses = 0;
    for (int p = 0; p < b->n_policies; p++) {
        if (!any[p]) continue;
        fprintf(gp, "%s \"%s\" using 1:%d with linespoints lw 2 pt 7 title \"%s\"",
                *clauses ? ", \\\n    " : "plot ", path, p + 2,
                b->policies[p]);
        (*clauses)++;
    }
    if (*clauses) fputc('\n', gp);
    return ok;
}

/* Writes the script; *n_png counts the PNGs it makes. */
static bool write_script(const bench *b, const char *gp_path, int *n_png) {
    char err[1024];
    FILE *gp = outfile_open("--out", gp_path, "w", err, sizeof err);
    if (!gp) {
        fprintf(stderr, "delta bench: %s\n", err);
        return false;
    }
    gnuplot_preamble(gp, "delta bench's plots");
    bool ok = true;
    char path[4096], trace[4096], label[256];
    const char *clock = train_on(&b->base, "sim")
                            ? "simulated ms" : "ms";
    *n_png = 0;
    for (int i = 0; i < b->n_models; i++) {
        const bench_model *bm = &b->m[i];
        bench_label(b, bm, label, sizeof label);
        fprintf(gp, "\n# %s\nset output \"%s/overhead_%s.png\"\n"
                "set autoscale\n"
                "set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05\n"
                "set title \"%s: step time against budget\"\n"
                "set xlabel \"budget (%% of keep's unconstrained peak)\"\n"
                "set ylabel \"step time / keep's with no limit\"\n",
                label, b->out, bm->name, label);
        snprintf(path, sizeof path, "%s/data/overhead_%s.dat", b->out,
                 bm->name);
        int clauses = 0;
        ok = overhead_data(b, bm, path, gp, &clauses) && ok;
        *n_png += clauses > 0;
        if (!clauses) fprintf(gp, "# (no cell ran: no plot)\n");
        if (b->timeline_budget < 0) continue;

        double budget = NAN;
        int lines = 0;
        for (int p = 0; p <= b->n_policies; p++) {
            if (!bm->timeline_ok[p]) continue;
            bool ref = p == b->n_policies;
            snprintf(path, sizeof path, "%s/data/memory_%s_%s.dat", b->out,
                     bm->name, ref ? "keep-unlimited" : b->policies[p]);
            double bud = NAN;
            if (!write_step_memory(bench_trace_path(b, i, p, trace,
                                                    sizeof trace),
                                   path, &bud))
                continue;
            if (!ref) budget = bud;
            if (!lines)
                fprintf(gp, "set output \"%s/memory_%s.png\"\n"
                        "set offsets 0, 0, graph 0.05, 0\n"
                        "set xrange [0:*]\nset yrange [0:*]\n"
                        "set title \"%s: device memory through one step, "
                        "budget %s\"\nset xlabel \"time into the step "
                        "(%s)\"\nset ylabel \"device memory in use "
                        "(MiB)\"\n", b->out, bm->name, label,
                        b->budget_label[b->timeline_budget], clock);
            fprintf(gp, "%s \"%s\" using 1:2 with steps title \"%s\"",
                    lines ? ", \\\n    " : "plot ", path,
                    ref ? "keep (no limit)" : b->policies[p]);
            lines++;
        }
        if (lines && !isnan(budget))
            fprintf(gp, ", \\\n    %.4f with lines dashtype 2 lc rgb "
                    "\"black\" title \"budget\"", budget);
        if (lines) fputc('\n', gp);
        *n_png += lines > 0;
    }
    ok = !ferror(gp) && ok;
    return fclose(gp) == 0 && ok;
}

bool bench_write_plots(const bench *b) {
    char dir[4096], gp_path[4096];
    snprintf(dir, sizeof dir, "%s/data", b->out);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "delta bench: cannot create %s: %s\n", dir,
                strerror(errno));
        return false;
    }
    snprintf(gp_path, sizeof gp_path, "%s/plots.gp", b->out);
    int n_png = 0;
    if (!write_script(b, gp_path, &n_png)) {
        fprintf(stderr, "delta bench: cannot write %s or its data in %s\n",
                gp_path, dir);
        return false;
    }
    if (!n_png) return true;
    /* a missing gnuplot is a warning: the tables are complete */
    gnuplot_run(gp_path, "bench");
    return true;
}
