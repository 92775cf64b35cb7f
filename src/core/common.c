/* Implementations of the helpers declared in delta/common.h: status and
 * dtype names, the always-on assert, aligned host allocation. */
#include "delta/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *delta_version(void) { return DELTA_VERSION_STRING; }

const char *delta_status_name(delta_status s) {
    switch (s) {
    case DELTA_OK: return "ok";
    case DELTA_ERR_INVALID_ARG: return "invalid argument";
    case DELTA_ERR_SHAPE: return "shape";
    case DELTA_ERR_IO: return "io";
    case DELTA_ERR_FORMAT: return "format";
    case DELTA_ERR_NOMEM: return "out of memory";
    case DELTA_ERR_BUDGET: return "budget";
    case DELTA_ERR_UNSUPPORTED: return "unsupported";
    case DELTA_ERR_STATE: return "state";
    }
    return "unknown";
}

size_t delta_dtype_size(delta_dtype t) {
    switch (t) {
    case DELTA_F32: case DELTA_I32: return 4;
    case DELTA_F16: case DELTA_BF16: return 2;
    default: return 0;
    }
}

const char *delta_dtype_name(delta_dtype t) {
    switch (t) {
    case DELTA_F32: return "F32";
    case DELTA_I32: return "I32";
    case DELTA_F16: return "F16";
    case DELTA_BF16: return "BF16";
    default: return "?";
    }
}

void delta_assert_fail(const char *file, int line, const char *expr,
                       const char *fmt, ...) {
    fprintf(stderr, "delta: assertion failed at %s:%d: %s", file, line, expr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void *delta_alloc_aligned(size_t bytes) {
    /* Round up so aligned_alloc's size rule holds; 0 bytes still gets a
     * unique pointer so callers need no special case. */
    size_t n = (bytes + DELTA_ALIGN - 1) / DELTA_ALIGN * DELTA_ALIGN;
    if (n == 0) n = DELTA_ALIGN;
    if (n < bytes) return NULL; /* overflow */
    return aligned_alloc(DELTA_ALIGN, n);
}

void delta_free_aligned(void *p) { free(p); }

const char *delta_format_bytes(double bytes, char *buf, size_t n) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%.0f B", bytes);
    else snprintf(buf, n, "%.1f %s", bytes, units[u]);
    return buf;
}
