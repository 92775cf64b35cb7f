/* keep: every tensor stays on the device from its production to its last
 * use; nothing is swapped or dropped. Its plan is a static layout: the dry
 * plan's trace of one step (every storage root and workspace with the op
 * interval it is alive; leaves for the whole step) placed once by the
 * lifetime planner, so the arena keep needs is the planner's peak over
 * that trace. Roots produced in the step that outlive it (the loss, the
 * caller's outputs) are kept to the step's end and readable until the next
 * run. Forward-only runs take the same offsets: their lifetimes are a
 * subset of the step's. The runtime claims each block at its offset
 * through the pool, which checks that no two live blocks overlap and keeps
 * the high-water mark; keep records and replays no trace. */
#include "runtime/policy/keep.h"
#include "delta/dryplan.h"
#include "delta/pool.h"

#include <stdlib.h>
#include <string.h>

struct keep_layout {
    int n_tensors, n_ops;
    size_t *root_off;  /* per tensor id (roots with a block) */
    size_t *ws_off;    /* per op: its workspace's offset */
    size_t peak;       /* the planner's peak address */
};

void keep_layout_free(keep_layout *l) {
    if (!l) return;
    free(l->root_off);
    free(l->ws_off);
    free(l);
}

size_t keep_layout_peak(const keep_layout *l) { return l->peak; }

keep_layout *keep_layout_new(const delta_ctx *c, delta_tensor *const *outs,
                             int n_outs, delta_status *status) {
    int no = c->n_ops, nt = c->n_tensors;
    *status = DELTA_ERR_NOMEM;
    /* the dry plan's trace with the same outputs: keep's need is then the
     * dry plan's peak by construction (--budget 100% fits) */
    int n = delta_dry_plan_trace_outputs(c, outs, n_outs, NULL, 0);
    if (n < 0) {
        *status = DELTA_ERR_STATE;
        return NULL;
    }
    keep_layout *l = calloc(1, sizeof *l);
    delta_dry_block *db = malloc(sizeof *db * (size_t)(n + 1));
    delta_plan_block *pb = malloc(sizeof *pb * (size_t)(n + 1));
    size_t *off = malloc(sizeof *off * (size_t)(n + 1));
    if (l) {
        l->n_tensors = nt;
        l->n_ops = no;
        l->root_off = calloc((size_t)nt + 1, sizeof(size_t));
        l->ws_off = calloc((size_t)no + 1, sizeof(size_t));
    }
    if (!l || !db || !pb || !off || !l->root_off || !l->ws_off) goto out;
    delta_dry_plan_trace_outputs(c, outs, n_outs, db, n);
    for (int k = 0; k < n; k++)
        pb[k] = (delta_plan_block){db[k].size, db[k].first, db[k].last, -1};
    delta_plan_stats st = {0};
    *status = n ? delta_plan_place(pb, n, off, &st) : DELTA_OK;
    if (*status != DELTA_OK) goto out;
    l->peak = st.peak_bytes;
    for (int k = 0; k < n; k++) {
        if (db[k].tensor >= 0) l->root_off[db[k].tensor] = off[k];
        else l->ws_off[db[k].first] = off[k];
    }
out:
    free(db);
    free(pb);
    free(off);
    if (*status != DELTA_OK) {
        keep_layout_free(l);
        return NULL;
    }
    return l;
}

/* ---- the policy ------------------------------------------------------------ */

static void *keep_create(managed *m) {
    /* the roots produced in the step that stay readable after it (the
     * session's outputs, the loss) are the persistent ones with a producer */
    const delta_ctx *c = managed_ctx(m);
    delta_tensor **outs = malloc(sizeof *outs * ((size_t)c->n_tensors + 1));
    if (!outs) return NULL;
    int n = 0;
    for (int r = 0; r < c->n_tensors; r++) {
        const root_view *v = managed_root(m, r);
        if (v && v->persistent && v->producer >= 0) outs[n++] = c->tensors[r];
    }
    delta_status st;
    keep_layout *l = keep_layout_new(c, outs, n, &st);
    free(outs);
    return l;
}

static void keep_destroy(void *p) { keep_layout_free(p); }

static bool keep_place(void *p, managed *m, int key, size_t bytes,
                       size_t *off) {
    (void)bytes;
    const keep_layout *l = p;
    int nt = managed_n_roots(m);
    *off = key < nt ? l->root_off[key] : l->ws_off[key - nt];
    return true;
}

static size_t keep_arena_need(void *p) { return keep_layout_peak(p); }

const policy_ops delta_policy_keep = {
    .name = "keep",
    .create = keep_create,
    .destroy = keep_destroy,
    .place = keep_place,
    .arena_need = keep_arena_need,
};
