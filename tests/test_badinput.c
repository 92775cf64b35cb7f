/* Bad input to `delta train` and `delta plan`, through the built delta:
 * every option of train's usage without its value, with garbage after a
 * number, out of its range or naming something unknown; every file path
 * (--data, --load, --resume, --save, --json, --trace) missing, a
 * directory, or under a regular file; malformed safetensors given to
 * --load and --resume (truncated, a huge or overlong header length, bad
 * offsets, an unknown dtype, a wrong dtype, a wrong shape, not JSON); and
 * malformed Fashion-MNIST idx folders given to --data. Each is refused
 * with exit 2 and a message naming the problem, never a crash (a crash
 * would show as 128 + signal). test_cli.c holds the cases it had first;
 * the readers' own cases are in test_safetensors.c and test_data.c. */
#include "cli_run.h"

/* ---- options ---------------------------------------------------------------- */

/* Every option of train's usage that takes a value, last on the line:
 * "needs a value". */
static void test_every_option_needs_its_value(void) {
    static const char *const opts[] = {
        "--model", "--image-size", "--channels", "--classes", "--width",
        "--layers", "--hidden", "--heads", "--seq-len", "--vocab",
        "--dropout", "--seq-len-range", "--data", "--batch", "--steps",
        "--seed", "--eval-batches", "--optimizer", "--lr", "--momentum",
        "--weight-decay", "--backend", "--gpu", "--budget", "--policy",
        "--link-bw", "--threads", "--host-memory", "--save", "--load",
        "--checkpoint-every", "--resume", "--json", "--trace", NULL};
    for (int i = 0; opts[i]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "option '%s' needs a value", opts[i]);
        FAILS(2, needle, "--model", "gpt2-tiny", opts[i]);
    }
    /* a flag given a value */
    FAILS(2, "unknown option '--no-shuffle=1'", "--model", "gpt2-tiny",
          "--no-shuffle=1");
    FAILS(2, "unknown option '--quiet=yes'", "--model", "gpt2-tiny",
          "--quiet=yes");
}

/* Whole-number options: garbage after the number, below and above the
 * range. */
static void test_whole_numbers(void) {
    static const char *const opts[] = {
        "--image-size", "--channels", "--classes", "--width", "--layers",
        "--hidden", "--heads", "--seq-len", "--vocab", "--batch", "--steps",
        "--seed", "--eval-batches", "--threads", "--checkpoint-every", NULL};
    for (int i = 0; opts[i]; i++) {
        char needle[96];
        snprintf(needle, sizeof needle, "%s expects a whole number, got '12x'",
                 opts[i]);
        FAILS(2, needle, "--model", "gpt2-tiny", opts[i], "12x");
        snprintf(needle, sizeof needle, "%s is -1; it must be between",
                 opts[i]);
        FAILS(2, needle, "--model", "gpt2-tiny", opts[i], "-1");
        snprintf(needle, sizeof needle, "%s expects a whole number",
                 opts[i]);
        FAILS(2, needle, "--model", "gpt2-tiny", opts[i], "");
    }
    FAILS(2, "--image-size is 0", "--model", "resnet18", "--image-size", "0");
    FAILS(2, "--hidden is 4294967296", "--model", "gpt2-tiny", "--hidden",
          "4294967296");
    FAILS(2, "--steps is 1000000001", "--model", "gpt2-tiny", "--steps",
          "1000000001");
    FAILS(2, "--steps expects a whole number, got '1e3'", "--model",
          "gpt2-tiny", "--steps", "1e3");
    FAILS(2, "--threads is 5000", "--model", "gpt2-tiny", "--threads",
          "5000");
    FAILS(2, "--seed", "--model", "gpt2-tiny", "--seed",
          "99999999999999999999999");
    FAILS(2, "at most 1024", "--model", "gpt2-tiny", "--layers", "100000",
          "--steps", "1");
}

