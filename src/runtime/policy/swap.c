/* swap: vDNN (Rhu et al., "vDNN: Virtualized Deep Neural Networks for
 * Scalable, Memory-Efficient Neural Network Design", MICRO 2016), the
 * vDNN_all variant: every layer's input feature maps are offloaded to host
 * memory during forward propagation and prefetched back one layer ahead
 * during backward propagation. Weights, gradients and optimizer state stay
 * on the device; vDNN moves feature maps only.
 *
 * The plan (made once, at the first begin_step; the program does not change
 * between steps):
 *   - Offloaded tensors: every activation root, and every input fed to the
 *     step (the first layer's X: the images), whose next access after its
 *     last forward access is a backward op (the feature maps backward reads
 *     again; in vDNN's terms the X of the layers that read it, and also
 *     saved tensors such as dropout masks and normalisation statistics).
 *   - Offload: after_op of the root's last forward access (its producer if
 *     forward never reads it) issues managed_swap_out on the to-host stream;
 *     the runtime releases the device bytes once the copy has landed (vDNN
 *     frees X when the layer's offload has completed).
 *   - Prefetch: a "layer" of backward propagation is a backward op that
 *     reads offloaded tensors; b_1 < b_2 < ... are those ops in program
 *     order. Before any backward op j, the offloaded roots read by the
 *     first such op after j (the next layer) that are on the host are
 *     prefetched on the to-device stream, and those j itself reads too (a
 *     catch-up for a prefetch that found no gap earlier). vDNN prefetches
 *     layer n-1's X when layer n's backward starts; here the prefetch is
 *     issued before each op until it succeeds, since managed_prefetch never
 *     evicts and may find no gap yet.
 *
 * Simplifications, and why:
 *   - Layers are backward ops, not framework layers: the program is a flat
 *     list of ops with no layer boundaries, and a backward op that reads an
 *     offloaded tensor is exactly the point where vDNN needs it back. The
 *     prefetch window is therefore one such op (as vDNN's is one layer),
 *     which on fine-grained programs is shorter than a whole layer's
 *     backward: transfers that do not fit in it stall, as they would in
 *     vDNN on a layer too short to hide its X.
 *   - vDNN synchronises the offload stream at the end of each layer's
 *     forward; here the runtime collects finished copies at every op
 *     boundary and waits for copies in flight only when an allocation does
 *     not fit, which is the same memory bound with fewer stalls.
 *   - vDNN_all offloads every feature map whatever the budget (the static
 *     variant; vDNN_dyn's profiling search over offload sets and conv
 *     algorithms is not reproduced), so this policy copies even when the
 *     budget would hold everything.
 *   - vDNN has no fallback when memory is still short. Here choose_victim
 *     swaps out an offloadable activation that is on the device (one not
 *     yet at its offload point, or one prefetched ahead of its use), the
 *     one whose next use is furthest (Belady), preferring one whose host
 *     copy is still valid (released at no copy cost); parameters, gradients
 *     and optimizer state are never offered (-1 when nothing else is left).
 *     Persistent tensors that do not fit at creation start in the host
 *     store and are swapped in on demand by the runtime.
 *   - Forward-only runs (eval) offload nothing: there is no backward. */
#include "runtime/managed.h"

#include <stdlib.h>

typedef struct swap_plan {
    bool planned;
    bool active;       /* this run is a training step */
    int no, nr;
    /* roots to offload in after_op(op): off_r[off_at[op] .. off_at[op+1]) */
    int *off_at, *off_r;
    /* the backward ops that read offloaded roots ("layers"), in program
     * order, and what each reads: lay_r[lay_at[k] .. lay_at[k+1]) */
    int n_lay;
    int *lay_op, *lay_at, *lay_r;
    /* per op: index of the first layer strictly after it (n_lay: none),
     * and its own layer index (-1: it reads no offloaded root) */
    int *next_lay, *own_lay;
    /* offloadable roots, for choose_victim */
    int n_cand;
    int *cand;
    bool *is_cand;
} swap_plan;

