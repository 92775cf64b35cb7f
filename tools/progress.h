/* Training progress on stderr: a one-line bar redrawn in place with \r on a
 * terminal, plain lines (about every 10% of the steps, and the last) when
 * stderr is a file or a pipe, or nothing (--quiet). Each report shows the
 * step, the loss, the throughput (samples/s or tokens/s over the last
 * PROGRESS_WINDOW steps, as tqdm shows a recent rate), the step's device
 * memory peak (the arena's high-water mark) against the budget, and, only
 * when the step had any, its swapped bytes, recomputed ops and stall. */
#ifndef DELTA_TOOLS_PROGRESS_H
#define DELTA_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "delta/session.h"

typedef enum progress_mode {
    PROGRESS_QUIET = 0,
    PROGRESS_BAR,    /* a terminal: redraw one line */
    PROGRESS_LINES,  /* a file or pipe: a line every ~10% */
} progress_mode;

#define PROGRESS_WINDOW 10

typedef struct progress {
    progress_mode mode;
    FILE *out;
    int64_t steps;          /* total steps of the run */
    int64_t every;          /* PROGRESS_LINES: steps between lines */
    const char *unit;       /* "samples" or "tokens" */
    double units_per_step;  /* batch or batch * T */
    double grad_norm;       /* the step's gradient norm (--grad-clip), shown
                               after the loss as llm.c does; NAN: none */
    bool simulated;         /* sim: times are simulated, there is no loss */
    size_t budget_bytes;    /* 0: unlimited (no "of budget" shown) */
    /* The rate shown is over the last PROGRESS_WINDOW steps (tqdm-like),
     * the first (warm-up) step only until a second one comes: */
    double win_s[PROGRESS_WINDOW];      /* their step times */
    double win_units[PROGRESS_WINDOW];  /* and samples or tokens */
    int win_n, win_next;
    bool win_warmup;        /* the window holds the first step */
    int64_t reported;       /* steps reported so far */
    double last_draw;       /* wall clock of the last redraw */
    double t0;              /* wall clock at progress_init */
    int drawn;              /* characters of the bar last drawn */
} progress;

/* PROGRESS_BAR when isatty(fileno(out)) and not quiet, else LINES/QUIET. */
progress_mode progress_pick_mode(FILE *out, bool quiet);

void progress_init(progress *p, progress_mode mode, FILE *out, int64_t steps,
                   const char *unit, double units_per_step, bool simulated,
                   size_t budget_bytes);
/* Reports step `step` (1-based) of the run: loss (NAN when there is none)
 * and the session's figures of the step. */
void progress_step(progress *p, int64_t step, double loss,
                   const delta_step_stats *s);
/* A line of its own between the reports (a validation loss): printed in
 * both LINES and BAR mode (the bar is redrawn under it on its next
 * report), nothing when quiet. */
void progress_note(progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Ends the bar's line (a no-op in the other modes). */
void progress_finish(progress *p);

/* Monotonic wall clock in seconds. */
double progress_now(void);

#endif
