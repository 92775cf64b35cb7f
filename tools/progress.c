/* Training progress (see progress.h). */
#include "progress.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delta/common.h"

/* The bar redraws at most this often (plus the last step). */
#define REDRAW_S 0.1
#define BAR_CELLS 20

double progress_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

progress_mode progress_pick_mode(FILE *out, bool quiet) {
    if (quiet) return PROGRESS_QUIET;
    return isatty(fileno(out)) ? PROGRESS_BAR : PROGRESS_LINES;
}

void progress_init(progress *p, progress_mode mode, FILE *out, int64_t steps,
                   const char *unit, double units_per_step, bool simulated) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->out = out;
    p->steps = steps;
    p->every = steps >= 10 ? (steps + 9) / 10 : 1;
    p->unit = unit;
    p->units_per_step = units_per_step;
    p->simulated = simulated;
    p->t0 = progress_now();
    p->last_draw = -1e9;
}

/* "step 12/400  loss 0.5123  1534 samples/s  mem 12.3 MiB" into buf. */
static void format_status(const progress *p, int64_t step, double loss,
                          size_t bytes, char *buf, size_t n) {
    char mem[32], lossbuf[32], rate[48];
    delta_format_bytes((double)bytes, mem, sizeof mem);
    if (isnan(loss))
        snprintf(lossbuf, sizeof lossbuf, "%s", p->simulated ? "-" : "nan");
    else
        snprintf(lossbuf, sizeof lossbuf, "%.4f", loss);
    double r = p->ema_step_s > 0 ? p->units_per_step / p->ema_step_s : 0;
    snprintf(rate, sizeof rate, "%.0f %s/s%s", r, p->unit,
             p->simulated ? " (simulated)" : "");
    snprintf(buf, n, "step %lld/%lld  loss %s  %s  mem %s", (long long)step,
             (long long)p->steps, lossbuf, rate, mem);
}

void progress_step(progress *p, int64_t step, double loss, double step_s,
                   size_t device_bytes) {
    /* Smoothed over about ten steps; the first step (warm-up) only seeds. */
    p->ema_step_s = p->ema_step_s > 0 ? 0.9 * p->ema_step_s + 0.1 * step_s
                                      : step_s;
    bool last = step >= p->steps;
    char line[256];
    switch (p->mode) {
    case PROGRESS_QUIET: return;
    case PROGRESS_LINES:
        if (step % p->every && !last && step != 1) return;
        format_status(p, step, loss, device_bytes, line, sizeof line);
        fprintf(p->out, "%s  (%.1f s)\n", line, progress_now() - p->t0);
        fflush(p->out);
        return;
    case PROGRESS_BAR: {
        double now = progress_now();
        if (!last && now - p->last_draw < REDRAW_S) return;
        p->last_draw = now;
        char bar[BAR_CELLS + 1];
        int full = p->steps ? (int)(BAR_CELLS * step / p->steps) : BAR_CELLS;
        for (int i = 0; i < BAR_CELLS; i++) bar[i] = i < full ? '#' : '.';
        bar[BAR_CELLS] = '\0';
        format_status(p, step, loss, device_bytes, line, sizeof line);
        int n = fprintf(p->out, "\r[%s] %s", bar, line);
        /* Blank what a longer previous line left behind. */
        for (int i = n; i < p->drawn; i++) fputc(' ', p->out);
        p->drawn = n;
        fflush(p->out);
        return;
    }
    }
}

void progress_finish(progress *p) {
    if (p->mode == PROGRESS_BAR && p->drawn) {
        fputc('\n', p->out);
        fflush(p->out);
        p->drawn = 0;
    }
}
