/* Reverse-mode autodiff over the recorded forward ops. Walks the ops from
 * last to first and appends, for each, the backward ops that turn the
 * gradients of its outputs into gradient contributions for its inputs.
 * A tensor used by several ops collects several contributions; they are
 * summed with add ops, in the order they were made, just before the
 * tensor's own producer is differentiated (all its consumers come after it
 * in program order, so by then every contribution exists). */
#include "graph/graph_impl.h"
#include "graph/ops_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct contrib {
    int grad;  /* tensor id of one contribution */
    int next;  /* index of the next contribution, -1 at the end */
} contrib;

typedef struct grads {
    int *head, *tail;  /* per forward tensor id: first/last contribution */
    contrib *c;
    int n, cap;
    int n_fwd_tensors;
} grads;

static bool grads_add(delta_ctx *ctx, grads *g, const delta_tensor *x,
                      const delta_tensor *dx) {
    if (!dx) return false;
    if (!x->requires_grad) return true;
    DELTA_ASSERT(x->id < g->n_fwd_tensors);
    if (g->n == g->cap) {
        int nc = g->cap ? 2 * g->cap : 256;
        contrib *c = realloc(g->c, (size_t)nc * sizeof *c);
        if (!c) {
            delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
            return false;
        }
        g->c = c;
        g->cap = nc;
    }
    g->c[g->n] = (contrib){dx->id, -1};
    if (g->tail[x->id] >= 0) g->c[g->tail[x->id]].next = g->n;
    else g->head[x->id] = g->n;
    g->tail[x->id] = g->n++;
    return true;
}

/* Sum of the contributions to tensor id (NULL if none); records it as the
 * tensor's gradient. */
static delta_tensor *grads_total(delta_ctx *ctx, grads *g, int id) {
    int i = g->head[id];
    if (i < 0) return NULL;
    delta_tensor *acc = ctx->tensors[g->c[i].grad];
    for (i = g->c[i].next; i >= 0 && acc; i = g->c[i].next)
        acc = delta_add(ctx, acc, ctx->tensors[g->c[i].grad]);
    if (acc) ctx->tensors[id]->grad = acc->id;
    return acc;
}

static delta_tensor *zeros_like(delta_ctx *ctx, const delta_tensor *x) {
    delta_op_attrs a = delta_attrs0();
    a.value = 0;
    return delta_op1(ctx, DELTA_OP_FILL, NULL, 0, a, x->dtype, x->ndim,
                     x->shape);
}

/* A backward op of one output shaped like `like`, of its dtype: a
 * gradient always has the dtype of what it is the gradient of, so
 * contributions to one tensor can be summed and an F32 parameter gets an
 * F32 gradient. */
static delta_tensor *bwd1(delta_ctx *ctx, delta_op_type type,
                          const delta_tensor *const *ins, int n_in,
                          delta_op_attrs a, const delta_tensor *like) {
    return delta_op1(ctx, type, ins, n_in, a, like->dtype, like->ndim,
                     like->shape);
}

/* x viewed as a matrix (rows, last dim); 1-D x becomes one row. */
static delta_tensor *flat2(delta_ctx *ctx, delta_tensor *x) {
    if (x->ndim == 2) return x;
    int64_t s[2] = {-1, x->shape[x->ndim - 1]};
    return delta_reshape(ctx, x, 2, s);
}

static bool matmul_bwd(delta_ctx *ctx, grads *g, const delta_op *op,
                       delta_tensor *dc) {
    delta_tensor *a = ctx->tensors[op->in[0]], *b = ctx->tensors[op->in[1]];
    bool ta = op->a.trans_a, tb = op->a.trans_b;
    float al = op->a.alpha;
    if (a->requires_grad) {
        delta_tensor *da = ta ? delta_matmul(ctx, b, dc, tb, true, al)
                              : delta_matmul(ctx, dc, b, false, !tb, al);
        if (!grads_add(ctx, g, a, da)) return false;
    }
    if (b->requires_grad) {
        delta_tensor *aa = a, *dd = dc;
        if (b->ndim == 2 && a->ndim > 2) { /* b shared by the batch */
            aa = flat2(ctx, a);
            dd = flat2(ctx, dc);
        }
        delta_tensor *db = tb ? delta_matmul(ctx, dd, aa, true, ta, al)
                              : delta_matmul(ctx, aa, dd, !ta, false, al);
        if (!grads_add(ctx, g, b, db)) return false;
    }
    return true;
}

