/* CPU kernels: the reference implementation of every op, forward and
 * backward. Every other backend's kernels are tested against these.
 *
 * Determinism rule for every kernel here: each output element is computed
 * by exactly one thread in a fixed order, so results do not depend on
 * scheduling or on the thread count; no reduction is split across threads
 * unless its partial results are combined in a fixed order. */
#ifndef DELTA_CPU_KERNELS_H
#define DELTA_CPU_KERNELS_H

#include "graph/graph_impl.h"

struct delta_comm;

/* Values a kernel reads besides its operands. */
typedef struct delta_kernel_env {
    uint64_t seed;   /* the program's seed (dropout) */
    int64_t step;    /* training step, 0-based (dropout, Adam bias terms) */
    bool training;   /* false: batch norm uses running stats, dropout off */
    struct delta_comm *comm; /* the ranks, for collective ops (NULL: one) */
} delta_kernel_env;

/* Everything one kernel call needs. Shapes come from the tensor records;
 * data pointers are DELTA_ALIGN-aligned. For in-place ops out[i] may equal
 * an in[j]. */
typedef struct delta_kargs {
    const delta_op *op;
    const delta_tensor *in_t[DELTA_MAX_OP_IN];
    const void *in[DELTA_MAX_OP_IN];
    const delta_tensor *out_t[DELTA_MAX_OP_OUT];
    void *out[DELTA_MAX_OP_OUT];
    void *ws;          /* op->workspace bytes of scratch, or NULL if 0 */
    const delta_kernel_env *env;
} delta_kargs;

typedef void (*delta_kernel_fn)(const delta_kargs *k);

/* Runs the kernel of k->op's type. */
void delta_cpu_run(const delta_kargs *k);
/* The kernel of op type t as dispatch.c's table holds it (its F32 form;
 * NULL for a view): what tests run through delta_cpu_run_widened. */
delta_kernel_fn delta_cpu_kernel(delta_op_type t);

/* ---- GEMM -------------------------------------------------------------
 * Row-major C (M x N) = alpha * op(A) op(B) + beta * C, op = transpose when
 * ta/tb; lda, ldb, ldc are row strides. Goes to OpenBLAS when built with it
 * and selected, else to the built-in blocked kernel. */
void delta_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc);
void delta_gemm_builtin(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc);
/* The built-in GEMM on the calling thread only: safe inside an OpenMP
 * parallel region, where delta_gemm must not be called. */
void delta_gemm_builtin_serial(bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb,
                               float beta, float *c, int64_t ldc);
/* True when GEMMs run on OpenBLAS's own pthread pool: OpenMP threads left
 * spinning by a parallel loop then compete with it for the cores, so
 * kernels keep their small helper loops between GEMMs serial. False with
 * the built-in GEMM or an OpenMP build of OpenBLAS (one shared pool). */
bool delta_gemm_contends(void);
/* Test hook: force (1) the portable micro-kernel or restore (0) the
 * run-time choice; returns the kernel now in use (1 = portable). */
int delta_gemm_builtin_kernel(int force);

/* ---- kernels, one per op type (grouped by file) ------------------------ */
/* k_matmul.c */
void delta_k_matmul(const delta_kargs *k);
void delta_k_linear(const delta_kargs *k);
void delta_k_sum_leading(const delta_kargs *k);
/* k_conv.c */
void delta_k_conv2d(const delta_kargs *k);
void delta_k_conv2d_dx(const delta_kargs *k);
void delta_k_conv2d_dw(const delta_kargs *k);
void delta_k_bias_grad_nchw(const delta_kargs *k);
/* k_pool.c */
void delta_k_maxpool2d(const delta_kargs *k);
void delta_k_maxpool2d_bwd(const delta_kargs *k);
void delta_k_avgpool2d(const delta_kargs *k);
void delta_k_avgpool2d_bwd(const delta_kargs *k);
void delta_k_global_avgpool(const delta_kargs *k);
void delta_k_global_avgpool_bwd(const delta_kargs *k);
/* k_norm.c */
void delta_k_batchnorm(const delta_kargs *k);
void delta_k_batchnorm_bwd(const delta_kargs *k);
/* The fused forms (fuse.c): the bits of batchnorm -> relu and batchnorm
 * -> add -> relu, in F32 or BF16. */
