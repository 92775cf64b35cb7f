/* `delta sample`: text from a GPT-2 checkpoint. Builds the model's
 * forward program at batch 1 on a backend, loads the weights and
 * generates token by token: greedy (argmax, the lowest id on ties) or
 * top-k sampling at a temperature with draws keyed by (seed, token index)
 * (src/core/rng.h), so a seed always gives the same text. A Hugging Face
 * tokenizer.json encodes the prompt and decodes the tokens
 * (delta/tokenizer.h); without one the prompt and the output are ids.
 *
 * The program is one fixed length T (the context, or less when prompt and
 * continuation are shorter): the last T tokens go in, padded after the
 * last one, and the logits are read at the last real position. GPT-2 is
 * causal (position t sees positions <= t only), so the padding changes
 * nothing there. Messages go to stderr prefixed "delta sample: "; the
 * text (and with --ids the ids) to stdout. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "commands.h"
#include "core/rng.h"
#include "delta/delta.h"
#include "parse.h"

#define DEFAULT_TOKENS 32
#define MAX_TOKENS 1000000
#define MAX_DIM ((int64_t)1 << 30)

static void usage(FILE *f) {
    fprintf(f,
"usage: delta sample --load FILE [options]\n"
"\n"
"Generates text from a GPT-2 checkpoint (delta's or Hugging Face's\n"
"model.safetensors): greedy, or top-k sampling with a seed.\n"
"\n"
"model:\n"
"  --load FILE          the checkpoint (required)\n"
"  --model NAME         gpt2-tiny/small/medium/large/xl; default: the\n"
"                       file's (delta writes it), else the one of its sizes\n"
"  --layers N --hidden N --heads N --vocab N\n"
"                       as train takes them; default: the file's\n"
"                       settings, else a config.json beside it, else its\n"
"                       shapes (heads: width / 64)\n"
"  --seq-len N          the context: tokens the model sees (default its\n"
"                       positions, 1024 for GPT-2)\n"
"text:\n"
"  --tokenizer FILE     a Hugging Face tokenizer.json (byte-level BPE, as\n"
"                       GPT-2's): encodes --prompt, decodes the output\n"
"  --prompt TEXT        the start (needs --tokenizer; <|endoftext|> is the\n"
"                       special token). Default: <|endoftext|> alone\n"
"  --prompt-ids LIST    the start as ids, e.g. 15496,11 (without a\n"
"                       tokenizer the prompt must be given so)\n"
"  --tokens N           tokens to generate (default %d)\n"
"  --top-k K            0 or 1: greedy, the most likely token (the lowest\n"
"                       id on ties; the default); K > 1: draw among the K\n"
"                       most likely\n"
"  --temperature T      divides the logits before top-k sampling (default\n"
"                       1; > 0)\n"
"  --seed N             the draws of top-k sampling (default 0): one seed,\n"
"                       one text\n"
"  --ids                also print the generated ids (a last line)\n"
"runtime:\n"
"  --backend NAME       cpu (default) or cuda\n"
"  --threads N          CPU threads (default: all cores)\n"
"  -h, --help           this help\n"
"\n"
"A prompt longer than the context keeps its last tokens, with a warning.\n"
"exit status: 0 done, 2 bad usage or input (a missing or malformed file, a\n"
"checkpoint that does not fit the model), 1 any other failure (writing the\n"
"output included)\n", DEFAULT_TOKENS);
}

typedef struct sample_args {
    const char *load, *model, *tokenizer, *prompt, *prompt_ids, *backend;
    int64_t layers, hidden, heads, vocab, seq_len;
    int64_t tokens, top_k, threads;
    uint64_t seed;
    double temperature;
    bool print_ids;
} sample_args;

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "delta sample: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nsee 'delta sample --help'\n");
    va_end(ap);
    return 2;
}

static int fail(int rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "delta sample: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return rc;
}

enum {
    OPT_LOAD = 256, OPT_MODEL, OPT_LAYERS, OPT_HIDDEN, OPT_HEADS, OPT_VOCAB,
    OPT_SEQ_LEN, OPT_TOKENIZER, OPT_PROMPT, OPT_PROMPT_IDS, OPT_TOKENS,
    OPT_TOP_K, OPT_TEMPERATURE, OPT_SEED, OPT_IDS, OPT_BACKEND, OPT_THREADS,
};

static const struct option long_opts[] = {
    {"load", required_argument, NULL, OPT_LOAD},
    {"model", required_argument, NULL, OPT_MODEL},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"ids", no_argument, NULL, OPT_IDS},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"help", no_argument, NULL, 'h'},
    {0},
};

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, sample_args *a) {
    *a = (sample_args){.tokens = DEFAULT_TOKENS, .temperature = 1.0,
                       .backend = "cpu"};
    char err[512];
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        const char *opt = c >= OPT_LOAD && c <= OPT_THREADS
                              ? long_opts[c - OPT_LOAD].name : "";
        char optname[64];
        snprintf(optname, sizeof optname, "--%s", opt);
        int64_t v;
        bool ok = true;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_LOAD: a->load = optarg; break;
        case OPT_MODEL: a->model = optarg; break;
        case OPT_TOKENIZER: a->tokenizer = optarg; break;
        case OPT_PROMPT: a->prompt = optarg; break;
        case OPT_PROMPT_IDS: a->prompt_ids = optarg; break;
        case OPT_BACKEND: a->backend = optarg; break;
        case OPT_IDS: a->print_ids = true; break;
        case OPT_LAYERS: ok = parse_i64(optname, optarg, 1, MAX_DIM, &a->layers, err, sizeof err); break;
        case OPT_HIDDEN: ok = parse_i64(optname, optarg, 1, MAX_DIM, &a->hidden, err, sizeof err); break;
        case OPT_HEADS: ok = parse_i64(optname, optarg, 1, MAX_DIM, &a->heads, err, sizeof err); break;
        case OPT_VOCAB: ok = parse_i64(optname, optarg, 1, MAX_DIM, &a->vocab, err, sizeof err); break;
        case OPT_SEQ_LEN: ok = parse_i64(optname, optarg, 1, MAX_DIM, &a->seq_len, err, sizeof err); break;
        case OPT_TOKENS: ok = parse_i64(optname, optarg, 1, MAX_TOKENS, &a->tokens, err, sizeof err); break;
        case OPT_TOP_K: ok = parse_i64(optname, optarg, 0, MAX_DIM, &a->top_k, err, sizeof err); break;
        case OPT_THREADS: ok = parse_i64(optname, optarg, 1, 4096, &a->threads, err, sizeof err); break;
        case OPT_SEED:
            ok = parse_i64(optname, optarg, 0, INT64_MAX, &v, err, sizeof err);
            a->seed = (uint64_t)v;
            break;
        case OPT_TEMPERATURE:
            ok = parse_f64(optname, optarg, 1e-6, 1e6, &a->temperature, err,
                           sizeof err);
            break;
        case ':':
            return usage_error("%s needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
        if (!ok) return usage_error("%s", err);
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->load)
        return usage_error("--load FILE is required: the checkpoint to "
                           "sample from");
    if (a->prompt && a->prompt_ids)
        return usage_error("--prompt and --prompt-ids both give the prompt; "
                           "give one");
    if (a->prompt && !a->tokenizer)
        return usage_error("--prompt needs --tokenizer to encode it (or "
                           "give the ids with --prompt-ids)");
    if (!a->tokenizer && !a->prompt_ids)
        return usage_error("without --tokenizer the prompt must be ids: "
                           "give --prompt-ids LIST");
    if (strcmp(a->backend, "cpu") && strcmp(a->backend, "cuda"))
        return usage_error("--backend %s: sample runs on cpu or cuda (sim has "
                           "no data to sample from)", a->backend);
    return -1;
}

/* ---- the model's configuration ---------------------------------------------- */

