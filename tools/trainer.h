/* The trainer: from a run's settings to a trained model. It picks the data
 * (Fashion-MNIST, a text file or synthetic samples) and fits the model to
 * it, builds the step program (model, backward, optimizer), sizes the
 * budget against the dry plan, places the program in a session on the
 * backend named (cpu, sim or cuda, made through the library's registry)
 * with the policy named (delta with a budget, keep without), and then
 * trains, evaluates and saves. The `train` command is cmd_train.c around
 * it; maxbatch and bench run it per probe or cell (cell.c).
 *
 * Every phase returns a delta_status and writes a message into the
 * trainer's err; trainer_exit_code maps a status to the tool's exit
 * status (0 ok, 2 bad usage or input, 3 infeasible budget, 1 other).
 *
 * Changing shapes. A step program is static per shape (batch, sequence
 * length). The run's main shape is the configured batch at the longest
 * sequence length; a step whose shape differs (an epoch's last, shorter
 * batch; a length drawn by --seq-len-range) runs the program of its shape,
 * built once and kept (shapes[]). Switching reads every parameter and
 * state tensor out of the current session into host buffers, frees it,
 * creates the session of the new program on the same backend with the
 * same budget, policy, trace and plan cache, writes them back and
 * continues the step counter, so the run is the same as one long session
 * would have been. The budget is one number of bytes for the whole run:
 * --budget N% is a percentage of the main (largest) shape's unconstrained
 * peak. */
#ifndef DELTA_TOOLS_TRAINER_H
#define DELTA_TOOLS_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "delta/backend.h"
#include "delta/data.h"
#include "delta/dryplan.h"
#include "delta/models.h"
#include "delta/session.h"
#include "json_log.h"
#include "parse.h"

typedef enum train_optimizer {
    TRAIN_OPT_DEFAULT = 0,  /* sgd for image models, adamw for transformers */
    TRAIN_OPT_SGD,
    TRAIN_OPT_ADAMW,
} train_optimizer;

/* A run's settings. Zero-initialize, then set what the user gave; the
 * fields documented with a default take it when left 0 / NULL / negative
 * as said. */
typedef struct train_config {
    /* name, batch and overrides; 0 = the model's or the data's value.
     * dropout: only read when dropout_set (else the model's default). */
    delta_model_config model;
    bool dropout_set;
    /* NULL: fashion-mnist for image models when the dataset exists (else
     * synthetic at its shape), synthetic for transformers; on sim the
     * model's own shapes with no data. "fashion-mnist", "synthetic", a
     * directory of Fashion-MNIST idx files (image models) or a text file
     * (transformers). */
    const char *data;
    int64_t steps;
    uint64_t seed;
    train_optimizer optimizer;
    double lr, momentum, weight_decay;  /* < 0: the optimizer's default */
    bool no_shuffle;
    int threads;                        /* 0: all cores */
    const char *save, *load, *json;     /* NULL: none */
    bool save_bf16;                     /* --save-dtype bf16 */
    const char *trace;                  /* Chrome trace file; NULL: none */
    bool quiet;
    int64_t eval_batches;               /* < 0: the whole test split;
                                           0: no evaluation */
    /* a name of delta_backend_names() (the library's registry): "cpu",
     * "sim", "cuda"; NULL: "cpu". Read it through train_backend(). */
    const char *backend;
    const char *gpu;                    /* sim preset; NULL: v100-16g (or,
                                           with gpu_file, its path: the
                                           name reports show) */
    const char *gpu_file;               /* sim: a device file (--gpu-file)
                                           instead of the preset */
    /* sim: a description in memory instead of either (delta calibrate's
     * check of its own); not owned */
    const delta_gpu_preset *gpu_device;
    budget_spec budget;
    const char *policy;                 /* NULL: keep without a budget,
                                           delta with one */
    double link_gbps;                   /* cpu link; used when link_set */
    bool link_set;
    /* --device-jitter: the cpu backend's jitter_seed (0: none) */
    int64_t device_jitter;
    bool plan_only;                     /* stop after the dry plan */
    /* --seq-len-range A:B (transformers): each step draws its sequence
     * length uniformly in [A, B] from (seed, step); 0: one length */
    int64_t seq_len_min, seq_len_max;
    bool drop_last;                     /* skip an epoch's partial batch */
    /* Training checkpoints (resume.h): every this many steps (counted from
     * the start of training) the full state goes to `save`; 0: none */
    int64_t checkpoint_every;
    const char *resume;                 /* continue from this checkpoint */
    /* Host store for swapped tensors: at most this many bytes; 0: as much
     * as the host gives */
    size_t host_memory;
    int run_ahead;                      /* 0: the session's default */
    bool sync_every_op;                 /* the host waits for every op */
    /* --check-streams: sessions run on the stream-order checker */
    bool check_streams;
    /* Data parallel (docs/ARCHITECTURE.md, "Data parallel"). comm: the
     * ranks of this process (delta_comm_world; not owned; NULL: one rank).
     * ranks: --ranks, the ranks the sim and plan stand for (0: comm's);
     * zero: --zero (0 or 1); bucket_bytes: --bucket (0: the library's
     * default); interconnect: --interconnect, the sim's link between GPUs
     * (NULL: nvlink); comm_timeout_s: --comm-timeout (0: the comm's). */
    struct delta_comm *comm;
    int ranks;
    int zero;
    size_t bucket_bytes;
    const char *interconnect;
    double comm_timeout_s;
} train_config;

