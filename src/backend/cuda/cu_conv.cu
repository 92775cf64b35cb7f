/* Convolution on the GPU: conv2d forward, its input and weight gradients,
 * the bias gradient. Lowered to cuBLAS GEMMs over im2col columns that live
 * in the op's declared workspace (the graph sizes it for the CPU kernels,
 * conv_geom.c; the arena holds nothing else for it):
 *   - 1x1, stride 1, unpadded: no columns; one batched GEMM over the images
 *     (dw: one GEMM per image, accumulated in image order);
 *   - otherwise as many whole images a block as the workspace holds
 *     (columns [image][C*R*S][P*Q]), forward and dx as one strided-batched
 *     GEMM per block, dw one GEMM per image in order;
 *   - when not even one image fits, bands of output rows of one image;
 *   - when not even one output row fits (possible only for the workspace
 *     of a CPU conv2d_dx lowered another way), a direct kernel, one thread
 *     per output element.
 * col2im is a gather (each dx element adds its taps in (r, s) order), so
 * nothing is accumulated with atomics and every result is reproducible
 * bit for bit. Only deterministic building blocks: no cuDNN here (see
 * docs/CUDA.md). */
#include "backend/cuda/cu_common.cuh"

typedef struct cgeom {
    int64_t n, c, h, w, k, r, s, p, q;
    int64_t st, pad, crs, pq, hw;
    delta_conv_dims dims; /* the same, as cuDNN takes them */
} cgeom;

static cgeom cgeom_of(const delta_kargs *k) {
    delta_conv_dims g = delta_conv_dims_of(k->op, k->in_t, k->out_t);
    cgeom G;
    G.n = g.n; G.c = g.c; G.h = g.h; G.w = g.w;
    G.k = g.k; G.r = g.r; G.s = g.s; G.p = g.p; G.q = g.q;
    G.st = g.stride; G.pad = g.pad;
    G.crs = g.c * g.r * g.s;
    G.pq = g.p * g.q;
    G.hw = g.h * g.w;
    G.dims = g;
    return G;
}

/* cuDNN first (a deterministic algorithm within the op's workspace),
 * when the backend found it; false: lower it here. */
static bool try_cudnn(const delta_cuda_kctx *c, const delta_kargs *k,
                      const cgeom *g, const void *a, const void *b,
                      void *out, float beta) {
    if (!c->dnn) return false;
    return delta_cudnn_conv(c->dnn, k->op->type, &g->dims,
                            k->out_t[0]->dtype, a, b, out, beta, k->ws,
                            k->ws ? k->op->workspace : 0);
}

static bool pointwise(const cgeom *g) {
    return g->r == 1 && g->s == 1 && g->st == 1 && g->pad == 0;
}

/* How the workspace is used: `imgs` whole images a block, or (imgs == 1,
 * band < P) bands of `band` output rows, or band == 0: direct kernel. */
typedef struct cblocks {
    int64_t imgs, band;
} cblocks;

static cblocks cblocks_of(const cgeom *g, size_t ws_bytes) {
    cblocks b = {1, 0};
    size_t ws = ws_bytes / sizeof(float);
    size_t img = (size_t)(g->crs * g->pq), row = (size_t)(g->crs * g->q);
    if (img > 0 && ws >= img) {
        b.imgs = (int64_t)(ws / img);
        if (b.imgs > g->n) b.imgs = g->n;
        if (b.imgs < 1) b.imgs = 1;
        b.band = g->p;
    } else if (row > 0 && ws >= row) {
        b.band = (int64_t)(ws / row);
        if (b.band > g->p) b.band = g->p;
    }
    return b;
}

