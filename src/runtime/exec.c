/* The simple executor: one host buffer per tensor with storage of its own,
 * every op run in program order. No budget, no swapping: this is the
 * unconstrained reference run. */
#include "delta/exec.h"
#include "backend/cpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct delta_exec {
    delta_ctx *ctx;
    int n_tensors;       /* program size when created (must not change) */
    void **base;         /* per tensor id: the allocation (roots only) */
    void **data;         /* per tensor id: data pointer (views: root's) */
    void *ws;            /* scratch of the largest workspace */
    void *ws_data;       /* ws past the address offset */
    double *op_s;        /* per op: seconds of its last run */
    int64_t step;
};

void delta_exec_free(delta_exec *ex) {
    if (!ex) return;
    for (int i = 0; i < ex->n_tensors; i++) delta_free_aligned(ex->base[i]);
    free(ex->base);
    free(ex->data);
    free(ex->op_s);
    delta_free_aligned(ex->ws);
    free(ex);
}

delta_exec *delta_exec_new(delta_ctx *ctx, const delta_exec_opts *opts,
                           char *err, size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    if (ctx->status != DELTA_OK) {
        snprintf(err, err_len, "the graph has an error: %s", ctx->err);
        return NULL;
    }
    size_t off = opts ? opts->address_offset : 0;
    if (off % DELTA_ALIGN) {
        snprintf(err, err_len, "address offset %zu is not a multiple of %d",
                 off, DELTA_ALIGN);
        return NULL;
    }
    delta_exec *ex = calloc(1, sizeof *ex);
    int n = ctx->n_tensors;
    if (ex) {
        ex->ctx = ctx;
        ex->n_tensors = n;
        ex->base = calloc((size_t)n + 1, sizeof(void *));
        ex->data = calloc((size_t)n + 1, sizeof(void *));
        ex->op_s = calloc((size_t)ctx->n_ops + 1, sizeof(double));
    }
    if (!ex || !ex->base || !ex->data || !ex->op_s) goto nomem;
    for (int i = 0; i < n; i++) {
        const delta_tensor *t = ctx->tensors[i];
        if (t->view_of >= 0) continue;
        ex->base[i] = delta_alloc_aligned(t->bytes + off);
        if (!ex->base[i]) goto nomem;
        ex->data[i] = (char *)ex->base[i] + off;
        delta_init_tensor(ex->data[i], t, ctx->seed);
    }
    for (int i = 0; i < n; i++)
        if (ctx->tensors[i]->view_of >= 0)
            ex->data[i] = ex->data[ctx->tensors[i]->view_of];
    size_t ws = 0;
    for (int i = 0; i < ctx->n_ops; i++)
        if (ctx->ops[i].workspace > ws) ws = ctx->ops[i].workspace;
    if (ws) {
        ex->ws = delta_alloc_aligned(ws + off);
        if (!ex->ws) goto nomem;
        ex->ws_data = (char *)ex->ws + off;
    }
    return ex;
nomem:
    snprintf(err, err_len, "out of host memory placing the program's %d "
             "tensors", n);
    delta_exec_free(ex);
    return NULL;
}

delta_status delta_exec_run(delta_exec *ex, delta_run_mode mode) {
    const delta_ctx *ctx = ex->ctx;
    DELTA_ASSERTF(ctx->n_tensors == ex->n_tensors,
                  "the graph grew after the executor was made");
    delta_kernel_env env = {ctx->seed, ex->step, mode != DELTA_RUN_EVAL, NULL};
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        if (mode != DELTA_RUN_STEP && op->phase != DELTA_PHASE_FORWARD)
            continue;
        delta_kargs k = {.op = op, .env = &env};
        for (int j = 0; j < op->n_in; j++) {
            k.in_t[j] = ctx->tensors[op->in[j]];
            k.in[j] = ex->data[op->in[j]];
        }
        for (int j = 0; j < op->n_out; j++) {
            k.out_t[j] = ctx->tensors[op->out[j]];
            k.out[j] = ex->data[op->out[j]];
        }
        k.ws = op->workspace ? ex->ws_data : NULL;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        delta_cpu_run(&k);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ex->op_s[i] = (double)(t1.tv_sec - t0.tv_sec) +
                      (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    if (mode == DELTA_RUN_STEP) ex->step++;
    return DELTA_OK;
}

void *delta_exec_data(delta_exec *ex, const delta_tensor *t) {
    DELTA_ASSERTF(t && t->id >= 0 && t->id < ex->n_tensors,
                  "not a tensor of the executor's program%s",
                  t && t->id < 0 ? " (delta_ctx_fuse_batchnorm fused it away)"
                                 : "");
    return ex->data[t->id];
}

delta_status delta_exec_set(delta_exec *ex, const delta_tensor *t,
                            const void *data, size_t bytes) {
    if (!t || t->id < 0 || t->id >= ex->n_tensors || bytes != t->bytes)
        return DELTA_ERR_INVALID_ARG;
    memcpy(ex->data[t->id], data, bytes);
    return DELTA_OK;
}

double delta_exec_op_seconds(const delta_exec *ex, int op_id) {
    DELTA_ASSERT(op_id >= 0 && op_id < ex->ctx->n_ops);
    return ex->op_s[op_id];
}

int64_t delta_exec_step(const delta_exec *ex) { return ex->step; }
void delta_exec_set_step(delta_exec *ex, int64_t step) { ex->step = step; }
