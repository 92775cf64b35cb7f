/* The context: owns every tensor record and the op list, and keeps the
 * first recoverable error. Tensor records are allocated one by one so the
 * handles given to callers stay valid as the graph grows. */
#include "graph/graph_impl.h"
#include "core/grow.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

delta_ctx *delta_ctx_new(void) {
    delta_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->seed = 1234;
    return ctx;
}

void delta_ctx_free(delta_ctx *ctx) {
    if (!ctx) return;
    for (int i = 0; i < ctx->n_tensors; i++) free(ctx->tensors[i]);
    for (int i = 0; i < ctx->n_retired; i++) free(ctx->retired[i]);
    free(ctx->tensors);
    free(ctx->retired);
    free(ctx->ops);
    if (ctx->dp) free(ctx->dp->buckets);
    free(ctx->dp);
    free(ctx);
}

delta_status delta_ctx_status(const delta_ctx *ctx) { return ctx->status; }
const char *delta_ctx_error(const delta_ctx *ctx) { return ctx->err; }
void delta_ctx_clear_error(delta_ctx *ctx) {
    ctx->status = DELTA_OK;
    ctx->err[0] = 0;
}
void delta_ctx_set_seed(delta_ctx *ctx, uint64_t seed) { ctx->seed = seed; }
uint64_t delta_ctx_seed(const delta_ctx *ctx) { return ctx->seed; }

void *delta_ctx_fail(delta_ctx *ctx, delta_status s, const char *fmt, ...) {
    if (ctx->status != DELTA_OK) return NULL;
    ctx->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return NULL;
}

delta_tensor *delta_tensor_new(delta_ctx *ctx, delta_tensor_kind kind,
                               delta_dtype dtype, int ndim,
                               const int64_t *shape, const char *name) {
    if (ndim < 0 || ndim > DELTA_MAX_DIMS)
        return delta_ctx_fail(ctx, DELTA_ERR_SHAPE,
                              "tensor '%s': %d dims given, at most %d allowed",
                              name ? name : "", ndim, DELTA_MAX_DIMS);
    if (dtype != DELTA_F32 && dtype != DELTA_I32 && dtype != DELTA_BF16)
        return delta_ctx_fail(ctx, DELTA_ERR_UNSUPPORTED,
                              "tensor '%s': dtype %s is not computed; use "
                              "F32 or BF16 (or I32 for indices)",
                              name ? name : "", delta_dtype_name(dtype));
    /* an unnamed tensor is named as it will be: t<id> */
    char label[DELTA_NAME_LEN + 16];
    if (name && *name) snprintf(label, sizeof label, "%s", name);
    else snprintf(label, sizeof label, "t%d", ctx->n_tensors);
    int64_t numel = 1;
    bool too_big = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return delta_ctx_fail(ctx, DELTA_ERR_SHAPE,
                                  "tensor '%s': dim %d is %lld; dims must be "
                                  "non-negative", label, i,
                                  (long long)shape[i]);
        too_big |= __builtin_mul_overflow(numel, shape[i], &numel) ||
                   numel > ((int64_t)1 << 48);
    }
    if (too_big) {
        char dims[160];
        size_t k = 0;
        dims[0] = '\0';
        for (int i = 0; i < ndim && k < sizeof dims; i++)
            k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%lld",
                                  i ? " x " : "", (long long)shape[i]);
        return delta_ctx_fail(ctx, DELTA_ERR_SHAPE,
                              "tensor '%s' of shape %s has more than 2^48 "
                              "elements; make a dimension (the batch, a "
                              "length or a width) smaller", label, dims);
    }
    if (!delta_grow((void **)&ctx->tensors, &ctx->cap_tensors,
                    ctx->n_tensors + 1, sizeof *ctx->tensors, 64))
        return delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
    delta_tensor *t = calloc(1, sizeof *t);
    if (!t) return delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
    t->ctx = ctx;
    t->id = ctx->n_tensors;
    t->init_id = t->id;
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->bytes = (size_t)numel * delta_dtype_size(dtype);
    t->producer = -1;
    t->view_of = -1;
    t->grad = -1;
    t->init.kind = DELTA_INIT_NONE;
    t->owner = -1;
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    else snprintf(t->name, sizeof t->name, "t%d", t->id);
    ctx->tensors[ctx->n_tensors++] = t;
    return t;
}