/* The configuration: the command line's sizes, the rest as
 * delta_model_config_pretrained finds them (delta's metadata, a config.json
 * beside the file, the tensors' shapes). */
static int model_config(const sample_args *a, delta_model_config *mc) {
    *mc = (delta_model_config){.batch = 1, .dropout = 0, .layers = a->layers,
                               .hidden = a->hidden, .heads = a->heads,
                               .vocab = a->vocab};
    char err[1024];
    delta_status st = delta_model_config_pretrained(a->load, mc, err,
                                                    sizeof err);
    if (st != DELTA_OK) return fail(st == DELTA_ERR_NOMEM ? 1 : 2, "%s", err);
    if (a->model) mc->name = a->model;
    if (strncmp(mc->name, "gpt2-", 5))
        return fail(2, "%s holds a %s: delta sample generates from GPT-2 "
                    "models", a->load, mc->name);
    return -1;
}

/* ---- generating -------------------------------------------------------------- */

/* The next token from a row of logits over ids [0, n): greedy (k <= 1) or
 * a draw among the k most likely at temperature temp with (seed, index). */
typedef struct cand {
    float v;
    int32_t id;
} cand;

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int32_t pick(const float *logits, int32_t n, int64_t k, double temp,
                    uint64_t seed, uint64_t index, cand *buf, double *p) {
    if (k <= 1) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i; /* first max: lowest id */
        return best;
    }
    if (k > n) k = n;
    for (int32_t i = 0; i < n; i++) buf[i] = (cand){logits[i], i};
    /* the k largest, ordered (value down, id up) */
    qsort(buf, (size_t)n, sizeof *buf, cand_cmp);
    double sum = 0, mx = buf[0].v / temp;
    for (int64_t i = 0; i < k; i++) sum += p[i] = exp(buf[i].v / temp - mx);
    /* a 53-bit uniform in [0, 1) */
    double u = (double)(delta_rng_u64(seed, index) >> 11) * 0x1.0p-53 * sum;
    for (int64_t i = 0; i < k; i++) {
        if (u < p[i]) return buf[i].id;
        u -= p[i];
    }
    return buf[k - 1].id;
}

