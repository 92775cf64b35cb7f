/* Device files: a simulated device described in JSON instead of a preset
 * (delta calibrate writes them from measurements; --gpu-file reads them).
 * This file owns the format, both ways: the field table below is what
 * delta_gpu_file_load requires and what delta_gpu_file_json writes, and
 * docs/DEVICE.md ("Device files") says where each figure comes from. It
 * also holds the measured part of the cost model (curves per kind of op,
 * factors per op type; backend.h) that sim_backend.c applies.
 *
 * A file is one JSON object:
 *   "format": "delta-device", "version": 1     optional, checked when given
 *   "name", "description"                      optional strings
 *   the figures of fields[] below              required numbers
 *   "kernel_s", "kernel_gap_s"                 optional (5 us, 0)
 *   "link_duplex"                              optional, 1 to 2 (2)
 *   "efficiency": {"gemm": [[flops, eff], ...], "elementwise": [[bytes,
 *                 eff], ...], ...}              optional curves per kind
 *   "op_factors": {"relu": 1.3, ...}           optional, per op type
 *   "op_host_s": {"conv2d": 1.9e-4, ...}       optional, per op type: the
 *                 host's seconds per op (in place of the launch figures)
 *   "precision": "fp32" | "bf16"                optional: the precision of
 *                 the programs op_factors and op_host_s were measured on
 * Anything else (delta calibrate's "calibration" record) is not read. */
#include "backend/backend.h"
#include "backend/sim/device_file.h"
#include "delta/models.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_NAME "delta-device"
#define FORMAT_VERSION 1
#define MAX_FILE_BYTES ((size_t)1 << 20)

/* The required figures: rates and sizes must be above 0, times at least 0.
 * link_bytes_per_s is not read: it is the slower direction's. */
static const struct field {
    const char *key;
    size_t off;
    bool positive;   /* > 0 (else >= 0) */
} fields[] = {
    {"memory_bytes", offsetof(delta_gpu_preset, memory_bytes), true},
    {"fp32_flops", offsetof(delta_gpu_preset, fp32_flops), true},
    {"tensor_flops", offsetof(delta_gpu_preset, tensor_flops), true},
    {"bf16_flops", offsetof(delta_gpu_preset, bf16_flops), true},
    {"hbm_bytes_per_s", offsetof(delta_gpu_preset, hbm_bytes_per_s), true},
    {"link_to_host_bytes_per_s",
     offsetof(delta_gpu_preset, link_to_host_bytes_per_s), true},
    {"link_to_device_bytes_per_s",
     offsetof(delta_gpu_preset, link_to_device_bytes_per_s), true},
    {"link_latency_s", offsetof(delta_gpu_preset, link_latency_s), false},
    {"launch_host_s", offsetof(delta_gpu_preset, launch_host_s), false},
    {"library_host_s", offsetof(delta_gpu_preset, library_host_s), false},
    {"launch_latency_s", offsetof(delta_gpu_preset, launch_latency_s), false},
    {"sync_wake_s", offsetof(delta_gpu_preset, sync_wake_s), false},
};
#define N_FIELDS (sizeof fields / sizeof *fields)

static double *field_of(delta_gpu_preset *g, const struct field *f) {
    return (double *)((char *)g + f->off);
}

/* ---- the measured cost model ---------------------------------------------- */

static const char *const kind_names[DELTA_SIM_KIND_COUNT] = {
    "gemm", "conv2d", "conv2d_dx", "conv2d_dw", "elementwise", "reduction"};

const char *delta_sim_kind_name(delta_sim_kind k) {
    return (unsigned)k < DELTA_SIM_KIND_COUNT ? kind_names[k] : "?";
}

