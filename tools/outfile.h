/* The files the tool writes (--save, --json, --trace, --plot, bench's
 * --out): every one may only replace a regular file or create a new one,
 * never a device, FIFO, socket or folder, and that is checked before any
 * work. A run that saves holds a lock on its --save path, so two runs
 * cannot save to one file, and it removes the temporaries killed saves of
 * that path left (delta_st_write's PATH.delta-XXXXXX.tmp; a user's
 * PATH.tmp is never touched). */
#ifndef DELTA_TOOLS_OUTFILE_H
#define DELTA_TOOLS_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "delta/common.h"

/* DELTA_OK when path may be written: nothing there (yet) or a regular file
 * (a link to one counts). Otherwise DELTA_ERR_INVALID_ARG and "OPT PATH
 * is a FIFO, ..." in err (opt: the option that named it, e.g. "--json"). */
delta_status outfile_check(const char *opt, const char *path, char *err,
                           size_t err_len);

/* DELTA_OK when path is a folder or nothing (yet): a folder the tool
 * writes into (bench's --out). DELTA_ERR_INVALID_ARG and a message
 * otherwise. */
delta_status outfile_check_dir(const char *opt, const char *path, char *err,
                               size_t err_len);

/* outfile_check, then that a file can be created in path's folder (a
 * unique temporary is created and removed there: a missing folder, a
 * path under a file or a read-only folder are found before any work,
 * also for root). DELTA_ERR_IO and a message when it cannot. */
delta_status outfile_probe(const char *opt, const char *path, char *err,
                           size_t err_len);

/* fopen(path, mode) ("w" or "a") when outfile_check allows it; NULL with
 * a message in err otherwise. The check and the open are one: a FIFO is
 * never opened (O_NONBLOCK until it is known to be a regular file). */
FILE *outfile_open(const char *opt, const char *path, const char *mode,
                   char *err, size_t err_len);

/* Two of a run's paths name one file: compared by device and inode when
 * both exist, else as absolute paths with their folders' links resolved
 * ("x", "./x" and "$PWD/x" are one file before it is made). */
bool outfile_same(const char *a, const char *b);

/* A path a run writes (output) or reads, named by its option. */
typedef struct outfile_path {
    const char *opt;    /* "--save" */
    const char *path;   /* NULL: not given */
    bool output;
} outfile_path;

/* DELTA_OK when no output of paths[] names the same file as another of
 * them (an output or an input); else DELTA_ERR_INVALID_ARG and a message
 * naming both options. Inputs among themselves may share a file. */
delta_status outfile_distinct(const outfile_path *paths, int n, char *err,
                              size_t err_len);

/* A lock on path for this process's life (or until outfile_unlock): a
 * lock file PATH.lock beside it, flock'ed and holding the pid. -1 and a
 * message ("another delta run (pid N) is saving to PATH") when another
 * process holds it; else a descriptor for outfile_unlock. */
int outfile_lock(const char *path, char *err, size_t err_len);
void outfile_unlock(const char *path, int fd);

/* Removes the temporaries (PATH.delta-XXXXXX.tmp, regular files) that
 * saves of path killed midway left; call it holding path's lock. Returns
 * how many were removed. */
int outfile_remove_stale_temps(const char *path);

#endif
