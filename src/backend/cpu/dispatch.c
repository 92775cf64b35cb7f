/* Maps each op type to its CPU kernel. An op with BF16 operands goes to
 * its BF16 kernel where the type has one (bf16_kernels: the GEMMs),
 * through the widening wrapper where delta_op_widens_bf16 says so (the
 * convolution family), and otherwise to the same kernel, which then reads
 * the dtypes itself (k_dtype.h): elementwise ops, norms, pools, softmax,
 * the loss, sum_leading and the data movement. */
#include "backend/cpu/kernels.h"

static const delta_kernel_fn kernels[DELTA_OP_TYPE_COUNT] = {
    [DELTA_OP_MATMUL] = delta_k_matmul,
    [DELTA_OP_LINEAR] = delta_k_linear,
    [DELTA_OP_CONV2D] = delta_k_conv2d,
    [DELTA_OP_BATCHNORM] = delta_k_batchnorm,
    [DELTA_OP_LAYERNORM] = delta_k_layernorm,
    [DELTA_OP_RELU] = delta_k_relu,
    [DELTA_OP_GELU] = delta_k_gelu,
    [DELTA_OP_MAXPOOL2D] = delta_k_maxpool2d,
    [DELTA_OP_AVGPOOL2D] = delta_k_avgpool2d,
    [DELTA_OP_GLOBAL_AVGPOOL] = delta_k_global_avgpool,
    [DELTA_OP_ADD] = delta_k_add,
    [DELTA_OP_MUL] = delta_k_mul,
    [DELTA_OP_SCALE] = delta_k_scale,
    [DELTA_OP_SUM] = delta_k_sum,
    [DELTA_OP_EMBEDDING] = delta_k_embedding,
    [DELTA_OP_SOFTMAX] = delta_k_softmax,
    [DELTA_OP_DROPOUT] = delta_k_dropout,
    [DELTA_OP_CROSS_ENTROPY] = delta_k_cross_entropy,
    [DELTA_OP_RESHAPE] = NULL, /* a view: nothing to run */
    [DELTA_OP_TRANSPOSE] = delta_k_transpose,
    [DELTA_OP_SPLIT] = delta_k_split,
    [DELTA_OP_CONCAT] = delta_k_concat,
    [DELTA_OP_FILL] = delta_k_fill,
    [DELTA_OP_SUM_LEADING] = delta_k_sum_leading,
    [DELTA_OP_CONV2D_DX] = delta_k_conv2d_dx,
    [DELTA_OP_CONV2D_DW] = delta_k_conv2d_dw,
    [DELTA_OP_BIAS_GRAD_NCHW] = delta_k_bias_grad_nchw,
    [DELTA_OP_BATCHNORM_BWD] = delta_k_batchnorm_bwd,
    [DELTA_OP_LAYERNORM_BWD] = delta_k_layernorm_bwd,
    [DELTA_OP_RELU_BWD] = delta_k_relu_bwd,
    [DELTA_OP_GELU_BWD] = delta_k_gelu_bwd,
    [DELTA_OP_MAXPOOL2D_BWD] = delta_k_maxpool2d_bwd,
    [DELTA_OP_AVGPOOL2D_BWD] = delta_k_avgpool2d_bwd,
    [DELTA_OP_GLOBAL_AVGPOOL_BWD] = delta_k_global_avgpool_bwd,
    [DELTA_OP_BROADCAST] = delta_k_broadcast,
    [DELTA_OP_EMBEDDING_BWD] = delta_k_embedding_bwd,
    [DELTA_OP_SOFTMAX_BWD] = delta_k_softmax_bwd,
    [DELTA_OP_DROPOUT_BWD] = delta_k_dropout_bwd,
    [DELTA_OP_CROSS_ENTROPY_BWD] = delta_k_cross_entropy_bwd,
    [DELTA_OP_BN_RUNNING_UPDATE] = delta_k_bn_running_update,
    [DELTA_OP_SGD_UPDATE] = delta_k_sgd_update,
    [DELTA_OP_ADAMW_UPDATE] = delta_k_adamw_update,
    [DELTA_OP_GRAD_SUMSQ] = delta_k_grad_sumsq,
    [DELTA_OP_CLIP_COEF] = delta_k_clip_coef,
    [DELTA_OP_CAST] = delta_k_cast,
    [DELTA_OP_BATCHNORM_RELU] = delta_k_batchnorm_relu,
    [DELTA_OP_BATCHNORM_ADD_RELU] = delta_k_batchnorm_add_relu,
    [DELTA_OP_ALLREDUCE] = delta_k_allreduce,
    [DELTA_OP_REDUCE_SCATTER] = delta_k_reduce_scatter,
    [DELTA_OP_ALLGATHER] = delta_k_allgather,
};

static const delta_kernel_fn bf16_kernels[DELTA_OP_TYPE_COUNT] = {
    [DELTA_OP_MATMUL] = delta_k_matmul_bf16,
    [DELTA_OP_LINEAR] = delta_k_linear_bf16,
};

delta_kernel_fn delta_cpu_kernel(delta_op_type t) {
    DELTA_ASSERT((unsigned)t < DELTA_OP_TYPE_COUNT);
    return kernels[t];
}

void delta_cpu_run(const delta_kargs *k) {
    DELTA_ASSERT((unsigned)k->op->type < DELTA_OP_TYPE_COUNT);
    delta_kernel_fn fn = kernels[k->op->type];
    if (!fn) return;
    if (k->op->type != DELTA_OP_CAST && delta_cpu_has_bf16(k)) {
        if (bf16_kernels[k->op->type]) {
            bf16_kernels[k->op->type](k);
            return;
        }
        if (delta_op_widens_bf16(k->op->type)) {
            delta_cpu_run_widened(k, fn);
            return;
        }
    }
    fn(k);
}
