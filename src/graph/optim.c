/* Optimizers as ops: each PARAM with a gradient gets one in-place update
 * op appended to the program; its state (momentum buffer, Adam moments)
 * is made of STATE tensors so the memory manager can place and swap it
 * like anything else. Semantics follow torch.optim. */
#include "graph/graph_impl.h"
#include "graph/ops_impl.h"

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

delta_status delta_optimizer_sgd(delta_ctx *ctx, delta_sgd_opts o) {
    if (check_ready(ctx, "sgd")) return ctx->status;
    if (!(o.lr >= 0) || !(o.momentum >= 0) || !(o.weight_decay >= 0) ||
        (o.nesterov && o.momentum <= 0)) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG,
                       "sgd: lr %g, momentum %g, weight decay %g must be >= 0 "
                       "(and nesterov needs momentum > 0)",
                       o.lr, o.momentum, o.weight_decay);
        return ctx->status;
    }
    ctx->phase = DELTA_PHASE_OPTIMIZER;
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
        if (a.has_momentum) {
            delta_tensor *buf = state_like(ctx, p, "momentum_buffer");
            if (!buf) break;
            const delta_tensor *ins[] = {p, g, buf}, *outs[] = {p, buf};
            update_op(ctx, DELTA_OP_SGD_UPDATE, ins, 3, outs, 2, a);
        } else {
            const delta_tensor *ins[] = {p, g}, *outs[] = {p};
            update_op(ctx, DELTA_OP_SGD_UPDATE, ins, 2, outs, 1, a);
        }
    }
    delta_dp_append_allgathers(ctx);
    ctx->has_optimizer = true;
    return ctx->status;
}

delta_status delta_optimizer_adamw(delta_ctx *ctx, delta_adamw_opts o) {
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
    ctx->phase = DELTA_PHASE_OPTIMIZER;
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
        const delta_tensor *ins[] = {p, ctx->tensors[p->grad], m, v};
        const delta_tensor *outs[] = {p, m, v};
        update_op(ctx, DELTA_OP_ADAMW_UPDATE, ins, 4, outs, 3, a);
    }
    delta_dp_append_allgathers(ctx);
    ctx->has_optimizer = true;
    return ctx->status;
}
