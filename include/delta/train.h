/* delta — the trainer: a built-in model (models.h) trained on data
 * (data.h) inside a device budget, as `delta train` does it, in a few
 * calls:
 *
 *     delta_train_config cfg = delta_train_config_default();
 *     cfg.model.name = "resnet18";
 *     cfg.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT,
 *                                 .percent = 50};
 *     delta_trainer *tr;
 *     if (delta_trainer_new(&cfg, &tr, err, sizeof err)) ...;
 *     delta_trainer_train(tr, 100, on_step, NULL);  // a callback a step
 *     delta_trainer_evaluate(tr);       // Fashion-MNIST's test split
 *     delta_trainer_free(tr);
 *
 * What it does: picks the data (Fashion-MNIST, a text file or synthetic
 * samples) and fits the model to it; builds the step program (model,
 * backward, data-parallel collectives, optimizer); sizes the budget against
 * the dry plan (a percentage is of its unconstrained peak); makes the
 * backend by name (delta_backend_new) and places the program in a session
 * with the policy named (delta with a budget, keep without); then trains,
 * copying each batch into the session and calling the caller back after
 * every step, and evaluates.
 *
 * Changing shapes. A step program is static per shape (batch, sequence
 * length). The run's main shape is the configured batch at the longest
 * sequence length; a step whose shape differs (an epoch's last, shorter
 * batch; a length drawn per step with seq_len_min..seq_len_max) runs the
 * program of its shape, built the first time and kept. Switching reads
 * every parameter and state tensor out of the current session into host
 * buffers, frees it, creates the new shape's session on the same backend
 * with the same budget, policy, trace and plan cache, writes them back and
 * continues the step counter, so the run is the same as one long session
 * would have been. The budget is one number of bytes for the whole run.
 *
 * Messages name the settings by the `delta train` options that set them
 * (--batch is model.batch, --seq-len-range seq_len_min:seq_len_max, ...),
 * which the fields below follow. */
#ifndef DELTA_TRAIN_H
#define DELTA_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "delta/backend.h"
#include "delta/data.h"
#include "delta/dryplan.h"
#include "delta/models.h"
#include "delta/session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_trainer delta_trainer;

typedef enum delta_train_optimizer {
    DELTA_TRAIN_OPT_DEFAULT = 0,  /* sgd for image models, adamw for
                                     transformers */
    DELTA_TRAIN_OPT_SGD,
    DELTA_TRAIN_OPT_ADAMW,
} delta_train_optimizer;

typedef enum delta_budget_kind {
    DELTA_BUDGET_UNLIMITED = 0,   /* on sim: the simulated GPU's memory */
    DELTA_BUDGET_PERCENT,         /* of the main shape's unconstrained peak */
    DELTA_BUDGET_BYTES,
} delta_budget_kind;

typedef struct delta_budget {
    delta_budget_kind kind;
    double percent;               /* DELTA_BUDGET_PERCENT: > 0 */
    size_t bytes;                 /* DELTA_BUDGET_BYTES: > 0 */
} delta_budget;

/* The learning rate of each step (llm.c's schedulers, train_gpt2.cu):
 * with lr the peak, W warmup steps, N the schedule's steps (the run's
 * total: a resumed run continues the same schedule), s the 0-based step
 * and lr_min = lr * min_frac,
 *   s < W:    lr * (s + 1) / W                      (linear warmup from 0)
 *   constant: lr
 *   cosine:   lr_min + 0.5 (1 + cos(pi r)) (lr - lr_min)
 *   linear:   lr - r (lr - lr_min)
 * with r = (s - W) / (N - W), taken as 1 past the schedule's end (s >= N,
 * or N <= W). Computed in double and rounded once to the float the
 * optimizer reads, on the host, so every policy, backend and rank sees
 * the same bits. As in llm.c the last step (s = N - 1) has r < 1: the
 * decay reaches lr_min only past the end. W > N is allowed: the run then
 * stays in warmup. */
typedef enum delta_lr_schedule {
    DELTA_LR_CONSTANT = 0,
    DELTA_LR_COSINE,
    DELTA_LR_LINEAR,
} delta_lr_schedule;

