/* delta — the simple executor: places every tensor of a program in host
 * memory (no budget) and runs its ops in order on the CPU kernels. It is
 * the reference the budgeted runtime is compared with, and what tests and
 * small tools use. */
#ifndef DELTA_EXEC_H
#define DELTA_EXEC_H

#include "delta/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_exec delta_exec;

typedef struct delta_exec_opts {
    /* Bytes (a multiple of DELTA_ALIGN) added before every buffer, so tests
     * can run the same program with its data at other addresses. */
    size_t address_offset;
} delta_exec_opts;

typedef enum delta_run_mode {
    DELTA_RUN_STEP = 0,  /* every op: forward, backward, optimizer; then
                            the step counter advances */
    DELTA_RUN_FORWARD,   /* forward ops only, training behaviour */
    DELTA_RUN_EVAL,      /* forward ops only, inference behaviour (batch
                            norm uses running stats, dropout is off) */
} delta_run_mode;

/* Allocates and initializes every tensor of ctx's program (parameters and
 * state from their init specs, inputs to zero). Returns NULL on failure and
 * writes why into err. ctx must outlive the executor and must not grow. */
DELTA_API delta_exec *delta_exec_new(delta_ctx *ctx, const delta_exec_opts *opts,
                           char *err, size_t err_len);
DELTA_API void delta_exec_free(delta_exec *ex);

DELTA_API delta_status delta_exec_run(delta_exec *ex, delta_run_mode mode);

/* Host pointer to t's data (views share their root's). */
DELTA_API void *delta_exec_data(delta_exec *ex, const delta_tensor *t);
/* Copies bytes into t; bytes must equal delta_tensor_bytes(t). */
DELTA_API delta_status delta_exec_set(delta_exec *ex, const delta_tensor *t,
                            const void *data, size_t bytes);

/* Wall-clock seconds op op_id took in the last run that ran it (0 if never
 * run). Measured around each kernel call. */
DELTA_API double delta_exec_op_seconds(const delta_exec *ex, int op_id);

/* The step counter: dropout masks and Adam's bias correction read it. */
DELTA_API int64_t delta_exec_step(const delta_exec *ex);
DELTA_API void delta_exec_set_step(delta_exec *ex, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
