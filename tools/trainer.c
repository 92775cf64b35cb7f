/* The trainer (see trainer.h): data, model, program, plan, backend and
 * session, then the training loop, evaluation, checkpoint and report.
 *
 * Shapes: image batches are (N, C, H, W) F32 with labels (N) I32; token
 * batches are (B, T) I32 with targets (B, T) and, for BERT, an attention
 * mask (B, T) F32. The loader's buffers hold exactly one batch and are
 * copied into the session's input tensors each step. */
#include "trainer.h"
#include "core/rng.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "outfile.h"
#include "delta/comm.h"
#include "delta/cpu.h"
#include "progress.h"
#include "resume.h"

/* Defaults (documented in cmd_train.c's help). */
#define DEFAULT_BATCH_IMAGES 64
#define DEFAULT_BATCH_TOKENS 8
#define DEFAULT_SGD_LR 0.05
#define DEFAULT_SGD_MOMENTUM 0.9
#define DEFAULT_SGD_WEIGHT_DECAY 0.0
#define DEFAULT_ADAMW_LR 3e-4
#define DEFAULT_ADAMW_WEIGHT_DECAY 0.01
#define DEFAULT_GPU "v100-16g"
/* Samples of a synthetic training set: any number costs nothing (samples
 * are computed when drawn); this many keeps the loader's shuffle order
 * small while no run of the tool comes near an epoch's end. */
#define SYNTH_LEN ((int64_t)1 << 20)

