/* delta — safetensors reader and writer (see include/delta/safetensors.h).
 *
 * Reading keeps the whole file in one aligned buffer and the parsed cJSON
 * header alive for the file's lifetime: tensor names and metadata strings
 * point into the cJSON tree, tensor data points into the buffer. Every field
 * of the header is checked before a file is handed out, with checked 64-bit
 * arithmetic, so a hostile file gives DELTA_ERR_FORMAT and never a bad read.
 *
 * Writing builds the header with cJSON in the caller's order, pads it with
 * spaces to a multiple of 8 bytes (as the reference writer does) and writes
 * a temporary of a unique name in path's folder (path.delta-XXXXXX.tmp,
 * mkstemps), fsyncs it, renames it over path and fsyncs the folder. Only a
 * regular file is ever replaced: a device, FIFO, socket or folder at path
 * is refused before anything is written, and a link to a regular file has
 * its target replaced (the link stays). */
#include "core/files.h"
#include "delta/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Integers in the header are JSON numbers, parsed by cJSON as doubles; only
 * values up to 2^53 are exact, which is far past any real file. */
#define ST_MAX_INT ((uint64_t)1 << 53)

struct delta_st_file {
    unsigned char *buf;          /* whole file: mapped (mapped) or
                                    delta_alloc_aligned */
    size_t len;
    bool mapped;
    cJSON *root;                 /* parsed header; owns names and metadata */
    const cJSON *meta;           /* "__metadata__" object or NULL */
    int n;
    delta_st_tensor *tensors;    /* in data-offset order */
    delta_st_tensor **by_name;   /* sorted by name, for delta_st_find */
};

/* ---- dtypes ------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
    delta_dtype dtype;
} st_dtypes[] = {
    {"BOOL", 1, DELTA_DTYPE_COUNT},    {"U8", 1, DELTA_DTYPE_COUNT},
    {"I8", 1, DELTA_DTYPE_COUNT},      {"F8_E5M2", 1, DELTA_DTYPE_COUNT},
    {"F8_E4M3", 1, DELTA_DTYPE_COUNT}, {"I16", 2, DELTA_DTYPE_COUNT},
    {"U16", 2, DELTA_DTYPE_COUNT},     {"F16", 2, DELTA_F16},
    {"BF16", 2, DELTA_BF16},           {"I32", 4, DELTA_I32},
    {"U32", 4, DELTA_DTYPE_COUNT},     {"F32", 4, DELTA_F32},
    {"I64", 8, DELTA_DTYPE_COUNT},     {"U64", 8, DELTA_DTYPE_COUNT},
    {"F64", 8, DELTA_DTYPE_COUNT},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

/* Index into st_dtypes, or -1. */
static int st_dtype_index(const char *s) {
    for (int i = 0; s && i < ST_N_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, s) == 0) return i;
    return -1;
}

size_t delta_st_dtype_size(const char *st_dtype) {
    int i = st_dtype_index(st_dtype);
    return i < 0 ? 0 : st_dtypes[i].size;
}

/* ---- small helpers ----------------------------------------------------- */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* "[5, 6]" into buf. */
static const char *fmt_shape(char *buf, size_t n, const int64_t *shape,
                             int ndim) {
    size_t k = 0;
    buf[0] = '\0';
    k += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "",
                              shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* What a JSON value is, for messages: the number itself, or its kind. */
static const char *describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsNumber(v)) {  /* shortest of 15 or 17 digits that is exact */
        snprintf(buf, n, "%.15g", v->valuedouble);
        if (strtod(buf, NULL) != v->valuedouble)
            snprintf(buf, n, "%.17g", v->valuedouble);
    } else if (cJSON_IsString(v)) snprintf(buf, n, "a string");
    else if (cJSON_IsBool(v)) snprintf(buf, n, "a boolean");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "an array");
    else if (cJSON_IsObject(v)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an invalid value");
    return buf;
}

/* A JSON integer in [0, 2^53]. */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= (double)ST_MAX_INT) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/* Number of elements (product of dims, 1 for a scalar) and bytes; false on
 * 64-bit overflow. The product is folded in order like the reference. */
