/* Forward op constructors: check shapes, append the op, create its outputs.
 * Each failure names the op and says what was expected and what was found.
 * Backward ops are built in autograd.c with the same helpers. */
#include "graph/graph_impl.h"
#include "graph/ops_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *op_type_names[DELTA_OP_TYPE_COUNT] = {
    [DELTA_OP_MATMUL] = "matmul",
    [DELTA_OP_LINEAR] = "linear",
    [DELTA_OP_CONV2D] = "conv2d",
    [DELTA_OP_BATCHNORM] = "batchnorm",
    [DELTA_OP_LAYERNORM] = "layernorm",
    [DELTA_OP_RELU] = "relu",
    [DELTA_OP_GELU] = "gelu",
    [DELTA_OP_MAXPOOL2D] = "maxpool2d",
    [DELTA_OP_AVGPOOL2D] = "avgpool2d",
    [DELTA_OP_GLOBAL_AVGPOOL] = "global_avgpool",
    [DELTA_OP_ADD] = "add",
    [DELTA_OP_MUL] = "mul",
    [DELTA_OP_SCALE] = "scale",
    [DELTA_OP_SUM] = "sum",
    [DELTA_OP_EMBEDDING] = "embedding",
    [DELTA_OP_SOFTMAX] = "softmax",
    [DELTA_OP_DROPOUT] = "dropout",
    [DELTA_OP_CROSS_ENTROPY] = "cross_entropy",
    [DELTA_OP_RESHAPE] = "reshape",
    [DELTA_OP_TRANSPOSE] = "transpose",
    [DELTA_OP_SPLIT] = "split",
    [DELTA_OP_CONCAT] = "concat",
    [DELTA_OP_FILL] = "fill",
    [DELTA_OP_SUM_LEADING] = "sum_leading",
    [DELTA_OP_CONV2D_DX] = "conv2d_dx",
    [DELTA_OP_CONV2D_DW] = "conv2d_dw",
    [DELTA_OP_BIAS_GRAD_NCHW] = "bias_grad_nchw",
    [DELTA_OP_BATCHNORM_BWD] = "batchnorm_bwd",
    [DELTA_OP_LAYERNORM_BWD] = "layernorm_bwd",
    [DELTA_OP_RELU_BWD] = "relu_bwd",
    [DELTA_OP_GELU_BWD] = "gelu_bwd",
    [DELTA_OP_MAXPOOL2D_BWD] = "maxpool2d_bwd",
    [DELTA_OP_AVGPOOL2D_BWD] = "avgpool2d_bwd",
    [DELTA_OP_GLOBAL_AVGPOOL_BWD] = "global_avgpool_bwd",
    [DELTA_OP_BROADCAST] = "broadcast",
    [DELTA_OP_EMBEDDING_BWD] = "embedding_bwd",
    [DELTA_OP_SOFTMAX_BWD] = "softmax_bwd",
    [DELTA_OP_DROPOUT_BWD] = "dropout_bwd",
    [DELTA_OP_CROSS_ENTROPY_BWD] = "cross_entropy_bwd",
    [DELTA_OP_BN_RUNNING_UPDATE] = "bn_running_update",
    [DELTA_OP_SGD_UPDATE] = "sgd_update",
    [DELTA_OP_ADAMW_UPDATE] = "adamw_update",
    [DELTA_OP_CAST] = "cast",
    [DELTA_OP_BATCHNORM_RELU] = "batchnorm_relu",
    [DELTA_OP_BATCHNORM_ADD_RELU] = "batchnorm_add_relu",
    [DELTA_OP_ALLREDUCE] = "allreduce",
    [DELTA_OP_REDUCE_SCATTER] = "reduce_scatter",
    [DELTA_OP_ALLGATHER] = "allgather",
    [DELTA_OP_GRAD_SUMSQ] = "grad_sumsq",
    [DELTA_OP_CLIP_COEF] = "clip_coef",
};

const char *delta_op_type_name(delta_op_type t) {
    if ((unsigned)t >= DELTA_OP_TYPE_COUNT || !op_type_names[t]) return "?";
    return op_type_names[t];
}

const char *delta_shape_str(const delta_tensor *t, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

bool delta_check_inputs(delta_ctx *ctx, const char *what,
                        const delta_tensor *const *ins, int n) {
    for (int i = 0; i < n; i++) {
        if (!ins[i]) {
            delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                           "%s: input %d is NULL (an earlier op failed?)",
                           what, i);
            return false;
        }
        if (ins[i]->ctx != ctx) {
            delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                           "%s: input %d ('%s') belongs to another context",
                           what, i, ins[i]->name);
            return false;
        }
        if (ins[i]->id < 0) {
            delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                           "%s: input %d ('%s') is no longer in the program: "
                           "delta_ctx_fuse_batchnorm fused the ops around it "
                           "away; use the fused op's output, or fuse after "
                           "the graph is complete",
                           what, i, ins[i]->name);
            return false;
        }
    }
    return true;
}

