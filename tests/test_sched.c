/* Learning-rate schedules and gradient clipping by global norm:
 *  - the schedule's values at its warmup, peak, middle and end, exactly;
 *  - an lr tensor holding the attribute's float trains the attribute's
 *    bits (SGD and AdamW), and a clipping coefficient of 1 changes nothing;
 *  - grad_sumsq's bits do not depend on the thread count;
 *  - PyTorch: AdamW under LambdaLR (llm.c's cosine with warmup) with
 *    clip_grad_norm_ before every step (scripts/make_sched_fixture.py);
 *  - every policy at a tight budget trains keep's bits with a cosine
 *    schedule and clipping (gpt2-tiny and mlp through the trainer);
 *  - the trainer refuses bad settings. */
#include "delta/cpu.h"
#include "delta/delta.h"
#include "delta/exec.h"
#include "test.h"

static void test_schedule_values(void) {
    delta_lr_sched s = {DELTA_LR_COSINE, 10, 0.1, 110};
    /* warmup: lr (s + 1) / W from 0; then the peak */
    CHECK(delta_lr_sched_at(&s, 1.0, 0) == 0.1f);
    CHECK(delta_lr_sched_at(&s, 1.0, 4) == 0.5f);
    CHECK(delta_lr_sched_at(&s, 1.0, 9) == 1.0f);
    CHECK(delta_lr_sched_at(&s, 1.0, 10) == 1.0f);
    /* halfway through the decay: cos(pi/2) = 6e-17, 0.55 after rounding */
    CHECK(delta_lr_sched_at(&s, 1.0, 60) == 0.55f, "%.9g",
          delta_lr_sched_at(&s, 1.0, 60));
    /* the last step is short of the end (r = 99/100), as llm.c */
    float last = delta_lr_sched_at(&s, 1.0, 109);
    double r = 0.99, want = 0.1 + 0.5 * (1 + cos(M_PI * r)) * 0.9;
    CHECK(last == (float)want && last > 0.1f, "%.9g", last);
    CHECK(delta_lr_sched_at(&s, 1.0, 110) == 0.1f);
    CHECK(delta_lr_sched_at(&s, 1.0, 500) == 0.1f);
    s.kind = DELTA_LR_LINEAR;
    CHECK(delta_lr_sched_at(&s, 1.0, 60) == 0.55f);
    CHECK(delta_lr_sched_at(&s, 1.0, 109) == (float)(1.0 - 0.99 * 0.9));
    CHECK(delta_lr_sched_at(&s, 2e-4, 0) == (float)(2e-4 / 10));
    s.kind = DELTA_LR_CONSTANT;
    CHECK(delta_lr_sched_at(&s, 3e-4, 5) == (float)(3e-4 * 6 / 10));
    CHECK(delta_lr_sched_at(&s, 3e-4, 10) == (float)3e-4);
    CHECK(delta_lr_sched_at(&s, 3e-4, 109) == (float)3e-4);
    /* warmup longer than the run: still warming up at its end */
    delta_lr_sched w = {DELTA_LR_COSINE, 20, 0, 10};
    CHECK(delta_lr_sched_at(&w, 1.0, 9) == 0.5f);
    CHECK(!delta_lr_sched_varies(&(delta_lr_sched){DELTA_LR_CONSTANT, 0,
                                                   0.5, 0}));
    CHECK(delta_lr_sched_varies(&(delta_lr_sched){DELTA_LR_CONSTANT, 1, 0,
                                                  0}));
    delta_lr_schedule k;
    CHECK(delta_lr_schedule_find("linear", &k) && k == DELTA_LR_LINEAR);
    CHECK(!delta_lr_schedule_find("step", &k));
}

/* A linear layer with cross entropy: x (N, IN), y (N), w (OUT, IN), b. */
typedef struct lin_prog {
    delta_ctx *ctx;
    delta_tensor *x, *y, *w, *b, *lr, *norm;
} lin_prog;

