/* `delta bench`: options, then the grid (see bench.h). Per model: keep
 * with an unlimited budget (the reference every overhead divides by),
 * every policy at every budget, then one traced run per policy at the
 * timeline budget for the memory plot. A cell that is infeasible or fails
 * is recorded and the grid goes on; progress goes to stderr. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "commands.h"
#include "delta/delta.h"
#include "gnuplot.h"
#include "outfile.h"
#include "progress.h"
#include "train_args.h"

#define DEFAULT_STEPS TRAIN_ARGS_DELTA_MIN_STEPS
#define DEFAULT_BUDGETS "90%,70%,50%,40%,30%"

static void usage(FILE *f) {
    fprintf(f,
"usage: delta bench --models LIST --out DIR [options]\n"
"\n"
"Runs every model x policy x budget on one backend and writes, into DIR:\n"
"  results.csv    one row per cell: model, policy, budget, status (ok,\n"
"                 infeasible, failed), median step, overhead against keep\n"
"                 with an unlimited budget, peak, bytes swapped, ops\n"
"                 recomputed and seconds stalled per step, ...\n"
"  results.md     per model, the overhead table (policies x budgets)\n"
"  overhead_MODEL.png  overhead against budget, one line per policy\n"
"  memory_MODEL.png    device memory through one step, one line per policy\n"
"                 at the timeline budget, and keep unlimited\n"
"  plots.gp, data/     the plots' gnuplot script and data (the PNGs need\n"
"                 gnuplot: Debian's gnuplot-nox)\n"
"  traces/        the timeline runs' Chrome traces\n"
"\n"
"options (besides train's model and optimizer options, e.g. --batch,\n"
"--seq-len, --image-size, --optimizer, applied to every model):\n"
"  --models LIST        comma-separated, e.g. resnet50,gpt2-small (or\n"
"                       --model NAME)\n"
"  --policies LIST      default: every policy (or --policy P)\n"
"  --budgets LIST       percentages of each model's unconstrained peak or\n"
"                       sizes, e.g. 90%%,50%%,1GiB (default %s)\n"
"                       or --budget B; 'unlimited' is allowed\n"
"  --backend cpu|sim --gpu G   as train (default cpu); --gpu-file FILE\n"
"                       instead of --gpu: a device file (delta calibrate)\n"
"  --steps N            steps per cell (default %d); the step time is the\n"
"                       median over the steps after the first third\n"
"  --repeat N           run the whole grid N times, in rounds, and keep\n"
"                       each cell's run of median step time (default 1;\n"
"                       for a shared, noisy cpu)\n"
"  --timeline-budget B  the budget of the memory plot: one of --budgets,\n"
"                       or none (default: the middle one of the list)\n"
"  --out DIR            where the results go (created)\n"
"  --quiet              no progress on stderr\n"
"  (on cpu, --data defaults to synthetic: the cells measure, not learn)\n"
"  -h, --help           this help\n"
"\n"
"exit status: 0 the grid ran (whatever its cells did), 2 bad usage or\n"
"input, 1 the results could not be written\n", DEFAULT_BUDGETS,
            DEFAULT_STEPS);
}

enum {
    OPT_MODELS = TRAIN_ARGS_EXT_BASE, OPT_POLICIES, OPT_BUDGETS, OPT_OUT,
    OPT_TIMELINE_BUDGET, OPT_REPEAT,
};

static const struct option own_opts[] = {
    {"models", required_argument, NULL, OPT_MODELS},
    {"policies", required_argument, NULL, OPT_POLICIES},
    {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"out", required_argument, NULL, OPT_OUT},
    {"timeline-budget", required_argument, NULL, OPT_TIMELINE_BUDGET},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {NULL, 0, NULL, 0},
};

typedef struct bench_args {
    bench *b;
    const char *timeline;       /* --timeline-budget as given */
} bench_args;

static int parse_budgets(bench *b, const char *opt, const char *a) {
    char err[512];
    if (!parse_list(opt, a, b->lists[2], sizeof b->lists[2], b->budget_label,
                    BENCH_MAX_BUDGETS, &b->n_budgets, err, sizeof err))
        return train_args_error("%s", err);
    for (int i = 0; i < b->n_budgets; i++)
        if (!parse_budget(opt, b->budget_label[i], &b->budgets[i], err,
                          sizeof err))
            return train_args_error("%s", err);
    return -1;
}

