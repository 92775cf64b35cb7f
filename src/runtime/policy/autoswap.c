/* autoswap: AutoSwap (Zhang, Yeung, Shu, He, Wang, "Efficient Memory
 * Management for GPU-based Deep Learning Systems", arXiv 1903.06631, 2019),
 * the swap-only peer that plans from the iteration's regularity: every
 * training step runs the same access sequence, so one static plan says
 * which tensor leaves the device in which idle interval and when its
 * copies are issued. No recomputation: nothing is ever dropped.
 *
 * The plan (begin_step; the per-op hooks only walk precomputed lists):
 *
 *  1. Timeline. T[i] = start of op i, summing managed_op_seconds over the
 *     run. The first step only has the backend's cost model (or the flops
 *     estimate); the plan is made again once every op of the run has been
 *     measured (the second step, when the link model has the first step's
 *     copies too) and then kept, as the paper profiles one iteration and
 *     replays the plan.
 *  2. Load. Bytes alive at op i with everything kept: persistent roots all
 *     step, other roots from their producer to their last access, plus the
 *     op's workspace. The limit is the budget minus budget/32: a prefetch
 *     never evicts nor defragments (it waits for a later op), copies land
 *     at op boundaries only approximately where the plan expects, and the
 *     online pool fragments, so the plan leaves that much free. When the
 *     kept peak fits the budget there is no plan and no margin.
 *  3. Candidates: (root, gap) pairs. A root's access points are its
 *     producer and every op reading or writing it; a gap lies between two
 *     consecutive points a < b with at least one op between. Persistent
 *     roots (parameters, optimizer state, inputs) also have the gap from
 *     their last access around the step boundary to their first ("wrap":
 *     swapped out after the last access, back before the first in the next
 *     step) or, when a run never touches them (optimizer state in a
 *     forward-only run), one gap over the whole run ("idle": swapped out in
 *     begin_step). Any kind may be swapped; outputs the caller reads after
 *     the run are not. A candidate straddles the peak-load op and its root
 *     is large enough: the paper's 1 MB blocks, scaled for small programs
 *     to min(1 MiB, 1% of the kept peak), so that tiny models have
 *     candidates while the count stays bounded. Straddling is judged on the
 *     gap's own absence (below): a gap whose copies cannot both fit around
 *     the peak saves nothing there.
 *  4. Scores, as in the paper: DOA (seconds from the end of a to the start
 *     of b), AOA (DOA x bytes) and WDOA (the over-limit area during the
 *     gap: integral of max(0, load - limit) dt, byte-seconds). Rank voting:
 *     each candidate's ranks under the three scores (1 = best, ties share
 *     one) are summed and the smallest sum is taken (ties: larger AOA, then
 *     the earlier gap). After each pick the copies are scheduled again and
 *     the load, the peak, the candidates and WDOA recomputed, until the
 *     peak fits the limit or no candidate is left.
 *  5. Schedule. Swap-outs are issued in after_op(a), serialized on the
 *     to-host stream in issue order: a copy starts at max(end of op a, end
 *     of the previous swap-out) and takes managed_link_seconds(bytes) (the
 *     runtime's a x bytes + b fitted to measured copies); the bytes are gone
 *     from the first op boundary after it ends. Swap-ins are scheduled
 *     backwards from the next access b, latest deadline first: a copy must
 *     end by min(start of b, start of the swap-in scheduled after it on the
 *     same in-order stream), so it starts one transfer earlier, and it is
 *     issued in before_op(k) for the latest op k starting no later than
 *     that. (This is "the latest k with time(k .. b) >= transfer + the
 *     swap-ins already scheduled later", counting only the later swap-ins
 *     that overlap it.) The root is away from its swap-out's landing to k.
 *     A pick that ends up with no absence once serialized with the others,
 *     or that leaves another with none, is rejected.
 *  6. Beyond the paper: when no hidden swap is left and the peak is still
 *     over the limit (the link cannot carry what the budget asks for within
 *     the step), the paper's method has no overhead-free plan. Rather than
 *     fail, planning goes on accepting stalls, as the paper's overhead
 *     measurements at tight limits do: every gap whose accesses straddle
 *     the peak is a candidate (rejected ones too), a swapped root counts as
 *     away from the op after a (the runtime waits for its swap-out when it
 *     needs the bytes), and a swap-in is delayed, if need be, past the
 *     over-limit run of ops it was taken for (compute waits for it at b). A
 *     taken gap whose swap-in falls before the peak is a candidate again,
 *     to delay it further. Same scores, same voting.
 *  7. Run. after_op(a) swaps out; before_op(k) prefetches; a prefetch that
 *     gets no memory (or finds the swap-out not landed yet) is retried
 *     before every later op until b, where the runtime brings the root in
 *     on demand. begin_step swaps out idle roots and wrap roots still on
 *     the device (the first step, or after a forward-only run), so each
 *     step starts in the plan's steady state.
 *  8. choose_victim. The plan is static, but a step must not fail on a
 *     misestimate (timing, fragmentation): as a fallback it swaps out (never
 *     drops) the resident unpinned root whose next use is latest (Belady;
 *     roots of the candidate size first, then larger ones), or returns -1
 *     when nothing is resident and unpinned.
 *
 * Simplified relative to the paper: op granularity instead of the
 * allocator's malloc/free/read/write trace (the program gives every access
 * statically, so there is no profiling pass of its own); equal weights in
 * the rank voting (the paper also tunes score combinations with Bayesian
 * optimization); tensors are alive for whole ops; a swap-out of a root
 * whose host copy is still valid costs nothing in the runtime but is
 * planned as a full copy; wrap swap-outs that land after the step's end
 * (the runtime waits for them there) and wrap swap-ins that cannot finish
 * before their first access even from op 0 (they stall; they are not
 * issued in the previous step) are planned as they come; SmartPool, the
 * paper's placement half, is not used: the runtime's online pool places
 * tensors, which the margin accounts for. Planning is O(S x (n + C log C))
 * for S picks, n ops, C gaps. */
