/* delta — byte-level BPE from a Hugging Face tokenizer.json (see
 * include/delta/tokenizer.h).
 *
 * What it owns: per id, the file's spelling of the token and the bytes it
 * stands for; two hash maps (bytes -> id for the merges' results and the
 * ignore_merges lookup, spelling -> id for delta_tokenizer_find and for
 * reading the merges) and one from a pair of ids to the merge's rank and
 * result; the added tokens; GPT-2's split regex compiled by PCRE2; and the
 * scratch buffers encoding reuses.
 *
 * Byte level: GPT-2 spells every byte as one printable character (bytes
 * that are printable Latin-1 as themselves, the other 68 as U+0100 on, in
 * byte order), so a token's spelling is its bytes one character each. A
 * piece of text starts as its bytes' one-byte tokens and the merges join
 * neighbours, the lowest rank first, every occurrence of that pair left
 * to right, until no pair of neighbours has a merge (OpenAI's encoder.py;
 * tiktoken and Hugging Face's tokenizers give the same ids). */
#include "delta/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef DELTA_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* GPT-2's pre-tokenization (OpenAI's encoder.py). */
static const char gpt2_split[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";
#endif

/* Largest tokenizer.json read (GPT-2's is 1.4 MB; big vocabularies of
 * other models are tens of MB). */
#define MAX_FILE_BYTES ((size_t)1 << 30)

/* ---- hash maps ------------------------------------------------------------ */

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Byte strings to ids, open addressing; the keys are not owned. */
typedef struct str_slot {
    const char *key; /* NULL: empty */
    uint32_t len;
    int32_t id;
} str_slot;
typedef struct str_map {
    str_slot *slots;
    size_t mask;
} str_map;

static bool str_map_init(str_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    return m->slots != NULL;
}

/* Inserts key -> id unless key is there; returns the id the map holds. */
static int32_t str_map_put(str_map *m, const char *key, uint32_t len,
                           int32_t id) {
    size_t i = hash_bytes(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        str_slot *s = &m->slots[i];
        if (!s->key) {
            *s = (str_slot){key, len, id};
            return id;
        }
        if (s->len == len && !memcmp(s->key, key, len)) return s->id;
    }
}

static int32_t str_map_get(const str_map *m, const char *key, size_t len) {
    size_t i = hash_bytes(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        const str_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->len == len && !memcmp(s->key, key, len)) return s->id;
    }
}

/* A pair of ids (a << 32 | b) to its merge. */
typedef struct pair_slot {
    uint64_t key; /* PAIR_EMPTY: empty (ids are < 2^31) */
    int32_t rank, id;
} pair_slot;
#define PAIR_EMPTY UINT64_MAX
typedef struct pair_map {
    pair_slot *slots;
    size_t mask;
} pair_map;

static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return (size_t)(k ^ (k >> 33));
}

static bool pair_map_init(pair_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return false;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = PAIR_EMPTY;
    m->mask = cap - 1;
    return true;
}

/* Keeps the first (lowest-ranked) merge of a pair given twice. */
static void pair_map_put(pair_map *m, uint64_t key, int32_t rank, int32_t id) {
    size_t i = pair_hash(key) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        pair_slot *s = &m->slots[i];
        if (s->key == PAIR_EMPTY) {
            *s = (pair_slot){key, rank, id};
            return;
        }
        if (s->key == key) return;
    }
}

static const pair_slot *pair_map_get(const pair_map *m, uint64_t key) {
    size_t i = pair_hash(key) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        const pair_slot *s = &m->slots[i];
        if (s->key == PAIR_EMPTY) return NULL;
        if (s->key == key) return s;
    }
}

/* ---- the tokenizer --------------------------------------------------------- */

typedef struct added_token {
    const char *content; /* = spelling[id] */
    size_t len;
    int32_t id;
} added_token;

