/* The device a run trains on (train_impl.h): the simulated GPU (a
 * preset, a device file or a description in memory), the backend made by
 * name through the library's registry, and the budget in bytes against
 * the dry plan, with the lines that say so. */
#include "train_impl.h"

#include <math.h>
#include <string.h>

#include "delta/cpu.h"

/* The simulated device (sim only): the description given in memory, the
 * device file's or the preset's. */
delta_status train_setup_gpu(delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    char sub[512];
    if (!tr->sim) return DELTA_OK;
    if (c->gpu_device) {
        tr->gpu = c->gpu_device;
    } else if (c->gpu_file) {
        tr->gpu_loaded = delta_gpu_file_load(c->gpu_file, sub, sizeof sub);
        if (!tr->gpu_loaded)
            return train_fail(tr, DELTA_ERR_INVALID_ARG, "--gpu-file: %s",
                              sub);
        tr->gpu = tr->gpu_loaded;
    } else {
        tr->gpu = delta_gpu_preset_find(c->gpu);
        if (!tr->gpu)
            return train_fail(tr, DELTA_ERR_INVALID_ARG, "unknown GPU '%s'; "
                              "see --gpu help", c->gpu);
    }
    return DELTA_OK;
}

/* The backend, made before the programs are built so that they are
 * fitted to its kernels (build_shape). Its budget comes later, from the
 * plan (train_set_budget). */
delta_status train_make_backend(delta_trainer *tr) {
    delta_train_config *c = &tr->cfg;
    char sub[512];
    const delta_gpu_preset *gpu = tr->gpu;
    /* Every backend's options; the registry reads the one it makes.
     * The cpu link: unthrottled when nothing can be swapped (no budget);
     * with a budget the backend's default (see delta/backend.h). */
    delta_sim_backend_opts sim = {
        .gpu = gpu ? gpu->name : NULL, .device = gpu,
        .interconnect = delta_interconnect_find(
            c->interconnect ? c->interconnect : "nvlink")};
    delta_cuda_backend_opts cuda = {.device = 0};
    bool budget = c->budget.kind != DELTA_BUDGET_UNLIMITED;
    delta_cpu_backend_opts cpu = {
        .link_gbps = c->link_set ? c->link_gbps : budget ? -1.0 : 0.0,
        .bf16_link = c->model.precision == DELTA_PRECISION_BF16,
        .link_latency_s = -1, .jitter_seed = (uint64_t)c->device_jitter};
    delta_status bst;
    tr->backend = delta_backend_new(
        train_backend_name(c),
        &(delta_backend_opts){.cpu = &cpu, .sim = &sim, .cuda = &cuda}, &bst,
        sub, sizeof sub);
    /* the backends' messages name them ("cpu backend: ..."); no GPU is
     * DELTA_ERR_STATE (this machine lacks it), a build without CUDA
     * DELTA_ERR_UNSUPPORTED (this build cannot serve the request) */
    if (!tr->backend) return train_fail(tr, bst, "%s", sub);
    return DELTA_OK;
}

/* The budget in bytes (a percentage is of the plan's peak) and the
 * backend's and budget's lines. */
delta_status train_set_budget(delta_trainer *tr) {
    delta_train_config *c = &tr->cfg;
    char b1[32], b2[32], b3[32];
    const delta_gpu_preset *gpu = tr->gpu;
    switch (c->budget.kind) {
    case DELTA_BUDGET_UNLIMITED:
        /* A simulated GPU's memory is its limit. */
        tr->budget_bytes = gpu ? (size_t)gpu->memory_bytes : 0;
        break;
    case DELTA_BUDGET_PERCENT:
        tr->budget_bytes = (size_t)ceil((double)tr->plan.peak_bytes *
                                        c->budget.percent / 100.0);
        break;
    case DELTA_BUDGET_BYTES: tr->budget_bytes = c->budget.bytes; break;
    }
    double bps = delta_backend_link_bps(tr->backend);
    if (tr->sim) {
        train_info(tr, "backend: sim %s (%s)", gpu->name, gpu->description);
        int mp = delta_gpu_measured_precision(gpu);
        if (mp >= 0 && mp != (int)c->model.precision)
            train_info(tr, "note: the device's per-op factors and host costs "
                       "were measured on %s programs and this run is %s: "
                       "its predictions are rougher (delta calibrate "
                       "--precision %s measures this precision's)",
                       delta_precision_name((delta_precision)mp),
                       delta_precision_name(c->model.precision),
                       delta_precision_name(c->model.precision));
    } else if (train_on_backend(c, "cuda")) {
        train_info(tr, "backend: cuda, device memory %s, link %.3g GB/s, "
                   "convolutions on %s",
                   delta_format_bytes(delta_backend_device_bytes(tr->backend),
                                      b1, sizeof b1),
                   bps / 1e9, delta_cuda_conv_path(tr->backend));
    } else if (bps > 0) {
        train_info(tr, "backend: %s, %d threads, link %.3g GB/s",
                   delta_backend_name(tr->backend), delta_cpu_threads(),
                   bps / 1e9);
    } else {
        train_info(tr, "backend: %s, %d threads, link unthrottled",
                   delta_backend_name(tr->backend), delta_cpu_threads());
    }
    if (tr->budget_bytes)
        train_info(tr, "budget: %s%s; dry plan: peak %s, minimum %s (op %d "
                   "%s %s)",
                   delta_format_bytes((double)tr->budget_bytes, b1,
                                      sizeof b1),
                   c->budget.kind == DELTA_BUDGET_UNLIMITED
                       ? " (the GPU's memory)" : "",
                   delta_format_bytes((double)tr->plan.peak_bytes, b2,
                                      sizeof b2),
                   delta_format_bytes((double)tr->plan.min_budget_bytes, b3,
                                      sizeof b3),
                   tr->plan.min_budget_op, tr->plan.min_budget_op_type,
                   tr->plan.min_budget_op_name);
    else
        train_info(tr, "budget: unlimited; dry plan: peak %s",
                   delta_format_bytes((double)tr->plan.peak_bytes, b1,
                                      sizeof b1));

    tr->plans = delta_plan_cache_new();
    if (!tr->plans) return train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
    return DELTA_OK;
}
