/* One measured training run, summarized: the unit of `delta maxbatch`'s
 * probes and `delta bench`'s grid cells. A cell runs the trainer
 * (trainer.h) quietly for cfg.steps steps and keeps what a comparison of
 * policies needs: whether the run fit, and its steady-state figures.
 *
 * Steady state: a planned policy (delta) profiles in its first step and
 * tries its modes in the next few, so the step time is the median over
 * the steps after the first third, and the per-step work (bytes swapped,
 * ops recomputed, compute stalled) the mean over the same steps. Every
 * policy is measured the same way (as make bench-policies always has). */
#ifndef DELTA_TOOLS_CELL_H
#define DELTA_TOOLS_CELL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delta/session.h"
#include "trainer.h"

typedef enum cell_status {
    CELL_OK = 0,
    CELL_INFEASIBLE,  /* the budget cannot hold it (before or during) */
    CELL_FAILED,      /* anything else: err says what */
} cell_status;

typedef struct cell_result {
    cell_status status;
    delta_status st;            /* the trainer's status */
    int64_t steps;              /* steps trained (< cfg.steps on failure) */
    int64_t batch, seq_len;     /* the main shape (seq_len 0: images) */
    double step_s;              /* steady step: median of the tail */
    double samples_per_s;       /* batch x ranks / step_s (data parallel:
                                   batch is per rank) */
    size_t peak_bytes;          /* arena high-water mark, max over steps */
    size_t budget_bytes;        /* the session's budget (0: unlimited) */
    size_t baseline_peak_bytes; /* keep's peak, from the dry plan */
    size_t min_budget_bytes;    /* the smallest budget any policy runs in */
    /* Per step, means over the tail: */
    double swap_out_bytes, swap_in_bytes, recomputed_ops, drops, stall_s;
    double wall_s;              /* real seconds the cell took */
    char err[1024];             /* why it was infeasible or failed */
} cell_result;

/* Runs c (quiet, whatever c->quiet says) and fills *r. A budget too small
 * is CELL_INFEASIBLE, not an error; the return is the trainer's status. */
delta_status cell_run(const train_config *c, cell_result *r);

/* Median step and tail means of steps[0..n) into r (the figures above). */
void cell_summarize(const delta_step_stats *steps, int64_t n,
                    cell_result *r);

/* "ok", "infeasible", "failed". */
const char *cell_status_name(cell_status s);

#endif
