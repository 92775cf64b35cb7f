/* The built-in models (include/delta/models.h):
 *  - against PyTorch: for each family, the model built by delta_model_build
 *    at a fixture's config, loaded with the fixture's weights by name, runs
 *    one step; logits, loss, gradients and batch-norm running stats are
 *    compared with tests/fixtures/models/<file>.safetensors (written by
 *    scripts/make_model_fixtures.py), with both GEMM paths; and in BF16
 *    (--precision bf16) against the same float64 reference beside
 *    PyTorch's autocast on the same weights (expect_bf16);
 *  - every model name builds with backward and AdamW (shapes only) and has
 *    the parameter count of its PyTorch original;
 *  - bad names and overrides give errors with messages, never a crash;
 *  - the loss of gpt2-tiny and of a small resnet18 falls when they overfit
 *    one fixed batch. */
#include "delta/delta.h"
#include "delta/models.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "core/bf16.h"

/* Whole models against a float64 reference: rounding errors of a few
 * hundred fp32 ops add up, so these are looser than a single block's
 * (2e-5, 2e-4 in test_reference.c). */
#define ATOL_MODEL 5e-5
#define RTOL_MODEL 5e-4

#define REGEN "regenerate with: /usr/bin/python3 scripts/make_model_fixtures.py"

static const char *gemm_label = "builtin";
static double worst_use;
static char worst_where[256];

static const char *fixture_dir(void) {
    const char *d = getenv("DELTA_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

static void *exec_data_of(void *ud, const delta_tensor *t) {
    return delta_exec_data(ud, t);
}

static bool has_prefix(const char *s, const char *pre) {
    return strncmp(s, pre, strlen(pre)) == 0;
}
static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* ---- fixtures ------------------------------------------------------------ */

/* Reads the config stored in a fixture's metadata. */
static bool fixture_config(delta_st_file *f, const char *file,
                           delta_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->name = delta_st_metadata(f, "model");
    CHECK(cfg->name != NULL, "%s: no 'model' in the metadata; " REGEN, file);
    if (!cfg->name) return false;
    static const struct { const char *key; size_t off; } fields[] = {
        {"batch", offsetof(delta_model_config, batch)},
        {"image_size", offsetof(delta_model_config, image_size)},
        {"channels", offsetof(delta_model_config, channels)},
        {"classes", offsetof(delta_model_config, classes)},
        {"width", offsetof(delta_model_config, width)},
        {"mlp_hidden", offsetof(delta_model_config, mlp_hidden)},
        {"layers", offsetof(delta_model_config, layers)},
        {"hidden", offsetof(delta_model_config, hidden)},
        {"heads", offsetof(delta_model_config, heads)},
        {"seq_len", offsetof(delta_model_config, seq_len)},
        {"vocab", offsetof(delta_model_config, vocab)},
        {"positions", offsetof(delta_model_config, positions)},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *v = delta_st_metadata(f, fields[i].key);
        if (v)
            *(int64_t *)((char *)cfg + fields[i].off) = strtoll(v, NULL, 10);
    }
    const char *d = delta_st_metadata(f, "dropout");
    cfg->dropout = d ? (float)strtod(d, NULL) : 0.0f;
    return true;
}

/* Copies fixture tensor st into t after checking the shape. */
static bool load_tensor(delta_exec *ex, const delta_tensor *t,
                        const delta_st_tensor *st, const char *file) {
    bool same = delta_tensor_ndim(t) == st->ndim &&
                delta_tensor_dtype(t) == st->dtype;
    for (int i = 0; same && i < st->ndim; i++)
        same = delta_tensor_dim(t, i) == st->shape[i];
    CHECK(same, "%s: '%s' has another shape or dtype in delta (%d dims, "
          "%lld elements) than in the fixture (%d dims, %lld elements)",
          file, st->name, delta_tensor_ndim(t),
          (long long)delta_tensor_numel(t), st->ndim, (long long)st->numel);
    if (!same) return false;
    delta_status s = delta_exec_set(ex, t, st->data, st->nbytes);
    CHECK(s == DELTA_OK, "%s: delta_exec_set('%s'): %s", file, st->name,
          delta_status_name(s));
    return s == DELTA_OK;
}

/* Compares t's data with fixture tensor `name`. */
static void expect(delta_exec *ex, const delta_tensor *t, delta_st_file *f,
                   const char *file, const char *name) {
    const delta_st_tensor *st = delta_st_find(f, name);
    CHECK(st != NULL, "%s: no tensor '%s'; " REGEN, file, name);
    CHECK(t != NULL, "%s: delta has no tensor for '%s' (no gradient?)", file,
          name);
    if (!st || !t) return;
    CHECK(delta_tensor_numel(t) == st->numel && st->dtype == DELTA_F32 &&
              delta_tensor_dtype(t) == DELTA_F32,
          "%s: '%s': %lld elements in delta, %lld in the fixture", file, name,
          (long long)delta_tensor_numel(t), (long long)st->numel);
    if (delta_tensor_numel(t) != st->numel || st->dtype != DELTA_F32) return;
    long n = (long)st->numel;
    float *want = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!want) {
        CHECK(false, "out of memory");
        return;
    }
    memcpy(want, st->data, st->nbytes);
    const float *got = delta_exec_data(ex, t);
    double use = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double u = d / (ATOL_MODEL + RTOL_MODEL * fabs((double)want[i]));
        if (isnan(d)) u = INFINITY;
        if (u > use) use = u;
    }
    if (use > worst_use) {
        worst_use = use;
        snprintf(worst_where, sizeof worst_where, "%s %s", file, name);
    }
    char what[320];
    snprintf(what, sizeof what, "%s %s [%s gemm]", file, name, gemm_label);
    test_allclose(what, got, want, n, ATOL_MODEL, RTOL_MODEL);
    free(want);
}

