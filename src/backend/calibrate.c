/* Calibration (include/delta/calibrate.h): microbenchmarks of a backend
 * through the internal interface (backend.h) the runtime drives, turned
 * into a device file's figures and curves (sim/device_file.c).
 *
 * Every measurement is a small program (a delta_ctx of one to a few ops)
 * placed in the backend's arena, each root tensor at its own offset, run
 * once in order (warm-up, and every tensor gets values), then the op of
 * interest issued `reps` times back to back on the compute stream; its
 * device time is the shortest of those items' spans (the run the machine's
 * other work disturbed least: on a shared machine a median still moves by
 * tens of percent, and one slow point bends a curve). Spans are the device's
 * own clock (the engines' wall clock on cpu, CUDA events on cuda, the cost
 * model on sim), so the host's issue costs are not in them; those are
 * measured apart, on the host's clock (measure_host).
 *
 * From the points (t = a median span):
 *   kernel_s      the device's period for tiny kernels queued behind a
 *                 busy device (its shortest run plus the gap to the next)
 *   fp32_flops    the best GEMM rate, flops / (t - kernel_s)
 *   gemm, conv*   efficiency = rate / fp32_flops, by flops
 *   hbm           the best elementwise rate, bytes / (t - kernel_s)
 *   elementwise,  efficiency = rate / hbm, by bytes
 *   reduction
 *   links         per direction, latency + bytes / rate through a small
 *                 and a large copy; duplex, both directions at once
 * which is the cost model's t = kernel_s + flops / (peak x eff) read
 * backwards, so the sim gives back each measured time (where the compute
 * term is the larger one). */
#include "delta/calibrate.h"
#include "backend/backend.h"
#include "backend/sim/device_file.h"
#include "core/files.h"
#include "core/median.h"
#include "delta/cpu.h"
#include "delta/models.h"
#include "delta/session.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_POINTS 64
#define MAX_REPS 16
#define MAX_STEPS 8
#define ALIGN_UP(x) (((x) + DELTA_ALIGN - 1) / DELTA_ALIGN * DELTA_ALIGN)

/* One measured op: its kind's curve gets a point from it. */
typedef struct point {
    char what[64];            /* "matmul 256x256x256" */
    delta_sim_kind kind;
    double flops, bytes;
    double seconds;           /* median device time */
} point;

typedef struct link_dir {
    double small_bytes, small_s, large_bytes, large_s;
    double bps, latency_s;
} link_dir;

typedef struct type_sum {
    int count;
    double measured_s, predicted_s;
    int host_count;  /* ops with a host time (delta_calibration_add_host) */
    double host_s;   /* their host seconds, summed */
} type_sum;

typedef struct step_rec {
    char label[96];
    double step_s, measured_s, predicted_s;
    int timed_ops;
    type_sum types[DELTA_OP_TYPE_COUNT];
} step_rec;

typedef struct check_rec {
    char label[96];
    double measured_s, predicted_s;
} check_rec;

struct delta_calibration {
    delta_gpu_preset g;
    delta_sim_efficiency eff;
    char name[64], description[256], backend[16];
    bool quick;
    int threads;
    point pts[MAX_POINTS];
    int n_pts;
    link_dir link[2];            /* [0] to host, [1] to device */
    double duplex_bytes[2], duplex_s; /* a copy each way at once ([0] to
                                         host), and how long they took */
    point bf16;                  /* a BF16 GEMM; seconds 0: not measured
                                    (no BF16 kernels) */
    double gemm_host_s;          /* host time per small GEMM launch */
    double backend_host_s;       /* host time per launch, the backend's */
    double runtime_host_s;       /* host time per op, the runtime's (keep) */
    type_sum types[DELTA_OP_TYPE_COUNT]; /* over every step added */
    step_rec steps[MAX_STEPS];
    int n_steps;
    check_rec checks[MAX_STEPS];
    int n_checks;
    double wall_s;               /* the microbenchmarks' real time */
    FILE *log;
};

/* The precision of a program: bf16 when any of its tensors is BF16. */
static delta_precision program_precision(const delta_ctx *ctx) {
    for (int i = 0; i < ctx->n_tensors; i++)
        if (ctx->tensors[i]->dtype == DELTA_BF16) return DELTA_PRECISION_BF16;
    return DELTA_PRECISION_FP32;
}

/* Notes the precision a step's program ran in: the file says it when
 * every step had the same (a BF16 step's convolutions and GEMMs run other
 * kernels than fp32's, so its factors and host costs are its own). Once
 * two steps differ it stays 0 (not said): no precision equals 0. */
static void note_precision(delta_calibration *c, const delta_ctx *ctx) {
    int p = 1 + (int)program_precision(ctx);
    int *mp = &c->eff.measured_precision;
    if (c->n_steps == 1) *mp = p;
    else if (*mp != p) *mp = 0;
}

