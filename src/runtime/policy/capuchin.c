/* capuchin: Capuchin (Peng et al., "Capuchin: Tensor-based GPU Memory
 * Management for Deep Learning", ASPLOS 2020), at op granularity.
 *
 * 1. Measured execution (the first training step), passive mode: when an
 *    allocation does not fit, the least-recently-used unpinned resident
 *    tensor is swapped out (never dropped); an op that needs it later swaps
 *    it back in on demand. Victims come by tier, LRU within a tier:
 *    activations first, then the other per-step tensors (gradients), then
 *    persistent ones (parameters, optimizer state, inputs) -- any kind may
 *    go, so that a step never fails while anything can still move. The
 *    profile is the op times the runtime measured in this step and the
 *    static access lists.
 *
 * 2. Plan (begin_step of the second training step). The memory timeline of
 *    the step with every tensor kept -- bytes held during each op:
 *    persistent tensors throughout, the others from their producer to their
 *    last use, plus the op's workspace -- in a segment tree (range add,
 *    range max, last op above a level). Nothing is planned when its peak
 *    fits the budget. Every idle interval of a root between two accesses
 *    (a -> b; the producer counts as an activation's first access) is a
 *    candidate, with the swap free time
 *        FT = (start of b - end of a) - 2 x link(bytes)
 *    (swap-out after a, swap-in done before b). The target is the budget
 *    less MARGIN_PCT of it, kept free for fragmentation (a prefetch needs a
 *    contiguous gap and does not evict), recomputation's transient tensors,
 *    and copies landing a little later than the linear link model says.
 *    a. Swaps that hide (FT >= 0), largest FT first, each taken if the
 *       bytes it frees -- from the op where its swap-out has landed to the
 *       op before its in-trigger -- cover an op still over the target.
 *    b. If that is not enough, the hybrid: each remaining candidate is
 *       priced by the cheaper of its swap (overhead -FT, or the stall its
 *       in-trigger must accept to cover the over-target ops, if larger) and,
 *       for droppable activations, its recomputation (the measured time of
 *       its producer chain back to tensors on the device at b), and taken
 *       best memory saving per second (bytes / overhead) first. A lazy
 *       max-heap re-prices a candidate when it is popped, since each pick
 *       can lengthen other chains. Tensors a planned recomputation reads at
 *       b are locked on the device there.
 *    The timeline is updated after each pick (a swap frees its bytes between
 *    the landing of its swap-out and its in-trigger, a drop from a + 1 to
 *    b - 1); planning stops when every op fits the target or nothing covers
 *    an op over it. Planning is O(n log n) in accesses and ops.
 *
 * 3. Guided execution (every later training step). Planned swap-outs and
 *    drops are issued in after_op(a). The swap-in of a swapped interval is
 *    issued in before_op of its in-trigger k < b, found by walking back
 *    from b to the latest op whose start leaves link(bytes) of measured
 *    time before b starts; a prefetch that finds no gap (or whose swap-out
 *    has not landed) is retried at each following op until b. Dropped
 *    tensors are recomputed on demand when b needs them, as in the paper
 *    (the runtime's recursive recomputation; no trigger for recomputation).
 *    Feedback: when on_event reports MEV_LATE for a planned swap-in that was
 *    issued, its in-trigger moves one op earlier for the next steps (the
 *    paper's dynamic adjustment), never before its swap-out has landed.
 *    Whatever the plan got wrong falls back on the passive LRU swap of step
 *    1 (a prefetch counts as an access for LRU); when nothing resident can
 *    leave but swap-ins in flight hold bytes, the one needed last is waited
 *    for and sent back (its host copy is valid, so that is immediate).
 *
 * Simplifications and generalisations, with reasons:
 *  - Granularity is the op, not the tensor access inside TensorFlow's
 *    executor; times are the runtime's measured op times.
 *  - Persistent leaves (parameters, optimizer state, inputs) also get the
 *    interval from their last access in a step to their first in the next
 *    (the step repeats, so its access sequence is cyclic): delta keeps them
 *    inside the budget, where Capuchin's TensorFlow kept weights outside
 *    what it managed, and optimizer state has no other interval. Such swaps
 *    are issued after the last access and triggered in the next step (or at
 *    the end of this one); begin_step swaps out any still resident (the
 *    first guided step, or after an eval run).
 *  - Candidates are every interval, not a pre-filtered list of tensors
 *    accessed around the peak: an interval that covers no over-target op
 *    is never taken, which is the paper's filter.
 *  - Recomputation sources must be on the device at b under the plan (kept,
 *    or gone and themselves recomputable, recursively, at most CHAIN_MAX
 *    ops); a chain through a tensor the plan has released there is not
 *    taken rather than re-priced: the runtime would bring such a source
 *    back and keep it, which the timeline would not see. Transient bytes
 *    of a recomputation are left to the margin.
 *  - Transfers are priced one at a time (the paper's FT): two copies
 *    sharing the link are not modelled; the feedback moves the triggers of
 *    swap-ins that arrive late, one op per step.
 *  - No feedback for a swap planned late on purpose (in-trigger after the
 *    over-target ops, its stall priced in): moving it would put its bytes
 *    back where the timeline is over the target. None either for a swap-in
 *    whose prefetch never got a gap: an earlier trigger would not find one.
 *  - One plan, made once after the measured step, as in the paper;
 *    forward-only runs (eval) run passively. */
