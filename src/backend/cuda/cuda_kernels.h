/* CUDA kernels: every op of src/backend/cpu/kernels.h on the GPU, launched
 * on the backend's compute stream (cuda_backend.c). Included from C (the
 * backend) and from the .cu files (C++), hence the extern "C".
 *
 * Determinism rule, as on the CPU: every output element is written by one
 * thread, and every reduction is done in a fixed order (one thread in
 * sequence, or a block's fixed shared-memory tree); no atomics. So running
 * an op twice on the same inputs gives the same bits (a recomputed tensor
 * equals the dropped one), and results do not depend on timing. Which ops
 * go to cuBLAS and which are our kernels: docs/CUDA.md. */
#ifndef DELTA_CUDA_KERNELS_H
#define DELTA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "backend/cpu/kernels.h"

/* What a kernel launch needs besides its arguments. scratch is a small
 * device buffer owned by the backend, outside the arena (reductions keep
 * their per-row partials there; kernels fall back to a slower one-block
 * form when it is too small). */
typedef struct delta_cuda_kctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *scratch;
    size_t scratch_bytes;
} delta_cuda_kctx;

#define DELTA_CUDA_SCRATCH_BYTES ((size_t)1 << 20)

/* Launches k->op's kernels on c->stream (asynchronous). */
void delta_cuda_run(const delta_cuda_kctx *c, const delta_kargs *k);

/* A device-side move that allows overlap (memmove), on c->stream. */
void delta_cuda_memmove(const delta_cuda_kctx *c, void *dst, const void *src,
                        size_t bytes);

/* ---- per file (grouped as the CPU kernels) -------------------------------- */
/* cu_matmul.cu */
void delta_cu_matmul(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_linear(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_sum_leading(const delta_cuda_kctx *c, const delta_kargs *k);
/* Row-major C = alpha op(A) op(B) + beta C, `batch` times with element
 * strides sa, sb, sc (0: the same matrix for every batch entry). */
void delta_cu_gemm(const delta_cuda_kctx *c, bool ta, bool tb, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, int64_t sa, const float *b, int64_t ldb,
                   int64_t sb, float beta, float *cm, int64_t ldc, int64_t sc,
                   int64_t batch);
/* cu_conv.cu */
void delta_cu_conv2d(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_conv2d_dx(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_conv2d_dw(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_bias_grad_nchw(const delta_cuda_kctx *c, const delta_kargs *k);
/* cu_pool.cu */
void delta_cu_maxpool2d(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_maxpool2d_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_avgpool2d(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_avgpool2d_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_global_avgpool(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_global_avgpool_bwd(const delta_cuda_kctx *c,
                                 const delta_kargs *k);
/* cu_norm.cu */
void delta_cu_batchnorm(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_batchnorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_bn_running_update(const delta_cuda_kctx *c,
                                const delta_kargs *k);
void delta_cu_layernorm(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_layernorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
/* cu_eltwise.cu */
void delta_cu_relu(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_relu_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_gelu(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_gelu_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_add(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_mul(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_scale(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_sum(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_fill(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_broadcast(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_dropout(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_dropout_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
/* cu_softmax.cu */
void delta_cu_softmax(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_softmax_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_cross_entropy(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_cross_entropy_bwd(const delta_cuda_kctx *c,
                                const delta_kargs *k);
/* cu_layout.cu */
void delta_cu_embedding(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_embedding_bwd(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_transpose(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_split(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_concat(const delta_cuda_kctx *c, const delta_kargs *k);
/* cu_optim.cu */
void delta_cu_sgd_update(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_adamw_update(const delta_cuda_kctx *c, const delta_kargs *k);

#ifdef __cplusplus
}
#endif
#endif
