/* Helpers for the tests that run the built `delta` as a child process
 * (test_cli, test_resume, test_badinput, test_maxbatch, test_bench): which tool to run (the one
 * beside the test binary, build/X/tests/test_y runs build/X/delta;
 * $DELTA_TOOL overrides), a temporary folder per run, running the tool
 * and capturing its exit status, stdout and stderr, expecting a failure,
 * and comparing saved checkpoints. One test binary includes this once. */
#ifndef DELTA_TESTS_CLI_RUN_H
#define DELTA_TESTS_CLI_RUN_H

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "delta/safetensors.h"
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

static result res __attribute__((unused)); /* large: one shared buffer */

/* Seconds a run of the tool may take before SIGALRM ends it (its status
 * is then 128 + SIGALRM); 0: no limit. For tests whose failure would be a
 * hang (a FIFO opened for writing with no reader). */
static unsigned run_timeout_s __attribute__((unused));

/* Bytes a run of the tool may write to any one file (RLIMIT_FSIZE, with
 * SIGXFSZ ignored so a write fails with EFBIG instead); 0: no limit. To
 * make writing an output fail without root or a full disk. */
static long run_fsize_limit __attribute__((unused));

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

/* Writes text to path; true when written. */
static inline bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Whether path holds exactly text (up to 255 bytes). */
static inline bool file_holds(const char *path, const char *text) {
    static char buf[256];
    slurp(path, buf, sizeof buf);
    return !strcmp(buf, text);
}

/* argv of `tool [cmd] args...` (args NULL-terminated) into argv. */
/* A launcher the tool runs under (e.g. mpirun and its options, NULL-
 * terminated; looked up on PATH); NULL: the tool alone. */
static const char *const *run_launcher __attribute__((unused));
#define MAX_LAUNCHER 40

