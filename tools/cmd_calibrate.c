/* `delta calibrate`: measures a backend (the library's delta_calibrate:
 * GEMM, convolution, elementwise and reduction kernels by size, the host
 * link per direction, the host's launch and wait costs), then runs keep
 * steps of one or two programs on it and compares their ops, op type by op
 * type, with what the simulator predicts from those figures; each type's
 * measured / predicted becomes its factor. The description goes to --out
 * as a device file (docs/DEVICE.md, "Device files") that `--backend sim
 * --gpu-file FILE` simulates; the report goes to stdout, progress to
 * stderr. Last, the same programs run on the simulator with the file, as a
 * check of what it predicts for them. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell.h"
#include "commands.h"
#include "core/median.h"
#include "delta/delta.h"
#include "outfile.h"
#include "train_args.h"
#include "trainer.h"

#define DEFAULT_STEPS 10
#define QUICK_STEPS 3
#define MAX_PROGRAMS 2
#define MAX_STEPS 50

static void usage(FILE *f) {
    fprintf(f,
"usage: delta calibrate --backend cpu|cuda --out FILE [--quick]\n"
"                       [--model NAME [model options]] [options]\n"
"\n"
"Measures the backend through the interface the runtime drives: GEMM\n"
"efficiency by size, convolutions on ResNet shapes, elementwise and\n"
"reduction bandwidth, the host link per direction (rate and latency), the\n"
"host's cost to launch a kernel and to wake from a blocking wait. Then it\n"
"runs keep steps of a program on the backend and compares each op type's\n"
"measured time with the simulator's prediction from those figures; the\n"
"ratio becomes the type's factor. Writes a device file for\n"
"'--backend sim --gpu-file FILE' (docs/DEVICE.md, \"Device files\").\n"
"\n"
"options:\n"
"  --out FILE           the device file (written atomically; only a\n"
"                       regular file is replaced)\n"
"  --backend NAME       cpu (default) or cuda; sim (with --gpu or\n"
"                       --gpu-file) calibrates the simulator itself, a check\n"
"  --quick              fewer, smaller measurements (seconds; for tests)\n"
"  --name NAME          the description's name (default BACKEND-calibrated)\n"
"  --model NAME         the program whose keep steps are traced, with\n"
"                       train's model and optimizer options (--batch,\n"
"                       --width, --seq-len, ...). Default: two small ones,\n"
"                       on cpu resnet18 (width 8, 3x32x32, batch 16, SGD)\n"
"                       and gpt2-tiny (2 layers, 128 wide, T 64, batch 4,\n"
"                       AdamW); on cuda resnet50 (3x224x224, batch 32, SGD)\n"
"                       and gpt2-small (T 1024, batch 4, AdamW)\n"
"  --steps N            keep steps measured per program, after a warm-up\n"
"                       step (default %d; --quick %d); each op's time is\n"
"                       its median\n"
"  --threads N          CPU threads (default: all cores)\n"
"  --link-bw GB/s       cpu: the emulated link to measure (default: the\n"
"                       backend's default, 1 byte per 1,000 GEMM flops, as\n"
"                       train uses with a budget)\n"
"  --quiet              no progress on stderr\n"
"  -h, --help           this help\n"
"\n"
"exit status: 0 written, 2 bad usage or input, 1 a measurement or the\n"
"write failed\n", DEFAULT_STEPS, QUICK_STEPS);
}

enum { OPT_OUT = TRAIN_ARGS_EXT_BASE, OPT_QUICK, OPT_NAME };

static const struct option own_opts[] = {
    {"out", required_argument, NULL, OPT_OUT},
    {"quick", no_argument, NULL, OPT_QUICK},
    {"name", required_argument, NULL, OPT_NAME},
    {NULL, 0, NULL, 0},
};

typedef struct calib_args {
    const char *out, *name;
    bool quick;
    bool steps_given;
} calib_args;

static int handle_opt(void *ud, int val, const char *opt, const char *a) {
    calib_args *ca = ud;
    (void)opt;
    switch (val) {
    case OPT_OUT: ca->out = a; return -1;
    case OPT_QUICK: ca->quick = true; return -1;
    case OPT_NAME: ca->name = a; return -1;
    default: return train_args_error("unexpected option '%s'", opt);
    }
}

/* A model option given without --model (the defaults have their own). */
static bool model_options_given(const delta_model_config *m) {
    return m->batch || m->image_size || m->channels || m->classes ||
           m->width || m->mlp_hidden || m->layers || m->hidden || m->heads ||
           m->seq_len || m->vocab;
}