static void swap_destroy(void *pp) {
    swap_plan *p = pp;
    if (!p) return;
    free(p->off_at), free(p->off_r), free(p->lay_op), free(p->lay_at);
    free(p->lay_r), free(p->next_lay), free(p->own_lay), free(p->cand);
    free(p->is_cand);
    free(p);
}

static void *swap_create(managed *m) {
    swap_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    int no = managed_ctx(m)->n_ops, nr = managed_n_roots(m);
    p->no = no;
    p->nr = nr;
    p->off_at = calloc((size_t)no + 2, sizeof(int));
    p->off_r = calloc((size_t)nr + 1, sizeof(int));
    p->lay_op = calloc((size_t)no + 1, sizeof(int));
    p->lay_at = calloc((size_t)no + 2, sizeof(int));
    p->next_lay = calloc((size_t)no + 1, sizeof(int));
    p->own_lay = calloc((size_t)no + 1, sizeof(int));
    p->cand = calloc((size_t)nr + 1, sizeof(int));
    p->is_cand = calloc((size_t)nr + 1, sizeof(bool));
    size_t reads = 1; /* what the layers read: at most every op's inputs */
    for (int i = 0; i < no; i++) reads += (size_t)managed_ctx(m)->ops[i].n_in;
    p->lay_r = calloc(reads, sizeof(int));
    if (!p->off_at || !p->off_r || !p->lay_op || !p->lay_at ||
        !p->next_lay || !p->own_lay || !p->cand || !p->is_cand ||
        !p->lay_r) {
        swap_destroy(p);
        return NULL;
    }
    return p;
}

/* The last forward access of root v (its producer when forward never reads
 * it) and the access after it; *next is -1 when there is none. */
static int last_fwd_access(const delta_ctx *c, const root_view *v, int *next) {
    int lf = v->producer, k = 0;
    while (k < v->n_acc && c->ops[v->acc[k]].phase == DELTA_PHASE_FORWARD) {
        if (v->acc[k] > lf) lf = v->acc[k];
        k++;
    }
    while (k < v->n_acc && v->acc[k] <= lf) k++;
    *next = k < v->n_acc ? v->acc[k] : -1;
    return lf;
}

/* A feature map vDNN offloads: an activation made in forward, or the
 * step's input data (the first layer's X), that backward reads again after
 * forward is done with it. */
static bool offloadable(const delta_ctx *c, const root_view *v, int *lf) {
    bool act = !v->persistent && v->kind == DELTA_KIND_ACTIVATION &&
               v->producer >= 0 &&
               c->ops[v->producer].phase == DELTA_PHASE_FORWARD;
    if (!act && v->kind != DELTA_KIND_INPUT) return false;
    int next;
    *lf = last_fwd_access(c, v, &next);
    return *lf >= 0 && next >= 0 &&
           c->ops[next].phase == DELTA_PHASE_BACKWARD;
}

/* Offload lists per op (counting sort by the op of the last forward
 * access) and the candidate set. */
static void plan_offloads(swap_plan *p, managed *m) {
    const delta_ctx *c = managed_ctx(m);
    for (int i = 0; i <= p->no + 1; i++) p->off_at[i] = 0;
    p->n_cand = 0;
    for (int r = 0; r < p->nr; r++) {
        const root_view *v = managed_root(m, r);
        int at = -1;  /* set when offloadable; -O1 cannot see it */
        p->is_cand[r] = v && offloadable(c, v, &at);
        if (p->is_cand[r]) p->off_at[at + 1]++;
    }
    for (int i = 0; i < p->no; i++) p->off_at[i + 1] += p->off_at[i];
    /* fill, ascending root ids within an op; off_at[op] advances while
     * filling and is shifted back afterwards */
    for (int r = 0; r < p->nr; r++) {
        if (!p->is_cand[r]) continue;
        int next, at = last_fwd_access(c, managed_root(m, r), &next);
        p->off_r[p->off_at[at]++] = r;
        p->cand[p->n_cand++] = r;
    }
    for (int i = p->no; i > 0; i--) p->off_at[i] = p->off_at[i - 1];
    p->off_at[0] = 0;
}

