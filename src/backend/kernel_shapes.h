/* How pooling and batch-norm kernels view their tensors: shared by the CPU
 * kernels and the CUDA ones, so both read the same geometry from an op. */
#ifndef DELTA_KERNEL_SHAPES_H
#define DELTA_KERNEL_SHAPES_H

#include "graph/graph_impl.h"

typedef struct pool_geom {
    int64_t planes, h, w, p, q;
    int k, stride, pad;
} pool_geom;

/* x is the (N, C, H, W) input side, y the (N, C, P, Q) output side. */
static inline pool_geom pool_geom_of(const delta_op *op,
                                     const delta_tensor *x,
                                     const delta_tensor *y) {
    pool_geom g;
    g.planes = x->shape[0] * x->shape[1];
    g.h = x->shape[2];
    g.w = x->shape[3];
    g.p = y->shape[2];
    g.q = y->shape[3];
    g.k = op->a.k;
    g.stride = op->a.stride;
    g.pad = op->a.pad;
    return g;
}

/* x (N, C, H, W) or (N, C): channel c's data is N runs of hw floats at
 * stride C*hw. */
typedef struct bn_shape {
    int64_t n, c, hw;
} bn_shape;

static inline bn_shape bn_shape_of(const delta_tensor *x) {
    bn_shape s;
    s.n = x->shape[0];
    s.c = x->ndim > 1 ? x->shape[1] : 1;
    s.hw = s.n * s.c > 0 ? x->numel / (s.n * s.c) : 0;
    return s;
}

#endif
