/* Small networks built through the public API, shared by tests: a GPT-style
 * transformer and a residual conv net. Header-only (static) on purpose:
 * each test binary is one translation unit. */
#ifndef DELTA_TEST_MODELS_H
#define DELTA_TEST_MODELS_H

#include "delta/delta.h"

#include <stdio.h>

static inline delta_init tm_normal(float std) {
    delta_init i = {DELTA_INIT_NORMAL, 0.0f, std};
    return i;
}
static inline delta_init tm_ones(void) {
    delta_init i = {DELTA_INIT_ONES, 0, 0};
    return i;
}
static inline delta_init tm_zeros(void) {
    delta_init i = {DELTA_INIT_ZEROS, 0, 0};
    return i;
}

static inline delta_tensor *tm_param1(delta_ctx *c, const char *pre, const char *nm,
                               int64_t n, delta_init init) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", pre, nm);
    return delta_param(c, name, 1, &n, init);
}

static inline delta_tensor *tm_param2(delta_ctx *c, const char *pre, const char *nm,
                               int64_t a, int64_t b, delta_init init) {
    char name[160];
    int64_t s[2] = {a, b};
    snprintf(name, sizeof name, "%s%s", pre, nm);
    return delta_param(c, name, 2, s, init);
}

/* One GPT-2 block on x (B, T, C) with nh heads; dropout p. */
static inline delta_tensor *tm_gpt_block(delta_ctx *c, delta_tensor *x, int layer,
                                  int64_t B, int64_t T, int64_t C, int64_t nh,
                                  float p) {
    char pre[64];
    snprintf(pre, sizeof pre, "h.%d.", layer);
    int64_t D = C / nh;
    delta_tensor *h = delta_layernorm(c, x, tm_param1(c, pre, "ln_1.weight", C, tm_ones()),
                                      tm_param1(c, pre, "ln_1.bias", C, tm_zeros()), 1e-5f);
    h = delta_linear(c, h, tm_param2(c, pre, "attn.c_attn.weight", 3 * C, C, tm_normal(0.02f)),
                     tm_param1(c, pre, "attn.c_attn.bias", 3 * C, tm_zeros()));
    delta_tensor *qkv[3] = {0};
    delta_split(c, h, -1, 3, qkv);
    int64_t hs[4] = {B, T, nh, D};
    for (int i = 0; i < 3; i++)
        qkv[i] = delta_transpose(c, delta_reshape(c, qkv[i], 4, hs), 1, 2);
    delta_tensor *a = delta_attention(c, qkv[0], qkv[1], qkv[2], true, NULL, p);
    int64_t ms[3] = {B, T, C};
    a = delta_reshape(c, delta_transpose(c, a, 1, 2), 3, ms);
    a = delta_linear(c, a, tm_param2(c, pre, "attn.c_proj.weight", C, C, tm_normal(0.02f)),
                     tm_param1(c, pre, "attn.c_proj.bias", C, tm_zeros()));
    x = delta_add(c, x, delta_dropout(c, a, p));
    h = delta_layernorm(c, x, tm_param1(c, pre, "ln_2.weight", C, tm_ones()),
                        tm_param1(c, pre, "ln_2.bias", C, tm_zeros()), 1e-5f);
    h = delta_linear(c, h, tm_param2(c, pre, "mlp.c_fc.weight", 4 * C, C, tm_normal(0.02f)),
                     tm_param1(c, pre, "mlp.c_fc.bias", 4 * C, tm_zeros()));
    h = delta_gelu(c, h);
    h = delta_linear(c, h, tm_param2(c, pre, "mlp.c_proj.weight", C, 4 * C, tm_normal(0.02f)),
                     tm_param1(c, pre, "mlp.c_proj.bias", C, tm_zeros()));
    return delta_add(c, x, delta_dropout(c, h, p));
}

/* GPT-2-shaped language model; returns the mean cross-entropy loss.
 * Inputs "tokens" and "targets" (B, T) I32. Tied embeddings. */
