/* ResNet as torchvision builds it (v1.5: a Bottleneck strides on its 3x3
 * conv), with torchvision's names and init, batch norm in training mode.
 *
 *   images (N, C, H, W)
 *   conv1 7x7/2 pad 3, bn1, relu             (N, w, H/2, W/2)
 *   maxpool 3/2 pad 1                        (N, w, H/4, W/4)
 *   layer1..layer4: blocks of planes w, 2w, 4w, 8w; layer2..4 stride 2
 *                                            (N, 8w*e, H/32, W/32)
 *   global average pool                      (N, 8w*e)
 *   fc                                       (N, classes)
 * w is the width (64), e the expansion: 1 for BasicBlock (resnet18/34),
 * 4 for Bottleneck (resnet50/101/152). Sizes round up as PyTorch's do.
 *
 * Init as torchvision: convs kaiming normal, mode fan_out, gain sqrt(2):
 * std = sqrt(2 / (K*R*S)); batch norm weight 1, bias 0, running mean 0,
 * running var 1; fc as nn.Linear: U(-1/sqrt(in), 1/sqrt(in)). */
#include "models/models_impl.h"

#include <math.h>
#include <stdio.h>

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

/* Conv "<name>.weight" (cout, cin, k, k), no bias. */
static delta_tensor *conv(delta_ctx *ctx, delta_tensor *x, const char *name,
                          int64_t cin, int64_t cout, int k, int stride,
                          int pad) {
    int64_t ws[4] = {cout, cin, k, k};
    float std = sqrtf(2.0f / (float)(cout * k * k));
    delta_tensor *w = delta_model_param4(ctx, delta_model_init_normal(std),
                                         ws, "%s.weight", name);
    /* the weight in x's dtype: a BF16 cast each step in BF16 models */
    if (x && delta_tensor_dtype(x) == DELTA_BF16)
        w = delta_cast(ctx, w, DELTA_BF16);
    return delta_conv2d(ctx, x, w, NULL, stride, pad);
}

/* BatchNorm2d "<name>.{weight,bias,running_mean,running_var}" over c. */
static delta_tensor *bn(delta_ctx *ctx, delta_tensor *x, const char *name,
                        int64_t c) {
    delta_tensor *g = delta_model_param1(ctx, delta_model_init_ones(), c,
                                         "%s.weight", name);
    delta_tensor *b = delta_model_param1(ctx, delta_model_init_zeros(), c,
                                         "%s.bias", name);
    delta_tensor *rm = delta_model_state1(ctx, delta_model_init_zeros(), c,
                                          "%s.running_mean", name);
    delta_tensor *rv = delta_model_state1(ctx, delta_model_init_ones(), c,
                                          "%s.running_var", name);
    return delta_batchnorm(ctx, x, g, b, rm, rv, BN_MOMENTUM, BN_EPS);
}

/* "<pre>.downsample.0" conv1x1(stride) + "<pre>.downsample.1" bn, or x
 * itself when the shape does not change. */
static delta_tensor *shortcut(delta_ctx *ctx, delta_tensor *x,
                              const char *pre, int64_t cin, int64_t cout,
                              int stride) {
    if (stride == 1 && cin == cout) return x;
    char n[DELTA_NAME_LEN];
    snprintf(n, sizeof n, "%s.downsample.0", pre);
    x = conv(ctx, x, n, cin, cout, 1, stride, 0);
    snprintf(n, sizeof n, "%s.downsample.1", pre);
    return bn(ctx, x, n, cout);
}

