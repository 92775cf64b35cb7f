/* Maps each op type to its CUDA kernel (the table of src/backend/cpu/
 * dispatch.c, op for op), and the device-side memmove. */
#include "backend/cuda/cu_bf16_route.h"
#include "backend/cuda/cu_common.cuh"

typedef void (*cu_kernel_fn)(const delta_cuda_kctx *c, const delta_kargs *k);

static const cu_kernel_fn kernels[DELTA_OP_TYPE_COUNT] = {
    /* designated initializers are C only: the order of delta_op_type */
    delta_cu_matmul,            /* MATMUL */
    delta_cu_linear,            /* LINEAR */
    delta_cu_conv2d,            /* CONV2D */
    delta_cu_batchnorm,         /* BATCHNORM */
    delta_cu_layernorm,         /* LAYERNORM */
    delta_cu_relu,              /* RELU */
    delta_cu_gelu,              /* GELU */
    delta_cu_maxpool2d,         /* MAXPOOL2D */
    delta_cu_avgpool2d,         /* AVGPOOL2D */
    delta_cu_global_avgpool,    /* GLOBAL_AVGPOOL */
    delta_cu_add,               /* ADD */
    delta_cu_mul,               /* MUL */
    delta_cu_scale,             /* SCALE */
    delta_cu_sum,               /* SUM */
    delta_cu_embedding,         /* EMBEDDING */
    delta_cu_softmax,           /* SOFTMAX */
    delta_cu_dropout,           /* DROPOUT */
    delta_cu_cross_entropy,     /* CROSS_ENTROPY */
    NULL,                       /* RESHAPE: a view, nothing to run */
    delta_cu_transpose,         /* TRANSPOSE */
    delta_cu_split,             /* SPLIT */
    delta_cu_concat,            /* CONCAT */
    delta_cu_fill,              /* FILL */
    delta_cu_sum_leading,       /* SUM_LEADING */
    delta_cu_conv2d_dx,         /* CONV2D_DX */
    delta_cu_conv2d_dw,         /* CONV2D_DW */
    delta_cu_bias_grad_nchw,    /* BIAS_GRAD_NCHW */
    delta_cu_batchnorm_bwd,     /* BATCHNORM_BWD */
    delta_cu_layernorm_bwd,     /* LAYERNORM_BWD */
    delta_cu_relu_bwd,          /* RELU_BWD */
    delta_cu_gelu_bwd,          /* GELU_BWD */
    delta_cu_maxpool2d_bwd,     /* MAXPOOL2D_BWD */
    delta_cu_avgpool2d_bwd,     /* AVGPOOL2D_BWD */
    delta_cu_global_avgpool_bwd, /* GLOBAL_AVGPOOL_BWD */
    delta_cu_broadcast,         /* BROADCAST */
    delta_cu_embedding_bwd,     /* EMBEDDING_BWD */
    delta_cu_softmax_bwd,       /* SOFTMAX_BWD */
    delta_cu_dropout_bwd,       /* DROPOUT_BWD */
    delta_cu_cross_entropy_bwd, /* CROSS_ENTROPY_BWD */
    delta_cu_bn_running_update, /* BN_RUNNING_UPDATE */
    delta_cu_sgd_update,        /* SGD_UPDATE */
    delta_cu_adamw_update,      /* ADAMW_UPDATE */
    delta_cu_cast,              /* CAST */
    delta_cu_batchnorm_relu,    /* BATCHNORM_RELU */
    delta_cu_batchnorm_add_relu, /* BATCHNORM_ADD_RELU */
    /* collectives: the backend runs them on its communication stream
     * through NCCL (nccl.c), never here */
    NULL,                       /* ALLREDUCE */
    NULL,                       /* REDUCE_SCATTER */
    NULL,                       /* ALLGATHER */
    delta_cu_grad_sumsq,        /* GRAD_SUMSQ */
    delta_cu_clip_coef,         /* CLIP_COEF */
};

/* The table follows the enum: these pin a few entries so that a new op
 * type inserted without a kernel here fails the build. */
static_assert(DELTA_OP_TYPE_COUNT == 50, "a new op type needs a CUDA kernel");
static_assert(DELTA_OP_RESHAPE == 18 && DELTA_OP_SUM_LEADING == 23 &&
                  DELTA_OP_ADAMW_UPDATE == 41 && DELTA_OP_CAST == 42 &&
                  DELTA_OP_BATCHNORM_ADD_RELU == 44 &&
                  DELTA_OP_ALLGATHER == 47 && DELTA_OP_CLIP_COEF == 49,
              "delta_op_type changed order: update the CUDA dispatch table");