/* A progress line (fmt ends with its newline); stderr is unbuffered. */
static void logf_(const delta_calibration *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_(const delta_calibration *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (c->log) vfprintf(c->log, fmt, ap);
    va_end(ap);
}

/* ---- a program placed in the arena ---------------------------------------- */

typedef struct bench {
    delta_backend *b;
    delta_ctx *ctx;
    void *base;                  /* NULL on sim: addresses are offsets */
    size_t *off;                 /* per tensor id: its root's offset */
    size_t ws_off;
    delta_kernel_env env;
} bench;

static void *addr(const bench *bn, size_t off) {
    return (void *)((uintptr_t)bn->base + off);
}

static void bench_free(bench *bn) {
    free(bn->off);
    delta_ctx_free(bn->ctx);
    memset(bn, 0, sizeof *bn);
}

static bool bench_place_(bench *bn, delta_backend *b, delta_ctx *ctx,
                         char *err, size_t n);

/* Places every root tensor of ctx (owned from here on; NULL: it could not
 * be made) and the largest workspace in a new arena of b, and initializes
 * them; false with a message, and everything freed, when that fails. */
static bool bench_place(bench *bn, delta_backend *b, delta_ctx *ctx,
                        char *err, size_t n) {
    memset(bn, 0, sizeof *bn);
    bn->b = b;
    bn->ctx = ctx;
    bn->env = (delta_kernel_env){.seed = 1, .step = 0, .training = true};
    if (bench_place_(bn, b, ctx, err, n)) return true;
    bench_free(bn);
    return false;
}

static bool bench_place_(bench *bn, delta_backend *b, delta_ctx *ctx,
                         char *err, size_t n) {
    if (ctx && ctx->status != DELTA_OK) {
        snprintf(err, n, "calibration: building a measurement: %s", ctx->err);
        return false;
    }
    bn->off = ctx ? calloc((size_t)ctx->n_tensors + 1, sizeof *bn->off) : NULL;
    if (!bn->off) {
        snprintf(err, n, "calibration: out of host memory");
        return false;
    }
    size_t at = 0, ws = 0;
    for (int i = 0; i < ctx->n_tensors; i++)
        if (ctx->tensors[i]->view_of < 0) {
            bn->off[i] = at;
            at += ALIGN_UP(ctx->tensors[i]->bytes);
        }
    for (int i = 0; i < ctx->n_tensors; i++)
        if (ctx->tensors[i]->view_of >= 0)
            bn->off[i] = bn->off[ctx->tensors[i]->view_of];
    for (int i = 0; i < ctx->n_ops; i++)
        if (ctx->ops[i].workspace > ws) ws = ctx->ops[i].workspace;
    bn->ws_off = at;
    at += ALIGN_UP(ws);
    if (delta_backend_arena_create(b, at ? at : DELTA_ALIGN, &bn->base) !=
        DELTA_OK) {
        char sz[32];
        snprintf(err, n, "calibration: the %s backend cannot make an arena "
                 "of %s for a measurement", b->name,
                 delta_format_bytes((double)at, sz, sizeof sz));
        return false;
    }
    for (int i = 0; i < ctx->n_tensors; i++)
        if (ctx->tensors[i]->view_of < 0 &&
            delta_backend_init_tensor(b, addr(bn, bn->off[i]),
                                      ctx->tensors[i], 1) != DELTA_OK) {
            snprintf(err, n, "calibration: out of host memory");
            return false;
        }
    return true;
}

static void bench_kargs(const bench *bn, const delta_op *op, delta_kargs *k) {
    memset(k, 0, sizeof *k);
    k->op = op;
    k->env = &bn->env;
    for (int j = 0; j < op->n_in; j++) {
        k->in_t[j] = bn->ctx->tensors[op->in[j]];
        k->in[j] = addr(bn, bn->off[op->in[j]]);
    }
    for (int j = 0; j < op->n_out; j++) {
        k->out_t[j] = bn->ctx->tensors[op->out[j]];
        k->out[j] = addr(bn, bn->off[op->out[j]]);
    }
    k->ws = op->workspace ? addr(bn, bn->ws_off) : NULL;
}

/* Issues op on the compute stream; returns its event. */
static delta_event bench_issue(const bench *bn, const delta_op *op) {
    delta_kargs k;
    bench_kargs(bn, op, &k);
    delta_backend_run(bn->b, &k);
    return delta_backend_record(bn->b, DELTA_STREAM_COMPUTE);
}

/* Runs every op once in order (values everywhere, caches warm) and waits. */
static void bench_warm(const bench *bn) {
    delta_event e = {DELTA_STREAM_COMPUTE, 0, 0};
    for (int i = 0; i < bn->ctx->n_ops; i++)
        if (bn->ctx->ops[i].type != DELTA_OP_RESHAPE)
            e = bench_issue(bn, &bn->ctx->ops[i]);
    if (e.seq) delta_backend_sync(bn->b, e);
}

/* The device time of the item at e, or -1 when it is not known. */
static double span_of(delta_backend *b, delta_event e) {
    double t0, t1;
    return delta_backend_span(b, e, &t0, &t1) ? t1 - t0 : -1;
}

/* The shortest device time of op issued reps times back to back. */
static double bench_time(const bench *bn, const delta_op *op, int reps) {
    delta_event e[MAX_REPS];
    if (reps > MAX_REPS) reps = MAX_REPS;
    for (int r = 0; r < reps; r++) e[r] = bench_issue(bn, op);
    delta_backend_sync(bn->b, e[reps - 1]);
    double best = -1;
    for (int r = 0; r < reps; r++) {
        double s = span_of(bn->b, e[r]);
        if (s >= 0 && (best < 0 || s < best)) best = s;
    }
    return best;
}

static const delta_op *find_op(const delta_ctx *ctx, delta_op_type t) {
    for (int i = 0; i < ctx->n_ops; i++)
        if (ctx->ops[i].type == t) return &ctx->ops[i];
    return NULL;
}

static bool add_point(delta_calibration *c, delta_sim_kind kind,
                      const delta_op *op, double seconds, const char *what) {
    if (c->n_pts == MAX_POINTS || !(seconds > 0)) return false;
    point *p = &c->pts[c->n_pts++];
    snprintf(p->what, sizeof p->what, "%s", what);
    p->kind = kind;
    p->flops = op->flops;
    p->bytes = op->bytes;
    p->seconds = seconds;
    return true;
}

/* ---- the measurements ------------------------------------------------------- */

static int reps_of(const delta_calibration *c) { return c->quick ? 3 : 7; }

/* Times op (the median of its runs), keeps it as a point of kind and logs
 * its rate. */
static void time_point(delta_calibration *c, const bench *bn,
                       const delta_op *op, delta_sim_kind kind,
                       const char *what) {
    double t = bench_time(bn, op, reps_of(c));
    bool mem = kind == DELTA_SIM_KIND_ELEMENTWISE ||
               kind == DELTA_SIM_KIND_REDUCTION;
    add_point(c, kind, op, t, what);
    logf_(c, "  %-40s %10.4f ms %9.2f %s\n", what, t * 1e3,
          t > 0 ? (mem ? op->bytes : op->flops) / t / 1e9 : 0,
          mem ? "GB/s" : "GFLOP/s");
}

static bool big_device(const delta_backend *b) {
    return strcmp(b->name, "cpu") != 0;
}

/* A measurement's sizes: the GPU's list, the cpu's, and the cpu's quick
 * one; a quick run on a GPU takes the GPU list's first quick_gpu. */
typedef struct menu {
    const void *gpu, *cpu, *quick;
    size_t n_gpu, n_cpu, n_quick, quick_gpu;
} menu;
#define MENU(g, c, q, qg) \
    {g, c, q, sizeof g / sizeof *g, sizeof c / sizeof *c, sizeof q / sizeof *q, qg}

/* The list for this calibration, and its length in *count. */
static const void *menu_pick(const menu *m, const delta_calibration *c,
                             const delta_backend *b, size_t *count) {
    if (big_device(b)) {
        *count = c->quick && m->quick_gpu < m->n_gpu ? m->quick_gpu : m->n_gpu;
        return m->gpu;
    }
    *count = c->quick ? m->n_quick : m->n_cpu;
    return c->quick ? m->quick : m->cpu;
}

/* GEMM sizes: squares and products of the models' shapes, (M, N, K).
 * The cpu lists stop where a product takes tens of ms on a few cores. */
typedef struct gemm_shape { int64_t m, n, k; } gemm_shape;
static const gemm_shape gemm_cpu[] = {
    {64, 64, 64}, {128, 128, 128}, {256, 256, 256}, {512, 512, 512},
    {1024, 1024, 1024},
    /* GPT-2 4x128, T 64, batch 8: the qkv, MLP-in and MLP-out products */
    {512, 384, 128}, {512, 512, 128}, {512, 128, 512}};
static const gemm_shape gemm_cpu_quick[] = {{64, 64, 64}, {256, 256, 256}};
static const gemm_shape gemm_gpu[] = {
    {128, 128, 128}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024},
    {2048, 2048, 2048}, {4096, 4096, 4096},
    /* GPT-2 small, T 1024, batch 8: qkv, MLP in, MLP out */
    {8192, 2304, 768}, {8192, 3072, 768}, {8192, 768, 3072}};
