/* Optimizer updates on the GPU, in place (out may alias in): the formulas
 * of src/backend/cpu/k_optim.c, with the step-dependent scalars computed on
 * the host in double exactly as there. With FMA contraction off and IEEE
 * division and square root (nvcc's defaults), every element is the CPU's
 * bit for bit. */
#include "backend/cuda/cu_common.cuh"

#include <math.h>

__global__ static void sgd_k(const float *p, const float *g, const float *buf,
                             float *po, float *bo, int64_t n, float lr,
                             float m, float wd, int first, int nesterov,
                             int mom) {
    CU_FOR(i, n) {
        float pi = p[i], gi = g[i];
        if (wd != 0.0f) gi = gi + wd * pi;
        if (mom) {
            float b = first ? gi : m * buf[i] + gi;
            bo[i] = b;
            gi = nesterov ? gi + m * b : b;
        }
        po[i] = pi - lr * gi;
    }
}

__global__ static void adamw_k(const float *p, const float *g, const float *m,
                               const float *v, float *po, float *mo,
                               float *vo, int64_t n, float b1, float b2,
                               float eps, float decay, float step_size,
                               float bc2_sqrt, int decays) {
    float c1 = 1.0f - b1, c2 = 1.0f - b2;
    CU_FOR(i, n) {
        float pi = p[i], gi = g[i];
        if (decays) pi = pi * decay;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        mo[i] = mi;
        vo[i] = vi;
        po[i] = pi - step_size * (mi / denom);
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
    double t = (double)(k->env->step + 1);
    float decay = (float)(1.0 - (double)at->lr * (double)at->weight_decay);
    float step_size = (float)((double)at->lr / (1.0 - pow((double)at->beta1, t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow((double)at->beta2, t));
    CU_LAUNCH(adamw_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              (const float *)k->in[2], (const float *)k->in[3],
              (float *)k->out[0], (float *)k->out[1], (float *)k->out[2], n,
              at->beta1, at->beta2, at->opt_eps, decay, step_size, bc2_sqrt,
              at->weight_decay != 0.0f);
}
