/* Read-only views of the program for tools and reports: per-op summaries,
 * totals, and a text listing. */
#include "graph/graph_impl.h"

#include <stdio.h>
#include <string.h>

int delta_ctx_n_ops(const delta_ctx *ctx) { return ctx->n_ops; }

void delta_ctx_op_info(const delta_ctx *ctx, int i, delta_op_info *info) {
    DELTA_ASSERTF(i >= 0 && i < ctx->n_ops, "op %d of %d", i, ctx->n_ops);
    const delta_op *op = &ctx->ops[i];
    memset(info, 0, sizeof *info);
    info->id = op->id;
    info->type = delta_op_type_name(op->type);
    info->name = op->name;
    info->phase = op->phase;
    info->n_in = op->n_in;
    info->n_out = op->n_out;
    memcpy(info->in, op->in, sizeof info->in);
    memcpy(info->out, op->out, sizeof info->out);
    info->flops = op->flops;
    info->bytes = op->bytes;
    info->workspace = op->workspace;
    info->recomputable = op->recomputable;
}

void delta_ctx_program_stats(const delta_ctx *ctx, delta_program_stats *s) {
    memset(s, 0, sizeof *s);
    s->n_ops = ctx->n_ops;
    s->n_tensors = ctx->n_tensors;
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        s->flops += op->flops;
        if (op->workspace > s->max_workspace) s->max_workspace = op->workspace;
        if (op->phase == DELTA_PHASE_FORWARD) s->n_forward++;
        else if (op->phase == DELTA_PHASE_BACKWARD) s->n_backward++;
        else s->n_optimizer++;
    }
    for (int i = 0; i < ctx->n_tensors; i++) {
        const delta_tensor *t = ctx->tensors[i];
        if (t->view_of >= 0) continue; /* no storage of its own */
        switch (t->kind) {
        case DELTA_KIND_PARAM: s->param_bytes += t->bytes; break;
        case DELTA_KIND_STATE:
        case DELTA_KIND_CONST: s->state_bytes += t->bytes; break;
        case DELTA_KIND_INPUT: s->input_bytes += t->bytes; break;
        case DELTA_KIND_ACTIVATION: s->activation_bytes += t->bytes; break;
        case DELTA_KIND_GRAD: s->grad_bytes += t->bytes; break;
        default: break;
        }
    }
}

static const char *phase_name(delta_phase p) {
    return p == DELTA_PHASE_FORWARD    ? "fwd"
           : p == DELTA_PHASE_BACKWARD ? "bwd"
                                       : "opt";
}

void delta_ctx_print_program(const delta_ctx *ctx, void *file) {
    FILE *f = file;
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        fprintf(f, "%5d %s %-18s", op->id, phase_name(op->phase),
                delta_op_type_name(op->type));
        fputs(" (", f);
        for (int j = 0; j < op->n_in; j++)
            fprintf(f, "%s%s", j ? ", " : "", ctx->tensors[op->in[j]]->name);
        fputs(") -> (", f);
        for (int j = 0; j < op->n_out; j++) {
            const delta_tensor *t = ctx->tensors[op->out[j]];
            fprintf(f, "%s%s[", j ? ", " : "", t->name);
            for (int d = 0; d < t->ndim; d++)
                fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            fputc(']', f);
        }
        fprintf(f, ")  %.3g MFLOP%s\n", op->flops / 1e6,
                op->workspace ? "  +ws" : "");
    }
}