/* Real-valued options: garbage, out of range, not finite. */
static void test_reals(void) {
    FAILS(2, "--dropout is 1;", "--model", "gpt2-tiny", "--dropout", "1");
    FAILS(2, "--dropout is -0.1", "--model", "gpt2-tiny", "--dropout",
          "-0.1");
    FAILS(2, "--dropout", "--model", "gpt2-tiny", "--dropout", "0.1x");
    FAILS(2, "--lr: expected a learning rate above 0", "--model",
          "gpt2-tiny", "--lr", "0");
    FAILS(2, "at most 100, got '101'", "--model", "gpt2-tiny", "--lr", "101");
    FAILS(2, "--lr", "--model", "gpt2-tiny", "--lr", "nan");
    FAILS(2, "--momentum is 1;", "--model", "gpt2-tiny", "--momentum", "1");
    FAILS(2, "--momentum", "--model", "gpt2-tiny", "--momentum", "-0.5");
    FAILS(2, "--weight-decay is -1", "--model", "gpt2-tiny",
          "--weight-decay", "-1");
    FAILS(2, "--weight-decay is 11", "--model", "gpt2-tiny",
          "--weight-decay", "11");
    FAILS(2, "--link-bw is -1", "--model", "gpt2-tiny", "--link-bw", "-1");
    FAILS(2, "--link-bw", "--model", "gpt2-tiny", "--link-bw", "inf");
    FAILS(2, "--link-bw", "--model", "gpt2-tiny", "--link-bw", "fast");
    /* defect 10: 1e-300 ran unthrottled, 1e-6 never ended */
    FAILS(2, "at least 0.01 GB/s", "--model", "gpt2-tiny", "--link-bw",
          "1e-300");
    FAILS(2, "at least 0.01 GB/s", "--model", "gpt2-tiny", "--link-bw",
          "1e-6");
    const char *slow[] = {"--model", "mlp", "--data", "synthetic", "--steps",
                          "1", "--budget", "90%", "--link-bw", "0.01", NULL};
    run_tool(&res, true, slow);
    CHECK(res.status == 0 && strstr(res.err, "link 0.01 GB/s"),
          "the slowest link: %d %.300s", res.status, res.err);
    const char *none[] = {"--model", "mlp", "--data", "synthetic", "--steps",
                          "1", "--budget", "90%", "--link-bw", "0", NULL};
    run_tool(&res, true, none);
    CHECK(res.status == 0 && strstr(res.err, "link unthrottled"),
          "no throttle: %d %.300s", res.status, res.err);
}

/* Sizes, budgets and names. */
static void test_sizes_and_names(void) {
    FAILS(2, "a budget of 0 bytes holds nothing", "--model", "gpt2-tiny",
          "--budget", "0");
    FAILS(2, "'0%' is not a valid percentage", "--model", "gpt2-tiny",
          "--budget", "0%");
    FAILS(2, "'1001%' is not a valid percentage", "--model", "gpt2-tiny",
          "--budget", "1001%");
    FAILS(2, "--budget", "--model", "gpt2-tiny", "--budget", "lots");
    FAILS(2, "--budget", "--model", "gpt2-tiny", "--budget",
          "99999999999TiB");
    FAILS(2, "--host-memory 0", "--model", "gpt2-tiny", "--host-memory",
          "0");
    FAILS(2, "unknown unit", "--model", "gpt2-tiny", "--host-memory",
          "12 parsecs");
    FAILS(2, "unknown model ''", "--model", "");
    FAILS(2, "unknown model 'resnet19'", "--model", "resnet19");
    FAILS(2, "unknown policy ''", "--model", "gpt2-tiny", "--policy", "");
    FAILS(2, "unknown GPU 'v100'", "--model", "gpt2-tiny", "--gpu", "v100");
    FAILS(2, "unknown backend ''", "--model", "gpt2-tiny", "--backend", "");
    FAILS(2, "unknown optimizer 'SGD'", "--model", "gpt2-tiny",
          "--optimizer", "SGD");
    FAILS(2, "a simulated GPU has its preset's", "--model", "gpt2-tiny",
          "--backend", "sim", "--link-bw", "1");
    /* the top-level command */
    const char *none[] = {NULL};
    run_tool(&res, false, none);
    CHECK(res.status == 2 && strstr(res.err, "usage: delta"),
          "no command: %d %s", res.status, res.err);
    const char *bad[] = {"trian", NULL};
    run_tool(&res, false, bad);
    CHECK(res.status == 2 && strstr(res.err, "unknown command 'trian'"),
          "unknown command: %d %s", res.status, res.err);
}

