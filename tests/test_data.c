/* Tests for the data layer (include/delta/data.h): the real Fashion-MNIST
 * (skipped when Debian's dataset-fashion-mnist is not installed), one test
 * per kind of malformed idx file, byte-level text windows, masked-LM
 * corruption rates, synthetic data, and the loader's order, epochs,
 * partial batches and resume. Set DELTA_TEST_VERBOSE=1 to see every
 * refusal message. */
#include "delta/data.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef DELTA_HAVE_ZLIB
#include <zlib.h>
#endif

#include "test.h"

static char tmpdir[64];
static bool verbose;

static const char *tmp_path(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static inline bool dir_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* Writes data gzip'd to path (or plain when zlib is missing). */
static void write_gz(const char *path, const void *data, size_t n) {
#ifdef DELTA_HAVE_ZLIB
    gzFile g = gzopen(path, "wb");
    if (!g) abort();
    if (n) gzwrite(g, data, (unsigned)n);
    gzclose(g);
#else
    write_file(path, data, n);
#endif
}

/* ---- the real Fashion-MNIST ------------------------------------------- */

static delta_dataset *fm_train;  /* loaded once, freed in main */

static delta_dataset *get_fm_train(void) {
    static bool tried;
    if (!tried) {
        tried = true;
        char err[512] = "";
        delta_status st;
        fm_train = delta_dataset_fashion_mnist_new(NULL, DELTA_SPLIT_TRAIN,
                                                   &st, err, sizeof err);
        if (!fm_train) fprintf(stderr, "  fashion-mnist: %s\n", err);
    }
    return fm_train;
}

#ifdef DELTA_HAVE_ZLIB
#define NEED_FMNIST()                                                       \
    do {                                                                    \
        if (!dir_exists(DELTA_FASHION_MNIST_DIR))                           \
            TEST_SKIP("no " DELTA_FASHION_MNIST_DIR                         \
                      " (apt-get install dataset-fashion-mnist)");          \
    } while (0)
#else
#define NEED_FMNIST() \
    TEST_SKIP("built without zlib; Debian's Fashion-MNIST files are gzip'd")
#endif

static void test_fmnist_train(void) {
    NEED_FMNIST();
    delta_dataset *ds = get_fm_train();
    CHECK(ds != NULL, "train split refused");
    if (!ds) return;
    delta_data_info in = delta_dataset_info(ds);
    CHECK(delta_dataset_len(ds) == 60000, "len %lld", (long long)in.len);
    CHECK(in.kind == DELTA_DATA_IMAGES);
    CHECK(in.channels == 1 && in.height == 28 && in.width == 28,
          "shape %lldx%lldx%lld", (long long)in.channels,
          (long long)in.height, (long long)in.width);
    CHECK(in.classes == 10 && in.input_dtype == DELTA_F32 &&
          in.input_numel == 784 && in.target_numel == 1 &&
          in.mask_numel == 0 && in.mask_id == -1);
    CHECK(strstr(delta_dataset_name(ds), "fashion-mnist train") != NULL,
          "name '%s'", delta_dataset_name(ds));

    /* The well-known first labels of the training split. */
    static const int first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    float x[784];
    int32_t y;
    for (int i = 0; i < 10; i++) {
        delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        CHECK(y == first[i], "label %d is %d, expected %d", i, y, first[i]);
    }

    /* Normalized pixels: range [(0 - m)/s, (1 - m)/s], the extremes both
     * reached; over the whole split mean ~0 and std ~1 (mean and std are
     * the training pixels'). */
    const float m = DELTA_FASHION_MNIST_MEAN, sdv = DELTA_FASHION_MNIST_STD;
    const float lo = (0.0f - m) / sdv, hi = (1.0f - m) / sdv;
    float mn = INFINITY, mx = -INFINITY;
    double sum = 0, sq = 0;
    long counts[10] = {0};
    for (int64_t i = 0; i < 60000; i++) {
        delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        if (y >= 0 && y < 10) counts[y]++;
        for (int j = 0; j < 784; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
            sum += x[j];
            sq += (double)x[j] * x[j];
        }
    }
    double n = 60000.0 * 784, mean = sum / n, sd = sqrt(sq / n - mean * mean);
    CHECK(fabsf(mn - lo) < 1e-6f && fabsf(mx - hi) < 1e-6f,
          "range [%g, %g], expected [%g, %g]", mn, mx, lo, hi);
    CHECK(fabs(mean) < 0.01 && fabs(sd - 1) < 0.01, "mean %g std %g", mean,
          sd);
    for (int c = 0; c < 10; c++)
        CHECK(counts[c] == 6000, "class %d has %ld samples", c, counts[c]);
}

static void test_fmnist_test_split(void) {
    NEED_FMNIST();
    char err[512] = "";
    delta_status st = DELTA_ERR_STATE;
    delta_dataset *ds = delta_dataset_fashion_mnist_new(
        DELTA_FASHION_MNIST_DIR, DELTA_SPLIT_TEST, &st, err, sizeof err);
    CHECK(ds != NULL && st == DELTA_OK, "%s", err);
    if (!ds) return;
    CHECK(delta_dataset_len(ds) == 10000, "len %lld",
          (long long)delta_dataset_len(ds));
    long counts[10] = {0};
    float x[784];
    int32_t y;
    for (int64_t i = 0; i < 10000; i++) {
        delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        if (y >= 0 && y < 10) counts[y]++;
    }
    for (int c = 0; c < 10; c++)
        CHECK(counts[c] == 1000, "class %d has %ld samples", c, counts[c]);
    delta_dataset_free(ds);
}

static void test_fmnist_loader(void) {
    NEED_FMNIST();
    delta_dataset *ds = get_fm_train();
    if (!ds) {
        CHECK(ds != NULL);
        return;
    }
    char err[256];
    delta_loader *l = delta_loader_new(ds, 64, 42, true, true, NULL, err,
                                       sizeof err);
    CHECK(l != NULL, "%s", err);
    if (!l) return;
    CHECK(delta_loader_batches_per_epoch(l) == 937);
    delta_batch b;
    CHECK(delta_batch_alloc(&b, ds, 64) == DELTA_OK);
    delta_loader_next(l, &b);
    CHECK(b.size == 64 && b.epoch == 0 && b.index == 0);
    int64_t *perm = malloc(60000 * sizeof *perm);
    delta_data_permutation(60000, 42, 0, perm);
    float x[784];
    int32_t y;
    for (int s = 0; s < 64; s++) {
        delta_dataset_get(ds, perm[s], 0, 0, x, &y, NULL);
        CHECK(y == b.target[s] &&
                  memcmp(x, (float *)b.input + 784 * s, sizeof x) == 0,
              "sample %d of the batch is not dataset[%lld]", s,
              (long long)perm[s]);
    }
    free(perm);
    delta_batch_release(&b);
    delta_loader_free(l);
}

/* ---- malformed idx files ------------------------------------------------ */

/* Bytes of an idx file: magic, dims, then data (n bytes). */
static size_t idx_bytes(uint8_t *out, uint32_t magic, int ndim,
                        const uint32_t *dims, const uint8_t *data, size_t n) {
    size_t k = 0;
    uint32_t words[4] = {magic, 0, 0, 0};
    for (int d = 0; d < ndim; d++) words[1 + d] = dims[d];
    for (int w = 0; w <= ndim; w++)
        for (int s = 3; s >= 0; s--) out[k++] = (uint8_t)(words[w] >> (8 * s));
    if (n) memcpy(out + k, data, n);
    return k + n;
}

/* A good small split: 5 images of 2x3, labels 0..4. */
#define SM_N 5
static uint8_t sm_pix[SM_N * 6];
static uint8_t sm_lab[SM_N] = {0, 1, 2, 3, 9};
static uint8_t img_file[4096], lab_file[4096];
static size_t img_len, lab_len;

static void make_good(void) {
    for (int i = 0; i < SM_N * 6; i++) sm_pix[i] = (uint8_t)(i * 37 % 256);
    sm_pix[0] = 0;
    sm_pix[1] = 255;
    uint32_t idims[3] = {SM_N, 2, 3}, ldims[1] = {SM_N};
    img_len = idx_bytes(img_file, 0x803, 3, idims, sm_pix, sizeof sm_pix);
    lab_len = idx_bytes(lab_file, 0x801, 1, ldims, sm_lab, sizeof sm_lab);
}

/* A fresh folder under tmpdir holding the given files (gzip'd when gz). */
static const char *case_dir(const char *name) {
    static char d[256];
    snprintf(d, sizeof d, "%s/%s", tmpdir, name);
    mkdir(d, 0700);
    return d;
}

static void put(const char *dir, const char *file, const void *data, size_t n,
                bool gz) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (gz)
        write_gz(p, data, n);
    else
        write_file(p, data, n);
}

