/* Helpers shared by the op constructors (ops.c), autograd (autograd.c) and
 * the optimizers (optim.c). */
#ifndef DELTA_OPS_IMPL_H
#define DELTA_OPS_IMPL_H

#include "graph/graph_impl.h"

/* Attributes with every field at its neutral value (alpha 1, fwd_op -1). */
delta_op_attrs delta_attrs0(void);

/* Checks that none of ins is NULL and all belong to ctx; records an error
 * naming `what` and returns false otherwise. */
bool delta_check_inputs(delta_ctx *ctx, const char *what,
                        const delta_tensor *const *ins, int n);

/* Appends a one-output op and sets its cost. */
delta_tensor *delta_op1(delta_ctx *ctx, delta_op_type type,
                        const delta_tensor *const *ins, int n_in,
                        delta_op_attrs a, delta_dtype dtype, int ndim,
                        const int64_t *shape);

/* "[2, 3, 4]" */
const char *delta_shape_str(const delta_tensor *t, char *buf, size_t n);

#endif