/* delta plan shares train's options and refuses the same way. */
static void test_plan_bad_input(void) {
    static const char *const cases[][6] = {
        {"--model", "nope", NULL, NULL, "unknown model 'nope'"},
        {"--model", "gpt2-tiny", "--budget", "10xB", "unknown unit"},
        {"--model", "gpt2-tiny", "--batch", "0", "--batch is 0"},
        {"--model", "gpt2-tiny", "--json", "/no/such/dir/p.json",
         "/no/such/dir/p.json"},
        {"--model", "gpt2-tiny", "--checkpoint-every", "2",
         "--checkpoint-every needs --save"},
        {"--model", "gpt2-tiny", "--gpu", "nope", "unknown GPU"},
    };
    for (int i = 0; i < 6; i++) {
        const char *args[6] = {"plan"};
        int n = 1;
        for (int k = 0; k < 4 && cases[i][k]; k++) args[n++] = cases[i][k];
        args[n] = NULL;
        run_tool(&res, false, args);
        CHECK(res.status == 2 && strstr(res.err, cases[i][4]),
              "plan case %d: status %d, stderr %.300s (want '%s')", i,
              res.status, res.err, cases[i][4]);
    }
}

/* ---- paths ------------------------------------------------------------------ */

static void test_paths(void) {
    char file[128], under[160], sub[160];
    path_in_tmp(file, sizeof file, "a_file");
    FILE *f = fopen(file, "w");
    if (f) {
        fputs("not a folder\n", f);
        fclose(f);
    }
    snprintf(under, sizeof under, "%s/x.safetensors", file);
    snprintf(sub, sizeof sub, "%s/sub", tmpdir);
    mkdir(sub, 0755);
#define SMALL "--model", "mlp", "--data", "synthetic", "--steps", "1"
    /* --save */
    FAILS(2, "is a folder", SMALL, "--save", tmpdir);
    FAILS(2, "Not a directory", SMALL, "--save", under);
    FAILS(2, "cannot create files there", SMALL, "--save",
          "/no/such/dir/x.safetensors");
    FAILS(2, "cannot create files there", SMALL, "--save",
          "/proc/delta.safetensors");
    /* --json and --trace */
    FAILS(2, "is a folder", SMALL, "--json", tmpdir);
    FAILS(2, "Not a directory", SMALL, "--json", under);
    FAILS(2, "is a folder", SMALL, "--trace", tmpdir);
    FAILS(2, "No such file or directory", SMALL, "--trace",
          "/no/such/dir/t.json");
    FAILS(2, "Not a directory", SMALL, "--trace", under);
    /* --load and --resume */
    FAILS(2, "is not a regular file", SMALL, "--load", tmpdir);
    FAILS(2, "/no/such/x.safetensors", SMALL, "--load",
          "/no/such/x.safetensors");
    FAILS(2, "Not a directory", SMALL, "--load", under);
    FAILS(2, "is not a regular file", SMALL, "--resume", sub);
    FAILS(2, "Not a directory", SMALL, "--resume", under);
    /* --data */
    FAILS(2, "not a regular file", "--model", "gpt2-tiny", "--steps", "1",
          "--data", tmpdir);
    FAILS(2, "is a file", "--model", "mlp", "--steps", "1", "--data", file);
    FAILS(2, "missing file", "--model", "mlp", "--steps", "1", "--data",
          sub);
    FAILS(2, "Not a directory", "--model", "mlp", "--steps", "1", "--data",
          under);
    FAILS(2, "too short", "--model", "gpt2-tiny", "--steps", "1", "--data",
          file);
#undef SMALL
}

/* ---- malformed safetensors -------------------------------------------------- */

/* Writes n bytes to path. */
static void put_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

/* A file of header length hl (as written in the first 8 bytes), the JSON
 * text and data_len zero bytes. */
static void put_st(const char *path, uint64_t hl, const char *json,
                   size_t data_len) {
    size_t h = strlen(json);
    size_t n = 8 + h + data_len;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8, json, h);
    put_bytes(path, b, n);
    free(b);
}

/* A copy of src (a delta checkpoint) with tensor `name` replaced by one of
 * dtype and shape (1-d, n elements; zeros). */
