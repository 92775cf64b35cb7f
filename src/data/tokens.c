/* delta — llm.c's token files (see include/delta/data.h): the reader maps
 * the file read-only and checks all of it when it is opened (header, size,
 * every token id), so serving a sample needs no checks: a sample is a
 * window of the mapping decoded from little-endian uint16 to int32 ids.
 * Also the writer (delta_tokens_write, atomic through core/files.h) and
 * the magic sniff a caller uses to tell a token file from text. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/files.h"
#include "data/data_impl.h"

/* llm.c's other data files, recognised only to say what they are: tokens
 * of LLaMA 3 (uint32, version 7) and multiple-choice evals (HellaSwag). */
#define LLMC_LLAMA3_MAGIC 20240801
#define LLMC_EVAL_MAGIC 20240522
#define HDR DELTA_TOKENS_HEADER_BYTES

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline int32_t le16(const uint8_t *p) {
    return (int32_t)p[0] | (int32_t)p[1] << 8;
}

/* Sample `index` starts at token index * info.seq_len whatever len is: a
 * shorter len takes the window's first len tokens. */
static void get_causal(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask, int64_t len) {
    (void)seed, (void)epoch, (void)mask;
    const uint8_t *w = ds->tokens + 2 * (size_t)index * (size_t)ds->info.seq_len;
    int32_t *x = input;
    int32_t cur = le16(w);
    for (int64_t t = 0; t < len; t++) {
        int32_t next = le16(w + 2 * (size_t)t + 2);
        x[t] = cur;
        target[t] = next;
        cur = next;
    }
}

/* What a wrong magic may be, for the message. */
static const char *magic_hint(uint32_t m) {
    if (m == __builtin_bswap32(DELTA_TOKENS_MAGIC))
        return " (the magic's bytes reversed: a big-endian header; llm.c "
               "writes little-endian int32)";
    if (m == LLMC_LLAMA3_MAGIC)
        return " (llm.c's LLaMA-3 token file, uint32 tokens: not "
               "supported; tokenize with GPT-2's tokenizer)";
    if (m == LLMC_EVAL_MAGIC)
        return " (llm.c's multiple-choice eval file, e.g. HellaSwag, not a "
               "token file)";
    return " (not an llm.c token file; make one with llm.c's dev/data "
           "scripts or scripts/make_token_file.py)";
}

/* Checks the header bytes h[0..got) of a file of size bytes; on a problem
 * writes the message and returns false. *count gets the token count. */
static bool check_header(const char *path, const uint8_t *h, size_t got,
                         uint64_t size, int64_t *count, delta_status *status,
                         char *err, size_t err_len) {
    if (got < 4) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: %llu bytes: the file ends at byte %llu, inside "
                        "the %d-byte header of an llm.c token file (magic "
                        "%d, version, count, 253 more int32)", path,
                        (unsigned long long)size, (unsigned long long)size,
                        HDR, DELTA_TOKENS_MAGIC);
        return false;
    }
    uint32_t magic = le32(h);
    if (magic != DELTA_TOKENS_MAGIC) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: bad magic at byte 0: %u (0x%08x), expected %d "
                        "(llm.c's GPT-2 token file)%s", path, magic, magic,
                        DELTA_TOKENS_MAGIC, magic_hint(magic));
        return false;
    }
    if (got >= 8 && le32(h + 4) != DELTA_TOKENS_VERSION) {
        uint32_t v = le32(h + 4);
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: unknown version %d at byte 4, expected %d "
                        "(GPT-2 tokens as uint16, the one this reader "
                        "knows)%s", path, (int32_t)v,
                        DELTA_TOKENS_VERSION,
                        v == 0 && got >= 12 && le32(h + 8) == 1
                            ? "; the header looks written as 64-bit "
                              "integers, llm.c's are 32-bit"
                            : "");
        return false;
    }
    if (got < HDR) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: %llu bytes: the file ends at byte %llu, inside "
                        "the %d-byte header (256 int32): cut short, or not "
                        "an llm.c token file", path, (unsigned long long)size,
                        (unsigned long long)size, HDR);
        return false;
    }
    int32_t n = (int32_t)le32(h + 8);
    if (n < 1) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: token count %d at byte 8, expected at least 1",
                        path, n);
        return false;
    }
    uint64_t want = (uint64_t)HDR + 2 * (uint64_t)n;
    if (size < want) {
        uint64_t have = (size - HDR) / 2;
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: %llu bytes, but the header's count of %d "
                        "tokens (at byte 8) needs %llu: the file is cut "
                        "off at byte %llu, at token %llu of %d%s", path,
                        (unsigned long long)size, n,
                        (unsigned long long)want, (unsigned long long)size,
                        (unsigned long long)have, n,
                        (size - HDR) % 2 ? " (in the middle of it)" : "");
        return false;
    }
    if (size > want) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: %llu bytes, %llu more than the header's count "
                        "of %d tokens (at byte 8) takes: unexpected data "
                        "from byte %llu on", path, (unsigned long long)size,
                        (unsigned long long)(size - want), n,
                        (unsigned long long)want);
        return false;
    }
    *count = n;
    return true;
}

