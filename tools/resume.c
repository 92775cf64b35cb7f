/* Training checkpoints and --resume (see resume.h). */
#include "resume.h"

#include "core/rng.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "delta/comm.h"
#include "delta/safetensors.h"

#define OPT_PREFIX "optimizer."
/* Settings compared on resume, and metadata entries a checkpoint adds. */
#define MAX_FIELDS 40
/* Differences and missing tensors listed before "... and N more". */
#define MAX_LISTED 20

delta_status resume_check_options(trainer *t) {
    const train_config *c = &t->cfg;
    if (c->resume && c->load)
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "--resume and --load both "
                     "start from a file; give one (--resume continues a "
                     "training checkpoint, --load starts afresh from a "
                     "model's weights)");
    if (c->save_bf16 && (c->checkpoint_every || c->resume))
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "--save-dtype bf16 rounds "
                     "the weights, but a training checkpoint (--%s) must "
                     "keep its fp32 masters exact to be resumed; save the "
                     "BF16 weights from a run without it, or --load the "
                     "checkpoint into one",
                     c->checkpoint_every ? "checkpoint-every" : "resume");
    if (c->checkpoint_every && !c->save)
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "--checkpoint-every needs "
                     "--save FILE: the checkpoints are written there");
    if (c->resume && !c->save && !c->run.plan_only && t->rank == 0)
        fprintf(stderr, "delta train: warning: --resume without --save: the "
                "continued run is not saved at its end and its training is "
                "lost; give --save FILE (the checkpoint's own path continues "
                "it in place)\n");
    const char *opt = c->resume ? "--resume" : "--checkpoint-every";
    if ((c->resume || c->checkpoint_every) && c->run.plan_only)
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "%s: delta plan trains "
                     "nothing; give it to delta train", opt);
    if ((c->resume || c->checkpoint_every) &&
        train_on(c, "sim"))
        return trainer_fail(t, DELTA_ERR_INVALID_ARG, "%s: the sim backend "
                     "computes no values, so there is no state to save or "
                     "resume", opt);
    return DELTA_OK;
}

void resume_note_failure(trainer *t) {
    if (t->saved_step < 0) return;
    size_t n = strlen(t->err);
    snprintf(t->err + n, sizeof t->err - n, "; the checkpoint of step %"
             PRId64 " in %s is intact: --resume %s continues from it",
             t->saved_step, t->cfg.save, t->cfg.save);
}

bool resume_due(const trainer *t, int64_t step) {
    return t->cfg.checkpoint_every > 0 && step % t->cfg.checkpoint_every == 0;
}

/* ---- settings --------------------------------------------------------------- */

/* One setting a resumed run must share. model: written by checkpoint_save
 * already (absent there when 0). */
typedef struct field {
    const char *key, *option;
    char value[256];
    bool model;
    bool described;  /* compared only with a file that lacks data_id */
} field;

static int add_i64(field *f, int n, const char *key, const char *option,
                   int64_t v, bool model) {
    f[n] = (field){.key = key, .option = option, .model = model};
    snprintf(f[n].value, sizeof f[n].value, "%" PRId64, v);
    return n + 1;
}

static int add_str(field *f, int n, const char *key, const char *option,
                   const char *v) {
    f[n] = (field){.key = key, .option = option};
    snprintf(f[n].value, sizeof f[n].value, "%s", v);
    return n + 1;
}

/* Doubles in full precision: the same option text gives the same string. */
static int add_f64(field *f, int n, const char *key, const char *option,
                   double v) {
    f[n] = (field){.key = key, .option = option};
    snprintf(f[n].value, sizeof f[n].value, "%.17g", v);
    return n + 1;
}

/* What the data is, by content, not by path (`--data ./notes.txt` and
 * `--data notes.txt` are one file; another file of that name is not):
 * its sample count and a 64-bit hash of every sample's input and target,
 * as the dataset hands them out, into t->data_id (once per run). Synthetic
 * data is a function of its description, which names no path. */