static int parse(calib_args *ca, train_config *c, int argc, char **argv) {
    train_args_ext ext = {
        .cmd = "calibrate", .usage = usage, .opts = own_opts,
        .handle = handle_opt, .ud = ca, .model_optional = true,
        .steps = -1,
    };
    int rc = train_args_parse(argc, argv, c, &ext);
    if (rc >= 0) return rc;
    if (!ca->out)
        return train_args_error("no output file: use --out FILE");
    if (c->save || c->load || c->json || c->trace || c->resume ||
        c->checkpoint_every || c->run.policy || c->run.budget.kind != DELTA_BUDGET_UNLIMITED ||
        c->run.seq_len_max || c->run.device_jitter || c->run.sync_every_op ||
        c->run.check_streams || c->run.host_memory)
        return train_args_error("calibrate measures keep steps with no "
                                "budget and writes only --out: --save, "
                                "--load, --json, --trace, --resume, "
                                "--checkpoint-every, --policy, --budget, "
                                "--seq-len-range, --device-jitter, "
                                "--sync-every-op, --check-streams and "
                                "--host-memory do not apply");
    if (!c->run.model.name && model_options_given(&c->run.model))
        return train_args_error("model options without --model: the default "
                                "programs have their own shapes; give "
                                "--model NAME with them");
    ca->steps_given = c->steps >= 0;
    if (!ca->steps_given) c->steps = ca->quick ? QUICK_STEPS : DEFAULT_STEPS;
    if (c->steps < 1 || c->steps > MAX_STEPS)
        return train_args_error("--steps: expected 1 to %d measured steps",
                                MAX_STEPS);
    char err[1024];
    if (outfile_probe("--out", ca->out, err, sizeof err) != DELTA_OK) {
        fprintf(stderr, "delta calibrate: %s\n", err);
        return 2;
    }
    return -1;
}

/* The programs traced: --model's, or the backend's two defaults. */
static int programs(const train_config *c, train_config *p) {
    if (c->run.model.name) {
        p[0] = *c;
        return 1;
    }
    bool gpu = !train_on(c, "cpu");
    p[0] = p[1] = *c;
    delta_model_config *r = &p[0].run.model, *g = &p[1].run.model;
    r->name = gpu ? "resnet50" : "resnet18";
    r->batch = gpu ? 32 : 16;
    r->image_size = gpu ? 224 : 32;
    r->channels = 3;
    r->classes = gpu ? 1000 : 10;
    r->width = gpu ? 0 : 8;
    p[0].run.optimizer = DELTA_TRAIN_OPT_SGD;
    g->name = gpu ? "gpt2-small" : "gpt2-tiny";
    g->batch = 4;
    if (!gpu) {
        g->layers = 2;
        g->hidden = 128;
        g->heads = 4;
        g->seq_len = 64;
        g->vocab = 256;
    }
    p[1].run.optimizer = DELTA_TRAIN_OPT_ADAMW;
    return 2;
}

static const char *program_label(const trainer *t, char *buf, size_t n) {
    const delta_model_config *m = &delta_trainer_main_model(t->tr)->cfg;
    if (t->image)
        snprintf(buf, n, "%s %" PRId64 "x%" PRId64 "x%" PRId64 " batch %" PRId64,
                 m->name, m->channels, m->image_size, m->image_size, m->batch);
    else
        snprintf(buf, n, "%s %" PRId64 "x%" PRId64 " T %" PRId64
                 " batch %" PRId64, m->name, m->layers, m->hidden, m->seq_len,
                 m->batch);
    return buf;
}


/* The median of row i of a (rows of `steps` values), through col. The
 * caller writes op i's median to a[i], which lies in a row already read. */
static double row_median(const double *a, int i, int64_t steps, double *col) {
    memcpy(col, &a[(size_t)i * (size_t)steps], sizeof *col * (size_t)steps);
    return delta_median(col, (int)steps);
}

/* Keep steps of program p on its backend: a warm-up step, then p->steps
 * more; each op's time is its median over them. Adds them to cal and
 * returns the median step in *step_s and the time outside the ops' spans
 * per op in *gap_s. */
