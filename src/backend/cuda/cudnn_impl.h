/* What cudnn_conv.c (the legacy API: choosing, Find, the launch route) and
 * cudnn_plan.c (the backend API: one finalized execution plan per
 * convolution) share: the loaded library's entry points and the handle's
 * state. Private to those two files. */
#ifndef DELTA_CUDNN_IMPL_H
#define DELTA_CUDNN_IMPL_H

#include "backend/algo_cache.h"
#include "backend/cuda/cuda_kernels.h"

#include <cudnn.h>

/* every entry point used, as a function-pointer field f_NAME */
#define DNN_FUNCS(X)                                                       \
    X(cudnnGetVersion) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)    \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor)         \
    X(cudnnSetTensor4dDescriptor) X(cudnnCreateFilterDescriptor)           \
    X(cudnnDestroyFilterDescriptor) X(cudnnSetFilter4dDescriptor)          \
    X(cudnnCreateConvolutionDescriptor)                                    \
    X(cudnnDestroyConvolutionDescriptor)                                   \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType)      \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                              \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                         \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                       \
    X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData)             \
    X(cudnnConvolutionBackwardFilter)                                      \
    X(cudnnFindConvolutionForwardAlgorithmEx)                              \
    X(cudnnFindConvolutionBackwardDataAlgorithmEx)                         \
    X(cudnnFindConvolutionBackwardFilterAlgorithmEx)                       \
    X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor)       \
    X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute)                \
    X(cudnnBackendFinalize) X(cudnnBackendExecute)

#define DNN_FIELD(name) __typeof__(name) *f_##name;

/* One kept legacy answer (cudnn_conv.c). */
typedef struct algo_choice {
    delta_op_type type;
    delta_dtype dt;
    delta_conv_dims g;  /* int64 fields only: compared with memcmp */
    size_t ws_bytes;
    int algo;           /* the cuDNN algorithm enum's value; -1: none */
    size_t memory;      /* the workspace it needs */
} algo_choice;

/* One kept execution plan (cudnn_plan.c): for a convolution of type, dt,
 * g and beta run within ws_bytes of workspace. */
typedef struct dnn_plan {
    delta_op_type type;
    delta_dtype dt;
    delta_conv_dims g;
    size_t ws_bytes;
    float beta;
    cudnnBackendDescriptor_t plan; /* NULL: none; the legacy route runs */
    size_t memory;                 /* the workspace the plan uses */
} dnn_plan;

typedef struct delta_cudnn {
    void *lib;
    cudnnHandle_t h;
    cudaStream_t stream;
    delta_algo_cache *tuned; /* timed choices: key -> algo, workspace */
    size_t ws_cap;           /* DELTA_CUDNN_WORKSPACE_MB */
    bool find;               /* DELTA_CUDNN_FIND != 0 */
    bool plans_bf16;         /* BF16 as plans: DELTA_CUDNN_API != legacy */
    bool plans_f32;          /* F32 as plans: DELTA_CUDNN_API=plans */
    bool log;                /* DELTA_CUDNN_LOG=1: each new plan to stderr */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    size_t version;
    algo_choice *choices;
    int n_choices, cap_choices;
    dnn_plan *plans;
    int n_plans, cap_plans;
    DNN_FUNCS(DNN_FIELD)
} delta_cudnn;

/* Whether convolutions of dt run as backend-API plans (cudnn_plan.c)
 * rather than the legacy calls. */
static inline bool dnn_uses_plans(const delta_cudnn *d, delta_dtype dt) {
    return dt == DELTA_BF16 ? d->plans_bf16 : d->plans_f32;
}

/* The bytes of one element of dt (F32 or BF16). */
static inline size_t dnn_elem_bytes(delta_dtype dt) {
    return dt == DELTA_BF16 ? 2 : 4;
}

/* Scratch operands for timing a convolution of g in dt: x, w, y filled
 * with an ordinary number (0x3c bytes: 0.0115 in fp32 and BF16; zeros can
 * time faster) and a workspace of cap bytes. False when the memory could
 * not be had (everything freed again). */
typedef struct dnn_scratch {
    void *x, *w, *y, *ws;
} dnn_scratch;
bool dnn_scratch_get(delta_cudnn *d, const delta_conv_dims *g,
                     delta_dtype dt, size_t cap, dnn_scratch *s);
void dnn_scratch_put(delta_cudnn *d, dnn_scratch *s);

/* ---- cudnn_plan.c ---- */

/* Times the backend API's qualifying engine configurations for (type, g,
 * dt) within cap on scratch buffers: *rank (the configuration's place in
 * cuDNN's heuristics list) and *memory of the fastest, or of the one with
 * the least workspace within 10% of it; *rank -1 when none qualifies.
 * False when the graph or the buffers could not be had. */
bool dnn_plan_time(delta_cudnn *d, delta_op_type type,
                   const delta_conv_dims *g, delta_dtype dt, size_t cap,
                   int *rank, size_t *memory);

/* The kept plan for (type, g, dt, ws_bytes, beta), or NULL. */
dnn_plan *dnn_plan_find(delta_cudnn *d, delta_op_type type,
                        const delta_conv_dims *g, delta_dtype dt,
                        size_t ws_bytes, float beta);

/* Makes and keeps the plan for (type, g, dt, ws_bytes, beta): the
 * configuration of rank `rank` when rank >= 0 and it needs exactly
 * `memory` <= ws_bytes, else the first qualifying one within ws_bytes.
 * NULL on out of memory; an entry whose plan is NULL has none. */
dnn_plan *dnn_plan_add(delta_cudnn *d, delta_op_type type,
                       const delta_conv_dims *g, delta_dtype dt,
                       size_t ws_bytes, float beta, int rank, size_t memory);

/* Runs p on a, b -> out (the operands of delta_cudnn_conv) with ws. */
cudnnStatus_t dnn_plan_run(delta_cudnn *d, const dnn_plan *p, const void *a,
                           const void *b, void *out, void *ws);

void dnn_plans_free(delta_cudnn *d);

#endif
