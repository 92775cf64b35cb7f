/* delta — the graph: a context owns tensors (shapes only, no data) and the
 * ordered list of ops that make one training step, the *program*.
 *
 * Building a model records forward ops; delta_backward() appends the backward
 * ops as ordinary ops whose inputs name the forward tensors they read, and an
 * optimizer appends its update ops. Ops are appended in dependency order, so
 * the op list is always topologically ordered.
 *
 * Conventions (shapes in comments use these letters):
 *   N batch, C channels, H W spatial (NCHW, as PyTorch), B batch, T sequence,
 *   D model width / head size, V vocabulary.
 *
 * Errors: op constructors return NULL on bad arguments and record the first
 * error in the context (delta_ctx_status / delta_ctx_error). Passing NULL
 * into a constructor returns NULL without overwriting that first error, so a
 * whole model can be built and checked once at the end. */
#ifndef DELTA_GRAPH_H
#define DELTA_GRAPH_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DELTA_MAX_DIMS 6
#define DELTA_MAX_OP_IN 6
#define DELTA_MAX_OP_OUT 4
#define DELTA_NAME_LEN 128

typedef struct delta_ctx delta_ctx;
typedef struct delta_tensor delta_tensor;

/* What a tensor is, which decides its lifetime and what the memory manager
 * may do with it (only ACTIVATIONs may be dropped and recomputed). */
typedef enum delta_tensor_kind {
    DELTA_KIND_PARAM = 0,  /* trained weight: persistent, gets a gradient */
    DELTA_KIND_INPUT,      /* data fed each step (images, tokens, labels) */
    DELTA_KIND_CONST,      /* persistent, set once, no gradient */
    DELTA_KIND_STATE,      /* persistent and updated in place by ops
                              (optimizer moments, batch-norm running stats) */
    DELTA_KIND_ACTIVATION, /* produced by a forward op */
    DELTA_KIND_GRAD,       /* produced by a backward op */
    DELTA_KIND_COUNT
} delta_tensor_kind;

/* How a persistent tensor is filled when an executor first places it.
 * Draws are deterministic from (seed, tensor id). */
typedef enum delta_init_kind {
    DELTA_INIT_ZEROS = 0,
    DELTA_INIT_ONES,
    DELTA_INIT_CONSTANT,   /* a */
    DELTA_INIT_UNIFORM,    /* U(a, b) */
    DELTA_INIT_NORMAL,     /* N(a, b^2): mean a, std b */
    DELTA_INIT_NONE        /* left for the caller to set (inputs) */
} delta_init_kind;

typedef struct delta_init {
    delta_init_kind kind;
    float a, b;
} delta_init;

/* ---- context ---------------------------------------------------------- */

DELTA_API delta_ctx *delta_ctx_new(void);
DELTA_API void delta_ctx_free(delta_ctx *ctx);

/* First recoverable error since creation or the last clear. */
DELTA_API delta_status delta_ctx_status(const delta_ctx *ctx);
DELTA_API const char *delta_ctx_error(const delta_ctx *ctx);
DELTA_API void delta_ctx_clear_error(delta_ctx *ctx);

/* Seed of every random draw the program makes (init, dropout). */
DELTA_API void delta_ctx_set_seed(delta_ctx *ctx, uint64_t seed);
DELTA_API uint64_t delta_ctx_seed(const delta_ctx *ctx);

/* ---- tensors ---------------------------------------------------------- */

/* shape has ndim entries; ndim 0 is a scalar. name may be NULL. */
DELTA_API delta_tensor *delta_param(delta_ctx *ctx, const char *name, int ndim,
                          const int64_t *shape, delta_init init);
DELTA_API delta_tensor *delta_input(delta_ctx *ctx, const char *name, delta_dtype dtype,
                          int ndim, const int64_t *shape);
DELTA_API delta_tensor *delta_constant(delta_ctx *ctx, const char *name,
                             delta_dtype dtype, int ndim, const int64_t *shape,
                             delta_init init);
/* Persistent state updated in place by ops (no gradient). */
DELTA_API delta_tensor *delta_state(delta_ctx *ctx, const char *name, int ndim,
                          const int64_t *shape, delta_init init);

