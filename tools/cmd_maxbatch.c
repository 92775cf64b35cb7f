/* `delta maxbatch`: per policy, the largest batch that trains within a
 * device's memory, its throughput, and its ratio to keep's largest batch.
 *
 * Each probe is a cell (cell.h): a planned and run (or simulated) training
 * of --steps steps at one batch, whose steady step gives the samples/s.
 * A batch passes when every step fits and, for policies other than keep,
 * its samples/s reach the floor: --min-throughput F times keep's samples/s
 * at keep's largest batch (so a policy cannot claim a batch it only runs
 * at a crawl). keep is searched first, since it sets the floor and the
 * ratios.
 *
 * The search. Memory alone is monotone in the batch (every activation
 * grows with it); the floor need not be (small batches use the device
 * less well, large ones make the policy work harder), so a batch that
 * passes is bracketed first, then bisected: from keep's largest batch (1
 * for keep itself) the batch doubles while it passes, or halves until it
 * does; then the gap between the largest passing and the smallest failing
 * batch seen is bisected. What is reported therefore always passed, and
 * the next batch up always failed (or is past --max-batch). Probes are
 * remembered, so no batch runs twice. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell.h"
#include "commands.h"
#include "delta/delta.h"
#include "gnuplot.h"
#include "json_log.h"
#include "outfile.h"
#include "maxbatch.h"
#include "parse.h"
#include "progress.h"
#include "train_args.h"
#include "trainer.h"

#define DEFAULT_STEPS TRAIN_ARGS_DELTA_MIN_STEPS
#define DEFAULT_MIN_THROUGHPUT 0.75
#define DEFAULT_MAX_BATCH 65536

static void usage(FILE *f) {
    fprintf(f,
"usage: delta maxbatch --model NAME [--policy P | --policies LIST]\n"
"                      (--backend sim --gpu G | --backend cpu|cuda --budget SIZE)\n"
"                      [options]\n"
"\n"
"For each policy, the largest batch whose training step fits the device's\n"
"memory, its throughput, and its ratio to keep's largest batch. Each probe\n"
"plans and runs (on sim: simulates) --steps steps at one batch; the step\n"
"time is the median over the steps after the first third, once a planned\n"
"policy's plan is in force.\n"
"\n"
"options (besides train's model, data and optimizer options, e.g.\n"
"--seq-len, --image-size, --optimizer; see 'delta train --help'):\n"
"  --policies LIST      comma-separated, e.g. keep,delta,dtr (default: every\n"
"                       policy); --policy P for one\n"
"  --backend sim --gpu G  a simulated GPU; the device is its memory\n"
"                       (--budget SIZE overrides it); --gpu-file FILE for\n"
"                       a device file (delta calibrate) instead of a preset\n"
"  --backend cpu --budget SIZE  the cpu backend with an emulated device of\n"
"                       SIZE (e.g. 64MiB)\n"
"  --backend cuda --budget SIZE  the GPU, with SIZE of its memory as the\n"
"                       device (e.g. 8GiB: probes train for real, so a\n"
"                       share of the GPU keeps the search short)\n"
"  --min-throughput F   count only batches whose samples/s are at least F\n"
"                       times keep's samples/s at keep's largest batch\n"
"                       (default 0.75; 0 counts every batch that fits)\n"
"  --steps N            steps per probe (default %d)\n"
"  --max-batch N        largest batch tried (default %d)\n"
"  --json FILE          one JSON object per line, one per policy\n"
"  --plot FILE.png      samples/s of every probed batch that fit, per\n"
"                       policy, with the floor (gnuplot; FILE.dat and\n"
"                       FILE.gp beside it)\n"
"  --quiet              no progress on stderr\n"
"  (on cpu, --data defaults to synthetic: the probes measure, not learn)\n"
"  -h, --help           this help\n"
"\n"
"A policy that cannot train even batch 1 is reported with max batch 0\n"
"(infeasible); that is a result, not an error.\n"
"exit status: 0 done, 2 bad usage or input, 1 a probe failed otherwise\n",
            DEFAULT_STEPS, DEFAULT_MAX_BATCH);
}

enum {
    OPT_POLICIES = TRAIN_ARGS_EXT_BASE, OPT_MIN_THROUGHPUT, OPT_MAX_BATCH,
    OPT_PLOT,
};

static const struct option own_opts[] = {
    {"policies", required_argument, NULL, OPT_POLICIES},
    {"min-throughput", required_argument, NULL, OPT_MIN_THROUGHPUT},
    {"max-batch", required_argument, NULL, OPT_MAX_BATCH},
    {"plot", required_argument, NULL, OPT_PLOT},
    {NULL, 0, NULL, 0},
};

static int handle_opt(void *ud, int val, const char *opt, const char *a) {
    maxbatch *m = ud;
    char err[512];
    switch (val) {
    case OPT_POLICIES:
        return train_args_parse_policies(opt, a, m->policies_buf,
                                         sizeof m->policies_buf, m->policies,
                                         MAXBATCH_MAX_POLICIES, &m->n_policies);
    case OPT_MIN_THROUGHPUT:
        if (!parse_f64(opt, a, 0, 1, &m->min_throughput, err, sizeof err))
            return train_args_error("%s", err);
        return -1;
    case OPT_MAX_BATCH:
        if (!parse_i64(opt, a, 1, (int64_t)1 << 30, &m->max_batch, err,
                       sizeof err))
            return train_args_error("%s", err);
        return -1;
    case OPT_PLOT:
        if (!gnuplot_plain_path(a))
            return train_args_error("--plot %s: give a file name with no "
                                    "quotes, backslashes, '$' or '`'", a);
        m->plot = a;
        return -1;
    default: return train_args_error("unexpected option '%s'", opt);
    }
}

/* Parses and checks the options; -1 to go on, else the exit status. */
static int parse(maxbatch *m, int argc, char **argv) {
    memset(m, 0, sizeof *m);
    m->min_throughput = DEFAULT_MIN_THROUGHPUT;
    m->max_batch = DEFAULT_MAX_BATCH;
    train_args_ext ext = {
        .cmd = "maxbatch", .usage = usage, .opts = own_opts,
        .handle = handle_opt, .ud = m, .steps = DEFAULT_STEPS,
    };
    train_config *c = &m->cfg;
    int rc = train_args_parse(argc, argv, c, &ext);
    if (rc >= 0) return rc;
    if (c->run.model.batch)
        return train_args_error("--batch: maxbatch searches the batch "
                                "itself; leave --batch out (--max-batch "
                                "caps the search)");
    if (c->save || c->load || c->trace || c->run.seq_len_max)
        return train_args_error("%s does not apply to maxbatch",
                                c->save ? "--save" : c->load ? "--load"
                                : c->trace ? "--trace" : "--seq-len-range");
    if (c->steps < 1)
        return train_args_error("--steps: a probe needs at least 1 step");
    if (c->run.budget.kind == DELTA_BUDGET_PERCENT)
        return train_args_error("--budget: maxbatch needs the device's size "
                                "(e.g. 16GiB); a percentage of the peak "
                                "changes with the batch being searched");
    if (train_on(c, "cpu") && c->run.budget.kind != DELTA_BUDGET_BYTES)
        return train_args_error("on --backend cpu the device's memory is "
                                "--budget SIZE (e.g. --budget 64MiB); or "
                                "use --backend sim --gpu G");
    if (train_on(c, "cuda") && c->run.budget.kind != DELTA_BUDGET_BYTES)
        return train_args_error("on --backend cuda the device's memory is "
                                "--budget SIZE, the share of the GPU to "
                                "search in (e.g. --budget 8GiB)");
    rc = train_args_pick_policies(c, m->policies, MAXBATCH_MAX_POLICIES,
                                  &m->n_policies);
    if (rc >= 0) return rc;
    train_args_warn_steps("maxbatch", c->steps, m->policies, m->n_policies);
    /* --json is this command's (one line per policy), not the probes' */
    m->json = c->json;
    c->json = NULL;
    m->quiet = c->quiet;
    c->quiet = true;
    /* the probes measure; real data would only slow the cpu down */
    if (!c->run.data && train_on(c, "cpu")) c->run.data = "synthetic";
    c->run.eval_batches = 0;
    return -1;
}

