/* The reference test against PyTorch: for every fixture in tests/fixtures/
 * (written by scripts/make_fixtures.py, see docs/TESTING.md) it builds the
 * same graph through the public API, loads the fixture's inputs and
 * parameters, runs one training step with loss = sum(out * R) and compares
 * the output, the gradient of every parameter and differentiable input, the
 * batch-norm running stats after the step, and (for the optimizer fixture)
 * the parameters after each of three steps, with
 *     |got - expected| <= atol + rtol * |expected|.
 * The whole suite runs twice: with the built-in GEMM and with OpenBLAS (that
 * pass is skipped in a build without it). No Python is needed: the fixtures
 * are committed. A missing or unreadable fixture fails its test with a
 * message saying how to regenerate it. */
#include "delta/delta.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

/* Tolerances for fp32 against a float64 reference: single ops, and the
 * composite graphs (blocks, optimizer steps) where rounding errors of many
 * ops add up. */
#define ATOL_OP 1e-5
#define RTOL_OP 1e-4
#define ATOL_BLOCK 2e-5
#define RTOL_BLOCK 2e-4

#define MAX_BIND 64
#define REGEN "regenerate with: /usr/bin/python3 scripts/make_fixtures.py"

static const char *gemm_label = "builtin";
static bool verbose;

/* Worst use of the tolerance over a pass: max |a-b| / (atol + rtol |b|). */
static double worst_use;
static char worst_where[256];

static const char *fixture_dir(void) {
    const char *d = getenv("DELTA_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

/* ---- one case: a graph built against one fixture ---------------------- */

typedef struct bind {
    delta_tensor *t;
    char name[160];  /* name in the fixture, without the case prefix */
} bind;

typedef struct ref {
    const char *file;  /* fixture name, e.g. "conv2d" */
    delta_st_file *f;
    char pre[64];      /* case prefix: "k3s1p1/", or "" */
    delta_ctx *ctx;
    delta_exec *ex;
    bind b[MAX_BIND];
    int nb;
    bool ok;           /* false after any problem setting the case up */
    double atol, rtol;
} ref;

/* Opens tests/fixtures/<file>.safetensors; a failed CHECK when it cannot. */
static bool ref_open(ref *r, const char *file, double atol, double rtol) {
    memset(r, 0, sizeof *r);
    r->file = file;
    r->atol = atol;
    r->rtol = rtol;
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.safetensors", fixture_dir(), file);
    delta_status st = DELTA_OK;
    r->f = delta_st_open(path, &st, err, sizeof err);
    CHECK(r->f != NULL, "fixture %s cannot be read (%s: %s); " REGEN, path,
          delta_status_name(st), err);
    return r->f != NULL;
}

static void ref_close(ref *r) {
    delta_st_close(r->f);
    r->f = NULL;
}

static void ref_begin(ref *r, const char *case_name) {
    snprintf(r->pre, sizeof r->pre, "%s%s", case_name,
             case_name[0] ? "/" : "");
    r->ctx = delta_ctx_new();
    r->ex = NULL;
    r->nb = 0;
    r->ok = r->ctx != NULL;
    CHECK(r->ctx != NULL, "delta_ctx_new failed");
}

static void ref_end(ref *r) {
    delta_exec_free(r->ex);
    delta_ctx_free(r->ctx);
    r->ex = NULL;
    r->ctx = NULL;
}

/* The fixture tensor <prefix><name>, or NULL (and a failed CHECK). */
static const delta_st_tensor *ref_tensor(ref *r, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", r->pre, name);
    const delta_st_tensor *t = delta_st_find(r->f, full);
    if (!t) {
        CHECK(t != NULL, "%s: fixture has no tensor '%s'; " REGEN, r->file,
              full);
        r->ok = false;
        return NULL;
    }
    if (t->dtype != DELTA_F32 && t->dtype != DELTA_I32) {
        CHECK(false, "%s: tensor '%s' has dtype %s; expected F32 or I32",
              r->file, full, t->st_dtype);
        r->ok = false;
        return NULL;
    }
    return t;
}

static double ref_meta(ref *r, const char *key) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", r->pre, key);
    const char *v = delta_st_metadata(r->f, full);
    if (!v) {
        CHECK(v != NULL, "%s: fixture metadata has no '%s'; " REGEN, r->file,
              full);
        r->ok = false;
        return 0;
    }
    char *end;
    double d = strtod(v, &end);
    CHECK(end != v && *end == '\0', "%s: metadata '%s' = '%s' is not a "
          "number", r->file, full, v);
    return d;
}

static int ref_meta_i(ref *r, const char *key) {
    return (int)ref_meta(r, key);
}

static const char *ref_meta_s(ref *r, const char *key) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", r->pre, key);
    const char *v = delta_st_metadata(r->f, full);
    if (!v) {
        CHECK(v != NULL, "%s: fixture metadata has no '%s'; " REGEN, r->file,
              full);
        r->ok = false;
    }
    return v;
}

