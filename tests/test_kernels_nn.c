/* Tests for the CPU kernels of k_softmax.c and k_layout.c: softmax (causal,
 * key mask, fully masked rows) and its backward, cross entropy and its
 * backward, embedding and its backward, transpose, split and concat.
 * References are naive loops in double; backward kernels are also checked
 * against finite differences of their forward kernels. Every output buffer
 * starts filled with NaN bytes, so an element a kernel leaves unwritten
 * fails the comparison. Determinism: 1, 2 and 5 threads and fresh buffers
 * give the same bytes. */
#include "backend/cpu/kernels.h"
#include "graph/ops_impl.h"

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "test.h"

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* ---- helpers ------------------------------------------------------------ */

static const delta_kernel_env env = {42, 0, true, NULL};

/* A kernel call for op `op_id` of ctx with buffers of its own: inputs are
 * zeroed, outputs are filled with NaN bytes. */
typedef struct run {
    delta_kargs k;
    void *in[DELTA_MAX_OP_IN];
    void *out[DELTA_MAX_OP_OUT];
} run;

static void *alloc_buf(size_t bytes, int fill) {
    void *p = delta_alloc_aligned(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(p, fill, bytes ? bytes : 1);
    return p;
}

static void run_init(run *r, delta_ctx *ctx, int op_id) {
    memset(r, 0, sizeof *r);
    const delta_op *op = &ctx->ops[op_id];
    r->k.op = op;
    r->k.env = &env;
    for (int i = 0; i < op->n_in; i++) {
        const delta_tensor *t = ctx->tensors[op->in[i]];
        r->k.in_t[i] = t;
        r->in[i] = alloc_buf(t->bytes, 0);
        r->k.in[i] = r->in[i];
    }
    for (int i = 0; i < op->n_out; i++) {
        const delta_tensor *t = ctx->tensors[op->out[i]];
        r->k.out_t[i] = t;
        r->out[i] = alloc_buf(t->bytes, 0xff);
        r->k.out[i] = r->out[i];
    }
}

/* A second call of the same op on fresh buffers holding r's inputs. */
static void run_clone_inputs(run *dst, const run *src, delta_ctx *ctx) {
    run_init(dst, ctx, src->k.op->id);
    for (int i = 0; i < src->k.op->n_in; i++)
        memcpy(dst->in[i], src->in[i], src->k.in_t[i]->bytes);
}

static void run_free(run *r) {
    for (int i = 0; i < DELTA_MAX_OP_IN; i++) delta_free_aligned(r->in[i]);
    for (int i = 0; i < DELTA_MAX_OP_OUT; i++) delta_free_aligned(r->out[i]);
}

static bool outputs_equal(const run *a, const run *b) {
    for (int i = 0; i < a->k.op->n_out; i++)
        if (memcmp(a->out[i], b->out[i], a->k.out_t[i]->bytes) != 0)
            return false;
    return true;
}

static int last_op(const delta_ctx *ctx) { return ctx->n_ops - 1; }

static delta_tensor *input(delta_ctx *ctx, delta_dtype dt, int ndim,
                           const int64_t *shape) {
    return delta_input(ctx, NULL, dt, ndim, shape);
}

/* Appends a backward-only op with the given inputs and one output. */
static int append_bwd(delta_ctx *ctx, delta_op_type type,
                      const delta_tensor *const *ins, int n_in, int ndim,
                      const int64_t *shape, delta_op_attrs a) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    op->a = a;
    op->phase = DELTA_PHASE_BACKWARD;
    int id = op->id;
    delta_tensor *t = delta_op_add_output(ctx, op, DELTA_F32, ndim, shape);
    CHECK(t != NULL);
    return id;
}

