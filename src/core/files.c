/* Files the library and the tool write (files.h). */
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- atomic replacement ---------------------------------------------------- */

char *delta_file_replace_target(const char *path, int *mode, char *err,
                                size_t err_len) {
    struct stat sb;
    *mode = -1;
    if (stat(path, &sb) != 0) return strdup(path); /* nothing there (yet) */
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, err_len, "'%s' is %s, not a regular file: a save "
                 "replaces only a regular file or creates a new one; give "
                 "another path", path, delta_file_kind(sb.st_mode));
        return NULL;
    }
    *mode = (int)(sb.st_mode & 07777);
    struct stat lb;
    if (lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode)) {
        char *real = realpath(path, NULL);
        if (real) return real;
    }
    return strdup(path);
}

mode_t delta_file_new_mode(void) {
    mode_t u = umask(022); /* read by setting it back at once */
    umask(u);
    return 0666 & ~u;
}

int delta_file_create_temp(const char *path, char *tmp, size_t cap) {
    if ((size_t)snprintf(tmp, cap, "%s.delta-XXXXXX.tmp", path) >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemps(tmp, 4);
    if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

bool delta_file_sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    if (!dir) return false;
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0 || errno == EINVAL;
    int e = errno;
    close(fd);
    errno = e;
    return ok;
}

bool delta_file_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return false;
        if (w == 0) {
            errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

int delta_file_write_atomic_fn(const char *path, bool (*fill)(int fd, void *ud),
                               void *ud, bool *refused, char *err,
                               size_t err_len) {
    int mode = -1;
    char *target = delta_file_replace_target(path, &mode, err, err_len);
    if (refused) *refused = !target;
    if (!target) return -1;
    size_t cap = strlen(target) + 32;
    char *tmp = malloc(cap);
    const char *what = NULL;
    int e = 0, fd = -1;
    if (!tmp) {
        what = "allocate a name for";
        e = ENOMEM;
    } else if ((fd = delta_file_create_temp(target, tmp, cap)) < 0) {
        what = "create a temporary for";
        e = errno;
    } else if (fchmod(fd, mode >= 0 ? (mode_t)mode : delta_file_new_mode())) {
        what = "set the mode of";
    } else if (!fill(fd, ud)) {
        what = "write";
    } else if (fsync(fd) != 0) {
        what = "fsync";
    }
    if (what && !e) e = errno;
    if (fd >= 0 && close(fd) != 0 && !what) {
        what = "close";
        e = errno;
    }
    if (!what && rename(tmp, target) != 0) {
        what = "rename a temporary over";
        e = errno;
    }
    if (what && fd >= 0) unlink(tmp);
    if (what)
        snprintf(err, err_len, "cannot %s '%s': %s (the previous file, if "
                 "any, is unchanged)", what, path, strerror(e));
    else if (!delta_file_sync_dir(target))
        snprintf(err, err_len, "wrote '%s' but cannot sync its folder: %s "
                 "(the file may not survive a power cut)", path,
                 strerror(errno));
    else if (err_len)
        err[0] = '\0';
    bool ok = !what && (!err_len || !err[0]);
    free(tmp);
    free(target);
    return ok ? 0 : -1;
}

/* delta_file_write_atomic's one buffer. */
typedef struct whole_buf {
    const void *data;
    size_t n;
} whole_buf;

static bool fill_whole(int fd, void *ud) {
    const whole_buf *b = ud;
    return delta_file_write_all(fd, b->data, b->n);
}

int delta_file_write_atomic(const char *path, const void *data, size_t n,
                            char *err, size_t err_len) {
    whole_buf b = {data, n};
    return delta_file_write_atomic_fn(path, fill_whole, &b, NULL, err,
                                      err_len);
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
