/* Entry points of the subcommands that tools/delta.c dispatches to. Each
 * takes the arguments after the command's name (argv[0] is the command)
 * and returns the process exit status: 0 success, 2 bad usage or input,
 * 3 infeasible budget, 1 any other failure. */
#ifndef DELTA_TOOLS_COMMANDS_H
#define DELTA_TOOLS_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_maxbatch(int argc, char **argv);

#endif