static float *dup_f(const float *x, int64_t n) {
    float *y = alloc_buf((size_t)n * sizeof *y, 0);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

/* ---- softmax ------------------------------------------------------------ */

/* Double-precision reference of the softmax contract. */
static void softmax_ref(const float *x, const float *mask, float *y,
                        const int64_t *shape, int ndim, int64_t mask_b,
                        bool causal) {
    int64_t tk = shape[ndim - 1], tq = ndim >= 2 ? shape[ndim - 2] : 1;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    int64_t rows = numel / tk;
    for (int64_t r = 0; r < rows; r++) {
        int64_t q = r % tq, b = mask ? r / (rows / mask_b) : 0;
        double m = -INFINITY;
        bool any = false;
        for (int64_t k = 0; k < tk; k++) {
            bool keep = (!causal || k <= q + (tk - tq)) &&
                        (!mask || mask[b * tk + k] != 0.0f);
            if (keep) {
                any = true;
                if (x[r * tk + k] > m) m = x[r * tk + k];
            }
        }
        double s = 0;
        for (int64_t k = 0; k < tk; k++) {
            bool keep = any && (!causal || k <= q + (tk - tq)) &&
                        (!mask || mask[b * tk + k] != 0.0f);
            if (keep) s += exp((double)x[r * tk + k] - m);
        }
        for (int64_t k = 0; k < tk; k++) {
            bool keep = any && (!causal || k <= q + (tk - tq)) &&
                        (!mask || mask[b * tk + k] != 0.0f);
            y[r * tk + k] =
                keep ? (float)(exp((double)x[r * tk + k] - m) / s) : 0.0f;
        }
    }
}

/* Runs softmax on x of shape (ndim dims) with the given masks and compares
 * it with the reference; masked entries must be exactly 0. mask_mode: 0 no
 * key mask, 1 random mask, 2 random mask with batch entry 0 fully masked,
 * 3 a mask whose key 0 is masked in every batch entry. */
static void check_softmax(int ndim, const int64_t *shape, bool causal,
                          int mask_mode, const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *x = input(ctx, DELTA_F32, ndim, shape);
    delta_tensor *mask = NULL;
    int64_t bsz = shape[0], tk = shape[ndim - 1];
    if (mask_mode) {
        int64_t ms[2] = {bsz, tk};
        mask = input(ctx, DELTA_F32, 2, ms);
    }
    delta_tensor *y = delta_softmax(ctx, x, causal, mask);
    CHECK(y != NULL, "%s: %s", what, delta_ctx_error(ctx));
    if (!y) {
        delta_ctx_free(ctx);
        return;
    }
    run r;
    run_init(&r, ctx, last_op(ctx));
    float *xd = r.in[0];
    test_fill_rand(xd, x->numel, -6.0f, 6.0f);
    float *md = mask ? r.in[1] : NULL;
    if (md) {
        for (int64_t i = 0; i < bsz * tk; i++)
            md[i] = (test_rng_u32() % 3 == 0) ? 0.0f : 1.0f;
        if (mask_mode == 2)
            for (int64_t i = 0; i < tk; i++) md[i] = 0.0f;
        if (mask_mode == 3)
            for (int64_t b = 0; b < bsz; b++) md[b * tk] = 0.0f;
        if (mask_mode >= 1) md[bsz * tk - 1] = 0.5f; /* nonzero keeps */
    }
    delta_k_softmax(&r.k);
    float *ref = alloc_buf(y->bytes, 0);
    softmax_ref(xd, md, ref, shape, ndim, bsz, causal);
    test_allclose(what, r.out[0], ref, (long)y->numel, 1e-7, 2e-6);
    /* masked entries and fully masked rows: exactly 0 */
    const float *yd = r.out[0];
    long zeros_bad = 0, fully = 0;
    for (int64_t i = 0; i < y->numel; i++)
        if (ref[i] == 0.0f && yd[i] != 0.0f) zeros_bad++;
    for (int64_t rr = 0; rr < y->numel / tk; rr++) {
        double s = 0;
        for (int64_t k = 0; k < tk; k++) s += yd[rr * tk + k];
        bool all0 = true;
        for (int64_t k = 0; k < tk; k++) all0 = all0 && ref[rr * tk + k] == 0;
        if (all0) fully++;
        else CHECK(fabs(s - 1.0) < 1e-5, "%s: row %lld sums to %g", what,
                   (long long)rr, s);
    }
    CHECK(zeros_bad == 0, "%s: %ld masked entries not exactly 0", what,
          zeros_bad);
    if (mask_mode >= 2 || (causal && mask_mode == 3 && tk == shape[ndim - 2]))
        CHECK(fully > 0, "%s: expected fully masked rows", what);
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_softmax_plain(void) {
    int64_t s1[1] = {13};
    check_softmax(1, s1, false, 0, "softmax 1-D");
    int64_t s4[4] = {2, 3, 5, 7};
    check_softmax(4, s4, false, 0, "softmax 4-D");
    int64_t sv[2] = {4, 1000};
    check_softmax(2, sv, false, 0, "softmax wide rows");
}

static void test_softmax_causal(void) {
    int64_t sq[4] = {2, 2, 6, 6};
    check_softmax(4, sq, true, 0, "softmax causal Tq == Tk");
    int64_t sr[4] = {2, 2, 3, 7};
    check_softmax(4, sr, true, 0, "softmax causal Tq < Tk");
    int64_t s1[2] = {1, 1};
    check_softmax(2, s1, true, 0, "softmax causal 1x1");
}

static void test_softmax_key_mask(void) {
    int64_t s[4] = {3, 2, 4, 6};
    check_softmax(4, s, false, 1, "softmax key mask");
    check_softmax(4, s, false, 2, "softmax key mask, batch 0 all masked");
    int64_t s3[3] = {4, 5, 9};
    check_softmax(3, s3, false, 1, "softmax key mask 3-D");
}

static void test_softmax_causal_and_mask(void) {
    int64_t sq[4] = {3, 2, 6, 6};
    check_softmax(4, sq, true, 1, "softmax causal + mask");
    /* key 0 masked: with Tq == Tk, query 0 keeps nothing */
    check_softmax(4, sq, true, 3, "softmax causal + mask, row 0 empty");
    int64_t sr[4] = {2, 3, 4, 9};
    check_softmax(4, sr, true, 2, "softmax causal Tq < Tk + mask");
}

/* Every entry masked, and rows whose kept entries are all -inf: all 0. */
static void test_softmax_all_masked(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[3] = {2, 3, 5}, ms[2] = {2, 5};
    delta_tensor *x = input(ctx, DELTA_F32, 3, s);
    delta_tensor *m = input(ctx, DELTA_F32, 2, ms);
    delta_softmax(ctx, x, false, m);
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], 30, -1, 1); /* mask stays 0 */
    delta_k_softmax(&r.k);
    const float *y = r.out[0];
    for (int i = 0; i < 30; i++) CHECK(y[i] == 0.0f, "y[%d] = %g", i, y[i]);
    run_free(&r);
    delta_softmax(ctx, x, false, NULL);
    run_init(&r, ctx, last_op(ctx));
    float *xd = r.in[0];
    for (int i = 0; i < 30; i++) xd[i] = i < 5 ? -INFINITY : (float)i;
    delta_k_softmax(&r.k);
    y = r.out[0];
    for (int i = 0; i < 5; i++) CHECK(y[i] == 0.0f, "y[%d] = %g", i, y[i]);
    CHECK(fabsf(y[5] + y[6] + y[7] + y[8] + y[9] - 1.0f) < 1e-6f);
    run_free(&r);
    delta_ctx_free(ctx);
}