typedef struct delta_lr_sched {
    delta_lr_schedule kind;
    int64_t warmup;               /* W >= 0 */
    double min_frac;              /* in [0, 1]; llm.c's final_lr_frac */
    int64_t steps;                /* N: needed (> 0) when the lr varies */
} delta_lr_sched;

/* The learning rate of 0-based step `step` for peak lr (above). */
DELTA_API float delta_lr_sched_at(const delta_lr_sched *s, double lr,
                                  int64_t step);
/* Whether it varies (a decay or a warmup): else every step is lr. */
DELTA_API bool delta_lr_sched_varies(const delta_lr_sched *s);
/* "constant", "cosine", "linear"; by name (false: no such schedule). */
DELTA_API const char *delta_lr_schedule_name(delta_lr_schedule k);
DELTA_API bool delta_lr_schedule_find(const char *name, delta_lr_schedule *k);

/* A run's settings. Start from delta_train_config_default() (or zero it
 * and set lr, momentum, weight_decay and eval_batches to -1), then set
 * what you want; fields left at their zero take the default said. */
typedef struct delta_train_config {
    /* name (required), batch, precision and overrides; 0 = the model's
     * or the data's value (batch: 64 images, 8 token sequences). dropout
     * is only read when dropout_set (else 0 for image models, the model's
     * default for transformers). */
    delta_model_config model;
    bool dropout_set;
    /* NULL: Fashion-MNIST for image models when the dataset is installed
     * (DELTA_FASHION_MNIST_DIR in the environment moves it; else synthetic
     * images at its shape, said on `info`), synthetic for transformers; on
     * sim the model's own shapes and no data. Else "fashion-mnist",
     * "synthetic", a directory of Fashion-MNIST idx files (image models)
     * or a text file read as bytes (transformers). */
    const char *data;
    uint64_t seed;                /* parameters, data order, dropout */
    bool no_shuffle;              /* the data in its order */
    bool drop_last;               /* skip an epoch's partial batch */
    /* transformers: each step draws its sequence length uniformly in
     * [seq_len_min, seq_len_max] from (seed, step); 0: one length */
    int64_t seq_len_min, seq_len_max;
    delta_train_optimizer optimizer;
    /* < 0: the optimizer's default (sgd: lr 0.05, momentum 0.9, weight
     * decay 0; adamw: lr 3e-4, beta1 (momentum) 0.9, weight decay 0.01) */
    double lr, momentum, weight_decay;
    /* The learning-rate schedule (above; lr is its peak). A varying one
     * makes the optimizer read the step's lr from a scalar INPUT tensor
     * "lr" the trainer writes before each step; a constant one without
     * warmup keeps lr an attribute (the program of before). */
    delta_lr_sched lr_sched;
    /* > 0: clip the gradients by global norm to this (torch's
     * clip_grad_norm_, llm.c's 1.0; delta_optim_extras in graph.h); each
     * step's norm is in delta_train_step.grad_norm. 0: off (the default,
     * so runs of before are unchanged). Not with zero 1. */
    double grad_clip;
    int threads;                  /* > 0: delta_cpu_set_threads */
    /* test batches delta_trainer_evaluate runs (Fashion-MNIST only):
     * < 0 the whole test split, 0 no evaluation (the logits are then not
     * kept, which the dry plan and a percentage budget see) */
    int64_t eval_batches;
    /* Language models: a validation file, read as `data` is (an llm.c
     * token file or text), with the training data's sequence length and
     * vocab. Its mean loss in eval mode over eval_batches batches from its
     * start, in file order (< 0: 20 batches, llm.c's default, or as many
     * as the file holds), is computed after every val_every-th step (0:
     * only after the last step of each delta_trainer_train call) and
     * handed to the step callback; NULL: none. Data parallel: each rank
     * validates its shard, and the loss is the mean over every rank's
     * samples. Not on sim (nothing is computed there). */
    const char *val_data;
    int64_t val_every;
    /* a name of delta_backend_names(): "cpu", "sim", "cuda"; NULL: cpu */
    const char *backend;
    /* sim: a preset of delta_gpu_presets() (NULL: v100-16g), a device
     * file (delta calibrate's) instead, or a description in memory
     * instead of either (not owned) */
    const char *gpu;
    const char *gpu_file;
    const delta_gpu_preset *gpu_device;
    /* sim with several ranks: the link between the GPUs
     * (delta_interconnect_find; NULL: nvlink) */
    const char *interconnect;
    delta_budget budget;
    const char *policy;           /* NULL: keep without a budget, delta
                                     with one (delta_session_policies) */
    /* cpu: the emulated link's rate in GB/s, when link_set (0:
     * unthrottled); else unthrottled without a budget, the backend's
     * default with one */
    double link_gbps;
    bool link_set;
    int64_t device_jitter;        /* cpu: jitter seed (0: none) */
    size_t host_memory;           /* host store cap for swapped tensors
                                     (0: as much as the host gives) */
    int run_ahead;                /* 0: the session's default */
    bool sync_every_op;           /* the host waits for every op */
    bool check_streams;           /* sessions on the stream-order checker */
    /* Data parallel (comm.h): the ranks of this process (not owned; NULL:
     * one rank); ranks: the ranks a sim run or a plan stands for (0:
     * comm's); zero: 1 for ZeRO-1; bucket_bytes: gradient buckets (0: the
     * library's default); comm_timeout_s: > 0 sets comm's timeout. */
    struct delta_comm *comm;
    int ranks;
    int zero;
    size_t bucket_bytes;
    double comm_timeout_s;
    /* Only the dry plan is wanted (delta plan): no backend is made
     * (except cuda's, whose kernels size the workspaces) and
     * delta_trainer_start is refused. */
    bool plan_only;
    /* Informational lines (data, model, backend, budget, shapes), one per
     * line; NULL: none. */
    FILE *info;
    /* Chrome trace the sessions write into (not owned; NULL: none); see
     * also delta_trainer_set_trace. */
    delta_trace *trace;
} delta_train_config;

