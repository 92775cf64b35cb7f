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
#include "json_log.h"
#include "parse.h"
#include "progress.h"
#include "train_args.h"
#include "trainer.h"

#define MAX_POLICIES 16
#define MAX_PROBES 96
#define DEFAULT_STEPS 12
#define DEFAULT_MIN_THROUGHPUT 0.75
#define DEFAULT_MAX_BATCH 65536

static void usage(FILE *f) {
    fprintf(f,
"usage: delta maxbatch --model NAME [--policy P | --policies LIST]\n"
"                      (--backend sim --gpu G | --backend cpu --budget SIZE)\n"
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
"                       (--budget SIZE overrides it)\n"
"  --backend cpu --budget SIZE  the cpu backend with an emulated device of\n"
"                       SIZE (e.g. 64MiB)\n"
"  --min-throughput F   count only batches whose samples/s are at least F\n"
"                       times keep's samples/s at keep's largest batch\n"
"                       (default 0.75; 0 counts every batch that fits)\n"
"  --steps N            steps per probe (default %d)\n"
"  --max-batch N        largest batch tried (default %d)\n"
"  --json FILE          one JSON object per line, one per policy\n"
"  --quiet              no progress on stderr\n"
"  -h, --help           this help\n"
"\n"
"A policy that cannot train even batch 1 is reported with max batch 0\n"
"(infeasible); that is a result, not an error.\n"
"exit status: 0 done, 2 bad usage or input, 1 a probe failed otherwise\n",
            DEFAULT_STEPS, DEFAULT_MAX_BATCH);
}

enum { OPT_POLICIES = TRAIN_ARGS_EXT_BASE, OPT_MIN_THROUGHPUT, OPT_MAX_BATCH };

static const struct option own_opts[] = {
    {"policies", required_argument, NULL, OPT_POLICIES},
    {"min-throughput", required_argument, NULL, OPT_MIN_THROUGHPUT},
    {"max-batch", required_argument, NULL, OPT_MAX_BATCH},
    {NULL, 0, NULL, 0},
};

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
    probe probes[MAX_PROBES];
    int n_probes;
    double search_s;
    char err[1024];
} search;

typedef struct maxbatch {
    train_config cfg;           /* as parsed; batch and policy per probe */
    const char *policies[MAX_POLICIES];
    int n_policies;
    char policies_buf[512];
    double min_throughput;
    int64_t max_batch;
    const char *json;
    bool quiet;
    size_t device_bytes;
    double floor;               /* samples/s a batch must reach; 0: none */
} maxbatch;

