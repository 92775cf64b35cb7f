/* libFuzzer harness: the tokenizer (src/text/tokenizer.c). The first byte
 * picks what the rest is:
 *  - even: a tokenizer.json. delta_tokenizer_parse must refuse it with a
 *    status and a message or give a tokenizer that encodes and decodes
 *    the input's text without a fault;
 *  - odd: text for GPT-2's tokenizer (tests/fixtures/gpt2_tokenizer.json,
 *    read from the repository root, where make fuzz-run runs). UTF-8 text
 *    must decode back to itself exactly; other bytes must be refused
 *    with DELTA_ERR_INVALID_ARG. The text's bytes read as ids must decode
 *    or be refused, never read outside the vocabulary. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static delta_tokenizer *gpt2;

static void round_trip(delta_tokenizer *t, const char *text, size_t len,
                       bool must_match) {
    size_t n = 0;
    delta_status st = delta_tokenizer_encode(t, text, len, true, NULL, 0, &n);
    if (st != DELTA_OK) {
        if (!delta_tokenizer_error(t)[0]) __builtin_trap();
        return;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *back = malloc(len + 1);
    size_t m = 0, blen = 0;
    if (delta_tokenizer_encode(t, text, len, true, ids, n, &m) != DELTA_OK ||
        m != n)
        __builtin_trap();
    st = delta_tokenizer_decode(t, ids, n, back, len + 1, &blen);
    if (must_match && (st != DELTA_OK || blen != len || memcmp(back, text, len)))
        __builtin_trap();
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *rest = (const char *)data + 1;
    size_t len = size - 1;
    char err[512];
    delta_status st = DELTA_OK;
    if (!(data[0] & 1)) {
        delta_tokenizer *t = delta_tokenizer_parse(rest, len, &st, err,
                                                   sizeof err);
        if (!t) {
            if (st == DELTA_OK || !err[0]) __builtin_trap(); /* say why */
            return 0;
        }
        round_trip(t, rest, len, false);
        delta_tokenizer_free(t);
        return 0;
    }
    if (!gpt2) {
        gpt2 = delta_tokenizer_load("tests/fixtures/gpt2_tokenizer.json", &st,
                                    err, sizeof err);
        if (!gpt2) __builtin_trap(); /* run from the repository root */
    }
    round_trip(gpt2, rest, len, true);
    /* the bytes as ids, two at a time */
    int32_t ids[256];
    size_t n = 0;
    for (size_t i = 0; i + 1 < len && n < 256; i += 2)
        ids[n++] = (int32_t)((uint8_t)rest[i] << 8 | (uint8_t)rest[i + 1]) - 1024;
    char out[64];
    size_t olen;
    st = delta_tokenizer_decode(gpt2, ids, n, out, sizeof out, &olen);
    if (st != DELTA_OK && st != DELTA_ERR_INVALID_ARG) __builtin_trap();
    return 0;
}
