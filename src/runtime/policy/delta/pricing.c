/* The delta policy's director (delta_impl.h has the whole policy): prices
 * each candidate release as a swap, on the copy streams modelled as FIFO
 * queues with deadlines, and as a recomputation, by its producer chain and
 * the chain's temporaries, and gives the filter the better of the two; it
 * owns the planned transfer queues' arithmetic and the recorded reads of
 * the chosen recomputations. */
#include "runtime/policy/delta/delta_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_DEPTH 8      /* deepest recomputation chain priced */

/* ---- the copy streams' planned queues ------------------------------------ */

/* Index where a transfer issued at t goes (after those issued by t). */
static int xfer_pos(const stream *s, double t) {
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->v[mid].issue <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* When a transfer of d seconds issued at t would end, or -1 when the delay
 * it pushes onto later transfers makes one of them miss its deadline. */
static double xfer_try(const stream *s, double t, double d) {
    int k = xfer_pos(s, t);
    double end = (k > 0 && s->v[k - 1].end > t ? s->v[k - 1].end : t) + d;
    double prev = end;
    for (int j = k; j < s->n; j++) {
        double st = s->v[j].issue > prev ? s->v[j].issue : prev;
        if (st <= s->v[j].start) break; /* no longer delayed */
        double en = st + s->v[j].dur;
        if (en > s->v[j].deadline + 1e-12) return -1;
        prev = en;
    }
    return end;
}

static bool xfer_add1(stream *s, double t, double d, double deadline) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        xfer *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    int k = xfer_pos(s, t);
    memmove(&s->v[k + 1], &s->v[k], sizeof *s->v * (size_t)(s->n - k));
    s->v[k] = (xfer){t, d, deadline, 0, 0};
    s->n++;
    double prev = k > 0 ? s->v[k - 1].end : 0;
    for (int j = k; j < s->n; j++) {
        double st = s->v[j].issue > prev ? s->v[j].issue : prev;
        if (j > k && st == s->v[j].start) break;
        s->v[j].start = st;
        s->v[j].end = st + s->v[j].dur;
        prev = s->v[j].end;
    }
    return true;
}

/* Both copies of a cyclic step's transfer (the one a step away too). */
static bool xfer_add(stream *s, double t, double d, double deadline,
                     double T) {
    double sh = t >= T ? -T : T;
    return xfer_add1(s, t, d, deadline) &&
           xfer_add1(s, t + sh, d, deadline + sh);
}

