/* The trainer's record and the interfaces between its files (train.h is
 * the public face):
 *   setup.c    defaults, ranks, delta_trainer_plan/start/new/free
 *   device.c   the simulated GPU, the backend by name, the budget
 *   access.c   the accessors
 *   data.c     the data a run trains on, and the model fitted to it
 *   shapes.c   step programs per shape and switching sessions between them
 *   loop.c     the step loop (delta_trainer_train)
 *   evaluate.c the test split in eval mode (delta_trainer_evaluate)
 *   validate.c the validation loss of a language model (val_data)
 *
 * Shapes: image batches are (N, C, H, W) F32 with labels (N) I32; token
 * batches are (B, T) I32 with targets (B, T) and, for BERT, an attention
 * mask (B, T) F32. The loader's buffers hold exactly one batch and are
 * copied into the session's input tensors each step. */
#ifndef DELTA_TRAIN_IMPL_H
#define DELTA_TRAIN_IMPL_H

#include <string.h>

#include "delta/train.h"

/* The step program of one shape, built once per run. */
typedef struct train_shape {
    int64_t batch, seq_len;     /* seq_len: 0 for image models */
    delta_ctx *ctx;
    delta_model model;
    int n_model_tensors;        /* ids below this are the model's own */
    delta_tensor **persist;     /* PARAM and STATE tensors in id order (the
                                   same names and sizes at every shape) */
    int n_persist;
    bool trained;               /* a step ran at this shape */
    delta_tensor *lr;           /* the step's lr (a varying schedule), or
                                   NULL: the optimizer's attribute */
    delta_tensor *grad_norm;    /* the gradients' norm (grad_clip), or NULL */
} train_shape;

struct delta_trainer {
    delta_train_config cfg;     /* with defaults filled in */
    bool sim;                   /* no data: figures are simulated */
    bool image;                 /* classifier (else a language model) */
    bool synthetic;             /* data is synthetic (or none on sim) */
    bool started;               /* delta_trainer_start ran */
    const char *fmnist_dir;     /* Fashion-MNIST files in use, or NULL */
    delta_dataset *data;        /* NULL on sim */
    delta_loader *loader;
    delta_batch batch;
    /* cfg.val_data: its dataset, loader (file order, sharded like the
     * training loader) and batch; NULL without */
    delta_dataset *val_data;
    delta_loader *val_loader;
    delta_batch val_batch;
    int64_t val_batches;        /* batches a validation runs */
    /* Programs by shape; shapes[0] is the main one (the configured batch,
     * the longest sequence), whose dry plan is `plan`. */
    train_shape **shapes;       /* each its own block: pointers into a
                                   shape (its model) stay valid as more
                                   shapes come */
    int n_shapes, cap_shapes;
    int cur;                    /* shape of the session */
    void **persist_buf;         /* host copies while switching sessions */
    delta_plan_cache *plans;    /* policies' plans, across sessions */
    delta_dry_plan plan;        /* of the main shape */
    size_t budget_bytes;        /* 0 = unlimited */
    delta_backend *backend;
    const delta_gpu_preset *gpu;  /* sim: the device simulated */
    delta_gpu_preset *gpu_loaded; /* cfg.gpu_file's description (owned) */
    delta_session *session;
    const char *optimizer_name; /* "sgd" or "adamw" */
    double lr, momentum, weight_decay;  /* resolved (momentum: adamw's beta1) */
    delta_train_result result;
    int64_t steps_before;       /* delta_trainer_set_steps_before */
    /* every step's time and units (samples or tokens), for the medians */
    double *times, *units;
    int64_t cap_steps;
    /* Data parallel: this process's rank of `ranks` (0 of 1 without). */
    int rank, ranks;
    char err[1024];
};

/* Defaults (docs: train.h and delta train --help). */
#define TRAIN_BATCH_IMAGES 64
#define TRAIN_BATCH_TOKENS 8

/* Writes the message into tr->err and returns st. */
delta_status train_fail(delta_trainer *tr, delta_status st, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));

/* An informational line on cfg.info (none when NULL). */
void train_info(const delta_trainer *tr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Seconds on a monotonic clock. */
double train_now(void);

/* Whether the run ends with a test-set evaluation. */
bool train_will_evaluate(const delta_trainer *tr);

/* The run's backend name ("cpu" when none was given), and whether it is
 * the one named. */
static inline const char *train_backend_name(const delta_train_config *c) {
    return c->backend ? c->backend : "cpu";
}
static inline bool train_on_backend(const delta_train_config *c,
                                    const char *name) {
    return strcmp(train_backend_name(c), name) == 0;
}

/* device.c: the simulated device (sim only); the backend, made before
 * the programs so that they are fitted to its kernels; the budget in bytes
 * (a percentage of the dry plan's peak), with the backend's and budget's
 * lines, and the plan cache the sessions share. */
delta_status train_setup_gpu(delta_trainer *tr);
delta_status train_make_backend(delta_trainer *tr);
delta_status train_set_budget(delta_trainer *tr);

/* data.c: opens the data for the model family (image or token) and fits
 * cfg.model's image size, channels, classes, vocab and length to it. */
delta_status train_setup_data(delta_trainer *tr, bool masked);
/* A language model's data file (opt names it in messages): llm.c's token
 * file or text read as bytes, at T = seq_len with the vocab given (0: the
 * format's own); NULL with *st and tr->err on failure. */
delta_dataset *train_open_lm_file(delta_trainer *tr, const char *opt,
                                  const char *path, int64_t seq_len,
                                  int64_t vocab, bool masked,
                                  delta_status *st);
/* Whether path is read as llm.c's token file (its magic, or a name ending
 * in .bin, so that a damaged one is refused as such), not as text. */
bool train_is_token_file(const char *path);

/* shapes.c */
/* The shape (batch, seq_len)'s index in tr->shapes, building its program
 * the first time; -1 on failure with *st and tr->err saying why. */
int train_shape_index(delta_trainer *tr, int64_t batch, int64_t seq_len,
                      delta_status *st);
/* The tensors a session of shape sh keeps for the trainer to read (at
 * most 2): the logits when the run evaluates, the gradients' norm when it
 * clips. Returns how many. */
int train_outputs(const delta_trainer *tr, const train_shape *sh,
                  delta_tensor **out);
/* Creates the session of shape i (none may be alive: the backend holds
 * one arena) and makes shape i the current program. */
delta_status train_open_session(delta_trainer *tr, int i);
/* Writes the current model's constants (positions) into the session. */
delta_status train_write_constants(delta_trainer *tr);
/* Makes shape (batch, seq_len) the session's, switching sessions when it
 * is not: parameters and state go through host buffers, the step counter
 * goes on, the constants are written for the new shape. */
delta_status train_use_shape(delta_trainer *tr, int64_t batch,
                             int64_t seq_len);
/* Adds the seconds one shape took to get ready to the planning time. */
void train_note_plan(delta_trainer *tr, double s);
void train_shapes_free(delta_trainer *tr);

/* loop.c: copies batch b into the session's inputs. */
delta_status train_write_batch(delta_trainer *tr, const delta_batch *b);

/* validate.c: opens cfg.val_data with the training data's sequence length
 * and vocab (a no-op without it); whether a validation is due after step
 * number `step` (last: the last step of a delta_trainer_train call). */
delta_status train_open_validation(delta_trainer *tr);
bool train_validation_due(const delta_trainer *tr, int64_t step, bool last);

#endif
