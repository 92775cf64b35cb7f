/* delta maxbatch's outputs (see maxbatch.h): the table, the --json lines
 * and the --plot. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delta/delta.h"
#include "gnuplot.h"
#include "maxbatch.h"
#include "outfile.h"

static double ratio_to_keep(const search *s, const search *keep) {
    if (s->status == CELL_FAILED || !keep->max_batch) return NAN;
    return (double)s->max_batch / (double)keep->max_batch;
}

static void print_header(const maxbatch *m, const search *keep) {
    const train_config *c = &m->cfg;
    char dev[32];
    delta_format_bytes((double)m->device_bytes, dev, sizeof dev);
    printf("%s", c->run.model.name);
    if (m->seq_len) printf(", T %" PRId64, m->seq_len);
    if (train_on(c, "sim"))
        printf(" on simulated %s, device %s", c->run.gpu ? c->run.gpu : "v100-16g",
               dev);
    else if (train_on(c, "cpu"))
        printf(" on cpu, emulated device %s", dev);
    else
        printf(" on %s, device %s", train_backend(c), dev);
    if (c->run.ranks > 1)
        printf(", %d ranks%s on %s (batch per rank, samples/s of all)",
               c->run.ranks, c->run.zero ? " with ZeRO-1" : "",
               c->run.interconnect ? c->run.interconnect : "nvlink");
    printf("; %" PRId64 " steps per probe (step time: median of steps %"
           PRId64 "-%" PRId64 ")\n", c->steps, c->steps / 3 + 1, c->steps);
    if (keep->max_batch)
        printf("keep: largest batch %" PRId64 " at %.1f samples/s; floor "
               "%.2f x that = %.1f samples/s\n", keep->max_batch,
               keep->best->cell.samples_per_s, m->min_throughput, m->floor);
    else
        printf("keep: not even batch 1 fits, so there is no ratio and no "
               "throughput floor\n");
}

static void print_row(const search *s, const search *keep) {
    char ratio[16], peak[32];
    if (s->status == CELL_FAILED) {
        printf("%-11s %9s  %s\n", s->policy, "failed", s->err);
        return;
    }
    double r = ratio_to_keep(s, keep);
    if (isnan(r)) snprintf(ratio, sizeof ratio, "-");
    else snprintf(ratio, sizeof ratio, "%.2fx", r);
    if (!s->max_batch) {
        printf("%-11s %9d %7s %12s %10s %10s %6d  infeasible\n", s->policy,
               0, ratio, "-", "-", "-", s->n_probes);
        return;
    }
    const cell_result *b = &s->best->cell;
    delta_format_bytes((double)b->peak_bytes, peak, sizeof peak);
    printf("%-11s %9" PRId64 " %7s %12.1f %10.4g %10s %6d  %s\n", s->policy,
           s->max_batch, ratio, b->samples_per_s, b->step_s, peak,
           s->n_probes, s->limit);
}

static cJSON *row_json(const maxbatch *m, const search *s,
                       const search *keep) {
    const train_config *c = &m->cfg;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const cell_result *b = s->best ? &s->best->cell : NULL;
    cJSON_AddStringToObject(o, "policy", s->policy);
    cJSON_AddStringToObject(o, "model", c->run.model.name);
    cJSON_AddStringToObject(o, "backend", train_backend(c));
    if (train_on(c, "sim"))
        cJSON_AddStringToObject(o, "gpu", c->run.gpu ? c->run.gpu : "v100-16g");
    else
        cJSON_AddNullToObject(o, "gpu");
    cJSON_AddStringToObject(o, "status", cell_status_name(s->status));
    cJSON_AddNumberToObject(o, "max_batch", (double)s->max_batch);
    json_add_number_or_null(o, "samples_per_s", b ? b->samples_per_s : NAN);
    if (m->seq_len)
        json_add_number_or_null(o, "tokens_per_s",
                                b ? b->samples_per_s * (double)m->seq_len
                                  : NAN);
    json_add_number_or_null(o, "ratio_to_keep", ratio_to_keep(s, keep));
    json_add_number_or_null(o, "step_s", b ? b->step_s : NAN);
    json_add_number_or_null(o, "peak_bytes", b ? (double)b->peak_bytes : NAN);
    cJSON_AddNumberToObject(o, "device_bytes", (double)m->device_bytes);
    json_add_number_or_null(o, "baseline_peak_bytes",
                            b ? (double)b->baseline_peak_bytes : NAN);
    json_add_number_or_null(o, "swap_out_bytes_per_step",
                            b ? b->swap_out_bytes : NAN);
    json_add_number_or_null(o, "recomputed_ops_per_step",
                            b ? b->recomputed_ops : NAN);
    json_add_number_or_null(o, "stall_s_per_step", b ? b->stall_s : NAN);
    if (s->limit) cJSON_AddStringToObject(o, "limited_by", s->limit);
    else cJSON_AddNullToObject(o, "limited_by");
    cJSON_AddNumberToObject(o, "min_throughput", m->min_throughput);
    cJSON_AddNumberToObject(o, "floor_samples_per_s", m->floor);
    cJSON_AddNumberToObject(o, "keep_max_batch", (double)keep->max_batch);
    cJSON_AddNumberToObject(o, "steps", (double)c->steps);
    if (m->seq_len) cJSON_AddNumberToObject(o, "seq_len", (double)m->seq_len);
    cJSON_AddNumberToObject(o, "search_s", s->search_s);
    if (s->status == CELL_FAILED) cJSON_AddStringToObject(o, "error", s->err);
    cJSON *ps = cJSON_AddArrayToObject(o, "probes");
    for (int i = 0; ps && i < s->n_probes; i++) {
        const probe *p = &s->probes[i];
        cJSON *q = cJSON_CreateObject();
        if (!q) break;
        cJSON_AddNumberToObject(q, "batch", (double)p->batch);
        cJSON_AddStringToObject(q, "status", cell_status_name(p->cell.status));
        cJSON_AddBoolToObject(q, "pass", p->pass);
        json_add_number_or_null(q, "samples_per_s",
                                p->cell.status == CELL_OK
                                    ? p->cell.samples_per_s : NAN);
        json_add_number_or_null(q, "peak_bytes",
                                p->cell.status == CELL_OK
                                    ? (double)p->cell.peak_bytes : NAN);
        cJSON_AddItemToArray(ps, q);
    }
    return o;
}

int maxbatch_write_json(const maxbatch *m, json_log *l, search *const *res,
                      int n, const search *keep) {
    char err[512];
    bool ok = true;
    for (int i = 0; i < n; i++) {
        cJSON *o = row_json(m, res[i], keep);
        ok = o && json_log_write(l, o) && ok;
        cJSON_Delete(o);
    }
    ok = json_log_close(l, err, sizeof err) && ok;
    if (!ok) {
        fprintf(stderr, "delta maxbatch: --json %s: %s\n", m->json, err);
        return 1;
    }
    return 0;
}

void maxbatch_print(const maxbatch *m, search *const *res, int n,
                    const search *keep) {
    print_header(m, keep);
    printf("%-11s %9s %7s %12s %10s %10s %6s  %s\n", "policy", "max batch",
           "x keep", "samples/s", "step s", "peak", "probes",
           "next batch up is limited by");
    for (int i = 0; i < n; i++) print_row(res[i], keep);
}

static int cmp_probe_batch(const void *a, const void *b) {
    const probe *x = *(const probe *const *)a, *y = *(const probe *const *)b;
    return (x->batch > y->batch) - (x->batch < y->batch);
}

/* FILE.dat: a block per policy (gnuplot's index), "batch samples/s" of
 * the probes that fit, by batch; *n_blocks counts them, which[] says
 * whose they are. */