static const menu gemm_menu = MENU(gemm_gpu, gemm_cpu, gemm_cpu_quick, 3);

static delta_ctx *gemm_program(const gemm_shape *s, delta_dtype dt) {
    delta_ctx *ctx = delta_ctx_new();
    if (!ctx) return NULL;
    int64_t as[2] = {s->m, s->k}, bs[2] = {s->k, s->n};
    delta_tensor *a = delta_input(ctx, "a", dt, 2, as);
    delta_tensor *b = delta_input(ctx, "b", dt, 2, bs);
    delta_matmul(ctx, a, b, false, false, 1.0f);
    return ctx;
}

static bool measure_gemm(delta_calibration *c, delta_backend *b, char *err,
                         size_t n) {
    size_t count;
    const gemm_shape *list = menu_pick(&gemm_menu, c, b, &count);
    for (size_t i = 0; i < count; i++) {
        bench bn;
        delta_ctx *ctx = gemm_program(&list[i], DELTA_F32);
        if (!bench_place(&bn, b, ctx, err, n)) return false;
        bench_warm(&bn);
        char what[64];
        snprintf(what, sizeof what, "matmul %" PRId64 "x%" PRId64 "x%" PRId64,
                 list[i].m, list[i].n, list[i].k);
        time_point(c, &bn, find_op(bn.ctx, DELTA_OP_MATMUL),
                   DELTA_SIM_KIND_GEMM, what);
        bench_free(&bn);
    }
    return true;
}

/* BF16 products on the largest square of the list (backends with BF16
 * kernels only): bf16_flops is what makes the gemm curve give its time. */
static bool measure_bf16(delta_calibration *c, delta_backend *b, char *err,
                         size_t n) {
    if (!b->computes_bf16 || !b->has_data) return true;
    gemm_shape s = big_device(b) ? (gemm_shape){2048, 2048, 2048}
                   : c->quick   ? (gemm_shape){256, 256, 256}
                                : (gemm_shape){512, 512, 512};
    bench bn;
    delta_ctx *ctx = gemm_program(&s, DELTA_BF16);
    if (!bench_place(&bn, b, ctx, err, n)) return false;
    bench_warm(&bn);
    const delta_op *op = find_op(bn.ctx, DELTA_OP_MATMUL);
    double t = bench_time(&bn, op, reps_of(c));
    snprintf(c->bf16.what, sizeof c->bf16.what, "matmul %" PRId64 "^3 bf16",
             s.m);
    c->bf16.kind = DELTA_SIM_KIND_GEMM;
    c->bf16.flops = op->flops;
    c->bf16.bytes = op->bytes;
    c->bf16.seconds = t;
    logf_(c, "  %-40s %10.4f ms %9.2f GFLOP/s\n", c->bf16.what, t * 1e3,
          t > 0 ? op->flops / t / 1e9 : 0);
    bench_free(&bn);
    return true;
}

/* Convolutions (N, C, H, W, K, R, stride): ResNet's 3x3 stages, a 1x1
 * projection and the 7x7 stem, at the cpu's small images (from 9 MFLOP to
 * 600: a cpu convolution's efficiency keeps growing with its size, and a
 * curve holds its last point past its end) or ImageNet's. */
typedef struct conv_shape { int64_t n, c, h, k, r, stride; } conv_shape;
static const conv_shape conv_cpu[] = {
    {16, 8, 32, 8, 3, 1}, {16, 32, 8, 32, 3, 1}, {32, 16, 32, 16, 3, 1},
    {32, 64, 8, 64, 3, 1}, {32, 32, 32, 32, 3, 1}, {16, 32, 8, 128, 1, 1},
    {16, 3, 32, 8, 7, 2}};
static const conv_shape conv_cpu_quick[] = {{8, 8, 16, 8, 3, 1},
                                            {8, 32, 8, 32, 3, 1}};
static const conv_shape conv_gpu[] = {
    {32, 64, 56, 64, 3, 1}, {32, 128, 28, 128, 3, 1},
    {32, 256, 14, 256, 3, 1}, {32, 512, 7, 512, 3, 1},
    {32, 64, 56, 256, 1, 1}, {32, 3, 224, 64, 7, 2}};
static const menu conv_menu = MENU(conv_gpu, conv_cpu, conv_cpu_quick, 2);

static delta_ctx *conv_program(const conv_shape *s) {
    delta_ctx *ctx = delta_ctx_new();
    if (!ctx) return NULL;
    int64_t xs[4] = {s->n, s->c, s->h, s->h}, ws[4] = {s->k, s->c, s->r, s->r};
    delta_init init = {DELTA_INIT_NORMAL, 0, 0.1f};
    /* x a parameter too, so that backward makes conv2d_dx */
    delta_tensor *x = delta_param(ctx, "x", 4, xs, init);
    delta_tensor *w = delta_param(ctx, "w", 4, ws, init);
    delta_tensor *y = delta_conv2d(ctx, x, w, NULL, (int)s->stride,
                                   (int)(s->r / 2));
    delta_backward(ctx, delta_sum(ctx, y));
    return ctx;
}

static bool measure_conv(delta_calibration *c, delta_backend *b, char *err,
                         size_t n) {
    static const delta_op_type types[3] = {DELTA_OP_CONV2D, DELTA_OP_CONV2D_DX,
                                           DELTA_OP_CONV2D_DW};
    static const delta_sim_kind kinds[3] = {DELTA_SIM_KIND_CONV2D,
                                            DELTA_SIM_KIND_CONV2D_DX,
                                            DELTA_SIM_KIND_CONV2D_DW};
    size_t count;
    const conv_shape *list = menu_pick(&conv_menu, c, b, &count);
    for (size_t i = 0; i < count; i++) {
        const conv_shape *s = &list[i];
        bench bn;
        delta_ctx *ctx = conv_program(s);
        if (!bench_place(&bn, b, ctx, err, n)) return false;
        bench_warm(&bn);
        for (int j = 0; j < 3; j++) {
            const delta_op *op = find_op(bn.ctx, types[j]);
            if (!op) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %" PRId64 "x%" PRId64 "x%" PRId64
                     "^2 k%" PRId64 " %" PRId64 "x%" PRId64 "/%" PRId64,
                     delta_op_type_name(types[j]), s->n, s->c, s->h, s->k,
                     s->r, s->r, s->stride);
            time_point(c, &bn, op, kinds[j], what);
        }
        bench_free(&bn);
    }
    return true;
}

/* Streaming ops by size: add (two reads, a write) for the elementwise
 * curve and sum (a reduction to one value) for the reduction curve. One op
 * each: op types differ at the same bytes (the cpu's relu is 3x slower
 * than its add), which a curve of both would zigzag over; the traced
 * steps' factors carry each type's own. */