static void put_pair(const char *dir, const void *img, size_t ni,
                     const void *lab, size_t nl) {
    put(dir, "train-images-idx3-ubyte.gz", img, ni, true);
    put(dir, "train-labels-idx1-ubyte.gz", lab, nl, true);
}

/* Opens the train split of dir and checks it is refused with status s and
 * a message that holds each needle. */
static void expect_refused_(const char *dir, delta_status s,
                            const char *needle1, const char *needle2,
                            int line) {
    char err[512] = "";
    delta_status st = DELTA_OK;
    delta_dataset *ds = delta_dataset_fashion_mnist_new(
        dir, DELTA_SPLIT_TRAIN, &st, err, sizeof err);
    CHECK(ds == NULL, "line %d: %s accepted", line, dir);
    CHECK(st == s, "line %d: status %s, expected %s (%s)", line,
          delta_status_name(st), delta_status_name(s), err);
    CHECK(err[0], "line %d: empty message", line);
    if (needle1)
        CHECK(strstr(err, needle1), "line %d: message '%s' lacks '%s'", line,
              err, needle1);
    if (needle2)
        CHECK(strstr(err, needle2), "line %d: message '%s' lacks '%s'", line,
              err, needle2);
    if (verbose) printf("  # %s\n", err);
    delta_dataset_free(ds);
}
#define expect_refused(dir, s, n1, n2) \
    expect_refused_(dir, s, n1, n2, __LINE__)

static void check_small(const char *dir) {
    char err[512] = "";
    delta_status st = DELTA_ERR_STATE;
    delta_dataset *ds = delta_dataset_fashion_mnist_new(
        dir, DELTA_SPLIT_TRAIN, &st, err, sizeof err);
    CHECK(ds && st == DELTA_OK, "%s: %s", dir, err);
    if (!ds) return;
    delta_data_info in = delta_dataset_info(ds);
    CHECK(in.len == SM_N && in.channels == 1 && in.height == 2 &&
          in.width == 3 && in.input_numel == 6);
    for (int i = 0; i < SM_N; i++) {
        float x[6];
        int32_t y;
        delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        CHECK(y == sm_lab[i], "label %d", i);
        for (int j = 0; j < 6; j++) {
            float want = ((float)sm_pix[i * 6 + j] / 255.0f - 0.2860f) /
                         0.3530f;
            CHECK(fabsf(x[j] - want) < 1e-6f, "pixel %d,%d %g vs %g", i, j,
                  x[j], want);
        }
    }
    delta_dataset_free(ds);
}

static void test_idx_good_variants(void) {
    make_good();
    const char *d = case_dir("good_gz");
    put_pair(d, img_file, img_len, lab_file, lab_len);
    check_small(d);
    /* Plain idx bytes under the .gz names: zlib passes them through. */
    d = case_dir("good_plain_in_gz");
    put(d, "train-images-idx3-ubyte.gz", img_file, img_len, false);
    put(d, "train-labels-idx1-ubyte.gz", lab_file, lab_len, false);
    check_small(d);
    /* Unpacked files, without .gz. */
    d = case_dir("good_unpacked");
    put(d, "train-images-idx3-ubyte", img_file, img_len, false);
    put(d, "train-labels-idx1-ubyte", lab_file, lab_len, false);
    check_small(d);
}

static void test_idx_bad_magic(void) {
    make_good();
    uint8_t b[4096];
    memcpy(b, img_file, img_len);
    b[3] = 0x01;  /* 0x801: a labels file given as images */
    const char *d = case_dir("bad_magic_images");
    put_pair(d, b, img_len, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images-idx3-ubyte.gz",
                   "bad magic 0x00000801");
    memcpy(b, lab_file, lab_len);
    b[0] = 0x12;
    d = case_dir("bad_magic_labels");
    put_pair(d, img_file, img_len, b, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "train-labels-idx1-ubyte.gz",
                   "bad magic");
}

static void test_idx_truncated(void) {
    make_good();
    /* Data cut short (a valid gzip stream of too few bytes). */
    const char *d = case_dir("trunc_data");
    put_pair(d, img_file, img_len - 4, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "truncated");
    /* Header cut short. */
    d = case_dir("trunc_header");
    put_pair(d, img_file, img_len, lab_file, 6);
    expect_refused(d, DELTA_ERR_FORMAT, "train-labels", "truncated header");
    /* A plain file cut short. */
    d = case_dir("trunc_plain");
    put(d, "train-images-idx3-ubyte", img_file, img_len - 1, false);
    put(d, "train-labels-idx1-ubyte", lab_file, lab_len, false);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "truncated");
#ifdef DELTA_HAVE_ZLIB
    /* The gzip stream itself cut in half. */
    d = case_dir("trunc_gzip");
    put_pair(d, img_file, img_len, lab_file, lab_len);
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    FILE *f = fopen(p, "rb");
    uint8_t gzb[4096];
    size_t n = fread(gzb, 1, sizeof gzb, f);
    fclose(f);
    write_file(p, gzb, n / 2);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "truncated");
    /* Corrupt deflate data (bytes after the 10-byte gzip header). */
    for (size_t i = 10; i < n - 8; i++) gzb[i] ^= 0xa5;
    write_file(p, gzb, n);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "gzip");
#endif
}

