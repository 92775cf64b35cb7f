/* delta: the project's own policy (DELTA, Tang et al. 2022; TACO 2024), as
 * the papers describe it rather than as the authors' prototype does.
 *
 * Profiling. The first training step runs with online decisions: when an
 * allocation does not fit, the resident tensor with the lowest cost per
 * byte-op of relief is released, where cost is the cheaper of recomputing
 * it (its producer's time) and swapping it (the link model's transfer
 * times) and relief is its bytes times the ops until its next use (known
 * from the program). The runtime measures every op and every copy (per
 * direction) meanwhile.
 *
 * Plan (policy_delta.c's plan_build), from the profile:
 *   - timeline: each op's measured time (an average over steps) gives its
 *     start and end; the load at each op is every tensor alive with
 *     everything kept, plus its workspace; the target is the budget minus a
 *     margin for fragmentation and misestimates (1/32 of the budget, grown
 *     when a step needs online help);
 *   - candidates: every idle interval of every tensor (between two
 *     consecutive accesses; for parameters and optimizer state also the one
 *     that wraps from their last access to their first in the next step);
 *   - director: for each candidate, a swap costs only the part of its two
 *     transfers that cannot hide in the copy streams' idle time inside the
 *     interval: the swap-out is placed in the first idle slot of the to-host
 *     stream after the last access (relief starts when it lands); the
 *     swap-in in the latest idle slot of the to-device stream that ends by
 *     the next access (relief ends when it is issued: memory for arriving
 *     tensors is reserved), the streams' occupancy by transfers already
 *     chosen counting; a swap-in that finds no slot is on the critical path
 *     (its whole transfer is the cost). A recomputation (activations only)
 *     costs its producer chain back to tensors resident at that moment,
 *     dropped or freed ancestors included, and adds the chain's
 *     temporaries to the load at that op. Per candidate the option with the
 *     higher value per second wins;
 *   - filter: the covering 0/1 knapsack of knapsack.h picks the releases,
 *     greedily by bytes relieved at over-target ops per second of cost,
 *     re-pricing each pick against the choices so far.
 * Later steps follow the plan: swap-outs and drops in after_op of the last
 * access before the gap, swap-ins issued in before_op of their planned op
 * (retried each op until the deadline when no gap fits), recomputation on
 * demand at the next use (compute is serial, so just in time is on time).
 *
 * Re-planning. Op times keep being measured; delta plans again when the
 * measured step drifts more than 20% from the one planned for, when a
 * guided step needed online releases (the target is tightened first) or a
 * prefetch kept arriving late. A new shape is a new program and session,
 * so it gets its own profile and plan.
 *
 * Not done here (yet): filling the compute stream's idle time while it
 * waits for a transfer with recomputation issued ahead. */
#include "runtime/knapsack.h"
#include "runtime/managed.h"
#include "delta/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DRIFT 0.20         /* re-plan when the step drifts this much */
#define EMA 0.5            /* weight of the newest op-time measurement */
#define CHAIN_DEPTH 8      /* deepest recomputation chain priced */
#define MARGIN_MIN 32      /* margin = budget / this at first */
#define MARGIN_MAX 4       /* ... tightened up to budget / this */

typedef enum how { HOW_NONE = 0, HOW_SWAP, HOW_DROP } how;

typedef struct swap_plan {
    double out_s, out_e, in_s, in_e;
    int issue;
} swap_plan;

typedef struct cand {
    int r, a, b;           /* leaves after op a, back by op b (b >= n: the
                              next step's op b - n) */
    how how;               /* chosen: how; else HOW_NONE */
    int issue;             /* swap: op (mod n) whose before_op prefetches */
    int next_of_root;      /* chosen candidates of the same root (list) */
    how eval_how;          /* the director's last verdict ... */
    swap_plan eval_sp;     /* ... and its transfers, for commit */
} cand;

typedef struct span {
    double s, e;
} span;

/* A copy stream's planned busy spans on the unrolled time axis [0, 2T). */
typedef struct stream {
    span *v;
    int n, cap;
} stream;

