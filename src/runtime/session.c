/* The session: the facade of the runtime. It checks a program and a budget
 * against the dry plan (the unconstrained peak, the smallest workable
 * budget and the op that needs it), then hands the program to the managed
 * runtime (managed.c, the one step loop) with the chosen policy, keep
 * included (policy/keep.c: its static lifetime-planned layout is its plan).
 * --budget N% is a percentage of the dry plan's peak. */
#include "delta/session.h"
#include "delta/comm.h"
#include "delta/dryplan.h"
#include "delta/pool.h"
#include "backend/backend.h"
#include "runtime/managed.h"
#include "runtime/plan_cache.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct delta_session {
    delta_ctx *ctx;
    delta_backend *b;
    delta_backend *check;       /* opts.check_streams: the checker wrapped
                                   around opts.backend (owned; b == it) */
    size_t budget, arena_bytes;
    managed *mg;
    delta_trace *trace;
    size_t baseline, min_budget; /* from the dry plan */
    int64_t step;
    char err[512];
};

static void fail(delta_session *s, char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(delta_session *s, char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (s) vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    if (err && n) {
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
}

void delta_session_free(delta_session *s) {
    if (!s) return;
    managed_free(s->mg);
    delta_backend_free(s->check); /* stream check: after the last call */
    free(s);
}

/* The dry plan of ctx, taken from the plan cache when a session of the
 * same program made it before (a run whose shapes change comes back to a
 * shape), else built and stored there. */
#define DRY_PLAN_KEY "session:dry-plan"
static delta_status dry_plan_of(delta_ctx *ctx, const delta_session_opts *o,
                                delta_dry_plan *dp, char *err, size_t n) {
    delta_plan_cache *pc = o->plans;
    uint64_t key = pc ? delta_program_key(ctx) : 0;
    for (int k = 0; pc && k < o->n_outputs; k++) /* outputs change the plan */
        key = (key ^ (uint64_t)(o->outputs[k]->id + 1)) * 0x100000001b3ULL;
    size_t bytes = 0;
    const void *blob = plan_cache_get(pc, DRY_PLAN_KEY, key, &bytes);
    if (blob && bytes == sizeof *dp) {
        memcpy(dp, blob, sizeof *dp);
        return DELTA_OK;
    }
    /* with the outputs the caller reads after a run kept to the step's
     * end, as keep places them: --budget 100% is what keep needs */
    delta_status st = delta_dry_plan_build_outputs(ctx, o->outputs,
                                                   o->n_outputs, dp, err, n);
    if (st == DELTA_OK && pc) plan_cache_put(pc, DRY_PLAN_KEY, key, dp, sizeof *dp);
    return st;
}

delta_session *delta_session_new(delta_ctx *ctx, const delta_session_opts *o,
                                 delta_status *status, char *err,
                                 size_t err_len) {
    delta_status dummy;
    if (!status) status = &dummy;
    char b1[32], b2[32];
    if (!o || !o->backend) {
        *status = DELTA_ERR_INVALID_ARG;
        fail(NULL, err, err_len, "session: no backend given");
        return NULL;
    }
    if (ctx->status != DELTA_OK) {
        *status = ctx->status;
        fail(NULL, err, err_len, "the graph has an error: %s", ctx->err);
        return NULL;
    }
    const char *policy = o->policy ? o->policy : "keep";
    if (!managed_policy_known(policy)) {
        *status = DELTA_ERR_UNSUPPORTED;
        char list[256] = "";
        for (const char *const *p = delta_session_policies(); *p; p++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                     p == delta_session_policies() ? "" : ", ", *p);
        fail(NULL, err, err_len, "unknown policy '%s'; the policies are: %s",
             policy, list);
        return NULL;
    }
    delta_session *s = calloc(1, sizeof *s);
    if (!s) {
        *status = DELTA_ERR_NOMEM;
        fail(NULL, err, err_len, "out of host memory creating the session");
        return NULL;
    }
    s->ctx = ctx;
    s->b = o->backend;
    /* stream check (opts.check_streams): everything goes through the
     * checker from here on; it is freed with the session */
    if (o->check_streams) {
        s->check = delta_backend_check_new(o->backend, 0, NULL, 0);
        if (!s->check) {
            *status = DELTA_ERR_NOMEM;
            fail(s, err, err_len, "out of host memory for the stream check");
            goto fail;
        }
        s->b = s->check;
    }
    s->budget = o->budget_bytes;
    s->trace = o->trace;
    for (int k = 0; k < o->n_outputs; k++) {
        const delta_tensor *t = o->outputs[k];
        if (!t || t->ctx != ctx || t->id < 0) {
            *status = DELTA_ERR_INVALID_ARG;
            fail(s, err, err_len, "output %d is not a tensor of this graph%s",
                 k, t && t->id < 0 ? " any more: delta_ctx_fuse_batchnorm "
                 "fused it away" : "");
            goto fail;
        }
    }

    /* a program the backend has no kernels for: refused before any work */
    for (int i = 0; i < ctx->n_tensors && !s->b->computes_bf16; i++) {
        if (ctx->tensors[i]->dtype != DELTA_BF16) continue;
        *status = DELTA_ERR_UNSUPPORTED;
        fail(s, err, err_len, "the %s backend has no BF16 kernels yet, and "
             "tensor '%s' is BF16; train this program in fp32 there, or on "
             "the cpu or sim backend", delta_backend_name(s->b),
             ctx->tensors[i]->name);
        goto fail;
    }

    /* collective ops run over the comm the program was built for (the sim
     * computes nothing: it only prices them) */
    delta_dp_opts dpo = delta_ctx_data_parallel(ctx);
    if (ctx->dp && delta_backend_has_data(s->b) &&
        (delta_comm_size(o->comm) != dpo.ranks ||
         delta_comm_rank(o->comm) != dpo.rank)) {
        *status = DELTA_ERR_INVALID_ARG;
        fail(s, err, err_len, "the program is rank %d's of %d data-parallel "
             "ranks, and the session's comm is rank %d of %d; give the "
             "session the comm the program was built for (delta_comm_world "
             "under mpirun)", dpo.rank, dpo.ranks, delta_comm_rank(o->comm),
             delta_comm_size(o->comm));
        goto fail;
    }

    /* the backend's kernels' workspace (cuda: timed cuDNN choices) before
     * anything is planned; a no-op when the caller fitted it already */
    delta_backend_fit_program(o->backend, ctx);

    /* the smallest budget any policy could work in */
    delta_dry_plan dp;
    char perr[256];
    *status = dry_plan_of(ctx, o, &dp, perr, sizeof perr);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "planning failed: %s", perr);
        goto fail;
    }
    if (s->budget && s->budget < dp.min_budget_bytes) {
        *status = DELTA_ERR_BUDGET;
        managed_two_sizes(s->budget, dp.min_budget_bytes, b1, b2);
        fail(s, err, err_len,
             "budget %s is below the minimum %s needed by op %d (%s, %s); "
             "use a budget of %s or more",
             b1, b2, dp.min_budget_op, dp.min_budget_op_type,
             dp.min_budget_op_name, b2);
        goto fail;
    }
    s->baseline = dp.peak_bytes;
    s->min_budget = dp.min_budget_bytes;
    /* without a budget keep sizes the arena to its layout; the others get
     * the unconstrained peak */
    bool keep = !strcmp(policy, "keep");
    size_t arena = s->budget ? s->budget : keep ? 0 : dp.peak_bytes;
    if (arena && arena < DELTA_POOL_ALIGN) arena = DELTA_POOL_ALIGN;
    managed_opts mo = {.budget = arena, .min_budget = dp.min_budget_bytes,
                       .policy = policy, .outs = o->outputs,
                       .n_outs = o->n_outputs, .trace = o->trace,
                       .plans = o->plans, .host_limit = o->host_limit_bytes,
                       .run_ahead = o->run_ahead,
                       .sync_every_op = o->sync_every_op,
                       .comm = o->comm};
    s->mg = managed_new(ctx, s->b, &mo, status, err, err_len);
    if (!s->mg) {
        snprintf(s->err, sizeof s->err, "%s", err ? err : "");
        goto fail;
    }
    s->arena_bytes = managed_arena_bytes(s->mg);
    return s;
fail:
    delta_session_free(s);
    return NULL;
}

