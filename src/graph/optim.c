/* Optimizers as ops: each PARAM with a gradient gets one in-place update
 * op appended to the program; its state (momentum buffer, Adam moments)
 * is made of STATE tensors so the memory manager can place and swap it
 * like anything else. Semantics follow torch.optim.
 *
 * A learning rate from a tensor (extras.lr_tensor) is one more input of
 * every update op (attrs.lr_in its index). Clipping by global norm
 * (extras.grad_clip) appends, before the updates, a chain of grad_sumsq ops
 * over the gradients in parameter order (each takes the running sum and
 * up to DELTA_MAX_OP_IN - 1 gradients), then clip_coef (the norm and the
 * coefficient); every update reads the coefficient (attrs.coef_in). */
#include "graph/graph_impl.h"
#include "graph/ops_impl.h"

#include <math.h>
#include <stdio.h>

static delta_tensor *state_like(delta_ctx *ctx, const delta_tensor *p,
                                const char *suffix) {
    char name[DELTA_NAME_LEN + 32];
    snprintf(name, sizeof name, "%s.%s", p->name, suffix);
    delta_init z = {DELTA_INIT_ZEROS, 0, 0};
    return delta_state(ctx, name, p->ndim, p->shape, z);
}

static delta_status check_ready(delta_ctx *ctx, const char *what) {
    if (ctx->status != DELTA_OK) return ctx->status;
    if (!ctx->has_backward)
        delta_ctx_fail(ctx, DELTA_ERR_STATE,
                       "%s: call delta_backward before adding an optimizer",
                       what);
    else if (ctx->has_optimizer)
        delta_ctx_fail(ctx, DELTA_ERR_STATE,
                       "%s: this context already has an optimizer", what);
    return ctx->status;
}

/* Appends one in-place update op reading ins and writing outs. */
static bool update_op(delta_ctx *ctx, delta_op_type type,
                      const delta_tensor *const *ins, int n_in,
                      const delta_tensor *const *outs, int n_out,
                      delta_op_attrs a) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    if (!op) return false;
    op->a = a;
    op->inplace = true;
    op->recomputable = false;
    op->n_out = n_out;
    for (int i = 0; i < n_out; i++) op->out[i] = outs[i]->id;
    char name[2 * DELTA_NAME_LEN];
    snprintf(name, sizeof name, "%s(%s)", delta_op_type_name(type),
             ins[0]->name);
    snprintf(op->name, sizeof op->name, "%.*s", (int)sizeof op->name - 1,
             name);
    delta_op_set_cost(ctx, op);
    return true;
}

/* The step's extras every update op reads: the lr tensor and the clipping
 * coefficient (NULL when not used). */
typedef struct update_extras {
    const delta_tensor *lr, *coef;
} update_extras;

static bool check_extras(delta_ctx *ctx, const char *what,
                         const delta_tensor *lr, float clip) {
    if (lr && (lr->ctx != ctx || lr->id < 0 || lr->dtype != DELTA_F32 ||
               lr->numel != 1 ||
               (lr->kind != DELTA_KIND_INPUT &&
                lr->kind != DELTA_KIND_CONST))) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "%s: lr_tensor '%s' must be a scalar F32 INPUT or "
                       "CONST of this context", what, lr->name);
        return false;
    }
    if (!(clip >= 0) || isinf(clip)) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "%s: grad_clip %g must be a finite number >= 0 (0: "
                       "no clipping)", what, clip);
        return false;
    }
    if (clip > 0 && ctx->dp && ctx->dp->o.zero) {
        delta_ctx_fail(ctx, DELTA_ERR_UNSUPPORTED,
                       "%s: clipping by global norm needs every gradient, "
                       "but with ZeRO-1 each rank holds only its shard's; "
                       "train without --zero 1 to clip", what);
        return false;
    }
    return true;
}

/* grad_sumsq ops over every gradient an update reads (parameter order),
 * then clip_coef: returns the coefficient, NULL on failure. */
