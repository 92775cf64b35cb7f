/* bench_pool — how tightly each allocator packs one training step.
 *
 * For each model's step program (forward, backward, optimizer; every tensor
 * kept) the dry trace is placed by:
 *   planner   the lifetime planner over op intervals (delta_plan_place);
 *   online    the best-fit allocator, replaying the program's order: the
 *             persistent and input tensors first, then per op its outputs
 *             and workspace, then a free of every block whose last use
 *             was that op;
 *   replay    delta_replay over three such steps (persistent tensors
 *             placed before the first): step 1 online, steps 2-3 planned
 *             from step 1's alloc/free events;
 *   caching   the PyTorch caching-allocator emulation on the same order.
 * Every figure is a peak address (bytes of arena needed) over max-live,
 * the max over ops of the bytes alive (256-byte rounded), a lower bound
 * for any placement. Nothing is computed or allocated on a device.
 *
 * Usage: bench_pool [name:batch ...]   (default resnet50:32 gpt2-small:4
 *        bert-base:8 at their default image size / sequence length) */
#include "delta/delta.h"
#include "delta/dryplan.h"
#include "delta/models.h"
#include "delta/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gib(size_t b) { return (double)b / (double)(1u << 30); }

/* The program's alloc/free order over the dry trace: events[] lists block
 * indices, a block's first appearance allocates it, its second frees it. */
typedef struct order {
    int *ev;
    int n;
} order;

static order program_order(const delta_dry_block *b, int n, int n_ops) {
    order o = {malloc(2 * (size_t)n * sizeof(int)), 0};
    int *by_last_head = malloc(((size_t)n_ops + 1) * sizeof(int));
    int *by_last_next = malloc((size_t)n * sizeof(int));
    for (int i = 0; i <= n_ops; i++) by_last_head[i] = -1;
    for (int i = n - 1; i >= 0; i--) { /* buckets keep trace order */
        by_last_next[i] = by_last_head[b[i].last];
        by_last_head[b[i].last] = i;
    }
    int p = 0;
    for (int op = 0; op < n_ops; op++) {
        while (p < n && b[p].first == op) o.ev[o.n++] = p++;
        for (int i = by_last_head[op]; i >= 0; i = by_last_next[i])
            o.ev[o.n++] = i;
    }
    free(by_last_head);
    free(by_last_next);
    return o;
}

typedef struct result {
    size_t max_live, plan_peak, online_peak, online_live, replay_peak,
        caching_reserved, caching_allocated, min_budget;
    double plan_ms, online_ms, replay_plan_ms;
    bool replayed;
    int n_blocks, n_ops;
} result;

static bool whole_step(const delta_dry_block *b, int n_ops) {
    return b->tensor >= 0 && b->first == 0 && b->last == n_ops - 1 &&
           b->kind != DELTA_KIND_ACTIVATION && b->kind != DELTA_KIND_GRAD;
}