DELTA_API int delta_tensor_id(const delta_tensor *t);
DELTA_API int delta_tensor_ndim(const delta_tensor *t);
DELTA_API int64_t delta_tensor_dim(const delta_tensor *t, int i); /* i < 0 from end */
DELTA_API const int64_t *delta_tensor_shape(const delta_tensor *t);
DELTA_API int64_t delta_tensor_numel(const delta_tensor *t);
DELTA_API size_t delta_tensor_bytes(const delta_tensor *t);
DELTA_API delta_dtype delta_tensor_dtype(const delta_tensor *t);
DELTA_API delta_tensor_kind delta_tensor_kind_of(const delta_tensor *t);
DELTA_API const char *delta_tensor_name(const delta_tensor *t);
DELTA_API void delta_tensor_set_name(delta_tensor *t, const char *name);
DELTA_API bool delta_tensor_requires_grad(const delta_tensor *t);
/* Gradient of t after delta_backward (NULL if t got none). */
DELTA_API delta_tensor *delta_tensor_grad(const delta_tensor *t);

DELTA_API int delta_ctx_n_tensors(const delta_ctx *ctx);
DELTA_API delta_tensor *delta_ctx_tensor(const delta_ctx *ctx, int id);
/* Tensor by name, or NULL. */
DELTA_API delta_tensor *delta_ctx_find(const delta_ctx *ctx, const char *name);

/* Fills a tensor as its init spec says, with draws keyed by (seed, id). */
DELTA_API void delta_init_fill(float *data, int64_t n, delta_init init, uint64_t seed,
                     int tensor_id);
/* Gives t's first value at data: its init spec (F32 with one), else zeros.
 * Every executor and runtime starts persistent tensors this way, so they
 * all start from the same bits. */
DELTA_API void delta_init_tensor(void *data, const delta_tensor *t, uint64_t seed);

/* ---- forward ops -------------------------------------------------------
 * Each returns the op's (first) output, a new ACTIVATION tensor. */

/* a (..., M, K) or (..., K, M) if trans_a; b (..., K, N) or (..., N, K) if
 * trans_b, with the same leading dims as a, or 2-D (shared by the batch).
 * Returns alpha * op(a) op(b): (..., M, N). */
DELTA_API delta_tensor *delta_matmul(delta_ctx *ctx, delta_tensor *a, delta_tensor *b,
                           bool trans_a, bool trans_b, float alpha);
/* x (..., IN), w (OUT, IN) as torch.nn.Linear, bias (OUT) or NULL.
 * Returns x w^T + bias: (..., OUT). */
DELTA_API delta_tensor *delta_linear(delta_ctx *ctx, delta_tensor *x, delta_tensor *w,
                           delta_tensor *bias);
/* x (..., IN), w (IN, OUT) as Hugging Face's Conv1D stores it (GPT-2),
 * bias (OUT) or NULL. Returns x w + bias: (..., OUT). One op, so the bias
 * is added in the GEMM's epilogue on the GPU; in F32 the same bits as
 * delta_matmul(x, w) then delta_add(bias), in BF16 the bias is added
 * before the output's one rounding (as delta_linear's). */
DELTA_API delta_tensor *delta_linear_in_out(delta_ctx *ctx, delta_tensor *x,
                                            delta_tensor *w,
                                            delta_tensor *bias);
/* x (N, C, H, W), w (K, C, R, S), bias (K) or NULL; dilation 1, groups 1.
 * Returns (N, K, P, Q), P = (H + 2 pad - R) / stride + 1. */
DELTA_API delta_tensor *delta_conv2d(delta_ctx *ctx, delta_tensor *x, delta_tensor *w,
                           delta_tensor *bias, int stride, int pad);
/* Training-mode batch norm over (N, H, W) per channel of x (N, C, H, W) or
 * over N per feature of x (N, C). gamma, beta (C). Updates running_mean and
 * running_var (STATE tensors (C), may both be NULL) with momentum, as
 * PyTorch: running = (1 - momentum) running + momentum * batch (unbiased
 * variance). */
DELTA_API delta_tensor *delta_batchnorm(delta_ctx *ctx, delta_tensor *x,
                              delta_tensor *gamma, delta_tensor *beta,
                              delta_tensor *running_mean,
                              delta_tensor *running_var, float momentum,
                              float eps);
/* relu(delta_batchnorm(...)) as one op, and relu(delta_batchnorm(...) + r)
 * with r of x's shape (N, C, H, W) or (N, C) and dtype: the same bits,
 * forward and backward, without the intermediate tensors. x F32 or BF16
 * (in BF16 the batch norm's value and the sum are rounded to BF16 as the
 * separate ops' outputs are). Usually made by delta_ctx_fuse_batchnorm
 * rather than called. Return y, x's shape and dtype. */
