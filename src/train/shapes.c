/* Step programs per shape and switching sessions between them (train.h,
 * "Changing shapes"): a shape's program (model, backward, data-parallel
 * collectives, optimizer) is built the first time a step has that shape
 * and kept; a step of another shape than the session's moves parameters
 * and state through host buffers into that shape's new session. */
#include "train_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SGD_LR 0.05
#define DEFAULT_SGD_MOMENTUM 0.9
#define DEFAULT_SGD_WEIGHT_DECAY 0.0
#define DEFAULT_ADAMW_LR 3e-4
#define DEFAULT_ADAMW_BETA1 0.9
#define DEFAULT_ADAMW_WEIGHT_DECAY 0.01


/* Writes the model's constants (positions, token types) into the session
 * through host buffers: delta_model_fill_constants asks for a tensor's
 * data, the buffers are then copied in. */
typedef struct const_buf {
    const delta_tensor *t[4];
    void *data[4];
    int n;
    bool nomem;
} const_buf;

static void *const_data_of(void *ud, const delta_tensor *t) {
    const_buf *cb = ud;
    for (int i = 0; i < cb->n; i++)
        if (cb->t[i] == t) return cb->data[i];
    DELTA_ASSERT(cb->n < 4);
    size_t bytes = delta_tensor_bytes(t);
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        /* Written into a scratch that is thrown away; reported below. */
        static int64_t scratch[1024];
        cb->nomem = true;
        DELTA_ASSERT(bytes <= sizeof scratch);
        return scratch;
    }
    cb->t[cb->n] = t;
    cb->data[cb->n++] = p;
    return p;
}

delta_status train_write_constants(delta_trainer *tr) {
    const_buf cb = {0};
    delta_model_fill_constants(&tr->shapes[tr->cur]->model, const_data_of,
                               &cb);
    delta_status st = cb.nomem ? DELTA_ERR_NOMEM : DELTA_OK;
    if (st != DELTA_OK)
        train_fail(tr, st, "out of memory filling the constants");
    for (int i = 0; i < cb.n; i++) {
        if (st == DELTA_OK) {
            st = delta_session_write(tr->session, cb.t[i], cb.data[i],
                                     delta_tensor_bytes(cb.t[i]));
            if (st != DELTA_OK)
                train_fail(tr, st, "writing '%s': %s",
                           delta_tensor_name(cb.t[i]),
                           delta_session_error(tr->session));
        }
        free(cb.data[i]);
    }
    return st;
}

/* Builds the step program (model, backward, optimizer) of shape (batch,
 * seq_len; 0 keeps the configured length) into *sh. */
static delta_status build_shape(delta_trainer *tr, int64_t batch,
                                int64_t seq_len, train_shape *sh) {
    delta_train_config *c = &tr->cfg;
    memset(sh, 0, sizeof *sh);
    delta_model_config mc = c->model;
    mc.batch = batch;
    if (seq_len) mc.seq_len = seq_len;
    sh->batch = batch;
    sh->seq_len = tr->image ? 0 : seq_len;
    sh->ctx = delta_ctx_new();
    if (!sh->ctx) return train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
    delta_ctx_set_seed(sh->ctx, c->seed);
    delta_status st = delta_model_build(sh->ctx, &mc, &sh->model);
    if (st != DELTA_OK) return train_fail(tr, st, "%s", sh->model.error);
    if (!tr->image) sh->seq_len = sh->model.cfg.seq_len;
    sh->n_model_tensors = delta_ctx_n_tensors(sh->ctx);
    delta_ctx *ctx = sh->ctx;
    st = delta_backward(ctx, sh->model.loss);
    /* data parallel: the gradients' collectives inside backward, ZeRO-1's
     * shards (the optimizer then updates this rank's parameters only) */
    if (st == DELTA_OK && tr->ranks > 1)
        st = delta_data_parallel(ctx, &(delta_dp_opts){
            .ranks = tr->ranks, .rank = tr->rank, .zero = c->zero,
            .bucket_bytes = c->bucket_bytes});
    /* a varying schedule: the step's lr is an input written every step;
     * clipping: the norm's ops before the updates */
    delta_optim_extras x = {.grad_clip = (float)c->grad_clip};
    if (st == DELTA_OK && delta_lr_sched_varies(&c->lr_sched)) {
        sh->lr = delta_input(ctx, "lr", DELTA_F32, 0, NULL);
        x.lr_tensor = sh->lr;
        if (!sh->lr) st = delta_ctx_status(ctx);
    }
    if (st == DELTA_OK) {
        bool sgd = c->optimizer == DELTA_TRAIN_OPT_SGD;
        tr->optimizer_name = sgd ? "sgd" : "adamw";
        if (sgd) {
            tr->lr = c->lr >= 0 ? c->lr : DEFAULT_SGD_LR;
            tr->momentum = c->momentum >= 0 ? c->momentum
                                            : DEFAULT_SGD_MOMENTUM;
            tr->weight_decay = c->weight_decay >= 0
                                   ? c->weight_decay
                                   : DEFAULT_SGD_WEIGHT_DECAY;
            st = delta_optimizer_sgd_with(ctx, (delta_sgd_opts){
                .lr = (float)tr->lr,
                .momentum = (float)tr->momentum,
                .weight_decay = (float)tr->weight_decay}, &x);
        } else {
            tr->lr = c->lr >= 0 ? c->lr : DEFAULT_ADAMW_LR;
            tr->momentum = c->momentum >= 0 ? c->momentum
                                            : DEFAULT_ADAMW_BETA1;
            tr->weight_decay = c->weight_decay >= 0
                                   ? c->weight_decay
                                   : DEFAULT_ADAMW_WEIGHT_DECAY;
            st = delta_optimizer_adamw_with(ctx, (delta_adamw_opts){
                .lr = (float)tr->lr,
                .beta1 = (float)tr->momentum,
                .beta2 = 0.999f,
                .eps = 1e-8f,
                .weight_decay = (float)tr->weight_decay}, &x);
        }
    }
    if (st == DELTA_OK && c->grad_clip > 0)
        sh->grad_norm = delta_ctx_find(ctx, "grad_norm");
    if (st != DELTA_OK)
        return train_fail(tr, st, "building the step of %s: %s",
                          c->model.name, delta_ctx_error(ctx));
    /* What a session change carries over: parameters and state
     * (optimizer moments, running stats). Constants are a function of the
     * shape and are written afresh (train_write_constants). */
    int nt = delta_ctx_n_tensors(ctx);
    sh->persist = malloc(sizeof *sh->persist * (size_t)(nt ? nt : 1));
    if (!sh->persist) return train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        delta_tensor *x = delta_ctx_tensor(ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(x);
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE)
            sh->persist[sh->n_persist++] = x;
    }
    /* the backend's kernels' workspace before anything is planned (cuda:
     * timed cuDNN choices), so the plan is the session's */
    delta_backend_fit_program(tr->backend, ctx);
    return DELTA_OK;
}