/* The zero config with lr, momentum, weight_decay and eval_batches at -1
 * (their defaults). */
DELTA_API delta_train_config delta_train_config_default(void);

/* One step's figures, handed to the step callback. */
typedef struct delta_train_step {
    int64_t step;               /* the step's number: 1, 2, ... after the
                                   steps trained before (set_steps_before) */
    double loss;                /* the batch's mean loss (data parallel: the
                                   ranks' mean); NAN on sim */
    const delta_step_stats *stats;  /* the session's figures */
    int64_t batch, seq_len;     /* the step's shape (seq_len 0: images) */
    double units;               /* samples (images) or tokens of the step,
                                   over every rank */
    double val_loss;            /* the validation loss computed after this
                                   step (val_data); NAN when none was */
    double lr;                  /* the learning rate the step used (the
                                   float the optimizer read) */
    double grad_norm;           /* the gradients' global norm before
                                   clipping (grad_clip > 0; NAN without it
                                   and on sim) */
} delta_train_step;

/* Called after every step; return false to stop after it (delta_trainer_
 * train then returns DELTA_OK). Under data parallel every rank's loss is
 * the same mean, so a decision taken from it is every rank's; a run the
 * callback stops keeps this rank's own peak in the result. */
typedef bool (*delta_train_step_fn)(const delta_train_step *step,
                                    void *user_data);

