/* The managed runtime (see managed.h): creation, the views policies read,
 * the step loop with its hooks, and access to tensors between runs. The
 * mechanics of moving bytes are in residency.c. One host thread drives it;
 * copies run on the backend's copy streams. */
#include "runtime/managed_impl.h"
#include "runtime/plan_cache.h"
#include "delta/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the policies -------------------------------------------------------- */

static const policy_ops *policy_find(const char *name) {
    for (int i = 0; i < managed_n_policies; i++)
        if (!strcmp(managed_policies[i]->name, name)) return managed_policies[i];
    return NULL;
}

bool managed_policy_known(const char *policy) {
    return policy && policy_find(policy) != NULL;
}

const char *managed_policy_name(int i) {
    return i >= 0 && i < managed_n_policies ? managed_policies[i]->name : NULL;
}

const char *residency_name(residency r) {
    static const char *const n[] = {"free", "device", "to_host",
                                    "host", "to_device", "dropped"};
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "?";
}

/* ---- views --------------------------------------------------------------- */

const delta_ctx *managed_ctx(const managed *m) { return m->ctx; }
int managed_n_roots(const managed *m) { return m->nt; }
bool managed_pinned(const managed *m, int id) { return m->pins[id] > 0; }
const root_view *managed_root(const managed *m, int id) {
    return id >= 0 && id < m->nt && m->is_root[id] ? &m->rv[id] : NULL;
}
bool managed_op_measured(const managed *m, int op) {
    return m->op_measured[op];
}
double managed_op_seconds(const managed *m, int op) {
    /* a collective occupies the communication stream, not compute (its
     * own time: delta_session_op_seconds) */
    if (delta_op_is_collective(m->ctx->ops[op].type) && m->b->ops->collective)
        return 0;
    if (m->op_measured[op]) return m->op_s[op];
    double t = delta_backend_op_cost(m->b, &m->ctx->ops[op]);
    if (t >= 0) return t;
    const delta_op *o = &m->ctx->ops[op];
    return o->flops / 1e11 + o->bytes / 1e10 + 1e-6; /* ~a 2-core CPU */
}
double managed_op_span_seconds(const managed *m, int op) {
    return m->op_measured[op] ? m->op_s[op] : -1;
}
double managed_op_host_seconds(const managed *m, int op) {
    return m->op_host_s[op];
}
double managed_now(const managed *m) { return delta_backend_clock(m->b); }
double managed_run_seconds(const managed *m) { return m->run_s; }
int64_t managed_clock(const managed *m) { return m->ticks; }
int managed_cur_op(const managed *m) { return m->cur_op; }
int64_t managed_step(const managed *m) { return m->step; }
bool managed_fwd_only(const managed *m) { return m->fwd_only; }
size_t managed_budget(const managed *m) { return m->arena; }
size_t managed_in_use(const managed *m) { return m->in_use; }
void managed_set_soft_limit(managed *m, size_t bytes) { m->soft_limit = bytes; }
bool managed_soft_ask(const managed *m) { return m->soft_ask; }
const delta_step_stats *managed_run_stats(const managed *m) { return &m->st; }
size_t managed_arena_bytes(const managed *m) { return m->arena; }
int64_t managed_steps_done(const managed *m) { return m->steps_done; }
delta_plan_cache *managed_plan_cache(const managed *m) { return m->plans; }
uint64_t managed_program_key(const managed *m) { return m->program_key; }
size_t managed_layout_peak(const managed *m) { return m->layout_peak; }
bool managed_replayed(const managed *m) { return m->replayed; }

/* latency + bytes / bandwidth fitted to f's samples; the nominal link
 * until two sizes were seen (one size: the nominal latency, the measured
 * rate). */