#include "runtime/managed.h"
#include "delta/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MARGIN_PCT 5   /* of the budget, kept free in the plan */
#define CHAIN_MAX 32   /* ops in one recomputation chain */
#define REPUSH_MAX 8   /* re-evaluations of one candidate in the heap */

enum { G_NONE, G_KEEP, G_SWAP, G_DROP, G_LOCKED };

/* The idle interval after one access of a root, on the doubled op axis
 * (b >= n: the access is in the next step). */
typedef struct gap {
    int r;
    int a, b;      /* the accesses around the interval */
    int i0;        /* first op at which a swap-out after a has landed */
    int k_hide;    /* latest in-trigger whose swap-in still hides */
    int k;         /* planned in-trigger (k == b: swap in on demand) */
    int k_floor;   /* earliest op feedback may move k to */
    int next;      /* next gap in the trigger list of k mod n */
    double ft;     /* swap free time, s */
    double link;   /* one transfer, s */
    uint8_t state;
    uint8_t tries; /* re-evaluations in the heap */
    bool feedback; /* planned to hide: feedback may move k */
    bool issued;   /* this step's prefetch was issued */
} gap;

typedef struct kv {
    double key;
    int g;
} kv;

typedef struct capuchin {
    int nr;              /* root ids are < nr */
    int n;               /* ops of the training step */
    bool measured;       /* a training step ran (op times are measured) */
    bool planned, plan_failed;
    bool guided;         /* the current run follows the plan */
    bool landing;        /* waiting for a swap-in to offer it as a victim */
    int64_t *touch;      /* per root: clock when we last prefetched it */
    /* access sequences: producer (if any), then the accesses */
    int *seq_start, *seq;
    gap *g;              /* one per access: the interval after it */
    double *ts;          /* start of op i on the doubled axis, [0, 2n] */
    /* segment tree over ops: bytes held with the plan so far */
    int64_t *mx, *lz;
    int64_t target;
    /* guided execution */
    int *after_start, *after; /* released after op a (CSR by a) */
    int *trig;                /* head of each op's trigger list, -1 */
    int *wrap;                /* swapped intervals across steps */
    int nwrap;
    int *pending;             /* triggers whose prefetch must be retried */
    int npending;
    /* planning scratch */
    int chain_ops[CHAIN_MAX];
    int chain_stk[CHAIN_MAX];
    kv *heap;
    int nheap;
} capuchin;

static void *cap_create(managed *m) {
    capuchin *P = calloc(1, sizeof *P);
    if (!P) return NULL;
    P->nr = managed_n_roots(m);
    P->touch = calloc((size_t)P->nr + 1, sizeof *P->touch);
    if (!P->touch) {
        free(P);
        return NULL;
    }
    return P;
}

