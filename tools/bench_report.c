/* delta bench's tables (see bench.h): results.csv, one row per run, and
 * results.md, per model the overhead table in the form docs/POLICIES.md
 * has always shown (scripts/bench_policies.sh prints it): median step /
 * keep's with an unlimited budget, "refused" where the budget cannot hold
 * the policy's step, "fail" where a run failed otherwise, "ref." for keep
 * at an unlimited budget. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "outfile.h"

#define MIB (1024.0 * 1024.0)

double bench_overhead(const bench_model *bm, const cell_result *c) {
    if (bm->ref.status != CELL_OK || c->status != CELL_OK ||
        bm->ref.step_s <= 0)
        return NAN;
    return c->step_s / bm->ref.step_s;
}

const char *bench_label(const bench *b, const bench_model *bm, char *buf,
                        size_t n) {
    const train_config *c = &b->base;
    char shape[64];
    if (bm->image_size)
        snprintf(shape, sizeof shape, " %" PRId64 "x%" PRId64, bm->image_size,
                 bm->image_size);
    else if (bm->seq_len)
        snprintf(shape, sizeof shape, " T %" PRId64, bm->seq_len);
    else
        shape[0] = '\0';
    if (train_on(c, "sim"))
        snprintf(buf, n, "sim %s: %s%s, batch %" PRId64 ", %s", bm->cfg.run.gpu,
                 bm->name, shape, bm->batch, bm->optimizer);
    else
        snprintf(buf, n, "%s: %s%s, batch %" PRId64 ", %s",
                 train_backend(c), bm->name, shape, bm->batch,
                 bm->optimizer);
    return buf;
}

/* A CSV field: quoted, inner quotes doubled (messages hold commas). */
static void csv_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void csv_number(FILE *f, double v, bool ok) {
    /* 15 digits: byte counts stay whole */
    if (ok && isfinite(v)) fprintf(f, ",%.15g", v);
    else fputs(",", f);
}

static void csv_row(FILE *f, const bench *b, const bench_model *bm,
                    const char *policy, const char *budget,
                    const cell_result *r) {
    bool ok = r->status == CELL_OK;
    fprintf(f, "%s,%s,%s,%" PRId64 ",%" PRId64 ",%s,%s", bm->name,
            train_backend(&b->base),
            train_on(&b->base, "sim") ? bm->cfg.run.gpu : "",
            bm->batch, bm->seq_len, policy, budget);
    csv_number(f, (double)r->budget_bytes, r->budget_bytes > 0);
    fprintf(f, ",%s,%" PRId64, cell_status_name(r->status), r->steps);
    csv_number(f, r->step_s, ok);
    csv_number(f, bench_overhead(bm, r), ok);
    csv_number(f, r->samples_per_s, ok);
    csv_number(f, (double)r->peak_bytes, ok);
    csv_number(f, (double)r->baseline_peak_bytes, r->baseline_peak_bytes);
    csv_number(f, r->swap_out_bytes, ok);
    csv_number(f, r->swap_in_bytes, ok);
    csv_number(f, r->recomputed_ops, ok);
    csv_number(f, r->drops, ok);
    csv_number(f, r->stall_s, ok);
    fprintf(f, ",%.3f,", r->wall_s);
    csv_string(f, r->status == CELL_OK ? "" : r->err);
    fputc('\n', f);
}