static lin_prog lin_build(int64_t n, int64_t in, int64_t out, bool adamw,
                          bool lr_tensor, float clip, float lr) {
    lin_prog p = {.ctx = delta_ctx_new()};
    delta_ctx *c = p.ctx;
    delta_ctx_set_seed(c, 11);
    int64_t xs[2] = {n, in}, ws[2] = {out, in}, bs[1] = {out}, ys[1] = {n};
    p.x = delta_input(c, "x", DELTA_F32, 2, xs);
    p.y = delta_input(c, "y", DELTA_I32, 1, ys);
    p.w = delta_param(c, "w", 2, ws, (delta_init){DELTA_INIT_NORMAL, 0, 0.5f});
    p.b = delta_param(c, "b", 1, bs, (delta_init){DELTA_INIT_NORMAL, 0, 0.1f});
    delta_tensor *loss = delta_cross_entropy(c, delta_linear(c, p.x, p.w, p.b),
                                             p.y, -100);
    delta_backward(c, loss);
    if (lr_tensor) p.lr = delta_input(c, "lr", DELTA_F32, 0, NULL);
    delta_optim_extras x = {p.lr, clip};
    if (adamw)
        delta_optimizer_adamw_with(
            c, (delta_adamw_opts){lr, 0.9f, 0.999f, 1e-8f, 0.01f}, &x);
    else
        delta_optimizer_sgd_with(c, (delta_sgd_opts){lr, 0.9f, 0.01f, true},
                                 &x);
    p.norm = delta_ctx_find(c, "grad_norm");
    CHECK(delta_ctx_status(c) == DELTA_OK, "%s", delta_ctx_error(c));
    return p;
}

/* Runs `steps` steps of p on fixed data (x from a counter, y = i % out),
 * writing lrs[step] into p.lr when it has one; w and b out. */
static void lin_run(lin_prog *p, int steps, const float *lrs, float *w,
                    float *b, float *norms) {
    char err[256];
    delta_exec *ex = delta_exec_new(p->ctx, NULL, err, sizeof err);
    CHECK(ex, "%s", err);
    if (!ex) return;
    float *x = delta_exec_data(ex, p->x);
    int32_t *y = delta_exec_data(ex, p->y);
    int64_t nx = delta_tensor_numel(p->x), ny = delta_tensor_numel(p->y);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 37) % 17) / 8 - 1;
    for (int64_t i = 0; i < ny; i++)
        y[i] = (int32_t)(i % delta_tensor_dim(p->w, 0));
    for (int s = 0; s < steps; s++) {
        if (p->lr) *(float *)delta_exec_data(ex, p->lr) = lrs[s];
        CHECK(delta_exec_run(ex, DELTA_RUN_STEP) == DELTA_OK);
        if (norms) norms[s] = *(float *)delta_exec_data(ex, p->norm);
    }
    memcpy(w, delta_exec_data(ex, p->w), delta_tensor_bytes(p->w));
    memcpy(b, delta_exec_data(ex, p->b), delta_tensor_bytes(p->b));
    delta_exec_free(ex);
}

/* The lr tensor holding the attribute's float gives the attribute's bits;
 * clipping far above the norm (coefficient 1) changes nothing either. */
static void test_lr_tensor_is_the_attribute(void) {
    for (int adamw = 0; adamw < 2; adamw++) {
        const float lr = adamw ? 3e-3f : 0.05f;
        float lrs[4] = {lr, lr, lr, lr};
        float w0[40], b0[5], w1[40], b1[5], w2[40], b2[5];
        lin_prog a = lin_build(16, 8, 5, adamw, false, 0, lr);
        lin_prog t = lin_build(16, 8, 5, adamw, true, 0, lr);
        lin_prog c = lin_build(16, 8, 5, adamw, true, 1e6f, lr);
        lin_run(&a, 4, lrs, w0, b0, NULL);
        lin_run(&t, 4, lrs, w1, b1, NULL);
        lin_run(&c, 4, lrs, w2, b2, NULL);
        CHECK(!memcmp(w0, w1, sizeof w0) && !memcmp(b0, b1, sizeof b0),
              "%s: the lr tensor's run differs from the attribute's",
              adamw ? "adamw" : "sgd");
        CHECK(!memcmp(w0, w2, sizeof w0) && !memcmp(b0, b2, sizeof b0),
              "%s: a coefficient of 1 changed the run",
              adamw ? "adamw" : "sgd");
        delta_ctx_free(a.ctx);
        delta_ctx_free(t.ctx);
        delta_ctx_free(c.ctx);
    }
}