static delta_status trace_program(const train_config *p, delta_calibration *cal,
                                  double *step_s, double *gap_s, char *label,
                                  size_t label_n, bool quiet) {
    train_config c = *p;
    int64_t steps = c.steps;
    c.steps = 1;
    c.quiet = true;
    c.run.eval_batches = 0;
    if (!c.run.data) c.run.data = "synthetic";
    trainer t;
    delta_status st = trainer_setup(&t, &c);
    if (st == DELTA_OK) st = trainer_train(&t);
    if (st != DELTA_OK) {
        fprintf(stderr, "delta calibrate: %s\n", t.err);
        trainer_free(&t);
        return st;
    }
    program_label(&t, label, label_n);
    const delta_ctx *ctx = delta_trainer_ctx(t.tr);
    delta_session *session = delta_trainer_session(t.tr);
    int n_ops = delta_ctx_n_ops(ctx);
    double *op_s = calloc((size_t)n_ops * (size_t)steps, sizeof *op_s);
    double *host_s = calloc((size_t)n_ops * (size_t)steps, sizeof *host_s);
    double *col = calloc((size_t)steps, sizeof *col);
    double *step = calloc((size_t)steps, sizeof *step);
    if (!op_s || !host_s || !col || !step) {
        st = DELTA_ERR_NOMEM;
        fprintf(stderr, "delta calibrate: out of memory\n");
    }
    for (int64_t s = 0; st == DELTA_OK && s < steps; s++) {
        delta_step_stats ss;
        st = delta_session_run(session, DELTA_RUN_STEP, &ss);
        if (st != DELTA_OK) {
            fprintf(stderr, "delta calibrate: %s: %s\n", label,
                    delta_session_error(session));
            break;
        }
        step[s] = ss.step_s;
        for (int i = 0; i < n_ops; i++) {
            op_s[(size_t)i * (size_t)steps + (size_t)s] =
                delta_session_op_seconds(session, i);
            host_s[(size_t)i * (size_t)steps + (size_t)s] =
                delta_session_op_host_seconds(session, i);
        }
    }
    if (st == DELTA_OK) {
        /* per op, the medians over the steps, in op_s's and host_s's
         * first columns */
        double busy = 0;
        int timed = 0;
        for (int i = 0; i < n_ops; i++) {
            op_s[i] = row_median(op_s, i, steps, col);
            host_s[i] = row_median(host_s, i, steps, col);
            if (op_s[i] > 0) {
                busy += op_s[i];
                timed++;
            }
        }
        *step_s = delta_median(step, (int)steps);
        *gap_s = timed && *step_s > busy ? (*step_s - busy) / timed : 0;
        st = delta_calibration_add_step(cal, label, ctx, op_s, *step_s);
        if (st == DELTA_OK) st = delta_calibration_add_host(cal, ctx, host_s);
        if (!quiet)
            fprintf(stderr, "  %s: keep step %.3f ms (median of %" PRId64
                    ")\n", label, *step_s * 1e3, steps);
    }
    free(op_s);
    free(host_s);
    free(col);
    free(step);
    trainer_free(&t);
    return st;
}

/* The same program on the simulator with the calibrated description: its
 * median step, or -1 when it could not run. */
static double simulate(const train_config *p, const delta_gpu_preset *dev);

/* The mean of log(simulated / measured) over the programs with the gap
 * set to gap; NAN when a simulation failed. */
static double sim_error(const train_config *prog, const double *measured,
                        int n, delta_calibration *cal, double gap) {
    delta_calibration_set_kernel_gap(cal, gap);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double s = simulate(&prog[i], delta_calibration_device(cal));
        if (!(s > 0)) return NAN;
        sum += log(s / measured[i]);
    }
    return sum / n;
}

/* kernel_gap_s: the smallest gap (none when the sim's steps are already at
 * least the measured ones: the host's costs explain the time outside the
 * spans) that brings the sim's steps to the measured ones on average, by
 * bisection from hint (the time outside the spans per op). */
static void fit_gap(const train_config *prog, const double *measured, int n,
                    double hint, delta_calibration *cal) {
    double lo = 0, hi = hint > 0 ? 2 * hint : 1e-6;
    double e = sim_error(prog, measured, n, cal, 0);
    if (!(e < 0)) {
        delta_calibration_set_kernel_gap(cal, 0);
        return;
    }
    for (int k = 0; k < 8 && sim_error(prog, measured, n, cal, hi) < 0; k++)
        hi *= 4;
    for (int k = 0; k < 20; k++) {
        double mid = 0.5 * (lo + hi);
        if (sim_error(prog, measured, n, cal, mid) < 0) lo = mid;
        else hi = mid;
    }
    delta_calibration_set_kernel_gap(cal, 0.5 * (lo + hi));
}

