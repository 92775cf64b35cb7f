/* Data parallel in the step program (graph.h, delta_data_parallel): the
 * gradients' collective ops, placed inside backward where each bucket is
 * complete, ZeRO-1's ownership of parameters, and the allgather ops after
 * the optimizer (called from optim.c).
 *
 * Placement. Ops are appended at the end of the list like any other, then
 * the list is reordered so that each collective comes right after the op
 * that produces the last gradient of its bucket, and op ids (op->id,
 * tensor producers) are renumbered. Only backward ops move; dropout masks
 * are keyed by the forward dropout's id when made (delta_dropout_key_op),
 * which does not change. */
#include "graph/graph_impl.h"
#include "graph/ops_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t delta_dp_numel(const delta_ctx *ctx, const delta_op *op) {
    int64_t n = 0;
    for (int i = 0; i < op->n_in; i++) n += ctx->tensors[op->in[i]]->numel;
    return n;
}

int delta_dp_owner(const delta_tensor *p) { return p ? p->owner : -1; }

delta_dp_opts delta_ctx_data_parallel(const delta_ctx *ctx) {
    if (ctx->dp) return ctx->dp->o;
    return (delta_dp_opts){.ranks = 1};
}

typedef struct ready {
    int param, grad, op; /* op: the one producing the gradient */
} ready;

static int cmp_ready(const void *a, const void *b) {
    const ready *x = a, *y = b;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    return (x->param > y->param) - (x->param < y->param);
}

/* ZeRO-1's owners: the largest parameter first to the rank holding the
 * fewest bytes so far (the lowest rank on ties), so every rank computes
 * the same assignment and the shares differ by at most one tensor. */
static void assign_owners(delta_ctx *ctx, const ready *r, int n, int ranks) {
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1));
    double *load = calloc((size_t)ranks, sizeof *load);
    if (!order || !load) {
        free(order);
        free(load);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return;
    }
    for (int i = 0; i < n; i++) order[i] = r[i].param;
    /* insertion sort by bytes, descending, then id: n is the parameter
     * count (hundreds) */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;
        size_t b = ctx->tensors[v]->bytes;
        while (j > 0) {
            const delta_tensor *u = ctx->tensors[order[j - 1]];
            if (u->bytes > b || (u->bytes == b && u->id < v)) break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int q = 1; q < ranks; q++)
            if (load[q] < load[best]) best = q;
        ctx->tensors[order[i]]->owner = best;
        load[best] += (double)ctx->tensors[order[i]]->bytes;
    }
    free(order);
    free(load);
}

/* A gradient's mean, the output of a collective: a GRAD tensor of g's
 * shape named after the parameter. */
static delta_tensor *mean_of(delta_ctx *ctx, delta_op *op,
                             const delta_tensor *p, const delta_tensor *g) {
    delta_tensor *t = delta_op_add_output(ctx, op, g->dtype, g->ndim,
                                          g->shape);
    if (t) {
        char name[DELTA_NAME_LEN + 16];
        snprintf(name, sizeof name, "%s.grad_mean", p->name);
        snprintf(t->name, sizeof t->name, "%.*s", (int)sizeof t->name - 1,
                 name);
    }
    return t;
}

static void name_op(delta_op *op, const char *type, int bucket) {
    snprintf(op->name, sizeof op->name, "%s(bucket %d)", type, bucket);
}

/* Reorders the op list: old op k, then the collectives placed after it
 * (after[j] == k for op n_old + j), in their order; renumbers op ids. */
static void place_after(delta_ctx *ctx, int n_old, const int *after) {
    int n = ctx->n_ops, n_new = n - n_old;
    delta_op *ops = malloc(sizeof *ops * (size_t)n);
    int *new_id = malloc(sizeof *new_id * (size_t)n);
    if (!ops || !new_id) {
        free(ops);
        free(new_id);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return;
    }
    int k = 0, j = 0;
    for (int i = 0; i < n_old; i++) {
        new_id[i] = k;
        ops[k++] = ctx->ops[i];
        for (; j < n_new && after[j] == i; j++) {
            new_id[n_old + j] = k;
            ops[k++] = ctx->ops[n_old + j];
        }
    }
    DELTA_ASSERT(j == n_new && k == n);
    /* dropout_bwd's fwd_op is a mask key (the dropout's id when made),
     * not a position: it stays */
    for (int i = 0; i < n; i++) ops[i].id = i;
    for (int t = 0; t < ctx->n_tensors; t++)
        if (ctx->tensors[t]->producer >= 0)
            ctx->tensors[t]->producer = new_id[ctx->tensors[t]->producer];
    free(ctx->ops);
    ctx->ops = ops;
    ctx->cap_ops = n;
    free(new_id);
}