static void plan_free(capuchin *P) {
    free(P->seq_start);
    free(P->seq);
    free(P->g);
    free(P->ts);
    free(P->mx);
    free(P->lz);
    free(P->after_start);
    free(P->after);
    free(P->trig);
    free(P->wrap);
    free(P->pending);
    free(P->heap);
}

static void cap_destroy(void *p) {
    capuchin *P = p;
    plan_free(P);
    free(P->touch);
    free(P);
}

/* ---- segment tree: range add, range max, last op above a level ---------- */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void st_build(capuchin *P, const int64_t *v, int x, int l, int r) {
    P->lz[x] = 0;
    if (l == r) {
        P->mx[x] = v[l];
        return;
    }
    int mid = (l + r) / 2;
    st_build(P, v, 2 * x, l, mid);
    st_build(P, v, 2 * x + 1, mid + 1, r);
    P->mx[x] = max64(P->mx[2 * x], P->mx[2 * x + 1]);
}

static void st_add(capuchin *P, int x, int l, int r, int ql, int qr,
                   int64_t d) {
    if (qr < l || r < ql) return;
    if (ql <= l && r <= qr) {
        P->mx[x] += d;
        P->lz[x] += d;
        return;
    }
    int mid = (l + r) / 2;
    st_add(P, 2 * x, l, mid, ql, qr, d);
    st_add(P, 2 * x + 1, mid + 1, r, ql, qr, d);
    P->mx[x] = max64(P->mx[2 * x], P->mx[2 * x + 1]) + P->lz[x];
}

/* Max over [ql, qr], which must overlap [l, r]. */
static int64_t st_max(const capuchin *P, int x, int l, int r, int ql, int qr) {
    if (ql <= l && r <= qr) return P->mx[x];
    int mid = (l + r) / 2;
    int64_t v = INT64_MIN;
    if (ql <= mid) v = st_max(P, 2 * x, l, mid, ql, qr);
    if (qr > mid) v = max64(v, st_max(P, 2 * x + 1, mid + 1, r, ql, qr));
    return v + P->lz[x];
}

/* Last op in [ql, qr] holding more than lvl, -1 if none. */
static int st_last_above(const capuchin *P, int x, int l, int r, int ql,
                         int qr, int64_t lvl) {
    if (qr < l || r < ql || P->mx[x] <= lvl) return -1;
    if (l == r) return l;
    int mid = (l + r) / 2;
    int64_t sub = lvl - P->lz[x];
    int k = st_last_above(P, 2 * x + 1, mid + 1, r, ql, qr, sub);
    return k >= 0 ? k : st_last_above(P, 2 * x, l, mid, ql, qr, sub);
}

/* The same on the doubled axis: [x, y] with y - x < n may run into the
 * next step, whose op i is this step's op i (the step repeats). */
static void cyc_add(capuchin *P, int x, int y, int64_t d) {
    int n = P->n;
    if (x > y) return;
    if (x >= n) x -= n, y -= n;
    if (y < n) {
        st_add(P, 1, 0, n - 1, x, y, d);
    } else {
        st_add(P, 1, 0, n - 1, x, n - 1, d);
        st_add(P, 1, 0, n - 1, 0, y - n, d);
    }
}

static int64_t cyc_max(const capuchin *P, int x, int y) {
    int n = P->n;
    if (x > y) return INT64_MIN;
    if (x >= n) x -= n, y -= n;
    if (y < n) return st_max(P, 1, 0, n - 1, x, y);
    return max64(st_max(P, 1, 0, n - 1, x, n - 1),
                 st_max(P, 1, 0, n - 1, 0, y - n));
}

static int cyc_last_above(const capuchin *P, int x, int y, int64_t lvl) {
    int n = P->n, shift = 0;
    if (x > y) return -1;
    if (x >= n) x -= n, y -= n, shift = n;
    if (y < n) {
        int k = st_last_above(P, 1, 0, n - 1, x, y, lvl);
        return k >= 0 ? k + shift : -1;
    }
    int k = st_last_above(P, 1, 0, n - 1, 0, y - n, lvl);
    if (k >= 0) return k + n;
    return st_last_above(P, 1, 0, n - 1, x, n - 1, lvl);
}

