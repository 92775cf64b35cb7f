/* The trainer's setup (train.h): defaults, ranks, the data, the device
 * (device.c), the main shape's program and dry plan (delta_trainer_plan),
 * then the budget, the session and the loader (delta_trainer_start), and
 * freeing it all. */
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "delta/comm.h"
#include "delta/cpu.h"

#define DEFAULT_GPU "v100-16g"

delta_status train_fail(delta_trainer *tr, delta_status st, const char *fmt,
                        ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr->err, sizeof tr->err, fmt, ap);
    va_end(ap);
    return st;
}

void train_info(const delta_trainer *tr, const char *fmt, ...) {
    FILE *f = tr->cfg.info;
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}

double train_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool train_will_evaluate(const delta_trainer *tr) {
    return tr->image && tr->fmnist_dir && !tr->sim &&
           tr->cfg.eval_batches != 0 &&
           tr->rank == 0; /* rank 0 evaluates: its weights are everyone's */
}

delta_train_config delta_train_config_default(void) {
    return (delta_train_config){.lr = -1, .momentum = -1,
                                .weight_decay = -1, .eval_batches = -1};
}

/* This process's rank and the ranks of the run: the comm's (mpirun), or on
 * the sim and in a plan those cfg.ranks stands for. */
static delta_status setup_ranks(delta_trainer *tr) {
    delta_train_config *c = &tr->cfg;
    tr->rank = delta_comm_rank(c->comm);
    tr->ranks = delta_comm_size(c->comm);
    if (c->comm_timeout_s > 0)
        delta_comm_set_timeout(c->comm, c->comm_timeout_s);
    if (tr->sim && tr->ranks > 1)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "the sim backend stands "
                          "for several GPUs in one process: run it without "
                          "mpirun, with --ranks %d", tr->ranks);
    if (c->ranks && tr->ranks > 1 && c->ranks != tr->ranks)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--ranks %d: this run "
                          "has %d ranks (mpirun -np %d); leave --ranks out",
                          c->ranks, tr->ranks, tr->ranks);
    if (c->ranks > 1 && tr->ranks == 1 && !tr->sim && !c->plan_only)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--ranks %d: a run on "
                          "the %s backend has the ranks mpirun starts "
                          "(mpirun -np %d delta train ...); --ranks is for "
                          "--backend sim and delta plan", c->ranks,
                          train_backend_name(c), c->ranks);
    if (c->ranks) tr->ranks = c->ranks;
    char why[512];
    if (train_on_backend(c, "cuda") && tr->ranks > 1 && !c->plan_only &&
        !delta_cuda_nccl_available(why, sizeof why))
        return train_fail(tr, DELTA_ERR_UNSUPPORTED, "%d ranks on --backend "
                          "cuda reduce through NCCL: %s", tr->ranks, why);
    if (c->interconnect && !tr->sim)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--interconnect prices "
                          "the collectives on a simulated GPU (--backend "
                          "sim); real ranks use the link they have");
    return DELTA_OK;
}

/* The learning-rate schedule's and clipping's settings. */
static delta_status check_schedule(delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    const delta_lr_sched *s = &c->lr_sched;
    if ((unsigned)s->kind > DELTA_LR_LINEAR)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--lr-schedule: %d is "
                          "no schedule (constant, cosine or linear)",
                          (int)s->kind);
    if (s->warmup < 0)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--warmup %" PRId64
                          ": the warmup is a number of steps >= 0",
                          s->warmup);
    if (!(s->min_frac >= 0 && s->min_frac <= 1))
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--lr-min %g: the "
                          "fraction of --lr the decay ends at is in [0, 1]",
                          s->min_frac);
    if (delta_lr_sched_varies(s) && s->steps <= 0)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--lr-schedule %s "
                          "with --warmup %" PRId64 " needs the run's total "
                          "steps (lr_sched.steps, --steps) > 0",
                          delta_lr_schedule_name(s->kind), s->warmup);
    if (!(c->grad_clip >= 0) || isinf(c->grad_clip))
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--grad-clip %g: the "
                          "largest global norm is a number >= 0 (0: no "
                          "clipping)", c->grad_clip);
    if (c->grad_clip > 0 && c->zero && tr->ranks > 1)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--grad-clip with --zero "
                          "1: the global norm needs every gradient, but "
                          "each ZeRO-1 rank holds only its shard's; leave "
                          "one of them out");
    return DELTA_OK;
}

