/* The batch-norm fusion pass (delta_ctx_fuse_batchnorm of delta/graph.h):
 * rewrites the forward program's batchnorm -> relu and batchnorm -> add ->
 * relu chains into batchnorm_relu and batchnorm_add_relu ops, then
 * renumbers ops and tensors.
 *
 * Where the fused op goes: batchnorm_relu takes the batch norm's place (its
 * inputs exist there, and its output's readers all come after the relu).
 * batchnorm_add_relu takes the add's place, where the residual exists too
 * (ResNet computes the shortcut's downsample after the block's last batch
 * norm); the batch norm's running-statistics update, which read mean and
 * var right after it, moves to just after the fused op. The fused ops
 * compute what the chain did in the same order, so the program's values do
 * not change; autograd gives them the chain's backward ops (relu_bwd, then
 * batchnorm_bwd). Chains of F32 or of BF16 tensors are fused (mixed
 * precision: batch norm, add and relu on BF16 activations); a BF16 fused
 * op rounds where the chain stored its intermediates (the batch norm's
 * output, the sum), so it gives the chain's bits there too.
 *
 * Renumbering keeps what the values depend on: a tensor's initial values
 * are keyed by its init_id (not its id), and a dropout op that moves keeps
 * its mask key in attrs.fwd_op. */
#include "graph/graph_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fuse_pass {
    delta_ctx *ctx;
    int *uses;      /* per tensor: (op, input) pairs that read it */
    int *reader;    /* per tensor: the last op that reads it */
    bool *drop_op;  /* per op: fused away */
    int *after;     /* per op: moved to just after this op, or -1 */
    int *new_id;    /* per tensor: its id after the pass, -1 when dropped */
} fuse_pass;

static bool same_shape(const delta_tensor *a, const delta_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static bool op_reads(const delta_op *op, int t) {
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i] == t) return true;
    return false;
}

static bool op_writes(const delta_op *op, int t) {
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i] == t) return true;
    return false;
}

/* Whether batch norm op bn can be moved to op j > bn: every op in between
 * that reads its mean or var is its running update (moved after j with
 * it), and nothing in between writes the running statistics the fused op
 * reads in eval mode. Marks the updates to move. */
static bool can_move_to(fuse_pass *f, int bn, int j) {
    const delta_ctx *ctx = f->ctx;
    const delta_op *b = &ctx->ops[bn];
    int mean = b->out[1], var = b->out[2];
    int rm = b->n_in >= 5 ? b->in[3] : -1, rv = b->n_in >= 5 ? b->in[4] : -1;
    for (int o = bn + 1; o < j; o++) {
        const delta_op *op = &ctx->ops[o];
        bool stats = op_reads(op, mean) || op_reads(op, var);
        bool update = stats && op->type == DELTA_OP_BN_RUNNING_UPDATE &&
                      op->in[0] == mean && op->in[1] == var;
        bool running = rm >= 0 && (op_reads(op, rm) || op_reads(op, rv) ||
                                   op_writes(op, rm) || op_writes(op, rv));
        if (!update && (stats || running)) return false;
    }
    for (int o = bn + 1; o < j; o++) {
        const delta_op *op = &ctx->ops[o];
        if (op_reads(op, mean) || op_reads(op, var)) f->after[o] = j;
    }
    return true;
}

/* Whether the fused kernels take a chain of tensors of dtype d. */
static bool fusable_dtype(delta_dtype d) {
    return d == DELTA_F32 || d == DELTA_BF16;
}

/* batchnorm op i: fuses its chain when there is one; true if it did. */
static bool fuse_at(fuse_pass *f, int i) {
    delta_ctx *ctx = f->ctx;
    delta_op *b = &ctx->ops[i];
    int z = b->out[0];
    const delta_dtype dt = ctx->tensors[z]->dtype;
    if (!fusable_dtype(dt) || f->uses[z] != 1) return false;
    int j = f->reader[z];
    delta_op *c = &ctx->ops[j];
    if (c->type == DELTA_OP_RELU && c->in[0] == z) {
        b->type = DELTA_OP_BATCHNORM_RELU;
        b->out[0] = c->out[0];
        ctx->tensors[b->out[0]]->producer = i;
        f->drop_op[j] = true;
        f->new_id[z] = -1;
        return true;
    }
    if (c->type != DELTA_OP_ADD || c->in[0] != z || c->in[1] == z)
        return false;
    const delta_tensor *r = ctx->tensors[c->in[1]];
    int s = c->out[0];
    if (r->dtype != dt || !same_shape(r, ctx->tensors[z]) ||
        f->uses[s] != 1)
        return false;
    int k = f->reader[s];
    const delta_op *relu = &ctx->ops[k];
    if (relu->type != DELTA_OP_RELU || relu->in[0] != s || !can_move_to(f, i, j))
        return false;
    delta_op fused = *b; /* attrs, phase, flags */
    fused.type = DELTA_OP_BATCHNORM_ADD_RELU;
    fused.id = j;
    fused.n_in = 0;
    for (int a = 0; a < b->n_in; a++) {
        fused.in[fused.n_in++] = b->in[a];
        if (a == 2) fused.in[fused.n_in++] = r->id;
    }
    fused.out[0] = relu->out[0];
    memcpy(fused.name, c->name, sizeof fused.name);
    ctx->ops[j] = fused;
    for (int o = 0; o < fused.n_out; o++)
        ctx->tensors[fused.out[o]]->producer = j;
    f->drop_op[i] = f->drop_op[k] = true;
    f->new_id[z] = f->new_id[s] = -1;
    return true;
}

