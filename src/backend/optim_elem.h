/* The optimizers' per-element arithmetic and step scalars, one definition
 * for the CPU kernels (src/backend/cpu/k_optim.c) and the CUDA ones
 * (src/backend/cuda/cu_optim.cu): parameters must come out bit for bit the
 * same on both, so the expressions must be the same, in the same order
 * (nvcc compiles with FMA contraction off). Semantics: torch.optim.SGD
 * (dampening 0) and torch.optim.AdamW in float, the bias terms in double. */
#ifndef DELTA_OPTIM_ELEM_H
#define DELTA_OPTIM_ELEM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DELTA_OPT_FN static inline __host__ __device__
#else
#define DELTA_OPT_FN static inline
#endif

/* One SGD element: p, g and (with mom) the momentum buffer buf in; the new
 * parameter returned, the new buffer in *bo. first: the first step, where
 * the buffer starts as the gradient. */
DELTA_OPT_FN float delta_sgd_elem(float p, float g, float buf, float *bo,
                                  float lr, float m, float wd, bool first,
                                  bool nesterov, bool mom) {
    if (wd != 0.0f) g = g + wd * p;
    if (mom) {
        float b = first ? g : m * buf + g;
        *bo = b;
        g = nesterov ? g + m * b : b;
    }
    return p - lr * g;
}

/* AdamW's scalars for a step (0-based). */
typedef struct delta_adamw_scalars {
    float decay;      /* 1 - lr * weight_decay */
    float step_size;  /* lr / (1 - beta1^t) */
    float bc2_sqrt;   /* sqrt(1 - beta2^t) */
} delta_adamw_scalars;

static inline delta_adamw_scalars delta_adamw_scalars_of(float lr, float wd,
                                                         float b1, float b2,
                                                         int64_t step) {
    double t = (double)(step + 1);
    delta_adamw_scalars s;
    s.decay = (float)(1.0 - (double)lr * (double)wd);
    s.step_size = (float)((double)lr / (1.0 - pow((double)b1, t)));
    s.bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, t));
    return s;
}

/* One AdamW element: the new parameter returned, moments in *mo, *vo. */
DELTA_OPT_FN float delta_adamw_elem(float p, float g, float m, float v,
                                    float *mo, float *vo, float b1, float b2,
                                    float eps, delta_adamw_scalars s,
                                    bool decays) {
    float c1 = 1.0f - b1, c2 = 1.0f - b2;
    if (decays) p = p * s.decay;
    float mi = b1 * m + c1 * g;
    float vi = b2 * v + c2 * g * g;
    float denom = sqrtf(vi) / s.bc2_sqrt + eps;
    *mo = mi;
    *vo = vi;
    return p - s.step_size * (mi / denom);
}

#endif