static int handle_opt(void *ud, int val, const char *opt, const char *a) {
    bench_args *ba = ud;
    bench *b = ba->b;
    char err[512];
    switch (val) {
    case OPT_MODELS:
        if (!parse_list(opt, a, b->lists[0], sizeof b->lists[0], b->models,
                        BENCH_MAX_MODELS, &b->n_models, err, sizeof err))
            return train_args_error("%s", err);
        return -1;
    case OPT_POLICIES:
        return train_args_parse_policies(opt, a, b->lists[1],
                                         sizeof b->lists[1], b->policies,
                                         BENCH_MAX_POLICIES, &b->n_policies);
    case OPT_BUDGETS: return parse_budgets(b, opt, a);
    case OPT_OUT: b->out = a; return -1;
    case OPT_TIMELINE_BUDGET: ba->timeline = a; return -1;
    case OPT_REPEAT: {
        char *end;
        errno = 0;
        long v = strtol(a, &end, 10);
        if (errno || end == a || *end || v < 1 || v > 100)
            return train_args_error("%s: expected a whole number from 1 to "
                                    "100, got '%s'", opt, a);
        b->repeat = (int)v;
        return -1;
    }
    default: return train_args_error("unexpected option '%s'", opt);
    }
}

static int parse(bench *b, int argc, char **argv) {
    bench_args ba = {.b = b};
    b->timeline_budget = -1;
    b->repeat = 1;
    train_args_ext ext = {
        .cmd = "bench", .usage = usage, .opts = own_opts,
        .handle = handle_opt, .ud = &ba, .model_optional = true,
        .steps = DEFAULT_STEPS,
    };
    train_config *c = &b->base;
    int rc = train_args_parse(argc, argv, c, &ext);
    if (rc >= 0) return rc;
    if (c->run.model.name && b->n_models)
        return train_args_error("--model and --models both choose models; "
                                "give one of them");
    if (c->run.model.name) b->models[b->n_models++] = c->run.model.name;
    if (!b->n_models)
        return train_args_error("no model given: use --models LIST (e.g. "
                                "--models gpt2-tiny,resnet18)");
    rc = train_args_pick_policies(c, b->policies, BENCH_MAX_POLICIES,
                                  &b->n_policies);
    if (rc >= 0) return rc;
    if (c->run.budget.kind != DELTA_BUDGET_UNLIMITED && b->n_budgets)
        return train_args_error("--budget and --budgets both set budgets; "
                                "give one of them");
    if (c->run.budget.kind != DELTA_BUDGET_UNLIMITED) {
        /* one budget, as train takes it */
        if (c->run.budget.kind == DELTA_BUDGET_PERCENT)
            snprintf(b->lists[2], sizeof b->lists[2], "%g%%",
                     c->run.budget.percent);
        else
            delta_format_bytes((double)c->run.budget.bytes, b->lists[2],
                               sizeof b->lists[2]);
        b->budget_label[0] = b->lists[2];
        b->budgets[0] = c->run.budget;
        b->n_budgets = 1;
        c->run.budget.kind = DELTA_BUDGET_UNLIMITED;
    }
    if (!b->n_budgets) {
        rc = parse_budgets(b, "--budgets", DEFAULT_BUDGETS);
        if (rc >= 0) return rc;
    }
    if (!b->out)
        return train_args_error("no output directory: use --out DIR");
    if (!gnuplot_plain_path(b->out))
        return train_args_error("--out %s: give a directory whose name "
                                "has no quotes, backslashes, '$' or '`'",
                                b->out);
    if (c->save || c->load || c->trace || c->json || c->run.seq_len_max)
        return train_args_error("%s does not apply to bench (it writes its "
                                "results into --out)",
                                c->save ? "--save" : c->load ? "--load"
                                : c->trace ? "--trace" : c->json ? "--json"
                                : "--seq-len-range");
    if (c->steps < 1)
        return train_args_error("--steps: a cell needs at least 1 step");
    train_args_warn_steps("bench", c->steps, b->policies, b->n_policies);
    for (int i = 0; i < b->n_models; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(b->models[i], b->models[j]))
                return train_args_error("--models names %s twice",
                                        b->models[i]);
    if (!ba.timeline) {
        b->timeline_budget = b->n_budgets / 2;
    } else if (strcmp(ba.timeline, "none")) {
        for (int i = 0; i < b->n_budgets; i++)
            if (!strcmp(ba.timeline, b->budget_label[i]))
                b->timeline_budget = i;
        if (b->timeline_budget < 0)
            return train_args_error("--timeline-budget %s is not one of "
                                    "--budgets; give one of them or none",
                                    ba.timeline);
    }
    b->quiet = c->quiet;
    c->quiet = true;
    c->run.eval_batches = 0;
    /* the cells measure; real data would only slow the cpu down */
    if (!c->run.data && train_on(c, "cpu")) c->run.data = "synthetic";
    return -1;
}