/* The ops in their new order, renumbered; tensors' producers follow. */
static bool reorder_ops(fuse_pass *f, const bool *default_name) {
    delta_ctx *ctx = f->ctx;
    int no = ctx->n_ops, k = 0;
    size_t nb = (size_t)(no ? no : 1);
    delta_op *ops = malloc(nb * sizeof *ops);
    int *op_id = malloc(nb * sizeof *op_id);
    int *first = malloc(nb * sizeof *first), *next = malloc(nb * sizeof *next);
    if (!ops || !op_id || !first || !next) {
        free(ops);
        free(op_id);
        free(first);
        free(next);
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        return false;
    }
    /* per op, the ops moved to just after it, in their old order */
    for (int o = 0; o < no; o++) first[o] = -1;
    for (int u = no - 1; u >= 0; u--)
        if (f->after[u] >= 0) {
            next[u] = first[f->after[u]];
            first[f->after[u]] = u;
        }
    for (int o = 0; o < no; o++) {
        if (f->drop_op[o] || f->after[o] >= 0) continue;
        op_id[o] = k;
        ops[k++] = ctx->ops[o];
        for (int u = first[o]; u >= 0; u = next[u]) {
            op_id[u] = k;
            ops[k++] = ctx->ops[u];
        }
    }
    for (int o = 0; o < no; o++) {
        if (f->drop_op[o]) continue;
        delta_op *op = &ops[op_id[o]];
        if (op->type == DELTA_OP_DROPOUT && op->a.fwd_op < 0 && op_id[o] != o)
            op->a.fwd_op = o; /* its mask stays keyed by the id it was made with */
        op->id = op_id[o];
        if (default_name[o])
            snprintf(op->name, sizeof op->name, "%s_%d",
                     delta_op_type_name(op->type), op->id);
    }
    for (int t = 0; t < ctx->n_tensors; t++) {
        delta_tensor *x = ctx->tensors[t];
        if (x->producer >= 0 && f->new_id[t] >= 0)
            x->producer = op_id[x->producer];
    }
    memcpy(ctx->ops, ops, (size_t)k * sizeof *ops);
    ctx->n_ops = k;
    free(ops);
    free(op_id);
    free(first);
    free(next);
    return true;
}

int delta_ctx_fuse_batchnorm(delta_ctx *ctx) {
    if (ctx->status != DELTA_OK) return -1;
    if (ctx->has_backward || ctx->has_optimizer) {
        delta_ctx_fail(ctx, DELTA_ERR_STATE, "delta_ctx_fuse_batchnorm: the "
                       "program already has its backward pass; fuse after "
                       "the forward pass and before delta_backward");
        return -1;
    }
    int nt = ctx->n_tensors, no = ctx->n_ops;
    size_t ntb = (size_t)(nt ? nt : 1), nob = (size_t)(no ? no : 1);
    fuse_pass f = {ctx, calloc(ntb, sizeof(int)), malloc(ntb * sizeof(int)),
                   calloc(nob, sizeof(bool)), malloc(nob * sizeof(int)),
                   malloc(ntb * sizeof(int))};
    bool *default_name = malloc(nob * sizeof(bool));
    int fused = -1;
    if (!f.uses || !f.reader || !f.drop_op || !f.after || !f.new_id ||
        !default_name) {
        delta_ctx_fail(ctx, DELTA_ERR_NOMEM, "out of host memory");
        goto out;
    }
    for (int t = 0; t < nt; t++) f.reader[t] = f.new_id[t] = t;
    for (int o = 0; o < no; o++) {
        const delta_op *op = &ctx->ops[o];
        f.after[o] = -1;
        for (int i = 0; i < op->n_in; i++) {
            f.uses[op->in[i]]++;
            f.reader[op->in[i]] = o;
        }
        char def[DELTA_NAME_LEN];
        snprintf(def, sizeof def, "%s_%d", delta_op_type_name(op->type), o);
        default_name[o] = strcmp(def, op->name) == 0;
    }
    fused = 0;
    for (int o = 0; o < no; o++)
        if (ctx->ops[o].type == DELTA_OP_BATCHNORM && !f.drop_op[o])
            fused += fuse_at(&f, o);
    if (fused == 0) goto out;
    int k = 0;
    for (int t = 0; t < nt; t++) f.new_id[t] = f.new_id[t] >= 0 ? k++ : -1;
    if (!reorder_ops(&f, default_name) ||
        !delta_ctx_renumber_tensors(ctx, f.new_id)) {
        fused = -1;
        goto out;
    }
    for (int o = 0; o < ctx->n_ops; o++) {
        delta_op *op = &ctx->ops[o];
        if (op->type == DELTA_OP_BATCHNORM_RELU ||
            op->type == DELTA_OP_BATCHNORM_ADD_RELU)
            delta_op_set_cost(ctx, op);
    }
out:
    free(f.uses);
    free(f.reader);
    free(f.drop_op);
    free(f.after);
    free(f.new_id);
    free(default_name);
    return fused;
}
