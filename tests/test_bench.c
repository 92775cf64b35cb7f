/* delta bench (tools/cmd_bench.c and bench_*.c), run as a child process:
 *  - --help; bad usage and input exit 2 with a message;
 *  - a 2 x 2 x 2 grid (two small transformers, keep and delta, 80% and
 *    50%) on sim writes results.csv (a row per cell with the fields, keep
 *    below 100% recorded as infeasible, delta's cells ok inside their
 *    budgets), results.md (the overhead tables with "refused") and the
 *    plots: PNGs that are PNGs, and memory timelines of one step that stay
 *    within the budget;
 *  - the same on cpu for one model, so both backends are covered. */
#include "delta/delta.h"

#include "test.h"
#include "cli_run.h"


#define BENCH(...)                                                         \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        run_cmd(&res, "bench", a_);                                        \
    } while (0)

/* Options every model of the grid takes: 2 layers, 64 wide, T 32. */
#define SMALL "--layers", "2", "--hidden", "64", "--heads", "2",           \
              "--seq-len", "32", "--vocab", "256"

#define USAGE_FAIL(needle, ...) USAGE_FAILS(&res, "bench", needle, __VA_ARGS__)

static void test_help(void) {
    BENCH("--help");
    CHECK(res.status == 0 && strstr(res.out, "usage: delta bench") &&
              strstr(res.out, "results.csv") && strstr(res.out, "--budgets"),
          "bench --help: status %d: %.200s", res.status, res.out);
}

static void test_bad_input(void) {
    char out[160];
    path_in_tmp(out, sizeof out, "bad");
    USAGE_FAIL("--out", "--models", "gpt2-tiny");
    USAGE_FAIL("no model", "--out", out);
    USAGE_FAIL("unknown model 'nope'", "--models", "gpt2-tiny,nope", "--out", out);
    USAGE_FAIL("unknown policy 'nope'", "--models", "gpt2-tiny", "--policies",
          "delta,nope", "--out", out);
    USAGE_FAIL("percentage", "--models", "gpt2-tiny", "--budgets", "50%,-3%",
          "--out", out);
    USAGE_FAIL("no empty item", "--models", "gpt2-tiny,", "--out", out);
    USAGE_FAIL("twice", "--models", "gpt2-tiny,gpt2-tiny", "--out", out);
    USAGE_FAIL("not one of", "--models", "gpt2-tiny", "--budgets", "90%,50%",
          "--timeline-budget", "70%", "--out", out);
    USAGE_FAIL("does not apply", "--models", "gpt2-tiny", "--json", "x.jsonl",
          "--out", out);
    USAGE_FAIL("give one of them", "--models", "gpt2-tiny", "--model",
          "gpt2-tiny", "--out", out);
    USAGE_FAIL("quotes", "--models", "gpt2-tiny", "--out", "a\"b");
    CHECK(access(out, F_OK) != 0, "a refused run created %s", out);
}

/* Reads dir/results.csv: returns its data rows (up to cap, each a
 * malloc'd line), -1 when missing or its header lacks a field. */
static int read_csv(const char *dir, char **rows, int cap) {
    char path[256];
    snprintf(path, sizeof path, "%s/results.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char line[4096];
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        if (n < 0) {
            static const char *fields[] = {
                "model", "policy", "budget", "status", "median_step_s",
                "overhead", "peak_bytes", "swap_out_bytes_per_step",
                "recomputed_ops_per_step", "stall_s_per_step", NULL,
            };
            for (int k = 0; fields[k]; k++)
                CHECK(strstr(line, fields[k]), "results.csv header lacks "
                      "%s: %s", fields[k], line);
            n = 0;
            continue;
        }
        if (n < cap) rows[n++] = strdup(line);
    }
    fclose(f);
    return n;
}