delta_tensor *delta_op1(delta_ctx *ctx, delta_op_type type,
                        const delta_tensor *const *ins, int n_in,
                        delta_op_attrs a, delta_dtype dtype, int ndim,
                        const int64_t *shape) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    if (!op) return NULL;
    op->a = a;
    int op_id = op->id;
    delta_tensor *t = delta_op_add_output(ctx, op, dtype, ndim, shape);
    if (!t) return NULL;
    delta_op_set_cost(ctx, &ctx->ops[op_id]);
    return t;
}

delta_op_attrs delta_attrs0(void) {
    delta_op_attrs a;
    memset(&a, 0, sizeof a);
    a.alpha = 1.0f;
    a.fwd_op = -1;
    return a;
}

#define SHAPE_FAIL(...) return delta_ctx_fail(ctx, DELTA_ERR_SHAPE, __VA_ARGS__)
#define INPUTS(what, ...)                                                  \
    const delta_tensor *ins_[] = {__VA_ARGS__};                            \
    if (!delta_check_inputs(ctx, what, ins_,                               \
                            (int)(sizeof ins_ / sizeof ins_[0])))          \
        return NULL

static bool is_f32(const delta_tensor *t) { return t->dtype == DELTA_F32; }
static bool is_float(const delta_tensor *t) {
    return delta_dtype_is_float(t->dtype);
}

/* Dtype checks: one message shape for every op ("what expected, what was
 * found, what to do"). Products and elementwise ops take operands of one
 * float dtype; mixing F32 and BF16 is refused rather than promoted, so
 * every conversion is an explicit cast op the memory planner can see. */
#define DTYPE_FAIL(what, fmt, ...)                                         \
    return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG, "%s: " fmt, what,     \
                          __VA_ARGS__)

static bool same_float(const delta_tensor *a, const delta_tensor *b) {
    return is_float(a) && a->dtype == b->dtype;
}

delta_tensor *delta_matmul(delta_ctx *ctx, delta_tensor *a, delta_tensor *b,
                           bool trans_a, bool trans_b, float alpha) {
    INPUTS("matmul", a, b);
    char sa[96], sb[96];
    if (!same_float(a, b))
        DTYPE_FAIL("matmul", "operands are %s and %s; both must be F32 or "
                   "both BF16 (cast one with delta_cast)",
                   delta_dtype_name(a->dtype), delta_dtype_name(b->dtype));
    if (a->ndim < 2 || b->ndim < 2)
        SHAPE_FAIL("matmul: needs operands of at least 2 dims, got %s "
                   "and %s", delta_shape_str(a, sa, sizeof sa),
                   delta_shape_str(b, sb, sizeof sb));
    int64_t m = trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t ka = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t kb = trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t n = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (ka != kb)
        SHAPE_FAIL("matmul: inner dims differ: a %s%s has %lld, b %s%s has "
                   "%lld", delta_shape_str(a, sa, sizeof sa),
                   trans_a ? "^T" : "", (long long)ka,
                   delta_shape_str(b, sb, sizeof sb), trans_b ? "^T" : "",
                   (long long)kb);
    if (b->ndim > 2) {
        bool same = a->ndim == b->ndim;
        for (int i = 0; same && i < a->ndim - 2; i++)
            same = a->shape[i] == b->shape[i];
        if (!same)
            SHAPE_FAIL("matmul: batch dims of a %s and b %s differ; b must "
                       "have a's batch dims or be 2-D",
                       delta_shape_str(a, sa, sizeof sa),
                       delta_shape_str(b, sb, sizeof sb));
    } else if (trans_a && a->ndim > 2) {
        SHAPE_FAIL("matmul: a transposed batched a %s needs a batched b, got "
                   "%s", delta_shape_str(a, sa, sizeof sa),
                   delta_shape_str(b, sb, sizeof sb));
    }
    int64_t shape[DELTA_MAX_DIMS];
    for (int i = 0; i < a->ndim - 2; i++) shape[i] = a->shape[i];
    shape[a->ndim - 2] = m;
    shape[a->ndim - 1] = n;
    delta_op_attrs at = delta_attrs0();
    at.trans_a = trans_a;
    at.trans_b = trans_b;
    at.alpha = alpha;
    return delta_op1(ctx, DELTA_OP_MATMUL, ins_, 2, at, a->dtype, a->ndim,
                     shape);
}

