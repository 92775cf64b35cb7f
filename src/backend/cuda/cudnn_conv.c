/* Convolutions through cuDNN, found at run time: dlopen("libcudnn.so.9")
 * (the GPU machines' PyTorch ships it; delta does not link it, so a machine
 * without it still runs, on the im2col + cuBLAS path of cu_conv.cu).
 *
 * Only deterministic algorithms, so a recomputed convolution equals the
 * first one bit for bit. F32 convolutions use only plain fp32 math
 * (CUDNN_FMA_MATH: no TF32, like the cuBLAS calls). BF16 convolutions
 * (mixed precision) run on the BF16 operands themselves, on the tensor
 * cores (CUDNN_TENSOR_OP_MATH) with an fp32 compute type: products summed
 * in fp32, each output rounded once, as the cuBLASLt GEMMs of cu_lt_gemm.cu;
 * math that converts the operands further (ALLOW_CONVERSION) is refused.
 *
 * Choosing by timing (delta_cudnn_tune, before a program is planned): for
 * each convolution shape cuDNN times its algorithms on scratch buffers
 * (cudnnFind*AlgorithmEx); among the deterministic fp32 ones whose
 * workspace fits the cap (the largest of the op's declared workspace,
 * DELTA_CUDNN_WORKSPACE_MB, default 512 MiB, and the convolution's own
 * operand bytes: tune_cap) the fastest is taken, or one needing less workspace when it is within 10%
 * of the fastest. The op's workspace then grows to what the choice needs,
 * so the dry plan, the budget and every policy see it; the choice depends
 * on the shape only, never on the budget, so every policy runs the same
 * algorithm as keep and stays bit-identical to it. Choices are kept per
 * (GPU, cuDNN version, shape) in a file (algo_cache.h;
 * $XDG_CACHE_HOME/delta/cudnn-algos.tsv, or DELTA_CUDNN_CACHE=PATH, "" for
 * none), so later runs reuse them: the same algorithm, the same bits, no
 * timing. DELTA_CUDNN_FIND=0 turns timing off.
 *
 * Without a timed choice for a shape (timing off, or no memory for its
 * scratch buffers), cuDNN's heuristics (cudnnGet*Algorithm_v7, a pure
 * function of the shapes) are walked in their order and the first
 * qualifying algorithm that fits the op's declared workspace is taken.
 * Each answer, timed or not, is kept per (op type, dims, dtype, workspace
 * bytes), so a launch after the first costs a short search, no query and
 * no key formatting: the query costs far more host time than the launch.
 * When nothing qualifies the caller lowers the convolution itself.
 *
 * Launching: a BF16 convolution runs a kept execution plan of cuDNN's
 * backend API (cudnn_plan.c, where the choice by heuristics and by timing
 * is made the same way over the backend API's engine configurations): cuDNN
 * 9 rebuilds a legacy call's plan on every call, ~150 us of host time per
 * convolution on an H200, and BF16 steps are bound by the host. F32
 * convolutions, bound by the GPU, take the legacy calls below, whose timed
 * choices ran faster (dnn_uses_plans). The legacy calls also run a shape
 * that has no plan (legacy_ok says which). DELTA_CUDNN_API=plans runs F32
 * as plans too, DELTA_CUDNN_API=legacy neither.
 *
 * The legacy convolution API (deprecated in cuDNN 9, still shipped) is
 * used through function pointers looked up with dlsym; <cudnn.h> is only
 * needed at build time for its types (the Makefile defines
 * DELTA_HAVE_CUDNN_H when the toolkit has it; without it this file only
 * says cuDNN is not available). DELTA_CUDNN=0 in the environment turns it
 * off (docs/CUDA.md). */
#include "backend/algo_cache.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DELTA_HAVE_CUDNN_H
#include "backend/cuda/cudnn_impl.h"

#include <dlfcn.h>

#define MAX_ALGOS 16

void delta_cudnn_close(delta_cudnn *d) {
    if (!d) return;
    dnn_plans_free(d); /* before the handle and the library go */
    if (d->cd) d->f_cudnnDestroyConvolutionDescriptor(d->cd);
    if (d->wd) d->f_cudnnDestroyFilterDescriptor(d->wd);
    if (d->yd) d->f_cudnnDestroyTensorDescriptor(d->yd);
    if (d->xd) d->f_cudnnDestroyTensorDescriptor(d->xd);
    if (d->h) d->f_cudnnDestroy(d->h);
    if (d->lib) dlclose(d->lib);
    delta_algo_cache_free(d->tuned);
    free(d->choices);
    free(d);
}

