/* `delta train`: command-line options to a train_config, then the
 * trainer's phases (setup, train, evaluate, save, report). Every message
 * goes to stderr prefixed "delta train: "; results go to stdout. */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "delta/delta.h"
#include "parse.h"
#include "train_args.h"
#include "trainer.h"

/* Largest value of a size override (the models' own cap is 2^30). */
/* The slowest --link-bw taken, GB/s (0 aside: unthrottled). */
#define LINK_MIN_GBPS 0.01
#define MAX_DIM ((int64_t)1 << 30)

static void usage(FILE *f) {
    fprintf(f,
"usage: delta train (--model NAME | --load FILE) [options]\n"
"\n"
"Trains a model on Fashion-MNIST, a text file or synthetic data, inside a\n"
"device-memory budget, on the CPU or a simulated GPU.\n"
"\n"
"model:\n"
"  --model NAME         mlp, resnet18/34/50/101/152, gpt2-tiny/small/medium/\n"
"                       large/xl, bert-tiny/base/large\n"
"  --image-size N --channels N --classes N --width N      (image models)\n"
"  --layers N --hidden N --heads N --seq-len N --vocab N  (transformers;\n"
"                       --hidden is the hidden width of mlp too)\n"
"  --positions N        GPT-2's position table (default 1024; n_positions)\n"
"  --dropout P          transformers (default 0.1); 0 disables it\n"
"  --precision P        fp32 (default) or bf16: products on BF16 operands\n"
"                       summed in fp32, BF16 activations, fp32 master\n"
"                       weights and optimizer state (docs/KERNELS.md)\n"
"  --no-fusion          resnet: keep each batch norm, residual add and ReLU\n"
"                       as separate ops (by default they are fused: the\n"
"                       same bits, less memory)\n"
"  --seq-len-range A:B  transformers: each step draws its sequence length\n"
"                       uniformly in [A, B] from (seed, step) and trains on\n"
"                       the first T tokens of each sample (of B); B may not\n"
"                       exceed the model's positions (GPT-2 1024, BERT 512);\n"
"                       not with --seq-len. Each shape's program is built\n"
"                       once and reused\n"
"data:\n"
"  --data SRC           fashion-mnist, synthetic, a directory of\n"
"                       Fashion-MNIST idx files (image models), llm.c's\n"
"                       token file (FILE.bin: GPT-2 ids, vocab 50257) or a\n"
"                       text file read as bytes (transformers). Default:\n"
"                       fashion-mnist for image models when installed\n"
"                       (else synthetic 28x28x1 images), synthetic tokens\n"
"                       for transformers. Images set the model's image\n"
"                       size, channels and classes; text sets vocab 256\n"
"                       (257 for BERT, with its [MASK]).\n"
"                       fashion-mnist is read from " DELTA_FASHION_MNIST_DIR "\n"
"                       or $DELTA_FASHION_MNIST_DIR\n"
"  --batch N            samples per step (default 64 images, 8 sequences).\n"
"                       An epoch's last batch holds what is left, and is\n"
"                       trained as its own, shorter shape\n"
"  --drop-last          skip an epoch's last, partial batch instead\n"
"  --steps N            training steps (default 100; 0 only loads/saves)\n"
"  --seed N             initialization, dropout and data order (default 0)\n"
"  --no-shuffle         visit the data in file order\n"
"  --eval-batches N     test batches to evaluate after training on\n"
"                       Fashion-MNIST (default: the whole test set; 0: none),\n"
"                       or validation batches (default 20)\n"
"  --val-data FILE      language models: validation data (a token or text\n"
"                       file, as --data); its mean loss over the first\n"
"                       --eval-batches batches, in file order, after the\n"
"                       last step\n"
"  --val-every N        and after every N steps\n"
"optimizer:\n"
"  --optimizer NAME     sgd (default for mlp and resnet; momentum 0.9,\n"
"                       lr 0.05) or adamw (default for transformers; lr\n"
"                       3e-4, weight decay 0.01)\n"
"  --lr X --momentum X --weight-decay X\n"
"                       (--momentum is beta1 for adamw)\n"
"  --lr-schedule NAME   constant (default), cosine or linear: from --lr\n"
"                       down to --lr-min x --lr over --steps (the run's\n"
"                       total, so --resume continues it), as llm.c\n"
"  --warmup N           first N steps: lr x (step + 1) / N (default 0;\n"
"                       N above --steps is allowed: the run stays in warmup)\n"
"  --lr-min F           fraction of --lr the decay ends at, in [0, 1]\n"
"                       (default 0; llm.c's final_lr_frac)\n"
"  --grad-clip C        clip the gradients to global norm C as torch's\n"
"                       clip_grad_norm_ (llm.c and transformers use 1.0);\n"
"                       default 0: off. The step's norm is grad_norm in\n"
"                       --json. Not with --zero 1\n"
"runtime:\n"
"  --backend NAME       cpu (default), sim (a simulated GPU: no data,\n"
"                       times and memory are simulated) or cuda (an NVIDIA\n"
"                       GPU, device 0; see docs/CUDA.md)\n"
"  --gpu NAME           sim preset (implies --backend sim; default\n"
"                       v100-16g); --gpu help lists them\n"
"  --gpu-file FILE      sim: the device described in FILE instead of a\n"
"                       preset (implies --backend sim): what delta\n"
"                       calibrate writes (fields: docs/DEVICE.md)\n"
"  --budget B           device memory: unlimited (default; on sim the GPU's\n"
"                       memory), N%% of the unconstrained peak of the dry\n"
"                       plan, or a size such as 512MiB, 2GB, 1.5GiB, 1048576\n"
"  --policy NAME        what to do when the budget is short: delta (the\n"
"                       default with a budget: swaps or recomputes each\n"
"                       tensor by its measured costs, prefetching so the\n"
"                       cost hides), keep (the default without one: every\n"
"                       tensor stays, so the budget must hold the whole\n"
"                       peak), or a peer: swap (vDNN), checkpoint (sqrt n),\n"
"                       dtr, capuchin, autoswap (docs/POLICIES.md)\n"
"  --link-bw GB/s       cpu: emulated host link, 0 = unthrottled, else at\n"
"                       least 0.01 (10 MB/s). Default:\n"
"                       unthrottled with an unlimited budget, else the\n"
"                       backend's default (1 byte per 1,000 GEMM flops)\n"
"  --device-jitter SEED cpu: delay every kernel and copy by a random 0-200 us\n"
"                       drawn from SEED (a test of the runtime's waits; the\n"
"                       results must not change). Default 0: none\n"
"  --threads N          CPU threads (default: all cores)\n"
"  --host-memory SIZE   cap the host store for swapped tensors (e.g. 2GiB;\n"
"                       default: as much as the host gives); a run that\n"
"                       needs more stops with a message, exit 1\n"
"  --run-ahead N        most ops the host issues ahead of the device\n"
"                       (default 64)\n"
"  --sync-every-op      the host waits for every op, as the first runtime\n"
"                       did: to measure what waiting costs\n"
"  --check-streams      check the order of the device's streams: every\n"
"                       reuse of device or host-store bytes across streams\n"
"                       must be ordered by events; the first that is not\n"
"                       aborts, naming the op, tensor and streams (a bug\n"
"                       of the runtime; docs/DEVICE.md). It costs host\n"
"                       time, not device time\n"
"data parallel (docs/ARCHITECTURE.md, \"Data parallel\"):\n"
"  mpirun -np P delta train ... runs P ranks (a run without mpirun is one):\n"
"                       --batch is per rank, each rank takes its share of\n"
"                       every global batch of P x batch samples, gradients\n"
"                       are averaged in a fixed order by collective ops of\n"
"                       the step program; rank 0 prints and writes files\n"
"  --zero N             1: ZeRO stage 1, each rank keeps the optimizer state\n"
"                       of its own parameters (bit-identical to 0, the\n"
"                       default)\n"
"  --bucket SIZE        most gradient bytes per collective op (default\n"
"                       25MiB; at most 4 tensors each)\n"
"  --comm-timeout S     seconds a rank waits for the others before every\n"
"                       rank is stopped (default 300)\n"
"  --ranks P            sim and plan: stand for P ranks in one process\n"
"                       (a run on cpu or cuda has the ranks mpirun starts)\n"
"  --interconnect NAME  sim: the GPUs' link for the collectives: nvlink\n"
"                       (default), pcie, infiniband (docs/DEVICE.md)\n"
"output:\n"
"  --save FILE          safetensors checkpoint of the trained model\n"
"                       (PyTorch names; loads with load_state_dict)\n"
"  --save-dtype D       f32 (default) or bf16: --save's weights rounded to\n"
"                       BF16 (half the file; --load widens BF16 and F16\n"
"                       files to fp32); not with --checkpoint-every\n"
"  --load FILE          start from a checkpoint (delta's or PyTorch's, or\n"
"                       Hugging Face's GPT-2 model.safetensors); without\n"
"                       --model, the model is the file's (its metadata,\n"
"                       config.json beside it, or its shapes)\n"
"  --checkpoint-every N save a training checkpoint (parameters, optimizer\n"
"                       state, step, data position) to the --save file\n"
"                       every N steps, atomically; the final save is one\n"
"                       too (docs/CHECKPOINTS.md)\n"
"  --resume FILE        continue the run of a training checkpoint exactly,\n"
"                       with the same settings; --steps counts from the\n"
"                       start of training (a step-5 checkpoint with\n"
"                       --steps 10 runs steps 6-10)\n"
"  --json FILE          one JSON object per step and a final summary\n"
"  --trace FILE         Chrome trace of the run (ops, recomputations,\n"
"                       copies, device memory) for ui.perfetto.dev or\n"
"                       chrome://tracing\n"
"  --quiet              print only the final summary line\n"
"  -h, --help           this help\n"
"  --version            the version and the build's features\n"
"\n"
"changing shapes: an epoch's partial last batch and --seq-len-range give\n"
"steps of other shapes. Each shape's program is built once; the budget is\n"
"one figure for the whole run: --budget N%% is of the largest shape's peak\n"
"(--batch at the longest length), and no step of any shape exceeds it.\n"
"\n"
"exit status: 0 done, 2 bad usage or input, 3 budget too small (below the\n"
"minimum, or the policy cannot fit an op in it), 1 any other failure\n");
}

