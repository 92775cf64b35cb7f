/* Helpers for the tests that run the delta tool as a child process
 * (test_cli, test_maxbatch, test_bench): where the tool is, a temporary
 * directory, running it with its stdout, stderr and exit status captured,
 * and reading the JSON it writes. Static functions: each test binary
 * includes this once.
 *
 * The tool tested is the one of the test's own build (build/X/tests/T runs
 * build/X/delta, so sanitizer builds test their own); $DELTA_TOOL
 * overrides. */
#ifndef DELTA_TEST_TOOL_H
#define DELTA_TEST_TOOL_H

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define OUT_CAP (64 * 1024)
#define MAX_ARGS 48

static char tmpdir[64];
static const char *tool = "build/delta";

typedef struct result {
    int status;            /* exit status, or 128 + signal */
    char out[OUT_CAP];     /* stdout */
    char err[OUT_CAP];     /* stderr */
    double seconds;
} result;

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void slurp(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs `tool cmd args...` (args NULL-terminated; cmd NULL: `tool
 * args...`). */
static inline void run_cmd(result *r, const char *cmd,
                           const char *const *args) {
    const char *argv[MAX_ARGS + 3];
    int n = 0;
    argv[n++] = tool;
    if (cmd) argv[n++] = cmd;
    for (int i = 0; args[i] && n < MAX_ARGS + 1; i++) argv[n++] = args[i];
    argv[n] = NULL;
    char out_path[128], err_path[128];
    snprintf(out_path, sizeof out_path, "%s/stdout", tmpdir);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmpdir);
    double t0 = now();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) < 0) {
        r->status = -1;
    } else if (WIFEXITED(ws)) {
        r->status = WEXITSTATUS(ws);
    } else {
        r->status = 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    }
    r->seconds = now() - t0;
    slurp(out_path, r->out, sizeof r->out);
    slurp(err_path, r->err, sizeof r->err);
}

/* Runs `tool cmd args...` expecting exit status 2 (bad usage or input)
 * and a stderr containing needle. */
static inline void expect_usage_error(result *r, const char *cmd,
                                      const char *needle,
                                      const char *const *args) {
    run_cmd(r, cmd, args);
    CHECK(r->status == 2, "delta %s: status %d, expected 2 (looking for "
          "'%s'); stderr: %.300s", cmd, r->status, needle, r->err);
    CHECK(strstr(r->err, needle) != NULL, "delta %s: stderr lacks '%s': "
          "%.300s", cmd, needle, r->err);
}

#define USAGE_FAILS(r, cmd, needle, ...)                                   \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        expect_usage_error(r, cmd, needle, a_);                            \
    } while (0)

static inline void path_in_tmp(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Reads a JSON Lines file: up to cap objects into objs; returns the count
 * (-1 when a line does not parse). */
static inline int read_json_lines(const char *path, cJSON **objs, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (n == cap) break;
        cJSON *o = cJSON_Parse(line);
        if (!o || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            fclose(f);
            for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
            return -1;
        }
        objs[n++] = o;
    }
    fclose(f);
    return n;
}

static inline double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static inline const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* A whole file parsed as one JSON document, or NULL. */
static inline cJSON *read_json_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) buf = malloc((size_t)n + 1);
    cJSON *doc = NULL;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        doc = cJSON_Parse(buf);
    }
    free(buf);
    fclose(f);
    return doc;
}

/* A PNG file (its magic bytes) of more than 1000 bytes. */
static inline bool is_png(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char magic[8] = {0};
    size_t n = fread(magic, 1, sizeof magic, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    return n == 8 && !memcmp(magic, "\x89PNG\r\n\x1a\n", 8) && size > 1000;
}

/* delta draws its plots with gnuplot when it is installed. */
static inline bool have_gnuplot(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* build/X/tests/test_T tests build/X/delta. */
static inline void tool_beside(const char *self) {
    static char path[4096];
    const char *t = strstr(self, "/tests/");
    if (!t || (size_t)(t - self) + sizeof "/delta" > sizeof path) return;
    snprintf(path, sizeof path, "%.*s/delta", (int)(t - self), self);
    tool = path;
}

/* Finds the tool and makes tmpdir (/tmp/delta_NAME_XXXXXX); false (with
 * the results line a failed binary owes tests/run.sh) when either
 * fails. */
static inline bool tool_begin(int argc, char **argv, const char *name) {
    const char *t = getenv("DELTA_TOOL");
    if (t && *t) tool = t;
    else if (argc > 0) tool_beside(argv[0]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/delta_%s_XXXXXX", name);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        printf("# results: 0 passed, 1 failed, 0 skipped\n");
        return false;
    }
    if (access(tool, X_OK) != 0) {
        fprintf(stderr, "%s is not built: run 'make tool' (make test does) "
                "or set DELTA_TOOL\n", tool);
        printf("# results: 0 passed, 1 failed, 0 skipped\n");
        return false;
    }
    return true;
}

/* Removes tmpdir. */
static inline void tool_end(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

#endif