static double link_model(const managed *m, const struct link_fit *f,
                         double x) {
    double nominal_lat = m->b->link_latency_s > 0 ? m->b->link_latency_s : 0;
    double nominal_bps = m->b->link_bps > 0 ? m->b->link_bps : 10e9;
    if (f->n >= 2) {
        double d = f->n * f->sxx - f->sx * f->sx;
        if (d > 1e-9 * f->sxx * f->n) {
            double a = (f->n * f->sxy - f->sx * f->sy) / d;
            double b = (f->sy - a * f->sx) / f->n;
            if (a > 0) return (b > 0 ? b : 0) + a * x;
        }
    }
    if (f->n >= 1 && f->sx > 0) {
        double per_byte = (f->sy - f->n * nominal_lat) / f->sx;
        if (per_byte > 0) return nominal_lat + per_byte * x;
    }
    return nominal_lat + x / nominal_bps;
}

double managed_link_seconds_dir(const managed *m, size_t bytes, bool to_host) {
    return link_model(m, &m->lk[to_host ? 0 : 1], (double)bytes);
}

double managed_link_seconds(const managed *m, size_t bytes) {
    const struct link_fit *h = &m->lk[0], *d = &m->lk[1];
    struct link_fit both = {h->n + d->n, h->sx + d->sx, h->sy + d->sy,
                            h->sxx + d->sxx, h->sxy + d->sxy};
    return link_model(m, &both, (double)bytes);
}

