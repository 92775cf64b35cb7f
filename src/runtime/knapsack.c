/* The filter's greedy (see knapsack.h): a max-heap of items by value per
 * second of cost, lazily re-evaluated. */
#include "runtime/knapsack.h"

#include <stdlib.h>

/* A free item still ranks by value: an epsilon cost keeps the ratio
 * finite and orders free items by the bytes they relieve. */
#define KS_EPS_S 1e-7

int64_t ks_value(const int64_t *excess, const ks_eval *e) {
    int64_t v = 0, b = (int64_t)e->bytes;
    for (int r = 0; r < 2; r++)
        for (int i = e->lo[r]; i <= e->hi[r]; i++)
            if (excess[i] > 0) v += excess[i] < b ? excess[i] : b;
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

bool ks_solve(ks_problem *p, ks_result *res) {
    *res = (ks_result){0};
    node *h = malloc(sizeof *h * ((size_t)p->n_items + 1));
    if (!h) return false;
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
        res->chosen++;
        res->cost += e.cost;
    }
    free(h);
    res->worst_excess = INT64_MIN;
    for (int i = 0; i < p->n_ops; i++)
        if (p->excess[i] > res->worst_excess) res->worst_excess = p->excess[i];
    return true;
}