#include "runtime/managed.h"
#include "delta/pool.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AS_BLOCK_MAX ((size_t)1 << 20) /* the paper's 1 MB candidate blocks */
#define AS_BLOCK_PEAK_DIV 100          /* ... or 1% of the kept peak */
#define AS_MARGIN_DIV 32               /* limit = budget - budget / 32 */

enum { GAP_FREE, GAP_TAKEN, GAP_DEAD };
enum { GAP_INNER, GAP_WRAP, GAP_IDLE };

/* One idle interval of a root. Inner: accesses a < b. Wrap: a is the last
 * access of the run, b the first. Idle: no access (a = -1, b = n). */
typedef struct gap {
    int r, a, b;
    int type, state;
    size_t bytes;
    double xfer;            /* seconds for one copy of it */
    double doa, aoa, wdoa;
    int cov0, cov1;         /* its absence on its own: ops [cov0, cov1)
                               (wrap: [cov0, n) and [0, cov1)) */
    bool hideable;          /* that absence is not empty */
    int in_min;             /* with stalls: its swap-in comes no earlier */
    int out_op, in_op;      /* its absence in the schedule, as cov0/cov1 */
    int rank;               /* rank sum while voting */
} gap;

/* A plan for one kind of run (training step or forward-only run). */
typedef struct plan {
    bool made, measured;
    int n;                     /* ops in the run */
    int n_gaps;
    gap *g;
    int *out_start, *out_list; /* per op: gaps to swap out after it */
    int *in_start, *in_list;   /* per op: gaps to prefetch before it */
    int *begin_list, n_begin;  /* gaps to swap out in begin_step */
    size_t block;              /* candidate size threshold */
} plan;

typedef struct autoswap {
    plan pl[2];              /* [0] training steps, [1] forward-only runs */
    int cur;                 /* plan of the run in progress, -1 none */
    int n_run;               /* ops of the run in progress */
    int *pending, n_pending; /* gaps whose prefetch is being retried */
    int pending_cap;
} autoswap;

/* A sort key: larger key first, then smaller id. */
typedef struct keyed {
    double key;
    int id;
} keyed;

/* Planning scratch, alive during plan_make only. */
typedef struct scratch {
    int n;
    double *T;              /* op start times, T[n] = end of run */
    int64_t *base, *load;   /* bytes alive per op (n + 1: differences) */
    double *over;           /* over-limit area before each op (n + 1) */
    int *taken, n_taken;    /* gap ids, in order of picking */
    int *ord_doa, *ord_aoa; /* every gap, best first */
    int *cand, n_cand;      /* candidates of the current peak */
    bool *in_cand;
    int *tmp;
    keyed *keys;
    int64_t limit;
    bool stalls;            /* second phase: transfers may stall compute */
} scratch;