/* The run's backend name ("cpu" when none was given). */
static inline const char *train_backend(const train_config *c) {
    return c->backend ? c->backend : "cpu";
}

/* Whether the run's backend is the one named. */
static inline bool train_on(const train_config *c, const char *name) {
    return strcmp(train_backend(c), name) == 0;
}

/* Figures of a finished run (the JSON summary holds the same). */
typedef struct train_result {
    int64_t steps_done;
    double final_loss;          /* NAN on sim */
    double median_step_s;
    double train_s;             /* wall seconds of the training loop */
    size_t peak_device_bytes;   /* max over the steps */
    /* What the policy did, summed over the steps: */
    size_t swap_out_bytes, swap_in_bytes, dropped_bytes, defrag_bytes;
    int64_t swap_outs, swap_ins, drops, recomputed_ops, defrag_moves;
    double recompute_s, stall_s;
    /* The host against the device, summed over the steps: */
    int64_t host_syncs, throttle_waits;
    double host_busy_s, device_busy_s;
    double units_per_s;         /* samples/s (images) or tokens/s */
    bool evaluated;
    double test_accuracy, test_loss;
    int64_t test_samples;
    /* Changing shapes: */
    double plan_s;              /* building programs, dry plans, creating
                                   sessions (setup's included) */
    double plan_max_s;          /* the longest of those for one shape */
    double switch_s;            /* moving parameters and state between
                                   sessions */
    int64_t shapes;             /* distinct shapes trained */
    int64_t switches;           /* session changes during training */
    int64_t partial_batches;    /* steps on an epoch's shorter last batch */
} train_result;

/* The step program of one shape, built once per run. */
typedef struct train_shape {
    int64_t batch, seq_len;     /* seq_len: 0 for image models */
    delta_ctx *ctx;
    delta_model model;
    int n_model_tensors;
    delta_tensor **persist;     /* PARAM and STATE tensors in id order (the
                                   same names and sizes at every shape) */
    int n_persist;
    bool trained;               /* a step ran at this shape */
} train_shape;