/* How many comma-separated names a metadata list holds. */
static int list_len(const char *s) {
    if (!s || !*s) return 0;
    int n = 1;
    for (; *s; s++) n += *s == ',';
    return n;
}

/* ---- BF16 against PyTorch's autocast -------------------------------------- */

/* Relative L2 error |a - ref| / |ref| over n values (absolute when ref is
 * all but zero: a gradient that is rounding noise in float64). */
static double rel_l2(const float *a, const float *ref, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (isnan(num)) return INFINITY;
    return den > 1e-20 ? sqrt(num / den) : sqrt(num);
}

/* BF16's unit roundoff: 8 significant bits. */
#define BF16_U (1.0 / 512)
static bool verbose; /* -v: every tensor's errors */
static double bf16_worst;  /* largest delta error / allowed, over a run */
static char bf16_where[256];

/* t (F32, or BF16 widened) against the float64 reference `name`, beside
 * PyTorch's autocast result "bf16.<name>" on the same weights and inputs:
 * delta's relative L2 error must be within twice PyTorch's own, or 8
 * bf16 roundoffs (3%) where PyTorch's is smaller than that. Both compute
 * the same products on BF16 operands with fp32 sums; they round at
 * different points (delta's rule per op is docs/KERNELS.md's, autocast's
 * its op lists), so neither is the other's bits, and a gradient's error
 * after a few BF16 layers is a few roundoffs: twice PyTorch's error, or
 * the 8u floor, says delta loses no more precision than autocast does. */
static void expect_bf16(delta_exec *ex, const delta_tensor *t,
                        delta_st_file *f, const char *file, const char *name) {
    char tname[220];
    snprintf(tname, sizeof tname, "bf16.%s", name);
    const delta_st_tensor *ref = delta_st_find(f, name);
    const delta_st_tensor *pt = delta_st_find(f, tname);
    CHECK(ref && pt, "%s: no '%s' or '%s'; " REGEN, file, name, tname);
    CHECK(t != NULL, "%s: delta has no tensor for '%s'", file, name);
    if (!ref || !pt || !t || delta_tensor_numel(t) != ref->numel ||
        pt->numel != ref->numel || ref->dtype != DELTA_F32 ||
        pt->dtype != DELTA_F32) {
        CHECK(false, "%s: '%s' has other sizes or dtypes", file, name);
        return;
    }
    long n = (long)ref->numel;
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    float *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    float *torch = malloc((size_t)(n ? n : 1) * sizeof *torch);
    if (!got || !want || !torch) {
        CHECK(false, "out of memory");
        free(got); free(want); free(torch);
        return;
    }
    const void *d = delta_exec_data(ex, t);
    for (long i = 0; i < n; i++)
        got[i] = delta_tensor_dtype(t) == DELTA_BF16
                     ? delta_bf16_to_f32(((const uint16_t *)d)[i])
                     : ((const float *)d)[i];
    memcpy(want, ref->data, ref->nbytes);
    memcpy(torch, pt->data, pt->nbytes);
    double e = rel_l2(got, want, n), et = rel_l2(torch, want, n);
    double allowed = fmax(2 * et, 8 * BF16_U);
    if (verbose)
        printf("    %-48s delta %.2e  torch %.2e\n", name, e, et);
    if (e / allowed > bf16_worst) {
        bf16_worst = e / allowed;
        snprintf(bf16_where, sizeof bf16_where, "%s %s: delta %.2e, "
                 "autocast %.2e", file, name, e, et);
    }
    CHECK(e <= allowed, "%s %s: delta bf16's relative error %.3g, PyTorch "
          "autocast's %.3g (allowed %.3g)", file, name, e, et, allowed);
    free(got);
    free(want);
    free(torch);
}

