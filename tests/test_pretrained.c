/* delta_model_config_pretrained: the model of a checkpoint, from delta's
 * metadata, Hugging Face's config.json or the tensors' shapes. The files
 * are written here with the shapes alone mattering (the data is zeros). */
#include "test.h"

#include <stdbool.h>
#include <unistd.h>

#include "delta/models.h"
#include "delta/safetensors.h"

static char dir[] = "/tmp/delta_pretrained_XXXXXX";
static char path[512], cpath[512];
static float zeros[1024 * 128]; /* the largest tensor written */

/* A GPT-2 file of L blocks, width C, vocab V, P positions ("transformer."
 * names when prefixed; with or without an extra tensor of another kind). */
static bool write_gpt2(int L, int64_t C, int64_t V, int64_t P, bool prefixed,
                       const char *const *meta, int n_meta) {
    delta_st_entry e[2 + 8];
    char names[2 + 8][64];
    int n = 0;
    const char *pre = prefixed ? "transformer." : "";
    snprintf(names[n], 64, "%swte.weight", pre);
    e[n] = (delta_st_entry){names[n], "F32", 2, {V, C}, zeros};
    n++;
    snprintf(names[n], 64, "%swpe.weight", pre);
    e[n] = (delta_st_entry){names[n], "F32", 2, {P, C}, zeros};
    n++;
    for (int l = 0; l < L && n < 10; l++, n++) {
        snprintf(names[n], 64, "%sh.%d.ln_1.weight", pre, l);
        e[n] = (delta_st_entry){names[n], "F32", 1, {C}, zeros};
    }
    char err[256];
    delta_status st = delta_st_write(path, e, n, meta, n_meta, err, sizeof err);
    CHECK(st == DELTA_OK, "%s", err);
    return st == DELTA_OK;
}

static void write_config(const char *json) {
    FILE *f = fopen(cpath, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(json, f);
    fclose(f);
}

static delta_status read_cfg(delta_model_config *c, char *err, size_t n) {
    *c = (delta_model_config){0};
    return delta_model_config_pretrained(path, c, err, n);
}

static void test_shapes_alone(void) {
    unlink(cpath);
    if (!write_gpt2(3, 128, 300, 512, true, NULL, 0)) return;
    delta_model_config c;
    char err[512];
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(!strcmp(c.name, "gpt2-small"), "%s", c.name);
    CHECK(c.layers == 3 && c.hidden == 128 && c.heads == 2 && c.vocab == 300 &&
              c.positions == 512,
          "%lld %lld %lld %lld %lld", (long long)c.layers,
          (long long)c.hidden, (long long)c.heads, (long long)c.vocab,
          (long long)c.positions);
    /* the model builds and its table is the file's */
    c.batch = 1;
    c.seq_len = 64; /* shorter than the 512 positions: normal */
    delta_model_config r;
    CHECK(delta_model_resolve(&c, &r, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(r.positions == 512);
    /* GPT2Model's names (no "transformer.") read the same */
    if (!write_gpt2(2, 64, 50, 32, false, NULL, 0)) return;
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(c.layers == 2 && c.hidden == 64 && c.heads == 1 && c.vocab == 50);
    /* a value the caller set is kept */
    c = (delta_model_config){.heads = 4};
    CHECK(delta_model_config_pretrained(path, &c, err, sizeof err) == DELTA_OK);
    CHECK(c.heads == 4);
}

static void test_config_json(void) {
    if (!write_gpt2(2, 96, 300, 128, true, NULL, 0)) return;
    delta_model_config c;
    char err[512];
    /* 96 is no multiple of 64: without config.json the heads are unknown */
    unlink(cpath);
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "--heads") != NULL, "%s", err);
    /* ... unless the caller gives them (delta sample --heads) */
    c = (delta_model_config){.heads = 3};
    CHECK(delta_model_config_pretrained(path, &c, err, sizeof err) ==
              DELTA_OK && c.heads == 3 && c.hidden == 96, "%s", err);
    write_config("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 96, "
                 "\"n_head\": 3, \"vocab_size\": 300, \"n_positions\": 128, "
                 "\"n_ctx\": 128, \"architectures\": [\"GPT2LMHeadModel\"]}");
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(c.heads == 3 && c.hidden == 96 && c.layers == 2);
    /* config.json and the tensors disagree: the setting is named */
    write_config("{\"model_type\": \"gpt2\", \"n_embd\": 128, \"n_head\": 2}");
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "n_embd") && strstr(err, "128") && strstr(err, "96"),
          "%s", err);
    write_config("{\"model_type\": \"bert\"}");
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "bert") != NULL, "%s", err);
    write_config("{\"n_head\": -3}");
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "n_head") != NULL, "%s", err);
    write_config("not json");
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    unlink(cpath);
}

/* A file with a built-in's sizes gets the built-in's name. */
static void test_builtin_name(void) {
    unlink(cpath);
    /* gpt2-tiny: 2 blocks, width 64, 2 heads (not 64-wide): config.json */
    if (!write_gpt2(2, 64, 256, 1024, true, NULL, 0)) return;
    write_config("{\"model_type\": \"gpt2\", \"n_head\": 2}");
    delta_model_config c;
    char err[512];
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(!strcmp(c.name, "gpt2-tiny"), "%s", c.name);
    unlink(cpath);
}

static void test_delta_metadata(void) {
    unlink(cpath);
    const char *meta[] = {"format", "pt", "model", "resnet18", "width", "8",
                          "classes", "10", "image_size", "28", "channels",
                          "1"};
    delta_st_entry e = {"fc.weight", "F32", 2, {10, 64}, zeros};
    char err[512];
    CHECK(delta_st_write(path, &e, 1, meta, 6, err, sizeof err) == DELTA_OK,
          "%s", err);
    delta_model_config c;
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(!strcmp(c.name, "resnet18") && c.width == 8 && c.classes == 10 &&
          c.image_size == 28 && c.channels == 1);
    const char *bad[] = {"model", "gpt5"};
    CHECK(delta_st_write(path, &e, 1, bad, 1, err, sizeof err) == DELTA_OK);
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "gpt5") != NULL, "%s", err);
}

static void test_unknown_and_unreadable(void) {
    delta_st_entry e = {"w", "F32", 1, {4}, zeros};
    char err[512];
    CHECK(delta_st_write(path, &e, 1, NULL, 0, err, sizeof err) == DELTA_OK);
    delta_model_config c;
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT);
    CHECK(strstr(err, "cannot tell the model") != NULL, "%s", err);
    /* no file; a file that is not safetensors */
    unlink(path);
    CHECK(read_cfg(&c, err, sizeof err) != DELTA_OK);
    CHECK(strstr(err, path) != NULL, "%s", err);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("hello", f);
        fclose(f);
    }
    CHECK(read_cfg(&c, err, sizeof err) == DELTA_ERR_FORMAT, "%s", err);
    CHECK(delta_model_config_pretrained(NULL, &c, err, sizeof err) ==
          DELTA_ERR_INVALID_ARG);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    TEST_RUN(test_shapes_alone);
    TEST_RUN(test_config_json);
    TEST_RUN(test_builtin_name);
    TEST_RUN(test_delta_metadata);
    TEST_RUN(test_unknown_and_unreadable);
    unlink(path);
    unlink(cpath);
    rmdir(dir);
    TEST_MAIN_END();
}