static void test_idx_count_mismatch(void) {
    make_good();
    uint32_t ldims[1] = {SM_N - 1};
    uint8_t lab[64];
    size_t nl = idx_bytes(lab, 0x801, 1, ldims, sm_lab, SM_N - 1);
    const char *d = case_dir("count_mismatch");
    put_pair(d, img_file, img_len, lab, nl);
    expect_refused(d, DELTA_ERR_FORMAT, "5 images", "4 labels");
}

static void test_idx_label_out_of_range(void) {
    make_good();
    uint8_t lab[64];
    memcpy(lab, lab_file, lab_len);
    lab[8 + 2] = 12;
    const char *d = case_dir("label12");
    put_pair(d, img_file, img_len, lab, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "label 12 of item 2", "0..9");
}

static void test_idx_huge_dims(void) {
    make_good();
    uint8_t b[64];
    /* A count past the bound. */
    uint32_t dims1[3] = {0xffffffffu, 28, 28};
    size_t n = idx_bytes(b, 0x803, 3, dims1, sm_pix, 8);
    const char *d = case_dir("huge_count");
    put_pair(d, b, n, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "dim 0 is 4294967295", NULL);
    /* A side past the bound. */
    uint32_t dims2[3] = {5, 100000, 100000};
    n = idx_bytes(b, 0x803, 3, dims2, sm_pix, 8);
    d = case_dir("huge_side");
    put_pair(d, b, n, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "dim 1 is 100000", NULL);
    /* A zero dim. */
    uint32_t dims3[3] = {5, 0, 28};
    n = idx_bytes(b, 0x803, 3, dims3, sm_pix, 8);
    d = case_dir("zero_side");
    put_pair(d, b, n, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "dim 1 is 0", NULL);
    /* Within the bounds but far larger (2^52 bytes) than the file: refused
     * as truncated, having allocated only what arrived. */
    uint32_t dims4[3] = {1u << 28, 4096, 4096};
    n = idx_bytes(b, 0x803, 3, dims4, sm_pix, 8);
    d = case_dir("lying_dims");
    put_pair(d, b, n, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "truncated", NULL);
}

static void test_idx_trailing_data(void) {
    make_good();
    uint8_t b[4096];
    memcpy(b, img_file, img_len);
    b[img_len] = 7;
    const char *d = case_dir("trailing");
    put_pair(d, b, img_len + 1, lab_file, lab_len);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "data after");
}

static void test_idx_not_gzip_empty_missing(void) {
    make_good();
    const char *text = "this is not a gzip file, nor an idx file\n";
    const char *d = case_dir("not_gzip");
    put(d, "train-images-idx3-ubyte.gz", text, strlen(text), false);
    put(d, "train-labels-idx1-ubyte.gz", lab_file, lab_len, true);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "bad magic");

    d = case_dir("empty");
    put(d, "train-images-idx3-ubyte.gz", "", 0, false);
    put(d, "train-labels-idx1-ubyte.gz", lab_file, lab_len, true);
    expect_refused(d, DELTA_ERR_FORMAT, "train-images", "empty file");

    d = case_dir("empty_gz");  /* a valid gzip stream of nothing */
    put_pair(d, img_file, img_len, "", 0);
    expect_refused(d, DELTA_ERR_FORMAT, "train-labels", "empty file");

    d = case_dir("missing_labels");
    put(d, "train-images-idx3-ubyte.gz", img_file, img_len, true);
    expect_refused(d, DELTA_ERR_IO, "train-labels-idx1-ubyte.gz",
                   "missing file");

    expect_refused(tmp_path("no_such_dir"), DELTA_ERR_IO, "no_such_dir",
                   "dataset-fashion-mnist");

    /* A folder where a file should be. */
    d = case_dir("dir_not_file");
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    mkdir(p, 0700);
    put(d, "train-labels-idx1-ubyte.gz", lab_file, lab_len, true);
    expect_refused(d, DELTA_ERR_IO, "train-images", "not a regular file");

    /* status and err are optional. */
    CHECK(delta_dataset_fashion_mnist_new(tmp_path("no_such_dir"),
                                          DELTA_SPLIT_TEST, NULL, NULL,
                                          0) == NULL);
}

/* Every truncation of the plain and gzip'd images file is refused; random
 * byte changes of the gzip'd file are refused or accepted, never a crash
 * or a bad read (run under the sanitizers). */
static void test_idx_sweeps(void) {
    make_good();
    const char *d = case_dir("sweep");
    char ip[512];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", d);
    put(d, "train-labels-idx1-ubyte.gz", lab_file, lab_len, true);
    int accepted = 0;
    for (size_t n = 0; n < img_len; n++) {
        write_file(ip, img_file, n);
        char err[512] = "";
        delta_status st = DELTA_OK;
        delta_dataset *ds = delta_dataset_fashion_mnist_new(
            d, DELTA_SPLIT_TRAIN, &st, err, sizeof err);
        CHECK(!ds && st == DELTA_ERR_FORMAT && err[0],
              "plain file cut to %zu bytes: %s", n, err);
        delta_dataset_free(ds);
    }
#ifdef DELTA_HAVE_ZLIB
    write_gz(ip, img_file, img_len);
    FILE *f = fopen(ip, "rb");
    uint8_t gz[4096], mut[4096];
    size_t gn = fread(gz, 1, sizeof gz, f);
    fclose(f);
    for (size_t n = 0; n < gn; n++) {
        write_file(ip, gz, n);
        char err[512] = "";
        delta_status st = DELTA_OK;
        delta_dataset *ds = delta_dataset_fashion_mnist_new(
            d, DELTA_SPLIT_TRAIN, &st, err, sizeof err);
        CHECK(!ds && (st == DELTA_ERR_FORMAT) && err[0],
              "gzip file cut to %zu of %zu bytes: %s %s", n, gn,
              delta_status_name(st), err);
        delta_dataset_free(ds);
    }
    uint64_t r = 99;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(mut, gz, gn);
        for (int k = 0; k < 1 + trial % 3; k++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            mut[(r >> 33) % gn] ^= (uint8_t)(1u << ((r >> 20) % 8));
        }
        write_file(ip, mut, gn);
        char err[512] = "";
        delta_status st = DELTA_OK;
        delta_dataset *ds = delta_dataset_fashion_mnist_new(
            d, DELTA_SPLIT_TRAIN, &st, err, sizeof err);
        if (ds) {
            accepted++;
            delta_data_info in = delta_dataset_info(ds);
            float x[64];
            int32_t y;
            if (in.input_numel <= 64)
                for (int64_t i = 0; i < in.len; i++)
                    delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        } else {
            CHECK((st == DELTA_ERR_FORMAT || st == DELTA_ERR_IO) && err[0],
                  "mutation %d: %s '%s'", trial, delta_status_name(st), err);
        }
        delta_dataset_free(ds);
    }
#endif
    if (verbose)
        printf("  # %d of 300 mutated gzip files accepted\n", accepted);
}

/* ---- text --------------------------------------------------------------- */

static delta_dataset *open_text(const char *path, delta_data_kind kind,
                                int64_t T, int64_t vocab, delta_status *st,
                                char *err, size_t n) {
    delta_text_opts o = {.kind = kind, .seq_len = T, .vocab = vocab};
    return delta_dataset_text_new(path, &o, st, err, n);
}