/* linear's checks and op: w is (OUT, IN), or (IN, OUT) when w_in_out. */
static delta_tensor *linear_op(delta_ctx *ctx, const char *what,
                               delta_tensor *x, delta_tensor *w,
                               delta_tensor *bias, bool w_in_out) {
    char sx[96], sw[96];
    const delta_tensor *ins[3] = {x, w, bias};
    if (!delta_check_inputs(ctx, what, ins, bias ? 3 : 2)) return NULL;
    if (!same_float(x, w) || (bias && bias->dtype != x->dtype))
        DTYPE_FAIL(what, "x is %s, weight %s, bias %s; all must be F32 "
                   "or all BF16 (cast with delta_cast)",
                   delta_dtype_name(x->dtype), delta_dtype_name(w->dtype),
                   bias ? delta_dtype_name(bias->dtype) : "none");
    int in_dim = w_in_out ? 0 : 1;
    if (x->ndim < 1 || w->ndim != 2 ||
        x->shape[x->ndim - 1] != w->shape[in_dim])
        SHAPE_FAIL("%s: x %s does not fit weight %s; expected x (..., "
                   "IN) and weight %s", what,
                   delta_shape_str(x, sx, sizeof sx),
                   delta_shape_str(w, sw, sizeof sw),
                   w_in_out ? "(IN, OUT)" : "(OUT, IN)");
    int64_t out = w->shape[1 - in_dim];
    if (bias && (bias->ndim != 1 || bias->shape[0] != out))
        SHAPE_FAIL("%s: bias %s does not fit weight %s; expected (%lld)",
                   what, delta_shape_str(bias, sx, sizeof sx),
                   delta_shape_str(w, sw, sizeof sw), (long long)out);
    int64_t shape[DELTA_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    delta_op_attrs a = delta_attrs0();
    a.w_in_out = w_in_out;
    return delta_op1(ctx, DELTA_OP_LINEAR, ins, bias ? 3 : 2, a, x->dtype,
                     x->ndim, shape);
}

delta_tensor *delta_linear(delta_ctx *ctx, delta_tensor *x, delta_tensor *w,
                           delta_tensor *bias) {
    return linear_op(ctx, "linear", x, w, bias, false);
}

delta_tensor *delta_linear_in_out(delta_ctx *ctx, delta_tensor *x,
                                  delta_tensor *w, delta_tensor *bias) {
    return linear_op(ctx, "linear_in_out", x, w, bias, true);
}

delta_tensor *delta_conv2d(delta_ctx *ctx, delta_tensor *x, delta_tensor *w,
                           delta_tensor *bias, int stride, int pad) {
    char sx[96], sw[96];
    const delta_tensor *ins[3] = {x, w, bias};
    if (!delta_check_inputs(ctx, "conv2d", ins, bias ? 3 : 2)) return NULL;
    if (!same_float(x, w) || (bias && bias->dtype != x->dtype))
        DTYPE_FAIL("conv2d", "x is %s, weight %s, bias %s; all must be F32 "
                   "or all BF16 (cast with delta_cast)",
                   delta_dtype_name(x->dtype), delta_dtype_name(w->dtype),
                   bias ? delta_dtype_name(bias->dtype) : "none");
    if (x->ndim != 4 || w->ndim != 4 || x->shape[1] != w->shape[1])
        SHAPE_FAIL("conv2d: input %s does not fit weight %s; expected x (N, "
                   "C, H, W) and weight (K, C, R, S)",
                   delta_shape_str(x, sx, sizeof sx),
                   delta_shape_str(w, sw, sizeof sw));
    if (stride < 1 || pad < 0)
        SHAPE_FAIL("conv2d: stride %d and padding %d; need stride >= 1 and "
                   "padding >= 0", stride, pad);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        SHAPE_FAIL("conv2d: bias %s does not fit weight %s",
                   delta_shape_str(bias, sx, sizeof sx),
                   delta_shape_str(w, sw, sizeof sw));
    if (x->shape[2] + 2 * pad < w->shape[2] ||
        x->shape[3] + 2 * pad < w->shape[3])
        SHAPE_FAIL("conv2d: kernel %lldx%lld is larger than the padded input "
                   "%s (padding %d)", (long long)w->shape[2],
                   (long long)w->shape[3], delta_shape_str(x, sx, sizeof sx),
                   pad);
    delta_conv_geom g = delta_conv_geom_of(x->shape, w->shape, stride, pad);
    int64_t shape[4] = {g.n, g.k, g.p, g.q};
    delta_op_attrs a = delta_attrs0();
    a.stride = stride;
    a.pad = pad;
    return delta_op1(ctx, DELTA_OP_CONV2D, ins, bias ? 3 : 2, a, x->dtype, 4,
                     shape);
}

/* Batch norm and its fused forms (type BATCHNORM, BATCHNORM_RELU or,
 * with r, BATCHNORM_ADD_RELU): the checks, the op with inputs x, gamma,
 * beta[, r][, running_mean, running_var] and outputs y, mean, var, and the
 * running-statistics update after it. */
static delta_tensor *bn_build(delta_ctx *ctx, delta_op_type type,
                              const char *what, delta_tensor *x,
                              delta_tensor *gamma, delta_tensor *beta,
                              delta_tensor *r, delta_tensor *running_mean,
                              delta_tensor *running_var, float momentum,
                              float eps) {
    INPUTS(what, x, gamma, beta);
    char sx[96], sg[96];
    if (!is_float(x) || !is_f32(gamma) || !is_f32(beta))
        DTYPE_FAIL(what, "x is %s, gamma %s, beta %s; expected x F32 "
                   "or BF16 and F32 gamma and beta (statistics are fp32)",
                   delta_dtype_name(x->dtype), delta_dtype_name(gamma->dtype),
                   delta_dtype_name(beta->dtype));
    if (x->ndim != 4 && x->ndim != 2)
        SHAPE_FAIL("%s: input %s; expected (N, C, H, W) or (N, C)", what,
                   delta_shape_str(x, sx, sizeof sx));
    int64_t c = x->shape[1];
    if (gamma->ndim != 1 || gamma->shape[0] != c || beta->ndim != 1 ||
        beta->shape[0] != c)
        SHAPE_FAIL("%s: gamma %s / beta do not fit input %s; expected "
                   "(%lld)", what, delta_shape_str(gamma, sg, sizeof sg),
                   delta_shape_str(x, sx, sizeof sx), (long long)c);
    if (type == DELTA_OP_BATCHNORM_ADD_RELU) {
        const delta_tensor *rs[] = {r};
        if (!delta_check_inputs(ctx, what, rs, 1)) return NULL;
        bool same = r->dtype == x->dtype && r->ndim == x->ndim;
        for (int i = 0; same && i < x->ndim; i++)
            same = r->shape[i] == x->shape[i];
        if (!same)
            SHAPE_FAIL("%s: r %s %s must have x's shape and dtype %s %s",
                       what, delta_shape_str(r, sg, sizeof sg),
                       delta_dtype_name(r->dtype),
                       delta_shape_str(x, sx, sizeof sx),
                       delta_dtype_name(x->dtype));
    }
    if (!running_mean != !running_var)
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "%s: give both running_mean and running_var, "
                              "or neither", what);
    if (running_mean) {
        const delta_tensor *rs[] = {running_mean, running_var};
        if (!delta_check_inputs(ctx, what, rs, 2)) return NULL;
        if (running_mean->kind != DELTA_KIND_STATE ||
            running_var->kind != DELTA_KIND_STATE ||
            running_mean->numel != c || running_var->numel != c)
            SHAPE_FAIL("%s: running stats must be STATE tensors of %lld "
                       "elements", what, (long long)c);
    }
    if (eps <= 0 || !(momentum >= 0 && momentum <= 1))
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "%s: eps %g must be > 0 and momentum %g in "
                              "[0, 1]", what, eps, momentum);
    delta_op_attrs a = delta_attrs0();
    a.eps = eps;
    a.momentum = momentum;
    a.count = (double)x->numel / (double)c;
    /* The running stats are inputs too: eval mode normalizes with them. */
    const delta_tensor *bins[6] = {x, gamma, beta};
    int n_in = 3;
    if (r) bins[n_in++] = r;
    if (running_mean) {
        bins[n_in++] = running_mean;
        bins[n_in++] = running_var;
    }
    delta_op *op = delta_op_append(ctx, type, bins, n_in);
    if (!op) return NULL;
    op->a = a;
    int id = op->id;
    int64_t cs[1] = {c};
    delta_tensor *y = delta_op_add_output(ctx, op, x->dtype, x->ndim,
                                          x->shape);
    delta_tensor *mean = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32, 1,
                                             cs);
    delta_tensor *var = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32, 1,
                                            cs);
    if (!y || !mean || !var) return NULL;
    delta_op_set_cost(ctx, &ctx->ops[id]);
    if (running_mean) {
        const delta_tensor *ru[] = {mean, var, running_mean, running_var};
        delta_op *u = delta_op_append(ctx, DELTA_OP_BN_RUNNING_UPDATE, ru, 4);
        if (!u) return NULL;
        u->a = a;
        u->inplace = true;
        u->recomputable = false;
        u->n_out = 2;
        u->out[0] = running_mean->id;
        u->out[1] = running_var->id;
        delta_op_set_cost(ctx, u);
    }
    return y;
}