static bool over_target(const capuchin *P) { return P->mx[1] > P->target; }

/* ---- the profile: access sequences, timeline, times --------------------- */

/* A persistent leaf is swapped across the step boundary too. */
static bool wraps(const root_view *v) {
    return v->persistent && v->producer < 0;
}

static bool build_sequences(capuchin *P, managed *m) {
    int nr = P->nr;
    P->seq_start = calloc((size_t)nr + 1, sizeof(int));
    if (!P->seq_start) return false;
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        int len = 0;
        if (v) len = v->n_acc + (v->producer >= 0 &&
                                 (v->n_acc == 0 || v->acc[0] != v->producer));
        P->seq_start[r + 1] = P->seq_start[r] + len;
    }
    int total = P->seq_start[nr];
    P->seq = malloc(sizeof(int) * ((size_t)total + 1));
    P->g = calloc((size_t)total + 1, sizeof(gap));
    if (!P->seq || !P->g) return false;
    for (int r = 0; r < nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v) continue;
        int *s = P->seq + P->seq_start[r], k = 0;
        if (v->producer >= 0 && (v->n_acc == 0 || v->acc[0] != v->producer))
            s[k++] = v->producer;
        for (int j = 0; j < v->n_acc; j++) s[k++] = v->acc[j];
    }
    return true;
}

/* Bytes held during each op with every tensor kept. */
static void kept_timeline(capuchin *P, managed *m, int64_t *mem) {
    const delta_ctx *c = managed_ctx(m);
    int n = P->n;
    int64_t base = 0;
    memset(mem, 0, sizeof(int64_t) * ((size_t)n + 1));
    for (int r = 0; r < P->nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v) continue;
        if (v->persistent) {
            base += (int64_t)v->bytes;
        } else if (v->producer >= 0 && v->last_use >= v->producer) {
            mem[v->producer] += (int64_t)v->bytes;
            mem[v->last_use + 1] -= (int64_t)v->bytes;
        }
    }
    int64_t run = base;
    for (int i = 0; i < n; i++) {
        run += mem[i];
        mem[i] = run;
    }
    for (int i = 0; i < n; i++)
        if (c->ops[i].workspace)
            mem[i] += (int64_t)delta_pool_round(c->ops[i].workspace);
}

static void op_times(capuchin *P, managed *m) {
    int n = P->n;
    P->ts[0] = 0;
    for (int i = 0; i < 2 * n; i++)
        P->ts[i + 1] = P->ts[i] + managed_op_seconds(m, i % n);
}

/* First i in [lo, hi] with ts[i] >= t (hi + 1 if none). */
static int first_at(const capuchin *P, int lo, int hi, double t) {
    int l = lo, h = hi + 1;
    while (l < h) {
        int mid = (l + h) / 2;
        if (P->ts[mid] < t) l = mid + 1;
        else h = mid;
    }
    return l;
}

/* Fills every interval: swap timing, free time, and whether it can be a
 * candidate at all (an op between the accesses). */
static void build_gaps(capuchin *P, managed *m) {
    int n = P->n;
    for (int r = 0; r < P->nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v) continue;
        int s0 = P->seq_start[r], len = P->seq_start[r + 1] - s0;
        for (int j = 0; j < len; j++) {
            gap *g = &P->g[s0 + j];
            g->r = r;
            g->next = -1;
            g->state = G_NONE;
            g->a = P->seq[s0 + j];
            if (j + 1 < len) g->b = P->seq[s0 + j + 1];
            else if (wraps(v)) g->b = P->seq[s0] + n;
            else continue;
            if (g->b - g->a < 2) continue;
            g->state = G_KEEP;
            g->link = managed_link_seconds(m, v->bytes);
            double out_end = P->ts[g->a + 1] + g->link;
            double in_start = P->ts[g->b] - g->link;
            g->ft = in_start - out_end;
            g->i0 = first_at(P, g->a + 1, 2 * n, out_end);
            /* the latest k with ts[k] <= in_start */
            int k = first_at(P, g->a + 1, g->b, in_start);
            if (k > g->b || P->ts[k] > in_start) k--;
            g->k_hide = k < g->b ? k : g->b - 1;
            g->k = g->b;
        }
    }
}

