/* The managed runtime: runs a step program inside a budget with tensors
 * that come and go. Every storage root has a residency state; before an op
 * runs its inputs are made resident (swapped in from the host store, or
 * recomputed from their producers, recursively), its outputs and workspace
 * are allocated from the pool, and when an allocation does not fit the
 * policy names victims to swap out or drop. The policy decides; this file
 * acts. The session (session.c) uses it for every policy but keep.
 *
 * Today swaps are synchronous (the copy is waited for), which is exact and
 * keeps the budget; overlapping them with compute is the next step. */
#ifndef DELTA_MANAGED_H
#define DELTA_MANAGED_H

#include "delta/session.h"
#include "graph/graph_impl.h"

typedef struct managed managed;

typedef enum residency {
    RES_FREE = 0,   /* not allocated: before its producer or after its last
                       use */
    RES_DEVICE,     /* in the arena */
    RES_HOST,       /* only in the host store */
    RES_DROPPED,    /* nowhere: recomputed from its producer when needed */
} residency;

/* What a policy sees of one storage root. */
typedef struct root_view {
    residency state;
    size_t bytes;        /* rounded to the pool's alignment */
    int producer;        /* op id, -1 for leaves */
    int last_use;        /* last op of the step reading it (step mode) */
    bool droppable;      /* an activation whose producer is recomputable */
    int64_t last_access; /* access counter at its last use (staleness) */
} root_view;

/* A policy: decides which roots leave the device and how. */
typedef struct policy_ops {
    const char *name;
    void *(*create)(managed *m);
    void (*destroy)(void *p);
    /* Called when an allocation of `need` bytes does not fit: returns a
     * root to evict, with *drop true to drop it (droppable roots only) or
     * false to swap it out; -1 when it has nothing to offer. */
    int (*choose_victim)(void *p, managed *m, size_t need, bool *drop);
} policy_ops;

extern const policy_ops delta_policy_dtr;

/* Views for policies. */
const delta_ctx *managed_ctx(const managed *m);
int managed_n_roots(const managed *m);
/* An operand of an op being run (or recomputed): not evictable. */
bool managed_pinned(const managed *m, int id);
const root_view *managed_root(const managed *m, int id); /* NULL if no root */
double managed_op_seconds(const managed *m, int op);     /* last measured */
int64_t managed_clock(const managed *m);                 /* access counter */

/* outs: per-step tensors the caller reads after a run (kept on the device
 * or in the host store until the next run). */
managed *managed_new(delta_ctx *ctx, delta_backend *b, size_t budget,
                     const char *policy, delta_tensor *const *outs,
                     int n_outs, delta_status *status, char *err,
                     size_t err_len);
void managed_free(managed *m);
delta_status managed_run(managed *m, delta_run_mode mode, int64_t step,
                         delta_step_stats *stats, char *err, size_t err_len);
/* Data of a persistent root (or a root alive at the end of the last run),
 * wherever it is. DELTA_ERR_STATE when it is not readable now. */
delta_status managed_access(managed *m, int root, void *data, size_t bytes,
                            bool write);
size_t managed_arena_bytes(const managed *m);
/* True when policy names a managed policy. */
bool managed_policy_known(const char *policy);

#endif