static void test_text_causal_windows(void) {
    const char *p = tmp_path("abc.txt");
    write_file(p, "abcdefghij", 10);
    char err[512] = "";
    delta_status st;
    delta_dataset *ds = open_text(p, DELTA_DATA_CAUSAL_LM, 3, 0, &st, err,
                                  sizeof err);
    CHECK(ds && st == DELTA_OK, "%s", err);
    if (!ds) return;
    delta_data_info in = delta_dataset_info(ds);
    CHECK(in.len == 3 && in.seq_len == 3 && in.vocab == 256 &&
              in.input_dtype == DELTA_I32 && in.input_numel == 3 &&
              in.target_numel == 3 && in.mask_numel == 0 && in.mask_id == -1,
          "len %lld", (long long)in.len);
    static const char *want_x[3] = {"abc", "def", "ghi"};
    static const char *want_y[3] = {"bcd", "efg", "hij"};
    for (int i = 0; i < 3; i++) {
        int32_t x[3], y[3];
        delta_dataset_get(ds, i, 0, 0, x, y, NULL);
        for (int t = 0; t < 3; t++) {
            CHECK(x[t] == want_x[i][t], "window %d input %d: %d", i, t, x[t]);
            CHECK(y[t] == want_y[i][t], "window %d target %d: %d", i, t, y[t]);
        }
    }
    delta_dataset_free(ds);

    /* Exactly T + 1 bytes: one window; all bytes 0..255 are tokens. */
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)(255 - i);
    p = tmp_path("bytes.bin");
    write_file(p, all, 256);
    ds = open_text(p, DELTA_DATA_CAUSAL_LM, 255, 0, &st, err, sizeof err);
    CHECK(ds && delta_dataset_len(ds) == 1, "%s", err);
    if (ds) {
        int32_t x[255], y[255];
        delta_dataset_get(ds, 0, 0, 0, x, y, NULL);
        CHECK(x[0] == 255 && y[0] == 254 && x[254] == 1 && y[254] == 0);
    }
    delta_dataset_free(ds);
}

static void test_text_refused(void) {
    const char *p = tmp_path("short.txt");
    write_file(p, "abcdefghij", 10);
    char err[512] = "";
    delta_status st = DELTA_OK;
    delta_dataset *ds = open_text(p, DELTA_DATA_CAUSAL_LM, 10, 0, &st, err,
                                  sizeof err);
    CHECK(!ds && st == DELTA_ERR_FORMAT, "status %s", delta_status_name(st));
    CHECK(strstr(err, "short.txt") && strstr(err, "at least 11 bytes"),
          "message '%s'", err);
    if (verbose) printf("  # %s\n", err);
    delta_dataset_free(ds);
    /* Masked LM needs only T bytes. */
    ds = open_text(p, DELTA_DATA_MASKED_LM, 10, 0, &st, err, sizeof err);
    CHECK(ds && delta_dataset_len(ds) == 1, "%s", err);
    delta_dataset_free(ds);
    ds = open_text(p, DELTA_DATA_MASKED_LM, 11, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_FORMAT && strstr(err, "at least 11 bytes"),
          "'%s'", err);
    delta_dataset_free(ds);

    write_file(tmp_path("empty.txt"), "", 0);
    ds = open_text(tmp_path("empty.txt"), DELTA_DATA_CAUSAL_LM, 4, 0, &st,
                   err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_FORMAT && strstr(err, "0 bytes"), "'%s'",
          err);
    delta_dataset_free(ds);

    ds = open_text(tmp_path("nope.txt"), DELTA_DATA_CAUSAL_LM, 4, 0, &st, err,
                   sizeof err);
    CHECK(!ds && st == DELTA_ERR_IO && strstr(err, "nope.txt"), "'%s'", err);
    if (verbose) printf("  # %s\n", err);
    ds = open_text(tmpdir, DELTA_DATA_CAUSAL_LM, 4, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_IO, "'%s'", err);

    ds = open_text(p, DELTA_DATA_CAUSAL_LM, 0, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG, "'%s'", err);
    ds = open_text(p, DELTA_DATA_MASKED_LM, 4, 100, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG && strstr(err, "256"), "'%s'",
          err);
    ds = open_text(p, DELTA_DATA_IMAGES, 4, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG, "'%s'", err);
}

/* A long pseudo-text of lowercase letters and spaces. */
static const char *long_text(size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/long.txt", tmpdir);
    char *b = malloc(n);
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int r = (int)((s >> 33) % 27);
        b[i] = r == 26 ? ' ' : (char)('a' + r);
    }
    write_file(path, b, n);
    free(b);
    return path;
}

static void test_text_mlm_rates(void) {
    const size_t N = 1 << 20;
    const char *p = long_text(N);
    char err[512] = "";
    delta_status st;
    delta_dataset *ds = open_text(p, DELTA_DATA_MASKED_LM, 128, 0, &st, err,
                                  sizeof err);
    CHECK(ds != NULL, "%s", err);
    if (!ds) return;
    delta_data_info in = delta_dataset_info(ds);
    CHECK(in.len == (int64_t)(N / 128) && in.vocab == 257 &&
          in.mask_id == 256 && in.mask_numel == 128 && in.target_numel == 128);
    /* The file's bytes, to compare with. */
    FILE *f = fopen(p, "rb");
    uint8_t *raw = malloc(N);
    CHECK(fread(raw, 1, N, f) == N);
    fclose(f);

    long chosen = 0, masked = 0, random = 0, kept = 0, total = 0;
    int32_t x[128], y[128], x2[128], y2[128];
    float m[128];
    bool all_same_again = true, some_differ_by_epoch = false, ok_rows = true;
    for (int64_t i = 0; i < in.len; i++) {
        delta_dataset_get(ds, i, 7, 3, x, y, m);
        int row_chosen = 0;
        for (int t = 0; t < 128; t++) {
            uint8_t orig = raw[i * 128 + t];
            CHECK(m[t] == 1.0f);
            total++;
            if (y[t] == DELTA_DATA_IGNORE) {
                if (x[t] != orig) ok_rows = false;
                continue;
            }
            row_chosen++;
            if (y[t] != orig) ok_rows = false;
            chosen++;
            if (x[t] == 256)
                masked++;
            else if (x[t] == orig)
                kept++;
            else if (x[t] >= 0 && x[t] < 256)
                random++;
            else
                ok_rows = false;
        }
        if (row_chosen != 19) ok_rows = false;  /* round(0.15 * 128) */
        delta_dataset_get(ds, i, 7, 3, x2, y2, NULL);
        if (memcmp(x, x2, sizeof x) || memcmp(y, y2, sizeof y))
            all_same_again = false;
        delta_dataset_get(ds, i, 7, 4, x2, y2, NULL);
        if (memcmp(y, y2, sizeof y)) some_differ_by_epoch = true;
    }
    CHECK(ok_rows, "a window was corrupted wrongly");
    CHECK(all_same_again, "masking is not deterministic");
    CHECK(some_differ_by_epoch, "masks do not change between epochs");
    double pc = (double)chosen / total, pm = (double)masked / chosen,
           pr = (double)random / chosen, pk = (double)kept / chosen;
    printf("  # mlm: %.4f chosen; of those %.4f [MASK], %.4f random, %.4f "
           "unchanged\n",
           pc, pm, pr, pk);
    CHECK(fabs(pc - 0.15) < 0.005, "chosen %g", pc);
    CHECK(fabs(pm - 0.8) < 0.01, "masked %g", pm);
    /* A random byte equal to the original counts as unchanged. */
    CHECK(fabs(pr - 0.1) < 0.01, "random %g", pr);
    CHECK(fabs(pk - 0.1) < 0.01, "unchanged %g", pk);

    /* Another seed, another mask. */
    delta_dataset_get(ds, 0, 7, 3, x, y, NULL);
    delta_dataset_get(ds, 0, 8, 3, x2, y2, NULL);
    CHECK(memcmp(y, y2, sizeof y) != 0, "seed does not change the mask");
    free(raw);
    delta_dataset_free(ds);

    /* vocab 256: [MASK] is 255. */
    ds = open_text(p, DELTA_DATA_MASKED_LM, 16, 256, &st, err, sizeof err);
    CHECK(ds && delta_dataset_info(ds).mask_id == 255, "%s", err);
    delta_dataset_free(ds);
}

