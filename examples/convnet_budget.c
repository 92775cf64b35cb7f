/* An example of delta as a library: a small convolutional classifier of
 * our own (not one of the built-in models), built with the public graph
 * API, trained inside a device-memory budget of half its unconstrained
 * peak with the delta policy, on the cpu backend.
 *
 * The network (N batch, 1 x S x S images, K classes):
 *   conv 3x3, 8 channels, pad 1 -> relu -> maxpool 2    (N, 8, S/2, S/2)
 *   conv 3x3, 16 channels, pad 1 -> relu -> maxpool 2   (N, 16, S/4, S/4)
 *   flatten -> layer norm                               (N, F = 16 S/4 S/4)
 *   linear F -> 32 -> gelu -> linear 32 -> K            (N, K)
 *   cross-entropy against the labels
 *
 * Data: by default a synthetic task it can learn: class k is a fixed
 * random template image plus noise. Given a folder of Fashion-MNIST idx
 * files (e.g. /usr/share/datasets/fashion-mnist) it trains on those.
 *
 * Prints the loss every few steps, then one summary line:
 *   first loss F last loss L peak P budget B unconstrained U
 * (bytes) and exits 0, or prints why it failed and exits 1. */
#include <delta/delta.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32
#define CLASSES 10
#define STEPS 30
#define HIDDEN 32

/* Samples of the synthetic task: template of the label plus noise. */
static void synth_batch(float *x, int32_t *y, int64_t side, int64_t step,
                        const float *templates) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    int64_t px = side * side;
    for (int64_t i = 0; i < BATCH; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        y[i] = (int32_t)(s % CLASSES);
        for (int64_t j = 0; j < px; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            float noise = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
            x[i * px + j] = templates[y[i] * px + j] + noise;
        }
    }
}

/* The network above; returns the loss, or NULL with the error in ctx. */
static delta_tensor *build(delta_ctx *ctx, int64_t side, delta_tensor **x,
                           delta_tensor **y) {
    /* N(0, 1 / fan-in): unit-scale activations at the start. */
    const delta_init k1 = {DELTA_INIT_NORMAL, 0, 0.33f};   /* 1 / sqrt(9) */
    const delta_init k2 = {DELTA_INIT_NORMAL, 0, 0.12f};   /* 1 / sqrt(72) */
    const delta_init k3 = {DELTA_INIT_NORMAL, 0, 1.0f / (float)(4 * side)};
    const delta_init k4 = {DELTA_INIT_NORMAL, 0, 0.18f};   /* 1 / sqrt(32) */
    const delta_init zeros = {DELTA_INIT_ZEROS, 0, 0};
    const delta_init ones = {DELTA_INIT_ONES, 0, 0};
    int64_t q = side / 4, flat = 16 * q * q;
    int64_t xs[4] = {BATCH, 1, side, side}, ys[1] = {BATCH};
    int64_t w1[4] = {8, 1, 3, 3}, w2[4] = {16, 8, 3, 3}, b1[1] = {8};
    int64_t b2[1] = {16}, fs[2] = {BATCH, flat}, nf[1] = {flat};
    int64_t f1[2] = {HIDDEN, flat}, c1[1] = {HIDDEN};
    int64_t f2[2] = {CLASSES, HIDDEN}, c2[1] = {CLASSES};
    *x = delta_input(ctx, "images", DELTA_F32, 4, xs);
    *y = delta_input(ctx, "labels", DELTA_I32, 1, ys);
    delta_tensor *h = delta_conv2d(
        ctx, *x, delta_param(ctx, "conv1.weight", 4, w1, k1),
        delta_param(ctx, "conv1.bias", 1, b1, zeros), 1, 1);
    h = delta_maxpool2d(ctx, delta_relu(ctx, h), 2, 2, 0);
    h = delta_conv2d(ctx, h, delta_param(ctx, "conv2.weight", 4, w2, k2),
                     delta_param(ctx, "conv2.bias", 1, b2, zeros), 1, 1);
    h = delta_maxpool2d(ctx, delta_relu(ctx, h), 2, 2, 0);
    h = delta_reshape(ctx, h, 2, fs);
    h = delta_layernorm(ctx, h, delta_param(ctx, "norm.weight", 1, nf, ones),
                        delta_param(ctx, "norm.bias", 1, nf, zeros), 1e-5f);
    h = delta_linear(ctx, h, delta_param(ctx, "fc1.weight", 2, f1, k3),
                     delta_param(ctx, "fc1.bias", 1, c1, zeros));
    h = delta_linear(ctx, delta_gelu(ctx, h),
                     delta_param(ctx, "fc2.weight", 2, f2, k4),
                     delta_param(ctx, "fc2.bias", 1, c2, zeros));
    return delta_cross_entropy(ctx, h, *y, DELTA_DATA_IGNORE);
}

