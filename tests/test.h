/* A tiny test harness: each tests/test_*.c is one binary whose main() calls
 * TEST_RUN(fn) for each test function. A test fails when any CHECK in it
 * fails; it goes on after a failed CHECK so one run shows every problem.
 * Each binary prints "ok   name" / "FAIL name" lines and a final
 * "# results: P passed, F failed" line that tests/run.sh sums up;
 * "skip name: why" lines count as neither. */
#ifndef DELTA_TEST_H
#define DELTA_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_checks_;
static int test_passed_;
static int test_failed_;
static int test_skipped_;
static const char *test_skip_why_;

static inline int test_cmp_double_(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (the mean of the middle two for even n), sorting
 * v in place. */
static inline double test_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, test_cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            test_failed_checks_++;                                         \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__,       \
                    __LINE__, #cond);                                      \
            fprintf(stderr, " " __VA_ARGS__);                              \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

/* Marks the running test skipped (with a reason) and returns from it. */
#define TEST_SKIP(why)                                                     \
    do {                                                                   \
        test_skip_why_ = (why);                                            \
        return;                                                            \
    } while (0)

/* Runs one test and reports it as name, or name[label] when label is
 * given (e.g. the GEMM path a suite runs under). */
static inline void test_run_(void (*fn)(void), const char *name,
                             const char *label) {
    char full[256];
    if (label) snprintf(full, sizeof full, "%s[%s]", name, label);
    else snprintf(full, sizeof full, "%s", name);
    test_failed_checks_ = 0;
    test_skip_why_ = NULL;
    fn();
    if (test_skip_why_) {
        test_skipped_++;
        printf("skip %s: %s\n", full, test_skip_why_);
    } else if (test_failed_checks_) {
        test_failed_++;
        printf("FAIL %s\n", full);
    } else {
        test_passed_++;
        printf("ok   %s\n", full);
    }
    fflush(stdout);
}

#define TEST_RUN(fn) test_run_(fn, #fn, NULL)
#define TEST_RUN_LABELED(fn, label) test_run_(fn, #fn, label)

/* A small deterministic generator for test data (xorshift64). */
static uint64_t test_rng_state_ = 0x2545f4914f6cdd1dull;
static inline void test_rng_seed(uint64_t s) { test_rng_state_ = s ? s : 1; }
static inline uint32_t test_rng_u32(void) {
    test_rng_state_ ^= test_rng_state_ << 13;
    test_rng_state_ ^= test_rng_state_ >> 7;
    test_rng_state_ ^= test_rng_state_ << 17;
    return (uint32_t)(test_rng_state_ >> 16);
}
/* Uniform in [lo, hi). */
static inline float test_rng_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(test_rng_u32() & 0xffffff) / 16777216.0f;
}
static inline void test_fill_rand(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_f(lo, hi);
}

/* The whole of path in a malloc'd buffer with a NUL after it (*len bytes,
 * len may be NULL); NULL when it cannot be read. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (buf && len) *len = (size_t)n;
    return buf;
}

#define TEST_MAIN_END()                                                    \
    do {                                                                   \
        printf("# results: %d passed, %d failed, %d skipped\n",            \
               test_passed_, test_failed_, test_skipped_);                 \
        return test_failed_ ? 1 : 0;                                       \
    } while (0)

/* Compares two float arrays with |a - b| <= atol + rtol*|b| (b is the
 * reference); on failure prints the count and the worst element. Returns 1
 * when all elements are close. */
static inline int test_allclose(const char *what, const float *a,
                                const float *b, long n, double atol,
                                double rtol) {
    long bad = 0, worst = -1;
    double worst_excess = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double tol = atol + rtol * fabs((double)b[i]);
        if (!(d <= tol)) {
            bad++;
            double ex = isnan(d) ? INFINITY : d - tol;
            if (worst < 0 || ex > worst_excess) { worst = i; worst_excess = ex; }
        }
    }
    if (bad) {
        test_failed_checks_++;
        fprintf(stderr,
                "  %s: %ld of %ld elements differ (atol %g, rtol %g); worst "
                "[%ld]: got %.9g expected %.9g\n",
                what, bad, n, atol, rtol, worst, a[worst], b[worst]);
    }
    return bad == 0;
}

#endif
