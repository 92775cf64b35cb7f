/* Files the library and the tool write (files.h). */
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
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

mode_t delta_new_file_mode(void) {
    mode_t u = umask(022); /* read by setting it back at once */
    umask(u);
    return 0666 & ~u;
}

bool delta_mkdirs(const char *path) {
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        return false;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)mkdir(buf, 0755); /* an existing part is fine; checked below */
        *p = '/';
    }
    (void)mkdir(buf, 0755);
    struct stat sb;
    return stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool delta_write_atomic(const char *path, const void *data, size_t len,
                        char *err, size_t err_len) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "%s is %s, not a regular file: left alone",
                 path, delta_file_kind(sb.st_mode));
        return false;
    }
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.delta-XXXXXX.tmp", path) >=
        sizeof tmp) {
        snprintf(err, err_len, "%s: the path is too long", path);
        return false;
    }
    int fd = mkstemps(tmp, 4);
    if (fd < 0) {
        snprintf(err, err_len, "cannot create a file beside %s: %s", path,
                 strerror(errno));
        return false;
    }
    const char *stage = NULL;
    const char *p = data;
    size_t left = len;
    if (fchmod(fd, delta_new_file_mode()) != 0) stage = "set the mode of";
    while (!stage && left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) stage = "write";
        else p += w, left -= (size_t)w;
    }
    if (!stage && fsync(fd) != 0) stage = "fsync";
    int e = errno;
    if (close(fd) != 0 && !stage) stage = "close", e = errno;
    if (!stage && rename(tmp, path) != 0) stage = "rename", e = errno;
    if (stage) {
        unlink(tmp);
        snprintf(err, err_len, "cannot %s %s: %s", stage, path, strerror(e));
        return false;
    }
    return true;
}