/* Large inputs do not overflow (max subtraction). */
static void test_softmax_stable(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[2] = {2, 4};
    delta_tensor *x = input(ctx, DELTA_F32, 2, s);
    delta_softmax(ctx, x, false, NULL);
    run r;
    run_init(&r, ctx, last_op(ctx));
    float xv[8] = {1000, 1001, 1002, 1003, -1000, -1001, -1002, -1003};
    memcpy(r.in[0], xv, sizeof xv);
    delta_k_softmax(&r.k);
    float ref[8];
    double e[4] = {exp(-3.0), exp(-2.0), exp(-1.0), 1.0}, s4 = 0;
    for (int i = 0; i < 4; i++) s4 += e[i];
    for (int i = 0; i < 4; i++) {
        ref[i] = (float)(e[i] / s4);
        ref[4 + i] = (float)(e[3 - i] / s4);
    }
    test_allclose("softmax stable", r.out[0], ref, 8, 1e-7, 1e-6);
    run_free(&r);
    delta_ctx_free(ctx);
}

/* Builds softmax (op f) and softmax_bwd (op b) for x of the given shape. */
static void softmax_pair(delta_ctx *ctx, int ndim, const int64_t *shape,
                         bool causal, bool with_mask, int *f, int *b) {
    delta_tensor *x = input(ctx, DELTA_F32, ndim, shape);
    delta_tensor *mask = NULL;
    if (with_mask) {
        int64_t ms[2] = {shape[0], shape[ndim - 1]};
        mask = input(ctx, DELTA_F32, 2, ms);
    }
    delta_tensor *y = delta_softmax(ctx, x, causal, mask);
    *f = last_op(ctx);
    delta_tensor *dy = input(ctx, DELTA_F32, ndim, shape);
    const delta_tensor *ins[2] = {y, dy};
    *b = append_bwd(ctx, DELTA_OP_SOFTMAX_BWD, ins, 2, ndim, shape,
                    delta_attrs0());
}

static void check_softmax_bwd(int ndim, const int64_t *shape, bool causal,
                              bool with_mask, const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int fi, bi;
    softmax_pair(ctx, ndim, shape, causal, with_mask, &fi, &bi);
    run f, b;
    run_init(&f, ctx, fi);
    run_init(&b, ctx, bi);
    int64_t n = ctx->tensors[ctx->ops[fi].in[0]]->numel;
    int64_t tk = shape[ndim - 1];
    float *x = f.in[0];
    test_fill_rand(x, n, -3, 3);
    if (with_mask) {
        float *m = f.in[1];
        for (int64_t i = 0; i < shape[0] * tk; i++)
            m[i] = test_rng_u32() % 4 == 0 ? 0.0f : 1.0f;
    }
    float *w = b.in[1]; /* dy = weights of L = sum(w * y) */
    test_fill_rand(w, n, -1, 1);
    delta_k_softmax(&f.k);
    memcpy(b.in[0], f.out[0], (size_t)n * sizeof(float));
    delta_k_softmax_bwd(&b.k);
    const float *dx = b.out[0], *y = f.out[0];

    /* analytic reference in double */
    float *ref = alloc_buf((size_t)n * sizeof(float), 0);
    for (int64_t r = 0; r < n / tk; r++) {
        double s = 0;
        for (int64_t k = 0; k < tk; k++)
            s += (double)y[r * tk + k] * w[r * tk + k];
        for (int64_t k = 0; k < tk; k++)
            ref[r * tk + k] =
                (float)((double)y[r * tk + k] * ((double)w[r * tk + k] - s));
    }
    test_allclose(what, dx, ref, (long)n, 1e-6, 1e-5);

    /* finite differences of the forward kernel: dL/dx_i */
    float *fd = alloc_buf((size_t)n * sizeof(float), 0);
    float *x0 = dup_f(x, n);
    const double h = 1e-2;
    for (int64_t i = 0; i < n; i++) {
        double l[2];
        float xs[2] = {(float)((double)x0[i] + h), (float)((double)x0[i] - h)};
        for (int sgn = 0; sgn < 2; sgn++) {
            memcpy(x, x0, (size_t)n * sizeof(float));
            x[i] = xs[sgn];
            delta_k_softmax(&f.k);
            const float *yy = f.out[0];
            double acc = 0;
            for (int64_t j = 0; j < n; j++) acc += (double)w[j] * yy[j];
            l[sgn] = acc;
        }
        fd[i] = (float)((l[0] - l[1]) / ((double)xs[0] - (double)xs[1]));
    }
    char w2[160];
    snprintf(w2, sizeof w2, "%s (finite differences)", what);
    test_allclose(w2, dx, fd, (long)n, 2e-4, 2e-3);
    delta_free_aligned(x0);
    delta_free_aligned(fd);
    delta_free_aligned(ref);
    run_free(&f);
    run_free(&b);
    delta_ctx_free(ctx);
}