static delta_tensor *leaf(delta_ctx *ctx, delta_tensor_kind kind,
                          delta_dtype dtype, const char *name, int ndim,
                          const int64_t *shape, delta_init init) {
    if (ndim > 0 && !shape)
        return delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                              "tensor '%s': shape is NULL", name ? name : "");
    delta_tensor *t = delta_tensor_new(ctx, kind, dtype, ndim, shape, name);
    if (!t) return NULL;
    t->init = init;
    t->requires_grad = kind == DELTA_KIND_PARAM;
    return t;
}

delta_tensor *delta_param(delta_ctx *ctx, const char *name, int ndim,
                          const int64_t *shape, delta_init init) {
    return leaf(ctx, DELTA_KIND_PARAM, DELTA_F32, name, ndim, shape, init);
}

delta_tensor *delta_input(delta_ctx *ctx, const char *name, delta_dtype dtype,
                          int ndim, const int64_t *shape) {
    delta_init none = {DELTA_INIT_NONE, 0, 0};
    return leaf(ctx, DELTA_KIND_INPUT, dtype, name, ndim, shape, none);
}

delta_tensor *delta_constant(delta_ctx *ctx, const char *name,
                             delta_dtype dtype, int ndim, const int64_t *shape,
                             delta_init init) {
    return leaf(ctx, DELTA_KIND_CONST, dtype, name, ndim, shape, init);
}

delta_tensor *delta_state(delta_ctx *ctx, const char *name, int ndim,
                          const int64_t *shape, delta_init init) {
    return leaf(ctx, DELTA_KIND_STATE, DELTA_F32, name, ndim, shape, init);
}

int delta_tensor_id(const delta_tensor *t) { return t->id; }
int delta_tensor_ndim(const delta_tensor *t) { return t->ndim; }
int64_t delta_tensor_dim(const delta_tensor *t, int i) {
    if (i < 0) i += t->ndim;
    DELTA_ASSERTF(i >= 0 && i < t->ndim, "dim %d of a %d-dim tensor", i,
                  t->ndim);
    return t->shape[i];
}
const int64_t *delta_tensor_shape(const delta_tensor *t) { return t->shape; }
int64_t delta_tensor_numel(const delta_tensor *t) { return t->numel; }
size_t delta_tensor_bytes(const delta_tensor *t) { return t->bytes; }
delta_dtype delta_tensor_dtype(const delta_tensor *t) { return t->dtype; }
delta_tensor_kind delta_tensor_kind_of(const delta_tensor *t) {
    return t->kind;
}
const char *delta_tensor_name(const delta_tensor *t) { return t->name; }
void delta_tensor_set_name(delta_tensor *t, const char *name) {
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
}
bool delta_tensor_requires_grad(const delta_tensor *t) {
    return t->requires_grad;
}
delta_tensor *delta_tensor_grad(const delta_tensor *t) {
    return t->grad >= 0 ? t->ctx->tensors[t->grad] : NULL;
}

int delta_ctx_n_tensors(const delta_ctx *ctx) { return ctx->n_tensors; }
delta_tensor *delta_ctx_tensor(const delta_ctx *ctx, int id) {
    DELTA_ASSERTF(id >= 0 && id < ctx->n_tensors, "tensor id %d of %d", id,
                  ctx->n_tensors);
    return ctx->tensors[id];
}
delta_tensor *delta_ctx_find(const delta_ctx *ctx, const char *name) {
    for (int i = 0; i < ctx->n_tensors; i++)
        if (strcmp(ctx->tensors[i]->name, name) == 0) return ctx->tensors[i];
    return NULL;
}