struct delta_tokenizer {
    int32_t n_ids;        /* one more than the largest id */
    char **spelling;      /* [n_ids]: the file's spelling, NULL for holes */
    char **bytes;         /* [n_ids]: the bytes a token stands for */
    uint32_t *n_bytes;    /* [n_ids] */
    str_map by_bytes;     /* vocabulary tokens' bytes -> id */
    str_map by_spelling;  /* every token's spelling -> id */
    pair_map merges;      /* (a, b) -> rank and the merged token */
    int32_t byte_id[256]; /* one-byte tokens (-1: none) */
    added_token *added;
    int n_added;
    bool add_prefix_space, use_regex, ignore_merges;
#ifdef DELTA_HAVE_PCRE2
    pcre2_code *re;
    pcre2_match_data *md;
#endif
    void *scratch;        /* encoding: a piece's symbols and merges */
    size_t scratch_cap;
    char *piece;          /* a segment with the prefix space added */
    size_t piece_cap;
    char error[512];
};

/* GPT-2's byte -> character table (bytes_to_unicode of encoder.py) and its
 * inverse over the characters U+0000..U+0143. */
static void byte_alphabet(uint32_t to_cp[256], int16_t from_cp[324]) {
    int n = 0;
    for (int c = 0; c < 324; c++) from_cp[c] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                         (b >= 0xAE && b <= 0xFF);
        to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        from_cp[to_cp[b]] = (int16_t)b;
    }
}

/* The code point at s[*i] (advancing *i), or -1 when s[*i..n) does not
 * start with a valid UTF-8 character (overlong, surrogate, past
 * U+10FFFF, cut short). */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
    unsigned c = s[*i];
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
              : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || *i + (size_t)len > n) return -1;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) {
        unsigned d = s[*i + (size_t)k];
        if ((d & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (d & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *i += (size_t)len;
    return (int32_t)cp;
}

void delta_tokenizer_free(delta_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; t->spelling && i < t->n_ids; i++) {
        free(t->spelling[i]);
        free(t->bytes[i]);
    }
    free(t->spelling);
    free(t->bytes);
    free(t->n_bytes);
    free(t->by_bytes.slots);
    free(t->by_spelling.slots);
    free(t->merges.slots);
    free(t->added);
#ifdef DELTA_HAVE_PCRE2
    pcre2_match_data_free(t->md);
    pcre2_code_free(t->re);
#endif
    free(t->scratch);
    free(t->piece);
    free(t);
}

/* The loader's state: where messages go. */
typedef struct loader {
    delta_status *status;
    char *err;
    size_t err_len;
} loader;

static delta_tokenizer *load_fail(const loader *ld, delta_tokenizer *t,
                                  delta_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static delta_tokenizer *load_fail(const loader *ld, delta_tokenizer *t,
                                  delta_status st, const char *fmt, ...) {
    if (ld->err && ld->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err, ld->err_len, fmt, ap);
        va_end(ap);
    }
    if (ld->status) *ld->status = st;
    delta_tokenizer_free(t);
    return NULL;
}

static bool json_is_null_or_absent(const cJSON *j) {
    return !j || cJSON_IsNull(j);
}

/* "Sequence" of one ByteLevel counts as ByteLevel; returns the ByteLevel
 * object, or NULL. */
static const cJSON *byte_level_of(const cJSON *j) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(type)) return NULL;
    if (!strcmp(type->valuestring, "ByteLevel")) return j;
    if (strcmp(type->valuestring, "Sequence")) return NULL;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
    if (!seq) seq = cJSON_GetObjectItemCaseSensitive(j, "decoders");
    if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) != 1) return NULL;
    return byte_level_of(cJSON_GetArrayItem(seq, 0));
}

static const char *type_name(const cJSON *j) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    return cJSON_IsString(type) ? type->valuestring : "?";
}

/* Stores id's spelling (and its bytes: raw for an added token, else
 * through the byte alphabet). */
static delta_status set_token(delta_tokenizer *t, const loader *ld,
                              int32_t id, const char *spelling, bool raw,
                              const int16_t from_cp[324]) {
    size_t n = strlen(spelling);
    char *bytes = malloc(n + 1);
    t->spelling[id] = strdup(spelling);
    if (!bytes || !t->spelling[id]) {
        free(bytes);
        load_fail(ld, NULL, DELTA_ERR_NOMEM, "out of memory reading the "
                  "vocabulary");
        return DELTA_ERR_NOMEM;
    }
    size_t k = 0;
    if (raw) {
        memcpy(bytes, spelling, n);
        k = n;
    } else {
        const unsigned char *s = (const unsigned char *)spelling;
        for (size_t i = 0; i < n;) {
            int32_t cp = utf8_next(s, n, &i);
            if (cp < 0 || cp >= 324 || from_cp[cp] < 0) {
                free(bytes);
                load_fail(ld, NULL, DELTA_ERR_UNSUPPORTED,
                          "token %" PRId32 " '%s' is not byte-level: it has "
                          "a character outside GPT-2's byte alphabet; "
                          "delta's tokenizer reads byte-level BPE only",
                          id, spelling);
                return DELTA_ERR_UNSUPPORTED;
            }
            bytes[k++] = (char)from_cp[cp];
        }
    }
    bytes[k] = '\0';
    t->bytes[id] = bytes;
    t->n_bytes[id] = (uint32_t)k;
    return DELTA_OK;
}

