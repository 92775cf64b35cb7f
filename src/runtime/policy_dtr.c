/* dtr: Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021), the
 * online recompute-only peer. When memory is short it evicts the resident
 * tensor with the lowest
 *     h(t) = (c(t) + sum of c over t's evicted neighbourhood) / (bytes(t) x staleness(t))
 * where c is the measured time of the op that produces t (an estimate from
 * its flops before it has been measured) and the neighbourhood is the
 * equivalence class of evicted tensors adjacent to t (union-find in the
 * paper). Simplified here: the neighbourhood is one level deep (t's
 * producer's inputs and t's consumers' outputs that are evicted), computed
 * on demand rather than kept in union-find classes. Recompute on demand,
 * recursively, no prefetch, no swapping: parameters, gradients and state
 * must fit. */
#include "runtime/managed.h"

#include <stdlib.h>

/* No state between calls: costs and staleness come from the runtime. */
typedef struct dtr {
    int unused;
} dtr;

static void *dtr_create(managed *m) {
    (void)m;
    return calloc(1, sizeof(dtr));
}

static void dtr_destroy(void *p) { free(p); }

static double op_cost(const managed *m, const delta_ctx *c, int op) {
    double t = managed_op_seconds(m, op);
    if (t > 0) return t;
    return c->ops[op].flops / 1e11 + 1e-6; /* unmeasured: ~100 GFLOP/s */
}

/* c(t) plus the costs of evicted tensors next to t. */
static double neighbourhood_cost(const managed *m, const delta_ctx *c, int r) {
    const root_view *v = managed_root(m, r);
    double cost = op_cost(m, c, v->producer);
    const delta_op *p = &c->ops[v->producer];
    for (int j = 0; j < p->n_in; j++) {
        const root_view *u = managed_root(m, delta_tensor_root(c, p->in[j]));
        if (u && u->droppable && u->state == RES_DROPPED)
            cost += op_cost(m, c, u->producer);
    }
    return cost;
}

static int dtr_choose(void *p, managed *m, size_t need, bool *drop) {
    (void)p;
    (void)need;
    const delta_ctx *c = managed_ctx(m);
    int64_t now = managed_clock(m);
    int best = -1;
    double best_h = 0;
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_DEVICE || !v->droppable ||
            managed_pinned(m, r))
            continue;
        double stale = (double)(now - v->last_access) + 1.0;
        double h = neighbourhood_cost(m, c, r) / ((double)v->bytes * stale);
        if (best < 0 || h < best_h) {
            best = r;
            best_h = h;
        }
    }
    *drop = true;
    return best;
}

const policy_ops delta_policy_dtr = {
    .name = "dtr",
    .create = dtr_create,
    .destroy = dtr_destroy,
    .choose_victim = dtr_choose,
};
