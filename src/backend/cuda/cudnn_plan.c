/* Convolutions through cuDNN's backend API: one finalized execution plan
 * per (op type, shape, dtype, workspace, beta), made once and executed
 * with cudnnBackendExecute.
 *
 * Why: cuDNN 9 implements the legacy calls (cudnnConvolutionForward and
 * its two backward siblings) on top of this API and rebuilds their plan on
 * every call. On an H200, keep's BF16 ResNet-50 b64 step spent 24 ms of
 * host time in its 158 convolution launches (143-163 us each, against 17 us
 * for an SGD update), so the host, not the GPU, set the step's pace. A kept
 * plan costs a variant pack and an execute per launch.
 *
 * Which engine configuration: cuDNN's heuristics (mode A, a pure function
 * of the graph and the GPU) list configurations; one qualifies when it is
 * deterministic (so a recomputed convolution equals the first one bit for
 * bit) and keeps the dtype's math: F32 without tensor cores (no TF32, as
 * every cuBLAS call), without down-converted inputs and without reduced-
 * precision sums; BF16 on the tensor cores with fp32 sums. Timed
 * (dnn_plan_time, before a program is planned) the fastest qualifying
 * configuration among the first MAX_TIMED within the cap wins (by the
 * larger of its GPU and its host time: time_plan), or the one with the
 * least workspace within 10% of it; its rank in the heuristics
 * list is kept in the choices file. Untimed, the first qualifying one that
 * fits the op's workspace. Both depend on the shape only, so every policy
 * runs keep's plan. Tensors are described with 16-byte alignment, which
 * every arena tensor has, never with where one happens to lie.
 *
 * Any step that cuDNN refuses leaves the shape without a plan, and
 * cudnn_conv.c's legacy route (or, where that is not trusted, the widened
 * fp32 one) runs it: a bug here costs speed, not correctness. Plans run
 * BF16 convolutions; DELTA_CUDNN_API=plans adds F32, =legacy turns them
 * off. */
#ifdef DELTA_HAVE_CUDNN_H
#include "backend/cuda/cudnn_impl.h"
#include "core/grow.h"
#include "core/median.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TIMED 24  /* configurations timed per convolution */
#define TIMED_RUNS 5  /* executions timed per configuration, after one */
#define MAX_CONFIGS 64

typedef cudnnBackendDescriptor_t bdesc;

/* The descriptors of one convolution's operation graph. */
typedef struct dnn_graph {
    bdesc x, w, y, conv, op, graph;
} dnn_graph;

static void destroy(delta_cudnn *d, bdesc *b) {
    if (*b) d->f_cudnnBackendDestroyDescriptor(*b);
    *b = NULL;
}

static void graph_free(delta_cudnn *d, dnn_graph *g) {
    destroy(d, &g->graph);
    destroy(d, &g->op);
    destroy(d, &g->conv);
    destroy(d, &g->y);
    destroy(d, &g->w);
    destroy(d, &g->x);
}

/* set(d, desc, attribute, type, count, values): stops the chain at the
 * first failure (st holds it). */
#define SET(st, d, b, name, type, n, v)                                    \
    if ((st) == CUDNN_STATUS_SUCCESS)                                      \
    (st) = (d)->f_cudnnBackendSetAttribute((b), (name), (type), (n), (v))

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