typedef struct trainer {
    train_config cfg;           /* with defaults filled in */
    bool sim;                   /* no data: figures are simulated */
    bool image;                 /* classifier (else a language model) */
    bool synthetic;             /* data is synthetic (or none on sim) */
    const char *fmnist_dir;     /* Fashion-MNIST files in use, or NULL */
    delta_dataset *data;        /* NULL on sim */
    delta_loader *loader;
    delta_batch batch;
    /* Programs by shape; shapes[0] is the main one (the configured batch,
     * the longest sequence), whose dry plan is `plan`. */
    train_shape *shapes;
    int n_shapes, cap_shapes;
    int cur;                    /* shape of the session */
    delta_status shape_st;      /* why shape_index failed */
    void **persist_buf;         /* host copies while switching sessions */
    delta_plan_cache *plans;    /* policies' plans, across sessions */
    /* The current shape's program (aliases of shapes[cur]): */
    delta_ctx *ctx;
    delta_model model;
    int n_model_tensors;        /* ids below this are the model's own */
    delta_dry_plan plan;        /* of the main shape */
    size_t budget_bytes;        /* 0 = unlimited */
    delta_backend *backend;
    const delta_gpu_preset *gpu;  /* sim: the device simulated */
    delta_gpu_preset *gpu_loaded; /* cfg.gpu_file's description (owned) */
    delta_session *session;
    int64_t start_step;         /* steps trained before (from --load) */
    const char *optimizer_name; /* "sgd" or "adamw" */
    double lr, momentum, weight_decay;  /* resolved (momentum: adamw's beta1) */
    bool resumed;               /* from --resume: start_step is where */
    int64_t saved_step;         /* step of the last checkpoint written; -1 */
    train_result result;
    json_log *json;
    char data_id[96];           /* the data's content (resume.c); "" until
                                   first needed */
    bool save_locked;           /* holds cfg.save's lock (save_lock) */
    int save_lock;              /* outfile_lock's descriptor */
    bool output_failed;         /* writing an output failed: exit 1 */
    delta_trace *trace;         /* --trace; the session writes into it */
    FILE *info;                 /* informational lines (NULL when quiet) */
    /* Set by the caller after trainer_setup (cfg.steps entries, not
     * owned): trainer_train writes each step's figures into it, for
     * commands that summarize steps themselves (maxbatch, bench). */
    delta_step_stats *step_log;
    /* Data parallel: this process's rank of `ranks` (0 of 1 without), and
     * whether a failure is known to be every rank's (the mean loss
     * diverged), so that rank 0 alone reports it. Only rank 0 prints and
     * writes files. */
    int rank, ranks;
    bool fail_everywhere;
    char err[1024];
} trainer;

/* The median of v[0..n) (the mean of the middle two for even n; 0 for
 * none), sorting v in place. */
double trainer_median(double *v, int64_t n);

/* Fills in defaults, opens the data, builds the program, plans it and
 * creates the backend and the session; loads --load into it. On failure
 * the trainer holds what was made (free it with trainer_free). */
delta_status trainer_setup(trainer *t, const train_config *cfg);

/* Prints the dry plan of the step program (memory by kind, unconstrained
 * peak, max-live bound, minimum budget and the op that needs it) on
 * stdout; with cfg.json, also as one JSON object. After trainer_setup. */
delta_status trainer_print_plan(trainer *t);

/* Runs cfg.steps training steps with progress on stderr and the JSON log;
 * fills t->result. */
delta_status trainer_train(trainer *t);

/* Test accuracy on the Fashion-MNIST test split (cfg.eval_batches batches,
 * all when < 0), in eval mode; a no-op for other data. */
delta_status trainer_evaluate(trainer *t);

/* Writes cfg.save (when set). */
delta_status trainer_save(trainer *t);

/* Prints the result line(s) on stdout and writes the JSON summary. */
delta_status trainer_report(trainer *t);

/* Completes the --trace file: frees the session (the trace's writer) and
 * closes the trace, so the file is a whole JSON document whatever phase
 * failed. DELTA_ERR_IO when any write to it failed. A no-op without
 * --trace; after it only trainer_free is left to call. */
delta_status trainer_close_trace(trainer *t);

/* Frees everything (closing a trace still open without a word). */
void trainer_free(trainer *t);

/* Data parallel, after trainer_setup on every rank: the ranks compare
 * their settings (model, batch, data, optimizer, seed, policy, budget,
 * steps, ZeRO, ...) and their setup's outcome. A setup that failed on any
 * rank, or settings that differ, fail every rank with one message, which
 * rank 0 prints (the first failing rank's own message, or the setting
 * that differs and its values); st is this rank's setup status. One rank:
 * st. */
delta_status trainer_agree(trainer *t, delta_status st);

/* 0 for DELTA_OK, 3 for DELTA_ERR_BUDGET, 2 for bad input (invalid
 * arguments, shapes, unreadable or malformed files, unsupported
 * requests), 1 for anything else. */
int trainer_exit_code(delta_status st);

/* The exit status of a run that ended with st: 1 when writing an output
 * (a save, --json, --trace) failed, else trainer_exit_code(st). */
int trainer_exit(const trainer *t, delta_status st);

#endif