static void test_softmax_bwd(void) {
    int64_t s[3] = {2, 3, 5};
    check_softmax_bwd(3, s, false, false, "softmax_bwd");
    int64_t sc[4] = {2, 2, 4, 4};
    check_softmax_bwd(4, sc, true, false, "softmax_bwd causal");
    int64_t sm[4] = {2, 1, 3, 6};
    check_softmax_bwd(4, sm, true, true, "softmax_bwd causal + mask");
}

/* ---- cross entropy ------------------------------------------------------ */

static bool ce_counted_ref(int32_t t, int64_t v, int ignore) {
    return t != ignore && t >= 0 && t < v;
}

static double ce_ref(const float *lg, const int32_t *tg, int64_t n, int64_t v,
                     int ignore) {
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) {
        if (!ce_counted_ref(tg[r], v, ignore)) continue;
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < v; i++)
            if (lg[r * v + i] > m) m = lg[r * v + i];
        for (int64_t i = 0; i < v; i++) s += exp((double)lg[r * v + i] - m);
        total += m + log(s) - lg[r * v + tg[r]];
        count++;
    }
    return count ? total / (double)count : 0.0;
}

/* Builds cross_entropy (op f) and cross_entropy_bwd (op b). */
static void ce_pair(delta_ctx *ctx, int64_t n, int64_t v, int ignore, int *f,
                    int *b) {
    int64_t ls[2] = {n, v}, ts[1] = {n};
    delta_tensor *lg = input(ctx, DELTA_F32, 2, ls);
    delta_tensor *tg = input(ctx, DELTA_I32, 1, ts);
    delta_tensor *loss = delta_cross_entropy(ctx, lg, tg, ignore);
    CHECK(loss != NULL, "%s", delta_ctx_error(ctx));
    *f = last_op(ctx);
    delta_tensor *dl = input(ctx, DELTA_F32, 0, NULL);
    const delta_tensor *ins[3] = {lg, tg, dl};
    delta_op_attrs a = delta_attrs0();
    a.ignore_index = ignore;
    *b = append_bwd(ctx, DELTA_OP_CROSS_ENTROPY_BWD, ins, 3, 2, ls, a);
}

/* Targets: mostly valid, with ignore_index rows and out-of-range ones. */
static void fill_targets(int32_t *t, int64_t n, int64_t v, int ignore) {
    for (int64_t r = 0; r < n; r++) {
        uint32_t u = test_rng_u32() % 10;
        t[r] = u == 0   ? ignore
               : u == 1 ? (int32_t)v
               : u == 2 ? -5
               : u == 3 ? 1000000
                        : (int32_t)(test_rng_u32() % (uint32_t)v);
    }
}

static void check_ce(int64_t n, int64_t v, int ignore, const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int fi, bi;
    ce_pair(ctx, n, v, ignore, &fi, &bi);
    run f;
    run_init(&f, ctx, fi);
    test_fill_rand(f.in[0], n * v, -4, 4);
    fill_targets(f.in[1], n, v, ignore);
    delta_k_cross_entropy(&f.k);
    float ref = (float)ce_ref(f.in[0], f.in[1], n, v, ignore);
    test_allclose(what, f.out[0], &ref, 1, 1e-6, 1e-6);
    run_free(&f);
    delta_ctx_free(ctx);
}

static void test_cross_entropy(void) {
    check_ce(1, 5, -100, "ce 1 row");
    check_ce(37, 11, -100, "ce 37 rows");
    check_ce(1000, 50, -100, "ce 1000 rows");
    check_ce(300, 7, 3, "ce ignore_index inside [0, V)");
    /* no counted row: 0 */
    delta_ctx *ctx = delta_ctx_new();
    int fi, bi;
    ce_pair(ctx, 4, 3, -100, &fi, &bi);
    run f;
    run_init(&f, ctx, fi);
    int32_t t[4] = {-100, 3, -1, -100};
    memcpy(f.in[1], t, sizeof t);
    test_fill_rand(f.in[0], 12, -1, 1);
    delta_k_cross_entropy(&f.k);
    CHECK(*(float *)f.out[0] == 0.0f, "loss %g", *(float *)f.out[0]);
    run b;
    run_init(&b, ctx, bi);
    memcpy(b.in[0], f.in[0], 12 * sizeof(float));
    memcpy(b.in[1], t, sizeof t);
    *(float *)b.in[2] = 1.0f;
    delta_k_cross_entropy_bwd(&b.k);
    const float *d = b.out[0];
    for (int i = 0; i < 12; i++) CHECK(d[i] == 0.0f, "d[%d] = %g", i, d[i]);
    run_free(&f);
    run_free(&b);
    delta_ctx_free(ctx);
}

