/* Checkpoints: a model's parameters and persistent state (batch-norm
 * running stats) as a safetensors file under the model's own names, which
 * are torchvision's and Hugging Face's, so the file loads into the PyTorch
 * module with load_state_dict(strict=True). For that, every batch-norm
 * layer also gets torchvision's "<layer>.num_batches_tracked" as an I64
 * scalar (the steps trained). Optimizer state is not saved: a run that
 * loads a checkpoint starts its optimizer afresh.
 *
 * The model's tensors are the PARAM and STATE tensors that
 * delta_model_build made: ids below n_model_tensors (delta_ctx_n_tensors
 * right after the build), so optimizer state, made later, is left out.
 *
 * Metadata: "format" "delta", "model" (name), "step" (steps trained),
 * "delta_version", and the resolved model config fields that are set. */
#ifndef DELTA_TOOLS_CHECKPOINT_H
#define DELTA_TOOLS_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>

#include "delta/models.h"
#include "delta/session.h"

/* Reads the model's tensors out of the session and writes path atomically
 * (path.tmp, fsync, rename). DELTA_OK or a status with a message in err. */
delta_status checkpoint_save(const char *path, delta_session *s,
                             const delta_ctx *ctx, int n_model_tensors,
                             const delta_model *m, int64_t step, char *err,
                             size_t err_len);

/* Reads path, checks that it holds every model tensor with dtype F32 and
 * the model's shape, and writes them into the session. Each missing or
 * mismatched tensor is named on diag (NULL: not printed) and makes the
 * load fail with DELTA_ERR_FORMAT (nothing is written then); a file that
 * cannot be read gives its status (DELTA_ERR_IO, DELTA_ERR_FORMAT).
 * Tensors the model does not have are ignored: silently for the known
 * extras of PyTorch state dicts (num_batches_tracked, the tied lm_head and
 * decoder, attention-mask buffers, BERT's position_ids), with a warning on
 * diag for any other. *step gets the file's "step" metadata, else its
 * num_batches_tracked, else 0. */
delta_status checkpoint_load(const char *path, delta_session *s,
                             const delta_ctx *ctx, int n_model_tensors,
                             const delta_model *m, int64_t *step, FILE *diag,
                             char *err, size_t err_len);

#endif