/* A leaf tensor shaped as fixture tensor `name`, bound to it: its data is
 * copied in by ref_place. */
static delta_tensor *ref_leaf(ref *r, const char *name,
                              delta_tensor_kind kind) {
    if (!r->ok) return NULL;
    const delta_st_tensor *st = ref_tensor(r, name);
    if (!st) return NULL;
    if (st->ndim > DELTA_MAX_DIMS || r->nb == MAX_BIND) {
        CHECK(false, "%s: tensor '%s': too many dims or bindings", r->file,
              name);
        r->ok = false;
        return NULL;
    }
    delta_init zeros = {DELTA_INIT_ZEROS, 0, 0};
    delta_init none = {DELTA_INIT_NONE, 0, 0};
    delta_tensor *t = NULL;
    bool want_f32 = kind != DELTA_KIND_INPUT && kind != DELTA_KIND_CONST;
    if (want_f32 && st->dtype != DELTA_F32) {
        CHECK(false, "%s: tensor '%s%s' must be F32", r->file, r->pre, name);
        r->ok = false;
        return NULL;
    }
    switch (kind) {
    case DELTA_KIND_PARAM:
        t = delta_param(r->ctx, name, st->ndim, st->shape, zeros);
        break;
    case DELTA_KIND_STATE:
        t = delta_state(r->ctx, name, st->ndim, st->shape, zeros);
        break;
    case DELTA_KIND_INPUT:
        t = delta_input(r->ctx, name, st->dtype, st->ndim, st->shape);
        break;
    default:
        t = delta_constant(r->ctx, name, st->dtype, st->ndim, st->shape,
                           none);
        break;
    }
    if (!t) {
        CHECK(t != NULL, "%s: cannot make tensor '%s': %s", r->file, name,
              delta_ctx_error(r->ctx));
        r->ok = false;
        return NULL;
    }
    r->b[r->nb].t = t;
    snprintf(r->b[r->nb].name, sizeof r->b[r->nb].name, "%s", name);
    r->nb++;
    return t;
}

static delta_tensor *ref_param(ref *r, const char *name) {
    return ref_leaf(r, name, DELTA_KIND_PARAM);
}
static delta_tensor *ref_const(ref *r, const char *name) {
    return ref_leaf(r, name, DELTA_KIND_CONST);
}
static delta_tensor *ref_input(ref *r, const char *name) {
    return ref_leaf(r, name, DELTA_KIND_INPUT);
}
static delta_tensor *ref_state(ref *r, const char *name) {
    return ref_leaf(r, name, DELTA_KIND_STATE);
}

/* loss = sum(out * R), then the backward ops. */
static delta_tensor *ref_loss(ref *r, delta_tensor *out, const char *rname) {
    if (!r->ok) return NULL;
    if (!out) {
        CHECK(out != NULL, "%s %s: building the graph failed: %s", r->file,
              r->pre, delta_ctx_error(r->ctx));
        r->ok = false;
        return NULL;
    }
    delta_tensor *R = ref_const(r, rname);
    delta_tensor *loss = delta_sum(r->ctx, delta_mul(r->ctx, out, R));
    if (loss) delta_backward(r->ctx, loss);
    if (!loss || delta_ctx_status(r->ctx) != DELTA_OK) {
        CHECK(false, "%s %s: loss or backward failed: %s", r->file, r->pre,
              delta_ctx_error(r->ctx));
        r->ok = false;
        return NULL;
    }
    return loss;
}