/* ---- the plan ------------------------------------------------------------ */

/* The interval of root r that contains op b (0 <= b < n) strictly, or -1
 * when r is accessed at b or is not alive there. */
static int slot_at(const capuchin *P, managed *m, int r, int b) {
    const int *s = P->seq + P->seq_start[r];
    int len = P->seq_start[r + 1] - P->seq_start[r];
    if (len == 0) return -1;
    int l = 0, h = len;
    while (l < h) {
        int mid = (l + h) / 2;
        if (s[mid] < b) l = mid + 1;
        else h = mid;
    }
    if (l < len && s[l] == b) return -1;
    if (l == 0 || l == len)
        return wraps(managed_root(m, r)) ? P->seq_start[r] + len - 1 : -1;
    return P->seq_start[r] + l - 1;
}

static bool released(uint8_t st) { return st == G_SWAP || st == G_DROP; }

/* Seconds to recompute root r at op b from what is on the device there
 * under the plan so far, or -1 when it cannot be (a source the plan has
 * released, one that is gone and not recomputable, or a chain longer than
 * CHAIN_MAX ops). With lock, the sources are locked on the device at b. */
static double chain_cost(capuchin *P, managed *m, int r, int b, bool lock) {
    const delta_ctx *c = managed_ctx(m);
    int nops = 0, nstk = 0;
    double s = 0;
    P->chain_stk[nstk++] = r;
    while (nstk > 0) {
        int x = P->chain_stk[--nstk];
        int p = managed_root(m, x)->producer;
        bool seen = false;
        for (int k = 0; k < nops; k++) seen |= P->chain_ops[k] == p;
        if (seen) continue;
        if (nops == CHAIN_MAX) return -1;
        P->chain_ops[nops++] = p;
        s += managed_op_seconds(m, p);
        const delta_op *o = &c->ops[p];
        for (int j = 0; j < o->n_in; j++) {
            int y = delta_tensor_root(c, o->in[j]);
            const root_view *u = managed_root(m, y);
            if (u->persistent || u->last_use >= b) { /* alive at b */
                int sl = slot_at(P, m, y, b);
                if (sl < 0) continue;
                if (released(P->g[sl].state)) return -1;
                if (lock && P->g[sl].state == G_KEEP)
                    P->g[sl].state = G_LOCKED;
                continue;
            }
            /* gone by b: recomputed too, as a temporary */
            if (!u->droppable || nstk == CHAIN_MAX) return -1;
            P->chain_stk[nstk++] = y;
        }
    }
    return s;
}

static int cmp_key_desc(const void *x, const void *y) {
    double a = ((const kv *)x)->key, b = ((const kv *)y)->key;
    return a > b ? -1 : a < b;
}

/* Phase a: swaps that hide, largest free time first. */
static void pick_hiding_swaps(capuchin *P, managed *m, int ng) {
    kv *c = P->heap; /* scratch; the heap is built after */
    int nc = 0;
    for (int i = 0; i < ng; i++) {
        gap *g = &P->g[i];
        if (g->state == G_KEEP && g->ft >= 0 && g->k_hide > g->i0)
            c[nc++] = (kv){g->ft, i};
    }
    qsort(c, (size_t)nc, sizeof *c, cmp_key_desc);
    for (int j = 0; j < nc && over_target(P); j++) {
        gap *g = &P->g[c[j].g];
        if (cyc_max(P, g->i0, g->k_hide - 1) <= P->target) continue;
        int64_t bytes = (int64_t)managed_root(m, g->r)->bytes;
        g->state = G_SWAP;
        g->k = g->k_hide;
        g->feedback = true;
        cyc_add(P, g->i0, g->k - 1, -bytes);
    }
}

/* The cheaper way to release interval g that covers an op over the target:
 * *swap and *k (the in-trigger) for a swap; returns bytes / overhead, or
 * 0 when neither way covers an over-target op. */