static delta_status fail(trainer *t, delta_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static delta_status fail(trainer *t, delta_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return st;
}

static void info(trainer *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void info(trainer *t, const char *fmt, ...) {
    if (!t->info) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->info, fmt, ap);
    va_end(ap);
    fputc('\n', t->info);
    fflush(t->info);
}

/* st of writing an output (a save, the JSON log, the trace): a failure
 * there is the run's, not its input's (exit 1, trainer_exit). */
static delta_status wrote(trainer *t, delta_status st) {
    if (st == DELTA_ERR_IO) t->output_failed = true;
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

/* ---- data ------------------------------------------------------------------ */

/* Synthetic samples at the (resolved) model's shapes; none on sim. */
static delta_status open_synthetic(trainer *t, const delta_model_config *r,
                                   delta_data_kind kind) {
    t->synthetic = true;
    if (t->sim) return DELTA_OK;
    delta_synth_opts o = {
        .kind = kind,
        .len = SYNTH_LEN > t->cfg.model.batch ? SYNTH_LEN : t->cfg.model.batch,
        .seed = t->cfg.seed,
        .channels = r->channels,
        .height = r->image_size,
        .width = r->image_size,
        .classes = r->classes,
        .seq_len = r->seq_len,
        .vocab = r->vocab,
    };
    delta_status st;
    char sub[512];
    t->data = delta_dataset_synthetic_new(&o, &st, sub, sizeof sub);
    if (!t->data) return fail(t, st, "synthetic data: %s", sub);
    return DELTA_OK;
}

/* An override must equal what the data holds; 0 takes the data's value. */
static delta_status fit_field(trainer *t, const char *opt, int64_t *v,
                              int64_t data, const char *what) {
    if (*v && *v != data)
        return fail(t, DELTA_ERR_INVALID_ARG, "%s %" PRId64 " does not match "
                    "the data, whose %s is %" PRId64 "; leave %s out or give "
                    "%" PRId64, opt, *v, what, data, opt, data);
    *v = data;
    return DELTA_OK;
}

static delta_status setup_image_data(trainer *t) {
    train_config *c = &t->cfg;
    delta_model_config *mc = &c->model;
    const char *d = c->data;
    const char *dir = NULL;
    bool explicit_fmnist = d && strcmp(d, "synthetic") != 0;
    /* Where "fashion-mnist" is looked for: the environment may move it
     * (tests use it to see the fallback to synthetic data). */
    const char *env = getenv("DELTA_FASHION_MNIST_DIR");
    if (env && *env) dir = env;
    if (d && strcmp(d, "fashion-mnist") && strcmp(d, "synthetic")) {
        struct stat sb;
        if (stat(d, &sb) != 0)
            return fail(t, DELTA_ERR_IO, "--data %s: %s", d, strerror(errno));
        if (!S_ISDIR(sb.st_mode))
            return fail(t, DELTA_ERR_INVALID_ARG, "model %s takes images: "
                        "--data expects fashion-mnist, synthetic or a "
                        "directory of Fashion-MNIST idx files, and %s is a "
                        "file (text files train the transformers, e.g. "
                        "gpt2-tiny)", mc->name, d);
        dir = d;
    }
    /* On sim with no --data the model keeps its own shapes. */
    if ((!d && !t->sim) || explicit_fmnist) {
        delta_status st;
        char sub[512];
        delta_dataset *ds = delta_dataset_fashion_mnist_new(
            dir, DELTA_SPLIT_TRAIN, &st, sub, sizeof sub);
        if (!ds && d) return fail(t, st, "%s", sub);
        if (!ds) {
            info(t, "Fashion-MNIST is not available (%s); training on "
                 "synthetic 28x28 images instead (Debian package "
                 "dataset-fashion-mnist)", sub);
            if (!mc->image_size) mc->image_size = 28;
            if (!mc->channels) mc->channels = 1;
            if (!mc->classes) mc->classes = DELTA_FASHION_MNIST_CLASSES;
        } else {
            delta_data_info in = delta_dataset_info(ds);
            t->data = ds;
            t->fmnist_dir = dir ? dir : DELTA_FASHION_MNIST_DIR;
            if (in.height != in.width)
                return fail(t, DELTA_ERR_FORMAT, "%s: images of %" PRId64
                            "x%" PRId64 "; the models take square images",
                            delta_dataset_name(ds), in.height, in.width);
            delta_status s2 = fit_field(t, "--image-size", &mc->image_size,
                                        in.height, "image size");
            if (s2 == DELTA_OK)
                s2 = fit_field(t, "--channels", &mc->channels, in.channels,
                               "channel count");
            if (s2 != DELTA_OK) return s2;
            if (mc->classes && mc->classes < in.classes)
                return fail(t, DELTA_ERR_INVALID_ARG, "--classes %" PRId64
                            " is fewer than the %" PRId64 " classes of the "
                            "data", mc->classes, in.classes);
            if (!mc->classes) mc->classes = in.classes;
            if (t->sim) {
                /* Only the shapes are wanted: sim computes nothing. */
                delta_dataset_free(t->data);
                t->data = NULL;
            }
            return DELTA_OK;
        }
    }
    delta_model_config r;
    char sub[512];
    delta_status st = delta_model_resolve(mc, &r, sub, sizeof sub);
    if (st != DELTA_OK) return fail(t, st, "%s", sub);
    return open_synthetic(t, &r, DELTA_DATA_IMAGES);
}

static delta_status setup_token_data(trainer *t, bool masked) {
    train_config *c = &t->cfg;
    delta_model_config *mc = &c->model;
    const char *d = c->data;
    delta_data_kind kind = masked ? DELTA_DATA_MASKED_LM
                                  : DELTA_DATA_CAUSAL_LM;
    if (d && !strcmp(d, "fashion-mnist"))
        return fail(t, DELTA_ERR_INVALID_ARG, "model %s is a language model "
                    "and fashion-mnist holds images; use --data synthetic or "
                    "--data FILE (any file, read as bytes)", mc->name);
    delta_model_config r;
    char sub[512];
    delta_status st = delta_model_resolve(mc, &r, sub, sizeof sub);
    if (st != DELTA_OK) return fail(t, st, "%s", sub);
    if (c->seq_len_max) {
        /* Every shape shares one position table, which must cover the
         * longest length: the model's own (no --seq-len to raise it). */
        if (c->seq_len_max > r.positions)
            return fail(t, DELTA_ERR_INVALID_ARG, "--seq-len-range %" PRId64
                        ":%" PRId64 ": %" PRId64 " is above the %" PRId64
                        " positions of %s's position table; use lengths "
                        "up to %" PRId64, c->seq_len_min, c->seq_len_max,
                        c->seq_len_max, r.positions, mc->name, r.positions);
        mc->seq_len = r.seq_len = c->seq_len_max;
        mc->positions = r.positions;
    }
    if (!d || !strcmp(d, "synthetic")) return open_synthetic(t, &r, kind);

    /* A text file: byte tokens; the model takes the data's vocab (256, or
     * 257 with BERT's [MASK]) unless --vocab asks for more. */
    delta_text_opts o = {.kind = kind, .seq_len = r.seq_len,
                         .vocab = mc->vocab};
    t->data = delta_dataset_text_new(d, &o, &st, sub, sizeof sub);
    if (!t->data) return fail(t, st, "%s", sub);
    delta_data_info in = delta_dataset_info(t->data);
    mc->vocab = in.vocab;
    mc->seq_len = in.seq_len;
    if (t->sim) {
        delta_dataset_free(t->data);
        t->data = NULL;
    }
    return DELTA_OK;
}

/* ---- setup ----------------------------------------------------------------- */

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

static delta_status write_constants(trainer *t) {
    const_buf cb = {0};
    delta_model_fill_constants(&t->model, const_data_of, &cb);
    delta_status st = cb.nomem ? DELTA_ERR_NOMEM : DELTA_OK;
    if (st != DELTA_OK) fail(t, st, "out of memory filling the constants");
    for (int i = 0; i < cb.n; i++) {
        if (st == DELTA_OK) {
            st = delta_session_write(t->session, cb.t[i], cb.data[i],
                                     delta_tensor_bytes(cb.t[i]));
            if (st != DELTA_OK)
                fail(t, st, "writing '%s': %s", delta_tensor_name(cb.t[i]),
                     delta_session_error(t->session));
        }
        free(cb.data[i]);
    }
    return st;
}

/* "48 tokens": the main shape's length. */
static const char *seq_max_str(const trainer *t, char *buf, size_t n) {
    snprintf(buf, n, "%" PRId64 " tokens", t->shapes[0].seq_len);
    return buf;
}

/* "16.." of "16..48" (the caller prints the 48). */
static const char *seq_range_str(const train_config *c, char *buf,
                                 size_t n) {
    snprintf(buf, n, "%" PRId64 "..", c->seq_len_min);
    return buf;
}

/* Whether the run ends with a test-set evaluation. */
static bool will_evaluate(const trainer *t) {
    return t->image && t->fmnist_dir && !t->sim && t->cfg.eval_batches != 0 &&
           t->rank == 0; /* rank 0 evaluates: its weights are everyone's */
}

/* Builds the step program (model, backward, optimizer) of shape (batch,
 * seq_len; 0 keeps the configured length) into *sh. */
static delta_status build_shape(trainer *t, int64_t batch, int64_t seq_len,
                                train_shape *sh) {
    train_config *c = &t->cfg;
    memset(sh, 0, sizeof *sh);
    delta_model_config mc = c->model;
    mc.batch = batch;
    if (seq_len) mc.seq_len = seq_len;
    sh->batch = batch;
    sh->seq_len = t->image ? 0 : seq_len;
    sh->ctx = delta_ctx_new();
    if (!sh->ctx) return fail(t, DELTA_ERR_NOMEM, "out of memory");
    delta_ctx_set_seed(sh->ctx, c->seed);
    delta_status st = delta_model_build(sh->ctx, &mc, &sh->model);
    if (st != DELTA_OK) return fail(t, st, "%s", sh->model.error);
    if (!t->image) sh->seq_len = sh->model.cfg.seq_len;
    sh->n_model_tensors = delta_ctx_n_tensors(sh->ctx);
    delta_ctx *ctx = sh->ctx;
    st = delta_backward(ctx, sh->model.loss);
    /* data parallel: the gradients' collectives inside backward, ZeRO-1's
     * shards (the optimizer then updates this rank's parameters only) */
    if (st == DELTA_OK && t->ranks > 1)
        st = delta_data_parallel(ctx, &(delta_dp_opts){
            .ranks = t->ranks, .rank = t->rank, .zero = c->zero,
            .bucket_bytes = c->bucket_bytes});
    if (st == DELTA_OK) {
        bool sgd = c->optimizer == TRAIN_OPT_SGD;
        t->optimizer_name = sgd ? "sgd" : "adamw";
        if (sgd) {
            t->lr = c->lr >= 0 ? c->lr : DEFAULT_SGD_LR;
            t->momentum = c->momentum >= 0 ? c->momentum
                                           : DEFAULT_SGD_MOMENTUM;
            t->weight_decay = c->weight_decay >= 0 ? c->weight_decay
                                                   : DEFAULT_SGD_WEIGHT_DECAY;
            st = delta_optimizer_sgd(ctx, (delta_sgd_opts){
                .lr = (float)t->lr,
                .momentum = (float)t->momentum,
                .weight_decay = (float)t->weight_decay});
        } else {
            t->lr = c->lr >= 0 ? c->lr : DEFAULT_ADAMW_LR;
            t->momentum = c->momentum >= 0 ? c->momentum : 0.9;
            t->weight_decay = c->weight_decay >= 0
                                  ? c->weight_decay
                                  : DEFAULT_ADAMW_WEIGHT_DECAY;
            st = delta_optimizer_adamw(ctx, (delta_adamw_opts){
                .lr = (float)t->lr,
                .beta1 = (float)t->momentum,
                .beta2 = 0.999f,
                .eps = 1e-8f,
                .weight_decay = (float)t->weight_decay});
        }
    }
    if (st != DELTA_OK)
        return fail(t, st, "building the step of %s: %s", c->model.name,
                    delta_ctx_error(ctx));
    /* What a session change carries over: parameters and state
     * (optimizer moments, running stats). Constants are a function of the
     * shape and are written afresh (write_constants). */
    int nt = delta_ctx_n_tensors(ctx);
    sh->persist = malloc(sizeof *sh->persist * (size_t)(nt ? nt : 1));
    if (!sh->persist) return fail(t, DELTA_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        delta_tensor *x = delta_ctx_tensor(ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(x);
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE)
            sh->persist[sh->n_persist++] = x;
    }
    /* the backend's kernels' workspace before anything is planned (cuda:
     * timed cuDNN choices), so the plan is the session's */
    delta_backend_fit_program(t->backend, ctx);
    return DELTA_OK;
}

static void shape_free(train_shape *sh) {
    delta_ctx_free(sh->ctx);
    free(sh->persist);
    memset(sh, 0, sizeof *sh);
}

/* "batch 64" or "batch 8 x 37 tokens", for messages. */
static const char *shape_str(const trainer *t, const train_shape *sh,
                             char *buf, size_t n) {
    if (t->image)
        snprintf(buf, n, "batch %" PRId64, sh->batch);
    else
        snprintf(buf, n, "batch %" PRId64 " x %" PRId64 " tokens", sh->batch,
                 sh->seq_len);
    return buf;
}

/* The shape (batch, seq_len)'s index in t->shapes, building its program
 * the first time; -1 on failure (t->err says why, t->shape_st the
 * status). A new program must carry the same parameters and state as the
 * main one. */
static int shape_index(trainer *t, int64_t batch, int64_t seq_len) {
    t->shape_st = DELTA_OK;
    if (t->image) seq_len = 0;
    for (int i = 0; i < t->n_shapes; i++)
        if (t->shapes[i].batch == batch && t->shapes[i].seq_len == seq_len)
            return i;
    if (t->n_shapes == t->cap_shapes) {
        int cap = t->cap_shapes ? 2 * t->cap_shapes : 4;
        train_shape *ns = realloc(t->shapes, sizeof *ns * (size_t)cap);
        if (!ns) {
            t->shape_st = fail(t, DELTA_ERR_NOMEM, "out of memory");
            return -1;
        }
        t->shapes = ns;
        t->cap_shapes = cap;
    }
    train_shape *sh = &t->shapes[t->n_shapes];
    delta_status st = build_shape(t, batch, seq_len, sh);
    if (st != DELTA_OK) {
        t->shape_st = st;
        shape_free(sh);
        return -1;
    }
    t->n_shapes++;
    if (t->n_shapes == 1) return 0;
    const train_shape *m = &t->shapes[0];
    bool same = sh->n_persist == m->n_persist;
    for (int k = 0; same && k < m->n_persist; k++)
        same = !strcmp(delta_tensor_name(sh->persist[k]),
                       delta_tensor_name(m->persist[k])) &&
               delta_tensor_bytes(sh->persist[k]) ==
                   delta_tensor_bytes(m->persist[k]);
    if (!same) {
        char a[64], b[64];
        t->shape_st = fail(t, DELTA_ERR_STATE, "the programs of %s and %s "
             "differ in their "
             "parameters or state, so training cannot move between them",
             shape_str(t, m, a, sizeof a), shape_str(t, sh, b, sizeof b));
        shape_free(sh);
        t->n_shapes--;
        return -1;
    }
    return t->n_shapes - 1;
}

/* The simulated device (sim only): the description given in memory, the
 * device file's or the preset's. */
static delta_status setup_gpu(trainer *t) {
    const train_config *c = &t->cfg;
    char sub[512];
    if (!t->sim) return DELTA_OK;
    if (c->gpu_device) {
        t->gpu = c->gpu_device;
    } else if (c->gpu_file) {
        t->gpu_loaded = delta_gpu_file_load(c->gpu_file, sub, sizeof sub);
        if (!t->gpu_loaded)
            return fail(t, DELTA_ERR_INVALID_ARG, "--gpu-file: %s", sub);
        t->gpu = t->gpu_loaded;
    } else {
        t->gpu = delta_gpu_preset_find(c->gpu);
        if (!t->gpu) return fail(t, DELTA_ERR_INVALID_ARG, "unknown GPU "
                                 "'%s'; see --gpu help", c->gpu);
    }
    return DELTA_OK;
}

/* The backend, made before the programs are built so that they are
 * fitted to its kernels (build_shape). Its budget comes later, from the
 * plan (set_budget). */
static delta_status make_backend(trainer *t) {
    train_config *c = &t->cfg;
    char sub[512];
    const delta_gpu_preset *gpu = t->gpu;
    /* Every backend's options; the registry reads the one it makes.
     * The cpu link: unthrottled when nothing can be swapped (no budget);
     * with a budget the backend's default (see delta/backend.h). */
    delta_sim_backend_opts sim = {
        .gpu = gpu ? gpu->name : NULL, .device = gpu,
        .interconnect = delta_interconnect_find(
            c->interconnect ? c->interconnect : "nvlink")};
    delta_cuda_backend_opts cuda = {.device = 0};
    bool budget = c->budget.kind != BUDGET_UNLIMITED;
    delta_cpu_backend_opts cpu = {
        .link_gbps = c->link_set ? c->link_gbps : budget ? -1.0 : 0.0,
        .bf16_link = c->model.precision == DELTA_PRECISION_BF16,
        .link_latency_s = -1, .jitter_seed = (uint64_t)c->device_jitter};
    delta_status bst;
    t->backend = delta_backend_new(
        train_backend(c),
        &(delta_backend_opts){.cpu = &cpu, .sim = &sim, .cuda = &cuda}, &bst,
        sub, sizeof sub);
    /* the backends' messages name them ("cpu backend: ..."); no GPU is
     * exit 1 (this machine lacks it), a build without CUDA exit 2 (this
     * build cannot serve the request) */
    if (!t->backend) return fail(t, bst, "%s", sub);
    return DELTA_OK;
}

/* The budget in bytes (a percentage is of the plan's peak) and the
 * backend's and budget's lines. */
static delta_status set_budget(trainer *t) {
    train_config *c = &t->cfg;
    char b1[32], b2[32], b3[32];
    const delta_gpu_preset *gpu = t->gpu;
    switch (c->budget.kind) {
    case BUDGET_UNLIMITED:
        /* A simulated GPU's memory is its limit. */
        t->budget_bytes = gpu ? (size_t)gpu->memory_bytes : 0;
        break;
    case BUDGET_PERCENT:
        t->budget_bytes = (size_t)ceil((double)t->plan.peak_bytes *
                                       c->budget.percent / 100.0);
        break;
    case BUDGET_BYTES: t->budget_bytes = c->budget.bytes; break;
    }
    double bps = delta_backend_link_bps(t->backend);
    if (t->sim)
        info(t, "backend: sim %s (%s)", gpu->name, gpu->description);
    else if (train_on(c, "cuda"))
        info(t, "backend: cuda, device memory %s, link %.3g GB/s, "
             "convolutions on %s",
             delta_format_bytes(delta_backend_device_bytes(t->backend), b1,
                                sizeof b1),
             bps / 1e9, delta_cuda_conv_path(t->backend));
    else if (bps > 0)
        info(t, "backend: %s, %d threads, link %.3g GB/s",
             delta_backend_name(t->backend), delta_cpu_threads(), bps / 1e9);
    else
        info(t, "backend: %s, %d threads, link unthrottled",
             delta_backend_name(t->backend), delta_cpu_threads());
    if (t->budget_bytes)
        info(t, "budget: %s%s; dry plan: peak %s, minimum %s (op %d %s %s)",
             delta_format_bytes((double)t->budget_bytes, b1, sizeof b1),
             c->budget.kind == BUDGET_UNLIMITED ? " (the GPU's memory)" : "",
             delta_format_bytes((double)t->plan.peak_bytes, b2, sizeof b2),
             delta_format_bytes((double)t->plan.min_budget_bytes, b3,
                                sizeof b3),
             t->plan.min_budget_op, t->plan.min_budget_op_type,
             t->plan.min_budget_op_name);
    else
        info(t, "budget: unlimited; dry plan: peak %s",
             delta_format_bytes((double)t->plan.peak_bytes, b1, sizeof b1));

    t->plans = delta_plan_cache_new();
    if (!t->plans) return fail(t, DELTA_ERR_NOMEM, "out of memory");
    return DELTA_OK;
}

/* Adds the seconds one shape took to get ready (its program built, the
 * first time, and its session created) to the run's planning time. */
static void note_plan(trainer *t, double s) {
    t->result.plan_s += s;
    if (s > t->result.plan_max_s) t->result.plan_max_s = s;
}

/* Creates the session of shape i (none may be alive: the backend holds one
 * arena) and makes shape i the current program. */
static delta_status open_session(trainer *t, int i) {
    DELTA_ASSERT(!t->session);
    train_shape *sh = &t->shapes[i];
    delta_tensor *outputs[1] = {sh->model.logits};
    delta_session_opts so = {
        .backend = t->backend,
        .budget_bytes = t->budget_bytes,
        .policy = t->cfg.policy,
        .outputs = outputs,
        .n_outputs = will_evaluate(t) ? 1 : 0,
        .trace = t->trace,
        .plans = t->plans,
        .host_limit_bytes = t->cfg.host_memory,
        .run_ahead = t->cfg.run_ahead,
        .sync_every_op = t->cfg.sync_every_op,
        .check_streams = t->cfg.check_streams,
        .comm = t->sim ? NULL : t->cfg.comm,
    };
    delta_status st;
    char sub[512], sh_str[64];
    t->session = delta_session_new(sh->ctx, &so, &st, sub, sizeof sub);
    if (!t->session) {
        if (st == DELTA_OK) st = DELTA_ERR_STATE;
        if (i == 0) return fail(t, st, "%s", sub);
        return fail(t, st, "%s: %s", shape_str(t, sh, sh_str, sizeof sh_str),
                    sub);
    }
    t->cur = i;
    t->ctx = sh->ctx;
    t->model = sh->model;
    t->n_model_tensors = sh->n_model_tensors;
    return DELTA_OK;
}

/* Makes shape (batch, seq_len) the session's, switching sessions when it
 * is not: parameters and state go through host buffers, the step counter
 * goes on, the constants are written for the new shape. */
static delta_status use_shape(trainer *t, int64_t batch, int64_t seq_len) {
    if (t->image) seq_len = 0;
    const train_shape *cur = &t->shapes[t->cur];
    if (t->session && cur->batch == batch && cur->seq_len == seq_len)
        return DELTA_OK;
    double t0 = progress_now();
    int i = shape_index(t, batch, seq_len);
    double build_s = progress_now() - t0;
    if (i < 0) return t->shape_st;
    train_shape *from = &t->shapes[t->cur], *to = &t->shapes[i];
    /* sim computes no values: nothing to carry */
    bool carry = !t->sim;
    int n = from->n_persist;
    t0 = progress_now();
    if (carry && !t->persist_buf) {
        t->persist_buf = calloc((size_t)(n ? n : 1), sizeof *t->persist_buf);
        if (!t->persist_buf) return fail(t, DELTA_ERR_NOMEM, "out of memory");
        for (int k = 0; k < n; k++) {
            size_t bytes = delta_tensor_bytes(from->persist[k]);
            t->persist_buf[k] = malloc(bytes ? bytes : 1);
            if (!t->persist_buf[k])
                return fail(t, DELTA_ERR_NOMEM, "out of memory for a host "
                            "copy of '%s'",
                            delta_tensor_name(from->persist[k]));
        }
    }
    delta_status st = DELTA_OK;
    for (int k = 0; carry && k < n; k++) {
        const delta_tensor *x = from->persist[k];
        st = delta_session_read(t->session, x, t->persist_buf[k],
                                delta_tensor_bytes(x));
        if (st != DELTA_OK)
            return fail(t, st, "reading '%s' to change shapes: %s",
                        delta_tensor_name(x), delta_session_error(t->session));
    }
    int64_t step = delta_session_step(t->session);
    t->result.switch_s += progress_now() - t0;
    delta_session_free(t->session);
    t->session = NULL;
    t0 = progress_now();
    st = open_session(t, i);
    note_plan(t, build_s + progress_now() - t0);
    if (st != DELTA_OK) return st;
    t0 = progress_now();
    delta_session_set_step(t->session, step);
    for (int k = 0; carry && k < n; k++) {
        const delta_tensor *x = to->persist[k];
        st = delta_session_write(t->session, x, t->persist_buf[k],
                                 delta_tensor_bytes(x));
        if (st != DELTA_OK)
            return fail(t, st, "writing '%s' to change shapes: %s",
                        delta_tensor_name(x), delta_session_error(t->session));
    }
    st = write_constants(t);
    t->result.switch_s += progress_now() - t0;
    return st;
}

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
    const char *data = c->data && strcmp(c->data, "fashion-mnist") &&
                       strcmp(c->data, "synthetic") ? c->data : NULL;
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
    if (st != DELTA_OK || !c->save || c->plan_only) return st;
    t->save_lock = outfile_lock(c->save, t->err, sizeof t->err);
    if (t->save_lock < 0) return DELTA_ERR_INVALID_ARG;
    t->save_locked = true;
    int stale = outfile_remove_stale_temps(c->save);
    if (stale)
        info(t, "removed %d temporar%s that a killed save of %s left", stale,
             stale == 1 ? "y" : "ies", c->save);
    return DELTA_OK;
}

/* This process's rank and the ranks of the run: the comm's (mpirun), or on
 * the sim and in delta plan those --ranks stands for. Ranks other than 0
 * print nothing and write no file but what a checkpoint needs of them. */
static delta_status setup_ranks(trainer *t) {
    train_config *c = &t->cfg;
    t->rank = delta_comm_rank(c->comm);
    t->ranks = delta_comm_size(c->comm);
    if (c->comm_timeout_s > 0) delta_comm_set_timeout(c->comm, c->comm_timeout_s);
    if (t->sim && t->ranks > 1)
        return fail(t, DELTA_ERR_INVALID_ARG, "the sim backend stands for "
                    "several GPUs in one process: run it without mpirun, "
                    "with --ranks %d", t->ranks);
    if (c->ranks && t->ranks > 1 && c->ranks != t->ranks)
        return fail(t, DELTA_ERR_INVALID_ARG, "--ranks %d: this run has %d "
                    "ranks (mpirun -np %d); leave --ranks out", c->ranks,
                    t->ranks, t->ranks);
    if (c->ranks > 1 && t->ranks == 1 && !t->sim && !c->plan_only)
        return fail(t, DELTA_ERR_INVALID_ARG, "--ranks %d: a run on the %s "
                    "backend has the ranks mpirun starts (mpirun -np %d "
                    "delta train ...); --ranks is for --backend sim and "
                    "delta plan", c->ranks, train_backend(c), c->ranks);
    if (c->ranks) t->ranks = c->ranks;
    char why[512];
    if (train_on(c, "cuda") && t->ranks > 1 && !c->plan_only &&
        !delta_cuda_nccl_available(why, sizeof why))
        return fail(t, DELTA_ERR_UNSUPPORTED, "%d ranks on --backend cuda "
                    "reduce through NCCL: %s", t->ranks, why);
    if (c->interconnect && !t->sim)
        return fail(t, DELTA_ERR_INVALID_ARG, "--interconnect prices the "
                    "collectives on a simulated GPU (--backend sim); real "
                    "ranks use the link they have");
    if (c->zero && t->ranks == 1 && t->rank == 0 && !c->quiet)
        fprintf(stderr, "delta %s: warning: --zero 1 shards the optimizer "
                "state across ranks, and this run has one (mpirun -np P, or "
                "--ranks P on the sim and in plan)\n",
                c->plan_only ? "plan" : "train");
    if (t->rank > 0) {
        c->quiet = true;
        c->json = NULL;
        c->trace = NULL;
    }
    return DELTA_OK;
}

delta_status trainer_setup(trainer *t, const train_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    train_config *c = &t->cfg;
    t->sim = train_on(c, "sim");
    delta_status st_r = setup_ranks(t);
    t->info = c->quiet ? NULL : stderr;
    if (st_r != DELTA_OK) return st_r;
    t->result.final_loss = NAN;
    if (!c->gpu)
        c->gpu = c->gpu_device ? c->gpu_device->name
                 : c->gpu_file ? c->gpu_file : DEFAULT_GPU;
    /* with a budget, delta decides; without one nothing needs managing */
    if (!c->policy)
        c->policy = c->budget.kind == BUDGET_UNLIMITED ? "keep" : "delta";
    if (c->threads > 0) delta_cpu_set_threads(c->threads);
    if (t->sim && c->save)
        return fail(t, DELTA_ERR_INVALID_ARG, "--save: the sim backend "
                    "computes no values, so there is nothing to save");
    if (c->plan_only && c->trace)
        return fail(t, DELTA_ERR_INVALID_ARG, "--trace: delta plan runs "
                    "nothing, so there is nothing to trace; give it to "
                    "delta train");
    t->saved_step = -1;
    delta_status st0 = resume_check_options(t);
    if (st0 != DELTA_OK) return st0;

    st0 = check_outputs(t);
    if (st0 != DELTA_OK) return st0;

    /* The family decides the data: image_size is set for classifiers. */
    delta_model_config probe = {.name = c->model.name, .batch = 1}, pr;
    char sub[512];
    delta_status st = delta_model_resolve(&probe, &pr, sub, sizeof sub);
    if (st != DELTA_OK) return fail(t, st, "%s", sub);
    c->model.name = pr.name;
    t->image = pr.image_size > 0;
    /* BERT is the one masked language model. */
    bool masked = !t->image && strncmp(pr.name, "bert", 4) == 0;
    if (t->image && c->seq_len_max)
        return fail(t, DELTA_ERR_INVALID_ARG, "--seq-len-range draws a "
                    "sequence length per step for the transformers (gpt2-*, "
                    "bert-*); %s is an image model", pr.name);
    if (!c->model.batch)
        c->model.batch = t->image ? DEFAULT_BATCH_IMAGES
                                  : DEFAULT_BATCH_TOKENS;
    if (!c->dropout_set)
        c->model.dropout = t->image ? 0.0f : DELTA_MODEL_DROPOUT_DEFAULT;
    if (c->optimizer == TRAIN_OPT_DEFAULT)
        c->optimizer = t->image ? TRAIN_OPT_SGD : TRAIN_OPT_ADAMW;

    st = t->image ? setup_image_data(t) : setup_token_data(t, masked);
    if (st != DELTA_OK) return st;
    if (t->data)
        info(t, "data: %s", delta_dataset_name(t->data));
    else
        info(t, "data: none (simulated)");

    /* The backend first, so the programs are fitted to its kernels; plan
     * alone needs none, except on cuda, whose workspaces are its own. */
    st = setup_gpu(t);
    if (st != DELTA_OK) return st;
    if (!c->plan_only || train_on(c, "cuda")) {
        st = make_backend(t);
        if (st != DELTA_OK) return st;
    }

    /* The main shape: the configured batch at the longest length. */
    double t0 = progress_now();
    if (shape_index(t, c->model.batch, c->model.seq_len) < 0)
        return t->shape_st;
    t->ctx = t->shapes[0].ctx;
    t->model = t->shapes[0].model;
    t->n_model_tensors = t->shapes[0].n_model_tensors;
    /* with the logits kept when the run evaluates, as the session keeps
     * them: --budget 100% (and what plan prints) is what keep needs */
    delta_tensor *outputs[1] = {t->model.logits};
    st = delta_dry_plan_build_outputs(t->ctx, outputs, will_evaluate(t) ? 1 : 0,
                                      &t->plan, sub, sizeof sub);
    double main_s = progress_now() - t0;
    if (st != DELTA_OK) return fail(t, st, "planning the step: %s", sub);
    const delta_model_config *m = &t->model.cfg;
    const char *bf16 = m->precision == DELTA_PRECISION_BF16
                           ? "; precision bf16 (fp32 master weights)" : "";
    if (t->image)
        info(t, "model: %s, %.2fM parameters, batch %" PRId64 ", %" PRId64
             "x%" PRId64 "x%" PRId64 " images, %" PRId64 " classes; %s lr %g%s",
             m->name, (double)t->model.n_params / 1e6, m->batch, m->channels,
             m->image_size, m->image_size, m->classes, t->optimizer_name,
             t->lr, bf16);
    else
        info(t, "model: %s, %.2fM parameters, batch %" PRId64 " x %s%" PRId64
             " tokens, vocab %" PRId64 ", dropout %g; %s lr %g%s", m->name,
             (double)t->model.n_params / 1e6, m->batch,
             c->seq_len_max ? seq_range_str(c, sub, sizeof sub) : "",
             m->seq_len, m->vocab, (double)m->dropout, t->optimizer_name,
             t->lr, bf16);

    if (c->json) {
        /* a resumed run continues its log (json_log_resume below) */
        t->json = json_log_open(c->json, c->resume != NULL, sub, sizeof sub);
        if (!t->json) return fail(t, DELTA_ERR_IO, "%s", sub);
    }
    if (c->plan_only) return DELTA_OK;
    /* Before the session, which writes into it from its creation on (the
     * persistent tensors' first placement), and so that a bad path is
     * refused before any training. */
    if (c->trace) {
        t->trace = delta_trace_open(c->trace, sub, sizeof sub);
        if (!t->trace) return fail(t, DELTA_ERR_IO, "--trace: %s", sub);
    }
    st = set_budget(t);
    if (st != DELTA_OK) return st;
    t0 = progress_now();
    st = open_session(t, 0);
    note_plan(t, main_s + progress_now() - t0);
    if (st != DELTA_OK) return st;
    st = write_constants(t);
    if (st != DELTA_OK) return st;
    if (c->load) {
        st = checkpoint_load(c->load, t->session, t->ctx, t->n_model_tensors,
                             &t->model, &t->start_step, stderr, t->err,
                             sizeof t->err);
        if (st != DELTA_OK) return st;
        info(t, "loaded %s (%" PRId64 " steps trained)", c->load,
             t->start_step);
    }
    if (t->data && !t->sim) {
        t->loader = delta_loader_new(t->data, m->batch, c->seed,
                                     !c->no_shuffle, c->drop_last, &st, sub,
                                     sizeof sub);
        if (!t->loader) return fail(t, st, "%s", sub);
        if (t->ranks > 1 &&
            delta_loader_set_shard(t->loader, t->rank, t->ranks) != DELTA_OK)
            return fail(t, DELTA_ERR_INVALID_ARG, "--drop-last: %" PRId64
                        " samples hold no global batch of %d ranks x %"
                        PRId64 "; give a smaller --batch or fewer ranks",
                        delta_dataset_len(t->data), t->ranks, m->batch);
        if (delta_batch_alloc(&t->batch, t->data, m->batch) != DELTA_OK)
            return fail(t, DELTA_ERR_NOMEM, "out of memory for a batch");
        delta_data_info in = delta_dataset_info(t->data);
        DELTA_ASSERT(delta_tensor_bytes(t->model.input) ==
                     (size_t)(m->batch * in.input_numel) * 4);
        DELTA_ASSERT(delta_tensor_bytes(t->model.target) ==
                     (size_t)(m->batch * in.target_numel) * 4);
        int64_t global = m->batch * t->ranks;
        int64_t rest = in.len % global;
        if (rest / t->ranks && !c->drop_last)
            info(t, "each epoch ends with a batch of %" PRId64 "%s (%" PRId64
                 " samples are not a multiple of %" PRId64 "): trained as "
                 "its own shape (--drop-last skips it)", rest / t->ranks,
                 t->ranks > 1 ? " per rank" : "", in.len, global);
        if (rest % t->ranks && !c->drop_last)
            info(t, "each epoch's last %" PRId64 " sample%s, left over when "
                 "its last batch is shared among %d ranks, %s skipped",
                 rest % t->ranks, rest % t->ranks == 1 ? "" : "s", t->ranks,
                 rest % t->ranks == 1 ? "is" : "are");
    }
    if (c->seq_len_max || (t->loader && !c->drop_last &&
                           delta_dataset_len(t->data) % (m->batch * t->ranks) /
                               t->ranks))
        info(t, "shapes change during the run: each shape's program is "
             "built once and reused%s "
             "(batch %" PRId64 "%s%s)", t->budget_bytes ? "; the budget is "
             "one figure, set against the largest shape" : "; the largest "
             "shape", m->batch, t->image ? "" : " x ",
             t->image ? "" : seq_max_str(t, sub, sizeof sub));
    if (c->resume) {
        st = resume_load(t);
        if (st != DELTA_OK) return st;
        if (!json_log_resume(t->json, t->start_step, sub, sizeof sub))
            return fail(t, DELTA_ERR_IO, "%s", sub);
        info(t, "resumed %s at step %" PRId64 "; training steps %" PRId64
             "..%" PRId64, c->resume, t->start_step, t->start_step + 1,
             c->steps);
    }
    return DELTA_OK;
}

/* ---- training -------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double trainer_median(double *v, int64_t n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Adds one step's figures to the run's: peaks as a max, the rest summed. */
static void add_step(train_result *r, const delta_step_stats *s) {
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

/* Copies the loader's batch into the session's inputs. */
static delta_status write_batch(trainer *t) {
    const delta_model *m = &t->model;
    delta_status st = delta_session_write(t->session, m->input,
                                          t->batch.input,
                                          delta_tensor_bytes(m->input));
    if (st == DELTA_OK)
        st = delta_session_write(t->session, m->target, t->batch.target,
                                 delta_tensor_bytes(m->target));
    if (st == DELTA_OK && m->mask)
        st = delta_session_write(t->session, m->mask, t->batch.mask,
                                 delta_tensor_bytes(m->mask));
    if (st != DELTA_OK)
        return fail(t, st, "writing a batch: %s",
                    delta_session_error(t->session));
    return DELTA_OK;
}

/* Sequence length of the step with session step counter `step`: uniform
 * in [seq_len_min, seq_len_max] from (seed, step) with --seq-len-range,
 * else the main shape's. */
#define SEQ_SALT 0x7365716c656e67ULL
static int64_t step_seq_len(const trainer *t, int64_t step) {
    const train_config *c = &t->cfg;
    if (t->image) return 0;
    if (!c->seq_len_max) return t->shapes[0].seq_len;
    uint64_t r = delta_mix64(delta_mix64(c->seed ^ SEQ_SALT) ^
                       ((uint64_t)step * 0x9e3779b97f4a7c15ULL));
    uint64_t span = (uint64_t)(c->seq_len_max - c->seq_len_min + 1);
    return c->seq_len_min +
           (int64_t)(((unsigned __int128)r * span) >> 64);
}

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

delta_status trainer_train(trainer *t) {
    const train_config *c = &t->cfg;
    int64_t fail_at = test_hook_step("DELTA_TEST_RANK_FAIL", t->rank);
    int64_t hang_at = test_hook_step("DELTA_TEST_RANK_HANG", t->rank);
    /* a copy: shapes[] grows (and moves) as new shapes come */
    const delta_model_config main_cfg = t->shapes[0].model.cfg,
                             *m = &main_cfg;
    /* --steps counts from the start of training: a resumed run does the
     * rest; its steps are numbered from where it resumed */
    int64_t first = t->resumed ? t->start_step : 0;
    int64_t steps = c->steps - first;
    double *times = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *times);
    double *step_units = malloc((size_t)(steps > 0 ? steps : 1) *
                                sizeof *step_units);
    if (!times || !step_units) {
        free(times);
        free(step_units);
        return fail(t, DELTA_ERR_NOMEM, "out of memory");
    }
    /* samples or tokens of a step over all ranks */
    double units = (double)t->ranks * (t->image ? (double)m->batch
                                                : (double)(m->batch * m->seq_len));
    progress p;
    progress_init(&p, progress_pick_mode(stderr, c->quiet), stderr, c->steps,
                  t->image ? "samples" : "tokens", units, t->sim,
                  t->budget_bytes);
    train_result *r = &t->result;
    delta_status st = DELTA_OK;
    bool one_shape = true;
    double t0 = progress_now();
    for (int64_t i = 0; i < steps; i++) {
        if (first + i + 1 == fail_at) {
            st = fail(t, DELTA_ERR_STATE, "step %" PRId64 ": "
                      "DELTA_TEST_RANK_FAIL: rank %d fails here as asked",
                      fail_at, t->rank);
            break;
        }
        while (first + i + 1 == hang_at) sleep(1000);
        int64_t T = step_seq_len(t, delta_session_step(t->session));
        int64_t n = m->batch;
        if (t->loader) {
            delta_loader_next_len(t->loader, &t->batch, T);
            n = t->batch.size;
        }
        int before = t->cur;
        st = use_shape(t, n, T);
        if (st != DELTA_OK) break;
        if (t->cur != before) r->switches++;
        if (t->loader) {
            st = write_batch(t);
            if (st != DELTA_OK) break;
        }
        if (!t->shapes[t->cur].trained) {
            t->shapes[t->cur].trained = true;
            r->shapes++;
        }
        r->partial_batches += n < m->batch;
        step_units[i] = (double)t->ranks * (t->image ? (double)n
                                                     : (double)(n * T));
        one_shape &= step_units[i] == units;
        p.units_per_step = step_units[i];
        delta_step_stats s = {0};
        st = delta_session_run(t->session, DELTA_RUN_STEP, &s);
        if (st != DELTA_OK) {
            /* the host store's cap is only worth raising when one was
             * set; otherwise the host itself is out of memory */
            fail(t, st, "step %" PRId64 ": %s%s", first + i + 1,
                 delta_session_error(t->session),
                 st != DELTA_ERR_NOMEM ? ""
                 : c->host_memory ? "; give the host store more "
                   "(--host-memory) or the device a larger --budget, so "
                   "that less is swapped"
                 : "; the host is out of memory: free some, or give the "
                   "device a larger --budget, so that less is swapped");
            break;
        }
        double loss = NAN;
        if (!t->sim) {
            float l = 0;
            st = delta_session_read(t->session, t->model.loss, &l, sizeof l);
            if (st != DELTA_OK) {
                fail(t, st, "reading the loss: %s",
                     delta_session_error(t->session));
                break;
            }
            loss = l;
            /* data parallel: the mean over the ranks (summed in rank
             * order: every rank reports the same figure) */
            if (t->ranks > 1) {
                delta_comm_sum(c->comm, &loss, 1, "the step's loss");
                loss /= t->ranks;
            }
        }
        times[i] = s.step_s;
        if (t->step_log) t->step_log[i] = s;
        r->steps_done = i + 1;
        r->final_loss = loss;
        add_step(r, &s);
        progress_step(&p, first + i + 1, loss, &s);
        json_log_step(t->json, first + i + 1, loss, &s, t->budget_bytes != 0,
                      n, T);
        if (!t->sim && !isfinite(loss)) {
            t->fail_everywhere = true; /* every rank has this mean */
            st = fail(t, DELTA_ERR_STATE, "the loss is %g at step %" PRId64
                      ": training diverged; try a lower --lr (now %g)", loss,
                      first + i + 1, t->lr);
            break;
        }
        if (resume_due(t, first + i + 1)) {
            st = wrote(t, resume_save(t));
            if (st != DELTA_OK) break;
        }
    }
    progress_finish(&p);
    /* data parallel: the largest rank's peak (the budget is per rank), now,
     * while every rank is here (rank 0 alone evaluates afterwards) */
    if (st == DELTA_OK && t->ranks > 1 && !t->sim) {
        double peak = (double)r->peak_device_bytes;
        delta_comm_max(c->comm, &peak, 1, "the ranks' peaks");
        r->peak_device_bytes = (size_t)peak;
    }
    if (st != DELTA_OK) resume_note_failure(t);
    r->train_s = progress_now() - t0;
    /* One shape: per the median step (robust to a slow first step); with
     * changing shapes, the median of the steps' own rates. */
    for (int64_t i = 0; i < r->steps_done && !one_shape; i++)
        step_units[i] = times[i] > 0 ? step_units[i] / times[i] : 0;
    double rate = one_shape ? 0 : trainer_median(step_units, r->steps_done);
    r->median_step_s = trainer_median(times, r->steps_done);
    if (one_shape)
        r->units_per_s = r->median_step_s > 0 ? units / r->median_step_s : 0;
    else
        r->units_per_s = rate;
    free(times);
    free(step_units);
    return st;
}

/* ---- evaluation ------------------------------------------------------------ */

delta_status trainer_evaluate(trainer *t) {
    if (!will_evaluate(t)) return DELTA_OK;
    /* At the main shape (training may have ended on a shorter batch). */
    delta_status st = use_shape(t, t->shapes[0].batch, t->shapes[0].seq_len);
    if (st != DELTA_OK) return st;
    const delta_model_config *m = &t->model.cfg;
    char sub[512];
    delta_dataset *test = delta_dataset_fashion_mnist_new(
        t->fmnist_dir, DELTA_SPLIT_TEST, &st, sub, sizeof sub);
    if (!test) return fail(t, st, "%s", sub);
    delta_data_info ti = delta_dataset_info(test),
                    di = delta_dataset_info(t->data);
    if (ti.channels != di.channels || ti.height != di.height ||
        ti.width != di.width) {
        st = fail(t, DELTA_ERR_FORMAT, "the test images of %s are %" PRId64
                  "x%" PRId64 "x%" PRId64 ", the training images %" PRId64
                  "x%" PRId64 "x%" PRId64 "; they must match",
                  t->fmnist_dir, ti.channels, ti.height, ti.width,
                  di.channels, di.height, di.width);
        delta_dataset_free(test);
        return st;
    }
    /* The last batch may be partial: its remaining rows keep the previous
     * batch's samples (eval mode treats rows independently) and are not
     * counted. */
    delta_loader *l = delta_loader_new(test, m->batch, t->cfg.seed, false,
                                       false, &st, sub, sizeof sub);
    int64_t classes = m->classes;
    float *logits = malloc((size_t)(m->batch * classes) * sizeof *logits);
    if (!l || !logits) {
        if (l) st = fail(t, DELTA_ERR_NOMEM, "out of memory");
        else fail(t, st, "%s", sub);
        goto done;
    }
    int64_t nb = delta_loader_batches_per_epoch(l);
    if (t->cfg.eval_batches > 0 && t->cfg.eval_batches < nb)
        nb = t->cfg.eval_batches;
    info(t, "evaluating on %" PRId64 " test images",
         nb * m->batch < ti.len ? nb * m->batch : ti.len);
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        delta_loader_next(l, &t->batch);
        st = write_batch(t);
        if (st != DELTA_OK) goto done;
        st = delta_session_run(t->session, DELTA_RUN_EVAL, NULL);
        if (st == DELTA_OK)
            st = delta_session_read(t->session, t->model.logits, logits,
                                    delta_tensor_bytes(t->model.logits));
        if (st != DELTA_OK) {
            fail(t, st, "evaluating: %s", delta_session_error(t->session));
            goto done;
        }
        for (int64_t i = 0; i < t->batch.size; i++) {
            const float *row = logits + i * classes;
            int64_t best = 0;
            double mx = row[0];
            for (int64_t k = 1; k < classes; k++)
                if (row[k] > row[best]) best = k, mx = row[k];
            double se = 0;
            for (int64_t k = 0; k < classes; k++) se += exp(row[k] - mx);
            int32_t y = t->batch.target[i];
            loss_sum += mx + log(se) - row[y];
            correct += best == y;
            seen++;
        }
    }
    t->result.evaluated = true;
    t->result.test_samples = seen;
    t->result.test_accuracy = seen ? (double)correct / (double)seen : 0;
    t->result.test_loss = seen ? loss_sum / (double)seen : NAN;
    st = DELTA_OK;
done:
    free(logits);
    delta_loader_free(l);
    delta_dataset_free(test);
    return st;
}