/* A packed NCHW tensor of dims (a, b, c, e). */
static cudnnStatus_t tensor(delta_cudnn *d, bdesc *t, int64_t uid,
                            cudnnDataType_t data, int64_t a, int64_t b,
                            int64_t c, int64_t e) {
    cudnnStatus_t st =
        d->f_cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t);
    int64_t dims[4] = {a, b, c, e}, strides[4] = {b * c * e, c * e, e, 1};
    int64_t align = 16;
    SET(st, d, *t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
        &data);
    SET(st, d, *t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    SET(st, d, *t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    SET(st, d, *t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(st, d, *t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
        &align);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(*t);
    return st;
}

/* The operation's attribute names: x, w, y, conv, alpha, beta. */
typedef struct op_names {
    cudnnBackendDescriptorType_t kind;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
} op_names;

static op_names names_of(delta_op_type type) {
    if (type == DELTA_OP_CONV2D)
        return (op_names){CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    if (type == DELTA_OP_CONV2D_DX)
        return (op_names){
            CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    return (op_names){
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

/* The operation graph of one convolution of type on g in dt: x (n c h w),
 * w (k c r s), y (n k p q), cross-correlation summed in fp32,
 * out = 1 * conv + beta * out. */
static cudnnStatus_t graph_of(delta_cudnn *d, delta_op_type type,
                              const delta_conv_dims *g, delta_dtype dt,
                              float beta, dnn_graph *gr) {
    *gr = (dnn_graph){0};
    cudnnDataType_t data =
        dt == DELTA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnStatus_t st = tensor(d, &gr->x, UID_X, data, g->n, g->c, g->h, g->w);
    if (st == CUDNN_STATUS_SUCCESS)
        st = tensor(d, &gr->w, UID_W, data, g->k, g->c, g->r, g->s);
    if (st == CUDNN_STATUS_SUCCESS)
        st = tensor(d, &gr->y, UID_Y, data, g->n, g->k, g->p, g->q);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendCreateDescriptor(
            CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &gr->conv);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, one[2] = {1, 1}, stride[2] = {g->stride, g->stride},
            pad[2] = {g->pad, g->pad};
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        CUDNN_TYPE_DATA_TYPE, 1, &comp);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
        CUDNN_TYPE_INT64, 1, &dims);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64,
        2, one);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        CUDNN_TYPE_INT64, 2, stride);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
        CUDNN_TYPE_INT64, 2, pad);
    SET(st, d, gr->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
        CUDNN_TYPE_INT64, 2, pad);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(gr->conv);
    const op_names nm = names_of(type);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendCreateDescriptor(nm.kind, &gr->op);
    const float alpha = 1.0f;
    SET(st, d, gr->op, nm.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->x);
    SET(st, d, gr->op, nm.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->w);
    SET(st, d, gr->op, nm.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->y);
    SET(st, d, gr->op, nm.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->conv);
    SET(st, d, gr->op, nm.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(st, d, gr->op, nm.beta, CUDNN_TYPE_FLOAT, 1, &beta);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(gr->op);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendCreateDescriptor(
            CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &gr->graph);
    SET(st, d, gr->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
        1, &d->h);
    SET(st, d, gr->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->op);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(gr->graph);
    if (st != CUDNN_STATUS_SUCCESS) graph_free(d, gr);
    return st;
}

/* The heuristics' configurations for gr, in their order, into cfgs (the
 * caller destroys them): their count, 0 on failure. */
static int configs_of(delta_cudnn *d, const dnn_graph *gr, bdesc *cfgs,
                      int max) {
    bdesc heur = NULL;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnStatus_t st = d->f_cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    SET(st, d, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gr->graph);
    SET(st, d, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
        &mode);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(heur);
    int64_t avail = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                           &avail, NULL);
    int n = avail < max ? (int)avail : max, made = 0;
    for (; st == CUDNN_STATUS_SUCCESS && made < n; made++)
        st = d->f_cudnnBackendCreateDescriptor(
            CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]);
    int64_t got = 0;
    if (st == CUDNN_STATUS_SUCCESS && n > 0)
        st = d->f_cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
                                           &got, cfgs);
    destroy(d, &heur);
    if (st != CUDNN_STATUS_SUCCESS || got < n) {
        for (int i = 0; i < made; i++) destroy(d, &cfgs[i]);
        return 0;
    }
    return n;
}

/* Whether cfg's engine keeps dt's math deterministically (see the top).
 * *notes_seen (when not NULL) gains the engine's numerical notes as bits. */
static bool qualifies_noting(delta_cudnn *d, bdesc cfg, delta_dtype dt,
                             unsigned *notes_seen) {
    bdesc engine = NULL;
    cudnnStatus_t st = d->f_cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine);
    int64_t n = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &n, &engine);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendGetAttribute(
            engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes);
    destroy(d, &engine);
    if (st != CUDNN_STATUS_SUCCESS) return false;
    bool ok = true;
    for (int64_t i = 0; i < nn; i++) {
        cudnnBackendNumericalNote_t t = notes[i];
        if (notes_seen) *notes_seen |= 1u << (unsigned)t;
        if (t == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ||
            t == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
            t == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
            (t == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && dt != DELTA_BF16))
            ok = false;
    }
    return ok;
}

static bool qualifies(delta_cudnn *d, bdesc cfg, delta_dtype dt) {
    return qualifies_noting(d, cfg, dt, NULL);
}

