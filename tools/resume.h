/* Training checkpoints and --resume (docs/CHECKPOINTS.md).
 *
 * A training checkpoint is a model file (checkpoint.h: the parameters and
 * batch-norm state under PyTorch's names, "step" and the model's config in
 * the metadata) plus what it takes to continue the run exactly:
 *  - the optimizer's state, each STATE tensor the optimizer made under
 *    "optimizer.<param>.<slot>": momentum_buffer (SGD), exp_avg and
 *    exp_avg_sq (AdamW); the optimizer keeps nothing else (AdamW's step
 *    count is the session's step counter, saved below);
 *  - metadata "checkpoint" = "training"; "session_step", the step counter
 *    that keys dropout masks, --seq-len-range draws and AdamW's bias
 *    correction (the RNG is counter-based: (seed, session_step) is its
 *    whole state); "data_epoch" and "data_index", the loader's position;
 *  - the settings a run must share to continue exactly (batch, dropout,
 *    optimizer and its hyperparameters, seed, data, shuffle, drop_last,
 *    seq_len_range), which --resume compares with its own, refusing a
 *    mismatch with each difference named.
 * The budget, policy, backend link and threads are not compared: the
 * values computed are the same under any of them. */
#ifndef DELTA_TOOLS_RESUME_H
#define DELTA_TOOLS_RESUME_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer.h"

/* Refuses option combinations that cannot work (--resume with --load,
 * --checkpoint-every without --save, either on sim or in delta plan). */
delta_status resume_check_options(trainer *t);

/* After a failure during training: appends to t->err where the last
 * checkpoint of this run is and how to continue from it (nothing when
 * none was written). */
void resume_note_failure(trainer *t);

/* Whether a training checkpoint is due after `step` (counted from the
 * start of training). */
bool resume_due(const trainer *t, int64_t step);

/* Writes cfg.save as a training checkpoint of the current state (step
 * start_step + steps_done), atomically; sets t->saved_step. */
delta_status resume_save(trainer *t);

/* Reads cfg.resume into the session and the loader (call at the end of
 * setup): checks the settings, loads every model and optimizer tensor,
 * sets the step counter, start_step and the data position. A file that
 * is not a training checkpoint, or was trained with other settings, or
 * has trained past --steps, gives DELTA_ERR_INVALID_ARG / _FORMAT with a
 * message saying what to do. */
delta_status resume_load(trainer *t);

#endif
