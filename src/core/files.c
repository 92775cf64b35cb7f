/* Files the library and the tool write (files.h). */
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

const char *delta_file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a folder"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

FILE *delta_fopen_regular(const char *path, bool append, mode_t *kind) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC |
                            (append ? O_APPEND : 0), 0666);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        if (kind) *kind = sb.st_mode;
        close(fd);
        errno = 0;
        return NULL;
    }
    FILE *f = NULL;
    if ((append || ftruncate(fd, 0) == 0) &&
        fcntl(fd, F_SETFL, append ? O_APPEND : 0) == 0)
        f = fdopen(fd, append ? "a" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}