static int lower_bound(const int *a, int n, int v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int managed_next_use(const managed *m, int r, int op) {
    const root_view *v = managed_root(m, r);
    if (!v) return -1;
    int k = lower_bound(v->acc, v->n_acc, op + 1);
    return k < v->n_acc ? v->acc[k] : -1;
}

int managed_prev_use(const managed *m, int r, int op) {
    const root_view *v = managed_root(m, r);
    if (!v) return -1;
    int k = lower_bound(v->acc, v->n_acc, op);
    return k > 0 ? v->acc[k - 1] : -1;
}

size_t managed_op_alloc_bytes(const managed *m, int op) {
    const delta_op *o = &m->ctx->ops[op];
    size_t n = o->workspace ? delta_pool_round(o->workspace) : 0;
    if (o->inplace) return n;
    for (int j = 0; j < o->n_out; j++) {
        int r = delta_tensor_root(m->ctx, o->out[j]);
        if (m->ctx->tensors[r]->producer == op) n += m->rv[r].bytes;
    }
    return n;
}

/* ---- the step ------------------------------------------------------------ */

delta_status managed_run(managed *m, delta_run_mode mode, int64_t step,
                         delta_step_stats *stats, char *err, size_t err_len) {
    delta_ctx *c = m->ctx;
    if (m->fail_st != DELTA_OK) {
        snprintf(err, err_len, "%s", m->err);
        return m->fail_st;
    }
    m->fwd_only = mode != DELTA_RUN_STEP;
    m->step = step;
    m->env = (delta_kernel_env){c->seed, step, mode != DELTA_RUN_EVAL, m->comm};
    memset(&m->st, 0, sizeof m->st);
    /* what the last run left: outputs read after it, forward leftovers,
     * temporaries of a failed run */
    mg_drain(m);
    for (int k = 0; k < m->n_temps; k++) m->is_temp[m->temps[k]] = false;
    m->n_temps = 0;
    bool fixed = m->pol->place != NULL; /* a static layout (keep) */
    for (int r = 0; r < m->nt; r++)
        if (m->is_root[r] &&
            (!m->rv[r].persistent || (fixed && m->rv[r].producer >= 0)) &&
            m->rv[r].state != RES_FREE)
            mg_free_root(m, r);
    delta_pool_reset_peaks(m->pool);
    /* the host's own figures of this run, and the device's start */
    uint64_t syncs0 = m->b->host_syncs, throttles0 = m->b->throttle_waits;
    double waits0 = m->b->host_wait_s, h0 = managed_now(m);
    m->step_begin = delta_backend_record(m->b, DELTA_STREAM_COMPUTE);
    m->prev_end = -1;
    m->device_busy = 0;
    m->vt = m->link_free = 0;
    m->step_t0 = -1;
    m->cur_op = -1;
    /* a training step is a replay step (residency.c, "Layout"); forward and
     * eval runs are placed online and leave the plan alone */
    bool traced = mode == DELTA_RUN_STEP && !fixed;
    if (traced) delta_replay_step_begin(m->rp);
    if (m->pol->begin_step) m->pol->begin_step(m->pst, m, step, m->fwd_only);
    bool ok = m->fail_st == DELTA_OK;
    for (int i = 0; ok && i < c->n_ops; i++) {
        const delta_op *op = &c->ops[i];
        if (m->fwd_only && op->phase != DELTA_PHASE_FORWARD) continue;
        m->cur_op = i;
        double issue0 = managed_now(m);
        m->op_wait_s = 0;
        mg_collect(m);
        if (m->pol->before_op) m->pol->before_op(m->pst, m, i);
        ok = m->fail_st == DELTA_OK && mg_run_op(m, op, false);
        for (int j = 0; ok && j < op->n_in + op->n_out; j++) {
            int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
            int r = delta_tensor_root(c, id);
            const root_view *v = &m->rv[r];
            if (!v->persistent && mg_last_needed(m, r) == i &&
                v->state != RES_FREE)
                mg_free_root(m, r);
        }
        mg_free_temps(m);
        if (ok && m->pol->after_op) m->pol->after_op(m->pst, m, i);
        ok = ok && m->fail_st == DELTA_OK;
        double issue1 = managed_now(m);
        m->op_host_s[i] = issue1 - issue0 - m->op_wait_s;
        if (m->trace)
            mg_trace_op(m, DELTA_TRACK_HOST, op, "host", issue0, issue1);
    }
    m->cur_op = -1;
    /* a step ends when its copies have landed: the compute stream waits
     * for them on the device; then the host waits once for the step's end
     * (where the caller reads the loss), the only wait of a steady step */
    delta_event end = mg_join(m);
    m->st.host_syncs = (int)(m->b->host_syncs - syncs0);
    m->st.throttle_waits = (int)(m->b->throttle_waits - throttles0);
    m->st.host_busy_s =
        managed_now(m) - h0 - (m->b->host_wait_s - waits0);
    m->b->ops->sync(m->b->ctx, end);
    mg_collect(m);
    mg_collect_ops(m);
    DELTA_ASSERT(m->issued.n == 0 && m->comm_issued.n == 0);
    double e0 = 0, e1 = 0;
    bool timed = delta_backend_event_time(m->b, m->step_begin, &e0) &&
                 delta_backend_event_time(m->b, end, &e1);
    m->run_s = timed ? e1 - e0 : managed_now(m) - h0;
    m->st.device_busy_s = m->device_busy;
    delta_replay_step rep = {0};
    if (traced) {
        delta_replay_step_end(m->rp, &rep);
        /* the plan peaks above the budget: the blocks that stay (persistent
         * tensors, scattered by the step's moves) may be in its way; when
         * planning around them slid to the bottom fits, slide them there
         * (moves of this step) and keep that plan. Only the first time or
         * when the step repeated the one before: a policy whose steps
         * differ would deviate from the plan anyway */
        if (!rep.repeated) m->whatif_over = 0;
        if (ok && rep.planned && rep.plan_exceeds_capacity &&
            (rep.repeated || !m->compacted_once) && !mg_compacted(m)) {
            delta_replay_step re = rep;
            if (m->whatif_over) { /* the same step did not fit compacted */
                re.plan_peak_bytes = m->whatif_over;
            } else if (delta_replay_replan(m->rp, true, &re) &&
                       !re.plan_exceeds_capacity) {
                mg_compact(m);
                m->compacted_once = true;
                rep = re;
            } else if (re.planned) {
                m->whatif_over = re.plan_peak_bytes;
            }
            if (rep.plan_exceeds_capacity && re.planned &&
                re.plan_peak_bytes < rep.plan_peak_bytes)
                rep.plan_peak_bytes = re.plan_peak_bytes; /* what it takes */
        }
        m->replayed = rep.replayed;
        if (rep.planned) m->layout_peak = rep.plan_peak_bytes;
        else if (!rep.replayed) m->layout_peak = 0; /* no plan at all */
        /* only when the step repeated the one before: a step whose
         * allocations move from step to step (link-bound swap-ins retried
         * at different ops) is not replayed anyway, and tightening a target
         * by its excess chased noise (delta on the cpu's ResNet-50 at 50%:
         * the margin grew from 4 to 25 MB, the plan swapped 166 MB a step
         * instead of 149) */
        if (ok && rep.plan_exceeds_capacity && rep.repeated &&
            m->pol->on_event) {
            delta_pool_stats ps;
            delta_pool_get_stats(m->pool, &ps);
            m->pol->on_event(m->pst, m, -1, MEV_LAYOUT_OVER,
                             (double)(rep.plan_peak_bytes - ps.capacity));
        }
    }
    if (m->pol->end_step) m->pol->end_step(m->pst, m, ok);
    if (!ok || m->fail_st != DELTA_OK) {
        if (m->fail_st == DELTA_OK)
            mg_failf(m, DELTA_ERR_STATE, "the run failed");
        snprintf(err, err_len, "%s", m->err);
        return m->fail_st;
    }
    if (mode == DELTA_RUN_STEP) m->steps_done++;
    if (stats) {
        delta_pool_stats ps;
        delta_pool_get_stats(m->pool, &ps);
        *stats = m->st;
        stats->step_s = m->run_s;
        stats->peak_device_bytes = ps.peak_address;
        stats->live_peak_bytes = ps.peak_live_bytes;
        stats->replayed = fixed || (traced && rep.replayed);
        stats->host_bytes = m->host_in_use;
    }
    return DELTA_OK;
}

delta_status managed_access(managed *m, int r, void *data, size_t bytes,
                            bool write) {
    (void)bytes;
    if (!m->is_root[r]) return DELTA_ERR_STATE;
    mg_drain(m);
    root_view *v = &m->rv[r];
    size_t n = m->ctx->tensors[r]->bytes;
    bool data_ok = delta_backend_has_data(m->b);
    switch (v->state) {
    case RES_HOST:
        if (!data_ok) break;
        if (write) memcpy(m->host[r], data, n);
        else memcpy(data, m->host[r], n);
        return DELTA_OK;
    case RES_DEVICE:
    case RES_TO_HOST: /* pinned swap-outs cannot outlive a run */
        if (!data_ok) break;
        if (write) {
            delta_backend_upload(m->b, (char *)m->base + m->off[r], data, n);
            v->host_valid = false;
        } else {
            delta_backend_download(m->b, data, (char *)m->base + m->off[r],
                                   n);
        }
        return DELTA_OK;
    case RES_FREE:
    case RES_DROPPED:
    case RES_TO_DEVICE:
        return DELTA_ERR_STATE;
    }
    if (!write) memset(data, 0, n);
    return DELTA_OK;
}

/* ---- creation ------------------------------------------------------------ */

void managed_free(managed *m) {
    if (!m) return;
    if (m->b) delta_backend_sync_copies(m->b);
    if (m->pol && m->pst) m->pol->destroy(m->pst);
    for (int r = 0; r < m->nt && m->host; r++)
        if (m->host[r]) {
            delta_backend_host_free(m->b, m->host[r]);
            m->host_in_use -= m->rv[r].bytes;
        }
    if (m->arena_made) delta_backend_arena_destroy(m->b);
    delta_replay_free(m->rp);
    free(m->is_root);
    free(m->rv);
    free(m->acc_start);
    free(m->acc_ops);
    free(m->end_fwd);
    free(m->pins);
    free(m->off);
    free(m->host);
    free(m->ev);
    free(m->free_after);
    free(m->outgoing);
    free(m->out_end);
    free(m->host_written);
    free(m->host_read);
    for (int k = 0; k < 2; k++) free(m->copies[k].a);
    for (int k = 0; k < 3; k++) free(m->tags[k].a);
    free(m->comm_ev);
    free(m->comm_issued.a);
    free(m->issued.a);
    free(m->temps);
    free(m->is_temp);
    free(m->scratch);
    free(m->gaps);
    free(m->gap_off);
    free(m->dest);
    free(m->order);
    free(m->op_s);
    free(m->op_measured);
    free(m->op_host_s);
    free(m);
}

/* Accesses of every root (reads and in-place writes), as CSR arrays. */
static bool build_accesses(managed *m) {
    const delta_ctx *c = m->ctx;
    int nt = m->nt, no = m->no;
    m->acc_start = calloc((size_t)nt + 2, sizeof(int));
    if (!m->acc_start) return false;
    /* count, then fill; an op touching a root twice counts once */
    for (int pass = 0; pass < 2; pass++) {
        int *fill = NULL;
        if (pass == 1) {
            for (int r = 0; r < nt; r++) m->acc_start[r + 1] += m->acc_start[r];
            m->acc_ops = malloc(sizeof(int) * ((size_t)m->acc_start[nt] + 1));
            fill = calloc((size_t)nt + 1, sizeof(int));
            if (!m->acc_ops || !fill) {
                free(fill);
                return false;
            }
        }
        for (int i = 0; i < no; i++) {
            const delta_op *op = &c->ops[i];
            int seen[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT], ns = 0;
            for (int j = 0; j < op->n_in + op->n_out; j++) {
                int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
                if (j >= op->n_in && !op->inplace) continue; /* production */
                int r = delta_tensor_root(c, id);
                bool dup = false;
                for (int k = 0; k < ns; k++) dup |= seen[k] == r;
                if (dup) continue;
                seen[ns++] = r;
                if (pass == 0) m->acc_start[r + 1]++;
                else m->acc_ops[m->acc_start[r] + fill[r]++] = i;
            }
        }
        free(fill);
    }
    for (int r = 0; r < nt; r++) {
        m->rv[r].acc = m->acc_ops + m->acc_start[r];
        m->rv[r].n_acc = m->acc_start[r + 1] - m->acc_start[r];
    }
    return true;
}

void managed_two_sizes(size_t a, size_t b, char *sa, char *sb) {
    delta_format_bytes((double)a, sa, 32);
    delta_format_bytes((double)b, sb, 32);
    if (a != b && !strcmp(sa, sb)) {
        snprintf(sa, 32, "%zu B", a);
        snprintf(sb, 32, "%zu B", b);
    }
}

/* A static layout (keep) needs its peak: the arena is that without a
 * budget; a budget below it is refused before anything is made. */
static bool arena_fits(managed *m, const managed_opts *o, delta_status *status,
                       char *err, size_t err_len) {
    size_t need = m->pol->arena_need(m->pst);
    if (need < DELTA_POOL_ALIGN) need = DELTA_POOL_ALIGN;
    if (!o->budget) {
        m->arena = need;
        return true;
    }
    if (need <= o->budget) return true;
    char sn[32], sb[32], smin[32];
    managed_two_sizes(need, o->budget, sn, sb);
    delta_format_bytes((double)o->min_budget, smin, sizeof smin);
    *status = DELTA_ERR_BUDGET;
    snprintf(err, err_len,
             "policy '%s' keeps every tensor and needs %s, above the budget "
             "%s; give it a budget of %s or more, or choose a policy that "
             "swaps or recomputes (they work down to %s)",
             m->pol->name, sn, sb, sn, smin);
    return false;
}

managed *managed_new(delta_ctx *ctx, delta_backend *b, const managed_opts *o,
                     delta_status *status, char *err, size_t err_len) {
    managed *m = calloc(1, sizeof *m);
    int nt = ctx->n_tensors, no = ctx->n_ops;
    if (!m) goto nomem;
    m->ctx = ctx;
    m->b = b;
    m->nt = nt;
    m->no = no;
    m->arena = o->budget;
    m->host_limit = o->host_limit;
    m->trace = o->trace;
    m->cur_op = -1;
    m->plans = o->plans;
    m->program_key = delta_program_key(ctx);
    m->pol = o->custom ? o->custom : policy_find(o->policy);
    DELTA_ASSERT(m->pol);
    size_t n1 = (size_t)nt + 1;
    m->is_root = calloc(n1, sizeof(bool));
    m->rv = calloc(n1, sizeof(root_view));
    m->end_fwd = calloc(n1, sizeof(int));
    m->pins = calloc(n1, sizeof(int));
    m->off = calloc(n1, sizeof(size_t));
    m->host = calloc(n1, sizeof(void *));
    m->ev = calloc(n1, sizeof(delta_event));
    m->free_after = calloc(n1, sizeof(bool));
    m->outgoing = calloc(n1, sizeof(int));
    m->out_end = calloc(n1, sizeof(double));
    m->host_written = calloc(n1, sizeof(delta_event));
    m->host_read = calloc(n1, sizeof(delta_event));
    m->blocking = o->sync_every_op;
    m->comm = o->comm;
    m->issued.cap = o->run_ahead > 0 ? o->run_ahead : MANAGED_RUN_AHEAD;
    m->issued.a = calloc((size_t)m->issued.cap, sizeof(mg_issued));
    for (int k = 0; k < 3; k++) {
        m->tags[k].cap = 64;
        m->tags[k].a = calloc(64, sizeof(mg_tag));
        if (!m->tags[k].a) goto nomem;
    }
    for (int k = 0; k < 2; k++) {
        m->copies[k].cap = 64;
        m->copies[k].a = calloc(64, sizeof(mg_copy));
        if (!m->copies[k].a) goto nomem;
    }
    m->comm_ev = calloc(n1, sizeof(delta_event));
    m->comm_issued.cap = 64;
    m->comm_issued.a = calloc(64, sizeof(mg_issued));
    m->temps = calloc(n1, sizeof(int));
    m->is_temp = calloc(n1, sizeof(bool));
    m->scratch = calloc(n1, sizeof(mg_slot));
    m->gaps = calloc(2 * n1 + 2, sizeof(size_t));
    m->gap_off = calloc(2 * n1 + 2, sizeof(size_t));
    m->dest = calloc(n1, sizeof(size_t));
    m->order = calloc(n1, sizeof(mg_slot));
    m->op_s = calloc((size_t)no + 1, sizeof(double));
    m->op_measured = calloc((size_t)no + 1, sizeof(bool));
    m->op_host_s = malloc(((size_t)no + 1) * sizeof(double));
    if (!m->is_root || !m->rv || !m->end_fwd || !m->pins || !m->off ||
        !m->host || !m->ev || !m->free_after || !m->outgoing || !m->out_end ||
        !m->host_written || !m->host_read || !m->comm_ev ||
        !m->comm_issued.a || !m->issued.a || !m->temps || !m->is_temp || !m->scratch ||
        !m->gaps || !m->gap_off || !m->dest || !m->order ||
        !m->op_s || !m->op_measured || !m->op_host_s)
        goto nomem;
    for (int i = 0; i <= no; i++) m->op_host_s[i] = -1;
    for (int i = 0; i < nt; i++) {
        const delta_tensor *t = ctx->tensors[i];
        if (t->view_of >= 0) continue;
        m->is_root[i] = true;
        m->rv[i].kind = t->kind;
        m->rv[i].bytes = delta_pool_round(t->bytes);
        m->rv[i].producer = t->producer;
        m->rv[i].last_use = -1;
        m->end_fwd[i] = t->producer;
    }
    if (!build_accesses(m)) goto nomem;
    bool *written_in_place = calloc(n1, sizeof(bool));
    if (!written_in_place) goto nomem;
    for (int i = 0; i < no; i++) {
        const delta_op *op = &ctx->ops[i];
        for (int j = 0; j < op->n_in; j++) {
            int r = delta_tensor_root(ctx, op->in[j]);
            m->rv[r].last_use = i;
            if (op->phase == DELTA_PHASE_FORWARD && i > m->end_fwd[r])
                m->end_fwd[r] = i;
        }
        if (op->inplace)
            for (int j = 0; j < op->n_out; j++)
                written_in_place[delta_tensor_root(ctx, op->out[j])] = true;
    }
    for (int i = 0; i < nt; i++) {
        if (!m->is_root[i]) continue;
        const delta_tensor *t = ctx->tensors[i];
        root_view *v = &m->rv[i];
        v->persistent = delta_kind_persistent(t->kind) ||
                        t->kind == DELTA_KIND_INPUT || t->producer < 0 ||
                        v->last_use < 0;
        v->droppable = !v->persistent && t->kind == DELTA_KIND_ACTIVATION &&
                       ctx->ops[t->producer].recomputable &&
                       !ctx->ops[t->producer].inplace && !written_in_place[i];
    }
    free(written_in_place);
    bool *is_out = calloc(n1, sizeof(bool));
    if (!is_out) goto nomem;
    for (int k = 0; k < o->n_outs; k++) {
        int r = delta_tensor_root(ctx, o->outs[k]->id);
        m->rv[r].persistent = true;
        m->rv[r].droppable = false;
        is_out[r] = true;
    }
    /* a static layout (keep) places what no op reads and no caller asked
     * for (the loss excepted: the caller reads it) at its producer only,
     * as the dry plan does: it is freed right after it is made */
    for (int r = 0; m->pol->place && r < nt; r++) {
        root_view *v = &m->rv[r];
        const delta_tensor *t = ctx->tensors[r];
        if (m->is_root[r] && t->producer >= 0 && v->last_use < 0 &&
            !is_out[r] && t->grad < 0 && t->kind != DELTA_KIND_INPUT &&
            !delta_kind_persistent(t->kind)) {
            v->persistent = false;
            v->last_use = m->end_fwd[r] = t->producer;
        }
    }
    free(is_out);
    m->pst = m->pol->create(m);
    if (!m->pst) goto nomem;
    if (m->pol->arena_need && !arena_fits(m, o, status, err, err_len)) {
        managed_free(m);
        return NULL;
    }
    char perr[256];
    m->rp = delta_replay_new(m->arena, nt + no + 2, perr, sizeof perr);
    if (!m->rp) goto nomem;
    m->pool = delta_replay_pool(m->rp);
    *status = delta_backend_arena_create(b, m->arena, &m->base);
    if (*status != DELTA_OK) {
        char b1[32];
        snprintf(err, err_len, "cannot create a device arena of %s",
                 delta_format_bytes((double)m->arena, b1, sizeof b1));
        managed_free(m);
        return NULL;
    }
    m->arena_made = true;
    /* persistent tensors: on the device while they fit, else in the host
     * store (brought in when an op needs them) */
    bool data = delta_backend_has_data(b);
    for (int i = 0; i < nt; i++) {
        if (!m->is_root[i] || !m->rv[i].persistent ||
            ctx->tensors[i]->producer >= 0)
            continue;
        const delta_tensor *t = ctx->tensors[i];
        root_view *v = &m->rv[i];
        void *p;
        /* outside any step: at the policy's place, else online; not
         * recorded */
        if (mg_place_untraced(m, v->bytes, i, &m->off[i])) {
            v->state = RES_DEVICE;
            p = m->base ? (char *)m->base + m->off[i] : NULL;
        } else {
            if (!mg_host_alloc(m, i)) goto nomem;
            v->state = RES_HOST;
            v->host_valid = true;
            p = data ? m->host[i] : NULL;
        }
        /* the host store is host memory; the arena may not be */
        if (p && v->state == RES_HOST) delta_init_tensor(p, t, ctx->seed);
        else if (p && delta_backend_init_tensor(b, p, t, ctx->seed) != DELTA_OK)
            goto nomem;
    }
    mg_trace_memory(m);
    *status = DELTA_OK;
    return m;
nomem:
    *status = DELTA_ERR_NOMEM;
    if (m && m->fail_st != DELTA_OK)
        snprintf(err, err_len, "%s (persistent tensors that do not fit on "
                 "the device start in the host store)", m->err);
    else
        snprintf(err, err_len, "out of host memory creating the runtime");
    managed_free(m);
    return NULL;
}