void delta_k_batchnorm_relu(const delta_kargs *k);
void delta_k_batchnorm_add_relu(const delta_kargs *k);
void delta_k_bn_running_update(const delta_kargs *k);
void delta_k_layernorm(const delta_kargs *k);
void delta_k_layernorm_bwd(const delta_kargs *k);
/* k_eltwise.c */
void delta_k_relu(const delta_kargs *k);
void delta_k_relu_bwd(const delta_kargs *k);
void delta_k_gelu(const delta_kargs *k);
void delta_k_gelu_bwd(const delta_kargs *k);
void delta_k_add(const delta_kargs *k);
void delta_k_mul(const delta_kargs *k);
void delta_k_scale(const delta_kargs *k);
void delta_k_sum(const delta_kargs *k);
void delta_k_fill(const delta_kargs *k);
void delta_k_broadcast(const delta_kargs *k);
void delta_k_dropout(const delta_kargs *k);
void delta_k_dropout_bwd(const delta_kargs *k);
/* k_softmax.c */
void delta_k_softmax(const delta_kargs *k);
void delta_k_softmax_bwd(const delta_kargs *k);
void delta_k_cross_entropy(const delta_kargs *k);
void delta_k_cross_entropy_bwd(const delta_kargs *k);
/* k_layout.c */
void delta_k_embedding(const delta_kargs *k);
void delta_k_embedding_bwd(const delta_kargs *k);
void delta_k_transpose(const delta_kargs *k);
void delta_k_split(const delta_kargs *k);
void delta_k_concat(const delta_kargs *k);
/* k_optim.c */
void delta_k_sgd_update(const delta_kargs *k);
void delta_k_adamw_update(const delta_kargs *k);
/* gradient clipping by global norm */
void delta_k_grad_sumsq(const delta_kargs *k);
void delta_k_clip_coef(const delta_kargs *k);
/* k_comm.c: collectives (on the backend's communication stream) */
void delta_k_allreduce(const delta_kargs *k);
void delta_k_reduce_scatter(const delta_kargs *k);
void delta_k_allgather(const delta_kargs *k);
/* k_bf16.c */
void delta_k_cast(const delta_kargs *k);
void delta_k_matmul_bf16(const delta_kargs *k);
void delta_k_linear_bf16(const delta_kargs *k);

/* ---- BF16 (k_bf16.c) ------------------------------------------------------
 * Most kernels above take F32 or BF16 operands themselves (k_dtype.h);
 * these are the conversions, the widening of the convolutions and the
 * BF16 GEMM. Bulk conversions (round to nearest even), parallel over elements. */
void delta_cpu_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void delta_cpu_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* True when any operand of k is BF16. */
bool delta_cpu_has_bf16(const delta_kargs *k);
/* k as its fp32 kernel sees it when widened (delta_op_widens_bf16 ops):
 * each BF16 operand becomes an F32 record whose data is its fp32 copy's
 * place at the start of k->ws (delta_widen_bytes_of each, inputs then
 * outputs, as cost.c declares them), and the op's workspace is what
 * follows (w->op: k->op with the copies' bytes taken off). Converts
 * nothing; w points into itself, so it is filled in place. Shared by the
 * CPU's and the CUDA backend's widening. */
typedef struct delta_widened {
    delta_kargs k;
    delta_op op;
    delta_tensor t_in[DELTA_MAX_OP_IN], t_out[DELTA_MAX_OP_OUT];
} delta_widened;
void delta_widen_kargs(const delta_kargs *k, delta_widened *w);
/* Runs fp32 kernel fn on fp32 copies of k's BF16 operands, made in k->ws
 * (delta_widen_kargs), and rounds its BF16 outputs. */
void delta_cpu_run_widened(const delta_kargs *k, delta_kernel_fn fn);
/* BF16 C (M x N, row stride ldc) = round(alpha op(A) op(B) [+ bias]) with
 * BF16 A and B, products summed in fp32 by delta_gemm over blocks widened
 * in ws (delta_bf16_gemm_workspace(k) bytes); bias (N) BF16 or NULL. */
void delta_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     float alpha, const uint16_t *a, int64_t lda,
                     const uint16_t *b, int64_t ldb, const uint16_t *bias,
                     uint16_t *c, int64_t ldc, void *ws);

/* Dropout's keep test for element i, shared by forward and backward so both
 * draw the same mask: keyed by (seed, forward op id, step). */
bool delta_dropout_keep(uint64_t seed, int op_id, int64_t step, int64_t i,
                        float p);
/* The key of that draw: element i is kept iff
 * delta_rng_uniform(delta_dropout_key(seed, op_id, step), i) >= p (the CUDA
 * kernels draw with it too). */
uint64_t delta_dropout_key(uint64_t seed, int op_id, int64_t step);

#endif