/* col[i][crs][(p - p0) * Q + q] for images n0 + i (i < m), rows [p0, p1). */
__global__ static void im2col_k(const float *x, float *col, cgeom g,
                                int64_t n0, int64_t m, int64_t p0,
                                int64_t p1) {
    const int64_t nc = (p1 - p0) * g.q;
    CU_FOR(e, m * g.crs * nc) {
        int64_t i = e / (g.crs * nc), t = e % (g.crs * nc);
        int64_t row = t / nc, cl = t % nc;
        int64_t c = row / (g.r * g.s), rs = row % (g.r * g.s);
        int64_t h = (p0 + cl / g.q) * g.st - g.pad + rs / g.s;
        int64_t w = (cl % g.q) * g.st - g.pad + rs % g.s;
        col[e] = h >= 0 && h < g.h && w >= 0 && w < g.w
                     ? x[((n0 + i) * g.c + c) * g.hw + h * g.w + w]
                     : 0.0f;
    }
}

/* dx[n0 + i] (+)= the taps of col (rows [p0, p1)) landing on each element,
 * added in (r, s) order. */
__global__ static void col2im_k(const float *col, float *dx, cgeom g,
                                int64_t n0, int64_t m, int64_t p0, int64_t p1,
                                int accumulate) {
    const int64_t nc = (p1 - p0) * g.q;
    CU_FOR(e, m * g.c * g.hw) {
        int64_t i = e / (g.c * g.hw), t = e % (g.c * g.hw);
        int64_t c = t / g.hw, h = (t % g.hw) / g.w, w = t % g.w;
        const float *ci = col + i * g.crs * nc;
        float acc = 0.0f;
        for (int64_t r = 0; r < g.r; r++) {
            int64_t hp = h + g.pad - r;
            if (hp < 0 || hp % g.st) continue;
            int64_t p = hp / g.st;
            if (p < p0 || p >= p1) continue;
            for (int64_t s = 0; s < g.s; s++) {
                int64_t wq = w + g.pad - s;
                if (wq < 0 || wq % g.st) continue;
                int64_t q = wq / g.st;
                if (q >= g.q) continue;
                acc += ci[((c * g.r + r) * g.s + s) * nc + (p - p0) * g.q + q];
            }
        }
        float *d = dx + (n0 * g.c) * g.hw + e;
        *d = accumulate ? *d + acc : acc;
    }
}

/* ---- direct kernels (no workspace) --------------------------------------- */

__global__ static void conv_direct_k(const float *x, const float *wt,
                                     float *y, cgeom g) {
    CU_FOR(e, g.n * g.k * g.pq) {
        int64_t n = e / (g.k * g.pq), kk = (e / g.pq) % g.k;
        int64_t p = (e % g.pq) / g.q, q = e % g.q;
        float acc = 0.0f;
        for (int64_t c = 0; c < g.c; c++)
            for (int64_t r = 0; r < g.r; r++) {
                int64_t h = p * g.st - g.pad + r;
                if (h < 0 || h >= g.h) continue;
                for (int64_t s = 0; s < g.s; s++) {
                    int64_t w = q * g.st - g.pad + s;
                    if (w < 0 || w >= g.w) continue;
                    acc += wt[((kk * g.c + c) * g.r + r) * g.s + s] *
                           x[(n * g.c + c) * g.hw + h * g.w + w];
                }
            }
        y[e] = acc;
    }
}

__global__ static void dx_direct_k(const float *dy, const float *wt,
                                   float *dx, cgeom g) {
    CU_FOR(e, g.n * g.c * g.hw) {
        int64_t n = e / (g.c * g.hw), c = (e / g.hw) % g.c;
        int64_t h = (e % g.hw) / g.w, w = e % g.w;
        float acc = 0.0f;
        for (int64_t kk = 0; kk < g.k; kk++)
            for (int64_t r = 0; r < g.r; r++) {
                int64_t hp = h + g.pad - r;
                if (hp < 0 || hp % g.st || hp / g.st >= g.p) continue;
                for (int64_t s = 0; s < g.s; s++) {
                    int64_t wq = w + g.pad - s;
                    if (wq < 0 || wq % g.st || wq / g.st >= g.q) continue;
                    acc += wt[((kk * g.c + c) * g.r + r) * g.s + s] *
                           dy[(n * g.k + kk) * g.pq + (hp / g.st) * g.q +
                              wq / g.st];
                }
            }
        dx[e] = acc;
    }
}