delta_tensor *delta_batchnorm(delta_ctx *ctx, delta_tensor *x,
                              delta_tensor *gamma, delta_tensor *beta,
                              delta_tensor *running_mean,
                              delta_tensor *running_var, float momentum,
                              float eps) {
    return bn_build(ctx, DELTA_OP_BATCHNORM, "batchnorm", x, gamma, beta,
                    NULL, running_mean, running_var, momentum, eps);
}

delta_tensor *delta_batchnorm_relu(delta_ctx *ctx, delta_tensor *x,
                                   delta_tensor *gamma, delta_tensor *beta,
                                   delta_tensor *running_mean,
                                   delta_tensor *running_var, float momentum,
                                   float eps) {
    return bn_build(ctx, DELTA_OP_BATCHNORM_RELU, "batchnorm_relu", x, gamma,
                    beta, NULL, running_mean, running_var, momentum, eps);
}

delta_tensor *delta_batchnorm_add_relu(delta_ctx *ctx, delta_tensor *x,
                                       delta_tensor *gamma, delta_tensor *beta,
                                       delta_tensor *r,
                                       delta_tensor *running_mean,
                                       delta_tensor *running_var,
                                       float momentum, float eps) {
    return bn_build(ctx, DELTA_OP_BATCHNORM_ADD_RELU, "batchnorm_add_relu",
                    x, gamma, beta, r, running_mean, running_var, momentum,
                    eps);
}