static void list_gpus(FILE *f) {
    fprintf(f, "simulated GPUs (--backend sim --gpu NAME):\n");
    for (const delta_gpu_preset *p = delta_gpu_presets(); p->name; p++) {
        char mem[32];
        fprintf(f, "  %-10s %s; %s, %.1f TFLOP/s fp32, %.0f TFLOP/s bf16, "
                "%.0f GB/s HBM, "
                "link %.0f GB/s\n", p->name, p->description,
                delta_format_bytes(p->memory_bytes, mem, sizeof mem),
                p->fp32_flops / 1e12, p->bf16_flops / 1e12,
                p->hbm_bytes_per_s / 1e9, p->link_bytes_per_s / 1e9);
    }
}

enum {
    OPT_MODEL = 256, OPT_IMAGE_SIZE, OPT_CHANNELS, OPT_CLASSES, OPT_WIDTH,
    OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_SEQ_LEN, OPT_VOCAB, OPT_DROPOUT,
    OPT_DATA, OPT_BATCH, OPT_STEPS, OPT_SEED, OPT_LR, OPT_OPTIMIZER,
    OPT_MOMENTUM, OPT_WEIGHT_DECAY, OPT_NO_SHUFFLE, OPT_THREADS, OPT_SAVE,
    OPT_LOAD, OPT_JSON, OPT_QUIET, OPT_VERSION, OPT_BACKEND, OPT_GPU,
    OPT_BUDGET, OPT_POLICY, OPT_LINK_BW, OPT_TRACE, OPT_EVAL_BATCHES,
    OPT_SEQ_LEN_RANGE, OPT_DROP_LAST, OPT_CHECKPOINT_EVERY, OPT_RESUME,
    OPT_HOST_MEMORY, OPT_RUN_AHEAD, OPT_SYNC_EVERY_OP, OPT_DEVICE_JITTER,
    OPT_GPU_FILE, OPT_CHECK_STREAMS, OPT_PRECISION, OPT_NO_FUSION,
    OPT_SAVE_DTYPE, OPT_RANKS, OPT_ZERO, OPT_BUCKET, OPT_INTERCONNECT,
    OPT_COMM_TIMEOUT, OPT_VAL_DATA, OPT_VAL_EVERY, OPT_POSITIONS,
    OPT_LR_SCHEDULE, OPT_WARMUP, OPT_LR_MIN, OPT_GRAD_CLIP,
    OPT_LAST = OPT_GRAD_CLIP
};