static inline void tool_argv_cmd(const char **argv, const char *cmd,
                                 const char *const *args) {
    int n = 0;
    for (int i = 0; run_launcher && run_launcher[i] && i < MAX_LAUNCHER; i++)
        argv[n++] = run_launcher[i];
    argv[n++] = tool;
    if (cmd) argv[n++] = cmd;
    for (int i = 0; args[i] && n < MAX_LAUNCHER + MAX_ARGS + 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

/* argv of `tool [train] args...`. */
static inline void tool_argv(const char **argv, bool train,
                             const char *const *args) {
    tool_argv_cmd(argv, train ? "train" : NULL, args);
}

/* Runs `tool cmd args...` (args NULL-terminated; cmd NULL: `tool
 * args...`). */
static inline void run_cmd(result *r, const char *cmd,
                           const char *const *args) {
    const char *argv[MAX_LAUNCHER + MAX_ARGS + 3];
    tool_argv_cmd(argv, cmd, args);
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
        if (run_timeout_s) alarm(run_timeout_s); /* kept across execv */
        if (run_fsize_limit) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {(rlim_t)run_fsize_limit,
                                (rlim_t)run_fsize_limit};
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        if (run_launcher) execvp(argv[0], (char *const *)argv);
        else execv(tool, (char *const *)argv);
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

/* Runs `tool train args...` (NULL-terminated); with train false, runs
 * `tool args...`. */
static inline void run_tool(result *r, bool train, const char *const *args) {
    run_cmd(r, train ? "train" : NULL, args);
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

#define TRAIN(...)                                                         \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        run_tool(&res, true, a_);                                          \
    } while (0)

static inline void path_in_tmp(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Runs `train args` expecting exit status want and a stderr containing
 * needle. */
static inline void expect_fail(int want, const char *needle,
                               const char *const *args) {
    run_tool(&res, true, args);
    char cmd[512] = "";
    for (int i = 0; args[i]; i++) {
        strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
        strncat(cmd, args[i], sizeof cmd - strlen(cmd) - 1);
    }
    CHECK(res.status == want, "delta train%s: status %d, expected %d; "
          "stderr: %.400s", cmd, res.status, want, res.err);
    CHECK(strstr(res.err, needle) != NULL, "delta train%s: stderr lacks "
          "'%s': %.400s", cmd, needle, res.err);
}

#define FAILS(want, needle, ...)                                           \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        expect_fail(want, needle, a_);                                     \
    } while (0)

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

/* Debian's /usr/bin/python3 has PyTorch (package python3-torch). */
static inline bool have_pytorch(void) {
    return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Runs scripts/make_checkpoint_fixture.py --check on files (paths
 * separated by spaces): PyTorch modules load each strictly. Its output
 * goes into out; returns its exit status. */
static inline int pytorch_check(const char *files, char *out, size_t cap) {
    char log[128], cmd[1024];
    snprintf(log, sizeof log, "%s/pytorch_check.log", tmpdir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 "
             "scripts/make_checkpoint_fixture.py --check %s >%s 2>&1", files,
             log);
    int rc = system(cmd);
    slurp(log, out, cap);
    return rc;
}

/* Tensors of a that are not num_batches_tracked (or skip) must be in b
 * with the same dtype, shape and bytes; and the counts must agree. */
static inline void same_tensors(const char *pa, const char *pb,
                                const char *skip) {
    delta_st_file *a = delta_st_open(pa, NULL, NULL, 0);
    delta_st_file *b = delta_st_open(pb, NULL, NULL, 0);
    CHECK(a && b, "cannot open %s or %s", pa, pb);
    if (!a || !b) goto done;
    int na = 0, nb = 0;
    for (int i = 0; i < delta_st_count(a); i++) {
        const delta_st_tensor *t = delta_st_at(a, i);
        if (skip && !strcmp(t->name, skip)) continue;
        na++;
        const delta_st_tensor *u = delta_st_find(b, t->name);
        CHECK(u != NULL, "%s is not in %s", t->name, pb);
        if (!u) continue;
        bool same = !strcmp(t->st_dtype, u->st_dtype) && t->ndim == u->ndim &&
                    t->nbytes == u->nbytes;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == u->shape[d];
        CHECK(same, "%s: dtype or shape differs between %s and %s", t->name,
              pa, pb);
        if (same && !strstr(t->name, "num_batches_tracked"))
            CHECK(!memcmp(t->data, u->data, t->nbytes),
                  "%s: values differ between %s and %s", t->name, pa, pb);
    }
    for (int i = 0; i < delta_st_count(b); i++)
        nb += !(skip && !strcmp(delta_st_at(b, i)->name, skip));
    CHECK(na == nb, "%s has %d tensors, %s has %d", pa, na, pb, nb);
done:
    delta_st_close(a);
    delta_st_close(b);
}

/* An idx file: big-endian header words, then n data bytes. */
static inline void write_idx(const char *path, const uint32_t *hdr, int nh,
                             const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    for (int i = 0; i < nh; i++) {
        uint8_t be[4] = {(uint8_t)(hdr[i] >> 24), (uint8_t)(hdr[i] >> 16),
                         (uint8_t)(hdr[i] >> 8), (uint8_t)hdr[i]};
        fwrite(be, 1, 4, f);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* dir (made in the temporary folder under name) holds a Fashion-MNIST-like
 * training split of 10 8x8 images, labels 0..9: in batches of 4 each
 * epoch ends with a batch of 2. */
static inline void make_tiny_idx(char *dir, size_t n, const char *name) {
    char path[256];
    path_in_tmp(dir, n, name);
    mkdir(dir, 0755);
    uint8_t pixels[10 * 8 * 8], labels[10];
    for (int i = 0; i < 10 * 64; i++)
        pixels[i] = (uint8_t)((i * 37 + (i / 64) * 11) & 0xff);
    for (int i = 0; i < 10; i++) labels[i] = (uint8_t)(i % 10);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    write_idx(path, (const uint32_t[]){0x803, 10, 8, 8}, 4, pixels,
              sizeof pixels);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    write_idx(path, (const uint32_t[]){0x801, 10}, 2, labels, sizeof labels);
}

/* The metadata of a delta training checkpoint (every key delta writes)
 * as key, value pairs into kv (room for 64 strings); returns the pairs. */
static inline int st_meta_pairs(const delta_st_file *f, const char **kv) {
    static const char *const keys[] = {
        "format", "model", "delta_version", "step", "image_size",
        "channels", "classes", "width", "mlp_hidden", "layers", "hidden",
        "heads", "seq_len", "vocab", "positions", "checkpoint",
        "session_step", "data_epoch", "data_index", "batch", "dropout",
        "optimizer", "lr", "momentum", "weight_decay", "seed", "shuffle",
        "drop_last", "seq_len_range", "data"};
    int n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        kv[2 * n] = keys[i];
        kv[2 * n + 1] = delta_st_metadata(f, keys[i]);
        n += kv[2 * n + 1] != NULL;
    }
    return n;
}

/* build/X/tests/test_y tests build/X/delta: builds in separate folders
 * (BUILD=..., sanitizers) each test their own tool. */
static inline void tool_beside(const char *self) {
    static char path[4096];
    const char *t = strstr(self, "/tests/");
    if (!t || (size_t)(t - self) + sizeof "/delta" > sizeof path) return;
    snprintf(path, sizeof path, "%.*s/delta", (int)(t - self), self);
    tool = path;
}

/* Picks the tool and makes this run's temporary folder (name: its
 * prefix); false (after printing why and a results line) when either
 * fails. */
static inline bool cli_setup(int argc, char **argv, const char *name) {
    const char *t = getenv("DELTA_TOOL");
    if (t && *t) tool = t;
    else if (argc > 0) tool_beside(argv[0]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/%s_XXXXXX", name);
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

/* Removes the temporary folder. */
static inline void cli_cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

#endif