static bool measure_memory(delta_calibration *c, delta_backend *b, char *err,
                           size_t n) {
    static const int64_t cpu_sizes[] = {1 << 12, 1 << 15, 1 << 18, 1 << 21,
                                        1 << 23};
    static const int64_t cpu_quick[] = {1 << 12, 1 << 18};
    static const int64_t gpu_sizes[] = {1 << 14, 1 << 18, 1 << 22, 1 << 25,
                                        1 << 27};
    static const menu m = MENU(gpu_sizes, cpu_sizes, cpu_quick, 3);
    size_t count;
    const int64_t *sizes = menu_pick(&m, c, b, &count);
    for (size_t i = 0; i < count; i++) {
        delta_ctx *ctx = delta_ctx_new();
        if (!ctx) {
            snprintf(err, n, "calibration: out of host memory");
            return false;
        }
        int64_t len = sizes[i];
        delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 1, &len);
        delta_tensor *y = delta_input(ctx, "y", DELTA_F32, 1, &len);
        delta_add(ctx, x, y);
        delta_sum(ctx, x);
        bench bn;
        if (!bench_place(&bn, b, ctx, err, n)) return false;
        bench_warm(&bn);
        static const delta_op_type types[2] = {DELTA_OP_ADD, DELTA_OP_SUM};
        for (int j = 0; j < 2; j++) {
            char what[64];
            snprintf(what, sizeof what, "%s %" PRId64,
                     delta_op_type_name(types[j]), len);
            time_point(c, &bn, find_op(bn.ctx, types[j]),
                       delta_sim_kind_of(types[j]), what);
        }
        bench_free(&bn);
    }
    return true;
}

/* Median seconds of `reps` copies of bytes on stream s, back to back. */
static double copy_time(delta_backend *b, delta_stream s, void *dev,
                        void *host, size_t bytes, int reps) {
    delta_event e[MAX_REPS];
    double t[MAX_REPS];
    if (reps > MAX_REPS) reps = MAX_REPS;
    for (int r = 0; r < reps; r++) {
        if (s == DELTA_STREAM_TO_HOST) delta_backend_copy(b, s, host, dev, bytes);
        else delta_backend_copy(b, s, dev, host, bytes);
        e[r] = delta_backend_record(b, s);
    }
    delta_backend_sync(b, e[reps - 1]);
    int k = 0;
    for (int r = 0; r < reps; r++) {
        double x = span_of(b, e[r]);
        if (x >= 0) t[k++] = x;
    }
    return delta_median(t, k);
}

/* Both directions at once: a copy each way, sized so that each takes the
 * same time alone (the shorter of the two directions' large copies, each
 * within half the buffers), issued together on the two copy streams;
 * r = the time the two take one after the other, alone, over the time they
 * take together (the median of a few tries): 2 when the directions do not
 * slow each other (PCIe is full duplex), 1 when they share one rate (one
 * copy engine, or the host's memory the bound). The simulator runs the
 * newer of two overlapping copies at (duplex - 1) of its rate and the
 * older as issued, so that such a pair takes (3 - duplex) copies' time:
 * duplex = 3 - 2 / r gives back the time measured (r 1.6, each way at 0.8
 * of its rate: duplex 1.75). */
static void measure_duplex(delta_calibration *c, delta_backend *b, void *dev,
                           void *host, size_t cap) {
    double tau = HUGE_VAL; /* seconds of transfer each way */
    for (int d = 0; d < 2; d++)
        tau = fmin(tau, fmin(c->link[d].large_bytes, (double)(cap / 2)) /
                            c->link[d].bps);
    size_t bytes[2];
    double alone = 0;
    for (int d = 0; d < 2; d++) {
        bytes[d] = (size_t)(tau * c->link[d].bps) / 4096 * 4096;
        if (bytes[d] < 4096) bytes[d] = 4096;
        alone += c->link[d].latency_s + (double)bytes[d] / c->link[d].bps;
    }
    char *dv = dev, *hv = host;
    double t[MAX_REPS];
    int n = 0, reps = c->quick ? 3 : 5;
    for (int r = 0; r < reps; r++) {
        delta_backend_copy(b, DELTA_STREAM_TO_HOST, hv, dv, bytes[0]);
        delta_event eh = delta_backend_record(b, DELTA_STREAM_TO_HOST);
        delta_backend_copy(b, DELTA_STREAM_TO_DEVICE, dv + cap / 2,
                           hv + cap / 2, bytes[1]);
        delta_event ed = delta_backend_record(b, DELTA_STREAM_TO_DEVICE);
        delta_backend_sync(b, eh);
        delta_backend_sync(b, ed);
        double h0, h1, d0, d1;
        if (delta_backend_span(b, eh, &h0, &h1) &&
            delta_backend_span(b, ed, &d0, &d1))
            t[n++] = fmax(h1, d1) - fmin(h0, d0);
    }
    double both = delta_median(t, n);
    c->duplex_bytes[0] = (double)bytes[0];
    c->duplex_bytes[1] = (double)bytes[1];
    c->duplex_s = both;
    double r = both > 0 ? alone / both : 2;
    r = r < 1 ? 1 : r > 2 ? 2 : r;
    c->g.link_duplex = 3 - 2 / r;
    logf_(c, "  link both ways (%.1f MiB to host, %.1f MiB to device): %.3f ms "
          "together, %.3f ms one after the other (%.2fx): duplex %.2f\n",
          (double)bytes[0] / (1 << 20), (double)bytes[1] / (1 << 20),
          both * 1e3, alone * 1e3, r, c->g.link_duplex);
}

/* The link per direction: latency + bytes / rate through a small copy and
 * one sized to take about target_s (from a 1 MiB probe). */
static bool measure_link(delta_calibration *c, delta_backend *b, char *err,
                         size_t n) {
    const size_t small = 4096, probe = (size_t)1 << 20;
    const size_t cap = big_device(b) ? (size_t)256 << 20 : (size_t)64 << 20;
    const double target_s = c->quick ? 0.02 : 0.08;
    void *dev = NULL;
    if (delta_backend_arena_create(b, cap, &dev) != DELTA_OK) {
        snprintf(err, n, "calibration: the %s backend cannot make an arena "
                 "for the link's copies", b->name);
        return false;
    }
    void *host = delta_backend_host_alloc(b, cap);
    if (!host) {
        snprintf(err, n, "calibration: no host memory for the link's copies");
        return false;
    }
    if (b->has_data) memset(host, 1, cap);
    for (int d = 0; d < 2; d++) {
        delta_stream s = d ? DELTA_STREAM_TO_DEVICE : DELTA_STREAM_TO_HOST;
        link_dir *l = &c->link[d];
        l->small_bytes = (double)small;
        l->small_s = copy_time(b, s, dev, host, small, c->quick ? 5 : 11);
        double tp = copy_time(b, s, dev, host, probe, 1);
        double rate = tp > l->small_s ? (double)(probe - small) / (tp - l->small_s)
                                      : (double)probe / (tp > 0 ? tp : 1e-3);
        double want = rate * target_s;
        size_t large = want > (double)cap ? cap : (size_t)want;
        if (large < probe) large = probe;
        large = (large + 4095) / 4096 * 4096;
        if (large > cap) large = cap;
        l->large_bytes = (double)large;
        l->large_s = copy_time(b, s, dev, host, large, 3);
        double dt = l->large_s - l->small_s;
        l->bps = dt > 0 ? (l->large_bytes - l->small_bytes) / dt
                        : l->large_bytes / l->large_s;
        l->latency_s = fmax(0.0, l->small_s - l->small_bytes / l->bps);
        logf_(c, "  link %-10s %8.3f GB/s, latency %7.1f us (%.0f KiB %.4f ms, "
              "%.1f MiB %.3f ms)\n", d ? "to device" : "to host", l->bps / 1e9,
              l->latency_s * 1e6, l->small_bytes / 1024, l->small_s * 1e3,
              l->large_bytes / (1 << 20), l->large_s * 1e3);
    }
    measure_duplex(c, b, dev, host, cap);
    delta_backend_host_free(b, host);
    delta_backend_arena_destroy(b);
    return true;
}