static const char *data_identity(trainer *t) {
    if (t->data_id[0]) return t->data_id;
    const delta_dataset *data = delta_trainer_dataset(t->tr);
    if (!data || delta_trainer_synthetic(t->tr)) {
        snprintf(t->data_id, sizeof t->data_id, "%s",
                 data ? delta_dataset_name(data) : "none");
        return t->data_id;
    }
    delta_data_info in = delta_dataset_info(data);
    size_t in_bytes = (size_t)in.input_numel * 4;
    size_t tg_bytes = (size_t)in.target_numel * 4;
    unsigned char *buf = malloc(in_bytes + tg_bytes + 8);
    uint64_t h = delta_mix64((uint64_t)in.len);
    for (int64_t i = 0; buf && i < in.len; i++) {
        /* seed and epoch 0: only masked LM draws from them (its masks),
         * and the hash is of the data, not of a draw */
        delta_dataset_get(data, i, 0, 0, buf,
                          (int32_t *)(void *)(buf + in_bytes), NULL);
        size_t n = in_bytes + tg_bytes, k = 0;
        for (; k + 8 <= n; k += 8) {
            uint64_t w;
            memcpy(&w, buf + k, 8);
            h = delta_mix64(h ^ w);
        }
        for (; k < n; k++) h = delta_mix64(h ^ buf[k]);
    }
    free(buf);
    snprintf(t->data_id, sizeof t->data_id, "%" PRId64 " samples, content "
             "hash %016" PRIx64, in.len, h);
    return t->data_id;
}

/* The run's settings that decide the values it computes. */
static int run_fields(trainer *t, field *f) {
    const train_config *c = &t->cfg;
    const delta_model_config *m = &delta_trainer_main_model(t->tr)->cfg;
    const delta_dataset *data = delta_trainer_dataset(t->tr);
    double lr, momentum, weight_decay;
    const char *optimizer = delta_trainer_optimizer(t->tr, &lr, &momentum,
                                                    &weight_decay);
    int n = 0;
    n = add_str(f, n, "model", "--model", m->name);
    f[n - 1].model = true;
    n = add_i64(f, n, "image_size", "--image-size", m->image_size, true);
    n = add_i64(f, n, "channels", "--channels", m->channels, true);
    n = add_i64(f, n, "classes", "--classes", m->classes, true);
    n = add_i64(f, n, "width", "--width", m->width, true);
    n = add_i64(f, n, "mlp_hidden", "--hidden", m->mlp_hidden, true);
    n = add_i64(f, n, "layers", "--layers", m->layers, true);
    n = add_i64(f, n, "hidden", "--hidden", m->hidden, true);
    n = add_i64(f, n, "heads", "--heads", m->heads, true);
    n = add_i64(f, n, "seq_len", "--seq-len", m->seq_len, true);
    n = add_i64(f, n, "vocab", "--vocab", m->vocab, true);
    n = add_i64(f, n, "batch", "--batch", m->batch, false);
    n = add_f64(f, n, "dropout", "--dropout", (double)m->dropout);
    n = add_str(f, n, "precision", "--precision",
                m->precision == DELTA_PRECISION_BF16 ? "bf16" : "fp32");
    n = add_str(f, n, "optimizer", "--optimizer", optimizer);
    n = add_f64(f, n, "lr", "--lr", lr);
    n = add_f64(f, n, "momentum", "--momentum", momentum);
    n = add_f64(f, n, "weight_decay", "--weight-decay", weight_decay);
    /* the schedule and clipping (absent from older files: constant, none;
     * a varying schedule's length is --steps, so it must stay the same) */
    const delta_lr_sched *ls = &c->run.lr_sched;
    bool varies = delta_lr_sched_varies(ls);
    n = add_str(f, n, "lr_schedule", "--lr-schedule",
                delta_lr_schedule_name(ls->kind));
    n = add_i64(f, n, "warmup", "--warmup", ls->warmup, false);
    n = add_f64(f, n, "lr_min", "--lr-min", ls->min_frac);
    n = add_i64(f, n, "lr_schedule_steps", "--steps (the schedule's)",
                varies ? ls->steps : 0, false);
    n = add_f64(f, n, "grad_clip", "--grad-clip", c->run.grad_clip);
    n = add_i64(f, n, "seed", "--seed", (int64_t)c->run.seed, false);
    n = add_str(f, n, "shuffle", "--no-shuffle",
                c->run.no_shuffle ? "false" : "true");
    n = add_str(f, n, "drop_last", "--drop-last",
                c->run.drop_last ? "true" : "false");
    char range[64] = "none";
    if (c->run.seq_len_max)
        snprintf(range, sizeof range, "%" PRId64 ":%" PRId64,
                 c->run.seq_len_min, c->run.seq_len_max);
    n = add_str(f, n, "seq_len_range", "--seq-len-range", range);
    /* the description, for people; data_id is what is compared */
    n = add_str(f, n, "data", "--data",
                data ? delta_dataset_name(data) : "none");
    f[n - 1].described = true;
    n = add_str(f, n, "data_id", "--data (its content)", data_identity(t));
    /* the ranks (data parallel): each trains its share of every global
     * batch of ranks x batch samples (resume_load refuses another count
     * before the others are listed) */
    n = add_i64(f, n, "ranks", "mpirun -np", t->ranks, false);
    DELTA_ASSERT(n <= MAX_FIELDS);
    return n;
}