/* Field k (0-based) of a CSV row without quoted commas before it. */
static const char *field(const char *row, int k, char *buf, size_t n) {
    const char *p = row;
    for (int i = 0; i < k && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!p) return "";
    size_t len = strcspn(p, ",\n");
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

/* Columns of results.csv (see its header). */
enum { C_MODEL = 0, C_POLICY = 5, C_BUDGET = 6, C_BUDGET_BYTES = 7,
       C_STATUS = 8, C_STEP_S = 10, C_OVERHEAD = 11, C_PEAK = 13 };

/* The points of a memory timeline data file: count, and how many are
 * above budget_mib. */
static int timeline_points(const char *path, double budget_mib, int *over) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int n = 0;
    *over = 0;
    while (fgets(line, sizeof line, f)) {
        double ms, mib;
        if (line[0] == '#' || sscanf(line, "%lf %lf", &ms, &mib) != 2)
            continue;
        n++;
        *over += mib > budget_mib + 1e-3 || ms < 0;
    }
    fclose(f);
    return n;
}

/* Checks a grid's outputs in dir: models x {keep, delta} x {80%, 50%}. */
static void check_grid(const char *dir, const char *const *models,
                       int n_models) {
    char *rows[64];
    int n = read_csv(dir, rows, 64);
    CHECK(n == n_models * 5, "%s/results.csv: %d rows, expected %d (a "
          "reference and 4 cells per model)", dir, n, n_models * 5);
    char b[6][64];
    for (int i = 0; i < n; i++) {
        const char *policy = field(rows[i], C_POLICY, b[0], 64);
        const char *budget = field(rows[i], C_BUDGET, b[1], 64);
        const char *status = field(rows[i], C_STATUS, b[2], 64);
        double step = atof(field(rows[i], C_STEP_S, b[3], 64));
        double peak = atof(field(rows[i], C_PEAK, b[4], 64));
        double bytes = atof(field(rows[i], C_BUDGET_BYTES, b[5], 64));
        bool ref = !strcmp(budget, "unlimited");
        if (!strcmp(policy, "keep") && !ref)
            CHECK(!strcmp(status, "infeasible"), "keep at %s: %s (a budget "
                  "below keep's peak is infeasible)", budget, status);
        else
            CHECK(!strcmp(status, "ok") && step > 0 && peak > 0 &&
                      (ref || peak <= bytes),
                  "%s at %s: status %s, step %g, peak %g of %g: %s", policy,
                  budget, status, step, peak, bytes, rows[i]);
        if (ref)
            CHECK(atof(field(rows[i], C_OVERHEAD, b[3], 64)) == 1,
                  "the reference's overhead is not 1: %s", rows[i]);
        free(rows[i]);
    }
    char path[256], md[OUT_CAP];
    snprintf(path, sizeof path, "%s/results.md", dir);
    slurp(path, md, sizeof md);
    CHECK(strstr(md, "| policy | 80% | 50% |") &&
              strstr(md, "| keep | refused | refused |") &&
              strstr(md, "| delta | ") && strstr(md, "keep, unlimited budget"),
          "results.md: %.600s", md);
    for (int i = 0; i < n_models; i++) {
        CHECK(strstr(md, models[i]), "results.md lacks %s", models[i]);
        /* the timeline at 50% (the middle of 2 budgets is the second) */
        snprintf(path, sizeof path, "%s/data/memory_%s_delta.dat", dir,
                 models[i]);
        int over = 0, pts = timeline_points(path, 1e30, &over);
        CHECK(pts > 10, "%s: %d points", path, pts);
        snprintf(path, sizeof path, "%s/data/memory_%s_keep-unlimited.dat",
                 dir, models[i]);
        CHECK(timeline_points(path, 1e30, &over) > 10, "%s: no points",
              path);
        if (!have_gnuplot()) continue;
        const char *pngs[] = {"overhead", "memory"};
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/%s_%s.png", dir, pngs[k],
                     models[i]);
            CHECK(is_png(path), "%s is not a PNG of some size", path);
        }
    }
    if (!have_gnuplot())
        fprintf(stderr, "  (gnuplot is not installed: PNGs not checked)\n");
}

/* delta's timeline stays within its budget: the budget is the cell's
 * budget_bytes, read from results.csv. */
