/* The managed runtime (see managed.h): residency states, swap in and out,
 * drop and recompute, allocation under the budget with victims named by a
 * policy. One host thread drives it; copies go through the backend's copy
 * streams and are waited for. */
#include "runtime/managed.h"
#include "backend/backend.h"
#include "delta/dryplan.h"
#include "delta/exec.h"
#include "delta/pool.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct managed {
    delta_ctx *ctx;
    delta_backend *b;
    const policy_ops *pol;
    void *pst;
    size_t arena;
    void *base;
    delta_pool *pool;
    bool arena_made;
    int nt;
    bool *is_root;
    bool *persistent;    /* params, consts, state, inputs, never-read */
    root_view *rv;       /* per tensor id (roots only) */
    int *pins;           /* pin counts: operands of ops being run */
    size_t *off;         /* device offset when RES_DEVICE */
    void **host;         /* host store buffer, or NULL */
    bool *host_valid;    /* the host buffer holds the current data */
    double *op_s;        /* per op: last measured seconds */
    int cur_op;          /* op of the step being run (for deadness) */
    int64_t ticks;       /* ops run so far, recomputations included */
    delta_kernel_env env;
    delta_step_stats st; /* of the step being run */
    delta_status fail_st;
    char err[512];
};

static bool failf(managed *m, delta_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool failf(managed *m, delta_status st, const char *fmt, ...) {
    if (m->fail_st != DELTA_OK) return false;
    m->fail_st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return false;
}

const delta_ctx *managed_ctx(const managed *m) { return m->ctx; }
int managed_n_roots(const managed *m) { return m->nt; }
bool managed_pinned(const managed *m, int id) { return m->pins[id] > 0; }
const root_view *managed_root(const managed *m, int id) {
    return id >= 0 && id < m->nt && m->is_root[id] ? &m->rv[id] : NULL;
}
double managed_op_seconds(const managed *m, int op) { return m->op_s[op]; }
int64_t managed_clock(const managed *m) { return m->ticks; }
size_t managed_arena_bytes(const managed *m) { return m->arena; }

static const policy_ops *const policies[] = {&delta_policy_dtr};

static const policy_ops *policy_find(const char *name) {
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (!strcmp(policies[i]->name, name)) return policies[i];
    return NULL;
}

bool managed_policy_known(const char *policy) {
    return policy && policy_find(policy) != NULL;
}

static double now(managed *m) { return delta_backend_clock(m->b); }

/* ---- moving bytes ------------------------------------------------------ */

static bool evict(managed *m, int r, bool drop) {
    root_view *v = &m->rv[r];
    DELTA_ASSERT(v->state == RES_DEVICE && m->pins[r] == 0);
    if (drop) {
        DELTA_ASSERT(v->droppable);
        v->state = RES_DROPPED;
    } else {
        if (!m->host[r]) {
            m->host[r] = delta_backend_host_alloc(m->b, v->bytes);
            if (!m->host[r])
                return failf(m, DELTA_ERR_NOMEM,
                             "host memory for swapped tensors cannot be had "
                             "(%zu bytes for '%s')",
                             v->bytes, m->ctx->tensors[r]->name);
        }
        if (!m->host_valid[r]) {
            double t0 = now(m);
            delta_backend_copy(m->b, DELTA_STREAM_TO_HOST, m->host[r],
                               m->base ? (char *)m->base + m->off[r] : NULL,
                               v->bytes);
            delta_backend_sync(m->b, delta_backend_record(m->b,
                                                          DELTA_STREAM_TO_HOST));
            m->st.stall_s += now(m) - t0;
            m->st.swap_out_bytes += v->bytes;
            m->host_valid[r] = true;
        }
        v->state = RES_HOST;
    }
    DELTA_ASSERT(delta_pool_release(m->pool, m->off[r]) == DELTA_OK);
    return true;
}

/* Device bytes for something of `bytes`, evicting what the policy names
 * until they fit. */
static bool dev_alloc(managed *m, size_t bytes, size_t *off) {
    while (delta_pool_alloc(m->pool, bytes, off) != DELTA_OK) {
        bool drop = false;
        int v = m->pol->choose_victim(m->pst, m, bytes, &drop);
        if (v < 0) {
            const delta_op *op = &m->ctx->ops[m->cur_op];
            char b1[32], b2[32];
            return failf(m, DELTA_ERR_BUDGET,
                         "policy '%s' cannot fit op %d (%s, %s) in the budget "
                         "%s: %s more are needed and it has nothing left to "
                         "release",
                         m->pol->name, op->id, delta_op_type_name(op->type),
                         op->name, delta_format_bytes((double)m->arena, b1, 32),
                         delta_format_bytes((double)bytes, b2, 32));
        }
        DELTA_ASSERTF(m->is_root[v] && m->rv[v].state == RES_DEVICE &&
                          m->pins[v] == 0 && (!drop || m->rv[v].droppable),
                      "policy %s named an invalid victim %d", m->pol->name, v);
        if (!evict(m, v, drop)) return false;
    }
    return true;
}

static bool alloc_root(managed *m, int r) {
    if (!dev_alloc(m, m->rv[r].bytes, &m->off[r])) return false;
    m->rv[r].state = RES_DEVICE;
    return true;
}

static void free_root(managed *m, int r) {
    if (m->rv[r].state == RES_DEVICE)
        DELTA_ASSERT(delta_pool_release(m->pool, m->off[r]) == DELTA_OK);
    m->rv[r].state = RES_FREE;
    m->host_valid[r] = false;
}

static bool dead(const managed *m, int r) {
    return !m->persistent[r] && m->rv[r].last_use < m->cur_op;
}

static bool run_op(managed *m, const delta_op *op, bool recompute);

/* Makes root r resident on the device. */
static bool ensure(managed *m, int r) {
    root_view *v = &m->rv[r];
    switch (v->state) {
    case RES_DEVICE:
        return true;
    case RES_HOST: {
        m->pins[r]++;
        bool ok = alloc_root(m, r);
        m->pins[r]--;
        if (!ok) return false;
        double t0 = now(m);
        delta_backend_copy(m->b, DELTA_STREAM_TO_DEVICE,
                           m->base ? (char *)m->base + m->off[r] : NULL,
                           m->host[r], v->bytes);
        delta_backend_sync(m->b,
                           delta_backend_record(m->b, DELTA_STREAM_TO_DEVICE));
        m->st.stall_s += now(m) - t0;
        m->st.swap_in_bytes += v->bytes;
        return true;
    }
    case RES_DROPPED:
    case RES_FREE:
        /* dropped, or freed after its last use but needed to recompute
         * something dropped: run its producer again */
        DELTA_ASSERTF(v->droppable && v->producer >= 0,
                      "tensor %d (%s) is needed but is gone", r,
                      m->ctx->tensors[r]->name);
        return run_op(m, &m->ctx->ops[v->producer], true);
    }
    return false;
}

static void *addr(managed *m, int id) {
    int r = delta_tensor_root(m->ctx, id);
    return m->base ? (char *)m->base + m->off[r] : NULL;
}

/* Runs op (a step's op, or a recomputation of a forward op). */
static bool run_op(managed *m, const delta_op *op, bool recompute) {
    const delta_ctx *c = m->ctx;
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT], nr = 0;
    for (int j = 0; j < op->n_in; j++) roots[nr++] = delta_tensor_root(c, op->in[j]);
    for (int j = 0; j < op->n_out; j++) roots[nr++] = delta_tensor_root(c, op->out[j]);
    for (int j = 0; j < nr; j++) m->pins[roots[j]]++;
    bool ok = true;
    bool temp[DELTA_MAX_OP_OUT] = {false};
    for (int j = 0; ok && j < op->n_in; j++) ok = ensure(m, roots[j]);
    for (int j = 0; ok && j < op->n_out; j++) {
        int r = roots[op->n_in + j];
        if (m->rv[r].state == RES_DEVICE) continue;
        if (m->rv[r].state == RES_HOST && !recompute) {
            ok = ensure(m, r); /* in-place update of a swapped tensor */
            continue;
        }
        temp[j] = recompute && m->rv[r].state == RES_FREE;
        ok = alloc_root(m, r);
    }
    size_t ws_off = 0;
    bool ws = ok && op->workspace;
    if (ws) ok = dev_alloc(m, op->workspace, &ws_off);
    if (ok) {
        delta_kargs k = {.op = op, .env = &m->env};
        for (int j = 0; j < op->n_in; j++) {
            k.in_t[j] = c->tensors[op->in[j]];
            k.in[j] = addr(m, op->in[j]);
        }
        for (int j = 0; j < op->n_out; j++) {
            k.out_t[j] = c->tensors[op->out[j]];
            k.out[j] = addr(m, op->out[j]);
        }
        if (ws && m->base) k.ws = (char *)m->base + ws_off;
        double t0 = now(m);
        delta_backend_run(m->b, &k);
        double dt = now(m) - t0;
        m->ticks++;
        if (recompute) {
            m->st.recomputed_ops++;
            m->st.recompute_s += dt;
        } else {
            m->op_s[op->id] = dt;
        }
        for (int j = 0; j < op->n_out; j++) {
            int r = roots[op->n_in + j];
            if (!recompute) m->host_valid[r] = false; /* new data */
            m->rv[r].last_access = managed_clock(m);
        }
        for (int j = 0; j < op->n_in; j++)
            m->rv[roots[j]].last_access = managed_clock(m);
    }
    if (ws) DELTA_ASSERT(delta_pool_release(m->pool, ws_off) == DELTA_OK);
    for (int j = 0; j < nr; j++) m->pins[roots[j]]--;
    if (ok && recompute) {
        /* outputs made only for this and inputs past their last use go */
        for (int j = 0; j < op->n_out; j++)
            if (temp[j] && dead(m, roots[op->n_in + j]) &&
                m->pins[roots[op->n_in + j]] == 0)
                free_root(m, roots[op->n_in + j]);
        for (int j = 0; j < op->n_in; j++)
            if (dead(m, roots[j]) && m->pins[roots[j]] == 0 &&
                m->rv[roots[j]].state == RES_DEVICE)
                free_root(m, roots[j]);
    }
    return ok;
}

