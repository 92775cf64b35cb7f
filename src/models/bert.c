/* BERT as Hugging Face's BertForMaskedLM: post-norm encoder layers,
 * bidirectional self-attention with a key padding mask, the MLM head with
 * its decoder tied to the word embeddings; HF's tensor names and
 * nn.Linear layout (weight (out, in)).
 *
 * B batch, T sequence, C hidden, NH heads, D = C / NH, V vocabulary,
 * P positions, L layers (p. = "bert.embeddings.", l. = "bert.encoder.
 * layer.{i}."):
 *   p.word_embeddings.weight        (V, C)  also the decoder's weight
 *   p.position_embeddings.weight    (P, C)  rows 0..T-1 used
 *   p.token_type_embeddings.weight  (2, C)  row 0 used (one segment)
 *   p.LayerNorm.{weight,bias}       (C)
 *   l.attention.self.{query,key,value}.{weight (C, C), bias (C)}
 *   l.attention.output.dense.{weight (C, C), bias}, .LayerNorm
 *   l.intermediate.dense.{weight (4C, C), bias (4C)}
 *   l.output.dense.{weight (C, 4C), bias (C)}, l.output.LayerNorm
 *   cls.predictions.transform.dense.{weight (C, C), bias}, .LayerNorm
 *   cls.predictions.bias            (V)     the decoder's bias
 * Layer norms use eps 1e-12. Dropout p after the embeddings, on the
 * attention probabilities and after both dense outputs of a layer. Init as
 * HF: weights and embeddings N(0, 0.02), biases 0, layer norms 1 and 0. */
#include "models/models_impl.h"

#include <stdio.h>

#define LN_EPS 1e-12f
#define INIT_STD 0.02f
#define TYPE_VOCAB 2

/* nn.Linear "<pre>.{weight (out, in), bias (out)}", in the compute dtype
 * (weight and bias cast each step in BF16). */
static delta_tensor *dense(delta_ctx *ctx, const delta_model_config *cfg,
                           delta_tensor *x, const char *pre, int64_t in,
                           int64_t out) {
    delta_tensor *w = delta_model_param2(
        ctx, delta_model_init_normal(INIT_STD), out, in, "%s.weight", pre);
    delta_tensor *b = delta_model_param1(ctx, delta_model_init_zeros(), out,
                                         "%s.bias", pre);
    return delta_linear(ctx, x, delta_model_low(ctx, cfg, w),
                        delta_model_low(ctx, cfg, b));
}

/* BERT's hidden_act "gelu" is the exact erf form (not GPT-2's tanh). */
static delta_tensor *bert_gelu(delta_ctx *ctx, delta_tensor *x) {
    return delta_gelu_erf(ctx, x);
}

/* One encoder layer on x (B, T, C); returns (B, T, C). */
static delta_tensor *layer(delta_ctx *ctx, delta_tensor *x, int i,
                           const delta_model_config *cfg, delta_tensor *mask) {
    int64_t B = cfg->batch, T = cfg->seq_len, C = cfg->hidden;
    int64_t NH = cfg->heads, D = C / NH;
    float p = cfg->dropout;
    char pre[64], n[DELTA_NAME_LEN];
    snprintf(pre, sizeof pre, "bert.encoder.layer.%d", i);

    static const char *const qkv_names[3] = {"query", "key", "value"};
    delta_tensor *qkv[3];
    for (int j = 0; j < 3; j++) {                     /* (B, NH, T, D) */
        snprintf(n, sizeof n, "%s.attention.self.%s", pre, qkv_names[j]);
        qkv[j] = delta_model_split_heads(ctx, dense(ctx, cfg, x, n, C, C), B, T,
                                         NH, D);
    }
    delta_tensor *a = delta_attention(ctx, qkv[0], qkv[1], qkv[2], false,
                                      mask, p);       /* (B, NH, T, D) */
    a = delta_model_merge_heads(ctx, a, B, T, C);     /* (B, T, C) */
    snprintf(n, sizeof n, "%s.attention.output.dense", pre);
    a = delta_dropout(ctx, dense(ctx, cfg, a, n, C, C), p);
    snprintf(n, sizeof n, "%s.attention.output.LayerNorm", pre);
    a = delta_model_layernorm(ctx, delta_add(ctx, a, x), n, C, LN_EPS);

    snprintf(n, sizeof n, "%s.intermediate.dense", pre);
    delta_tensor *h = bert_gelu(ctx, dense(ctx, cfg, a, n, C, 4 * C)); /* 4C */
    snprintf(n, sizeof n, "%s.output.dense", pre);
    h = delta_dropout(ctx, dense(ctx, cfg, h, n, 4 * C, C), p);        /* C */
    snprintf(n, sizeof n, "%s.output.LayerNorm", pre);
    return delta_model_layernorm(ctx, delta_add(ctx, h, a), n, C, LN_EPS);
}

void delta_bert_build(delta_ctx *ctx, const delta_model_config *cfg,
                      delta_model *m) {
    int64_t B = cfg->batch, T = cfg->seq_len, C = cfg->hidden;
    int64_t bt[2] = {B, T}, one = 1, c1[1] = {C};
    m->task = DELTA_TASK_MASKED_LM;
    delta_model_token_inputs(ctx, B, T, m);
    m->mask = delta_input(ctx, "attention_mask", DELTA_F32, 2, bt);
    m->token_types = delta_constant(ctx, "token_type_ids", DELTA_I32, 1, &one,
                                    (delta_init){DELTA_INIT_NONE, 0, 0});

    delta_init init = delta_model_init_normal(INIT_STD);
    delta_tensor *wte = delta_model_param2(
        ctx, init, cfg->vocab, C, "bert.embeddings.word_embeddings.weight");
    delta_tensor *wpe = delta_model_param2(
        ctx, init, cfg->positions, C,
        "bert.embeddings.position_embeddings.weight");
    delta_tensor *wtt = delta_model_param2(
        ctx, init, TYPE_VOCAB, C, "bert.embeddings.token_type_embeddings.weight");
    /* Every token is of type 0: one looked-up row (1, C), as (C),
     * broadcast over (B, T, C); its gradient is the sum over all tokens. */
    delta_tensor *tt = delta_reshape(
        ctx, delta_embedding(ctx, m->token_types, wtt), 1, c1);
    delta_tensor *x = delta_embedding(ctx, m->input, wte); /* (B, T, C) */
    x = delta_add(ctx, x, tt);
    x = delta_add(ctx, x, delta_embedding(ctx, m->positions, wpe));
    x = delta_model_layernorm(ctx, x, "bert.embeddings.LayerNorm", C, LN_EPS);
    /* embeddings and their layer norm in F32 (F32 tables), then the
     * compute dtype */
    x = delta_model_low(ctx, cfg, x);
    x = delta_dropout(ctx, x, cfg->dropout);
    for (int i = 0; i < cfg->layers; i++) x = layer(ctx, x, i, cfg, m->mask);

    x = dense(ctx, cfg, x, "cls.predictions.transform.dense", C, C);
    x = delta_model_layernorm(ctx, bert_gelu(ctx, x),
                              "cls.predictions.transform.LayerNorm", C,
                              LN_EPS);
    delta_tensor *bias = delta_model_param1(
        ctx, delta_model_init_zeros(), cfg->vocab, "cls.predictions.bias");
    delta_model_lm_loss(ctx, cfg, x, wte, bias, B, T, C, m); /* (B*T, V) */
}
