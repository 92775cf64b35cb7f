/* Checkpoints: a model's parameters and persistent state (batch-norm
 * running stats) as a safetensors file under the model's own names, which
 * are torchvision's and Hugging Face's, so the file loads into the PyTorch
 * module with load_state_dict(strict=True). For that, every batch-norm
 * layer also gets torchvision's "<layer>.num_batches_tracked" as an I64
 * scalar (the steps trained). A model file holds no optimizer state: a
 * run that loads one starts its optimizer afresh. A training checkpoint
 * (resume.h) adds the optimizer's state under "optimizer." names, which
 * --load ignores without a word.
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
#include "delta/safetensors.h"
#include "delta/session.h"

/* What turns a model file into a training checkpoint (see resume.h):
 * more tensors, read through the session like the model's and saved under
 * prefix + their own name, and more metadata (key, value pairs). */
/* An F32 tensor already in host memory (data parallel: the optimizer
 * state another rank holds, sent to rank 0 for the save). */
typedef struct checkpoint_blob {
    char name[DELTA_NAME_LEN];
    int ndim;
    int64_t shape[DELTA_MAX_DIMS];
    const void *data;
} checkpoint_blob;

typedef struct checkpoint_extra {
    const char *prefix;                 /* e.g. "optimizer." */
    delta_tensor *const *tensors;
    int n_tensors;
    const checkpoint_blob *blobs;       /* saved under prefix + name too */
    int n_blobs;
    const char *const *meta_kv;         /* 2 * n_meta strings */
    int n_meta;
    bool bf16;  /* the model's F32 tensors rounded to BF16 (--save-dtype
                   bf16: half the file, for inference or fine-tuning
                   elsewhere; a training checkpoint cannot be, its masters
                   must stay exact); the extra tensors stay F32 */
} checkpoint_extra;

/* Reads the model's tensors (and extra's, when not NULL) out of the
 * session and writes path atomically (path.tmp, fsync, rename, directory
 * fsync: delta_st_write). DELTA_OK or a status with a message in err. */
delta_status checkpoint_save(const char *path, delta_session *s,
                             const delta_ctx *ctx, int n_model_tensors,
                             const delta_model *m, int64_t step,
                             const checkpoint_extra *extra, char *err,
                             size_t err_len);

/* Reads path, checks that it holds every model tensor with the model's
 * shape and dtype F32 (or BF16 or F16, widened exactly to fp32), and writes them into the session. Each missing or
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

/* checkpoint_load of a file already open (path names it in messages).
 * exact: only F32 for an F32 tensor (--resume continues from exact fp32
 * masters; a BF16 or F16 file is not them). */
delta_status checkpoint_load_file(const delta_st_file *f, const char *path,
                                  bool exact,
                                  delta_session *s, const delta_ctx *ctx,
                                  int n_model_tensors, const delta_model *m,
                                  int64_t *step, FILE *diag, char *err,
                                  size_t err_len);

#endif