/* Builds the fixture's model, loads its weights and inputs by name, runs
 * one step (backward, no optimizer) and compares: in fp32 with the
 * float64 reference's tolerance, in bf16 (--precision bf16) against it
 * beside PyTorch's autocast (expect_bf16). */
static void zoo_run(const char *file, bool bf16) {
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/%s.safetensors", fixture_dir(),
             file);
    delta_status st = DELTA_OK;
    delta_st_file *f = delta_st_open(path, &st, err, sizeof err);
    CHECK(f != NULL, "fixture %s cannot be read (%s: %s); " REGEN, path,
          delta_status_name(st), err);
    if (!f) return;
    delta_model_config cfg;
    delta_ctx *ctx = delta_ctx_new();
    delta_exec *ex = NULL;
    delta_model m;
    if (!fixture_config(f, file, &cfg)) goto done;
    if (bf16) cfg.precision = DELTA_PRECISION_BF16;
    st = delta_model_build(ctx, &cfg, &m);
    CHECK(st == DELTA_OK, "%s: delta_model_build: %s", file, m.error);
    if (st != DELTA_OK) goto done;
    st = delta_backward(ctx, m.loss);
    CHECK(st == DELTA_OK, "%s: backward: %s", file, delta_ctx_error(ctx));
    if (st != DELTA_OK) goto done;
    ex = delta_exec_new(ctx, NULL, err, sizeof err);
    CHECK(ex != NULL, "%s: delta_exec_new: %s", file, err);
    if (!ex) goto done;
    delta_model_fill_constants(&m, exec_data_of, ex);

    /* Every fixture tensor that is not an input or an expectation is a
     * model parameter or running stat of the same name, and vice versa. */
    int n_weights = 0, n_inputs = 0, n_grads = 0;
    bool ok = true;
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        if (has_prefix(t->name, "bf16.")) continue; /* autocast's results */
        if (has_prefix(t->name, "grad.")) {
            n_grads++;
            continue;
        }
        if (has_suffix(t->name, ".after") || !strcmp(t->name, "loss") ||
            !strcmp(t->name, "logits"))
            continue;
        bool input = has_prefix(t->name, "input.");
        const char *name = input ? t->name + 6 : t->name;
        delta_tensor *dt = delta_ctx_find(ctx, name);
        delta_tensor_kind k = dt ? delta_tensor_kind_of(dt) : DELTA_KIND_COUNT;
        bool kind_ok = input ? k == DELTA_KIND_INPUT
                             : k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE;
        CHECK(kind_ok, "%s: fixture tensor '%s' is no %s of delta's %s", file,
              t->name, input ? "input" : "parameter or state", cfg.name);
        if (!kind_ok || !load_tensor(ex, dt, t, file)) {
            ok = false;
            continue;
        }
        if (input) n_inputs++;
        else n_weights++;
    }
    int n_model = 0, n_model_params = 0;
    for (int i = 0; i < delta_ctx_n_tensors(ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k == DELTA_KIND_PARAM) n_model_params++;
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        n_model++;
        CHECK(delta_st_find(f, delta_tensor_name(t)) != NULL,
              "%s: delta's '%s' is not in the fixture", file,
              delta_tensor_name(t));
    }
    CHECK(n_model == n_weights, "%s: %d weights loaded, the model has %d",
          file, n_weights, n_model);
    CHECK(n_model_params == m.n_param_tensors, "%s: %d PARAM tensors, the "
          "model reports %d", file, n_model_params, m.n_param_tensors);
    int n_inputs_model = m.mask ? 3 : 2;
    CHECK(n_inputs == n_inputs_model, "%s: %d inputs loaded, expected %d",
          file, n_inputs, n_inputs_model);
    /* Gradients: all but the ones the fixture lists as left out. */
    const char *left = delta_st_metadata(f, "grads_left_out");
    CHECK(n_grads + list_len(left) == m.n_param_tensors,
          "%s: %d gradients + %d left out for %d parameters", file, n_grads,
          list_len(left), m.n_param_tensors);
    if (!ok) goto done;

    st = delta_exec_run(ex, DELTA_RUN_STEP);
    CHECK(st == DELTA_OK, "%s: run: %s", file, delta_status_name(st));
    if (st != DELTA_OK) goto done;
    void (*check)(delta_exec *, const delta_tensor *, delta_st_file *,
                  const char *, const char *) = bf16 ? expect_bf16 : expect;
    check(ex, m.logits, f, file, "logits");
    check(ex, m.loss, f, file, "loss");
    for (int i = 0; i < delta_st_count(f); i++) {
        const char *name = delta_st_at(f, i)->name;
        char base[200];
        if (has_prefix(name, "grad.")) {
            const delta_tensor *p = delta_ctx_find(ctx, name + 5);
            CHECK(p != NULL, "%s: '%s' names no delta tensor", file, name);
            if (p) check(ex, delta_tensor_grad(p), f, file, name);
        } else if (has_suffix(name, ".after") && !bf16) {
            snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 6),
                     name);
            const delta_tensor *s = delta_ctx_find(ctx, base);
            CHECK(s != NULL, "%s: '%s' names no delta tensor", file, name);
            if (s) expect(ex, s, f, file, name);
        }
    }