static int handle_opt(void *ud, int val, const char *opt, const char *a) {
    maxbatch *m = ud;
    char err[512];
    switch (val) {
    case OPT_POLICIES:
        if (!parse_list(opt, a, m->policies_buf, sizeof m->policies_buf,
                        m->policies, MAX_POLICIES, &m->n_policies, err,
                        sizeof err))
            return train_args_error("%s", err);
        for (int i = 0; i < m->n_policies; i++) {
            int rc = train_args_check_policy(m->policies[i]);
            if (rc >= 0) return rc;
        }
        return -1;
    case OPT_MIN_THROUGHPUT:
        if (!parse_f64(opt, a, 0, 1, &m->min_throughput, err, sizeof err))
            return train_args_error("%s", err);
        return -1;
    case OPT_MAX_BATCH:
        if (!parse_i64(opt, a, 1, (int64_t)1 << 30, &m->max_batch, err,
                       sizeof err))
            return train_args_error("%s", err);
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
    if (c->model.batch)
        return train_args_error("--batch: maxbatch searches the batch "
                                "itself; leave --batch out (--max-batch "
                                "caps the search)");
    if (c->save || c->load || c->trace || c->seq_len_max)
        return train_args_error("%s does not apply to maxbatch",
                                c->save ? "--save" : c->load ? "--load"
                                : c->trace ? "--trace" : "--seq-len-range");
    if (c->policy && m->n_policies)
        return train_args_error("--policy and --policies both choose "
                                "policies; give one of them");
    if (c->steps < 1)
        return train_args_error("--steps: a probe needs at least 1 step");
    if (c->budget.kind == BUDGET_PERCENT)
        return train_args_error("--budget: maxbatch needs the device's size "
                                "(e.g. 16GiB); a percentage of the peak "
                                "changes with the batch being searched");
    if (c->backend == TRAIN_BACKEND_CPU && c->budget.kind != BUDGET_BYTES)
        return train_args_error("on --backend cpu the device's memory is "
                                "--budget SIZE (e.g. --budget 64MiB); or "
                                "use --backend sim --gpu G");
    if (c->policy) m->policies[m->n_policies++] = c->policy;
    if (!m->n_policies)
        for (const char *const *p = delta_session_policies(); *p; p++)
            if (m->n_policies < MAX_POLICIES)
                m->policies[m->n_policies++] = *p;
    /* --json is this command's (one line per policy), not the probes' */
    m->json = c->json;
    c->json = NULL;
    m->quiet = c->quiet;
    c->quiet = true;
    /* the probes measure; real data would only slow the cpu down */
    if (!c->data && c->backend == TRAIN_BACKEND_CPU) c->data = "synthetic";
    c->eval_batches = 0;
    return -1;
}

/* Runs (or recalls) the probe of batch b for s. NULL when the probe
 * failed for a reason other than memory (s->err says why). */
static const probe *probe_batch(maxbatch *m, search *s, int64_t b,
                                double floor) {
    for (int i = 0; i < s->n_probes; i++)
        if (s->probes[i].batch == b) return &s->probes[i];
    DELTA_ASSERT(s->n_probes < MAX_PROBES);
    probe *p = &s->probes[s->n_probes++];
    memset(p, 0, sizeof *p);
    p->batch = b;
    train_config c = m->cfg;
    c.model.batch = b;
    c.policy = s->policy;
    c.budget = (budget_spec){.kind = BUDGET_BYTES, .bytes = m->device_bytes};
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

/* ---- report ---------------------------------------------------------------- */

static double ratio_to_keep(const search *s, const search *keep) {
    if (s->status == CELL_FAILED || !keep->max_batch) return NAN;
    return (double)s->max_batch / (double)keep->max_batch;
}

static void print_header(const maxbatch *m, const search *keep,
                         const cell_result *shape) {
    const train_config *c = &m->cfg;
    char dev[32];
    delta_format_bytes((double)m->device_bytes, dev, sizeof dev);
    printf("%s", c->model.name);
    if (shape && shape->seq_len) printf(", T %" PRId64, shape->seq_len);
    if (c->backend == TRAIN_BACKEND_SIM)
        printf(" on simulated %s, device %s", c->gpu ? c->gpu : "v100-16g",
               dev);
    else
        printf(" on cpu, emulated device %s", dev);
    printf("; %" PRId64 " steps per probe (step time: median of steps %"
           PRId64 "-%" PRId64 ")\n", c->steps, c->steps / 3 + 1, c->steps);
    if (keep->max_batch)
        printf("keep: largest batch %" PRId64 " at %.1f samples/s; floor "
               "%.2f x that = %.1f samples/s\n", keep->max_batch,
               keep->best->cell.samples_per_s, m->min_throughput, m->floor);
    else
        printf("keep: not even batch 1 fits, so there is no ratio and no "
               "throughput floor\n");
}

static void print_row(const search *s, const search *keep) {
    char ratio[16], peak[32];
    if (s->status == CELL_FAILED) {
        printf("%-11s %9s  %s\n", s->policy, "failed", s->err);
        return;
    }
    double r = ratio_to_keep(s, keep);
    if (isnan(r)) snprintf(ratio, sizeof ratio, "-");
    else snprintf(ratio, sizeof ratio, "%.2fx", r);
    if (!s->max_batch) {
        printf("%-11s %9d %7s %12s %10s %10s %6d  infeasible\n", s->policy,
               0, ratio, "-", "-", "-", s->n_probes);
        return;
    }
    const cell_result *b = &s->best->cell;
    delta_format_bytes((double)b->peak_bytes, peak, sizeof peak);
    printf("%-11s %9" PRId64 " %7s %12.1f %10.4g %10s %6d  %s\n", s->policy,
           s->max_batch, ratio, b->samples_per_s, b->step_s, peak,
           s->n_probes, s->limit);
}

static cJSON *row_json(const maxbatch *m, const search *s,
                       const search *keep) {
    const train_config *c = &m->cfg;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const cell_result *b = s->best ? &s->best->cell : NULL;
    cJSON_AddStringToObject(o, "policy", s->policy);
    cJSON_AddStringToObject(o, "model", c->model.name);
    cJSON_AddStringToObject(o, "backend",
                            c->backend == TRAIN_BACKEND_SIM ? "sim" : "cpu");
    if (c->backend == TRAIN_BACKEND_SIM)
        cJSON_AddStringToObject(o, "gpu", c->gpu ? c->gpu : "v100-16g");
    else
        cJSON_AddNullToObject(o, "gpu");
    cJSON_AddStringToObject(o, "status", cell_status_name(s->status));
    cJSON_AddNumberToObject(o, "max_batch", (double)s->max_batch);
    json_add_number_or_null(o, "samples_per_s", b ? b->samples_per_s : NAN);
    if (b && b->seq_len)
        cJSON_AddNumberToObject(o, "tokens_per_s",
                                b->samples_per_s * (double)b->seq_len);
    json_add_number_or_null(o, "ratio_to_keep", ratio_to_keep(s, keep));
    json_add_number_or_null(o, "step_s", b ? b->step_s : NAN);
    json_add_number_or_null(o, "peak_bytes", b ? (double)b->peak_bytes : NAN);
    cJSON_AddNumberToObject(o, "device_bytes", (double)m->device_bytes);
    json_add_number_or_null(o, "baseline_peak_bytes",
                            b ? (double)b->baseline_peak_bytes : NAN);
    json_add_number_or_null(o, "swap_out_bytes_per_step",
                            b ? b->swap_out_bytes : NAN);
    json_add_number_or_null(o, "recomputed_ops_per_step",
                            b ? b->recomputed_ops : NAN);
    json_add_number_or_null(o, "stall_s_per_step", b ? b->stall_s : NAN);
    if (s->limit) cJSON_AddStringToObject(o, "limited_by", s->limit);
    else cJSON_AddNullToObject(o, "limited_by");
    cJSON_AddNumberToObject(o, "min_throughput", m->min_throughput);
    cJSON_AddNumberToObject(o, "floor_samples_per_s", m->floor);
    cJSON_AddNumberToObject(o, "keep_max_batch", (double)keep->max_batch);
    cJSON_AddNumberToObject(o, "steps", (double)c->steps);
    if (b && b->seq_len) cJSON_AddNumberToObject(o, "seq_len",
                                                 (double)b->seq_len);
    cJSON_AddNumberToObject(o, "search_s", s->search_s);
    if (s->status == CELL_FAILED) cJSON_AddStringToObject(o, "error", s->err);
    cJSON *ps = cJSON_AddArrayToObject(o, "probes");
    for (int i = 0; ps && i < s->n_probes; i++) {
        const probe *p = &s->probes[i];
        cJSON *q = cJSON_CreateObject();
        if (!q) break;
        cJSON_AddNumberToObject(q, "batch", (double)p->batch);
        cJSON_AddStringToObject(q, "status", cell_status_name(p->cell.status));
        cJSON_AddBoolToObject(q, "pass", p->pass);
        json_add_number_or_null(q, "samples_per_s",
                                p->cell.status == CELL_OK
                                    ? p->cell.samples_per_s : NAN);
        json_add_number_or_null(q, "peak_bytes",
                                p->cell.status == CELL_OK
                                    ? (double)p->cell.peak_bytes : NAN);
        cJSON_AddItemToArray(ps, q);
    }
    return o;
}

static int write_json(const maxbatch *m, search *const *res, int n,
                      const search *keep) {
    char err[512];
    json_log *l = json_log_open(m->json, err, sizeof err);
    if (!l) {
        fprintf(stderr, "delta maxbatch: %s\n", err);
        return 2;
    }
    bool ok = true;
    for (int i = 0; i < n; i++) {
        cJSON *o = row_json(m, res[i], keep);
        ok = o && json_log_write(l, o) && ok;
        cJSON_Delete(o);
    }
    ok = json_log_close(l, err, sizeof err) && ok;
    if (!ok) {
        fprintf(stderr, "delta maxbatch: --json %s: %s\n", m->json, err);
        return 1;
    }
    return 0;
}

/* ---- the command ----------------------------------------------------------- */

/* Checks the model options and sizes the device, through a dry plan of
 * batch 1 (bad input is reported before any search). */
static int check_setup(maxbatch *m) {
    train_config c = m->cfg;
    c.model.batch = 1;
    c.plan_only = true;
    trainer t;
    delta_status st = trainer_setup(&t, &c);
    if (st == DELTA_OK) {
        m->cfg.model.name = t.cfg.model.name;
        m->cfg.gpu = t.cfg.gpu;
        if (m->cfg.budget.kind == BUDGET_BYTES) {
            m->device_bytes = m->cfg.budget.bytes;
        } else {
            const delta_gpu_preset *g = delta_gpu_preset_find(t.cfg.gpu);
            DELTA_ASSERT(g);
            m->device_bytes = (size_t)g->memory_bytes;
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
    search *res[MAX_POLICIES] = {0};
    int rc = m && keep ? parse(m, argc, argv) : 1;
    if (rc < 0) rc = check_setup(m);
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
    print_header(m, keep, keep->best ? &keep->best->cell : NULL);
    printf("%-11s %9s %7s %12s %10s %10s %6s  %s\n", "policy", "max batch",
           "x keep", "samples/s", "step s", "peak", "probes",
           "next batch up is limited by");
    rc = 0;
    for (int i = 0; i < m->n_policies; i++) {
        print_row(res[i], keep);
        if (res[i]->status == CELL_FAILED) rc = 1;
    }
    printf("searched in %.2f s\n", progress_now() - t0);
    fflush(stdout);
    if (m->json) {
        int jrc = write_json(m, res, m->n_policies, keep);
        if (jrc) rc = jrc;
    }
done:
    for (int i = 0; i < MAX_POLICIES; i++)
        if (res[i] != keep) free(res[i]);
    free(keep);
    free(m);
    return rc;
}