delta_sim_kind delta_sim_kind_of(delta_op_type t) {
    switch (t) {
    case DELTA_OP_MATMUL:
    case DELTA_OP_LINEAR: return DELTA_SIM_KIND_GEMM;
    case DELTA_OP_CONV2D: return DELTA_SIM_KIND_CONV2D;
    case DELTA_OP_CONV2D_DX: return DELTA_SIM_KIND_CONV2D_DX;
    case DELTA_OP_CONV2D_DW: return DELTA_SIM_KIND_CONV2D_DW;
    /* a value (or a row's) from many: reads more than it writes */
    case DELTA_OP_SUM:
    case DELTA_OP_SUM_LEADING:
    case DELTA_OP_SOFTMAX:
    case DELTA_OP_SOFTMAX_BWD:
    case DELTA_OP_CROSS_ENTROPY:
    case DELTA_OP_CROSS_ENTROPY_BWD:
    case DELTA_OP_LAYERNORM:
    case DELTA_OP_LAYERNORM_BWD:
    case DELTA_OP_BATCHNORM:
    case DELTA_OP_BATCHNORM_BWD:
    case DELTA_OP_GLOBAL_AVGPOOL:
    case DELTA_OP_BIAS_GRAD_NCHW: return DELTA_SIM_KIND_REDUCTION;
    default: return DELTA_SIM_KIND_ELEMENTWISE;
    }
}

double delta_sim_curve_at(const delta_sim_curve *c, double x) {
    DELTA_ASSERT(c->n > 0);
    if (x <= c->x[0]) return c->eff[0];
    int n = c->n;
    if (x >= c->x[n - 1]) return c->eff[n - 1];
    int i = 1;
    while (c->x[i] < x) i++;
    double a = log(c->x[i - 1]), b = log(c->x[i]);
    double w = (log(x) - a) / (b - a);
    return c->eff[i - 1] + w * (c->eff[i] - c->eff[i - 1]);
}

double delta_gpu_op_seconds(const delta_gpu_preset *g, const delta_ctx *ctx,
                            int op) {
    DELTA_ASSERT(g && ctx && op >= 0 && op < ctx->n_ops);
    return delta_sim_op_seconds(g, false, &ctx->ops[op]);
}

/* ---- loading ---------------------------------------------------------------- */

typedef struct gpu_file {
    delta_gpu_preset g;          /* first: delta_gpu_file_free gets &g */
    delta_sim_efficiency eff;
    char name[64];
    char description[256];
} gpu_file;

void delta_gpu_file_free(delta_gpu_preset *g) { free(g); }

static void errf(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* The whole file in a NUL-terminated buffer (caller frees); NULL with a
 * message when it cannot be read or is too large. */
static char *read_text(const char *path, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        errf(err, n, "device file '%s': cannot open it: %s", path,
             strerror(errno));
        return NULL;
    }
    char *buf = malloc(MAX_FILE_BYTES + 1);
    size_t len = buf ? fread(buf, 1, MAX_FILE_BYTES + 1, f) : 0;
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        errf(err, n, "device file '%s': cannot read it%s", path,
             buf ? "" : " (out of memory)");
        free(buf);
        return NULL;
    }
    if (len > MAX_FILE_BYTES) {
        errf(err, n, "device file '%s' is over %zu bytes: not a device "
             "description", path, MAX_FILE_BYTES);
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* "a string", "an array", ... for a message on a value of the wrong type. */
static const char *json_kind(const cJSON *v) {
    return cJSON_IsString(v)   ? "a string"
           : cJSON_IsArray(v)  ? "an array"
           : cJSON_IsObject(v) ? "an object"
           : cJSON_IsBool(v)   ? "a boolean"
           : cJSON_IsNull(v)   ? "null"
                               : "a number";
}

static bool read_curve(const char *path, const char *kind, const cJSON *arr,
                       delta_sim_curve *c, char *err, size_t n) {
    if (!cJSON_IsArray(arr)) {
        errf(err, n, "device file '%s': efficiency.%s is %s: expected an "
             "array of [size, efficiency] pairs", path, kind, json_kind(arr));
        return false;
    }
    int len = cJSON_GetArraySize(arr);
    if (len < 1 || len > DELTA_SIM_CURVE_POINTS) {
        errf(err, n, "device file '%s': efficiency.%s has %d points: "
             "expected 1 to %d", path, kind, len, DELTA_SIM_CURVE_POINTS);
        return false;
    }
    c->n = len;
    for (int i = 0; i < len; i++) {
        const cJSON *p = cJSON_GetArrayItem(arr, i);
        const cJSON *x = cJSON_GetArrayItem(p, 0), *e = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 ||
            !cJSON_IsNumber(x) || !cJSON_IsNumber(e)) {
            errf(err, n, "device file '%s': efficiency.%s[%d] is not a "
                 "[size, efficiency] pair of numbers", path, kind, i);
            return false;
        }
        c->x[i] = x->valuedouble;
        c->eff[i] = e->valuedouble;
        if (!(c->x[i] > 0) || !isfinite(c->x[i]) || !(c->eff[i] > 0) ||
            !isfinite(c->eff[i])) {
            errf(err, n, "device file '%s': efficiency.%s[%d] is [%g, %g]: "
                 "sizes and efficiencies must be above 0", path, kind, i,
                 c->x[i], c->eff[i]);
            return false;
        }
        if (i && !(c->x[i] > c->x[i - 1])) {
            errf(err, n, "device file '%s': efficiency.%s's sizes must "
                 "increase (point %d: %g after %g)", path, kind, i, c->x[i],
                 c->x[i - 1]);
            return false;
        }
    }
    return true;
}