/* An op with a BF16 operand (mixed precision, docs/KERNELS.md) goes to its
 * native BF16 kernel where the type has one: matmul and linear on the
 * tensor cores, the convolutions through cuDNN on the BF16 operands
 * (delta_cu_conv_bf16, which widens itself when cuDNN cannot), the
 * table's kernel itself where it is one body for F32 and BF16
 * (delta_cuda_bf16_generic; the cast is also in the table); else, as on
 * the CPU (src/backend/cpu/dispatch.c), through the widening wrapper where
 * delta_op_widens_bf16 says so (bias_grad_nchw), and stops otherwise
 * rather than compute on the wrong element size. */
void delta_cuda_run(const delta_cuda_kctx *c, const delta_kargs *k) {
    DELTA_ASSERT((unsigned)k->op->type < DELTA_OP_TYPE_COUNT);
    DELTA_ASSERTF(!delta_op_is_collective(k->op->type), "op %d (%s) is a "
                  "collective: the backend runs it through NCCL", k->op->id,
                  k->op->name);
    cu_kernel_fn fn = kernels[k->op->type];
    if (!fn) return;
    if (k->op->type != DELTA_OP_CAST && delta_cpu_has_bf16(k)) {
        if (k->op->type == DELTA_OP_MATMUL) {
            fn = delta_cu_matmul_bf16;
        } else if (k->op->type == DELTA_OP_LINEAR) {
            fn = delta_cu_linear; /* F32 and BF16 alike */
        } else if (delta_cuda_is_conv(k->op->type)) {
            fn = delta_cu_conv_bf16;
        } else if (!delta_cuda_bf16_generic(k->op->type)) {
            DELTA_ASSERTF(delta_op_widens_bf16(k->op->type),
                          "op %d (%s, %s) has a BF16 operand and no BF16 "
                          "route on the CUDA backend", k->op->id, k->op->name,
                          delta_op_type_name(k->op->type));
            delta_cu_run_widened(c, k, fn);
            return;
        }
    }
    fn(c, k);
}

delta_cu_kernel_fn delta_cuda_kernel_of(delta_op_type t) {
    DELTA_ASSERT((unsigned)t < DELTA_OP_TYPE_COUNT);
    return kernels[t];
}

/* cudaMemcpy may not overlap, so an overlapping move goes in pieces, each
 * piece's source read before anything writes over it (low to high when
 * moving down, high to low when moving up). A piece copied directly can be
 * at most the distance between the two ranges; defragmentation often
 * shifts a large tensor by a few KiB, and 100 MB moved 256 bytes down took
 * 400,000 calls (on an H200 a DTR step of 30 ms took 6.2 s). So when that
 * distance is smaller than the staging buffer, each piece goes through it
 * (source to staging, staging to destination): bytes / staging-size pieces.
 * The staging buffer is cuBLAS's fixed workspace: on this same stream, so
 * never in use by a GEMM at the same time. */
static void move_pieces(const delta_cuda_kctx *c, char *d, const char *s,
                        size_t bytes, size_t piece, char *stage) {
    cudaError_t e = cudaSuccess;
    for (size_t done = 0; done < bytes && e == cudaSuccess;) {
        size_t n = bytes - done < piece ? bytes - done : piece;
        /* moving down: from the low end; moving up: from the high end */
        size_t o = d < s ? done : bytes - done - n;
        if (stage) {
            e = cudaMemcpyAsync(stage, s + o, n, cudaMemcpyDeviceToDevice,
                                c->stream);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(d + o, stage, n, cudaMemcpyDeviceToDevice,
                                    c->stream);
        } else {
            e = cudaMemcpyAsync(d + o, s + o, n, cudaMemcpyDeviceToDevice,
                                c->stream);
        }
        done += n;
    }
    DELTA_ASSERTF(e == cudaSuccess, "cudaMemcpyAsync (device move): %s",
                  cudaGetErrorString(e));
}

void delta_cuda_memmove(const delta_cuda_kctx *c, void *dst, const void *src,
                        size_t bytes) {
    char *d = (char *)dst;
    const char *s = (const char *)src;
    if (bytes == 0 || d == s) return;
    size_t gap = d < s ? (size_t)(s - d) : (size_t)(d - s);
    bool staged = gap < bytes && gap < c->blas_ws_bytes && c->blas_ws;
    move_pieces(c, d, s, bytes, staged ? c->blas_ws_bytes : gap,
                staged ? (char *)c->blas_ws : NULL);
}
