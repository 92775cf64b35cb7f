/* Files the library and the tool write: what a path that is not a regular
 * file is, in words, and opening a path for writing only when it is a
 * regular file (or nothing yet). Internal: src/ and tools/ include it. */
#ifndef DELTA_CORE_FILES_H
#define DELTA_CORE_FILES_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

/* "a folder", "a character device", ... for what is not a regular file. */
const char *delta_file_kind(mode_t m);

/* Opens path for writing (appending when append, else truncated), creating
 * it when absent, only if it is a regular file: O_NONBLOCK, so a FIFO put
 * there fails to open or is refused instead of blocking, and nothing else
 * (a device, a socket) is truncated or written. NULL with errno set when
 * it cannot be opened; NULL with *kind set to what is there (and errno 0)
 * when that is not a regular file. */
FILE *delta_fopen_regular(const char *path, bool append, mode_t *kind);

/* The permission bits a new file gets from open(..., 0666) under the
 * current umask (mkstemp makes 0600; a file replaced atomically should
 * look like one created plainly). */
mode_t delta_new_file_mode(void);

/* Creates folder path and any missing parents (mode 0755); true when it
 * exists as a folder afterwards. */
bool delta_mkdirs(const char *path);

/* Replaces path with len bytes of data atomically: written to a unique
 * temporary beside it (path.delta-XXXXXX.tmp), fsynced, renamed over it.
 * A reader sees the old file or the new one, never a part. Refuses (false,
 * err says what is there) when path exists and is not a regular file;
 * false with err on any failure, the temporary removed and path untouched.
 * For small files written whole (caches); checkpoints have their own
 * writer (src/io/safetensors.c) that streams tensors. */
bool delta_write_atomic(const char *path, const void *data, size_t len,
                        char *err, size_t err_len);

#endif