static void plan_clear(plan *pl) {
    free(pl->g);
    free(pl->out_start);
    free(pl->out_list);
    free(pl->in_start);
    free(pl->in_list);
    free(pl->begin_list);
    memset(pl, 0, sizeof *pl);
}

static void *as_create(managed *m) {
    (void)m;
    autoswap *as = calloc(1, sizeof *as);
    if (as) as->cur = -1;
    return as;
}

static void as_destroy(void *p) {
    autoswap *as = p;
    plan_clear(&as->pl[0]);
    plan_clear(&as->pl[1]);
    free(as->pending);
    free(as);
}

/* ---- sorting ------------------------------------------------------------- */

static int cmp_keyed(const void *x, const void *y) {
    const keyed *a = x, *b = y;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

enum { BY_DOA, BY_AOA, BY_WDOA, BY_ISSUE, BY_DEADLINE };

static double key_of(const gap *g, int by) {
    switch (by) {
    case BY_DOA: return g->doa;
    case BY_AOA: return g->aoa;
    case BY_WDOA: return g->wdoa;
    case BY_ISSUE: return -(double)g->a;   /* swap-outs: earliest first */
    default: return (double)g->b;          /* swap-ins: latest first */
    }
}

/* Sorts gap ids by one of the keys above (ties: smaller id first); buf
 * holds n keys. */
static void sort_gaps(const gap *g, int *ids, int n, int by, keyed *buf) {
    for (int k = 0; k < n; k++) buf[k] = (keyed){key_of(&g[ids[k]], by), ids[k]};
    qsort(buf, (size_t)n, sizeof *buf, cmp_keyed);
    for (int k = 0; k < n; k++) ids[k] = buf[k].id;
}

/* ---- timeline and load --------------------------------------------------- */

/* Ops of a run: all of them, or the forward prefix. */
static int run_length(const managed *m, bool fwd_only) {
    const delta_ctx *c = managed_ctx(m);
    if (!fwd_only) return c->n_ops;
    int n = 0;
    while (n < c->n_ops && c->ops[n].phase == DELTA_PHASE_FORWARD) n++;
    return n;
}

static bool run_measured(const managed *m, int n) {
    for (int i = 0; i < n; i++)
        if (!managed_op_measured(m, i)) return false;
    return true;
}

/* First i in [lo, n] with T[i] >= t (n when none). */
static int first_at_or_after(const double *T, int lo, int n, double t) {
    int hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (T[mid] >= t) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Last k in [0, hi] with T[k] <= t, -1 when none. */
static int last_at_or_before(const double *T, int hi, double t) {
    int lo = 0, end = hi + 1;
    while (lo < end) {
        int mid = lo + (end - lo) / 2;
        if (T[mid] <= t) lo = mid + 1;
        else end = mid;
    }
    return lo - 1;
}

/* Root v's last op in a run of n ops: its last access, at least its
 * producer. */
static int root_end(const root_view *v, int n) {
    int end = v->producer;
    for (int k = 0; k < v->n_acc && v->acc[k] < n; k++)
        if (v->acc[k] > end) end = v->acc[k];
    return end;
}

/* Bytes alive at each op with everything kept. */
static void base_load(const managed *m, scratch *s) {
    const delta_ctx *c = managed_ctx(m);
    int n = s->n;
    memset(s->base, 0, sizeof(int64_t) * ((size_t)n + 1));
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (!v) continue;
        int64_t b = (int64_t)v->bytes;
        if (v->persistent) {
            s->base[0] += b;
            s->base[n] -= b;
        } else if (v->producer >= 0 && v->producer < n) {
            s->base[v->producer] += b;
            s->base[root_end(v, n) + 1] -= b;
        }
    }
    for (int i = 0; i < n; i++)
        if (c->ops[i].workspace) {
            int64_t w = (int64_t)delta_pool_round(c->ops[i].workspace);
            s->base[i] += w;
            s->base[i + 1] -= w;
        }
    for (int i = 1; i <= n; i++) s->base[i] += s->base[i - 1];
}

/* Whether g is away at op in the schedule (taken gaps). */
static bool away_at(const gap *g, int op) {
    if (g->type == GAP_WRAP) return op >= g->out_op || op < g->in_op;
    return op >= g->out_op && op < g->in_op;
}

/* load = base minus every taken gap's absence, and the over-limit area
 * prefix for WDOA; returns the peak op. */
static int update_load(const plan *pl, scratch *s) {
    int n = s->n;
    memset(s->load, 0, sizeof(int64_t) * ((size_t)n + 1));
    for (int k = 0; k < s->n_taken; k++) {
        const gap *g = &pl->g[s->taken[k]];
        int64_t b = (int64_t)g->bytes;
        if (g->type == GAP_INNER) {
            s->load[g->out_op] -= b;
            s->load[g->in_op] += b;
            continue;
        }
        if (g->out_op < n) { /* idle, or the wrap's tail */
            s->load[g->out_op] -= b;
            s->load[n] += b;
        }
        if (g->type == GAP_WRAP && g->in_op > 0) { /* the wrap's head */
            s->load[0] -= b;
            s->load[g->in_op] += b;
        }
    }
    int peak = 0;
    int64_t run = 0;
    s->over[0] = 0;
    for (int i = 0; i < n; i++) {
        run += s->load[i];
        s->load[i] = run + s->base[i];
        if (s->load[i] > s->load[peak]) peak = i;
        int64_t x = s->load[i] - s->limit;
        s->over[i + 1] =
            s->over[i] + (x > 0 ? (double)x * (s->T[i + 1] - s->T[i]) : 0);
    }
    return peak;
}

/* ---- candidates ---------------------------------------------------------- */

static void gap_init(const managed *m, const scratch *s, gap *g, int r,
                     int a, int b, int type) {
    const root_view *v = managed_root(m, r);
    const double *T = s->T;
    int n = s->n;
    memset(g, 0, sizeof *g);
    g->r = r;
    g->a = a;
    g->b = b;
    g->type = type;
    g->state = GAP_FREE;
    g->bytes = v->bytes;
    g->xfer = managed_link_seconds(m, v->bytes);
    if (type == GAP_INNER) g->doa = T[b] - T[a + 1];
    else if (type == GAP_WRAP) g->doa = (T[n] - T[a + 1]) + T[b];
    else g->doa = T[n];
    g->aoa = g->doa * (double)g->bytes;
    /* on its own: away from its swap-out's landing to its swap-in's issue */
    int lo = type == GAP_IDLE ? 0 : a + 1;
    g->cov0 = first_at_or_after(T, lo, n, T[lo] + g->xfer);
    if (type == GAP_IDLE) {
        g->cov1 = n;
    } else {
        int k = last_at_or_before(T, b, T[b] - g->xfer);
        g->cov1 = k < 0 ? 0 : k;
    }
    g->hideable = type == GAP_WRAP ? g->cov0 < n || g->cov1 > 0
                                   : g->cov0 < g->cov1;
}

/* Builds every large enough root's gaps into pl->g. */
static bool build_gaps(const managed *m, plan *pl, const scratch *s) {
    int n = s->n, cap = 0;
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (v && v->bytes >= pl->block) cap += v->n_acc + 2;
    }
    pl->g = malloc(sizeof(gap) * ((size_t)cap + 1));
    if (!pl->g) return false;
    int ng = 0;
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->bytes < pl->block) continue;
        /* outputs the caller reads after the run stay where they are */
        if (v->persistent && v->producer >= 0) continue;
        if (!v->persistent && (v->producer < 0 || v->producer >= n)) continue;
        int prev = v->persistent ? -1 : v->producer, first = -1;
        for (int k = 0; k < v->n_acc && v->acc[k] < n; k++) {
            int x = v->acc[k];
            if (x <= prev) continue;
            if (first < 0) first = x;
            if (prev >= 0 && x >= prev + 2)
                gap_init(m, s, &pl->g[ng++], r, prev, x, GAP_INNER);
            prev = x;
        }
        if (!v->persistent) continue;
        if (first < 0) gap_init(m, s, &pl->g[ng++], r, -1, n, GAP_IDLE);
        else if (first > 0 || prev < n - 1)
            gap_init(m, s, &pl->g[ng++], r, prev, first, GAP_WRAP);
    }
    pl->n_gaps = ng;
    return true;
}