delta_cudnn *delta_cudnn_open(cudaStream_t stream, const char *device,
                              char *why, size_t n) {
    const char *env = getenv("DELTA_CUDNN");
    if (env && !strcmp(env, "0")) {
        snprintf(why, n, "DELTA_CUDNN=0");
        return NULL;
    }
    delta_cudnn *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(why, n, "out of host memory");
        return NULL;
    }
    d->lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib) {
        const char *e = dlerror();
        snprintf(why, n, "libcudnn.so.9 not found (%s)", e ? e : "dlopen");
        free(d);
        return NULL;
    }
#define DNN_BIND(name)                                                     \
    *(void **)&d->f_##name = dlsym(d->lib, #name);                         \
    if (!d->f_##name) {                                                    \
        snprintf(why, n, "libcudnn.so.9 has no %s", #name);               \
        dlclose(d->lib);                                                   \
        free(d);                                                           \
        return NULL;                                                       \
    }
    DNN_FUNCS(DNN_BIND)
#undef DNN_BIND
    d->version = d->f_cudnnGetVersion();
    if (d->version < 90000) {
        snprintf(why, n, "cuDNN %zu is older than 9", d->version);
        dlclose(d->lib);
        free(d);
        return NULL;
    }
    cudnnStatus_t st = d->f_cudnnCreate(&d->h);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnSetStream(d->h, stream);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnCreateTensorDescriptor(&d->xd);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnCreateTensorDescriptor(&d->yd);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnCreateFilterDescriptor(&d->wd);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnCreateConvolutionDescriptor(&d->cd);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, n, "cuDNN setup failed (status %d)", (int)st);
        delta_cudnn_close(d);
        return NULL;
    }
    d->stream = stream;
    const char *mb = getenv("DELTA_CUDNN_WORKSPACE_MB");
    long cap_mb = mb && *mb ? strtol(mb, NULL, 10) : 512;
    d->ws_cap = (size_t)(cap_mb > 0 ? cap_mb : 0) << 20;
    const char *find = getenv("DELTA_CUDNN_FIND");
    d->find = !(find && !strcmp(find, "0"));
    const char *api = getenv("DELTA_CUDNN_API");
    /* BF16 as plans by default (its steps are bound by the host, whose
     * legacy calls cost ~150 us each); F32 by the legacy calls, whose timed
     * choices ran ResNet-50's fp32 step 2-3% faster on the H200 than the
     * plans' (0.0872-0.0882 s against 0.0892-0.0904), the GPU setting the
     * pace there */
    d->plans_bf16 = !(api && !strcmp(api, "legacy"));
    d->plans_f32 = api && !strcmp(api, "plans");
    const char *log = getenv("DELTA_CUDNN_LOG");
    d->log = log && !strcmp(log, "1");
    /* the cache: one GPU model and cuDNN version per device key */
    char path[4096], dev[512];
    const char *cache = getenv("DELTA_CUDNN_CACHE");
    if (cache) snprintf(path, sizeof path, "%s", cache);
    else delta_algo_cache_default_path("cudnn-algos.tsv", path, sizeof path);
    snprintf(dev, sizeof dev, "%s cuDNN %zu", device ? device : "?",
             d->version);
    d->tuned = delta_algo_cache_open(path, dev);
    if (!d->tuned) {
        snprintf(why, n, "out of host memory");
        delta_cudnn_close(d);
        return NULL;
    }
    return d;
}

size_t delta_cudnn_version(const delta_cudnn *d) { return d ? d->version : 0; }

/* Whether an algorithm's math keeps dt's rule: F32 plain fp32 (no TF32),
 * BF16 the tensor cores on the operands as they are (or plain math). */
static bool math_ok(delta_dtype dt, cudnnMathType_t m) {
    if (m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH) return true;
    return dt == DELTA_BF16 && m == CUDNN_TENSOR_OP_MATH;
}

/* Whether cuDNN takes the convolution at all: F32 or BF16, and sizes that
 * fit the legacy descriptors' ints (else cu_conv lowers it). */