static const struct option long_opts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"image-size", required_argument, NULL, OPT_IMAGE_SIZE},
    {"channels", required_argument, NULL, OPT_CHANNELS},
    {"classes", required_argument, NULL, OPT_CLASSES},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"positions", required_argument, NULL, OPT_POSITIONS},
    {"dropout", required_argument, NULL, OPT_DROPOUT},
    {"data", required_argument, NULL, OPT_DATA},
    {"val-data", required_argument, NULL, OPT_VAL_DATA},
    {"val-every", required_argument, NULL, OPT_VAL_EVERY},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"lr", required_argument, NULL, OPT_LR},
    {"lr-schedule", required_argument, NULL, OPT_LR_SCHEDULE},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"lr-min", required_argument, NULL, OPT_LR_MIN},
    {"grad-clip", required_argument, NULL, OPT_GRAD_CLIP},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"save", required_argument, NULL, OPT_SAVE},
    {"load", required_argument, NULL, OPT_LOAD},
    {"json", required_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"gpu", required_argument, NULL, OPT_GPU},
    {"gpu-file", required_argument, NULL, OPT_GPU_FILE},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"policy", required_argument, NULL, OPT_POLICY},
    {"link-bw", required_argument, NULL, OPT_LINK_BW},
    {"device-jitter", required_argument, NULL, OPT_DEVICE_JITTER},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"eval-batches", required_argument, NULL, OPT_EVAL_BATCHES},
    {"seq-len-range", required_argument, NULL, OPT_SEQ_LEN_RANGE},
    {"drop-last", no_argument, NULL, OPT_DROP_LAST},
    {"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"host-memory", required_argument, NULL, OPT_HOST_MEMORY},
    {"run-ahead", required_argument, NULL, OPT_RUN_AHEAD},
    {"sync-every-op", no_argument, NULL, OPT_SYNC_EVERY_OP},
    {"check-streams", no_argument, NULL, OPT_CHECK_STREAMS},
    {"precision", required_argument, NULL, OPT_PRECISION},
    {"no-fusion", no_argument, NULL, OPT_NO_FUSION},
    {"save-dtype", required_argument, NULL, OPT_SAVE_DTYPE},
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"zero", required_argument, NULL, OPT_ZERO},
    {"bucket", required_argument, NULL, OPT_BUCKET},
    {"interconnect", required_argument, NULL, OPT_INTERCONNECT},
    {"comm-timeout", required_argument, NULL, OPT_COMM_TIMEOUT},
    {NULL, 0, NULL, 0},
};

/* The session's list is the truth, so a policy the library gains is
 * accepted here without a change. */