/* Whether g may be taken (or, taken, delayed) for the peak op: hidden (its
 * copies fit around op on their own), or, with stalls allowed, its
 * accesses straddle op. */
static bool covers(const gap *g, int op, bool stalls) {
    if (stalls) {
        if (g->type == GAP_WRAP) return op > g->a || op < g->b;
        return op > g->a && op < g->b;
    }
    if (!g->hideable) return false;
    if (g->type == GAP_WRAP) return op >= g->cov0 || op < g->cov1;
    return op >= g->cov0 && op < g->cov1;
}

/* ---- schedule ------------------------------------------------------------ */

static bool absence_empty(const gap *g, int n) {
    if (g->type == GAP_WRAP) return g->out_op >= n && g->in_op == 0;
    if (g->type == GAP_IDLE) return g->out_op >= n;
    return g->out_op >= g->in_op;
}

/* Swap-outs in issue order on the to-host stream. */
static void schedule_outs(plan *pl, scratch *s) {
    int n = s->n, nt = s->n_taken;
    memcpy(s->tmp, s->taken, sizeof(int) * (size_t)nt);
    sort_gaps(pl->g, s->tmp, nt, BY_ISSUE, s->keys);
    double stream = 0;
    for (int k = 0; k < nt; k++) {
        gap *g = &pl->g[s->tmp[k]];
        int lo = g->type == GAP_IDLE ? 0 : g->a + 1;
        double start = s->T[lo] > stream ? s->T[lo] : stream;
        stream = start + g->xfer;
        /* with stalls allowed the runtime waits for the copy when it needs
         * the bytes: away from the op after a */
        g->out_op = s->stalls ? lo : first_at_or_after(s->T, lo, n, stream);
    }
}

