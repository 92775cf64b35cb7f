/* How matmul, pooling and batch-norm kernels view their tensors: shared by
 * the CPU kernels and the CUDA ones, so both read the same geometry from an
 * op (and, where the result must match bit for bit, compute the same
 * per-element expression: delta_plane_mean). */
#ifndef DELTA_KERNEL_SHAPES_H
#define DELTA_KERNEL_SHAPES_H

#include "graph/graph_impl.h"

/* matmul's C (batch.., M, N) = alpha op(A) op(B): A (batch.., M, K) or its
 * transpose, B (batch.., K, N), (K, N) broadcast over the batch, or their
 * transposes; row strides lda, ldb and per-batch strides sa, sb (0: B is
 * broadcast), sc. */
typedef struct matmul_geom {
    int64_t m, n, k, batch, lda, ldb, sa, sb, sc;
    bool ta, tb;
    bool b_2d;  /* B is 2-D (broadcast over the batch) */
} matmul_geom;

static inline matmul_geom matmul_geom_of(const delta_op *op,
                                         const delta_tensor *a,
                                         const delta_tensor *b) {
    matmul_geom g;
    g.ta = op->a.trans_a != 0;
    g.tb = op->a.trans_b != 0;
    int an = a->ndim, bn = b->ndim;
    g.m = g.ta ? a->shape[an - 1] : a->shape[an - 2];
    g.k = g.ta ? a->shape[an - 2] : a->shape[an - 1];
    g.n = g.tb ? b->shape[bn - 2] : b->shape[bn - 1];
    g.batch = 1;
    for (int i = 0; i < an - 2; i++) g.batch *= a->shape[i];
    g.lda = g.ta ? g.m : g.k;
    g.ldb = g.tb ? g.k : g.n;
    g.b_2d = bn == 2;
    g.sa = g.m * g.k;
    g.sb = bn > 2 ? g.k * g.n : 0;
    g.sc = g.m * g.n;
    return g;
}

/* linear's y (rows, out) = x (rows, in) op(w) + bias: w (OUT, IN) read
 * transposed (tw), or (IN, OUT) as it is (attrs.w_in_out); ldw is w's row
 * stride. */
typedef struct linear_geom {
    int64_t rows, in, out, ldw;
    bool tw;
} linear_geom;

static inline linear_geom linear_geom_of(const delta_op *op,
                                         const delta_tensor *x,
                                         const delta_tensor *w) {
    linear_geom g;
    g.tw = op->a.w_in_out == 0;
    g.in = w->shape[g.tw ? 1 : 0];
    g.out = w->shape[g.tw ? 0 : 1];
    g.ldw = w->shape[1];
    g.rows = 1;
    for (int i = 0; i < x->ndim - 1; i++) g.rows *= x->shape[i];
    return g;
}

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

#ifdef __CUDACC__
#define DELTA_SHAPE_FN static inline __host__ __device__
#else
#define DELTA_SHAPE_FN static inline
#endif

/* Sum of a contiguous run of n floats in double: four fixed lanes, added
 * in this order (the CPU's bias gradient and the pooling mean below). */
DELTA_SHAPE_FN double delta_run_sum(const float *p, int64_t n) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
    }
    for (; i < n; i++) a0 += p[i];
    return (a0 + a1) + (a2 + a3);
}

/* Global average pooling of one plane of hw floats: delta_run_sum times
 * inv (1/hw). The CPU and CUDA kernels both call it, so their outputs
 * agree bit for bit. */
DELTA_SHAPE_FN float delta_plane_mean(const float *xp, int64_t hw,
                                      double inv) {
    return (float)(delta_run_sum(xp, hw) * inv);
}

#endif