static void check_ce_bwd(int64_t n, int64_t v, int ignore, float dloss,
                         const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int fi, bi;
    ce_pair(ctx, n, v, ignore, &fi, &bi);
    run f, b;
    run_init(&f, ctx, fi);
    run_init(&b, ctx, bi);
    float *lg = f.in[0];
    int32_t *tg = f.in[1];
    test_fill_rand(lg, n * v, -3, 3);
    fill_targets(tg, n, v, ignore);
    memcpy(b.in[0], lg, (size_t)(n * v) * sizeof(float));
    memcpy(b.in[1], tg, (size_t)n * sizeof(int32_t));
    *(float *)b.in[2] = dloss;
    delta_k_cross_entropy_bwd(&b.k);
    const float *d = b.out[0];

    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) count += ce_counted_ref(tg[r], v, ignore);
    float *ref = alloc_buf((size_t)(n * v) * sizeof(float), 0);
    for (int64_t r = 0; r < n; r++) {
        const float *x = lg + r * v;
        if (!ce_counted_ref(tg[r], v, ignore)) {
            for (int64_t i = 0; i < v; i++) {
                ref[r * v + i] = 0;
                CHECK(d[r * v + i] == 0.0f, "%s: ignored row %lld not 0",
                      what, (long long)r);
            }
            continue;
        }
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < v; i++)
            if (x[i] > m) m = x[i];
        for (int64_t i = 0; i < v; i++) s += exp((double)x[i] - m);
        for (int64_t i = 0; i < v; i++)
            ref[r * v + i] = (float)((exp((double)x[i] - m) / s -
                                      (i == tg[r] ? 1.0 : 0.0)) *
                                     dloss / (double)count);
    }
    test_allclose(what, d, ref, (long)(n * v), 1e-7, 1e-5);

    /* finite differences of dloss * loss(logits) with the forward kernel */
    float *fd = alloc_buf((size_t)(n * v) * sizeof(float), 0);
    float *x0 = dup_f(lg, n * v);
    const double h = 1e-2;
    for (int64_t i = 0; i < n * v; i++) {
        double l[2];
        float xs[2] = {(float)((double)x0[i] + h), (float)((double)x0[i] - h)};
        for (int sgn = 0; sgn < 2; sgn++) {
            memcpy(lg, x0, (size_t)(n * v) * sizeof(float));
            lg[i] = xs[sgn];
            delta_k_cross_entropy(&f.k);
            l[sgn] = (double)*(float *)f.out[0];
        }
        fd[i] = (float)(dloss * (l[0] - l[1]) /
                        ((double)xs[0] - (double)xs[1]));
    }
    char w2[160];
    snprintf(w2, sizeof w2, "%s (finite differences)", what);
    test_allclose(w2, d, fd, (long)(n * v), 3e-5 * fabs(dloss), 2e-2);
    delta_free_aligned(x0);
    delta_free_aligned(fd);
    delta_free_aligned(ref);
    run_free(&f);
    run_free(&b);
    delta_ctx_free(ctx);
}

static void test_cross_entropy_bwd(void) {
    check_ce_bwd(9, 6, -100, 1.0f, "ce_bwd");
    check_ce_bwd(20, 5, -100, 2.5f, "ce_bwd dloss 2.5");
    check_ce_bwd(12, 4, 1, 0.5f, "ce_bwd ignore_index 1");
}

/* ---- embedding ---------------------------------------------------------- */

static void test_embedding(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t is[2] = {3, 5}, ts[2] = {7, 13};
    delta_tensor *ids = input(ctx, DELTA_I32, 2, is);
    delta_tensor *tab = input(ctx, DELTA_F32, 2, ts);
    delta_tensor *y = delta_embedding(ctx, ids, tab);
    CHECK(y && y->ndim == 3 && y->shape[2] == 13);
    run r;
    run_init(&r, ctx, last_op(ctx));
    int32_t iv[15] = {0, 6, 3, -1, 7, 2, 2, 1000, 5, 4, INT32_MIN, 1, 0, 6,
                      INT32_MAX};
    memcpy(r.in[0], iv, sizeof iv);
    float *tb = r.in[1];
    test_fill_rand(tb, 7 * 13, -1, 1);
    delta_k_embedding(&r.k);
    const float *yd = r.out[0];
    for (int i = 0; i < 15; i++) {
        bool in = iv[i] >= 0 && iv[i] < 7;
        for (int c = 0; c < 13; c++) {
            float e = in ? tb[iv[i] * 13 + c] : 0.0f;
            CHECK(memcmp(&yd[i * 13 + c], &e, 4) == 0, "token %d col %d", i,
                  c);
        }
    }
    run_free(&r);
    delta_ctx_free(ctx);
}

static int emb_bwd_op(delta_ctx *ctx, int64_t n, int64_t v, int64_t d) {
    int64_t is[1] = {n}, ds[2] = {n, d}, ts[2] = {v, d};
    delta_tensor *ids = input(ctx, DELTA_I32, 1, is);
    delta_tensor *dy = input(ctx, DELTA_F32, 2, ds);
    const delta_tensor *ins[2] = {ids, dy};
    return append_bwd(ctx, DELTA_OP_EMBEDDING_BWD, ins, 2, 2, ts,
                      delta_attrs0());
}

static void fill_ids(int32_t *ids, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = test_rng_u32() % 16;
        ids[i] = u == 0 ? -3 : u == 1 ? (int32_t)v
                                      : (int32_t)(test_rng_u32() % (uint32_t)v);
    }
}

