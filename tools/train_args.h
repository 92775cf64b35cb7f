/* train's command-line options for other commands. maxbatch and bench take
 * a model and a backend the way train does (--model, --seq-len, --gpu,
 * --budget, ...): they parse with train's parser (cmd_train.c) and add
 * their own options through a train_args_ext, so an option train gains is
 * theirs too and every value is checked by the same code. */
#ifndef DELTA_TOOLS_TRAIN_ARGS_H
#define DELTA_TOOLS_TRAIN_ARGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "parse.h"
#include "trainer.h"

/* A command's own option values start here (train's are below). */
#define TRAIN_ARGS_EXT_BASE 1024

typedef struct train_args_ext {
    const char *cmd;            /* "maxbatch": messages begin "delta
                                   maxbatch: " and point to its --help */
    void (*usage)(FILE *f);     /* the command's --help */
    const struct option *opts;  /* its own long options, {0}-terminated,
                                   values >= TRAIN_ARGS_EXT_BASE */
    /* Takes one of them: opt is "--name", arg its value (NULL without
     * one). Returns -1 to go on, else the exit status to return. */
    int (*handle)(void *ud, int val, const char *opt, const char *arg);
    void *ud;
    bool model_optional;        /* no --model needed (bench's --models) */
    int64_t steps;              /* --steps default; 0: train's (100) */
} train_args_ext;

/* Parses argv (argv[0] is the command) into *c, zeroed first with train's
 * defaults (100 steps, optimizer defaults, ...). Returns -1 to go on, else
 * the exit status (0 after --help, 2 on bad usage, with the message on
 * stderr). */
int train_args_parse(int argc, char **argv, train_config *c,
                     const train_args_ext *ext);

/* Prints "delta CMD: message" and the --help hint for the command last
 * parsed; returns 2 (bad usage). */
int train_args_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* -1 when name is a session policy, else a usage error listing them (2). */
int train_args_check_policy(const char *name);

/* --policies LIST: parses arg into list[0..*n) (text copied into buf),
 * each a known policy. -1 to go on, else the exit status. */
int train_args_parse_policies(const char *opt, const char *arg, char *buf,
                              size_t buf_len, const char **list, int cap,
                              int *n);

/* After parsing: --policy P joins the list (both given: a usage error);
 * none given: every policy. -1 to go on, else the exit status. */
int train_args_pick_policies(const train_config *c, const char **list,
                             int cap, int *n);

/* delta profiles in its first step and then tries two planned modes for
 * two steps each; a command summarizing the steps after the first third
 * (maxbatch, bench) needs this many steps for the steady steps of the mode
 * it chose to be most of them. */
#define TRAIN_ARGS_DELTA_MIN_STEPS 12

/* Warns on stderr ("delta CMD: warning: ...") when list[0..n) holds delta
 * and steps is below TRAIN_ARGS_DELTA_MIN_STEPS. */
void train_args_warn_steps(const char *cmd, int64_t steps,
                           const char *const *list, int n);

#endif