static bool policy_known(const char *name) {
    for (const char *const *p = delta_session_policies(); *p; p++)
        if (!strcmp(*p, name)) return true;
    return false;
}

/* "keep, swap, ..." into buf (cut short if buf is). */
static const char *policy_list(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *p = delta_session_policies(); *p; p++) {
        int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", *p);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
    return buf;
}

/* The command being parsed (train_args.h: other commands take train's
 * options too) and its options: train's, then the command's own. */
static const char *cur_cmd = "train";
static struct option cur_opts[128];
/* train's options given on the command line: bit (o - OPT_MODEL) */
static uint64_t given;
_Static_assert(OPT_LAST - OPT_MODEL < 64, "given holds a bit each");

/* The long name of option value v, for messages. */
static const char *opt_name(int v) {
    for (const struct option *o = cur_opts; o->name; o++)
        if (o->val == v) return o->name;
    return "?";
}

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "delta %s: ", cur_cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nsee 'delta %s --help'\n", cur_cmd);
    va_end(ap);
    return 2;
}

int train_args_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return usage_error("%s", msg);
}

int train_args_check_policy(const char *name) {
    if (policy_known(name)) return -1;
    char list[256];
    return usage_error("unknown policy '%s'; the policies are: %s", name,
                       policy_list(list, sizeof list));
}