static double simulate(const train_config *p, const delta_gpu_preset *dev) {
    train_config c = *p;
    c.run.backend = "sim";
    c.run.gpu = NULL;
    c.run.gpu_file = NULL;
    c.run.gpu_device = dev;
    c.run.link_set = false;
    c.run.data = NULL;
    c.quiet = true;
    c.steps += 1;
    cell_result r;
    return cell_run(&c, &r) == DELTA_OK ? r.step_s : -1;
}

/* Whether every program builds and plans (bad model options exit 2
 * before anything is measured). */
static int check_programs(const train_config *prog, int n) {
    for (int i = 0; i < n; i++) {
        train_config c = prog[i];
        c.run.plan_only = true;
        c.quiet = true;
        if (!c.run.data) c.run.data = "synthetic";
        trainer t;
        delta_status st = trainer_setup(&t, &c);
        if (st != DELTA_OK)
            fprintf(stderr, "delta calibrate: %s\n", t.err);
        trainer_free(&t);
        if (st != DELTA_OK) return trainer_exit_code(st);
    }
    return -1;
}

int cmd_calibrate(int argc, char **argv) {
    calib_args ca = {0};
    train_config c;
    int rc = parse(&ca, &c, argc, argv);
    if (rc >= 0) return rc;
    train_config prog[MAX_PROGRAMS];
    int n = programs(&c, prog);
    rc = check_programs(prog, n);
    if (rc >= 0) return rc;
    if (c.run.threads > 0) delta_cpu_set_threads(c.run.threads);

    /* the backend as train makes it with a budget: on cpu the default
     * emulated link (or --link-bw), which is what policies' swaps cross */
    char err[1024];
    delta_cpu_backend_opts cpu = {.link_gbps = c.run.link_set ? c.run.link_gbps : -1,
                                  .link_latency_s = -1};
    delta_gpu_preset *file = NULL;
    delta_sim_backend_opts sim = {.gpu = c.run.gpu};
    if (c.run.gpu_file) {
        sim.device = file = delta_gpu_file_load(c.run.gpu_file, err, sizeof err);
        if (!file) {
            fprintf(stderr, "delta calibrate: --gpu-file: %s\n", err);
            return 2;
        }
    }
    delta_status bst;
    delta_backend *b = delta_backend_new(
        train_backend(&c),
        &(delta_backend_opts){.cpu = &cpu, .sim = &sim}, &bst, err,
        sizeof err);
    if (!b) {
        fprintf(stderr, "delta calibrate: %s\n", err);
        delta_gpu_file_free(file);
        return trainer_exit_code(bst);
    }
    delta_calibrate_opts co = {.quick = ca.quick, .name = ca.name,
                               .log = c.quiet ? NULL : stderr};
    delta_calibration *cal = delta_calibrate(b, &co, err, sizeof err);
    delta_backend_free(b);
    if (!cal) {
        fprintf(stderr, "delta calibrate: %s\n", err);
        delta_gpu_file_free(file);
        return 1;
    }

    double measured[MAX_PROGRAMS], gap[MAX_PROGRAMS], hint = 0;
    char labels[MAX_PROGRAMS][96];
    delta_status st = DELTA_OK;
    if (!c.quiet) fprintf(stderr, "keep steps:\n");
    for (int i = 0; i < n; i++) {
        st = trace_program(&prog[i], cal, &measured[i], &gap[i], labels[i],
                           sizeof labels[i], c.quiet);
        if (st != DELTA_OK) break;
        if (gap[i] > hint) hint = gap[i];
    }
    if (st == DELTA_OK) {
        fit_gap(prog, measured, n, hint, cal);
        for (int i = 0; i < n; i++) {
            double pred = simulate(&prog[i], delta_calibration_device(cal));
            if (pred >= 0)
                delta_calibration_add_check(cal, labels[i], measured[i], pred);
        }
        delta_calibration_print(cal, stdout);
        fflush(stdout);
        st = delta_calibration_write(cal, ca.out, err, sizeof err);
        if (st != DELTA_OK) fprintf(stderr, "delta calibrate: %s\n", err);
        else if (!c.quiet)
            fprintf(stderr, "delta calibrate: wrote %s\n", ca.out);
    }
    delta_calibration_free(cal);
    delta_gpu_file_free(file);
    return st == DELTA_OK ? 0 : st == DELTA_ERR_INVALID_ARG ? 2 : 1;
}