/* grad_sumsq over many chunks: the same bits on 1 and 2 threads, within
 * float rounding of a long-double reference. */
static void test_sumsq_threads(void) {
    lin_prog p = lin_build(4, 3000, 40, false, false, 1.0f, 0.01f);
    float w1[120000], b1[40], w2[120000], b2[40], n1[2], n2[2];
    int threads = delta_cpu_threads();
    delta_cpu_set_threads(1);
    float lrs[2] = {0.01f, 0.01f};
    lin_run(&p, 2, lrs, w1, b1, n1);
    delta_cpu_set_threads(2);
    lin_run(&p, 2, lrs, w2, b2, n2);
    delta_cpu_set_threads(threads);
    CHECK(!memcmp(n1, n2, sizeof n1) && !memcmp(w1, w2, sizeof w1),
          "norms %.9g %.9g on 1 and 2 threads", n1[0], n2[0]);
    CHECK(n1[0] > 0 && isfinite(n1[0]));
    delta_ctx_free(p.ctx);
}

/* Fourteen gradients of odd sizes (three grad_sumsq ops chained): the
 * norm against a long-double sum of every gradient's squares, and the
 * coefficient torch's formula gives for it. */
static void test_norm_of_many_gradients(void) {
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 4);
    int64_t xs[2] = {5, 13}, ys[1] = {5};
    delta_tensor *x = delta_input(c, "x", DELTA_F32, 2, xs);
    delta_tensor *y = delta_input(c, "y", DELTA_I32, 1, ys);
    delta_tensor *h = x, *params[14];
    int64_t width[8] = {13, 4099, 7, 9000, 3, 11, 5, 3};
    for (int l = 0; l < 7; l++) {
        int64_t ws[2] = {width[l + 1], width[l]}, bs[1] = {width[l + 1]};
        params[2 * l] = delta_param(c, NULL, 2, ws,
                                    (delta_init){DELTA_INIT_NORMAL, 0, 0.3f});
        params[2 * l + 1] = delta_param(
            c, NULL, 1, bs, (delta_init){DELTA_INIT_NORMAL, 0, 0.3f});
        h = delta_linear(c, h, params[2 * l], params[2 * l + 1]);
        if (l < 6) h = delta_gelu(c, h);
    }
    delta_backward(c, delta_cross_entropy(c, h, y, -100));
    const float clip = 1e-3f;
    delta_optimizer_sgd_with(c, (delta_sgd_opts){.lr = 0.1f},
                             &(delta_optim_extras){NULL, clip});
    delta_tensor *norm = delta_ctx_find(c, "grad_norm");
    delta_tensor *coef = delta_ctx_find(c, "grad_clip_coef");
    int sumsq_ops = 0;
    for (int i = 0; i < delta_ctx_n_ops(c); i++) {
        delta_op_info oi;
        delta_ctx_op_info(c, i, &oi);
        sumsq_ops += !strcmp(oi.type, "grad_sumsq");
    }
    CHECK(sumsq_ops == 3, "%d grad_sumsq ops for 14 gradients", sumsq_ops);
    char err[256];
    delta_exec *ex = delta_exec_new(c, NULL, err, sizeof err);
    CHECK(ex && norm && coef, "%s %s", err, delta_ctx_error(c));
    if (ex && norm && coef) {
        float *xd = delta_exec_data(ex, x);
        for (int i = 0; i < 65; i++) xd[i] = (float)((i * 7) % 11) / 5 - 1;
        int32_t *yd = delta_exec_data(ex, y);
        for (int i = 0; i < 5; i++) yd[i] = i % 3;
        CHECK(delta_exec_run(ex, DELTA_RUN_STEP) == DELTA_OK);
        long double ss = 0;
        for (int k = 0; k < 14; k++) {
            const float *g = delta_exec_data(ex, delta_tensor_grad(params[k]));
            for (int64_t i = 0; i < delta_tensor_numel(params[k]); i++)
                ss += (long double)g[i] * g[i];
        }
        float got = *(float *)delta_exec_data(ex, norm);
        double want = sqrt((double)ss);
        CHECK(fabs(got - want) <= 1e-6 * want && want > clip,
              "norm %.9g, reference %.9g", got, want);
        float cf = *(float *)delta_exec_data(ex, coef);
        CHECK(cf == clip / (got + 1e-6f), "coefficient %.9g", cf);
    }
    delta_exec_free(ex);
    delta_ctx_free(c);
}

