/* The file of tuned kernel choices (src/backend/algo_cache.c) and the
 * atomic writer under it (src/core/files.c): what the cuda backend keeps
 * its timed cuDNN choices in, tested here without a GPU. */
#include "test.h"
#include "backend/algo_cache.h"
#include "core/files.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static char *path_in(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Put, save, reopen: the choices come back, for their device only. */
static void test_round_trip(void) {
    char p[512], err[256] = "";
    path_in("sub/folder/algos.tsv", p, sizeof p);
    delta_algo_cache *c = delta_algo_cache_open(p, "GPU A cuDNN 91900");
    CHECK(c != NULL);
    int algo = -7;
    size_t bytes = 7;
    CHECK(!delta_algo_cache_get(c, "conv2d 1 2 3", &algo, &bytes));
    delta_algo_cache_put(c, "conv2d 1 2 3", 5, 1234);
    delta_algo_cache_put(c, "conv2d_dw 4", 0, 0);
    delta_algo_cache_put(c, "conv2d 1 2 3", 6, 99); /* replaces */
    CHECK(delta_algo_cache_save(c, err, sizeof err), "%s", err);
    delta_algo_cache_free(c);

    c = delta_algo_cache_open(p, "GPU A cuDNN 91900");
    CHECK(delta_algo_cache_get(c, "conv2d 1 2 3", &algo, &bytes));
    CHECK(algo == 6 && bytes == 99, "%d %zu", algo, bytes);
    CHECK(delta_algo_cache_get(c, "conv2d_dw 4", &algo, &bytes));
    CHECK(algo == 0 && bytes == 0);
    /* nothing new: saving writes nothing */
    long before = file_size(p);
    CHECK(delta_algo_cache_save(c, err, sizeof err));
    CHECK(file_size(p) == before);
    delta_algo_cache_free(c);

    /* another device (a GPU model, or a cuDNN version) shares the file
     * without seeing these choices, and keeps them when it saves */
    c = delta_algo_cache_open(p, "GPU B cuDNN 91900");
    CHECK(!delta_algo_cache_get(c, "conv2d 1 2 3", &algo, &bytes));
    delta_algo_cache_put(c, "conv2d 1 2 3", 2, 8);
    CHECK(delta_algo_cache_save(c, err, sizeof err), "%s", err);
    delta_algo_cache_free(c);
    c = delta_algo_cache_open(p, "GPU A cuDNN 91900");
    CHECK(delta_algo_cache_get(c, "conv2d 1 2 3", &algo, &bytes) &&
          algo == 6);
    delta_algo_cache_free(c);
    c = delta_algo_cache_open(p, "GPU B cuDNN 91900");
    CHECK(delta_algo_cache_get(c, "conv2d 1 2 3", &algo, &bytes) &&
          algo == 2 && bytes == 8);
    delta_algo_cache_free(c);
}

/* Two runs that tuned different shapes: the second's save keeps what the
 * first saved after the second opened the file. */
static void test_concurrent_saves_merge(void) {
    char p[512], err[256];
    path_in("merge.tsv", p, sizeof p);
    delta_algo_cache *a = delta_algo_cache_open(p, "G");
    delta_algo_cache *b = delta_algo_cache_open(p, "G");
    delta_algo_cache_put(a, "k1", 1, 10);
    delta_algo_cache_put(b, "k2", 2, 20);
    CHECK(delta_algo_cache_save(a, err, sizeof err));
    CHECK(delta_algo_cache_save(b, err, sizeof err));
    delta_algo_cache_free(a);
    delta_algo_cache_free(b);
    delta_algo_cache *c = delta_algo_cache_open(p, "G");
    int algo;
    size_t bytes;
    CHECK(delta_algo_cache_get(c, "k1", &algo, &bytes) && algo == 1);
    CHECK(delta_algo_cache_get(c, "k2", &algo, &bytes) && algo == 2);
    delta_algo_cache_free(c);
}

/* Malformed lines are skipped, good ones still read. */
static void test_malformed_lines(void) {
    char p[512];
    path_in("bad.tsv", p, sizeof p);
    FILE *f = fopen(p, "w");
    fputs("garbage\nG\tk\tnot-a-number\t5\nG\tk2\t3\t-4\nG\t\t1\t2\n"
          "G\tgood\t4\t4096\nG\tlast\t1\t2", f);
    fclose(f);
    delta_algo_cache *c = delta_algo_cache_open(p, "G");
    int algo;
    size_t bytes;
    CHECK(!delta_algo_cache_get(c, "k", &algo, &bytes));
    CHECK(!delta_algo_cache_get(c, "k2", &algo, &bytes));
    CHECK(delta_algo_cache_get(c, "good", &algo, &bytes) && algo == 4 &&
          bytes == 4096);
    CHECK(delta_algo_cache_get(c, "last", &algo, &bytes) && algo == 1);
    delta_algo_cache_free(c);
}

/* No path: nothing read or written; a path that is a folder or a device
 * is left alone, with a message. */
static void test_unwritable(void) {
    char err[256] = "";
    delta_algo_cache *c = delta_algo_cache_open(NULL, "G");
    delta_algo_cache_put(c, "k", 1, 1);
    CHECK(delta_algo_cache_save(c, err, sizeof err));
    delta_algo_cache_free(c);

    c = delta_algo_cache_open(dir, "G"); /* a folder */
    delta_algo_cache_put(c, "k", 1, 1);
    CHECK(!delta_algo_cache_save(c, err, sizeof err));
    CHECK(strstr(err, "a folder"), "%s", err);
    delta_algo_cache_free(c);

    CHECK(delta_file_write_atomic("/dev/null", "x", 1, err, sizeof err) != 0);
    CHECK(strstr(err, "character device"), "%s", err);
}

/* The atomic writer replaces a file whole and leaves no temporary. */
static void test_write_atomic(void) {
    char p[512], err[256];
    path_in("atomic.txt", p, sizeof p);
    CHECK(delta_file_write_atomic(p, "first\n", 6, err, sizeof err) == 0, "%s", err);
    CHECK(delta_file_write_atomic(p, "second!\n", 8, err, sizeof err) == 0,
          "%s", err);
    CHECK(file_size(p) == 8);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c delta- >/dev/null", dir);
    CHECK(system(cmd) != 0, "a temporary was left in %s", dir);
}

static void test_default_path(void) {
    char buf[512];
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    delta_algo_cache_default_path("a.tsv", buf, sizeof buf);
    CHECK(!strcmp(buf, "/x/cache/delta/a.tsv"), "%s", buf);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    delta_algo_cache_default_path("a.tsv", buf, sizeof buf);
    CHECK(!strcmp(buf, "/home/u/.cache/delta/a.tsv"), "%s", buf);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/delta_test_algo_cache_%d", (int)getpid());
    if (!delta_mkdirs(dir)) return 1;
    TEST_RUN(test_round_trip);
    TEST_RUN(test_concurrent_saves_merge);
    TEST_RUN(test_malformed_lines);
    TEST_RUN(test_unwritable);
    TEST_RUN(test_write_atomic);
    TEST_RUN(test_default_path);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    TEST_MAIN_END();
}
