/* The files the delta tool writes, through the built delta: every output
 * (--save, --json, --trace, maxbatch's --json and --plot, bench's --out)
 * replaces only a regular file or creates one, and anything else (a FIFO,
 * a link to one, a folder) is refused with exit 2 before any work; saves
 * go through unique temporaries, so a user's FILE.tmp survives and two
 * saves to one path each leave a whole file; a run that saves holds a lock
 * on its path and a second run is refused. No test needs root: a FIFO
 * (mkfifo) stands for /dev/full and the other files only root may open. */
#include <dirent.h>
#include <signal.h>

#include "cli_run.h"
#include "delta/trace.h"

#define GPT "--model", "gpt2-tiny", "--quiet"

/* A FIFO at path; true when made. */
static bool make_fifo(const char *path) {
    unlink(path);
    return mkfifo(path, 0600) == 0;
}

static bool is_fifo(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

/* How many files in tmpdir begin with prefix and end with ".tmp". */
static int count_temps(const char *prefix) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    size_t pl = strlen(prefix);
    while (d && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, prefix, pl) && l > pl + 4 &&
            !strcmp(e->d_name + l - 4, ".tmp"))
            n++;
    }
    if (d) closedir(d);
    return n;
}

/* Defect 1: every output option given a FIFO, or a link to one, is
 * refused with exit 2 before any step; the FIFO stays a FIFO. */
static void test_outputs_refuse_non_regular_files(void) {
    char fifo[128], link[128], ok[128];
    path_in_tmp(fifo, sizeof fifo, "fifo");
    path_in_tmp(link, sizeof link, "link-to-fifo");
    path_in_tmp(ok, sizeof ok, "fine.safetensors");
    CHECK(make_fifo(fifo), "mkfifo %s", fifo);
    unlink(link);
    CHECK(symlink(fifo, link) == 0, "symlink");
    const char *opts[] = {"--save", "--json", "--trace"};
    const char *paths[] = {fifo, link};
    for (int o = 0; o < 3; o++)
        for (int p = 0; p < 2; p++) {
            FAILS(2, "a FIFO, not a regular file", GPT, "--steps", "1",
                  opts[o], paths[p]);
            CHECK(!strstr(res.err, "step 1"), "%s: worked first: %.300s",
                  opts[o], res.err);
            CHECK(is_fifo(fifo), "%s %s replaced the FIFO", opts[o],
                  paths[p]);
            CHECK(res.seconds < 20, "%s: %.1f s: blocked on the FIFO?",
                  opts[o], res.seconds);
        }
    /* delta plan writes --json too */
    USAGE_FAILS(&res, "plan", "a FIFO", "--model", "gpt2-tiny", "--json",
                fifo);
    /* maxbatch's own outputs */
    USAGE_FAILS(&res, "maxbatch", "a FIFO", "--model", "mlp", "--backend",
                "sim", "--json", fifo);
    char plot[128], dat[128];
    path_in_tmp(plot, sizeof plot, "mb.png");
    path_in_tmp(dat, sizeof dat, "mb.dat");
    CHECK(make_fifo(dat), "mkfifo %s", dat);
    USAGE_FAILS(&res, "maxbatch", "mb.dat is a FIFO", "--model", "mlp",
                "--backend", "sim", "--plot", plot);
    CHECK(is_fifo(dat), "maxbatch replaced the FIFO");
    unlink(dat);
    /* bench: a file it writes into --out */
    char out[128], csv[160];
    path_in_tmp(out, sizeof out, "bench-out");
    mkdir(out, 0777);
    snprintf(csv, sizeof csv, "%s/results.csv", out);
    CHECK(make_fifo(csv), "mkfifo %s", csv);
    USAGE_FAILS(&res, "bench", "results.csv is a FIFO", "--models", "mlp",
                "--backend", "sim", "--out", out, "--quiet");
    CHECK(is_fifo(csv), "bench replaced the FIFO");
    unlink(csv);
    /* --out a file */
    USAGE_FAILS(&res, "bench", "not a folder", "--models", "mlp",
                "--backend", "sim", "--out", fifo, "--quiet");
    /* and a regular file is still written */
    TRAIN(GPT, "--steps", "1", "--save", ok);
    CHECK(res.status == 0, "a regular --save: %d %.300s", res.status,
          res.err);
    unlink(ok);
    unlink(link);
    unlink(fifo);
}

/* Defect 1: the user's own FILE.tmp is never touched by a save to FILE
 * (the save's temporary has a unique name), and no temporary is left. */
static void test_save_keeps_users_tmp(void) {
    char ck[128], tmp[160];
    path_in_tmp(ck, sizeof ck, "mine.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", ck);
    CHECK(write_text(tmp, "my notes"), "writing %s", tmp);
    TRAIN(GPT, "--steps", "2", "--checkpoint-every", "1", "--save", ck);
    CHECK(res.status == 0, "%d %.300s", res.status, res.err);
    CHECK(file_holds(tmp, "my notes"), "%s was changed or removed", tmp);
    CHECK(count_temps("mine.safetensors.delta-") == 0, "temporary left");
    unlink(tmp);
    unlink(ck);
}