static bool write_csv(const bench *b, const char *path) {
    char err[1024];
    FILE *f = outfile_open("--out", path, "w", err, sizeof err);
    if (!f) {
        fprintf(stderr, "delta bench: %s\n", err);
        return false;
    }
    fputs("model,backend,gpu,batch,seq_len,policy,budget,budget_bytes,"
          "status,steps,median_step_s,overhead,samples_per_s,peak_bytes,"
          "baseline_peak_bytes,swap_out_bytes_per_step,"
          "swap_in_bytes_per_step,recomputed_ops_per_step,drops_per_step,"
          "stall_s_per_step,wall_s,error\n", f);
    for (int i = 0; i < b->n_models; i++) {
        const bench_model *bm = &b->m[i];
        csv_row(f, b, bm, "keep", "unlimited", &bm->ref);
        for (int p = 0; p < b->n_policies; p++)
            for (int k = 0; k < b->n_budgets; k++)
                csv_row(f, b, bm, b->policies[p], b->budget_label[k],
                        &bm->cells[p][k]);
    }
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

/* The text of one table cell. */
static const char *md_cell(const bench *b, const bench_model *bm, int p,
                           int k, char *buf, size_t n) {
    const cell_result *r = &bm->cells[p][k];
    if (r->status == CELL_INFEASIBLE) return "refused";
    if (r->status == CELL_FAILED) return "fail";
    if (!strcmp(b->policies[p], "keep") &&
        b->budgets[k].kind == DELTA_BUDGET_UNLIMITED)
        return "ref.";
    double ov = bench_overhead(bm, r);
    if (isnan(ov)) return "n/a";
    snprintf(buf, n, "%.2fx", ov);
    return buf;
}

static void md_model(FILE *f, const bench *b, const bench_model *bm) {
    char label[256], cell[32];
    fprintf(f, "\n### %s\n\n", bench_label(b, bm, label, sizeof label));
    if (bm->ref.status == CELL_OK)
        fprintf(f, "keep, unlimited budget: %.4f s/step, peak %.0f MiB\n\n",
                bm->ref.step_s, (double)bm->ref.peak_bytes / MIB);
    else
        fprintf(f, "keep, unlimited budget: %s (%s); no overheads\n\n",
                bm->ref.status == CELL_INFEASIBLE ? "refused" : "failed",
                bm->ref.err);
    fprintf(f, "overhead (median step / keep's):\n\n| policy |");
    for (int k = 0; k < b->n_budgets; k++)
        fprintf(f, " %s |", b->budget_label[k]);
    fprintf(f, "\n|---|");
    for (int k = 0; k < b->n_budgets; k++) fprintf(f, "---|");
    fputc('\n', f);
    int delta = -1;
    for (int p = 0; p < b->n_policies; p++) {
        if (!strcmp(b->policies[p], "delta")) delta = p;
        fprintf(f, "| %s |", b->policies[p]);
        for (int k = 0; k < b->n_budgets; k++)
            fprintf(f, " %s |", md_cell(b, bm, p, k, cell, sizeof cell));
        fputc('\n', f);
    }
    if (delta < 0) return;
    fprintf(f, "\ndelta per step (swapped out MiB / recomputed ops / stall "
            "s):");
    for (int k = 0; k < b->n_budgets; k++) {
        const cell_result *r = &bm->cells[delta][k];
        fprintf(f, "%s %s ", k ? "," : "", b->budget_label[k]);
        if (r->status == CELL_OK)
            fprintf(f, "%.0f/%.0f/%.3f", r->swap_out_bytes / MIB,
                    r->recomputed_ops, r->stall_s);
        else
            fputc('-', f);
    }
    fputc('\n', f);
}

static bool write_md(const bench *b, const char *path) {
    char err[1024];
    FILE *f = outfile_open("--out", path, "w", err, sizeof err);
    if (!f) {
        fprintf(stderr, "delta bench: %s\n", err);
        return false;
    }
    fprintf(f, "# delta bench\n\nOverhead = median step over the steps "
            "after the first third (%" PRId64 " steps per cell) / keep's "
            "median step with an unlimited budget. \"refused\": the budget "
            "cannot hold the policy's step; \"fail\": the run failed "
            "otherwise (results.csv says why). Budgets in %% are of each "
            "model's unconstrained peak.\n", b->base.steps);
    for (int i = 0; i < b->n_models; i++) md_model(f, b, &b->m[i]);
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

bool bench_write_tables(const bench *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/results.csv", b->out);
    if (!write_csv(b, path)) {
        fprintf(stderr, "delta bench: cannot write %s\n", path);
        return false;
    }
    snprintf(path, sizeof path, "%s/results.md", b->out);
    if (!write_md(b, path)) {
        fprintf(stderr, "delta bench: cannot write %s\n", path);
        return false;
    }
    return true;
}