static void put_replaced(const char *path, const char *src, const char *name,
                         const char *dtype, int64_t n) {
    delta_st_file *f = delta_st_open(src, NULL, NULL, 0);
    CHECK(f != NULL, "cannot open %s", src);
    if (!f) return;
    int c = delta_st_count(f);
    delta_st_entry *e = calloc((size_t)c, sizeof *e);
    void *zeros = calloc((size_t)n, 8);
    for (int i = 0; i < c; i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        e[i] = (delta_st_entry){.name = t->name, .st_dtype = t->st_dtype,
                                .ndim = t->ndim, .data = t->data};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        if (strcmp(t->name, name)) continue;
        e[i] = (delta_st_entry){.name = t->name, .st_dtype = dtype,
                                .ndim = 1, .shape = {n}, .data = zeros};
    }
    const char *kv[64];
    int nm = st_meta_pairs(f, kv);
    CHECK(delta_st_write(path, e, c, kv, nm, NULL, 0) == DELTA_OK,
          "writing %s", path);
    free(zeros);
    free(e);
    delta_st_close(f);
}

/* Each malformed file, given to --load and to --resume, exits 2 with the
 * reader's message. */
static void test_malformed_checkpoints(void) {
    char good[128], p[128];
    path_in_tmp(good, sizeof good, "good.safetensors");
    path_in_tmp(p, sizeof p, "bad.safetensors");
    TRAIN("--model", "mlp", "--data", "synthetic", "--steps", "1",
          "--checkpoint-every", "1", "--save", good, "--quiet");
    CHECK(res.status == 0, "good checkpoint: %d %s", res.status, res.err);
    size_t len = 0;
    unsigned char *bytes = NULL;
    {
        FILE *f = fopen(good, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            len = (size_t)ftell(f);
            fseek(f, 0, SEEK_SET);
            bytes = malloc(len);
            if (bytes && fread(bytes, 1, len, f) != len) len = 0;
            fclose(f);
        }
    }
    CHECK(bytes && len > 64, "cannot read %s", good);
    if (!bytes || len <= 64) {
        free(bytes);
        return;
    }
    static const char *const how[] = {"--load", "--resume"};
    for (int h = 0; h < 2; h++) {
#define BAD(needle)                                                        \
    FAILS(2, needle, "--model", "mlp", "--data", "synthetic", "--steps",   \
          "2", how[h], p)
        put_bytes(p, bytes, len / 2);
        BAD("run past the end");
        put_bytes(p, bytes, len - 4);
        BAD("bad.safetensors");
        put_bytes(p, bytes, 5);
        BAD("shorter than the 8-byte header length");
        put_bytes(p, "", 0);
        BAD("bad.safetensors");
        put_st(p, (uint64_t)1 << 40, "{}", 0);
        BAD("exceeds the");
        put_st(p, 0, "", 0);
        BAD("header length is 0");
        put_st(p, 9, "{not json", 0);
        BAD("bad.safetensors");
        const char *off = "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[0,16]}}";
        put_st(p, strlen(off), off, 8);
        BAD("fc1.weight");
        const char *dt = "{\"fc1.weight\":{\"dtype\":\"Q4\",\"shape\":[2],"
                         "\"data_offsets\":[0,8]}}";
        put_st(p, strlen(dt), dt, 8);
        BAD("Q4");
        /* well-formed files whose tensor does not fit the model */
        put_replaced(p, good, "fc1.bias", "U16", 256);
        BAD("mismatch: fc1.bias is (256,) U16 in the file");
        /* BF16 loads (widened), but --resume needs the exact fp32 masters */
        put_replaced(p, good, "fc1.bias", "BF16", 256);
        if (!strcmp(how[h], "--resume"))
            BAD("mismatch: fc1.bias is (256,) BF16 in the file");
        put_replaced(p, good, "fc1.bias", "F32", 255);
        BAD("mismatch: fc1.bias is (255,) F32 in the file");
        put_replaced(p, good, "fc1.bias", "I64", 256);
        BAD("mismatch: fc1.bias");
#undef BAD
    }
    free(bytes);
}

/* ---- malformed idx folders ---------------------------------------------------- */

