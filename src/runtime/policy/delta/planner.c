/* The delta policy's planner (delta_impl.h has the whole policy): from the
 * measured op times, the timeline of a step unrolled over two, the load at
 * each op against the target (the budget less the margin), every idle
 * interval of every tensor as a candidate, and the filter's choice among
 * them (knapsack.h, priced by pricing.c's director), bucketed by the ops
 * where the steps act on it. */
#include "runtime/policy/delta/delta_impl.h"
#include "delta/pool.h"

#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the plan ------------------------------------------------------------ */

void dp_plan_free(delta_pol *p) {
    free(p->t0);
    free(p->t1);
    free(p->excess);
    free(p->c);
    free(p->out.v);
    free(p->in.v);
    free(p->rel_start);
    free(p->rel_ids);
    free(p->fetch_start);
    free(p->fetch_ids);
    p->t0 = p->t1 = NULL;
    p->excess = NULL;
    p->c = NULL;
    p->out = p->in = (stream){0};
    p->rel_start = p->rel_ids = p->fetch_start = p->fetch_ids = NULL;
    p->n_c = 0;
    p->n_rd = 0;
    p->in_busy = 0;
    p->planned = false;
}

static void add_cand(delta_pol *p, int r, int a, int b) {
    if (b - a < 2) return;
    p->c[p->n_c++] = (cand){.r = r, .a = a, .b = b, .b0 = b, .issue = -1,
                            .next_of_root = -1};
}

