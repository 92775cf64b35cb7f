/* Internal view of the graph: the tensor and op records behind the public
 * handles of delta/graph.h. The runtime, executors and kernels read these;
 * only src/graph/ writes them. */
#ifndef DELTA_GRAPH_IMPL_H
#define DELTA_GRAPH_IMPL_H

#include "delta/graph.h"

/* Every op type. Forward ops first, then the backward-only ones, then the
 * in-place updates. Names are in op_type_names (ops.c). */
typedef enum delta_op_type {
    /* forward (some are also used by backward passes) */
    DELTA_OP_MATMUL = 0,
    DELTA_OP_LINEAR,
    DELTA_OP_CONV2D,
    DELTA_OP_BATCHNORM,      /* ins: x, gamma, beta[, rmean, rvar]
                                outs: y, mean (C), var (C, biased) */
    DELTA_OP_LAYERNORM,      /* ins: x[, gamma, beta]
                                outs: y, mean (rows), rstd (rows) */
    DELTA_OP_RELU,
    DELTA_OP_GELU,
    DELTA_OP_MAXPOOL2D,
    DELTA_OP_AVGPOOL2D,
    DELTA_OP_GLOBAL_AVGPOOL,
    DELTA_OP_ADD,
    DELTA_OP_MUL,
    DELTA_OP_SCALE,
    DELTA_OP_SUM,
    DELTA_OP_EMBEDDING,
    DELTA_OP_SOFTMAX,
    DELTA_OP_DROPOUT,
    DELTA_OP_CROSS_ENTROPY,
    DELTA_OP_RESHAPE,        /* a view: no kernel, no data moved */
    DELTA_OP_TRANSPOSE,
    DELTA_OP_SPLIT,
    DELTA_OP_CONCAT,
    DELTA_OP_FILL,           /* out filled with attrs.value */
    /* backward */
    DELTA_OP_SUM_LEADING,    /* (..., S) -> (S): sums over leading dims */
    DELTA_OP_CONV2D_DX,      /* ins: dy, w          outs: dx */
    DELTA_OP_CONV2D_DW,      /* ins: x, dy          outs: dw */
    DELTA_OP_BIAS_GRAD_NCHW, /* ins: dy (N,K,P,Q)   outs: db (K) */
    DELTA_OP_BATCHNORM_BWD,  /* ins: x, gamma, mean, var, dy; outs: dx, dgamma, dbeta */
    DELTA_OP_LAYERNORM_BWD,  /* ins: x, mean, rstd, dy[, gamma]
                                outs: dx[, dgamma, dbeta] */
    DELTA_OP_RELU_BWD,       /* ins: y, dy */
    DELTA_OP_GELU_BWD,       /* ins: x, dy */
    DELTA_OP_MAXPOOL2D_BWD,  /* ins: x, dy */
    DELTA_OP_AVGPOOL2D_BWD,  /* ins: dy; out shape from attrs */
    DELTA_OP_GLOBAL_AVGPOOL_BWD, /* ins: dy (N,C); outs: dx (N,C,H,W) */
    DELTA_OP_BROADCAST,      /* ins: scalar; outs: tensor filled with it */
    DELTA_OP_EMBEDDING_BWD,  /* ins: ids, dy; outs: dtable */
    DELTA_OP_SOFTMAX_BWD,    /* ins: y, dy */
    DELTA_OP_DROPOUT_BWD,    /* ins: dy; mask from attrs.fwd_op's RNG key */
    DELTA_OP_CROSS_ENTROPY_BWD, /* ins: logits, targets, dloss */
    /* in-place updates of persistent tensors */
    DELTA_OP_BN_RUNNING_UPDATE, /* ins: mean, var, rmean, rvar; outs: rmean, rvar */
    DELTA_OP_SGD_UPDATE,     /* ins: p, g[, buf][, lr][, coef];
                                outs: p[, buf] */
    DELTA_OP_ADAMW_UPDATE,   /* ins: p, g, m, v[, lr][, coef];
                                outs: p, m, v */
    /* precision: forward, and its own backward (the other direction) */
    DELTA_OP_CAST,           /* ins: x; outs: y of dtype attrs.dtype */
    /* fused batch norm (fuse.c; F32): the bits of the chains they replace */
    DELTA_OP_BATCHNORM_RELU, /* ins: x, gamma, beta[, rmean, rvar]
                                outs: y = relu(batchnorm(x)), mean, var */
    DELTA_OP_BATCHNORM_ADD_RELU, /* ins: x, gamma, beta, r[, rmean, rvar]
                                outs: y = relu(batchnorm(x) + r), mean, var */
    /* data parallel (dp.c): collectives over the ranks, run on the
     * backend's communication stream; never recomputed */
    DELTA_OP_ALLREDUCE,      /* ins: gradients g0..gn-1 (n <= 4, F32);
                                outs: their means over the ranks */
    DELTA_OP_REDUCE_SCATTER, /* ZeRO-1. ins: gradients; outs: the means of
                                those this rank owns (attrs.owner[i]) */
    DELTA_OP_ALLGATHER,      /* ZeRO-1. ins: parameters; outs: the same,
                                in place: each owner's values to all */
    /* gradient clipping by global norm (optim.c) */
    DELTA_OP_GRAD_SUMSQ,     /* ins: [acc scalar,] g0..; outs: scalar
                                acc + sum of squares of every g */
    DELTA_OP_CLIP_COEF,      /* ins: sum of squares; outs: norm, coef */
    DELTA_OP_TYPE_COUNT
} delta_op_type;