/* dir/name: an idx file of header words hdr (big-endian) and n bytes. */
static void put_idx(const char *dir, const char *name, const uint32_t *hdr,
                    int nh, const uint8_t *data, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_idx(path, hdr, nh, data, n);
}

/* A fresh folder for one case. */
static const char *case_dir(const char *name) {
    static char d[160];
    snprintf(d, sizeof d, "%s/idx_%s", tmpdir, name);
    mkdir(d, 0755);
    return d;
}

#define IMG "train-images-idx3-ubyte"
#define LAB "train-labels-idx1-ubyte"

static void test_malformed_idx(void) {
    uint8_t pix[6 * 4 * 4] = {0}, lab[6] = {0, 1, 2, 3, 4, 5}, bad_lab[6];
    const uint32_t img_hdr[4] = {0x803, 6, 4, 4}, lab_hdr[2] = {0x801, 6};
    memcpy(bad_lab, lab, sizeof lab);
    bad_lab[3] = 200;
    struct {
        const char *name, *needle;
        uint32_t img[4];
        size_t img_n;     /* pixel bytes written */
        const uint8_t *labels;
        uint32_t lab[2];
        bool no_labels;
    } cases[] = {
        {"magic", "bad magic", {0x801, 6, 4, 4}, 96, lab, {0x801, 6}, false},
        {"truncated", "truncated", {0x803, 6, 4, 4}, 90, lab, {0x801, 6},
         false},
        {"trailing", "data after", {0x803, 6, 4, 4}, 97, lab, {0x801, 6},
         false},
        {"counts", "6 images", {0x803, 6, 4, 4}, 96, lab, {0x801, 5}, false},
        {"label", "label 200 of item 3", {0x803, 6, 4, 4}, 96, bad_lab,
         {0x801, 6}, false},
        {"zero_side", "dim 1 is 0", {0x803, 6, 0, 4}, 0, lab, {0x801, 6},
         false},
        {"huge", "dim 0 is 4294967295", {0x803, 0xffffffffu, 4, 4}, 96, lab,
         {0x801, 6}, false},
        {"no_labels", "missing file", {0x803, 6, 4, 4}, 96, lab, {0x801, 6},
         true},
    };
    uint8_t big[128] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = case_dir(cases[i].name);
        put_idx(d, IMG, cases[i].img, 4, big, cases[i].img_n);
        if (!cases[i].no_labels)
            put_idx(d, LAB, cases[i].lab, 2, cases[i].labels,
                    cases[i].lab[1] < 6 ? cases[i].lab[1] : 6);
        FAILS(2, cases[i].needle, "--model", "mlp", "--steps", "1", "--data",
              d);
    }
    /* an empty images file, and a folder in place of the labels */
    const char *d = case_dir("empty");
    put_idx(d, IMG, NULL, 0, NULL, 0);
    put_idx(d, LAB, lab_hdr, 2, lab, 6);
    FAILS(2, "empty file", "--model", "mlp", "--steps", "1", "--data", d);
    d = case_dir("dir_labels");
    put_idx(d, IMG, img_hdr, 4, pix, sizeof pix);
    char p[256];
    snprintf(p, sizeof p, "%s/" LAB, d);
    mkdir(p, 0755);
    FAILS(2, "not a regular file", "--model", "mlp", "--steps", "1",
          "--data", d);
    /* not square: the models take square images */
    d = case_dir("oblong");
    const uint32_t ob[4] = {0x803, 6, 4, 2};
    put_idx(d, IMG, ob, 4, pix, 6 * 8);
    put_idx(d, LAB, lab_hdr, 2, lab, 6);
    FAILS(2, "square", "--model", "mlp", "--steps", "1", "--data", d);
    /* drop-last with a batch larger than the data: no batch in an epoch */
    d = case_dir("tiny_ok");
    put_idx(d, IMG, img_hdr, 4, pix, sizeof pix);
    put_idx(d, LAB, lab_hdr, 2, lab, 6);
    FAILS(2, "larger than the dataset", "--model", "mlp", "--steps", "1",
          "--data", d, "--batch", "8", "--drop-last");
    /* --image-size that does not match the data */
    FAILS(2, "does not match the data", "--model", "mlp", "--steps", "1",
          "--data", d, "--image-size", "28");
}