/* root's member key when it is an object, in *out (NULL when absent);
 * false with a message when it is something else. */
static bool member_object(const char *path, const cJSON *root,
                          const char *key, const char *expected,
                          const cJSON **out, char *err, size_t n) {
    *out = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!*out || cJSON_IsObject(*out)) return true;
    errf(err, n, "device file '%s': %s is %s: expected an object of %s",
         path, key, json_kind(*out), expected);
    return false;
}

/* The index of name among the kinds (kinds) or the op types; -1. */
static int name_index(const char *name, bool kinds) {
    int n = kinds ? DELTA_SIM_KIND_COUNT : DELTA_OP_TYPE_COUNT;
    for (int i = 0; i < n; i++)
        if (!strcmp(name, kinds ? kind_names[i]
                                : delta_op_type_name((delta_op_type)i)))
            return i;
    return -1;
}

/* An optional object of positive numbers by op type ("op_factors",
 * "op_host_s") into v. */
static bool read_by_op_type(const char *path, const cJSON *root,
                            const char *key, const char *what, double *v,
                            char *err, size_t n) {
    const cJSON *f;
    if (!member_object(path, root, key, what, &f, err, n)) return false;
    for (const cJSON *it = f ? f->child : NULL; it; it = it->next) {
        int t = name_index(it->string, false);
        if (t < 0) {
            errf(err, n, "device file '%s': %s.%s: no such op type", path,
                 key, it->string);
            return false;
        }
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) ||
            !isfinite(it->valuedouble)) {
            errf(err, n, "device file '%s': %s.%s must be a number above 0",
                 path, key, it->string);
            return false;
        }
        v[t] = it->valuedouble;
    }
    return true;
}

static bool read_efficiency(const char *path, const cJSON *root,
                            delta_sim_efficiency *eff, char *err, size_t n) {
    const cJSON *e;
    if (!member_object(path, root, "efficiency", "curves by kind of op", &e,
                       err, n) ||
        !read_by_op_type(path, root, "op_factors", "factors by op type",
                         eff->op_factor, err, n) ||
        !read_by_op_type(path, root, "op_host_s",
                         "host seconds by op type", eff->op_host_s, err, n))
        return false;
    for (const cJSON *it = e ? e->child : NULL; it; it = it->next) {
        int k = name_index(it->string, true);
        if (k < 0) {
            errf(err, n, "device file '%s': efficiency.%s: no such kind of "
                 "op (the kinds are gemm, conv2d, conv2d_dx, conv2d_dw, "
                 "elementwise and reduction)", path, it->string);
            return false;
        }
        if (!read_curve(path, it->string, it, &eff->curve[k], err, n))
            return false;
    }
    return true;
}

/* The optional string key into buf (dflt when absent); false with a
 * message when it is there but not a string. */
static bool read_string(const char *path, const cJSON *root, const char *key,
                        const char *dflt, char *buf, size_t cap, char *err,
                        size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v && !cJSON_IsString(v)) {
        errf(err, n, "device file '%s': %s is %s: expected a string", path,
             key, json_kind(v));
        return false;
    }
    snprintf(buf, cap, "%s", v ? v->valuestring : dflt);
    return true;
}

