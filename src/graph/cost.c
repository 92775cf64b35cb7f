/* The cost model inputs of every op: floating-point operations, bytes read
 * and written, and scratch workspace. The simulator and the policies plan
 * from these; they are estimates of the work, not measurements.
 *
 * Per dtype: bytes are each tensor's own (2 per BF16 element, 4 per F32);
 * FLOPs do not depend on the dtype (a BF16 product does the same
 * multiply-adds; the simulator prices them at the device's BF16 rate);
 * workspace adds what the CPU kernels need to compute BF16 in fp32: the
 * blocked conversions of the BF16 GEMM, or the fp32 copies of a widened
 * op's operands (delta_op_widens_bf16: the convolution family only; the
 * other ops convert element by element in registers and need none). */
#include "graph/graph_impl.h"

bool delta_op_widens_bf16(delta_op_type t) {
    switch (t) {
    /* The convolutions: im2col and the GEMMs behind them are fp32, so a
     * BF16 convolution runs the fp32 one on copies. Every other op that
     * meets BF16 reads and writes it natively (k_dtype.h) and declares no
     * copies. */
    case DELTA_OP_CONV2D:
    case DELTA_OP_CONV2D_DX:
    case DELTA_OP_CONV2D_DW:
    case DELTA_OP_BIAS_GRAD_NCHW:
        return true;
    default:
        return false;
    }
}

static const delta_tensor *T(const delta_ctx *ctx, int id) {
    return ctx->tensors[id];
}