/* ---- PyTorch ------------------------------------------------------------ */

typedef struct fixture {
    int32_t n, in, out, steps, warmup;
    double lr, min_frac, clip, wd;
    float *x, *w0, *b0, *w, *b, *norms;
    int32_t *y;
} fixture;

static bool fixture_read(const char *path, fixture *f) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    char magic[4];
    int32_t hdr[6];
    double d[4];
    bool ok = fread(magic, 4, 1, fp) == 1 && !memcmp(magic, "DSCH", 4) &&
              fread(hdr, sizeof hdr, 1, fp) == 1 && hdr[0] == 1 &&
              fread(d, sizeof d, 1, fp) == 1;
    if (ok) {
        f->n = hdr[1], f->in = hdr[2], f->out = hdr[3], f->steps = hdr[4];
        f->warmup = hdr[5];
        f->lr = d[0], f->min_frac = d[1], f->clip = d[2], f->wd = d[3];
        size_t sz[6] = {(size_t)f->n * f->in, (size_t)f->out * f->in,
                        (size_t)f->out, (size_t)f->out * f->in,
                        (size_t)f->out, (size_t)f->steps};
        float **dst[6] = {&f->x, &f->w0, &f->b0, &f->w, &f->b, &f->norms};
        for (int i = 0; i < 6 && ok; i++) {
            *dst[i] = malloc(sz[i] * sizeof(float));
            ok = fread(*dst[i], sizeof(float), sz[i], fp) == sz[i];
        }
        f->y = malloc((size_t)f->n * sizeof *f->y);
        ok = ok && fread(f->y, sizeof *f->y, (size_t)f->n, fp) == (size_t)f->n;
    }
    fclose(fp);
    return ok;
}

static bool close_to(double a, double b) {
    return fabs(a - b) <= 1e-5 + 1e-4 * fabs(b);
}

static void test_matches_pytorch(void) {
    fixture f = {0};
    bool ok = fixture_read("tests/fixtures/sched_clip.bin", &f);
    CHECK(ok, "tests/fixtures/sched_clip.bin: missing or malformed "
          "(scripts/make_sched_fixture.py writes it)");
    if (!ok) return;
    delta_ctx *c = delta_ctx_new();
    int64_t xs[2] = {f.n, f.in}, ws[2] = {f.out, f.in}, bs[1] = {f.out};
    int64_t ys[1] = {f.n};
    delta_tensor *x = delta_input(c, "x", DELTA_F32, 2, xs);
    delta_tensor *y = delta_input(c, "y", DELTA_I32, 1, ys);
    delta_tensor *w = delta_param(c, "w", 2, ws, (delta_init){0});
    delta_tensor *b = delta_param(c, "b", 1, bs, (delta_init){0});
    delta_backward(c, delta_cross_entropy(c, delta_linear(c, x, w, b), y,
                                          -100));
    delta_tensor *lr = delta_input(c, "lr", DELTA_F32, 0, NULL);
    delta_optimizer_adamw_with(
        c, (delta_adamw_opts){(float)f.lr, 0.9f, 0.999f, 1e-8f, (float)f.wd},
        &(delta_optim_extras){lr, (float)f.clip});
    delta_tensor *norm = delta_ctx_find(c, "grad_norm");
    char err[256];
    delta_exec *ex = delta_exec_new(c, NULL, err, sizeof err);
    CHECK(ex && norm, "%s / %s", err, delta_ctx_error(c));
    if (ex && norm) {
        delta_exec_set(ex, x, f.x, delta_tensor_bytes(x));
        delta_exec_set(ex, y, f.y, delta_tensor_bytes(y));
        delta_exec_set(ex, w, f.w0, delta_tensor_bytes(w));
        delta_exec_set(ex, b, f.b0, delta_tensor_bytes(b));
        delta_lr_sched s = {DELTA_LR_COSINE, f.warmup, f.min_frac, f.steps};
        for (int i = 0; i < f.steps; i++) {
            *(float *)delta_exec_data(ex, lr) = delta_lr_sched_at(&s, f.lr, i);
            CHECK(delta_exec_run(ex, DELTA_RUN_STEP) == DELTA_OK);
            float got = *(float *)delta_exec_data(ex, norm);
            CHECK(close_to(got, f.norms[i]), "step %d: norm %.9g, torch %.9g",
                  i, got, f.norms[i]);
            /* clipping was on: torch's norm is above the limit */
            CHECK(f.norms[i] > f.clip);
        }
        const float *wg = delta_exec_data(ex, w), *bg = delta_exec_data(ex, b);
        int bad = 0;
        for (int i = 0; i < f.out * f.in; i++)
            if (!close_to(wg[i], f.w[i]) && bad++ < 5)
                fprintf(stderr, "  w[%d] %.9g, torch %.9g (from %.9g)\n", i,
                        wg[i], f.w[i], f.w0[i]);
        for (int i = 0; i < f.out; i++)
            if (!close_to(bg[i], f.b[i]) && bad++ < 5)
                fprintf(stderr, "  b[%d] %.9g, torch %.9g\n", i, bg[i], f.b[i]);
        CHECK(bad == 0, "%d weights differ from PyTorch's", bad);
    }
    delta_exec_free(ex);
    delta_ctx_free(c);
    free(f.x), free(f.w0), free(f.b0), free(f.w), free(f.b), free(f.norms);
    free(f.y);
}