/* ---- save and report ------------------------------------------------------- */

delta_status trainer_save(trainer *t) {
    if (!t->cfg.save) return DELTA_OK;
    int64_t step = t->start_step + t->result.steps_done;
    /* a run with checkpoints (or resumed from one) ends with one too,
     * unless the last step's is already written */
    if (t->cfg.checkpoint_every || t->resumed) {
        delta_status st =
            t->saved_step == step ? DELTA_OK : wrote(t, resume_save(t));
        if (st == DELTA_OK)
            info(t, "saved %s (training checkpoint of step %" PRId64 "; "
                 "--resume continues it)", t->cfg.save, step);
        return st;
    }
    /* The current session's tensors (the same at every shape) under the
     * main shape's config (its seq_len, the longest, goes in the
     * metadata). Rank 0 writes: every rank holds every parameter. */
    if (t->rank > 0) return DELTA_OK;
    checkpoint_extra weights = {.bf16 = t->cfg.save_bf16};
    delta_status st = wrote(
        t, checkpoint_save(t->cfg.save, t->session, t->ctx,
                           t->n_model_tensors, &t->shapes[0].model, step,
                           &weights, t->err, sizeof t->err));
    if (st == DELTA_OK)
        info(t, "saved %s%s", t->cfg.save,
             t->cfg.save_bf16 ? " (weights rounded to BF16)" : "");
    return st;
}