/* Opens path for reading only when it is a regular file (O_NONBLOCK: a
 * FIFO does not block the open). Returns the descriptor, or -1 with the
 * message written. */
static int open_regular(const char *path, struct stat *sb,
                        delta_status *status, char *err, size_t err_len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                        "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                        "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    return fd;
}

/* Checks every token id of the mapped file against vocab. */
static bool check_ids(const char *path, const uint8_t *tok, int64_t n,
                      int64_t vocab, delta_status *status, char *err,
                      size_t err_len) {
    if (vocab > 65535) return true; /* every uint16 is an id */
    int64_t first = -1, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (le16(tok + 2 * (size_t)i) < vocab) continue;
        if (first < 0) first = i;
        bad++;
    }
    if (first < 0) return true;
    delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                    "%s: token %lld (at byte %llu) is %d, not below the "
                    "vocab %lld%s; %lld of the %lld tokens are out of range "
                    "(a file of another tokenizer needs a larger vocab)",
                    path, (long long)first,
                    (unsigned long long)(HDR + 2 * (uint64_t)first),
                    le16(tok + 2 * (size_t)first), (long long)vocab,
                    vocab == DELTA_TOKENS_GPT2_VOCAB ? " (GPT-2's)" : "",
                    (long long)bad, (long long)n);
    return false;
}

delta_dataset *delta_dataset_tokens_new(const char *path,
                                        const delta_tokens_opts *opts,
                                        delta_status *status, char *err,
                                        size_t err_len) {
    if (!delta_data_check_args("token dataset", path, opts != NULL,
                               opts ? opts->seq_len : 0, status, err, err_len))
        return NULL;
    int64_t T = opts->seq_len;
    int64_t vocab = opts->vocab ? opts->vocab : DELTA_TOKENS_GPT2_VOCAB;
    if (vocab < 1 || vocab > INT32_MAX)
        return delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                               "token dataset %s: vocab %lld, expected "
                               "1..%d",
                               path, (long long)vocab, INT32_MAX);

    struct stat sb;
    int fd = open_regular(path, &sb, status, err, err_len);
    if (fd < 0) return NULL;
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t h[HDR];
    size_t want = size < HDR ? (size_t)size : HDR, got = 0;
    while (got < want) {
        ssize_t r = pread(fd, h + got, want - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                            "%s: read %zu of the header's %zu bytes: %s",
                            path, got, want,
                            r < 0 ? strerror(errno) : "file shrank");
            close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    int64_t n = 0;
    if (!check_header(path, h, got, size, &n, status, err, err_len)) {
        close(fd);
        return NULL;
    }
    if (n < T + 1) {
        close(fd);
        char fit[64] = "";
        if (n > 1)
            snprintf(fit, sizeof fit, "a seq_len of at most %lld or ",
                     (long long)n - 1);
        return delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                               "%s: %lld tokens, too few for one window: "
                               "seq_len %lld needs at least %lld (a window's "
                               "inputs and its last target); use %sa longer "
                               "file",
                               path, (long long)n, (long long)T,
                               (long long)T + 1, fit);
    }
    if (size > SIZE_MAX / 2) {
        close(fd);
        return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                               "%s: too large to map", path);
    }

    delta_dataset *ds = delta_data_alloc(DELTA_DATA_CAUSAL_LM);
    if (!ds) {
        close(fd);
        return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                               "token dataset %s: out of memory", path);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED) {
        delta_dataset_free(ds);
        return delta_data_fail(status, err, err_len,
                               e == ENOMEM ? DELTA_ERR_NOMEM : DELTA_ERR_IO,
                               "%s: cannot map its %llu bytes: %s", path,
                               (unsigned long long)size, strerror(e));
    }
    ds->map = map;
    ds->map_len = (size_t)size;
    ds->tokens = (const uint8_t *)map + HDR;
    (void)madvise(map, (size_t)size, MADV_SEQUENTIAL); /* the scan below */
    bool ok = check_ids(path, ds->tokens, n, vocab, status, err, err_len);
    (void)madvise(map, (size_t)size, MADV_NORMAL);
    if (!ok) {
        delta_dataset_free(ds);
        return NULL;
    }
    delta_data_info *in = &ds->info;
    in->len = (n - 1) / T;
    in->seq_len = T;
    in->vocab = vocab;
    in->input_dtype = DELTA_I32;
    in->input_numel = T;
    in->target_numel = T;
    ds->get = get_causal;
    snprintf(ds->name, sizeof ds->name,
             "llm.c tokens %.200s (%lld tokens; %lld windows of %lld)", path,
             (long long)n, (long long)in->len, (long long)T);
    return ds;
}