__global__ static void dw_direct_k(const float *x, const float *dy, float *dw,
                                   cgeom g) {
    CU_FOR(e, g.k * g.crs) {
        int64_t kk = e / g.crs, c = (e % g.crs) / (g.r * g.s);
        int64_t r = (e % (g.r * g.s)) / g.s, s = e % g.s;
        float acc = 0.0f;
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t p = 0; p < g.p; p++) {
                int64_t h = p * g.st - g.pad + r;
                if (h < 0 || h >= g.h) continue;
                for (int64_t q = 0; q < g.q; q++) {
                    int64_t w = q * g.st - g.pad + s;
                    if (w < 0 || w >= g.w) continue;
                    acc += dy[(n * g.k + kk) * g.pq + p * g.q + q] *
                           x[(n * g.c + c) * g.hw + h * g.w + w];
                }
            }
        dw[e] = acc;
    }
}

__global__ static void plane_bias_k(float *y, const float *bias, int64_t k,
                                    int64_t pq, int64_t total, int add) {
    CU_FOR(e, total) {
        float b = bias ? bias[(e / pq) % k] : 0.0f;
        y[e] = add ? y[e] + b : b;
    }
}

/* ---- the ops ------------------------------------------------------------- */

void delta_cu_conv2d(const delta_cuda_kctx *c, const delta_kargs *k) {
    const cgeom g = cgeom_of(k);
    const float *x = (const float *)k->in[0], *w = (const float *)k->in[1];
    const float *bias = k->op->n_in > 2 ? (const float *)k->in[2] : NULL;
    float *y = (float *)k->out[0], *col = (float *)k->ws;
    const int64_t total = g.n * g.k * g.pq;
    if (total == 0) return;
    if (g.crs == 0) { /* no input channels: the output is the bias */
        CU_LAUNCH(plane_bias_k, c, total, y, bias, g.k, g.pq, total, 0);
        return;
    }
    cblocks b = cblocks_of(&g, col ? k->op->workspace : 0);
    if (try_cudnn(c, k, &g, x, w, y, 0.0f)) {
        /* done by cuDNN */
    } else if (pointwise(&g)) {
        delta_cu_gemm(c, false, false, g.k, g.pq, g.c, 1.0f, w, g.c, 0, x,
                      g.hw, g.c * g.hw, 0.0f, y, g.pq, g.k * g.pq, g.n);
    } else if (b.band == 0) {
        CU_LAUNCH(conv_direct_k, c, total, x, w, y, g);
    } else {
        for (int64_t n0 = 0; n0 < g.n; n0 += b.imgs) {
            int64_t m = g.n - n0 < b.imgs ? g.n - n0 : b.imgs;
            for (int64_t p0 = 0; p0 < g.p; p0 += b.band) {
                int64_t p1 = p0 + b.band < g.p ? p0 + b.band : g.p;
                int64_t nc = (p1 - p0) * g.q;
                CU_LAUNCH(im2col_k, c, m * g.crs * nc, x, col, g, n0, m, p0,
                          p1);
                delta_cu_gemm(c, false, false, g.k, nc, g.crs, 1.0f, w, g.crs,
                              0, col, nc, g.crs * nc, 0.0f,
                              y + n0 * g.k * g.pq + p0 * g.q, g.pq,
                              g.k * g.pq, m);
            }
        }
    }
    if (bias) CU_LAUNCH(plane_bias_k, c, total, y, bias, g.k, g.pq, total, 1);
}

