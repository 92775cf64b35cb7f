/* Kernel benchmark (not a test): GFLOP/s of GEMM and of conv2d forward and
 * backward on the shapes of ResNet-18 and GPT-2 small, measured through the
 * executor on the CPU kernels.
 *   bench_kernels --list      prints the cases, one a line, for the PyTorch
 *                             script to run the same shapes
 *   bench_kernels [--threads N] [--reps R]
 * Output, one line per measurement: "name op gflops seconds". */
#include "delta/delta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bcase {
    const char *name;
    char kind;                 /* 'c' conv2d, 'g' linear-style GEMM */
    int64_t n, c, h, k, r;     /* conv: x (n,c,h,h), w (k,c,r,r) */
    int stride, pad;
    int64_t m, gn, gk;         /* gemm: x (m,gk) times w (gn,gk)^T */
} bcase;

static const bcase cases[] = {
    /* ResNet-18 on Fashion-MNIST (1x28x28, batch 64), as delta train runs it */
    {"r18-fmnist.stem", 'c', 64, 1, 28, 64, 7, 2, 3, 0, 0, 0},
    {"r18-fmnist.layer1", 'c', 64, 64, 7, 64, 3, 1, 1, 0, 0, 0},
    {"r18-fmnist.layer2", 'c', 64, 128, 4, 128, 3, 1, 1, 0, 0, 0},
    {"r18-fmnist.layer3", 'c', 64, 256, 2, 256, 3, 1, 1, 0, 0, 0},
    /* ResNet-18 on ImageNet shapes (224x224), batch 8 */
    {"r18-224.stem", 'c', 8, 3, 224, 64, 7, 2, 3, 0, 0, 0},
    {"r18-224.layer1", 'c', 8, 64, 56, 64, 3, 1, 1, 0, 0, 0},
    {"r18-224.layer2", 'c', 8, 128, 28, 128, 3, 1, 1, 0, 0, 0},
    {"r18-224.layer3", 'c', 8, 256, 14, 256, 3, 1, 1, 0, 0, 0},
    {"r18-224.layer4", 'c', 8, 512, 7, 512, 3, 1, 1, 0, 0, 0},
    {"r18-224.down2", 'c', 8, 64, 56, 128, 1, 2, 0, 0, 0, 0},
    /* GPT-2 small (768 wide) on 1024 tokens (batch 8 x T 128) */
    {"gpt2s.qkv", 'g', 0, 0, 0, 0, 0, 0, 0, 1024, 2304, 768},
    {"gpt2s.attn_proj", 'g', 0, 0, 0, 0, 0, 0, 0, 1024, 768, 768},
    {"gpt2s.fc", 'g', 0, 0, 0, 0, 0, 0, 0, 1024, 3072, 768},
    {"gpt2s.mlp_proj", 'g', 0, 0, 0, 0, 0, 0, 0, 1024, 768, 3072},
    {"gpt2s.lm_head", 'g', 0, 0, 0, 0, 0, 0, 0, 256, 50257, 768},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Builds y = op(x, w), loss = sum(y * R), backward; runs reps steps and
 * prints the median time of each forward/backward op of interest. */
static int run_case(const bcase *b, int reps) {
    delta_ctx *c = delta_ctx_new();
    delta_init nrm = {DELTA_INIT_NORMAL, 0, 0.1f};
    delta_tensor *y;
    if (b->kind == 'c') {
        int64_t xs[4] = {b->n, b->c, b->h, b->h}, ws[4] = {b->k, b->c, b->r, b->r};
        y = delta_conv2d(c, delta_param(c, "x", 4, xs, nrm),
                         delta_param(c, "w", 4, ws, nrm), NULL, b->stride, b->pad);
    } else {
        int64_t xs[2] = {b->m, b->gk}, ws[2] = {b->gn, b->gk};
        /* only the weight needs a gradient for dW; x too for dX */
        y = delta_linear(c, delta_param(c, "x", 2, xs, nrm),
                         delta_param(c, "w", 2, ws, nrm), NULL);
    }
    delta_tensor *r = delta_constant(c, "R", DELTA_F32, delta_tensor_ndim(y),
                                     delta_tensor_shape(y), nrm);
    delta_backward(c, delta_sum(c, delta_mul(c, y, r)));
    char err[256];
    delta_exec *ex = delta_exec_new(c, NULL, err, sizeof err);
    if (!ex) {
        fprintf(stderr, "bench_kernels: %s: %s\n", b->name, err);
        delta_ctx_free(c);
        return 1;
    }
    int nops = delta_ctx_n_ops(c);
    double *t = calloc((size_t)nops * (size_t)reps, sizeof *t);
    delta_exec_run(ex, DELTA_RUN_STEP); /* warm up */
    for (int rep = 0; rep < reps; rep++) {
        delta_exec_run(ex, DELTA_RUN_STEP);
        for (int i = 0; i < nops; i++)
            t[(size_t)i * reps + rep] = delta_exec_op_seconds(ex, i);
    }
    for (int i = 0; i < nops; i++) {
        delta_op_info op;
        delta_ctx_op_info(c, i, &op);
        const char *label = NULL;
        if (!strcmp(op.type, "conv2d")) label = "fwd";
        else if (!strcmp(op.type, "conv2d_dx")) label = "dx";
        else if (!strcmp(op.type, "conv2d_dw")) label = "dw";
        else if (!strcmp(op.type, "linear")) label = "fwd";
        else if (!strcmp(op.type, "matmul"))
            label = op.in[1] == delta_tensor_id(delta_ctx_find(c, "w")) ? "dx" : "dw";
        if (!label) continue;
        qsort(t + (size_t)i * reps, (size_t)reps, sizeof *t, cmp_d);
        double med = t[(size_t)i * reps + reps / 2];
        printf("%s %s %.2f %.6f\n", b->name, label, op.flops / med / 1e9, med);
        fflush(stdout);
    }
    free(t);
    delta_exec_free(ex);
    delta_ctx_free(c);
    return 0;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) {
            for (int j = 0; j < N_CASES; j++) {
                const bcase *b = &cases[j];
                if (b->kind == 'c')
                    printf("%s conv %lld %lld %lld %lld %lld %d %d\n", b->name,
                           (long long)b->n, (long long)b->c, (long long)b->h,
                           (long long)b->k, (long long)b->r, b->stride, b->pad);
                else
                    printf("%s gemm %lld %lld %lld\n", b->name, (long long)b->m,
                           (long long)b->gn, (long long)b->gk);
            }
            return 0;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_kernels [--list] [--threads N] [--reps R]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "bench_kernels: --threads and --reps must be >= 1\n");
        return 2;
    }
    delta_cpu_set_threads(threads);
    for (int j = 0; j < N_CASES; j++)
        if (run_case(&cases[j], reps)) return 1;
    return 0;
}