static bool describable(const delta_conv_dims *g, delta_dtype dt) {
    const int64_t lim = 1 << 30;
    return g->n * g->c * g->h * g->w < lim && g->n * g->k * g->p * g->q < lim &&
           (dt == DELTA_F32 || dt == DELTA_BF16);
}

/* Describes x (n c h w), w (k c r s), y (n k p q) of dtype dt and the
 * convolution (summing in fp32 either way). */
static bool describe(delta_cudnn *d, const delta_conv_dims *g,
                     delta_dtype dt) {
    if (!describable(g, dt)) return false;
    cudnnDataType_t data =
        dt == DELTA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnStatus_t st = d->f_cudnnSetTensor4dDescriptor(
        d->xd, CUDNN_TENSOR_NCHW, data, (int)g->n, (int)g->c, (int)g->h,
        (int)g->w);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnSetTensor4dDescriptor(d->yd, CUDNN_TENSOR_NCHW, data,
                                             (int)g->n, (int)g->k, (int)g->p,
                                             (int)g->q);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnSetFilter4dDescriptor(d->wd, data, CUDNN_TENSOR_NCHW,
                                             (int)g->k, (int)g->c, (int)g->r,
                                             (int)g->s);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnSetConvolution2dDescriptor(
            d->cd, (int)g->pad, (int)g->pad, (int)g->stride, (int)g->stride,
            1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnSetConvolutionMathType(
            d->cd, dt == DELTA_BF16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    return st == CUDNN_STATUS_SUCCESS;
}

/* The first qualifying entry of a heuristics list (same fields in the
 * three perf structs). */
#define PICK(perf, got, dt, ws_bytes, out)                                 \
    for (int i_ = 0; i_ < (got) && (out) < 0; i_++)                        \
        if ((perf)[i_].status == CUDNN_STATUS_SUCCESS &&                   \
            (perf)[i_].determinism == CUDNN_DETERMINISTIC &&               \
            (perf)[i_].memory <= (ws_bytes) &&                             \
            math_ok((dt), (perf)[i_].mathType))                            \
            (out) = i_;

/* Asks the heuristics (descriptors already set) for type's algorithm:
 * *algo -1 when none qualifies; false when the query itself failed. */
static bool query(delta_cudnn *d, delta_op_type type, delta_dtype dt,
                  size_t ws_bytes, int *algo, size_t *memory) {
    int got = 0, pick = -1;
    cudnnStatus_t st;
    *algo = -1;
    *memory = 0;
    if (type == DELTA_OP_CONV2D) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
        st = d->f_cudnnGetConvolutionForwardAlgorithm_v7(
            d->h, d->xd, d->wd, d->cd, d->yd, MAX_ALGOS, &got, perf);
        if (st != CUDNN_STATUS_SUCCESS) return false;
        PICK(perf, got, dt, ws_bytes, pick)
        if (pick >= 0) *algo = (int)perf[pick].algo, *memory = perf[pick].memory;
    } else if (type == DELTA_OP_CONV2D_DX) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
        st = d->f_cudnnGetConvolutionBackwardDataAlgorithm_v7(
            d->h, d->wd, d->yd, d->cd, d->xd, MAX_ALGOS, &got, perf);
        if (st != CUDNN_STATUS_SUCCESS) return false;
        PICK(perf, got, dt, ws_bytes, pick)
        if (pick >= 0) *algo = (int)perf[pick].algo, *memory = perf[pick].memory;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
        st = d->f_cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            d->h, d->xd, d->yd, d->cd, d->wd, MAX_ALGOS, &got, perf);
        if (st != CUDNN_STATUS_SUCCESS) return false;
        PICK(perf, got, dt, ws_bytes, pick)
        if (pick >= 0) *algo = (int)perf[pick].algo, *memory = perf[pick].memory;
    }
    return true;
}

/* The key of a timed choice: the API (a plan's rank in the backend API's
 * heuristics list and a legacy algorithm are different numbers), op type,
 * dtype, dims and the workspace cap. */
static void tune_key(const delta_cudnn *d, delta_op_type type,
                     const delta_conv_dims *g, delta_dtype dt, size_t cap,
                     char *buf, size_t n) {
    snprintf(buf, n,
             "%s%s %s %lld %lld %lld %lld %lld %lld %lld %lld %lld cap %zu",
             dnn_uses_plans(d, dt) ? "plan " : "", delta_op_type_name(type),
             delta_dtype_name(dt), (long long)g->n,
             (long long)g->c, (long long)g->h, (long long)g->w,
             (long long)g->k, (long long)g->r, (long long)g->s,
             (long long)g->stride, (long long)g->pad, cap);
}

