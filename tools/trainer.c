/* The tool's trainer (see trainer.h): its options and output files around
 * the library's trainer, the step callback (progress, the JSON log,
 * checkpoints), --load, --save and --trace, and exit codes. The printed
 * plan and report are trainer_report.c's, the ranks' agreement
 * trainer_agree.c's. */
#include "trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "delta/comm.h"
#include "outfile.h"
#include "progress.h"
#include "resume.h"

delta_status trainer_fail(trainer *t, delta_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return st;
}

void trainer_info(const trainer *t, const char *fmt, ...) {
    if (!t->info) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->info, fmt, ap);
    va_end(ap);
    fputc('\n', t->info);
    fflush(t->info);
}

delta_status trainer_wrote(trainer *t, delta_status st) {
    if (st == DELTA_ERR_IO) t->output_failed = true;
    return st;
}

/* st of a library call, its message into t->err. */
static delta_status lib(trainer *t, delta_status st) {
    if (st != DELTA_OK)
        snprintf(t->err, sizeof t->err, "%s", delta_trainer_error(t->tr));
    return st;
}

int trainer_exit(const trainer *t, delta_status st) {
    if (st != DELTA_OK && t->output_failed) return 1;
    return trainer_exit_code(st);
}

int trainer_exit_code(delta_status st) {
    switch (st) {
    case DELTA_OK: return 0;
    case DELTA_ERR_BUDGET: return 3;
    case DELTA_ERR_INVALID_ARG:
    case DELTA_ERR_SHAPE:
    case DELTA_ERR_IO:
    case DELTA_ERR_FORMAT:
    case DELTA_ERR_UNSUPPORTED: return 2;
    default: return 1;
    }
}

/* ---- setup ----------------------------------------------------------------- */

/* Every file the run will write may replace only a regular file or be
 * created (outfile.h), and --save's folder must take a new file: all
 * refused now, before any work, rather than after training. A run that
 * saves holds --save's lock from here on and clears the temporaries
 * killed saves of that path left. */
static delta_status check_outputs(trainer *t) {
    const train_config *c = &t->cfg;
    if (t->rank > 0) return DELTA_OK; /* rank 0 writes every file */
    /* no output may be another output's file or one the run reads (the
     * data; the JSON log and the trace not --load's or --resume's file
     * either, while --save may be: a resumed run saves in place) */
    const char *d = c->run.data;
    const char *data = d && strcmp(d, "fashion-mnist") &&
                       strcmp(d, "synthetic") ? d : NULL;
    const outfile_path p1[] = {
        {"--save", c->save, true}, {"--json", c->json, true},
        {"--trace", c->trace, true}, {"--data", data, false}};
    const outfile_path p2[] = {
        {"--json", c->json, true}, {"--trace", c->trace, true},
        {"--load", c->load, false}, {"--resume", c->resume, false}};
    delta_status st = outfile_distinct(p1, 4, t->err, sizeof t->err);
    if (st == DELTA_OK) st = outfile_distinct(p2, 4, t->err, sizeof t->err);
    if (st != DELTA_OK) return st;
    if (c->json) st = outfile_check("--json", c->json, t->err, sizeof t->err);
    if (st == DELTA_OK && c->trace)
        st = outfile_check("--trace", c->trace, t->err, sizeof t->err);
    if (st == DELTA_OK && c->save)
        st = outfile_probe("--save", c->save, t->err, sizeof t->err);
    if (st != DELTA_OK || !c->save || c->run.plan_only) return st;
    t->save_lock = outfile_lock(c->save, t->err, sizeof t->err);
    if (t->save_lock < 0) return DELTA_ERR_INVALID_ARG;
    t->save_locked = true;
    int stale = outfile_remove_stale_temps(c->save);
    if (stale)
        trainer_info(t, "removed %d temporar%s that a killed save of %s left",
                     stale, stale == 1 ? "y" : "ies", c->save);
    return DELTA_OK;
}