DELTA_API delta_tensor *delta_batchnorm_relu(delta_ctx *ctx, delta_tensor *x,
                                   delta_tensor *gamma, delta_tensor *beta,
                                   delta_tensor *running_mean,
                                   delta_tensor *running_var, float momentum,
                                   float eps);
DELTA_API delta_tensor *delta_batchnorm_add_relu(delta_ctx *ctx, delta_tensor *x,
                                       delta_tensor *gamma, delta_tensor *beta,
                                       delta_tensor *r,
                                       delta_tensor *running_mean,
                                       delta_tensor *running_var,
                                       float momentum, float eps);
/* Layer norm over the last dim of x (..., D); gamma, beta (D) or NULL. */
DELTA_API delta_tensor *delta_layernorm(delta_ctx *ctx, delta_tensor *x,
                              delta_tensor *gamma, delta_tensor *beta,
                              float eps);
DELTA_API delta_tensor *delta_relu(delta_ctx *ctx, delta_tensor *x);
/* GELU, tanh approximation (GPT-2's). */
DELTA_API delta_tensor *delta_gelu(delta_ctx *ctx, delta_tensor *x);
/* GELU, exact form x * Phi(x) with erf (BERT's). */
DELTA_API delta_tensor *delta_gelu_erf(delta_ctx *ctx, delta_tensor *x);
/* x (N, C, H, W); window k, stride, padding (max: padded cells are -inf;
 * avg: count_include_pad as PyTorch's default). */
DELTA_API delta_tensor *delta_maxpool2d(delta_ctx *ctx, delta_tensor *x, int k,
                              int stride, int pad);
DELTA_API delta_tensor *delta_avgpool2d(delta_ctx *ctx, delta_tensor *x, int k,
                              int stride, int pad);
/* x (N, C, H, W) -> (N, C). */
DELTA_API delta_tensor *delta_global_avgpool(delta_ctx *ctx, delta_tensor *x);
/* a + b, where b has a's shape or a trailing part of it (broadcast over the
 * leading dims, as a position embedding (T, D) over (B, T, D)). */
DELTA_API delta_tensor *delta_add(delta_ctx *ctx, delta_tensor *a, delta_tensor *b);
/* Elementwise a * b, same shapes. */
DELTA_API delta_tensor *delta_mul(delta_ctx *ctx, delta_tensor *a, delta_tensor *b);
DELTA_API delta_tensor *delta_scale(delta_ctx *ctx, delta_tensor *x, float s);
/* Sum of all elements: a scalar. */
DELTA_API delta_tensor *delta_sum(delta_ctx *ctx, delta_tensor *x);
/* ids (...) I32 in [0, V), table (V, D). Returns (..., D). */
DELTA_API delta_tensor *delta_embedding(delta_ctx *ctx, delta_tensor *ids,
                              delta_tensor *table);
/* Softmax over the last dim of x (..., Tq, Tk). causal masks k > q (+ Tk -
 * Tq); key_mask (B, Tk) (F32, 1 keep / 0 mask, or NULL) masks keys per batch
 * entry, where x is (B, ..., Tk). Masked entries are 0. */
DELTA_API delta_tensor *delta_softmax(delta_ctx *ctx, delta_tensor *x, bool causal,
                            delta_tensor *key_mask);
/* Scaled dot-product attention, composed of matmul, softmax and dropout:
 * q (B, H, Tq, Dh), k and v (B, H, Tk, Dh) -> (B, H, Tq, Dh). */
DELTA_API delta_tensor *delta_attention(delta_ctx *ctx, delta_tensor *q, delta_tensor *k,
                              delta_tensor *v, bool causal,
                              delta_tensor *key_mask, float dropout_p);
/* Inverted dropout with probability p; the mask is drawn from a
 * counter-based RNG keyed by (ctx seed, op id, step), so running the op
 * again in the same step reproduces it. p = 0 returns x itself. */
DELTA_API delta_tensor *delta_dropout(delta_ctx *ctx, delta_tensor *x, float p);
/* logits (N, V), targets (N) I32; targets equal to ignore_index (e.g. -100)
 * are left out. Returns the mean loss over counted rows, a scalar. */
DELTA_API delta_tensor *delta_cross_entropy(delta_ctx *ctx, delta_tensor *logits,
                                  delta_tensor *targets, int ignore_index);