static delta_tensor *const *optimizer_tensors(const trainer *t, int *n);

/* ---- data parallel: the optimizer state of the other ranks ------------------
 * Under ZeRO-1 each rank holds the optimizer state of its own parameters;
 * a save gathers it on rank 0, which writes the one file. Every rank q > 0
 * sends its count, then per tensor a header and the bytes; rank 0 takes
 * them in rank order. Without ZeRO-1 rank 0 holds all of it. */

typedef struct wire_head {
    char name[DELTA_NAME_LEN];
    int32_t ndim;
    int64_t shape[DELTA_MAX_DIMS];
    uint64_t bytes;
} wire_head;

static bool gathers_state(const trainer *t) {
    return t->ranks > 1 && t->cfg.run.zero && !t->sim;
}

static delta_status send_state(trainer *t) {
    int n;
    delta_tensor *const *opt = optimizer_tensors(t, &n);
    int64_t count = n;
    delta_comm *comm = t->cfg.run.comm;
    delta_comm_send(comm, &count, sizeof count, 0, "a checkpoint's state");
    for (int i = 0; i < n; i++) {
        const delta_tensor *x = opt[i];
        wire_head h = {.ndim = delta_tensor_ndim(x),
                       .bytes = delta_tensor_bytes(x)};
        snprintf(h.name, sizeof h.name, "%s", delta_tensor_name(x));
        for (int d = 0; d < h.ndim; d++) h.shape[d] = delta_tensor_dim(x, d);
        void *buf = malloc(h.bytes ? h.bytes : 1);
        if (!buf) return trainer_fail(t, DELTA_ERR_NOMEM, "out of memory");
        delta_session *s = delta_trainer_session(t->tr);
        delta_status st = delta_session_read(s, x, buf, h.bytes);
        if (st != DELTA_OK) {
            free(buf);
            return trainer_fail(t, st, "reading '%s' for a checkpoint: %s", h.name,
                         delta_session_error(s));
        }
        delta_comm_send(comm, &h, sizeof h, 0, "a checkpoint's state");
        delta_comm_send(comm, buf, h.bytes, 0, "a checkpoint's state");
        free(buf);
    }
    return DELTA_OK;
}

/* Rank 0: every other rank's state into blobs (*blobs, n; free both with
 * free_blobs). */
