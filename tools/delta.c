/* The delta command line: dispatches to a subcommand (commands.h). */
#include "delta/delta.h"

#include <stdio.h>
#include <string.h>

#include "commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: delta <command> [options]\n"
            "\n"
            "Train deep networks inside a fixed device-memory budget.\n"
            "\n"
            "commands:\n"
            "  train      train a model ('delta train --help')\n"
            "  plan       memory of a model's training step, from shapes alone:\n"
            "             unconstrained peak and minimum budget (options of train)\n"
            "  maxbatch   largest batch that fits a device, per policy, with\n"
            "             its throughput ('delta maxbatch --help')\n"
            "  bench      grid of models, policies and budgets: tables and\n"
            "             plots ('delta bench --help')\n"
"  calibrate  measure a backend and write a device file the simulator\n"
"             takes (--gpu-file; 'delta calibrate --help')\n"
            "  sample     generate text from a GPT-2 checkpoint, greedy or\n"
            "             top-k with a seed ('delta sample --help')\n"
            "\n"
            "options:\n"
            "  -h, --help     show this help\n"
            "  --version      print the version and the build's features\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("delta %s (%s)\n", DELTA_VERSION_STRING, delta_build_features());
        return 0;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "maxbatch")) return cmd_maxbatch(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "calibrate")) return cmd_calibrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 1, argv + 1);
    fprintf(stderr, "delta: unknown command '%s'; see 'delta --help'\n", cmd);
    return 2;
}
