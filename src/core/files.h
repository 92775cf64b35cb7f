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

#endif
