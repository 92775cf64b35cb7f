/* delta — backends: where a program's ops run and its device bytes live.
 *   cpu  real kernels; the device is one arena of exactly the budget in
 *        host memory; a compute-engine thread runs the kernels and two
 *        copy-engine threads move data to and from a separate host store,
 *        throttled to an emulated link bandwidth.
 *   sim  a virtual GPU (presets below, or a device file that delta
 *        calibrate measured: delta/calibrate.h): nothing is computed or allocated;
 *        ops advance a compute clock by a roofline cost model, copies
 *        advance two copy-stream clocks, and issuing either advances a
 *        virtual host clock (launch costs), so a step is host- or
 *        device-bound as it would be on the GPU.
 *   cuda an NVIDIA GPU (docs/CUDA.md): one cudaMalloc of the budget,
 *        pinned host store, CUDA streams, deterministic kernels.
 * Each has its constructor below, and delta_backend_new makes any of them
 * by name. The runtime drives a backend through the internal interface in
 * src/backend/backend.h; this header only creates and describes them. */
#ifndef DELTA_BACKEND_H
#define DELTA_BACKEND_H

#include "delta/common.h"
#include "delta/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_backend delta_backend;

typedef struct delta_cpu_backend_opts {
    /* Emulated host link in GB/s (1e9 bytes/s) per direction.
     * < 0: the default, set from the measured GEMM speed so that moving one
     *      byte takes as long as 1,000 flops (a V100 or H100 on PCIe; see
     *      docs/DEVICE.md), or 15,000 with bf16_link; measured once per
     *      process and thread count;
     *   0: unthrottled (memcpy speed). */
    double link_gbps;
    /* The default link for a BF16 program: one byte per 15,000 flops, an
     * H100's balance in BF16 (its tensor cores run ~15x the fp32 rate, its
     * PCIe link does not), so that the policies meet on the cpu the choices
     * they meet on a GPU training in BF16. No effect with link_gbps >= 0. */
    bool bf16_link;
    /* Fixed cost per copy in seconds. < 0: the default, 10 us on a
     * throttled link and none on an unthrottled one; 0: none. */
    double link_latency_s;
    /* Nonzero: every item of every stream (kernels, copies, waits) is
     * delayed by a random 0-200 us drawn from this seed, to shake out
     * ordering bugs (the results must not change). */
    uint64_t jitter_seed;
} delta_cpu_backend_opts;

/* The constructors return NULL and write a message to err on failure
 * (unknown preset, no memory, threads that cannot start, no GPU). */
DELTA_API delta_backend *delta_backend_cpu_new(const delta_cpu_backend_opts *opts,
                                     char *err, size_t err_len);

/* A simulated device (figures and sources: src/backend/sim/presets.c and
 * docs/DEVICE.md). */
typedef struct delta_gpu_preset {
    const char *name;          /* "v100-16g", ... */
    const char *description;
    double memory_bytes;       /* nominal capacity in GiB x 2^30 */
    double fp32_flops;         /* peak FLOP/s, fp32 CUDA cores */
    double tensor_flops;       /* peak FLOP/s, tf32 (A100/H100) or fp16 (V100) */
    double bf16_flops;         /* dense BF16 tensor-core peak FLOP/s (V100
                                  has no BF16: its fp16 tensor peak); BF16
                                  products are priced at it */
    double hbm_bytes_per_s;
    double link_bytes_per_s;   /* effective host link, per direction */
    double link_latency_s;
    /* The host's side (the sim's host clock; docs/DEVICE.md, "Host
     * clock"): seconds of host time, estimates from public measurements. */
    double launch_host_s;      /* issuing one kernel or async copy */
    double library_host_s;     /* more per cuBLAS/cuDNN call (GEMM-like ops) */
    double launch_latency_s;   /* issued to running, on an idle GPU */
    double sync_wake_s;        /* a blocked host's wake-up after a wait */
    /* Measured figures a device file adds (delta calibrate; docs/DEVICE.md,
     * "Device files"). The presets leave them 0 / NULL, which keeps the
     * cost model's constants: */
    double link_to_host_bytes_per_s;   /* 0: link_bytes_per_s */
    double link_to_device_bytes_per_s; /* 0: link_bytes_per_s */
    double link_duplex;        /* both directions busy at once: their
                                  summed rate over one direction's alone,
                                  from 1 (one engine, shared) to 2 (full
                                  duplex); 0: 2 */
    double kernel_s;           /* device time of an empty kernel (its
                                  shortest run and the gap before the
                                  next); 0: 5 us */
    double kernel_gap_s;       /* device idle between a kernel's end and
                                  the start of the next one already queued,
                                  in no kernel's span (the cpu backend's
                                  engine turning around); 0: none */
    /* efficiency curves per kind of op and factors per op type; NULL: the
     * constant efficiencies */
    const struct delta_sim_efficiency *eff;
} delta_gpu_preset;

