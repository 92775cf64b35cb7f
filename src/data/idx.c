/* delta — Fashion-MNIST from idx files (see include/delta/data.h).
 *
 * idx format: a big-endian u32 magic 0x000008NN (0x08: u8 elements, NN: the
 * number of dims), NN big-endian u32 dims, then the elements in row-major
 * order. Files are read through zlib's gz reader, which inflates gzip'd
 * files and passes plain files through; a build without zlib reads plain
 * files only. Every field is checked before it is used, sizes with checked
 * arithmetic and bounds, and the data buffer grows as bytes arrive, so a
 * hostile header cannot make us allocate more than the file really holds.
 * The raw pixel bytes are kept (1 byte a pixel); the loader normalizes them
 * through a 256-entry table as it copies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef DELTA_HAVE_ZLIB
#include <zlib.h>
#endif

#include "data/data_impl.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_COUNT ((uint32_t)1 << 28)
#define IDX_MAX_SIDE 4096u
#define IDX_CHUNK ((size_t)1 << 20)

/* ---- one byte stream: gzip or plain -------------------------------------- */

typedef struct idx_reader {
    const char *path;
#ifdef DELTA_HAVE_ZLIB
    gzFile gz;
#else
    FILE *f;
#endif
} idx_reader;

typedef struct idx_err {
    delta_status *status;
    char *err;
    size_t err_len;
} idx_err;

#define FAIL(e, s, ...) \
    delta_data_fail((e)->status, (e)->err, (e)->err_len, (s), __VA_ARGS__)

static bool reader_open(idx_reader *r, const char *path, const idx_err *e) {
    r->path = path;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            FAIL(e, DELTA_ERR_IO,
                 "%s: missing file; Fashion-MNIST's idx files come with "
                 "Debian's package dataset-fashion-mnist (apt-get install "
                 "dataset-fashion-mnist, into " DELTA_FASHION_MNIST_DIR
                 "), or give the folder that holds them",
                 path);
        else
            FAIL(e, DELTA_ERR_IO, "%s: cannot open: %s", path,
                 strerror(errno));
        return false;
    }
    if (!S_ISREG(sb.st_mode)) {
        FAIL(e, DELTA_ERR_IO, "%s: not a regular file", path);
        return false;
    }
#ifdef DELTA_HAVE_ZLIB
    errno = 0;
    r->gz = gzopen(path, "rb");
    if (!r->gz) {
        FAIL(e, DELTA_ERR_IO, "%s: cannot open: %s", path,
             errno ? strerror(errno) : "out of memory");
        return false;
    }
    gzbuffer(r->gz, 1 << 17);
#else
    r->f = fopen(path, "rb");
    if (!r->f) {
        FAIL(e, DELTA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    int c0 = fgetc(r->f), c1 = fgetc(r->f);
    if (c0 == 0x1f && c1 == 0x8b) {
        FAIL(e, DELTA_ERR_UNSUPPORTED,
             "%s: gzip'd, and this build of delta has no zlib; gunzip it "
             "(the name without .gz is tried too) or rebuild with zlib",
             path);
        fclose(r->f);
        r->f = NULL;
        return false;
    }
    rewind(r->f);
#endif
    return true;
}

static void reader_close(idx_reader *r) {
#ifdef DELTA_HAVE_ZLIB
    if (r->gz) gzclose(r->gz);
    r->gz = NULL;
#else
    if (r->f) fclose(r->f);
    r->f = NULL;
#endif
}

/* Reads up to n bytes; returns the count read (short at end of file) or -1
 * after writing a message on a read error or corrupt compressed data. A
 * gzip stream that ends early is reported here as well (zlib only knows it
 * at the end). */
static int64_t reader_read(idx_reader *r, void *buf, size_t n,
                           const idx_err *e) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < IDX_CHUNK ? n - got : IDX_CHUNK;
#ifdef DELTA_HAVE_ZLIB
        int k = gzread(r->gz, (char *)buf + got, (unsigned)want);
        int errnum = Z_OK;
        const char *msg = gzerror(r->gz, &errnum);
        size_t pl = strlen(r->path);
        if (strncmp(msg, r->path, pl) == 0 && strncmp(msg + pl, ": ", 2) == 0)
            msg += pl + 2;  /* gzerror's message starts with the path */
        if (k < 0 || (errnum != Z_OK && errnum != Z_BUF_ERROR)) {
            if (errnum == Z_ERRNO)
                FAIL(e, DELTA_ERR_IO, "%s: read error: %s", r->path,
                     strerror(errno));
            else
                FAIL(e, DELTA_ERR_FORMAT, "%s: corrupt gzip data (%s)",
                     r->path, msg);
            return -1;
        }
        if (errnum == Z_BUF_ERROR) {
            FAIL(e, DELTA_ERR_FORMAT,
                 "%s: truncated gzip stream (%s) after %zu bytes", r->path,
                 msg, got + (size_t)k);
            return -1;
        }
        got += (size_t)k;
        if ((size_t)k < want) break;
#else
        size_t k = fread((char *)buf + got, 1, want, r->f);
        if (ferror(r->f)) {
            FAIL(e, DELTA_ERR_IO, "%s: read error: %s", r->path,
                 strerror(errno));
            return -1;
        }
        got += k;
        if (k < want) break;
#endif
    }
    return (int64_t)got;
}

