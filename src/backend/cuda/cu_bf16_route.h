/* Which op types the CUDA backend computes natively on BF16 operands
 * (delta_cuda_run in cu_dispatch.cu). Header-only and free of CUDA
 * headers, so a build without CUDA (test_cuda's routing check) sees the
 * same list as the dispatch. */
#ifndef DELTA_CU_BF16_ROUTE_H
#define DELTA_CU_BF16_ROUTE_H

#ifdef __cplusplus /* included from the .cu files too: C declarations */
extern "C" {
#endif
#include "graph/graph_impl.h"
#ifdef __cplusplus
}
#endif

/* Whether t's CUDA kernel is one body for F32 and BF16 operands (templated
 * on the element type, computing in fp32 and rounding each BF16 output
 * once: cu_common.cuh's cu_ld / cu_st; the fused batch norms also round
 * where their unfused chain stored a tensor), so an op of type t with BF16
 * operands runs it directly, without fp32 copies in its workspace. Besides
 * these, the cast and matmul / linear (cuBLASLt, cu_lt_gemm.cu) are native;
 * the convolution family is widened (delta_op_widens_bf16); any other
 * type with a BF16 operand stops. */
static inline bool delta_cuda_bf16_generic(delta_op_type t) {
    switch (t) {
    case DELTA_OP_BATCHNORM: case DELTA_OP_BATCHNORM_BWD:
    case DELTA_OP_BATCHNORM_RELU: case DELTA_OP_BATCHNORM_ADD_RELU:
    case DELTA_OP_LAYERNORM: case DELTA_OP_LAYERNORM_BWD:
    case DELTA_OP_MAXPOOL2D: case DELTA_OP_MAXPOOL2D_BWD:
    case DELTA_OP_AVGPOOL2D: case DELTA_OP_AVGPOOL2D_BWD:
    case DELTA_OP_GLOBAL_AVGPOOL: case DELTA_OP_GLOBAL_AVGPOOL_BWD:
    case DELTA_OP_RELU: case DELTA_OP_RELU_BWD:
    case DELTA_OP_GELU: case DELTA_OP_GELU_BWD:
    case DELTA_OP_ADD: case DELTA_OP_MUL: case DELTA_OP_SCALE:
    case DELTA_OP_DROPOUT: case DELTA_OP_DROPOUT_BWD: case DELTA_OP_FILL:
    case DELTA_OP_TRANSPOSE: case DELTA_OP_SPLIT: case DELTA_OP_CONCAT:
    case DELTA_OP_SOFTMAX: case DELTA_OP_SOFTMAX_BWD:
    case DELTA_OP_CROSS_ENTROPY: case DELTA_OP_CROSS_ENTROPY_BWD:
    case DELTA_OP_SUM_LEADING:
        return true;
    default:
        return false;
    }
}

#endif