void delta_cu_conv2d_dx(const delta_cuda_kctx *c, const delta_kargs *k) {
    /* ins: dy (N,K,P,Q), w (K,C,R,S); outs: dx (N,C,H,W) */
    const cgeom g = cgeom_of(k);
    const float *dy = (const float *)k->in[0], *w = (const float *)k->in[1];
    float *dx = (float *)k->out[0], *col = (float *)k->ws;
    const int64_t total = g.n * g.c * g.hw;
    if (total == 0) return;
    if (g.k == 0 || g.pq == 0) {
        cudaMemsetAsync(dx, 0, (size_t)total * sizeof(float), c->stream);
        return;
    }
    if (try_cudnn(c, k, &g, dy, w, dx, 0.0f)) return;
    cblocks b = cblocks_of(&g, col ? k->op->workspace : 0);
    if (pointwise(&g)) {
        delta_cu_gemm(c, true, false, g.c, g.pq, g.k, 1.0f, w, g.c, 0, dy,
                      g.pq, g.k * g.pq, 0.0f, dx, g.hw, g.c * g.hw, g.n);
        return;
    }
    if (b.band == 0) {
        CU_LAUNCH(dx_direct_k, c, total, dy, w, dx, g);
        return;
    }
    for (int64_t n0 = 0; n0 < g.n; n0 += b.imgs) {
        int64_t m = g.n - n0 < b.imgs ? g.n - n0 : b.imgs;
        for (int64_t p0 = 0; p0 < g.p; p0 += b.band) {
            int64_t p1 = p0 + b.band < g.p ? p0 + b.band : g.p;
            int64_t nc = (p1 - p0) * g.q;
            delta_cu_gemm(c, true, false, g.crs, nc, g.k, 1.0f, w, g.crs, 0,
                          dy + n0 * g.k * g.pq + p0 * g.q, g.pq, g.k * g.pq,
                          0.0f, col, nc, g.crs * nc, m);
            CU_LAUNCH(col2im_k, c, m * g.c * g.hw, col, dx, g, n0, m, p0, p1,
                      p0 > 0);
        }
    }
}

void delta_cu_conv2d_dw(const delta_cuda_kctx *c, const delta_kargs *k) {
    /* ins: x (N,C,H,W), dy (N,K,P,Q); outs: dw (K,C,R,S) */
    const cgeom g = cgeom_of(k);
    const float *x = (const float *)k->in[0], *dy = (const float *)k->in[1];
    float *dw = (float *)k->out[0], *col = (float *)k->ws;
    if (g.k == 0 || g.crs == 0) return;
    if (g.n == 0 || g.pq == 0) {
        cudaMemsetAsync(dw, 0, (size_t)(g.k * g.crs) * sizeof(float),
                        c->stream);
        return;
    }
    if (try_cudnn(c, k, &g, x, dy, dw, 0.0f)) return;
    cblocks b = cblocks_of(&g, col ? k->op->workspace : 0);
    float beta = 0.0f; /* the first product overwrites dw, later ones add */
    if (pointwise(&g)) {
        for (int64_t n = 0; n < g.n; n++, beta = 1.0f)
            delta_cu_gemm(c, false, true, g.k, g.c, g.pq, 1.0f,
                          dy + n * g.k * g.pq, g.pq, 0, x + n * g.c * g.hw,
                          g.hw, 0, beta, dw, g.crs, 0, 1);
        return;
    }
    if (b.band == 0) {
        CU_LAUNCH(dw_direct_k, c, g.k * g.crs, x, dy, dw, g);
        return;
    }
    for (int64_t n0 = 0; n0 < g.n; n0 += b.imgs) {
        int64_t m = g.n - n0 < b.imgs ? g.n - n0 : b.imgs;
        for (int64_t p0 = 0; p0 < g.p; p0 += b.band) {
            int64_t p1 = p0 + b.band < g.p ? p0 + b.band : g.p;
            int64_t nc = (p1 - p0) * g.q;
            CU_LAUNCH(im2col_k, c, m * g.crs * nc, x, col, g, n0, m, p0, p1);
            for (int64_t i = 0; i < m; i++, beta = 1.0f)
                delta_cu_gemm(c, false, true, g.k, g.crs, nc, 1.0f,
                              dy + (n0 + i) * g.k * g.pq + p0 * g.q, g.pq, 0,
                              col + i * g.crs * nc, nc, 0, beta, dw, g.crs, 0,
                              1);
        }
    }
}