void delta_op_set_cost(delta_ctx *ctx, delta_op *op) {
    double bytes = 0;
    for (int i = 0; i < op->n_in; i++) bytes += (double)T(ctx, op->in[i])->bytes;
    for (int i = 0; i < op->n_out; i++)
        bytes += (double)T(ctx, op->out[i])->bytes;
    const delta_tensor *x = op->n_in ? T(ctx, op->in[0]) : NULL;
    const delta_tensor *y = op->n_out ? T(ctx, op->out[0]) : NULL;
    double n_out = y ? (double)y->numel : 0;
    double n_in = x ? (double)x->numel : 0;
    double flops = 0;
    size_t ws = 0;
    switch (op->type) {
    case DELTA_OP_MATMUL: {
        const delta_tensor *a = x;
        int64_t k = op->a.trans_a ? a->shape[a->ndim - 2]
                                  : a->shape[a->ndim - 1];
        flops = 2.0 * n_out * (double)k;
        if (a->dtype == DELTA_BF16) {
            /* k_bf16.c: a batched a with a 2-D b is one GEMM of batch*M
             * rows; other batches one GEMM per matrix */
            int64_t m = y->shape[y->ndim - 2], n = y->shape[y->ndim - 1];
            const delta_tensor *b = T(ctx, op->in[1]);
            if (b->ndim == 2 && !op->a.trans_a) m = y->numel / (n ? n : 1);
            ws = delta_bf16_gemm_workspace(m, n, k);
        }
        break;
    }
    case DELTA_OP_LINEAR:
        flops = 2.0 * n_out * (double)x->shape[x->ndim - 1] + n_out;
        if (x->dtype == DELTA_BF16) {
            int64_t out = y->shape[y->ndim - 1];
            ws = delta_bf16_gemm_workspace(out ? y->numel / out : 0, out,
                                           x->shape[x->ndim - 1]);
        }
        break;
    case DELTA_OP_CAST:
        flops = n_out;
        break;
    case DELTA_OP_CONV2D:
    case DELTA_OP_CONV2D_DX:
    case DELTA_OP_CONV2D_DW: {
        /* geometry from the forward input shape and the weight shape */
        const int64_t *xs, *wsh;
        if (op->type == DELTA_OP_CONV2D) {
            xs = x->shape;
            wsh = T(ctx, op->in[1])->shape;
        } else if (op->type == DELTA_OP_CONV2D_DX) {
            xs = y->shape;
            wsh = T(ctx, op->in[1])->shape;
        } else {
            xs = x->shape;
            wsh = y->shape;
        }
        delta_conv_geom g = delta_conv_geom_of(xs, wsh, op->a.stride,
                                               op->a.pad);
        flops = 2.0 * (double)(g.n * g.k * g.p * g.q) *
                (double)(g.c * g.r * g.s);
        ws = delta_conv_workspace(&g, op->type);
        break;
    }
    case DELTA_OP_BATCHNORM:
    case DELTA_OP_LAYERNORM:
        flops = 8.0 * n_in;
        break;
    /* the chain's flops (relu and add one a element); the bytes are the
     * fused op's own, the intermediates never written or read again */
    case DELTA_OP_BATCHNORM_RELU:
        flops = 9.0 * n_in;
        break;
    case DELTA_OP_BATCHNORM_ADD_RELU:
        flops = 10.0 * n_in;
        break;
    case DELTA_OP_BATCHNORM_BWD:
    case DELTA_OP_LAYERNORM_BWD:
        flops = 12.0 * n_in;
        break;
    case DELTA_OP_GELU:
    case DELTA_OP_GELU_BWD:
        flops = 20.0 * n_out;
        break;
    case DELTA_OP_SOFTMAX:
    case DELTA_OP_SOFTMAX_BWD:
    case DELTA_OP_CROSS_ENTROPY:
    case DELTA_OP_CROSS_ENTROPY_BWD:
        flops = 5.0 * (n_in > n_out ? n_in : n_out);
        break;
    case DELTA_OP_MAXPOOL2D:
    case DELTA_OP_AVGPOOL2D:
        flops = n_out * op->a.k * op->a.k;
        break;
    case DELTA_OP_MAXPOOL2D_BWD:
    case DELTA_OP_AVGPOOL2D_BWD:
        flops = (double)T(ctx, op->in[op->n_in - 1])->numel * op->a.k *
                op->a.k;
        break;
    case DELTA_OP_ADAMW_UPDATE:
        flops = 12.0 * n_in;
        break;
    case DELTA_OP_SGD_UPDATE:
        flops = 5.0 * n_in;
        break;
    case DELTA_OP_GRAD_SUMSQ: {
        /* a multiply-add per element; the workspace holds the largest
         * input's chunk partials (double), after the running total */
        int64_t most = 0;
        flops = 0;
        for (int i = op->a.has_acc ? 1 : 0; i < op->n_in; i++) {
            int64_t n = T(ctx, op->in[i])->numel;
            flops += 2.0 * (double)n;
            if (delta_sumsq_chunks(n) > most) most = delta_sumsq_chunks(n);
        }
        ws = (size_t)(most + 1) * sizeof(double);
        break;
    }
    case DELTA_OP_CLIP_COEF:
        flops = 4.0;
        break;
    case DELTA_OP_RESHAPE:
        bytes = 0; /* a view */
        break;
    /* collectives: `bytes` is the buffer's (the inputs'), which the
     * simulator prices on the interconnect (delta_collective_seconds) */
    case DELTA_OP_ALLREDUCE: {
        /* each rank receives the other ranks' copies of its chunk (the
         * workspace) and sums them: the ring's 2 (P - 1) / P of the bytes
         * cross the interconnect (the simulator prices that, not this) */
        int P = op->a.ranks;
        int64_t nel = delta_dp_numel(ctx, op);
        int64_t chunk = (nel + P - 1) / P; /* the largest chunk */
        if (chunk > DELTA_DP_PIECE) chunk = DELTA_DP_PIECE; /* a piece */
        flops = (double)nel;
        ws = (size_t)(P - 1) * (size_t)chunk * sizeof(float);
        bytes = (double)nel * sizeof(float);
        break;
    }
    case DELTA_OP_REDUCE_SCATTER: {
        /* an owner receives the other ranks' copies of its gradients, a
         * piece at a time */
        int64_t own = 0;
        for (int i = 0; i < op->n_in; i++)
            if (op->a.owner[i] == op->a.rank && T(ctx, op->in[i])->numel > own)
                own = T(ctx, op->in[i])->numel;
        if (own > DELTA_DP_PIECE) own = DELTA_DP_PIECE;
        flops = (double)delta_dp_numel(ctx, op);
        ws = (size_t)(op->a.ranks - 1) * (size_t)own * sizeof(float);
        bytes = flops * sizeof(float);
        break;
    }
    case DELTA_OP_ALLGATHER:
        /* received in place */
        bytes = (double)delta_dp_numel(ctx, op) * sizeof(float);
        break;
    case DELTA_OP_EMBEDDING:
    case DELTA_OP_EMBEDDING_BWD:
    case DELTA_OP_TRANSPOSE:
    case DELTA_OP_SPLIT:
    case DELTA_OP_CONCAT:
    case DELTA_OP_FILL:
    case DELTA_OP_BROADCAST:
        /* pure data movement: bytes as counted (embedding reads only the
           looked-up rows, not the whole table) */
        if (op->type == DELTA_OP_EMBEDDING)
            bytes = (double)x->bytes + 2.0 * (double)y->bytes;
        else if (op->type == DELTA_OP_EMBEDDING_BWD)
            bytes = (double)x->bytes + 2.0 * (double)T(ctx, op->in[1])->bytes +
                    (double)y->bytes;
        break;
    default:
        flops = n_in > n_out ? n_in : n_out;
        break;
    }
    if (delta_op_widens_bf16(op->type)) {
        for (int i = 0; i < op->n_in; i++)
            ws += delta_widen_bytes_of(T(ctx, op->in[i]));
        for (int i = 0; i < op->n_out; i++)
            ws += delta_widen_bytes_of(T(ctx, op->out[i]));
    }
    op->flops = flops;
    op->bytes = bytes;
    op->workspace = ws;
    op->dtype = x ? x->dtype : DELTA_F32;
}