/* The timed pick from a Find list (sorted fastest first; same fields in
 * the three perf structs): among deterministic algorithms of dt's math
 * within cap, the fastest, or the one needing the least workspace among
 * those within 10% of it. */
#define PICK_TIMED(perf, got, dt, cap, algo, memory)                       \
    do {                                                                   \
        float best_ = -1;                                                  \
        for (int i_ = 0; i_ < (got); i_++) {                               \
            if ((perf)[i_].status != CUDNN_STATUS_SUCCESS ||               \
                (perf)[i_].determinism != CUDNN_DETERMINISTIC ||           \
                (perf)[i_].memory > (cap) ||                               \
                !math_ok((dt), (perf)[i_].mathType))                       \
                continue;                                                  \
            if (best_ < 0) best_ = (perf)[i_].time;                        \
            if ((perf)[i_].time > best_ * 1.10f) break;                    \
            if (*(algo) < 0 || (perf)[i_].memory < *(memory)) {            \
                *(algo) = (int)(perf)[i_].algo;                            \
                *(memory) = (perf)[i_].memory;                             \
            }                                                              \
        }                                                                  \
    } while (0)

bool dnn_scratch_get(delta_cudnn *d, const delta_conv_dims *g,
                     delta_dtype dt, size_t cap, dnn_scratch *s) {
    size_t e = dnn_elem_bytes(dt);
    size_t xb = (size_t)(g->n * g->c * g->h * g->w) * e;
    size_t wb = (size_t)(g->k * g->c * g->r * g->s) * e;
    size_t yb = (size_t)(g->n * g->k * g->p * g->q) * e;
    *s = (dnn_scratch){0};
    bool ok = cudaMalloc(&s->x, xb) == cudaSuccess &&
              cudaMalloc(&s->w, wb) == cudaSuccess &&
              cudaMalloc(&s->y, yb) == cudaSuccess &&
              (cap == 0 || cudaMalloc(&s->ws, cap) == cudaSuccess);
    ok = ok && cudaMemsetAsync(s->x, 0x3c, xb, d->stream) == cudaSuccess &&
         cudaMemsetAsync(s->w, 0x3c, wb, d->stream) == cudaSuccess &&
         cudaMemsetAsync(s->y, 0x3c, yb, d->stream) == cudaSuccess;
    if (!ok) dnn_scratch_put(d, s);
    return ok;
}

void dnn_scratch_put(delta_cudnn *d, dnn_scratch *s) {
    (void)cudaStreamSynchronize(d->stream);
    cudaFree(s->x);
    cudaFree(s->w);
    cudaFree(s->y);
    cudaFree(s->ws);
    *s = (dnn_scratch){0};
    (void)cudaGetLastError(); /* a failed cudaMalloc is not an error here */
}

/* Times type's algorithms for g (descriptors set for dt) on scratch
 * buffers: *algo -1 when none qualifies; false when the buffers or the
 * timing could not be had (then nothing is kept: heuristics decide). */
static bool time_algos(delta_cudnn *d, delta_op_type type,
                       const delta_conv_dims *g, delta_dtype dt, size_t cap,
                       int *algo, size_t *memory) {
    dnn_scratch sc;
    const bool got_scratch = dnn_scratch_get(d, g, dt, cap, &sc);
    bool ok = got_scratch;
    void *x = sc.x, *w = sc.w, *y = sc.y, *ws = sc.ws;
    int got = 0;
    *algo = -1;
    *memory = 0;
    if (ok && type == DELTA_OP_CONV2D) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
        ok = d->f_cudnnFindConvolutionForwardAlgorithmEx(
                 d->h, d->xd, x, d->wd, w, d->cd, d->yd, y, MAX_ALGOS, &got,
                 perf, ws, cap) == CUDNN_STATUS_SUCCESS;
        if (ok) PICK_TIMED(perf, got, dt, cap, algo, memory);
    } else if (ok && type == DELTA_OP_CONV2D_DX) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
        ok = d->f_cudnnFindConvolutionBackwardDataAlgorithmEx(
                 d->h, d->wd, w, d->yd, y, d->cd, d->xd, x, MAX_ALGOS, &got,
                 perf, ws, cap) == CUDNN_STATUS_SUCCESS;
        if (ok) PICK_TIMED(perf, got, dt, cap, algo, memory);
    } else if (ok) {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
        ok = d->f_cudnnFindConvolutionBackwardFilterAlgorithmEx(
                 d->h, d->xd, x, d->yd, y, d->cd, d->wd, w, MAX_ALGOS, &got,
                 perf, ws, cap) == CUDNN_STATUS_SUCCESS;
        if (ok) PICK_TIMED(perf, got, dt, cap, algo, memory);
    }
    if (got_scratch) dnn_scratch_put(d, &sc);
    return ok;
}