/* Swap-ins backwards from their deadlines on the to-device stream. */
static void schedule_ins(plan *pl, scratch *s) {
    int ni = 0;
    for (int k = 0; k < s->n_taken; k++) {
        gap *g = &pl->g[s->taken[k]];
        if (g->type == GAP_IDLE) g->in_op = s->n; /* never back in the run */
        else s->tmp[ni++] = s->taken[k];
    }
    sort_gaps(pl->g, s->tmp, ni, BY_DEADLINE, s->keys);
    double lim = s->T[s->n];
    for (int k = 0; k < ni; k++) {
        gap *g = &pl->g[s->tmp[k]];
        double end = s->T[g->b] < lim ? s->T[g->b] : lim;
        lim = end - g->xfer;
        int op = last_at_or_before(s->T, g->b, lim);
        g->in_op = op < 0 ? 0 : op;
        /* with stalls allowed it stays away over the peaks it was taken
         * for and arrives late rather than not leaving */
        if (s->stalls && g->in_op < g->in_min) g->in_op = g->in_min;
    }
}

/* Schedules the taken gaps' copies; false when some absence is empty. */
static bool schedule(plan *pl, scratch *s) {
    schedule_outs(pl, s);
    schedule_ins(pl, s);
    for (int k = 0; k < s->n_taken; k++)
        if (absence_empty(&pl->g[s->taken[k]], s->n)) return false;
    return true;
}

/* ---- rank voting --------------------------------------------------------- */

static double wdoa(const gap *g, const scratch *s) {
    int n = s->n;
    if (g->type == GAP_IDLE) return s->over[n];
    if (g->type == GAP_INNER) return s->over[g->b] - s->over[g->a + 1];
    return s->over[n] - s->over[g->a + 1] + s->over[g->b];
}

/* Adds to each candidate its rank under score `by`, walking `order` (best
 * first) and counting only candidates; equal scores share a rank. */
static void add_ranks(gap *g, const int *order, int n_order,
                      const bool *in_cand, int by) {
    int seen = 0, rank = 0;
    double last = 0;
    for (int k = 0; k < n_order; k++) {
        int i = order[k];
        if (!in_cand[i]) continue;
        double v = key_of(&g[i], by);
        seen++;
        if (seen == 1 || v != last) rank = seen;
        last = v;
        g[i].rank += rank;
    }
}

/* The candidate with the best rank sum for the peak op, -1 when none. With
 * stalls, a taken gap whose swap-in comes before the peak is a candidate
 * too (to delay that swap-in). */