/* What a managed policy did over the run, in words, on stdout (keep never
 * swaps or recomputes: nothing to say). */
static void print_policy_totals(const trainer *t) {
    const train_result *r = &t->result;
    if (!strcmp(t->cfg.policy, "keep") || r->steps_done == 0) return;
    char out[32], in[32], moved[32];
    const char *secs = t->sim ? " simulated" : "";
    printf("%s over %" PRId64 " steps: dropped %" PRId64 " activations, "
           "recomputed %" PRId64 " ops in %.3f%s s; swapped out %s (%" PRId64
           " copies), swapped in %s (%" PRId64 " copies); compute stalled "
           "%.3f%s s; %" PRId64 " compaction moves (%s)\n",
           t->cfg.policy, r->steps_done, r->drops, r->recomputed_ops,
           r->recompute_s, secs,
           delta_format_bytes((double)r->swap_out_bytes, out, sizeof out),
           r->swap_outs,
           delta_format_bytes((double)r->swap_in_bytes, in, sizeof in),
           r->swap_ins, r->stall_s, secs, r->defrag_moves,
           delta_format_bytes((double)r->defrag_bytes, moved, sizeof moved));
}

/* The run's totals of the policy's work into the JSON summary. */
static void add_policy_totals(cJSON *s, const train_result *r) {
    cJSON_AddNumberToObject(s, "swap_out_bytes", (double)r->swap_out_bytes);
    cJSON_AddNumberToObject(s, "swap_in_bytes", (double)r->swap_in_bytes);
    cJSON_AddNumberToObject(s, "swap_outs", (double)r->swap_outs);
    cJSON_AddNumberToObject(s, "swap_ins", (double)r->swap_ins);
    cJSON_AddNumberToObject(s, "drops", (double)r->drops);
    cJSON_AddNumberToObject(s, "dropped_bytes", (double)r->dropped_bytes);
    cJSON_AddNumberToObject(s, "recomputed_ops", (double)r->recomputed_ops);
    cJSON_AddNumberToObject(s, "recompute_s", r->recompute_s);
    cJSON_AddNumberToObject(s, "stall_s", r->stall_s);
    cJSON_AddNumberToObject(s, "defrag_moves", (double)r->defrag_moves);
    cJSON_AddNumberToObject(s, "defrag_bytes", (double)r->defrag_bytes);
    /* blocking host waits inside steps (0 in steady steps), and the host's
     * busy time per step beside the device's: which one bounds a step */
    cJSON_AddNumberToObject(s, "host_syncs", (double)r->host_syncs);
    cJSON_AddNumberToObject(s, "throttle_waits", (double)r->throttle_waits);
    double n = r->steps_done > 0 ? (double)r->steps_done : 1;
    cJSON_AddNumberToObject(s, "host_busy_s_per_step", r->host_busy_s / n);
    cJSON_AddNumberToObject(s, "device_busy_s_per_step", r->device_busy_s / n);
}

