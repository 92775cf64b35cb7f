/* The cuda backend's entry points in a build without CUDA (no nvcc found,
 * or make CUDA=0): the same calls, answering that the backend is not
 * there, so callers (the CLI) can say so clearly. The Makefile compiles
 * either this file or cuda_backend.c and the .cu kernels. */
#include "delta/backend.h"

#include <stdio.h>

#define ABSENT_WHY "built without CUDA (nvcc was not found, or make CUDA=0); " \
                   "rebuild with the CUDA toolkit installed"

bool delta_cuda_built(void) { return false; }

bool delta_cuda_nccl_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "%s", ABSENT_WHY);
    return false;
}

const char *delta_cuda_conv_path(const delta_backend *b) {
    (void)b;
    return NULL;
}

int delta_cuda_device_count(char *err, size_t err_len) {
    if (err && err_len) snprintf(err, err_len, "%s", ABSENT_WHY);
    return 0;
}

delta_backend *delta_backend_cuda_new(const delta_cuda_backend_opts *opts,
                                      char *err, size_t err_len) {
    (void)opts;
    if (err && err_len) snprintf(err, err_len, "cuda backend: %s", ABSENT_WHY);
    return NULL;
}