/* Parses argv into *c; ext (NULL for train and plan) adds a command's own
 * options. Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, train_config *c,
                      const train_args_ext *ext) {
    char err[512], optbuf[64];
    size_t n_opts = 0;
    cur_cmd = ext ? ext->cmd : "train";
    for (const struct option *o = long_opts; o->name; o++)
        cur_opts[n_opts++] = *o;
    for (const struct option *o = ext ? ext->opts : NULL; o && o->name; o++) {
        DELTA_ASSERT(n_opts + 1 < sizeof cur_opts / sizeof *cur_opts);
        cur_opts[n_opts++] = *o;
    }
    cur_opts[n_opts] = (struct option){NULL, 0, NULL, 0};
    given = 0;
    int64_t hidden = 0;
    bool backend_set = false, gpu_set = false;
    memset(c, 0, sizeof *c);
    c->run = delta_train_config_default();
    c->steps = ext && ext->steps ? ext->steps : 100;
    opterr = 0;
    /* 0, not 1: glibc then forgets the rest of a cluster of short options
     * from an earlier call ("-hx" stops at h and keeps a pointer to x into
     * that call's argv). */
    optind = 0;
    for (;;) {
        int prev = optind > 0 ? optind : 1;
        int o = getopt_long(argc, argv, "+:h", cur_opts, NULL);
        if (o == -1) break;
        if (o >= OPT_MODEL && o <= OPT_LAST)
            given |= (uint64_t)1 << (o - OPT_MODEL);
        snprintf(optbuf, sizeof optbuf, "--%s", opt_name(o));
        const char *opt = optbuf, *a = optarg;
        int64_t v = 0;
        double x = 0;
        int64_t *field = NULL;
        switch (o) {
        case 'h':
            if (ext && ext->usage) ext->usage(stdout);
            else usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("delta %s (%s)\n", DELTA_VERSION_STRING,
                   delta_build_features());
            return 0;
        case '?':
            return usage_error("unknown option '%s'",
                               prev < argc ? argv[prev] : "?");
        case ':':
            return usage_error("option '%s' needs a value",
                               prev < argc ? argv[prev] : "?");
        case OPT_MODEL: c->run.model.name = a; break;
        case OPT_IMAGE_SIZE: field = &c->run.model.image_size; break;
        case OPT_CHANNELS: field = &c->run.model.channels; break;
        case OPT_CLASSES: field = &c->run.model.classes; break;
        case OPT_WIDTH: field = &c->run.model.width; break;
        case OPT_LAYERS: field = &c->run.model.layers; break;
        case OPT_HIDDEN: field = &hidden; break;
        case OPT_HEADS: field = &c->run.model.heads; break;
        case OPT_SEQ_LEN: field = &c->run.model.seq_len; break;
        case OPT_VOCAB: field = &c->run.model.vocab; break;
        case OPT_POSITIONS: field = &c->run.model.positions; break;
        case OPT_BATCH: field = &c->run.model.batch; break;
        case OPT_DROPOUT:
            if (!parse_f64(opt, a, 0, 0.999999, &x, err, sizeof err))
                return usage_error("%s", err);
            c->run.model.dropout = (float)x;
            c->run.dropout_set = true;
            break;
        case OPT_DATA: c->run.data = a; break;
        case OPT_VAL_DATA: c->run.val_data = a; break;
        case OPT_VAL_EVERY:
            if (!parse_i64(opt, a, 1, INT64_MAX, &c->run.val_every, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_STEPS:
            if (!parse_i64(opt, a, 0, 1000000000, &c->steps, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_SEED:
            if (!parse_i64(opt, a, 0, INT64_MAX, &v, err, sizeof err))
                return usage_error("%s", err);
            c->run.seed = (uint64_t)v;
            break;
        case OPT_LR:
            if (!parse_f64(opt, a, 0, 100, &c->run.lr, err, sizeof err) ||
                c->run.lr <= 0)
                return usage_error("%s: expected a learning rate above 0 "
                                   "and at most 100, got '%s'", opt, a);
            break;
        case OPT_LR_SCHEDULE:
            if (!delta_lr_schedule_find(a, &c->run.lr_sched.kind))
                return usage_error("unknown --lr-schedule '%s'; the "
                                   "schedules are constant, cosine and "
                                   "linear", a);
            break;
        case OPT_WARMUP:
            if (!parse_i64(opt, a, 0, 1000000000, &c->run.lr_sched.warmup,
                           err, sizeof err))
                return usage_error("%s (steps of linear warmup)", err);
            break;
        case OPT_LR_MIN:
            if (!parse_f64(opt, a, 0, 1, &c->run.lr_sched.min_frac, err,
                           sizeof err))
                return usage_error("%s (the fraction of --lr the decay "
                                   "ends at)", err);
            break;
        case OPT_GRAD_CLIP:
            if (!parse_f64(opt, a, 0, 1e30, &c->run.grad_clip, err,
                           sizeof err))
                return usage_error("%s (the largest global norm of the "
                                   "gradients; 0: no clipping)", err);
            break;
        case OPT_OPTIMIZER:
            if (!strcmp(a, "sgd")) c->run.optimizer = DELTA_TRAIN_OPT_SGD;
            else if (!strcmp(a, "adamw")) c->run.optimizer = DELTA_TRAIN_OPT_ADAMW;
            else return usage_error("unknown optimizer '%s'; the "
                                    "optimizers are sgd and adamw", a);
            break;
        case OPT_MOMENTUM:
            if (!parse_f64(opt, a, 0, 0.999999, &c->run.momentum, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_WEIGHT_DECAY:
            if (!parse_f64(opt, a, 0, 10, &c->run.weight_decay, err, sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_NO_SHUFFLE: c->run.no_shuffle = true; break;
        case OPT_THREADS:
            if (!parse_i64(opt, a, 1, 4096, &v, err, sizeof err))
                return usage_error("%s", err);
            c->run.threads = (int)v;
            break;
        case OPT_SAVE: c->save = a; break;
        case OPT_LOAD: c->load = a; break;
        case OPT_JSON: c->json = a; break;
        case OPT_QUIET: c->quiet = true; break;
        case OPT_BACKEND:
            backend_set = true;
            if (!delta_backend_describe(a)) {
                char list[128] = "";
                const char *const *names = delta_backend_names();
                for (const char *const *n = names; *n; n++)
                    snprintf(list + strlen(list), sizeof list - strlen(list),
                             "%s%s", n == names ? "" : n[1] ? ", " : " and ",
                             *n);
                return usage_error("unknown backend '%s'; the backends are "
                                   "%s", a, list);
            }
            c->run.backend = a;
            break;
        case OPT_GPU:
            if (!strcmp(a, "help") || !strcmp(a, "list")) {
                list_gpus(stdout);
                return 0;
            }
            if (!delta_gpu_preset_find(a)) {
                fprintf(stderr, "delta %s: unknown GPU '%s'\n", cur_cmd, a);
                list_gpus(stderr);
                return 2;
            }
            c->run.gpu = a;
            gpu_set = true;
            break;
        case OPT_GPU_FILE: {
            /* read now, so a bad file is refused before any work; the
             * trainer reads it again where it makes the backend */
            delta_gpu_preset *g = delta_gpu_file_load(a, err, sizeof err);
            if (!g) return usage_error("--gpu-file: %s", err);
            delta_gpu_file_free(g);
            c->run.gpu_file = a;
            break;
        }
        case OPT_BUDGET:
            if (!parse_budget(opt, a, &c->run.budget, err, sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_POLICY:
            if (!policy_known(a)) {
                char list[256];
                return usage_error("unknown policy '%s'; the policies are: "
                                   "%s", a, policy_list(list, sizeof list));
            }
            c->run.policy = a;
            break;
        case OPT_LINK_BW:
            if (!parse_f64(opt, a, 0, 1e6, &c->run.link_gbps, err, sizeof err))
                return usage_error("%s", err);
            /* slower links make a step take hours (1e-6: never ends),
             * and rates that round to 0 bytes/s ran unthrottled */
            if (c->run.link_gbps > 0 && c->run.link_gbps < LINK_MIN_GBPS)
                return usage_error("%s %s: a link must move at least %g "
                                   "GB/s (10 MB/s); 0 means unthrottled",
                                   opt, a, LINK_MIN_GBPS);
            c->run.link_set = true;
            break;
        case OPT_DEVICE_JITTER:
            if (!parse_i64(opt, a, 0, INT64_MAX, &c->run.device_jitter, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_TRACE: c->trace = a; break;
        case OPT_EVAL_BATCHES:
            if (!parse_i64(opt, a, 0, INT64_MAX, &c->run.eval_batches, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_SEQ_LEN_RANGE: {
            /* A:B, whole numbers, 1 <= A <= B */
            char lo[64], hi[64];
            const char *colon = strchr(a, ':');
            if (!colon || (size_t)(colon - a) >= sizeof lo ||
                strlen(colon + 1) >= sizeof hi)
                return usage_error("%s: expected A:B (two lengths, e.g. "
                                   "16:128), got '%s'", opt, a);
            snprintf(lo, sizeof lo, "%.*s", (int)(colon - a), a);
            snprintf(hi, sizeof hi, "%s", colon + 1);
            if (!parse_i64(opt, lo, 1, MAX_DIM, &c->run.seq_len_min, err,
                           sizeof err) ||
                !parse_i64(opt, hi, 1, MAX_DIM, &c->run.seq_len_max, err,
                           sizeof err))
                return usage_error("%s (in A:B, each length at least 1)",
                                   err);
            if (c->run.seq_len_min > c->run.seq_len_max)
                return usage_error("%s %s: A %" PRId64 " is above B %" PRId64
                                   "; give the shortest length first", opt,
                                   a, c->run.seq_len_min, c->run.seq_len_max);
            break;
        }
        case OPT_DROP_LAST: c->run.drop_last = true; break;
        case OPT_CHECKPOINT_EVERY:
            if (!parse_i64(opt, a, 1, 1000000000, &c->checkpoint_every, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        case OPT_RESUME: c->resume = a; break;
        case OPT_HOST_MEMORY:
            if (!parse_size(opt, a, &c->run.host_memory, err, sizeof err))
                return usage_error("%s", err);
            if (!c->run.host_memory)
                return usage_error("%s 0: the host store needs at least a "
                                   "byte; leave the option out for no cap",
                                   opt);
            break;
        case OPT_RUN_AHEAD: {
            int64_t n = 0;
            if (!parse_i64(opt, a, 1, 1 << 20, &n, err, sizeof err))
                return usage_error("%s", err);
            c->run.run_ahead = (int)n;
            break;
        }
        case OPT_SYNC_EVERY_OP: c->run.sync_every_op = true; break;
        case OPT_CHECK_STREAMS: c->run.check_streams = true; break;
        case OPT_PRECISION:
            if (!delta_precision_parse(a, &c->run.model.precision))
                return usage_error("--precision '%s': use fp32 or bf16", a);
            break;
        case OPT_NO_FUSION: c->run.model.no_fusion = 1; break;
        case OPT_SAVE_DTYPE:
            if (strcmp(a, "f32") && strcmp(a, "bf16"))
                return usage_error("--save-dtype '%s': use f32 or bf16", a);
            c->save_bf16 = !strcmp(a, "bf16");
            break;
        case OPT_RANKS:
            if (!parse_i64(opt, a, 1, 1 << 16, &v, err, sizeof err))
                return usage_error("%s", err);
            c->run.ranks = (int)v;
            break;
        case OPT_ZERO:
            if (!parse_i64(opt, a, 0, 1, &v, err, sizeof err))
                return usage_error("%s (ZeRO stage 0: none, 1: the "
                                   "optimizer state sharded)", err);
            c->run.zero = (int)v;
            break;
        case OPT_BUCKET:
            if (!parse_size(opt, a, &c->run.bucket_bytes, err, sizeof err))
                return usage_error("%s", err);
            if (!c->run.bucket_bytes)
                return usage_error("%s 0: a bucket holds at least one "
                                   "gradient; leave it out for the default "
                                   "(25 MiB)", opt);
            break;
        case OPT_INTERCONNECT:
            if (!delta_interconnect_find(a)) {
                char list[128] = "";
                for (const delta_interconnect *ic = delta_interconnects();
                     ic->name; ic++)
                    snprintf(list + strlen(list), sizeof list - strlen(list),
                             "%s%s", list[0] ? ", " : "", ic->name);
                return usage_error("unknown interconnect '%s'; the "
                                   "interconnects are %s", a, list);
            }
            c->run.interconnect = a;
            break;
        case OPT_COMM_TIMEOUT:
            if (!parse_f64(opt, a, 0.1, 1e7, &c->run.comm_timeout_s, err,
                           sizeof err))
                return usage_error("%s", err);
            break;
        default:
            if (ext && o >= TRAIN_ARGS_EXT_BASE) {
                int rc = ext->handle(ext->ud, o, opt, a);
                if (rc >= 0) return rc;
                break;
            }
            return usage_error("unexpected option '%s'",
                               prev < argc ? argv[prev] : "?");
        }
        if (field) {
            int64_t lo = 1;
            if (!parse_i64(opt, a, lo, MAX_DIM, field, err, sizeof err))
                return usage_error("%s", err);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!c->run.model.name && !c->load && !(ext && ext->model_optional))
        return usage_error("no model given: use --model NAME (e.g. --model "
                           "resnet18), or --load FILE to train the model "
                           "a checkpoint holds");
    if (c->run.val_every && !c->run.val_data)
        return usage_error("--val-every N needs --val-data FILE");
    if (gpu_set && c->run.gpu_file)
        return usage_error("--gpu and --gpu-file both name the simulated "
                           "device; give one of them");
    if ((gpu_set || c->run.gpu_file) && backend_set && !train_on(c, "sim"))
        return usage_error("%s picks a simulated GPU; it needs --backend "
                           "sim", gpu_set ? "--gpu" : "--gpu-file");
    if (gpu_set || c->run.gpu_file) c->run.backend = "sim";
    if (c->run.seq_len_max && c->run.model.seq_len)
        return usage_error("--seq-len-range and --seq-len both set the "
                           "sequence length; give one of them");
    if (c->run.link_set && train_on(c, "sim"))
        return usage_error("--link-bw sets the cpu backend's link; a "
                           "simulated GPU has its preset's link (or its "
                           "device file's)");
    if (c->run.link_set && train_on(c, "cuda"))
        return usage_error("--link-bw sets the cpu backend's link; a real "
                           "GPU has its own");
    if (c->run.device_jitter && !train_on(c, "cpu"))
        return usage_error("--device-jitter delays the cpu backend's "
                           "streams; use it with --backend cpu");
    /* the schedule runs over the run's total steps (a resumed run counts
     * from the start of training, so it continues the same schedule) */
    c->run.lr_sched.steps = c->steps;
    if ((given & ((uint64_t)1 << (OPT_LR_MIN - OPT_MODEL))) &&
        c->run.lr_sched.kind == DELTA_LR_CONSTANT)
        return usage_error("--lr-min is where a decay ends; give it with "
                           "--lr-schedule cosine or linear");
    /* --hidden: mlp's hidden width, or a transformer's. */
    if (hidden) {
        if (c->run.model.name && !strcmp(c->run.model.name, "mlp"))
            c->run.model.mlp_hidden = hidden;
        else c->run.model.hidden = hidden;
    }
    return -1;
}

/* train's and plan's options alone (the fuzzer and tests call it in
 * process). */
int train_parse_args(int argc, char **argv, train_config *c) {
    return parse_args(argc, argv, c, NULL);
}

int train_args_parse(int argc, char **argv, train_config *c,
                     const train_args_ext *ext) {
    return parse_args(argc, argv, c, ext);
}

/* delta plan: the options of train; builds and plans the step program
 * from shapes alone and prints its memory figures. */
static void plan_usage(FILE *f) {
    fprintf(f, "usage: delta plan --model NAME [options]\n"
               "Builds the training step for the model and shapes given and "
               "prints its memory\nfigures, without training. It takes "
               "delta train's options:\n\n");
    usage(f);
}

/* train's options that change how a run trains or where it runs but not
 * the step program plan builds from shapes alone (--trace, --resume and
 * --checkpoint-every are refused instead). */
static const int plan_ignores[] = {
    OPT_STEPS, OPT_SEED, OPT_LR, OPT_WEIGHT_DECAY, OPT_NO_SHUFFLE,
    OPT_DROP_LAST, OPT_THREADS, OPT_SAVE, OPT_LOAD, OPT_BACKEND, OPT_GPU,
    OPT_GPU_FILE, OPT_BUDGET, OPT_POLICY, OPT_LINK_BW, OPT_DEVICE_JITTER, OPT_HOST_MEMORY,
    OPT_RUN_AHEAD, OPT_SYNC_EVERY_OP, OPT_CHECK_STREAMS, OPT_INTERCONNECT,
    OPT_COMM_TIMEOUT, OPT_VAL_DATA, OPT_VAL_EVERY,
};

/* "--steps, --lr" of the given options plan ignores into buf; false when
 * none. */
static bool plan_ignored(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof plan_ignores / sizeof *plan_ignores; i++) {
        int o = plan_ignores[i];
        if (!(given & ((uint64_t)1 << (o - OPT_MODEL)))) continue;
        /* without --model, --load names the model planned */
        if (o == OPT_LOAD && !(given & ((uint64_t)1 << (OPT_MODEL - OPT_MODEL))))
            continue;
        int w = snprintf(buf + used, n - used, "%s--%s", used ? ", " : "",
                         opt_name(o));
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
    return used > 0;
}

/* ---- ranks ---------------------------------------------------------------
 * Under mpirun every rank parses the same command line: ranks other than 0
 * parse with stdout and stderr silenced (their messages would repeat rank
 * 0's), then the ranks agree on going on. A rank whose command line fails
 * where rank 0's did not (mpirun's MPMD form) stops them all, rank 0
 * naming it. */

/* Runs parse_args with stdout and stderr on /dev/null when quiet. */
static int parse_maybe_quiet(bool quiet, int argc, char **argv,
                             train_config *c, const train_args_ext *ext) {
    int saved[2] = {-1, -1};
    if (quiet) {
        fflush(stdout);
        fflush(stderr);
        int null = open("/dev/null", O_WRONLY);
        for (int k = 0; null >= 0 && k < 2; k++) {
            saved[k] = dup(k + 1);
            dup2(null, k + 1);
        }
        if (null >= 0) close(null);
    }
    int rc = parse_args(argc, argv, c, ext);
    for (int k = 0; k < 2; k++) {
        if (saved[k] < 0) continue;
        fflush(k ? stderr : stdout);
        dup2(saved[k], k + 1);
        close(saved[k]);
    }
    return rc;
}

/* The ranks' parse results: -1 when every rank goes on, else the exit
 * status every rank stops with (rank 0's, or 2 when another rank's
 * command line failed alone). */
static int agree_parse(delta_comm *comm, const char *cmd, int rc) {
    int P = delta_comm_size(comm);
    if (P == 1) return rc;
    int *all = malloc(sizeof *all * (size_t)P);
    DELTA_ASSERTF(all, "out of memory");
    delta_comm_allgather(comm, &rc, all, sizeof rc, "parsing the options");
    int out = all[0];
    for (int q = 1; q < P && out < 0; q++) {
        if (all[q] < 0) continue;
        if (delta_comm_rank(comm) == 0)
            fprintf(stderr, "delta %s: rank %d could not take its command "
                    "line, which differs from rank 0's; every rank must be "
                    "given the same options (mpirun -np P delta %s ...)\n",
                    cmd, q, cmd);
        out = 2;
    }
    free(all);
    return out;
}

/* MPI (or one rank) and the parsed options, agreed by every rank; -1 to
 * go on (c->run.comm set; free it with delta_comm_free), else the exit status
 * (*comm freed). */
static int start_ranks(const char *cmd, int argc, char **argv,
                       train_config *c, const train_args_ext *ext,
                       delta_comm **comm) {
    char err[512];
    *comm = delta_comm_world(err, sizeof err);
    if (!*comm) {
        fprintf(stderr, "delta %s: %s\n", cmd, err);
        return 1;
    }
    int rc = parse_maybe_quiet(delta_comm_rank(*comm) > 0, argc, argv, c, ext);
    rc = agree_parse(*comm, cmd, rc);
    if (rc >= 0) {
        delta_comm_free(*comm);
        *comm = NULL;
        return rc;
    }
    c->run.comm = *comm;
    return -1;
}

/* A failure's message: rank 0's alone when every rank failed the same way
 * (setup, agreed; a diverged mean loss), else the failing rank's own,
 * naming it, and every rank is stopped (MPI_Abort) so none waits for it. */
static void report_failure(trainer *t, const char *cmd, delta_status st,
                           bool agreed) {
    delta_comm *comm = t->cfg.run.comm;
    int P = delta_comm_size(comm), rank = delta_comm_rank(comm);
    if (P == 1) {
        fprintf(stderr, "delta %s: %s\n", cmd, t->err);
        return;
    }
    if (agreed || t->fail_everywhere) {
        if (rank == 0) fprintf(stderr, "delta %s: %s\n", cmd, t->err);
        return;
    }
    fprintf(stderr, "delta %s: rank %d of %d: %s; stopping every rank\n", cmd,
            rank, P, t->err);
    delta_comm_abort(comm, trainer_exit(t, st));
}

int cmd_plan(int argc, char **argv) {
    /* train's options, with messages that name plan */
    static const struct option none[] = {{0}};
    const train_args_ext plan = {.cmd = "plan", .usage = plan_usage,
                                 .opts = none};
    train_config c;
    delta_comm *comm;
    int rc = start_ranks("plan", argc, argv, &c, &plan, &comm);
    if (rc >= 0) return rc;
    char ignored[512];
    if (delta_comm_rank(comm) == 0 && plan_ignored(ignored, sizeof ignored))
        fprintf(stderr, "delta plan: warning: ignoring %s: plan builds the "
                "step from the model, shapes and optimizer alone and runs "
                "nothing (delta train takes them)\n", ignored);
    c.run.plan_only = true;
    trainer t;
    delta_status st = trainer_setup(&t, &c);
    st = trainer_agree(&t, st);
    if (st == DELTA_OK && t.rank == 0) st = trainer_print_plan(&t);
    if (st != DELTA_OK) report_failure(&t, "plan", st, true);
    rc = trainer_exit(&t, st);
    trainer_free(&t);
    delta_comm_free(comm);
    return rc;
}

int cmd_train(int argc, char **argv) {
    train_config c;
    delta_comm *comm;
    int rc = start_ranks("train", argc, argv, &c, NULL, &comm);
    if (rc >= 0) return rc;
    trainer t;
    delta_status st = trainer_setup(&t, &c);
    st = trainer_agree(&t, st);
    bool agreed = st != DELTA_OK;
    /* several ranks save first: a ZeRO-1 checkpoint gathers every rank's
     * state, and rank 0 alone evaluates afterwards (the others would wait
     * for it, against the timeout) */
    bool ranks = t.ranks > 1 && !t.sim;
    if (st == DELTA_OK) st = trainer_train(&t);
    if (st == DELTA_OK && ranks) st = trainer_save(&t);
    if (st == DELTA_OK) st = trainer_evaluate(&t);
    if (st == DELTA_OK && !ranks) st = trainer_save(&t);
    if (st == DELTA_OK) st = trainer_report(&t);
    if (st != DELTA_OK) report_failure(&t, "train", st, agreed);
    /* On every path, so a run that failed still leaves a trace that opens;
     * its own failure is reported too but does not hide the first one. */
    delta_status tst = trainer_close_trace(&t);
    if (tst != DELTA_OK) {
        fprintf(stderr, "delta train: %s\n", t.err);
        if (st == DELTA_OK) st = tst;
    }
    int rc2 = trainer_exit(&t, st);
    trainer_free(&t);
    delta_comm_free(comm);
    return rc2;
}