static delta_status receive_state(trainer *t, checkpoint_blob **blobs,
                                  int *n) {
    delta_comm *comm = t->cfg.run.comm;
    *blobs = NULL;
    *n = 0;
    int cap = 0;
    for (int q = 1; q < t->ranks; q++) {
        int64_t count = 0;
        delta_comm_recv(comm, &count, sizeof count, q, "a checkpoint's state");
        for (int64_t i = 0; i < count; i++) {
            wire_head h;
            delta_comm_recv(comm, &h, sizeof h, q, "a checkpoint's state");
            if (*n == cap) {
                cap = cap ? 2 * cap : 64;
                checkpoint_blob *nb = realloc(*blobs, sizeof *nb * (size_t)cap);
                if (!nb) return trainer_fail(t, DELTA_ERR_NOMEM, "out of memory");
                *blobs = nb;
            }
            checkpoint_blob *b = &(*blobs)[*n];
            memset(b, 0, sizeof *b);
            void *data = malloc(h.bytes ? h.bytes : 1);
            if (!data) return trainer_fail(t, DELTA_ERR_NOMEM, "out of memory");
            delta_comm_recv(comm, data, h.bytes, q, "a checkpoint's state");
            snprintf(b->name, sizeof b->name, "%s", h.name);
            b->ndim = h.ndim;
            for (int d = 0; d < h.ndim; d++) b->shape[d] = h.shape[d];
            b->data = data;
            (*n)++;
        }
    }
    return DELTA_OK;
}

static void free_blobs(checkpoint_blob *blobs, int n) {
    for (int i = 0; i < n; i++) free((void *)blobs[i].data);
    free(blobs);
}

/* ---- save ------------------------------------------------------------------- */

/* The optimizer's tensors of the current program: the persistent ones the
 * model did not make (persist[] is in id order, the model's first). */
static delta_tensor *const *optimizer_tensors(const trainer *t, int *n) {
    int n_persist, n_model = delta_trainer_n_model_tensors(t->tr);
    delta_tensor *const *persist = delta_trainer_persistent(t->tr, &n_persist);
    int k = 0;
    while (k < n_persist && delta_tensor_id(persist[k]) < n_model) k++;
    *n = n_persist - k;
    return persist + k;
}

delta_status resume_save(trainer *t) {
    int64_t step = t->start_step + trainer_result(t)->steps_done;
    /* data parallel: rank 0 writes the one file, the others send it the
     * state only they hold */
    if (t->rank > 0) {
        delta_status st = gathers_state(t) ? send_state(t) : DELTA_OK;
        if (st == DELTA_OK) t->saved_step = step;
        return st;
    }
    checkpoint_blob *blobs = NULL;
    int n_blobs = 0;
    if (gathers_state(t)) {
        delta_status st = receive_state(t, &blobs, &n_blobs);
        if (st != DELTA_OK) {
            free_blobs(blobs, n_blobs);
            return st;
        }
    }
    field f[MAX_FIELDS];
    int nf = run_fields(t, f);
    delta_loader_pos pos = {0, 0};
    const delta_loader *loader = delta_trainer_loader(t->tr);
    if (loader) pos = delta_loader_get_pos(loader);
    char session_step[24], epoch[24], index[24];
    snprintf(session_step, sizeof session_step, "%" PRId64,
             delta_session_step(delta_trainer_session(t->tr)));
    snprintf(epoch, sizeof epoch, "%" PRId64, pos.epoch);
    snprintf(index, sizeof index, "%" PRId64, pos.index);
    const char *kv[2 * (MAX_FIELDS + 4)];
    int nm = 0;
    kv[2 * nm] = "checkpoint", kv[2 * nm + 1] = "training", nm++;
    kv[2 * nm] = "session_step", kv[2 * nm + 1] = session_step, nm++;
    kv[2 * nm] = "data_epoch", kv[2 * nm + 1] = epoch, nm++;
    kv[2 * nm] = "data_index", kv[2 * nm + 1] = index, nm++;
    for (int i = 0; i < nf; i++) {
        if (f[i].model) continue;
        kv[2 * nm] = f[i].key, kv[2 * nm + 1] = f[i].value, nm++;
    }
    checkpoint_extra extra = {.prefix = OPT_PREFIX, .meta_kv = kv,
                              .n_meta = nm, .blobs = blobs,
                              .n_blobs = n_blobs};
    extra.tensors = optimizer_tensors(t, &extra.n_tensors);
    delta_status st = checkpoint_save(
        t->cfg.save, delta_trainer_session(t->tr), delta_trainer_ctx(t->tr),
        delta_trainer_n_model_tensors(t->tr), delta_trainer_main_model(t->tr),
        step, &extra, t->err, sizeof t->err);
    free_blobs(blobs, n_blobs);
    if (st == DELTA_OK) t->saved_step = step;
    return st;
}