/* Host seconds per launch (run + record, as the runtime issues) of n ops op
 * queued behind busy work on the compute stream, and the device's period
 * between them (median spacing of their ends). The host's figure is the
 * median of the launches timed one by one, not their mean: once a device's
 * launch queue is full a launch blocks until the blockers drain, and the
 * mean then measures the device (on an H200, 500 launches of three queue
 * entries each, behind 20 ms of GEMMs, averaged 41 us a launch while the
 * runtime's whole host time per op was 9 us). */
static void queued_launches(const bench *bn, const delta_op *blocker,
                            int n_block, const delta_op *op, int n,
                            double *host_s, double *period_s) {
    delta_backend *b = bn->b;
    delta_event *e = malloc(sizeof *e * (size_t)n);
    double *gap = malloc(sizeof *gap * (size_t)n);
    double *issue = malloc(sizeof *issue * (size_t)n);
    DELTA_ASSERT(e && gap && issue);
    for (int i = 0; i < n_block; i++) bench_issue(bn, blocker);
    for (int i = 0; i < n; i++) {
        double t0 = delta_backend_clock(b);
        e[i] = bench_issue(bn, op);
        issue[i] = delta_backend_clock(b) - t0;
    }
    delta_backend_sync(b, e[n - 1]);
    *host_s = delta_median(issue, n);
    free(issue);
    double prev = -1, a, z;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!delta_backend_span(b, e[i], &a, &z)) continue;
        if (prev >= 0) gap[k++] = z - prev;
        prev = z;
    }
    *period_s = delta_median(gap, k);
    free(e);
    free(gap);
}

/* The host's costs and the device's time per empty kernel (see the top of
 * the file and docs/DEVICE.md, "Device files"). */
static bool measure_host(delta_calibration *c, delta_backend *b, char *err,
                         size_t n) {
    delta_ctx *ctx = delta_ctx_new();
    if (!ctx) {
        snprintf(err, n, "calibration: out of host memory");
        return false;
    }
    int64_t tiny = 16;
    int64_t bs = big_device(b) ? 2048 : 256, ss = 32;
    int64_t bsh[2] = {bs, bs}, ssh[2] = {ss, ss};
    delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 1, &tiny);
    delta_relu(ctx, x);
    delta_tensor *ba = delta_input(ctx, "ba", DELTA_F32, 2, bsh);
    delta_matmul(ctx, ba, ba, false, false, 1.0f);
    delta_tensor *sa = delta_input(ctx, "sa", DELTA_F32, 2, ssh);
    delta_matmul(ctx, sa, sa, false, false, 1.0f);
    bench bn;
    if (!bench_place(&bn, b, ctx, err, n)) return false;
    bench_warm(&bn);
    const delta_op *relu = &bn.ctx->ops[0], *big = &bn.ctx->ops[1],
                   *small = &bn.ctx->ops[2];
    double t_big = bench_time(&bn, big, 3);
    /* the queue: the cpu backend's ring holds 1,024 items, the blockers
     * keep the device busy for ~40 us per queued launch */
    int count = c->quick ? 200 : 500;
    int n_block = (int)ceil(count * 40e-6 / fmax(t_big, 1e-6));
    if (n_block < 1) n_block = 1;
    if (n_block > 100) n_block = 100;
    double host_tiny, period_tiny, host_gemm, period_gemm;
    queued_launches(&bn, big, n_block, relu, count, &host_tiny, &period_tiny);
    queued_launches(&bn, big, n_block, small, count, &host_gemm, &period_gemm);
    c->g.launch_host_s = c->backend_host_s = host_tiny;
    c->gemm_host_s = host_gemm;
    c->g.library_host_s = fmax(0.0, host_gemm - host_tiny);
    c->g.kernel_s = period_tiny > 0 ? period_tiny : DELTA_SIM_LAUNCH_S;
    /* an idle device: issued to running, and a blocking wait's wake-up */
    int reps = c->quick ? 7 : 15;
    double lat[32], wake[32];
    for (int r = 0; r < reps; r++) {
        delta_kargs k;
        bench_kargs(&bn, relu, &k);
        delta_backend_run(b, &k);
        double issued = delta_backend_clock(b);
        delta_event e = delta_backend_record(b, DELTA_STREAM_COMPUTE);
        delta_backend_sync(b, e);
        double t0, t1;
        lat[r] = delta_backend_span(b, e, &t0, &t1) ? fmax(0.0, t0 - issued) : 0;
        e = bench_issue(&bn, big);
        delta_backend_sync(b, e);
        double woke = delta_backend_clock(b);
        wake[r] = delta_backend_span(b, e, &t0, &t1) ? fmax(0.0, woke - t1) : 0;
    }
    c->g.launch_latency_s = delta_median(lat, reps);
    c->g.sync_wake_s = delta_median(wake, reps);
    logf_(c, "  host: launch %.2f us, a GEMM's launch %.2f us (library +%.2f "
          "us), launch latency %.2f us, wake-up %.2f us; device: %.2f us per "
          "empty kernel\n", c->g.launch_host_s * 1e6, host_gemm * 1e6,
          c->g.library_host_s * 1e6, c->g.launch_latency_s * 1e6,
          c->g.sync_wake_s * 1e6, c->g.kernel_s * 1e6);
    bench_free(&bn);
    return true;
}

/* The runtime's host time per op: keep steps of chains of tiny ops, two
 * lengths, the slope of the host's busy time between them (a step's fixed
 * costs drop out). This is what issuing an op costs the host through
 * delta's runtime (its bookkeeping and the backend's launch), the figure
 * the sim's host clock needs; on a GPU the launch is most of it, on the
 * cpu backend, whose launch is a push onto a ring, nearly none. */
