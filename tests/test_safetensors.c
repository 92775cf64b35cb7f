/* Tests for the safetensors reader and writer: round trips, byte-level
 * agreement with the reference (Python/Rust) writer, one test per kind of
 * malformed header, and truncation and random-mutation sweeps that must be
 * refused or accepted without a crash or a bad read. */
#include "delta/safetensors.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static char tmpdir[64];

/* Path of a file in this run's temporary folder (one static buffer). */
static const char *tmp_path(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* How many save temporaries of path (path.delta-XXXXXX.tmp) are in
 * tmpdir. */
static int temps_of(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s.delta-", base);
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

/* Reads a whole file into malloc'd memory; *len gets its size. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* A file as the reference writer lays it out: u64 LE length, the header
 * (padded with spaces to a multiple of 8 when pad), then data. */
static unsigned char *make_file(const char *json, bool pad, const void *data,
                                size_t data_len, size_t *len) {
    size_t h = strlen(json), hp = pad ? (h + 7) / 8 * 8 : h;
    *len = 8 + hp + data_len;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(b + 8, json, h);
    memset(b + 8 + h, ' ', hp - h);
    if (data_len) memcpy(b + 8 + hp, data, data_len);
    return b;
}

/* Parses json + data_len zero bytes and checks it is refused as malformed
 * with a message that contains `needle` (when given). */
static void expect_format_(const char *json, size_t data_len,
                           const char *needle, int line) {
    unsigned char zeros[256] = {0};
    size_t len;
    unsigned char *b = make_file(json, true, zeros, data_len, &len);
    char err[512] = "";
    delta_status st = DELTA_OK;
    delta_st_file *f = delta_st_parse(b, len, &st, err, sizeof err);
    CHECK(f == NULL, "line %d: accepted %s", line, json);
    CHECK(st == DELTA_ERR_FORMAT, "line %d: status %s", line,
          delta_status_name(st));
    CHECK(err[0] != '\0', "line %d: empty message", line);
    if (needle)
        CHECK(strstr(err, needle) != NULL, "line %d: message '%s' lacks '%s'",
              line, err, needle);
    delta_st_close(f);
    free(b);
}
#define expect_format(json, data_len, needle) \
    expect_format_(json, data_len, needle, __LINE__)

/* ---- round trips ------------------------------------------------------- */

static void test_round_trip(void) {
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
    int32_t ids[4] = {7, -1, 2147483647, -2147483647 - 1};
    float scalar = 42.0f;
    uint16_t half[4] = {0x3c00, 0xbc00, 0x7bff, 0x0001};
    uint8_t bytes[3] = {1, 2, 255};
    delta_st_entry e[] = {
        {"fc.weight", "F32", 2, {2, 3}, w},
        {"ids", "I32", 1, {4}, ids},
        {"scale", "F32", 0, {0}, &scalar},
        {"empty", "F32", 1, {0}, NULL},
        {"h", "BF16", 2, {2, 2}, half},
        {"u", "U8", 1, {3}, bytes},
    };
    const char *meta[] = {"format", "pt", "step", "1200"};
    const char *path = tmp_path("rt.safetensors");
    char err[256] = "x";
    delta_status st = delta_st_write(path, e, 6, meta, 2, err, sizeof err);
    CHECK(st == DELTA_OK, "write: %s", err);
    CHECK(err[0] == '\0', "message not cleared on success: %s", err);
    CHECK(temps_of(path) == 0, "temp file left behind");

    delta_st_file *f = delta_st_open(path, &st, err, sizeof err);
    CHECK(f && st == DELTA_OK, "open: %s", err);
    if (!f) return;
    CHECK(delta_st_count(f) == 6, "count %d", delta_st_count(f));
    const int64_t numel[] = {6, 4, 1, 0, 4, 3};
    const size_t nbytes[] = {24, 16, 4, 0, 8, 3};
    const delta_dtype dt[] = {DELTA_F32, DELTA_I32, DELTA_F32, DELTA_F32,
                              DELTA_BF16, DELTA_DTYPE_COUNT};
    for (int i = 0; i < 6 && i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        CHECK(strcmp(t->name, e[i].name) == 0, "[%d] %s", i, t->name);
        CHECK(strcmp(t->st_dtype, e[i].st_dtype) == 0, "[%d]", i);
        CHECK(t->dtype == dt[i], "[%d] dtype %d", i, (int)t->dtype);
        CHECK(t->ndim == e[i].ndim, "[%d]", i);
        for (int d = 0; d < t->ndim; d++)
            CHECK(t->shape[d] == e[i].shape[d], "[%d] dim %d", i, d);
        CHECK(t->numel == numel[i], "[%d] numel %lld", i, (long long)t->numel);
        CHECK(t->nbytes == nbytes[i], "[%d] nbytes %zu", i, t->nbytes);
        CHECK(t->elem_size == delta_st_dtype_size(e[i].st_dtype),
              "[%d] elem_size %zu", i, t->elem_size);
        if (nbytes[i])
            CHECK(memcmp(t->data, e[i].data, nbytes[i]) == 0, "[%d] data", i);
        CHECK(delta_st_find(f, e[i].name) == t, "[%d] find", i);
    }
    /* The writer pads the header, so the data section stays 8-aligned. */
    CHECK(((uintptr_t)delta_st_at(f, 0)->data & 7) == 0,
          "data at %p", delta_st_at(f, 0)->data);
    CHECK(delta_st_find(f, "nope") == NULL, "found a tensor that is not there");
    CHECK(delta_st_metadata(f, "format") &&
          strcmp(delta_st_metadata(f, "format"), "pt") == 0, "metadata format");
    CHECK(delta_st_metadata(f, "step") &&
          strcmp(delta_st_metadata(f, "step"), "1200") == 0, "metadata step");
    CHECK(delta_st_metadata(f, "Format") == NULL,
          "metadata keys are case-sensitive");
    delta_st_close(f);

    /* The same bytes through delta_st_parse. */
    size_t len;
    unsigned char *b = read_all(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    CHECK(hlen % 8 == 0 && hlen > 0, "header length %llu",
          (unsigned long long)hlen);
    CHECK(len == 8 + hlen + 24 + 16 + 4 + 8 + 3, "file is %zu bytes", len);
    f = delta_st_parse(b, len, &st, err, sizeof err);
    CHECK(f && delta_st_count(f) == 6, "parse: %s", err);
    if (f) CHECK(memcmp(delta_st_find(f, "ids")->data, ids, 16) == 0,
                 "ids data");
    delta_st_close(f);
    free(b);
    unlink(path);
}

static void test_empty_file(void) {
    const char *path = tmp_path("empty.safetensors");
    char err[256];
    CHECK(delta_st_write(path, NULL, 0, NULL, 0, err, sizeof err) == DELTA_OK,
          "%s", err);
    size_t len;
    unsigned char *b = read_all(path, &len);
    /* "{}" padded to 8 bytes, as the reference writes an empty dict. */
    CHECK(len == 16 && b && memcmp(b + 8, "{}      ", 8) == 0,
          "file is %zu bytes", len);
    delta_status st;
    delta_st_file *f = delta_st_open(path, &st, err, sizeof err);
    CHECK(f && delta_st_count(f) == 0, "%s", err);
    if (f) CHECK(delta_st_metadata(f, "x") == NULL,
                 "metadata in a file without any");
    delta_st_close(f);
    free(b);
    unlink(path);
}

static void test_overwrite(void) {
    const char *path = tmp_path("ow.safetensors");
    float a[2] = {1, 2}, b[1] = {3};
    delta_st_entry e1 = {"a", "F32", 1, {2}, a}, e2 = {"b", "F32", 1, {1}, b};
    char err[256];
    CHECK(delta_st_write(path, &e1, 1, NULL, 0, err, sizeof err) == DELTA_OK,
          "first write: %s", err);
    CHECK(delta_st_write(path, &e2, 1, NULL, 0, err, sizeof err) == DELTA_OK,
          "second write: %s", err);
    delta_st_file *f = delta_st_open(path, NULL, err, sizeof err);
    CHECK(f && delta_st_count(f) == 1 && delta_st_find(f, "b") &&
          !delta_st_find(f, "a"), "%s", err);
    delta_st_close(f);
    unlink(path);
}

/* ---- the reference writer's bytes -------------------------------------- */

/* What Python's safetensors.torch.save_file({"a": torch.tensor([1., 2.]),
 * "b": torch.tensor([[3, 4, 5]], dtype=torch.int32), "c": torch.zeros(0)},
 * metadata={"format": "pt"}) writes: compact JSON, __metadata__ first,
 * header padded with spaces to a multiple of 8. */
static const char ref_json[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"b\":{\"dtype\":\"I32\",\"shape\":[1,3],\"data_offsets\":[8,20]},"
    "\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[20,20]}}";

static void test_reference_bytes(void) {
    float a[2] = {1, 2};
    int32_t bv[3] = {3, 4, 5};
    unsigned char data[20];
    memcpy(data, a, 8);
    memcpy(data + 8, bv, 12);
    size_t len;
    unsigned char *ref = make_file(ref_json, true, data, sizeof data, &len);
    CHECK(ref[0] == 200 && ref[8 + 195] == '}' && ref[8 + 199] == ' ',
          "hand-built layout");

    char err[256];
    delta_status st;
    delta_st_file *f = delta_st_parse(ref, len, &st, err, sizeof err);
    CHECK(f && st == DELTA_OK, "%s", err);
    if (f) {
        CHECK(delta_st_count(f) == 3, "count %d", delta_st_count(f));
        const delta_st_tensor *b = delta_st_find(f, "b");
        CHECK(b && b->dtype == DELTA_I32 && b->ndim == 2 && b->shape[0] == 1 &&
              b->shape[1] == 3 && memcmp(b->data, bv, 12) == 0, "tensor b");
        CHECK(strcmp(delta_st_metadata(f, "format"), "pt") == 0,
              "metadata format");
        CHECK(delta_st_find(f, "c")->numel == 0, "tensor c");
    }
    delta_st_close(f);

    /* Given the same order, the writer produces the same bytes. */
    delta_st_entry e[] = {{"a", "F32", 1, {2}, a},
                          {"b", "I32", 2, {1, 3}, bv},
                          {"c", "F32", 1, {0}, NULL}};
    const char *meta[] = {"format", "pt"};
    const char *path = tmp_path("ref.safetensors");
    CHECK(delta_st_write(path, e, 3, meta, 1, err, sizeof err) == DELTA_OK,
          "%s", err);
    size_t wlen;
    unsigned char *w = read_all(path, &wlen);
    CHECK(w && wlen == len && memcmp(w, ref, len) == 0,
          "written file differs from the reference layout");
    free(w);
    free(ref);
    unlink(path);
}

static void test_unpadded_foreign_file(void) {
    /* A writer that does not pad: the data section starts at byte 8+45, not
     * a multiple of 8. Also whitespace inside the JSON, and an unknown field,
     * both of which the reference accepts. */
    const char *json = "{ \"x\" : {\"dtype\":\"F64\", \"shape\":[2],"
                       "\"data_offsets\":[0,16], \"extra\": 1} }";
    double v[2] = {0.1, -7.5};
    size_t len;
    unsigned char *b = make_file(json, false, v, sizeof v, &len);
    char err[256];
    delta_status st;
    delta_st_file *f = delta_st_parse(b, len, &st, err, sizeof err);
    CHECK(f && st == DELTA_OK, "%s", err);
    if (f) {
        const delta_st_tensor *t = delta_st_at(f, 0);
        double got[2];
        memcpy(got, t->data, sizeof got);
        CHECK(t->dtype == DELTA_DTYPE_COUNT && t->elem_size == 8,
              "dtype %d, elem_size %zu", (int)t->dtype, t->elem_size);
        CHECK(got[0] == 0.1 && got[1] == -7.5, "got %g %g", got[0], got[1]);
    }
    delta_st_close(f);
    free(b);
}

static void test_data_offset_order(void) {
    /* Header order differs from data order; delta_st_at follows the data. */
    const char *json =
        "{\"late\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]},"
        "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,3]},"
        "\"early\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    unsigned char data[5] = {1, 2, 3, 4, 5};
    size_t len;
    unsigned char *b = make_file(json, true, data, 5, &len);
    char err[256];
    delta_st_file *f = delta_st_parse(b, len, NULL, err, sizeof err);
    CHECK(f != NULL, "%s", err);
    if (f) {
        CHECK(strcmp(delta_st_at(f, 0)->name, "early") == 0,
              "[0] is %s", delta_st_at(f, 0)->name);
        CHECK(strcmp(delta_st_at(f, 1)->name, "z") == 0,
              "[1] is %s", delta_st_at(f, 1)->name);
        CHECK(strcmp(delta_st_at(f, 2)->name, "late") == 0,
              "[2] is %s", delta_st_at(f, 2)->name);
        CHECK(((const unsigned char *)delta_st_at(f, 2)->data)[0] == 4,
              "data of late");
    }
    delta_st_close(f);
    free(b);
}

/* ---- malformed files --------------------------------------------------- */

/* A one-tensor header named 't' from JSON snippets. */
#define T1(dtype, shape, offs)                               \
    "{\"t\":{\"dtype\":" dtype ",\"shape\":" shape         \
    ",\"data_offsets\":" offs "}}"

static void test_short_file(void) {
    unsigned char b[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    for (size_t n = 0; n < 8; n++) {
        char err[256] = "";
        delta_status st;
        delta_st_file *f = delta_st_parse(b, n, &st, err, sizeof err);
        CHECK(!f && st == DELTA_ERR_FORMAT && err[0], "len %zu", n);
        CHECK(strstr(err, "shorter") != NULL, "%s", err);
    }
}

static void test_bad_header_length(void) {
    unsigned char b[16] = {0};
    memcpy(b + 8, "{}      ", 8);
    char err[256] = "";
    delta_status st;
    /* 0 */
    CHECK(!delta_st_parse(b, 16, &st, err, sizeof err),
          "accepted header length 0");
    CHECK(st == DELTA_ERR_FORMAT && strstr(err, "length is 0"), "%s", err);
    /* over the limit */
    uint64_t big = (uint64_t)DELTA_ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
    err[0] = '\0';
    CHECK(!delta_st_parse(b, 16, &st, err, sizeof err),
          "accepted a header over the limit");
    CHECK(st == DELTA_ERR_FORMAT && strstr(err, "limit"), "%s", err);
    /* huge: 2^64 - 1 */
    memset(b, 0xff, 8);
    err[0] = '\0';
    CHECK(!delta_st_parse(b, 16, &st, err, sizeof err),
          "accepted header length 2^64-1");
    CHECK(st == DELTA_ERR_FORMAT && err[0],
          "status %s, message '%s'", delta_status_name(st), err);
    /* past the end of the file */
    memset(b, 0, 8);
    b[0] = 9;
    err[0] = '\0';
    CHECK(!delta_st_parse(b, 16, &st, err, sizeof err),
          "accepted a header past the end");
    CHECK(st == DELTA_ERR_FORMAT && strstr(err, "past the end"), "%s", err);
}

static void test_bad_json(void) {
    expect_format("{\"t\":{\"dtype\":\"F32\",", 0, "syntax");
    expect_format("{\"t\" 1}", 0, "syntax");
    expect_format("[1, 2]", 0, "expected a JSON object");
    expect_format("\"str\"", 0, "expected a JSON object");
    expect_format("{} x", 0, "after the JSON");
    expect_format("{}{}", 0, "after the JSON");
    expect_format("{\"a\xff\":1}", 0, "UTF-8");
    expect_format("{\"a\xc0\xaf\":1}", 0, "UTF-8");  /* overlong '/' */
    expect_format("", 0, "length is 0");
    /* deep nesting is refused by cJSON's limit rather than the stack */
    char deep[4096];
    size_t k = 0;
    deep[k++] = '{';
    memcpy(deep + k, "\"a\":", 4);
    k += 4;
    for (int i = 0; i < 1500; i++) deep[k++] = '[';
    deep[k] = '\0';
    expect_format(deep, 0, NULL);
}

static void test_entry_not_object(void) {
    expect_format("{\"w\":5}", 0, "tensor 'w': entry is 5, expected an object");
    expect_format("{\"w\":[0]}", 0, "'w'");
    expect_format("{\"w\":null}", 0, "'w'");
}

static void test_missing_fields(void) {
    expect_format("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'w': missing field 'dtype'");
    expect_format("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                  "tensor 'w': missing field 'shape'");
    expect_format("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                  "tensor 'w': missing field 'data_offsets'");
    expect_format("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}",
                  4, "tensor 'w': field 'dtype' appears twice");
    /* field names are case-sensitive */
    expect_format("{\"w\":{\"DTYPE\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}",
                  4, "missing field 'dtype'");
}

static void test_wrong_types(void) {
    expect_format(T1("32", "[1]", "[0,4]"), 4, "tensor 't': dtype is 32");
    expect_format(T1("\"F32\"", "\"1\"", "[0,4]"), 4,
                  "tensor 't': shape is a string");
    expect_format(T1("\"F32\"", "[\"1\"]", "[0,4]"), 4,
                  "tensor 't': shape[0] is a string");
    expect_format(T1("\"F32\"", "[true]", "[0,4]"), 4, "shape[0] is a boolean");
    expect_format(T1("\"F32\"", "[1]", "{}"), 4,
                  "tensor 't': data_offsets is an object");
    expect_format(T1("\"F32\"", "[1]", "[0,4,4]"), 4,
                  "tensor 't': data_offsets has 3 elements, expected 2");
    expect_format(T1("\"F32\"", "[1]", "[0]"), 4, "has 1 elements");
    expect_format(T1("\"F32\"", "[1]", "[0,null]"), 4,
                  "tensor 't': data_offsets[1] is null");
}

static void test_unknown_dtype(void) {
    expect_format(T1("\"F33\"", "[1]", "[0,4]"), 4,
                  "tensor 't': unknown dtype 'F33'");
    expect_format(T1("\"f32\"", "[1]", "[0,4]"), 4, "unknown dtype 'f32'");
    expect_format(T1("\"\"", "[1]", "[0,4]"), 4, "unknown dtype ''");
}

static void test_bad_dims(void) {
    expect_format(T1("\"F32\"", "[-1]", "[0,4]"), 4,
                  "tensor 't': shape[0] is -1");
    expect_format(T1("\"F32\"", "[2,1.5]", "[0,12]"), 12,
                  "tensor 't': shape[1] is 1.5");
    expect_format(T1("\"F32\"", "[1e300]", "[0,4]"), 4, "shape[0] is 1e+300");
    expect_format(T1("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4,
                  "tensor 't': shape has 9 dimensions, at most 8");
    expect_format(T1("\"F32\"", "[1]", "[0.5,4]"), 4,
                  "tensor 't': data_offsets[0] is 0.5");
    expect_format(T1("\"F32\"", "[1]", "[-4,0]"), 4, "data_offsets[0] is -4");
    /* numel overflows int64 (2^32 * 2^32) */
    expect_format(T1("\"U8\"", "[4294967296,4294967296]", "[0,4]"), 4,
                  "tensor 't': shape [4294967296, 4294967296] of U8 is too "
                  "large");
    /* numel fits, bytes do not (2^31 * 2^31 * 8) */
    expect_format(T1("\"F64\"", "[2147483648,2147483648,4]", "[0,4]"), 4,
                  "too large");
}

static void test_bad_offsets(void) {
    expect_format(T1("\"F32\"", "[1]", "[4,0]"), 4,
                  "tensor 't': data_offsets [4, 0] end before they begin");
    expect_format("{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[5,6],"
                  "\"data_offsets\":[0,100]}}",
                  100,
                  "tensor 'fc.weight': data_offsets [0, 100] hold 100 bytes "
                  "but shape [5, 6] of F32 needs 120");
    expect_format(T1("\"F32\"", "[2]", "[0,8]"), 4,
                  "tensor 't': data_offsets [0, 8] run past the end of the "
                  "4-byte data section");
    expect_format(T1("\"U8\"", "[0]", "[9,9]"), 4, "run past the end");
    /* offsets as big as JSON integers go are still checked, not wrapped */
    expect_format(T1("\"U8\"", "[1]", "[9007199254740991,9007199254740992]"),
                  4, "run past the end");
}

static void test_overlap(void) {
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a'");
    /* the same range twice */
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4, "overlap tensor 'a'");
    /* a zero-size tensor inside another one */
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
        8, "tensor 'z'");
}

static void test_holes(void) {
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        12, "tensor 'b': data_offsets [8, 12] leave a 4-byte hole after "
            "tensor 'a'");
    expect_format(T1("\"F32\"", "[1]", "[4,8]"), 8,
                  "tensor 't': data_offsets [4, 8] leave a 4-byte hole at "
                  "the start");
    expect_format(T1("\"F32\"", "[1]", "[0,4]"), 8,
                  "data section has 8 bytes but the tensors cover only 4");
    expect_format("{}", 4, "data section has 4 bytes");
    expect_format("{\"__metadata__\":{}}", 1, "data section has 1 bytes");
}

static void test_duplicate_names(void) {
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "tensor 'a': name appears twice");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        0, "tensor 'a': name appears twice");
}

static void test_bad_metadata(void) {
    expect_format("{\"__metadata__\":{\"format\":1}}", 0,
                  "__metadata__ 'format' is 1, expected a string");
    expect_format("{\"__metadata__\":{\"k\":{}}}", 0, "'k' is an object");
    expect_format("{\"__metadata__\":[\"a\"]}", 0,
                  "__metadata__ is an array, expected an object");
    expect_format("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0,
                  "key 'k' appears twice");
    expect_format("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                  "__metadata__ appears twice");
}

static void test_open_errors(void) {
    char err[256] = "";
    delta_status st = DELTA_OK;
    CHECK(!delta_st_open(tmp_path("does-not-exist"), &st, err, sizeof err),
          "opened a missing file");
    CHECK(st == DELTA_ERR_IO && strstr(err, "does-not-exist") &&
          strstr(err, "No such file"), "%s", err);
    err[0] = '\0';
    CHECK(!delta_st_open(tmpdir, &st, err, sizeof err), "opened a directory");
    CHECK(st == DELTA_ERR_IO && err[0], "%s", err);
    /* an empty file is a format error, not a crash */
    const char *path = tmp_path("zero");
    fclose(fopen(path, "wb"));
    err[0] = '\0';
    CHECK(!delta_st_open(path, &st, err, sizeof err), "opened an empty file");
    CHECK(st == DELTA_ERR_FORMAT && err[0], "%s", err);
    unlink(path);
    /* NULL status and err are allowed */
    CHECK(!delta_st_open(path, NULL, NULL, 0),
          "opened an empty file without status or err");
}

/* ---- writing errors ---------------------------------------------------- */

/* A save that fails at any stage (the test hook DELTA_TEST_SAVE_FAIL
 * makes each one fail as with EIO) leaves the previous file as it was and
 * no temporary; a failed directory sync comes after the rename, so the new
 * file is in place and the message says what is at risk. A file or a link
 * at path.tmp is the user's: neither followed nor removed. */
static void test_write_failure_keeps_previous(void) {
    char path[300], tmp[320], victim[300];
    snprintf(path, sizeof path, "%s/atomic.safetensors", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(victim, sizeof victim, "%s/victim", tmpdir);
    float old_v[2] = {1, 2}, new_v[2] = {3, 4};
    delta_st_entry eo = {"v", "F32", 1, {2}, old_v};
    delta_st_entry en = {"v", "F32", 1, {2}, new_v};
    char err[512] = "";
    CHECK(delta_st_write(path, &eo, 1, NULL, 0, err, sizeof err) == DELTA_OK,
          "%s", err);
    size_t n0 = 0;
    unsigned char *before = read_all(path, &n0);
    const char *stages[] = {"create", "write", "fsync", "rename"};
    for (int i = 0; i < 4; i++) {
        setenv("DELTA_TEST_SAVE_FAIL", stages[i], 1);
        delta_status st = delta_st_write(path, &en, 1, NULL, 0, err,
                                         sizeof err);
        unsetenv("DELTA_TEST_SAVE_FAIL");
        size_t n1 = 0;
        unsigned char *after = read_all(path, &n1);
        CHECK(st == DELTA_ERR_IO && strstr(err, "Input/output error") &&
                  strstr(err, "is unchanged"),
              "failing at %s: status %d, '%s'", stages[i], st, err);
        CHECK(after && n1 == n0 && !memcmp(before, after, n0),
              "failing at %s changed the previous file", stages[i]);
        CHECK(temps_of(path) == 0, "failing at %s left a temporary",
              stages[i]);
        free(after);
    }
    setenv("DELTA_TEST_SAVE_FAIL", "dirsync", 1);
    delta_status st = delta_st_write(path, &en, 1, NULL, 0, err, sizeof err);
    unsetenv("DELTA_TEST_SAVE_FAIL");
    CHECK(st == DELTA_ERR_IO && strstr(err, "cannot sync its directory"),
          "dirsync: status %d, '%s'", st, err);
    delta_st_file *f = delta_st_open(path, NULL, NULL, 0);
    const delta_st_tensor *t = f ? delta_st_find(f, "v") : NULL;
    CHECK(t && ((const float *)t->data)[0] == 3, "dirsync: the new file "
          "should be in place");
    delta_st_close(f);

    FILE *vf = fopen(victim, "wb");
    if (vf) {
        fputs("keep me", vf);
        fclose(vf);
    }
    CHECK(symlink(victim, tmp) == 0, "symlink");
    CHECK(delta_st_write(path, &eo, 1, NULL, 0, err, sizeof err) == DELTA_OK,
          "beside a link at path.tmp: %s", err);
    size_t nv = 0;
    unsigned char *vb = read_all(victim, &nv);
    CHECK(vb && nv == 7 && !memcmp(vb, "keep me", 7),
          "the link at path.tmp was followed");
    struct stat lb;
    CHECK(lstat(tmp, &lb) == 0 && S_ISLNK(lb.st_mode),
          "the user's %s was removed", tmp);
    unlink(tmp);
    free(vb);
    free(before);
    unlink(victim);
    unlink(path);
}

static void test_write_missing_dir(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tmpdir);
    float v = 1;
    delta_st_entry e = {"v", "F32", 0, {0}, &v};
    char err[512] = "";
    CHECK(delta_st_write(path, &e, 1, NULL, 0, err, sizeof err) ==
          DELTA_ERR_IO, "status not io: %s", err);
    CHECK(strstr(err, "No such file or directory") && strstr(err, ".tmp"),
          "%s", err);
    CHECK(!file_exists(path), "file left behind");
}

/* Defect 1: a save replaces only a regular file. A FIFO (standing for
 * /dev/full and the other files only root may write), a link to one and a
 * folder are refused before anything is written and stay what they were;
 * a link to a regular file keeps being a link, to the new contents; the
 * temporary's name is unique, so the user's path.tmp is left alone. */
static void test_write_only_regular_files(void) {
    char fifo[300], link[300], target[300], via[300], mine[320];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    snprintf(link, sizeof link, "%s/to-fifo", tmpdir);
    snprintf(target, sizeof target, "%s/target.safetensors", tmpdir);
    snprintf(via, sizeof via, "%s/via.safetensors", tmpdir);
    snprintf(mine, sizeof mine, "%s.tmp", target);
    float v[2] = {5, 6};
    delta_st_entry e = {"v", "F32", 1, {2}, v};
    char err[512] = "";
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(symlink(fifo, link) == 0, "symlink");
    const char *bad[] = {fifo, link, tmpdir};
    const char *what[] = {"a FIFO", "a FIFO", "a folder"};
    for (int i = 0; i < 3; i++) {
        CHECK(delta_st_write(bad[i], &e, 1, NULL, 0, err, sizeof err) ==
                  DELTA_ERR_INVALID_ARG && strstr(err, what[i]) &&
                  strstr(err, "not a regular file"),
              "%s: '%s'", bad[i], err);
        CHECK(temps_of(bad[i]) == 0, "%s: a temporary was made", bad[i]);
    }
    struct stat sb;
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "FIFO replaced");
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "link replaced");

    FILE *f = fopen(mine, "wb");
    if (f) {
        fputs("mine", f);
        fclose(f);
    }
    CHECK(delta_st_write(target, &e, 1, NULL, 0, err, sizeof err) ==
              DELTA_OK, "%s", err);
    CHECK(symlink(target, via) == 0, "symlink");
    float w[2] = {7, 8};
    delta_st_entry e2 = {"v", "F32", 1, {2}, w};
    CHECK(delta_st_write(via, &e2, 1, NULL, 0, err, sizeof err) == DELTA_OK,
          "through a link: %s", err);
    CHECK(lstat(via, &sb) == 0 && S_ISLNK(sb.st_mode),
          "the link was replaced by a file");
    delta_st_file *rf = delta_st_open(target, NULL, err, sizeof err);
    const delta_st_tensor *t = rf ? delta_st_find(rf, "v") : NULL;
    CHECK(t && ((const float *)t->data)[0] == 7, "the link's target was "
          "not written");
    delta_st_close(rf);
    size_t n = 0;
    unsigned char *b = read_all(mine, &n);
    CHECK(b && n == 4 && !memcmp(b, "mine", 4), "the user's %s changed",
          mine);
    free(b);
    unlink(mine);
    unlink(via);
    unlink(target);
    unlink(link);
    unlink(fifo);
}

/* Defect 2: processes saving to one path at once each leave one whole
 * file: whatever the interleaving, the path opens and holds one writer's
 * tensors, and no temporary is left. */
static void test_concurrent_saves(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/both.safetensors", tmpdir);
    enum { N = 1 << 16, ROUNDS = 20, WRITERS = 3 };
    pid_t pids[WRITERS];
    fflush(stdout);
    fflush(stderr);
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            float *v = malloc((size_t)(N + w) * sizeof *v);
            if (!v) _exit(2);
            for (int i = 0; i < N + w; i++) v[i] = (float)w;
            delta_st_entry e = {"v", "F32", 1, {N + w}, v};
            char err[512];
            for (int r = 0; r < ROUNDS; r++)
                if (delta_st_write(path, &e, 1, NULL, 0, err, sizeof err) !=
                    DELTA_OK)
                    _exit(1);
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int ws = 0;
        CHECK(pids[w] > 0 && waitpid(pids[w], &ws, 0) == pids[w] &&
                  WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "writer %d failed a save (status %d)", w, ws);
    }
    char err[512];
    delta_st_file *f = delta_st_open(path, NULL, err, sizeof err);
    CHECK(f, "torn: %s", err);
    const delta_st_tensor *t = f ? delta_st_find(f, "v") : NULL;
    if (t) {
        int w = (int)(t->numel - N);
        bool same = w >= 0 && w < WRITERS;
        for (int64_t i = 0; same && i < t->numel; i++)
            same = ((const float *)t->data)[i] == (float)w;
        CHECK(same, "a mix of writers' data");
    }
    delta_st_close(f);
    CHECK(temps_of(path) == 0, "temporaries left");
    unlink(path);
}

static void test_write_rejects_bad_entries(void) {
    float v[2] = {1, 2};
    const char *path = tmp_path("bad.safetensors");
    struct {
        delta_st_entry e[2];
        int n;
        const char *needle;
    } cases[] = {
        {{{"", "F32", 1, {2}, v}}, 1, "empty"},
        {{{NULL, "F32", 1, {2}, v}}, 1, "NULL"},
        {{{"__metadata__", "F32", 1, {2}, v}}, 1, "reserved"},
        {{{"a", "F31", 1, {2}, v}}, 1, "tensor 'a': unknown dtype 'F31'"},
        {{{"a", NULL, 1, {2}, v}}, 1, "unknown dtype"},
        {{{"a", "F32", 9, {2}, v}}, 1, "tensor 'a': ndim is 9"},
        {{{"a", "F32", -1, {2}, v}}, 1, "ndim is -1"},
        {{{"a", "F32", 1, {-2}, v}}, 1, "tensor 'a': shape[0] is -2"},
        {{{"a", "F32", 1, {2}, NULL}}, 1, "tensor 'a': data is NULL"},
        {{{"a", "F64", 3, {1ll << 30, 1ll << 30, 1ll << 30}, v}}, 1,
         "too large"},
        {{{"a", "F32", 1, {1}, v}, {"a", "F32", 1, {1}, v}}, 2,
         "tensor 'a': name appears twice"},
        {{{"a\xff", "F32", 1, {1}, v}}, 1, "UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        delta_status st = delta_st_write(path, cases[i].e, cases[i].n, NULL,
                                         0, err, sizeof err);
        CHECK(st == DELTA_ERR_INVALID_ARG, "case %zu: %s", i,
              delta_status_name(st));
        CHECK(strstr(err, cases[i].needle), "case %zu: '%s' lacks '%s'", i,
              err, cases[i].needle);
        CHECK(!file_exists(path), "case %zu wrote a file", i);
    }
    const char *dup_meta[] = {"k", "1", "k", "2"};
    char err[256] = "";
    delta_st_entry ok = {"a", "F32", 1, {2}, v};
    CHECK(delta_st_write(path, &ok, 1, dup_meta, 2, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG &&
          strstr(err, "key 'k' appears twice"), "%s", err);
    const char *null_meta[] = {"k", NULL};
    CHECK(delta_st_write(path, &ok, 1, null_meta, 1, err, sizeof err) ==
          DELTA_ERR_INVALID_ARG, "accepted NULL metadata value: %s", err);
    CHECK(!file_exists(path), "wrote a file for bad metadata");
}

/* ---- sweeps ------------------------------------------------------------ */

/* A valid file with a few tensors and metadata, in malloc'd memory. */
static unsigned char *valid_file(size_t *len) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t ids[3] = {1, 2, 3};
    uint16_t h[2] = {1, 2};
    delta_st_entry e[] = {{"layer.0.weight", "F32", 2, {2, 3}, w},
                          {"ids", "I32", 1, {3}, ids},
                          {"s", "F16", 0, {0}, h},
                          {"none", "I64", 2, {0, 4}, NULL},
                          {"half", "BF16", 1, {1}, h + 1}};
    const char *meta[] = {"format", "pt"};
    const char *path = tmp_path("sweep.safetensors");
    char err[256];
    DELTA_ASSERTF(delta_st_write(path, e, 5, meta, 1, err, sizeof err) ==
                      DELTA_OK, "%s", err);
    unsigned char *b = read_all(path, len);
    unlink(path);
    return b;
}

/* Reads every byte of every tensor (so a sanitizer sees a bad pointer) and
 * checks the invariants a parsed file promises. */
static void touch_all(const delta_st_file *f, size_t len) {
    unsigned sum = 0;
    size_t covered = 0;
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        const unsigned char *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sum += p[k];
        covered += t->nbytes;
        CHECK(delta_st_find(f, t->name) == t, "find %s", t->name);
        CHECK(t->ndim >= 0 && t->ndim <= DELTA_ST_MAX_DIMS,
              "%s: ndim %d", t->name, t->ndim);
        CHECK(t->nbytes == (size_t)t->numel * t->elem_size,
              "%s: nbytes %zu", t->name, t->nbytes);
    }
    CHECK(covered < len, "tensors cover %zu of %zu bytes", covered, len);
    (void)sum;
}

