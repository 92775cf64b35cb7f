/* The step loop (delta_trainer_train): per step, the sequence length and
 * the batch are drawn, the session moves to the step's shape when it
 * changed, the batch is copied in, the session runs the step, the loss is
 * read (the ranks' mean under data parallel), the figures are added to the
 * run's, the validation loss is computed when due (validate.c) and the
 * caller is called back. */
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "core/median.h"
#include "core/rng.h"
#include "delta/comm.h"

/* Adds one step's figures to the run's: peaks as a max, the rest summed. */
static void add_step(delta_train_result *r, const delta_step_stats *s) {
    if (s->peak_device_bytes > r->peak_device_bytes)
        r->peak_device_bytes = s->peak_device_bytes;
    r->swap_out_bytes += s->swap_out_bytes;
    r->swap_in_bytes += s->swap_in_bytes;
    r->swap_outs += s->swap_outs;
    r->swap_ins += s->swap_ins;
    r->drops += s->drops;
    r->dropped_bytes += s->dropped_bytes;
    r->recomputed_ops += s->recomputed_ops;
    r->recompute_s += s->recompute_s;
    r->stall_s += s->stall_s;
    r->defrag_moves += s->defrag_moves;
    r->defrag_bytes += s->defrag_bytes;
    r->host_syncs += s->host_syncs;
    r->throttle_waits += s->throttle_waits;
    r->host_busy_s += s->host_busy_s;
    r->device_busy_s += s->device_busy_s;
}

delta_status train_write_batch(delta_trainer *tr, const delta_batch *b) {
    const delta_model *m = &tr->shapes[tr->cur]->model;
    delta_status st = delta_session_write(tr->session, m->input, b->input,
                                          delta_tensor_bytes(m->input));
    if (st == DELTA_OK)
        st = delta_session_write(tr->session, m->target, b->target,
                                 delta_tensor_bytes(m->target));
    if (st == DELTA_OK && m->mask)
        st = delta_session_write(tr->session, m->mask, b->mask,
                                 delta_tensor_bytes(m->mask));
    if (st != DELTA_OK)
        return train_fail(tr, st, "writing a batch: %s",
                          delta_session_error(tr->session));
    return DELTA_OK;
}

/* Sequence length of the step with session step counter `step`: uniform
 * in [seq_len_min, seq_len_max] from (seed, step) when a range is set,
 * else the main shape's. */
#define SEQ_SALT 0x7365716c656e67ULL
static int64_t step_seq_len(const delta_trainer *tr, int64_t step) {
    const delta_train_config *c = &tr->cfg;
    if (tr->image) return 0;
    if (!c->seq_len_max) return tr->shapes[0]->seq_len;
    uint64_t r = delta_mix64(delta_mix64(c->seed ^ SEQ_SALT) ^
                             ((uint64_t)step * 0x9e3779b97f4a7c15ULL));
    uint64_t span = (uint64_t)(c->seq_len_max - c->seq_len_min + 1);
    return c->seq_len_min +
           (int64_t)(((unsigned __int128)r * span) >> 64);
}

/* Room for `more` steps' times and units after those done. */
static delta_status reserve_steps(delta_trainer *tr, int64_t more) {
    int64_t need = tr->result.steps_done + more;
    if (need <= tr->cap_steps) return DELTA_OK;
    double *t = realloc(tr->times, sizeof *t * (size_t)need);
    if (t) tr->times = t;
    double *u = t ? realloc(tr->units, sizeof *u * (size_t)need) : NULL;
    if (u) tr->units = u;
    if (!t || !u) return train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
    tr->cap_steps = need;
    return DELTA_OK;
}

/* The run's median step and rate from the steps' times and units. One
 * shape: per the median step (robust to a slow first step); with
 * changing shapes, the median of the steps' own rates. */
static void summarize(delta_trainer *tr) {
    delta_train_result *r = &tr->result;
    int64_t n = r->steps_done;
    double *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
    if (!tmp) return; /* the figures stay those of the last summary */
    bool one_shape = true;
    for (int64_t i = 0; i < n; i++) one_shape &= tr->units[i] == tr->units[0];
    for (int64_t i = 0; i < n; i++) tmp[i] = tr->times[i];
    r->median_step_s = delta_median(tmp, n);
    if (one_shape) {
        r->units_per_s = r->median_step_s > 0 && n
                             ? tr->units[0] / r->median_step_s : 0;
    } else {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = tr->times[i] > 0 ? tr->units[i] / tr->times[i] : 0;
        r->units_per_s = delta_median(tmp, n);
    }
    free(tmp);
}