/* Shapes and what planning them cost, in words, on stdout. */
static void print_shapes(const trainer *t) {
    const train_result *r = &t->result;
    printf("shapes: %" PRId64 " trained", r->shapes);
    if (r->partial_batches)
        printf(" (%" PRId64 " step%s on an epoch's shorter last batch)",
               r->partial_batches, r->partial_batches == 1 ? "" : "s");
    printf("; planning %.3f s (programs, dry plans and sessions of %d "
           "shape%s; the longest %.3f s)", r->plan_s, t->n_shapes,
           t->n_shapes == 1 ? "" : "s", r->plan_max_s);
    if (r->switches)
        printf("; %" PRId64 " session change%s, %.3f s moving parameters "
               "and state", r->switches, r->switches == 1 ? "" : "s",
               r->switch_s);
    printf("\n");
}

delta_status trainer_report(trainer *t) {
    const train_config *c = &t->cfg;
    train_result *r = &t->result;
    const delta_model_config *m = &t->shapes[0].model.cfg;
    if (t->rank > 0) return DELTA_OK;
    char peak[32], budget[32], line[512];
    delta_format_bytes((double)r->peak_device_bytes, peak, sizeof peak);
    if (t->budget_bytes)
        delta_format_bytes((double)t->budget_bytes, budget, sizeof budget);
    else
        snprintf(budget, sizeof budget, "unlimited");
    const char *unit = t->image ? "samples/s" : "tokens/s";
    /* "4", or "4 per rank x 2 ranks" (ZeRO-1 said too); the peak is then
     * the largest rank's */
    char bstr[96];
    if (t->ranks > 1)
        snprintf(bstr, sizeof bstr, "%" PRId64 " per rank x %d ranks%s",
                 m->batch, t->ranks, c->zero ? " (ZeRO-1)" : "");
    else
        snprintf(bstr, sizeof bstr, "%" PRId64, m->batch);
    const char *per = t->ranks > 1 ? " per rank" : "";
    int n;
    if (r->steps_done == 0)
        n = snprintf(line, sizeof line, "%s: 0 steps of batch %s, nothing "
                     "trained", m->name, bstr);
    else if (t->sim)
        n = snprintf(line, sizeof line, "%s on simulated %s: %" PRId64
                     " steps of batch %s, median step %.4g s "
                     "(simulated), %.0f %s, peak device memory%s %s of %s "
                     "(policy %s)", m->name, c->gpu, r->steps_done, bstr,
                     r->median_step_s, r->units_per_s, unit, per, peak,
                     budget, c->policy);
    else
        n = snprintf(line, sizeof line, "%s: %" PRId64 " steps of batch %s "
                     "in %.1f s, final loss %.4f, %.0f %s, peak device "
                     "memory%s %s (budget %s, policy %s)", m->name,
                     r->steps_done, bstr, r->train_s, r->final_loss,
                     r->units_per_s, unit, per, peak, budget, c->policy);
    if (c->quiet && r->evaluated && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, ", test accuracy %.4f",
                 r->test_accuracy);
    printf("%s\n", line);
    if (!c->quiet) print_policy_totals(t);
    if (!c->quiet) print_shapes(t);
    if (r->evaluated && !c->quiet)
        printf("test accuracy: %.4f (%" PRId64 " test images, loss %.4f)\n",
               r->test_accuracy, r->test_samples, r->test_loss);
    fflush(stdout);

    if (!t->json) return DELTA_OK;
    cJSON *top = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(top, "summary");
    if (!s) {
        cJSON_Delete(top);
        return fail(t, DELTA_ERR_NOMEM, "out of memory");
    }
    cJSON_AddStringToObject(s, "model", m->name);
    cJSON_AddNumberToObject(s, "batch", (double)m->batch);
    /* data parallel: batch is per rank, the loss the ranks' mean and the
     * peak the largest rank's */
    cJSON_AddNumberToObject(s, "ranks", (double)t->ranks);
    cJSON_AddNumberToObject(s, "zero", (double)(t->ranks > 1 ? c->zero : 0));
    if (t->sim && t->ranks > 1)
        cJSON_AddStringToObject(s, "interconnect",
                                c->interconnect ? c->interconnect : "nvlink");
    cJSON_AddNumberToObject(s, "steps", (double)r->steps_done);
    cJSON_AddStringToObject(s, "backend", train_backend(c));
    if (t->sim) cJSON_AddStringToObject(s, "gpu", c->gpu);
    else cJSON_AddNullToObject(s, "gpu");
    cJSON_AddBoolToObject(s, "simulated", t->sim);
    cJSON_AddStringToObject(s, "policy", c->policy);
    if (t->budget_bytes)
        cJSON_AddNumberToObject(s, "budget_bytes", (double)t->budget_bytes);
    else
        cJSON_AddNullToObject(s, "budget_bytes");
    cJSON_AddNumberToObject(s, "peak_device_bytes",
                            (double)r->peak_device_bytes);
    cJSON_AddNumberToObject(s, "baseline_peak_bytes",
                            (double)t->plan.peak_bytes);
    cJSON_AddNumberToObject(s, "min_budget_bytes",
                            (double)t->plan.min_budget_bytes);
    add_policy_totals(s, r);
    cJSON_AddNumberToObject(s, "plan_s", r->plan_s);
    cJSON_AddNumberToObject(s, "plan_max_s", r->plan_max_s);
    cJSON_AddNumberToObject(s, "shapes", (double)r->shapes);
    cJSON_AddNumberToObject(s, "programs", (double)t->n_shapes);
    cJSON_AddNumberToObject(s, "shape_switches", (double)r->switches);
    cJSON_AddNumberToObject(s, "switch_s", r->switch_s);
    cJSON_AddNumberToObject(s, "partial_batches", (double)r->partial_batches);
    if (!t->image) {
        cJSON_AddNumberToObject(s, "seq_len", (double)m->seq_len);
        if (c->seq_len_max) {
            cJSON_AddNumberToObject(s, "seq_len_min",
                                    (double)c->seq_len_min);
            cJSON_AddNumberToObject(s, "seq_len_max",
                                    (double)c->seq_len_max);
        }
    }
    cJSON_AddNumberToObject(s, "median_step_s", r->median_step_s);
    json_add_number_or_null(s, "final_loss", r->final_loss);
    cJSON_AddNumberToObject(s, t->image ? "samples_per_s" : "tokens_per_s",
                            r->units_per_s);
    if (r->evaluated) {
        cJSON_AddNumberToObject(s, "test_accuracy", r->test_accuracy);
        json_add_number_or_null(s, "test_loss", r->test_loss);
        cJSON_AddNumberToObject(s, "test_samples", (double)r->test_samples);
    }
    cJSON_AddStringToObject(s, "data", t->data ? delta_dataset_name(t->data)
                                               : "none");
    cJSON_AddStringToObject(s, "optimizer", t->optimizer_name);
    cJSON_AddNumberToObject(s, "lr", t->lr);
    cJSON_AddNumberToObject(s, "seed", (double)c->seed);
    cJSON_AddNumberToObject(s, "params", (double)t->model.n_params);
    bool ok = json_log_write(t->json, top);
    cJSON_Delete(top);
    char sub[512];
    ok = json_log_close(t->json, sub, sizeof sub) && ok;
    t->json = NULL;
    if (!ok) return wrote(t, fail(t, DELTA_ERR_IO, "%s", sub));
    return DELTA_OK;
}