/* ---- synthetic ----------------------------------------------------------- */

static void test_synthetic_images(void) {
    delta_synth_opts o = {.kind = DELTA_DATA_IMAGES, .len = 100, .seed = 5,
                          .channels = 3, .height = 8, .width = 8,
                          .classes = 7};
    char err[256];
    delta_dataset *a = delta_dataset_synthetic_new(&o, NULL, err, sizeof err);
    delta_dataset *b = delta_dataset_synthetic_new(&o, NULL, err, sizeof err);
    o.seed = 6;
    delta_dataset *c = delta_dataset_synthetic_new(&o, NULL, err, sizeof err);
    CHECK(a && b && c, "%s", err);
    if (!a || !b || !c) goto out;
    delta_data_info in = delta_dataset_info(a);
    CHECK(in.len == 100 && in.channels == 3 && in.height == 8 &&
          in.width == 8 && in.classes == 7 && in.input_numel == 192 &&
          in.input_dtype == DELTA_F32);
    float xa[192], xb[192], xc[192];
    int32_t ya, yb, yc;
    double sum = 0, sq = 0;
    int seen[7] = {0}, same_c = 0;
    for (int i = 0; i < 100; i++) {
        delta_dataset_get(a, i, 0, 0, xa, &ya, NULL);
        delta_dataset_get(b, i, 99, 9, xb, &yb, NULL);
        delta_dataset_get(c, i, 0, 0, xc, &yc, NULL);
        CHECK(memcmp(xa, xb, sizeof xa) == 0 && ya == yb, "sample %d", i);
        same_c += memcmp(xa, xc, sizeof xa) == 0;
        CHECK(ya >= 0 && ya < 7);
        if (ya >= 0 && ya < 7) seen[ya]++;
        for (int j = 0; j < 192; j++) {
            sum += xa[j];
            sq += (double)xa[j] * xa[j];
        }
    }
    CHECK(same_c == 0, "seeds 5 and 6 gave %d equal images", same_c);
    double mean = sum / 19200, sd = sqrt(sq / 19200 - mean * mean);
    CHECK(fabs(mean) < 0.05 && fabs(sd - 1) < 0.05, "mean %g sd %g", mean, sd);
    for (int k = 0; k < 7; k++) CHECK(seen[k] > 0, "class %d never drawn", k);
out:
    delta_dataset_free(a);
    delta_dataset_free(b);
    delta_dataset_free(c);
}

static void test_synthetic_tokens(void) {
    const int V = 50, T = 64, N = 400;
    delta_synth_opts o = {.kind = DELTA_DATA_CAUSAL_LM, .len = N, .seed = 11,
                          .seq_len = T, .vocab = V};
    delta_dataset *a = delta_dataset_synthetic_new(&o, NULL, NULL, 0);
    delta_dataset *b = delta_dataset_synthetic_new(&o, NULL, NULL, 0);
    CHECK(a && b);
    if (!a || !b) goto out;
    delta_data_info in = delta_dataset_info(a);
    CHECK(in.seq_len == T && in.vocab == V && in.input_dtype == DELTA_I32 &&
          in.mask_numel == 0);
    /* successors[a][b]: has b followed a anywhere */
    static bool succ[50][50];
    memset(succ, 0, sizeof succ);
    int32_t x[64], y[64], x2[64], y2[64];
    int hist[50] = {0};
    bool in_range = true, shifted = true;
    for (int i = 0; i < N; i++) {
        delta_dataset_get(a, i, 0, 0, x, y, NULL);
        delta_dataset_get(b, i, 1, 1, x2, y2, NULL);
        CHECK(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y),
              "sample %d not deterministic", i);
        for (int t = 0; t < T; t++) {
            if (x[t] < 0 || x[t] >= V || y[t] < 0 || y[t] >= V) {
                in_range = false;
                continue;
            }
            if (t + 1 < T && y[t] != x[t + 1]) shifted = false;
            succ[x[t]][y[t]] = true;
            hist[x[t]]++;
        }
    }
    CHECK(in_range && shifted, "tokens out of range or targets not shifted");
    /* Learnable: each token has at most DELTA_SYNTH_BRANCH successors. */
    int worst = 0, used = 0;
    for (int v = 0; v < V; v++) {
        int k = 0;
        for (int w = 0; w < V; w++) k += succ[v][w];
        if (k > worst) worst = k;
        used += hist[v] > 0;
    }
    CHECK(worst <= DELTA_SYNTH_BRANCH, "a token has %d successors", worst);
    CHECK(used > V / 2, "only %d of %d tokens used", used, V);

    /* Masked LM: the walk avoids [MASK] = vocab - 1. */
    o.kind = DELTA_DATA_MASKED_LM;
    delta_dataset *m = delta_dataset_synthetic_new(&o, NULL, NULL, 0);
    CHECK(m && delta_dataset_info(m).mask_id == V - 1);
    if (m) {
        float mk[64];
        long masked = 0, chosen = 0;
        for (int i = 0; i < N; i++) {
            delta_dataset_get(m, i, 3, 0, x, y, mk);
            for (int t = 0; t < T; t++) {
                CHECK(x[t] >= 0 && x[t] < V && mk[t] == 1.0f);
                if (y[t] != DELTA_DATA_IGNORE) {
                    chosen++;
                    masked += x[t] == V - 1;
                    CHECK(y[t] >= 0 && y[t] < V - 1);
                } else {
                    CHECK(x[t] != V - 1, "[MASK] at an unchosen position");
                }
            }
        }
        CHECK(chosen == (long)N * 10, "chosen %ld", chosen);  /* round(9.6) */
        CHECK(fabs((double)masked / chosen - 0.8) < 0.03, "masked %ld of %ld",
              masked, chosen);
    }
    delta_dataset_free(m);

    /* Bad options. */
    char err[256];
    delta_status st;
    o.vocab = 2;
    CHECK(!delta_dataset_synthetic_new(&o, &st, err, sizeof err) &&
          st == DELTA_ERR_INVALID_ARG);
    o = (delta_synth_opts){.kind = DELTA_DATA_IMAGES, .len = 4, .channels = 1,
                           .height = 0, .width = 2, .classes = 2};
    CHECK(!delta_dataset_synthetic_new(&o, &st, err, sizeof err) &&
          st == DELTA_ERR_INVALID_ARG && strstr(err, "1x0x2"), "'%s'", err);
    o.height = 2;
    o.len = 0;
    CHECK(!delta_dataset_synthetic_new(&o, &st, err, sizeof err) &&
          st == DELTA_ERR_INVALID_ARG);
    CHECK(!delta_dataset_synthetic_new(NULL, &st, err, sizeof err) &&
          st == DELTA_ERR_INVALID_ARG);