delta_tensor *delta_layernorm(delta_ctx *ctx, delta_tensor *x,
                              delta_tensor *gamma, delta_tensor *beta,
                              float eps) {
    INPUTS("layernorm", x);
    char sx[96], sg[96];
    if (!is_float(x))
        DTYPE_FAIL("layernorm", "x is %s; expected F32 or BF16",
                   delta_dtype_name(x->dtype));
    if (x->ndim < 1)
        SHAPE_FAIL("layernorm: input %s must have at least one dim",
                   delta_shape_str(x, sx, sizeof sx));
    int64_t d = x->shape[x->ndim - 1];
    if (!gamma != !beta)
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "layernorm: give both gamma and beta, or "
                              "neither");
    if (gamma) {
        const delta_tensor *gb[] = {gamma, beta};
        if (!delta_check_inputs(ctx, "layernorm", gb, 2)) return NULL;
        if (!is_f32(gamma) || !is_f32(beta))
            DTYPE_FAIL("layernorm", "gamma is %s, beta %s; expected F32 "
                       "(parameters stay fp32 in every precision)",
                       delta_dtype_name(gamma->dtype),
                       delta_dtype_name(beta->dtype));
        if (gamma->ndim != 1 || gamma->shape[0] != d || beta->ndim != 1 ||
            beta->shape[0] != d)
            SHAPE_FAIL("layernorm: gamma %s / beta do not fit input %s; "
                       "expected (%lld)",
                       delta_shape_str(gamma, sg, sizeof sg),
                       delta_shape_str(x, sx, sizeof sx), (long long)d);
    }
    if (eps <= 0)
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "layernorm: eps %g must be > 0", eps);
    const delta_tensor *ins[3] = {x, gamma, beta};
    delta_op *op = delta_op_append(ctx, DELTA_OP_LAYERNORM, ins,
                                   gamma ? 3 : 1);
    if (!op) return NULL;
    op->a = delta_attrs0();
    op->a.eps = eps;
    int id = op->id;
    int64_t rows[1] = {d ? x->numel / d : 0};
    delta_tensor *y = delta_op_add_output(ctx, op, x->dtype, x->ndim,
                                          x->shape);
    delta_tensor *mean = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32, 1,
                                             rows);
    delta_tensor *rstd = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32, 1,
                                             rows);
    if (!y || !mean || !rstd) return NULL;
    delta_op_set_cost(ctx, &ctx->ops[id]);
    return y;
}

static delta_tensor *unary(delta_ctx *ctx, delta_op_type type,
                           delta_tensor *x, delta_op_attrs a) {
    const char *what = delta_op_type_name(type);
    INPUTS(what, x);
    char sx[96];
    if (!is_float(x))
        DTYPE_FAIL(what, "input %s is %s; expected F32 or BF16",
                   delta_shape_str(x, sx, sizeof sx),
                   delta_dtype_name(x->dtype));
    return delta_op1(ctx, type, ins_, 1, a, x->dtype, x->ndim, x->shape);
}

delta_tensor *delta_relu(delta_ctx *ctx, delta_tensor *x) {
    return unary(ctx, DELTA_OP_RELU, x, delta_attrs0());
}

delta_tensor *delta_gelu(delta_ctx *ctx, delta_tensor *x) {
    return unary(ctx, DELTA_OP_GELU, x, delta_attrs0());
}

delta_tensor *delta_gelu_erf(delta_ctx *ctx, delta_tensor *x) {
    delta_op_attrs a = delta_attrs0();
    a.gelu_erf = 1;
    return unary(ctx, DELTA_OP_GELU, x, a);
}

delta_tensor *delta_scale(delta_ctx *ctx, delta_tensor *x, float s) {
    delta_op_attrs a = delta_attrs0();
    a.value = s;
    return unary(ctx, DELTA_OP_SCALE, x, a);
}

delta_tensor *delta_dropout(delta_ctx *ctx, delta_tensor *x, float p) {
    if (!(p >= 0 && p < 1))
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "dropout: probability %g must be in [0, 1)", p);
    if (p == 0) {
        const delta_tensor *ins[1] = {x};
        return delta_check_inputs(ctx, "dropout", ins, 1) ? x : NULL;
    }
    delta_op_attrs a = delta_attrs0();
    a.p = p;
    return unary(ctx, DELTA_OP_DROPOUT, x, a);
}

static delta_tensor *pool(delta_ctx *ctx, delta_op_type type,
                          delta_tensor *x, int k, int stride, int pad) {
    const char *what = delta_op_type_name(type);
    INPUTS(what, x);
    char sx[96];
    if (!is_float(x))
        DTYPE_FAIL(what, "input is %s; expected F32 or BF16",
                   delta_dtype_name(x->dtype));
    if (x->ndim != 4)
        SHAPE_FAIL("%s: input %s; expected (N, C, H, W)", what,
                   delta_shape_str(x, sx, sizeof sx));
    if (k < 1 || stride < 1 || pad < 0 || pad > k / 2)
        SHAPE_FAIL("%s: window %d, stride %d, padding %d; need window >= 1, "
                   "stride >= 1 and 0 <= padding <= window/2", what, k,
                   stride, pad);
    if (x->shape[2] + 2 * pad < k || x->shape[3] + 2 * pad < k)
        SHAPE_FAIL("%s: window %d is larger than the padded input %s", what,
                   k, delta_shape_str(x, sx, sizeof sx));
    int64_t shape[4] = {x->shape[0], x->shape[1],
                        (x->shape[2] + 2 * pad - k) / stride + 1,
                        (x->shape[3] + 2 * pad - k) / stride + 1};
    delta_op_attrs a = delta_attrs0();
    a.k = k;
    a.stride = stride;
    a.pad = pad;
    return delta_op1(ctx, type, ins_, 1, a, x->dtype, 4, shape);
}