static bool measure_runtime(delta_calibration *c, delta_backend *b,
                            char *err, size_t n) {
    static const int lengths[2] = {64, 512};
    double busy[2];
    for (int k = 0; k < 2; k++) {
        delta_ctx *ctx = delta_ctx_new();
        if (!ctx) {
            snprintf(err, n, "calibration: out of host memory");
            return false;
        }
        int64_t tiny = 16;
        delta_tensor *y = delta_input(ctx, "x", DELTA_F32, 1, &tiny);
        for (int i = 0; i < lengths[k]; i++) y = delta_relu(ctx, y);
        delta_status st = delta_ctx_status(ctx);
        delta_session *s = NULL;
        if (st == DELTA_OK)
            s = delta_session_new(ctx, &(delta_session_opts){
                                           .backend = b, .policy = "keep"},
                                  &st, err, n);
        double h[5];
        int runs = c->quick ? 3 : 5;
        for (int r = 0; s && st == DELTA_OK && r < runs; r++) {
            delta_step_stats ss;
            st = delta_session_run(s, DELTA_RUN_STEP, &ss);
            h[r] = ss.host_busy_s;
        }
        if (st != DELTA_OK && s)
            snprintf(err, n, "calibration: %s", delta_session_error(s));
        delta_session_free(s);
        delta_ctx_free(ctx);
        if (st != DELTA_OK) return false;
        busy[k] = delta_median(h + 1, runs - 1); /* the first run places */
    }
    c->runtime_host_s = fmax(0.0, (busy[1] - busy[0]) / (lengths[1] - lengths[0]));
    if (c->runtime_host_s > c->g.launch_host_s)
        c->g.launch_host_s = c->runtime_host_s;
    logf_(c, "  runtime: %.2f us of host time per op (keep; the backend's "
          "launch %.2f us of it)\n", c->runtime_host_s * 1e6,
          c->backend_host_s * 1e6);
    return true;
}

/* ---- from points to figures -------------------------------------------------- */

/* The compute (or memory) part of a measured time: less the device's fixed
 * time per kernel, and never below a twentieth of it. */
static double work_s(const delta_calibration *c, double t) {
    return fmax(t - c->g.kernel_s, 0.05 * t);
}

/* Curve k from the points of that kind: efficiency = rate / peak, where
 * rate = flops (compute kinds) or bytes per work second, by that size;
 * points of one size are averaged. A compute kind's curve never falls as
 * the size grows (a running maximum): one slow shape must not set the
 * efficiency of every larger op of its kind (on an H200 the 7x7 stem's
 * data gradient, the largest conv2d_dx measured, ran at 0.09 of the peak;
 * taken as the curve's end, it priced every ResNet-50 b64 convolution
 * gradient at that and the simulated step at twice the measured one).
 * Streaming kinds keep their shape: a size held in the L2 cache does run
 * faster than a larger one. */
static void fit_curve(delta_calibration *c, delta_sim_kind k, bool by_flops,
                      double peak) {
    delta_sim_curve *cv = &c->eff.curve[k];
    cv->n = 0;
    double xs[MAX_POINTS], es[MAX_POINTS];
    int m = 0;
    for (int i = 0; i < c->n_pts; i++) {
        const point *p = &c->pts[i];
        if (p->kind != k) continue;
        double size = by_flops ? p->flops : p->bytes;
        if (!(size > 0)) continue;
        xs[m] = size;
        es[m] = size / work_s(c, p->seconds) / peak;
        m++;
    }
    /* sort by size (insertion: a handful of points) */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && xs[j] < xs[j - 1]; j--) {
            double tx = xs[j], te = es[j];
            xs[j] = xs[j - 1];
            es[j] = es[j - 1];
            xs[j - 1] = tx;
            es[j - 1] = te;
        }
    for (int i = 0; i < m;) {
        int j = i;
        double sum = 0;
        while (j < m && xs[j] == xs[i]) sum += es[j++];
        if (cv->n < DELTA_SIM_CURVE_POINTS) {
            cv->x[cv->n] = xs[i];
            cv->eff[cv->n] = sum / (j - i);
            if (by_flops && cv->n > 0 && cv->eff[cv->n - 1] > cv->eff[cv->n])
                cv->eff[cv->n] = cv->eff[cv->n - 1];
            cv->n++;
        }
        i = j;
    }
}

static double best_rate(const delta_calibration *c, delta_sim_kind k,
                        bool by_flops) {
    double best = 0;
    for (int i = 0; i < c->n_pts; i++) {
        const point *p = &c->pts[i];
        if (p->kind != k) continue;
        double r = (by_flops ? p->flops : p->bytes) / work_s(c, p->seconds);
        if (r > best) best = r;
    }
    return best;
}

static void fit_figures(delta_calibration *c) {
    double flops = best_rate(c, DELTA_SIM_KIND_GEMM, true);
    double hbm = best_rate(c, DELTA_SIM_KIND_ELEMENTWISE, false);
    c->g.fp32_flops = flops > 0 ? flops : 1e9;
    c->g.tensor_flops = c->g.fp32_flops; /* fp32 products: the same units */
    c->g.hbm_bytes_per_s = hbm > 0 ? hbm : 1e9;
    fit_curve(c, DELTA_SIM_KIND_GEMM, true, c->g.fp32_flops);
    fit_curve(c, DELTA_SIM_KIND_CONV2D, true, c->g.fp32_flops);
    fit_curve(c, DELTA_SIM_KIND_CONV2D_DX, true, c->g.fp32_flops);
    fit_curve(c, DELTA_SIM_KIND_CONV2D_DW, true, c->g.fp32_flops);
    fit_curve(c, DELTA_SIM_KIND_ELEMENTWISE, false, c->g.hbm_bytes_per_s);
    fit_curve(c, DELTA_SIM_KIND_REDUCTION, false, c->g.hbm_bytes_per_s);
    /* BF16: the peak at which the gemm curve gives the measured time */
    c->g.bf16_flops = c->g.fp32_flops;
    const delta_sim_curve *gc = &c->eff.curve[DELTA_SIM_KIND_GEMM];
    if (c->bf16.seconds > 0 && gc->n)
        c->g.bf16_flops = c->bf16.flops / work_s(c, c->bf16.seconds) /
                          delta_sim_curve_at(gc, c->bf16.flops);
    c->g.link_to_host_bytes_per_s = c->link[0].bps;
    c->g.link_to_device_bytes_per_s = c->link[1].bps;
    c->g.link_bytes_per_s = fmin(c->link[0].bps, c->link[1].bps);
    c->g.link_latency_s = 0.5 * (c->link[0].latency_s + c->link[1].latency_s);
}

/* ---- the public calls ---------------------------------------------------------- */

static double host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 16e9;
}