static bool read_header(const char *path, const cJSON *root, char *err,
                        size_t n) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (fmt && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring,
                                                FORMAT_NAME))) {
        errf(err, n, "device file '%s': format is not \"%s\": another kind "
             "of file", path, FORMAT_NAME);
        return false;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (ver && !(cJSON_IsNumber(ver) && ver->valuedouble == FORMAT_VERSION)) {
        errf(err, n, "device file '%s': version is not %d: written by "
             "another delta; calibrate again", path, FORMAT_VERSION);
        return false;
    }
    return true;
}

/* The line of the text where cJSON stopped parsing (1-based). */
static int error_line(const char *text) {
    const char *at = cJSON_GetErrorPtr();
    int line = 1;
    for (const char *p = text; at && p < at && *p; p++) line += *p == '\n';
    return line;
}

delta_gpu_preset *delta_gpu_file_load(const char *path, char *err,
                                      size_t err_len) {
    char *text = read_text(path, err, err_len);
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    gpu_file *gf = NULL;
    if (!root || !cJSON_IsObject(root)) {
        if (root)
            errf(err, err_len, "device file '%s' holds %s, not a JSON object "
                 "of a device's figures", path, json_kind(root));
        else
            errf(err, err_len, "device file '%s' is not JSON (the error is "
                 "on line %d)", path, error_line(text));
        goto done;
    }
    if (!read_header(path, root, err, err_len)) goto done;
    gf = calloc(1, sizeof *gf);
    if (!gf) {
        errf(err, err_len, "device file '%s': out of memory", path);
        goto done;
    }
    delta_gpu_preset *g = &gf->g;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const struct field *f = &fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, f->key);
        if (!v) {
            errf(err, err_len, "device file '%s': field '%s' is missing (a "
                 "device file gives every figure of docs/DEVICE.md's "
                 "\"Device files\"; delta calibrate writes them all)", path,
                 f->key);
            goto fail;
        }
        double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!cJSON_IsNumber(v) || !isfinite(x) ||
            (f->positive ? !(x > 0) : x < 0)) {
            char got[64];
            if (cJSON_IsNumber(v)) snprintf(got, sizeof got, "%g", x);
            else snprintf(got, sizeof got, "%s", json_kind(v));
            errf(err, err_len, "device file '%s': field '%s' is %s: expected "
                 "a number %s", path, f->key, got,
                 f->positive ? "above 0" : "of at least 0");
            goto fail;
        }
        *field_of(g, f) = x;
    }
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(root, "kernel_s");
    if (ks && (!cJSON_IsNumber(ks) || !(ks->valuedouble > 0) ||
               !isfinite(ks->valuedouble))) {
        errf(err, err_len, "device file '%s': field 'kernel_s' must be a "
             "number above 0 (or left out: 5 us)", path);
        goto fail;
    }
    g->kernel_s = ks ? ks->valuedouble : 0;
    const cJSON *kg = cJSON_GetObjectItemCaseSensitive(root, "kernel_gap_s");
    if (kg && (!cJSON_IsNumber(kg) || !(kg->valuedouble >= 0) ||
               !isfinite(kg->valuedouble))) {
        errf(err, err_len, "device file '%s': field 'kernel_gap_s' must be "
             "a number of at least 0 (or left out: none)", path);
        goto fail;
    }
    g->kernel_gap_s = kg ? kg->valuedouble : 0;
    const cJSON *ld = cJSON_GetObjectItemCaseSensitive(root, "link_duplex");
    if (ld && (!cJSON_IsNumber(ld) || !(ld->valuedouble >= 1) ||
               !(ld->valuedouble <= 2))) {
        errf(err, err_len, "device file '%s': field 'link_duplex' must be a "
             "number from 1 (both directions share one rate) to 2 (full "
             "duplex), or left out: 2", path);
        goto fail;
    }
    g->link_duplex = ld ? ld->valuedouble : 0;
    if (!read_efficiency(path, root, &gf->eff, err, err_len)) goto fail;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "precision");
    delta_precision prec;
    if (pr && (!cJSON_IsString(pr) ||
               !delta_precision_parse(pr->valuestring, &prec))) {
        errf(err, err_len, "device file '%s': field 'precision' must be "
             "\"fp32\" or \"bf16\" (or left out)", path);
        goto fail;
    }
    gf->eff.measured_precision = pr ? 1 + (int)prec : 0;
    if (!read_string(path, root, "name", "file", gf->name, sizeof gf->name,
                     err, err_len) ||
        !read_string(path, root, "description", path, gf->description,
                     sizeof gf->description, err, err_len))
        goto fail;
    g->name = gf->name;
    g->description = gf->description;
    g->link_bytes_per_s = fmin(g->link_to_host_bytes_per_s,
                               g->link_to_device_bytes_per_s);
    g->eff = &gf->eff;
    goto done;