/* BasicBlock: x (N, cin, H, W) -> (N, planes, H/s, W/s). */
static delta_tensor *basic_block(delta_ctx *ctx, delta_tensor *x,
                                 const char *pre, int64_t cin, int64_t planes,
                                 int stride) {
    char n[DELTA_NAME_LEN];
    snprintf(n, sizeof n, "%s.conv1", pre);
    delta_tensor *o = conv(ctx, x, n, cin, planes, 3, stride, 1);
    snprintf(n, sizeof n, "%s.bn1", pre);
    o = delta_relu(ctx, bn(ctx, o, n, planes));
    snprintf(n, sizeof n, "%s.conv2", pre);
    o = conv(ctx, o, n, planes, planes, 3, 1, 1);
    snprintf(n, sizeof n, "%s.bn2", pre);
    o = bn(ctx, o, n, planes);
    delta_tensor *id = shortcut(ctx, x, pre, cin, planes, stride);
    return delta_relu(ctx, delta_add(ctx, o, id));
}

/* Bottleneck: x (N, cin, H, W) -> (N, 4*planes, H/s, W/s). */
static delta_tensor *bottleneck_block(delta_ctx *ctx, delta_tensor *x,
                                      const char *pre, int64_t cin,
                                      int64_t planes, int stride) {
    char n[DELTA_NAME_LEN];
    snprintf(n, sizeof n, "%s.conv1", pre);
    delta_tensor *o = conv(ctx, x, n, cin, planes, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn1", pre);
    o = delta_relu(ctx, bn(ctx, o, n, planes));
    snprintf(n, sizeof n, "%s.conv2", pre);
    o = conv(ctx, o, n, planes, planes, 3, stride, 1);
    snprintf(n, sizeof n, "%s.bn2", pre);
    o = delta_relu(ctx, bn(ctx, o, n, planes));
    snprintf(n, sizeof n, "%s.conv3", pre);
    o = conv(ctx, o, n, planes, 4 * planes, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn3", pre);
    o = bn(ctx, o, n, 4 * planes);
    delta_tensor *id = shortcut(ctx, x, pre, cin, 4 * planes, stride);
    return delta_relu(ctx, delta_add(ctx, o, id));
}

void delta_resnet_build(delta_ctx *ctx, const delta_model_config *cfg,
                        int bottleneck, const int blocks[4], delta_model *m) {
    int64_t N = cfg->batch, H = cfg->image_size, w = cfg->width;
    int64_t xs[4] = {N, cfg->channels, H, H};
    int64_t expansion = bottleneck ? 4 : 1;
    m->task = DELTA_TASK_CLASSIFY;
    m->input = delta_input(ctx, "images", DELTA_F32, 4, xs);
    m->target = delta_input(ctx, "labels", DELTA_I32, 1, &N);

    delta_tensor *x = delta_model_low(ctx, cfg, m->input);
    x = conv(ctx, x, "conv1", cfg->channels, w, 7, 2, 3);
    x = delta_relu(ctx, bn(ctx, x, "bn1", w));   /* (N, w, H/2, W/2) */
    x = delta_maxpool2d(ctx, x, 3, 2, 1);        /* (N, w, H/4, W/4) */
    int64_t cin = w;
    for (int stage = 0; stage < 4; stage++) {
        int64_t planes = w << stage;
        for (int b = 0; b < blocks[stage]; b++) {
            char pre[64];
            snprintf(pre, sizeof pre, "layer%d.%d", stage + 1, b);
            int stride = (stage > 0 && b == 0) ? 2 : 1;
            x = bottleneck ? bottleneck_block(ctx, x, pre, cin, planes, stride)
                           : basic_block(ctx, x, pre, cin, planes, stride);
            cin = planes * expansion;
        }
    }
    x = delta_global_avgpool(ctx, x);            /* (N, 8w*e) */
    delta_init u = delta_model_init_uniform(1.0f / sqrtf((float)cin));
    delta_tensor *fw = delta_model_param2(ctx, u, cfg->classes, cin,
                                          "fc.weight");
    delta_tensor *fb = delta_model_param1(ctx, u, cfg->classes, "fc.bias");
    m->logits = delta_linear(ctx, x, delta_model_low(ctx, cfg, fw),
                             delta_model_low(ctx, cfg, fb)); /* (N, classes) */
    m->loss = delta_cross_entropy(ctx, m->logits, m->target, -100);
}