static void shape_free(train_shape *sh) {
    if (!sh) return;
    delta_ctx_free(sh->ctx);
    free(sh->persist);
    free(sh);
}

/* "batch 64" or "batch 8 x 37 tokens", for messages. */
static const char *shape_str(const delta_trainer *tr, const train_shape *sh,
                             char *buf, size_t n) {
    if (tr->image)
        snprintf(buf, n, "batch %" PRId64, sh->batch);
    else
        snprintf(buf, n, "batch %" PRId64 " x %" PRId64 " tokens", sh->batch,
                 sh->seq_len);
    return buf;
}

/* The shape (batch, seq_len)'s index (train_impl.h). A new program must
 * carry the same parameters and state as the main one. */
int train_shape_index(delta_trainer *tr, int64_t batch, int64_t seq_len,
                      delta_status *st) {
    *st = DELTA_OK;
    if (tr->image) seq_len = 0;
    for (int i = 0; i < tr->n_shapes; i++)
        if (tr->shapes[i]->batch == batch &&
            tr->shapes[i]->seq_len == seq_len)
            return i;
    if (tr->n_shapes == tr->cap_shapes) {
        int cap = tr->cap_shapes ? 2 * tr->cap_shapes : 4;
        train_shape **ns = realloc(tr->shapes, sizeof *ns * (size_t)cap);
        if (!ns) {
            *st = train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
            return -1;
        }
        tr->shapes = ns;
        tr->cap_shapes = cap;
    }
    train_shape *sh = malloc(sizeof *sh);
    if (!sh) {
        *st = train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
        return -1;
    }
    *st = build_shape(tr, batch, seq_len, sh);
    if (*st != DELTA_OK) {
        shape_free(sh);
        return -1;
    }
    tr->shapes[tr->n_shapes++] = sh;
    tr->result.programs = tr->n_shapes;
    if (tr->n_shapes == 1) return 0;
    const train_shape *m = tr->shapes[0];
    bool same = sh->n_persist == m->n_persist;
    for (int k = 0; same && k < m->n_persist; k++)
        same = !strcmp(delta_tensor_name(sh->persist[k]),
                       delta_tensor_name(m->persist[k])) &&
               delta_tensor_bytes(sh->persist[k]) ==
                   delta_tensor_bytes(m->persist[k]);
    if (!same) {
        char a[64], b[64];
        *st = train_fail(tr, DELTA_ERR_STATE, "the programs of %s and %s "
                         "differ in their parameters or state, so training "
                         "cannot move between them",
                         shape_str(tr, m, a, sizeof a),
                         shape_str(tr, sh, b, sizeof b));
        shape_free(sh);
        tr->n_shapes--;
        tr->result.programs = tr->n_shapes;
        return -1;
    }
    return tr->n_shapes - 1;
}