/* One step: its shape, its batch, the session's run, the loss. */
static delta_status step_once(delta_trainer *tr, delta_train_step *out,
                              delta_step_stats *s) {
    const delta_train_config *c = &tr->cfg;
    delta_train_result *r = &tr->result;
    const int64_t batch = tr->shapes[0]->batch; /* the configured one */
    int64_t T = step_seq_len(tr, delta_session_step(tr->session));
    int64_t n = batch;
    if (tr->loader) {
        delta_loader_next_len(tr->loader, &tr->batch, T);
        n = tr->batch.size;
    }
    int before = tr->cur;
    delta_status st = train_use_shape(tr, n, T);
    if (st != DELTA_OK) return st;
    if (tr->cur != before) r->switches++;
    if (tr->loader) {
        st = train_write_batch(tr, &tr->batch);
        if (st != DELTA_OK) return st;
    }
    if (!tr->shapes[tr->cur]->trained) {
        tr->shapes[tr->cur]->trained = true;
        r->shapes++;
    }
    r->partial_batches += n < batch;
    /* the step's learning rate: written when the schedule varies (the
     * session's step counter counts from the start of training, so a
     * resumed run continues the schedule) */
    const train_shape *sh = tr->shapes[tr->cur];
    float lr = delta_lr_sched_at(&c->lr_sched, tr->lr,
                                 delta_session_step(tr->session));
    if (sh->lr) {
        st = delta_session_write(tr->session, sh->lr, &lr, sizeof lr);
        if (st != DELTA_OK)
            return train_fail(tr, st, "writing the learning rate: %s",
                              delta_session_error(tr->session));
    }
    st = delta_session_run(tr->session, DELTA_RUN_STEP, s);
    if (st != DELTA_OK)
        /* the host store's cap is only worth raising when one was set;
         * otherwise the host itself is out of memory */
        return train_fail(
            tr, st, "step %" PRId64 ": %s%s",
            tr->steps_before + r->steps_done + 1,
            delta_session_error(tr->session),
            st != DELTA_ERR_NOMEM ? ""
            : c->host_memory ? "; give the host store more (--host-memory) "
                               "or the device a larger --budget, so that "
                               "less is swapped"
                             : "; the host is out of memory: free some, or "
                               "give the device a larger --budget, so that "
                               "less is swapped");
    double loss = NAN, grad_norm = NAN;
    if (!tr->sim) {
        float l = 0;
        st = delta_session_read(tr->session,
                                tr->shapes[tr->cur]->model.loss, &l,
                                sizeof l);
        if (st != DELTA_OK)
            return train_fail(tr, st, "reading the loss: %s",
                              delta_session_error(tr->session));
        loss = l;
        if (sh->grad_norm) {
            float g = 0;
            st = delta_session_read(tr->session, sh->grad_norm, &g,
                                    sizeof g);
            if (st != DELTA_OK)
                return train_fail(tr, st, "reading the gradients' norm: %s",
                                  delta_session_error(tr->session));
            grad_norm = g;
        }
        /* data parallel: the mean over the ranks (summed in rank order:
         * every rank reports the same figure) */
        if (tr->ranks > 1) {
            delta_comm_sum(c->comm, &loss, 1, "the step's loss");
            loss /= tr->ranks;
        }
    }
    *out = (delta_train_step){
        .step = tr->steps_before + r->steps_done + 1, .loss = loss,
        .stats = s, .batch = n, .seq_len = T, .val_loss = NAN,
        .lr = lr, .grad_norm = grad_norm,
        .units = (double)tr->ranks * (tr->image ? (double)n
                                                : (double)(n * T))};
    return DELTA_OK;
}

delta_status delta_trainer_train(delta_trainer *tr, int64_t steps,
                                 delta_train_step_fn fn, void *user_data) {
    if (!tr->session)
        return train_fail(tr, DELTA_ERR_STATE, "delta_trainer_train: %s",
                          tr->started ? "the session has ended"
                                      : "call delta_trainer_start first");
    delta_train_result *r = &tr->result;
    delta_status st = reserve_steps(tr, steps > 0 ? steps : 0);
    if (st != DELTA_OK) return st;
    double t0 = train_now();
    bool go_on = true;
    for (int64_t i = 0; i < steps; i++) {
        delta_train_step step;
        delta_step_stats s = {0};
        st = step_once(tr, &step, &s);
        if (st != DELTA_OK) break;
        tr->times[r->steps_done] = s.step_s;
        tr->units[r->steps_done] = step.units;
        r->steps_done++;
        r->final_loss = step.loss;
        add_step(r, &s);
        if (train_validation_due(tr, step.step, i == steps - 1)) {
            st = delta_trainer_validate(tr, &step.val_loss);
            if (st != DELTA_OK) break;
        }
        go_on = !fn || fn(&step, user_data);
        if (!tr->sim && !isfinite(step.loss)) {
            st = train_fail(tr, DELTA_ERR_STATE, "the loss is %g at step %"
                            PRId64 ": training diverged; try a lower --lr "
                            "(now %g)", step.loss, step.step, tr->lr);
            break;
        }
        if (!go_on) break;
    }
    /* data parallel: the largest rank's peak (the budget is per rank), now,
     * while every rank is here (rank 0 alone evaluates afterwards); not
     * when the callback stopped the run, which may be this rank's alone */
    if (st == DELTA_OK && go_on && tr->ranks > 1 && !tr->sim) {
        double peak = (double)r->peak_device_bytes;
        delta_comm_max(tr->cfg.comm, &peak, 1, "the ranks' peaks");
        r->peak_device_bytes = (size_t)peak;
    }
    r->train_s += train_now() - t0;
    summarize(tr);
    return st;
}