done:
    delta_exec_free(ex);
    delta_ctx_free(ctx);
    delta_st_close(f);
}

static void zoo_check(const char *file) { zoo_run(file, false); }

static void test_bf16_mlp(void) { zoo_run("mlp", true); }
static void test_bf16_resnet18(void) { zoo_run("resnet18", true); }
static void test_bf16_resnet50(void) { zoo_run("resnet50", true); }
static void test_bf16_gpt2(void) { zoo_run("gpt2", true); }
static void test_bf16_bert(void) { zoo_run("bert", true); }

static void test_fixture_mlp(void) { zoo_check("mlp"); }
static void test_fixture_resnet18(void) { zoo_check("resnet18"); }
static void test_fixture_resnet50(void) { zoo_check("resnet50"); }
static void test_fixture_gpt2(void) { zoo_check("gpt2"); }

/* The fixture records the GELU form it used ("gelu": tanh until graph.h
 * has delta_gelu_erf, then erf); src/models/bert.c must use the same. */
static void test_fixture_bert(void) {
    char path[512], gelu[16] = "?";
    snprintf(path, sizeof path, "%s/models/bert.safetensors", fixture_dir());
    delta_st_file *f = delta_st_open(path, NULL, NULL, 0);
    const char *g = f ? delta_st_metadata(f, "gelu") : NULL;
    if (g) snprintf(gelu, sizeof gelu, "%s", g);
    delta_st_close(f);
    if (f)
        CHECK(!strcmp(gelu, "tanh") || !strcmp(gelu, "erf"),
              "bert fixture: gelu '%s', expected tanh or erf; " REGEN, gelu);
    int before = test_failed_checks_;
    zoo_check("bert");
    if (test_failed_checks_ > before)
        fprintf(stderr, "  (the bert fixture uses the %s GELU: if "
                "src/models/bert.c uses the other form, " REGEN ")\n", gelu);
}

/* ---- every model builds, with the PyTorch parameter count ---------------- */

/* From the PyTorch reference modules at each model's defaults, tied
 * weights counted once: `/usr/bin/python3 scripts/make_model_fixtures.py
 * --counts` (the ResNets checked there against torchvision 0.14; GPT-2 and
 * BERT are Hugging Face's GPT2LMHeadModel and BertForMaskedLM; gpt2-small
 * 124,439,808 and bert-base 109,514,298 are the published counts). */
static const struct { const char *name; int64_t params; } expected[] = {
    {"mlp", 269322},
    {"resnet18", 11689512},
    {"resnet34", 21797672},
    {"resnet50", 25557032},
    {"resnet101", 44549160},
    {"resnet152", 60192808},
    {"gpt2-tiny", 182016},
    {"gpt2-small", 124439808},
    {"gpt2-medium", 354823168},
    {"gpt2-large", 774030080},
    {"gpt2-xl", 1557611200},
    {"bert-tiny", 512384},
    {"bert-base", 109514298},
    {"bert-large", 335174458},
};

