/* delta maxbatch's search results (cmd_maxbatch.c searches;
 * maxbatch_report.c prints the table and writes --json and --plot). */
#ifndef DELTA_TOOLS_MAXBATCH_H
#define DELTA_TOOLS_MAXBATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cell.h"
#include "json_log.h"
#include "trainer.h"

#define MAXBATCH_MAX_POLICIES 16
#define MAXBATCH_MAX_PROBES 96

/* One probe: a batch and how it went. */
typedef struct probe {
    int64_t batch;
    bool pass;
    bool below_floor;           /* fit, but too slow */
    cell_result cell;
} probe;

/* The search of one policy. */
typedef struct search {
    const char *policy;
    cell_status status;         /* OK: a batch passed; INFEASIBLE: none */
    int64_t max_batch;          /* 0: none passed */
    const probe *best;          /* the probe at max_batch */
    const char *limit;          /* what stopped max_batch + 1: "memory",
                                   "throughput", "max-batch" */
    probe probes[MAXBATCH_MAX_PROBES];
    int n_probes;
    double search_s;
    char err[1024];
} search;

typedef struct maxbatch {
    train_config cfg;           /* as parsed; batch and policy per probe */
    const char *policies[MAXBATCH_MAX_POLICIES];
    int n_policies;
    char policies_buf[512];
    double min_throughput;
    int64_t max_batch;
    const char *json;
    const char *plot;           /* --plot FILE.png, or NULL */
    bool quiet;
    size_t device_bytes;
    int64_t seq_len;            /* transformers' T (0: images) */
    double floor;               /* samples/s a batch must reach; 0: none */
} maxbatch;

/* The table on stdout: a header (device, keep's batch and the floor)
 * and a row per search. */
void maxbatch_print(const maxbatch *m, search *const *res, int n,
                    const search *keep);

/* One JSON object per search into l, then closes it; the exit status
 * (0, or 1 when writing failed). */
int maxbatch_write_json(const maxbatch *m, json_log *l, search *const *res,
                        int n, const search *keep);

/* m->plot: samples/s of every probed batch that fit, per policy, against
 * the batch (log scale), with the floor; FILE.dat and FILE.gp beside it.
 * false (a message on stderr) when a file cannot be written; a missing
 * gnuplot is a warning. */
bool maxbatch_write_plot(const maxbatch *m, search *const *res, int n);

/* --plot FILE[.png]'s data and script paths: FILE.dat, FILE.gp. */
void maxbatch_plot_files(const char *plot, char *dat, char *gp_path,
                         size_t n);

#endif