/* Prints ids[0..n) decoded, or without a tokenizer as numbers separated
 * by spaces (first: the first of the line). -1, else the exit status. */
static int emit_text(delta_tokenizer *tok, const int32_t *ids, size_t n,
                     bool first) {
    if (!tok) {
        for (size_t i = 0; i < n; i++)
            printf(first && !i ? "%" PRId32 : " %" PRId32, ids[i]);
        return -1;
    }
    char buf[4096];
    size_t len;
    if (delta_tokenizer_decode(tok, ids, n, buf, sizeof buf, &len) != DELTA_OK)
        return fail(2, "%s", delta_tokenizer_error(tok));
    if (len < sizeof buf) {
        fwrite(buf, 1, len, stdout);
        return -1;
    }
    char *big = malloc(len + 1);
    if (!big) return fail(1, "out of memory");
    delta_tokenizer_decode(tok, ids, n, big, len + 1, &len);
    fwrite(big, 1, len, stdout);
    free(big);
    return -1;
}

/* Parses "1,2,3" into a new array. */
static int parse_ids(const char *s, int32_t **out, size_t *n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    *out = malloc(cap * sizeof **out);
    if (!*out) return fail(1, "out of memory");
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v >= MAX_DIM ||
            (*end && *end != ','))
            return usage_error("--prompt-ids '%s': expected ids (integers "
                               "from 0) separated by commas", s);
        (*out)[(*n)++] = (int32_t)v;
        if (!*end) break;
        p = end + 1;
    }
    return -1;
}

