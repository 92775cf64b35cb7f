/* Training progress (see progress.h). */
#include "progress.h"

#include <stdarg.h>

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
                   const char *unit, double units_per_step, bool simulated,
                   size_t budget_bytes) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->out = out;
    p->steps = steps;
    p->every = steps >= 10 ? (steps + 9) / 10 : 1;
    p->unit = unit;
    p->units_per_step = units_per_step;
    p->simulated = simulated;
    p->budget_bytes = budget_bytes;
    p->grad_norm = NAN;
    p->t0 = progress_now();
    p->last_draw = -1e9;
}

/* The step's peak against the budget, "12.3 MiB/16.0 MiB (77%)" (the
 * percentage, rounded down so that 100% means full, tells 5.9 of 5.9 MiB
 * from a full arena), then only those of the policy's figures that are not
 * 0, "  swap 1.2 MiB out 0.8 MiB in  recomp 34 ops 0.120 s  stall 0.031 s",
 * so that a keep run's line stays as short as before. */
static void format_memory(const progress *p, const delta_step_stats *s,
                          char *buf, size_t n) {
    char a[32], b[32];
    size_t used = 0;
    delta_format_bytes((double)s->peak_device_bytes, a, sizeof a);
    if (p->budget_bytes)
        used += (size_t)snprintf(
            buf, n, "%s/%s (%.0f%%)", a,
            delta_format_bytes((double)p->budget_bytes, b, sizeof b),
            floor(100.0 * (double)s->peak_device_bytes /
                  (double)p->budget_bytes));
    else
        used += (size_t)snprintf(buf, n, "%s", a);
    if (used < n && (s->swap_out_bytes || s->swap_in_bytes))
        used += (size_t)snprintf(
            buf + used, n - used, "  swap %s out %s in",
            delta_format_bytes((double)s->swap_out_bytes, a, sizeof a),
            delta_format_bytes((double)s->swap_in_bytes, b, sizeof b));
    if (used < n && s->recomputed_ops)
        used += (size_t)snprintf(buf + used, n - used,
                                 "  recomp %d ops %.3f s", s->recomputed_ops,
                                 s->recompute_s);
    if (used < n && s->stall_s > 0)
        snprintf(buf + used, n - used, "  stall %.3f s", s->stall_s);
}

/* "step 12/400  loss 0.5123  1534 samples/s  mem ..." into buf. */
static void format_status(const progress *p, int64_t step, double loss,
                          const delta_step_stats *s, char *buf, size_t n) {
    char mem[160], lossbuf[32], rate[48];
    format_memory(p, s, mem, sizeof mem);
    if (isnan(loss))
        snprintf(lossbuf, sizeof lossbuf, "%s", p->simulated ? "-" : "nan");
    else
        snprintf(lossbuf, sizeof lossbuf, "%.4f", loss);
    double units = 0, secs = 0;
    for (int i = 0; i < p->win_n; i++) {
        units += p->win_units[i];
        secs += p->win_s[i];
    }
    double r = secs > 0 ? units / secs : 0;
    snprintf(rate, sizeof rate, "%.0f %s/s%s", r, p->unit,
             p->simulated ? " (simulated)" : "");
    char norm[32] = "";
    if (!isnan(p->grad_norm))
        snprintf(norm, sizeof norm, "  norm %.4f", p->grad_norm);
    snprintf(buf, n, "step %lld/%lld  loss %s%s  %s  mem %s", (long long)step,
             (long long)p->steps, lossbuf, norm, rate, mem);
}

void progress_step(progress *p, int64_t step, double loss,
                   const delta_step_stats *s) {
    /* The last PROGRESS_WINDOW steps; the first (warm-up: programs
     * planned, pages touched) leaves as soon as another step comes, or it
     * would hold the rate down for the whole window. */
    if (p->win_warmup) p->win_n = p->win_next = 0;
    p->win_warmup = p->reported++ == 0;
    p->win_s[p->win_next] = s->step_s;
    p->win_units[p->win_next] = p->units_per_step;
    p->win_next = (p->win_next + 1) % PROGRESS_WINDOW;
    if (p->win_n < PROGRESS_WINDOW) p->win_n++;
    bool last = step >= p->steps;
    char line[320];
    switch (p->mode) {
    case PROGRESS_QUIET: return;
    case PROGRESS_LINES:
        if (step % p->every && !last && step != 1) return;
        format_status(p, step, loss, s, line, sizeof line);
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
        format_status(p, step, loss, s, line, sizeof line);
        int n = fprintf(p->out, "\r[%s] %s", bar, line);
        /* Blank what a longer previous line left behind. */
        for (int i = n; i < p->drawn; i++) fputc(' ', p->out);
        p->drawn = n;
        fflush(p->out);
        return;
    }
    }
}

void progress_note(progress *p, const char *fmt, ...) {
    if (p->mode == PROGRESS_QUIET) return;
    if (p->mode == PROGRESS_BAR && p->drawn) {
        /* over the bar: blank it, then the note on its own line */
        fputc('\r', p->out);
        for (int i = 0; i < p->drawn; i++) fputc(' ', p->out);
        fputc('\r', p->out);
        p->drawn = 0;
        p->last_draw = 0; /* the bar comes back at the next step */
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

void progress_finish(progress *p) {
    if (p->mode == PROGRESS_BAR && p->drawn) {
        fputc('\n', p->out);
        fflush(p->out);
        p->drawn = 0;
    }
}
