/* delta — common definitions shared by every public header: status codes,
 * data types, the always-on assert and a few size helpers.
 *
 * Two kinds of errors, never mixed (see docs/ARCHITECTURE.md):
 *  - recoverable conditions (bad shape, bad file, out of budget) return a
 *    delta_status and leave a message retrievable from the owning object;
 *  - invariant violations (bugs) hit DELTA_ASSERT, which prints file:line and
 *    the failed expression and aborts. It is never compiled out. */
#ifndef DELTA_COMMON_H
#define DELTA_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API: the declarations of include/delta/ are the one set
 * of symbols libdelta.so exports. The library is built with
 * -fvisibility=hidden, so every other function (the runtime's, the
 * kernels', the policies') stays inside it; tests/test_exports.sh checks
 * the list. */
#if defined(__GNUC__) || defined(__clang__)
#define DELTA_API __attribute__((visibility("default")))
#else
#define DELTA_API
#endif

#define DELTA_VERSION_MAJOR 0
#define DELTA_VERSION_MINOR 1
#define DELTA_VERSION_PATCH 0
#define DELTA_VERSION_STRING "0.1.0"
/* The version of the library linked at run time (DELTA_VERSION_STRING is
 * the headers' at compile time); a program can compare the two, as with
 * zlib's zlibVersion(). */
DELTA_API const char *delta_version(void);

/* Every tensor buffer delta allocates is aligned to at least this many bytes,
 * so kernels take the same code path whatever the buffer's address. */
#define DELTA_ALIGN 64

typedef enum delta_status {
    DELTA_OK = 0,
    DELTA_ERR_INVALID_ARG,  /* a caller passed something malformed */
    DELTA_ERR_SHAPE,        /* tensor shapes do not fit the op */
    DELTA_ERR_IO,           /* a file could not be opened, read or written */
    DELTA_ERR_FORMAT,       /* a file's contents are malformed */
    DELTA_ERR_NOMEM,        /* host memory could not be allocated */
    DELTA_ERR_BUDGET,       /* the device budget cannot hold what is needed */
    DELTA_ERR_UNSUPPORTED,  /* valid request this build cannot serve */
    DELTA_ERR_STATE,        /* call made in the wrong order */
} delta_status;

/* Short name of a status ("ok", "shape", ...); never NULL. */
DELTA_API const char *delta_status_name(delta_status s);

typedef enum delta_dtype {
    DELTA_F32 = 0,
    DELTA_I32,
    DELTA_F16,   /* reserved: not computed */
    DELTA_BF16,  /* bfloat16: stored in 16 bits, computed in fp32 (mixed
                    precision; docs/KERNELS.md) */
    DELTA_DTYPE_COUNT
} delta_dtype;

DELTA_API size_t delta_dtype_size(delta_dtype t);
DELTA_API const char *delta_dtype_name(delta_dtype t);

/* Prints "delta: assertion failed at file:line: expr" (plus an optional
 * printf-style detail) to stderr and aborts. */
DELTA_API void delta_assert_fail(const char *file, int line, const char *expr,
                       const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define DELTA_ASSERT(x)                                                    \
    do {                                                                   \
        if (!(x)) delta_assert_fail(__FILE__, __LINE__, #x, NULL);         \
    } while (0)

#define DELTA_ASSERTF(x, ...)                                              \
    do {                                                                   \
        if (!(x)) delta_assert_fail(__FILE__, __LINE__, #x, __VA_ARGS__);  \
    } while (0)

/* Host allocation aligned to DELTA_ALIGN; returns NULL on failure.
 * Release with delta_free_aligned (free(NULL)-like for NULL). */
DELTA_API void *delta_alloc_aligned(size_t bytes);
DELTA_API void delta_free_aligned(void *p);

/* Formats a byte count as "12.0 MiB" into buf (at least 32 bytes). */
DELTA_API const char *delta_format_bytes(double bytes, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