delta_status delta_session_run(delta_session *s, delta_run_mode mode,
                               delta_step_stats *stats) {
    /* where each training step begins, so a reader of the trace (delta
     * bench's memory timeline) can cut one step out */
    if (s->trace && mode == DELTA_RUN_STEP)
        delta_trace_instant(s->trace, DELTA_TRACK_COMPUTE, "step", "step",
                            delta_backend_clock(s->b));
    delta_step_stats st;
    delta_status rc = managed_run(s->mg, mode, s->step, &st, s->err,
                                  sizeof s->err);
    if (rc == DELTA_OK && mode == DELTA_RUN_STEP) s->step++;
    st.baseline_peak_bytes = s->baseline;
    st.min_budget_bytes = s->min_budget;
    st.budget_bytes = s->arena_bytes;
    if (rc == DELTA_OK && stats) *stats = st;
    return rc;
}

static delta_status access_check(delta_session *s, const delta_tensor *t,
                                 size_t bytes) {
    if (!t || t->ctx != s->ctx || t->id < 0 || t->id >= s->ctx->n_tensors) {
        fail(s, NULL, 0, "not a tensor of this session's graph%s",
             t && t->id < 0 ? " any more: delta_ctx_fuse_batchnorm fused it "
             "away" : "");
        return DELTA_ERR_INVALID_ARG;
    }
    if (bytes != t->bytes) {
        fail(s, NULL, 0, "tensor '%s' holds %zu bytes, %zu given", t->name,
             t->bytes, bytes);
        return DELTA_ERR_INVALID_ARG;
    }
    return DELTA_OK; /* the managed runtime checks residency */
}