static const delta_tensor *append_clip(delta_ctx *ctx, float clip) {
    const delta_tensor *acc = NULL;
    const delta_tensor *ins[DELTA_MAX_OP_IN];
    int n = 0, nt = ctx->n_tensors;
    for (int i = 0; i <= nt && ctx->status == DELTA_OK; i++) {
        bool end = i == nt;
        if (!end) {
            const delta_tensor *p = ctx->tensors[i];
            if (p->kind != DELTA_KIND_PARAM || p->grad < 0) continue;
            if (n == 0 && acc) ins[n++] = acc;
            ins[n++] = ctx->tensors[p->grad];
        }
        bool full = n == DELTA_MAX_OP_IN;
        int grads = n - (acc ? 1 : 0);
        if (!(full || (end && grads > 0))) continue;
        delta_op *op = delta_op_append(ctx, DELTA_OP_GRAD_SUMSQ, ins, n);
        if (!op) return NULL;
        op->a = delta_attrs0();
        op->a.has_acc = acc != NULL;
        op->recomputable = false;
        snprintf(op->name, sizeof op->name, "grad_sumsq(%.100s..)",
                 ins[acc ? 1 : 0]->name);
        const delta_tensor *t = delta_op_add_output(ctx, op, DELTA_F32, 0,
                                                    NULL);
        if (!t) return NULL;
        delta_op_set_cost(ctx, &ctx->ops[t->producer]);
        acc = t;
        n = 0;
    }
    if (!acc) {
        delta_ctx_fail(ctx, DELTA_ERR_STATE, "grad_clip: no parameter has "
                       "a gradient to clip");
        return NULL;
    }
    const delta_tensor *in1[] = {acc};
    delta_op *op = delta_op_append(ctx, DELTA_OP_CLIP_COEF, in1, 1);
    if (!op) return NULL;
    int id = op->id;
    op->a = delta_attrs0();
    op->a.value = clip;
    op->recomputable = false;
    snprintf(op->name, sizeof op->name, "clip_coef(max_norm %g)",
             (double)clip);
    delta_tensor *norm = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32,
                                             0, NULL);
    delta_tensor *coef = delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32,
                                             0, NULL);
    if (!norm || !coef) return NULL;
    delta_tensor_set_name(norm, "grad_norm");
    delta_tensor_set_name(coef, "grad_clip_coef");
    delta_op_set_cost(ctx, &ctx->ops[id]);
    return coef;
}

/* The extras after ins[0..n): the lr tensor, the coefficient; sets
 * attrs.lr_in / coef_in. Returns the new input count. */
static int add_extras(const delta_tensor **ins, int n, update_extras x,
                      delta_op_attrs *a) {
    a->lr_in = a->coef_in = 0;
    if (x.lr) a->lr_in = n, ins[n++] = x.lr;
    if (x.coef) a->coef_in = n, ins[n++] = x.coef;
    return n;
}

delta_status delta_optimizer_sgd(delta_ctx *ctx, delta_sgd_opts o) {
    return delta_optimizer_sgd_with(ctx, o, NULL);
}

delta_status delta_optimizer_adamw(delta_ctx *ctx, delta_adamw_opts o) {
    return delta_optimizer_adamw_with(ctx, o, NULL);
}

