/* Launching an op on the compute stream and timing it without waiting
 * (managed.h, "the host runs ahead"): the one place a kernel is run, for
 * every policy, keep included. */
#include "runtime/managed_impl.h"

#include <stdio.h>


/* ---- timing without waiting ----------------------------------------------
 * Every op issued on the compute stream goes into m->issued with its
 * event. Entries are timed from their spans once complete, in order,
 * never by waiting: a policy reads an op's time at least one op after it
 * was issued (and a whole step's at its end). The ring's capacity is the
 * run-ahead bound: a host that far ahead waits for the oldest op (the
 * throttle, counted apart from host_syncs). */

static void time_op(managed *m, const mg_issued *is) {
    double t0, t1;
    if (!delta_backend_span(m->b, is->e, &t0, &t1)) return;
    double dt = t1 - t0;
    m->device_busy += dt;
    if (is->recompute) {
        m->st.recompute_s += dt;
    } else {
        m->op_s[is->op] = dt;
        m->op_measured[is->op] = true;
    }
    /* compute waited for copies before it: the time it started after the
     * op before it ended is a stall (a gap without such a wait is the
     * host's: it issued the op late); the policy hears of the first of its
     * swap-ins that ended after that op, if any, as late */
    double w = is->waited && m->prev_end >= 0 ? t0 - m->prev_end : 0;
    if (w > 0) {
        m->st.stall_s += w;
        int late = -1;
        for (int k = 0; k < is->n_awaited && late < 0; k++) {
            double c0, c1;
            if (delta_backend_span(m->b, is->awaited_e[k], &c0, &c1) &&
                c1 > m->prev_end)
                late = is->awaited[k];
        }
        if (m->trace)
            delta_trace_span(m->trace, DELTA_TRACK_COMPUTE,
                             late >= 0 ? mg_tname(m, late) : "wait for copies",
                             "stall", m->prev_end, t0, NULL);
        if (late >= 0) mg_notify(m, late, MEV_LATE, w);
    }
    m->prev_end = t1;
    /* the device ran behind the modelled timeline (it stalled, or ops took
     * longer): the rest of it moves by as much */
    if (m->step_t0 < 0)
        delta_backend_event_time(m->b, m->step_begin, &m->step_t0);
    if (m->step_t0 >= 0 && !is->recompute) {
        double lag = (t1 - m->step_t0) - is->vt_end;
        if (lag > 0) m->vt += lag;
    }
    if (m->trace)
        mg_trace_op(m, DELTA_TRACK_COMPUTE, &m->ctx->ops[is->op],
                    is->recompute ? "recompute" : "op", t0, t1);
}

void mg_trace_op(managed *m, delta_trace_track track, const delta_op *op,
                 const char *cat, double t0, double t1) {
    char args[64];
    snprintf(args, sizeof args, "\"op\":%d,\"step\":%lld", op->id,
             (long long)m->step);
    delta_trace_span(m->trace, track, op->name, cat, t0, t1, args);
}

/* A collective's span on the communication stream: its own time, not
 * compute's. */
static void time_collective(managed *m, const mg_issued *is) {
    double t0, t1;
    if (!delta_backend_span(m->b, is->e, &t0, &t1)) return;
    m->op_s[is->op] = t1 - t0;
    m->op_measured[is->op] = true;
    if (m->trace)
        mg_trace_op(m, DELTA_TRACK_COMM, &m->ctx->ops[is->op], "collective",
                    t0, t1);
}

void mg_collect_ops(managed *m) {
    while (m->issued.n) {
        const mg_issued *is = &RING_AT(m->issued, 0);
        if (!delta_backend_query(m->b, is->e)) break; /* in order */
        time_op(m, is);
        RING_POP(m->issued);
    }
    while (m->comm_issued.n) {
        const mg_issued *is = &RING_AT(m->comm_issued, 0);
        if (!delta_backend_query(m->b, is->e)) break;
        time_collective(m, is);
        RING_POP(m->comm_issued);
    }
}

void mg_after_comm(managed *m, delta_stream s, int r) {
    delta_event e = m->comm_ev[r];
    if (!e.seq || s == DELTA_STREAM_COMM) return;
    if (delta_backend_query(m->b, e)) {
        m->comm_ev[r].seq = 0; /* complete: nothing to order after */
        return;
    }
    delta_backend_wait(m->b, s, e);
    if (s == DELTA_STREAM_COMPUTE && m->cur_issue) m->cur_issue->waited = true;
}

/* A collective on the communication stream, after everything compute was
 * given so far: its inputs' producers and the last users of its outputs'
 * and workspace's bytes (the swap-ins and tags compute waited for
 * included). Every operand then carries its event (comm_ev). */
static delta_event launch_collective(managed *m, const delta_kargs *k,
                                     mg_issued *is) {
    const delta_op *op = k->op;
    delta_backend_wait(m->b, DELTA_STREAM_COMM,
                       delta_backend_record(m->b, DELTA_STREAM_COMPUTE));
    DELTA_ASSERT(delta_backend_collective(m->b, k));
    is->e = delta_backend_record(m->b, DELTA_STREAM_COMM);
    for (int j = 0; j < op->n_in + op->n_out; j++) {
        int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
        m->comm_ev[delta_tensor_root(m->ctx, id)] = is->e;
    }
    if (!RING_PUSH(m->comm_issued, *is)) { /* untracked: time it now */
        delta_backend_sync(m->b, is->e);
        time_collective(m, is);
    }
    if (m->blocking) delta_backend_sync(m->b, is->e);
    return is->e;
}

/* Launches op's kernel with its arguments filled in, and queues it for
 * timing. The one place a kernel is run. */
delta_event mg_launch(managed *m, const delta_kargs *k, mg_issued *is) {
    const delta_op *op = k->op;
    m->ticks++;
    if (op->type == DELTA_OP_RESHAPE) {
        /* a view launches nothing and takes no time */
        if (!is->recompute) {
            m->op_s[op->id] = 0;
            m->op_measured[op->id] = true;
        }
        return (delta_event){0};
    }
    if (delta_op_is_collective(op->type) && m->b->ops->collective)
        return launch_collective(m, k, is);
    if (m->issued.n >= m->issued.cap) { /* the run-ahead bound */
        double w0 = managed_now(m);
        delta_backend_throttle(m->b, RING_AT(m->issued, 0).e);
        mg_collect_ops(m);
        double w1 = managed_now(m);
        m->op_wait_s += w1 - w0; /* not the op's host time */
        if (m->trace) mg_trace_op(m, DELTA_TRACK_HOST, op, "throttle", w0, w1);
    }
    double l0 = m->trace ? managed_now(m) : 0;
    delta_backend_run(m->b, k);
    m->vt += managed_op_seconds(m, op->id); /* the modelled timeline */
    is->vt_end = m->vt;
    is->e = delta_backend_record(m->b, DELTA_STREAM_COMPUTE);
    if (m->trace) mg_trace_op(m, DELTA_TRACK_HOST, op, "launch", l0, managed_now(m));
    DELTA_ASSERT(m->issued.n < m->issued.cap);
    RING_AT(m->issued, m->issued.n) = *is;
    m->issued.n++;
    if (m->blocking) delta_backend_sync(m->b, is->e); /* the old runtime */
    mg_collect_ops(m);
    return is->e;
}