/* The workspace a timed choice may use: the larger of the op's declared
 * workspace, DELTA_CUDNN_WORKSPACE_MB and the bytes of the convolution's
 * own operands (x, w, y), so a choice never more than doubles what the op
 * needs at once and the minimum budget stays near the unfitted one.
 * Measured on an H200, ResNet-50 b64 keep (fp32), a cap without the
 * operands' part: 128 MiB 92.0 ms a step, 512 MiB 89.6, 2 GiB 88.1 (a
 * 743 MB workspace); with it: 128 MiB 88.9 ms, 512 MiB 86.2 (the default:
 * the minimum budget unchanged at 588 MiB), 1 GiB 86.9 (the minimum budget
 * up to 954 MiB). */
static size_t tune_cap(const delta_cudnn *d, const delta_conv_dims *g,
                       delta_dtype dt, size_t declared) {
    size_t operands = (size_t)(g->n * g->c * g->h * g->w +
                               g->k * g->c * g->r * g->s +
                               g->n * g->k * g->p * g->q) *
                      dnn_elem_bytes(dt);
    size_t cap = declared > d->ws_cap ? declared : d->ws_cap;
    return operands > cap ? operands : cap;
}

/* Whether the legacy calls may run a convolution of type in dt: F32
 * always; BF16 but for the weight gradient. The legacy API does not say
 * whether an algorithm sums in reduced precision (the backend API's
 * engines do, and cudnn_plan.c refuses those), and on the H200 cudnnFind's
 * timed BF16 weight-gradient choice once came out 15% off a small value
 * (0.00077 against the CPU's 0.00089, beyond the one-rounding tolerance:
 * partial sums over N x P x Q rounded, by the look of it). Its forward and
 * data-gradient choices stayed within the tolerance in every run, and no
 * BF16 forward convolution of ResNet-50 got a plan (no engine
 * configuration qualified: DELTA_CUDNN_LOG=1 says why), so they keep the
 * legacy calls; a BF16 weight gradient without a plan runs widened, as
 * fp32 (cu_conv.cu). */
static bool legacy_ok(delta_op_type type, delta_dtype dt) {
    return dt == DELTA_F32 || type != DELTA_OP_CONV2D_DW;
}

size_t delta_cudnn_tune(delta_cudnn *d, delta_op_type type,
                        const delta_conv_dims *g, delta_dtype dt,
                        size_t declared) {
    if (!d || !d->find || !delta_cuda_is_conv(type) ||
        (!dnn_uses_plans(d, dt) && !legacy_ok(type, dt)) ||
        !describe(d, g, dt))
        return declared;
    size_t cap = tune_cap(d, g, dt, declared);
    char key[256];
    tune_key(d, type, g, dt, cap, key, sizeof key);
    int algo;
    size_t memory;
    if (!delta_algo_cache_get(d->tuned, key, &algo, &memory)) {
        bool timed = dnn_uses_plans(d, dt)
                         ? dnn_plan_time(d, type, g, dt, cap, &algo, &memory)
                         : time_algos(d, type, g, dt, cap, &algo, &memory);
        if (!timed) return declared;
        delta_algo_cache_put(d->tuned, key, algo, memory);
    }
    return algo >= 0 && memory > declared ? memory : declared;
}

bool delta_cudnn_save(delta_cudnn *d, char *err, size_t n) {
    return !d || delta_algo_cache_save(d->tuned, err, n);
}

/* cuDNN 9 checks the arguments against the algorithm (or plan) before it
 * launches anything; these statuses (the BAD_PARAM and NOT_SUPPORTED
 * families) say it refused, with nothing written. */