typedef struct delta_pol {
    int n_ops, n_roots;
    /* measurements */
    double *ema;           /* per op: averaged seconds */
    double *plan_t;        /* per op: the times the plan was made from */
    bool have_times;
    /* timeline of the plan */
    double *t0, *t1;       /* per op on the unrolled axis [0, 2n) */
    double T;              /* one step */
    int64_t *excess;       /* per op */
    size_t margin;
    /* candidates and choices */
    cand *c;
    int n_c;
    int *root_first;       /* per root: first chosen candidate, -1 */
    stream out, in;
    int *stamp;            /* per root: chain pricing visits */
    int stamp_now;
    /* the plan, bucketed: chosen candidate ids by after-op and issue-op */
    int *rel_start, *rel_ids, *fetch_start, *fetch_ids;
    bool planned, replan;
    int online_victims;    /* choose_victim calls in the current step */
    int late;              /* planned swap-ins that arrived late */
    /* prefetches that found no gap, retried each op until their deadline */
    int *pending, n_pending;
    int64_t steps;
} delta_pol;

/* ---- small helpers ------------------------------------------------------ */

static double op_time(const delta_pol *p, const managed *m, int op) {
    return p->have_times ? p->ema[op] : managed_op_seconds(m, op);
}

static bool swappable(const root_view *v) {
    /* outputs the caller reads after a run (persistent with a producer)
     * stay put */
    return !(v->persistent && v->producer >= 0);
}

/* Next access of r after op (the next step's first access, + n, for a
 * persistent root past its last one); -1 when none. */
static int next_access(const managed *m, const delta_pol *p, int r, int op) {
    int nx = managed_next_use(m, r, op);
    if (nx >= 0) return nx;
    const root_view *v = managed_root(m, r);
    if (v->persistent && v->n_acc > 0) return v->acc[0] + p->n_ops;
    return -1;
}

/* ---- the copy streams' planned occupancy -------------------------------- */

static bool stream_add1(stream *s, double a, double b) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        span *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    int i = s->n;
    while (i > 0 && s->v[i - 1].s > a) {
        s->v[i] = s->v[i - 1];
        i--;
    }
    s->v[i] = (span){a, b};
    s->n++;
    return true;
}

/* Busy [a, b) on the unrolled axis, mirrored one step away so that the
 * cyclic schedule sees it from either copy of the step. */
static bool stream_add(stream *s, double a, double b, double T) {
    double sh = a >= T ? -T : T;
    return stream_add1(s, a, b) && stream_add1(s, a + sh, b + sh);
}

/* Earliest start >= t of an idle slot of length d. */
static double slot_after(const stream *s, double t, double d) {
    double x = t;
    for (int i = 0; i < s->n; i++) {
        if (s->v[i].e <= x) continue;
        if (s->v[i].s >= x + d) break;
        x = s->v[i].e;
    }
    return x;
}

/* Latest start >= lo of an idle slot of length d ending by t; -1 if none. */
static double slot_before(const stream *s, double t, double d, double lo) {
    double end = t;
    for (int i = s->n - 1; i >= 0; i--) {
        if (s->v[i].s >= end) continue;
        if (s->v[i].e <= end - d) break;
        end = s->v[i].s;
        if (end - d < lo) return -1;
    }
    return end - d >= lo ? end - d : -1;
}