static int vote(plan *pl, scratch *s, int peak) {
    s->n_cand = 0;
    for (int i = 0; i < pl->n_gaps; i++) {
        gap *g = &pl->g[i];
        bool open = g->state == GAP_FREE ||
                    (s->stalls && g->state == GAP_TAKEN && !away_at(g, peak));
        s->in_cand[i] = open && covers(g, peak, s->stalls);
        if (!s->in_cand[i]) continue;
        g->rank = 0;
        g->wdoa = wdoa(g, s);
        s->cand[s->n_cand++] = i;
    }
    if (s->n_cand == 0) return -1;
    add_ranks(pl->g, s->ord_doa, pl->n_gaps, s->in_cand, BY_DOA);
    add_ranks(pl->g, s->ord_aoa, pl->n_gaps, s->in_cand, BY_AOA);
    sort_gaps(pl->g, s->cand, s->n_cand, BY_WDOA, s->keys);
    add_ranks(pl->g, s->cand, s->n_cand, s->in_cand, BY_WDOA);
    int best = -1;
    for (int k = 0; k < s->n_cand; k++) {
        int i = s->cand[k];
        const gap *g = &pl->g[i], *b = best >= 0 ? &pl->g[best] : NULL;
        if (!b || g->rank < b->rank ||
            (g->rank == b->rank &&
             (g->aoa > b->aoa || (g->aoa == b->aoa && i < best))))
            best = i;
    }
    return best;
}

/* With stalls: g stays away over the whole over-limit run of ops from the
 * peak on (delaying only past the peak would move the peak one op at a
 * time). */
static void delay_swap_in(gap *g, const scratch *s, int peak) {
    if (g->type == GAP_WRAP && peak > g->a) return; /* the tail covers it */
    int q = peak + 1;
    while (q < g->b && s->load[q] > s->limit) q++;
    if (q > g->in_min) g->in_min = q;
}

/* Takes candidates until the peak fits the limit or none is left. */
static void choose_gaps(plan *pl, scratch *s) {
    int ng = pl->n_gaps;
    for (int i = 0; i < ng; i++) s->ord_doa[i] = s->ord_aoa[i] = i;
    sort_gaps(pl->g, s->ord_doa, ng, BY_DOA, s->keys);
    sort_gaps(pl->g, s->ord_aoa, ng, BY_AOA, s->keys);
    s->n_taken = 0;
    s->stalls = false;
    for (;;) {
        int peak = update_load(pl, s);
        if (s->load[peak] <= s->limit) return;
        int best = vote(pl, s, peak);
        if (best < 0 && s->stalls) return;
        if (best < 0) {
            /* no hidden swap is left: go on accepting stalls */
            s->stalls = true;
            for (int i = 0; i < ng; i++)
                if (pl->g[i].state == GAP_DEAD) pl->g[i].state = GAP_FREE;
            schedule(pl, s);
            continue;
        }
        gap *g = &pl->g[best];
        if (s->stalls) delay_swap_in(g, s, peak);
        if (g->state == GAP_TAKEN) { /* delayed */
            schedule(pl, s);
            continue;
        }
        g->state = GAP_TAKEN;
        s->taken[s->n_taken++] = best;
        if (!schedule(pl, s) && !s->stalls) {
            /* no absence left to it or to another once serialized */
            g->state = GAP_DEAD;
            s->n_taken--;
            schedule(pl, s);
        }
    }
}

/* ---- the plan's action lists --------------------------------------------- */

/* Per-op lists (CSR) from (op, gap) pairs in the order they are acted on. */
static bool make_lists(int n, const int *ops, const int *ids, int cnt,
                       int **start, int **list) {
    *start = calloc((size_t)n + 2, sizeof(int));
    *list = malloc(sizeof(int) * ((size_t)cnt + 1));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    bool ok = *start && *list && fill;
    if (ok) {
        for (int k = 0; k < cnt; k++) (*start)[ops[k] + 1]++;
        for (int i = 0; i <= n; i++) (*start)[i + 1] += (*start)[i];
        for (int k = 0; k < cnt; k++)
            (*list)[(*start)[ops[k]] + fill[ops[k]]++] = ids[k];
    }
    free(fill);
    return ok;
}