/* Runs (or recalls) the probe of batch b for s. NULL when the probe
 * failed for a reason other than memory (s->err says why). */
static const probe *probe_batch(maxbatch *m, search *s, int64_t b,
                                double floor) {
    for (int i = 0; i < s->n_probes; i++)
        if (s->probes[i].batch == b) return &s->probes[i];
    DELTA_ASSERT(s->n_probes < MAXBATCH_MAX_PROBES);
    probe *p = &s->probes[s->n_probes++];
    memset(p, 0, sizeof *p);
    p->batch = b;
    train_config c = m->cfg;
    c.run.model.batch = b;
    c.run.policy = s->policy;
    c.run.budget = (delta_budget){.kind = DELTA_BUDGET_BYTES, .bytes = m->device_bytes};
    cell_run(&c, &p->cell);
    if (p->cell.status == CELL_FAILED) {
        snprintf(s->err, sizeof s->err, "%s at batch %" PRId64 ": %s",
                 s->policy, b, p->cell.err);
        return NULL;
    }
    p->pass = p->cell.status == CELL_OK;
    if (p->pass && floor > 0 && p->cell.samples_per_s < floor) {
        p->pass = false;
        p->below_floor = true;
    }
    if (!m->quiet) {
        if (p->cell.status != CELL_OK)
            fprintf(stderr, "  %s batch %" PRId64 ": does not fit (%.2f s)\n",
                    s->policy, b, p->cell.wall_s);
        else
            fprintf(stderr, "  %s batch %" PRId64 ": fits, step %.4g s, "
                    "%.1f samples/s%s (%.2f s)\n", s->policy, b,
                    p->cell.step_s, p->cell.samples_per_s,
                    p->below_floor ? ", below the floor" : "",
                    p->cell.wall_s);
        fflush(stderr);
    }
    return p;
}