/* The model line of the run ("model: mlp, 0.11M parameters, ..."). */
static void info_model(const delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    const delta_model *model = &tr->shapes[0]->model;
    const delta_model_config *m = &model->cfg;
    const char *bf16 = m->precision == DELTA_PRECISION_BF16
                           ? "; precision bf16 (fp32 master weights)" : "";
    char range[48] = "", opt[192];
    /* the optimizer, its schedule and clipping: "adamw lr 0.0003, cosine
     * schedule (warmup 10, to 0.1 x lr at step 100), clip norm 1" */
    int k = snprintf(opt, sizeof opt, "%s lr %g", tr->optimizer_name, tr->lr);
    const delta_lr_sched *ls = &c->lr_sched;
    if (delta_lr_sched_varies(ls) && k > 0 && (size_t)k < sizeof opt)
        k += snprintf(opt + k, sizeof opt - (size_t)k, ", %s schedule "
                      "(warmup %" PRId64 ", to %g x lr at step %" PRId64 ")",
                      delta_lr_schedule_name(ls->kind), ls->warmup,
                      ls->kind == DELTA_LR_CONSTANT ? 1.0 : ls->min_frac,
                      ls->steps);
    if (c->grad_clip > 0 && k > 0 && (size_t)k < sizeof opt)
        snprintf(opt + k, sizeof opt - (size_t)k, ", clip norm %g",
                 c->grad_clip);
    if (c->seq_len_max)
        snprintf(range, sizeof range, "%" PRId64 "..", c->seq_len_min);
    if (tr->image)
        train_info(tr, "model: %s, %.2fM parameters, batch %" PRId64 ", %"
                   PRId64 "x%" PRId64 "x%" PRId64 " images, %" PRId64
                   " classes; %s%s", m->name,
                   (double)model->n_params / 1e6, m->batch, m->channels,
                   m->image_size, m->image_size, m->classes, opt, bf16);
    else
        train_info(tr, "model: %s, %.2fM parameters, batch %" PRId64 " x %s%"
                   PRId64 " tokens, vocab %" PRId64 ", dropout %g; %s%s",
                   m->name, (double)model->n_params / 1e6, m->batch, range,
                   m->seq_len, m->vocab, (double)m->dropout, opt, bf16);
}

/* delta_trainer_plan's work on a fresh trainer; on failure tr->err says
 * why. */