/* Figures of the steps trained so far (and of the evaluation). */
typedef struct delta_train_result {
    int64_t steps_done;         /* steps this trainer trained */
    double final_loss;          /* NAN on sim */
    double median_step_s;
    double train_s;             /* wall seconds in delta_trainer_train */
    size_t peak_device_bytes;   /* max over the steps (data parallel: the
                                   largest rank's) */
    /* What the policy did, summed over the steps: */
    size_t swap_out_bytes, swap_in_bytes, dropped_bytes, defrag_bytes;
    int64_t swap_outs, swap_ins, drops, recomputed_ops, defrag_moves;
    double recompute_s, stall_s;
    /* The host against the device, summed over the steps: */
    int64_t host_syncs, throttle_waits;
    double host_busy_s, device_busy_s;
    /* samples/s (images) or tokens/s over every rank: per the median step
     * with one shape; with changing shapes the median of the steps' own */
    double units_per_s;
    bool evaluated;
    double test_accuracy, test_loss;
    int64_t test_samples;
    /* the last validation (val_data): its loss, samples (over every
     * rank) and the step after which it ran; validations: how many ran */
    double val_loss;
    int64_t val_samples, val_step, validations;
    /* Changing shapes: */
    double plan_s;              /* building programs, dry plans, creating
                                   sessions (the first included) */
    double plan_max_s;          /* the longest of those for one shape */
    double switch_s;            /* moving parameters and state between
                                   sessions */
    int64_t shapes;             /* distinct shapes trained */
    int64_t programs;           /* step programs built */
    int64_t switches;           /* session changes during training */
    int64_t partial_batches;    /* steps on an epoch's shorter last batch */
} delta_train_result;

/* delta_trainer_plan then delta_trainer_start: a trainer ready to train.
 * On failure *out is NULL, err holds the message and the status says
 * what went wrong: DELTA_ERR_INVALID_ARG (no model or an unknown one, an
 * unknown backend or GPU, settings that do not go together),
 * DELTA_ERR_BUDGET (a budget below what the program needs),
 * DELTA_ERR_IO / _FORMAT (data), DELTA_ERR_UNSUPPORTED (a policy the
 * session does not know, a backend this build lacks), DELTA_ERR_STATE
 * (no such device on this machine). */
DELTA_API delta_status delta_trainer_new(const delta_train_config *cfg,
                                         delta_trainer **out, char *err,
                                         size_t err_len);

/* The first half: defaults filled in, the data opened, the backend made,
 * the main shape's program built and its dry plan made. On failure as
 * delta_trainer_new. */
DELTA_API delta_status delta_trainer_plan(const delta_train_config *cfg,
                                          delta_trainer **out, char *err,
                                          size_t err_len);

/* The second half, once after delta_trainer_plan: the budget, the
 * session (its constants written) and the data loader. On failure the
 * message is delta_trainer_error's; free the trainer. */
DELTA_API delta_status delta_trainer_start(delta_trainer *tr);

/* The trace the sessions write into (not owned), before
 * delta_trainer_start. */
DELTA_API void delta_trainer_set_trace(delta_trainer *tr, delta_trace *trace);

/* Steps trained before this trainer (a run continued from a checkpoint):
 * the step numbers of callbacks and messages count on from there. */
DELTA_API void delta_trainer_set_steps_before(delta_trainer *tr,
                                              int64_t steps);

/* Trains `steps` steps (after any trained before), calling fn (NULL:
 * none) after each. Under data parallel every rank calls it with the same
 * steps (the loss and the peak are agreed among them). A step that fails
 * (the policy cannot fit an op: DELTA_ERR_BUDGET; a non-finite loss:
 * DELTA_ERR_STATE) ends it with its status and a message; the figures of
 * the steps before stay in the result. */
DELTA_API delta_status delta_trainer_train(delta_trainer *tr, int64_t steps,
                                           delta_train_step_fn fn,
                                           void *user_data);

/* Test accuracy and loss on Fashion-MNIST's test split (eval_batches
 * batches, all when < 0), in eval mode, at the main shape; DELTA_OK and
 * nothing done when the run does not evaluate (delta_trainer_evaluates).
 * The result's evaluated, test_accuracy, test_loss, test_samples. */
DELTA_API delta_status delta_trainer_evaluate(delta_trainer *tr);

/* The mean loss of cfg.val_data's first batches (see val_data) in eval
 * mode at the main shape, into *loss (and the result's val_ fields);
 * DELTA_ERR_STATE without val_data or a session. The training loop calls
 * it when due; a caller may call it between delta_trainer_train calls
 * (data parallel: on every rank, it is a collective). */
DELTA_API delta_status delta_trainer_validate(delta_trainer *tr,
                                              double *loss);

/* Whether delta_trainer_evaluate evaluates: an image model on
 * Fashion-MNIST, eval_batches != 0, not on sim, rank 0. */