/* First op (unrolled index) starting at or after time x, within [lo, hi]. */
static int op_at_or_after(const delta_pol *p, double x, int lo, int hi) {
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->t0[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* ---- the director ------------------------------------------------------- */

/* Is root x absent at op b (unrolled) under the choices so far? */
static bool absent_at(const delta_pol *p, const managed *m, int x, int b) {
    const root_view *v = managed_root(m, x);
    if (!v->persistent && v->last_use < b % p->n_ops) return true; /* freed */
    for (int k = p->root_first[x]; k >= 0; k = p->c[k].next_of_root)
        if (p->c[k].a < b && b < p->c[k].b) return true;
    return false;
}

/* Seconds to recompute root r at op b and the temporaries it needs;
 * negative when it cannot be recomputed. */
static double chain(delta_pol *p, const managed *m, int r, int b, int depth,
                    size_t *temps) {
    const root_view *v = managed_root(m, r);
    if (!v->droppable || depth > CHAIN_DEPTH) return -1;
    const delta_op *op = &managed_ctx(m)->ops[v->producer];
    double t = op_time(p, m, v->producer);
    for (int j = 0; j < op->n_in; j++) {
        int x = delta_tensor_root(managed_ctx(m), op->in[j]);
        if (p->stamp[x] == p->stamp_now) continue;
        p->stamp[x] = p->stamp_now;
        const root_view *u = managed_root(m, x);
        if (u->persistent || !absent_at(p, m, x, b)) continue;
        double c = chain(p, m, x, b, depth + 1, temps);
        if (c < 0) return -1;
        t += c;
        *temps += u->bytes;
    }
    return t;
}

static void range_split(const delta_pol *p, int lo, int hi, ks_eval *e) {
    int n = p->n_ops;
    e->lo[0] = lo < n ? lo : n;
    e->hi[0] = hi < n ? hi : n - 1;
    e->lo[1] = lo > n ? lo - n : 0;
    e->hi[1] = hi >= n ? hi - n : -1;
    if (e->lo[0] > e->hi[0]) e->lo[0] = 1, e->hi[0] = 0;
    if (e->lo[1] > e->hi[1]) e->lo[1] = 1, e->hi[1] = 0;
}

static bool price_swap(delta_pol *p, const managed *m, const cand *c,
                       ks_eval *e, swap_plan *sp) {
    const root_view *v = managed_root(m, c->r);
    double d_out = managed_link_seconds_dir(m, v->bytes, true);
    double d_in = managed_link_seconds_dir(m, v->bytes, false);
    sp->out_s = slot_after(&p->out, p->t1[c->a], d_out);
    sp->out_e = sp->out_s + d_out;
    int lo = op_at_or_after(p, sp->out_e, c->a + 1, c->b);
    double cost = 0;
    double s = slot_before(&p->in, p->t0[c->b], d_in, sp->out_e);
    int issue;
    if (s >= 0) {
        /* issued before the latest op that starts by s */
        int j = op_at_or_after(p, s, lo, c->b);
        issue = p->t0[j] <= s ? j : j - 1;
        if (issue < lo) issue = lo;
        sp->in_s = s;
    } else {
        /* no idle slot: fetched on demand, on the critical path */
        issue = c->b;
        sp->in_s = p->t0[c->b];
        cost += d_in;
    }
    sp->in_e = sp->in_s + d_in;
    sp->issue = issue;
    /* a wrap swap-out still in flight at the step's end is waited for */
    if (c->b >= p->n_ops && sp->out_e > p->T) cost += sp->out_e - p->T;
    range_split(p, lo, issue - 1, e);
    e->bytes = v->bytes;
    e->cost = cost;
    e->extra_op = -1;
    e->extra_bytes = 0;
    e->feasible = issue - 1 >= lo;
    return e->feasible;
}

static bool price_drop(delta_pol *p, const managed *m, const cand *c,
                       ks_eval *e) {
    const root_view *v = managed_root(m, c->r);
    if (!v->droppable || c->b >= p->n_ops || c->b - c->a < 2) return false;
    p->stamp_now++;
    p->stamp[c->r] = p->stamp_now;
    size_t temps = 0;
    double t = chain(p, m, c->r, c->b, 0, &temps);
    if (t < 0) return false;
    range_split(p, c->a + 1, c->b - 1, e);
    e->bytes = v->bytes;
    e->cost = t;
    e->extra_op = temps ? c->b : -1;
    e->extra_bytes = temps;
    e->feasible = true;
    return true;
}

typedef struct eval_ctx {
    delta_pol *p;
    const managed *m;
} eval_ctx;

static double ratio(const delta_pol *p, const ks_eval *e) {
    return (double)ks_value(p->excess, e) / (e->cost + 1e-7);
}

/* The director: the better of swapping and recomputing c, by value per
 * second. The verdict is kept for commit (the knapsack commits right after
 * evaluating). */
static void eval_cand(void *user, int k, ks_eval *out) {
    eval_ctx *x = user;
    delta_pol *p = x->p;
    cand *c = &p->c[k];
    ks_eval sw = {0}, dr = {0};
    bool s_ok = price_swap(p, x->m, c, &sw, &c->eval_sp);
    bool d_ok = price_drop(p, x->m, c, &dr);
    c->eval_how = HOW_NONE;
    out->feasible = false;
    if (s_ok && (!d_ok || ratio(p, &sw) >= ratio(p, &dr))) {
        *out = sw;
        c->eval_how = HOW_SWAP;
    } else if (d_ok) {
        *out = dr;
        c->eval_how = HOW_DROP;
    }
}

static void commit_cand(void *user, int k, const ks_eval *e) {
    eval_ctx *x = user;
    delta_pol *p = x->p;
    cand *c = &p->c[k];
    (void)e;
    c->how = c->eval_how;
    if (c->how == HOW_SWAP) {
        c->issue = c->eval_sp.issue;
        stream_add(&p->out, c->eval_sp.out_s, c->eval_sp.out_e, p->T);
        stream_add(&p->in, c->eval_sp.in_s, c->eval_sp.in_e, p->T);
    }
    c->next_of_root = p->root_first[c->r];
    p->root_first[c->r] = k;
}

/* ---- the plan ------------------------------------------------------------ */

static void free_plan(delta_pol *p) {
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
    p->planned = false;
}

static void add_cand(delta_pol *p, int r, int a, int b) {
    if (b - a < 2) return;
    p->c[p->n_c++] = (cand){.r = r, .a = a, .b = b, .issue = -1,
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

static bool plan_build(delta_pol *p, managed *m) {
    free_plan(p);
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
        p->plan_t[i] = op_time(p, m, i);
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
        int lo = v->persistent ? 0 : v->producer;
        int hi = v->persistent ? n - 1 : v->last_use;
        if (lo < 0) lo = 0;
        for (int i = lo; i <= hi; i++) p->excess[i] += (int64_t)v->bytes;
    }
    /* candidates: every idle interval */
    p->n_c = 0;
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || !swappable(v)) continue;
        int prev = v->persistent ? -1 : v->producer;
        for (int k = 0; k < v->n_acc; k++) {
            if (prev >= 0) add_cand(p, r, prev, v->acc[k]);
            prev = v->acc[k];
        }
        if (v->persistent && v->n_acc > 0)
            add_cand(p, r, v->acc[v->n_acc - 1], v->acc[0] + n);
    }
    for (int r = 0; r < nr; r++) p->root_first[r] = -1;
    eval_ctx x = {p, m};
    ks_problem kp = {p->n_c, n, p->excess, eval_cand, commit_cand, &x};
    ks_result res;
    if (!ks_solve(&kp, &res)) return false;
    if (!bucket(p, false, &p->rel_start, &p->rel_ids) ||
        !bucket(p, true, &p->fetch_start, &p->fetch_ids))
        return false;
    p->planned = true;
    p->replan = false;
    return true;
}

/* ---- online decisions (profiling, and help when a plan falls short) ----- */

static int delta_choose(void *pp, managed *m, size_t need, bool *drop) {
    delta_pol *p = pp;
    (void)need;
    p->online_victims++;
    int now = managed_cur_op(m);
    if (now < 0) now = 0;
    int best = -1;
    bool best_drop = false;
    double best_h = 0;
    for (int r = 0; r < p->n_roots; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, r) ||
            !swappable(v))
            continue;
        int nx = next_access(m, p, r, now);
        double dist = nx < 0 ? 2.0 * p->n_ops : (double)(nx - now);
        double swap_c = managed_link_seconds_dir(m, v->bytes, false) +
                        (v->host_valid ? 0 : managed_link_seconds_dir(m, v->bytes, true));
        double drop_c = v->droppable ? op_time(p, m, v->producer) : INFINITY;
        bool d = drop_c < swap_c;
        double h = (d ? drop_c : swap_c) / ((double)v->bytes * dist);
        if (best < 0 || h < best_h) {
            best = r;
            best_h = h;
            best_drop = d;
        }
    }
    *drop = best_drop;
    return best;
}