delta_tensor *delta_maxpool2d(delta_ctx *ctx, delta_tensor *x, int k,
                              int stride, int pad) {
    return pool(ctx, DELTA_OP_MAXPOOL2D, x, k, stride, pad);
}

delta_tensor *delta_avgpool2d(delta_ctx *ctx, delta_tensor *x, int k,
                              int stride, int pad) {
    return pool(ctx, DELTA_OP_AVGPOOL2D, x, k, stride, pad);
}

delta_tensor *delta_global_avgpool(delta_ctx *ctx, delta_tensor *x) {
    INPUTS("global_avgpool", x);
    char sx[96];
    if (!is_float(x))
        DTYPE_FAIL("global_avgpool", "input is %s; expected F32 or BF16",
                   delta_dtype_name(x->dtype));
    if (x->ndim != 4)
        SHAPE_FAIL("global_avgpool: input %s; expected (N, C, H, W)",
                   delta_shape_str(x, sx, sizeof sx));
    int64_t shape[2] = {x->shape[0], x->shape[1]};
    return delta_op1(ctx, DELTA_OP_GLOBAL_AVGPOOL, ins_, 1, delta_attrs0(),
                     x->dtype, 2, shape);
}

delta_tensor *delta_add(delta_ctx *ctx, delta_tensor *a, delta_tensor *b) {
    INPUTS("add", a, b);
    char sa[96], sb[96];
    if (!same_float(a, b))
        DTYPE_FAIL("add", "operands are %s and %s; both must be F32 or both "
                   "BF16 (cast one with delta_cast)",
                   delta_dtype_name(a->dtype), delta_dtype_name(b->dtype));
    bool ok = b->ndim <= a->ndim;
    for (int i = 0; ok && i < b->ndim; i++)
        ok = b->shape[b->ndim - 1 - i] == a->shape[a->ndim - 1 - i];
    if (!ok)
        SHAPE_FAIL("add: b %s must have a's shape %s or a trailing part of it",
                   delta_shape_str(b, sb, sizeof sb),
                   delta_shape_str(a, sa, sizeof sa));
    return delta_op1(ctx, DELTA_OP_ADD, ins_, 2, delta_attrs0(), a->dtype,
                     a->ndim, a->shape);
}

delta_tensor *delta_mul(delta_ctx *ctx, delta_tensor *a, delta_tensor *b) {
    INPUTS("mul", a, b);
    char sa[96], sb[96];
    if (!same_float(a, b))
        DTYPE_FAIL("mul", "operands are %s and %s; both must be F32 or both "
                   "BF16 (cast one with delta_cast)",
                   delta_dtype_name(a->dtype), delta_dtype_name(b->dtype));
    bool ok = a->ndim == b->ndim;
    for (int i = 0; ok && i < a->ndim; i++) ok = a->shape[i] == b->shape[i];
    if (!ok)
        SHAPE_FAIL("mul: shapes %s and %s differ",
                   delta_shape_str(a, sa, sizeof sa),
                   delta_shape_str(b, sb, sizeof sb));
    return delta_op1(ctx, DELTA_OP_MUL, ins_, 2, delta_attrs0(), a->dtype,
                     a->ndim, a->shape);
}

delta_tensor *delta_sum(delta_ctx *ctx, delta_tensor *x) {
    INPUTS("sum", x);
    if (!is_f32(x))
        DTYPE_FAIL("sum", "input is %s; expected F32 (cast a BF16 tensor "
                   "first)", delta_dtype_name(x->dtype));
    return delta_op1(ctx, DELTA_OP_SUM, ins_, 1, delta_attrs0(), DELTA_F32, 0,
                     NULL);
}

delta_tensor *delta_embedding(delta_ctx *ctx, delta_tensor *ids,
                              delta_tensor *table) {
    INPUTS("embedding", ids, table);
    char si[96], st[96];
    if (ids->dtype != DELTA_I32 || ids->ndim >= DELTA_MAX_DIMS ||
        table->ndim != 2 || !is_f32(table))
        SHAPE_FAIL("embedding: ids %s (%s) and table %s; expected I32 ids and "
                   "an F32 table (V, D) (in BF16 models, cast the looked-up "
                   "rows)", delta_shape_str(ids, si, sizeof si),
                   delta_dtype_name(ids->dtype),
                   delta_shape_str(table, st, sizeof st));
    int64_t shape[DELTA_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof shape);
    shape[ids->ndim] = table->shape[1];
    return delta_op1(ctx, DELTA_OP_EMBEDDING, ins_, 2, delta_attrs0(),
                     DELTA_F32, ids->ndim + 1, shape);
}

