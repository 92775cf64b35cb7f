/* BF16 on the GPU (mixed precision, docs/KERNELS.md and docs/CUDA.md): the
 * cast and the widening of ops that have no native BF16 kernel (the
 * convolution family; the other ops' kernels take BF16 themselves:
 * cu_bf16_route.h). The CUDA side of src/backend/cpu/k_bf16.c, rule for
 * rule:
 *
 *  - Conversions are src/core/bf16.h's, compiled for the device: widening
 *    is exact, narrowing rounds to nearest even (NaN stays a quiet NaN of
 *    its sign, overflow goes to infinity, subnormals are kept), so the
 *    cast and every rounded output are the CPU's rule bit for bit.
 *  - A widened op (delta_op_widens_bf16) gets fp32 copies of its BF16
 *    operands at the start of its declared workspace, in input then output
 *    order (delta_widen_kargs, the CPU's layout: delta_widen_bytes_of
 *    each, as cost.c declares them); its fp32 kernel runs on them with the
 *    rest of the workspace as its own, and each fp32 output is rounded
 *    once into the real BF16 output. So the workspace the graph declares
 *    is exactly what is used, and the result is the fp32 kernel's,
 *    rounded.
 *
 * matmul and linear with BF16 operands run on the tensor cores through
 * cuBLASLt (cu_lt_gemm.cu, called from cu_matmul.cu). */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"
#include "core/bf16.h"

/* ---- conversions and the cast --------------------------------------------- */

__global__ static void bf16_to_f32_k(const uint16_t *src, float *dst,
                                     int64_t n) {
    CU_FOR(i, n) dst[i] = delta_bf16_to_f32(src[i]);
}

__global__ static void f32_to_bf16_k(const float *src, uint16_t *dst,
                                     int64_t n) {
    CU_FOR(i, n) dst[i] = delta_f32_to_bf16(src[i]);
}

void delta_cu_cast(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = k->out_t[0]->numel;
    delta_dtype from = k->in_t[0]->dtype, to = k->out_t[0]->dtype;
    if (from == DELTA_F32 && to == DELTA_BF16)
        CU_LAUNCH(f32_to_bf16_k, c, n, (const float *)k->in[0],
                  (uint16_t *)k->out[0], n);
    else if (from == DELTA_BF16 && to == DELTA_F32)
        CU_LAUNCH(bf16_to_f32_k, c, n, (const uint16_t *)k->in[0],
                  (float *)k->out[0], n);
    else
        DELTA_ASSERTF(false, "cast op %d from %s to %s", k->op->id,
                      delta_dtype_name(from), delta_dtype_name(to));
}

/* ---- widening ---------------------------------------------------------------- */

void delta_cu_run_widened(const delta_cuda_kctx *c, const delta_kargs *k,
                          delta_cu_kernel_fn fn) {
    delta_widened w;
    delta_widen_kargs(k, &w);
    for (int i = 0; i < k->op->n_in; i++)
        if (w.k.in[i] != k->in[i])
            CU_LAUNCH(bf16_to_f32_k, c, k->in_t[i]->numel,
                      (const uint16_t *)k->in[i], (float *)w.k.in[i],
                      k->in_t[i]->numel);
    fn(c, &w.k);
    for (int i = 0; i < k->op->n_out; i++)
        if (w.k.out[i] != k->out[i])
            CU_LAUNCH(f32_to_bf16_k, c, k->out_t[i]->numel,
                      (const float *)w.k.out[i], (uint16_t *)k->out[i],
                      k->out_t[i]->numel);
}