/* ---- hooks --------------------------------------------------------------- */

static void *delta_create(managed *m) {
    delta_pol *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_ops = managed_ctx(m)->n_ops;
    p->n_roots = managed_n_roots(m);
    p->ema = calloc((size_t)p->n_ops + 1, sizeof(double));
    p->plan_t = calloc((size_t)p->n_ops + 1, sizeof(double));
    p->root_first = malloc(sizeof(int) * ((size_t)p->n_roots + 1));
    p->stamp = calloc((size_t)p->n_roots + 1, sizeof(int));
    p->pending = malloc(sizeof(int) * ((size_t)p->n_roots + 1));
    p->margin = managed_budget(m) / MARGIN_MIN;
    if (!p->ema || !p->plan_t || !p->root_first || !p->stamp || !p->pending) {
        free(p->ema);
        free(p->plan_t);
        free(p->root_first);
        free(p->stamp);
        free(p->pending);
        free(p);
        return NULL;
    }
    return p;
}

static void delta_destroy(void *pp) {
    delta_pol *p = pp;
    free_plan(p);
    free(p->ema);
    free(p->plan_t);
    free(p->root_first);
    free(p->stamp);
    free(p->pending);
    free(p);
}

static void delta_begin(void *pp, managed *m, int64_t step, bool fwd_only) {
    delta_pol *p = pp;
    (void)step;
    p->online_victims = 0;
    p->late = 0;
    p->n_pending = 0;
    if (fwd_only || !p->have_times) return;
    if (!p->planned || p->replan) plan_build(p, m);
}

