/* CUDA kernels: every op of src/backend/cpu/kernels.h on the GPU, launched
 * on the backend's compute stream (cuda_backend.c). Included from C (the
 * backend) and from the .cu files (C++), hence the extern "C".
 *
 * Determinism rule, as on the CPU: every output element is written by one
 * thread, and every reduction is done in a fixed order (one thread in
 * sequence, a block's fixed shared-memory tree, or per-block partials in
 * the scratch buffer combined by one thread in a fixed order); no atomics.
 * So running an op twice on the same inputs gives the same bits (a
 * recomputed tensor equals the dropped one), and results do not depend on
 * timing. Which ops go to cuBLAS or cuDNN and which are our kernels:
 * docs/CUDA.md. */
#ifndef DELTA_CUDA_KERNELS_H
#define DELTA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "backend/cpu/kernels.h"

/* What a kernel launch needs besides its arguments. scratch is a small
 * device buffer owned by the backend, outside the arena (reductions keep
 * their per-row partials there; kernels fall back to a slower one-block
 * form when it is too small). */
typedef struct delta_cudnn delta_cudnn;

typedef struct delta_cuda_kctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *scratch;
    size_t scratch_bytes;
    delta_cudnn *dnn;      /* cuDNN for convolutions, or NULL */
    cublasLtHandle_t lt;   /* cuBLASLt: BF16 GEMMs, bias epilogues */
    void *blas_ws;         /* cuBLAS's fixed workspace, which the Lt calls */
    size_t blas_ws_bytes;  /* share (one stream: never at the same time) */
    bool gemm_epilogue;    /* linear's bias in the GEMM's epilogue
                              (DELTA_GEMM_EPILOGUE=0: a pass of its own) */
} delta_cuda_kctx;

#define DELTA_CUDA_SCRATCH_BYTES ((size_t)1 << 20)

/* Launches k->op's kernels on c->stream (asynchronous). */
void delta_cuda_run(const delta_cuda_kctx *c, const delta_kargs *k);

/* A device-side move that allows overlap (memmove), on c->stream. */
void delta_cuda_memmove(const delta_cuda_kctx *c, void *dst, const void *src,
                        size_t bytes);

/* ---- cuDNN, loaded at run time (cudnn_conv.c) ------------------------------ */
typedef struct delta_conv_dims {
    int64_t n, c, h, w, k, r, s, p, q, stride, pad;
} delta_conv_dims;

/* Whether t is one of the convolutions cuDNN runs (conv2d, conv2d_dx,
 * conv2d_dw): the fitting, the dispatch's BF16 route and cudnn_conv.c ask
 * it alike. */
static inline bool delta_cuda_is_conv(delta_op_type t) {
    return t == DELTA_OP_CONV2D || t == DELTA_OP_CONV2D_DX ||
           t == DELTA_OP_CONV2D_DW;
}

/* A convolution op's dims from its operands' shapes: x and w from the
 * inputs (conv2d), dx and w (conv2d_dx), x and dw (conv2d_dw). The one
 * place both the kernels (kargs) and the backend's fitting (the graph)
 * read them from. */
delta_conv_dims delta_conv_dims_of(const delta_op *op,
                                   const delta_tensor *const *in,
                                   const delta_tensor *const *out);

/* Loads libcudnn.so.9 and binds a handle to stream; NULL with the reason in
 * why when it cannot be had (or DELTA_CUDNN=0). device names the GPU model
 * in the file of timed choices (with cuDNN's version). */
delta_cudnn *delta_cudnn_open(cudaStream_t stream, const char *device,
                              char *why, size_t n);
void delta_cudnn_close(delta_cudnn *d);
size_t delta_cudnn_version(const delta_cudnn *d);
/* The convolution of type (CONV2D: a = x, b = w, out = y; CONV2D_DX:
 * a = dy, b = w, out = dx; CONV2D_DW: a = x, b = dy, out = dw), all three
 * of dtype dt (F32: plain fp32 math; BF16: tensor cores summing in fp32,
 * one rounding per output), with a deterministic algorithm whose
 * workspace fits ws_bytes: out = conv + beta * out (beta 0 or 1; the
 * blend in fp32 before the rounding). false when there is none: nothing
 * was launched. */
bool delta_cudnn_conv(delta_cudnn *d, delta_op_type type,
                      const delta_conv_dims *g, delta_dtype dt,
                      const void *a, const void *b, void *out, float beta,
                      void *ws, size_t ws_bytes);
/* Chooses the algorithm for (type, g, dt) by timing, once per shape (kept
 * in the file of choices), and returns the workspace the op must declare:
 * the larger of `declared` and what the choice needs. `declared` when
 * nothing was timed. Blocks the host (it runs convolutions): call it
 * before planning, never inside a step. */