/* ---- every policy through the trainer ----------------------------------- */

static delta_train_config cfg_of(bool gpt) {
    delta_train_config c = delta_train_config_default();
    if (gpt) {
        c.model = (delta_model_config){.name = "gpt2-tiny", .batch = 4,
                                       .layers = 2, .hidden = 32, .heads = 2,
                                       .seq_len = 32, .vocab = 64};
    } else {
        c.model = (delta_model_config){.name = "mlp", .batch = 512,
                                       .image_size = 8, .channels = 1,
                                       .classes = 10, .mlp_hidden = 256};
        c.eval_batches = 0;
    }
    c.data = "synthetic";
    c.seed = 3;
    c.lr_sched = (delta_lr_sched){DELTA_LR_COSINE, 2, 0.1, 6};
    c.grad_clip = gpt ? 0.5 : 0.2;
    return c;
}

typedef struct norms_seen {
    double lr[8], norm[8];
    int n;
} norms_seen;

static bool note(const delta_train_step *s, void *ud) {
    norms_seen *x = ud;
    if (x->n < 8) x->lr[x->n] = s->lr, x->norm[x->n] = s->grad_norm;
    x->n++;
    return true;
}

/* Trains 6 steps with policy (NULL: keep, no budget) at percent of the
 * peak; every persistent tensor into *bytes (malloc'd), its size *n. */
static bool train_with(bool gpt, const char *policy, double percent,
                       unsigned char **bytes, size_t *n, norms_seen *ns) {
    delta_train_config c = cfg_of(gpt);
    c.policy = policy;
    if (policy)
        c.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT,
                                  .percent = percent};
    delta_trainer *tr;
    char err[512];
    delta_status st = delta_trainer_new(&c, &tr, err, sizeof err);
    if (st != DELTA_OK) {
        fprintf(stderr, "  %s at %g%%: %s\n", policy, percent, err);
        return false;
    }
    st = delta_trainer_train(tr, 6, note, ns);
    if (st != DELTA_OK)
        fprintf(stderr, "  %s at %g%%: %s\n", policy ? policy : "keep",
                percent, delta_trainer_error(tr));
    int np;
    delta_tensor *const *p = delta_trainer_persistent(tr, &np);
    *n = 0;
    for (int i = 0; i < np; i++) *n += delta_tensor_bytes(p[i]);
    *bytes = malloc(*n);
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        delta_session_read(delta_trainer_session(tr), p[i], *bytes + off,
                           delta_tensor_bytes(p[i]));
        off += delta_tensor_bytes(p[i]);
    }
    delta_trainer_free(tr);
    return st == DELTA_OK;
}