/* Each model's config, checked by a dry plan before anything runs. */
static int setup_models(bench *b) {
    b->m = calloc((size_t)b->n_models, sizeof *b->m);
    if (!b->m) return 1;
    for (int i = 0; i < b->n_models; i++) {
        bench_model *bm = &b->m[i];
        bm->cfg = b->base;
        bm->cfg.run.model.name = b->models[i];
        /* --hidden is mlp's hidden width (as train reads it) */
        if (!strcmp(b->models[i], "mlp") && bm->cfg.run.model.hidden) {
            bm->cfg.run.model.mlp_hidden = bm->cfg.run.model.hidden;
            bm->cfg.run.model.hidden = 0;
        }
        train_config c = bm->cfg;
        c.run.plan_only = true;
        trainer t;
        delta_status st = trainer_setup(&t, &c);
        if (st == DELTA_OK) {
            bm->name = t.cfg.run.model.name;
            bm->cfg.run.model.name = bm->name;
            bm->cfg.run.model.batch = t.cfg.run.model.batch;
            bm->cfg.run.gpu = t.cfg.run.gpu;
            const delta_model_config *m =
                &delta_trainer_main_model(t.tr)->cfg;
            bm->batch = m->batch;
            bm->seq_len = t.image ? 0 : m->seq_len;
            bm->image_size = t.image ? m->image_size : 0;
            bm->optimizer = delta_trainer_optimizer(t.tr, NULL, NULL, NULL);
        } else {
            fprintf(stderr, "delta bench: %s: %s\n", b->models[i], t.err);
        }
        trainer_free(&t);
        if (st != DELTA_OK) return trainer_exit_code(st);
    }
    return -1;
}

/* Every file bench writes into --out may only replace a regular file or be
 * created (outfile.h): checked before the grid runs. 2 and a message when
 * one may not. */
static int check_outputs(const bench *b) {
    char err[1024], path[4096];
    static const char *const dirs[] = {"", "/data", "/traces"};
    static const char *const files[] = {"/results.csv", "/results.md",
                                        "/plots.gp"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s%s", b->out, dirs[k]);
        if (outfile_check_dir("--out", path, err, sizeof err) != DELTA_OK)
            goto refused;
    }
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s%s", b->out, files[k]);
        if (outfile_check("--out", path, err, sizeof err) != DELTA_OK)
            goto refused;
    }
    for (int i = 0; i < b->n_models; i++) {
        const char *name = b->m[i].name;
        static const char *const per_model[] = {
            "%s/overhead_%s.png", "%s/memory_%s.png",
            "%s/data/overhead_%s.dat"};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, per_model[k], b->out, name);
            if (outfile_check("--out", path, err, sizeof err) != DELTA_OK)
                goto refused;
        }
        for (int p = 0; p <= b->n_policies; p++) {
            const char *pol = p == b->n_policies ? "keep-unlimited"
                                                 : b->policies[p];
            snprintf(path, sizeof path, "%s/data/memory_%s_%s.dat", b->out,
                     name, pol);
            if (outfile_check("--out", path, err, sizeof err) != DELTA_OK)
                goto refused;
            bench_trace_path(b, i, p, path, sizeof path);
            if (outfile_check("--out", path, err, sizeof err) != DELTA_OK)
                goto refused;
        }
    }
    return -1;
refused:
    fprintf(stderr, "delta bench: %s\n", err);
    return 2;
}

static int make_dir(const char *path) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) return 0;
    fprintf(stderr, "delta bench: cannot create %s: %s\n", path,
            strerror(errno));
    return 1;
}

/* ---- the grid -------------------------------------------------------------- */

typedef struct grid_progress {
    int done, total;
    double t0;
    bool quiet;
} grid_progress;

static void report_cell(grid_progress *g, const bench_model *bm,
                        const char *what, const cell_result *r) {
    g->done++;
    if (g->quiet) return;
    double ov = bench_overhead(bm, r);
    fprintf(stderr, "[%d/%d] %s %s: %s", g->done, g->total, bm->name, what,
            cell_status_name(r->status));
    if (r->status == CELL_OK) {
        fprintf(stderr, ", step %.4g s", r->step_s);
        if (!isnan(ov)) fprintf(stderr, ", %.2fx", ov);
    }
    fprintf(stderr, " (%.1f s; %.0f s in all)\n", r->wall_s,
            progress_now() - g->t0);
    if (r->status == CELL_FAILED)
        fprintf(stderr, "    %s\n", r->err);
    fflush(stderr);
}