/* A non-negative int32 id of a JSON number, or -1. */
static int32_t json_id(const cJSON *j) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0 && v < 2147483647.0) || v != (double)(int32_t)v) return -1;
    return (int32_t)v;
}

delta_tokenizer *delta_tokenizer_parse(const char *json, size_t len,
                                       delta_status *status, char *err,
                                       size_t err_len) {
    loader ld = {status, err, err_len};
    if (status) *status = DELTA_OK;
    if (err && err_len) err[0] = '\0';
    if (!json)
        return load_fail(&ld, NULL, DELTA_ERR_INVALID_ARG, "no tokenizer "
                         "text given");
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json)
                                                          : 0;
        return load_fail(&ld, NULL, DELTA_ERR_FORMAT, "not JSON: a syntax "
                         "error near byte %zu of %zu", off, len);
    }
    delta_tokenizer *t = calloc(1, sizeof *t);
    delta_tokenizer *ret = NULL;
    if (!t) {
        load_fail(&ld, NULL, DELTA_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        load_fail(&ld, t, DELTA_ERR_FORMAT, "no \"model\" object: not a "
                  "Hugging Face tokenizer.json");
        goto done;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE"))) {
        load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "model.type is %s%s%s; "
                  "delta's tokenizer reads byte-level BPE (\"BPE\") only",
                  cJSON_IsString(type) ? "\"" : "",
                  cJSON_IsString(type) ? type->valuestring : "not a string",
                  cJSON_IsString(type) ? "\"" : "");
        goto done;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        load_fail(&ld, t, DELTA_ERR_FORMAT, "model.vocab must be an object "
                  "and model.merges an array");
        goto done;
    }
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(model,
                                                        "continuing_subword_prefix");
    const cJSON *suf = cJSON_GetObjectItemCaseSensitive(model,
                                                        "end_of_word_suffix");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsTrue(fb) || (cJSON_IsString(pre) && *pre->valuestring) ||
        (cJSON_IsString(suf) && *suf->valuestring) ||
        (cJSON_IsNumber(drop) && drop->valuedouble > 0)) {
        load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "model.%s is set; delta's "
                  "tokenizer reads GPT-2's byte-level BPE only",
                  cJSON_IsTrue(fb) ? "byte_fallback"
                  : cJSON_IsString(pre) && *pre->valuestring
                      ? "continuing_subword_prefix"
                  : cJSON_IsString(suf) && *suf->valuestring
                      ? "end_of_word_suffix" : "dropout");
        goto done;
    }
    t->ignore_merges = cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));

    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (!json_is_null_or_absent(norm)) {
        load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "normalizer %s is not "
                  "supported: delta's tokenizer reads GPT-2's byte-level BPE "
                  "(no normalizer)", type_name(norm));
        goto done;
    }
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *bl = byte_level_of(pt);
    if (!bl) {
        load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "pre_tokenizer %s is not "
                  "supported: delta's tokenizer needs GPT-2's ByteLevel",
                  pt && !cJSON_IsNull(pt) ? type_name(pt) : "null");
        goto done;
    }
    t->add_prefix_space = cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space"));
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    t->use_regex = !cJSON_IsFalse(ur);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!json_is_null_or_absent(dec) && !byte_level_of(dec)) {
        load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "decoder %s is not "
                  "supported: delta's tokenizer decodes GPT-2's ByteLevel",
                  type_name(dec));
        goto done;
    }

    /* ids: the vocabulary's and the added tokens' */
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
        load_fail(&ld, t, DELTA_ERR_FORMAT, "added_tokens must be an array");
        goto done;
    }
    int64_t max_id = -1;
    int n_vocab = 0, n_added = cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0;
    for (const cJSON *e = vocab->child; e; e = e->next, n_vocab++) {
        int32_t id = json_id(e);
        if (id < 0) {
            load_fail(&ld, t, DELTA_ERR_FORMAT, "model.vocab[\"%s\"] is not "
                      "an id (an integer from 0)", e->string);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    for (int i = 0; i < n_added; i++) {
        const cJSON *a = cJSON_GetArrayItem(added, i);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(a, "id"));
        if (id < 0 || !cJSON_IsString(content) || !*content->valuestring) {
            load_fail(&ld, t, DELTA_ERR_FORMAT, "added_tokens[%d] needs an "
                      "\"id\" (an integer from 0) and a non-empty "
                      "\"content\"", i);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    /* ids are dense in real files; tables are sized by the largest id */
    int64_t n_tokens = (int64_t)n_vocab + n_added;
    if (max_id < 0 || max_id >= 2 * n_tokens + 1024) {
        load_fail(&ld, t, DELTA_ERR_FORMAT, max_id < 0
                  ? "model.vocab is empty" : "the largest id is %" PRId64
                  " for %" PRId64 " tokens: ids must be about 0..N-1 for N "
                  "tokens", max_id, n_tokens);
        goto done;
    }
    t->n_ids = (int32_t)max_id + 1;
    t->spelling = calloc((size_t)t->n_ids, sizeof *t->spelling);
    t->bytes = calloc((size_t)t->n_ids, sizeof *t->bytes);
    t->n_bytes = calloc((size_t)t->n_ids, sizeof *t->n_bytes);
    t->added = calloc((size_t)(n_added ? n_added : 1), sizeof *t->added);
    if (!t->spelling || !t->bytes || !t->n_bytes || !t->added ||
        !str_map_init(&t->by_bytes, (size_t)n_vocab) ||
        !str_map_init(&t->by_spelling, (size_t)(n_vocab + n_added)) ||
        !pair_map_init(&t->merges, (size_t)cJSON_GetArraySize(merges))) {
        load_fail(&ld, t, DELTA_ERR_NOMEM, "out of memory for %" PRId32
                  " tokens", t->n_ids);
        goto done;
    }
    uint32_t to_cp[256];
    int16_t from_cp[324];
    byte_alphabet(to_cp, from_cp);
    /* added tokens first: their bytes are their content as written */
    for (int i = 0; i < n_added; i++) {
        const cJSON *a = cJSON_GetArrayItem(added, i);
        const char *content =
            cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(a, "id"));
        if (t->spelling[id]) {
            load_fail(&ld, t, DELTA_ERR_FORMAT, "added_tokens give id %"
                      PRId32 " twice", id);
            goto done;
        }
        if (set_token(t, &ld, id, content, true, from_cp) != DELTA_OK) {
            delta_tokenizer_free(t);
            t = NULL;
            goto done;
        }
        t->added[t->n_added++] = (added_token){t->spelling[id], strlen(content), id};
        str_map_put(&t->by_spelling, t->spelling[id],
                    (uint32_t)strlen(content), id);
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = json_id(e);
        bool is_added = false;
        for (int i = 0; i < t->n_added; i++) is_added |= t->added[i].id == id;
        if (is_added) {
            /* the vocabulary may list an added token under its id too */
            if (!strcmp(t->spelling[id], e->string)) continue;
            load_fail(&ld, t, DELTA_ERR_FORMAT, "id %" PRId32 " is both "
                      "\"%s\" (model.vocab) and added token \"%s\"", id,
                      e->string, t->spelling[id]);
            goto done;
        }
        if (t->spelling[id]) {
            load_fail(&ld, t, DELTA_ERR_FORMAT, "model.vocab gives id %"
                      PRId32 " to both \"%s\" and \"%s\"", id,
                      t->spelling[id], e->string);
            goto done;
        }
        if (set_token(t, &ld, id, e->string, false, from_cp) != DELTA_OK) {
            delta_tokenizer_free(t);
            t = NULL;
            goto done;
        }
        str_map_put(&t->by_spelling, t->spelling[id],
                    (uint32_t)strlen(t->spelling[id]), id);
        str_map_put(&t->by_bytes, t->bytes[id], t->n_bytes[id], id);
        if (t->n_bytes[id] == 1)
            t->byte_id[(unsigned char)t->bytes[id][0]] = id;
    }

    /* merges: "a b" strings or [a, b] pairs, in rank order */
    int rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a = NULL, *b = NULL;
        char buf[512];
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            size_t la = sp ? (size_t)(sp - m->valuestring) : 0;
            if (sp && la > 0 && sp[1] && !strchr(sp + 1, ' ') &&
                strlen(m->valuestring) < sizeof buf) {
                memcpy(buf, m->valuestring, la);
                buf[la] = '\0';
                a = buf;
                b = sp + 1;
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            b = m->child->next->valuestring;
        }
        if (!a) {
            char *txt = cJSON_PrintUnformatted(m);
            load_fail(&ld, t, DELTA_ERR_FORMAT, "model.merges[%d] is %.80s: "
                      "expected \"a b\" or [\"a\", \"b\"]", rank,
                      txt ? txt : "?");
            cJSON_free(txt);
            goto done;
        }
        size_t la = strlen(a), lb = strlen(b);
        int32_t ia = str_map_get(&t->by_spelling, a, la);
        int32_t ib = str_map_get(&t->by_spelling, b, lb);
        char *ab = malloc(la + lb + 1);
        if (!ab) {
            load_fail(&ld, t, DELTA_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(ab, a, la);
        memcpy(ab + la, b, lb + 1);
        int32_t iab = str_map_get(&t->by_spelling, ab, la + lb);
        free(ab);
        if (ia < 0 || ib < 0 || iab < 0) {
            load_fail(&ld, t, DELTA_ERR_FORMAT, "model.merges[%d] (\"%s\", "
                      "\"%s\"): \"%s%s\" is not in model.vocab", rank, a, b,
                      ia < 0 ? a : ib < 0 ? b : a, ia < 0 || ib < 0 ? "" : b);
            goto done;
        }
        pair_map_put(&t->merges, pair_key(ia, ib), rank, iab);
    }

#ifdef DELTA_HAVE_PCRE2
    if (t->use_regex) {
        int code;
        PCRE2_SIZE off;
        t->re = pcre2_compile((PCRE2_SPTR)gpt2_split, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
        if (!t->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            load_fail(&ld, t, DELTA_ERR_UNSUPPORTED, "PCRE2 cannot compile "
                      "GPT-2's split regex (%s at %zu): is it built with "
                      "Unicode support?", (const char *)msg, (size_t)off);
            goto done;
        }
        pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* faster if it can */
        t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
        if (!t->md) {
            load_fail(&ld, t, DELTA_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
#endif
    ret = t;
done:
    cJSON_Delete(root);
    return ret;
}

delta_tokenizer *delta_tokenizer_load(const char *path, delta_status *status,
                                      char *err, size_t err_len) {
    loader ld = {status, err, err_len};
    if (!path)
        return load_fail(&ld, NULL, DELTA_ERR_INVALID_ARG, "no tokenizer "
                         "path given");
    FILE *f = fopen(path, "rb");
    if (!f)
        return load_fail(&ld, NULL, DELTA_ERR_IO, "cannot open the tokenizer "
                         "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return load_fail(&ld, NULL, DELTA_ERR_IO, "the tokenizer %s is not "
                         "a regular file", path);
    }
    if ((size_t)sb.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return load_fail(&ld, NULL, DELTA_ERR_FORMAT, "the tokenizer %s is "
                         "%lld bytes: more than a tokenizer.json is (1 GiB)",
                         path, (long long)sb.st_size);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return load_fail(&ld, NULL, DELTA_ERR_NOMEM, "out of memory reading "
                         "%s", path);
    }
    size_t got = fread(buf, 1, n, f);
    bool bad = ferror(f);
    fclose(f);
    if (got != n || bad) {
        free(buf);
        return load_fail(&ld, NULL, DELTA_ERR_IO, "cannot read the tokenizer "
                         "%s", path);
    }
    char sub[480] = "";
    delta_status st;
    delta_tokenizer *t = delta_tokenizer_parse(buf, n, &st, sub, sizeof sub);
    free(buf);
    if (!t) return load_fail(&ld, NULL, st, "tokenizer %s: %s", path, sub);
    return t;
}

int32_t delta_tokenizer_vocab_size(const delta_tokenizer *t) {
    return t ? t->n_ids : 0;
}

const char *delta_tokenizer_token(const delta_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids ? t->spelling[id] : NULL;
}

int32_t delta_tokenizer_find(const delta_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    return str_map_get(&t->by_spelling, token, strlen(token));
}

const char *delta_tokenizer_error(const delta_tokenizer *t) {
    return t ? t->error : "no tokenizer";
}

static delta_status tok_fail(delta_tokenizer *t, delta_status st,
                             const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static delta_status tok_fail(delta_tokenizer *t, delta_status st,
                             const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- encoding -------------------------------------------------------------- */

/* Appends id to ids (counting all, writing those that fit). */
static void emit(int32_t id, int32_t *ids, size_t cap, size_t *n) {
    if (*n < cap) ids[*n] = id;
    (*n)++;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* A merge waiting in bpe_piece's heap: pair (a, b) at symbol pos. */
typedef struct bpe_cand {
    int32_t rank, pos, a, b, id;
} bpe_cand;

/* Heap order: the lowest rank, then the leftmost. */
static bool cand_before(const bpe_cand *x, const bpe_cand *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c) {
    size_t i = (*n)++;
    for (; i && cand_before(&c, &h[(i - 1) / 2]); i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Queues the merge of the symbols at i and its next, if there is one. */
static void queue_pair(const delta_tokenizer *t, const int32_t *sym,
                       const int32_t *next, int32_t i, bpe_cand *h,
                       size_t *nh) {
    if (i < 0 || next[i] < 0) return;
    const pair_slot *p = pair_map_get(&t->merges,
                                      pair_key(sym[i], sym[next[i]]));
    if (p)
        heap_push(h, nh, (bpe_cand){p->rank, i, sym[i], sym[next[i]], p->id});
}

/* BPE on one piece of bytes: the symbols are a linked list, the possible
 * merges a heap (lowest rank, then leftmost), each checked when popped
 * (its symbols may have merged since): O(n log n) for a piece of n bytes
 * (a long run of letters or spaces is one piece). The same ids as
 * encoder.py's "merge every occurrence of the best pair, repeat": a pair
 * made by a merge ranks after the merge that made it. */
static delta_status bpe_piece(delta_tokenizer *t, const char *s, size_t len,
                              int32_t *ids, size_t cap, size_t *n) {
    if (!len) return DELTA_OK;
    int32_t whole;
    if (t->ignore_merges && (whole = str_map_get(&t->by_bytes, s, len)) >= 0) {
        emit(whole, ids, cap, n);
        return DELTA_OK;
    }
    if (len > INT32_MAX / 4)
        return tok_fail(t, DELTA_ERR_INVALID_ARG, "a piece of %zu bytes is "
                        "too long to encode", len);
    /* sym, prev, next: 3 len int32; the heap: at most len - 1 pairs at
     * first and two per merge, so 3 len */
    size_t need = 3 * len * sizeof(int32_t) + 3 * len * sizeof(bpe_cand);
    if (!grow((void **)&t->scratch, &t->scratch_cap, need, 1))
        return tok_fail(t, DELTA_ERR_NOMEM, "out of memory encoding");
    bpe_cand *heap = (bpe_cand *)t->scratch;
    int32_t *sym = (int32_t *)(heap + 3 * len), *prev = sym + len,
            *next = prev + len;
    for (size_t i = 0; i < len; i++) {
        sym[i] = t->byte_id[(unsigned char)s[i]];
        if (sym[i] < 0)
            return tok_fail(t, DELTA_ERR_FORMAT, "byte 0x%02x has no token "
                            "in the vocabulary", (unsigned char)s[i]);
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < len; i++)
        queue_pair(t, sym, next, (int32_t)i, heap, &nh);
    while (nh) {
        bpe_cand c = heap_pop(heap, &nh);
        int32_t j = next[c.pos];
        if (sym[c.pos] != c.a || j < 0 || sym[j] != c.b) continue; /* stale */
        sym[c.pos] = c.id;
        sym[j] = -1;
        next[c.pos] = next[j];
        if (next[j] >= 0) prev[next[j]] = c.pos;
        queue_pair(t, sym, next, prev[c.pos], heap, &nh);
        queue_pair(t, sym, next, c.pos, heap, &nh);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) emit(sym[i], ids, cap, n);
    return DELTA_OK;
}

/* One segment of text between added tokens: the prefix space, the split,
 * the merges. */
static delta_status encode_segment(delta_tokenizer *t, const char *s,
                                   size_t len, int32_t *ids, size_t cap,
                                   size_t *n) {
    if (!len) return DELTA_OK;
    if (t->add_prefix_space && s[0] != ' ') {
        if (!grow((void **)&t->piece, &t->piece_cap, len + 1, 1))
            return tok_fail(t, DELTA_ERR_NOMEM, "out of memory encoding");
        t->piece[0] = ' ';
        memcpy(t->piece + 1, s, len);
        s = t->piece;
        len++;
    }
    if (!t->use_regex) return bpe_piece(t, s, len, ids, cap, n);
#ifdef DELTA_HAVE_PCRE2
    size_t off = 0;
    while (off < len) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, len, off,
                             PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (rc < 0) {
            if (rc == PCRE2_ERROR_NOMATCH) break;
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return tok_fail(t, DELTA_ERR_STATE, "PCRE2: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        DELTA_ASSERT(ov[1] > ov[0]); /* every alternative takes a character */
        /* The alternatives cover every character, so matches tile s. */
        delta_status st = bpe_piece(t, s + ov[0], ov[1] - ov[0], ids, cap, n);
        if (st != DELTA_OK) return st;
        off = ov[1];
    }
    return DELTA_OK;
#else
    return tok_fail(t, DELTA_ERR_UNSUPPORTED, "this build of delta has no "
                    "PCRE2 (libpcre2-dev), which encoding GPT-2's split regex "
                    "needs; decoding works");
#endif
}

delta_status delta_tokenizer_encode(delta_tokenizer *t, const char *text,
                                    size_t len, bool special, int32_t *ids,
                                    size_t cap, size_t *n) {
    DELTA_ASSERT(t && n && (ids || !cap));
    *n = 0;
    t->error[0] = '\0';
    if (!text && len)
        return tok_fail(t, DELTA_ERR_INVALID_ARG, "no text given");
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;)
        if (utf8_next(u, len, &i) < 0)
            return tok_fail(t, DELTA_ERR_INVALID_ARG, "the text is not UTF-8: "
                            "an invalid sequence at byte %zu", i);
    size_t start = 0;
    while (start < len) {
        /* the next added token (the longest where several start at once) */
        size_t at = len;
        const added_token *hit = NULL;
        for (int i = 0; special && i < t->n_added; i++) {
            const added_token *a = &t->added[i];
            const char *p = memmem(text + start, len - start, a->content, a->len);
            if (!p) continue;
            size_t pos = (size_t)(p - text);
            if (pos < at || (pos == at && a->len > hit->len)) at = pos, hit = a;
        }
        delta_status st = encode_segment(t, text + start, at - start, ids, cap, n);
        if (st != DELTA_OK) return st;
        if (!hit) break;
        emit(hit->id, ids, cap, n);
        start = at + hit->len;
    }
    return DELTA_OK;
}

/* ---- decoding -------------------------------------------------------------- */

delta_status delta_tokenizer_decode(delta_tokenizer *t, const int32_t *ids,
                                    size_t n, char *out, size_t cap,
                                    size_t *len) {
    DELTA_ASSERT(t && len && (ids || !n) && (out || !cap));
    *len = 0;
    t->error[0] = '\0';
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->bytes[ids[i]])
            return tok_fail(t, DELTA_ERR_INVALID_ARG, "id %" PRId32 " (at %zu) "
                            "is not in the vocabulary (ids 0..%" PRId32 ")",
                            ids[i], i, t->n_ids - 1);
        total += t->n_bytes[ids[i]];
    }
    size_t k = 0;
    for (size_t i = 0; i < n && k < cap; i++) {
        size_t m = t->n_bytes[ids[i]];
        if (m > cap - k) m = cap - k;
        memcpy(out + k, t->bytes[ids[i]], m);
        k += m;
    }
    if (total < cap) out[total] = '\0';
    *len = total;
    return DELTA_OK;
}