/* ---- the step ---------------------------------------------------------- */

delta_status managed_run(managed *m, delta_run_mode mode, int64_t step,
                         delta_step_stats *stats, char *err, size_t err_len) {
    delta_ctx *c = m->ctx;
    if (m->fail_st != DELTA_OK) {
        snprintf(err, err_len, "%s", m->err);
        return m->fail_st;
    }
    bool fwd_only = mode != DELTA_RUN_STEP;
    m->env = (delta_kernel_env){c->seed, step, mode != DELTA_RUN_EVAL};
    memset(&m->st, 0, sizeof m->st);
    /* what the last run left (outputs read after it, forward-only leftovers) */
    for (int r = 0; r < m->nt; r++)
        if (m->is_root[r] && !m->persistent[r] && m->rv[r].state != RES_FREE)
            free_root(m, r);
    delta_pool_reset_peaks(m->pool);
    double t0 = now(m);
    bool ok = true;
    for (int i = 0; ok && i < c->n_ops; i++) {
        const delta_op *op = &c->ops[i];
        if (fwd_only && op->phase != DELTA_PHASE_FORWARD) continue;
        m->cur_op = i;
        ok = run_op(m, op, false);
        for (int j = 0; ok && j < op->n_in + op->n_out; j++) {
            int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
            int r = delta_tensor_root(c, id);
            if (!m->persistent[r] && m->rv[r].last_use == i &&
                m->rv[r].state != RES_FREE)
                free_root(m, r);
        }
    }
    double t1 = now(m);
    if (!ok) {
        snprintf(err, err_len, "%s", m->err);
        return m->fail_st;
    }
    if (stats) {
        delta_pool_stats ps;
        delta_pool_get_stats(m->pool, &ps);
        *stats = m->st;
        stats->step_s = t1 - t0;
        stats->peak_device_bytes = ps.peak_address;
        stats->live_peak_bytes = ps.peak_live_bytes;
    }
    return DELTA_OK;
}