static void test_truncated_sweep(void) {
    size_t len;
    unsigned char *b = valid_file(&len);
    int accepted = 0;
    for (size_t n = 0; n < len; n++) {
        /* an exact-size copy so a sanitizer catches any read past the end */
        unsigned char *p = malloc(n ? n : 1);
        memcpy(p, b, n);
        char err[256] = "";
        delta_status st = DELTA_OK;
        delta_st_file *f = delta_st_parse(p, n, &st, err, sizeof err);
        if (f) accepted++;
        CHECK(!f && st == DELTA_ERR_FORMAT && err[0], "prefix %zu: %s", n,
              err);
        delta_st_close(f);
        free(p);
    }
    CHECK(accepted == 0, "%d prefixes accepted", accepted);
    delta_st_file *f = delta_st_parse(b, len, NULL, NULL, 0);
    CHECK(f && delta_st_count(f) == 5, "full file refused");
    delta_st_close(f);
    free(b);
}

static uint64_t rng_state = 0x5eed5eed12345678ull;
static uint32_t rnd(void) {  /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static void test_random_mutations(void) {
    size_t len;
    unsigned char *b = valid_file(&len);
    unsigned char *p = malloc(len);
    static const char interesting[] = "0123456789-.e[]{},\":\\ aF";
    int ok = 0, refused = 0;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(p, b, len);
        int k = 1 + (int)(rnd() % 4);
        for (int j = 0; j < k; j++) {
            /* mostly the length field and header, where parsing happens */
            size_t at = rnd() % 4 ? rnd() % (len < 200 ? len : 200)
                                  : rnd() % len;
            p[at] = rnd() % 2 ? (unsigned char)rnd()
                              : (unsigned char)interesting[rnd() % (sizeof
                                    interesting - 1)];
        }
        size_t n = rnd() % 8 ? len : rnd() % len;  /* sometimes truncate */
        char err[256] = "";
        delta_status st = DELTA_OK;
        delta_st_file *f = delta_st_parse(p, n, &st, err, sizeof err);
        if (f) {
            ok++;
            CHECK(st == DELTA_OK, "status %s", delta_status_name(st));
            touch_all(f, n);
        } else {
            refused++;
            CHECK(st == DELTA_ERR_FORMAT && err[0], "iter %d: %s: %s", iter,
                  delta_status_name(st), err);
        }
        delta_st_close(f);
    }
    printf("# random mutations: %d accepted, %d refused\n", ok, refused);
    CHECK(refused > 0, "no mutation was refused");
    free(p);
    free(b);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/delta_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_round_trip);
    TEST_RUN(test_empty_file);
    TEST_RUN(test_overwrite);
    TEST_RUN(test_reference_bytes);
    TEST_RUN(test_unpadded_foreign_file);
    TEST_RUN(test_data_offset_order);
    TEST_RUN(test_short_file);
    TEST_RUN(test_bad_header_length);
    TEST_RUN(test_bad_json);
    TEST_RUN(test_entry_not_object);
    TEST_RUN(test_missing_fields);
    TEST_RUN(test_wrong_types);
    TEST_RUN(test_unknown_dtype);
    TEST_RUN(test_bad_dims);
    TEST_RUN(test_bad_offsets);
    TEST_RUN(test_overlap);
    TEST_RUN(test_holes);
    TEST_RUN(test_duplicate_names);
    TEST_RUN(test_bad_metadata);
    TEST_RUN(test_open_errors);
    TEST_RUN(test_write_missing_dir);
    TEST_RUN(test_write_failure_keeps_previous);
    TEST_RUN(test_write_only_regular_files);
    TEST_RUN(test_concurrent_saves);
    TEST_RUN(test_write_rejects_bad_entries);
    TEST_RUN(test_truncated_sweep);
    TEST_RUN(test_random_mutations);
    rmdir(tmpdir);
    TEST_MAIN_END();
}