static bool refused(cudnnStatus_t st) {
    return (int)st >= (int)CUDNN_STATUS_BAD_PARAM &&
           (int)st < (int)CUDNN_STATUS_NOT_SUPPORTED + 1000;
}

/* The timed choice for (type, g, dt) when it fits ws_bytes. It was timed
 * under cap = tune_cap(declared) and the op's workspace became
 * max(declared, its need) <= cap, so tune_cap(ws_bytes) is that cap
 * again. */
static bool timed_choice(delta_cudnn *d, delta_op_type type,
                         const delta_conv_dims *g, delta_dtype dt,
                         size_t ws_bytes, int *algo, size_t *memory) {
    char key[256];
    tune_key(d, type, g, dt, tune_cap(d, g, dt, ws_bytes), key, sizeof key);
    return delta_algo_cache_get(d->tuned, key, algo, memory) && *algo >= 0 &&
           *memory <= ws_bytes;
}

/* The kept answer for (type, g, dt, ws_bytes) (descriptors set), finding
 * it the first time: the timed choice, else the heuristics'. NULL when the
 * query failed. A full or failed keep asks again next time, which gives
 * the same answer. */
static algo_choice *choose(delta_cudnn *d, delta_op_type type,
                           const delta_conv_dims *g, delta_dtype dt,
                           size_t ws_bytes, algo_choice *tmp) {
    for (int i = 0; i < d->n_choices; i++) {
        algo_choice *c = &d->choices[i];
        if (c->type == type && c->dt == dt && c->ws_bytes == ws_bytes &&
            !memcmp(&c->g, g, sizeof *g))
            return c;
    }
    *tmp = (algo_choice){.type = type, .dt = dt, .g = *g,
                         .ws_bytes = ws_bytes};
    if (!timed_choice(d, type, g, dt, ws_bytes, &tmp->algo, &tmp->memory) &&
        !query(d, type, dt, ws_bytes, &tmp->algo, &tmp->memory))
        return NULL;
    if (!delta_grow((void **)&d->choices, &d->cap_choices, d->n_choices + 1,
                    sizeof *d->choices, 64))
        return tmp;
    d->choices[d->n_choices] = *tmp;
    return &d->choices[d->n_choices++];
}

/* The backend API's route (cudnn_plan.c): false, with nothing written,
 * when the shape has no plan, or cuDNN refused it (then never again). The
 * plan's choice: the timed rank when this workspace has one (beta 0 only:
 * a graph with another beta lists its own configurations). */
static bool run_plan(delta_cudnn *d, delta_op_type type,
                     const delta_conv_dims *g, delta_dtype dt, const void *a,
                     const void *b, void *out, float beta, void *ws,
                     size_t ws_bytes) {
    dnn_plan *p = dnn_plan_find(d, type, g, dt, ws_bytes, beta);
    if (!p) { /* the first time: a short search, no query, after it */
        int rank = -1;
        size_t memory = 0;
        if (beta != 0.0f ||
            !timed_choice(d, type, g, dt, ws_bytes, &rank, &memory))
            rank = -1;
        p = dnn_plan_add(d, type, g, dt, ws_bytes, beta, rank, memory);
    }
    if (!p || !p->plan) return false;
    cudnnStatus_t st = dnn_plan_run(d, p, a, b, out, p->memory ? ws : NULL);
    if (refused(st)) {
        d->f_cudnnBackendDestroyDescriptor(p->plan);
        p->plan = NULL;
        return false;
    }
    DELTA_ASSERTF(st == CUDNN_STATUS_SUCCESS, "cuDNN plan (%s, %s): status %d",
                  delta_op_type_name(type), delta_dtype_name(dt), (int)st);
    return true;
}