static void run_cell(const bench_model *bm, const char *policy,
                     delta_budget budget, const char *trace,
                     cell_result *r) {
    train_config c = bm->cfg;
    c.run.policy = policy;
    c.run.budget = budget;
    c.trace = trace;
    cell_run(&c, r);
}

/* The index of the run to keep among n runs of one cell: the one of median
 * step time when all ran, else the first that did not (a budget that does
 * not fit does not fit every time). */
static int median_run(const cell_result *runs, int n) {
    for (int i = 0; i < n; i++)
        if (runs[i].status != CELL_OK) return i;
    int order[100];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && runs[order[j]].step_s <
                                     runs[order[j - 1]].step_s; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return order[(n - 1) / 2];
}

static void run_grid(bench *b) {
    grid_progress g = {.t0 = progress_now(), .quiet = b->quiet};
    int timeline = b->timeline_budget >= 0 ? b->n_policies + 1 : 0;
    int reps = b->repeat, cells = 1 + b->n_policies * b->n_budgets;
    g.total = b->n_models * (cells * reps + timeline);
    const delta_budget unlimited = {.kind = DELTA_BUDGET_UNLIMITED};
    char what[128], path[4096];
    /* every run of every cell of a model, [cell][rep]; cell 0 is keep */
    cell_result *runs = calloc((size_t)cells * (size_t)reps, sizeof *runs);
    DELTA_ASSERTF(runs, "out of memory for %d cells x %d runs", cells, reps);
    for (int i = 0; i < b->n_models; i++) {
        bench_model *bm = &b->m[i];
        /* in rounds, so a slow spell of a shared machine hits every
         * policy alike rather than one */
        for (int rep = 0; rep < reps; rep++) {
            run_cell(bm, "keep", unlimited, NULL, &runs[rep]);
            if (rep == 0) bm->ref = runs[0];
            report_cell(&g, bm, "keep unlimited (the reference)", &runs[rep]);
            for (int k = 0; k < b->n_budgets; k++)
                for (int p = 0; p < b->n_policies; p++) {
                    cell_result *r = &runs[(1 + k * b->n_policies + p) *
                                           reps + rep];
                    run_cell(bm, b->policies[p], b->budgets[k], NULL, r);
                    snprintf(what, sizeof what, "%s %s", b->policies[p],
                             b->budget_label[k]);
                    report_cell(&g, bm, what, r);
                }
        }
        bm->ref = runs[median_run(runs, reps)];
        for (int k = 0; k < b->n_budgets; k++)
            for (int p = 0; p < b->n_policies; p++) {
                const cell_result *r = &runs[(1 + k * b->n_policies + p) * reps];
                bm->cells[p][k] = r[median_run(r, reps)];
            }
        if (!timeline) continue;
        /* the traced runs: only where the measured cell ran */
        int k = b->timeline_budget;
        for (int p = 0; p <= b->n_policies; p++) {
            bool ref = p == b->n_policies;
            const cell_result *measured = ref ? &bm->ref : &bm->cells[p][k];
            if (measured->status != CELL_OK) {
                g.done++;
                continue;
            }
            cell_result r;
            bench_trace_path(b, i, p, path, sizeof path);
            run_cell(bm, ref ? "keep" : b->policies[p],
                     ref ? unlimited : b->budgets[k], path, &r);
            bm->timeline_ok[p] = r.status == CELL_OK;
            if (!ref && r.status == CELL_OK)
                bm->timeline_budget_bytes = r.budget_bytes;
            snprintf(what, sizeof what, "%s %s (traced, for the timeline)",
                     ref ? "keep" : b->policies[p],
                     ref ? "unlimited" : b->budget_label[k]);
            report_cell(&g, bm, what, &r);
        }
    }
    free(runs);
}

int cmd_bench(int argc, char **argv) {
    bench *b = calloc(1, sizeof *b);
    if (!b) return 1;
    int rc = parse(b, argc, argv);
    if (rc < 0) rc = setup_models(b);
    if (rc < 0) rc = check_outputs(b);
    if (rc < 0) {
        char traces[4096];
        snprintf(traces, sizeof traces, "%s/traces", b->out);
        rc = make_dir(b->out) || make_dir(traces) ? 1 : -1;
    }
    if (rc < 0) {
        run_grid(b);
        rc = bench_write_tables(b) && bench_write_plots(b) ? 0 : 1;
        if (rc == 0 && !b->quiet)
            fprintf(stderr, "delta bench: results in %s/results.md, "
                    "results.csv and the PNGs beside them\n", b->out);
    }
    free(b->m);
    free(b);
    return rc;
}