delta_status managed_access(managed *m, int r, void *data, size_t bytes,
                            bool write) {
    if (!m->is_root[r] || m->rv[r].state == RES_FREE ||
        m->rv[r].state == RES_DROPPED)
        return DELTA_ERR_STATE;
    (void)bytes;
    size_t n = m->ctx->tensors[r]->bytes;
    if (m->rv[r].state == RES_HOST) {
        if (write) memcpy(m->host[r], data, n);
        else memcpy(data, m->host[r], n);
        return DELTA_OK;
    }
    if (!m->base) {
        if (!write) memset(data, 0, n);
        return DELTA_OK;
    }
    char *p = (char *)m->base + m->off[r];
    if (write) {
        memcpy(p, data, n);
        m->host_valid[r] = false;
    } else {
        memcpy(data, p, n);
    }
    return DELTA_OK;
}

/* ---- creation ---------------------------------------------------------- */

void managed_free(managed *m) {
    if (!m) return;
    if (m->pol && m->pst) m->pol->destroy(m->pst);
    for (int r = 0; r < m->nt && m->host; r++)
        if (m->host[r]) delta_backend_host_free(m->b, m->host[r]);
    if (m->arena_made) delta_backend_arena_destroy(m->b);
    delta_pool_free(m->pool);
    free(m->is_root);
    free(m->persistent);
    free(m->rv);
    free(m->pins);
    free(m->off);
    free(m->host);
    free(m->host_valid);
    free(m->op_s);
    free(m);
}