static bool shape_size(const int64_t *shape, int ndim, size_t elem,
                       int64_t *numel, size_t *nbytes) {
    int64_t p = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(p, shape[i], &p)) return false;
    uint64_t b;
    if (__builtin_mul_overflow((uint64_t)p, (uint64_t)elem, &b) ||
        b > SIZE_MAX)
        return false;
    *numel = p;
    *nbytes = (size_t)b;
    return true;
}

/* Offset of the first malformed byte, or -1 when s[0..n) is valid UTF-8
 * (no overlongs, surrogates or code points past U+10FFFF). */
static long utf8_bad(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return (long)i;
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return (long)i;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return (long)i;
        i += len;
    }
    return -1;
}

static bool is_json_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A string that occurs twice in names[0..n), or NULL (sorts names). */
static const char *sorted_dup(const char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

/* ---- reading ----------------------------------------------------------- */

/* A tensor while the header is checked. */
typedef struct {
    delta_st_tensor t;
    uint64_t begin, end;
    int index;  /* position in the header, to keep ties in file order */
} st_info;

static int cmp_info_offset(const void *a, const void *b) {
    const st_info *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int cmp_tensor_name(const void *a, const void *b) {
    const delta_st_tensor *x = *(const delta_st_tensor *const *)a;
    const delta_st_tensor *y = *(const delta_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Checks one header entry `name: {...}` against a data section of data_len
 * bytes and fills *in. */
static delta_status parse_entry(const cJSON *item, uint64_t data_len,
                                st_info *in, char *err, size_t err_len) {
    const char *name = item->string;
    char what[64], shp[256];
    in->t.name = name;
    if (!cJSON_IsObject(item)) {
        set_err(err, err_len, "tensor '%s': entry is %s, expected an object",
                name, describe(item, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0 ? &dtype
                           : strcmp(c->string, "shape") == 0 ? &shape
                           : strcmp(c->string, "data_offsets") == 0 ? &offs
                           : NULL;
        if (!slot) continue;  /* unknown fields are ignored, as upstream */
        if (*slot) {
            set_err(err, err_len, "tensor '%s': field '%s' appears twice",
                    name, c->string);
            return DELTA_ERR_FORMAT;
        }
        *slot = c;
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape"
                        : !offs ? "data_offsets" : NULL;
    if (missing) {
        set_err(err, err_len, "tensor '%s': missing field '%s'", name,
                missing);
        return DELTA_ERR_FORMAT;
    }

    if (!cJSON_IsString(dtype)) {
        set_err(err, err_len, "tensor '%s': dtype is %s, expected a string",
                name, describe(dtype, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }
    int di = st_dtype_index(dtype->valuestring);
    if (di < 0) {
        set_err(err, err_len, "tensor '%s': unknown dtype '%s'", name,
                dtype->valuestring);
        return DELTA_ERR_FORMAT;
    }
    in->t.st_dtype = st_dtypes[di].name;
    in->t.dtype = st_dtypes[di].dtype;
    in->t.elem_size = st_dtypes[di].size;

    if (!cJSON_IsArray(shape)) {
        set_err(err, err_len,
                "tensor '%s': shape is %s, expected an array of integers",
                name, describe(shape, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DELTA_ST_MAX_DIMS) {
        set_err(err, err_len,
                "tensor '%s': shape has %d dimensions, at most %d supported",
                name, ndim, DELTA_ST_MAX_DIMS);
        return DELTA_ERR_FORMAT;
    }
    in->t.ndim = ndim;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t v;
        if (!json_uint(c, &v)) {
            set_err(err, err_len,
                    "tensor '%s': shape[%d] is %s, expected an integer in "
                    "[0, 2^53]",
                    name, d, describe(c, what, sizeof what));
            return DELTA_ERR_FORMAT;
        }
        in->t.shape[d] = (int64_t)v;
    }
    fmt_shape(shp, sizeof shp, in->t.shape, ndim);
    if (!shape_size(in->t.shape, ndim, in->t.elem_size, &in->t.numel,
                    &in->t.nbytes)) {
        set_err(err, err_len,
                "tensor '%s': shape %s of %s is too large for 64-bit sizes",
                name, shp, in->t.st_dtype);
        return DELTA_ERR_FORMAT;
    }

    if (!cJSON_IsArray(offs)) {
        set_err(err, err_len,
                "tensor '%s': data_offsets is %s, expected an array of 2 "
                "integers",
                name, describe(offs, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }
    int no = cJSON_GetArraySize(offs);
    if (no != 2) {
        set_err(err, err_len,
                "tensor '%s': data_offsets has %d elements, expected 2", name,
                no);
        return DELTA_ERR_FORMAT;
    }
    uint64_t be[2];
    d = 0;
    for (const cJSON *c = offs->child; c; c = c->next, d++) {
        if (!json_uint(c, &be[d])) {
            set_err(err, err_len,
                    "tensor '%s': data_offsets[%d] is %s, expected an integer "
                    "in [0, 2^53]",
                    name, d, describe(c, what, sizeof what));
            return DELTA_ERR_FORMAT;
        }
    }
    in->begin = be[0];
    in->end = be[1];
    if (in->end < in->begin) {
        set_err(err, err_len,
                "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                "] end before they begin",
                name, in->begin, in->end);
        return DELTA_ERR_FORMAT;
    }
    if (in->end - in->begin != (uint64_t)in->t.nbytes) {
        set_err(err, err_len,
                "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                "] hold %" PRIu64 " bytes but shape %s of %s needs %zu",
                name, in->begin, in->end, in->end - in->begin, shp,
                in->t.st_dtype, in->t.nbytes);
        return DELTA_ERR_FORMAT;
    }
    if (in->end > data_len) {
        set_err(err, err_len,
                "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                "] run past the end of the %" PRIu64 "-byte data section",
                name, in->begin, in->end, data_len);
        return DELTA_ERR_FORMAT;
    }
    return DELTA_OK;
}

/* Checks "__metadata__": an object of string values with unique keys. */
static delta_status parse_metadata(const cJSON *meta, char *err,
                                   size_t err_len) {
    char what[64];
    if (!cJSON_IsObject(meta)) {
        set_err(err, err_len,
                "__metadata__ is %s, expected an object of strings",
                describe(meta, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }
    int m = cJSON_GetArraySize(meta);
    const char **keys = malloc((size_t)(m ? m : 1) * sizeof *keys);
    if (!keys) {
        set_err(err, err_len, "out of memory reading __metadata__");
        return DELTA_ERR_NOMEM;
    }
    int k = 0;
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            set_err(err, err_len,
                    "__metadata__ '%s' is %s, expected a string", c->string,
                    describe(c, what, sizeof what));
            free(keys);
            return DELTA_ERR_FORMAT;
        }
        keys[k++] = c->string;
    }
    const char *dup = sorted_dup(keys, k);
    if (dup)
        set_err(err, err_len, "__metadata__ key '%s' appears twice", dup);
    free(keys);
    return dup ? DELTA_ERR_FORMAT : DELTA_OK;
}

/* Parses the header of f->buf[0..f->len) and fills the rest of f. */
static delta_status parse_file(delta_st_file *f, char *err, size_t err_len) {
    const unsigned char *b = f->buf;
    if (f->len < 8) {
        set_err(err, err_len,
                "file is %zu bytes, shorter than the 8-byte header length",
                f->len);
        return DELTA_ERR_FORMAT;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    if (hlen == 0) {
        set_err(err, err_len, "header length is 0, expected a JSON header");
        return DELTA_ERR_FORMAT;
    }
    if (hlen > DELTA_ST_MAX_HEADER) {
        set_err(err, err_len,
                "header length %" PRIu64 " exceeds the %u-byte limit", hlen,
                DELTA_ST_MAX_HEADER);
        return DELTA_ERR_FORMAT;
    }
    if (hlen > f->len - 8) {
        set_err(err, err_len,
                "header length %" PRIu64 " runs past the end of the file "
                "(%zu bytes follow the length field)",
                hlen, f->len - 8);
        return DELTA_ERR_FORMAT;
    }
    const char *hdr = (const char *)b + 8;
    size_t n = (size_t)hlen;
    uint64_t data_len = f->len - 8 - n;
    long bad = utf8_bad((const unsigned char *)hdr, n);
    const char *nul = memchr(hdr, '\0', n);
    if (bad >= 0 || nul) {
        set_err(err, err_len, "header is not valid UTF-8 text (%s at byte %td)",
                bad >= 0 ? "bad sequence" : "NUL",
                bad >= 0 ? (ptrdiff_t)bad : nul - hdr);
        return DELTA_ERR_FORMAT;
    }

    /* cJSON parses a NUL-terminated copy and stops at the end of the value;
     * only whitespace (the reference writer's padding) may follow it. */
    char *text = malloc(n + 1);
    if (!text) {
        set_err(err, err_len, "out of memory for a %zu-byte header", n);
        return DELTA_ERR_NOMEM;
    }
    memcpy(text, hdr, n);
    text[n] = '\0';
    const char *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    ptrdiff_t at = end ? end - text : 0;
    while (f->root && at < (ptrdiff_t)n && is_json_space(text[at])) at++;
    free(text);
    if (!f->root) {
        set_err(err, err_len, "header JSON syntax error near byte %td", at);
        return DELTA_ERR_FORMAT;
    }
    if (at < (ptrdiff_t)n) {
        set_err(err, err_len,
                "header has bytes after the JSON value, at byte %td", at);
        return DELTA_ERR_FORMAT;
    }
    if (!cJSON_IsObject(f->root)) {
        char what[64];
        set_err(err, err_len, "header is %s, expected a JSON object",
                describe(f->root, what, sizeof what));
        return DELTA_ERR_FORMAT;
    }

    int total = cJSON_GetArraySize(f->root);
    st_info *info = calloc((size_t)(total ? total : 1), sizeof *info);
    f->tensors = calloc((size_t)(total ? total : 1), sizeof *f->tensors);
    f->by_name = calloc((size_t)(total ? total : 1), sizeof *f->by_name);
    if (!info || !f->tensors || !f->by_name) {
        free(info);
        set_err(err, err_len, "out of memory for %d header entries", total);
        return DELTA_ERR_NOMEM;
    }

    delta_status st = DELTA_OK;
    int n_t = 0;
    for (const cJSON *c = f->root->child; c && st == DELTA_OK; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (f->meta) {
                set_err(err, err_len, "__metadata__ appears twice");
                st = DELTA_ERR_FORMAT;
            } else {
                f->meta = c;
                st = parse_metadata(c, err, err_len);
            }
            continue;
        }
        info[n_t].index = n_t;
        st = parse_entry(c, data_len, &info[n_t], err, err_len);
        n_t++;
    }
    if (st != DELTA_OK) {
        free(info);
        return st;
    }
    DELTA_ASSERT(n_t <= total);

    const char **names = malloc((size_t)(n_t ? n_t : 1) * sizeof *names);
    if (!names) {
        free(info);
        set_err(err, err_len, "out of memory for %d names", n_t);
        return DELTA_ERR_NOMEM;
    }
    for (int i = 0; i < n_t; i++) names[i] = info[i].t.name;
    const char *dup = sorted_dup(names, n_t);
    if (dup) set_err(err, err_len, "tensor '%s': name appears twice", dup);
    free(names);
    if (dup) {
        free(info);
        return DELTA_ERR_FORMAT;
    }

    /* Data-offset order; the tensors must tile the data section exactly. */
    qsort(info, (size_t)n_t, sizeof *info, cmp_info_offset);
    uint64_t pos = 0;
    for (int i = 0; i < n_t && st == DELTA_OK; i++) {
        const st_info *in = &info[i];
        if (in->begin < pos) {
            set_err(err, err_len,
                    "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                    "] overlap tensor '%s', which ends at %" PRIu64,
                    in->t.name, in->begin, in->end, info[i - 1].t.name, pos);
            st = DELTA_ERR_FORMAT;
        } else if (in->begin > pos) {
            if (i == 0)
                set_err(err, err_len,
                        "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] leave a %" PRIu64 "-byte hole at the start of "
                        "the data section",
                        in->t.name, in->begin, in->end, in->begin);
            else
                set_err(err, err_len,
                        "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] leave a %" PRIu64 "-byte hole after tensor '%s', "
                        "which ends at %" PRIu64,
                        in->t.name, in->begin, in->end, in->begin - pos,
                        info[i - 1].t.name, pos);
            st = DELTA_ERR_FORMAT;
        }
        pos = in->end;
    }
    if (st == DELTA_OK && pos != data_len) {
        set_err(err, err_len,
                "data section has %" PRIu64 " bytes but the tensors cover "
                "only %" PRIu64,
                data_len, pos);
        st = DELTA_ERR_FORMAT;
    }
    if (st != DELTA_OK) {
        free(info);
        return st;
    }

    const unsigned char *data = b + 8 + n;
    for (int i = 0; i < n_t; i++) {
        f->tensors[i] = info[i].t;
        f->tensors[i].data = data + info[i].begin;
        f->by_name[i] = &f->tensors[i];
    }
    free(info);
    f->n = n_t;

    qsort(f->by_name, (size_t)n_t, sizeof *f->by_name, cmp_tensor_name);
    return DELTA_OK;
}

/* Takes ownership of buf (delta_alloc_aligned, len bytes). */
/* Frees a file's bytes the way they were obtained. */
static void release_buf(unsigned char *buf, size_t len, bool mapped) {
    if (mapped) munmap(buf, len);
    else delta_free_aligned(buf);
}

static delta_st_file *parse_owned(unsigned char *buf, size_t len, bool mapped,
                                  delta_status *status, char *err,
                                  size_t err_len) {
    delta_st_file *f = calloc(1, sizeof *f);
    delta_status st = DELTA_ERR_NOMEM;
    if (!f) {
        release_buf(buf, len, mapped);
        set_err(err, err_len, "out of memory");
    } else {
        f->buf = buf;
        f->len = len;
        f->mapped = mapped;
        st = parse_file(f, err, err_len);
        if (st != DELTA_OK) {
            delta_st_close(f);
            f = NULL;
        }
    }
    if (status) *status = st;
    if (st == DELTA_OK && err && err_len) err[0] = '\0';
    return f;
}

delta_st_file *delta_st_parse(const void *buf, size_t len,
                              delta_status *status, char *err,
                              size_t err_len) {
    if (!buf && len) {
        if (status) *status = DELTA_ERR_INVALID_ARG;
        set_err(err, err_len, "NULL buffer of %zu bytes", len);
        return NULL;
    }
    unsigned char *copy = delta_alloc_aligned(len ? len : 1);
    if (!copy) {
        if (status) *status = DELTA_ERR_NOMEM;
        set_err(err, err_len, "out of memory copying %zu bytes", len);
        return NULL;
    }
    if (len) memcpy(copy, buf, len);
    return parse_owned(copy, len, false, status, err, err_len);
}

delta_st_file *delta_st_open(const char *path, delta_status *status,
                             char *err, size_t err_len) {
    delta_status st = DELTA_ERR_IO;
    unsigned char *buf = NULL;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        set_err(err, err_len, "cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fd, &sb) != 0) {
        set_err(err, err_len, "cannot stat '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        set_err(err, err_len, "'%s' is not a regular file", path);
        goto fail;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        set_err(err, err_len, "'%s' is too large to read", path);
        goto fail;
    }
    len = (size_t)sb.st_size;
    /* Mapped, not read: a pretrained GPT-2 XL is 6 GB, and a load touches
     * each tensor once (the header alone, to read a configuration). The
     * mapping is private and read-only; a file truncated by another
     * process while mapped is that process's doing, as with any mmap. An
     * empty file cannot be mapped: read (nothing) instead. */
    if (len) {
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            close(fd);
            return parse_owned(m, len, true, status, err, err_len);
        }
    }
    buf = delta_alloc_aligned(len ? len : 1);
    if (!buf) {
        st = DELTA_ERR_NOMEM;
        set_err(err, err_len, "out of memory reading '%s' (%zu bytes)", path,
                len);
        goto fail;
    }
    for (size_t got = 0; got < len;) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            set_err(err, err_len, "cannot read '%s': %s", path,
                    strerror(errno));
            goto fail;
        }
        if (r == 0) {
            set_err(err, err_len,
                    "cannot read '%s': file shrank to %zu of %zu bytes",
                    path, got, len);
            goto fail;
        }
        got += (size_t)r;
    }
    close(fd);
    return parse_owned(buf, len, false, status, err, err_len);

fail:
    if (fd >= 0) close(fd);
    delta_free_aligned(buf);
    if (status) *status = st;
    return NULL;
}

void delta_st_close(delta_st_file *f) {
    if (!f) return;
    cJSON_Delete(f->root);
    free(f->tensors);
    free(f->by_name);
    release_buf(f->buf, f->len, f->mapped);
    free(f);
}

int delta_st_count(const delta_st_file *f) {
    DELTA_ASSERT(f);
    return f->n;
}

const delta_st_tensor *delta_st_at(const delta_st_file *f, int i) {
    DELTA_ASSERT(f);
    DELTA_ASSERTF(i >= 0 && i < f->n, "index %d of %d tensors", i, f->n);
    return &f->tensors[i];
}

const delta_st_tensor *delta_st_find(const delta_st_file *f,
                                     const char *name) {
    DELTA_ASSERT(f && name);
    delta_st_tensor key = {.name = name};
    const delta_st_tensor *kp = &key;
    delta_st_tensor *const *hit = bsearch(&kp, f->by_name, (size_t)f->n,
                                          sizeof *f->by_name,
                                          cmp_tensor_name);
    return hit ? *hit : NULL;
}

const char *delta_st_metadata(const delta_st_file *f, const char *key) {
    DELTA_ASSERT(f && key);
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key)
                             : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- writing ----------------------------------------------------------- */

/* Appends a JSON integer printed by us: cJSON prints numbers through
 * "%.15g" and a loose round-trip test, which can lose digits of large
 * integers. */
static bool json_add_int(cJSON *array, uint64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    cJSON *item = cJSON_CreateRaw(s);
    if (item && cJSON_AddItemToArray(array, item)) return true;
    cJSON_Delete(item);
    return false;
}

/* Checks the entries and metadata; fills sizes[i] with each one's bytes. */
static delta_status check_entries(const delta_st_entry *e, int n,
                                  const char *const *meta_kv, int n_meta,
                                  size_t *sizes, char *err, size_t err_len) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (!name || !name[0]) {
            set_err(err, err_len, "entry %d: name is %s", i,
                    name ? "empty" : "NULL");
            return DELTA_ERR_INVALID_ARG;
        }
        if (utf8_bad((const unsigned char *)name, strlen(name)) >= 0) {
            set_err(err, err_len, "entry %d: name is not valid UTF-8", i);
            return DELTA_ERR_INVALID_ARG;
        }
        if (strcmp(name, "__metadata__") == 0) {
            set_err(err, err_len,
                    "entry %d: '__metadata__' is reserved, not a tensor name",
                    i);
            return DELTA_ERR_INVALID_ARG;
        }
        size_t elem = delta_st_dtype_size(e[i].st_dtype);
        if (!elem) {
            set_err(err, err_len, "tensor '%s': unknown dtype '%s'", name,
                    e[i].st_dtype ? e[i].st_dtype : "(null)");
            return DELTA_ERR_INVALID_ARG;
        }
        if (e[i].ndim < 0 || e[i].ndim > DELTA_ST_MAX_DIMS) {
            set_err(err, err_len,
                    "tensor '%s': ndim is %d, expected 0 to %d", name,
                    e[i].ndim, DELTA_ST_MAX_DIMS);
            return DELTA_ERR_INVALID_ARG;
        }
        for (int d = 0; d < e[i].ndim; d++) {
            if (e[i].shape[d] < 0 || (uint64_t)e[i].shape[d] > ST_MAX_INT) {
                set_err(err, err_len,
                        "tensor '%s': shape[%d] is %" PRId64
                        ", expected an integer in [0, 2^53]",
                        name, d, e[i].shape[d]);
                return DELTA_ERR_INVALID_ARG;
            }
        }
        int64_t numel;
        char shp[256];
        if (!shape_size(e[i].shape, e[i].ndim, elem, &numel, &sizes[i]) ||
            __builtin_add_overflow(total, (uint64_t)sizes[i], &total) ||
            total > ST_MAX_INT) {
            set_err(err, err_len,
                    "tensor '%s': shape %s of %s is too large to write", name,
                    fmt_shape(shp, sizeof shp, e[i].shape, e[i].ndim),
                    e[i].st_dtype);
            return DELTA_ERR_INVALID_ARG;
        }
        if (sizes[i] && !e[i].data) {
            set_err(err, err_len, "tensor '%s': data is NULL for %zu bytes",
                    name, sizes[i]);
            return DELTA_ERR_INVALID_ARG;
        }
    }
    for (int i = 0; i < 2 * n_meta; i++) {
        const char *s = meta_kv[i];
        if (!s || utf8_bad((const unsigned char *)s, strlen(s)) >= 0) {
            set_err(err, err_len, "metadata %s %d is %s",
                    i % 2 ? "value" : "key", i / 2,
                    s ? "not valid UTF-8" : "NULL");
            return DELTA_ERR_INVALID_ARG;
        }
    }

    int most = n > n_meta ? n : n_meta;
    const char **names = malloc((size_t)(most ? most : 1) * sizeof *names);
    if (!names) {
        set_err(err, err_len, "out of memory");
        return DELTA_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) names[i] = e[i].name;
    const char *dup = sorted_dup(names, n);
    if (dup) set_err(err, err_len, "tensor '%s': name appears twice", dup);
    if (!dup) {
        for (int i = 0; i < n_meta; i++) names[i] = meta_kv[2 * i];
        dup = sorted_dup(names, n_meta);
        if (dup)
            set_err(err, err_len, "metadata key '%s' appears twice", dup);
    }
    free(names);
    return dup ? DELTA_ERR_INVALID_ARG : DELTA_OK;
}

/* The header JSON, unpadded, or NULL when out of memory. Items are added
 * to their parent as soon as they are made, so deleting root frees all. */
static char *build_header(const delta_st_entry *e, int n,
                          const char *const *meta_kv, int n_meta,
                          const size_t *sizes) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (ok && n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(meta, meta_kv[2 * i],
                                         meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(root, e[i].name);
        ok = t && cJSON_AddStringToObject(t, "dtype", e[i].st_dtype);
        cJSON *shape = ok ? cJSON_AddArrayToObject(t, "shape") : NULL;
        cJSON *offs = shape ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        ok = offs != NULL;
        for (int d = 0; ok && d < e[i].ndim; d++)
            ok = json_add_int(shape, (uint64_t)e[i].shape[d]);
        ok = ok && json_add_int(offs, off) &&
             json_add_int(offs, off + sizes[i]);
        off += sizes[i];
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

static bool write_all(FILE *fp, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, fp) == n;
}

/* ---- test hooks ------------------------------------------------------------
 * Crash and failure tests need a save to stop at a known point; these read
 * the environment once per save and cost nothing otherwise (documented in
 * docs/CHECKPOINTS.md):
 *   DELTA_TEST_SAVE_PAUSE=N  the process's N-th save (1-based) stops after
 *                            writing the header and half of the data, says
 *                            so on stderr and sleeps until it is killed;
 *   DELTA_TEST_SAVE_FAIL=S   every save fails at stage S (create, write,
 *                            fsync, rename or dirsync) as if with EIO. */
static _Atomic int saves_begun;

static void test_hook_pause(int save_no, const char *tmp) {
    const char *v = getenv("DELTA_TEST_SAVE_PAUSE");
    if (!v || atoi(v) != save_no) return;
    fprintf(stderr, "delta: DELTA_TEST_SAVE_PAUSE: paused in save %d, "
            "writing %s\n", save_no, tmp);
    fflush(stderr);
    for (;;) pause();
}

static bool test_hook_fail(const char *stage) {
    const char *v = getenv("DELTA_TEST_SAVE_FAIL");
    if (!v || strcmp(v, stage) != 0) return false;
    errno = EIO;
    return true;
}

/* The folder sync and the temporary's creation (core/files.c), with the
 * test hooks' failures in front of them. */
static bool sync_parent_dir(const char *path) {
    return !test_hook_fail("dirsync") && delta_file_sync_dir(path);
}

static int create_temp(const char *path, char *tmp, size_t cap) {
    if (test_hook_fail("create")) return -1;
    return delta_file_create_temp(path, tmp, cap);
}

/* Writes the file's bytes to a new unique temporary beside path (its name
 * in tmp), gives it mode (or a new file's), fsyncs it and renames it over
 * path, then syncs the folder. On failure returns the failed stage and
 * sets *e to its errno; the temporary is removed, and path is untouched
 * unless only the folder sync failed (the rename is done then). */
static const char *write_file(const char *path, char *tmp, size_t tmp_cap,
                              int mode, const unsigned char *len8,
                              const char *hdr, size_t hlen, size_t padded,
                              const delta_st_entry *entries,
                              const size_t *sizes, int n, int *e) {
    static const char spaces[8] = "        ";
    int save_no = ++saves_begun;
    int fd = create_temp(path, tmp, tmp_cap);
    if (fd >= 0 &&
        fchmod(fd, mode >= 0 ? (mode_t)mode : delta_file_new_mode()) != 0) {
        *e = errno;
        close(fd);
        unlink(tmp);
        return "set the mode of";
    }
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        *e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return "create";
    }
    const char *what = NULL;
    bool ok = write_all(fp, len8, 8) && write_all(fp, hdr, hlen) &&
              write_all(fp, spaces, padded - hlen);
    for (int i = 0; ok && i < n; i++) {
        if (i == n / 2 && fflush(fp) == 0) test_hook_pause(save_no, tmp);
        ok = write_all(fp, entries[i].data, sizes[i]);
    }
    if (n == 0 && fflush(fp) == 0) test_hook_pause(save_no, tmp);
    if (!ok || test_hook_fail("write")) what = "write";
    else if (fflush(fp) != 0) what = "flush";
    else if (test_hook_fail("fsync") || fsync(fileno(fp)) != 0) what = "fsync";
    if (what) *e = errno;
    if (fclose(fp) != 0 && !what) {
        what = "close";
        *e = errno;
    }
    if (!what && (test_hook_fail("rename") || rename(tmp, path) != 0)) {
        what = "rename";
        *e = errno;
    }
    if (what) {
        unlink(tmp);
        return what;
    }
    if (!sync_parent_dir(path)) {
        *e = errno;
        return "sync the directory of";
    }
    return NULL;
}

delta_status delta_st_write(const char *path, const delta_st_entry *entries,
                            int n, const char *const *meta_kv, int n_meta,
                            char *err, size_t err_len) {
    if (!path || n < 0 || (n > 0 && !entries) || n_meta < 0 ||
        n_meta > INT_MAX / 2 || (n_meta > 0 && !meta_kv)) {
        set_err(err, err_len, "delta_st_write: bad arguments");
        return DELTA_ERR_INVALID_ARG;
    }
    size_t *sizes = malloc((size_t)(n ? n : 1) * sizeof *sizes);
    if (!sizes) {
        set_err(err, err_len, "out of memory");
        return DELTA_ERR_NOMEM;
    }
    delta_status st = check_entries(entries, n, meta_kv, n_meta, sizes, err,
                                    err_len);
    if (st != DELTA_OK) {
        free(sizes);
        return st;
    }
    char *hdr = build_header(entries, n, meta_kv, n_meta, sizes);
    if (!hdr) {
        free(sizes);
        set_err(err, err_len, "out of memory building the header");
        return DELTA_ERR_NOMEM;
    }
    size_t hlen = strlen(hdr);
    size_t padded = (hlen + 7) / 8 * 8;
    if (padded > DELTA_ST_MAX_HEADER) {
        set_err(err, err_len, "header would be %zu bytes, over the %u limit",
                padded, DELTA_ST_MAX_HEADER);
        free(hdr);
        free(sizes);
        return DELTA_ERR_INVALID_ARG;
    }

    int mode = -1;
    char *target = delta_file_replace_target(path, &mode, err, err_len);
    size_t tmp_cap = (target ? strlen(target) : 0) + 32;
    char *tmp = target ? malloc(tmp_cap) : NULL;
    if (!tmp) {
        if (target) set_err(err, err_len, "out of memory");
        free(target);
        free(hdr);
        free(sizes);
        return target ? DELTA_ERR_NOMEM : DELTA_ERR_INVALID_ARG;
    }
    tmp[0] = '\0';

    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int e = 0;
    const char *what = write_file(target, tmp, tmp_cap, mode, len8, hdr,
                                  hlen, padded, entries, sizes, n, &e);
    if (what && !strcmp(what, "rename"))
        set_err(err, err_len, "cannot rename '%s' to '%s': %s (the "
                "previous '%s', if any, is unchanged)", tmp, path,
                strerror(e), path);
    else if (what && !strcmp(what, "sync the directory of"))
        set_err(err, err_len, "wrote '%s' but cannot sync its directory: %s "
                "(the file may not survive a power cut)", path, strerror(e));
    else if (what)
        set_err(err, err_len, "cannot %s '%s': %s (the previous '%s', if "
                "any, is unchanged)", what, tmp[0] ? tmp : path, strerror(e),
                path);
    else if (err && err_len)
        err[0] = '\0';
    if (what) st = DELTA_ERR_IO;
    free(target);
    free(tmp);
    free(hdr);
    free(sizes);
    return st;
}