static double evaluate(capuchin *P, managed *m, const gap *g, bool *swap,
                       int *k) {
    const root_view *v = managed_root(m, g->r);
    double best = -1;
    int last = g->i0 < g->b ? cyc_last_above(P, g->i0, g->b - 1, P->target)
                            : -1;
    if (last >= 0) {
        int kk = last + 1 > g->k_hide ? last + 1 : g->k_hide;
        double late = g->link - (P->ts[g->b] - P->ts[kk]);
        double ovh = -g->ft;
        if (late > ovh) ovh = late;
        best = ovh > 0 ? ovh : 0;
        *swap = true;
        *k = kk;
    }
    if (v->droppable && g->b < P->n &&
        cyc_max(P, g->a + 1, g->b - 1) > P->target) {
        double rc = chain_cost(P, m, g->r, g->b, false);
        if (rc >= 0 && (best < 0 || rc < best)) {
            best = rc;
            *swap = false;
        }
    }
    if (best < 0) return 0;
    return (double)v->bytes / (best > 1e-12 ? best : 1e-12);
}

static void heap_push(capuchin *P, double key, int g) {
    int i = P->nheap++;
    while (i > 0 && P->heap[(i - 1) / 2].key < key) {
        P->heap[i] = P->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    P->heap[i] = (kv){key, g};
}

static kv heap_pop(capuchin *P) {
    kv top = P->heap[0], last = P->heap[--P->nheap];
    int i = 0, n = P->nheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && P->heap[c + 1].key > P->heap[c].key) c++;
        if (P->heap[c].key <= last.key) break;
        P->heap[i] = P->heap[c];
        i = c;
    }
    if (n > 0) P->heap[i] = last;
    return top;
}

/* Phase b: the hybrid, best memory saving per second first. */
static void pick_hybrid(capuchin *P, managed *m, int ng) {
    P->nheap = 0;
    for (int i = 0; i < ng; i++) {
        if (P->g[i].state != G_KEEP) continue;
        bool swap;
        int k;
        double s = evaluate(P, m, &P->g[i], &swap, &k);
        if (s > 0) heap_push(P, s, i);
    }
    while (P->nheap > 0 && over_target(P)) {
        kv top = heap_pop(P);
        gap *g = &P->g[top.g];
        if (g->state != G_KEEP) continue;
        bool swap = false;
        int k = g->b;
        double s = evaluate(P, m, g, &swap, &k);
        if (s <= 0) continue; /* covers nothing over the target any more */
        if (s < top.key * (1 - 1e-9) && g->tries < REPUSH_MAX) {
            g->tries++;
            heap_push(P, s, top.g);
            continue;
        }
        int64_t bytes = (int64_t)managed_root(m, g->r)->bytes;
        if (swap) {
            g->state = G_SWAP;
            g->k = k;
            g->feedback = k <= g->k_hide;
            cyc_add(P, g->i0, k - 1, -bytes);
        } else {
            chain_cost(P, m, g->r, g->b, true);
            g->state = G_DROP;
            cyc_add(P, g->a + 1, g->b - 1, -bytes);
        }
    }
}

/* Per-op action lists for the guided steps. */
static bool build_actions(capuchin *P, int ng) {
    int n = P->n;
    P->after_start = calloc((size_t)n + 1, sizeof(int));
    P->after = malloc(sizeof(int) * ((size_t)ng + 1));
    P->trig = malloc(sizeof(int) * ((size_t)n + 1));
    P->wrap = malloc(sizeof(int) * ((size_t)ng + 1));
    P->pending = malloc(sizeof(int) * ((size_t)ng + 1));
    if (!P->after_start || !P->after || !P->trig || !P->wrap || !P->pending)
        return false;
    for (int i = 0; i < n; i++) P->trig[i] = -1;
    /* counts, inclusive prefix sums (the end of each op's list), then
     * filled from the back so each entry ends up at its list's start */
    for (int i = 0; i < ng; i++)
        if (released(P->g[i].state)) P->after_start[P->g[i].a]++;
    for (int i = 1; i <= n; i++) P->after_start[i] += P->after_start[i - 1];
    for (int i = ng - 1; i >= 0; i--) {
        gap *g = &P->g[i];
        if (!released(g->state)) continue;
        P->after[--P->after_start[g->a]] = i;
        if (g->state != G_SWAP) continue;
        g->k_floor = g->i0 > g->a + 1 ? g->i0 : g->a + 1;
        if (g->k < g->b) {
            g->next = P->trig[g->k % n];
            P->trig[g->k % n] = i;
        }
        if (g->b >= n) P->wrap[P->nwrap++] = i;
    }
    return true;
}