/* The options the tool itself refuses or warns about, before any work. */
static delta_status check_options(trainer *t) {
    const train_config *c = &t->cfg;
    if (c->run.zero && t->ranks == 1 && t->rank == 0 && !c->quiet)
        fprintf(stderr, "delta %s: warning: --zero 1 shards the optimizer "
                "state across ranks, and this run has one (mpirun -np P, or "
                "--ranks P on the sim and in plan)\n",
                c->run.plan_only ? "plan" : "train");
    if (t->sim && c->save)
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "--save: the sim "
                            "backend computes no values, so there is "
                            "nothing to save");
    if (c->run.plan_only && c->trace)
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "--trace: delta plan "
                            "runs nothing, so there is nothing to trace; "
                            "give it to delta train");
    delta_status st = resume_check_options(t);
    if (st == DELTA_OK) st = check_outputs(t);
    return st;
}

/* --load's weights into the session, then --resume's state. */
static delta_status load_files(trainer *t) {
    const train_config *c = &t->cfg;
    char sub[512];
    if (c->load) {
        delta_status st = checkpoint_load(
            c->load, delta_trainer_session(t->tr), delta_trainer_ctx(t->tr),
            delta_trainer_n_model_tensors(t->tr), delta_trainer_model(t->tr),
            &t->start_step, stderr, t->err, sizeof t->err);
        if (st != DELTA_OK) return st;
        trainer_info(t, "loaded %s (%" PRId64 " steps trained)", c->load,
                     t->start_step);
    }
    if (c->resume) {
        delta_status st = resume_load(t);
        if (st != DELTA_OK) return st;
        if (!json_log_resume(t->json, t->start_step, sub, sizeof sub))
            return trainer_fail(t, DELTA_ERR_IO, "%s", sub);
        trainer_info(t, "resumed %s at step %" PRId64 "; training steps %"
                     PRId64 "..%" PRId64, c->resume, t->start_step,
                     t->start_step + 1, c->steps);
    }
    return DELTA_OK;
}

delta_status trainer_setup(trainer *t, const train_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    train_config *c = &t->cfg;
    t->sim = train_on(c, "sim");
    t->rank = delta_comm_rank(c->run.comm);
    t->ranks = c->run.ranks ? c->run.ranks : delta_comm_size(c->run.comm);
    t->saved_step = -1;
    if (t->rank > 0) { /* rank 0 prints and writes */
        c->quiet = true;
        c->json = NULL;
        c->trace = NULL;
    }
    t->info = c->quiet ? NULL : stderr;
    delta_status st = check_options(t);
    if (st != DELTA_OK) return st;

    /* --load without --model: the model the file holds (delta's metadata,
     * Hugging Face's config.json beside it, or its shapes) */
    if (!c->run.model.name && c->load) {
        char why[1024];
        st = delta_model_config_pretrained(c->load, &c->run.model, why,
                                           sizeof why);
        if (st != DELTA_OK)
            return trainer_fail(t, st, "%s; give --model NAME", why);
    }
    delta_train_config run = c->run;
    run.info = t->info;
    run.trace = NULL;
    st = delta_trainer_plan(&run, &t->tr, t->err, sizeof t->err);
    if (st != DELTA_OK) return st;
    /* the settings with the library's defaults filled in */
    c->run = *delta_trainer_config(t->tr);
    t->image = delta_trainer_image(t->tr);
    t->ranks = delta_trainer_ranks(t->tr);

    char sub[512];
    if (c->json) {
        /* a resumed run continues its log (json_log_resume) */
        t->json = json_log_open(c->json, c->resume != NULL, sub, sizeof sub);
        if (!t->json) return trainer_fail(t, DELTA_ERR_IO, "%s", sub);
    }
    if (c->run.plan_only) return DELTA_OK;
    /* Before the session, which writes into it from its creation on (the
     * persistent tensors' first placement), and so that a bad path is
     * refused before any training. */
    if (c->trace) {
        t->trace = delta_trace_open(c->trace, sub, sizeof sub);
        if (!t->trace)
            return trainer_fail(t, DELTA_ERR_IO, "--trace: %s", sub);
        delta_trainer_set_trace(t->tr, t->trace);
    }
    st = lib(t, delta_trainer_start(t->tr));
    if (st == DELTA_OK) st = load_files(t);
    return st;
}