void train_shapes_free(delta_trainer *tr) {
    if (tr->persist_buf && tr->n_shapes)
        for (int k = 0; k < tr->shapes[0]->n_persist; k++)
            free(tr->persist_buf[k]);
    free(tr->persist_buf);
    tr->persist_buf = NULL;
    for (int i = 0; i < tr->n_shapes; i++) shape_free(tr->shapes[i]);
    free(tr->shapes);
    tr->shapes = NULL;
    tr->n_shapes = tr->cap_shapes = 0;
}

/* Adds the seconds one shape took to get ready (its program built, the
 * first time, and its session created) to the run's planning time. */
void train_note_plan(delta_trainer *tr, double s) {
    tr->result.plan_s += s;
    if (s > tr->result.plan_max_s) tr->result.plan_max_s = s;
}

int train_outputs(const delta_trainer *tr, const train_shape *sh,
                  delta_tensor **out) {
    int n = 0;
    if (train_will_evaluate(tr)) out[n++] = sh->model.logits;
    if (sh->grad_norm) out[n++] = sh->grad_norm;
    return n;
}

delta_status train_open_session(delta_trainer *tr, int i) {
    DELTA_ASSERT(!tr->session);
    train_shape *sh = tr->shapes[i];
    delta_tensor *outputs[2];
    int n_out = train_outputs(tr, sh, outputs);
    delta_session_opts so = {
        .backend = tr->backend,
        .budget_bytes = tr->budget_bytes,
        .policy = tr->cfg.policy,
        .outputs = outputs,
        .n_outputs = n_out,
        .trace = tr->cfg.trace,
        .plans = tr->plans,
        .host_limit_bytes = tr->cfg.host_memory,
        .run_ahead = tr->cfg.run_ahead,
        .sync_every_op = tr->cfg.sync_every_op,
        .check_streams = tr->cfg.check_streams,
        .comm = tr->sim ? NULL : tr->cfg.comm,
    };
    delta_status st;
    char sub[512], sh_str[64];
    tr->session = delta_session_new(sh->ctx, &so, &st, sub, sizeof sub);
    if (!tr->session) {
        if (st == DELTA_OK) st = DELTA_ERR_STATE;
        if (i == 0) return train_fail(tr, st, "%s", sub);
        return train_fail(tr, st, "%s: %s",
                          shape_str(tr, sh, sh_str, sizeof sh_str), sub);
    }
    tr->cur = i;
    return DELTA_OK;
}

delta_status train_use_shape(delta_trainer *tr, int64_t batch,
                             int64_t seq_len) {
    if (tr->image) seq_len = 0;
    const train_shape *cur = tr->shapes[tr->cur];
    if (tr->session && cur->batch == batch && cur->seq_len == seq_len)
        return DELTA_OK;
    double t0 = train_now();
    delta_status st;
    int i = train_shape_index(tr, batch, seq_len, &st);
    double build_s = train_now() - t0;
    if (i < 0) return st;
    train_shape *from = tr->shapes[tr->cur], *to = tr->shapes[i];
    /* sim computes no values: nothing to carry */
    bool carry = !tr->sim;
    int n = from->n_persist;
    t0 = train_now();
    if (carry && !tr->persist_buf) {
        tr->persist_buf = calloc((size_t)(n ? n : 1),
                                 sizeof *tr->persist_buf);
        if (!tr->persist_buf)
            return train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
        for (int k = 0; k < n; k++) {
            size_t bytes = delta_tensor_bytes(from->persist[k]);
            tr->persist_buf[k] = malloc(bytes ? bytes : 1);
            if (!tr->persist_buf[k])
                return train_fail(tr, DELTA_ERR_NOMEM, "out of memory for a "
                                  "host copy of '%s'",
                                  delta_tensor_name(from->persist[k]));
        }
    }
    for (int k = 0; carry && k < n; k++) {
        const delta_tensor *x = from->persist[k];
        st = delta_session_read(tr->session, x, tr->persist_buf[k],
                                delta_tensor_bytes(x));
        if (st != DELTA_OK)
            return train_fail(tr, st, "reading '%s' to change shapes: %s",
                              delta_tensor_name(x),
                              delta_session_error(tr->session));
    }
    int64_t step = delta_session_step(tr->session);
    tr->result.switch_s += train_now() - t0;
    delta_session_free(tr->session);
    tr->session = NULL;
    t0 = train_now();
    st = train_open_session(tr, i);
    train_note_plan(tr, build_s + train_now() - t0);
    if (st != DELTA_OK) return st;
    t0 = train_now();
    delta_session_set_step(tr->session, step);
    for (int k = 0; carry && k < n; k++) {
        const delta_tensor *x = to->persist[k];
        st = delta_session_write(tr->session, x, tr->persist_buf[k],
                                 delta_tensor_bytes(x));
        if (st != DELTA_OK)
            return train_fail(tr, st, "writing '%s' to change shapes: %s",
                              delta_tensor_name(x),
                              delta_session_error(tr->session));
    }
    st = train_write_constants(tr);
    tr->result.switch_s += train_now() - t0;
    return st;
}
