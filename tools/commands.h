/* Entry points of the subcommands that tools/delta.c dispatches to. Each
 * takes the arguments after the command's name (argv[0] is the command)
 * and returns the process exit status: 0 success, 2 bad usage or input,
 * 3 infeasible budget, 1 any other failure. */
#ifndef DELTA_TOOLS_COMMANDS_H
#define DELTA_TOOLS_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_maxbatch(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_sample(int argc, char **argv);

/* The options of train and plan into *c (zeroed first; strings point into
 * argv). Returns -1 to go on, else the exit status (0 after --help or
 * --version, 2 on bad usage, with a message on stderr). Callable more
 * than once in a process (fuzz/fuzz_cli.c does). */
struct train_config;
int train_parse_args(int argc, char **argv, struct train_config *c);

#endif
