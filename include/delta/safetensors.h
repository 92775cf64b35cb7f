/* delta — safetensors files, the PyTorch ecosystem's tensor format:
 *   8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *    "__metadata__": {"key": "value", ...}}, then the raw little-endian data.
 * Offsets are relative to the start of the data section.
 *
 * Reading validates everything before any tensor is handed out: header length
 * bound, JSON syntax, known dtype, shape/size agreement, offsets inside the
 * data section, no overlaps and no holes. A malformed file gives
 * DELTA_ERR_FORMAT and a message naming the tensor and the problem. */
#ifndef DELTA_SAFETENSORS_H
#define DELTA_SAFETENSORS_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DELTA_ST_MAX_DIMS 8
/* Headers larger than this are refused (the reference implementation's own
 * limit is 100 MB); it guards against allocating from a hostile length. */
#define DELTA_ST_MAX_HEADER (100u * 1024u * 1024u)

/* One tensor of a file. dtype strings follow safetensors ("F32", "I32",
 * "F16", "BF16", "I64", "F64", "U8", "I8", "BOOL", ...); st_dtype keeps the
 * string, dtype maps it to delta's enum when delta computes in it
 * (DELTA_DTYPE_COUNT otherwise). */
typedef struct delta_st_tensor {
    const char *name;
    const char *st_dtype;
    delta_dtype dtype;
    size_t elem_size;
    int ndim;
    int64_t shape[DELTA_ST_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data;  /* points into the file's buffer; little-endian */
} delta_st_tensor;

typedef struct delta_st_file delta_st_file;

/* Maps (or, where mapping fails, reads) a whole file and validates it;
 * tensors' data point into it until delta_st_close. On failure returns
 * NULL, sets *status (if non-NULL) and writes a message into err (if
 * non-NULL, err_len bytes). */
DELTA_API delta_st_file *delta_st_open(const char *path, delta_status *status,
                             char *err, size_t err_len);
/* The same from a buffer in memory (copied). */
DELTA_API delta_st_file *delta_st_parse(const void *buf, size_t len, delta_status *status,
                              char *err, size_t err_len);
DELTA_API void delta_st_close(delta_st_file *f);

DELTA_API int delta_st_count(const delta_st_file *f);
/* Tensors in data-offset order. */
DELTA_API const delta_st_tensor *delta_st_at(const delta_st_file *f, int i);
DELTA_API const delta_st_tensor *delta_st_find(const delta_st_file *f, const char *name);
/* Value of a "__metadata__" entry, or NULL. */
DELTA_API const char *delta_st_metadata(const delta_st_file *f, const char *key);

/* Writing: describe tensors, then write them in one call. Names must be
 * unique and non-empty. The file is written to a temporary of a unique
 * name in path's folder (path + ".delta-XXXXXX.tmp"; a file of the user's,
 * path + ".tmp" included, is never touched), flushed, fsync'd and renamed
 * over path, and path's folder is fsync'd, so a crash or a power cut
 * leaves either the previous file or the new one, never a torn file, and
 * two saves to one path at once each leave one whole file. Only a regular
 * file is replaced: anything else at path (a device, FIFO, socket,
 * folder) is refused with DELTA_ERR_INVALID_ARG before anything is
 * written; a symbolic link to a regular file has its target replaced. On
 * failure (DELTA_ERR_IO) the temporary is removed and the previous file is
 * unchanged, except when only the final folder sync failed (the message
 * says so). A process killed mid-save leaves its temporary behind (the
 * delta tool removes those of its --save path when it takes the path's
 * lock). Test hooks: docs/CHECKPOINTS.md. */
typedef struct delta_st_entry {
    const char *name;
    const char *st_dtype;  /* "F32", "I32", ... */
    int ndim;
    int64_t shape[DELTA_ST_MAX_DIMS];
    const void *data;      /* numel * element size bytes */
} delta_st_entry;

DELTA_API delta_status delta_st_write(const char *path, const delta_st_entry *entries,
                            int n, const char *const *meta_kv, int n_meta,
                            char *err, size_t err_len);

/* Element size of a safetensors dtype string, 0 if unknown. */
DELTA_API size_t delta_st_dtype_size(const char *st_dtype);

#ifdef __cplusplus
}
#endif
#endif
