/* The multi-layer perceptron: images flattened, then
 * fc1 -> ReLU -> fc2 -> ReLU -> fc3, initialized as torch.nn.Linear.
 *
 *   images (N, C, H, W) -> (N, C*H*W) -> (N, Hd) -> (N, Hd) -> (N, classes)
 */
#include "models/models_impl.h"

#include <math.h>

/* torch.nn.Linear(in, out) named "<name>.weight" (out, in), "<name>.bias"
 * (out): both U(-1/sqrt(in), 1/sqrt(in)); in the compute dtype. */
static delta_tensor *linear(delta_ctx *ctx, const delta_model_config *cfg,
                            delta_tensor *x, const char *name, int64_t in,
                            int64_t out) {
    delta_init u = delta_model_init_uniform(1.0f / sqrtf((float)in));
    delta_tensor *w = delta_model_param2(ctx, u, out, in, "%s.weight", name);
    delta_tensor *b = delta_model_param1(ctx, u, out, "%s.bias", name);
    return delta_linear(ctx, x, delta_model_low(ctx, cfg, w),
                        delta_model_low(ctx, cfg, b));
}

void delta_mlp_build(delta_ctx *ctx, const delta_model_config *cfg,
                     delta_model *m) {
    int64_t N = cfg->batch, C = cfg->channels, H = cfg->image_size;
    int64_t Hd = cfg->mlp_hidden, K = cfg->classes;
    int64_t xs[4] = {N, C, H, H}, flat[2] = {N, C * H * H};
    m->task = DELTA_TASK_CLASSIFY;
    m->input = delta_input(ctx, "images", DELTA_F32, 4, xs);
    m->target = delta_input(ctx, "labels", DELTA_I32, 1, &N);
    delta_tensor *x = delta_reshape(ctx, m->input, 2, flat); /* (N, CHW) */
    x = delta_model_low(ctx, cfg, x);
    x = delta_relu(ctx, linear(ctx, cfg, x, "fc1", C * H * H, Hd)); /* Hd */
    x = delta_relu(ctx, linear(ctx, cfg, x, "fc2", Hd, Hd));        /* Hd */
    m->logits = linear(ctx, cfg, x, "fc3", Hd, K);             /* (N, K) */
    m->loss = delta_cross_entropy(ctx, m->logits, m->target, -100);
}