/* Buckets chosen candidates by key(c) into start/ids (CSR over ops). */
static bool bucket(delta_pol *p, bool by_issue, int **start, int **ids) {
    int n = p->n_ops;
    *start = calloc((size_t)n + 2, sizeof(int));
    *ids = malloc(sizeof(int) * ((size_t)p->n_c + 1));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!*start || !*ids || !fill) {
        free(fill);
        return false;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < p->n_c; k++) {
            const cand *c = &p->c[k];
            if (c->how == HOW_NONE || (by_issue && c->how != HOW_SWAP)) continue;
            int key = (by_issue ? c->issue : c->a) % n;
            if (pass == 0) (*start)[key + 1]++;
            else (*ids)[(*start)[key] + fill[key]++] = k;
        }
        if (pass == 0)
            for (int i = 0; i < n; i++) (*start)[i + 1] += (*start)[i];
    }
    free(fill);
    return true;
}

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One plan for mode md into p (the previous one freed); res: its cost. */
static bool plan_solve(delta_pol *p, managed *m, mode md,
                       bool recompute_first, ks_result *res) {
    double w0 = wall_s();
    dp_plan_free(p);
    int n = p->n_ops, nr = p->n_roots;
    const delta_ctx *ctx = managed_ctx(m);
    size_t budget = managed_budget(m);
    p->t0 = malloc(sizeof(double) * 2 * ((size_t)n + 1));
    p->t1 = malloc(sizeof(double) * 2 * ((size_t)n + 1));
    p->excess = calloc((size_t)n + 1, sizeof(int64_t));
    size_t n_acc = 0;
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        if (v) n_acc += (size_t)v->n_acc + 2;
    }
    p->c = malloc(sizeof(cand) * (n_acc + 1));
    if (!p->t0 || !p->t1 || !p->excess || !p->c) return false;
    /* timeline, unrolled over two steps */
    double t = 0;
    for (int i = 0; i < n; i++) {
        p->plan_t[i] = dp_op_time(p, m, i);
        p->t0[i] = t;
        t += p->plan_t[i];
        p->t1[i] = t;
    }
    p->T = t;
    for (int i = 0; i < n; i++) {
        p->t0[i + n] = p->t0[i] + t;
        p->t1[i + n] = p->t1[i] + t;
    }
    /* load with everything kept, against the target */
    int64_t target = (int64_t)budget - (int64_t)p->margin;
    for (int i = 0; i < n; i++) {
        size_t ws = ctx->ops[i].workspace;
        p->excess[i] = (int64_t)(ws ? delta_pool_round(ws) : 0) - target;
    }
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || (v->n_acc == 0 && v->producer < 0)) continue;
        /* produced tensors (kept outputs too) exist from their producer */
        int lo = v->producer >= 0 ? v->producer : 0;
        int hi = v->persistent ? n - 1 : v->last_use;
        for (int i = lo; i <= hi; i++) p->excess[i] += (int64_t)v->bytes;
    }
    /* candidates: every idle interval */
    p->n_c = 0;
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || !dp_swappable(v)) continue;
        int prev = v->persistent ? -1 : v->producer;
        for (int k = 0; k < v->n_acc; k++) {
            if (prev >= 0) add_cand(p, r, prev, v->acc[k]);
            prev = v->acc[k];
        }
        if (v->persistent && v->n_acc > 0)
            add_cand(p, r, v->acc[v->n_acc - 1], v->acc[0] + n);
    }
    for (int r = 0; r < nr; r++) p->root_first[r] = p->rd_first[r] = -1;
    eval_ctx x = {p, m, md == MODE_PLAN_FREE, recompute_first};
    ks_problem kp = {p->n_c, n, p->excess, dp_eval_cand, dp_commit_cand,
                     dp_uncommit_cand, &x};
    if (!ks_solve(&kp, res)) return false;
    if (getenv("DELTA_DEBUG_PLAN")) {
        int sw = 0, dr = 0; double swb = 0, drb = 0;
        for (int k = 0; k < p->n_c; k++) {
            if (p->c[k].how == HOW_SWAP) { sw++; swb += (double)managed_root(m, p->c[k].r)->bytes; }
            if (p->c[k].how == HOW_DROP) { dr++; drb += (double)managed_root(m, p->c[k].r)->bytes; }
        }
        fprintf(stderr, "plan%s: %d cands, %d swaps (%.0f MiB), %d drops (%.0f MiB), cost %.4f s, worst excess %lld, T %.4f, evals %d, planned in %.3f s\n",
                recompute_first ? " (recompute first)" : "", p->n_c, sw, swb / 1048576, dr, drb / 1048576, res->cost, (long long)res->worst_excess, p->T, res->evaluations, wall_s() - w0);
    }
    if (getenv("DELTA_DEBUG_PLAN") && atoi(getenv("DELTA_DEBUG_PLAN")) > 1) {
        /* every chosen release: what it is, its interval, its price */
        static const char *const kinds[] = {"param", "input", "const", "state",
                                            "activation", "grad"};
        for (int k = 0; k < p->n_c; k++) {
            const cand *c = &p->c[k];
            if (c->how == HOW_NONE) continue;
            const root_view *v = managed_root(m, c->r);
            fprintf(stderr, "  %s %s %d (%s) %.1f MiB after op %d, back by %d, cost %.6f s%s\n",
                    c->how == HOW_SWAP ? "swap" : "drop",
                    (unsigned)v->kind < 6 ? kinds[v->kind] : "?", c->r,
                    delta_tensor_name(ctx->tensors[c->r]),
                    (double)v->bytes / 1048576, c->a, c->b, c->cost,
                    c->how == HOW_SWAP && c->eval_sp.sync ? " (exposed)" : "");
        }
    }
    p->plan_cost = res->cost;
    return true;
}

/* The solved plan becomes the one the steps follow. */
static bool plan_use(delta_pol *p, mode md) {
    if (!bucket(p, false, &p->rel_start, &p->rel_ids) ||
        !bucket(p, true, &p->fetch_start, &p->fetch_ids))
        return false;
    p->planned = true;
    p->plan_mode = md;
    p->replan = false;
    p->plan_gen++;
    return true;
}

/* A hash of plan's decisions (candidate and how), so two solves that chose
 * alike are known to be one plan. */
static uint64_t plan_signature(const delta_pol *p) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int k = 0; k < p->n_c; k++) {
        if (p->c[k].how == HOW_NONE) continue;
        uint64_t v = (uint64_t)k * 4 + (uint64_t)p->c[k].how;
        for (int b = 0; b < 8; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return h;
}

/* The plan for mode md: the director free to choose (PLAN_FULL), only
 * swaps that cost nothing (PLAN_FREE), or recomputing every release it can
 * and swapping only the rest (PLAN_RECOMP). */
bool dp_plan_build(delta_pol *p, managed *m, mode md) {
    ks_result res;
    if (!plan_solve(p, m, md, md == MODE_PLAN_RECOMP, &res)) return false;
    p->plan_covers = res.worst_excess <= 0;
    p->plan_sig = plan_signature(p);
    return plan_use(p, md);
}