/* A view of x with another shape of the same numel: no data is moved.
 * One dim may be -1 (inferred). */
DELTA_API delta_tensor *delta_reshape(delta_ctx *ctx, delta_tensor *x, int ndim,
                            const int64_t *shape);
/* A copy of x with dims d0 and d1 swapped. */
DELTA_API delta_tensor *delta_transpose(delta_ctx *ctx, delta_tensor *x, int d0, int d1);
/* Splits x into n equal parts along dim; out receives n tensors (n <= 4). */
DELTA_API delta_status delta_split(delta_ctx *ctx, delta_tensor *x, int dim, int n,
                         delta_tensor **out);
/* Concatenates n tensors (n <= DELTA_MAX_OP_IN) along dim. */
DELTA_API delta_tensor *delta_concat(delta_ctx *ctx, delta_tensor *const *xs, int n,
                           int dim);
/* x converted to dtype (F32 <-> BF16; to BF16 rounds to nearest, ties to
 * even). Returns x itself when it already has that dtype. Its gradient is
 * the cast of the output's gradient back to x's dtype, so an F32 parameter
 * cast to BF16 for a product still gets an F32 gradient. Mixed precision
 * is built from this op: products take operands of one dtype. */
DELTA_API delta_tensor *delta_cast(delta_ctx *ctx, delta_tensor *x, delta_dtype dtype);

/* ---- passes ------------------------------------------------------------- */

/* Fuses, in the forward ops recorded so far, every batchnorm -> relu
 * into batchnorm_relu and every batchnorm -> add(·, r) -> relu (the batch
 * norm's output the add's first operand, r of its shape) into
 * batchnorm_add_relu, where the intermediates have no other reader and
 * the chain's tensors are all F32 or all BF16 (mixed precision). The
 * fused program computes the same bits, forward and backward, and never
 * holds the intermediates. Call after the forward pass and before
 * delta_backward (else DELTA_ERR_STATE). Ops and tensors are renumbered
 * (ids change; parameters keep their initial values); the fused-away
 * intermediates leave the program, and passing one to an op fails.
 * Returns the number of chains fused, or -1 on error (in the ctx). */
DELTA_API int delta_ctx_fuse_batchnorm(delta_ctx *ctx);

/* ---- autograd and optimizers ------------------------------------------ */

/* Appends the backward ops of every op recorded so far, seeded by
 * d loss / d loss = 1 (loss must be a scalar). Gradients of tensors used
 * more than once are summed in a fixed order. Call once. */
DELTA_API delta_status delta_backward(delta_ctx *ctx, delta_tensor *loss);

typedef struct delta_sgd_opts {
    float lr, momentum, weight_decay;
    bool nesterov;
} delta_sgd_opts;

typedef struct delta_adamw_opts {
    float lr, beta1, beta2, eps, weight_decay;
} delta_adamw_opts;

/* Append an update op for every PARAM that has a gradient; state (momentum
 * buffers, moments) becomes STATE tensors of the program. Semantics follow
 * torch.optim.SGD and torch.optim.AdamW. Call after delta_backward. */
DELTA_API delta_status delta_optimizer_sgd(delta_ctx *ctx, delta_sgd_opts o);
DELTA_API delta_status delta_optimizer_adamw(delta_ctx *ctx, delta_adamw_opts o);

/* What a learning-rate schedule and gradient clipping add to either
 * optimizer (the _with forms; NULL or all zero: the plain call):
 *  - lr_tensor: a scalar (ndim 0) F32 tensor, an INPUT or a CONST, whose
 *    value the update ops read as the step's learning rate instead of
 *    opts.lr (a schedule writes it before each step with
 *    delta_session_write; opts.lr must still be valid). Its value is data,
 *    not part of the program: the plan cache's key is the same whatever is
 *    written, and the updates are never recomputed. Writing the float
 *    opts.lr gives the attribute's bits.
 *  - grad_clip: > 0 clips the gradients by their global norm, as
 *    torch.nn.utils.clip_grad_norm_(params, grad_clip): the L2 norm of
 *    every gradient the updates read (data parallel: the means over the
 *    ranks) is computed in a fixed order (grad_sumsq ops, then clip_coef;
 *    docs/KERNELS.md) and each update scales its gradient by
 *    min(1, grad_clip / (norm + 1e-6)) first. The norm is the scalar
 *    tensor named "grad_norm" (delta_ctx_find): to read it after a
 *    step, give it to the session as an output (delta_session_opts). 0:
 *    none. Not
 *    with ZeRO-1, where each rank holds only its shard's gradients
 *    (DELTA_ERR_UNSUPPORTED). */