delta_status trainer_close_trace(trainer *t) {
    if (!t->trace) return DELTA_OK;
    /* The session is the trace's writer (to its last copy): it goes first. */
    delta_session_free(t->session);
    t->session = NULL;
    char sub[512];
    delta_status st = delta_trace_close(t->trace, sub, sizeof sub);
    t->trace = NULL;
    if (st != DELTA_OK)
        return wrote(t, fail(t, st, "--trace %s: %s", t->cfg.trace, sub));
    info(t, "trace: %s", t->cfg.trace);
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
    delta_session_free(t->session);
    t->session = NULL;
    if (t->trace) {
        char sub[512];
        delta_trace_close(t->trace, sub, sizeof sub);
        t->trace = NULL;
    }
    delta_backend_free(t->backend);
    delta_gpu_file_free(t->gpu_loaded); /* after the backend that used it */
    delta_plan_cache_free(t->plans);
    delta_batch_release(&t->batch);
    delta_loader_free(t->loader);
    delta_dataset_free(t->data);
    if (t->persist_buf && t->n_shapes)
        for (int k = 0; k < t->shapes[0].n_persist; k++)
            free(t->persist_buf[k]);
    free(t->persist_buf);
    for (int i = 0; i < t->n_shapes; i++) shape_free(&t->shapes[i]);
    free(t->shapes);
    memset(t, 0, sizeof *t);
}