static void test_embedding_bwd(void) {
    const int64_t n = 200, v = 9, d = 100; /* many repeats; d not 16k */
    delta_ctx *ctx = delta_ctx_new();
    int op = emb_bwd_op(ctx, n, v, d);
    run r;
    run_init(&r, ctx, op);
    int32_t *ids = r.in[0];
    float *dy = r.in[1];
    fill_ids(ids, n, v);
    test_fill_rand(dy, n * d, -1, 1);
    delta_k_embedding_bwd(&r.k);
    /* same order of float additions: bit-identical */
    float *ref = alloc_buf((size_t)(v * d) * sizeof(float), 0);
    for (int64_t i = 0; i < v * d; i++) ref[i] = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v) continue;
        for (int64_t c = 0; c < d; c++) ref[ids[i] * d + c] += dy[i * d + c];
    }
    CHECK(memcmp(ref, r.out[0], (size_t)(v * d) * sizeof(float)) == 0,
          "embedding_bwd differs from the token-order sum");
    /* and close to a double sum */
    for (int64_t row = 0; row < v; row++)
        for (int64_t c = 0; c < d; c++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++)
                if (ids[i] == row) s += dy[i * d + c];
            ref[row * d + c] = (float)s;
        }
    test_allclose("embedding_bwd", r.out[0], ref, (long)(v * d), 1e-5, 1e-5);
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

/* ---- transpose ---------------------------------------------------------- */

/* Index-computing reference: y[.. i1 .. i0 ..] = x[.. i0 .. i1 ..]. */
static void transpose_ref(const uint32_t *x, uint32_t *y, int ndim,
                          const int64_t *shape, int d0, int d1) {
    int64_t numel = 1, ys[DELTA_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        numel *= shape[i];
        ys[i] = shape[i];
    }
    ys[d0] = shape[d1];
    ys[d1] = shape[d0];
    for (int64_t li = 0; li < numel; li++) {
        int64_t idx[DELTA_MAX_DIMS], t = li;
        for (int i = ndim - 1; i >= 0; i--) {
            idx[i] = t % shape[i];
            t /= shape[i];
        }
        int64_t tmp = idx[d0];
        idx[d0] = idx[d1];
        idx[d1] = tmp;
        int64_t lo = 0;
        for (int i = 0; i < ndim; i++) lo = lo * ys[i] + idx[i];
        y[lo] = x[li];
    }
}

static void check_transpose(int ndim, const int64_t *shape, int d0, int d1,
                            delta_dtype dt) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *x = input(ctx, dt, ndim, shape);
    delta_tensor *y = delta_transpose(ctx, x, d0, d1);
    CHECK(y != NULL, "%s", delta_ctx_error(ctx));
    if (!y) {
        delta_ctx_free(ctx);
        return;
    }
    run r;
    run_init(&r, ctx, last_op(ctx));
    uint32_t *xd = r.in[0];
    for (int64_t i = 0; i < x->numel; i++)
        xd[i] = dt == DELTA_I32 ? (uint32_t)i : test_rng_u32();
    delta_k_transpose(&r.k);
    uint32_t *ref = alloc_buf(y->bytes, 0);
    int a0 = d0 < 0 ? d0 + ndim : d0, a1 = d1 < 0 ? d1 + ndim : d1;
    transpose_ref(xd, ref, ndim, shape, a0 < a1 ? a0 : a1, a0 < a1 ? a1 : a0);
    char sh[96];
    delta_shape_str(x, sh, sizeof sh);
    CHECK(memcmp(ref, r.out[0], y->bytes) == 0,
          "transpose %s dims %d,%d (%s) differs", sh, d0, d1,
          delta_dtype_name(dt));
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_transpose(void) {
    int64_t s2[2] = {37, 45};
    check_transpose(2, s2, 0, 1, DELTA_F32);
    check_transpose(2, s2, 1, 0, DELTA_I32);
    int64_t s3[3] = {3, 33, 70};
    check_transpose(3, s3, 0, 1, DELTA_F32);
    check_transpose(3, s3, 0, 2, DELTA_F32);
    check_transpose(3, s3, 1, 2, DELTA_I32);
    int64_t s4[4] = {2, 9, 4, 8}; /* [B, T, H, D] -> [B, H, T, D] */
    check_transpose(4, s4, 1, 2, DELTA_F32);
    check_transpose(4, s4, 2, 1, DELTA_I32);
    check_transpose(4, s4, 0, 3, DELTA_F32);
    check_transpose(4, s4, 2, 3, DELTA_F32);
    check_transpose(4, s4, 0, 2, DELTA_F32);
    int64_t s6[6] = {2, 3, 1, 4, 5, 3};
    for (int a = 0; a < 6; a++)
        for (int b = a + 1; b < 6; b++) {
            check_transpose(6, s6, a, b, DELTA_F32);
            check_transpose(6, s6, a, b, DELTA_I32);
        }
    int64_t s5[5] = {2, 1, 3, 1, 2};
    check_transpose(5, s5, 1, 3, DELTA_F32);
    int64_t sz[3] = {2, 0, 3};
    check_transpose(3, sz, 0, 2, DELTA_F32);
    int64_t sb[4] = {4, 64, 12, 32};
    check_transpose(4, sb, 1, 2, DELTA_F32);
    check_transpose(4, sb, -2, -1, DELTA_F32);
}