static void plan(capuchin *P, managed *m) {
    const delta_ctx *c = managed_ctx(m);
    P->n = c->n_ops;
    int n = P->n;
    int64_t *mem = malloc(sizeof(int64_t) * ((size_t)n + 1));
    P->ts = malloc(sizeof(double) * (2 * (size_t)n + 1));
    P->mx = calloc(4 * (size_t)n + 4, sizeof(int64_t));
    P->lz = calloc(4 * (size_t)n + 4, sizeof(int64_t));
    if (n == 0 || !mem || !P->ts || !P->mx || !P->lz ||
        !build_sequences(P, m)) {
        free(mem);
        P->plan_failed = true;
        return;
    }
    int ng = P->seq_start[P->nr];
    /* a pop makes room for its re-push: the heap never outgrows ng */
    P->heap = malloc(sizeof(kv) * ((size_t)ng + 1));
    if (!P->heap) {
        free(mem);
        P->plan_failed = true;
        return;
    }
    kept_timeline(P, m, mem);
    op_times(P, m);
    build_gaps(P, m);
    st_build(P, mem, 1, 0, n - 1);
    free(mem);
    size_t budget = managed_budget(m);
    P->target = (int64_t)(budget - budget / 100 * MARGIN_PCT);
    if (P->mx[1] > (int64_t)budget) { /* else everything fits: keep it */
        pick_hiding_swaps(P, m, ng);
        if (over_target(P)) pick_hybrid(P, m, ng);
    }
    free(P->heap);
    P->heap = NULL;
    if (!build_actions(P, ng)) P->plan_failed = true;
}

/* ---- guided execution ---------------------------------------------------- */

/* Op of this step at or after which a fired trigger's prefetch is no
 * longer worth retrying (the access itself swaps in on demand). */
static int deadline(const capuchin *P, const gap *g) {
    int n = P->n;
    if (g->b < n) return g->b;
    return g->k >= n ? g->b - n : n; /* same step as the swap-out: none */
}

/* Issues g's prefetch; true when there is nothing more to do for it. */
static bool try_prefetch(capuchin *P, managed *m, gap *g) {
    const root_view *v = managed_root(m, g->r);
    if (v->state == RES_TO_HOST) return false; /* not landed yet */
    if (v->state != RES_HOST) return true;     /* already back (or gone) */
    if (!managed_prefetch(m, g->r)) return false;
    g->issued = true;
    P->touch[g->r] = managed_clock(m);
    return true;
}

static void cap_before_op(void *p, managed *m, int op) {
    capuchin *P = p;
    if (!P->guided) return;
    int k = 0;
    for (int j = 0; j < P->npending; j++) {
        gap *g = &P->g[P->pending[j]];
        if (op >= deadline(P, g) || try_prefetch(P, m, g)) continue;
        P->pending[k++] = P->pending[j];
    }
    P->npending = k;
    for (int i = P->trig[op]; i >= 0; i = P->g[i].next) {
        gap *g = &P->g[i];
        if (op < deadline(P, g) && !try_prefetch(P, m, g))
            P->pending[P->npending++] = i;
    }
}

static void cap_after_op(void *p, managed *m, int op) {
    capuchin *P = p;
    if (!P->guided) return;
    for (int j = P->after_start[op]; j < P->after_start[op + 1]; j++) {
        gap *g = &P->g[P->after[j]];
        const root_view *v = managed_root(m, g->r);
        g->issued = false;
        if (v->state != RES_DEVICE || managed_pinned(m, g->r)) continue;
        if (g->state == G_SWAP) managed_swap_out(m, g->r);
        else managed_drop(m, g->r);
    }
}