delta_calibration *delta_calibrate(delta_backend *b,
                                   const delta_calibrate_opts *o, char *err,
                                   size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    delta_calibration *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "calibration: out of host memory");
        return NULL;
    }
    delta_calibrate_opts d = {0};
    if (!o) o = &d;
    c->quick = o->quick;
    c->log = o->log;
    c->threads = delta_cpu_threads();
    snprintf(c->backend, sizeof c->backend, "%s", b->name);
    snprintf(c->name, sizeof c->name, "%s",
             o->name ? o->name : strcmp(b->name, "cpu") ? "gpu-calibrated"
                                                        : "cpu-calibrated");
    c->g.name = c->name;
    c->g.description = c->description;
    c->g.eff = &c->eff;
    c->g.memory_bytes = o->memory_bytes > 0 ? o->memory_bytes
                        : b->device_bytes > 0 ? b->device_bytes
                                              : host_memory();
    double t0 = delta_backend_clock(b);
    /* the host's costs first: the curves subtract the device's time per
     * empty kernel */
    logf_(c, "calibrating the %s backend%s:\n", b->name,
          c->quick ? " (quick)" : "");
    bool ok = measure_host(c, b, err, err_len) &&
              measure_runtime(c, b, err, err_len) &&
              measure_gemm(c, b, err, err_len) &&
              measure_bf16(c, b, err, err_len) &&
              measure_conv(c, b, err, err_len) &&
              measure_memory(c, b, err, err_len) &&
              measure_link(c, b, err, err_len);
    delta_backend_arena_destroy(b);
    if (!ok) {
        free(c);
        return NULL;
    }
    c->wall_s = delta_backend_clock(b) - t0;
    fit_figures(c);
    if (o->description)
        snprintf(c->description, sizeof c->description, "%s", o->description);
    else if (!strcmp(b->name, "cpu"))
        snprintf(c->description, sizeof c->description,
                 "the cpu backend (%d thread%s) as delta calibrate measured "
                 "it", c->threads, c->threads == 1 ? "" : "s");
    else
        snprintf(c->description, sizeof c->description,
                 "the %s backend as delta calibrate measured it", b->name);
    return c;
}

void delta_calibration_free(delta_calibration *c) { free(c); }

const delta_gpu_preset *delta_calibration_device(const delta_calibration *c) {
    return &c->g;
}

/* Each op type's factor: measured over predicted, summed over the steps;
 * and its host seconds per op, the mean over the ops given one. */
static void fit_factors(delta_calibration *c) {
    for (int t = 0; t < DELTA_OP_TYPE_COUNT; t++) {
        const type_sum *s = &c->types[t];
        c->eff.op_factor[t] = s->count && s->measured_s > 0 &&
                                      s->predicted_s > 0
                                  ? s->measured_s / s->predicted_s
                                  : 0;
        c->eff.op_host_s[t] =
            s->host_count && s->host_s > 0 ? s->host_s / s->host_count : 0;
    }
}

delta_status delta_calibration_add_host(delta_calibration *c,
                                        const delta_ctx *ctx,
                                        const double *op_host_s) {
    if (!c || !ctx || ctx->n_ops == 0 || !op_host_s)
        return DELTA_ERR_INVALID_ARG;
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        if (op->type == DELTA_OP_RESHAPE || !(op_host_s[i] > 0)) continue;
        type_sum *s = &c->types[op->type];
        s->host_count++;
        s->host_s += op_host_s[i];
    }
    fit_factors(c);
    return DELTA_OK;
}

delta_status delta_calibration_add_step(delta_calibration *c,
                                        const char *label,
                                        const delta_ctx *ctx,
                                        const double *op_s, double step_s) {
    if (!ctx || ctx->n_ops == 0 || !op_s || c->n_steps == MAX_STEPS)
        return DELTA_ERR_INVALID_ARG;
    /* predictions from the curves alone: no factors */
    delta_sim_efficiency bare = c->eff;
    memset(bare.op_factor, 0, sizeof bare.op_factor);
    delta_gpu_preset g = c->g;
    g.eff = &bare;
    step_rec *st = &c->steps[c->n_steps++];
    memset(st, 0, sizeof *st);
    snprintf(st->label, sizeof st->label, "%s", label ? label : "program");
    st->step_s = step_s;
    note_precision(c, ctx);
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        if (op->type == DELTA_OP_RESHAPE || !(op_s[i] >= 0)) continue;
        double p = delta_sim_op_seconds(&g, false, op);
        type_sum *s = &st->types[op->type];
        s->count++;
        s->measured_s += op_s[i];
        s->predicted_s += p;
        st->measured_s += op_s[i];
        st->predicted_s += p;
        st->timed_ops++;
        type_sum *all = &c->types[op->type];
        all->count++;
        all->measured_s += op_s[i];
        all->predicted_s += p;
    }
    fit_factors(c);
    return DELTA_OK;
}

void delta_calibration_set_kernel_gap(delta_calibration *c, double seconds) {
    c->g.kernel_gap_s = seconds > 0 ? seconds : 0;
}

void delta_calibration_add_check(delta_calibration *c, const char *label,
                                 double measured_s, double predicted_s) {
    if (c->n_checks == MAX_STEPS) return;
    check_rec *k = &c->checks[c->n_checks++];
    snprintf(k->label, sizeof k->label, "%s", label ? label : "program");
    k->measured_s = measured_s;
    k->predicted_s = predicted_s;
}

void delta_calibration_print(const delta_calibration *c, void *file) {
    FILE *f = file;
    const delta_gpu_preset *g = &c->g;
    fprintf(f, "%s: %s\n", g->name, g->description);
    fprintf(f, "  compute  %.2f GFLOP/s fp32 GEMM (best measured)%s, "
            "%.2f GB/s streaming\n", g->fp32_flops / 1e9,
            c->bf16.seconds > 0 ? "" : "; bf16 taken the same",
            g->hbm_bytes_per_s / 1e9);
    fprintf(f, "  link     to host %.4g GB/s, to device %.4g GB/s, latency "
            "%.1f us, duplex %.2f\n", g->link_to_host_bytes_per_s / 1e9,
            g->link_to_device_bytes_per_s / 1e9, g->link_latency_s * 1e6,
            g->link_duplex);
    fprintf(f, "  host     launch %.2f us, library +%.2f us, launch latency "
            "%.2f us, wake-up %.2f us\n", g->launch_host_s * 1e6,
            g->library_host_s * 1e6, g->launch_latency_s * 1e6,
            g->sync_wake_s * 1e6);
    fprintf(f, "  device   %.2f us per empty kernel, %.2f us between queued "
            "kernels\n", g->kernel_s * 1e6, g->kernel_gap_s * 1e6);
    for (int k = 0; k < DELTA_SIM_KIND_COUNT; k++) {
        const delta_sim_curve *cv = &c->eff.curve[k];
        if (!cv->n) continue;
        fprintf(f, "  %-11s", delta_sim_kind_name((delta_sim_kind)k));
        for (int i = 0; i < cv->n; i++)
            fprintf(f, " %.3g:%.2f", cv->x[i], cv->eff[i]);
        fprintf(f, "   (%s: efficiency)\n", k <= DELTA_SIM_KIND_CONV2D_DW
                                               ? "flops" : "bytes");
    }
    if (!c->n_steps) return;
    fprintf(f, "\nper op type, the programs' steps (");
    for (int i = 0; i < c->n_steps; i++)
        fprintf(f, "%s%s", i ? ", " : "", c->steps[i].label);
    fprintf(f, "): measured against the sim's figures before factors\n");
    fprintf(f, "%-22s %6s %12s %12s %8s %9s\n", "op type", "ops",
            "measured ms", "predicted ms", "factor", "host us");
    int order[DELTA_OP_TYPE_COUNT], n = 0;
    for (int t = 0; t < DELTA_OP_TYPE_COUNT; t++)
        if (c->types[t].count) order[n++] = t;
    for (int i = 1; i < n; i++) /* by measured time, largest first */
        for (int j = i; j > 0 && c->types[order[j]].measured_s >
                                     c->types[order[j - 1]].measured_s; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        const type_sum *s = &c->types[order[i]];
        fprintf(f, "%-22s %6d %12.3f %12.3f %8.3f %9.2f\n",
                delta_op_type_name((delta_op_type)order[i]), s->count,
                s->measured_s * 1e3, s->predicted_s * 1e3,
                c->eff.op_factor[order[i]], c->eff.op_host_s[order[i]] * 1e6);
    }
    for (int i = 0; i < c->n_steps; i++) {
        const step_rec *st = &c->steps[i];
        fprintf(f, "%s: step %.3f ms, its %d ops %.3f ms, predicted %.3f ms "
                "before factors (%+.0f%%)\n", st->label, st->step_s * 1e3,
                st->timed_ops, st->measured_s * 1e3, st->predicted_s * 1e3,
                st->measured_s > 0
                    ? 100 * (st->predicted_s / st->measured_s - 1) : 0);
    }
    for (int i = 0; i < c->n_checks; i++) {
        const check_rec *k = &c->checks[i];
        fprintf(f, "check %s: keep step measured %.3f ms, the sim with this "
                "file %.3f ms (%+.1f%%)\n", k->label, k->measured_s * 1e3,
                k->predicted_s * 1e3,
                k->measured_s > 0
                    ? 100 * (k->predicted_s / k->measured_s - 1) : 0);
    }
}

