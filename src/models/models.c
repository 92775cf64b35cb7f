/* The model registry: names, per-model defaults, config checks, dispatch
 * to the family builders, the constants callers fill, and the small
 * helpers the builders share. */
#include "models/models_impl.h"
#include "graph/graph_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum family {
    FAMILY_MLP = 0,
    FAMILY_RESNET,
    FAMILY_GPT2,
    FAMILY_BERT,
} family;

/* One built-in model and its defaults. */
typedef struct preset {
    const char *name;
    family fam;
    int bottleneck;   /* resnet: Bottleneck blocks (else BasicBlock) */
    int blocks[4];    /* resnet: blocks per stage */
    int64_t layers, hidden, heads, seq_len, vocab, positions;
} preset;

static const preset presets[] = {
    {"mlp", FAMILY_MLP, 0, {0}, 0, 0, 0, 0, 0, 0},
    {"resnet18", FAMILY_RESNET, 0, {2, 2, 2, 2}, 0, 0, 0, 0, 0, 0},
    {"resnet34", FAMILY_RESNET, 0, {3, 4, 6, 3}, 0, 0, 0, 0, 0, 0},
    {"resnet50", FAMILY_RESNET, 1, {3, 4, 6, 3}, 0, 0, 0, 0, 0, 0},
    {"resnet101", FAMILY_RESNET, 1, {3, 4, 23, 3}, 0, 0, 0, 0, 0, 0},
    {"resnet152", FAMILY_RESNET, 1, {3, 8, 36, 3}, 0, 0, 0, 0, 0, 0},
    {"gpt2-tiny", FAMILY_GPT2, 0, {0}, 2, 64, 2, 64, 256, 1024},
    {"gpt2-small", FAMILY_GPT2, 0, {0}, 12, 768, 12, 1024, 50257, 1024},
    {"gpt2-medium", FAMILY_GPT2, 0, {0}, 24, 1024, 16, 1024, 50257, 1024},
    {"gpt2-large", FAMILY_GPT2, 0, {0}, 36, 1280, 20, 1024, 50257, 1024},
    {"gpt2-xl", FAMILY_GPT2, 0, {0}, 48, 1600, 25, 1024, 50257, 1024},
    {"bert-tiny", FAMILY_BERT, 0, {0}, 2, 128, 2, 64, 256, 512},
    {"bert-base", FAMILY_BERT, 0, {0}, 12, 768, 12, 512, 30522, 512},
    {"bert-large", FAMILY_BERT, 0, {0}, 24, 1024, 16, 512, 30522, 512},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

/* The same names in the same order, NULL-terminated (a test checks that
 * every one builds). */
static const char *const names[] = {
    "mlp",        "resnet18",    "resnet34",   "resnet50",
    "resnet101",  "resnet152",   "gpt2-tiny",  "gpt2-small",
    "gpt2-medium", "gpt2-large", "gpt2-xl",    "bert-tiny",
    "bert-base",  "bert-large",  NULL,
};
_Static_assert(sizeof names / sizeof names[0] == N_PRESETS + 1,
               "names[] must list every preset");

const char *const *delta_model_names(void) { return names; }

static const preset *preset_find(const char *name) {
    for (int i = 0; name && i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

/* ---- config checks ------------------------------------------------------ */

/* Largest value any size field may take: keeps every product the builders
 * form (B*T*C, K*C*R*S, ...) far from int64 overflow; tensors past 2^48
 * elements are refused by the graph with their own message. */
#define MAX_FIELD ((int64_t)1 << 30)
/* Transformer depth cap: far above GPT-2 XL's 48, low enough that a typo
 * cannot make a program of millions of ops. */
#define MAX_LAYERS 1024

typedef struct checker {
    char *err;
    size_t len;
    const char *model;
    delta_status st;
} checker;

static bool fail(checker *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static bool fail(checker *c, const char *fmt, ...) {
    if (c->st != DELTA_OK) return false;
    c->st = DELTA_ERR_INVALID_ARG;
    if (c->err && c->len) {
        int n = snprintf(c->err, c->len, "model %s: ", c->model);
        if (n < 0 || (size_t)n >= c->len) return false;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->len - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* *v = def when 0; then it must lie in [lo, MAX_FIELD]. */
static bool field(checker *c, const char *what, int64_t *v, int64_t def,
                  int64_t lo) {
    if (*v == 0) *v = def;
    if (*v < lo || *v > MAX_FIELD)
        return fail(c, "%s is %lld; it must be between %lld and %lld", what,
                    (long long)*v, (long long)lo, (long long)MAX_FIELD);
    return true;
}

/* A field the family does not use must stay 0. */
static bool unused(checker *c, const char *what, int64_t v) {
    if (v != 0)
        return fail(c, "%s is %lld but this model has no such setting; "
                    "leave it 0", what, (long long)v);
    return true;
}

/* Spatial size after a conv or pool with window k, stride s, padding p. */
static int64_t out_size(int64_t h, int k, int s, int p) {
    return (h + 2 * p - k) / s + 1;
}

static void check_image(checker *c, delta_model_config *m, int64_t size,
                        int64_t channels, int64_t classes) {
    field(c, "image_size", &m->image_size, size, 1);
    field(c, "channels", &m->channels, channels, 1);
    field(c, "classes", &m->classes, classes, 1);
    unused(c, "layers", m->layers);
    unused(c, "hidden", m->hidden);
    unused(c, "heads", m->heads);
    unused(c, "seq_len", m->seq_len);
    unused(c, "vocab", m->vocab);
    unused(c, "positions", m->positions);
    if (m->dropout > 0)
        fail(c, "dropout is %g but this model has no dropout; leave it 0 "
             "or negative", (double)m->dropout);
    m->dropout = 0;
}

static void check_mlp(checker *c, delta_model_config *m) {
    check_image(c, m, 28, 1, 10);
    unused(c, "width", m->width);
    field(c, "mlp_hidden", &m->mlp_hidden, 256, 1);
    if (c->st == DELTA_OK &&
        m->image_size * m->image_size > MAX_FIELD / m->channels)
        fail(c, "inputs of %lld x %lld x %lld are too large to flatten",
             (long long)m->channels, (long long)m->image_size,
             (long long)m->image_size);
}

static void check_resnet(checker *c, delta_model_config *m) {
    check_image(c, m, 224, 3, 1000);
    unused(c, "mlp_hidden", m->mlp_hidden);
    field(c, "width", &m->width, 64, 1);
    if (m->no_fusion != 0 && m->no_fusion != 1)
        fail(c, "no_fusion is %d; use 0 (fuse batch norm, add and ReLU) or 1",
             m->no_fusion);
    if (c->st != DELTA_OK) return;
    /* Batch norm in training mode needs two values per channel (PyTorch
     * refuses one); the fewest are at layer4: stem /4, then three /2. */
    int64_t s = out_size(out_size(m->image_size, 7, 2, 3), 3, 2, 1);
    for (int i = 0; i < 3; i++) s = out_size(s, 3, 2, 1);
    if (m->batch == 1 && s == 1)
        fail(c, "image_size %lld leaves %lldx%lld maps in layer4, so with "
             "batch %lld its batch norm sees one value per channel; use "
             "batch >= 2 or image_size >= 33",
             (long long)m->image_size, (long long)s, (long long)s,
             (long long)m->batch);
}

static void check_transformer(checker *c, const preset *p,
                              delta_model_config *m) {
    unused(c, "image_size", m->image_size);
    unused(c, "channels", m->channels);
    unused(c, "classes", m->classes);
    unused(c, "width", m->width);
    unused(c, "mlp_hidden", m->mlp_hidden);
    field(c, "layers", &m->layers, p->layers, 1);
    if (m->layers > MAX_LAYERS)
        fail(c, "layers is %lld; at most %d are supported",
             (long long)m->layers, MAX_LAYERS);
    field(c, "hidden", &m->hidden, p->hidden, 1);
    field(c, "heads", &m->heads, p->heads, 1);
    field(c, "seq_len", &m->seq_len, p->seq_len, 1);
    field(c, "vocab", &m->vocab, p->vocab, 1);
    if (c->st != DELTA_OK) return;
    if (m->hidden % m->heads)
        fail(c, "hidden %lld is not divisible by heads %lld",
             (long long)m->hidden, (long long)m->heads);
    if (m->positions == 0 && p->fam == FAMILY_GPT2 &&
        m->seq_len > p->positions)
        m->positions = m->seq_len;
    field(c, "positions", &m->positions, p->positions, 1);
    if (c->st == DELTA_OK && m->seq_len > m->positions)
        fail(c, "seq_len %lld exceeds the %lld rows of the position table; "
             "use seq_len <= %lld or set positions >= %lld",
             (long long)m->seq_len, (long long)m->positions,
             (long long)m->positions, (long long)m->seq_len);
    if (m->dropout < 0) m->dropout = 0.1f;
    if (!(m->dropout < 1.0f))
        fail(c, "dropout is %g; it must be below 1 (0 disables it)",
             (double)m->dropout);
}

delta_status delta_model_resolve(const delta_model_config *cfg,
                                 delta_model_config *out, char *err,
                                 size_t err_len) {
    checker c = {err, err_len, "?", DELTA_OK};
    if (err && err_len) err[0] = '\0';
    if (!cfg || !out) {
        c.model = "(none)";
        fail(&c, "no config given");
        return c.st;
    }
    const preset *p = preset_find(cfg->name);
    if (!p) {
        if (err && err_len) {
            int n = snprintf(err, err_len, "unknown model '%s'; the models "
                             "are:", cfg->name ? cfg->name : "(null)");
            for (int i = 0; i < N_PRESETS && n >= 0 && (size_t)n < err_len;
                 i++)
                n += snprintf(err + n, err_len - (size_t)n, "%s %s",
                              i ? "," : "", presets[i].name);
        }
        return DELTA_ERR_INVALID_ARG;
    }
    delta_model_config m = *cfg;
    m.name = p->name;
    c.model = p->name;
    if (m.batch < 1 || m.batch > MAX_FIELD)
        fail(&c, "batch is %lld; it must be between 1 and %lld",
             (long long)m.batch, (long long)MAX_FIELD);
    if (m.dropout != m.dropout)
        fail(&c, "dropout is NaN");
    if ((unsigned)m.precision >= DELTA_PRECISION_COUNT)
        fail(&c, "precision is %d; use DELTA_PRECISION_FP32 or "
             "DELTA_PRECISION_BF16", (int)m.precision);
    if (p->fam != FAMILY_RESNET) unused(&c, "no_fusion", m.no_fusion);
    switch (p->fam) {
    case FAMILY_MLP: check_mlp(&c, &m); break;
    case FAMILY_RESNET: check_resnet(&c, &m); break;
    case FAMILY_GPT2:
    case FAMILY_BERT: check_transformer(&c, p, &m); break;
    }
    if (c.st == DELTA_OK) *out = m;
    return c.st;
}

/* ---- build -------------------------------------------------------------- */

delta_status delta_model_build(delta_ctx *ctx, const delta_model_config *cfg,
                               delta_model *out) {
    DELTA_ASSERT(ctx && out);
    memset(out, 0, sizeof *out);
    delta_model_config m;
    delta_status st = delta_model_resolve(cfg, &m, out->error,
                                          sizeof out->error);
    if (st != DELTA_OK) return st;
    if (delta_ctx_status(ctx) != DELTA_OK) {
        snprintf(out->error, sizeof out->error, "the graph already has an "
                 "error: %s", delta_ctx_error(ctx));
        return delta_ctx_status(ctx);
    }
    out->cfg = m;
    const preset *p = preset_find(m.name);
    int first = delta_ctx_n_tensors(ctx);
    switch (p->fam) {
    case FAMILY_MLP: delta_mlp_build(ctx, &m, out); break;
    case FAMILY_RESNET:
        delta_resnet_build(ctx, &m, p->bottleneck, p->blocks, out);
        break;
    case FAMILY_GPT2: delta_gpt2_build(ctx, &m, out); break;
    case FAMILY_BERT: delta_bert_build(ctx, &m, out); break;
    }
    /* the BF16 casts' outputs after everything else: parameters get the
     * ids (so the initial values) they have in FP32 */
    if (m.precision == DELTA_PRECISION_BF16 &&
        delta_ctx_status(ctx) == DELTA_OK)
        delta_ctx_move_casts_last(ctx);
    /* batch norm + ReLU (+ the residual add) as one op: the same bits
     * without the intermediates (parameters keep their initial values) */
    if (p->fam == FAMILY_RESNET && !m.no_fusion &&
        delta_ctx_status(ctx) == DELTA_OK)
        delta_ctx_fuse_batchnorm(ctx);
    st = delta_ctx_status(ctx);
    if (st == DELTA_OK && !out->loss)
        st = DELTA_ERR_STATE; /* a builder bug: no loss and no error */
    if (st != DELTA_OK) {
        snprintf(out->error, sizeof out->error, "model %s: %s", m.name,
                 st == DELTA_ERR_STATE && delta_ctx_status(ctx) == DELTA_OK
                     ? "the builder made no loss"
                     : delta_ctx_error(ctx));
        return st;
    }
    for (int i = first; i < delta_ctx_n_tensors(ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_PARAM) continue;
        out->n_params += delta_tensor_numel(t);
        out->n_param_tensors++;
    }
    return DELTA_OK;
}

void delta_model_fill_constants(const delta_model *m,
                                void *(*data_of)(void *ud,
                                                 const delta_tensor *t),
                                void *ud) {
    if (m->positions) {
        int32_t *pos = data_of(ud, m->positions);
        int64_t T = delta_tensor_numel(m->positions);
        for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)t;
    }
    if (m->token_types) {
        int32_t *tt = data_of(ud, m->token_types);
        int64_t n = delta_tensor_numel(m->token_types);
        for (int64_t i = 0; i < n; i++) tt[i] = 0;
    }
}

/* ---- helpers shared by the builders ------------------------------------- */

const char *delta_precision_name(delta_precision p) {
    switch (p) {
    case DELTA_PRECISION_FP32: return "fp32";
    case DELTA_PRECISION_BF16: return "bf16";
    default: return "?";
    }
}

bool delta_precision_parse(const char *s, delta_precision *out) {
    for (int p = 0; s && p < DELTA_PRECISION_COUNT; p++)
        if (strcmp(s, delta_precision_name((delta_precision)p)) == 0) {
            *out = (delta_precision)p;
            return true;
        }
    return false;
}

delta_tensor *delta_model_low(delta_ctx *ctx, const delta_model_config *cfg,
                              delta_tensor *t) {
    if (cfg->precision != DELTA_PRECISION_BF16) return t;
    return delta_cast(ctx, t, DELTA_BF16);
}

delta_init delta_model_init_zeros(void) {
    return (delta_init){DELTA_INIT_ZEROS, 0, 0};
}
delta_init delta_model_init_ones(void) {
    return (delta_init){DELTA_INIT_ONES, 0, 0};
}
delta_init delta_model_init_normal(float std) {
    return (delta_init){DELTA_INIT_NORMAL, 0, std};
}
delta_init delta_model_init_uniform(float bound) {
    return (delta_init){DELTA_INIT_UNIFORM, -bound, bound};
}

delta_tensor *delta_model_param1(delta_ctx *ctx, delta_init init,
                                 int64_t d0, const char *fmt, ...) {
    char name[DELTA_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return delta_param(ctx, name, 1, &d0, init);
}

delta_tensor *delta_model_param2(delta_ctx *ctx, delta_init init,
                                 int64_t d0, int64_t d1, const char *fmt,
                                 ...) {
    char name[DELTA_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t s[2] = {d0, d1};
    return delta_param(ctx, name, 2, s, init);
}

delta_tensor *delta_model_param4(delta_ctx *ctx, delta_init init,
                                 const int64_t shape[4], const char *fmt,
                                 ...) {
    char name[DELTA_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return delta_param(ctx, name, 4, shape, init);
}

delta_tensor *delta_model_state1(delta_ctx *ctx, delta_init init, int64_t c,
                                 const char *fmt, ...) {
    char name[DELTA_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return delta_state(ctx, name, 1, &c, init);
}

delta_tensor *delta_model_layernorm(delta_ctx *ctx, delta_tensor *x,
                                    const char *prefix, int64_t d, float eps) {
    delta_tensor *g = delta_model_param1(ctx, delta_model_init_ones(), d,
                                         "%s.weight", prefix);
    delta_tensor *b = delta_model_param1(ctx, delta_model_init_zeros(), d,
                                         "%s.bias", prefix);
    return delta_layernorm(ctx, x, g, b, eps);
}

delta_tensor *delta_model_split_heads(delta_ctx *ctx, delta_tensor *x,
                                      int64_t B, int64_t T, int64_t H,
                                      int64_t D) {
    int64_t s[4] = {B, T, H, D};
    return delta_transpose(ctx, delta_reshape(ctx, x, 4, s), 1, 2);
}

delta_tensor *delta_model_merge_heads(delta_ctx *ctx, delta_tensor *x,
                                      int64_t B, int64_t T, int64_t C) {
    int64_t s[3] = {B, T, C};
    return delta_reshape(ctx, delta_transpose(ctx, x, 1, 2), 3, s);
}

void delta_model_token_inputs(delta_ctx *ctx, int64_t B, int64_t T,
                              delta_model *m) {
    int64_t bt[2] = {B, T};
    m->input = delta_input(ctx, "tokens", DELTA_I32, 2, bt);
    m->target = delta_input(ctx, "targets", DELTA_I32, 2, bt);
    m->positions = delta_constant(ctx, "positions", DELTA_I32, 1, &T,
                                  (delta_init){DELTA_INIT_NONE, 0, 0});
}

void delta_model_lm_loss(delta_ctx *ctx, const delta_model_config *cfg,
                         delta_tensor *x, delta_tensor *wte,
                         delta_tensor *bias, int64_t B, int64_t T, int64_t C,
                         delta_model *m) {
    int64_t flat[2] = {B * T, C}, rows[1] = {B * T};
    m->logits = delta_linear(ctx, delta_reshape(ctx, x, 2, flat),
                             delta_model_low(ctx, cfg, wte),
                             bias ? delta_model_low(ctx, cfg, bias) : NULL);
    delta_tensor *tgt = m->target ? delta_reshape(ctx, m->target, 1, rows)
                                  : NULL;
    m->loss = delta_cross_entropy(ctx, m->logits, tgt, -100);
}