bool delta_cudnn_conv(delta_cudnn *d, delta_op_type type,
                      const delta_conv_dims *g, delta_dtype dt,
                      const void *a, const void *b, void *out, float beta,
                      void *ws, size_t ws_bytes) {
    if (!d || !delta_cuda_is_conv(type) || !describable(g, dt)) return false;
    if (!ws) ws_bytes = 0;
    if (dnn_uses_plans(d, dt) &&
        run_plan(d, type, g, dt, a, b, out, beta, ws, ws_bytes))
        return true;
    if (!legacy_ok(type, dt) || !describe(d, g, dt)) return false;
    algo_choice tmp;
    algo_choice *c = choose(d, type, g, dt, ws_bytes, &tmp);
    if (!c || c->algo < 0) return false;
    /* the compute type is fp32 for both dtypes: fp32 scaling factors */
    const float one = 1.0f;
    cudnnStatus_t st;
    if (type == DELTA_OP_CONV2D) /* a = x, b = w, out = y */
        st = d->f_cudnnConvolutionForward(
            d->h, &one, d->xd, a, d->wd, b, d->cd,
            (cudnnConvolutionFwdAlgo_t)c->algo, ws, c->memory, &beta, d->yd,
            out);
    else if (type == DELTA_OP_CONV2D_DX) /* a = dy, b = w, out = dx */
        st = d->f_cudnnConvolutionBackwardData(
            d->h, &one, d->wd, b, d->yd, a, d->cd,
            (cudnnConvolutionBwdDataAlgo_t)c->algo, ws, c->memory, &beta,
            d->xd, out);
    else /* a = x, b = dy, out = dw */
        st = d->f_cudnnConvolutionBackwardFilter(
            d->h, &one, d->xd, a, d->yd, b, d->cd,
            (cudnnConvolutionBwdFilterAlgo_t)c->algo, ws, c->memory, &beta,
            d->wd, out);
    /* cuDNN 9 checks the arguments against the algorithm before it
     * launches anything, and a heuristics answer can still be refused
     * there (seen on an H200: BF16 backward data with 3 input channels,
     * status 2000). Refused (the BAD_PARAM and NOT_SUPPORTED families,
     * 2000-3999): nothing was written, so the shape is marked as having no
     * algorithm and lowered by the caller, now and every later time; the
     * answer depends on the shape only, so every policy takes the same
     * route. Any other failure came after a launch and is a bug. */
    if (refused(st)) {
        c->algo = -1; /* kept, or tmp when it could not be */
        return false;
    }
    DELTA_ASSERTF(st == CUDNN_STATUS_SUCCESS, "cuDNN convolution (%s, %s): "
                  "status %d", delta_op_type_name(type),
                  delta_dtype_name(dt), (int)st);
    return true;
}

#else /* no <cudnn.h> at build time */

struct delta_cudnn {
    int unused;
};

delta_cudnn *delta_cudnn_open(cudaStream_t stream, const char *device,
                              char *why, size_t n) {
    (void)stream;
    (void)device;
    snprintf(why, n, "built without cudnn.h");
    return NULL;
}
void delta_cudnn_close(delta_cudnn *d) { (void)d; }
size_t delta_cudnn_version(const delta_cudnn *d) {
    (void)d;
    return 0;
}
size_t delta_cudnn_tune(delta_cudnn *d, delta_op_type type,
                        const delta_conv_dims *g, delta_dtype dt,
                        size_t declared) {
    (void)d; (void)type; (void)g; (void)dt;
    return declared;
}
bool delta_cudnn_save(delta_cudnn *d, char *err, size_t n) {
    (void)d; (void)err; (void)n;
    return true;
}
bool delta_cudnn_conv(delta_cudnn *d, delta_op_type type,
                      const delta_conv_dims *g, delta_dtype dt,
                      const void *a, const void *b, void *out, float beta,
                      void *ws, size_t ws_bytes) {
    (void)d; (void)type; (void)g; (void)dt; (void)a; (void)b; (void)out;
    (void)beta; (void)ws; (void)ws_bytes;
    return false;
}

#endif

/* ---- shared by both builds ------------------------------------------------ */

delta_conv_dims delta_conv_dims_of(const delta_op *op,
                                   const delta_tensor *const *in,
                                   const delta_tensor *const *out) {
    const int64_t *xs = op->type == DELTA_OP_CONV2D_DX ? out[0]->shape
                                                       : in[0]->shape;
    const int64_t *ws = op->type == DELTA_OP_CONV2D_DW ? out[0]->shape
                                                       : in[1]->shape;
    delta_conv_geom c = delta_conv_geom_of(xs, ws, op->a.stride, op->a.pad);
    return (delta_conv_dims){c.n, c.c, c.h, c.w, c.k, c.r, c.s, c.p, c.q,
                             c.stride, c.pad};
}