static bool build_actions(plan *pl, scratch *s) {
    int n = s->n, nt = s->n_taken;
    int *ops = calloc((size_t)nt + 1, sizeof(int));
    int *ids = calloc((size_t)nt + 1, sizeof(int));
    pl->begin_list = malloc(sizeof(int) * ((size_t)nt + 1));
    bool ok = ops && ids && pl->begin_list;
    if (ok) { /* swap-outs, in the order the schedule serialized them */
        memcpy(s->tmp, s->taken, sizeof(int) * (size_t)nt);
        sort_gaps(pl->g, s->tmp, nt, BY_ISSUE, s->keys);
        int c = 0;
        for (int k = 0; k < nt; k++) {
            const gap *g = &pl->g[s->tmp[k]];
            if (g->type == GAP_IDLE || (g->type == GAP_WRAP && g->in_op > 0))
                pl->begin_list[pl->n_begin++] = s->tmp[k];
            if (g->type == GAP_IDLE) continue;
            ops[c] = g->a;
            ids[c++] = s->tmp[k];
        }
        ok = make_lists(n, ops, ids, c, &pl->out_start, &pl->out_list);
    }
    if (ok) { /* swap-ins, earliest deadline first within an op */
        int ni = 0;
        for (int k = 0; k < nt; k++)
            if (pl->g[s->taken[k]].type != GAP_IDLE) s->tmp[ni++] = s->taken[k];
        sort_gaps(pl->g, s->tmp, ni, BY_DEADLINE, s->keys);
        for (int k = 0; k < ni; k++) {
            ids[k] = s->tmp[ni - 1 - k];
            ops[k] = pl->g[ids[k]].in_op;
        }
        ok = make_lists(n, ops, ids, ni, &pl->in_start, &pl->in_list);
    }
    free(ops);
    free(ids);
    return ok;
}

/* ---- making a plan ------------------------------------------------------- */

static void scratch_free(scratch *s) {
    free(s->T);
    free(s->base);
    free(s->load);
    free(s->over);
    free(s->taken);
    free(s->ord_doa);
    free(s->ord_aoa);
    free(s->cand);
    free(s->in_cand);
    free(s->tmp);
    free(s->keys);
}

/* Timeline, kept load, threshold and limit. */
static bool plan_setup(const managed *m, plan *pl, scratch *s) {
    int n = s->n;
    size_t n1 = (size_t)n + 1;
    s->T = malloc(sizeof(double) * n1);
    s->base = malloc(sizeof(int64_t) * n1);
    s->load = malloc(sizeof(int64_t) * n1);
    s->over = malloc(sizeof(double) * n1);
    if (!s->T || !s->base || !s->load || !s->over) return false;
    s->T[0] = 0;
    for (int i = 0; i < n; i++) s->T[i + 1] = s->T[i] + managed_op_seconds(m, i);
    base_load(m, s);
    int64_t peak0 = 0;
    for (int i = 0; i < n; i++)
        if (s->base[i] > peak0) peak0 = s->base[i];
    size_t frac = (size_t)peak0 / AS_BLOCK_PEAK_DIV;
    pl->block = frac < AS_BLOCK_MAX ? frac : AS_BLOCK_MAX;
    size_t budget = managed_budget(m);
    /* everything fits: nothing to plan, no margin to keep */
    s->limit = (size_t)peak0 <= budget
                   ? (int64_t)budget
                   : (int64_t)(budget - budget / AS_MARGIN_DIV);
    return true;
}

static bool plan_make(const managed *m, plan *pl, bool fwd_only) {
    plan_clear(pl);
    scratch s = {0};
    s.n = pl->n = run_length(m, fwd_only);
    bool ok = s.n > 0 && plan_setup(m, pl, &s) && build_gaps(m, pl, &s);
    if (ok) {
        size_t ng = (size_t)pl->n_gaps + 1;
        s.taken = malloc(sizeof(int) * ng);
        s.ord_doa = malloc(sizeof(int) * ng);
        s.ord_aoa = malloc(sizeof(int) * ng);
        s.cand = malloc(sizeof(int) * ng);
        s.in_cand = malloc(sizeof(bool) * ng);
        s.tmp = malloc(sizeof(int) * ng);
        s.keys = malloc(sizeof(keyed) * ng);
        ok = s.taken && s.ord_doa && s.ord_aoa && s.cand && s.in_cand &&
             s.tmp && s.keys;
    }
    if (ok) {
        choose_gaps(pl, &s);
        ok = build_actions(pl, &s);
    }
    scratch_free(&s);
    if (!ok) {
        plan_clear(pl);
        return false;
    }
    pl->made = true;
    pl->measured = run_measured(m, pl->n);
    return true;
}

