/* checkpoint: sqrt(n) gradient checkpointing (Chen, Xu, Zhang, Guestrin,
 * "Training Deep Nets with Sublinear Memory Cost", arXiv 1604.06174, 2016),
 * as PyTorch's torch.utils.checkpoint / checkpoint_sequential apply it: the
 * forward pass is cut into about sqrt(n) segments; only the tensors that
 * cross a segment boundary are kept; every other activation backward needs
 * is dropped once forward is done with it, and when backward reaches a
 * segment the whole segment is run forward again (one extra forward pass in
 * all), so activation memory is O(sqrt(n)).
 *
 * The plan (made once, at the first training begin_step; the program does
 * not change between steps), all O(ops + roots + accesses):
 *   - Segments: n is the number of forward ops; they are cut into
 *     k = round(sqrt(n)) consecutive segments of about n / k ops
 *     (checkpoint_sequential's equal split). Each cut is placed within half
 *     a segment of its equal-split position, at the point where the fewest
 *     activation bytes cross it (the tensors a cut keeps), nearest to the
 *     equal-split position on ties: where a user of torch.utils.checkpoint
 *     puts checkpoints, between blocks, where only the residual stream
 *     crosses. A cut must also be clean: no tensor that crosses it may be
 *     one the runtime frees before backward (read by no backward op, e.g. a
 *     batch norm's output read only by the next ReLU), because torch would
 *     hold it as the next segment's input while here it would be gone, and
 *     recomputing it would pull its own segment back in. When no clean
 *     position lies in the window the cut moves to the next clean one.
 *   - Kept: every root that is not droppable (parameters, inputs, state,
 *     gradients, outputs of in-place ops), every activation a forward op of
 *     a later segment reads (the segment boundaries), and all of the last
 *     segment (checkpoint_sequential runs the last segment without
 *     checkpointing: it would be recomputed at once).
 *   - Dropped: every other droppable activation that backward reads, in
 *     after_op of its last forward access (PyTorch never saves them inside
 *     a checkpointed segment).
 *   - Recomputed: in before_op of the first backward op that reads a
 *     dropped tensor of segment s, every dropped tensor of s is recomputed
 *     (managed_recompute), and the runtime frees them at their last
 *     backward use, as torch frees a segment's recomputed graph.
 *
 * Simplifications and choices, and why:
 *   - Segments are ranges of ops of a flat program, not modules: the graph
 *     has no module boundaries. In a non-sequential graph (skip
 *     connections, residual streams) every activation that crosses a cut is
 *     kept, which is what torch.utils.checkpoint keeps when each segment's
 *     inputs are the tensors it reads from earlier segments.
 *   - The dropped tensors of a segment are recomputed last first: the
 *     runtime recomputes a tensor's dropped or freed inputs recursively, so
 *     asking for the last ones first runs each op of the segment once, where
 *     forward order would run a multi-output op (batch norm: y, mean, rstd)
 *     once per output, since its y (read by no backward op) is freed as a
 *     temporary between the requests (resnet18 tiny: 135 recomputed ops in
 *     3 steps against 165 in forward order). An intermediate read by no
 *     backward op is still recomputed once for each consumer.
 *   - Should recomputing a segment still bring back dropped tensors of a
 *     segment not yet reached (a boundary tensor freed earlier than the
 *     plan assumed), they are dropped again right after (on_event notes
 *     them), so one segment is resident at a time; this never happened on
 *     the models tested.
 *   - Static: there is no fallback when memory is short (no choose_victim:
 *     the run ends with a budget error), as with torch's checkpointing;
 *     persistent tensors that do not fit at creation start in the host
 *     store and are swapped in on demand by the runtime.
 *   - Forward-only runs (eval) drop nothing: there is no backward. */
#include "runtime/managed.h"

#include <math.h>
#include <stdlib.h>

typedef struct ckpt_plan {
    bool planned;
    bool active;      /* this run is a training step */
    int no, nr;
    int n_seg;
    int *seg;         /* per op: its segment (forward ops), -1 otherwise */
    int *lf;          /* per root: last forward access; -1: not planned */
    int *fb;          /* per root: first backward access, -1 none */
    /* roots to drop in after_op(op): drop_r[drop_at[op] .. drop_at[op+1]) */
    int *drop_at, *drop_r;
    /* dropped roots of segment s in forward order:
     * seg_r[seg_at[s] .. seg_at[s+1]) */
    int *seg_at, *seg_r;
    /* segments to recompute in before_op(op):
     * rec_s[rec_at[op] .. rec_at[op+1]) */
    int *rec_at, *rec_s;
    int *seg_rec;     /* per segment: the op that recomputes it, -1 none */
    /* roots of other segments made resident while segment rec_seg is being
     * recomputed (rec_seg -1: none is) */
    int rec_seg, n_pulled;
    int *pulled;
    int *fill;        /* scratch for the counting sorts */
    int nf;           /* forward ops */
    int *fwd;         /* the forward ops, in order */
    int *pos;         /* per op: its index in fwd, -1 otherwise */
    double *cross;    /* per forward position: bytes a cut after it keeps,
                         -1 when it is not clean (cut_costs) */
    int *fragile;     /* scratch for cut_costs */
} ckpt_plan;