int main(int argc, char **argv) {
    const char *mnist = argc > 1 ? argv[1] : NULL;
    int64_t side = mnist ? 28 : 16;
    char err[512];
    int rc = 1;
    delta_ctx *ctx = delta_ctx_new();
    delta_backend *cpu = NULL;
    delta_session *s = NULL;
    delta_dataset *ds = NULL;
    delta_loader *ld = NULL;
    float *x_host = NULL, *templates = NULL;
    int32_t *y_host = NULL;

    /* 1. The step program: forward, backward, optimizer. */
    delta_tensor *x, *y, *loss = build(ctx, side, &x, &y);
    if (loss) delta_backward(ctx, loss);
    delta_optimizer_sgd(ctx, (delta_sgd_opts){.lr = 0.05f, .momentum = 0.9f});
    if (delta_ctx_status(ctx) != DELTA_OK) {
        fprintf(stderr, "build: %s\n", delta_ctx_error(ctx));
        goto out;
    }

    /* 2. Its memory, from shapes alone; the budget is half the peak (but
     *    never below the least any policy can run in). */
    delta_dry_plan plan;
    if (delta_dry_plan_build(ctx, &plan, err, sizeof err) != DELTA_OK) {
        fprintf(stderr, "plan: %s\n", err);
        goto out;
    }
    size_t budget = plan.peak_bytes / 2;
    if (budget < plan.min_budget_bytes) budget = plan.min_budget_bytes;

    /* 3. A cpu backend (an arena of exactly the budget) and a session
     *    that swaps or recomputes what does not fit. */
    cpu = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = -1,
                                                          .link_latency_s = -1},
                                err, sizeof err);
    if (!cpu) {
        fprintf(stderr, "backend: %s\n", err);
        goto out;
    }
    delta_status st;
    s = delta_session_new(ctx,
                          &(delta_session_opts){.backend = cpu,
                                                .budget_bytes = budget,
                                                .policy = "delta"},
                          &st, err, sizeof err);
    if (!s) {
        fprintf(stderr, "session: %s\n", err);
        goto out;
    }

    /* 4. Data. */
    x_host = malloc(sizeof *x_host * BATCH * side * side);
    y_host = malloc(sizeof *y_host * BATCH);
    templates = malloc(sizeof *templates * CLASSES * side * side);
    if (!x_host || !y_host || !templates) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    uint64_t r = 88172645463325252ull;  /* templates: random +-1 pixels */
    for (int64_t j = 0; j < CLASSES * side * side; j++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        templates[j] = (float)(r >> 63) * 2.0f - 1.0f;
    }
    if (mnist) {
        ds = delta_dataset_fashion_mnist_new(mnist, DELTA_SPLIT_TRAIN, &st,
                                             err, sizeof err);
        if (ds) ld = delta_loader_new(ds, BATCH, 0, true, true, &st, err,
                                      sizeof err);
        if (!ld) {
            fprintf(stderr, "data: %s\n", err);
            goto out;
        }
    }

    /* 5. Train. */
    float first = 0, last = 0;
    size_t peak = 0;
    for (int64_t step = 0; step < STEPS; step++) {
        if (ld) {
            delta_batch b = {.input = x_host, .target = y_host};
            delta_loader_next(ld, &b);
        } else {
            synth_batch(x_host, y_host, side, step, templates);
        }
        delta_step_stats stats;
        if (delta_session_write(s, x, x_host, delta_tensor_bytes(x)) ||
            delta_session_write(s, y, y_host, delta_tensor_bytes(y)) ||
            delta_session_run(s, DELTA_RUN_STEP, &stats) ||
            delta_session_read(s, loss, &last, sizeof last)) {
            fprintf(stderr, "step %lld: %s\n", (long long)step,
                    delta_session_error(s));
            goto out;
        }
        if (step == 0) first = last;
        if (stats.peak_device_bytes > peak) peak = stats.peak_device_bytes;
        if (step % 5 == 0 || step == STEPS - 1)
            printf("step %3lld  loss %.4f  swapped %zu B  recomputed %d\n",
                   (long long)step + 1, last, stats.swap_out_bytes,
                   stats.recomputed_ops);
    }
    printf("first loss %.4f last loss %.4f peak %zu budget %zu "
           "unconstrained %zu\n",
           first, last, peak, budget, plan.peak_bytes);
    rc = 0;
out:
    free(x_host);
    free(y_host);
    free(templates);
    delta_loader_free(ld);
    delta_dataset_free(ds);
    delta_session_free(s);
    delta_backend_free(cpu);
    delta_ctx_free(ctx);
    return rc;
}