/* Defect 2: a run that saves holds a lock on its path; a second run
 * saving to the same path is refused with exit 2 and a message naming
 * the other run, and the first run's checkpoint is whole. */
static void test_second_run_refused(void) {
    char ck[128];
    path_in_tmp(ck, sizeof ck, "shared.safetensors");
    unlink(ck);
    const char *argv[] = {tool, "train", "--model", "gpt2-tiny", "--quiet",
                          "--steps", "100000", "--checkpoint-every", "1",
                          "--save", ck, NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    CHECK(pid > 0, "fork");
    if (pid <= 0) return;
    /* wait for its first checkpoint: it holds the lock by then */
    struct stat sb;
    for (int i = 0; i < 600 && stat(ck, &sb) != 0; i++) usleep(50000);
    CHECK(stat(ck, &sb) == 0, "the first run saved nothing");
    FAILS(2, "another delta run", GPT, "--steps", "1", "--save", ck);
    char pid_s[32];
    snprintf(pid_s, sizeof pid_s, "pid %ld", (long)pid);
    CHECK(strstr(res.err, pid_s), "the message lacks '%s': %.300s", pid_s,
          res.err);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    delta_status st;
    char err[256];
    delta_st_file *f = delta_st_open(ck, &st, err, sizeof err);
    CHECK(f, "the first run's checkpoint does not open: %s", err);
    delta_st_close(f);
    /* the killed run's lock is gone with it: a new run may save there,
     * and it removes what a killed save may have left */
    TRAIN(GPT, "--steps", "1", "--save", ck);
    CHECK(res.status == 0, "after the first run died: %d %.300s",
          res.status, res.err);
    CHECK(count_temps("shared.safetensors.delta-") == 0, "temporary left");
    unlink(ck);
}

/* Defect 8: writing an output that fails mid-run (a save, --json,
 * --trace) is the run's failure, exit 1, not bad usage (2). The files are
 * capped with RLIMIT_FSIZE (no root, no full disk needed). */
static void test_write_failures_exit_1(void) {
    char ck[128], json[128], trace[128];
    path_in_tmp(ck, sizeof ck, "failing.safetensors");
    path_in_tmp(json, sizeof json, "failing.jsonl");
    path_in_tmp(trace, sizeof trace, "failing.json");
    setenv("DELTA_TEST_SAVE_FAIL", "write", 1);
    FAILS(1, "Input/output error", GPT, "--steps", "1", "--save", ck);
    unsetenv("DELTA_TEST_SAVE_FAIL");
    run_fsize_limit = 2048;
    FAILS(1, "File too large", GPT, "--steps", "20", "--json", json);
    FAILS(1, "--trace", GPT, "--steps", "2", "--trace", trace);
    run_fsize_limit = 0;
    /* bad input stays 2 */
    FAILS(2, "is a folder", GPT, "--steps", "1", "--json", tmpdir);
    unlink(json);
    unlink(trace);
}

/* Defect 8: a step program too large names its tensor and shape (not
 * "tensor ''" and a dimension that is fine). */
/* The library opens a trace only as a regular file: a FIFO put there
 * after the tool's check is refused at once (never a blocked open). */
static void test_trace_open_refuses_fifo(void) {
    char fifo[512], err[256] = "";
    snprintf(fifo, sizeof fifo, "%s/trace.fifo", tmpdir);
    CHECK(make_fifo(fifo), "mkfifo %s", fifo);
    delta_trace *t = delta_trace_open(fifo, err, sizeof err);
    CHECK(t == NULL, "a FIFO is not opened as a trace");
    CHECK(strstr(err, "trace") != NULL, "message: %s", err);
    CHECK(is_fifo(fifo), "the FIFO is left as it was");
    if (t) delta_trace_close(t, err, sizeof err);
    unlink(fifo);
}

static void test_messages(void) {
    USAGE_FAILS(&res, "plan", "more than 2^48 elements", "--model",
                "gpt2-xl", "--batch", "99999999");
    CHECK(!strstr(res.err, "tensor ''"), "an unnamed tensor: %.300s",
          res.err);
    CHECK(strstr(res.err, "99999999 x"), "the shape is not given: %.300s",
          res.err);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_outputs")) return 1;
    run_timeout_s = 120; /* a FIFO opened for writing would block */
    TEST_RUN(test_outputs_refuse_non_regular_files);
    TEST_RUN(test_save_keeps_users_tmp);
    TEST_RUN(test_second_run_refused);
    TEST_RUN(test_write_failures_exit_1);
    TEST_RUN(test_messages);
    TEST_RUN(test_trace_open_refuses_fifo);
    cli_cleanup();
    TEST_MAIN_END();
}