delta_tensor *delta_softmax(delta_ctx *ctx, delta_tensor *x, bool causal,
                            delta_tensor *key_mask) {
    INPUTS("softmax", x);
    char sx[96], sm[96];
    if (!is_float(x))
        DTYPE_FAIL("softmax", "input is %s; expected F32 or BF16",
                   delta_dtype_name(x->dtype));
    if (x->ndim < 1)
        SHAPE_FAIL("softmax: input %s must have at least one dim",
                   delta_shape_str(x, sx, sizeof sx));
    if (causal && (x->ndim < 2 || x->shape[x->ndim - 1] <
                                      x->shape[x->ndim - 2]))
        SHAPE_FAIL("softmax: causal mask needs (..., Tq, Tk) with Tk >= Tq, "
                   "got %s", delta_shape_str(x, sx, sizeof sx));
    delta_op_attrs a = delta_attrs0();
    a.causal = causal;
    const delta_tensor *ins[2] = {x, key_mask};
    if (key_mask) {
        if (!delta_check_inputs(ctx, "softmax", ins + 1, 1)) return NULL;
        if (x->ndim < 2 || key_mask->ndim != 2 || !is_f32(key_mask) ||
            key_mask->shape[0] != x->shape[0] ||
            key_mask->shape[1] != x->shape[x->ndim - 1])
            SHAPE_FAIL("softmax: key mask %s does not fit scores %s; expected "
                       "F32 (B, Tk)", delta_shape_str(key_mask, sm, sizeof sm),
                       delta_shape_str(x, sx, sizeof sx));
        a.has_mask = 1;
    }
    return delta_op1(ctx, DELTA_OP_SOFTMAX, ins, key_mask ? 2 : 1, a,
                     x->dtype, x->ndim, x->shape);
}

delta_tensor *delta_attention(delta_ctx *ctx, delta_tensor *q, delta_tensor *k,
                              delta_tensor *v, bool causal,
                              delta_tensor *key_mask, float dropout_p) {
    INPUTS("attention", q, k, v);
    if (!same_float(q, k) || !same_float(q, v))
        DTYPE_FAIL("attention", "q, k, v are %s, %s, %s; all must be F32 or "
                   "all BF16", delta_dtype_name(q->dtype),
                   delta_dtype_name(k->dtype), delta_dtype_name(v->dtype));
    char sq[96], sk[96];
    bool ok = q->ndim == 4 && k->ndim == 4 && v->ndim == 4;
    for (int i = 0; ok && i < 4; i++) ok = k->shape[i] == v->shape[i];
    ok = ok && q->shape[0] == k->shape[0] && q->shape[1] == k->shape[1] &&
         q->shape[3] == k->shape[3];
    if (!ok)
        SHAPE_FAIL("attention: q %s and k/v %s; expected q (B, H, Tq, Dh), "
                   "k and v (B, H, Tk, Dh)", delta_shape_str(q, sq, sizeof sq),
                   delta_shape_str(k, sk, sizeof sk));
    float scale = 1.0f / sqrtf((float)q->shape[3]);
    delta_tensor *s = delta_matmul(ctx, q, k, false, true, scale);
    delta_tensor *p = delta_softmax(ctx, s, causal, key_mask);
    p = delta_dropout(ctx, p, dropout_p);
    return delta_matmul(ctx, p, v, false, false, 1.0f);
}

delta_tensor *delta_cross_entropy(delta_ctx *ctx, delta_tensor *logits,
                                  delta_tensor *targets, int ignore_index) {
    INPUTS("cross_entropy", logits, targets);
    char sl[96], st[96];
    if (!is_float(logits))
        DTYPE_FAIL("cross_entropy", "logits are %s; expected F32 or BF16",
                   delta_dtype_name(logits->dtype));
    if (logits->ndim != 2 || targets->ndim != 1 ||
        targets->dtype != DELTA_I32 || targets->shape[0] != logits->shape[0])
        SHAPE_FAIL("cross_entropy: logits %s and targets %s (%s); expected "
                   "logits (N, V) and I32 targets (N)",
                   delta_shape_str(logits, sl, sizeof sl),
                   delta_shape_str(targets, st, sizeof st),
                   delta_dtype_name(targets->dtype));
    delta_op_attrs a = delta_attrs0();
    a.ignore_index = ignore_index;
    return delta_op1(ctx, DELTA_OP_CROSS_ENTROPY, ins_, 2, a, DELTA_F32, 0,
                     NULL);
}

delta_tensor *delta_reshape(delta_ctx *ctx, delta_tensor *x, int ndim,
                            const int64_t *shape) {
    INPUTS("reshape", x);
    char sx[96];
    if (ndim < 0 || ndim > DELTA_MAX_DIMS || (ndim > 0 && !shape))
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "reshape: %d dims; 0 to %d allowed", ndim,
                              DELTA_MAX_DIMS);
    int64_t s[DELTA_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1 && infer < 0) infer = i;
        else if (s[i] < 0)
            SHAPE_FAIL("reshape: dim %d is %lld", i, (long long)s[i]);
        else known *= s[i];
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known)
            SHAPE_FAIL("reshape: cannot infer a dim of %s to %lld elements",
                       delta_shape_str(x, sx, sizeof sx),
                       (long long)x->numel);
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel)
        SHAPE_FAIL("reshape: %s has %lld elements, the new shape %lld",
                   delta_shape_str(x, sx, sizeof sx), (long long)x->numel,
                   (long long)known);
    delta_tensor *t = delta_op1(ctx, DELTA_OP_RESHAPE, ins_, 1,
                                delta_attrs0(), x->dtype, ndim, s);
    if (!t) return NULL;
    t->view_of = delta_tensor_root(ctx, x->id);
    t->kind = ctx->phase == DELTA_PHASE_FORWARD ? DELTA_KIND_ACTIVATION
                                                : DELTA_KIND_GRAD;
    return t;
}