out:
    delta_dataset_free(a);
    delta_dataset_free(b);
}

/* ---- loader ------------------------------------------------------------- */

/* A dataset whose sample i is recognizable: synthetic 1x1x2 images (the
 * pair of floats is unique with overwhelming probability). */
#define LN 103
static delta_dataset *loader_ds(void) {
    delta_synth_opts o = {.kind = DELTA_DATA_IMAGES, .len = LN, .seed = 1,
                          .channels = 1, .height = 1, .width = 2,
                          .classes = 10};
    return delta_dataset_synthetic_new(&o, NULL, NULL, 0);
}

/* Index of the sample whose pixels are x, or -1. */
static int64_t which(const delta_dataset *ds, const float *x) {
    for (int64_t i = 0; i < LN; i++) {
        float y[2];
        int32_t l;
        delta_dataset_get(ds, i, 0, 0, y, &l, NULL);
        if (y[0] == x[0] && y[1] == x[1]) return i;
    }
    return -1;
}

/* Runs n batches, writing the dataset index of every sample into order
 * (and the batch sizes into sizes). */
static int run_batches(const delta_dataset *ds, delta_loader *l, int n,
                       int64_t *order, int64_t *sizes, int64_t *epochs) {
    delta_batch b;
    delta_batch_alloc(&b, ds, 16);
    int k = 0;
    for (int i = 0; i < n; i++) {
        delta_loader_next(l, &b);
        if (sizes) sizes[i] = b.size;
        if (epochs) epochs[i] = b.epoch;
        for (int64_t s = 0; s < b.size; s++)
            order[k++] = which(ds, (float *)b.input + 2 * s);
    }
    delta_batch_release(&b);
    return k;
}

static void test_loader_permutation(void) {
    delta_dataset *ds = loader_ds();
    CHECK(ds);
    if (!ds) return;
    delta_loader *l = delta_loader_new(ds, 16, 42, true, false, NULL, NULL, 0);
    CHECK(l && delta_loader_batches_per_epoch(l) == 7);
    /* 3 epochs of 7 batches (the 7th holds 103 - 96 = 7). */
    int64_t order[3 * LN], sizes[21], epochs[21];
    int k = run_batches(ds, l, 21, order, sizes, epochs);
    CHECK(k == 3 * LN, "%d samples", k);
    for (int e = 0; e < 3; e++) {
        int seen[LN] = {0};
        for (int i = 0; i < LN; i++) {
            int64_t v = order[e * LN + i];
            CHECK(v >= 0 && v < LN, "unknown sample");
            if (v >= 0 && v < LN) seen[v]++;
        }
        for (int i = 0; i < LN; i++)
            CHECK(seen[i] == 1, "epoch %d: sample %d seen %d times", e, i,
                  seen[i]);
        for (int j = 0; j < 7; j++) {
            CHECK(sizes[e * 7 + j] == (j < 6 ? 16 : 7), "size %lld",
                  (long long)sizes[e * 7 + j]);
            CHECK(epochs[e * 7 + j] == e);
        }
        /* The order is delta_data_permutation's. */
        int64_t perm[LN];
        delta_data_permutation(LN, 42, e, perm);
        CHECK(memcmp(perm, order + e * LN, sizeof perm) == 0,
              "epoch %d order differs from delta_data_permutation", e);
    }
    CHECK(memcmp(order, order + LN, LN * sizeof *order) != 0,
          "epochs 0 and 1 in the same order");
    bool sorted = true;
    for (int i = 1; i < LN; i++) sorted &= order[i] > order[i - 1];
    CHECK(!sorted, "shuffled order is file order");
    delta_loader_free(l);

    /* Same seed, same order; another seed, another order. */
    int64_t o2[3 * LN], o3[3 * LN];
    l = delta_loader_new(ds, 16, 42, true, false, NULL, NULL, 0);
    run_batches(ds, l, 21, o2, NULL, NULL);
    delta_loader_free(l);
    l = delta_loader_new(ds, 16, 43, true, false, NULL, NULL, 0);
    run_batches(ds, l, 21, o3, NULL, NULL);
    delta_loader_free(l);
    CHECK(memcmp(order, o2, sizeof o2) == 0, "seed 42 twice: orders differ");
    CHECK(memcmp(order, o3, LN * sizeof *order) != 0, "seeds 42, 43 agree");

    /* The permutation itself: one of each for assorted n. */
    for (int64_t n = 0; n <= 40; n += 5) {
        int64_t p[40];
        int cnt[40] = {0};
        delta_data_permutation(n, 9, 2, p);
        for (int64_t i = 0; i < n; i++)
            if (p[i] >= 0 && p[i] < n) cnt[p[i]]++;
        for (int64_t i = 0; i < n; i++)
            CHECK(cnt[i] == 1, "n %lld", (long long)n);
    }
    delta_dataset_free(ds);
}

