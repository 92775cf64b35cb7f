/* delta — dry planning: what one training step needs in device memory,
 * computed from the program alone (no data, no kernels), in milliseconds.
 *
 * The step's allocation trace has one block per storage root (a view shares
 * its root's storage, and the root lives until the last use of any of its
 * views) and one per op workspace:
 *   - PARAM, CONST, STATE and INPUT roots are alive for the whole step;
 *   - an ACTIVATION or GRAD root is alive from its producer op to its last
 *     reading op, inclusive; one never read lives during its producer only,
 *     except the loss (the scalar whose gradient seeded backward), which
 *     stays alive to the end of the step so the caller can read it;
 *   - in-place ops write existing tensors and create no block;
 *   - an op's workspace is a block alive during that op only.
 * Time points are op indices 0 .. n_ops - 1. Sizes are rounded up to
 * DELTA_POOL_ALIGN. */
#ifndef DELTA_DRYPLAN_H
#define DELTA_DRYPLAN_H

#include "delta/graph.h"
#include "delta/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Added to the largest op's operands to make the minimum budget: one
 * alignment unit, covering an arena whose base is not itself aligned to
 * DELTA_POOL_ALIGN. */
#define DELTA_DRY_ALIGN_SLACK ((size_t)DELTA_POOL_ALIGN)

typedef struct delta_dry_plan {
    int n_ops, n_blocks;

    /* Every tensor kept on the device (policy keep, unlimited budget). */
    size_t peak_bytes;      /* lifetime planner's arena for the trace */
    size_t max_live_bytes;  /* lower bound: max over ops of bytes alive */
    int max_live_op;        /* an op where it is reached */

    /* The smallest budget in which any policy can run the step: the op
     * whose distinct input and output storage roots plus workspace (each
     * rounded) are largest, plus DELTA_DRY_ALIGN_SLACK. */
    size_t min_budget_bytes;
    size_t min_op_bytes;    /* that op's operands and workspace, no slack */
    int min_budget_op;      /* its id, -1 for an empty program */
    char min_budget_op_type[32];
    char min_budget_op_name[DELTA_NAME_LEN];

    /* Totals over storage roots by kind, rounded. grad_bytes counts every
     * GRAD root (intermediate gradients too), activation_bytes every
     * ACTIVATION root; persistent = param + const + state. */
    size_t param_bytes, grad_bytes, state_bytes, const_bytes, input_bytes,
        activation_bytes, persistent_bytes;
    size_t max_workspace_bytes;

    double plan_seconds;    /* trace + planner + bounds */
} delta_dry_plan;

/* One block of the dry trace. */
typedef struct delta_dry_block {
    int tensor;             /* storage root id, or -1 for a workspace */
    int op;                 /* workspace: its op; tensor: its producer, -1
                               for leaves */
    delta_tensor_kind kind; /* the root's kind (DELTA_KIND_COUNT for a
                               workspace) */
    size_t size;            /* rounded */
    int first, last;        /* inclusive op interval it is alive */
} delta_dry_block;

/* Fills *plan for the program recorded in ctx (normally after
 * delta_backward and an optimizer). DELTA_ERR_STATE if ctx holds an error,
 * DELTA_ERR_NOMEM if host scratch runs out; message in err (may be NULL). */
DELTA_API delta_status delta_dry_plan_build(const delta_ctx *ctx, delta_dry_plan *plan,
                                  char *err, size_t err_len);

/* The same with outputs: tensors the caller reads after a run (a session's
 * outputs, e.g. logits for evaluation) live to the step's end, as keep
 * places them, so the peak is what keep needs with those outputs. */
DELTA_API delta_status delta_dry_plan_build_outputs(const delta_ctx *ctx,
                                          delta_tensor *const *outs,
                                          int n_outs, delta_dry_plan *plan,
                                          char *err, size_t err_len);

/* Writes up to cap blocks of the trace (persistent and input roots first in
 * id order, then activation and gradient roots and workspaces by first op)
 * and returns how many there are in all, or -1 if ctx holds an error. */
DELTA_API int delta_dry_plan_trace(const delta_ctx *ctx, delta_dry_block *blocks,
                         int cap);
DELTA_API int delta_dry_plan_trace_outputs(const delta_ctx *ctx,
                                 delta_tensor *const *outs, int n_outs,
                                 delta_dry_block *blocks, int cap);

#ifdef __cplusplus
}
#endif
#endif
