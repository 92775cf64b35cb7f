/* Private interface of the built-in models: the family builders that
 * models.c dispatches to, and small helpers they share (named parameters,
 * torch-style init specs). Builders see a resolved config (every default
 * filled in and checked) and use only the public graph API. */
#ifndef DELTA_MODELS_IMPL_H
#define DELTA_MODELS_IMPL_H

#include "delta/models.h"

/* Builders: record the forward pass and the loss into ctx and fill m's
 * task, loss, logits, input, target (and mask, positions, token_types).
 * Errors stay in ctx (op constructors propagate NULL). */
void delta_mlp_build(delta_ctx *ctx, const delta_model_config *cfg,
                     delta_model *m);
void delta_resnet_build(delta_ctx *ctx, const delta_model_config *cfg,
                        int bottleneck, const int blocks[4], delta_model *m);
void delta_gpt2_build(delta_ctx *ctx, const delta_model_config *cfg,
                      delta_model *m);
void delta_bert_build(delta_ctx *ctx, const delta_model_config *cfg,
                      delta_model *m);

/* Init specs. */
delta_init delta_model_init_zeros(void);
delta_init delta_model_init_ones(void);
delta_init delta_model_init_normal(float std);
delta_init delta_model_init_uniform(float bound); /* U(-bound, bound) */

/* A PARAM named by printf-style fmt, shape (d0) / (d0, d1) / (d0..d3). */
delta_tensor *delta_model_param1(delta_ctx *ctx, delta_init init,
                                 int64_t d0, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
delta_tensor *delta_model_param2(delta_ctx *ctx, delta_init init,
                                 int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
delta_tensor *delta_model_param4(delta_ctx *ctx, delta_init init,
                                 const int64_t shape[4], const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A STATE (C) named by fmt. */
delta_tensor *delta_model_state1(delta_ctx *ctx, delta_init init, int64_t c,
                                 const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* t in the model's compute dtype: a BF16 cast of t when cfg trains in
 * BF16 (weights each step, F32 activations where they enter the BF16
 * part), else t itself. */
delta_tensor *delta_model_low(delta_ctx *ctx, const delta_model_config *cfg,
                              delta_tensor *t);

/* Layer norm with "<prefix>.weight" (ones) and "<prefix>.bias" (zeros). */
delta_tensor *delta_model_layernorm(delta_ctx *ctx, delta_tensor *x,
                                    const char *prefix, int64_t d, float eps);

/* (B, T, C) -> (B, H, T, C/H), and back. */
delta_tensor *delta_model_split_heads(delta_ctx *ctx, delta_tensor *x,
                                      int64_t B, int64_t T, int64_t H,
                                      int64_t D);
delta_tensor *delta_model_merge_heads(delta_ctx *ctx, delta_tensor *x,
                                      int64_t B, int64_t T, int64_t C);

/* Token and position inputs of the transformers: "tokens", "targets"
 * (B, T) I32 and "positions" (T) I32 CONST, set into m. */
void delta_model_token_inputs(delta_ctx *ctx, int64_t B, int64_t T,
                              delta_model *m);

/* Mean cross-entropy of x (B, T, C) against "targets" through the tied
 * embedding table wte (V, C) (+ bias (V) or NULL), both cast to the
 * model's compute dtype: fills m->logits (B*T, V) and m->loss. */
void delta_model_lm_loss(delta_ctx *ctx, const delta_model_config *cfg,
                         delta_tensor *x, delta_tensor *wte,
                         delta_tensor *bias, int64_t B, int64_t T, int64_t C,
                         delta_model *m);

#endif
