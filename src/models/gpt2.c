/* GPT-2 as Hugging Face's GPT2LMHeadModel: pre-norm blocks, causal
 * self-attention, tanh GELU, lm_head tied to the token embedding, with
 * HF's tensor names and Conv1D layout (weight (in, out), y = x W + b), so
 * a HF checkpoint loads without transposes.
 *
 * B batch, T sequence, C hidden, NH heads, D = C / NH, V vocabulary,
 * P positions (n_positions), L layers:
 *   transformer.wte.weight                (V, C)   also the lm_head
 *   transformer.wpe.weight                (P, C)   rows 0..T-1 used
 *   transformer.h.{i}.ln_1.{weight,bias}  (C)
 *   .attn.c_attn.{weight (C, 3C), bias (3C)}
 *   .attn.c_proj.{weight (C, C), bias (C)}
 *   .ln_2.{weight,bias}                   (C)
 *   .mlp.c_fc.{weight (C, 4C), bias (4C)}
 *   .mlp.c_proj.{weight (4C, C), bias (C)}
 *   transformer.ln_f.{weight,bias}        (C)
 * Dropout p after the embeddings, on the attention probabilities and after
 * each block's two projections (HF's embd, attn and resid dropout).
 * Init as HF: weights and embeddings N(0, 0.02), the c_proj weights
 * N(0, 0.02 / sqrt(2L)), biases 0, layer norms weight 1 and bias 0. */
#include "models/models_impl.h"

#include <math.h>
#include <stdio.h>

#define LN_EPS 1e-5f
#define INIT_STD 0.02f

/* HF Conv1D "<pre>.{weight (in, out), bias (out)}": x (..., in) W + b, in
 * the compute dtype (weight and bias cast each step in BF16), as one
 * linear op on the (IN, OUT) weight. */
static delta_tensor *conv1d(delta_ctx *ctx, const delta_model_config *cfg,
                            delta_tensor *x, const char *pre, int64_t in,
                            int64_t out, float std) {
    delta_tensor *w = delta_model_param2(ctx, delta_model_init_normal(std),
                                         in, out, "%s.weight", pre);
    delta_tensor *b = delta_model_param1(ctx, delta_model_init_zeros(), out,
                                         "%s.bias", pre);
    w = delta_model_low(ctx, cfg, w); /* casts in a fixed order */
    b = delta_model_low(ctx, cfg, b);
    return delta_linear_in_out(ctx, x, w, b); /* one op: the bias in the
                                                 GEMM's epilogue */
}

/* One block on x (B, T, C); returns (B, T, C). */
static delta_tensor *block(delta_ctx *ctx, delta_tensor *x, int layer,
                           const delta_model_config *cfg) {
    int64_t B = cfg->batch, T = cfg->seq_len, C = cfg->hidden;
    int64_t NH = cfg->heads, D = C / NH;
    float p = cfg->dropout;
    float proj_std = INIT_STD / sqrtf(2.0f * (float)cfg->layers);
    char pre[64], n[DELTA_NAME_LEN];
    snprintf(pre, sizeof pre, "transformer.h.%d", layer);

    snprintf(n, sizeof n, "%s.ln_1", pre);
    delta_tensor *h = delta_model_layernorm(ctx, x, n, C, LN_EPS);
    snprintf(n, sizeof n, "%s.attn.c_attn", pre);
    h = conv1d(ctx, cfg, h, n, C, 3 * C, INIT_STD);       /* (B, T, 3C) */
    delta_tensor *qkv[3] = {0};
    if (h) delta_split(ctx, h, 2, 3, qkv);            /* 3 x (B, T, C) */
    for (int i = 0; i < 3; i++)                       /* (B, NH, T, D) */
        qkv[i] = delta_model_split_heads(ctx, qkv[i], B, T, NH, D);
    delta_tensor *a = delta_attention(ctx, qkv[0], qkv[1], qkv[2], true,
                                      NULL, p);       /* (B, NH, T, D) */
    a = delta_model_merge_heads(ctx, a, B, T, C);     /* (B, T, C) */
    snprintf(n, sizeof n, "%s.attn.c_proj", pre);
    a = conv1d(ctx, cfg, a, n, C, C, proj_std);
    x = delta_add(ctx, x, delta_dropout(ctx, a, p));

    snprintf(n, sizeof n, "%s.ln_2", pre);
    h = delta_model_layernorm(ctx, x, n, C, LN_EPS);
    snprintf(n, sizeof n, "%s.mlp.c_fc", pre);
    h = delta_gelu(ctx, conv1d(ctx, cfg, h, n, C, 4 * C, INIT_STD)); /* (B,T,4C) */
    snprintf(n, sizeof n, "%s.mlp.c_proj", pre);
    h = conv1d(ctx, cfg, h, n, 4 * C, C, proj_std);        /* (B, T, C) */
    return delta_add(ctx, x, delta_dropout(ctx, h, p));
}

void delta_gpt2_build(delta_ctx *ctx, const delta_model_config *cfg,
                      delta_model *m) {
    int64_t B = cfg->batch, T = cfg->seq_len, C = cfg->hidden;
    m->task = DELTA_TASK_CAUSAL_LM;
    delta_model_token_inputs(ctx, B, T, m);
    delta_init init = delta_model_init_normal(INIT_STD);
    delta_tensor *wte = delta_model_param2(ctx, init, cfg->vocab, C,
                                           "transformer.wte.weight");
    delta_tensor *wpe = delta_model_param2(ctx, init, cfg->positions, C,
                                           "transformer.wpe.weight");
    delta_tensor *x = delta_add(ctx, delta_embedding(ctx, m->input, wte),
                                delta_embedding(ctx, m->positions, wpe));
    /* embeddings are looked up and summed in F32 (the tables are F32
     * parameters), then the residual stream is in the compute dtype */
    x = delta_model_low(ctx, cfg, x);
    x = delta_dropout(ctx, x, cfg->dropout);          /* (B, T, C) */
    for (int l = 0; l < cfg->layers; l++) x = block(ctx, x, l, cfg);
    x = delta_model_layernorm(ctx, x, "transformer.ln_f", C, LN_EPS);
    delta_model_lm_loss(ctx, cfg, x, wte, NULL, B, T, C, m); /* (B*T, V) */
}