/* Bytes of the activations the forward pass leaves for backward: roots
 * produced by a forward op and still alive at the first backward op (what
 * PyTorch's saved_tensors_hooks would see, less parameters and inputs);
 * scripts/validate_memory.py compares it with PyTorch's. */
static size_t saved_for_backward_bytes(const delta_ctx *ctx) {
    int n_ops = delta_ctx_n_ops(ctx), bwd0 = n_ops;
    for (int i = 0; i < n_ops && bwd0 == n_ops; i++) {
        delta_op_info oi;
        delta_ctx_op_info(ctx, i, &oi);
        if (oi.phase != DELTA_PHASE_FORWARD) bwd0 = i;
    }
    int n = delta_dry_plan_trace(ctx, NULL, 0);
    delta_dry_block *b = n > 0 ? malloc((size_t)n * sizeof *b) : NULL;
    size_t sum = 0;
    if (b && delta_dry_plan_trace(ctx, b, n) == n)
        for (int i = 0; i < n; i++)
            if (b[i].kind == DELTA_KIND_ACTIVATION && b[i].op >= 0 &&
                b[i].op < bwd0 && b[i].last >= bwd0)
                sum += b[i].size;
    free(b);
    return sum;
}

delta_status trainer_print_plan(trainer *t) {
    const delta_dry_plan *p = &t->plan;
    const delta_model_config *m = &t->model.cfg;
    char b[8][32];
    printf("%s, batch %" PRId64 ", %s: %d ops, %d blocks, planned in %.1f ms\n",
           m->name, m->batch, t->optimizer_name, p->n_ops, p->n_blocks,
           p->plan_seconds * 1e3);
    printf("  parameters %s, gradients (all backward tensors) %s, optimizer and other state %s, "
           "inputs %s, activations %s\n",
           delta_format_bytes((double)p->param_bytes, b[0], 32),
           delta_format_bytes((double)p->grad_bytes, b[1], 32),
           delta_format_bytes((double)(p->state_bytes + p->const_bytes), b[2], 32),
           delta_format_bytes((double)p->input_bytes, b[3], 32),
           delta_format_bytes((double)p->activation_bytes, b[4], 32));
    printf("  unconstrained peak %s (max-live bound %s): what keep needs, "
           "--budget 100%%\n",
           delta_format_bytes((double)p->peak_bytes, b[5], 32),
           delta_format_bytes((double)p->max_live_bytes, b[6], 32));
    printf("  minimum budget %s, for op %d (%s, %s)\n",
           delta_format_bytes((double)p->min_budget_bytes, b[7], 32),
           p->min_budget_op, p->min_budget_op_type, p->min_budget_op_name);
    /* data parallel: the figures above are one rank's */
    int n_coll = 0, n_params = 0, owned = 0;
    for (int i = 0; t->ranks > 1 && i < delta_ctx_n_ops(t->ctx); i++) {
        delta_op_info oi;
        delta_ctx_op_info(t->ctx, i, &oi);
        n_coll += !strcmp(oi.type, "allreduce") ||
                  !strcmp(oi.type, "reduce_scatter");
    }
    for (int i = 0; t->ranks > 1 && i < delta_ctx_n_tensors(t->ctx); i++) {
        const delta_tensor *x = delta_ctx_tensor(t->ctx, i);
        if (delta_tensor_kind_of(x) != DELTA_KIND_PARAM) continue;
        n_params++;
        owned += delta_dp_owner(x) == t->rank;
    }
    if (t->ranks > 1 && t->cfg.zero)
        printf("  data parallel: rank %d of %d, gradients in %d collectives; "
               "ZeRO-1: this rank updates and keeps the optimizer state of %d "
               "of the %d parameters\n", t->rank, t->ranks, n_coll, owned,
               n_params);
    else if (t->ranks > 1)
        printf("  data parallel: rank %d of %d, gradients in %d collectives; "
               "every rank keeps the whole optimizer state (--zero 1 shards "
               "it)\n", t->rank, t->ranks, n_coll);
    if (!t->json) return DELTA_OK;
    cJSON *top = cJSON_CreateObject();
    cJSON *s = cJSON_AddObjectToObject(top, "plan");
    cJSON_AddStringToObject(s, "model", m->name);
    cJSON_AddNumberToObject(s, "batch", (double)m->batch);
    cJSON_AddNumberToObject(s, "ops", p->n_ops);
    cJSON_AddNumberToObject(s, "ranks", t->ranks);
    cJSON_AddNumberToObject(s, "zero", t->ranks > 1 ? t->cfg.zero : 0);
    cJSON_AddNumberToObject(s, "param_bytes", (double)p->param_bytes);
    cJSON_AddNumberToObject(s, "grad_bytes", (double)p->grad_bytes);
    cJSON_AddNumberToObject(s, "state_bytes", (double)(p->state_bytes + p->const_bytes));
    cJSON_AddNumberToObject(s, "input_bytes", (double)p->input_bytes);
    cJSON_AddNumberToObject(s, "activation_bytes", (double)p->activation_bytes);
    cJSON_AddNumberToObject(s, "saved_for_backward_bytes",
                            (double)saved_for_backward_bytes(t->ctx));
    cJSON_AddNumberToObject(s, "baseline_peak_bytes", (double)p->peak_bytes);
    cJSON_AddNumberToObject(s, "max_live_bytes", (double)p->max_live_bytes);
    cJSON_AddNumberToObject(s, "min_budget_bytes", (double)p->min_budget_bytes);
    cJSON_AddNumberToObject(s, "min_budget_op", p->min_budget_op);
    cJSON_AddStringToObject(s, "min_budget_op_type", p->min_budget_op_type);
    cJSON_AddNumberToObject(s, "plan_s", p->plan_seconds);
    char sub[512];
    bool ok = json_log_write(t->json, top);
    cJSON_Delete(top);
    ok = json_log_close(t->json, sub, sizeof sub) && ok;
    t->json = NULL;
    if (!ok) return wrote(t, fail(t, DELTA_ERR_IO, "--json: %s", sub));
    return DELTA_OK;
}