static void test_loader_no_shuffle_and_drop_last(void) {
    delta_dataset *ds = loader_ds();
    if (!ds) {
        CHECK(ds);
        return;
    }
    /* File order, partial last batch kept. */
    delta_loader *l = delta_loader_new(ds, 10, 42, false, false, NULL, NULL, 0);
    CHECK(delta_loader_batches_per_epoch(l) == 11);
    int64_t order[2 * LN], sizes[22], epochs[22];
    int k = run_batches(ds, l, 22, order, sizes, epochs);
    CHECK(k == 2 * LN);
    for (int i = 0; i < 2 * LN; i++)
        CHECK(order[i] == i % LN, "position %d holds %lld", i,
              (long long)order[i]);
    CHECK(sizes[10] == 3 && sizes[21] == 3 && sizes[9] == 10);
    CHECK(epochs[10] == 0 && epochs[11] == 1);
    delta_loader_free(l);

    /* drop_last: 10 full batches an epoch, the 3 leftovers never show. */
    l = delta_loader_new(ds, 10, 42, false, true, NULL, NULL, 0);
    CHECK(delta_loader_batches_per_epoch(l) == 10);
    k = run_batches(ds, l, 20, order, sizes, epochs);
    CHECK(k == 200);
    for (int i = 0; i < 20; i++)
        CHECK(sizes[i] == 10 && epochs[i] == i / 10);
    for (int i = 0; i < 200; i++)
        CHECK(order[i] == i % 100, "position %d holds %lld", i,
              (long long)order[i]);
    delta_loader_free(l);

    /* drop_last with shuffle: each epoch 100 distinct samples. */
    l = delta_loader_new(ds, 10, 3, true, true, NULL, NULL, 0);
    k = run_batches(ds, l, 10, order, sizes, NULL);
    int seen[LN] = {0};
    for (int i = 0; i < k; i++)
        if (order[i] >= 0) seen[order[i]]++;
    int distinct = 0;
    for (int i = 0; i < LN; i++) distinct += seen[i] == 1;
    CHECK(k == 100 && distinct == 100);
    delta_loader_free(l);

    /* Batch info fields. */
    l = delta_loader_new(ds, 50, 0, false, false, NULL, NULL, 0);
    delta_batch b;
    delta_batch_alloc(&b, ds, 50);
    int64_t want_index[4] = {0, 50, 100, 0}, want_size[4] = {50, 50, 3, 50};
    for (int i = 0; i < 4; i++) {
        delta_loader_next(l, &b);
        CHECK(b.index == want_index[i] && b.size == want_size[i] &&
                  b.epoch == (i == 3),
              "batch %d: index %lld size %lld epoch %lld", i,
              (long long)b.index, (long long)b.size, (long long)b.epoch);
    }
    delta_batch_release(&b);
    delta_loader_free(l);

    /* Bad arguments. */
    char err[512];
    delta_status st;
    CHECK(!delta_loader_new(ds, 0, 0, true, false, &st, err, sizeof err) &&
          st == DELTA_ERR_INVALID_ARG);
    CHECK(!delta_loader_new(ds, 200, 0, true, true, &st, err, sizeof err) &&
              st == DELTA_ERR_INVALID_ARG && strstr(err, "drop_last"),
          "'%s'", err);
    if (verbose) printf("  # %s\n", err);
    l = delta_loader_new(ds, 200, 0, true, false, &st, err, sizeof err);
    CHECK(l && delta_loader_batches_per_epoch(l) == 1);
    delta_loader_free(l);
    delta_dataset_free(ds);
}

static void test_loader_resume(void) {
    delta_dataset *ds = loader_ds();
    if (!ds) {
        CHECK(ds);
        return;
    }
    bool drops[2] = {false, true};
    for (int d = 0; d < 2; d++)
        for (int cut = 0; cut <= 15; cut += 3) {
            /* Run `cut` batches, save the position, then 12 more; a new
             * loader set to the saved position must give the same 12. */
            delta_loader *a = delta_loader_new(ds, 16, 77, true, drops[d],
                                               NULL, NULL, 0);
            int64_t skip[16 * 16], want[12 * 16], got[12 * 16];
            int64_t we[12], ge[12], ws[12], gs[12];
            run_batches(ds, a, cut, skip, NULL, NULL);
            delta_loader_pos pos = delta_loader_get_pos(a);
            int nw = run_batches(ds, a, 12, want, ws, we);
            delta_loader *b = delta_loader_new(ds, 16, 77, true, drops[d],
                                               NULL, NULL, 0);
            CHECK(delta_loader_set_pos(b, pos) == DELTA_OK);
            int ng = run_batches(ds, b, 12, got, gs, ge);
            CHECK(nw == ng && !memcmp(want, got, nw * sizeof *want) &&
                      !memcmp(ws, gs, sizeof ws) && !memcmp(we, ge, sizeof we),
                  "drop_last %d, resume after %d batches (epoch %lld index "
                  "%lld) differs",
                  d, cut, (long long)pos.epoch, (long long)pos.index);
            delta_loader_free(a);
            delta_loader_free(b);
        }

    /* Positions set by hand. */
    delta_loader *l = delta_loader_new(ds, 16, 5, true, false, NULL, NULL, 0);
    CHECK(delta_loader_set_pos(l, (delta_loader_pos){-1, 0}) ==
          DELTA_ERR_INVALID_ARG);
    CHECK(delta_loader_set_pos(l, (delta_loader_pos){0, LN + 1}) ==
          DELTA_ERR_INVALID_ARG);
    delta_loader_pos p = delta_loader_get_pos(l);
    CHECK(p.epoch == 0 && p.index == 0, "a refused set moved the loader");
    CHECK(delta_loader_set_pos(l, (delta_loader_pos){4, LN}) == DELTA_OK);
    delta_batch b;
    delta_batch_alloc(&b, ds, 16);
    delta_loader_next(l, &b);
    CHECK(b.epoch == 5 && b.index == 0 && b.size == 16);
    int64_t perm[LN];
    delta_data_permutation(LN, 5, 5, perm);
    CHECK(which(ds, b.input) == perm[0]);
    p = delta_loader_get_pos(l);
    CHECK(p.epoch == 5 && p.index == 16);
    delta_batch_release(&b);
    delta_loader_free(l);
    delta_dataset_free(ds);
}

static void test_loader_masked_lm(void) {
    const char *p = long_text(4096);
    delta_text_opts o = {.kind = DELTA_DATA_MASKED_LM, .seq_len = 32};
    delta_dataset *ds = delta_dataset_text_new(p, &o, NULL, NULL, 0);
    CHECK(ds && delta_dataset_len(ds) == 128);
    if (!ds) return;
    delta_loader *l = delta_loader_new(ds, 8, 1, false, false, NULL, NULL, 0);
    delta_batch b;
    CHECK(delta_batch_alloc(&b, ds, 8) == DELTA_OK && b.mask);
    int32_t first_targets[8 * 32];
    delta_loader_next(l, &b);
    bool ones = true;
    for (int i = 0; i < 8 * 32; i++) ones &= b.mask[i] == 1.0f;
    CHECK(ones, "attention mask not all ones");
    memcpy(first_targets, b.target, sizeof first_targets);
    /* The batch is the dataset's samples 0..7 drawn with (seed 1, epoch 0). */
    int32_t x[32], y[32];
    for (int s = 0; s < 8; s++) {
        delta_dataset_get(ds, s, 1, 0, x, y, NULL);
        CHECK(!memcmp(x, (int32_t *)b.input + 32 * s, sizeof x) &&
              !memcmp(y, b.target + 32 * s, sizeof y));
    }
    /* Epoch 1 masks the same windows differently. */
    delta_loader_set_pos(l, (delta_loader_pos){1, 0});
    delta_loader_next(l, &b);
    CHECK(memcmp(first_targets, b.target, sizeof first_targets) != 0,
          "same masks in epochs 0 and 1");
    /* A NULL mask buffer is allowed. */
    delta_free_aligned(b.mask);
    b.mask = NULL;
    delta_loader_next(l, &b);
    CHECK(b.size == 8);
    delta_batch_release(&b);
    delta_loader_free(l);
    delta_dataset_free(ds);
}

/* Batches big enough for the loader's threads equal the samples drawn one
 * by one. */