static bool linear_bwd(delta_ctx *ctx, grads *g, const delta_op *op,
                       delta_tensor *dy) {
    delta_tensor *x = ctx->tensors[op->in[0]], *w = ctx->tensors[op->in[1]];
    delta_tensor *dy2 = flat2(ctx, dy);
    /* w (OUT, IN): dx = dy w, dw = dy^T x; w (IN, OUT): dx = dy w^T,
     * dw = x^T dy (the GEMMs matmul's backward would run for x w) */
    bool io = op->a.w_in_out != 0;
    if (x->requires_grad) {
        delta_tensor *dx = delta_matmul(ctx, dy2, w, false, io, 1.0f);
        if (x->ndim != 2) dx = delta_reshape(ctx, dx, x->ndim, x->shape);
        if (!grads_add(ctx, g, x, dx)) return false;
    }
    if (w->requires_grad) {
        delta_tensor *x2 = flat2(ctx, x);
        delta_tensor *dw = io ? delta_matmul(ctx, x2, dy2, true, false, 1.0f)
                              : delta_matmul(ctx, dy2, x2, true, false, 1.0f);
        if (!grads_add(ctx, g, w, dw)) return false;
    }
    if (op->n_in > 2 && ctx->tensors[op->in[2]]->requires_grad) {
        delta_tensor *bias = ctx->tensors[op->in[2]];
        const delta_tensor *in[1] = {dy2};
        if (!grads_add(ctx, g, bias,
                       bwd1(ctx, DELTA_OP_SUM_LEADING, in, 1, delta_attrs0(),
                            bias)))
            return false;
    }
    return true;
}

/* Appends a backward op with several outputs shaped like `likes`. */
static bool bwd_multi(delta_ctx *ctx, delta_op_type type,
                      const delta_tensor *const *ins, int n_in,
                      delta_op_attrs a, const delta_tensor *const *likes,
                      int n_out, delta_tensor **outs) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    if (!op) return false;
    op->a = a;
    int id = op->id;
    for (int i = 0; i < n_out; i++) {
        outs[i] = delta_op_add_output(ctx, &ctx->ops[id], likes[i]->dtype,
                                      likes[i]->ndim, likes[i]->shape);
        if (!outs[i]) return false;
    }
    delta_op_set_cost(ctx, &ctx->ops[id]);
    return true;
}

/* Appends the backward ops of forward op `op` given its output gradients
 * (NULL where an output got none). */