static void delta_end(void *pp, managed *m, bool ok) {
    delta_pol *p = pp;
    if (!ok || managed_fwd_only(m)) return;
    /* fold this step's measurements in; drift decides re-planning */
    double drift = 0, total = 0;
    for (int i = 0; i < p->n_ops; i++) {
        double t = managed_op_seconds(m, i);
        p->ema[i] = p->have_times ? (1 - EMA) * p->ema[i] + EMA * t : t;
        drift += fabs(p->ema[i] - p->plan_t[i]);
        total += p->plan_t[i];
    }
    p->have_times = true;
    p->steps++;
    if (!p->planned) return;
    if (p->online_victims > 0) {
        /* the plan fell short: a tighter target next time */
        size_t cap = managed_budget(m) / MARGIN_MAX;
        p->margin = p->margin * 2 > cap ? cap : p->margin * 2;
        p->replan = true;
    }
    if (total > 0 && drift / total > DRIFT) p->replan = true;
    if (p->late > 0) p->replan = true;
}

static void delta_before(void *pp, managed *m, int op) {
    delta_pol *p = pp;
    if (!p->planned || managed_fwd_only(m)) return;
    /* retry what found no gap, until its use */
    int k = 0;
    for (int i = 0; i < p->n_pending; i++) {
        const cand *c = &p->c[p->pending[i]];
        const root_view *v = managed_root(m, c->r);
        if (v->state != RES_HOST || c->b % p->n_ops <= op) continue;
        if (!managed_prefetch(m, c->r)) p->pending[k++] = p->pending[i];
    }
    p->n_pending = k;
    for (int j = p->fetch_start[op]; j < p->fetch_start[op + 1]; j++) {
        int id = p->fetch_ids[j];
        const root_view *v = managed_root(m, p->c[id].r);
        if (v->state == RES_HOST && !managed_prefetch(m, p->c[id].r) &&
            p->n_pending < p->n_roots)
            p->pending[p->n_pending++] = id;
    }
}

static void delta_after(void *pp, managed *m, int op) {
    delta_pol *p = pp;
    if (!p->planned || managed_fwd_only(m)) return;
    for (int j = p->rel_start[op]; j < p->rel_start[op + 1]; j++) {
        const cand *c = &p->c[p->rel_ids[j]];
        const root_view *v = managed_root(m, c->r);
        if (v->state != RES_DEVICE || managed_pinned(m, c->r)) continue;
        if (c->how == HOW_DROP) managed_drop(m, c->r);
        else managed_swap_out(m, c->r);
    }
}

static void delta_event(void *pp, managed *m, int r, managed_event ev,
                        double wait_s) {
    delta_pol *p = pp;
    (void)m;
    (void)r;
    if (ev == MEV_LATE && wait_s > 0 && p->planned) p->late++;
}

const policy_ops delta_policy_delta = {
    .name = "delta",
    .create = delta_create,
    .destroy = delta_destroy,
    .begin_step = delta_begin,
    .end_step = delta_end,
    .before_op = delta_before,
    .after_op = delta_after,
    .choose_victim = delta_choose,
    .on_event = delta_event,
};