delta_op *delta_op_append(delta_ctx *ctx, delta_op_type type,
                          const delta_tensor *const *ins, int n_in) {
    DELTA_ASSERT(n_in >= 0 && n_in <= DELTA_MAX_OP_IN);
    if (!delta_grow((void **)&ctx->ops, &ctx->cap_ops, ctx->n_ops + 1,
                    sizeof *ctx->ops, 64))
        return delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
    delta_op *op = &ctx->ops[ctx->n_ops];
    memset(op, 0, sizeof *op);
    op->id = ctx->n_ops++;
    op->type = type;
    op->phase = ctx->phase;
    op->n_in = n_in;
    for (int i = 0; i < n_in; i++) op->in[i] = ins[i]->id;
    op->recomputable = true;
    snprintf(op->name, sizeof op->name, "%s_%d", delta_op_type_name(type),
             op->id);
    return op;
}

delta_tensor *delta_op_add_output(delta_ctx *ctx, delta_op *op,
                                  delta_dtype dtype, int ndim,
                                  const int64_t *shape) {
    DELTA_ASSERT(op->n_out < DELTA_MAX_OP_OUT);
    delta_tensor_kind kind = op->phase == DELTA_PHASE_FORWARD
                                 ? DELTA_KIND_ACTIVATION
                                 : DELTA_KIND_GRAD;
    delta_tensor *t = delta_tensor_new(ctx, kind, dtype, ndim, shape, NULL);
    if (!t) return NULL;
    t->producer = op->id;
    for (int i = 0; i < op->n_in; i++)
        if (ctx->tensors[op->in[i]]->requires_grad) t->requires_grad = true;
    if (op->phase != DELTA_PHASE_FORWARD) t->requires_grad = false;
    op->out[op->n_out++] = t->id;
    return t;
}

bool delta_ctx_renumber_tensors(delta_ctx *ctx, const int *new_id) {
    int n = ctx->n_tensors, keep = 0;
    for (int i = 0; i < n; i++) keep += new_id[i] >= 0;
    delta_tensor **order = malloc((size_t)(keep ? keep : 1) * sizeof *order);
    if (!order ||
        !delta_grow((void **)&ctx->retired, &ctx->cap_retired,
                    ctx->n_retired + (n - keep), sizeof *ctx->retired, 64)) {
        free(order);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        delta_tensor *t = ctx->tensors[i];
        if (new_id[i] >= 0) {
            order[new_id[i]] = t;
        } else {
            t->id = -1;
            ctx->retired[ctx->n_retired++] = t;
        }
    }
    for (int i = 0; i < keep; i++) {
        delta_tensor *t = order[i];
        DELTA_ASSERT(t->view_of < 0 || new_id[t->view_of] >= 0);
        DELTA_ASSERT(t->grad < 0 || new_id[t->grad] >= 0);
        t->id = i;
        if (t->view_of >= 0) t->view_of = new_id[t->view_of];
        if (t->grad >= 0) t->grad = new_id[t->grad];
        ctx->tensors[i] = t;
    }
    ctx->n_tensors = keep;
    for (int o = 0; o < ctx->n_ops; o++) {
        delta_op *op = &ctx->ops[o];
        for (int i = 0; i < op->n_in; i++) op->in[i] = new_id[op->in[i]];
        for (int i = 0; i < op->n_out; i++) op->out[i] = new_id[op->out[i]];
        for (int i = 0; i < op->n_in; i++) DELTA_ASSERT(op->in[i] >= 0);
        for (int i = 0; i < op->n_out; i++) DELTA_ASSERT(op->out[i] >= 0);
    }
    free(order);
    return true;
}

void delta_ctx_move_casts_last(delta_ctx *ctx) {
    int n = ctx->n_tensors;
    int *new_id = malloc((size_t)(n ? n : 1) * sizeof *new_id);
    if (!new_id) {
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return;
    }
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const delta_tensor *t = ctx->tensors[i];
            bool cast = t->producer >= 0 &&
                        ctx->ops[t->producer].type == DELTA_OP_CAST;
            if (cast == (pass == 1)) new_id[i] = k++;
        }
    /* the FP32 program's ids, and so its initial values */
    if (delta_ctx_renumber_tensors(ctx, new_id))
        for (int i = 0; i < n; i++) ctx->tensors[i]->init_id = i;
    free(new_id);
}