/* ---- training -------------------------------------------------------------- */

/* Test hooks (docs/CHECKPOINTS.md, "Faults"): DELTA_TEST_RANK_FAIL=R:S
 * makes rank R fail at step S with a message, DELTA_TEST_RANK_HANG=R:S
 * makes it stop answering there (it sleeps until killed), so the tests see
 * every rank stopped either way. The step of rank `rank` they name, or -1. */
static int64_t test_hook_step(const char *var, int rank) {
    const char *v = getenv(var);
    int r = -1;
    long long s = -1;
    if (!v || sscanf(v, "%d:%lld", &r, &s) != 2 || r != rank) return -1;
    return s;
}

/* What the step callback needs. */
typedef struct step_ctx {
    trainer *t;
    progress p;
    int64_t first;              /* steps trained before this run */
    int64_t fail_at, hang_at;   /* the test hooks' steps, or -1 */
    delta_status st;            /* why the callback stopped the run */
} step_ctx;

/* Before step `next`: the test hooks. false when the rank fails there. */
static bool before_step(step_ctx *x, int64_t next) {
    trainer *t = x->t;
    if (next == x->fail_at) {
        x->st = trainer_fail(t, DELTA_ERR_STATE, "step %" PRId64 ": "
                             "DELTA_TEST_RANK_FAIL: rank %d fails here as "
                             "asked", next, t->rank);
        return false;
    }
    while (next == x->hang_at) sleep(1000);
    return true;
}

/* The validation loss computed after step `step` (0: before training),
 * on its own line. */
static void note_val(step_ctx *x, int64_t step, double v) {
    progress_note(&x->p, "step %" PRId64 ": val loss %.4f (%" PRId64
                  " sequences of %s)", step, v,
                  trainer_result(x->t)->val_samples, x->t->cfg.run.val_data);
}

/* After each step: the progress line, the JSON log, a checkpoint when one
 * is due; then the hooks of the next step. */
static bool on_step(const delta_train_step *s, void *ud) {
    step_ctx *x = ud;
    trainer *t = x->t;
    if (t->step_log) t->step_log[s->step - x->first - 1] = *s->stats;
    x->p.units_per_step = s->units;
    x->p.grad_norm = s->grad_norm;
    progress_step(&x->p, s->step, s->loss, s->stats);
    if (!isnan(s->val_loss)) note_val(x, s->step, s->val_loss);
    json_log_step(t->json, s->step, s->loss, s->stats,
                  delta_trainer_budget_bytes(t->tr) != 0, s->batch,
                  s->seq_len, s->val_loss,
                  delta_lr_sched_varies(&t->cfg.run.lr_sched) ? s->lr : NAN,
                  s->grad_norm);
    /* a diverged loss: the library ends the run, with no checkpoint of it;
     * every rank has this mean */
    if (!t->sim && !isfinite(s->loss)) {
        t->fail_everywhere = true;
        return true;
    }
    if (resume_due(t, s->step)) {
        x->st = trainer_wrote(t, resume_save(t));
        if (x->st != DELTA_OK) return false;
    }
    return s->step >= t->cfg.steps || before_step(x, s->step + 1);
}