static inline delta_tensor *tm_gpt(delta_ctx *c, int64_t B, int64_t T, int64_t C,
                            int64_t nh, int layers, int64_t V, float p) {
    int64_t bt[2] = {B, T};
    delta_tensor *tok = delta_input(c, "tokens", DELTA_I32, 2, bt);
    delta_tensor *tgt = delta_input(c, "targets", DELTA_I32, 2, bt);
    delta_tensor *wte = tm_param2(c, "", "wte.weight", V, C, tm_normal(0.02f));
    delta_tensor *wpe = tm_param2(c, "", "wpe.weight", T, C, tm_normal(0.01f));
    delta_tensor *x = delta_add(c, delta_embedding(c, tok, wte), wpe);
    x = delta_dropout(c, x, p);
    for (int l = 0; l < layers; l++) x = tm_gpt_block(c, x, l, B, T, C, nh, p);
    x = delta_layernorm(c, x, tm_param1(c, "", "ln_f.weight", C, tm_ones()),
                        tm_param1(c, "", "ln_f.bias", C, tm_zeros()), 1e-5f);
    int64_t flat[2] = {B * T, C}, n1[1] = {B * T};
    delta_tensor *logits = delta_matmul(c, delta_reshape(c, x, 2, flat), wte,
                                        false, true, 1.0f);
    return delta_cross_entropy(c, logits, delta_reshape(c, tgt, 1, n1), -100);
}

static inline delta_tensor *tm_conv_bn(delta_ctx *c, delta_tensor *x, const char *pre,
                                int64_t cin, int64_t cout, int k, int stride,
                                bool relu) {
    char name[160];
    int64_t ws[4] = {cout, cin, k, k};
    snprintf(name, sizeof name, "%sconv.weight", pre);
    delta_tensor *w = delta_param(c, name, 4, ws, tm_normal(0.2f));
    x = delta_conv2d(c, x, w, NULL, stride, k / 2);
    snprintf(name, sizeof name, "%sbn.running_mean", pre);
    delta_tensor *rm = delta_state(c, name, 1, &cout, tm_zeros());
    snprintf(name, sizeof name, "%sbn.running_var", pre);
    delta_tensor *rv = delta_state(c, name, 1, &cout, tm_ones());
    x = delta_batchnorm(c, x, tm_param1(c, pre, "bn.weight", cout, tm_ones()),
                        tm_param1(c, pre, "bn.bias", cout, tm_zeros()), rm, rv,
                        0.1f, 1e-5f);
    return relu ? delta_relu(c, x) : x;
}

/* A small residual conv net on "images" (N, 1, H, H) with "labels" (N) I32;
 * returns the mean cross-entropy loss over 10 classes. */
static inline delta_tensor *tm_convnet(delta_ctx *c, int64_t N, int64_t H) {
    int64_t xs[4] = {N, 1, H, H}, ns[1] = {N};
    delta_tensor *x = delta_input(c, "images", DELTA_F32, 4, xs);
    delta_tensor *y = delta_input(c, "labels", DELTA_I32, 1, ns);
    x = tm_conv_bn(c, x, "stem.", 1, 8, 3, 1, true);
    x = delta_maxpool2d(c, x, 3, 2, 1);
    delta_tensor *r = tm_conv_bn(c, x, "b1.0.", 8, 8, 3, 1, true);
    r = tm_conv_bn(c, r, "b1.1.", 8, 8, 3, 1, false);
    x = delta_relu(c, delta_add(c, x, r));
    x = tm_conv_bn(c, x, "b2.", 8, 16, 3, 2, true);
    x = delta_global_avgpool(c, x);
    delta_tensor *logits = delta_linear(
        c, x, tm_param2(c, "", "fc.weight", 10, 16, tm_normal(0.1f)),
        tm_param1(c, "", "fc.bias", 10, tm_zeros()));
    return delta_cross_entropy(c, logits, y, -100);
}

#endif