/* Copies fixture tensor `name` into t. */
static bool ref_set(ref *r, delta_tensor *t, const char *name) {
    const delta_st_tensor *st = ref_tensor(r, name);
    if (!st) return false;
    delta_status s = delta_exec_set(r->ex, t, st->data, st->nbytes);
    CHECK(s == DELTA_OK, "%s: delta_exec_set('%s%s'): %s (%zu bytes, tensor "
          "has %zu)", r->file, r->pre, name, delta_status_name(s), st->nbytes,
          delta_tensor_bytes(t));
    if (s != DELTA_OK) r->ok = false;
    return s == DELTA_OK;
}

/* Makes the executor and copies every bound tensor in. */
static bool ref_place(ref *r) {
    if (!r->ok) return false;
    if (delta_ctx_status(r->ctx) != DELTA_OK) {
        CHECK(false, "%s %s: graph error: %s", r->file, r->pre,
              delta_ctx_error(r->ctx));
        r->ok = false;
        return false;
    }
    char err[512] = "";
    r->ex = delta_exec_new(r->ctx, NULL, err, sizeof err);
    if (!r->ex) {
        CHECK(r->ex != NULL, "%s %s: delta_exec_new: %s", r->file, r->pre,
              err);
        r->ok = false;
        return false;
    }
    for (int i = 0; i < r->nb; i++)
        if (!ref_set(r, r->b[i].t, r->b[i].name)) return false;
    return true;
}

static bool ref_step(ref *r) {
    if (!r->ok) return false;
    delta_status s = delta_exec_run(r->ex, DELTA_RUN_STEP);
    CHECK(s == DELTA_OK, "%s %s: delta_exec_run: %s", r->file, r->pre,
          delta_status_name(s));
    if (s != DELTA_OK) r->ok = false;
    return s == DELTA_OK;
}

/* Compares t's data after the run with fixture tensor `name`. */
static void ref_expect(ref *r, const delta_tensor *t, const char *name) {
    if (!r->ok) return;
    const delta_st_tensor *st = ref_tensor(r, name);
    if (!st) return;
    if (!t) {
        CHECK(t != NULL, "%s %s%s: delta has no such tensor (no gradient?)",
              r->file, r->pre, name);
        return;
    }
    bool same = delta_tensor_ndim(t) == st->ndim &&
                delta_tensor_dtype(t) == DELTA_F32 && st->dtype == DELTA_F32;
    for (int i = 0; same && i < st->ndim; i++)
        same = delta_tensor_dim(t, i) == st->shape[i];
    if (!same) {
        CHECK(same, "%s %s%s: delta tensor '%s' (%d dims, %lld elements) "
              "does not match the fixture's shape (%d dims, %lld elements)",
              r->file, r->pre, name, delta_tensor_name(t),
              delta_tensor_ndim(t), (long long)delta_tensor_numel(t),
              st->ndim, (long long)st->numel);
        return;
    }
    long n = (long)st->numel;
    float *want = malloc((size_t)(n ? n : 1) * sizeof(float));
    float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!want || !got) {
        CHECK(false, "out of memory");
        free(want);
        free(got);
        return;
    }
    memcpy(want, st->data, st->nbytes);
    memcpy(got, delta_exec_data(r->ex, t), st->nbytes);
    char what[320];
    snprintf(what, sizeof what, "%s %s%s [%s gemm]", r->file, r->pre, name,
             gemm_label);
    double use = 0, maxabs = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double u = d / (r->atol + r->rtol * fabs((double)want[i]));
        if (isnan(d)) u = INFINITY;
        if (u > use) use = u;
        if (d > maxabs) maxabs = d;
    }
    if (use > worst_use) {
        worst_use = use;
        snprintf(worst_where, sizeof worst_where, "%s %s%s", r->file, r->pre,
                 name);
    }
    if (verbose)
        printf("  %-56s max |diff| %.3g, %.3f of tolerance\n", what, maxabs,
               use);
    test_allclose(what, got, want, n, r->atol, r->rtol);
    free(want);
    free(got);
}