/* ---- what was quietly accepted (issue 16, defect 13) -------------------------- */

static void test_quiet_acceptances(void) {
    char ck[128], dotted[160], text[128], log[128];
    path_in_tmp(ck, sizeof ck, "q_ck.safetensors");
    snprintf(dotted, sizeof dotted, "%s/./q_ck.safetensors", tmpdir);
    path_in_tmp(text, sizeof text, "q_notes.txt");
    path_in_tmp(log, sizeof log, "q_log.jsonl");
    char body[200];
    for (size_t i = 0; i + 1 < sizeof body; i++) body[i] = (char)('a' + i % 26);
    body[sizeof body - 1] = '\0';
    CHECK(write_text(text, body), "writing %s", text);
#define MLP "--model", "mlp", "--data", "synthetic"
    TRAIN(MLP, "--steps", "1", "--checkpoint-every", "1", "--save", ck);
    CHECK(res.status == 0, "checkpoint: %d %s", res.status, res.err);
    /* --resume without --save: the continued run would be thrown away */
    TRAIN(MLP, "--steps", "2", "--resume", ck);
    CHECK(res.status == 0 && strstr(res.err, "warning: --resume without "
                                    "--save"),
          "--resume without --save: status %d, stderr %.400s", res.status,
          res.err);
    TRAIN(MLP, "--steps", "2", "--resume", ck, "--save", ck, "--quiet");
    CHECK(res.status == 0 && !strstr(res.err, "warning"),
          "--resume with --save: status %d, stderr %.400s", res.status,
          res.err);
    /* two outputs on one file, also when the text differs */
    FAILS(2, "--json and --trace name the same file", MLP, "--steps", "1",
          "--json", log, "--trace", log);
    FAILS(2, "--save and --json name the same file", MLP, "--steps", "1",
          "--save", ck, "--json", dotted);
    FAILS(2, "--save and --trace name the same file", MLP, "--steps", "1",
          "--save", log, "--trace", log);
    /* an output on the file the run reads */
    FAILS(2, "is also --data's file", "--model", "gpt2-tiny", "--steps",
          "1", "--data", text, "--save", text);
    FAILS(2, "is also --data's file", "--model", "gpt2-tiny", "--steps",
          "1", "--data", text, "--json", text);
    FAILS(2, "is also --resume's file", MLP, "--steps", "3", "--resume", ck,
          "--json", dotted);
    FAILS(2, "is also --load's file", MLP, "--steps", "1", "--load", ck,
          "--trace", ck);
    CHECK(file_holds(text, body), "a refused run changed %s", text);
    /* ... but --save over --load's or --resume's file is the usual way */
    TRAIN(MLP, "--steps", "1", "--load", ck, "--save", ck, "--quiet");
    CHECK(res.status == 0, "--load and --save on one file: %d %s",
          res.status, res.err);
#undef MLP
    /* delta plan names the options it does not use */
    const char *plan[] = {"plan", "--model", "mlp", "--steps", "5", "--lr",
                          "0.1", "--budget", "50%", "--policy", "dtr", NULL};
    run_tool(&res, false, plan);
    CHECK(res.status == 0 && strstr(res.err, "warning: ignoring --steps, "
                                    "--lr, --budget, --policy"),
          "plan with train's options: status %d, stderr %.400s", res.status,
          res.err);
    const char *plan_ok[] = {"plan", "--model", "mlp", "--batch", "8",
                             "--optimizer", "adamw", NULL};
    run_tool(&res, false, plan_ok);
    CHECK(res.status == 0 && !strstr(res.err, "warning"),
          "plan with its own options warns: status %d, stderr %.400s",
          res.status, res.err);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_badinput")) return 1;
    TEST_RUN(test_every_option_needs_its_value);
    TEST_RUN(test_whole_numbers);
    TEST_RUN(test_reals);
    TEST_RUN(test_sizes_and_names);
    TEST_RUN(test_plan_bad_input);
    TEST_RUN(test_paths);
    TEST_RUN(test_malformed_checkpoints);
    TEST_RUN(test_malformed_idx);
    TEST_RUN(test_quiet_acceptances);
    cli_cleanup();
    TEST_MAIN_END();
}