static void test_loader_large_samples(void) {
    delta_synth_opts o = {.kind = DELTA_DATA_IMAGES, .len = 20, .seed = 4,
                          .channels = 3, .height = 224, .width = 224,
                          .classes = 1000};
    delta_dataset *ds = delta_dataset_synthetic_new(&o, NULL, NULL, 0);
    CHECK(ds);
    if (!ds) return;
    delta_loader *l = delta_loader_new(ds, 8, 9, true, false, NULL, NULL, 0);
    delta_batch b;
    CHECK(delta_batch_alloc(&b, ds, 8) == DELTA_OK);
    int64_t perm[20];
    delta_data_permutation(20, 9, 0, perm);
    const size_t n = 3 * 224 * 224;
    float *x = malloc(n * sizeof *x);
    for (int k = 0; k < 3; k++) {
        delta_loader_next(l, &b);
        for (int64_t s = 0; s < b.size; s++) {
            int32_t y;
            delta_dataset_get(ds, perm[b.index + s], 0, 0, x, &y, NULL);
            CHECK(!memcmp(x, (float *)b.input + n * s, n * sizeof *x) &&
                      y == b.target[s],
                  "batch %d sample %lld", k, (long long)s);
        }
    }
    free(x);
    delta_batch_release(&b);
    delta_loader_free(l);
    delta_dataset_free(ds);
}

/* delta_loader_next_len: token samples cut to a shorter length, densely;
 * causal samples are prefixes of the full ones (text and synthetic), masked
 * samples choose their targets among the kept positions; the full length
 * is delta_loader_next; images ignore the length. */
static void test_loader_next_len(void) {
    const char *p = long_text(4096);
    delta_text_opts to = {.kind = DELTA_DATA_CAUSAL_LM, .seq_len = 32};
    delta_synth_opts so = {.kind = DELTA_DATA_CAUSAL_LM, .len = 100,
                           .seed = 3, .seq_len = 32, .vocab = 50};
    delta_dataset *src[2] = {delta_dataset_text_new(p, &to, NULL, NULL, 0),
                             delta_dataset_synthetic_new(&so, NULL, NULL, 0)};
    for (int d = 0; d < 2; d++) {
        delta_dataset *ds = src[d];
        CHECK(ds);
        if (!ds) continue;
        delta_loader *full = delta_loader_new(ds, 4, 5, true, false, NULL,
                                              NULL, 0);
        delta_loader *cut = delta_loader_new(ds, 4, 5, true, false, NULL,
                                             NULL, 0);
        delta_batch a, b;
        CHECK(delta_batch_alloc(&a, ds, 4) == DELTA_OK &&
              delta_batch_alloc(&b, ds, 4) == DELTA_OK);
        const int64_t lens[3] = {7, 32, 1};
        for (int k = 0; k < 3; k++) {
            int64_t T = lens[k];
            delta_loader_next(full, &a);
            delta_loader_next_len(cut, &b, T);
            CHECK(a.size == b.size && a.index == b.index);
            const int32_t *ax = a.input, *bx = b.input;
            for (int64_t s = 0; s < b.size; s++)
                CHECK(!memcmp(ax + 32 * s, bx + T * s, (size_t)T * 4) &&
                          !memcmp(a.target + 32 * s, b.target + T * s,
                                  (size_t)T * 4),
                      "source %d, T %lld, row %lld: not a prefix", d,
                      (long long)T, (long long)s);
        }
        delta_batch_release(&a);
        delta_batch_release(&b);
        delta_loader_free(full);
        delta_loader_free(cut);
        delta_dataset_free(ds);
    }
    /* masked LM: round(0.15 T) targets among the T kept positions */
    delta_text_opts mo = {.kind = DELTA_DATA_MASKED_LM, .seq_len = 40};
    delta_dataset *ds = delta_dataset_text_new(p, &mo, NULL, NULL, 0);
    CHECK(ds);
    if (ds) {
        delta_loader *l = delta_loader_new(ds, 3, 2, false, false, NULL,
                                           NULL, 0);
        delta_batch b;
        CHECK(delta_batch_alloc(&b, ds, 3) == DELTA_OK);
        delta_loader_next_len(l, &b, 20);
        for (int64_t s = 0; s < 3; s++) {
            int targets = 0;
            for (int t = 0; t < 20; t++) {
                targets += b.target[20 * s + t] != DELTA_DATA_IGNORE;
                CHECK(b.mask[20 * s + t] == 1.0f);
            }
            CHECK(targets == 3, "row %lld: %d targets of 20 positions",
                  (long long)s, targets);
        }
        delta_batch_release(&b);
        delta_loader_free(l);
        delta_dataset_free(ds);
    }
    /* images: the length is ignored */
    delta_synth_opts io = {.kind = DELTA_DATA_IMAGES, .len = 5, .seed = 1,
                           .channels = 1, .height = 4, .width = 4,
                           .classes = 3};
    ds = delta_dataset_synthetic_new(&io, NULL, NULL, 0);
    delta_loader *l1 = delta_loader_new(ds, 2, 0, false, false, NULL, NULL, 0),
                 *l2 = delta_loader_new(ds, 2, 0, false, false, NULL, NULL, 0);
    delta_batch a, b;
    CHECK(delta_batch_alloc(&a, ds, 2) == DELTA_OK &&
          delta_batch_alloc(&b, ds, 2) == DELTA_OK);
    delta_loader_next(l1, &a);
    delta_loader_next_len(l2, &b, 0);
    CHECK(!memcmp(a.input, b.input, 2 * 16 * 4) &&
          !memcmp(a.target, b.target, 2 * 4));
    delta_batch_release(&a);
    delta_batch_release(&b);
    delta_loader_free(l1);
    delta_loader_free(l2);
    delta_dataset_free(ds);
}

static void test_free_null(void) {
    delta_dataset_free(NULL);
    delta_loader_free(NULL);
    delta_batch b = {0};
    delta_batch_release(&b);
    delta_batch_release(NULL);
    CHECK(1);
}

int main(void) {
    verbose = getenv("DELTA_TEST_VERBOSE") != NULL;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/delta_data_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_fmnist_train);
    TEST_RUN(test_fmnist_test_split);
    TEST_RUN(test_fmnist_loader);
    TEST_RUN(test_idx_good_variants);
    TEST_RUN(test_idx_bad_magic);
    TEST_RUN(test_idx_truncated);
    TEST_RUN(test_idx_count_mismatch);
    TEST_RUN(test_idx_label_out_of_range);
    TEST_RUN(test_idx_huge_dims);
    TEST_RUN(test_idx_trailing_data);
    TEST_RUN(test_idx_not_gzip_empty_missing);
    TEST_RUN(test_idx_sweeps);
    TEST_RUN(test_text_causal_windows);
    TEST_RUN(test_text_refused);
    TEST_RUN(test_text_mlm_rates);
    TEST_RUN(test_synthetic_images);
    TEST_RUN(test_synthetic_tokens);
    TEST_RUN(test_loader_permutation);
    TEST_RUN(test_loader_no_shuffle_and_drop_last);
    TEST_RUN(test_loader_resume);
    TEST_RUN(test_loader_masked_lm);
    TEST_RUN(test_loader_large_samples);
    TEST_RUN(test_loader_next_len);
    TEST_RUN(test_free_null);
    delta_dataset_free(fm_train);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