static void ckpt_destroy(void *pp) {
    ckpt_plan *p = pp;
    if (!p) return;
    free(p->seg), free(p->lf), free(p->fb), free(p->drop_at);
    free(p->drop_r), free(p->seg_at), free(p->seg_r), free(p->rec_at);
    free(p->rec_s), free(p->fill), free(p->fwd), free(p->pos);
    free(p->cross), free(p->fragile), free(p->seg_rec), free(p->pulled);
    free(p);
}

static void *ckpt_create(managed *m) {
    ckpt_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    int no = managed_ctx(m)->n_ops, nr = managed_n_roots(m);
    size_t n1 = (size_t)(no > nr ? no : nr) + 2;
    p->no = no;
    p->nr = nr;
    p->seg = calloc((size_t)no + 1, sizeof(int));
    p->lf = calloc((size_t)nr + 1, sizeof(int));
    p->fb = calloc((size_t)nr + 1, sizeof(int));
    p->drop_at = calloc((size_t)no + 2, sizeof(int));
    p->drop_r = calloc((size_t)nr + 1, sizeof(int));
    p->seg_at = calloc((size_t)no + 2, sizeof(int));
    p->seg_r = calloc((size_t)nr + 1, sizeof(int));
    p->rec_at = calloc((size_t)no + 2, sizeof(int));
    p->rec_s = calloc((size_t)no + 1, sizeof(int));
    p->fill = calloc(n1, sizeof(int));
    p->fwd = calloc((size_t)no + 1, sizeof(int));
    p->pos = calloc((size_t)no + 1, sizeof(int));
    p->cross = calloc((size_t)no + 2, sizeof(double));
    p->fragile = calloc((size_t)no + 2, sizeof(int));
    p->seg_rec = calloc((size_t)no + 2, sizeof(int));
    p->pulled = calloc((size_t)nr + 1, sizeof(int));
    p->rec_seg = -1;
    if (!p->seg || !p->lf || !p->fb || !p->drop_at || !p->drop_r ||
        !p->seg_at || !p->seg_r || !p->rec_at || !p->rec_s || !p->fill ||
        !p->fwd || !p->pos || !p->cross || !p->fragile || !p->seg_rec ||
        !p->pulled) {
        ckpt_destroy(p);
        return NULL;
    }
    return p;
}

/* Fills p->lf and p->fb for a droppable forward activation that backward
 * reads; false (and lf -1) for every other root. */
static bool candidate(ckpt_plan *p, const managed *m, int r) {
    const delta_ctx *c = managed_ctx(m);
    const root_view *v = managed_root(m, r);
    p->lf[r] = -1;
    p->fb[r] = -1;
    if (!v || !v->droppable || v->producer < 0 ||
        c->ops[v->producer].phase != DELTA_PHASE_FORWARD)
        return false;
    int lf = v->producer, fb = -1;
    for (int k = 0; k < v->n_acc && fb < 0; k++) {
        int a = v->acc[k];
        if (c->ops[a].phase == DELTA_PHASE_FORWARD) {
            if (a > lf) lf = a;
        } else if (c->ops[a].phase == DELTA_PHASE_BACKWARD) {
            fb = a;
        }
    }
    if (fb < 0) return false;
    p->lf[r] = lf;
    p->fb[r] = fb;
    return true;
}

/* The forward position of r's last forward access (its producer when no
 * forward op reads it). */
static int last_fwd_pos(const ckpt_plan *p, const managed *m, int r) {
    const delta_ctx *c = managed_ctx(m);
    const root_view *v = managed_root(m, r);
    int last = p->pos[v->producer];
    for (int k = 0; k < v->n_acc; k++)
        if (c->ops[v->acc[k]].phase == DELTA_PHASE_FORWARD &&
            p->pos[v->acc[k]] > last)
            last = p->pos[v->acc[k]];
    return last;
}

/* Per forward position q, what a cut after it costs: p->cross[q] the bytes
 * of the activations that cross it (made at or before q, read by a forward
 * op after q), which a cut keeps; negative when the cut is not clean, that
 * is when one of them has no access after forward: the runtime frees it
 * before backward, so recomputing the later segment would have to
 * recompute it, and with it its own segment. */