/* ---- one idx file ------------------------------------------------------ */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

/* Reads an idx file of u8 with `ndim` dims and magic `magic` into a
 * malloc'd buffer (*data, dims[ndim]). what names the content for
 * messages ("images"). Dim 0 (the count) must be in 1..IDX_MAX_COUNT, the
 * others in 1..IDX_MAX_SIDE. */
static bool read_idx(const char *path, uint32_t magic, int ndim,
                     const char *what, uint32_t *dims, uint8_t **data,
                     const idx_err *e) {
    idx_reader r = {0};
    uint8_t *buf = NULL;
    *data = NULL;
    if (!reader_open(&r, path, e)) return false;

    uint8_t hdr[16];
    size_t hlen = 4 + 4 * (size_t)ndim;
    int64_t got = reader_read(&r, hdr, hlen, e);
    if (got < 0) goto fail;
    if (got == 0) {
        FAIL(e, DELTA_ERR_FORMAT, "%s: empty file (expected idx %s)", path,
             what);
        goto fail;
    }
    if (got >= 4 && be32(hdr) != magic) {
        FAIL(e, DELTA_ERR_FORMAT,
             "%s: bad magic 0x%08x, expected 0x%08x (idx %s: u8 elements, "
             "%d dim%s); not an idx %s file, plain or gzip'd",
             path, be32(hdr), magic, what, ndim, ndim == 1 ? "" : "s", what);
        goto fail;
    }
    if ((size_t)got < hlen) {
        FAIL(e, DELTA_ERR_FORMAT,
             "%s: truncated header: %lld of %zu bytes", path, (long long)got,
             hlen);
        goto fail;
    }

    uint64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        dims[d] = be32(hdr + 4 + 4 * d);
        uint32_t hi = d == 0 ? IDX_MAX_COUNT : IDX_MAX_SIDE;
        if (dims[d] < 1 || dims[d] > hi) {
            FAIL(e, DELTA_ERR_FORMAT,
                 "%s: dim %d is %u, expected 1..%u (%s)", path, d, dims[d],
                 hi, d == 0 ? "the number of items" : "a side in pixels");
            goto fail;
        }
        /* Cannot overflow with the bounds above (2^28 * 2^12 * 2^12), but
         * check anyway: the bounds may change. */
        if (__builtin_mul_overflow(total, (uint64_t)dims[d], &total) ||
            total > SIZE_MAX / 2) {
            FAIL(e, DELTA_ERR_FORMAT, "%s: dims give a size too large", path);
            goto fail;
        }
    }

    /* Grow the buffer as data arrives, so a lying header costs at most
     * what the file holds. */
    size_t cap = 0, have = 0, n = (size_t)total;
    while (have < n) {
        if (have == cap) {
            size_t ncap = cap ? cap * 2 : 4 * IDX_CHUNK;
            if (ncap > n) ncap = n;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                FAIL(e, DELTA_ERR_NOMEM, "%s: out of memory reading %zu bytes",
                     path, n);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        got = reader_read(&r, buf + have, cap - have, e);
        if (got < 0) goto fail;
        have += (size_t)got;
        if (have < cap) break;
    }
    if (have < n) {
        FAIL(e, DELTA_ERR_FORMAT,
             "%s: truncated: the header declares %zu data bytes, the file "
             "holds %zu",
             path, n, have);
        goto fail;
    }
    uint8_t extra;
    got = reader_read(&r, &extra, 1, e);
    if (got < 0) goto fail;
    if (got > 0) {
        FAIL(e, DELTA_ERR_FORMAT,
             "%s: data after the %zu bytes the header declares; the dims are "
             "wrong or the file is not one idx array",
             path, n);
        goto fail;
    }
    reader_close(&r);
    *data = buf;
    return true;
fail:
    reader_close(&r);
    free(buf);
    return false;
}