static int run_model(const char *name, int64_t batch, result *r) {
    memset(r, 0, sizeof *r);
    delta_ctx *ctx = delta_ctx_new();
    delta_model_config cfg = {.name = name, .batch = batch,
                              .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
    delta_model m;
    if (delta_model_build(ctx, &cfg, &m) != DELTA_OK) {
        fprintf(stderr, "%s: %s\n", name, m.error);
        delta_ctx_free(ctx);
        return 1;
    }
    delta_backward(ctx, m.loss);
    if (m.task == DELTA_TASK_CLASSIFY)
        delta_optimizer_sgd(ctx, (delta_sgd_opts){0.1f, 0.9f, 1e-4f, false});
    else
        delta_optimizer_adamw(ctx, (delta_adamw_opts){3e-4f, 0.9f, 0.999f,
                                                      1e-8f, 0.1f});
    if (delta_ctx_status(ctx) != DELTA_OK) {
        fprintf(stderr, "%s: %s\n", name, delta_ctx_error(ctx));
        delta_ctx_free(ctx);
        return 1;
    }
    char err[256];
    delta_dry_plan dp;
    if (delta_dry_plan_build(ctx, &dp, err, sizeof err) != DELTA_OK) {
        fprintf(stderr, "%s: %s\n", name, err);
        delta_ctx_free(ctx);
        return 1;
    }
    int n = delta_dry_plan_trace(ctx, NULL, 0), n_ops = dp.n_ops;
    delta_dry_block *b = malloc((size_t)n * sizeof *b);
    delta_plan_block *pb = malloc((size_t)n * sizeof *pb);
    size_t *off = malloc((size_t)n * sizeof *off);
    delta_dry_plan_trace(ctx, b, n);
    r->n_blocks = n;
    r->n_ops = n_ops;
    r->min_budget = dp.min_budget_bytes;

    /* planner */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        pb[i] = (delta_plan_block){b[i].size, b[i].first, b[i].last, -1};
        total += b[i].size;
    }
    delta_plan_stats ps;
    delta_plan_place(pb, n, off, &ps);
    r->max_live = ps.max_live_bytes;
    r->plan_peak = ps.peak_bytes;
    r->plan_ms = 1e3 * ps.seconds;

    /* online, in program order */
    order o = program_order(b, n, n_ops);
    delta_pool *pool = delta_pool_new(total, n, err, sizeof err);
    char *done = calloc((size_t)n, 1);
    double t0 = now_s();
    for (int e = 0; e < o.n; e++) {
        int i = o.ev[e];
        if (!done[i]) {
            done[i] = 1;
            if (delta_pool_alloc(pool, b[i].size, &off[i]) != DELTA_OK) {
                fprintf(stderr, "%s: online: %s\n", name, delta_pool_error(pool));
                return 1;
            }
        } else {
            delta_pool_release(pool, off[i]);
        }
    }
    r->online_ms = 1e3 * (now_s() - t0);
    delta_pool_stats st;
    delta_pool_get_stats(pool, &st);
    r->online_peak = st.peak_address;
    r->online_live = st.peak_live_bytes;
    delta_pool_free(pool);

    /* replay: persistent blocks before the first step, three steps */
    delta_replay *rp = delta_replay_new(total, n, err, sizeof err);
    for (int i = 0; i < n; i++)
        if (whole_step(&b[i], n_ops))
            delta_replay_alloc(rp, b[i].size, -1, &off[i]);
    for (int step = 0; step < 3; step++) {
        memset(done, 0, (size_t)n);
        delta_replay_step_begin(rp);
        for (int e = 0; e < o.n; e++) {
            int i = o.ev[e];
            if (whole_step(&b[i], n_ops)) continue;
            if (!done[i]) {
                done[i] = 1;
                if (delta_replay_alloc(rp, b[i].size, b[i].first, &off[i]) !=
                    DELTA_OK) {
                    fprintf(stderr, "%s: replay: %s\n", name,
                            delta_replay_error(rp));
                    return 1;
                }
            } else {
                delta_replay_release(rp, off[i], b[i].last);
            }
        }
        delta_replay_step rep;
        delta_replay_step_end(rp, &rep);
        if (step == 0) r->replay_plan_ms = 1e3 * rep.plan_seconds;
        if (step == 2) {
            r->replay_peak = rep.peak_address;
            r->replayed = rep.replayed;
        }
    }
    delta_replay_free(rp);

    /* caching emulation, same order */
    delta_caching *c = delta_caching_new();
    int *h = malloc((size_t)n * sizeof *h);
    memset(done, 0, (size_t)n);
    for (int e = 0; e < o.n; e++) {
        int i = o.ev[e];
        if (!done[i]) {
            done[i] = 1;
            delta_caching_alloc(c, b[i].size, &h[i]);
        } else {
            delta_caching_release(c, h[i]);
        }
    }
    delta_caching_stats cs;
    delta_caching_get_stats(c, &cs);
    r->caching_reserved = cs.peak_reserved_bytes;
    r->caching_allocated = cs.peak_allocated_bytes;
    delta_caching_free(c);

    printf("%-12s %5lld %6d %6d  %8.3f  %8.3f %6.4f %5.1f  %8.3f %6.4f  "
           "%8.3f %6.4f%s  %8.3f %6.4f  %7.3f %s\n",
           name, (long long)batch, n_ops, n, gib(r->max_live), gib(r->plan_peak),
           (double)r->plan_peak / (double)r->max_live, r->plan_ms,
           gib(r->online_peak), (double)r->online_peak / (double)r->max_live,
           gib(r->replay_peak), (double)r->replay_peak / (double)r->max_live,
           r->replayed ? " " : "*", gib(r->caching_reserved),
           (double)r->caching_reserved / (double)r->max_live,
           gib(r->min_budget), dp.min_budget_op_type);
    if (r->online_live != r->max_live)
        printf("  (online peak live %.3f GiB differs from max-live)\n",
               gib(r->online_live));
    free(h);
    free(done);
    free(o.ev);
    free(b);
    free(pb);
    free(off);
    delta_ctx_free(ctx);
    return 0;
}

int main(int argc, char **argv) {
    const char *defaults[] = {"resnet50:32", "gpt2-small:4", "bert-base:8"};
    int n = argc > 1 ? argc - 1 : 3;
    printf("peak address / max-live per allocator, one training step, every "
           "tensor kept (GiB; 256 B alignment)\n\n");
    printf("%-12s %5s %6s %6s  %8s  %8s %6s %5s  %8s %6s  %8s %6s   %8s %6s  "
           "%7s\n",
           "model", "batch", "ops", "blocks", "max-live", "planner", "ratio",
           "ms", "online", "ratio", "replay", "ratio", "caching", "ratio",
           "min-bud");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s", argc > 1 ? argv[i + 1] : defaults[i]);
        char *colon = strchr(name, ':');
        int64_t batch = 1;
        if (colon) {
            *colon = 0;
            batch = atoll(colon + 1);
        }
        result r;
        bad |= run_model(name, batch, &r);
    }
    printf("\nplanner: greedy by size, best-fit gap, op intervals (goal <= "
           "1.02). online: best fit\nin program order. replay: step 3, "
           "planned from step 1's alloc/free events (* = it\ndid not replay "
           "fully). caching: PyTorch caching-allocator emulation, peak "
           "reserved.\nmin-bud: smallest feasible budget (largest op's "
           "operands + workspace) and that op.\n");
    return bad;
}
