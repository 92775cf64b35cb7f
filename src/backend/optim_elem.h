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

/* The step's bias terms, which do not depend on lr: 1 - beta1^t (double)
 * and sqrt(1 - beta2^t). Computed on the host (pow is the host's). */
typedef struct delta_adamw_bias {
    double bc1;
    float bc2_sqrt;
} delta_adamw_bias;

static inline delta_adamw_bias delta_adamw_bias_of(float b1, float b2,
                                                   int64_t step) {
    double t = (double)(step + 1);
    delta_adamw_bias b;
    b.bc1 = 1.0 - pow((double)b1, t);
    b.bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, t));
    return b;
}

/* The scalars of a step from its lr: IEEE double operations only, so a
 * GPU thread reading lr from a tensor computes the host's bits. */
DELTA_OPT_FN delta_adamw_scalars delta_adamw_scalars_lr(float lr, float wd,
                                                        delta_adamw_bias b) {
    delta_adamw_scalars s;
    s.decay = (float)(1.0 - (double)lr * (double)wd);
    s.step_size = (float)((double)lr / b.bc1);
    s.bc2_sqrt = b.bc2_sqrt;
    return s;
}

static inline delta_adamw_scalars delta_adamw_scalars_of(float lr, float wd,
                                                         float b1, float b2,
                                                         int64_t step) {
    return delta_adamw_scalars_lr(lr, wd, delta_adamw_bias_of(b1, b2, step));
}

/* A gradient element scaled by the clipping coefficient (clip: whether
 * the op clips; without it g is read as it is, today's bits). */
DELTA_OPT_FN float delta_grad_clipped(float g, float coef, bool clip) {
    return clip ? g * coef : g;
}

/* The sum of squares of x[lo, hi) in double, DELTA_SUMSQ_LANES lanes
 * (graph_impl.h): one chunk of grad_sumsq. */
DELTA_OPT_FN double delta_sumsq_range(const float *x, int64_t lo,
                                      int64_t hi) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)
        for (int l = 0; l < 8; l++) {
            double v = (double)x[i + l];
            acc[l] += v * v;
        }
    for (int l = 0; i < hi; i++, l++) {
        double v = (double)x[i];
        acc[l] += v * v;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
           ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Clipping by global norm from the sum of squares, as
 * torch.nn.utils.clip_grad_norm_ (its default foreach path, in float):
 * norm = sqrt(ss); coef = min(1, max_norm / (norm + 1e-6)). */
DELTA_OPT_FN void delta_clip_coef_of(float ss, float max_norm, float *norm,
                                     float *coef) {
    float n = (float)sqrt((double)ss);
    float c = max_norm / (n + 1e-6f);
    *norm = n;
    *coef = c < 1.0f ? c : 1.0f;
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
