/* Tests for llm.c's token files (delta_dataset_tokens_new,
 * delta_tokens_write, delta_tokens_file_is; include/delta/data.h): a write
 * and read round trip checked against the format's bytes laid out here by
 * hand; batches in file order (and data-parallel shards) equal to the
 * windows llm.c's DataLoader reads, computed here from the token array;
 * every kind of malformed file refused with a message naming the byte
 * offset, never a crash (including every truncation and random header
 * damage); the writer's refusals and atomic replacement; and
 * scripts/make_token_file.py writing the same bytes as the library. Set
 * DELTA_TEST_VERBOSE=1 to see every refusal message. */
#include "delta/data.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

static char tmpdir[64];
static bool verbose;

static const char *tmp_path(const char *name) {
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

/* The whole of path into a malloc'd buffer (*n bytes); NULL if absent. */
static uint8_t *read_all(const char *path, size_t *n) {
    *n = 0;
    return (uint8_t *)test_read_file(path, n);
}

/* ---- the format, laid out by hand ----------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
}

/* An llm.c token file of n tokens in a malloc'd buffer: header (magic,
 * version, count as given, zeros) then the tokens little-endian. */
static uint8_t *make_file(uint32_t magic, uint32_t version, uint32_t count,
                          const uint16_t *tok, size_t n, size_t *len) {
    *len = 1024 + 2 * n;
    uint8_t *b = calloc(1, *len);
    put32(b, magic);
    put32(b + 4, version);
    put32(b + 8, count);
    for (size_t i = 0; i < n; i++) {
        b[1024 + 2 * i] = (uint8_t)tok[i];
        b[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    return b;
}

static uint16_t *random_tokens(size_t n, uint32_t below, uint64_t seed) {
    test_rng_seed(seed);
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(test_rng_u32() % below);
    return t;
}

static delta_dataset *open_tokens(const char *path, int64_t T, int64_t vocab,
                                  delta_status *st, char *err, size_t n) {
    delta_tokens_opts o = {.seq_len = T, .vocab = vocab};
    return delta_dataset_tokens_new(path, &o, st, err, n);
}

/* Opens path (T, vocab), checks it has len samples and that sample index
 * starts with input x0 and ends with target y_last. */
static void check_sample_(int line, const char *path, int64_t T,
                          int64_t vocab, int64_t len, int64_t index,
                          int32_t x0, int32_t y_last) {
    char err[512];
    delta_status st;
    delta_dataset *ds = open_tokens(path, T, vocab, &st, err, sizeof err);
    CHECK(ds && delta_dataset_len(ds) == len, "line %d: %s", line, err);
    if (ds) {
        int32_t *x = malloc((size_t)T * 4), *y = malloc((size_t)T * 4);
        delta_dataset_get(ds, index, 0, 0, x, y, NULL);
        CHECK(x[0] == x0 && y[T - 1] == y_last, "line %d: %d %d", line, x[0],
              y[T - 1]);
        free(x);
        free(y);
    }
    delta_dataset_free(ds);
}
#define CHECK_SAMPLE(...) check_sample_(__LINE__, __VA_ARGS__)

/* ---- round trip --------------------------------------------------------- */

static void test_tokens_roundtrip(void) {
    const size_t n = 10007;
    uint16_t *tok = random_tokens(n, DELTA_TOKENS_GPT2_VOCAB, 1);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = tok[i];
    ids[0] = 0;
    ids[1] = DELTA_TOKENS_GPT2_VOCAB - 1; /* the extremes */
    tok[0] = 0;
    tok[1] = DELTA_TOKENS_GPT2_VOCAB - 1;
    const char *p = tmp_path("rt.bin");
    char err[512] = "";
    delta_status st = delta_tokens_write(p, ids, (int64_t)n, err, sizeof err);
    CHECK(st == DELTA_OK && !err[0], "%s: %s", delta_status_name(st), err);

    /* The bytes are the format's, to the last one. */
    size_t len = 0, want_len = 0;
    uint8_t *got = read_all(p, &len);
    uint8_t *want = make_file(20240520, 1, (uint32_t)n, tok, n, &want_len);
    CHECK(got && len == want_len && !memcmp(got, want, len),
          "file of %zu bytes, expected %zu", len, want_len);
    CHECK(got && got[0] == 0x88 && got[1] == 0xd8 && got[2] == 0x34 &&
          got[3] == 0x01, "magic 20240520 little-endian");
    free(got);
    free(want);

    for (int64_t T = 1; T <= 1024; T *= 8) {
        delta_dataset *ds = open_tokens(p, T, 0, &st, err, sizeof err);
        CHECK(ds && st == DELTA_OK, "T %lld: %s", (long long)T, err);
        if (!ds) continue;
        delta_data_info in = delta_dataset_info(ds);
        CHECK(in.kind == DELTA_DATA_CAUSAL_LM &&
                  in.len == (int64_t)(n - 1) / T && in.seq_len == T &&
                  in.vocab == DELTA_TOKENS_GPT2_VOCAB &&
                  in.input_dtype == DELTA_I32 && in.input_numel == T &&
                  in.target_numel == T && in.mask_numel == 0 &&
                  in.mask_id == -1,
              "T %lld: len %lld vocab %lld", (long long)T, (long long)in.len,
              (long long)in.vocab);
        CHECK(strstr(delta_dataset_name(ds), "rt.bin") &&
                  strstr(delta_dataset_name(ds), "10007 tokens"),
              "name '%s'", delta_dataset_name(ds));
        int32_t *x = malloc((size_t)T * sizeof *x), *y = malloc((size_t)T * 4);
        int bad = 0;
        for (int64_t i = 0; i < in.len; i++) {
            delta_dataset_get(ds, i, 0, 0, x, y, NULL);
            for (int64_t t = 0; t < T; t++)
                bad += x[t] != ids[i * T + t] || y[t] != ids[i * T + t + 1];
        }
        CHECK(bad == 0, "T %lld: %d tokens differ", (long long)T, bad);
        free(x);
        free(y);
        delta_dataset_free(ds);
    }
    /* The ids of a file of another tokenizer pass with its vocab. */
    for (size_t i = 0; i < n; i++) ids[i] = 65535 - (int32_t)(i % 7);
    CHECK(delta_tokens_write(p, ids, (int64_t)n, err, sizeof err) == DELTA_OK,
          "%s", err);
    CHECK_SAMPLE(p, 16, 65536, (int64_t)(n - 1) / 16, 3, ids[48], ids[64]);
    free(ids);
    free(tok);
}

/* ---- llm.c's batches ------------------------------------------------------ */

/* Checks a (B, T) batch against llm.c's window at token offset off: inputs
 * tok[off .. off + B*T), targets tok[off + 1 .. off + B*T + 1). */
static int llmc_window_diff(const delta_batch *b, const uint16_t *tok,
                            int64_t off, int64_t B, int64_t T) {
    const int32_t *x = b->input;
    int d = 0;
    for (int64_t j = 0; j < B * T; j++)
        d += x[j] != tok[off + j] || b->target[j] != tok[off + j + 1];
    return d;
}

static void test_tokens_llmc_batches(void) {
    const int64_t n = 1000, B = 4, T = 8;
    uint16_t *tok = random_tokens((size_t)n, DELTA_TOKENS_GPT2_VOCAB, 2);
    size_t len;
    uint8_t *file = make_file(20240520, 1, (uint32_t)n, tok, (size_t)n, &len);
    const char *p = tmp_path("llmc.bin");
    write_file(p, file, len);
    free(file);
    char err[512] = "";
    delta_status st;
    delta_dataset *ds = open_tokens(p, T, 0, &st, err, sizeof err);
    CHECK(ds, "%s", err);
    if (!ds) {
        free(tok);
        return;
    }
    /* llm.c: (ntok - 1) / (B*T) batches per pass, batch k at k*B*T. */
    const int64_t llmc_batches = (n - 1) / (B * T);
    delta_loader *l = delta_loader_new(ds, B, 7, false, true, &st, err,
                                       sizeof err);
    CHECK(l && delta_loader_batches_per_epoch(l) == llmc_batches, "%s", err);
    delta_batch b;
    CHECK(delta_batch_alloc(&b, ds, B) == DELTA_OK);
    for (int64_t k = 0; l && k < 2 * llmc_batches + 3; k++) {
        delta_loader_next(l, &b);
        int64_t kk = k % llmc_batches; /* the second pass starts over */
        CHECK(b.size == B && b.epoch == k / llmc_batches, "batch %lld",
              (long long)k);
        int d = llmc_window_diff(&b, tok, kk * B * T, B, T);
        CHECK(d == 0, "batch %lld: %d tokens differ from llm.c's window at "
              "token %lld", (long long)k, d, (long long)(kk * B * T));
    }
    delta_loader_free(l);

    /* Data parallel: rank r of P gets llm.c's process r's part, B*T tokens
     * from k*P*B*T + r*B*T. */
    const int P = 3;
    for (int r = 0; r < P; r++) {
        l = delta_loader_new(ds, B, 7, false, true, &st, err, sizeof err);
        CHECK(l && delta_loader_set_shard(l, r, P) == DELTA_OK);
        if (!l) continue;
        CHECK(delta_loader_batches_per_epoch(l) == (n - 1) / (P * B * T));
        for (int64_t k = 0; k < delta_loader_batches_per_epoch(l); k++) {
            delta_loader_next(l, &b);
            int d = llmc_window_diff(&b, tok, (k * P + r) * B * T, B, T);
            CHECK(b.size == B && d == 0, "rank %d batch %lld: %d differ", r,
                  (long long)k, d);
        }
        delta_loader_free(l);
    }

    /* Shuffled: every batch row is one of the windows, each window once an
     * epoch, in delta_data_permutation's order for (seed, epoch). */
    int64_t W = delta_dataset_len(ds);
    l = delta_loader_new(ds, B, 11, true, false, &st, err, sizeof err);
    int64_t *perm = malloc((size_t)W * sizeof *perm);
    char *seen = calloc((size_t)W, 1);
    for (int e = 0; l && e < 2; e++) {
        delta_data_permutation(W, 11, e, perm);
        memset(seen, 0, (size_t)W);
        int64_t done = 0;
        while (done < W) {
            delta_loader_next(l, &b);
            CHECK(b.epoch == e && b.index == done);
            for (int64_t s = 0; s < b.size; s++) {
                int64_t w = perm[done + s];
                delta_batch one = b;
                one.input = (int32_t *)b.input + s * T;
                one.target = b.target + s * T;
                CHECK(llmc_window_diff(&one, tok, w * T, 1, T) == 0,
                      "epoch %d row %lld is not window %lld", e,
                      (long long)(done + s), (long long)w);
                seen[w]++;
            }
            done += b.size;
        }
        int64_t once = 0;
        for (int64_t w = 0; w < W; w++) once += seen[w] == 1;
        CHECK(once == W, "epoch %d: %lld of %lld windows seen once", e,
              (long long)once, (long long)W);
    }
    free(perm);
    free(seen);
    delta_loader_free(l);

    /* Shorter samples (delta_loader_next_len) are prefixes of the windows,
     * which still start at i*T. */
    l = delta_loader_new(ds, B, 7, false, false, &st, err, sizeof err);
    if (l) {
        delta_loader_next(l, &b);
        delta_loader_next_len(l, &b, 3);
        const int32_t *x = b.input;
        int d = 0;
        for (int64_t s = 0; s < B; s++)
            for (int64_t t = 0; t < 3; t++) {
                int64_t at = (B + s) * T + t;
                d += x[s * 3 + t] != tok[at] || b.target[s * 3 + t] != tok[at + 1];
            }
        CHECK(d == 0, "%d prefix tokens differ", d);
    }
    delta_loader_free(l);
    delta_batch_release(&b);
    delta_dataset_free(ds);
    free(tok);
}

/* ---- malformed files ------------------------------------------------------ */

/* Opens the bytes as a token file (T, vocab) and checks it is refused with
 * status s and a message holding each of the NULL-terminated strings. */
static void refused_(int line, const char *name, const uint8_t *data,
                     size_t n, int64_t T, int64_t vocab, delta_status s,
                     const char *const *want) {
    const char *p = tmp_path(name);
    write_file(p, data, n);
    char err[768] = "";
    delta_status st = DELTA_OK;
    delta_dataset *ds = open_tokens(p, T, vocab, &st, err, sizeof err);
    CHECK(!ds && st == s, "line %d, %s: %s, expected %s ('%s')", line, name,
          delta_status_name(st), delta_status_name(s), err);
    CHECK(strstr(err, name), "line %d: message '%s' does not name the file",
          line, err);
    for (int i = 0; want[i]; i++)
        CHECK(strstr(err, want[i]), "line %d, %s: '%s' not in '%s'", line,
              name, want[i], err);
    if (verbose) printf("  # %s\n", err);
    delta_dataset_free(ds);
}
#define REFUSED(name, data, n, T, vocab, s, ...)                             \
    refused_(__LINE__, name, data, n, T, vocab, s,                           \
             (const char *const[]){__VA_ARGS__, NULL})

static void test_tokens_bad_header(void) {
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)(i * 500);
    size_t len;
    uint8_t *f = make_file(20240520, 1, 100, tok, 100, &len);

    /* bad magic: text, big-endian, llm.c's other files */
    const char *txt = "Hello, this is plain text and not a token file at all.";
    REFUSED("text.bin", (const uint8_t *)txt, strlen(txt), 8, 0,
            DELTA_ERR_FORMAT, "bad magic at byte 0", "expected 20240520");
    uint8_t *g = malloc(len);
    memcpy(g, f, len);
    for (int w = 0; w < 3; w++) { /* the header as big-endian int32 */
        uint8_t *q = g + 4 * w;
        uint8_t t0 = q[0], t1 = q[1];
        q[0] = q[3], q[1] = q[2], q[2] = t1, q[3] = t0;
    }
    REFUSED("big_endian.bin", g, len, 8, 0, DELTA_ERR_FORMAT,
            "bad magic at byte 0", "big-endian");
    put32(g, 20240801);
    REFUSED("llama3.bin", g, len, 8, 0, DELTA_ERR_FORMAT, "bad magic",
            "LLaMA-3");
    put32(g, 20240522);
    REFUSED("eval.bin", g, len, 8, 0, DELTA_ERR_FORMAT, "bad magic", "eval");

    /* version */
    memcpy(g, f, len);
    put32(g + 4, 2);
    REFUSED("v2.bin", g, len, 8, 0, DELTA_ERR_FORMAT,
            "unknown version 2 at byte 4", "expected 1");
    put32(g + 4, 0xffffffffu);
    REFUSED("v-1.bin", g, len, 8, 0, DELTA_ERR_FORMAT,
            "unknown version -1 at byte 4");

    /* a header of 64-bit integers: the magic's high half is the version */
    uint8_t *h64 = calloc(1, 2048 + 200);
    put32(h64, 20240520);
    put32(h64 + 8, 1);
    put32(h64 + 16, 100);
    REFUSED("int64_header.bin", h64, 2048 + 200, 8, 0, DELTA_ERR_FORMAT,
            "unknown version 0 at byte 4", "64-bit");
    free(h64);
    /* a header of 128 int32 (512 bytes): 512 bytes short */
    memcpy(g, f, 512);
    memcpy(g + 512, f + 1024, 200);
    REFUSED("short_hdr_512.bin", g, 712, 8, 0, DELTA_ERR_FORMAT,
            "ends at byte 712", "inside the 1024-byte header");

    /* short headers: a few bytes, or cut inside */
    REFUSED("empty.bin", f, 0, 8, 0, DELTA_ERR_FORMAT, "0 bytes",
            "ends at byte 0");
    REFUSED("three.bin", f, 3, 8, 0, DELTA_ERR_FORMAT, "ends at byte 3");
    REFUSED("hdr500.bin", f, 500, 8, 0, DELTA_ERR_FORMAT, "ends at byte 500",
            "inside the 1024-byte header");
    REFUSED("hdr1023.bin", f, 1023, 8, 0, DELTA_ERR_FORMAT,
            "ends at byte 1023");

    /* counts */
    memcpy(g, f, len);
    put32(g + 8, 0);
    REFUSED("zero.bin", g, 1024, 8, 0, DELTA_ERR_FORMAT,
            "token count 0 at byte 8", "at least 1");
    put32(g + 8, (uint32_t)-5);
    REFUSED("negative.bin", g, len, 8, 0, DELTA_ERR_FORMAT,
            "token count -5 at byte 8");
    free(g);
    free(f);
}

static void test_tokens_bad_size(void) {
    uint16_t tok[101];
    for (int i = 0; i < 101; i++) tok[i] = (uint16_t)i;
    size_t len;
    uint8_t *f = make_file(20240520, 1, 100, tok, 101, &len); /* 1 extra */

    /* truncated tokens: at a token boundary and in the middle of one */
    REFUSED("cut60.bin", f, 1024 + 120, 8, 0, DELTA_ERR_FORMAT,
            "1144 bytes", "needs 1224", "cut off at byte 1144",
            "at token 60 of 100");
    REFUSED("cut_odd.bin", f, 1024 + 121, 8, 0, DELTA_ERR_FORMAT,
            "cut off at byte 1145", "at token 60 of 100", "middle");
    REFUSED("hdr_only.bin", f, 1024, 8, 0, DELTA_ERR_FORMAT,
            "cut off at byte 1024", "at token 0 of 100");
    /* extra bytes: a whole token, one byte */
    REFUSED("extra2.bin", f, len, 8, 0, DELTA_ERR_FORMAT, "1226 bytes",
            "2 more", "from byte 1224");
    REFUSED("extra1.bin", f, len - 1, 8, 0, DELTA_ERR_FORMAT, "1 more",
            "from byte 1224");
    free(f);

    /* seq_len larger than the file: N tokens hold windows up to N - 1 */
    f = make_file(20240520, 1, 10, tok, 10, &len);
    REFUSED("ten.bin", f, len, 10, 0, DELTA_ERR_FORMAT, "10 tokens",
            "seq_len 10 needs at least 11");
    REFUSED("ten.bin", f, len, 1 << 20, 0, DELTA_ERR_FORMAT, "10 tokens");
    char err[512];
    delta_status st;
    delta_dataset *ds = open_tokens(tmp_path("ten.bin"), 9, 0, &st, err,
                                    sizeof err);
    CHECK(ds && delta_dataset_len(ds) == 1, "%s", err);
    delta_dataset_free(ds);
    /* a single token: no window at all */
    uint8_t *one = make_file(20240520, 1, 1, tok, 1, &len);
    REFUSED("one.bin", one, len, 1, 0, DELTA_ERR_FORMAT, "1 tokens",
            "at least 2");
    free(one);
    free(f);
}

static void test_tokens_bad_ids(void) {
    const size_t n = 300;
    uint16_t *tok = random_tokens(n, DELTA_TOKENS_GPT2_VOCAB, 3);
    tok[37] = DELTA_TOKENS_GPT2_VOCAB;      /* the first one out of range */
    tok[200] = 65535;
    size_t len;
    uint8_t *f = make_file(20240520, 1, (uint32_t)n, tok, n, &len);
    REFUSED("ids.bin", f, len, 8, 0, DELTA_ERR_FORMAT,
            "token 37 (at byte 1098) is 50257", "vocab 50257",
            "2 of the 300 tokens");
    /* the last token too (only a target, never an input) */
    tok[37] = 5;
    tok[200] = 5;
    tok[n - 1] = 50300;
    free(f);
    f = make_file(20240520, 1, (uint32_t)n, tok, n, &len);
    REFUSED("last_id.bin", f, len, 8, 0, DELTA_ERR_FORMAT,
            "token 299 (at byte 1622) is 50300");
    /* a vocab of one's own: ids below it pass, one at it is refused */
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)(i % 100);
    free(f);
    f = make_file(20240520, 1, (uint32_t)n, tok, n, &len);
    const char *p = tmp_path("small_vocab.bin");
    write_file(p, f, len);
    char err[512];
    delta_status st;
    delta_dataset *ds = open_tokens(p, 8, 100, &st, err, sizeof err);
    CHECK(ds && delta_dataset_info(ds).vocab == 100, "%s", err);
    delta_dataset_free(ds);
    REFUSED("small_vocab.bin", f, len, 8, 99, DELTA_ERR_FORMAT,
            "token 99 (at byte 1222) is 99", "not below the vocab 99");
    free(f);
    free(tok);
}

static void test_tokens_bad_args_and_paths(void) {
    char err[512] = "";
    delta_status st = DELTA_OK;
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = i;
    const char *p = tmp_path("ok.bin");
    CHECK(delta_tokens_write(p, ids, 20, err, sizeof err) == DELTA_OK, "%s",
          err);
    delta_dataset *ds = open_tokens(p, 0, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG && strstr(err, "seq_len 0"),
          "'%s'", err);
    ds = open_tokens(p, 4, -1, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG && strstr(err, "vocab -1"),
          "'%s'", err);
    ds = open_tokens(p, 4, (int64_t)1 << 40, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG, "'%s'", err);
    ds = delta_dataset_tokens_new(p, NULL, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG, "'%s'", err);
    delta_tokens_opts o = {.seq_len = 4};
    ds = delta_dataset_tokens_new(NULL, &o, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_INVALID_ARG, "'%s'", err);
    ds = delta_dataset_tokens_new(p, &o, NULL, NULL, 0); /* no err buffer */
    CHECK(ds != NULL);
    delta_dataset_free(ds);

    ds = open_tokens(tmp_path("absent.bin"), 4, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_IO && strstr(err, "absent.bin") &&
              strstr(err, "cannot open"), "'%s'", err);
    ds = open_tokens(tmpdir, 4, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_IO && strstr(err, "not a regular file"),
          "'%s'", err);
    /* a FIFO is refused at once, not waited on */
    const char *fifo = tmp_path("fifo.bin");
    CHECK(mkfifo(fifo, 0600) == 0);
    ds = open_tokens(fifo, 4, 0, &st, err, sizeof err);
    CHECK(!ds && st == DELTA_ERR_IO && strstr(err, "not a regular file"),
          "'%s'", err);
    if (verbose) printf("  # %s\n", err);

    /* the sniff */
    CHECK(delta_tokens_file_is(p));
    CHECK(!delta_tokens_file_is(tmp_path("absent.bin")));
    CHECK(!delta_tokens_file_is(tmpdir));
    CHECK(!delta_tokens_file_is(fifo));
    CHECK(!delta_tokens_file_is(NULL));
    write_file(tmp_path("t.txt"), "hello world", 11);
    CHECK(!delta_tokens_file_is(tmp_path("t.txt")));
    write_file(tmp_path("t3.txt"), "\x88\xd8\x34", 3);
    CHECK(!delta_tokens_file_is(tmp_path("t3.txt")));
    uint8_t m[4];
    put32(m, 20240801); /* llm.c's: the constructor says what it is */
    write_file(tmp_path("l3.bin"), m, 4);
    CHECK(delta_tokens_file_is(tmp_path("l3.bin")));
}

/* Every truncation of a small valid file and random damage to its header
 * and tokens: refused with a status and a message, or accepted with every
 * sample readable and every id below the vocab (ASan and UBSan builds
 * check the reads). */
static void test_tokens_sweeps(void) {
    const size_t n = 40;
    uint16_t *tok = random_tokens(n, 1000, 4);
    size_t len;
    uint8_t *f = make_file(20240520, 1, (uint32_t)n, tok, n, &len);
    const char *p = tmp_path("sweep.bin");
    char err[512];
    delta_status st;
    int accepted = 0;
    for (size_t cut = 0; cut <= len; cut++) {
        write_file(p, f, cut);
        delta_dataset *ds = open_tokens(p, 4, 1000, &st, err, sizeof err);
        if (cut < len)
            CHECK(!ds && st == DELTA_ERR_FORMAT && err[0], "cut %zu: %s",
                  cut, err);
        else
            CHECK(ds && delta_dataset_len(ds) == 9, "%s", err);
        delta_dataset_free(ds);
    }
    uint8_t *g = malloc(len + 8);
    test_rng_seed(99);
    for (int trial = 0; trial < 2000; trial++) {
        memcpy(g, f, len);
        int k = 1 + (int)(test_rng_u32() % 4);
        for (int j = 0; j < k; j++) {
            /* mostly the first 12 header bytes, sometimes the tokens */
            size_t at = test_rng_u32() % 3 ? test_rng_u32() % 12
                                           : test_rng_u32() % len;
            g[at] = (uint8_t)test_rng_u32();
        }
        size_t glen = len + (test_rng_u32() % 5 == 0 ? test_rng_u32() % 8 : 0);
        if (test_rng_u32() % 5 == 0) glen = test_rng_u32() % (len + 1);
        write_file(p, g, glen);
        int64_t T = 1 + (int64_t)(test_rng_u32() % 12);
        delta_dataset *ds = open_tokens(p, T, 1000, &st, err, sizeof err);
        if (!ds) {
            CHECK(st != DELTA_OK && err[0], "trial %d: refused without a "
                  "message", trial);
            continue;
        }
        accepted++;
        int32_t x[12], y[12];
        for (int64_t i = 0; i < delta_dataset_len(ds); i++) {
            delta_dataset_get(ds, i, 0, 0, x, y, NULL);
            for (int64_t t = 0; t < T; t++)
                CHECK(x[t] >= 0 && x[t] < 1000 && y[t] >= 0 && y[t] < 1000,
                      "trial %d: id %d %d", trial, x[t], y[t]);
        }
        delta_dataset_free(ds);
    }
    if (verbose) printf("  # %d of 2000 damaged files accepted\n", accepted);
    free(g);
    free(f);
    free(tok);
}

/* ---- the writer ------------------------------------------------------------ */

/* Files in tmpdir whose names contain s. */
static int files_with(const char *s) {
    DIR *d = opendir(tmpdir);
    int k = 0;
    for (struct dirent *e; d && (e = readdir(d));) k += strstr(e->d_name, s) != NULL;
    if (d) closedir(d);
    return k;
}

static void test_tokens_writer(void) {
    char err[512] = "";
    int32_t ids[5] = {1, 2, 3, 4, 5};
    const char *p = tmp_path("w.bin");
    unlink(p);
    CHECK(delta_tokens_write(p, ids, 0, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "0 tokens"), "'%s'", err);
    CHECK(delta_tokens_write(p, ids, -3, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG, "'%s'", err);
    CHECK(delta_tokens_write(p, NULL, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG, "'%s'", err);
    CHECK(delta_tokens_write(NULL, ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG, "'%s'", err);
    ids[3] = 65536;
    CHECK(delta_tokens_write(p, ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "token 3 is 65536"),
          "'%s'", err);
    ids[3] = -1;
    CHECK(delta_tokens_write(p, ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "token 3 is -1"),
          "'%s'", err);
    CHECK(access(p, F_OK) != 0, "a refused write left %s", p);
    ids[3] = 65535;

    /* non-regular destinations: a folder, a FIFO, a character device */
    CHECK(delta_tokens_write(tmpdir, ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "a folder"), "'%s'", err);
    const char *fifo = tmp_path("wfifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(delta_tokens_write(fifo, ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "a FIFO"), "'%s'", err);
    if (verbose) printf("  # %s\n", err);
    CHECK(delta_tokens_write("/dev/null", ids, 5, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "character device"),
          "'%s'", err);
    /* a missing folder */
    CHECK(delta_tokens_write(tmp_path("no/such/dir.bin"), ids, 5, err,
                             sizeof err) == DELTA_ERR_IO, "'%s'", err);

    /* replaces a regular file, keeping its mode; through a link, the
     * target (the link survives) */
    write_file(p, "old", 3);
    chmod(p, 0640);
    CHECK(delta_tokens_write(p, ids, 5, err, sizeof err) == DELTA_OK, "%s",
          err);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0640 &&
              sb.st_size == 1024 + 10, "mode %o size %lld",
          (unsigned)(sb.st_mode & 0777), (long long)sb.st_size);
    const char *link = tmp_path("link.bin");
    CHECK(symlink("w.bin", link) == 0);
    ids[0] = 42;
    CHECK(delta_tokens_write(link, ids, 3, err, sizeof err) == DELTA_OK, "%s",
          err);
    struct stat lb;
    CHECK(lstat(link, &lb) == 0 && S_ISLNK(lb.st_mode));
    CHECK_SAMPLE(p, 2, 65536, 1, 0, 42, 3);
    CHECK(files_with(".tmp") == 0, "a temporary was left in %s", tmpdir);
}

/* ---- scripts/make_token_file.py -------------------------------------------- */

static void test_tokens_script(void) {
    const char *script = "scripts/make_token_file.py";
    if (access(script, R_OK) != 0)
        TEST_SKIP("scripts/make_token_file.py not found (run from the "
                  "repository root)");
    if (system("python3 -c 'import sys' >/dev/null 2>&1") != 0)
        TEST_SKIP("no python3");
    int32_t ids[7] = {0, 50256, 1, 13, 464, 262, 50000};
    char cmd[1024];
    const char *py = tmp_path("py.bin"), *c = tmp_path("c.bin");
    snprintf(cmd, sizeof cmd, "python3 %s --ids '0 50256,1 13 464 262 50000' "
             "-o %s >/dev/null", script, py);
    CHECK(system(cmd) == 0, "%s", cmd);
    char err[512];
    CHECK(delta_tokens_write(c, ids, 7, err, sizeof err) == DELTA_OK, "%s",
          err);
    size_t na = 0, nb = 0;
    uint8_t *a = read_all(py, &na), *b = read_all(c, &nb);
    CHECK(a && b && na == nb && !memcmp(a, b, na),
          "the script's file (%zu bytes) differs from the library's (%zu)",
          na, nb);
    free(a);
    free(b);
    /* bytes of a text as ids, read back through the dataset */
    write_file(tmp_path("s.txt"), "abcdefghij", 10);
    snprintf(cmd, sizeof cmd, "python3 %s --bytes %s -o %s >/dev/null", script,
             tmp_path("s.txt"), py);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK_SAMPLE(py, 3, 256, 3, 2, 'g', 'j');
    /* the script refuses an id a uint16 cannot hold, writing nothing */
    snprintf(cmd, sizeof cmd, "python3 %s --ids '1 70000' -o %s 2>/dev/null",
             script, tmp_path("bad_py.bin"));
    CHECK(system(cmd) != 0 && access(tmp_path("bad_py.bin"), F_OK) != 0);
}

static void test_free_null(void) {
    delta_dataset_free(NULL);
    CHECK(1);
}

int main(void) {
    verbose = getenv("DELTA_TEST_VERBOSE") != NULL;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/delta_tokens_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_tokens_roundtrip);
    TEST_RUN(test_tokens_llmc_batches);
    TEST_RUN(test_tokens_bad_header);
    TEST_RUN(test_tokens_bad_size);
    TEST_RUN(test_tokens_bad_ids);
    TEST_RUN(test_tokens_bad_args_and_paths);
    TEST_RUN(test_tokens_sweeps);
    TEST_RUN(test_tokens_writer);
    TEST_RUN(test_tokens_script);
    TEST_RUN(test_free_null);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