/* Attributes of an op; each type reads only its own fields. */
typedef struct delta_op_attrs {
    int trans_a, trans_b;  /* matmul */
    int w_in_out;          /* linear: the weight is (IN, OUT), used as it is
                              (HF's Conv1D), not (OUT, IN) transposed */
    float alpha;           /* matmul scale */
    int k, stride, pad;    /* conv (k unused), pools */
    int dim;               /* split, concat, transpose (d0) */
    int dim1;              /* transpose (d1) */
    int causal;            /* softmax */
    int has_mask;          /* softmax: ins[1] is the key mask */
    int ignore_index;      /* cross entropy */
    float eps, momentum;   /* norms */
    double count;          /* bn running update: elements per channel */
    float p;               /* dropout */
    float value;           /* fill, scale */
    int fwd_op;            /* dropout_bwd: the forward op keying the RNG;
                              dropout: its own id when it was made, once a
                              pass renumbered it (-1: its id) */
    float lr, beta1, beta2, weight_decay, opt_eps; /* optimizers */
    int nesterov, has_momentum;
    int lr_in;             /* optimizers: the input index of a scalar F32
                              holding the step's lr (0: the attribute lr) */
    int coef_in;           /* optimizers: the input index of the clipping
                              coefficient g is scaled by (0: none) */
    int has_acc;           /* grad_sumsq: ins[0] is a running sum, added
                              as it is */
    int gelu_erf;          /* gelu: exact erf form instead of tanh */
    delta_dtype dtype;     /* cast: the output's dtype */
    int ranks, rank;       /* collectives: the ranks, this program's */
    int owner[DELTA_MAX_OP_IN]; /* reduce_scatter, allgather: the rank
                                   owning each input's parameter */
} delta_op_attrs;

typedef struct delta_op {
    int id;
    delta_op_type type;
    delta_phase phase;
    int n_in, n_out;
    int in[DELTA_MAX_OP_IN];   /* tensor ids */
    int out[DELTA_MAX_OP_OUT]; /* tensor ids */
    delta_op_attrs a;
    double flops, bytes;
    size_t workspace;
    bool recomputable;  /* pure function of its inputs (and RNG key) */
    bool inplace;       /* outputs are existing persistent tensors */
    delta_dtype dtype;  /* what it computes on: its first input's dtype
                           (F32 for ops without inputs); a BF16 product is
                           priced at the device's BF16 rate */
    char name[DELTA_NAME_LEN];
} delta_op;

struct delta_tensor {
    delta_ctx *ctx;
    int id;
    delta_dtype dtype;
    delta_tensor_kind kind;
    int ndim;
    int64_t shape[DELTA_MAX_DIMS];
    int64_t numel;
    size_t bytes;
    int producer;       /* op id, or -1 for leaves */
    int view_of;        /* id of the tensor whose storage this one views
                           (always a root: views of views are flattened),
                           or -1 when it has storage of its own */
    int grad;           /* id of d loss / d this, or -1 */
    bool requires_grad;
    delta_init init;
    int init_id;        /* the key of its initial values (init.c): its id
                           when made, kept when a pass renumbers tensors
                           (fuse.c), so a parameter starts from the same
                           values in the fused and the unfused program */
    int owner;          /* ZeRO-1: the rank holding this parameter's
                           optimizer state; -1 otherwise */
    char name[DELTA_NAME_LEN];
};

/* Data parallel (dp.c): what delta_data_parallel set up. A bucket is the
 * parameters one collective op takes, in the order their gradients are
 * ready. */
typedef struct delta_dp_bucket {
    int n;
    int param[DELTA_MAX_OP_IN];
} delta_dp_bucket;

typedef struct delta_dp_state {
    delta_dp_opts o;
    delta_dp_bucket *buckets;
    int n_buckets;
} delta_dp_state;