/* Moves g's in-trigger one op earlier (the paper's feedback). */
static void trigger_earlier(capuchin *P, int gi) {
    gap *g = &P->g[gi];
    int n = P->n;
    if (g->k - 1 < g->k_floor) return;
    int *link = &P->trig[g->k % n];
    while (*link != gi) link = &P->g[*link].next;
    *link = g->next;
    g->k--;
    g->next = P->trig[g->k % n];
    P->trig[g->k % n] = gi;
}

static void cap_on_event(void *p, managed *m, int r, managed_event ev,
                         double wait_s) {
    capuchin *P = p;
    (void)wait_s;
    if (!P->guided || ev != MEV_LATE || r >= P->nr || P->landing) return;
    int op = managed_cur_op(m);
    for (int i = P->seq_start[r]; i < P->seq_start[r + 1]; i++) {
        gap *g = &P->g[i];
        if (g->state == G_SWAP && g->b % P->n == op && g->issued &&
            g->feedback && g->k < g->b) {
            trigger_earlier(P, i);
            g->issued = false;
        }
    }
}

static void cap_begin_step(void *p, managed *m, int64_t step, bool fwd_only) {
    capuchin *P = p;
    (void)step;
    P->guided = false;
    if (fwd_only || !P->measured) return;
    if (!P->planned && !P->plan_failed) {
        plan(P, m);
        P->planned = !P->plan_failed;
    }
    if (!P->planned) return;
    P->guided = true;
    P->npending = 0;
    /* intervals across the step boundary whose swap-out the last run did
     * not issue (the first guided step, or an eval run in between) */
    for (int j = 0; j < P->nwrap; j++) {
        gap *g = &P->g[P->wrap[j]];
        if (g->k < P->n) continue; /* brought back in the last step */
        if (managed_root(m, g->r)->state == RES_DEVICE)
            managed_swap_out(m, g->r);
    }
}

static void cap_end_step(void *p, managed *m, bool ok) {
    capuchin *P = p;
    if (ok && !managed_fwd_only(m)) P->measured = true;
    P->guided = false;
}

/* ---- passive mode: LRU swap --------------------------------------------- */

static int tier(const root_view *v) {
    if (v->kind == DELTA_KIND_ACTIVATION) return 0;
    return v->persistent ? 2 : 1;
}

/* Nothing resident can leave, but swap-ins in flight hold bytes: lands the
 * one needed last (waiting for it) so that it can go back to the host,
 * where its bytes are still valid (the release is immediate). */
static int land_a_prefetch(capuchin *P, managed *m) {
    int best = -1, best_next = -1, op = managed_cur_op(m);
    for (int r = 0; r < P->nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_TO_DEVICE || managed_pinned(m, r)) continue;
        int next = managed_next_use(m, r, op);
        if (next < 0) next = INT32_MAX;
        if (next > best_next) {
            best = r;
            best_next = next;
        }
    }
    if (best < 0) return -1;
    P->landing = true;
    bool ok = managed_recompute(m, best);
    P->landing = false;
    return ok && managed_root(m, best)->state == RES_DEVICE ? best : -1;
}

static int cap_choose(void *p, managed *m, size_t need, bool *drop) {
    capuchin *P = p;
    (void)need;
    int best = -1, best_t = 0;
    int64_t best_at = 0;
    for (int r = 0; r < P->nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, r)) continue;
        int t = tier(v);
        int64_t at = v->last_access > P->touch[r] ? v->last_access
                                                  : P->touch[r];
        if (best < 0 || t < best_t || (t == best_t && at < best_at)) {
            best = r;
            best_t = t;
            best_at = at;
        }
    }
    *drop = false;
    if (best < 0) best = land_a_prefetch(P, m);
    return best;
}

const policy_ops delta_policy_capuchin = {
    .name = "capuchin",
    .create = cap_create,
    .destroy = cap_destroy,
    .begin_step = cap_begin_step,
    .end_step = cap_end_step,
    .before_op = cap_before_op,
    .after_op = cap_after_op,
    .choose_victim = cap_choose,
    .on_event = cap_on_event,
};