bool delta_tokens_file_is(const char *path) {
    if (!path) return false;
    struct stat sb;
    int fd = open_regular(path, &sb, NULL, NULL, 0);
    if (fd < 0) return false;
    uint8_t h[4];
    bool is = pread(fd, h, 4, 0) == 4 &&
              (le32(h) == DELTA_TOKENS_MAGIC || le32(h) == LLMC_LLAMA3_MAGIC ||
               le32(h) == LLMC_EVAL_MAGIC);
    close(fd);
    return is;
}

/* ---- writer ---------------------------------------------------------------- */

typedef struct token_src {
    const int32_t *tokens;
    int64_t n;
} token_src;

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes the header and the tokens as little-endian uint16, in chunks. */
static bool fill_tokens(int fd, void *ud) {
    const token_src *s = ud;
    uint8_t buf[16384];
    memset(buf, 0, HDR);
    put_le32(buf, DELTA_TOKENS_MAGIC);
    put_le32(buf + 4, DELTA_TOKENS_VERSION);
    put_le32(buf + 8, (uint32_t)s->n);
    if (!delta_file_write_all(fd, buf, HDR)) return false;
    const int64_t per = (int64_t)sizeof buf / 2;
    for (int64_t i = 0; i < s->n; i += per) {
        int64_t k = s->n - i < per ? s->n - i : per;
        for (int64_t j = 0; j < k; j++) {
            uint32_t v = (uint32_t)s->tokens[i + j];
            buf[2 * j] = (uint8_t)v;
            buf[2 * j + 1] = (uint8_t)(v >> 8);
        }
        if (!delta_file_write_all(fd, buf, 2 * (size_t)k)) return false;
    }
    return true;
}

delta_status delta_tokens_write(const char *path, const int32_t *tokens,
                                int64_t n, char *err, size_t err_len) {
    delta_status st = DELTA_OK;
    if (err && err_len) err[0] = '\0';
    if (!path || (!tokens && n > 0)) {
        delta_data_fail(&st, err, err_len, DELTA_ERR_INVALID_ARG,
                        "token file writer: no %s given",
                        path ? "tokens" : "path");
        return st;
    }
    if (n < 1 || n > INT32_MAX) {
        delta_data_fail(&st, err, err_len, DELTA_ERR_INVALID_ARG,
                        "token file %s: %lld tokens, expected 1..%d (the "
                        "header's count is an int32; llm.c refuses empty "
                        "files)", path, (long long)n, INT32_MAX);
        return st;
    }
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > 65535) {
            delta_data_fail(&st, err, err_len, DELTA_ERR_INVALID_ARG,
                            "token file %s: token %lld is %d, outside the "
                            "0..65535 of a uint16 token file; nothing "
                            "written", path, (long long)i, tokens[i]);
            return st;
        }
    token_src src = {tokens, n};
    char sub[512] = "";
    bool refused = false;
    if (delta_file_write_atomic_fn(path, fill_tokens, &src, &refused, sub,
                                   sizeof sub) != 0)
        delta_data_fail(&st, err, err_len,
                        refused ? DELTA_ERR_INVALID_ARG : DELTA_ERR_IO,
                        "token file: %s", sub);
    return st;
}
