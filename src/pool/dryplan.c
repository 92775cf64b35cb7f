/* Dry planning: the allocation trace of one training step read off the
 * program (graph_impl.h records), its planned peak with every tensor kept,
 * the max-live lower bound, and the minimum feasible budget with the op
 * that needs it. Nothing here touches tensor data. */
#include "delta/dryplan.h"
#include "graph/graph_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool whole_step(const delta_tensor *t) {
    return delta_kind_persistent(t->kind) || t->kind == DELTA_KIND_INPUT ||
           t->producer < 0;
}

/* Fills up to cap blocks, returns the count; -1 if last_use cannot be
 * allocated. The outputs' roots (read by the caller after a run) live to
 * the step's end. */
static int build_trace(const delta_ctx *ctx, delta_tensor *const *outs,
                       int n_outs, delta_dry_block *out, int cap) {
    int nt = ctx->n_tensors, no = ctx->n_ops;
    int end = no > 0 ? no - 1 : 0;
    int *last = malloc(((size_t)nt + 1) * sizeof *last);
    if (!last) return -1;
    for (int i = 0; i < nt; i++) last[i] = -1;
    for (int i = 0; i < no; i++) {
        const delta_op *op = &ctx->ops[i];
        for (int j = 0; j < op->n_in; j++) {
            int r = delta_tensor_root(ctx, op->in[j]);
            if (i > last[r]) last[r] = i;
        }
    }
    int n = 0;
#define EMIT(...)                                                          \
    do {                                                                   \
        if (n < cap) out[n] = (delta_dry_block){__VA_ARGS__};              \
        n++;                                                               \
    } while (0)
    for (int id = 0; id < nt; id++) {
        const delta_tensor *t = ctx->tensors[id];
        if (t->view_of >= 0 || !whole_step(t)) continue;
        EMIT(id, t->producer, t->kind, delta_pool_round(t->bytes), 0, end);
    }
    for (int i = 0; i < no; i++) {
        const delta_op *op = &ctx->ops[i];
        for (int j = 0; j < op->n_out; j++) {
            int id = op->out[j];
            const delta_tensor *t = ctx->tensors[id];
            if (t->view_of >= 0 || whole_step(t) || t->producer != i) continue;
            int l = last[id];
            /* never read: alive for its producer only, except the loss
               (the only unread tensor with a gradient: backward's seed),
               which the caller reads after the step */
            if (l < 0) l = t->grad >= 0 ? end : i;
            if (l < i) l = i;
            for (int k = 0; k < n_outs; k++)
                if (outs[k] && delta_tensor_root(ctx, outs[k]->id) == id)
                    l = end;
            EMIT(id, i, t->kind, delta_pool_round(t->bytes), i, l);
        }
        if (op->workspace > 0)
            EMIT(-1, i, DELTA_KIND_COUNT, delta_pool_round(op->workspace), i,
                 i);
    }
#undef EMIT
    free(last);
    return n;
}

int delta_dry_plan_trace_outputs(const delta_ctx *ctx,
                                 delta_tensor *const *outs, int n_outs,
                                 delta_dry_block *blocks, int cap) {
    if (ctx->status != DELTA_OK) return -1;
    return build_trace(ctx, outs, n_outs, blocks, blocks ? cap : 0);
}

int delta_dry_plan_trace(const delta_ctx *ctx, delta_dry_block *blocks,
                         int cap) {
    return delta_dry_plan_trace_outputs(ctx, NULL, 0, blocks, cap);
}

/* Distinct storage roots of op's inputs and outputs plus its workspace,
 * each rounded. */
static size_t op_operand_bytes(const delta_ctx *ctx, const delta_op *op) {
    int seen[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT];
    int ns = 0;
    size_t sum = 0;
    for (int j = 0; j < op->n_in + op->n_out; j++) {
        int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
        int r = delta_tensor_root(ctx, id);
        bool dup = false;
        for (int k = 0; k < ns && !dup; k++) dup = seen[k] == r;
        if (dup) continue;
        seen[ns++] = r;
        sum += delta_pool_round(ctx->tensors[r]->bytes);
    }
    if (op->workspace > 0) sum += delta_pool_round(op->workspace);
    return sum;
}