/* Presets, NULL-name terminated: v100-16g, v100-32g, a100-40g, a100-80g,
 * h100-80g, h200-141g. */
DELTA_API const delta_gpu_preset *delta_gpu_presets(void);
/* The preset of that name (case-sensitive), or NULL. */
DELTA_API const delta_gpu_preset *delta_gpu_preset_find(const char *name);

/* A device description from a JSON file (what delta calibrate writes; the
 * fields in docs/DEVICE.md, "Device files"): the figures of a preset, each
 * required and checked (sizes and rates above 0, times at least 0), plus
 * the optional efficiency curves and per-op-type factors. NULL with a
 * message in err that names the file and the field when the file cannot
 * be read, is not JSON or has a field missing, of the wrong type or out of
 * range. Free it with delta_gpu_file_free (NULL is a no-op). */
DELTA_API delta_gpu_preset *delta_gpu_file_load(const char *path, char *err,
                                                size_t err_len);
DELTA_API void delta_gpu_file_free(delta_gpu_preset *g);
/* The precision (a delta_precision: fp32 0, bf16 1) of the programs whose
 * keep steps gave g's per-op factors and host costs ("precision" in a
 * file delta calibrate wrote), or -1 when g does not say (a preset, an
 * older file). A BF16 step runs other kernels than an fp32 one, so a
 * file's factors describe runs in its own precision. */
DELTA_API int delta_gpu_measured_precision(const delta_gpu_preset *g);

/* Device seconds op i of ctx takes on g by the simulator's cost model
 * (docs/DEVICE.md, "Cost model"); 0 for a view. */
DELTA_API double delta_gpu_op_seconds(const delta_gpu_preset *g,
                                      const delta_ctx *ctx, int op);

/* The link between the GPUs of a data-parallel run, for the simulator's
 * collective ops (figures and sources: src/backend/sim/presets.c and
 * docs/DEVICE.md, "Interconnects"). A collective over P ranks of a buffer
 * of B bytes is priced as a ring: an allreduce takes
 *     2 (P - 1) / P x B / bytes_per_s + 2 (P - 1) x latency_s,
 * a reduce-scatter or an allgather half of that; 0 with one rank. */
typedef struct delta_interconnect {
    const char *name;          /* "nvlink", "pcie", "infiniband" */
    const char *description;
    double bytes_per_s;        /* per GPU and direction, effective */
    double latency_s;          /* per step of the ring */
} delta_interconnect;
/* Presets, NULL-name terminated: nvlink, pcie, infiniband. */
DELTA_API const delta_interconnect *delta_interconnects(void);
DELTA_API const delta_interconnect *delta_interconnect_find(const char *name);
/* Seconds of a collective over `ranks` of `bytes` on ic (see above);
 * allreduce: true for an allreduce, false for a reduce-scatter or an
 * allgather. */
DELTA_API double delta_collective_seconds(const delta_interconnect *ic,
                                          int ranks, bool allreduce,
                                          double bytes);

typedef struct delta_sim_backend_opts {
    const char *gpu;           /* preset name (NULL: "v100-16g") */
    bool tensor_cores;         /* cost matmul/conv at tensor_flops */
    /* A description to simulate instead of the preset `gpu` (e.g. from
     * delta_gpu_file_load); not owned, it must outlive the backend. */
    const delta_gpu_preset *device;
    /* The GPUs' link for collective ops (a data-parallel program); NULL:
     * "nvlink". Not owned. */
    const delta_interconnect *interconnect;
} delta_sim_backend_opts;

DELTA_API delta_backend *delta_backend_sim_new(const delta_sim_backend_opts *opts,
                                     char *err, size_t err_len);

/* An NVIDIA GPU through CUDA (docs/CUDA.md): the arena is one cudaMalloc
 * of exactly the budget, the host store pinned memory, one compute stream
 * and two copy streams; kernels are deterministic (a recomputed tensor
 * equals the dropped one bit for bit). In a build without CUDA, or on a
 * machine without a GPU, the constructor returns NULL and says why in err
 * ("cuda backend: built without CUDA ...", "cuda backend: no CUDA device
 * (cudaGetDeviceCount: ...)"). */