/* ---- resume ----------------------------------------------------------------- */

/* A whole non-negative integer in metadata key, else false. */
static bool meta_i64(const delta_st_file *f, const char *key, int64_t *v) {
    const char *s = delta_st_metadata(f, key);
    if (!s || !*s) return false;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (*end || x < 0) return false;
    *v = x;
    return true;
}

/* Lists every setting that differs on stderr; returns how many. */
static int compare_settings(trainer *t, const delta_st_file *f) {
    field cur[MAX_FIELDS];
    int nf = run_fields(t, cur), differ = 0;
    for (int i = 0; i < nf; i++) {
        const char *was = delta_st_metadata(f, cur[i].key);
        /* files from before data_id: the data as described (path) */
        if (cur[i].described && delta_st_metadata(f, "data_id")) continue;
        if (!was && !strcmp(cur[i].key, "data_id")) continue;
        /* files from before --precision trained in fp32; from before
         * data parallel, on one rank */
        if (!was && !strcmp(cur[i].key, "precision")) was = "fp32";
        /* from before schedules and clipping: a constant lr, no clip */
        if (!was && !strcmp(cur[i].key, "lr_schedule")) was = "constant";
        if (!was && (!strcmp(cur[i].key, "warmup") ||
                     !strcmp(cur[i].key, "lr_min") ||
                     !strcmp(cur[i].key, "lr_schedule_steps") ||
                     !strcmp(cur[i].key, "grad_clip")))
            was = "0";
        if (!was) was = cur[i].model                  ? "0"
                        : !strcmp(cur[i].key, "ranks") ? "1"
                                                       : "(none)";
        if (!strcmp(was, cur[i].value)) continue;
        if (differ++ < MAX_LISTED && t->rank == 0)
            fprintf(stderr, "  %s: %s in the checkpoint, %s in this run\n",
                    cur[i].option, was, cur[i].value);
    }
    return differ;
}

/* Writes each optimizer tensor from the file ("optimizer." + its name,
 * F32 of its shape) into the session; missing or misshapen ones are listed
 * on stderr and refused before anything is written. */
static delta_status load_optimizer(trainer *t, const delta_st_file *f) {
    int n;
    delta_tensor *const *opt = optimizer_tensors(t, &n);
    delta_session *s = delta_trainer_session(t->tr);
    int bad = 0;
    char name[DELTA_NAME_LEN + 32];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const delta_tensor *x = opt[i];
            snprintf(name, sizeof name, OPT_PREFIX "%s", delta_tensor_name(x));
            const delta_st_tensor *ft = delta_st_find(f, name);
            bool ok = ft && !strcmp(ft->st_dtype, "F32") &&
                      ft->ndim == delta_tensor_ndim(x);
            for (int d = 0; ok && d < ft->ndim; d++)
                ok = ft->shape[d] == delta_tensor_dim(x, d);
            if (pass == 0) {
                if (!ok && bad++ < MAX_LISTED)
                    fprintf(stderr, "  %s: %s\n", name,
                            ft ? "another shape or dtype" : "missing");
                continue;
            }
            delta_status st = delta_session_write(s, x, ft->data, ft->nbytes);
            if (st != DELTA_OK)
                return trainer_fail(t, st, "writing '%s' from %s: %s", name,
                             t->cfg.resume, delta_session_error(s));
        }
        if (bad)
            return trainer_fail(t, DELTA_ERR_FORMAT, "checkpoint %s does not hold "
                         "the %s optimizer's state of this model: %d tensor%s "
                         "missing or misshapen (listed above)", t->cfg.resume,
                         delta_trainer_optimizer(t->tr, NULL, NULL, NULL), bad,
                         bad == 1 ? "" : "s");
    }
    return DELTA_OK;
}

