/* libFuzzer harness: the safetensors reader (src/io/safetensors.c).
 * The input is a whole file. Whatever it holds, delta_st_parse must either
 * refuse it with a message or hand out tensors whose every byte lies in
 * the buffer; the harness reads each tensor's bytes and looks up each name
 * and a metadata key, so ASan sees any view that reaches past the file. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "delta/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    delta_status st = DELTA_OK;
    delta_st_file *f = delta_st_parse(data, size, &st, err, sizeof err);
    if (!f) {
        /* A refusal must say why. */
        if (st == DELTA_OK || !err[0]) __builtin_trap();
        return 0;
    }
    unsigned sum = 0;
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        const uint8_t *p = t->data;
        for (size_t b = 0; b < t->nbytes; b++) sum += p[b];
        if (delta_st_find(f, t->name) != t) __builtin_trap();
        if (t->elem_size != delta_st_dtype_size(t->st_dtype)) __builtin_trap();
    }
    const char *v = delta_st_metadata(f, "format");
    if (v) sum += (unsigned)strlen(v);
    delta_st_close(f);
    return (int)(sum & 0);
}