/* The search described at the top; start is where bracketing begins. */
static void search_policy(maxbatch *m, search *s, int64_t start,
                          double floor) {
    double t0 = progress_now();
    int64_t cap = m->max_batch, lo = 0, hi = 0;
    if (start > cap) start = cap;
    const probe *p = probe_batch(m, s, start, floor);
    if (!p) goto failed;
    if (p->pass) {
        lo = start;
        while (lo < cap) {
            int64_t b = lo > cap / 2 ? cap : 2 * lo;
            if (!(p = probe_batch(m, s, b, floor))) goto failed;
            if (!p->pass) {
                hi = b;
                break;
            }
            lo = b;
        }
    } else {
        hi = start;
        for (int64_t b = start / 2; b >= 1; b /= 2) {
            if (!(p = probe_batch(m, s, b, floor))) goto failed;
            if (p->pass) {
                lo = b;
                break;
            }
            hi = b;
        }
    }
    while (hi && hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (!(p = probe_batch(m, s, mid, floor))) goto failed;
        if (p->pass) lo = mid;
        else hi = mid;
    }
    s->max_batch = lo;
    s->status = lo ? CELL_OK : CELL_INFEASIBLE;
    for (int i = 0; i < s->n_probes; i++) {
        if (s->probes[i].batch == lo) s->best = &s->probes[i];
        if (s->probes[i].batch == hi)
            s->limit = s->probes[i].below_floor ? "throughput" : "memory";
    }
    if (!hi) s->limit = "max-batch";
    s->search_s = progress_now() - t0;
    return;
failed:
    s->status = CELL_FAILED;
    s->search_s = progress_now() - t0;
}

/* ---- the command ----------------------------------------------------------- */

/* Checks the model options and sizes the device, through a dry plan of
 * batch 1 (bad input is reported before any search). */
