/* The graph API: shape errors come back as status and message (never a
 * crash), the program is one topologically ordered op list whose backward
 * ops read the forward tensors they need, gradients of reused tensors are
 * summed, and a paper-scale program builds from shapes alone. */
#include "delta/delta.h"
#include "test.h"
#include "test_models.h"

#include <time.h>

static void test_shape_errors(void) {
    delta_ctx *c = delta_ctx_new();
    int64_t s1[2] = {3, 4}, s2[2] = {5, 6};
    delta_init z = {DELTA_INIT_ZEROS, 0, 0};
    delta_tensor *a = delta_param(c, "a", 2, s1, z);
    delta_tensor *b = delta_param(c, "b", 2, s2, z);
    CHECK(delta_matmul(c, a, b, false, false, 1) == NULL);
    CHECK(delta_ctx_status(c) == DELTA_ERR_SHAPE);
    CHECK(strstr(delta_ctx_error(c), "inner dims") != NULL, "message: %s",
          delta_ctx_error(c));
    /* the first error is kept; NULL inputs propagate without a crash */
    char first[512];
    snprintf(first, sizeof first, "%s", delta_ctx_error(c));
    CHECK(delta_relu(c, NULL) == NULL);
    CHECK(delta_linear(c, NULL, b, NULL) == NULL);
    CHECK(strcmp(first, delta_ctx_error(c)) == 0, "first error replaced: %s",
          delta_ctx_error(c));
    CHECK(delta_backward(c, NULL) != DELTA_OK);
    char err[256];
    CHECK(delta_exec_new(c, NULL, err, sizeof err) == NULL);
    CHECK(strstr(err, "inner dims") != NULL, "exec error: %s", err);
    delta_ctx_clear_error(c);
    CHECK(delta_ctx_status(c) == DELTA_OK);

    int64_t x4[4] = {2, 3, 8, 8}, w4[4] = {4, 5, 3, 3};
    delta_tensor *x = delta_param(c, "x", 4, x4, z);
    delta_tensor *w = delta_param(c, "w", 4, w4, z);
    CHECK(delta_conv2d(c, x, w, NULL, 1, 1) == NULL);
    CHECK(strstr(delta_ctx_error(c), "(K, C, R, S)") != NULL, "%s",
          delta_ctx_error(c));
    delta_ctx_clear_error(c);
    int64_t bad[2] = {7, -1};
    CHECK(delta_reshape(c, x, 2, bad) == NULL, "reshape 384 into 7 x ?");
    delta_ctx_clear_error(c);
    int64_t neg[1] = {-3};
    CHECK(delta_param(c, "neg", 1, neg, z) == NULL);
    delta_ctx_clear_error(c);
    CHECK(delta_dropout(c, x, 1.5f) == NULL);
    delta_ctx_clear_error(c);
    CHECK(delta_backward(c, x) == DELTA_ERR_SHAPE, "non-scalar loss");
    delta_ctx_clear_error(c);
    delta_sgd_opts o = {0.1f, 0, 0, false};
    CHECK(delta_optimizer_sgd(c, o) == DELTA_ERR_STATE, "sgd before backward");
    delta_ctx_free(c);

    /* tensors of another context are refused */
    delta_ctx *c1 = delta_ctx_new(), *c2 = delta_ctx_new();
    delta_tensor *t1 = delta_param(c1, "t", 2, s1, z);
    CHECK(delta_relu(c2, t1) == NULL);
    CHECK(strstr(delta_ctx_error(c2), "another context") != NULL);
    delta_ctx_free(c1);
    delta_ctx_free(c2);
    delta_ctx_free(NULL);
}

static void test_program_order(void) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *loss = tm_gpt(c, 2, 8, 16, 2, 2, 32, 0.1f);
    CHECK(delta_backward(c, loss) == DELTA_OK, "%s", delta_ctx_error(c));
    delta_adamw_opts o = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    CHECK(delta_optimizer_adamw(c, o) == DELTA_OK, "%s", delta_ctx_error(c));
    int nt = delta_ctx_n_tensors(c), n = delta_ctx_n_ops(c);
    char *defined = calloc((size_t)nt, 1);
    for (int i = 0; i < nt; i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_INPUT ||
            k == DELTA_KIND_CONST || k == DELTA_KIND_STATE)
            defined[i] = 1;
    }
    int phase = 0, updates = 0;
    for (int i = 0; i < n; i++) {
        delta_op_info op;
        delta_ctx_op_info(c, i, &op);
        CHECK((int)op.phase >= phase, "op %d (%s) is out of phase order", i,
              op.type);
        phase = (int)op.phase;
        for (int j = 0; j < op.n_in; j++)
            CHECK(defined[op.in[j]], "op %d (%s) reads tensor %d before it is "
                  "produced", i, op.type, op.in[j]);
        for (int j = 0; j < op.n_out; j++) defined[op.out[j]] = 1;
        CHECK(op.flops >= 0 && op.bytes >= 0);
        if (op.phase == DELTA_PHASE_OPTIMIZER) {
            updates++;
            CHECK(!op.recomputable, "an update must not be recomputed");
        } else if (strcmp(op.type, "bn_running_update") != 0) {
            CHECK(op.recomputable, "op %d (%s) should be recomputable", i,
                  op.type);
        }
    }
    free(defined);
    int params = 0;
    for (int i = 0; i < nt; i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_PARAM) continue;
        params++;
        CHECK(delta_tensor_grad(t) != NULL, "%s has no gradient",
              delta_tensor_name(t));
    }
    CHECK(updates == params, "%d updates for %d parameters", updates, params);
    /* the tied embedding is used twice: its gradient is a sum */
    delta_tensor *wte = delta_ctx_find(c, "wte.weight");
    delta_tensor *g = wte ? delta_tensor_grad(wte) : NULL;
    CHECK(g != NULL);
    if (g) {
        delta_op_info op;
        delta_ctx_op_info(c, delta_ctx_n_ops(c) - 1, &op);
        int producer = -1;
        for (int i = 0; i < n; i++) {
            delta_ctx_op_info(c, i, &op);
            for (int j = 0; j < op.n_out; j++)
                if (op.out[j] == delta_tensor_id(g)) producer = i;
        }
        delta_ctx_op_info(c, producer, &op);
        CHECK(strcmp(op.type, "add") == 0, "wte grad made by %s", op.type);
    }
    delta_program_stats st;
    delta_ctx_program_stats(c, &st);
    CHECK(st.n_forward > 0 && st.n_backward > st.n_forward / 2 &&
          st.n_optimizer == params);
    CHECK(st.state_bytes == 2 * st.param_bytes, "Adam keeps two moments");
    delta_ctx_free(c);
}