/* Gradients of every bound parameter, and running stats after the step of
 * every bound state tensor. */
static void ref_expect_grads(ref *r) {
    for (int i = 0; i < r->nb && r->ok; i++) {
        const delta_tensor *t = r->b[i].t;
        char name[200];
        if (delta_tensor_kind_of(t) == DELTA_KIND_PARAM) {
            snprintf(name, sizeof name, "grad.%s", r->b[i].name);
            ref_expect(r, delta_tensor_grad(t), name);
        } else if (delta_tensor_kind_of(t) == DELTA_KIND_STATE) {
            snprintf(name, sizeof name, "%s.after", r->b[i].name);
            ref_expect(r, t, name);
        }
    }
}

/* The usual ending: loss, one step, compare output and gradients. */
static void ref_finish(ref *r, delta_tensor *out) {
    ref_loss(r, out, "R");
    if (ref_place(r) && ref_step(r)) {
        ref_expect(r, out, "out");
        ref_expect_grads(r);
    }
    ref_end(r);
}

/* ---- op fixtures --------------------------------------------------------- */

static void test_matmul(void) {
    static const char *cases[] = {"plain", "trans_a", "trans_b", "batched",
                                  "batched_tt", "shared_b"};
    ref r;
    if (!ref_open(&r, "matmul", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *a = ref_param(&r, "a"), *b = ref_param(&r, "b");
        int ta = ref_meta_i(&r, "trans_a"), tb = ref_meta_i(&r, "trans_b");
        float alpha = (float)ref_meta(&r, "alpha");
        ref_finish(&r, delta_matmul(r.ctx, a, b, ta, tb, alpha));
    }
    ref_close(&r);
}

static void test_linear(void) {
    static const char *cases[] = {"bias", "nobias"};
    ref r;
    if (!ref_open(&r, "linear", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x"), *w = ref_param(&r, "weight");
        delta_tensor *b = ref_meta_i(&r, "has_bias") ? ref_param(&r, "bias")
                                                     : NULL;
        ref_finish(&r, delta_linear(r.ctx, x, w, b));
    }
    ref_close(&r);
}

static void test_conv2d(void) {
    static const char *cases[] = {"k3s1p1", "k3s2p1", "k1", "k7s2p3"};
    ref r;
    if (!ref_open(&r, "conv2d", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x"), *w = ref_param(&r, "weight");
        delta_tensor *b = ref_meta_i(&r, "has_bias") ? ref_param(&r, "bias")
                                                     : NULL;
        int stride = ref_meta_i(&r, "stride"), pad = ref_meta_i(&r, "pad");
        ref_finish(&r, delta_conv2d(r.ctx, x, w, b, stride, pad));
    }
    ref_close(&r);
}

/* Batch norm (training) with running stats; ref_finish also checks
 * running_mean.after and running_var.after. */
static void batchnorm_fixture(const char *file) {
    ref r;
    if (!ref_open(&r, file, ATOL_OP, RTOL_OP)) return;
    ref_begin(&r, "");
    delta_tensor *x = ref_param(&r, "x");
    delta_tensor *g = ref_param(&r, "weight"), *b = ref_param(&r, "bias");
    delta_tensor *rm = ref_state(&r, "running_mean");
    delta_tensor *rv = ref_state(&r, "running_var");
    float momentum = (float)ref_meta(&r, "momentum");
    float eps = (float)ref_meta(&r, "eps");
    ref_finish(&r, delta_batchnorm(r.ctx, x, g, b, rm, rv, momentum, eps));
    ref_close(&r);
}

static void test_batchnorm2d(void) { batchnorm_fixture("batchnorm2d"); }
static void test_batchnorm1d(void) { batchnorm_fixture("batchnorm1d"); }

static void test_layernorm(void) {
    static const char *cases[] = {"affine", "noaffine"};
    ref r;
    if (!ref_open(&r, "layernorm", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x"), *g = NULL, *b = NULL;
        if (ref_meta_i(&r, "affine")) {
            g = ref_param(&r, "weight");
            b = ref_param(&r, "bias");
        }
        float eps = (float)ref_meta(&r, "eps");
        ref_finish(&r, delta_layernorm(r.ctx, x, g, b, eps));
    }
    ref_close(&r);
}

static void unary_fixture(const char *file,
                          delta_tensor *(*op)(delta_ctx *, delta_tensor *)) {
    ref r;
    if (!ref_open(&r, file, ATOL_OP, RTOL_OP)) return;
    ref_begin(&r, "");
    delta_tensor *x = ref_param(&r, "x");
    ref_finish(&r, op(r.ctx, x));
    ref_close(&r);
}

static void test_relu(void) { unary_fixture("relu", delta_relu); }
static void test_gelu(void) { unary_fixture("gelu", delta_gelu); }
static void test_global_avgpool(void) {
    unary_fixture("global_avgpool", delta_global_avgpool);
}

static void pool_fixture(const char *file,
                         delta_tensor *(*op)(delta_ctx *, delta_tensor *, int,
                                             int, int)) {
    static const char *cases[] = {"k3s2p1", "k2s2p0"};
    ref r;
    if (!ref_open(&r, file, ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x");
        int k = ref_meta_i(&r, "k"), s = ref_meta_i(&r, "stride");
        int p = ref_meta_i(&r, "pad");
        ref_finish(&r, op(r.ctx, x, k, s, p));
    }
    ref_close(&r);
}

static void test_maxpool2d(void) { pool_fixture("maxpool2d", delta_maxpool2d); }
static void test_avgpool2d(void) { pool_fixture("avgpool2d", delta_avgpool2d); }

static void test_add(void) {
    static const char *cases[] = {"same", "trail2", "trail1"};
    ref r;
    if (!ref_open(&r, "add", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *a = ref_param(&r, "a"), *b = ref_param(&r, "b");
        ref_finish(&r, delta_add(r.ctx, a, b));
    }
    ref_close(&r);
}

static void test_embedding(void) {
    ref r;
    if (!ref_open(&r, "embedding", ATOL_OP, RTOL_OP)) return;
    ref_begin(&r, "");
    delta_tensor *ids = ref_input(&r, "ids"), *table = ref_param(&r, "table");
    ref_finish(&r, delta_embedding(r.ctx, ids, table));
    ref_close(&r);
}

static void test_softmax(void) {
    static const char *cases[] = {"plain", "causal", "causal_rect", "mask",
                                  "causal_mask"};
    ref r;
    if (!ref_open(&r, "softmax", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x");
        delta_tensor *m = ref_meta_i(&r, "has_mask")
                              ? ref_const(&r, "key_mask") : NULL;
        bool causal = ref_meta_i(&r, "causal");
        ref_finish(&r, delta_softmax(r.ctx, x, causal, m));
    }
    ref_close(&r);
}

static void test_attention(void) {
    static const char *cases[] = {"causal", "mask"};
    ref r;
    if (!ref_open(&r, "attention", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *q = ref_param(&r, "q"), *k = ref_param(&r, "k");
        delta_tensor *v = ref_param(&r, "v");
        delta_tensor *m = ref_meta_i(&r, "has_mask")
                              ? ref_const(&r, "key_mask") : NULL;
        bool causal = ref_meta_i(&r, "causal");
        ref_finish(&r, delta_attention(r.ctx, q, k, v, causal, m, 0.0f));
    }
    ref_close(&r);
}

static void test_cross_entropy(void) {
    ref r;
    if (!ref_open(&r, "cross_entropy", ATOL_OP, RTOL_OP)) return;
    ref_begin(&r, "");
    delta_tensor *logits = ref_param(&r, "logits");
    delta_tensor *targets = ref_input(&r, "targets");
    int ignore = ref_meta_i(&r, "ignore_index");
    ref_finish(&r, delta_cross_entropy(r.ctx, logits, targets, ignore));
    ref_close(&r);
}

static void test_transpose(void) {
    static const char *cases[] = {"d1_3", "d0_1", "last2"};
    ref r;
    if (!ref_open(&r, "transpose", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x");
        int d0 = ref_meta_i(&r, "d0"), d1 = ref_meta_i(&r, "d1");
        ref_finish(&r, delta_transpose(r.ctx, x, d0, d1));
    }
    ref_close(&r);
}

/* Splits x into n parts and concatenates them in the fixture's "order"
 * ("p2,y,p0,p1": parts by index, y a second parameter). */
static void test_split_concat(void) {
    static const char *cases[] = {"mid", "mid_equal", "last"};
    ref r;
    if (!ref_open(&r, "split_concat", ATOL_OP, RTOL_OP)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        delta_tensor *x = ref_param(&r, "x"), *parts[4] = {0};
        int sd = ref_meta_i(&r, "split_dim"), n = ref_meta_i(&r, "n");
        int cd = ref_meta_i(&r, "concat_dim");
        const char *order = ref_meta_s(&r, "order");
        delta_tensor *xs[DELTA_MAX_OP_IN] = {0}, *out = NULL;
        int nx = 0;
        if (r.ok && n >= 1 && n <= 4 &&
            delta_split(r.ctx, x, sd, n, parts) == DELTA_OK) {
            for (const char *p = order; *p && nx < DELTA_MAX_OP_IN;) {
                if (*p == 'y') xs[nx++] = ref_param(&r, "y");
                else if (*p == 'p' && p[1] >= '0' && p[1] < '0' + n)
                    xs[nx++] = parts[p[1] - '0'];
                else {
                    CHECK(false, "split_concat: bad order '%s'", order);
                    r.ok = false;
                    break;
                }
                p = strchr(p, ',');
                if (!p) break;
                p++;
            }
            out = delta_concat(r.ctx, xs, nx, cd);
        }
        ref_finish(&r, out);
    }
    ref_close(&r);
}

/* Three steps of SGD (momentum, weight decay) / AdamW on a linear layer,
 * loss sum(out * R.<step>); compares the gradients of each step and the
 * parameters after it. */
static void test_optimizer(void) {
    static const char *cases[] = {"sgd", "adamw"};
    ref r;
    if (!ref_open(&r, "optimizer", ATOL_BLOCK, RTOL_BLOCK)) return;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ref_begin(&r, cases[c]);
        bool sgd = c == 0;
        delta_tensor *w = ref_param(&r, "weight"), *b = ref_param(&r, "bias");
        delta_tensor *x = ref_const(&r, "x");
        delta_tensor *out = delta_linear(r.ctx, x, w, b);
        /* R is bound to R.0 and reset to R.<s> before each step. */
        ref_loss(&r, out, "R.0");
        delta_tensor *R = r.ok ? delta_ctx_find(r.ctx, "R.0") : NULL;
        int steps = ref_meta_i(&r, "steps");
        if (r.ok) {
            delta_status st;
            if (sgd) {
                delta_sgd_opts o = {(float)ref_meta(&r, "lr"),
                                    (float)ref_meta(&r, "momentum"),
                                    (float)ref_meta(&r, "weight_decay"),
                                    ref_meta_i(&r, "nesterov") != 0};
                st = delta_optimizer_sgd(r.ctx, o);
            } else {
                delta_adamw_opts o = {(float)ref_meta(&r, "lr"),
                                      (float)ref_meta(&r, "beta1"),
                                      (float)ref_meta(&r, "beta2"),
                                      (float)ref_meta(&r, "eps"),
                                      (float)ref_meta(&r, "weight_decay")};
                st = delta_optimizer_adamw(r.ctx, o);
            }
            CHECK(st == DELTA_OK, "optimizer %s: %s", cases[c],
                  delta_ctx_error(r.ctx));
            if (st != DELTA_OK) r.ok = false;
        }
        if (ref_place(&r)) {
            for (int s = 0; s < steps && r.ok; s++) {
                char name[64];
                snprintf(name, sizeof name, "R.%d", s);
                if (!ref_set(&r, R, name) || !ref_step(&r)) break;
                snprintf(name, sizeof name, "grad.weight.%d", s);
                ref_expect(&r, delta_tensor_grad(w), name);
                snprintf(name, sizeof name, "grad.bias.%d", s);
                ref_expect(&r, delta_tensor_grad(b), name);
                snprintf(name, sizeof name, "weight.after.%d", s + 1);
                ref_expect(&r, w, name);
                snprintf(name, sizeof name, "bias.after.%d", s + 1);
                ref_expect(&r, b, name);
            }
        }
        ref_end(&r);
    }
    ref_close(&r);
}

/* ---- blocks --------------------------------------------------------------- */

/* A GPT-2 block (pre-norm, causal self-attention, tanh-GELU MLP). */
static void test_transformer_block(void) {
    ref r;
    if (!ref_open(&r, "transformer_block", ATOL_BLOCK, RTOL_BLOCK)) return;
    ref_begin(&r, "");
    delta_ctx *ctx = r.ctx;
    delta_tensor *x = ref_param(&r, "x");
    int nh = ref_meta_i(&r, "n_head");
    float eps = (float)ref_meta(&r, "eps");
    delta_tensor *out = NULL;
    if (r.ok && delta_tensor_ndim(x) == 3 && nh > 0) {
        int64_t B = delta_tensor_dim(x, 0), T = delta_tensor_dim(x, 1);
        int64_t C = delta_tensor_dim(x, 2), D = C / nh;
        delta_tensor *h = delta_layernorm(ctx, x, ref_param(&r, "ln_1.weight"),
                                          ref_param(&r, "ln_1.bias"), eps);
        delta_tensor *qkv = delta_linear(ctx, h,
                                         ref_param(&r, "attn.c_attn.weight"),
                                         ref_param(&r, "attn.c_attn.bias"));
        delta_tensor *p[3] = {0};
        delta_split(ctx, qkv, 2, 3, p);
        int64_t heads[4] = {B, T, nh, D}, flat[3] = {B, T, C};
        for (int i = 0; i < 3; i++)
            p[i] = delta_transpose(ctx, delta_reshape(ctx, p[i], 4, heads), 1,
                                   2);
        delta_tensor *y = delta_attention(ctx, p[0], p[1], p[2], true, NULL,
                                          0.0f);
        y = delta_reshape(ctx, delta_transpose(ctx, y, 1, 2), 3, flat);
        y = delta_linear(ctx, y, ref_param(&r, "attn.c_proj.weight"),
                         ref_param(&r, "attn.c_proj.bias"));
        delta_tensor *x1 = delta_add(ctx, x, y);
        h = delta_layernorm(ctx, x1, ref_param(&r, "ln_2.weight"),
                            ref_param(&r, "ln_2.bias"), eps);
        h = delta_gelu(ctx, delta_linear(ctx, h,
                                         ref_param(&r, "mlp.c_fc.weight"),
                                         ref_param(&r, "mlp.c_fc.bias")));
        h = delta_linear(ctx, h, ref_param(&r, "mlp.c_proj.weight"),
                         ref_param(&r, "mlp.c_proj.bias"));
        out = delta_add(ctx, x1, h);
    }
    ref_finish(&r, out);
    ref_close(&r);
}

static delta_tensor *bottleneck_bn(ref *r, const char *name, delta_tensor *x,
                                   float momentum, float eps) {
    char n[4][96];
    snprintf(n[0], sizeof n[0], "%s.weight", name);
    snprintf(n[1], sizeof n[1], "%s.bias", name);
    snprintf(n[2], sizeof n[2], "%s.running_mean", name);
    snprintf(n[3], sizeof n[3], "%s.running_var", name);
    delta_tensor *g = ref_param(r, n[0]), *b = ref_param(r, n[1]);
    delta_tensor *rm = ref_state(r, n[2]), *rv = ref_state(r, n[3]);
    return delta_batchnorm(r->ctx, x, g, b, rm, rv, momentum, eps);
}

/* torchvision's Bottleneck(16, 8, stride 2) with a conv1x1 + batch-norm
 * downsample, in training mode; fused: with its batch norms fused
 * (delta_ctx_fuse_batchnorm: two batchnorm_relu, one batchnorm_add_relu). */
static void bottleneck_case(ref *r, bool fused) {
    ref_begin(r, "");
    delta_ctx *ctx = r->ctx;
    float mom = (float)ref_meta(r, "momentum"), eps = (float)ref_meta(r, "eps");
    int stride = ref_meta_i(r, "stride");
    delta_tensor *x = ref_param(r, "x");
    delta_tensor *o = delta_conv2d(ctx, x, ref_param(r, "conv1.weight"),
                                   NULL, 1, 0);
    o = delta_relu(ctx, bottleneck_bn(r, "bn1", o, mom, eps));
    o = delta_conv2d(ctx, o, ref_param(r, "conv2.weight"), NULL, stride, 1);
    o = delta_relu(ctx, bottleneck_bn(r, "bn2", o, mom, eps));
    o = delta_conv2d(ctx, o, ref_param(r, "conv3.weight"), NULL, 1, 0);
    o = bottleneck_bn(r, "bn3", o, mom, eps);
    delta_tensor *id = delta_conv2d(
        ctx, x, ref_param(r, "downsample.0.weight"), NULL, stride, 0);
    id = bottleneck_bn(r, "downsample.1", id, mom, eps);
    o = delta_relu(ctx, delta_add(ctx, o, id));
    if (fused)
        CHECK(delta_ctx_fuse_batchnorm(ctx) == 3, "%s", delta_ctx_error(ctx));
    ref_finish(r, o);
}

static void test_resnet_bottleneck(void) {
    ref r;
    if (!ref_open(&r, "resnet_bottleneck", ATOL_BLOCK, RTOL_BLOCK)) return;
    bottleneck_case(&r, false);
    bottleneck_case(&r, true);
    ref_close(&r);
}

/* ---- main ------------------------------------------------------------------ */

/* TEST_RUN with the GEMM path in the reported name. */
#define REF_RUN(fn) TEST_RUN_LABELED(fn, gemm_label)

static void run_suite(void) {
    worst_use = 0;
    worst_where[0] = '\0';
    REF_RUN(test_matmul);
    REF_RUN(test_linear);
    REF_RUN(test_conv2d);
    REF_RUN(test_batchnorm2d);
    REF_RUN(test_batchnorm1d);
    REF_RUN(test_layernorm);
    REF_RUN(test_relu);
    REF_RUN(test_gelu);
    REF_RUN(test_maxpool2d);
    REF_RUN(test_avgpool2d);
    REF_RUN(test_global_avgpool);
    REF_RUN(test_add);
    REF_RUN(test_embedding);
    REF_RUN(test_softmax);
    REF_RUN(test_attention);
    REF_RUN(test_cross_entropy);
    REF_RUN(test_transpose);
    REF_RUN(test_split_concat);
    REF_RUN(test_optimizer);
    REF_RUN(test_transformer_block);
    REF_RUN(test_resnet_bottleneck);
    if (worst_where[0])
        printf("  [%s gemm] worst error: %.3f of the tolerance, at %s\n",
               gemm_label, worst_use, worst_where);
}

static const char *blas_why;
static void test_blas_pass(void) { TEST_SKIP(blas_why); }

int main(void) {
    const char *v = getenv("DELTA_REF_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;

    gemm_label = "builtin";
    delta_status st = delta_cpu_set_gemm(DELTA_GEMM_BUILTIN);
    if (st != DELTA_OK) {
        fprintf(stderr, "delta_cpu_set_gemm(builtin): %s\n",
                delta_status_name(st));
        test_failed_++;
        printf("FAIL set_gemm[builtin]\n");
    } else {
        run_suite();
    }

    gemm_label = "blas";
    st = delta_cpu_set_gemm(DELTA_GEMM_BLAS);
    if (st != DELTA_OK) {
        blas_why = "delta_cpu_set_gemm(DELTA_GEMM_BLAS) failed: this build "
                   "has no OpenBLAS; the BLAS pass is skipped";
        test_run_(test_blas_pass, "reference", gemm_label);
    } else {
        run_suite();
    }
    delta_cpu_set_gemm(DELTA_GEMM_BUILTIN);
    TEST_MAIN_END();
}