int cmd_sample(int argc, char **argv) {
    sample_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.threads > 0) delta_cpu_set_threads((int)a.threads);

    char err[1024];
    delta_status st;
    delta_tokenizer *tok = NULL;
    delta_st_file *f = NULL;
    delta_ctx *ctx = NULL;
    delta_backend *backend = NULL;
    delta_session *s = NULL;
    int32_t *ids = NULL, *window = NULL, *positions = NULL;
    float *logits = NULL;
    cand *cands = NULL;
    double *probs = NULL;
    size_t n_ids = 0;

    if (a.tokenizer) {
        tok = delta_tokenizer_load(a.tokenizer, &st, err, sizeof err);
        if (!tok) {
            rc = fail(st == DELTA_ERR_NOMEM ? 1 : 2, "%s", err);
            goto done;
        }
    }
    f = delta_st_open(a.load, &st, err, sizeof err);
    if (!f) {
        rc = fail(st == DELTA_ERR_NOMEM ? 1 : 2, "cannot load the checkpoint "
                  "%s: %s", a.load, err);
        goto done;
    }
    delta_model_config mc;
    if ((rc = model_config(&a, &mc)) >= 0) goto done;
    if (a.seq_len > mc.positions) {
        rc = usage_error("--seq-len %" PRId64 " is longer than the model's "
                         "%" PRId64 " positions", a.seq_len, mc.positions);
        goto done;
    }
    int64_t context = a.seq_len ? a.seq_len : mc.positions;

    /* the prompt's ids */
    if (a.prompt_ids) {
        if ((rc = parse_ids(a.prompt_ids, &ids, &n_ids)) >= 0) goto done;
    } else {
        if (!a.prompt && delta_tokenizer_find(tok, "<|endoftext|>") < 0) {
            rc = usage_error("the tokenizer %s has no <|endoftext|> to start "
                             "from: give --prompt or --prompt-ids",
                             a.tokenizer);
            goto done;
        }
        const char *text = a.prompt ? a.prompt : "<|endoftext|>";
        size_t n;
        st = delta_tokenizer_encode(tok, text, strlen(text), true, NULL, 0, &n);
        ids = malloc((n ? n : 1) * sizeof *ids);
        if (st == DELTA_OK && ids)
            st = delta_tokenizer_encode(tok, text, strlen(text), true, ids, n,
                                        &n_ids);
        if (st != DELTA_OK || !ids) {
            rc = fail(!ids ? 1 : 2, "--prompt: %s",
                      ids ? delta_tokenizer_error(tok) : "out of memory");
            goto done;
        }
        if (!n_ids) {
            rc = usage_error("--prompt is empty: give some text, or none for "
                             "<|endoftext|>");
            goto done;
        }
    }
    int32_t n_cand = (int32_t)mc.vocab;
    if (tok && delta_tokenizer_vocab_size(tok) < n_cand)
        n_cand = delta_tokenizer_vocab_size(tok); /* only ids it can decode */
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= mc.vocab) {
            rc = fail(2, "prompt token %zu is id %" PRId32 ", outside the "
                      "model's vocabulary of %" PRId64 "%s", i, ids[i],
                      mc.vocab, tok ? " (is the tokenizer the model's?)" : "");
            goto done;
        }
    if ((int64_t)n_ids > context) {
        fprintf(stderr, "delta sample: warning: the prompt is %zu tokens, "
                "longer than the context of %" PRId64 "; the model sees its "
                "last %" PRId64 "\n", n_ids, context, context);
    }
    /* one program length for the whole run: the context, or what prompt
     * and continuation need when that is less */
    int64_t need = (int64_t)n_ids + a.tokens - 1;
    mc.seq_len = need < context ? need : context;
    if (mc.seq_len < 1) mc.seq_len = 1;

    ctx = delta_ctx_new();
    delta_model m;
    st = ctx ? delta_model_build(ctx, &mc, &m) : DELTA_ERR_NOMEM;
    if (st != DELTA_OK) {
        rc = fail(st == DELTA_ERR_NOMEM ? 1 : 2, "%s",
                  ctx ? m.error : "out of memory");
        goto done;
    }
    int n_model_tensors = delta_ctx_n_tensors(ctx);
    delta_cpu_backend_opts cpu = {.link_gbps = 0, .link_latency_s = -1};
    delta_cuda_backend_opts cuda = {.device = 0};
    backend = delta_backend_new(
        a.backend, &(delta_backend_opts){.cpu = &cpu, .cuda = &cuda}, &st,
        err, sizeof err);
    if (!backend) {
        rc = fail(st == DELTA_ERR_UNSUPPORTED || st == DELTA_ERR_INVALID_ARG
                      ? 2 : 1, "%s", err);
        goto done;
    }
    delta_backend_fit_program(backend, ctx);
    s = delta_session_new(ctx, &(delta_session_opts){
        .backend = backend, .outputs = &m.logits, .n_outputs = 1}, &st, err,
        sizeof err);
    if (!s) {
        rc = fail(1, "%s", err);
        goto done;
    }
    int64_t step = 0;
    st = checkpoint_load_file(f, a.load, false, s, ctx, n_model_tensors, &m,
                              &step, stderr, err, sizeof err);
    if (st != DELTA_OK) {
        rc = fail(st == DELTA_ERR_FORMAT ? 2 : 1, "%s", err);
        goto done;
    }
    fprintf(stderr, "delta sample: %s (%" PRId64 " layers, width %" PRId64
            ", %" PRId64 " heads, vocab %" PRId64 ") from %s, step %" PRId64
            "; context %" PRId64 ", program length %" PRId64 "; %s on %s\n",
            mc.name, mc.layers, mc.hidden, mc.heads, mc.vocab, a.load, step,
            context, mc.seq_len, a.top_k <= 1 ? "greedy" : "top-k",
            a.backend);

    int64_t T = mc.seq_len, V = mc.vocab;
    size_t total = n_ids + (size_t)a.tokens;
    int32_t *grown = realloc(ids, total * sizeof *ids);
    window = calloc((size_t)T, sizeof *window);
    positions = malloc((size_t)T * sizeof *positions);
    logits = malloc((size_t)(T * V) * sizeof *logits);
    cands = a.top_k > 1 ? malloc((size_t)n_cand * sizeof *cands) : NULL;
    probs = a.top_k > 1 ? malloc((size_t)n_cand * sizeof *probs) : NULL;
    if (grown) ids = grown;
    if (!grown || !window || !positions || !logits ||
        (a.top_k > 1 && (!cands || !probs))) {
        rc = fail(1, "out of memory for %" PRId64 " x %" PRId64 " logits", T, V);
        goto done;
    }
    for (int64_t i = 0; i < T; i++) positions[i] = (int32_t)i;
    st = delta_session_write(s, m.positions, positions, (size_t)T * sizeof *positions);
    if (st != DELTA_OK) {
        rc = fail(1, "writing the positions: %s", delta_session_error(s));
        goto done;
    }
    if (tok && (a.prompt || a.prompt_ids)) { /* not the default start */
        size_t skip = (int64_t)n_ids > context ? n_ids - (size_t)context : 0;
        if ((rc = emit_text(tok, ids + skip, n_ids - skip, true)) >= 0)
            goto done;
    }
    fflush(stdout);
    size_t first_new = n_ids;
    for (int64_t i = 0; i < a.tokens; i++) {
        /* the last w <= T tokens, padded after them with id 0 */
        size_t w = n_ids < (size_t)T ? n_ids : (size_t)T;
        memset(window, 0, (size_t)T * sizeof *window);
        memcpy(window, ids + n_ids - w, w * sizeof *window);
        st = delta_session_write(s, m.input, window, (size_t)T * sizeof *window);
        if (st == DELTA_OK) st = delta_session_run(s, DELTA_RUN_EVAL, NULL);
        if (st == DELTA_OK)
            st = delta_session_read(s, m.logits, logits,
                                    (size_t)(T * V) * sizeof *logits);
        if (st != DELTA_OK) {
            rc = fail(1, "token %" PRId64 ": %s", i, delta_session_error(s));
            goto done;
        }
        const float *row = logits + (int64_t)(w - 1) * V;
        for (int32_t j = 0; j < n_cand; j++)
            if (!isfinite(row[j])) {
                rc = fail(1, "token %" PRId64 ": the logit of id %" PRId32
                          " is %g; the checkpoint's weights are not a usable "
                          "model (a diverged run?)", i, j, (double)row[j]);
                goto done;
            }
        int32_t next = pick(row, n_cand, a.top_k, a.temperature, a.seed,
                            (uint64_t)i, cands, probs);
        ids[n_ids++] = next;
        if ((rc = emit_text(tok, &next, 1, i == 0)) >= 0) goto done;
        fflush(stdout);
    }
    if (tok) putchar('\n');
    if (a.print_ids || !tok) {
        if (tok) fputs("ids:", stdout);
        for (size_t i = first_new; tok && i < n_ids; i++)
            printf(" %" PRId32, ids[i]);
        putchar('\n');
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rc = fail(1, "cannot write the output: %s", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    free(cands);
    free(probs);
    free(logits);
    free(positions);
    free(window);
    free(ids);
    delta_session_free(s);
    delta_backend_free(backend);
    delta_ctx_free(ctx);
    delta_st_close(f);
    delta_tokenizer_free(tok);
    return rc;
}