static void cut_costs(ckpt_plan *p, const managed *m) {
    const delta_ctx *c = managed_ctx(m);
    for (int q = 0; q <= p->nf; q++) p->cross[q] = p->fragile[q] = 0;
    for (int r = 0; r < p->nr; r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->persistent || v->producer < 0 ||
            c->ops[v->producer].phase != DELTA_PHASE_FORWARD)
            continue;
        int a = p->pos[v->producer], b = last_fwd_pos(p, m, r);
        if (b <= a) continue; /* crosses no cut */
        p->cross[a] += (double)v->bytes; /* difference arrays over [a, b) */
        p->cross[b] -= (double)v->bytes;
        bool fragile = v->last_use < 0 ||
                       c->ops[v->last_use].phase == DELTA_PHASE_FORWARD;
        p->fragile[a] += fragile;
        p->fragile[b] -= fragile;
    }
    double bytes = 0;
    for (int q = 0, frag = 0; q < p->nf; q++) {
        bytes += p->cross[q];
        frag += p->fragile[q];
        p->cross[q] = frag ? -1 : bytes;
    }
}

/* The cut for the j-th of k segments: the clean position with the fewest
 * crossing bytes within half a segment of the equal split's position (the
 * nearest to it on ties), after `after`; else the next clean one; -1 when
 * none is left before the last forward op. */
static int pick_cut(const ckpt_plan *p, int j, int k, int after) {
    double len = (double)p->nf / k, t = len * j - 1;
    int lo = (int)(t - len / 2) + 1, hi = (int)(t + len / 2);
    if (lo <= after) lo = after + 1;
    if (hi > p->nf - 2) hi = p->nf - 2;
    int best = -1;
    for (int q = lo; q <= hi; q++) {
        if (p->cross[q] < 0) continue;
        bool better = best < 0 || p->cross[q] < p->cross[best] ||
                      (p->cross[q] == p->cross[best] &&
                       fabs(q - t) < fabs(best - t));
        if (better) best = q;
    }
    for (int q = hi + 1; best < 0 && q <= p->nf - 2; q++)
        if (p->cross[q] >= 0) best = q;
    return best;
}

/* Cuts the n forward ops into about sqrt(n) segments (see the header). */
static void plan_segments(ckpt_plan *p, const managed *m) {
    const delta_ctx *c = managed_ctx(m);
    p->nf = 0;
    for (int i = 0; i < p->no; i++) {
        p->seg[i] = -1;
        p->pos[i] = -1;
        if (c->ops[i].phase != DELTA_PHASE_FORWARD) continue;
        p->pos[i] = p->nf;
        p->fwd[p->nf++] = i;
    }
    cut_costs(p, m);
    int k = (int)lround(sqrt((double)p->nf)), s = 0, q = 0;
    if (k < 1) k = 1;
    for (int j = 1; j < k; j++) {
        int at = pick_cut(p, j, k, q - 1);
        if (at < 0) break;
        for (; q <= at; q++) p->seg[p->fwd[q]] = s;
        s++;
    }
    for (; q < p->nf; q++) p->seg[p->fwd[q]] = s;
    p->n_seg = s + 1;
}

/* True when a forward op of a later segment than r's producer reads r. */
static bool crosses(const ckpt_plan *p, const managed *m, int r) {
    const delta_ctx *c = managed_ctx(m);
    const root_view *v = managed_root(m, r);
    int s = p->seg[v->producer];
    for (int k = 0; k < v->n_acc; k++) {
        int a = v->acc[k];
        if (c->ops[a].phase == DELTA_PHASE_FORWARD && p->seg[a] > s) return true;
    }
    return false;
}

/* CSR from counts in at[1..n]: prefix sums, and fill[] set to the starts. */
static void csr_starts(int *at, int n, int *fill) {
    at[0] = 0;
    for (int i = 0; i < n; i++) at[i + 1] += at[i];
    for (int i = 0; i < n; i++) fill[i] = at[i];
}

/* Which roots are dropped, where, and which segments each backward op
 * recomputes first. Roots in ascending id order are in forward order (a
 * tensor is created when its producer is appended). */