delta_status delta_data_parallel(delta_ctx *ctx, const delta_dp_opts *o) {
    if (ctx->status != DELTA_OK) return ctx->status;
    if (!o || o->ranks < 1 || o->rank < 0 || o->rank >= o->ranks ||
        (o->zero != 0 && o->zero != 1)) {
        delta_ctx_fail(ctx, DELTA_ERR_INVALID_ARG, "data parallel: need "
                       "ranks >= 1, 0 <= rank < ranks and zero 0 or 1; got "
                       "ranks %d rank %d zero %d", o ? o->ranks : 0,
                       o ? o->rank : 0, o ? o->zero : 0);
        return ctx->status;
    }
    if (!ctx->has_backward || ctx->has_optimizer || ctx->dp) {
        delta_ctx_fail(ctx, DELTA_ERR_STATE, "data parallel: call it once, "
                       "after delta_backward and before the optimizer");
        return ctx->status;
    }
    int n_old = ctx->n_ops, nt = ctx->n_tensors, n = 0;
    ready *r = malloc(sizeof *r * (size_t)(nt ? nt : 1));
    ctx->dp = calloc(1, sizeof *ctx->dp);
    if (ctx->dp)
        ctx->dp->buckets = malloc(sizeof *ctx->dp->buckets * (size_t)(nt ? nt : 1));
    if (!r || !ctx->dp || !ctx->dp->buckets) {
        free(r);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return ctx->status;
    }
    ctx->dp->o = *o;
    if (!ctx->dp->o.bucket_bytes) ctx->dp->o.bucket_bytes = DELTA_DP_BUCKET_BYTES;
    for (int i = 0; i < nt; i++) {
        const delta_tensor *p = ctx->tensors[i];
        if (p->kind != DELTA_KIND_PARAM || p->grad < 0) continue;
        const delta_tensor *g = ctx->tensors[p->grad];
        if (g->dtype != DELTA_F32) {
            free(r);
            delta_ctx_fail(ctx, DELTA_ERR_UNSUPPORTED, "data parallel: the "
                           "gradient of '%s' is %s; gradients are reduced "
                           "in F32", p->name, delta_dtype_name(g->dtype));
            return ctx->status;
        }
        r[n++] = (ready){i, p->grad, g->producer};
    }
    qsort(r, (size_t)n, sizeof *r, cmp_ready);
    if (o->zero) assign_owners(ctx, r, n, o->ranks);
    int *after = malloc(sizeof *after * (size_t)(n ? n : 1));
    if (!after) {
        free(r);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return ctx->status;
    }
    ctx->phase = DELTA_PHASE_BACKWARD;
    delta_op_type type = o->zero ? DELTA_OP_REDUCE_SCATTER : DELTA_OP_ALLREDUCE;
    size_t cap = ctx->dp->o.bucket_bytes;
    for (int i = 0; i < n && ctx->status == DELTA_OK;) {
        /* a bucket: gradients in the order they are ready, up to the
         * operand limit and the bytes (a larger gradient goes alone) */
        delta_dp_bucket *b = &ctx->dp->buckets[ctx->dp->n_buckets];
        size_t bytes = 0;
        b->n = 0;
        while (i < n && b->n < DELTA_MAX_OP_OUT &&
               (b->n == 0 || bytes + ctx->tensors[r[i].grad]->bytes <= cap)) {
            bytes += ctx->tensors[r[i].grad]->bytes;
            b->param[b->n++] = r[i++].param;
        }
        const delta_tensor *ins[DELTA_MAX_OP_IN];
        for (int k = 0; k < b->n; k++)
            ins[k] = ctx->tensors[ctx->tensors[b->param[k]]->grad];
        delta_op *op = delta_op_append(ctx, type, ins, b->n);
        if (!op) break;
        op->recomputable = false; /* a collective: every rank runs it once */
        op->a.ranks = o->ranks;
        op->a.rank = o->rank;
        name_op(op, delta_op_type_name(type), ctx->dp->n_buckets);
        int op_id = op->id;
        for (int k = 0; k < b->n; k++) {
            delta_tensor *p = ctx->tensors[b->param[k]];
            const delta_tensor *g = ctx->tensors[p->grad];
            op = &ctx->ops[op_id];
            op->a.owner[k] = o->zero ? p->owner : -1;
            if (o->zero && p->owner != o->rank) {
                p->grad = -1; /* another rank updates it */
                continue;
            }
            delta_tensor *m = mean_of(ctx, op, p, g);
            if (!m) break;
            p->grad = m->id;
        }
        delta_op_set_cost(ctx, &ctx->ops[op_id]);
        after[ctx->dp->n_buckets++] = r[i - 1].op;
    }
    /* buckets are in ready order, so `after` is non-decreasing */
    if (ctx->status == DELTA_OK) place_after(ctx, n_old, after);
    free(after);
    free(r);
    return ctx->status;
}

void delta_dp_append_allgathers(delta_ctx *ctx) {
    if (!ctx->dp || !ctx->dp->o.zero || ctx->status != DELTA_OK) return;
    ctx->phase = DELTA_PHASE_OPTIMIZER;
    for (int i = 0; i < ctx->dp->n_buckets; i++) {
        const delta_dp_bucket *b = &ctx->dp->buckets[i];
        const delta_tensor *ps[DELTA_MAX_OP_IN];
        for (int k = 0; k < b->n; k++) ps[k] = ctx->tensors[b->param[k]];
        delta_op *op = delta_op_append(ctx, DELTA_OP_ALLGATHER, ps, b->n);
        if (!op) return;
        op->recomputable = false;
        op->inplace = true;
        op->a.ranks = ctx->dp->o.ranks;
        op->a.rank = ctx->dp->o.rank;
        op->n_out = b->n;
        for (int k = 0; k < b->n; k++) {
            op->out[k] = b->param[k];
            op->a.owner[k] = ps[k]->owner;
        }
        name_op(op, "allgather", i);
        delta_op_set_cost(ctx, op);
    }
}