static bool op_bwd(delta_ctx *ctx, grads *g, const delta_op *op,
                   delta_tensor **dys) {
    delta_tensor *in[DELTA_MAX_OP_IN];
    for (int i = 0; i < op->n_in; i++) in[i] = ctx->tensors[op->in[i]];
    delta_tensor *x = op->n_in ? in[0] : NULL;
    delta_tensor *y = ctx->tensors[op->out[0]];
    delta_tensor *dy = dys[0];
    delta_op_attrs a = op->a;
    switch (op->type) {
    case DELTA_OP_MATMUL:
        return matmul_bwd(ctx, g, op, dy);
    case DELTA_OP_LINEAR:
        return linear_bwd(ctx, g, op, dy);
    case DELTA_OP_CONV2D: {
        if (x->requires_grad) {
            const delta_tensor *i2[] = {dy, in[1]};
            if (!grads_add(ctx, g, x, bwd1(ctx, DELTA_OP_CONV2D_DX, i2, 2, a, x)))
                return false;
        }
        if (in[1]->requires_grad) {
            const delta_tensor *i2[] = {x, dy};
            if (!grads_add(ctx, g, in[1],
                           bwd1(ctx, DELTA_OP_CONV2D_DW, i2, 2, a, in[1])))
                return false;
        }
        if (op->n_in > 2 && in[2]->requires_grad) {
            const delta_tensor *i1[] = {dy};
            if (!grads_add(ctx, g, in[2],
                           bwd1(ctx, DELTA_OP_BIAS_GRAD_NCHW, i1, 1,
                                delta_attrs0(), in[2])))
                return false;
        }
        return true;
    }
    case DELTA_OP_BATCHNORM:
    case DELTA_OP_BATCHNORM_RELU:
    case DELTA_OP_BATCHNORM_ADD_RELU: {
        /* the fused forms take the unfused chain's backward ops: relu_bwd's
         * mask from y (its output is the residual's gradient too), then
         * batchnorm_bwd. A fused backward op would hold x, y, dy and dx at
         * once, one activation more than either (ResNet-50's minimum budget
         * rose by a third), to save one pass of eight. */
        if (op->type != DELTA_OP_BATCHNORM) {
            const delta_tensor *i2[] = {y, dy};
            dy = bwd1(ctx, DELTA_OP_RELU_BWD, i2, 2, delta_attrs0(), y);
            if (!dy || (op->type == DELTA_OP_BATCHNORM_ADD_RELU &&
                        !grads_add(ctx, g, in[3], dy)))
                return false;
        }
        const delta_tensor *bi[] = {x, in[1], ctx->tensors[op->out[1]],
                                    ctx->tensors[op->out[2]], dy};
        const delta_tensor *likes[] = {x, in[1], in[2]};
        delta_tensor *o[3];
        if (!bwd_multi(ctx, DELTA_OP_BATCHNORM_BWD, bi, 5, a, likes, 3, o))
            return false;
        return grads_add(ctx, g, x, o[0]) && grads_add(ctx, g, in[1], o[1]) &&
               grads_add(ctx, g, in[2], o[2]);
    }
    case DELTA_OP_LAYERNORM: {
        bool affine = op->n_in == 3;
        const delta_tensor *bi[] = {x, ctx->tensors[op->out[1]],
                                    ctx->tensors[op->out[2]], dy,
                                    affine ? in[1] : NULL};
        const delta_tensor *likes[] = {x, affine ? in[1] : NULL,
                                       affine ? in[2] : NULL};
        delta_tensor *o[3];
        if (!bwd_multi(ctx, DELTA_OP_LAYERNORM_BWD, bi, affine ? 5 : 4, a,
                       likes, affine ? 3 : 1, o))
            return false;
        if (!grads_add(ctx, g, x, o[0])) return false;
        return !affine ||
               (grads_add(ctx, g, in[1], o[1]) && grads_add(ctx, g, in[2], o[2]));
    }
    case DELTA_OP_RELU: {
        const delta_tensor *i2[] = {y, dy};
        return grads_add(ctx, g, x, bwd1(ctx, DELTA_OP_RELU_BWD, i2, 2, a, x));
    }
    case DELTA_OP_GELU: {
        const delta_tensor *i2[] = {x, dy};
        return grads_add(ctx, g, x, bwd1(ctx, DELTA_OP_GELU_BWD, i2, 2, a, x));
    }
    case DELTA_OP_MAXPOOL2D: {
        const delta_tensor *i2[] = {x, dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_MAXPOOL2D_BWD, i2, 2, a, x));
    }
    case DELTA_OP_AVGPOOL2D: {
        const delta_tensor *i1[] = {dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_AVGPOOL2D_BWD, i1, 1, a, x));
    }
    case DELTA_OP_GLOBAL_AVGPOOL: {
        const delta_tensor *i1[] = {dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_GLOBAL_AVGPOOL_BWD, i1, 1, a, x));
    }
    case DELTA_OP_ADD: {
        if (!grads_add(ctx, g, x, dy)) return false;
        if (!in[1]->requires_grad) return true;
        if (in[1]->ndim == x->ndim) return grads_add(ctx, g, in[1], dy);
        const delta_tensor *i1[] = {dy};
        return grads_add(ctx, g, in[1],
                         bwd1(ctx, DELTA_OP_SUM_LEADING, i1, 1, delta_attrs0(),
                              in[1]));
    }
    case DELTA_OP_MUL:
        return (!x->requires_grad || grads_add(ctx, g, x, delta_mul(ctx, dy, in[1]))) &&
               (!in[1]->requires_grad ||
                grads_add(ctx, g, in[1], delta_mul(ctx, dy, x)));
    case DELTA_OP_SCALE:
        return grads_add(ctx, g, x, delta_scale(ctx, dy, a.value));
    case DELTA_OP_SUM: {
        const delta_tensor *i1[] = {dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_BROADCAST, i1, 1, delta_attrs0(), x));
    }
    case DELTA_OP_EMBEDDING: {
        const delta_tensor *i2[] = {x, dy};
        return grads_add(ctx, g, in[1],
                         bwd1(ctx, DELTA_OP_EMBEDDING_BWD, i2, 2, a, in[1]));
    }
    case DELTA_OP_SOFTMAX: {
        const delta_tensor *i2[] = {y, dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_SOFTMAX_BWD, i2, 2, a, x));
    }
    case DELTA_OP_DROPOUT: {
        const delta_tensor *i1[] = {dy};
        a.fwd_op = delta_dropout_key_op(op);
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_DROPOUT_BWD, i1, 1, a, x));
    }
    case DELTA_OP_CROSS_ENTROPY: {
        const delta_tensor *i3[] = {x, in[1], dy};
        return grads_add(ctx, g, x,
                         bwd1(ctx, DELTA_OP_CROSS_ENTROPY_BWD, i3, 3, a, x));
    }
    case DELTA_OP_RESHAPE:
        return grads_add(ctx, g, x, delta_reshape(ctx, dy, x->ndim, x->shape));
    case DELTA_OP_TRANSPOSE:
        return grads_add(ctx, g, x, delta_transpose(ctx, dy, a.dim, a.dim1));
    case DELTA_OP_SPLIT: {
        delta_tensor *parts[DELTA_MAX_OP_OUT];
        for (int i = 0; i < op->n_out; i++)
            parts[i] = dys[i] ? dys[i]
                              : zeros_like(ctx, ctx->tensors[op->out[i]]);
        return grads_add(ctx, g, x, delta_concat(ctx, parts, op->n_out, a.dim));
    }
    case DELTA_OP_CONCAT: {
        /* a split whose parts take each input's own size along dim */
        const delta_tensor *i1[] = {dy};
        const delta_tensor *likes[DELTA_MAX_OP_IN];
        for (int i = 0; i < op->n_in; i++) likes[i] = in[i];
        delta_tensor *o[DELTA_MAX_OP_IN];
        if (op->n_in > DELTA_MAX_OP_OUT)
            return delta_ctx_fail(ctx, DELTA_ERR_UNSUPPORTED,
                                  "backward of a concat of %d tensors: at most "
                                  "%d supported", op->n_in, DELTA_MAX_OP_OUT),
                   false;
        if (!bwd_multi(ctx, DELTA_OP_SPLIT, i1, 1, a, likes, op->n_in, o))
            return false;
        for (int i = 0; i < op->n_in; i++)
            if (!grads_add(ctx, g, in[i], o[i])) return false;
        return true;
    }
    case DELTA_OP_FILL:
        return true;
    case DELTA_OP_CAST:
        return grads_add(ctx, g, x, delta_cast(ctx, dy, x->dtype));
    default:
        delta_ctx_fail(ctx, DELTA_ERR_UNSUPPORTED,
                       "backward: op %d (%s) has no gradient rule", op->id,
                       delta_op_type_name(op->type));
        return false;
    }
}