delta_status trainer_train(trainer *t) {
    const train_config *c = &t->cfg;
    const delta_model_config *m = &delta_trainer_main_model(t->tr)->cfg;
    step_ctx x = {
        .t = t, .fail_at = test_hook_step("DELTA_TEST_RANK_FAIL", t->rank),
        .hang_at = test_hook_step("DELTA_TEST_RANK_HANG", t->rank)};
    /* --steps counts from the start of training: a resumed run does the
     * rest; its steps are numbered from where it resumed */
    x.first = t->resumed ? t->start_step : 0;
    int64_t steps = c->steps - x.first;
    /* samples or tokens of a step over all ranks */
    double units = (double)t->ranks *
                   (t->image ? (double)m->batch
                             : (double)(m->batch * m->seq_len));
    progress_init(&x.p, progress_pick_mode(stderr, c->quiet), stderr,
                  c->steps, t->image ? "samples" : "tokens", units, t->sim,
                  delta_trainer_budget_bytes(t->tr));
    delta_status st = DELTA_OK;
    /* as llm.c does, a validation before the first step: the loaded
     * model's loss, the baseline of a fine-tuning run */
    if (c->run.val_data && c->run.val_every && x.first == 0 && steps > 0) {
        double v = NAN;
        st = lib(t, delta_trainer_validate(t->tr, &v));
        if (st != DELTA_OK) return st;
        note_val(&x, 0, v);
        json_log_val(t->json, 0, v);
    }
    if (steps > 0 && before_step(&x, x.first + 1))
        st = lib(t, delta_trainer_train(t->tr, steps, on_step, &x));
    if (st == DELTA_OK) st = x.st;
    progress_finish(&x.p);
    if (st != DELTA_OK) resume_note_failure(t);
    return st;
}

delta_status trainer_evaluate(trainer *t) {
    return lib(t, delta_trainer_evaluate(t->tr));
}

/* ---- save ------------------------------------------------------------------ */

delta_status trainer_save(trainer *t) {
    if (!t->cfg.save) return DELTA_OK;
    int64_t step = t->start_step + trainer_result(t)->steps_done;
    /* a run with checkpoints (or resumed from one) ends with one too,
     * unless the last step's is already written */
    if (t->cfg.checkpoint_every || t->resumed) {
        delta_status st = t->saved_step == step
                              ? DELTA_OK : trainer_wrote(t, resume_save(t));
        if (st == DELTA_OK)
            trainer_info(t, "saved %s (training checkpoint of step %" PRId64
                         "; --resume continues it)", t->cfg.save, step);
        return st;
    }
    /* The current session's tensors (the same at every shape) under the
     * main shape's config (its seq_len, the longest, goes in the
     * metadata). Rank 0 writes: every rank holds every parameter. */
    if (t->rank > 0) return DELTA_OK;
    checkpoint_extra weights = {.bf16 = t->cfg.save_bf16};
    delta_status st = trainer_wrote(
        t, checkpoint_save(t->cfg.save, delta_trainer_session(t->tr),
                           delta_trainer_ctx(t->tr),
                           delta_trainer_n_model_tensors(t->tr),
                           delta_trainer_main_model(t->tr), step, &weights,
                           t->err, sizeof t->err));
    if (st == DELTA_OK)
        trainer_info(t, "saved %s%s", t->cfg.save,
                     t->cfg.save_bf16 ? " (weights rounded to BF16)" : "");
    return st;
}

/* ---- the end ----------------------------------------------------------------- */

delta_status trainer_close_trace(trainer *t) {
    if (!t->trace) return DELTA_OK;
    /* The session is the trace's writer (to its last copy): it goes first. */
    if (t->tr) delta_trainer_end_session(t->tr);
    char sub[512];
    delta_status st = delta_trace_close(t->trace, sub, sizeof sub);
    t->trace = NULL;
    if (st != DELTA_OK)
        return trainer_wrote(t, trainer_fail(t, st, "--trace %s: %s",
                                             t->cfg.trace, sub));
    trainer_info(t, "trace: %s", t->cfg.trace);
    return DELTA_OK;
}

void trainer_free(trainer *t) {
    if (!t) return;
    if (t->save_locked) outfile_unlock(t->cfg.save, t->save_lock);
    t->save_locked = false;
    if (t->json) {
        char sub[512];
        json_log_close(t->json, sub, sizeof sub);
        t->json = NULL;
    }
    if (t->tr) delta_trainer_end_session(t->tr);
    if (t->trace) {
        char sub[512];
        delta_trace_close(t->trace, sub, sizeof sub);
        t->trace = NULL;
    }
    delta_trainer_free(t->tr);
    memset(t, 0, sizeof *t);
}