fail:
    free(gf);
    gf = NULL;
done:
    cJSON_Delete(root);
    free(text);
    return gf ? &gf->g : NULL;
}

int delta_gpu_measured_precision(const delta_gpu_preset *g) {
    return g && g->eff && g->eff->measured_precision > 0
               ? g->eff->measured_precision - 1
               : -1;
}

/* ---- writing ---------------------------------------------------------------- */

/* Whether v (by op type) has an entry (> 0). */
static bool has_any(const double *v) {
    for (int t = 0; t < DELTA_OP_TYPE_COUNT; t++)
        if (v[t] > 0) return true;
    return false;
}

/* o[key] = {op type: v[t]} over the entries > 0; NULL when out of memory. */
static cJSON *add_by_op_type(cJSON *o, const char *key, const double *v) {
    cJSON *obj = cJSON_AddObjectToObject(o, key);
    for (int t = 0; obj && t < DELTA_OP_TYPE_COUNT; t++)
        if (v[t] > 0 &&
            !cJSON_AddNumberToObject(obj, delta_op_type_name((delta_op_type)t),
                                     v[t]))
            return NULL;
    return obj;
}

cJSON *delta_gpu_file_json(const delta_gpu_preset *g) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "format", FORMAT_NAME) &&
              cJSON_AddNumberToObject(o, "version", FORMAT_VERSION) &&
              cJSON_AddStringToObject(o, "name", g->name ? g->name : "file") &&
              cJSON_AddStringToObject(o, "description",
                                      g->description ? g->description : "");
    delta_gpu_preset e = *g; /* the links per direction as the sim uses them */
    if (!e.link_to_host_bytes_per_s)
        e.link_to_host_bytes_per_s = g->link_bytes_per_s;
    if (!e.link_to_device_bytes_per_s)
        e.link_to_device_bytes_per_s = g->link_bytes_per_s;
    for (size_t i = 0; ok && i < N_FIELDS; i++)
        ok = cJSON_AddNumberToObject(o, fields[i].key,
                                     *field_of(&e, &fields[i])) != NULL;
    ok = ok &&
         cJSON_AddNumberToObject(o, "kernel_s", g->kernel_s > 0
                                 ? g->kernel_s : DELTA_SIM_LAUNCH_S) &&
         cJSON_AddNumberToObject(o, "kernel_gap_s", g->kernel_gap_s) &&
         cJSON_AddNumberToObject(o, "link_duplex",
                                 g->link_duplex > 0 ? g->link_duplex : 2);
    const delta_sim_efficiency *eff = g->eff;
    cJSON *curves = ok && eff ? cJSON_AddObjectToObject(o, "efficiency") : NULL;
    for (int k = 0; ok && curves && k < DELTA_SIM_KIND_COUNT; k++) {
        const delta_sim_curve *c = &eff->curve[k];
        if (!c->n) continue;
        cJSON *arr = cJSON_AddArrayToObject(curves, kind_names[k]);
        for (int i = 0; ok && arr && i < c->n; i++) {
            double pair[2] = {c->x[i], c->eff[i]};
            cJSON *p = cJSON_CreateDoubleArray(pair, 2);
            ok = p && cJSON_AddItemToArray(arr, p);
        }
        ok = ok && arr;
    }
    /* op_host_s and precision only when measured: older files have none */
    int mp = delta_gpu_measured_precision(g);
    if (ok && eff)
        ok = curves && add_by_op_type(o, "op_factors", eff->op_factor) &&
             (!has_any(eff->op_host_s) ||
              add_by_op_type(o, "op_host_s", eff->op_host_s)) &&
             (mp < 0 || cJSON_AddStringToObject(
                            o, "precision",
                            delta_precision_name((delta_precision)mp)));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
