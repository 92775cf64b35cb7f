/* Optimizer updates on the GPU, in place (out may alias in): the element
 * formulas and step scalars of src/backend/optim_elem.h, shared with the
 * CPU kernels (the scalars computed on the host in double). With FMA
 * contraction off and IEEE division and square root (nvcc's defaults),
 * every element is the CPU's bit for bit. A step's lr read from a tensor
 * (attrs.lr_in) and the clipping coefficient (attrs.coef_in) stay on the
 * device: each thread reads them, and AdamW's lr-dependent scalars are
 * computed there from the host's bias terms with IEEE double operations
 * (delta_adamw_scalars_lr), the bits the CPU computes. The global norm's
 * sum of squares uses the CPU's chunks and order: a thread per chunk, then
 * one thread adds the partials in chunk order. */
#include "backend/cuda/cu_common.cuh"
#include "backend/optim_elem.h"

#include <math.h>

__global__ static void sgd_k(const float *p, const float *g, const float *buf,
                             float *po, float *bo, int64_t n, float lr_attr,
                             const float *lr_t, const float *coef_t, float m,
                             float wd, int first, int nesterov, int mom) {
    float lr = lr_t ? lr_t[0] : lr_attr;
    float coef = coef_t ? coef_t[0] : 1.0f;
    CU_FOR(i, n) {
        float b = 0.0f;
        po[i] = delta_sgd_elem(p[i], delta_grad_clipped(g[i], coef, coef_t),
                               mom ? buf[i] : 0.0f, &b, lr, m, wd, first,
                               nesterov, mom);
        if (mom) bo[i] = b;
    }
}

__global__ static void adamw_k(const float *p, const float *g, const float *m,
                               const float *v, float *po, float *mo,
                               float *vo, int64_t n, float b1, float b2,
                               float eps, float lr_attr, const float *lr_t,
                               const float *coef_t, float wd,
                               delta_adamw_bias bias, int decays) {
    float lr = lr_t ? lr_t[0] : lr_attr;
    float coef = coef_t ? coef_t[0] : 1.0f;
    delta_adamw_scalars sc = delta_adamw_scalars_lr(lr, wd, bias);
    CU_FOR(i, n) {
        float mi, vi;
        po[i] = delta_adamw_elem(p[i], delta_grad_clipped(g[i], coef, coef_t),
                                 m[i], v[i], &mi, &vi, b1, b2, eps, sc,
                                 decays);
        mo[i] = mi;
        vo[i] = vi;
    }
}

/* Input i of k as a scalar on the device, or NULL for index 0 (none). */
static const float *scalar_in(const delta_kargs *k, int i) {
    return i ? (const float *)k->in[i] : NULL;
}

void delta_cu_sgd_update(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    bool mom = at->has_momentum && k->op->n_out > 1;
    int64_t n = k->in_t[0]->numel;
    CU_LAUNCH(sgd_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              mom ? (const float *)k->in[2] : NULL, (float *)k->out[0],
              mom ? (float *)k->out[1] : NULL, n, at->lr, scalar_in(k, at->lr_in),
              scalar_in(k, at->coef_in), at->momentum, at->weight_decay,
              k->env->step == 0, at->nesterov != 0, mom);
}

void delta_cu_adamw_update(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    int64_t n = k->in_t[0]->numel;
    delta_adamw_bias bias =
        delta_adamw_bias_of(at->beta1, at->beta2, k->env->step);
    CU_LAUNCH(adamw_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              (const float *)k->in[2], (const float *)k->in[3],
              (float *)k->out[0], (float *)k->out[1], (float *)k->out[2], n,
              at->beta1, at->beta2, at->opt_eps, at->lr,
              scalar_in(k, at->lr_in), scalar_in(k, at->coef_in),
              at->weight_decay, bias, at->weight_decay != 0.0f);
}

__global__ static void sumsq_chunks_k(const float *x, int64_t n,
                                      int64_t chunks, double *part) {
    CU_FOR(c, chunks) {
        int64_t lo = c * DELTA_SUMSQ_CHUNK;
        int64_t hi = lo + DELTA_SUMSQ_CHUNK < n ? lo + DELTA_SUMSQ_CHUNK : n;
        part[c] = delta_sumsq_range(x, lo, hi);
    }
}

/* total (ws[0]) = (first ? start : total) + the partials in order; last:
 * the float result into y. */
__global__ static void sumsq_add_k(double *total, const double *part,
                                   int64_t chunks, const float *acc,
                                   int first, int last, float *y) {
    if (blockIdx.x || threadIdx.x) return;
    double t = 0.0;
    for (int64_t c = 0; c < chunks; c++) t += part[c];
    double s = first ? (acc ? (double)acc[0] : 0.0) : *total;
    s += t;
    *total = s;
    if (last) y[0] = (float)s;
}

void delta_cu_grad_sumsq(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op *op = k->op;
    double *total = (double *)k->ws, *part = total + 1;
    int j0 = op->a.has_acc ? 1 : 0;
    const float *acc = op->a.has_acc ? (const float *)k->in[0] : NULL;
    float *y = (float *)k->out[0];
    if (j0 == op->n_in) { /* nothing to add: the running sum itself */
        sumsq_add_k<<<1, 1, 0, c->stream>>>(total, part, 0, acc, 1, 1, y);
        return;
    }
    for (int j = j0; j < op->n_in; j++) {
        int64_t n = k->in_t[j]->numel, nc = delta_sumsq_chunks(n);
        CU_LAUNCH(sumsq_chunks_k, c, nc, (const float *)k->in[j], n, nc,
                  part);
        sumsq_add_k<<<1, 1, 0, c->stream>>>(total, part, nc, acc, j == j0,
                                            j == op->n_in - 1, y);
    }
}

__global__ static void clip_coef_k(const float *ss, float max_norm,
                                   float *norm, float *coef) {
    if (blockIdx.x || threadIdx.x) return;
    delta_clip_coef_of(ss[0], max_norm, norm, coef);
}

void delta_cu_clip_coef(const delta_cuda_kctx *c, const delta_kargs *k) {
    clip_coef_k<<<1, 1, 0, c->stream>>>((const float *)k->in[0],
                                        k->op->a.value, (float *)k->out[0],
                                        (float *)k->out[1]);
}