delta_status delta_backward(delta_ctx *ctx, delta_tensor *loss) {
    if (ctx->status != DELTA_OK) return ctx->status;
    const delta_tensor *l[1] = {loss};
    if (!delta_check_inputs(ctx, "backward", l, 1)) return ctx->status;
    if (ctx->has_backward) {
        delta_ctx_fail(ctx, DELTA_ERR_STATE,
                       "backward: already called for this context");
        return ctx->status;
    }
    if (loss->numel != 1 || loss->dtype != DELTA_F32) {
        char s[96];
        delta_ctx_fail(ctx, DELTA_ERR_SHAPE,
                       "backward: the loss must be an F32 scalar, got %s",
                       delta_shape_str(loss, s, sizeof s));
        return ctx->status;
    }
    if (!loss->requires_grad) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "backward: the loss does not depend on any parameter");
        return ctx->status;
    }
    grads g = {0};
    g.n_fwd_tensors = ctx->n_tensors;
    g.head = malloc((size_t)ctx->n_tensors * sizeof(int));
    g.tail = malloc((size_t)ctx->n_tensors * sizeof(int));
    if (!g.head || !g.tail) {
        free(g.head);
        free(g.tail);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return ctx->status;
    }
    for (int i = 0; i < ctx->n_tensors; i++) g.head[i] = g.tail[i] = -1;

    int n_fwd_ops = ctx->n_ops;
    ctx->phase = DELTA_PHASE_BACKWARD;
    ctx->has_backward = true;
    delta_op_attrs one = delta_attrs0();
    one.value = 1.0f;
    delta_tensor *seed = delta_op1(ctx, DELTA_OP_FILL, NULL, 0, one, DELTA_F32,
                                   loss->ndim, loss->shape);
    grads_add(ctx, &g, loss, seed);

    for (int i = n_fwd_ops - 1; i >= 0 && ctx->status == DELTA_OK; i--) {
        delta_op op = ctx->ops[i]; /* a copy: appends may move the array */
        if (op.inplace || op.phase != DELTA_PHASE_FORWARD) continue;
        delta_tensor *dys[DELTA_MAX_OP_OUT] = {0};
        bool any = false;
        for (int j = 0; j < op.n_out; j++) {
            dys[j] = grads_total(ctx, &g, op.out[j]);
            any |= dys[j] != NULL;
        }
        if (any && ctx->status == DELTA_OK) op_bwd(ctx, &g, &op, dys);
    }
    /* leaves: parameters (and any other leaf that requires a gradient) */
    for (int id = 0; id < g.n_fwd_tensors && ctx->status == DELTA_OK; id++)
        if (ctx->tensors[id]->producer < 0) grads_total(ctx, &g, id);

    free(g.head);
    free(g.tail);
    free(g.c);
    return ctx->status;
}