static int check_setup(maxbatch *m) {
    /* its own outputs: only a regular file is replaced, before any work */
    char err[1024], dat[4200], gp[4200];
    delta_status ost = DELTA_OK;
    if (m->json) ost = outfile_check("--json", m->json, err, sizeof err);
    if (ost == DELTA_OK && m->plot) {
        maxbatch_plot_files(m->plot, dat, gp, sizeof dat);
        ost = outfile_check("--plot", m->plot, err, sizeof err);
        if (ost == DELTA_OK) ost = outfile_check("--plot", dat, err, sizeof err);
        if (ost == DELTA_OK) ost = outfile_check("--plot", gp, err, sizeof err);
    }
    if (ost != DELTA_OK) {
        fprintf(stderr, "delta maxbatch: %s\n", err);
        return 2;
    }
    train_config c = m->cfg;
    c.run.model.batch = 1;
    c.run.plan_only = true;
    trainer t;
    delta_status st = trainer_setup(&t, &c);
    if (st == DELTA_OK) {
        m->cfg.run.model.name = t.cfg.run.model.name;
        m->cfg.run.gpu = t.cfg.run.gpu;
        m->seq_len = t.image ? 0 : delta_trainer_main_model(t.tr)->cfg.seq_len;
        if (m->cfg.run.budget.kind == DELTA_BUDGET_BYTES) {
            m->device_bytes = m->cfg.run.budget.bytes;
        } else {
            /* cpu and cuda need --budget SIZE */
            const delta_gpu_preset *gpu = delta_trainer_gpu(t.tr);
            DELTA_ASSERT(gpu);
            m->device_bytes = (size_t)gpu->memory_bytes;
        }
    } else {
        fprintf(stderr, "delta maxbatch: %s\n", t.err);
    }
    trainer_free(&t);
    return st == DELTA_OK ? -1 : trainer_exit_code(st);
}

int cmd_maxbatch(int argc, char **argv) {
    maxbatch *m = calloc(1, sizeof *m);
    /* the keep search and one per policy: searches hold their probes */
    search *keep = calloc(1, sizeof *keep);
    search *res[MAXBATCH_MAX_POLICIES] = {0};
    json_log *json = NULL;
    int rc = m && keep ? parse(m, argc, argv) : 1;
    if (rc < 0) rc = check_setup(m);
    if (rc < 0 && m->json) {
        char err[512];
        json = json_log_open(m->json, false, err, sizeof err);
        if (!json) {
            fprintf(stderr, "delta maxbatch: %s\n", err);
            rc = 2;
        }
    }
    if (rc >= 0) goto done;
    double t0 = progress_now();
    keep->policy = "keep";
    if (!m->quiet) fprintf(stderr, "maxbatch: keep (the reference)\n");
    search_policy(m, keep, 1, 0);
    if (keep->status == CELL_FAILED) {
        fprintf(stderr, "delta maxbatch: %s\n", keep->err);
        rc = 1;
        goto done;
    }
    if (keep->max_batch)
        m->floor = m->min_throughput * keep->best->cell.samples_per_s;
    for (int i = 0; i < m->n_policies; i++) {
        if (!strcmp(m->policies[i], "keep")) {
            res[i] = keep;
            continue;
        }
        res[i] = calloc(1, sizeof *res[i]);
        if (!res[i]) {
            rc = 1;
            goto done;
        }
        res[i]->policy = m->policies[i];
        if (!m->quiet) fprintf(stderr, "maxbatch: %s\n", m->policies[i]);
        search_policy(m, res[i], keep->max_batch ? keep->max_batch : 1,
                      m->floor);
    }
    maxbatch_print(m, res, m->n_policies, keep);
    printf("searched in %.2f s\n", progress_now() - t0);
    fflush(stdout);
    rc = 0;
    for (int i = 0; i < m->n_policies; i++)
        if (res[i]->status == CELL_FAILED) rc = 1;
    if (json) {
        int jrc = maxbatch_write_json(m, json, res, m->n_policies, keep);
        json = NULL;
        if (jrc) rc = jrc;
    }
    if (m->plot && !maxbatch_write_plot(m, res, m->n_policies)) rc = 1;
done:
    if (json) {
        char err[512];
        json_log_close(json, err, sizeof err);
    }
    for (int i = 0; i < MAXBATCH_MAX_POLICIES; i++)
        if (res[i] != keep) free(res[i]);
    free(keep);
    free(m);
    return rc;
}