static void test_backward_reads_forward(void) {
    delta_ctx *c = delta_ctx_new();
    int64_t s[2] = {4, 5};
    delta_init n = {DELTA_INIT_NORMAL, 0, 1};
    delta_tensor *x = delta_param(c, "x", 2, s, n);
    delta_tensor *y = delta_relu(c, x);
    delta_tensor *l = delta_sum(c, delta_gelu(c, y));
    CHECK(delta_backward(c, l) == DELTA_OK);
    bool relu_bwd_reads_y = false, gelu_bwd_reads_y = false;
    for (int i = 0; i < delta_ctx_n_ops(c); i++) {
        delta_op_info op;
        delta_ctx_op_info(c, i, &op);
        if (!strcmp(op.type, "relu_bwd"))
            relu_bwd_reads_y = op.in[0] == delta_tensor_id(y);
        if (!strcmp(op.type, "gelu_bwd"))
            gelu_bwd_reads_y = op.in[0] == delta_tensor_id(y);
    }
    CHECK(relu_bwd_reads_y, "relu's backward reads relu's output");
    CHECK(gelu_bwd_reads_y, "gelu's backward reads gelu's input");
    CHECK(delta_backward(c, l) == DELTA_ERR_STATE, "second backward refused");
    delta_ctx_free(c);
}

static void test_conv_workspace_declared(void) {
    delta_ctx *c = delta_ctx_new();
    int64_t xs[4] = {8, 16, 14, 14}, ws[4] = {32, 16, 3, 3};
    delta_init n = {DELTA_INIT_NORMAL, 0, 1};
    delta_tensor *y = delta_conv2d(c, delta_param(c, "x", 4, xs, n),
                                   delta_param(c, "w", 4, ws, n), NULL, 1, 1);
    CHECK(y && delta_tensor_dim(y, 2) == 14);
    delta_op_info op;
    delta_ctx_op_info(c, 0, &op);
    CHECK(op.workspace > 0, "3x3 conv declares its im2col workspace");
    CHECK(fabs(op.flops - 2.0 * 8 * 32 * 14 * 14 * 16 * 9) < 1,
          "conv flops %.0f", op.flops);
    delta_ctx_free(c);
}

/* GPT-2 XL (48 layers, 1600 wide, 25 heads, T 1024, vocab 50257): the
 * program is built from shapes alone, without the hundreds of GB its
 * tensors would need. */
static void test_gpt2_xl_program(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    delta_ctx *c = delta_ctx_new();
    delta_tensor *loss = tm_gpt(c, 8, 1024, 1600, 25, 48, 50257, 0.1f);
    CHECK(delta_backward(c, loss) == DELTA_OK, "%s", delta_ctx_error(c));
    delta_adamw_opts o = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f};
    CHECK(delta_optimizer_adamw(c, o) == DELTA_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    delta_program_stats st;
    delta_ctx_program_stats(c, &st);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    char pb[32], ab[32];
    printf("  gpt2-xl program: %d ops, %d tensors, %s params, %s activations, "
           "%.1f TFLOP/step, built in %.1f ms\n", st.n_ops, st.n_tensors,
           delta_format_bytes((double)st.param_bytes, pb, sizeof pb),
           delta_format_bytes((double)st.activation_bytes, ab, sizeof ab),
           st.flops / 1e12, ms);
    /* 1.56 B parameters (tied embeddings) in fp32 */
    CHECK(st.param_bytes > 6.0e9 && st.param_bytes < 6.5e9, "%zu",
          st.param_bytes);
    CHECK(st.activation_bytes > 1e11, "activations of batch 8");
    delta_ctx_free(c);
}

int main(void) {
    TEST_RUN(test_shape_errors);
    TEST_RUN(test_program_order);
    TEST_RUN(test_backward_reads_forward);
    TEST_RUN(test_conv_workspace_declared);
    TEST_RUN(test_gpt2_xl_program);
    TEST_MAIN_END();
}