delta_status resume_load(trainer *t) {
    const char *path = t->cfg.resume;
    delta_status st = DELTA_OK;
    char sub[512] = "";
    delta_st_file *f = delta_st_open(path, &st, sub, sizeof sub);
    if (!f)
        return trainer_fail(t, st != DELTA_OK ? st : DELTA_ERR_IO,
                     "--resume: cannot read the checkpoint %s: %s", path, sub);
    int64_t step = 0, session_step = 0;
    delta_loader_pos pos = {0, 0};
    const char *kind = delta_st_metadata(f, "checkpoint");
    int differ = 0;
    if (!kind || strcmp(kind, "training") != 0) {
        st = trainer_fail(t, DELTA_ERR_INVALID_ARG, "--resume: %s is a model file, "
                   "not a training checkpoint (it holds no optimizer state "
                   "or data position); --load starts from its weights with "
                   "a fresh optimizer, and --checkpoint-every N --save FILE "
                   "writes checkpoints that --resume continues", path);
        goto done;
    }
    if (!meta_i64(f, "step", &step) ||
        !meta_i64(f, "session_step", &session_step) ||
        !meta_i64(f, "data_epoch", &pos.epoch) ||
        !meta_i64(f, "data_index", &pos.index)) {
        st = trainer_fail(t, DELTA_ERR_FORMAT, "--resume: %s lacks a whole number "
                   "in step, session_step, data_epoch or data_index of its "
                   "metadata", path);
        goto done;
    }
    /* another number of ranks: its own message, before the list */
    const char *was_ranks = delta_st_metadata(f, "ranks");
    int64_t file_ranks = was_ranks ? strtoll(was_ranks, NULL, 10) : 1;
    if (file_ranks != t->ranks) {
        char how[64];
        if (file_ranks == 1) snprintf(how, sizeof how, "without mpirun");
        else snprintf(how, sizeof how, "mpirun -np %" PRId64 " delta train",
                      file_ranks);
        st = trainer_fail(t, DELTA_ERR_INVALID_ARG, "--resume: %s was trained by %"
                   PRId64 " rank%s and this run has %d; resume it on %" PRId64
                   " (%s ...): --batch is per rank, so another count would "
                   "train other global batches (delta does not reshard a "
                   "run)", path, file_ranks, file_ranks == 1 ? "" : "s",
                   t->ranks, file_ranks, how);
        goto done;
    }
    differ = compare_settings(t, f);
    if (differ) {
        if (differ > MAX_LISTED && t->rank == 0)
            fprintf(stderr, "  ... and %d more\n", differ - MAX_LISTED);
        st = trainer_fail(t, DELTA_ERR_INVALID_ARG, "--resume: %s was trained with "
                   "other settings (%d differ%s, listed above); resume with "
                   "the checkpoint's, or --load it to start from its weights "
                   "with a fresh optimizer", path, differ,
                   differ == 1 ? "s" : "");
        goto done;
    }
    if (t->cfg.steps < step) {
        st = trainer_fail(t, DELTA_ERR_INVALID_ARG, "--steps %" PRId64 ": checkpoint "
                   "%s has trained %" PRId64 " steps already; --steps counts "
                   "from the start of training, so give %" PRId64 " or more",
                   t->cfg.steps, path, step, step);
        goto done;
    }
    delta_loader *loader = delta_trainer_loader(t->tr);
    if (loader && delta_loader_set_pos(loader, pos) != DELTA_OK) {
        st = trainer_fail(t, DELTA_ERR_FORMAT, "--resume: %s: data position epoch "
                   "%" PRId64 " sample %" PRId64 " is outside the data (%"
                   PRId64 " samples)", path, pos.epoch, pos.index,
                   delta_dataset_len(delta_trainer_dataset(t->tr)));
        goto done;
    }
    delta_session *s = delta_trainer_session(t->tr);
    st = checkpoint_load_file(f, path, true, s, delta_trainer_ctx(t->tr),
                              delta_trainer_n_model_tensors(t->tr),
                              delta_trainer_model(t->tr), NULL, stderr,
                              t->err, sizeof t->err);
    if (st == DELTA_OK) st = load_optimizer(t, f);
    if (st != DELTA_OK) goto done;
    delta_session_set_step(s, session_step);
    delta_trainer_set_steps_before(t->tr, step);
    t->start_step = step;
    t->resumed = true;
done:
    delta_st_close(f);
    return st;
}