delta_status delta_session_write(delta_session *s, const delta_tensor *t,
                                 const void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st == DELTA_OK)
        st = managed_access(s->mg, delta_tensor_root(s->ctx, t->id),
                            (void *)data, bytes, true);
    if (st == DELTA_ERR_STATE) fail(s, NULL, 0, "tensor '%s' is not readable now", t->name);
    return st;
}

delta_status delta_session_read(delta_session *s, const delta_tensor *t,
                                void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st != DELTA_OK) return st;
    st = managed_access(s->mg, delta_tensor_root(s->ctx, t->id), data, bytes,
                        false);
    if (st == DELTA_ERR_STATE)
        fail(s, NULL, 0, "tensor '%s' is not readable now: only "
             "parameters, state, inputs and the session's outputs are",
             t->name);
    return st;
}

static const char *policy_names[16];
static pthread_once_t policy_names_once = PTHREAD_ONCE_INIT;

static void list_policy_names(void) {
    int i = 0;
    for (const char *n; i < 15 && (n = managed_policy_name(i)); i++)
        policy_names[i] = n;
    policy_names[i] = NULL;
}

const char *const *delta_session_policies(void) {
    pthread_once(&policy_names_once, list_policy_names);
    return policy_names;
}

double delta_session_op_seconds(const delta_session *s, int op) {
    if (op < 0 || op >= s->ctx->n_ops || !managed_op_measured(s->mg, op))
        return -1;
    return managed_op_span_seconds(s->mg, op);
}

double delta_session_op_host_seconds(const delta_session *s, int op) {
    if (op < 0 || op >= s->ctx->n_ops) return -1;
    return managed_op_host_seconds(s->mg, op);
}

int64_t delta_session_step(const delta_session *s) { return s->step; }
void delta_session_set_step(delta_session *s, int64_t step) { s->step = step; }
size_t delta_session_budget(const delta_session *s) { return s->arena_bytes; }
const char *delta_session_error(const delta_session *s) { return s->err; }