/* A finalized plan of cfg and the workspace it needs; NULL when refused. */
static bdesc plan_of(delta_cudnn *d, bdesc cfg, size_t *memory) {
    bdesc plan = NULL;
    cudnnStatus_t st = d->f_cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    SET(st, d, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
        &d->h);
    SET(st, d, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(plan);
    int64_t ws = 0, n = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendGetAttribute(
            plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
            1, &n, &ws);
    if (st != CUDNN_STATUS_SUCCESS || ws < 0) {
        destroy(d, &plan);
        return NULL;
    }
    *memory = (size_t)ws;
    return plan;
}

/* Executes plan on x, w, y (by uid) with ws. */
static cudnnStatus_t execute(delta_cudnn *d, bdesc plan, void *x, void *w,
                             void *y, void *ws) {
    bdesc vp = NULL;
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {x, w, y};
    cudnnStatus_t st = d->f_cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    SET(st, d, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
        uids);
    SET(st, d, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
        3, ptrs);
    SET(st, d, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
        &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = d->f_cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = d->f_cudnnBackendExecute(d->h, plan, vp);
    destroy(d, &vp);
    return st;
}

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* What one execution of plan costs a step, in ms, after a first one: the
 * larger of its GPU time and the host time of the execute call, each the
 * median of TIMED_RUNS (a step overlaps the two, and whichever is longer
 * sets its pace; some engines do far more host work per launch than
 * others, ~60 against ~200 us measured on an H200). Negative when an
 * execution failed. */
static double time_plan(delta_cudnn *d, bdesc plan, const dnn_scratch *s) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    double gpu[TIMED_RUNS], host[TIMED_RUNS];
    bool ok = execute(d, plan, s->x, s->w, s->y, s->ws) ==
              CUDNN_STATUS_SUCCESS;
    for (int i = 0; ok && i < TIMED_RUNS; i++) {
        float ms = 0;
        ok = cudaEventRecord(e0, d->stream) == cudaSuccess;
        double h0 = host_ms();
        ok = ok && execute(d, plan, s->x, s->w, s->y, s->ws) ==
                       CUDNN_STATUS_SUCCESS;
        host[i] = host_ms() - h0;
        ok = ok && cudaEventRecord(e1, d->stream) == cudaSuccess &&
             cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        gpu[i] = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (!ok) return -1;
    double g = delta_median(gpu, TIMED_RUNS), h = delta_median(host, TIMED_RUNS);
    return g > h ? g : h;
}

bool dnn_plan_time(delta_cudnn *d, delta_op_type type,
                   const delta_conv_dims *g, delta_dtype dt, size_t cap,
                   int *rank, size_t *memory) {
    *rank = -1;
    *memory = 0;
    dnn_graph gr;
    if (graph_of(d, type, g, dt, 0.0f, &gr) != CUDNN_STATUS_SUCCESS)
        return false;
    bdesc cfgs[MAX_CONFIGS];
    int n = configs_of(d, &gr, cfgs, MAX_CONFIGS);
    dnn_scratch sc;
    bool ok = n > 0 && dnn_scratch_get(d, g, dt, cap, &sc);
    /* timed candidates: rank, time, workspace; then the PICK_TIMED rule */
    int ranks[MAX_TIMED], m = 0;
    double ms[MAX_TIMED];
    size_t mem[MAX_TIMED];
    for (int i = 0; ok && i < n && m < MAX_TIMED; i++) {
        size_t need = 0;
        if (!qualifies(d, cfgs[i], dt)) continue;
        bdesc plan = plan_of(d, cfgs[i], &need);
        if (!plan) continue;
        double t = need <= cap ? time_plan(d, plan, &sc) : -1;
        destroy(d, &plan);
        if (t < 0) continue;
        ranks[m] = i, ms[m] = t, mem[m] = need;
        m++;
    }
    double best = -1;
    for (int j = 0; j < m; j++)
        if (best < 0 || ms[j] < best) best = ms[j];
    for (int j = 0; j < m; j++)
        if (ms[j] <= best * 1.10 && (*rank < 0 || mem[j] < *memory))
            *rank = ranks[j], *memory = mem[j];
    if (ok) dnn_scratch_put(d, &sc);
    for (int i = 0; i < n; i++) destroy(d, &cfgs[i]);
    graph_free(d, &gr);
    (void)cudaGetLastError();
    return ok;
}

/* The plan for a new entry: see dnn_plan_add. */
static bdesc choose_plan(delta_cudnn *d, delta_op_type type,
                         const delta_conv_dims *g, delta_dtype dt,
                         size_t ws_bytes, float beta, int rank,
                         size_t memory, size_t *need) {
    dnn_graph gr;
    if (graph_of(d, type, g, dt, beta, &gr) != CUDNN_STATUS_SUCCESS)
        return NULL;
    bdesc cfgs[MAX_CONFIGS], plan = NULL;
    int n = configs_of(d, &gr, cfgs, MAX_CONFIGS);
    if (rank >= 0 && rank < n && memory <= ws_bytes &&
        qualifies(d, cfgs[rank], dt)) {
        plan = plan_of(d, cfgs[rank], need);
        if (plan && *need != memory) destroy(d, &plan); /* not the timed one */
    }
    /* for DELTA_CUDNN_LOG: how far the configurations got */
    int qualified = 0, built = 0;
    unsigned notes = 0;
    for (int i = 0; !plan && i < n; i++) {
        if (!qualifies_noting(d, cfgs[i], dt, &notes)) continue;
        qualified++;
        plan = plan_of(d, cfgs[i], need);
        built += plan != NULL;
        if (plan && *need > ws_bytes) destroy(d, &plan);
    }
    if (d->log && !plan)
        fprintf(stderr, "delta cudnn: no plan: %d configurations, %d "
                "qualified, %d built, none within %zu bytes; numerical notes "
                "seen (bits of cudnnBackendNumericalNote_t) 0x%x\n",
                n, qualified, built, ws_bytes, notes);
    for (int i = 0; i < n; i++) destroy(d, &cfgs[i]);
    graph_free(d, &gr);
    return plan;
}

dnn_plan *dnn_plan_find(delta_cudnn *d, delta_op_type type,
                        const delta_conv_dims *g, delta_dtype dt,
                        size_t ws_bytes, float beta) {
    for (int i = 0; i < d->n_plans; i++) {
        dnn_plan *p = &d->plans[i];
        if (p->type == type && p->dt == dt && p->ws_bytes == ws_bytes &&
            p->beta == beta && !memcmp(&p->g, g, sizeof *g))
            return p;
    }
    return NULL;
}

dnn_plan *dnn_plan_add(delta_cudnn *d, delta_op_type type,
                       const delta_conv_dims *g, delta_dtype dt,
                       size_t ws_bytes, float beta, int rank, size_t memory) {
    if (!delta_grow((void **)&d->plans, &d->cap_plans, d->n_plans + 1,
                    sizeof *d->plans, 64))
        return NULL;
    dnn_plan *p = &d->plans[d->n_plans++];
    *p = (dnn_plan){.type = type, .dt = dt, .g = *g, .ws_bytes = ws_bytes,
                    .beta = beta};
    p->plan = choose_plan(d, type, g, dt, ws_bytes, beta, rank, memory,
                          &p->memory);
    if (d->log) /* DELTA_CUDNN_LOG=1: which shapes got a plan */
        fprintf(stderr,
                "delta cudnn: %s %s n%lld c%lld %lldx%lld k%lld r%lld s%lld "
                "ws %zu beta %g: %s rank %d memory %zu\n",
                delta_op_type_name(type), delta_dtype_name(dt),
                (long long)g->n, (long long)g->c, (long long)g->h,
                (long long)g->w, (long long)g->k, (long long)g->r,
                (long long)g->s, ws_bytes, beta,
                p->plan ? "plan" : "NO PLAN", rank, p->memory);
    return p;
}

cudnnStatus_t dnn_plan_run(delta_cudnn *d, const dnn_plan *p, const void *a,
                           const void *b, void *out, void *ws) {
    /* the operands by role: x, w, y of the operation graph */
    void *x, *w, *y;
    if (p->type == DELTA_OP_CONV2D) /* a = x, b = w, out = y */
        x = (void *)a, w = (void *)b, y = out;
    else if (p->type == DELTA_OP_CONV2D_DX) /* a = dy, b = w, out = dx */
        x = out, w = (void *)b, y = (void *)a;
    else /* a = x, b = dy, out = dw */
        x = (void *)a, w = out, y = (void *)b;
    return execute(d, p->plan, x, w, y, ws);
}

void dnn_plans_free(delta_cudnn *d) {
    for (int i = 0; i < d->n_plans; i++) destroy(d, &d->plans[i].plan);
    free(d->plans);
    d->plans = NULL;
    d->n_plans = d->cap_plans = 0;
}

#endif /* DELTA_HAVE_CUDNN_H */