static void plan_drops(ckpt_plan *p, const managed *m) {
    int last = p->n_seg - 1;
    for (int r = 0; r < p->nr; r++) {
        if (p->lf[r] < 0) continue;
        int s = p->seg[managed_root(m, r)->producer];
        if (s == last || crosses(p, m, r)) p->lf[r] = -1; /* kept */
    }
    for (int i = 0; i <= p->no + 1; i++) p->drop_at[i] = p->seg_at[i] = 0;
    for (int r = 0; r < p->nr; r++) {
        if (p->lf[r] < 0) continue;
        p->drop_at[p->lf[r] + 1]++;
        p->seg_at[p->seg[managed_root(m, r)->producer] + 1]++;
    }
    csr_starts(p->drop_at, p->no, p->fill);
    for (int r = 0; r < p->nr; r++)
        if (p->lf[r] >= 0) p->drop_r[p->fill[p->lf[r]]++] = r;
    csr_starts(p->seg_at, p->n_seg, p->fill);
    for (int r = 0; r < p->nr; r++)
        if (p->lf[r] >= 0)
            p->seg_r[p->fill[p->seg[managed_root(m, r)->producer]]++] = r;
    /* segment s is recomputed before the first backward read of any of its
     * dropped roots */
    for (int s = 0; s < p->n_seg; s++) {
        p->seg_rec[s] = -1;
        for (int e = p->seg_at[s]; e < p->seg_at[s + 1]; e++) {
            int fb = p->fb[p->seg_r[e]];
            if (p->seg_rec[s] < 0 || fb < p->seg_rec[s]) p->seg_rec[s] = fb;
        }
    }
    for (int i = 0; i <= p->no + 1; i++) p->rec_at[i] = 0;
    for (int s = 0; s < p->n_seg; s++)
        if (p->seg_rec[s] >= 0) p->rec_at[p->seg_rec[s] + 1]++;
    csr_starts(p->rec_at, p->no, p->fill);
    /* later segments first within one op: backward meets them first */
    for (int s = p->n_seg - 1; s >= 0; s--)
        if (p->seg_rec[s] >= 0) p->rec_s[p->fill[p->seg_rec[s]]++] = s;
}

static void ckpt_begin(void *pp, managed *m, int64_t step, bool fwd_only) {
    (void)step;
    ckpt_plan *p = pp;
    p->active = !fwd_only;
    if (p->planned) return;
    for (int r = 0; r < p->nr; r++) candidate(p, m, r);
    plan_segments(p, m);
    plan_drops(p, m);
    p->planned = true;
}

/* Runs segment s forward again: its dropped roots, in forward order. Roots
 * of earlier segments that this pulls back in (through a boundary tensor
 * the runtime had freed, see the header) are dropped again, so only one
 * segment is resident at a time. */
static bool recompute_segment(ckpt_plan *p, managed *m, int s) {
    bool ok = true;
    p->rec_seg = s;
    p->n_pulled = 0;
    for (int q = p->seg_at[s + 1] - 1; ok && q >= p->seg_at[s]; q--) {
        int r = p->seg_r[q];
        if (managed_root(m, r)->state == RES_DROPPED)
            ok = managed_recompute(m, r);
    }
    p->rec_seg = -1;
    for (int e = 0; ok && e < p->n_pulled; e++) {
        int r = p->pulled[e];
        if (managed_root(m, r)->state == RES_DEVICE && !managed_pinned(m, r))
            managed_drop(m, r);
    }
    return ok;
}

static void ckpt_before(void *pp, managed *m, int op) {
    ckpt_plan *p = pp;
    if (!p->active) return;
    for (int e = p->rec_at[op]; e < p->rec_at[op + 1]; e++)
        if (!recompute_segment(p, m, p->rec_s[e]))
            return; /* the run fails with the runtime's message */
}

/* Notes roots of segments still to be recomputed that a segment's
 * recomputation brought back. */
static void ckpt_event(void *pp, managed *m, int r, managed_event ev,
                       double wait_s) {
    (void)wait_s;
    ckpt_plan *p = pp;
    if (ev != MEV_RESIDENT || p->rec_seg < 0 || p->lf[r] < 0) return;
    int s = p->seg[managed_root(m, r)->producer];
    if (s != p->rec_seg && p->seg_rec[s] > managed_cur_op(m)) {
        p->pulled[p->n_pulled++] = r;
    }
}

static void ckpt_after(void *pp, managed *m, int op) {
    ckpt_plan *p = pp;
    if (!p->active) return;
    for (int e = p->drop_at[op]; e < p->drop_at[op + 1]; e++) {
        int r = p->drop_r[e];
        if (managed_root(m, r)->state == RES_DEVICE && !managed_pinned(m, r))
            managed_drop(m, r);
    }
}

const policy_ops delta_policy_checkpoint = {
    .name = "checkpoint",
    .create = ckpt_create,
    .destroy = ckpt_destroy,
    .begin_step = ckpt_begin,
    .before_op = ckpt_before,
    .after_op = ckpt_after,
    .on_event = ckpt_event,
};
