/* The filter's greedy (see knapsack.h): a max-heap of items by value per
 * second of cost, lazily re-evaluated. */
#include "runtime/policy/delta/knapsack.h"

#include <stdlib.h>
#include <string.h>

/* A free item still ranks by value: an epsilon cost keeps the ratio
 * finite and orders free items by the bytes they relieve. */
#define KS_EPS_S 1e-7

int64_t ks_value(const int64_t *excess, const ks_eval *e) {
    /* how much the item lowers the sum of the positive excesses: its
     * relief at over-target ops, less what its extra load adds where that
     * lands over the target (a recomputation's temporaries at an op over
     * the target already can make it worth nothing) */
    int64_t v = 0, b = (int64_t)e->bytes, x = (int64_t)e->extra_bytes;
    bool extra_inside = false;
    for (int r = 0; r < 2; r++)
        for (int i = e->lo[r]; i <= e->hi[r]; i++) {
            int64_t after = excess[i] - b;
            if (i == e->extra_op) {
                after += x;
                extra_inside = true;
            }
            int64_t before = excess[i] > 0 ? excess[i] : 0;
            v += before - (after > 0 ? after : 0);
        }
    if (e->extra_op >= 0 && x > 0 && !extra_inside) {
        int64_t before = excess[e->extra_op];
        int64_t after = before + x;
        v -= (after > 0 ? after : 0) - (before > 0 ? before : 0);
    }
    return v;
}

typedef struct node {
    double key;
    int k;
} node;

static void sift_up(node *h, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h[p].key >= h[i].key) break;
        node t = h[p];
        h[p] = h[i];
        h[i] = t;
        i = p;
    }
}

static void sift_down(node *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].key > h[m].key) m = l;
        if (r < n && h[r].key > h[m].key) m = r;
        if (m == i) break;
        node t = h[m];
        h[m] = h[i];
        h[i] = t;
        i = m;
    }
}

static double ratio(int64_t value, double cost) {
    return (double)value / (cost + KS_EPS_S);
}

static bool any_excess(const ks_problem *p) {
    for (int i = 0; i < p->n_ops; i++)
        if (p->excess[i] > 0) return true;
    return false;
}

/* Drops chosen items, most expensive first, while the cover holds without
 * them; in passes until one drops nothing: dropping an item also takes its
 * extra load away (a recomputation's temporaries), which can make an item
 * kept earlier in the pass redundant. */
static void clean_up(ks_problem *p, ks_result *res, int *ids,
                     ks_eval *ev, int n) {
    bool *checked = malloc((size_t)n + 1);
    if (!checked) return; /* the cover holds as it is */
    for (bool again = true; again;) {
        again = false;
        memset(checked, 0, (size_t)n + 1);
        for (;;) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (ids[i] >= 0 && !checked[i] &&
                    (best < 0 || ev[i].cost > ev[best].cost))
                    best = i;
            if (best < 0 || ev[best].cost <= 0) break;
            checked[best] = true;
            ks_eval *e = &ev[best];
            int64_t b = (int64_t)e->bytes;
            bool needed = false;
            for (int r = 0; r < 2 && !needed; r++)
                for (int i = e->lo[r]; i <= e->hi[r] && !needed; i++) {
                    int64_t extra =
                        i == e->extra_op ? (int64_t)e->extra_bytes : 0;
                    needed = p->excess[i] + b - extra > 0;
                }
            if (needed) continue;
            for (int r = 0; r < 2; r++)
                for (int i = e->lo[r]; i <= e->hi[r]; i++) p->excess[i] += b;
            if (e->extra_op >= 0)
                p->excess[e->extra_op] -= (int64_t)e->extra_bytes;
            p->uncommit(p->user, ids[best]);
            ids[best] = -1;
            res->chosen--;
            res->cost -= e->cost;
            again = true;
        }
    }
    free(checked);
}

bool ks_solve(ks_problem *p, ks_result *res) {
    *res = (ks_result){0};
    node *h = malloc(sizeof *h * ((size_t)p->n_items + 1));
    int *ids = malloc(sizeof(int) * ((size_t)p->n_items + 1));
    ks_eval *chosen = malloc(sizeof(ks_eval) * ((size_t)p->n_items + 1));
    if (!h || !ids || !chosen) {
        free(h);
        free(ids);
        free(chosen);
        return false;
    }
    int n = 0;
    for (int k = 0; k < p->n_items; k++) {
        ks_eval e;
        p->eval(p->user, k, &e);
        res->evaluations++;
        if (!e.feasible) continue;
        int64_t v = ks_value(p->excess, &e);
        if (v <= 0) continue;
        h[n] = (node){ratio(v, e.cost), k};
        sift_up(h, n++);
    }
    while (n > 0 && any_excess(p)) {
        node top = h[0];
        h[0] = h[--n];
        sift_down(h, n, 0);
        ks_eval e;
        p->eval(p->user, top.k, &e);
        res->evaluations++;
        if (!e.feasible) continue;
        int64_t v = ks_value(p->excess, &e);
        if (v <= 0) continue;
        double key = ratio(v, e.cost);
        if (n > 0 && key < h[0].key) { /* no longer the best: requeue */
            h[n] = (node){key, top.k};
            sift_up(h, n++);
            continue;
        }
        int64_t b = (int64_t)e.bytes;
        for (int r = 0; r < 2; r++)
            for (int i = e.lo[r]; i <= e.hi[r]; i++) p->excess[i] -= b;
        if (e.extra_op >= 0) p->excess[e.extra_op] += (int64_t)e.extra_bytes;
        p->commit(p->user, top.k, &e);
        ids[res->chosen] = top.k;
        chosen[res->chosen] = e;
        res->chosen++;
        res->cost += e.cost;
    }
    if (p->uncommit) clean_up(p, res, ids, chosen, res->chosen);
    free(h);
    free(ids);
    free(chosen);
    res->worst_excess = INT64_MIN;
    for (int i = 0; i < p->n_ops; i++)
        if (p->excess[i] > res->worst_excess) res->worst_excess = p->excess[i];
    return true;
}