static void policies_match_keep(bool gpt) {
    unsigned char *ref;
    size_t nref;
    norms_seen k = {0};
    if (!train_with(gpt, NULL, 0, &ref, &nref, &k)) {
        CHECK(false, "keep failed");
        return;
    }
    CHECK(k.n == 6 && k.norm[0] > 0 && isfinite(k.norm[5]));
    /* warmup from lr / 2, then the peak */
    CHECK(k.lr[1] > k.lr[0] && k.lr[2] == k.lr[1] && k.lr[5] < k.lr[2]);
    const char *pols[] = {"delta", "dtr", "swap", "checkpoint", "capuchin",
                          "autoswap", "keep"};
    for (size_t i = 0; i < sizeof pols / sizeof *pols; i++) {
        unsigned char *got = NULL;
        size_t n = 0;
        norms_seen s = {0};
        /* tight: the first of 50, 70, 85, 95% the policy fits (keep: 100%) */
        static const double pcts[] = {50, 70, 85, 95};
        bool keep = !strcmp(pols[i], "keep"), ok = false;
        double pct = 100;
        for (int j = 0; !ok && j < (keep ? 1 : 4); j++) {
            free(got);
            got = NULL;
            s = (norms_seen){0};
            pct = keep ? 100 : pcts[j];
            ok = train_with(gpt, pols[i], pct, &got, &n, &s);
        }
        CHECK(ok, "%s fits none of 50, 70, 85, 95%%", pols[i]);
        if (ok) printf("  %s: %s at %g%%\n", gpt ? "gpt2" : "mlp", pols[i],
                       pct);
        if (ok)
            CHECK(n == nref && !memcmp(got, ref, n) &&
                      !memcmp(s.norm, k.norm, sizeof k.norm),
                  "%s at %g%% differs from keep", pols[i], pct);
        free(got);
    }
    free(ref);
}

static void test_policies_match_keep_gpt2(void) { policies_match_keep(true); }
static void test_policies_match_keep_mlp(void) { policies_match_keep(false); }

/* c is refused as an invalid argument, the message naming option. */
static void check_refused(const delta_train_config *c, const char *option) {
    char err[512];
    delta_trainer *tr;
    CHECK(delta_trainer_new(c, &tr, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, option), "%s", err);
}

static void test_bad_settings(void) {
    delta_train_config c = cfg_of(false);
    c.lr_sched.warmup = -1;
    check_refused(&c, "--warmup");
    c = cfg_of(false);
    c.lr_sched.min_frac = 1.5;
    check_refused(&c, "--lr-min");
    c = cfg_of(false);
    c.grad_clip = -1;
    check_refused(&c, "--grad-clip");
    c = cfg_of(false);
    c.lr_sched.steps = 0;
    check_refused(&c, "--steps");
    /* the graph: a clip with ZeRO-1, an lr tensor that is no scalar */
    for (int k = 0; k < 2; k++) {
        delta_ctx *g = delta_ctx_new();
        int64_t xs[2] = {4, 3}, ws[2] = {2, 3}, ys[1] = {4};
        delta_tensor *x = delta_input(g, "x", DELTA_F32, 2, xs);
        delta_tensor *y = delta_input(g, "y", DELTA_I32, 1, ys);
        delta_tensor *w = delta_param(g, "w", 2, ws, (delta_init){0});
        delta_backward(g, delta_cross_entropy(g, delta_linear(g, x, w, NULL),
                                              y, -100));
        delta_optim_extras e = {NULL, 1.0f};
        if (k == 0)
            delta_data_parallel(g, &(delta_dp_opts){.ranks = 2, .zero = 1});
        else
            e.lr_tensor = x;
        delta_status st = delta_optimizer_adamw_with(
            g, (delta_adamw_opts){0.1f, 0.9f, 0.999f, 1e-8f, 0}, &e);
        CHECK(st == (k == 0 ? DELTA_ERR_UNSUPPORTED : DELTA_ERR_INVALID_ARG),
              "%s", delta_ctx_error(g));
        delta_ctx_free(g);
    }
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    TEST_RUN(test_schedule_values);
    TEST_RUN(test_lr_tensor_is_the_attribute);
    TEST_RUN(test_sumsq_threads);
    TEST_RUN(test_norm_of_many_gradients);
    TEST_RUN(test_matches_pytorch);
    TEST_RUN(test_policies_match_keep_mlp);
    TEST_RUN(test_policies_match_keep_gpt2);
    TEST_RUN(test_bad_settings);
    TEST_MAIN_END();
}
