/* libFuzzer harness: the idx (Fashion-MNIST) reader (src/data/idx.c),
 * plain and gzip'd. The reader takes a folder, so each input becomes two
 * files in a private temporary folder (on /dev/shm when it is there):
 *   byte 0       flags: bit 0 gzips the images file, bit 1 the labels
 *                file (through zlib, so valid gzip framing around fuzzed
 *                idx bytes); bit 2 names the files .gz even when they are
 *                plain (the reader must take plain bytes under .gz);
 *                bit 3 picks the test split (t10k-*) instead of train-*
 *   bytes 1..2   little-endian length of the images file's bytes
 *   then         the images bytes, then the labels bytes.
 * Raw (unflagged) bytes that start with gzip's magic exercise corrupt and
 * truncated gzip streams. A loaded dataset must give every sample without
 * reading out of bounds; a refused one must say why. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "delta/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

/* The folder and its two files go when the fuzzer exits. */
static void remove_dir(void) {
    static const char *const names[] = {
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char path[160];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s.gz", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void write_file(const char *name, const uint8_t *p, size_t n, int gz,
                       int gz_name) {
    char path[160];
    char other[160];
    snprintf(path, sizeof path, "%s/%s%s", dir, name,
             gz || gz_name ? ".gz" : "");
    /* Only one of the two names may exist, or the reader picks .gz. */
    snprintf(other, sizeof other, "%s/%s%s", dir, name,
             gz || gz_name ? "" : ".gz");
    unlink(other);
    if (gz) {
        gzFile g = gzopen(path, "wb1");
        if (!g) abort();
        if (n && gzwrite(g, p, (unsigned)n) != (int)n) abort();
        gzclose(g);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) abort();
        if (n && fwrite(p, 1, n, f) != n) abort();
        fclose(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        /* tmpfs when there is one: a file pair is written per input */
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/delta-fuzz-idx-%d", base, (int)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
        atexit(remove_dir);
    }
    if (size < 3) return 0;
    unsigned flags = data[0];
    size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3, size -= 3;
    if (ilen > size) ilen = size;
    const char *pre = flags & 8 ? "t10k" : "train";
    char iname[64], lname[64];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", pre);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", pre);
    write_file(iname, data, ilen, flags & 1, flags & 4);
    write_file(lname, data + ilen, size - ilen, flags & 2, flags & 4);

    char err[512];
    delta_status st = DELTA_OK;
    delta_dataset *ds = delta_dataset_fashion_mnist_new(
        dir, flags & 8 ? DELTA_SPLIT_TEST : DELTA_SPLIT_TRAIN, &st, err,
        sizeof err);
    if (!ds) {
        if (st == DELTA_OK || !err[0]) __builtin_trap();
        return 0;
    }
    delta_data_info in = delta_dataset_info(ds);
    if (in.len < 1 || in.input_numel != in.height * in.width)
        __builtin_trap();
    float *x = malloc((size_t)in.input_numel * sizeof *x);
    if (!x) abort();
    int32_t y;
    for (int64_t i = 0; i < in.len; i++) {
        delta_dataset_get(ds, i, 0, 0, x, &y, NULL);
        if (y < 0 || y >= in.classes) __builtin_trap();
    }
    free(x);
    delta_dataset_free(ds);
    return 0;
}
