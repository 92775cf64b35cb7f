/* `delta bench`: a grid of models x policies x budgets on one backend,
 * each cell a measured run (cell.h), against keep with an unlimited budget
 * per model. cmd_bench.c parses and runs the grid; bench_report.c writes
 * results.csv and results.md; bench_plot.c writes the plots' data, their
 * gnuplot script and, when gnuplot is installed, the PNGs. */
#ifndef DELTA_TOOLS_BENCH_H
#define DELTA_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cell.h"
#include "parse.h"
#include "trainer.h"

#define BENCH_MAX_MODELS 16
#define BENCH_MAX_POLICIES 16
#define BENCH_MAX_BUDGETS 16

/* One model of the grid and its cells. */
typedef struct bench_model {
    const char *name;
    int64_t batch, seq_len, image_size;  /* resolved (0: not the kind) */
    const char *optimizer;      /* "sgd" or "adamw" */
    train_config cfg;           /* the run of this model (no policy or
                                   budget: the cells set them) */
    cell_result ref;            /* keep, unlimited budget */
    /* cells[p][b]: policy p at budget b */
    cell_result cells[BENCH_MAX_POLICIES][BENCH_MAX_BUDGETS];
    /* The timeline: one traced run per policy at the timeline budget,
     * plus keep unlimited; the memory of its last step. */
    bool timeline_ok[BENCH_MAX_POLICIES + 1];  /* [n_policies]: keep ref */
    size_t timeline_budget_bytes;
} bench_model;

typedef struct bench {
    train_config base;          /* the options common to every model */
    const char *models[BENCH_MAX_MODELS];
    const char *policies[BENCH_MAX_POLICIES];
    const char *budget_label[BENCH_MAX_BUDGETS];  /* as given: "50%" */
    delta_budget budgets[BENCH_MAX_BUDGETS];
    int n_models, n_policies, n_budgets;
    int timeline_budget;        /* index into budgets; -1: no timeline */
    const char *out;            /* output directory */
    int repeat;                 /* runs per measured cell (median kept) */
    bool quiet;
    bench_model *m;             /* [n_models] */
    char lists[3][1024];        /* the parsed lists' text */
} bench;

/* Overhead of a cell against the model's reference, NAN when either did
 * not run. */
double bench_overhead(const bench_model *bm, const cell_result *c);

/* "sim v100-32g: resnet50 224x224, batch 64, adamw" into buf. */
const char *bench_label(const bench *b, const bench_model *bm, char *buf,
                        size_t n);

/* out/results.csv and out/results.md; false with a message on stderr. */
bool bench_write_tables(const bench *b);

/* The traced run's trace path of model i and policy p (p == n_policies:
 * the keep reference) into buf. */
const char *bench_trace_path(const bench *b, int i, int p, char *buf,
                             size_t n);

/* Data files, out/plots.gp and, with gnuplot, the PNGs: overhead against
 * budget per model, and the memory of one step per policy per model.
 * false with a message on stderr only when a file cannot be written; a
 * missing gnuplot is a warning. */
bool bench_write_plots(const bench *b);

#endif
