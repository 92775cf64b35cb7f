/* libFuzzer harness: the command line of `delta train` / `delta plan`
 * (tools/cmd_train.c's train_parse_args) and the value parsers under it
 * (tools/parse.c). The input is a list of arguments separated by NUL
 * bytes; each is its own heap copy, so ASan sees any read past an
 * argument's end or a pointer kept into an argument after the parse.
 * Every argument also goes through each value parser, which must either
 * accept it with a value in range or refuse it with a message. The parser
 * may print usage or errors; run with -close_fd_mask=3 to keep them out
 * of the fuzzer's log. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "parse.h"
#include "trainer.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_values(const char *s) {
    char err[512];
    int64_t i;
    double x;
    size_t n;
    delta_budget b;
    err[0] = '\0';
    if (parse_i64("--n", s, -5, 1000, &i, err, sizeof err)) {
        if (i < -5 || i > 1000) __builtin_trap();
    } else if (!err[0]) __builtin_trap();
    err[0] = '\0';
    if (parse_f64("--x", s, 0, 100, &x, err, sizeof err)) {
        if (!(x >= 0 && x <= 100)) __builtin_trap();
    } else if (!err[0]) __builtin_trap();
    err[0] = '\0';
    if (!parse_size("--size", s, &n, err, sizeof err) && !err[0])
        __builtin_trap();
    err[0] = '\0';
    if (parse_budget("--budget", s, &b, err, sizeof err)) {
        if (b.kind == DELTA_BUDGET_PERCENT && !(b.percent > 0 && b.percent <= 1000))
            __builtin_trap();
        if (b.kind == DELTA_BUDGET_BYTES && b.bytes == 0) __builtin_trap();
    } else if (!err[0]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = strdup("train");
    size_t start = 0;
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; i++) {
        if (i == size || data[i] == '\0') {
            char *a = malloc(i - start + 1);
            if (!a) abort();
            memcpy(a, data + start, i - start);
            a[i - start] = '\0';
            argv[argc++] = a;
            start = i + 1;
        }
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) check_values(argv[i]);

    train_config c;
    int rc = train_parse_args(argc, argv, &c);
    if (rc != -1 && rc != 0 && rc != 2) __builtin_trap();
    if (rc == -1) {
        /* Accepted: the settings the trainer relies on hold (a model
         * named, or a file to take it from). */
        if ((!c.run.model.name && !c.load) || c.steps < 0) __builtin_trap();
        if (c.run.seq_len_min > c.run.seq_len_max) __builtin_trap();
        /* Strings point into argv, which is still alive here. */
        volatile size_t n = strlen(c.run.model.name ? c.run.model.name
                                                    : c.load);
        (void)n;
    }
    /* Nothing of this parse may leak into the next one (checked while
     * this argv is alive, so a stale pointer into it reads real bytes). */
    char a0[] = "train", a1[] = "--model", a2[] = "mlp";
    char *ok[] = {a0, a1, a2, NULL};
    if (train_parse_args(3, ok, &c) != -1) __builtin_trap();
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
