/* keep's static layout (policy/keep.c), which the session also reads to
 * check a budget against what keep needs before creating anything. */
#ifndef DELTA_POLICY_KEEP_H
#define DELTA_POLICY_KEEP_H

#include "runtime/managed.h"

typedef struct keep_layout keep_layout;

/* The layout of one step of c: the dry plan's trace with outs (tensors
 * produced in the step and read after a run) kept to the step's end,
 * placed by the lifetime planner. NULL with *status set on failure. */
keep_layout *keep_layout_new(const delta_ctx *c, delta_tensor *const *outs,
                             int n_outs, delta_status *status);
void keep_layout_free(keep_layout *l);
/* The arena keep needs: the layout's peak address. */
size_t keep_layout_peak(const keep_layout *l);

#endif
