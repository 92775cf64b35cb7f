/* Files the library and the tool write: what a path that is not a regular
 * file is, in words, opening a path for writing only when it is a regular
 * file (or nothing yet), and replacing a file atomically (a unique
 * temporary beside it, fsync, rename, fsync of the folder: the safetensors
 * writer and device files). Internal: src/ and tools/ include it. */
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

/* ---- atomic replacement ---------------------------------------------------
 * The file an atomic write replaces: path itself, or the regular file a
 * link at path leads to (so the link survives the rename). NULL, with a
 * message in err, when what is at path is not a regular file. *mode gets
 * the existing file's permission bits, or -1 when there is none. The
 * caller frees the result. */
char *delta_file_replace_target(const char *path, int *mode, char *err,
                                size_t err_len);
/* The permission bits a new file gets from open(..., 0666) (mkstemps makes
 * 0600). */
mode_t delta_file_new_mode(void);
/* Creates the unique temporary for path (PATH.delta-XXXXXX.tmp) in
 * tmp[0..cap): its open descriptor (close-on-exec), or -1 with errno set. */
int delta_file_create_temp(const char *path, char *tmp, size_t cap);
/* fsyncs the folder that holds path, so a rename in it survives a power
 * cut; a file system that cannot sync a folder (EINVAL) counts as done.
 * false with errno set otherwise. */
bool delta_file_sync_dir(const char *path);
/* Writes data[0..n) to path atomically with the calls above: a reader sees
 * the old file or the whole new one, never a part. Only a regular file is
 * replaced (a link to one: its target); the file keeps its mode, a new one
 * gets the umask's. 0 on success; else -1 with a message in err naming
 * path and what failed, and path untouched (but when only the folder sync
 * failed: the file is written then). */
int delta_file_write_atomic(const char *path, const void *data, size_t n,
                            char *err, size_t err_len);
/* The same for contents written in pieces: fill(fd, ud) writes the whole
 * file to the temporary's descriptor fd (with delta_file_write_all) and
 * returns false with errno set when a write fails. Returns 0, or -1 with
 * the message in err; *refused (when non-NULL) is set to whether what is
 * at path was not a regular file (nothing was written then). */
int delta_file_write_atomic_fn(const char *path, bool (*fill)(int fd, void *ud),
                               void *ud, bool *refused, char *err,
                               size_t err_len);
/* Writes data[0..n) to fd, going on after short writes and EINTR; false
 * with errno set when a write fails. */
bool delta_file_write_all(int fd, const void *data, size_t n);

/* Creates folder path and any missing parents (mode 0755); true when it
 * exists as a folder afterwards. */
bool delta_mkdirs(const char *path);

#endif