delta_status delta_dry_plan_build(const delta_ctx *ctx, delta_dry_plan *plan,
                                  char *err, size_t err_len) {
    return delta_dry_plan_build_outputs(ctx, NULL, 0, plan, err, err_len);
}

delta_status delta_dry_plan_build_outputs(const delta_ctx *ctx,
                                          delta_tensor *const *outs,
                                          int n_outs, delta_dry_plan *plan,
                                          char *err, size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    double t0 = now_s();
    memset(plan, 0, sizeof *plan);
    plan->min_budget_op = plan->max_live_op = -1;
    if (ctx->status != DELTA_OK) {
        snprintf(err, err_len, "the graph has an error: %s", ctx->err);
        return DELTA_ERR_STATE;
    }
    plan->n_ops = ctx->n_ops;

    /* totals by kind */
    for (int id = 0; id < ctx->n_tensors; id++) {
        const delta_tensor *t = ctx->tensors[id];
        if (t->view_of >= 0) continue;
        size_t s = delta_pool_round(t->bytes);
        switch (t->kind) {
        case DELTA_KIND_PARAM: plan->param_bytes += s; break;
        case DELTA_KIND_INPUT: plan->input_bytes += s; break;
        case DELTA_KIND_CONST: plan->const_bytes += s; break;
        case DELTA_KIND_STATE: plan->state_bytes += s; break;
        case DELTA_KIND_ACTIVATION: plan->activation_bytes += s; break;
        case DELTA_KIND_GRAD: plan->grad_bytes += s; break;
        default: break;
        }
    }
    plan->persistent_bytes =
        plan->param_bytes + plan->const_bytes + plan->state_bytes;

    /* minimum feasible budget */
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        size_t s = op_operand_bytes(ctx, op);
        if (op->workspace > 0 &&
            delta_pool_round(op->workspace) > plan->max_workspace_bytes)
            plan->max_workspace_bytes = delta_pool_round(op->workspace);
        if (s > plan->min_op_bytes) {
            plan->min_op_bytes = s;
            plan->min_budget_op = i;
        }
    }
    if (plan->min_budget_op >= 0) {
        const delta_op *op = &ctx->ops[plan->min_budget_op];
        plan->min_budget_bytes = plan->min_op_bytes + DELTA_DRY_ALIGN_SLACK;
        snprintf(plan->min_budget_op_type, sizeof plan->min_budget_op_type,
                 "%s", delta_op_type_name(op->type));
        snprintf(plan->min_budget_op_name, sizeof plan->min_budget_op_name,
                 "%s", op->name);
    }

    /* trace and plan */
    int n = build_trace(ctx, outs, n_outs, NULL, 0);
    delta_dry_block *db = n >= 0 ? malloc(((size_t)n + 1) * sizeof *db) : NULL;
    delta_plan_block *pb = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *pb);
    size_t *offs = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *offs);
    delta_status st = DELTA_ERR_NOMEM;
    if (db && pb && offs && build_trace(ctx, outs, n_outs, db, n) == n) {
        for (int i = 0; i < n; i++)
            pb[i] = (delta_plan_block){db[i].size, db[i].first, db[i].last, -1};
        delta_plan_stats ps;
        st = delta_plan_place(pb, n, offs, &ps);
        DELTA_ASSERT(st != DELTA_ERR_INVALID_ARG);
        if (st == DELTA_OK) {
            plan->n_blocks = n;
            plan->peak_bytes = ps.peak_bytes;
            plan->max_live_bytes = ps.max_live_bytes;
            plan->max_live_op = n > 0 ? ps.max_live_at : -1;
        }
    }
    free(db);
    free(pb);
    free(offs);
    if (st != DELTA_OK) {
        snprintf(err, err_len, "out of host memory planning %d blocks", n);
        return st;
    }
    plan->plan_seconds = now_s() - t0;
    return DELTA_OK;
}