/* ---- the file -------------------------------------------------------------------- */

static bool add_num(cJSON *o, const char *k, double v) {
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

/* A new object at the end of arr holding "key": name; NULL when out of
 * memory. */
static cJSON *append_named(cJSON *arr, const char *key, const char *name) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    return cJSON_AddStringToObject(o, key, name) ? o : NULL;
}

/* What was measured, under "calibration" (not read back: a record). */
static cJSON *record_json(const delta_calibration *c) {
    cJSON *r = cJSON_CreateObject();
    bool ok = r && cJSON_AddStringToObject(r, "backend", c->backend) &&
              add_num(r, "threads", c->threads) &&
              cJSON_AddBoolToObject(r, "quick", c->quick) &&
              add_num(r, "seconds", c->wall_s) &&
              add_num(r, "gemm_launch_host_s", c->gemm_host_s) &&
              add_num(r, "backend_launch_host_s", c->backend_host_s) &&
              add_num(r, "runtime_host_s_per_op", c->runtime_host_s) &&
              add_num(r, "bf16_gemm_flops", c->bf16.seconds > 0
                                     ? c->bf16.flops / c->bf16.seconds : 0);
    cJSON *pts = ok ? cJSON_AddArrayToObject(r, "ops") : NULL;
    for (int i = 0; pts && ok && i < c->n_pts; i++) {
        const point *p = &c->pts[i];
        cJSON *o = append_named(pts, "op", p->what);
        ok = o &&
             cJSON_AddStringToObject(o, "kind", delta_sim_kind_name(p->kind)) &&
             add_num(o, "flops", p->flops) && add_num(o, "bytes", p->bytes) &&
             add_num(o, "seconds", p->seconds);
    }
    cJSON *link = ok && pts ? cJSON_AddObjectToObject(r, "link") : NULL;
    for (int d = 0; link && ok && d < 2; d++) {
        const link_dir *l = &c->link[d];
        cJSON *o = cJSON_AddObjectToObject(link, d ? "to_device" : "to_host");
        ok = o && add_num(o, "small_bytes", l->small_bytes) &&
             add_num(o, "small_s", l->small_s) &&
             add_num(o, "large_bytes", l->large_bytes) &&
             add_num(o, "large_s", l->large_s) &&
             add_num(o, "bytes_per_s", l->bps) &&
             add_num(o, "latency_s", l->latency_s);
    }
    cJSON *both = link && ok ? cJSON_AddObjectToObject(link, "both_ways")
                             : NULL;
    if (link && ok)
        ok = both && add_num(both, "to_host_bytes", c->duplex_bytes[0]) &&
             add_num(both, "to_device_bytes", c->duplex_bytes[1]) &&
             add_num(both, "seconds", c->duplex_s) &&
             add_num(both, "duplex", c->g.link_duplex);
    cJSON *steps = ok && link ? cJSON_AddArrayToObject(r, "steps") : NULL;
    for (int i = 0; steps && ok && i < c->n_steps; i++) {
        const step_rec *st = &c->steps[i];
        cJSON *o = append_named(steps, "program", st->label);
        ok = o && add_num(o, "step_s", st->step_s) &&
             add_num(o, "ops_measured_s", st->measured_s) &&
             add_num(o, "ops_predicted_s", st->predicted_s);
        cJSON *types = ok ? cJSON_AddObjectToObject(o, "op_types") : NULL;
        for (int t = 0; types && ok && t < DELTA_OP_TYPE_COUNT; t++) {
            const type_sum *s = &st->types[t];
            if (!s->count) continue;
            cJSON *ty = cJSON_AddObjectToObject(
                types, delta_op_type_name((delta_op_type)t));
            ok = ty && add_num(ty, "ops", s->count) &&
                 add_num(ty, "measured_s", s->measured_s) &&
                 add_num(ty, "predicted_s", s->predicted_s);
        }
        ok = ok && types;
    }
    cJSON *checks = ok && steps ? cJSON_AddArrayToObject(r, "checks") : NULL;
    for (int i = 0; checks && ok && i < c->n_checks; i++) {
        const check_rec *k = &c->checks[i];
        cJSON *o = append_named(checks, "program", k->label);
        ok = o && add_num(o, "measured_step_s", k->measured_s) &&
             add_num(o, "predicted_step_s", k->predicted_s);
    }
    if (!ok || !checks) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

delta_status delta_calibration_write(const delta_calibration *c,
                                     const char *path, char *err,
                                     size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    cJSON *o = delta_gpu_file_json(&c->g);
    cJSON *rec = o ? record_json(c) : NULL;
    char *text = NULL;
    if (rec) {
        cJSON_AddItemToObject(o, "calibration", rec);
        text = cJSON_Print(o);
    }
    cJSON_Delete(o);
    if (!text) {
        snprintf(err, err_len, "calibration: out of memory writing '%s'",
                 path);
        return DELTA_ERR_NOMEM;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON's text ends without one; its NUL is ours */
    struct stat sb;
    bool regular = stat(path, &sb) != 0 || S_ISREG(sb.st_mode);
    int rc = delta_file_write_atomic(path, text, len + 1, err, err_len);
    free(text);
    if (rc == 0) return DELTA_OK;
    return regular ? DELTA_ERR_IO : DELTA_ERR_INVALID_ARG;
}