/* ---- BF16 (mixed precision) ---------------------------------------------- */

/* y[e] = bias[channel of e], BF16 (the prefill conv2d's cuDNN call adds
 * to with beta = 1, so the bias joins the fp32 sum before its one
 * rounding, as on the CPU). */
__global__ static void plane_bias_bf16_k(uint16_t *y, const uint16_t *bias,
                                         int64_t k, int64_t pq,
                                         int64_t total) {
    CU_FOR(e, total) y[e] = bias[(e / pq) % k];
}

/* A BF16 convolution runs on its BF16 operands through cuDNN (tensor
 * cores, fp32 sums, one rounding per output) over the op's whole declared
 * workspace: the fp32 copies the graph declares for the CPU's widening
 * (delta_op_widens_bf16) are not made, so their bytes are cuDNN's too, and
 * cu_fit_program timed the choice for all of it. Without cuDNN, without a
 * qualifying algorithm, or for empty shapes, the fp32 kernel runs on
 * widened copies as on the CPU (the declared workspace has room for
 * them). The route depends only on the shape and the declared workspace,
 * never on where tensors lie, so every policy runs keep's. */
void delta_cu_conv_bf16(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_op_type t = k->op->type;
    const cgeom g = cgeom_of(k);
    const bool bias = t == DELTA_OP_CONV2D && k->op->n_in > 2;
    bool same = k->in_t[0]->dtype == DELTA_BF16 &&
                k->in_t[1]->dtype == DELTA_BF16 &&
                k->out_t[0]->dtype == DELTA_BF16 &&
                (!bias || k->in_t[2]->dtype == DELTA_BF16);
    if (c->dnn && same && g.n > 0 && g.c > 0 && g.k > 0 && g.pq > 0) {
        const void *a = k->in[0], *b = k->in[1];
        void *out = k->out[0];
        if (bias)
            CU_LAUNCH(plane_bias_bf16_k, c, g.n * g.k * g.pq,
                      (uint16_t *)out, (const uint16_t *)k->in[2], g.k, g.pq,
                      g.n * g.k * g.pq);
        if (try_cudnn(c, k, &g, a, b, out, bias ? 1.0f : 0.0f)) return;
    }
    delta_cu_run_widened(c, k, t == DELTA_OP_CONV2D      ? delta_cu_conv2d
                               : t == DELTA_OP_CONV2D_DX ? delta_cu_conv2d_dx
                                                         : delta_cu_conv2d_dw);
}

/* One block per output channel: Σ over images and pixels, in double. */
__global__ static void bias_grad_k(const float *dy, float *db, int64_t N,
                                   int64_t K, int64_t pq) {
    __shared__ double buf[CU_THREADS];
    const int64_t kk = blockIdx.x, count = N * pq;
    double acc = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
        acc += dy[((e / pq) * K + kk) * pq + e % pq];
    acc = cu_block_sum(acc, buf);
    if (threadIdx.x == 0) db[kk] = (float)acc;
}

void delta_cu_bias_grad_nchw(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *t = k->in_t[0];
    const int64_t N = t->shape[0], K = t->shape[1];
    const int64_t pq = N > 0 && K > 0 ? t->numel / (N * K) : 0;
    if (K == 0) return;
    bias_grad_k<<<(unsigned)K, CU_THREADS, 0, c->stream>>>(
        (const float *)k->in[0], (float *)k->out[0], N, K, pq);
}
