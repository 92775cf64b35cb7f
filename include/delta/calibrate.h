/* delta — calibration: a backend measured through the interface the
 * runtime drives (kernels on the compute stream, copies on the copy
 * streams, events and their spans), so the same code measures the cpu
 * backend and a GPU, and described as a simulated device: a device file
 * (docs/DEVICE.md, "Device files") that the sim takes instead of a preset
 * (delta_gpu_file_load, delta_sim_backend_opts.device), so that it
 * predicts that backend. `delta calibrate` is this with a command line.
 *
 * What is measured (src/backend/calibrate.c):
 *   - GEMM efficiency by size (square and model-shaped products), giving
 *     fp32_flops (the best rate) and the gemm curve;
 *   - conv2d, conv2d_dx and conv2d_dw on ResNet shapes: their curves;
 *   - elementwise and reduction bandwidth by size: hbm_bytes_per_s (the
 *     best streaming rate) and both memory curves;
 *   - the host link per direction, small and large copies: rate and
 *     latency;
 *   - the host's costs: a launch (run + record, many tiny kernels issued
 *     back to back behind a busy device), a library call's extra (small
 *     GEMMs the same way), the launch latency on an idle device, a
 *     blocking wait's wake-up; and the device's time per empty kernel.
 * Then steps of real programs (delta_calibration_add_step) are compared op
 * type by op type with what the sim predicts from those figures, and each
 * op type's measured / predicted becomes its factor in the file. */
#ifndef DELTA_CALIBRATE_H
#define DELTA_CALIBRATE_H

#include "delta/backend.h"
#include "delta/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_calibration delta_calibration;

typedef struct delta_calibrate_opts {
    /* Fewer and smaller measurements (a second or two on a small CPU):
     * for tests; the figures are rougher. */
    bool quick;
    /* The description's name and one line on it (NULL: "BACKEND-calibrated"
     * and what was measured). */
    const char *name, *description;
    /* The device's memory in bytes; 0: the backend's (cpu: the host's
     * physical memory, which is where its arena lives). */
    double memory_bytes;
    /* Progress, one line per measurement (a FILE *; NULL: none). */
    void *log;
} delta_calibrate_opts;

/* Runs the microbenchmarks on b (nothing else may use it meanwhile; its
 * arena is replaced). NULL with a message in err when memory for a
 * measurement cannot be had. */
DELTA_API delta_calibration *delta_calibrate(delta_backend *b,
                                             const delta_calibrate_opts *o,
                                             char *err, size_t err_len);
DELTA_API void delta_calibration_free(delta_calibration *c); /* NULL: no-op */

/* The description as measured so far, for the sim: valid until the
 * calibration is changed or freed. */
DELTA_API const delta_gpu_preset *delta_calibration_device(
    const delta_calibration *c);

/* One step of a program run on the calibrated backend, op by op: op_s[i]
 * is op i's device seconds (delta_session_op_seconds; < 0: not timed, left
 * out), step_s the step's. Its ops are summed per op type beside what the
 * sim predicts for them from the measured figures (the curves, no
 * factors), and every op type's factor becomes the measured sum over the
 * predicted one over all steps added so far. label names the program in
 * the report. DELTA_ERR_INVALID_ARG when ctx has no ops. */
DELTA_API delta_status delta_calibration_add_step(delta_calibration *c,
                                                  const char *label,
                                                  const delta_ctx *ctx,
                                                  const double *op_s,
                                                  double step_s);
/* The host's side of such steps: op_host_s[i] is the host seconds the
 * runtime spent on op i (delta_session_op_host_seconds; <= 0: left out).
 * Every op type's host cost becomes the mean over its ops added so far;
 * the simulator charges it per op in place of the launch figures, which
 * makes a step whose host work outlasts its device work (BF16 ResNet-50 on
 * an H200: cuDNN calls of 57-190 us) host-bound there too.
 * DELTA_ERR_INVALID_ARG when ctx has no ops. */
DELTA_API delta_status delta_calibration_add_host(delta_calibration *c,
                                                  const delta_ctx *ctx,
                                                  const double *op_host_s);

/* Sets the device's idle time between queued kernels (kernel_gap_s):
 * what a step spends outside its kernels' spans that the host's costs do
 * not explain. delta calibrate fits it so that the sim's keep steps of the
 * traced programs match the measured ones (none of the microbenchmarks
 * shows it: tiny kernels queued back to back turn around faster than real
 * ones). */
DELTA_API void delta_calibration_set_kernel_gap(delta_calibration *c,
                                                double seconds);

/* Records a check: the measured step of a program beside the sim's step
 * with this description (reported and written, not used). */
DELTA_API void delta_calibration_add_check(delta_calibration *c,
                                           const char *label,
                                           double measured_s,
                                           double predicted_s);

/* Prints what was measured and the comparison per op type (a FILE *). */
DELTA_API void delta_calibration_print(const delta_calibration *c, void *file);

/* Writes the device file (the description and, under "calibration", what
 * was measured) atomically: a reader sees the old file or the new one.
 * Only a regular file is replaced. DELTA_ERR_INVALID_ARG when path is
 * something else, DELTA_ERR_IO when it cannot be written; a message in
 * err either way. */
DELTA_API delta_status delta_calibration_write(const delta_calibration *c,
                                               const char *path, char *err,
                                               size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