static delta_status plan(delta_trainer *tr) {
    delta_train_config *c = &tr->cfg;
    tr->sim = train_on_backend(c, "sim");
    tr->result.final_loss = NAN;
    tr->result.val_loss = NAN;
    delta_status st = setup_ranks(tr);
    if (st != DELTA_OK) return st;
    if (!c->gpu)
        c->gpu = c->gpu_device ? c->gpu_device->name
                 : c->gpu_file ? c->gpu_file : DEFAULT_GPU;
    /* with a budget, delta decides; without one nothing needs managing */
    if (!c->policy)
        c->policy = c->budget.kind == DELTA_BUDGET_UNLIMITED ? "keep"
                                                             : "delta";
    if (c->threads > 0) delta_cpu_set_threads(c->threads);

    if (!c->model.name)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "no model: set "
                          "model.name to a built-in model (mlp, resnet18, "
                          "gpt2-tiny, bert-tiny, ...: delta_model_names)");
    /* The family decides the data: image_size is set for classifiers. */
    delta_model_config probe = {.name = c->model.name, .batch = 1}, pr;
    char sub[512];
    st = delta_model_resolve(&probe, &pr, sub, sizeof sub);
    if (st != DELTA_OK) return train_fail(tr, st, "%s", sub);
    c->model.name = pr.name;
    tr->image = pr.image_size > 0;
    /* BERT is the one masked language model. */
    bool masked = !tr->image && strncmp(pr.name, "bert", 4) == 0;
    if (tr->image && c->seq_len_max)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--seq-len-range draws "
                          "a sequence length per step for the transformers "
                          "(gpt2-*, bert-*); %s is an image model", pr.name);
    if (!c->model.batch)
        c->model.batch = tr->image ? TRAIN_BATCH_IMAGES : TRAIN_BATCH_TOKENS;
    if (!c->dropout_set)
        c->model.dropout = tr->image ? 0.0f : DELTA_MODEL_DROPOUT_DEFAULT;
    if (c->optimizer == DELTA_TRAIN_OPT_DEFAULT)
        c->optimizer = tr->image ? DELTA_TRAIN_OPT_SGD : DELTA_TRAIN_OPT_ADAMW;
    st = check_schedule(tr);
    if (st != DELTA_OK) return st;

    st = train_setup_data(tr, masked);
    if (st != DELTA_OK) return st;
    if (tr->data)
        train_info(tr, "data: %s", delta_dataset_name(tr->data));
    else
        train_info(tr, "data: none (simulated)");

    /* The backend first, so the programs are fitted to its kernels; a plan
     * alone needs none, except on cuda, whose workspaces are its own. */
    st = train_setup_gpu(tr);
    if (st != DELTA_OK) return st;
    if (!c->plan_only || train_on_backend(c, "cuda")) {
        st = train_make_backend(tr);
        if (st != DELTA_OK) return st;
    }

    /* The main shape: the configured batch at the longest length. */
    double t0 = train_now();
    if (train_shape_index(tr, c->model.batch, c->model.seq_len, &st) < 0)
        return st;
    /* with the logits kept when the run evaluates, as the session keeps
     * them: a 100% budget (and what a plan prints) is what keep needs */
    delta_tensor *outputs[2];
    int n_out = train_outputs(tr, tr->shapes[0], outputs);
    st = delta_dry_plan_build_outputs(tr->shapes[0]->ctx, outputs, n_out,
                                      &tr->plan, sub, sizeof sub);
    tr->result.plan_s = train_now() - t0; /* noted with its session's */
    if (st != DELTA_OK)
        return train_fail(tr, st, "planning the step: %s", sub);
    info_model(tr);
    return DELTA_OK;
}

/* On failure: the message into err, the trainer freed. */
static delta_status give_up(delta_trainer *tr, delta_status st, char *err,
                            size_t err_len) {
    if (err && err_len) snprintf(err, err_len, "%s", tr->err);
    delta_trainer_free(tr);
    return st;
}

delta_status delta_trainer_plan(const delta_train_config *cfg,
                                delta_trainer **out, char *err,
                                size_t err_len) {
    DELTA_ASSERT(cfg && out);
    *out = NULL;
    delta_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return DELTA_ERR_NOMEM;
    }
    tr->cfg = *cfg;
    delta_status st = plan(tr);
    if (st != DELTA_OK) return give_up(tr, st, err, err_len);
    *out = tr;
    return DELTA_OK;
}

/* Each epoch's partial batch and the shapes that follow, in words. */
static void info_epoch(const delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    const delta_model_config *m = &tr->shapes[0]->model.cfg;
    int64_t global = m->batch * tr->ranks;
    int64_t len = tr->loader ? delta_dataset_len(tr->data) : 0;
    int64_t rest = len % (global ? global : 1);
    if (tr->loader && rest / tr->ranks && !c->drop_last)
        train_info(tr, "each epoch ends with a batch of %" PRId64 "%s (%"
                   PRId64 " samples are not a multiple of %" PRId64 "): "
                   "trained as its own shape (--drop-last skips it)",
                   rest / tr->ranks, tr->ranks > 1 ? " per rank" : "", len,
                   global);
    if (tr->loader && rest % tr->ranks && !c->drop_last)
        train_info(tr, "each epoch's last %" PRId64 " sample%s, left over "
                   "when its last batch is shared among %d ranks, %s "
                   "skipped", rest % tr->ranks,
                   rest % tr->ranks == 1 ? "" : "s", tr->ranks,
                   rest % tr->ranks == 1 ? "is" : "are");
    char len_str[48] = "";
    if (!tr->image)
        snprintf(len_str, sizeof len_str, " x %" PRId64 " tokens",
                 tr->shapes[0]->seq_len);
    if (c->seq_len_max || (tr->loader && !c->drop_last && rest / tr->ranks))
        train_info(tr, "shapes change during the run: each shape's program "
                   "is built once and reused%s (batch %" PRId64 "%s)",
                   tr->budget_bytes ? "; the budget is one figure, set "
                   "against the largest shape" : "; the largest shape",
                   m->batch, len_str);
}

