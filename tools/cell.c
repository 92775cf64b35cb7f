/* A measured training run (see cell.h). */
#include "cell.h"

#include <stdlib.h>
#include <string.h>

#include "core/median.h"
#include "progress.h"

const char *cell_status_name(cell_status s) {
    switch (s) {
    case CELL_OK: return "ok";
    case CELL_INFEASIBLE: return "infeasible";
    default: return "failed";
    }
}

void cell_summarize(const delta_step_stats *steps, int64_t n,
                    cell_result *r) {
    r->steps = n;
    r->step_s = r->swap_out_bytes = r->swap_in_bytes = 0;
    r->recomputed_ops = r->drops = r->stall_s = 0;
    r->peak_bytes = 0;
    for (int64_t i = 0; i < n; i++)
        if (steps[i].peak_device_bytes > r->peak_bytes)
            r->peak_bytes = steps[i].peak_device_bytes;
    int64_t first = n / 3, m = n - first;
    if (m <= 0) return;
    double *t = malloc(sizeof *t * (size_t)m);
    DELTA_ASSERT(t);
    for (int64_t i = 0; i < m; i++) {
        const delta_step_stats *s = &steps[first + i];
        t[i] = s->step_s;
        r->swap_out_bytes += (double)s->swap_out_bytes / (double)m;
        r->swap_in_bytes += (double)s->swap_in_bytes / (double)m;
        r->recomputed_ops += (double)s->recomputed_ops / (double)m;
        r->drops += (double)s->drops / (double)m;
        r->stall_s += s->stall_s / (double)m;
    }
    r->step_s = delta_median(t, m);
    free(t);
}

delta_status cell_run(const train_config *c, cell_result *r) {
    memset(r, 0, sizeof *r);
    double t0 = progress_now();
    trainer t;
    delta_step_stats *log = calloc((size_t)(c->steps > 0 ? c->steps : 1),
                                   sizeof *log);
    delta_status st = log ? trainer_setup(&t, c) : DELTA_ERR_NOMEM;
    if (!log) {
        memset(&t, 0, sizeof t);
        snprintf(t.err, sizeof t.err, "out of memory");
    }
    if (st == DELTA_OK) {
        const delta_model_config *m = &delta_trainer_main_model(t.tr)->cfg;
        const delta_dry_plan *plan = delta_trainer_dry_plan(t.tr);
        r->batch = m->batch;
        r->seq_len = t.image ? 0 : m->seq_len;
        r->budget_bytes = delta_trainer_budget_bytes(t.tr);
        r->baseline_peak_bytes = plan->peak_bytes;
        r->min_budget_bytes = plan->min_budget_bytes;
        t.step_log = log;
        st = trainer_train(&t);
        cell_summarize(log, trainer_result(&t)->steps_done, r);
    }
    /* A trace is completed whatever happened, so it opens. */
    delta_status tst = trainer_close_trace(&t);
    if (st == DELTA_OK) st = tst;
    r->st = st;
    /* data parallel: batch is per rank, samples/s every rank's */
    if (st == DELTA_OK && r->step_s > 0)
        r->samples_per_s = (double)r->batch * t.ranks / r->step_s;
    r->status = st == DELTA_OK           ? CELL_OK
                : st == DELTA_ERR_BUDGET ? CELL_INFEASIBLE
                                         : CELL_FAILED;
    if (st != DELTA_OK) snprintf(r->err, sizeof r->err, "%s", t.err);
    trainer_free(&t);
    free(log);
    r->wall_s = progress_now() - t0;
    return st;
}
