/* The `delta` tool's part of training, around the library's trainer
 * (delta/train.h, src/train/: data, shapes, budget, backend, session, the
 * step loop, evaluation): what a command line adds to it. The settings
 * (train_config: the library's plus the tool's own), the output files
 * (--save's lock, only regular files replaced: outfile.h), --load and
 * model files (checkpoint.h), training checkpoints and --resume
 * (resume.h), the progress line (progress.h), the --json log
 * (json_log.h), --trace, the printed plan and report, the ranks'
 * agreement on their settings, and exit codes. The `train` and `plan`
 * commands are cmd_train.c around it; maxbatch and bench run it per probe
 * or cell (cell.c), calibrate per program.
 *
 * Every phase returns a delta_status and writes a message into the
 * trainer's err; trainer_exit_code maps a status to the tool's exit
 * status (0 ok, 2 bad usage or input, 3 infeasible budget, 1 other). */
#ifndef DELTA_TOOLS_TRAINER_H
#define DELTA_TOOLS_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "delta/train.h"
#include "json_log.h"
#include "parse.h"

/* A run's settings: the library trainer's and the tool's own. Set run
 * from delta_train_config_default() (train_args_parse does), then what the
 * user gave. */
typedef struct train_config {
    delta_train_config run;
    int64_t steps;                      /* --steps, counted from the start
                                           of training */
    const char *save, *load, *json;     /* NULL: none */
    bool save_bf16;                     /* --save-dtype bf16 */
    const char *trace;                  /* Chrome trace file; NULL: none */
    bool quiet;
    /* Training checkpoints (resume.h): every this many steps (counted from
     * the start of training) the full state goes to `save`; 0: none */
    int64_t checkpoint_every;
    const char *resume;                 /* continue from this checkpoint */
} train_config;

/* The run's backend name ("cpu" when none was given). */
static inline const char *train_backend(const train_config *c) {
    return c->run.backend ? c->run.backend : "cpu";
}

/* Whether the run's backend is the one named. */
static inline bool train_on(const train_config *c, const char *name) {
    return strcmp(train_backend(c), name) == 0;
}

typedef struct trainer {
    train_config cfg;           /* as given; once tr is made, run is its
                                   settings with the defaults filled in
                                   (delta_trainer_config) */
    delta_trainer *tr;          /* the library's trainer; NULL until set up
                                   or when setup failed */
    bool sim;                   /* on the sim backend: no data, no files */
    bool image;                 /* classifier (else a language model);
                                   known once tr is */
    /* Data parallel: this process's rank of `ranks` (0 of 1 without).
     * Only rank 0 prints and writes files. */
    int rank, ranks;
    int64_t start_step;         /* steps trained before (--load, --resume) */
    bool resumed;               /* from --resume: start_step is where */
    int64_t saved_step;         /* step of the last checkpoint written; -1 */
    json_log *json;
    char data_id[96];           /* the data's content (resume.c); "" until
                                   first needed */
    bool save_locked;           /* holds cfg.save's lock (save_lock) */
    int save_lock;              /* outfile_lock's descriptor */
    bool output_failed;         /* writing an output failed: exit 1 */
    delta_trace *trace;         /* --trace; the sessions write into it */
    FILE *info;                 /* informational lines (NULL when quiet) */
    /* Set by the caller after trainer_setup (cfg.steps entries, not
     * owned): trainer_train writes each step's figures into it, for
     * commands that summarize steps themselves (maxbatch, bench). */
    delta_step_stats *step_log;
    /* A failure is known to be every rank's (the mean loss diverged), so
     * that rank 0 alone reports it. */
    bool fail_everywhere;
    char err[1024];
} trainer;

/* Writes the message into t->err and returns st. */
delta_status trainer_fail(trainer *t, delta_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An informational line on stderr (none when quiet or on ranks > 0). */
void trainer_info(const trainer *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* st of writing an output (a save, the JSON log, the trace): a failure
 * there is the run's, not its input's (exit 1, trainer_exit). */
delta_status trainer_wrote(trainer *t, delta_status st);

/* The library trainer's figures (after trainer_setup). */
static inline const delta_train_result *trainer_result(const trainer *t) {
    return delta_trainer_result(t->tr);
}

/* Checks the tool's options and outputs, then makes the library's trainer
 * (data, backend, programs, dry plan; with cfg.run.plan_only nothing
 * more, else the budget and the session too), and loads --load or
 * --resume into it. On failure the trainer holds what was made (free it
 * with trainer_free). */
delta_status trainer_setup(trainer *t, const train_config *cfg);

/* Prints the dry plan of the step program (memory by kind, unconstrained
 * peak, max-live bound, minimum budget and the op that needs it) on
 * stdout; with cfg.json, also as one JSON object. After trainer_setup. */
delta_status trainer_print_plan(trainer *t);

/* Trains up to cfg.steps (from the start of training) with progress on
 * stderr, the JSON log and the checkpoints due; the figures are
 * delta_trainer_result's. */
delta_status trainer_train(trainer *t);

/* delta_trainer_evaluate: test accuracy on the Fashion-MNIST test split
 * (eval_batches batches, all when < 0), in eval mode; a no-op for other
 * data. */
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