delta_status delta_optimizer_sgd_with(delta_ctx *ctx, delta_sgd_opts o,
                                      const delta_optim_extras *ox) {
    delta_optim_extras e = ox ? *ox : (delta_optim_extras){0};
    if (check_ready(ctx, "sgd")) return ctx->status;
    if (!(o.lr >= 0) || !(o.momentum >= 0) || !(o.weight_decay >= 0) ||
        (o.nesterov && o.momentum <= 0)) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "sgd: lr %g, momentum %g, weight decay %g must be >= 0 "
                       "(and nesterov needs momentum > 0)",
                       o.lr, o.momentum, o.weight_decay);
        return ctx->status;
    }
    if (!check_extras(ctx, "sgd", e.lr_tensor, e.grad_clip))
        return ctx->status;
    ctx->phase = DELTA_PHASE_OPTIMIZER;
    update_extras x = {e.lr_tensor, NULL};
    if (e.grad_clip > 0 && !(x.coef = append_clip(ctx, e.grad_clip)))
        return ctx->status;
    delta_op_attrs a = delta_attrs0();
    a.lr = o.lr;
    a.momentum = o.momentum;
    a.weight_decay = o.weight_decay;
    a.nesterov = o.nesterov;
    a.has_momentum = o.momentum > 0;
    int n = ctx->n_tensors;
    for (int i = 0; i < n && ctx->status == DELTA_OK; i++) {
        delta_tensor *p = ctx->tensors[i];
        if (p->kind != DELTA_KIND_PARAM || p->grad < 0) continue;
        delta_tensor *g = ctx->tensors[p->grad];
        const delta_tensor *ins[DELTA_MAX_OP_IN] = {p, g};
        if (a.has_momentum) {
            delta_tensor *buf = state_like(ctx, p, "momentum_buffer");
            if (!buf) break;
            ins[2] = buf;
            const delta_tensor *outs[] = {p, buf};
            int n_in = add_extras(ins, 3, x, &a);
            update_op(ctx, DELTA_OP_SGD_UPDATE, ins, n_in, outs, 2, a);
        } else {
            const delta_tensor *outs[] = {p};
            int n_in = add_extras(ins, 2, x, &a);
            update_op(ctx, DELTA_OP_SGD_UPDATE, ins, n_in, outs, 1, a);
        }
    }
    delta_dp_append_allgathers(ctx);
    ctx->has_optimizer = true;
    return ctx->status;
}

delta_status delta_optimizer_adamw_with(delta_ctx *ctx, delta_adamw_opts o,
                                        const delta_optim_extras *ox) {
    delta_optim_extras e = ox ? *ox : (delta_optim_extras){0};
    if (check_ready(ctx, "adamw")) return ctx->status;
    if (!(o.lr >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) ||
        !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0) ||
        !(o.weight_decay >= 0)) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "adamw: need lr >= 0, betas in [0, 1), eps > 0, weight "
                       "decay >= 0; got lr %g betas (%g, %g) eps %g wd %g",
                       o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
        return ctx->status;
    }
    if (!check_extras(ctx, "adamw", e.lr_tensor, e.grad_clip))
        return ctx->status;
    ctx->phase = DELTA_PHASE_OPTIMIZER;
    update_extras x = {e.lr_tensor, NULL};
    if (e.grad_clip > 0 && !(x.coef = append_clip(ctx, e.grad_clip)))
        return ctx->status;
    delta_op_attrs a = delta_attrs0();
    a.lr = o.lr;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.opt_eps = o.eps;
    a.weight_decay = o.weight_decay;
    int n = ctx->n_tensors;
    for (int i = 0; i < n && ctx->status == DELTA_OK; i++) {
        delta_tensor *p = ctx->tensors[i];
        if (p->kind != DELTA_KIND_PARAM || p->grad < 0) continue;
        delta_tensor *m = state_like(ctx, p, "exp_avg");
        delta_tensor *v = state_like(ctx, p, "exp_avg_sq");
        if (!m || !v) break;
        const delta_tensor *ins[DELTA_MAX_OP_IN] = {p, ctx->tensors[p->grad],
                                                    m, v};
        const delta_tensor *outs[] = {p, m, v};
        int n_in = add_extras(ins, 4, x, &a);
        update_op(ctx, DELTA_OP_ADAMW_UPDATE, ins, n_in, outs, 3, a);
    }
    delta_dp_append_allgathers(ctx);
    ctx->has_optimizer = true;
    return ctx->status;
}