/* ---- data parallel: the ranks agree ----------------------------------------
 * Every rank's setup outcome, message and settings go to every rank (one
 * allgather of fixed-size records), so they all reach the same decision
 * and rank 0 can name the rank and the setting. */

#define AGREE_SETTINGS 3072

/* The settings every rank must share, as "--option value" lines: what
 * decides the values computed (model, shapes, data, optimizer, seed) and
 * how the step runs (policy, budget, steps, ZeRO, buckets, backend,
 * checkpoints). Threads, the link, jitter and output paths may differ. */
static void settings_text(const trainer *t, char *buf, size_t n) {
    const train_config *c = &t->cfg;
    const delta_model_config *m = t->n_shapes ? &t->shapes[0].model.cfg
                                              : &c->model;
    size_t k = 0;
#define SET(opt, fmt, ...)                                                    \
    do {                                                                      \
        if (k < n)                                                            \
            k += (size_t)snprintf(buf + k, n - k, opt " " fmt "\n",           \
                                  __VA_ARGS__);                               \
    } while (0)
    SET("--model", "%s", m->name ? m->name : "(none)");
    SET("--image-size", "%" PRId64, m->image_size);
    SET("--channels", "%" PRId64, m->channels);
    SET("--classes", "%" PRId64, m->classes);
    SET("--width", "%" PRId64, m->width);
    SET("--hidden", "%" PRId64 " %" PRId64, m->hidden, m->mlp_hidden);
    SET("--layers", "%" PRId64, m->layers);
    SET("--heads", "%" PRId64, m->heads);
    SET("--seq-len", "%" PRId64, m->seq_len);
    SET("--vocab", "%" PRId64, m->vocab);
    SET("--precision", "%d", (int)m->precision);
    SET("--batch", "%" PRId64, m->batch);
    SET("--dropout", "%.9g", (double)m->dropout);
    SET("--seed", "%" PRIu64, c->seed);
    SET("--data", "%s (%" PRId64 " samples)",
        t->data ? delta_dataset_name(t->data) : "none",
        t->data ? delta_dataset_len(t->data) : 0);
    SET("--seq-len-range", "%" PRId64 ":%" PRId64, c->seq_len_min,
        c->seq_len_max);
    SET("--drop-last", "%d", (int)c->drop_last);
    SET("--no-shuffle", "%d", (int)c->no_shuffle);
    SET("--optimizer", "%s", t->optimizer_name ? t->optimizer_name : "?");
    SET("--lr", "%.17g", t->lr);
    SET("--momentum", "%.17g", t->momentum);
    SET("--weight-decay", "%.17g", t->weight_decay);
    SET("--steps", "%" PRId64, c->steps);
    SET("--policy", "%s", c->policy ? c->policy : "?");
    /* as given: a percentage is of each rank's own plan (ZeRO-1's differ) */
    if (c->budget.kind == BUDGET_PERCENT)
        SET("--budget", "%.17g%%", c->budget.percent);
    else if (c->budget.kind == BUDGET_BYTES)
        SET("--budget", "%zu bytes", c->budget.bytes);
    else
        SET("--budget", "%s", "unlimited");
    SET("--zero", "%d", c->zero);
    SET("--bucket", "%zu", c->bucket_bytes);
    SET("--backend", "%s", train_backend(c));
    SET("--checkpoint-every", "%" PRId64, c->checkpoint_every);
    SET("--save", "%s", c->save ? "given" : "none");
    SET("--resume", "%s", c->resume ? c->resume : "none");
    SET("--load", "%s", c->load ? c->load : "none");
    SET("--eval-batches", "%" PRId64, c->eval_batches);
#undef SET
}

/* The value of option `opt` in a settings text, into v. */
static void setting_of(const char *text, const char *opt, char *v, size_t n) {
    size_t len = strlen(opt);
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        if (!e) e = l + strlen(l);
        if (!strncmp(l, opt, len) && l[len] == ' ') {
            snprintf(v, n, "%.*s", (int)(e - l - len - 1), l + len + 1);
            return;
        }
        l = *e ? e + 1 : e;
    }
    snprintf(v, n, "(none)");
}

typedef struct agree_rec {
    int32_t st;
    char err[sizeof ((trainer *)0)->err];
    char settings[AGREE_SETTINGS];
} agree_rec;

delta_status trainer_agree(trainer *t, delta_status st) {
    delta_comm *comm = t->cfg.comm;
    int P = delta_comm_size(comm);
    if (P == 1) return st;
    agree_rec *mine = calloc(1, sizeof *mine);
    agree_rec *all = calloc((size_t)P, sizeof *all);
    DELTA_ASSERTF(mine && all, "out of memory");
    mine->st = (int32_t)st;
    snprintf(mine->err, sizeof mine->err, "%s", t->err);
    if (st == DELTA_OK) settings_text(t, mine->settings, sizeof mine->settings);
    delta_comm_allgather(comm, mine, all, sizeof *mine, "the ranks' setup");
    delta_status out = DELTA_OK;
    for (int q = 0; q < P && out == DELTA_OK; q++) {
        if (all[q].st == DELTA_OK) continue;
        out = (delta_status)all[q].st;
        if (q == 0) snprintf(t->err, sizeof t->err, "%s", all[0].err);
        else snprintf(t->err, sizeof t->err, "rank %d: %.900s", q, all[q].err);
    }
    for (int q = 1; q < P && out == DELTA_OK; q++) {
        if (!strcmp(all[q].settings, all[0].settings)) continue;
        /* the first line that differs names the setting */
        const char *a = all[0].settings, *b = all[q].settings;
        while (*a && *a == *b) a++, b++;
        while (a > all[0].settings && a[-1] != '\n') a--;
        char opt[64], va[256], vb[256];
        snprintf(opt, sizeof opt, "%.*s", (int)strcspn(a, " \n"), a);
        setting_of(all[0].settings, opt, va, sizeof va);
        setting_of(all[q].settings, opt, vb, sizeof vb);
        out = fail(t, DELTA_ERR_INVALID_ARG, "the ranks were given other "
                   "settings: %s is %s on rank 0 and %s on rank %d; every "
                   "rank must train the same program on its share of the "
                   "data (mpirun -np P delta train ..., one command line)",
                   opt, va, vb, q);
    }
    free(mine);
    free(all);
    return out;
}