size_t delta_cudnn_tune(delta_cudnn *d, delta_op_type type,
                        const delta_conv_dims *g, delta_dtype dt,
                        size_t declared);
/* Writes new timed choices to the file; false with err when it cannot. */
bool delta_cudnn_save(delta_cudnn *d, char *err, size_t n);
/* ---- NCCL, loaded at run time (nccl.c): the collective ops ------------------
 * (data parallel; docs/CUDA.md). delta_nccl_open loads libnccl.so.2 and
 * joins the ranks of comm (rank 0's unique id over MPI), issuing on
 * stream; NULL with the reason in why. delta_nccl_run runs a collective op
 * (allreduce, reduce-scatter, allgather) on that stream. */
typedef struct delta_nccl delta_nccl;
struct delta_comm;
delta_nccl *delta_nccl_open(struct delta_comm *comm, cudaStream_t stream,
                            char *why, size_t n);
void delta_nccl_close(delta_nccl *d);
int delta_nccl_version(const delta_nccl *d);
void delta_nccl_run(delta_nccl *d, const delta_kargs *k);
/* cu_dp.cu: out[0..n) = the mean over P ranks in rank order, rank me's
 * values in mine, the others' in ws at slot * stride (nccl.c). */
void delta_cu_dp_mean(cudaStream_t stream, float *out, const float *mine,
                      const float *ws, int64_t stride, int P, int me,
                      int64_t n);

/* ---- cuBLASLt GEMMs (cu_lt_gemm.cu) ---------------------------------------- */
/* Row-major C (m x n, row stride ldc) = alpha op(A) op(B) (+ bias per
 * column), A and B of abtype (CUDA_R_16BF or CUDA_R_32F) and C of
 * ctype, summed in fp32, `batch` times with element strides sa, sb, sc
 * (sa or sb 0: the same matrix for every entry). bias: n values of ctype
 * added in the epilogue before the one rounding (batch 1), or NULL. */
typedef struct delta_lt_gemm {
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    float alpha;
    cudaDataType_t abtype, ctype;
    const void *bias;
} delta_lt_gemm;
/* Launches g on c's stream. False, with nothing launched, when cuBLASLt has
 * no algorithm for it with its bias (the caller then adds the bias in a
 * pass of its own); without a bias it has one or stops with a message. */
bool delta_cu_lt_gemm(const delta_cuda_kctx *c, const delta_lt_gemm *g,
                      const void *a, const void *b, void *cm);

/* ---- per file (grouped as the CPU kernels) -------------------------------- */
/* cu_matmul.cu: F32 and BF16 (the BF16 products on the tensor cores) */
void delta_cu_matmul(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_matmul_bf16(const delta_cuda_kctx *c, const delta_kargs *k);
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
/* conv2d, conv2d_dx or conv2d_dw with BF16 operands: cuDNN on them as
 * they are, else the fp32 kernel on widened copies (cu_bf16.cu) */
void delta_cu_conv_bf16(const delta_cuda_kctx *c, const delta_kargs *k);
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
void delta_cu_batchnorm_relu(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_batchnorm_add_relu(const delta_cuda_kctx *c,
                                 const delta_kargs *k);

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
void delta_cu_grad_sumsq(const delta_cuda_kctx *c, const delta_kargs *k);
void delta_cu_clip_coef(const delta_cuda_kctx *c, const delta_kargs *k);
/* cu_bf16.cu: the cast, and the widening of the ops that have no native
 * BF16 kernel */
typedef void (*delta_cu_kernel_fn)(const delta_cuda_kctx *c,
                                   const delta_kargs *k);
void delta_cu_cast(const delta_cuda_kctx *c, const delta_kargs *k);
/* Runs fp32 kernel fn on fp32 copies of k's BF16 operands, made at the
 * start of k->ws (delta_widen_kargs, as on the CPU), with the rest of the
 * workspace as fn's own, and rounds its BF16 outputs. */
void delta_cu_run_widened(const delta_cuda_kctx *c, const delta_kargs *k,
                          delta_cu_kernel_fn fn);
/* The kernel of op type t in delta_cuda_run's table (NULL: nothing to
 * run): what it runs for F32 operands, and for BF16 ones where
 * delta_cuda_bf16_generic(t) (cu_bf16_route.h). test_cuda widens it to
 * compare the native BF16 route with the widened one. */
delta_cu_kernel_fn delta_cuda_kernel_of(delta_op_type t);

#ifdef __cplusplus
}
#endif
#endif
