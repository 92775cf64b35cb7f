/* Optimizer updates on the GPU, in place (out may alias in): the element
 * formulas and step scalars of src/backend/optim_elem.h, shared with the
 * CPU kernels (the scalars computed on the host in double). With FMA
 * contraction off and IEEE division and square root (nvcc's defaults),
 * every element is the CPU's bit for bit. */
#include "backend/cuda/cu_common.cuh"
#include "backend/optim_elem.h"

#include <math.h>

__global__ static void sgd_k(const float *p, const float *g, const float *buf,
                             float *po, float *bo, int64_t n, float lr,
                             float m, float wd, int first, int nesterov,
                             int mom) {
    CU_FOR(i, n) {
        float b = 0.0f;
        po[i] = delta_sgd_elem(p[i], g[i], mom ? buf[i] : 0.0f, &b, lr, m, wd,
                               first, nesterov, mom);
        if (mom) bo[i] = b;
    }
}

__global__ static void adamw_k(const float *p, const float *g, const float *m,
                               const float *v, float *po, float *mo,
                               float *vo, int64_t n, float b1, float b2,
                               float eps, delta_adamw_scalars sc,
                               int decays) {
    CU_FOR(i, n) {
        float mi, vi;
        po[i] = delta_adamw_elem(p[i], g[i], m[i], v[i], &mi, &vi, b1, b2, eps,
                                 sc, decays);
        mo[i] = mi;
        vo[i] = vi;
    }
}

void delta_cu_sgd_update(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    bool mom = at->has_momentum && k->op->n_in > 2 && k->op->n_out > 1;
    int64_t n = k->in_t[0]->numel;
    CU_LAUNCH(sgd_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              mom ? (const float *)k->in[2] : NULL, (float *)k->out[0],
              mom ? (float *)k->out[1] : NULL, n, at->lr, at->momentum,
              at->weight_decay, k->env->step == 0, at->nesterov != 0, mom);
}

void delta_cu_adamw_update(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    int64_t n = k->in_t[0]->numel;
    delta_adamw_scalars sc = delta_adamw_scalars_of(
        at->lr, at->weight_decay, at->beta1, at->beta2, k->env->step);
    CU_LAUNCH(adamw_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              (const float *)k->in[2], (const float *)k->in[3],
              (float *)k->out[0], (float *)k->out[1], (float *)k->out[2], n,
              at->beta1, at->beta2, at->opt_eps, sc, at->weight_decay != 0.0f);
}
