/* The tool's output files (see outfile.h). */
#include "outfile.h"
#include "core/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


/* err for a non-regular file at path. */
static void refuse(const char *opt, const char *path, mode_t m, char *err,
                   size_t err_len) {
    if (S_ISDIR(m))
        snprintf(err, err_len, "%s %s is a folder; give a file name (e.g. "
                 "%s/out)", opt, path, path);
    else
        snprintf(err, err_len, "%s %s is %s, not a regular file: delta "
                 "writes only regular files (a new one, or one it replaces)",
                 opt, path, delta_file_kind(m));
}

delta_status outfile_check(const char *opt, const char *path, char *err,
                           size_t err_len) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return DELTA_OK;
    refuse(opt, path, sb.st_mode, err, err_len);
    return DELTA_ERR_INVALID_ARG;
}

delta_status outfile_check_dir(const char *opt, const char *path, char *err,
                               size_t err_len) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return DELTA_OK;
    snprintf(err, err_len, "%s %s is %s, not a folder: give a folder (it "
             "is created when missing)", opt, path,
             S_ISREG(sb.st_mode) ? "a file" : delta_file_kind(sb.st_mode));
    return DELTA_ERR_INVALID_ARG;
}

delta_status outfile_probe(const char *opt, const char *path, char *err,
                           size_t err_len) {
    delta_status st = outfile_check(opt, path, err, err_len);
    if (st != DELTA_OK) return st;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.delta-XXXXXX.tmp", path) >=
        sizeof tmp) {
        snprintf(err, err_len, "%s: the path is too long", opt);
        return DELTA_ERR_INVALID_ARG;
    }
    int fd = mkstemps(tmp, 4);
    if (fd < 0) {
        snprintf(err, err_len, "%s %s: cannot create files there: %s", opt,
                 path, strerror(errno));
        return DELTA_ERR_IO;
    }
    close(fd);
    unlink(tmp);
    return DELTA_OK;
}

FILE *outfile_open(const char *opt, const char *path, const char *mode,
                   char *err, size_t err_len) {
    bool append = mode[0] == 'a';
    if (outfile_check(opt, path, err, err_len) != DELTA_OK) return NULL;
    /* a FIFO put there since the check fails to open (no reader) or is
     * refused, instead of blocking */
    mode_t kind = 0;
    FILE *f = delta_fopen_regular(path, append, &kind);
    if (!f && kind)
        refuse(opt, path, kind, err, err_len);
    else if (!f)
        snprintf(err, err_len, "%s: cannot %s %s: %s", opt,
                 append ? "append to" : "create", path, strerror(errno));
    return f;
}

/* path made absolute and free of links into buf: realpath of the path
 * when it exists, else of its folder with the last name appended, else
 * the text itself ("notes.txt", "./notes.txt" and "/cwd/notes.txt" all
 * give "/cwd/notes.txt" before the file is made). */
static void canonical(const char *path, char *buf, size_t n) {
    char tmp[PATH_MAX];
    if (realpath(path, tmp)) {
        snprintf(buf, n, "%s", tmp);
        return;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (*base && strcmp(base, ".") && strcmp(base, "..") &&
        realpath(dir, tmp))
        snprintf(buf, n, "%s%s%s", tmp, strcmp(tmp, "/") ? "/" : "", base);
    else
        snprintf(buf, n, "%s", path);
}

bool outfile_same(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    static char ca[PATH_MAX + 256], cb[PATH_MAX + 256];
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

delta_status outfile_distinct(const outfile_path *paths, int n, char *err,
                              size_t err_len) {
    for (int i = 0; i < n; i++) {
        if (!paths[i].path || !paths[i].output) continue;
        for (int j = 0; j < n; j++) {
            if (j == i || !paths[j].path) continue;
            /* each pair of outputs once; an output and an input both ways
             * round are one pair too */
            if (paths[j].output && j < i) continue;
            if (!outfile_same(paths[i].path, paths[j].path)) continue;
            if (paths[j].output)
                snprintf(err, err_len, "%s and %s name the same file (%s): "
                         "one would overwrite the other; give each its own "
                         "path", paths[i].opt, paths[j].opt, paths[i].path);
            else
                snprintf(err, err_len, "%s %s is also %s's file: writing it "
                         "would destroy what the run reads; give the output "
                         "another path", paths[i].opt, paths[i].path,
                         paths[j].opt);
            return DELTA_ERR_INVALID_ARG;
        }
    }
    return DELTA_OK;
}

/* PATH.lock into buf. */
static bool lock_path(const char *path, char *buf, size_t n) {
    return (size_t)snprintf(buf, n, "%s.lock", path) < n;
}

int outfile_lock(const char *path, char *err, size_t err_len) {
    char lp[4096];
    if (!lock_path(path, lp, sizeof lp)) {
        snprintf(err, err_len, "--save: the path is too long");
        return -1;
    }
    /* The file may be removed by its holder between our open and flock
     * (outfile_unlock): then the lock we got is on a file no one else
     * finds, so it is taken again on the one at the path now. */
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0) {
            snprintf(err, err_len, "--save %s: cannot create its lock file "
                     "%s: %s", path, lp, strerror(errno));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char pid[32] = "";
            ssize_t k = pread(fd, pid, sizeof pid - 1, 0);
            pid[k > 0 ? k : 0] = '\0';
            pid[strcspn(pid, "\n")] = '\0';
            close(fd);
            if (e == EWOULDBLOCK)
                snprintf(err, err_len, "--save %s: another delta run%s%s%s "
                         "is saving to it (it holds %s); wait for it to end "
                         "or give another path", path, pid[0] ? " (pid " : "",
                         pid, pid[0] ? ")" : "", lp);
            else
                snprintf(err, err_len, "--save %s: cannot lock %s: %s", path,
                         lp, strerror(e));
            return -1;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(lp, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            char pid[32];
            int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k) {
                /* the pid only improves the other run's message */
            }
            return fd;
        }
        close(fd);
    }
    snprintf(err, err_len, "--save %s: cannot lock %s: it keeps changing",
             path, lp);
    return -1;
}

void outfile_unlock(const char *path, int fd) {
    if (fd < 0) return;
    char lp[4096];
    /* removed while still held, so a waiting opener retries (above) */
    if (lock_path(path, lp, sizeof lp)) unlink(lp);
    close(fd);
}

int outfile_remove_stale_temps(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    const char *base = slash ? slash + 1 : path;
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path + 1), path);
    else
        snprintf(dir, sizeof dir, "./");
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t bl = strlen(base);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        /* base + ".delta-" + 6 characters + ".tmp" */
        if (strlen(n) != bl + 17 || strncmp(n, base, bl) != 0 ||
            strncmp(n + bl, ".delta-", 7) != 0 ||
            strcmp(n + bl + 13, ".tmp") != 0)
            continue;
        char p[sizeof dir + sizeof e->d_name]; /* room for both: no cut */
        snprintf(p, sizeof p, "%s%s", dir, n);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(p) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}