/* ---- Fashion-MNIST ----------------------------------------------------- */

/* dir/base.gz if it exists, else dir/base if that exists, else dir/base.gz
 * (so the message names the expected file). */
static void pick_path(char *out, size_t n, const char *dir, const char *base) {
    struct stat sb;
    snprintf(out, n, "%s/%s.gz", dir, base);
    if (stat(out, &sb) == 0) return;
    snprintf(out, n, "%s/%s", dir, base);
    if (stat(out, &sb) == 0) return;
    snprintf(out, n, "%s/%s.gz", dir, base);
}

static void get_image(const delta_dataset *ds, int64_t index, uint64_t seed,
                      uint64_t epoch, void *input, int32_t *target,
                      float *mask, int64_t len) {
    (void)seed, (void)epoch, (void)mask, (void)len;
    int64_t n = ds->info.input_numel;
    const uint8_t *p = ds->pixels + (size_t)index * (size_t)n;
    float *x = input;
    for (int64_t j = 0; j < n; j++) x[j] = ds->lut[p[j]];
    target[0] = ds->labels[index];
}

delta_dataset *delta_dataset_fashion_mnist_new(const char *dir,
                                               delta_data_split split,
                                               delta_status *status,
                                               char *err, size_t err_len) {
    idx_err e = {status, err, err_len};
    if (status) *status = DELTA_OK;
    if (err && err_len) err[0] = '\0';
    if (!dir || !dir[0]) dir = DELTA_FASHION_MNIST_DIR;
    if (split != DELTA_SPLIT_TRAIN && split != DELTA_SPLIT_TEST)
        return FAIL(&e, DELTA_ERR_INVALID_ARG,
                    "fashion-mnist: split %d is neither train nor test",
                    (int)split);
    const char *pre = split == DELTA_SPLIT_TRAIN ? "train" : "t10k";
    char ipath[4096], lpath[4096], base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", pre);
    pick_path(ipath, sizeof ipath, dir, base);
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", pre);
    pick_path(lpath, sizeof lpath, dir, base);

    delta_dataset *ds = delta_data_alloc(DELTA_DATA_IMAGES);
    if (!ds) return FAIL(&e, DELTA_ERR_NOMEM, "fashion-mnist: out of memory");
    uint32_t idims[3], ldims[1];
    if (!read_idx(ipath, IDX_MAGIC_IMAGES, 3, "images", idims, &ds->pixels,
                  &e) ||
        !read_idx(lpath, IDX_MAGIC_LABELS, 1, "labels", ldims, &ds->labels,
                  &e)) {
        delta_dataset_free(ds);
        return NULL;
    }
    if (idims[0] != ldims[0]) {
        FAIL(&e, DELTA_ERR_FORMAT,
             "%s holds %u images but %s holds %u labels; they must match",
             ipath, idims[0], lpath, ldims[0]);
        delta_dataset_free(ds);
        return NULL;
    }
    for (uint32_t i = 0; i < ldims[0]; i++)
        if (ds->labels[i] >= DELTA_FASHION_MNIST_CLASSES) {
            FAIL(&e, DELTA_ERR_FORMAT,
                 "%s: label %u of item %u is out of range 0..%d", lpath,
                 ds->labels[i], i, DELTA_FASHION_MNIST_CLASSES - 1);
            delta_dataset_free(ds);
            return NULL;
        }

    for (int p = 0; p < 256; p++)
        ds->lut[p] = ((float)p / 255.0f - DELTA_FASHION_MNIST_MEAN) /
                     DELTA_FASHION_MNIST_STD;
    ds->get = get_image;
    delta_data_info *in = &ds->info;
    in->len = idims[0];
    in->channels = 1;
    in->height = idims[1];
    in->width = idims[2];
    in->classes = DELTA_FASHION_MNIST_CLASSES;
    in->input_dtype = DELTA_F32;
    in->input_numel = (int64_t)idims[1] * idims[2];
    in->target_numel = 1;
    snprintf(ds->name, sizeof ds->name,
             "fashion-mnist %s (%u images 1x%ux%u, %d classes)",
             split == DELTA_SPLIT_TRAIN ? "train" : "test", idims[0], idims[1],
             idims[2], DELTA_FASHION_MNIST_CLASSES);
    return ds;
}