static void check_timeline_budget(const char *dir, const char *model) {
    char *rows[64], b[3][64], path[256];
    int n = read_csv(dir, rows, 64);
    double budget_mib = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(field(rows[i], C_MODEL, b[0], 64), model) &&
            !strcmp(field(rows[i], C_POLICY, b[1], 64), "delta") &&
            !strcmp(field(rows[i], C_BUDGET, b[2], 64), "50%"))
            budget_mib = atof(field(rows[i], C_BUDGET_BYTES, b[0], 64)) /
                         (1024.0 * 1024.0);
        free(rows[i]);
    }
    snprintf(path, sizeof path, "%s/data/memory_%s_delta.dat", dir, model);
    int over = 0, pts = timeline_points(path, budget_mib, &over);
    CHECK(budget_mib > 0 && pts > 0 && over == 0,
          "%s: %d of %d points above the budget %.3f MiB", path, over, pts,
          budget_mib);
}

static void test_sim_grid(void) {
    char out[160];
    path_in_tmp(out, sizeof out, "sim");
    BENCH("--models", "gpt2-tiny,bert-tiny", SMALL, "--policies",
          "keep,delta", "--budgets", "80%,50%", "--backend", "sim",
          "--steps", "4", "--out", out);
    CHECK(res.status == 0, "status %d: %.600s", res.status, res.err);
    CHECK(strstr(res.err, "[1/16]") && strstr(res.err, "[16/16]"),
          "no progress on stderr: %.600s", res.err);
    const char *models[] = {"gpt2-tiny", "bert-tiny"};
    check_grid(out, models, 2);
    check_timeline_budget(out, "gpt2-tiny");
}

/* --repeat N: the grid N times in rounds, each cell's median run kept; on
 * the deterministic sim every run is the same, so the tables are too. */
static void test_repeat(void) {
    char one[160], three[160], a[1 << 14], b[1 << 14];
    path_in_tmp(one, sizeof one, "rep1");
    path_in_tmp(three, sizeof three, "rep3");
    BENCH("--models", "gpt2-tiny", SMALL, "--policies", "keep,delta",
          "--budgets", "80%,50%", "--backend", "sim", "--steps", "4",
          "--timeline-budget", "none", "--out", one, "--quiet");
    CHECK(res.status == 0, "status %d: %.600s", res.status, res.err);
    BENCH("--models", "gpt2-tiny", SMALL, "--policies", "keep,delta",
          "--budgets", "80%,50%", "--backend", "sim", "--steps", "4",
          "--timeline-budget", "none", "--repeat", "3", "--out", three);
    CHECK(res.status == 0, "status %d: %.600s", res.status, res.err);
    CHECK(strstr(res.err, "[15/15]") && !strstr(res.err, "[16/"),
          "3 rounds of 5 cells: %.600s", res.err);
    /* the tables (results.csv also holds each cell's real seconds) */
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/results.md", one);
    snprintf(pb, sizeof pb, "%s/results.md", three);
    slurp(pa, a, sizeof a);
    slurp(pb, b, sizeof b);
    CHECK(a[0] && !strcmp(a, b), "results.md: --repeat 3 differs on sim");
    USAGE_FAIL("--repeat", "--models", "gpt2-tiny", "--repeat", "0", "--out",
               one);
    USAGE_FAIL("--repeat", "--models", "gpt2-tiny", "--repeat", "2x", "--out",
               one);
}

static void test_cpu_grid(void) {
    char out[160];
    path_in_tmp(out, sizeof out, "cpu");
    BENCH("--models", "gpt2-tiny", SMALL, "--policies", "keep,delta",
          "--budgets", "80%,50%", "--backend", "cpu", "--steps", "3",
          "--threads", "1", "--out", out, "--quiet");
    CHECK(res.status == 0, "status %d: %.600s", res.status, res.err);
    CHECK(!strstr(res.err, "[1/"), "--quiet shows progress: %.300s",
          res.err);
    const char *models[] = {"gpt2-tiny"};
    check_grid(out, models, 1);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "test_bench")) return 1;
    TEST_RUN(test_help);
    TEST_RUN(test_bad_input);
    TEST_RUN(test_sim_grid);
    TEST_RUN(test_repeat);
    TEST_RUN(test_cpu_grid);
    cli_cleanup();
    TEST_MAIN_END();
}