typedef struct delta_cuda_backend_opts {
    int device;                /* CUDA device ordinal */
} delta_cuda_backend_opts;

DELTA_API delta_backend *delta_backend_cuda_new(const delta_cuda_backend_opts *opts,
                                      char *err, size_t err_len);
/* Whether this build has the CUDA backend (nvcc was found). */
DELTA_API bool delta_cuda_built(void);
/* Whether NCCL can be loaded (libnccl.so.2, at run time, for the collective
 * ops of several ranks on GPUs); false with the reason in why. */
DELTA_API bool delta_cuda_nccl_available(char *why, size_t n);
/* CUDA devices present: > 0, or 0 with the reason in err (no driver, no
 * device, built without CUDA). Never fails otherwise. */
DELTA_API int delta_cuda_device_count(char *err, size_t err_len);
/* What a cuda backend runs convolutions on ("cuDNN 9.x.y", or "im2col +
 * cuBLAS (no cuDNN: why)"); NULL for other backends. */
DELTA_API const char *delta_cuda_conv_path(const delta_backend *b);

/* Backends by name, through one registry (src/backend/backend.c): "cpu",
 * "sim" and "cuda", each made from its own options (the member of
 * delta_backend_opts named like it; the others are not read). A program
 * that takes the backend as a word (a command line, a config file) makes
 * it with one call:
 *     delta_backend *b = delta_backend_new(name, &(delta_backend_opts){
 *         .sim = &(delta_sim_backend_opts){.gpu = "a100-80g"}}, err, n); */
typedef struct delta_backend_opts {
    const delta_cpu_backend_opts *cpu;    /* for "cpu"; NULL: defaults */
    const delta_sim_backend_opts *sim;    /* for "sim"; NULL: defaults */
    const delta_cuda_backend_opts *cuda;  /* for "cuda"; NULL: device 0 */
} delta_backend_opts;

/* The registered names, NULL-terminated: "cpu", "sim", "cuda" (cuda is
 * listed in every build; delta_backend_new says why it cannot be made). */
DELTA_API const char *const *delta_backend_names(void);
/* One line on what the named backend is, or NULL for an unknown name. */
DELTA_API const char *delta_backend_describe(const char *name);
/* The backend of that name (opts NULL: every backend's defaults). NULL
 * with a message in err for an unknown name ("unknown backend 'x'; the
 * backends are cpu, sim and cuda", DELTA_ERR_INVALID_ARG in *status) or
 * one that cannot be made (its constructor's message; *status
 * DELTA_ERR_UNSUPPORTED for a build without it, else DELTA_ERR_STATE).
 * status may be NULL. */
DELTA_API delta_backend *delta_backend_new(const char *name,
                                           const delta_backend_opts *opts,
                                           delta_status *status, char *err,
                                           size_t err_len);

/* Drains pending copies, stops the copy engines, frees the arena. NULL is
 * a no-op. */
DELTA_API void delta_backend_free(delta_backend *b);
/* "cpu", "sim" or "cuda"; never NULL. */
DELTA_API const char *delta_backend_name(const delta_backend *b);
/* The link bandwidth in bytes/s (per direction) this backend emulates or
 * models; 0 when unthrottled. */
DELTA_API double delta_backend_link_bps(const delta_backend *b);
/* Device memory of the backend's device (sim: the preset's; cuda: the
 * GPU's total from cudaMemGetInfo; cpu: 0 = no fixed size). */
DELTA_API double delta_backend_device_bytes(const delta_backend *b);

/* Fits ctx's ops to b's kernels before the program is planned: where b's
 * kernel for an op needs more scratch than the graph declared, the op's
 * workspace grows to it, so the dry plan, the budget and every policy see
 * it. cuda: each convolution's cuDNN algorithm is chosen by timing, once
 * per shape and kept in a file between runs (docs/CUDA.md), which blocks
 * for a moment the first time. A choice depends on the shape alone, never
 * on the budget. delta_session_new calls it; call it yourself before
 * delta_dry_plan_build when you plan for this backend. Idempotent; nothing
 * on cpu and sim. */
struct delta_ctx;
DELTA_API void delta_backend_fit_program(delta_backend *b,
                                         struct delta_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
