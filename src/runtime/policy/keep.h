/* keep's static layout (policy/keep.c), which the session also reads to
 * check a budget against what keep needs before creating anything. */
#ifndef DELTA_POLICY_KEEP_H
#define DELTA_POLICY_KEEP_H

#include "runtime/managed.h"

typedef struct keep_layout keep_layout;

/* The layout of one step of c: kept[r] marks the roots that stay readable
 * after a run (persistent tensors, the loss, the caller's outputs); those
 * produced in the step live to its end. NULL with *status set on failure. */
keep_layout *keep_layout_new(const delta_ctx *c, const bool *kept,
                             delta_status *status);
void keep_layout_free(keep_layout *l);
/* The arena keep needs: the layout's peak address. */
size_t keep_layout_peak(const keep_layout *l);

#endif