static void test_every_model_builds(void) {
    const char *const *names = delta_model_names();
    int n = 0;
    for (; names[n]; n++) {
        delta_ctx *ctx = delta_ctx_new();
        delta_model_config cfg = {.name = names[n], .batch = 2,
                                  .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
        delta_model m;
        delta_status st = delta_model_build(ctx, &cfg, &m);
        CHECK(st == DELTA_OK, "%s: %s", names[n], m.error);
        if (st == DELTA_OK) {
            st = delta_backward(ctx, m.loss);
            if (st == DELTA_OK)
                st = delta_optimizer_adamw(ctx, (delta_adamw_opts){
                    1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f});
            CHECK(st == DELTA_OK, "%s: backward/adamw: %s", names[n],
                  delta_ctx_error(ctx));
            CHECK(strcmp(m.cfg.name, names[n]) == 0 && m.error[0] == 0,
                  "%s: cfg.name %s, error '%s'", names[n], m.cfg.name,
                  m.error);
            int64_t want = -1;
            for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
                if (!strcmp(expected[i].name, names[n]))
                    want = expected[i].params;
            CHECK(m.n_params == want, "%s: %lld parameters, PyTorch has %lld",
                  names[n], (long long)m.n_params, (long long)want);
            /* Every parameter got a gradient and an update. */
            int64_t with_grad = 0;
            for (int i = 0; i < delta_ctx_n_tensors(ctx); i++) {
                const delta_tensor *t = delta_ctx_tensor(ctx, i);
                if (delta_tensor_kind_of(t) == DELTA_KIND_PARAM &&
                    delta_tensor_grad(t))
                    with_grad += delta_tensor_numel(t);
            }
            CHECK(with_grad == m.n_params, "%s: %lld of %lld parameters have "
                  "a gradient", names[n], (long long)with_grad,
                  (long long)m.n_params);
            CHECK(delta_tensor_ndim(m.loss) == 0, "%s: loss not a scalar",
                  names[n]);
            bool lm = m.task != DELTA_TASK_CLASSIFY;
            int64_t rows = lm ? 2 * m.cfg.seq_len : 2;
            int64_t cols = lm ? m.cfg.vocab : m.cfg.classes;
            CHECK(delta_tensor_dim(m.logits, 0) == rows &&
                      delta_tensor_dim(m.logits, 1) == cols,
                  "%s: logits (%lld, %lld), expected (%lld, %lld)", names[n],
                  (long long)delta_tensor_dim(m.logits, 0),
                  (long long)delta_tensor_dim(m.logits, 1), (long long)rows,
                  (long long)cols);
            CHECK((m.positions != NULL) == lm && (m.mask != NULL) ==
                      (m.task == DELTA_TASK_MASKED_LM),
                  "%s: positions/mask do not fit the task", names[n]);
        }
        delta_ctx_free(ctx);
    }
    CHECK(n == (int)(sizeof expected / sizeof expected[0]),
          "%d model names, %d expected counts", n,
          (int)(sizeof expected / sizeof expected[0]));
}

/* A few names and shapes, as the PyTorch originals have them. */
static void test_model_names_and_defaults(void) {
    static const struct {
        const char *model, *tensor;
        int ndim;
        int64_t shape[4];
        delta_tensor_kind kind;
    } want[] = {
        {"resnet50", "conv1.weight", 4, {64, 3, 7, 7}, DELTA_KIND_PARAM},
        {"resnet50", "layer1.0.downsample.0.weight", 4, {256, 64, 1, 1},
         DELTA_KIND_PARAM},
        {"resnet50", "layer2.0.conv2.weight", 4, {128, 128, 3, 3},
         DELTA_KIND_PARAM},
        {"resnet50", "layer4.2.bn3.running_var", 1, {2048},
         DELTA_KIND_STATE},
        {"resnet50", "fc.weight", 2, {1000, 2048}, DELTA_KIND_PARAM},
        {"resnet18", "layer1.0.bn1.running_mean", 1, {64}, DELTA_KIND_STATE},
        {"resnet18", "layer2.0.downsample.1.bias", 1, {128},
         DELTA_KIND_PARAM},
        {"gpt2-small", "transformer.wte.weight", 2, {50257, 768},
         DELTA_KIND_PARAM},
        {"gpt2-small", "transformer.wpe.weight", 2, {1024, 768},
         DELTA_KIND_PARAM},
        {"gpt2-small", "transformer.h.11.attn.c_attn.weight", 2, {768, 2304},
         DELTA_KIND_PARAM},
        {"gpt2-small", "transformer.h.0.mlp.c_proj.weight", 2, {3072, 768},
         DELTA_KIND_PARAM},
        {"gpt2-small", "transformer.ln_f.bias", 1, {768}, DELTA_KIND_PARAM},
        {"gpt2-small", "positions", 1, {1024}, DELTA_KIND_CONST},
        {"bert-base", "bert.embeddings.position_embeddings.weight", 2,
         {512, 768}, DELTA_KIND_PARAM},
        {"bert-base", "bert.encoder.layer.11.intermediate.dense.weight", 2,
         {3072, 768}, DELTA_KIND_PARAM},
        {"bert-base", "bert.encoder.layer.0.attention.output.LayerNorm.weight",
         1, {768}, DELTA_KIND_PARAM},
        {"bert-base", "cls.predictions.bias", 1, {30522}, DELTA_KIND_PARAM},
        {"bert-base", "attention_mask", 2, {2, 512}, DELTA_KIND_INPUT},
        {"mlp", "fc1.weight", 2, {256, 784}, DELTA_KIND_PARAM},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        delta_ctx *ctx = delta_ctx_new();
        delta_model_config cfg = {.name = want[i].model, .batch = 2};
        delta_model m;
        CHECK(delta_model_build(ctx, &cfg, &m) == DELTA_OK, "%s: %s",
              want[i].model, m.error);
        const delta_tensor *t = delta_ctx_find(ctx, want[i].tensor);
        CHECK(t != NULL, "%s has no '%s'", want[i].model, want[i].tensor);
        if (t) {
            bool same = delta_tensor_ndim(t) == want[i].ndim &&
                        delta_tensor_kind_of(t) == want[i].kind;
            for (int d = 0; same && d < want[i].ndim; d++)
                same = delta_tensor_dim(t, d) == want[i].shape[d];
            CHECK(same, "%s '%s': shape or kind differs", want[i].model,
                  want[i].tensor);
        }
        delta_ctx_free(ctx);
    }
    /* No separate lm_head / decoder tensor: tied. */
    delta_ctx *ctx = delta_ctx_new();
    delta_model m;
    delta_model_config g = {.name = "gpt2-tiny", .batch = 1};
    CHECK(delta_model_build(ctx, &g, &m) == DELTA_OK, "%s", m.error);
    CHECK(!delta_ctx_find(ctx, "lm_head.weight"), "lm_head is not tied");
    CHECK(m.cfg.layers == 2 && m.cfg.hidden == 64 && m.cfg.heads == 2 &&
              m.cfg.seq_len == 64 && m.cfg.vocab == 256 &&
              m.cfg.positions == 1024 && m.cfg.dropout == 0.0f,
          "gpt2-tiny defaults (zeroed dropout disables it)");
    delta_ctx_free(ctx);
    delta_model_config r;
    delta_model_config in = {.name = "resnet50", .batch = 8,
                             .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
    CHECK(delta_model_resolve(&in, &r, NULL, 0) == DELTA_OK &&
              r.image_size == 224 && r.channels == 3 && r.classes == 1000 &&
              r.width == 64,
          "resnet50 defaults");
    in = (delta_model_config){.name = "bert-base", .batch = 1,
                              .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
    CHECK(delta_model_resolve(&in, &r, NULL, 0) == DELTA_OK &&
              r.vocab == 30522 && r.positions == 512 && r.seq_len == 512 &&
              r.dropout == 0.1f,
          "bert-base defaults");
    /* GPT-2 grows its position table to a longer seq_len. */
    in = (delta_model_config){.name = "gpt2-small", .batch = 1,
                              .seq_len = 2048};
    CHECK(delta_model_resolve(&in, &r, NULL, 0) == DELTA_OK &&
              r.positions == 2048, "gpt2 positions follow seq_len");
}

/* ---- errors ------------------------------------------------------------- */

/* Builds cfg expecting status want and a message containing each of the
 * NULL-terminated needles; the context must stay usable. */
static void expect_error(delta_model_config cfg, delta_status want,
                         const char *needle, const char *needle2) {
    delta_ctx *ctx = delta_ctx_new();
    delta_model m;
    delta_status st = delta_model_build(ctx, &cfg, &m);
    CHECK(st == want, "%s: status %s, expected %s (%s)",
          cfg.name ? cfg.name : "(null)", delta_status_name(st),
          delta_status_name(want), m.error);
    CHECK(m.error[0] && strstr(m.error, needle) &&
              (!needle2 || strstr(m.error, needle2)),
          "message '%s' lacks '%s'/'%s'", m.error, needle,
          needle2 ? needle2 : "");
    if (want == DELTA_ERR_INVALID_ARG)
        CHECK(delta_ctx_n_tensors(ctx) == 0 &&
                  delta_ctx_status(ctx) == DELTA_OK,
              "a config error touched the graph");
    delta_ctx_free(ctx);
}

static void test_bad_configs(void) {
    typedef delta_model_config C;
    expect_error((C){.name = "resnet51", .batch = 1}, DELTA_ERR_INVALID_ARG,
                 "resnet51", "resnet50, resnet101");
    expect_error((C){.name = "resnet51", .batch = 1}, DELTA_ERR_INVALID_ARG,
                 "gpt2-xl", "bert-large");
    expect_error((C){.name = NULL, .batch = 1}, DELTA_ERR_INVALID_ARG,
                 "unknown model", "mlp");
    expect_error((C){.name = "mlp", .batch = 0}, DELTA_ERR_INVALID_ARG,
                 "batch", NULL);
    expect_error((C){.name = "gpt2-tiny", .batch = 2, .hidden = 100,
                     .heads = 3},
                 DELTA_ERR_INVALID_ARG, "hidden 100", "heads 3");
    expect_error((C){.name = "bert-base", .batch = 1, .seq_len = 1024},
                 DELTA_ERR_INVALID_ARG, "seq_len 1024", "positions");
    expect_error((C){.name = "gpt2-small", .batch = 1, .seq_len = 64,
                     .positions = 32},
                 DELTA_ERR_INVALID_ARG, "seq_len 64", "positions");
    expect_error((C){.name = "resnet18", .batch = 1, .image_size = 32},
                 DELTA_ERR_INVALID_ARG, "image_size 32", "batch");
    expect_error((C){.name = "resnet18", .batch = 2, .image_size = -5},
                 DELTA_ERR_INVALID_ARG, "image_size", NULL);
    expect_error((C){.name = "resnet18", .batch = 2, .layers = 3},
                 DELTA_ERR_INVALID_ARG, "layers", "no such setting");
    expect_error((C){.name = "resnet18", .batch = 2, .dropout = 0.5f},
                 DELTA_ERR_INVALID_ARG, "dropout", NULL);
    expect_error((C){.name = "mlp", .batch = 2, .width = 8},
                 DELTA_ERR_INVALID_ARG, "width", NULL);
    expect_error((C){.name = "gpt2-tiny", .batch = 2, .dropout = 1.0f},
                 DELTA_ERR_INVALID_ARG, "dropout", NULL);
    expect_error((C){.name = "gpt2-tiny", .batch = 2,
                     .hidden = (int64_t)1 << 40},
                 DELTA_ERR_INVALID_ARG, "hidden", NULL);
    expect_error((C){.name = "gpt2-tiny", .batch = 2, .layers = 100000},
                 DELTA_ERR_INVALID_ARG, "layers", NULL);
    expect_error((C){.name = "mlp", .batch = 2, .channels = 1 << 20,
                     .image_size = 1 << 20},
                 DELTA_ERR_INVALID_ARG, "too large", NULL);
    /* Valid fields, but a tensor past the graph's size limit: the graph's
     * error comes back, named. */
    expect_error((C){.name = "gpt2-tiny", .batch = 2, .vocab = 1 << 30,
                     .hidden = 1 << 20, .heads = 1},
                 DELTA_ERR_SHAPE, "gpt2-tiny", "transformer.wte.weight");
    /* Batch 1 at 33x33 leaves 2x2 maps: fine. */
    delta_ctx *ctx = delta_ctx_new();
    delta_model m;
    delta_model_config ok = {.name = "resnet18", .batch = 1,
                             .image_size = 33};
    CHECK(delta_model_build(ctx, &ok, &m) == DELTA_OK, "%s", m.error);
    delta_ctx_free(ctx);
    /* A graph already in error is refused, its error reported. */
    ctx = delta_ctx_new();
    int64_t bad = -1;
    delta_param(ctx, "x", 1, &bad, (delta_init){DELTA_INIT_ZEROS, 0, 0});
    ok.image_size = 64;
    CHECK(delta_model_build(ctx, &ok, &m) != DELTA_OK && m.error[0],
          "build on a context in error");
    delta_ctx_free(ctx);
}

/* ---- the loss falls ----------------------------------------------------- */

/* Runs `steps` steps on the batch already in ex; returns first and last
 * loss. */
static void train_steps(delta_exec *ex, const delta_model *m, int steps,
                        float *first, float *last) {
    *first = *last = NAN;
    for (int s = 0; s < steps; s++) {
        delta_status st = delta_exec_run(ex, DELTA_RUN_STEP);
        CHECK(st == DELTA_OK, "step %d: %s", s, delta_status_name(st));
        float l = *(float *)delta_exec_data(ex, m->loss);
        if (s == 0) *first = l;
        *last = l;
    }
}

static void test_loss_falls_gpt2(void) {
    delta_ctx *ctx = delta_ctx_new();
    delta_model_config cfg = {.name = "gpt2-tiny", .batch = 4,
                              .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
    delta_model m;
    delta_status st = delta_model_build(ctx, &cfg, &m);
    CHECK(st == DELTA_OK, "%s", m.error);
    if (st == DELTA_OK) st = delta_backward(ctx, m.loss);
    if (st == DELTA_OK)
        st = delta_optimizer_adamw(ctx, (delta_adamw_opts){
            1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f});
    CHECK(st == DELTA_OK, "%s", delta_ctx_error(ctx));
    char err[256];
    delta_exec *ex = st == DELTA_OK ? delta_exec_new(ctx, NULL, err, sizeof err)
                                    : NULL;
    if (ex) {
        delta_model_fill_constants(&m, exec_data_of, ex);
        /* A learnable sequence: each next token is a fixed function of the
         * current one, so the model can overfit it. */
        int64_t B = m.cfg.batch, T = m.cfg.seq_len, V = m.cfg.vocab;
        int32_t *tok = delta_exec_data(ex, m.input);
        int32_t *tgt = delta_exec_data(ex, m.target);
        for (int64_t b = 0; b < B; b++) {
            int32_t v = (int32_t)(b * 37 % V);
            for (int64_t t = 0; t < T; t++) {
                tok[b * T + t] = v;
                v = (int32_t)((v * 5 + 3) % V);
                tgt[b * T + t] = v;
            }
        }
        float first, last;
        train_steps(ex, &m, 20, &first, &last);
        printf("  gpt2-tiny: loss %.3f -> %.3f in 20 AdamW steps\n", first,
               last);
        CHECK(first > 5.0f && first < 6.0f, "first loss %g, expected about "
              "ln 256 = 5.55", first);
        CHECK(last < first / 3, "loss fell from %g only to %g", first, last);
    }
    delta_exec_free(ex);
    delta_ctx_free(ctx);
}

static void test_loss_falls_resnet(void) {
    delta_ctx *ctx = delta_ctx_new();
    delta_model_config cfg = {.name = "resnet18", .batch = 8,
                              .image_size = 32, .classes = 10, .width = 8};
    delta_model m;
    delta_status st = delta_model_build(ctx, &cfg, &m);
    CHECK(st == DELTA_OK, "%s", m.error);
    if (st == DELTA_OK) st = delta_backward(ctx, m.loss);
    if (st == DELTA_OK)
        st = delta_optimizer_sgd(ctx, (delta_sgd_opts){0.05f, 0.9f, 0.0f,
                                                       false});
    CHECK(st == DELTA_OK, "%s", delta_ctx_error(ctx));
    char err[256];
    delta_exec *ex = st == DELTA_OK ? delta_exec_new(ctx, NULL, err, sizeof err)
                                    : NULL;
    if (ex) {
        delta_model_fill_constants(&m, exec_data_of, ex);
        float *img = delta_exec_data(ex, m.input);
        int32_t *lab = delta_exec_data(ex, m.target);
        int64_t n = delta_tensor_numel(m.input);
        uint32_t s = 12345;
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            img[i] = (float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
        }
        for (int64_t i = 0; i < m.cfg.batch; i++) lab[i] = (int32_t)(i % 10);
        float first, last;
        train_steps(ex, &m, 20, &first, &last);
        printf("  resnet18 (width 8, 32x32): loss %.3f -> %.3f in 20 SGD "
               "steps\n", first, last);
        CHECK(last < first / 4, "loss fell from %g only to %g", first, last);
    }
    delta_exec_free(ex);
    delta_ctx_free(ctx);
}

/* ---- main --------------------------------------------------------------- */

#define GEMM_RUN(fn) TEST_RUN_LABELED(fn, gemm_label)

static void run_fixtures(void) {
    worst_use = 0;
    worst_where[0] = '\0';
    GEMM_RUN(test_fixture_mlp);
    GEMM_RUN(test_fixture_resnet18);
    GEMM_RUN(test_fixture_resnet50);
    GEMM_RUN(test_fixture_gpt2);
    GEMM_RUN(test_fixture_bert);
    if (worst_where[0])
        printf("  [%s gemm] worst error: %.3f of the tolerance, at %s\n",
               gemm_label, worst_use, worst_where);
    bf16_worst = 0;
    bf16_where[0] = '\0';
    GEMM_RUN(test_bf16_mlp);
    GEMM_RUN(test_bf16_resnet18);
    GEMM_RUN(test_bf16_resnet50);
    GEMM_RUN(test_bf16_gpt2);
    GEMM_RUN(test_bf16_bert);
    if (bf16_where[0])
        printf("  [%s gemm] bf16: worst %.3f of the allowed, at %s\n",
               gemm_label, bf16_worst, bf16_where);
}

static const char *blas_why;
static void test_blas_pass(void) { TEST_SKIP(blas_why); }

int main(int argc, char **argv) {
    verbose = argc > 1 && !strcmp(argv[1], "-v");
    gemm_label = "builtin";
    if (delta_cpu_set_gemm(DELTA_GEMM_BUILTIN) == DELTA_OK) run_fixtures();
    gemm_label = "blas";
    if (delta_cpu_set_gemm(DELTA_GEMM_BLAS) == DELTA_OK) {
        run_fixtures();
    } else {
        blas_why = "this build has no OpenBLAS; the BLAS pass is skipped";
        test_run_(test_blas_pass, "fixtures", gemm_label);
    }
    delta_cpu_set_gemm(DELTA_GEMM_BUILTIN);
    TEST_RUN(test_every_model_builds);
    TEST_RUN(test_model_names_and_defaults);
    TEST_RUN(test_bad_configs);
    TEST_RUN(test_loss_falls_gpt2);
    TEST_RUN(test_loss_falls_resnet);
    TEST_MAIN_END();
}