static bool norm_dim(int *d, int ndim) {
    if (*d < 0) *d += ndim;
    return *d >= 0 && *d < ndim;
}

delta_tensor *delta_transpose(delta_ctx *ctx, delta_tensor *x, int d0, int d1) {
    INPUTS("transpose", x);
    char sx[96];
    if (!norm_dim(&d0, x->ndim) || !norm_dim(&d1, x->ndim))
        SHAPE_FAIL("transpose: dims %d, %d out of range for %s", d0, d1,
                   delta_shape_str(x, sx, sizeof sx));
    if (d0 > d1) { int t = d0; d0 = d1; d1 = t; }
    int64_t s[DELTA_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    s[d0] = x->shape[d1];
    s[d1] = x->shape[d0];
    delta_op_attrs a = delta_attrs0();
    a.dim = d0;
    a.dim1 = d1;
    return delta_op1(ctx, DELTA_OP_TRANSPOSE, ins_, 1, a, x->dtype, x->ndim, s);
}

delta_status delta_split(delta_ctx *ctx, delta_tensor *x, int dim, int n,
                         delta_tensor **out) {
    /* a failed split leaves NULL parts, which the next op refuses with a
     * message, never pointers it would follow */
    for (int i = 0; out && i < n && i < DELTA_MAX_OP_OUT; i++) out[i] = NULL;
    const delta_tensor *ins[1] = {x};
    if (!delta_check_inputs(ctx, "split", ins, 1)) return ctx->status;
    char sx[96];
    if (n < 1 || n > DELTA_MAX_OP_OUT || !norm_dim(&dim, x->ndim) ||
        x->shape[dim] % n) {
        delta_ctx_fail(ctx, DELTA_ERR_SHAPE,
                       "split: cannot split %s into %d equal parts along dim "
                       "%d (at most %d parts)",
                       delta_shape_str(x, sx, sizeof sx), n, dim,
                       DELTA_MAX_OP_OUT);
        return ctx->status;
    }
    delta_op *op = delta_op_append(ctx, DELTA_OP_SPLIT, ins, 1);
    if (!op) return ctx->status;
    op->a = delta_attrs0();
    op->a.dim = dim;
    int id = op->id;
    int64_t s[DELTA_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    s[dim] /= n;
    for (int i = 0; i < n; i++) {
        out[i] = delta_op_add_output(ctx, &ctx->ops[id], x->dtype, x->ndim, s);
        if (!out[i]) return ctx->status;
    }
    delta_op_set_cost(ctx, &ctx->ops[id]);
    return DELTA_OK;
}

delta_tensor *delta_concat(delta_ctx *ctx, delta_tensor *const *xs, int n,
                           int dim) {
    if (n < 1 || n > DELTA_MAX_OP_IN || !xs)
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "concat: %d tensors; 1 to %d allowed", n,
                              DELTA_MAX_OP_IN);
    if (!delta_check_inputs(ctx, "concat", (const delta_tensor *const *)xs, n))
        return NULL;
    char s0[96], si[96];
    const delta_tensor *x0 = xs[0];
    if (!norm_dim(&dim, x0->ndim))
        SHAPE_FAIL("concat: dim %d out of range for %s", dim,
                   delta_shape_str(x0, s0, sizeof s0));
    int64_t s[DELTA_MAX_DIMS];
    memcpy(s, x0->shape, sizeof s);
    for (int i = 1; i < n; i++) {
        bool ok = xs[i]->ndim == x0->ndim && xs[i]->dtype == x0->dtype;
        for (int d = 0; ok && d < x0->ndim; d++)
            ok = d == dim || xs[i]->shape[d] == x0->shape[d];
        if (!ok)
            SHAPE_FAIL("concat: %s and %s differ outside dim %d",
                       delta_shape_str(x0, s0, sizeof s0),
                       delta_shape_str(xs[i], si, sizeof si), dim);
        s[dim] += xs[i]->shape[dim];
    }
    delta_op_attrs a = delta_attrs0();
    a.dim = dim;
    return delta_op1(ctx, DELTA_OP_CONCAT, (const delta_tensor *const *)xs, n,
                     a, x0->dtype, x0->ndim, s);
}

delta_tensor *delta_cast(delta_ctx *ctx, delta_tensor *x, delta_dtype dtype) {
    INPUTS("cast", x);
    if (!is_float(x) || !delta_dtype_is_float(dtype))
        DTYPE_FAIL("cast", "from %s to %s; casts go between F32 and BF16",
                   delta_dtype_name(x->dtype), delta_dtype_name(dtype));
    if (x->dtype == dtype) return x; /* as torch's .to(): no copy */
    delta_op_attrs a = delta_attrs0();
    a.dtype = dtype;
    return delta_op1(ctx, DELTA_OP_CAST, ins_, 1, a, dtype, x->ndim, x->shape);
}