/* ---- split / concat ----------------------------------------------------- */

/* Splits x into n parts along dim, checks each part against indices, then
 * concatenates them back and compares with x byte for byte. */
static void check_split_concat(int ndim, const int64_t *shape, int dim, int n,
                               delta_dtype dt) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *x = input(ctx, dt, ndim, shape);
    delta_tensor *parts[DELTA_MAX_OP_OUT];
    delta_status st = delta_split(ctx, x, dim, n, parts);
    CHECK(st == DELTA_OK, "%s", delta_ctx_error(ctx));
    if (st != DELTA_OK) {
        delta_ctx_free(ctx);
        return;
    }
    int split_op = last_op(ctx);
    delta_tensor *y = delta_concat(ctx, parts, n, dim);
    CHECK(y != NULL, "%s", delta_ctx_error(ctx));
    int cat_op = last_op(ctx);
    run s, c;
    run_init(&s, ctx, split_op);
    run_init(&c, ctx, cat_op);
    uint32_t *xd = s.in[0];
    for (int64_t i = 0; i < x->numel; i++) xd[i] = (uint32_t)i * 2654435761u;
    delta_k_split(&s.k);
    int d = dim < 0 ? dim + ndim : dim;
    int64_t outer = 1, inner = 1, len = shape[d] / n;
    for (int i = 0; i < d; i++) outer *= shape[i];
    for (int i = d + 1; i < ndim; i++) inner *= shape[i];
    long bad = 0;
    for (int p = 0; p < n; p++) {
        const uint32_t *pd = s.out[p];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < len; j++)
                for (int64_t in = 0; in < inner; in++)
                    if (pd[(o * len + j) * inner + in] !=
                        xd[(o * shape[d] + p * len + j) * inner + in])
                        bad++;
    }
    CHECK(bad == 0, "split dim %d into %d: %ld elements differ", dim, n, bad);
    for (int p = 0; p < n; p++)
        memcpy(c.in[p], s.out[p], parts[p]->bytes);
    delta_k_concat(&c.k);
    CHECK(memcmp(c.out[0], xd, x->bytes) == 0,
          "concat(split(x)) != x, dim %d, %d parts", dim, n);
    run_free(&s);
    run_free(&c);
    delta_ctx_free(ctx);
}

static void test_split_concat(void) {
    int64_t s3[3] = {4, 6, 10};
    for (int d = 0; d < 3; d++) {
        check_split_concat(3, s3, d, 2, DELTA_F32);
        check_split_concat(3, s3, d, 1, DELTA_I32);
    }
    check_split_concat(3, s3, 1, 3, DELTA_I32);
    check_split_concat(3, s3, -1, 2, DELTA_F32);
    int64_t s4[4] = {2, 3, 4, 8};
    check_split_concat(4, s4, 3, 4, DELTA_F32);
    /* large contiguous parts: copies cut into pieces */
    int64_t sl[2] = {8, 40000};
    check_split_concat(2, sl, 0, 2, DELTA_F32);
    check_split_concat(2, sl, 1, 4, DELTA_F32);
}

/* Concat of parts with different sizes along dim. */
static void test_concat_unequal(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t a[3] = {2, 3, 4}, b[3] = {2, 5, 4}, c[3] = {2, 1, 4};
    delta_tensor *xs[3] = {input(ctx, DELTA_F32, 3, a),
                           input(ctx, DELTA_F32, 3, b),
                           input(ctx, DELTA_F32, 3, c)};
    delta_tensor *y = delta_concat(ctx, xs, 3, 1);
    CHECK(y && y->shape[1] == 9);
    run r;
    run_init(&r, ctx, last_op(ctx));
    for (int i = 0; i < 3; i++) {
        float *p = r.in[i];
        for (int64_t j = 0; j < xs[i]->numel; j++)
            p[j] = (float)(1000 * i + j);
    }
    delta_k_concat(&r.k);
    const float *yd = r.out[0];
    const int64_t lens[3] = {3, 5, 1}, offs[3] = {0, 3, 8};
    long bad = 0;
    for (int i = 0; i < 3; i++)
        for (int64_t o = 0; o < 2; o++)
            for (int64_t j = 0; j < lens[i]; j++)
                for (int64_t k = 0; k < 4; k++)
                    if (yd[(o * 9 + offs[i] + j) * 4 + k] !=
                        (float)(1000 * i + (o * lens[i] + j) * 4 + k))
                        bad++;
    CHECK(bad == 0, "%ld elements differ", bad);
    run_free(&r);
    delta_ctx_free(ctx);
}

/* ---- determinism -------------------------------------------------------- */

/* Runs r's kernel with 1 thread, then with 2 and 5 threads on fresh buffers
 * holding the same inputs, and compares the output bytes. */
static void check_deterministic(run *r, delta_ctx *ctx, delta_kernel_fn fn,
                                const char *what) {
    set_threads(1);
    fn(&r->k);
    const int threads[2] = {2, 5};
    for (int t = 0; t < 2; t++) {
        void *pad = delta_alloc_aligned(64 * (size_t)(t + 1)); /* shift */
        run o;
        run_clone_inputs(&o, r, ctx);
        set_threads(threads[t]);
        fn(&o.k);
        CHECK(outputs_equal(r, &o), "%s: %d threads differ from 1", what,
              threads[t]);
        run_free(&o);
        delta_free_aligned(pad);
    }
    set_threads(2);
}