/* The loader of the training batches, sharded among the ranks. */
static delta_status open_loader(delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    const delta_model_config *m = &tr->shapes[0]->model.cfg;
    const delta_model *model = &tr->shapes[0]->model;
    delta_status st;
    char sub[512];
    tr->loader = delta_loader_new(tr->data, m->batch, c->seed,
                                  !c->no_shuffle, c->drop_last, &st, sub,
                                  sizeof sub);
    if (!tr->loader) return train_fail(tr, st, "%s", sub);
    if (tr->ranks > 1 &&
        delta_loader_set_shard(tr->loader, tr->rank, tr->ranks) != DELTA_OK)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--drop-last: %" PRId64
                          " samples hold no global batch of %d ranks x %"
                          PRId64 "; give a smaller --batch or fewer ranks",
                          delta_dataset_len(tr->data), tr->ranks, m->batch);
    if (delta_batch_alloc(&tr->batch, tr->data, m->batch) != DELTA_OK)
        return train_fail(tr, DELTA_ERR_NOMEM, "out of memory for a batch");
    delta_data_info in = delta_dataset_info(tr->data);
    DELTA_ASSERT(delta_tensor_bytes(model->input) ==
                 (size_t)(m->batch * in.input_numel) * 4);
    DELTA_ASSERT(delta_tensor_bytes(model->target) ==
                 (size_t)(m->batch * in.target_numel) * 4);
    return DELTA_OK;
}

delta_status delta_trainer_start(delta_trainer *tr) {
    if (tr->cfg.plan_only || tr->started)
        return train_fail(tr, DELTA_ERR_STATE, "delta_trainer_start: %s",
                          tr->started ? "the trainer has started already"
                                      : "the trainer was made for a plan "
                                        "alone (plan_only)");
    tr->started = true;
    delta_status st = train_set_budget(tr);
    if (st != DELTA_OK) return st;
    double t0 = train_now(), main_s = tr->result.plan_s;
    tr->result.plan_s = 0;
    st = train_open_session(tr, 0);
    train_note_plan(tr, main_s + train_now() - t0);
    if (st == DELTA_OK) st = train_write_constants(tr);
    if (st == DELTA_OK && tr->data && !tr->sim) st = open_loader(tr);
    if (st == DELTA_OK) st = train_open_validation(tr);
    if (st == DELTA_OK) info_epoch(tr);
    return st;
}

delta_status delta_trainer_new(const delta_train_config *cfg,
                               delta_trainer **out, char *err,
                               size_t err_len) {
    delta_trainer *tr;
    delta_status st = delta_trainer_plan(cfg, &tr, err, err_len);
    if (st != DELTA_OK) {
        *out = NULL;
        return st;
    }
    st = delta_trainer_start(tr);
    if (st != DELTA_OK) {
        *out = NULL;
        return give_up(tr, st, err, err_len);
    }
    *out = tr;
    return DELTA_OK;
}

void delta_trainer_set_trace(delta_trainer *tr, delta_trace *trace) {
    DELTA_ASSERT(!tr->session);
    tr->cfg.trace = trace;
}

void delta_trainer_set_steps_before(delta_trainer *tr, int64_t steps) {
    tr->steps_before = steps;
}

void delta_trainer_end_session(delta_trainer *tr) {
    delta_session_free(tr->session);
    tr->session = NULL;
}

void delta_trainer_free(delta_trainer *tr) {
    if (!tr) return;
    delta_session_free(tr->session);
    delta_backend_free(tr->backend);
    delta_gpu_file_free(tr->gpu_loaded); /* after the backend that used it */
    delta_plan_cache_free(tr->plans);
    delta_batch_release(&tr->batch);
    delta_loader_free(tr->loader);
    delta_dataset_free(tr->data);
    delta_batch_release(&tr->val_batch);
    delta_loader_free(tr->val_loader);
    delta_dataset_free(tr->val_data);
    train_shapes_free(tr);
    free(tr->times);
    free(tr->units);
    free(tr);
}