managed *managed_new(delta_ctx *ctx, delta_backend *b, size_t budget,
                     const char *policy, delta_tensor *const *outs,
                     int n_outs, delta_status *status, char *err,
                     size_t err_len) {
    managed *m = calloc(1, sizeof *m);
    int nt = ctx->n_tensors, no = ctx->n_ops;
    if (!m) goto nomem;
    m->ctx = ctx;
    m->b = b;
    m->nt = nt;
    m->arena = budget;
    m->pol = policy_find(policy);
    DELTA_ASSERT(m->pol);
    m->is_root = calloc((size_t)nt + 1, sizeof(bool));
    m->persistent = calloc((size_t)nt + 1, sizeof(bool));
    m->rv = calloc((size_t)nt + 1, sizeof(root_view));
    m->pins = calloc((size_t)nt + 1, sizeof(int));
    m->off = calloc((size_t)nt + 1, sizeof(size_t));
    m->host = calloc((size_t)nt + 1, sizeof(void *));
    m->host_valid = calloc((size_t)nt + 1, sizeof(bool));
    m->op_s = calloc((size_t)no + 1, sizeof(double));
    if (!m->is_root || !m->persistent || !m->rv || !m->pins || !m->off ||
        !m->host || !m->host_valid || !m->op_s)
        goto nomem;
    for (int i = 0; i < nt; i++) {
        const delta_tensor *t = ctx->tensors[i];
        if (t->view_of >= 0) continue;
        m->is_root[i] = true;
        m->rv[i].bytes = delta_pool_round(t->bytes);
        m->rv[i].producer = t->producer;
        m->rv[i].last_use = -1;
    }
    for (int i = 0; i < no; i++)
        for (int j = 0; j < ctx->ops[i].n_in; j++)
            m->rv[delta_tensor_root(ctx, ctx->ops[i].in[j])].last_use = i;
    for (int i = 0; i < nt; i++) {
        if (!m->is_root[i]) continue;
        const delta_tensor *t = ctx->tensors[i];
        root_view *v = &m->rv[i];
        m->persistent[i] = delta_kind_persistent(t->kind) ||
                           t->kind == DELTA_KIND_INPUT || t->producer < 0 ||
                           v->last_use < 0;
        v->droppable = !m->persistent[i] && t->kind == DELTA_KIND_ACTIVATION &&
                       ctx->ops[t->producer].recomputable &&
                       !ctx->ops[t->producer].inplace;
    }
    for (int k = 0; k < n_outs; k++) {
        int r = delta_tensor_root(ctx, outs[k]->id);
        m->persistent[r] = true;
        m->rv[r].droppable = false;
    }
    char perr[256];
    m->pool = delta_pool_new(budget, nt + no + 2, perr, sizeof perr);
    if (!m->pool) goto nomem;
    *status = delta_backend_arena_create(b, budget, &m->base);
    if (*status != DELTA_OK) {
        snprintf(err, err_len, "cannot create a device arena of %zu bytes",
                 budget);
        managed_free(m);
        return NULL;
    }
    m->arena_made = true;
    m->pst = m->pol->create(m);
    if (!m->pst) goto nomem;
    /* persistent tensors: on the device while they fit, else in the host
     * store (the policy brings them in when an op needs them) */
    bool data = delta_backend_has_data(b);
    for (int i = 0; i < nt; i++) {
        if (!m->is_root[i] || !m->persistent[i] || ctx->tensors[i]->producer >= 0)
            continue;
        const delta_tensor *t = ctx->tensors[i];
        void *p;
        if (delta_pool_alloc(m->pool, m->rv[i].bytes, &m->off[i]) == DELTA_OK) {
            m->rv[i].state = RES_DEVICE;
            p = m->base ? (char *)m->base + m->off[i] : NULL;
        } else {
            m->host[i] = delta_backend_host_alloc(b, m->rv[i].bytes);
            if (!m->host[i]) goto nomem;
            m->rv[i].state = RES_HOST;
            m->host_valid[i] = true;
            p = data ? m->host[i] : NULL;
        }
        if (!p) continue;
        delta_init_tensor(p, t, ctx->seed);
    }
    *status = DELTA_OK;
    return m;
nomem:
    *status = DELTA_ERR_NOMEM;
    snprintf(err, err_len, "out of host memory creating the runtime");
    managed_free(m);
    return NULL;
}