/* ---- running the plan ---------------------------------------------------- */

static void as_begin(void *p, managed *m, int64_t step, bool fwd_only) {
    (void)step;
    autoswap *as = p;
    int idx = fwd_only ? 1 : 0;
    plan *pl = &as->pl[idx];
    int n = run_length(m, fwd_only);
    if (!pl->made || pl->n != n || (!pl->measured && run_measured(m, n)))
        plan_make(m, pl, fwd_only);
    as->n_run = n;
    as->n_pending = 0;
    as->cur = -1;
    if (!pl->made) return; /* out of host memory: the fallback alone */
    if (as->pending_cap < pl->n_gaps) {
        int *q = realloc(as->pending, sizeof(int) * ((size_t)pl->n_gaps + 1));
        if (!q) return;
        as->pending = q;
        as->pending_cap = pl->n_gaps;
    }
    as->cur = idx;
    /* the steady state: roots planned to be away at the start are away */
    for (int k = 0; k < pl->n_begin; k++) {
        int r = pl->g[pl->begin_list[k]].r;
        if (managed_root(m, r)->state == RES_DEVICE && !managed_pinned(m, r))
            managed_swap_out(m, r);
    }
}

static void as_end(void *p, managed *m, bool ok) {
    (void)m;
    (void)ok;
    autoswap *as = p;
    as->n_pending = 0;
    as->cur = -1;
}

/* Starts g's swap-in; true when there is nothing left to retry. */
static bool try_prefetch(managed *m, const gap *g, int op) {
    if (op >= g->b) return true; /* the op brings it in on demand */
    residency st = managed_root(m, g->r)->state;
    if (st == RES_HOST) return managed_prefetch(m, g->r);
    return st != RES_TO_HOST; /* its swap-out has not landed yet */
}

static void as_before(void *p, managed *m, int op) {
    autoswap *as = p;
    if (as->cur < 0) return;
    const plan *pl = &as->pl[as->cur];
    int k = 0;
    for (int i = 0; i < as->n_pending; i++) {
        int gi = as->pending[i];
        if (!try_prefetch(m, &pl->g[gi], op)) as->pending[k++] = gi;
    }
    as->n_pending = k;
    for (int j = pl->in_start[op]; j < pl->in_start[op + 1]; j++) {
        int gi = pl->in_list[j];
        if (!try_prefetch(m, &pl->g[gi], op) && as->n_pending < as->pending_cap)
            as->pending[as->n_pending++] = gi;
    }
}

static void as_after(void *p, managed *m, int op) {
    autoswap *as = p;
    if (as->cur < 0) return;
    const plan *pl = &as->pl[as->cur];
    for (int j = pl->out_start[op]; j < pl->out_start[op + 1]; j++) {
        int r = pl->g[pl->out_list[j]].r;
        if (managed_root(m, r)->state == RES_DEVICE && !managed_pinned(m, r))
            managed_swap_out(m, r);
    }
}

/* Fallback: the resident unpinned root used again latest (roots of the
 * candidate size first, then the larger), swapped out. */
static int as_choose(void *p, managed *m, size_t need, bool *drop) {
    (void)need;
    const autoswap *as = p;
    size_t block = as->cur >= 0 ? as->pl[as->cur].block : 0;
    int cur = managed_cur_op(m), n = as->n_run;
    int best = -1, best_next = 0;
    bool best_big = false;
    size_t best_bytes = 0;
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, r)) continue;
        int next = managed_next_use(m, r, cur);
        if (next < 0 || next >= n) next = INT_MAX; /* not in this run */
        bool big = v->bytes >= block;
        bool better = best < 0 || (big != best_big ? big
                                   : next != best_next ? next > best_next
                                   : v->bytes > best_bytes);
        if (!better) continue;
        best = r;
        best_next = next;
        best_big = big;
        best_bytes = v->bytes;
    }
    *drop = false;
    return best;
}

const policy_ops delta_policy_autoswap = {
    .name = "autoswap",
    .create = as_create,
    .destroy = as_destroy,
    .begin_step = as_begin,
    .end_step = as_end,
    .before_op = as_before,
    .after_op = as_after,
    .choose_victim = as_choose,
};