static void test_determinism(void) {
    delta_ctx *ctx = delta_ctx_new();
    /* softmax with causal and key mask, and its backward */
    int fi, bi;
    int64_t ss[4] = {4, 3, 33, 40};
    softmax_pair(ctx, 4, ss, true, true, &fi, &bi);
    run f, b;
    run_init(&f, ctx, fi);
    int64_t n = 4 * 3 * 33 * 40;
    test_fill_rand(f.in[0], n, -5, 5);
    float *m = f.in[1];
    for (int i = 0; i < 4 * 40; i++) m[i] = test_rng_u32() % 5 ? 1.0f : 0.0f;
    check_deterministic(&f, ctx, delta_k_softmax, "softmax");
    run_init(&b, ctx, bi);
    memcpy(b.in[0], f.out[0], (size_t)n * 4);
    test_fill_rand(b.in[1], n, -1, 1);
    check_deterministic(&b, ctx, delta_k_softmax_bwd, "softmax_bwd");
    run_free(&f);
    run_free(&b);

    /* cross entropy and its backward */
    const int64_t cn = 777, cv = 301;
    ce_pair(ctx, cn, cv, -100, &fi, &bi);
    run_init(&f, ctx, fi);
    test_fill_rand(f.in[0], cn * cv, -8, 8);
    fill_targets(f.in[1], cn, cv, -100);
    check_deterministic(&f, ctx, delta_k_cross_entropy, "cross_entropy");
    run_init(&b, ctx, bi);
    memcpy(b.in[0], f.in[0], (size_t)(cn * cv) * 4);
    memcpy(b.in[1], f.in[1], (size_t)cn * 4);
    *(float *)b.in[2] = 1.25f;
    check_deterministic(&b, ctx, delta_k_cross_entropy_bwd,
                        "cross_entropy_bwd");
    run_free(&f);
    run_free(&b);

    /* embedding backward: block width follows the thread count */
    int eo = emb_bwd_op(ctx, 500, 37, 200);
    run e;
    run_init(&e, ctx, eo);
    fill_ids(e.in[0], 500, 37);
    test_fill_rand(e.in[1], 500 * 200, -1, 1);
    check_deterministic(&e, ctx, delta_k_embedding_bwd, "embedding_bwd");
    run_free(&e);

    /* embedding, transpose, split, concat */
    int64_t is[2] = {8, 30}, ts[2] = {50, 48};
    delta_tensor *ids = input(ctx, DELTA_I32, 2, is);
    delta_tensor *tab = input(ctx, DELTA_F32, 2, ts);
    delta_embedding(ctx, ids, tab);
    run_init(&e, ctx, last_op(ctx));
    fill_ids(e.in[0], 240, 50);
    test_fill_rand(e.in[1], 50 * 48, -1, 1);
    check_deterministic(&e, ctx, delta_k_embedding, "embedding");
    run_free(&e);

    int64_t xs[4] = {3, 17, 5, 24};
    delta_tensor *x = input(ctx, DELTA_F32, 4, xs);
    delta_transpose(ctx, x, 1, 2);
    run_init(&e, ctx, last_op(ctx));
    test_fill_rand(e.in[0], x->numel, -1, 1);
    check_deterministic(&e, ctx, delta_k_transpose, "transpose");
    run_free(&e);
    delta_transpose(ctx, x, 2, 3);
    run_init(&e, ctx, last_op(ctx));
    test_fill_rand(e.in[0], x->numel, -1, 1);
    check_deterministic(&e, ctx, delta_k_transpose, "transpose last dims");
    run_free(&e);

    delta_tensor *parts[3];
    CHECK(delta_split(ctx, x, 3, 3, parts) == DELTA_OK);
    run_init(&e, ctx, last_op(ctx));
    test_fill_rand(e.in[0], x->numel, -1, 1);
    check_deterministic(&e, ctx, delta_k_split, "split");
    run_free(&e);
    delta_concat(ctx, parts, 3, 1);
    run_init(&e, ctx, last_op(ctx));
    for (int i = 0; i < 3; i++) test_fill_rand(e.in[i], parts[i]->numel, -1, 1);
    check_deterministic(&e, ctx, delta_k_concat, "concat");
    run_free(&e);
    delta_ctx_free(ctx);
}

int main(void) {
    test_rng_seed(0x9e3779b97f4a7c15ull);
    TEST_RUN(test_softmax_plain);
    TEST_RUN(test_softmax_causal);
    TEST_RUN(test_softmax_key_mask);
    TEST_RUN(test_softmax_causal_and_mask);
    TEST_RUN(test_softmax_all_masked);
    TEST_RUN(test_softmax_stable);
    TEST_RUN(test_softmax_bwd);
    TEST_RUN(test_cross_entropy);
    TEST_RUN(test_cross_entropy_bwd);
    TEST_RUN(test_embedding);
    TEST_RUN(test_embedding_bwd);
    TEST_RUN(test_transpose);
    TEST_RUN(test_split_concat);
    TEST_RUN(test_concat_unequal);
    TEST_RUN(test_determinism);
    TEST_MAIN_END();
}
