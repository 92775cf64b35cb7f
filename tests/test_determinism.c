/* Determinism: the same program trained twice gives identical bits, also
 * with every buffer at another address; a dropout op run again in the
 * same step reproduces its mask. This is what makes a recomputed tensor
 * equal to the one that was dropped. */
#include "delta/delta.h"
#include "test.h"
#include "test_models.h"

typedef delta_tensor *(*build_fn)(delta_ctx *c);

static delta_tensor *build_gpt(delta_ctx *c) {
    return tm_gpt(c, 2, 16, 32, 4, 2, 64, 0.1f);
}
static delta_tensor *build_conv(delta_ctx *c) { return tm_convnet(c, 4, 12); }

static void fill_inputs(delta_ctx *c, delta_exec *ex, int step) {
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_INPUT) continue;
        int64_t n = delta_tensor_numel(t);
        if (delta_tensor_dtype(t) == DELTA_I32) {
            int *d = delta_exec_data(ex, t);
            int mod = strcmp(delta_tensor_name(t), "labels") ? 64 : 10;
            for (int64_t j = 0; j < n; j++)
                d[j] = (int)((j * 31 + step * 7 + i) % mod);
        } else {
            float *d = delta_exec_data(ex, t);
            for (int64_t j = 0; j < n; j++)
                d[j] = (float)((j * 37 + step * 11) % 17) / 17.0f - 0.5f;
        }
    }
}

/* Trains 3 steps with AdamW; returns a malloc'd copy of every persistent
 * tensor's bytes, concatenated, and its size. */
static unsigned char *train(build_fn build, size_t offset, size_t *size) {
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 7);
    delta_tensor *loss = build(c);
    delta_backward(c, loss);
    delta_adamw_opts o = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
    delta_optimizer_adamw(c, o);
    delta_exec_opts eo = {offset};
    char err[256];
    delta_exec *ex = delta_exec_new(c, &eo, err, sizeof err);
    CHECK(ex != NULL, "%s", err);
    if (!ex) { delta_ctx_free(c); return NULL; }
    for (int s = 0; s < 3; s++) {
        fill_inputs(c, ex, s);
        delta_exec_run(ex, DELTA_RUN_STEP);
    }
    size_t total = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE) total += delta_tensor_bytes(t);
    }
    unsigned char *buf = malloc(total + 4), *p = buf;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        memcpy(p, delta_exec_data(ex, t), delta_tensor_bytes(t));
        p += delta_tensor_bytes(t);
    }
    memcpy(p, delta_exec_data(ex, loss), 4);
    *size = total + 4;
    delta_exec_free(ex);
    delta_ctx_free(c);
    return buf;
}

static void check_model(build_fn build, const char *what) {
    size_t n1 = 0, n2 = 0, n3 = 0;
    unsigned char *a = train(build, 0, &n1);
    unsigned char *b = train(build, 0, &n2);
    unsigned char *c = train(build, 7 * DELTA_ALIGN, &n3);
    CHECK(a && b && c && n1 == n2 && n1 == n3);
    if (a && b && c) {
        CHECK(memcmp(a, b, n1) == 0, "%s: two runs differ", what);
        CHECK(memcmp(a, c, n1) == 0, "%s: other addresses give other bits",
              what);
        float loss;
        memcpy(&loss, a + n1 - 4, 4);
        CHECK(isfinite(loss) && loss > 0, "%s: loss %g", what, loss);
    }
    free(a);
    free(b);
    free(c);
}

static void test_gpt_bits(void) { check_model(build_gpt, "gpt"); }
static void test_convnet_bits(void) { check_model(build_conv, "convnet"); }

/* Running the forward pass again within a step (what recomputation does)
 * reproduces every activation, dropout masks included; the next step draws
 * other masks. */
static void test_rerun_forward(void) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *loss = build_gpt(c);
    delta_backward(c, loss);
    char err[256];
    delta_exec *ex = delta_exec_new(c, NULL, err, sizeof err);
    CHECK(ex != NULL, "%s", err);
    if (!ex) { delta_ctx_free(c); return; }
    fill_inputs(c, ex, 0);
    delta_exec_run(ex, DELTA_RUN_FORWARD);
    float l1 = *(float *)delta_exec_data(ex, loss);
    delta_exec_run(ex, DELTA_RUN_FORWARD);
    float l2 = *(float *)delta_exec_data(ex, loss);
    CHECK(memcmp(&l1, &l2, 4) == 0, "rerun: %.9g vs %.9g", l1, l2);
    delta_exec_set_step(ex, 1);
    delta_exec_run(ex, DELTA_RUN_FORWARD);
    float l3 = *(float *)delta_exec_data(ex, loss);
    CHECK(l3 != l1, "another step draws other dropout masks");
    delta_exec_run(ex, DELTA_RUN_EVAL);
    float e1 = *(float *)delta_exec_data(ex, loss);
    delta_exec_set_step(ex, 5);
    delta_exec_run(ex, DELTA_RUN_EVAL);
    float e2 = *(float *)delta_exec_data(ex, loss);
    CHECK(e1 == e2, "eval mode has no dropout");
    delta_exec_free(ex);
    delta_ctx_free(c);
}

int main(void) {
    TEST_RUN(test_gpt_bits);
    TEST_RUN(test_convnet_bits);
    TEST_RUN(test_rerun_forward);
    TEST_MAIN_END();
}