static bool write_plot_data(const char *path, search *const *res, int n,
                            int *which, int *n_blocks, char *err,
                            size_t err_len) {
    FILE *f = outfile_open("--plot", path, "w", err, err_len);
    if (!f) return false;
    *n_blocks = 0;
    for (int i = 0; i < n; i++) {
        const search *s = res[i];
        const probe *fit[MAXBATCH_MAX_PROBES];
        int k = 0;
        for (int j = 0; j < s->n_probes; j++)
            if (s->probes[j].cell.status == CELL_OK)
                fit[k++] = &s->probes[j];
        if (!k) continue;
        qsort(fit, (size_t)k, sizeof *fit, cmp_probe_batch);
        fprintf(f, "%s# %s\n", *n_blocks ? "\n\n" : "", s->policy);
        for (int j = 0; j < k; j++)
            fprintf(f, "%" PRId64 " %.6g\n", fit[j]->batch,
                    fit[j]->cell.samples_per_s);
        which[(*n_blocks)++] = i;
    }
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

void maxbatch_plot_files(const char *plot, char *dat, char *gp_path,
                         size_t n) {
    size_t len = strlen(plot);
    int base = (int)(len > 4 && !strcmp(plot + len - 4, ".png") ? len - 4
                                                                : len);
    snprintf(dat, n, "%.*s.dat", base, plot);
    snprintf(gp_path, n, "%.*s.gp", base, plot);
}

bool maxbatch_write_plot(const maxbatch *m, search *const *res, int n) {
    char dat[4200], gp_path[4200], dev[32], err[1024] = "";
    maxbatch_plot_files(m->plot, dat, gp_path, sizeof dat);
    int which[MAXBATCH_MAX_POLICIES], blocks = 0;
    FILE *gp = NULL;
    bool ok = write_plot_data(dat, res, n, which, &blocks, err,
                              sizeof err) &&
              (gp = outfile_open("--plot", gp_path, "w", err,
                                 sizeof err)) != NULL;
    if (!ok) {
        if (err[0])
            fprintf(stderr, "delta maxbatch: %s\n", err);
        else
            fprintf(stderr, "delta maxbatch: --plot: cannot write %s\n",
                    dat);
        return false;
    }
    const train_config *c = &m->cfg;
    delta_format_bytes((double)m->device_bytes, dev, sizeof dev);
    gnuplot_preamble(gp, "delta maxbatch's plot");
    fprintf(gp, "set output \"%s\"\nset logscale x 2\n"
            "set xlabel \"batch\"\nset ylabel \"samples/s (steady step)\"\n"
            "set title \"%s on %s%s, device %s: every probed batch that "
            "fit\"\n", m->plot, c->run.model.name,
            train_on(c, "sim") ? "simulated " : train_backend(c),
            train_on(c, "sim") ? c->run.gpu : "", dev);
    for (int b = 0; b < blocks; b++)
        fprintf(gp, "%s \"%s\" index %d using 1:2 with linespoints lw 2 "
                "pt 7 title \"%s (max %" PRId64 ")\"", b ? ", \\\n    "
                : "plot", dat, b, res[which[b]]->policy,
                res[which[b]]->max_batch);
    if (blocks && m->floor > 0)
        fprintf(gp, ", \\\n    %.6g with lines dashtype 2 lc rgb "
                "\"black\" title \"floor (%.2f x keep)\"", m->floor,
                m->min_throughput);
    fputc('\n', gp);
    ok = !ferror(gp);
    ok = fclose(gp) == 0 && ok;
    if (!ok) {
        fprintf(stderr, "delta maxbatch: --plot: cannot write %s\n",
                gp_path);
        return false;
    }
    if (blocks) gnuplot_run(gp_path, "maxbatch");
    return true;
}