struct delta_ctx {
    delta_tensor **tensors; /* by id; each allocated once, so handles stay */
    int n_tensors, cap_tensors;
    delta_tensor **retired; /* records a pass took out of the program (id
                               -1): kept so stale handles stay readable and
                               are refused as inputs; freed with the ctx */
    int n_retired, cap_retired;
    delta_op *ops;          /* by id; referenced by id only, may move */
    int n_ops, cap_ops;
    delta_status status;
    char err[512];
    uint64_t seed;
    bool has_backward, has_optimizer;
    delta_phase phase;      /* phase given to ops being appended */
    delta_dp_state *dp;     /* data parallel, or NULL */
};

const char *delta_op_type_name(delta_op_type t);

static inline const delta_op *delta_ctx_op(const delta_ctx *ctx, int i) {
    return &ctx->ops[i];
}

/* Records the first error; later ones are ignored. Returns NULL so
 * constructors can `return delta_ctx_fail(...)`. */
void *delta_ctx_fail(delta_ctx *ctx, delta_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Creates a tensor record (kind, dtype, shape) with no producer. */
delta_tensor *delta_tensor_new(delta_ctx *ctx, delta_tensor_kind kind,
                               delta_dtype dtype, int ndim,
                               const int64_t *shape, const char *name);

/* Appends an op with its inputs; outputs are attached with
 * delta_op_add_output. Returns the op (valid until the next append). */
delta_op *delta_op_append(delta_ctx *ctx, delta_op_type type,
                          const delta_tensor *const *ins, int n_in);
/* Creates a new output tensor of op (kind from the op's phase). */
delta_tensor *delta_op_add_output(delta_ctx *ctx, delta_op *op,
                                  delta_dtype dtype, int ndim,
                                  const int64_t *shape);
/* Sets flops, bytes, workspace of an op from its type and shapes. */
void delta_op_set_cost(delta_ctx *ctx, delta_op *op);

/* Floating-point dtypes ops compute on: F32, and BF16 (stored in 16 bits,
 * computed in fp32; docs/KERNELS.md has the rule per op). */
static inline bool delta_dtype_is_float(delta_dtype t) {
    return t == DELTA_F32 || t == DELTA_BF16;
}

/* True for op types whose CPU kernel meets BF16 operands by widening them
 * (the convolution family): every BF16 input is converted to an fp32 copy
 * in the op's workspace, the fp32 kernel runs on the copies into fp32
 * outputs there, and those are rounded to BF16 (the same bits a native
 * kernel computing in fp32 would give). cost.c adds the copies to the
 * workspace, dispatch.c does it. */
bool delta_op_widens_bf16(delta_op_type t);

/* Bytes of the fp32 copy of t a widened op makes (0 unless t is BF16),
 * rounded up to DELTA_ALIGN so each copy stays aligned. The copies come
 * first in the workspace, in input then output order; the fp32 kernel's
 * own workspace follows them. */
static inline size_t delta_widen_bytes_of(const delta_tensor *t) {
    if (!t || t->dtype != DELTA_BF16) return 0;
    size_t b = (size_t)t->numel * 4;
    return (b + DELTA_ALIGN - 1) / DELTA_ALIGN * DELTA_ALIGN;
}

/* The BF16 GEMM of matmul and linear (k_matmul.c) converts operands to
 * fp32 in blocks of mb = min(M, MB) rows of op(A) by the whole K, and K by
 * nb = min(N, NB) columns of op(B), multiplies each pair with the fp32 GEMM
 * into an mb x nb fp32 block and rounds it: its workspace is bounded by
 * K (MB + NB) + MB NB floats whatever M and N are, and since K is never
 * split, every element is the fp32 GEMM's sum of the same products (the
 * built-in GEMM gives the same bits for any blocking). */
#define DELTA_BF16_GEMM_MB 256
#define DELTA_BF16_GEMM_NB 256
static inline size_t delta_bf16_gemm_ws_round(size_t b) {
    return (b + DELTA_ALIGN - 1) / DELTA_ALIGN * DELTA_ALIGN;
}
static inline size_t delta_bf16_gemm_workspace(int64_t m, int64_t n,
                                               int64_t k) {
    size_t mb = (size_t)(m < DELTA_BF16_GEMM_MB ? m : DELTA_BF16_GEMM_MB);
    size_t nb = (size_t)(n < DELTA_BF16_GEMM_NB ? n : DELTA_BF16_GEMM_NB);
    size_t f = sizeof(float);
    return delta_bf16_gemm_ws_round(mb * (size_t)k * f) +
           delta_bf16_gemm_ws_round((size_t)k * nb * f) +
           delta_bf16_gemm_ws_round(mb * nb * f);
}

/* Renumbers tensors: new_id[i] is tensor i's new id (the kept tensors get
 * 0..kept-1, each once) or -1 to take it out of the program. Views,
 * gradients and op operands are remapped (none may refer to a tensor taken
 * out); a tensor taken out is retired: its record stays allocated with id
 * -1, and ops refuse it as an input. Handles stay valid; unnamed tensors
 * keep their old "t<id>" names; init_id is left alone. false (ctx failed,
 * nothing changed) when host memory runs out. */
bool delta_ctx_renumber_tensors(delta_ctx *ctx, const int *new_id);

/* Renumbers tensors so that the outputs of cast ops come after every
 * other tensor, each group in its old order, and makes each tensor's new
 * id its init_id. A model built with casts (BF16) then gives its
 * parameters the ids the same model has without them (FP32), so both
 * precisions start from the same weights. */
void delta_ctx_move_casts_last(delta_ctx *ctx);

/* The op id a dropout op (or, in dropout_bwd, the dropout it undoes) keys
 * its mask with: the id the dropout op was made with. */
static inline int delta_dropout_key_op(const delta_op *op) {
    return op->a.fwd_op >= 0 ? op->a.fwd_op : op->id;
}
/* ---- data parallel (dp.c; docs/KERNELS.md, "Collective ops") ----------
 * An allreduce's n tensors are one flat buffer, their elements one after
 * the other in operand order, cut into `ranks` chunks; rank c averages
 * chunk c, [delta_dp_chunk_lo(N, P, c), delta_dp_chunk_lo(N, P, c + 1)).
 * Every mean over the ranks, in every collective and on every backend, is
 *     s = x_0; s += x_1; ... s += x_{P-1}; mean = s / P     (in float)
 * with x_q rank q's value: a fixed order, so any policy, any bucketing and
 * ZeRO-1 give the same bits. */
/* A rank reduces its part a piece of this many elements at a time, so a
 * collective's workspace is at most (P - 1) pieces (cost.c). */
#define DELTA_DP_PIECE ((int64_t)1 << 20)
static inline int64_t delta_dp_chunk_lo(int64_t n, int ranks, int c) {
    return n / ranks * c + (n % ranks) * c / ranks;
}
/* Whether ops of type t are collectives (on the communication stream). */
static inline bool delta_op_is_collective(delta_op_type t) {
    return t == DELTA_OP_ALLREDUCE || t == DELTA_OP_REDUCE_SCATTER ||
           t == DELTA_OP_ALLGATHER;
}
/* Elements of an op's inputs, all together. */
int64_t delta_dp_numel(const delta_ctx *ctx, const delta_op *op);
/* After the optimizer's updates: ZeRO-1's allgather ops (optim.c). */
void delta_dp_append_allgathers(delta_ctx *ctx);

/* ---- gradient clipping (optim.c; docs/KERNELS.md) ---------------------
 * grad_sumsq sums the squares of each input in chunks of DELTA_SUMSQ_CHUNK
 * elements: chunk c's partial (in double, DELTA_SUMSQ_LANES interleaved
 * accumulators) is independent of the others, so the chunks run on any
 * threads (or GPU threads), and the partials are added in chunk order,
 * each input's total then to the running sum, in input order. The
 * workspace holds one input's partials. */
#define DELTA_SUMSQ_CHUNK ((int64_t)4096)
#define DELTA_SUMSQ_LANES 8
static inline int64_t delta_sumsq_chunks(int64_t n) {
    return (n + DELTA_SUMSQ_CHUNK - 1) / DELTA_SUMSQ_CHUNK;
}

/* Storage root of a tensor: itself, or the tensor it views. */
static inline int delta_tensor_root(const delta_ctx *ctx, int id) {
    int v = ctx->tensors[id]->view_of;
    return v >= 0 ? v : id;
}

/* Persistent tensors live across steps (params, consts, state). */
static inline bool delta_kind_persistent(delta_tensor_kind k) {
    return k == DELTA_KIND_PARAM || k == DELTA_KIND_CONST ||
           k == DELTA_KIND_STATE;
}

/* Conv2d geometry shared by the graph (shapes, costs, workspace) and the
 * kernels, so both agree on the im2col workspace. */
typedef struct delta_conv_geom {
    int64_t n, c, h, w;   /* input */
    int64_t k, r, s;      /* filters */
    int64_t p, q;         /* output spatial */
    int stride, pad;
    int64_t chunk;        /* images per im2col chunk */
} delta_conv_geom;

delta_conv_geom delta_conv_geom_of(const int64_t *xshape, const int64_t *wshape,
                                   int stride, int pad);
/* Scratch bytes the conv kernels use for one chunk of images. */
size_t delta_conv_workspace(const delta_conv_geom *g, delta_op_type type);

#endif
