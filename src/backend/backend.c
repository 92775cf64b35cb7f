/* The parts of every backend that do not depend on which one it is: the
 * public accessors of delta/backend.h and the few helpers of
 * src/backend/backend.h that are more than one call. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "delta/backend.h"
#include "delta/graph.h"

/* ---- the registry: backends by name ----------------------------------------- */

static delta_backend *make_cpu(const delta_backend_opts *o, char *err,
                               size_t n) {
    return delta_backend_cpu_new(o ? o->cpu : NULL, err, n);
}

static delta_backend *make_sim(const delta_backend_opts *o, char *err,
                               size_t n) {
    return delta_backend_sim_new(o ? o->sim : NULL, err, n);
}

static delta_backend *make_cuda(const delta_backend_opts *o, char *err,
                                size_t n) {
    return delta_backend_cuda_new(o ? o->cuda : NULL, err, n);
}

/* One row per backend; a backend added here is known to every program
 * that names backends (the tool's --backend included). */
static const struct backend_reg {
    const char *name;
    const char *description;
    delta_backend *(*make)(const delta_backend_opts *o, char *err, size_t n);
    bool (*built)(void);  /* NULL: always */
} registry[] = {
    {"cpu", "real kernels on the CPU; the device is an arena of the budget "
            "in host memory, behind an emulated link", make_cpu, NULL},
    {"sim", "a simulated GPU (v100, a100, h100 presets): times and memory, "
            "no data", make_sim, NULL},
    {"cuda", "an NVIDIA GPU through CUDA", make_cuda, delta_cuda_built},
};
enum { N_REG = sizeof registry / sizeof registry[0] };

const char *const *delta_backend_names(void) {
    static const char *names[N_REG + 1];
    for (int i = 0; i < N_REG; i++) names[i] = registry[i].name;
    names[N_REG] = NULL;
    return names;
}

static const struct backend_reg *find_reg(const char *name) {
    for (int i = 0; name && i < N_REG; i++)
        if (!strcmp(registry[i].name, name)) return &registry[i];
    return NULL;
}

const char *delta_backend_describe(const char *name) {
    const struct backend_reg *r = find_reg(name);
    return r ? r->description : NULL;
}

delta_backend *delta_backend_new(const char *name,
                                 const delta_backend_opts *opts,
                                 delta_status *status, char *err,
                                 size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    delta_status st_dummy;
    if (!status) status = &st_dummy;
    const struct backend_reg *r = find_reg(name);
    if (!r) {
        char list[128] = "";
        for (int i = 0; i < N_REG; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                     i == 0 ? "" : i == N_REG - 1 ? " and " : ", ",
                     registry[i].name);
        snprintf(err, err_len, "unknown backend '%s'; the backends are %s",
                 name ? name : "(null)", list);
        *status = DELTA_ERR_INVALID_ARG;
        return NULL;
    }
    delta_backend *b = r->make(opts, err, err_len);
    *status = b ? DELTA_OK
                : r->built && !r->built() ? DELTA_ERR_UNSUPPORTED
                                          : DELTA_ERR_STATE;
    return b;
}

/* ---- every backend's accessors ----------------------------------------------- */

void delta_backend_free(delta_backend *b) {
    if (!b) return;
    /* destroy drains the streams and frees b itself (b lives inside the
     * backend's own context). */
    b->ops->destroy(b->ctx);
}

const char *delta_backend_name(const delta_backend *b) {
    return b && b->name ? b->name : "none";
}

void delta_backend_fit_program(delta_backend *b, delta_ctx *ctx) {
    if (b && ctx && b->ops->fit_program) b->ops->fit_program(b->ctx, ctx);
}

double delta_backend_link_bps(const delta_backend *b) {
    return b ? b->link_bps : 0.0;
}

double delta_backend_device_bytes(const delta_backend *b) {
    return b ? b->device_bytes : 0.0;
}

void delta_backend_sync_copies(delta_backend *b) {
    delta_event h = delta_backend_record(b, DELTA_STREAM_TO_HOST);
    delta_event d = delta_backend_record(b, DELTA_STREAM_TO_DEVICE);
    delta_event c = delta_backend_record(b, DELTA_STREAM_COMM);
    delta_backend_sync(b, h);
    delta_backend_sync(b, d);
    delta_backend_sync(b, c);
}

delta_status delta_backend_init_tensor(delta_backend *b, void *dev,
                                       const delta_tensor *t, uint64_t seed) {
    /* no data (sim, also behind the stream checker's fake arena): nothing
     * to fill, and no staging buffer of a paper-scale tensor to make */
    if (!delta_backend_has_data(b)) return DELTA_OK;
    if (!b->ops->upload) {
        delta_init_tensor(dev, t, seed);
        return DELTA_OK;
    }
    void *tmp = delta_alloc_aligned(t->bytes ? t->bytes : 1);
    if (!tmp) return DELTA_ERR_NOMEM;
    delta_init_tensor(tmp, t, seed);
    delta_backend_upload(b, dev, tmp, t->bytes);
    delta_free_aligned(tmp);
    return DELTA_OK;
}