static bool xfer_fits(const stream *s, double t, double d, double T) {
    double sh = t >= T ? -T : T;
    return xfer_try(s, t, d) >= 0 && xfer_try(s, t + sh, d) >= 0;
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

/* How root x stands at op b (unrolled) under the choices so far. */
typedef enum presence { PRESENT, FREED, DROPPED_AT, SWAPPED_AT } presence;

static presence presence_at(const delta_pol *p, const managed *m, int x,
                            int b) {
    const root_view *v = managed_root(m, x);
    if (!v->persistent && v->last_use < b % p->n_ops) return FREED;
    for (int k = p->root_first[x]; k >= 0; k = p->c[k].next_of_root)
        if (p->c[k].a < b && b < p->c[k].b)
            return p->c[k].how == HOW_SWAP ? SWAPPED_AT : DROPPED_AT;
    return PRESENT;
}

static void scratch_add(delta_pol *p, int r, int op) {
    if (p->n_scratch == p->cap_scratch) {
        int cap = p->cap_scratch ? 2 * p->cap_scratch : 64;
        chain_read *v = realloc(p->scratch, sizeof *v * (size_t)cap);
        if (!v) return; /* a read not recorded only makes a price low */
        p->scratch = v;
        p->cap_scratch = cap;
    }
    p->scratch[p->n_scratch++] = (chain_read){r, op % p->n_ops, -1, -1};
}

/* Seconds to recompute root r at op b and the temporaries it needs;
 * negative when it cannot be recomputed. An input swapped out at b is fetched on demand (its whole
 * transfer counts). */
static double chain(delta_pol *p, const managed *m, int r, int b, int depth,
                    size_t *temps) {
    const root_view *v = managed_root(m, r);
    if (!v->droppable || depth > CHAIN_DEPTH) return -1;
    const delta_op *op = &managed_ctx(m)->ops[v->producer];
    double t = dp_op_time(p, m, v->producer);
    for (int j = 0; j < op->n_in; j++) {
        int x = delta_tensor_root(managed_ctx(m), op->in[j]);
        if (p->stamp[x] == p->stamp_now) continue;
        p->stamp[x] = p->stamp_now;
        const root_view *u = managed_root(m, x);
        presence pr = presence_at(p, m, x, b);
        if (pr == PRESENT) {
            scratch_add(p, x, b);
            continue;
        }
        if (pr == SWAPPED_AT) {
            t += managed_link_seconds_dir(m, u->bytes, false);
            continue;
        }
        double c = chain(p, m, x, b, depth + 1, temps);
        if (c < 0) return -1;
        t += c;
        *temps += u->bytes;
    }
    return t;
}

/* The first op (unrolled) in (a, b) at which a chosen recomputation reads
 * root r, else b: a release of r over (a, b) must have r back by then
 * (it then stays until b, as the runtime leaves it). */
static int first_read(const delta_pol *p, int r, int a, int b) {
    int first = b;
    for (int i = p->rd_first[r]; i >= 0; i = p->rd[i].next) {
        if (p->c[p->rd[i].cand].how != HOW_DROP) continue; /* cleaned up */
        int o = p->rd[i].op;
        if (o <= a) o += p->n_ops;
        if (a < o && o < first) first = o;
    }
    return first;
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

/* A swap whose transfers cannot hide at all (the link is too slow for the
 * interval): the tensor leaves right after its last access and is fetched
 * when used, both transfers exposed (the runtime waits for the swap-out
 * when it needs the bytes, and for the swap-in at the use). Always
 * possible, so the filter can cover a budget that only moving parameters
 * or optimizer state can meet, at its true price. */
static bool price_sync_swap(delta_pol *p, const managed *m, const cand *c,
                            ks_eval *e, swap_plan *sp) {
    const root_view *v = managed_root(m, c->r);
    if (c->b - c->a < 2) return e->feasible = false;
    /* On a saturated link (the fetches planned so far take a whole step
     * already) the fetch is issued right after the last op of the
     * interval still over the target under the choices so far (the later
     * ops fit without this release), not at the use: the copy then queues
     * behind the others instead of starting only when compute reaches the
     * use and waits, so the to-device stream stays busy. On a link with
     * room the fetch stays at the use, holding no memory before it. */
    int issue = c->b;
    while (p->in_busy >= p->T && issue - 1 > c->a + 1 &&
           p->excess[(issue - 1) % p->n_ops] <= 0)
        issue--;
    sp->sync = true;
    sp->out_s = p->t1[c->a];
    sp->out_e = sp->out_s + sp->d_out;
    sp->issue = issue;
    sp->lo = c->a + 1;
    sp->in_s = p->t0[issue];
    sp->in_e = sp->in_s + sp->d_in;
    sp->out_deadline = INFINITY;
    range_split(p, c->a + 1, issue - 1, e);
    e->bytes = v->bytes;
    e->cost = sp->d_out + sp->d_in;
    e->extra_op = -1;
    e->extra_bytes = 0;
    return e->feasible = true;
}

static bool price_swap(delta_pol *p, const managed *m, const cand *c,
                       ks_eval *e, swap_plan *sp) {
    const root_view *v = managed_root(m, c->r);
    e->feasible = false;
    sp->sync = false;
    double d_out = managed_link_seconds_dir(m, v->bytes, true);
    double d_in = managed_link_seconds_dir(m, v->bytes, false);
    /* A tensor whose copy is mostly the link's latency relieves next to
     * nothing for the link time it takes, and on a busy link that time
     * delays the copies that matter (BatchNorm statistics and parameters
     * of a few hundred bytes each, swapped by the hundred): not swapped
     * (A100 ResNet-50 at 30%: 1.29x -> 1.22x; its small-image version on
     * the V100 at 70%: 28 fewer copies a step, 3.52x -> 3.46x). */
    if (d_in < 2 * managed_link_seconds_dir(m, 0, false)) return false;
    sp->d_out = d_out;
    sp->d_in = d_in;
    /* out: issued after op a, in the queue behind what was issued before */
    sp->out_s = p->t1[c->a];
    sp->out_e = xfer_try(&p->out, sp->out_s, d_out);
    if (sp->out_e < 0 || !xfer_fits(&p->out, sp->out_s, d_out, p->T))
        return price_sync_swap(p, m, c, e, sp);
    int lo = op_at_or_after(p, sp->out_e, c->a + 1, c->b);
    if (lo >= c->b) return price_sync_swap(p, m, c, e, sp);
    /* in: the latest issuing op whose transfer ends by the next use */
    double dl = p->t0[c->b], cost = 0;
    int issue = op_at_or_after(p, dl - d_in, lo, c->b);
    if (issue > lo && p->t0[issue] > dl - d_in) issue--;
    double end = -1;
    for (int tries = 0; issue >= lo && tries < 16; tries++, issue--) {
        end = xfer_try(&p->in, p->t0[issue], d_in);
        if (end >= 0 && end <= dl && xfer_fits(&p->in, p->t0[issue], d_in, p->T))
            break;
        end = -1;
    }
    if (end < 0) {
        /* nothing ends in time: fetched when used, a stall */
        issue = c->b;
        end = xfer_try(&p->in, dl, d_in);
        /* not even that without making planned fetches late: the link
         * is saturated, so both transfers are priced exposed (refusing
         * the release left plans that could not cover the target) */
        if (end < 0) return price_sync_swap(p, m, c, e, sp);
        cost += end - dl;
    }
    sp->in_s = p->t0[issue];
    sp->in_e = end;
    sp->issue = issue;
    sp->lo = lo;
    sp->out_deadline = p->t0[lo];
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
    if (!v->droppable || c->b >= p->n_ops || c->b - c->a < 2)
        return false;
    p->n_scratch = 0;
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

static double ratio(const delta_pol *p, const ks_eval *e) {
    return (double)ks_value(p->excess, e) / (e->cost + 1e-7);
}

/* The director: the better of swapping and recomputing c, by value per
 * second. The verdict is kept for commit (the knapsack commits right after
 * evaluating). */
void dp_eval_cand(void *user, int k, ks_eval *out) {
    eval_ctx *x = user;
    delta_pol *p = x->p;
    cand *c = &p->c[k];
    /* priced over the part of its interval before a chosen recomputation
     * needs it back */
    cand cc = *c;
    cc.b = first_read(p, c->r, c->a, c->b0);
    c->eval_b = cc.b;
    ks_eval sw = {0}, dr = {0};
    bool s_ok = price_swap(p, x->m, &cc, &sw, &c->eval_sp);
    bool d_ok = !x->free_only && price_drop(p, x->m, &cc, &dr);
    if (x->free_only && sw.cost > 0) s_ok = false;
    if (x->recompute_first && d_ok) s_ok = false;
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

void dp_commit_cand(void *user, int k, const ks_eval *e) {
    eval_ctx *x = user;
    delta_pol *p = x->p;
    cand *c = &p->c[k];
    c->cost = e->cost;
    c->how = c->eval_how;
    c->b = c->eval_b;
    if (c->how == HOW_SWAP) {
        c->issue = c->eval_sp.issue;
        c->lo = c->eval_sp.lo;
        const swap_plan *sp = &c->eval_sp;
        xfer_add(&p->out, sp->out_s, sp->d_out, sp->out_deadline, p->T);
        /* a planned fetch must end by the use; an on-demand one is late
         * already */
        p->in_busy += sp->d_in;
        xfer_add(&p->in, sp->in_s, sp->d_in,
                 sp->sync || c->issue == c->b ? INFINITY : p->t0[c->b], p->T);
    }
    if (c->how == HOW_DROP) {
        /* what its recomputation reads, for the releases priced later */
        for (int i = 0; i < p->n_scratch; i++) {
            if (p->n_rd == p->cap_rd) {
                int cap = p->cap_rd ? 2 * p->cap_rd : 256;
                chain_read *v = realloc(p->rd, sizeof *v * (size_t)cap);
                if (!v) break;
                p->rd = v;
                p->cap_rd = cap;
            }
            chain_read rd = p->scratch[i];
            rd.cand = k;
            rd.next = p->rd_first[rd.r];
            p->rd_first[rd.r] = p->n_rd;
            p->rd[p->n_rd++] = rd;
        }
    }
    c->next_of_root = p->root_first[c->r];
    p->root_first[c->r] = k;
}

/* The clean-up pass found c redundant: it is not released after all. Its
 * transfers stay in the planned queues, which only makes the estimates of
 * the others conservative. */
void dp_uncommit_cand(void *user, int k) {
    eval_ctx *x = user;
    x->p->c[k].how = HOW_NONE;
    x->p->c[k].b = x->p->c[k].b0;
}