typedef struct delta_optim_extras {
    delta_tensor *lr_tensor;
    float grad_clip;
} delta_optim_extras;
DELTA_API delta_status delta_optimizer_sgd_with(delta_ctx *ctx, delta_sgd_opts o,
                                                const delta_optim_extras *x);
DELTA_API delta_status delta_optimizer_adamw_with(delta_ctx *ctx,
                                                  delta_adamw_opts o,
                                                  const delta_optim_extras *x);

/* ---- data parallel (docs/ARCHITECTURE.md, "Data parallel") --------------
 * Makes the program rank `rank`'s of `ranks` that each train on their own
 * part of every batch: call after delta_backward and before the optimizer.
 * The gradients are grouped into buckets (at most DELTA_MAX_OP_OUT
 * tensors and bucket_bytes each, in the order backward makes them) and
 * each bucket gets a collective op right after the backward op that
 * completes it, so it overlaps the rest of backward:
 *  - zero 0: an allreduce, whose outputs (the gradients' means over the
 *    ranks, in a fixed order) the optimizer reads;
 *  - zero 1 (ZeRO stage 1): every parameter has an owner (whole tensors,
 *    balanced by bytes, the same on every rank); a reduce-scatter gives
 *    each owner its parameters' mean gradients, the optimizer updates and
 *    keeps state for this rank's own parameters only, and after it an
 *    allgather op per bucket sends each owner's parameters to every rank.
 *    The result is bit-identical to zero 0.
 * Collective ops run over the comm given to the session (comm.h). */
typedef struct delta_dp_opts {
    int ranks;            /* >= 1 */
    int rank;             /* 0 .. ranks - 1 */
    int zero;             /* 0 or 1 */
    size_t bucket_bytes;  /* 0: DELTA_DP_BUCKET_BYTES */
} delta_dp_opts;
#define DELTA_DP_BUCKET_BYTES ((size_t)25 << 20)
DELTA_API delta_status delta_data_parallel(delta_ctx *ctx, const delta_dp_opts *o);
/* Under ZeRO-1, the rank owning parameter p's optimizer state; -1 for a
 * tensor that is no such parameter or a program without ZeRO-1. */
DELTA_API int delta_dp_owner(const delta_tensor *p);
/* The collective ops' settings (ranks 1, rank 0, zero 0 without them). */
DELTA_API delta_dp_opts delta_ctx_data_parallel(const delta_ctx *ctx);

/* ---- program inspection ----------------------------------------------- */

typedef enum delta_phase {
    DELTA_PHASE_FORWARD = 0,
    DELTA_PHASE_BACKWARD,
    DELTA_PHASE_OPTIMIZER,
} delta_phase;

/* A read-only summary of one op of the program. */
typedef struct delta_op_info {
    int id;
    const char *type;   /* "conv2d", "conv2d_dx", ... */
    const char *name;   /* the user's or an automatic name */
    delta_phase phase;
    int n_in, n_out;
    int in[DELTA_MAX_OP_IN];   /* tensor ids */
    int out[DELTA_MAX_OP_OUT]; /* tensor ids */
    double flops;       /* floating-point operations */
    double bytes;       /* bytes read plus written */
    size_t workspace;   /* scratch bytes the kernel needs while it runs */
    bool recomputable;  /* running it again reproduces its outputs exactly
                           and changes nothing else */
} delta_op_info;

DELTA_API int delta_ctx_n_ops(const delta_ctx *ctx);
DELTA_API void delta_ctx_op_info(const delta_ctx *ctx, int i, delta_op_info *info);

/* Totals over the program, for reports. */
typedef struct delta_program_stats {
    int n_ops, n_forward, n_backward, n_optimizer;
    int n_tensors;
    double flops;
    size_t param_bytes, state_bytes, input_bytes, activation_bytes,
        grad_bytes, max_workspace;
} delta_program_stats;
DELTA_API void delta_ctx_program_stats(const delta_ctx *ctx, delta_program_stats *s);

/* Writes a text listing of the program (one op a line) to a FILE*. */
DELTA_API void delta_ctx_print_program(const delta_ctx *ctx, void *file);

#ifdef __cplusplus
}
#endif
#endif