/* Offloaded roots op reads, each once, into out; returns how many. */
static int op_reads(const swap_plan *p, const delta_ctx *c, int op, int *out) {
    const delta_op *o = &c->ops[op];
    int n = 0;
    for (int j = 0; j < o->n_in; j++) {
        int r = delta_tensor_root(c, o->in[j]);
        if (!p->is_cand[r]) continue;
        bool dup = false;
        for (int k = 0; k < n; k++) dup |= out[k] == r;
        if (!dup) out[n++] = r;
    }
    return n;
}

/* The backward "layers": ops that read offloaded roots, what they read,
 * and for every op the next layer after it. */
static void plan_layers(swap_plan *p, managed *m) {
    const delta_ctx *c = managed_ctx(m);
    p->n_lay = 0;
    p->lay_at[0] = 0;
    for (int i = 0; i < p->no; i++) {
        p->own_lay[i] = -1;
        if (c->ops[i].phase != DELTA_PHASE_BACKWARD) continue;
        int n = op_reads(p, c, i, p->lay_r + p->lay_at[p->n_lay]);
        if (n == 0) continue;
        p->own_lay[i] = p->n_lay;
        p->lay_op[p->n_lay] = i;
        p->lay_at[p->n_lay + 1] = p->lay_at[p->n_lay] + n;
        p->n_lay++;
    }
    for (int i = p->no - 1, k = p->n_lay; i >= 0; i--) {
        p->next_lay[i] = k;
        if (p->own_lay[i] >= 0) k = p->own_lay[i];
    }
}

static void swap_begin(void *pp, managed *m, int64_t step, bool fwd_only) {
    (void)step;
    swap_plan *p = pp;
    p->active = !fwd_only;
    if (p->planned) return;
    plan_offloads(p, m);
    plan_layers(p, m);
    p->planned = true;
}

static void prefetch_layer(const swap_plan *p, managed *m, int k) {
    if (k < 0 || k >= p->n_lay) return;
    for (int e = p->lay_at[k]; e < p->lay_at[k + 1]; e++) {
        int r = p->lay_r[e];
        if (managed_root(m, r)->state == RES_HOST) managed_prefetch(m, r);
    }
}

static void swap_before(void *pp, managed *m, int op) {
    swap_plan *p = pp;
    if (!p->active || managed_ctx(m)->ops[op].phase != DELTA_PHASE_BACKWARD)
        return;
    prefetch_layer(p, m, p->own_lay[op]);  /* catch-up: it needs them now */
    prefetch_layer(p, m, p->next_lay[op]); /* one layer ahead */
}

static void swap_after(void *pp, managed *m, int op) {
    swap_plan *p = pp;
    if (!p->active) return;
    for (int e = p->off_at[op]; e < p->off_at[op + 1]; e++) {
        int r = p->off_r[e];
        if (managed_root(m, r)->state == RES_DEVICE && !managed_pinned(m, r))
            managed_swap_out(m, r);
    }
}

/* Fallback beyond vDNN: the offloadable activation on the device whose next
 * use is furthest, host-valid ones (free to release) first. */
static int swap_choose(void *pp, managed *m, size_t need, bool *drop) {
    (void)need;
    swap_plan *p = pp;
    int cur = managed_cur_op(m), best = -1, best_next = -1;
    bool best_valid = false;
    *drop = false;
    for (int e = 0; e < p->n_cand; e++) {
        int r = p->cand[e];
        const root_view *v = managed_root(m, r);
        if (v->state != RES_DEVICE || managed_pinned(m, r)) continue;
        int next = managed_next_use(m, r, cur);
        if (next < 0) continue;
        bool better = best < 0 || (v->host_valid && !best_valid) ||
                      (v->host_valid == best_valid && next > best_next);
        if (better) {
            best = r;
            best_next = next;
            best_valid = v->host_valid;
        }
    }
    return best;
}

const policy_ops delta_policy_swap = {
    .name = "swap",
    .create = swap_create,
    .destroy = swap_destroy,
    .begin_step = swap_begin,
    .before_op = swap_before,
    .after_op = swap_after,
    .choose_victim = swap_choose,
};