DELTA_API bool delta_trainer_evaluates(const delta_trainer *tr);

/* The last failure's message ("" when none). */
DELTA_API const char *delta_trainer_error(const delta_trainer *tr);

/* The settings with their defaults filled in (model.name the canonical
 * name, model.batch, the policy, the gpu, the optimizer). */
DELTA_API const delta_train_config *delta_trainer_config(
    const delta_trainer *tr);

/* The result so far. */
DELTA_API const delta_train_result *delta_trainer_result(
    const delta_trainer *tr);

/* The main shape's dry plan (the budget is set against it). */
DELTA_API const delta_dry_plan *delta_trainer_dry_plan(const delta_trainer *tr);

/* The budget in bytes (0: unlimited), set by delta_trainer_start. */
DELTA_API size_t delta_trainer_budget_bytes(const delta_trainer *tr);

/* The session of the current shape (NULL before delta_trainer_start), its
 * program and its model. Session, context and model change when the shape
 * does; tensors of the same name stand for the same values in each. */
DELTA_API delta_session *delta_trainer_session(const delta_trainer *tr);
DELTA_API const delta_ctx *delta_trainer_ctx(const delta_trainer *tr);
DELTA_API const delta_model *delta_trainer_model(const delta_trainer *tr);

/* The main shape's model (its config is the run's: the configured batch,
 * the longest sequence length). */
DELTA_API const delta_model *delta_trainer_main_model(const delta_trainer *tr);

/* Tensors of the current program the model made (ids below this; the
 * optimizer's state and the gradients come after). */
DELTA_API int delta_trainer_n_model_tensors(const delta_trainer *tr);

/* The current program's parameter and state tensors (optimizer moments,
 * running statistics) in id order: what a shape change carries; their
 * names and sizes are the same at every shape. */
DELTA_API delta_tensor *const *delta_trainer_persistent(const delta_trainer *tr,
                                                         int *n);

/* Step programs built so far (shapes met). */
DELTA_API int delta_trainer_programs(const delta_trainer *tr);

/* The training data (NULL on sim), whether it is synthetic, and the
 * Fashion-MNIST folder in use (NULL for other data). */
DELTA_API const delta_dataset *delta_trainer_dataset(const delta_trainer *tr);
DELTA_API bool delta_trainer_synthetic(const delta_trainer *tr);
DELTA_API const char *delta_trainer_fashion_mnist_dir(const delta_trainer *tr);

/* The loader handing out the training batches (NULL on sim and before
 * delta_trainer_start): its position can be read and set to resume. */
DELTA_API delta_loader *delta_trainer_loader(const delta_trainer *tr);

/* The backend (NULL for a plan alone) and, on sim, the device simulated. */
DELTA_API delta_backend *delta_trainer_backend(const delta_trainer *tr);
DELTA_API const delta_gpu_preset *delta_trainer_gpu(const delta_trainer *tr);

/* Whether the model is an image classifier (else a language model) and
 * whether the backend is the simulator (no data, figures simulated). */
DELTA_API bool delta_trainer_image(const delta_trainer *tr);
DELTA_API bool delta_trainer_simulated(const delta_trainer *tr);

/* The optimizer's name ("sgd" or "adamw") and its resolved
 * hyper-parameters (momentum: adamw's beta1). */
DELTA_API const char *delta_trainer_optimizer(const delta_trainer *tr,
                                              double *lr, double *momentum,
                                              double *weight_decay);

/* This process's rank and the ranks of the run (comm's, or --ranks on
 * sim and in a plan). */
DELTA_API int delta_trainer_rank(const delta_trainer *tr);
DELTA_API int delta_trainer_ranks(const delta_trainer *tr);

/* Frees the session before the trace it writes into is closed (a no-op
 * when there is none; no training after it). */
DELTA_API void delta_trainer_end_session(delta_trainer *tr);

/* Frees everything the trainer made; NULL is a no-op. */
DELTA_API void delta_trainer_free(delta_trainer *tr);

#ifdef __cplusplus
}
#endif

#endif
