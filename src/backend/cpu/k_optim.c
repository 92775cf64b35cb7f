/* Optimizer updates, in place on persistent tensors: out[i] may be the same
 * buffer as in[j] (p, momentum buffer, moments), so each element's inputs are
 * read before its outputs are written. Semantics follow torch.optim.SGD
 * (dampening 0) and torch.optim.AdamW, in float like PyTorch's float32
 * parameters; the scalar bias terms are computed in double. The step's lr
 * is the attribute or, with a.lr_in, a scalar F32 input; with a.coef_in
 * every gradient element is first scaled by the clipping coefficient. */
#include "backend/cpu/kernels.h"
#include "backend/optim_elem.h"
#include "delta/cpu.h"

#include <math.h>

/* Loops over fewer elements stay on one thread. */
#define OPT_MIN 32768

void delta_k_sgd_update(const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    const float *p = k->in[0], *g = k->in[1];
    float *po = k->out[0];
    bool mom = at->has_momentum && k->op->n_out > 1;
    const float *buf = mom ? k->in[2] : NULL;
    float *bo = mom ? k->out[1] : NULL;
    int64_t n = k->in_t[0]->numel;
    float lr = at->lr_in ? ((const float *)k->in[at->lr_in])[0] : at->lr;
    bool clip = at->coef_in != 0;
    float coef = clip ? ((const float *)k->in[at->coef_in])[0] : 1.0f;
    float m = at->momentum, wd = at->weight_decay;
    bool first = k->env->step == 0, nesterov = at->nesterov != 0;
    int nt = delta_cpu_threads();
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (n > OPT_MIN)
#endif
    for (int64_t i = 0; i < n; i++) {
        float b = 0.0f;
        po[i] = delta_sgd_elem(p[i], delta_grad_clipped(g[i], coef, clip),
                               mom ? buf[i] : 0.0f, &b, lr, m, wd, first,
                               nesterov, mom);
        if (mom) bo[i] = b;
    }
}

void delta_k_adamw_update(const delta_kargs *k) {
    const delta_op_attrs *at = &k->op->a;
    const float *p = k->in[0], *g = k->in[1], *m = k->in[2], *v = k->in[3];
    float *po = k->out[0], *mo = k->out[1], *vo = k->out[2];
    int64_t n = k->in_t[0]->numel;
    float b1 = at->beta1, b2 = at->beta2, eps = at->opt_eps;
    float lr = at->lr_in ? ((const float *)k->in[at->lr_in])[0] : at->lr;
    bool clip = at->coef_in != 0;
    float coef = clip ? ((const float *)k->in[at->coef_in])[0] : 1.0f;
    delta_adamw_scalars sc = delta_adamw_scalars_of(lr, at->weight_decay,
                                                    b1, b2, k->env->step);
    bool decays = at->weight_decay != 0.0f;
    int nt = delta_cpu_threads();
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (n > OPT_MIN)
#endif
    for (int64_t i = 0; i < n; i++) {
        float mi, vi;
        po[i] = delta_adamw_elem(p[i], delta_grad_clipped(g[i], coef, clip),
                                 m[i], v[i], &mi, &vi, b1, b2, eps, sc,
                                 decays);
        mo[i] = mi;
        vo[i] = vi;
    }
}

/* acc (the first input with has_acc) plus every other input's sum of
 * squares: each input's chunks in parallel into the workspace, their
 * partials added in chunk order, the inputs' totals in input order. */
void delta_k_grad_sumsq(const delta_kargs *k) {
    const delta_op *op = k->op;
    double *part = k->ws;
    double s = op->a.has_acc ? (double)((const float *)k->in[0])[0] : 0.0;
    int nt = delta_cpu_threads();
    (void)nt;
    for (int j = op->a.has_acc ? 1 : 0; j < op->n_in; j++) {
        const float *x = k->in[j];
        int64_t n = k->in_t[j]->numel, nc = delta_sumsq_chunks(n);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (n > OPT_MIN)
#endif
        for (int64_t c = 0; c < nc; c++) {
            int64_t lo = c * DELTA_SUMSQ_CHUNK;
            int64_t hi = lo + DELTA_SUMSQ_CHUNK < n ? lo + DELTA_SUMSQ_CHUNK
                                                    : n;
            part[c] = delta_sumsq_range(x, lo, hi);
        }
        double t = 0.0;
        for (int64_t c = 0; c < nc; c++) t += part[c];
        s += t;
    }
    ((float *)k->out[0])[0] = (float)s;
}

void delta_k_clip_coef(const delta_kargs *k) {
    float ss = ((const float *)k->in[0])[0];
    delta_clip_coef_of(ss, k->op->a.value, (float *)k->out[0],
                       (float *)k->out[1]);
}
