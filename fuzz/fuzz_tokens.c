/* libFuzzer harness: the llm.c token-file reader (src/data/tokens.c). The
 * reader takes a path, so each input becomes a file in a private temporary
 * folder (on /dev/shm when it is there):
 *   byte 0       bit 0: compact form: the next 12 bytes are the header's
 *                magic, version and count (little-endian int32), padded
 *                with zeros to the 1024-byte header, so the fuzzer reaches
 *                the token checks without carrying 1,012 zero bytes; else
 *                the rest is the whole file as is. Bits 1..7 pick the
 *                sequence length T = 1 + (byte >> 1) % 32.
 *   byte 1       the vocab: 0 the default (GPT-2's 50257), else
 *                byte * 256 + 1
 *   then         the file (or, compact, the 12 header bytes and the tokens).
 * A loaded dataset must agree with the header (size, sample count) and give
 * every sample, ids below the vocab, without reading out of bounds; a
 * refused one must say why. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[96];
static char dir[64];

static void remove_dir(void) {
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/delta-fuzz-tokens-%d", base,
                 (int)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
        snprintf(path, sizeof path, "%s/tokens.bin", dir);
        atexit(remove_dir);
    }
    if (size < 2) return 0;
    unsigned flags = data[0];
    int64_t T = 1 + (int64_t)((flags >> 1) % 32);
    int64_t vocab = data[1] ? (int64_t)data[1] * 256 + 1 : 0;
    data += 2, size -= 2;

    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (flags & 1) {
        uint8_t hdr[DELTA_TOKENS_HEADER_BYTES] = {0};
        size_t h = size < 12 ? size : 12;
        memcpy(hdr, data, h);
        data += h, size -= h;
        if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr) abort();
    }
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    char err[512];
    delta_status st = DELTA_OK;
    delta_tokens_opts o = {.seq_len = T, .vocab = vocab};
    delta_dataset *ds = delta_dataset_tokens_new(path, &o, &st, err,
                                                 sizeof err);
    if (!ds) {
        if (st == DELTA_OK || !err[0]) __builtin_trap();
        return 0;
    }
    if (!delta_tokens_file_is(path)) __builtin_trap();
    struct stat sb;
    if (stat(path, &sb) != 0) abort();
    int64_t count = ((int64_t)sb.st_size - DELTA_TOKENS_HEADER_BYTES) / 2;
    delta_data_info in = delta_dataset_info(ds);
    int64_t v = vocab ? vocab : DELTA_TOKENS_GPT2_VOCAB;
    if (in.len != (count - 1) / T || in.len < 1 || in.seq_len != T ||
        in.vocab != v || in.kind != DELTA_DATA_CAUSAL_LM)
        __builtin_trap();
    int32_t x[32], y[32];
    for (int64_t i = 0; i < in.len; i++) {
        delta_dataset_get(ds, i, 0, 0, x, y, NULL);
        for (int64_t t = 0; t < T; t++) {
            if (x[t] < 0 || x[t] >= v || y[t] < 0 || y[t] >= v)
                __builtin_trap();
            if (t && x[t] != y[t - 1]) __builtin_trap();
        }
    }
    delta_dataset_free(ds);
    return 0;
}
