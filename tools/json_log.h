/* The --json log: one JSON object a line (JSON Lines), written with cJSON.
 * Each training step adds {"step", "loss", "step_s", "peak_device_bytes",
 * "live_peak_bytes", "swap_out_bytes", "swap_in_bytes", "swap_outs",
 * "swap_ins", "drops", "dropped_bytes", "recomputed_ops", "recompute_s",
 * "stall_s", "defrag_moves", "defrag_bytes", "baseline_peak_bytes",
 * "min_budget_bytes", "budget_bytes", "replayed"}, the session's figures
 * of that step (delta_step_stats; the dry-plan figures are of that step's
 * shape), and its shape {"batch", "seq_len" (language models only)}; the
 * run ends with {"summary": {...}}. A loss that is
 * not meaningful (sim) or not finite is written as null, and so is an
 * unlimited budget. The file is flushed, fsync'd and closed by
 * json_log_close, which reports any write error. */
#ifndef DELTA_TOOLS_JSON_LOG_H
#define DELTA_TOOLS_JSON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "delta/session.h"

typedef struct json_log json_log;

/* Creates (truncates) path, or with append opens it to add lines (a
 * resumed run; then json_log_resume). Lines are written whole (line
 * buffered), so a killed run leaves whole lines. NULL with a message in
 * err on failure. */
json_log *json_log_open(const char *path, bool append, char *err,
                        size_t err_len);

/* A run resumed at `step`: cuts the log back to its lines of steps up to
 * `step` (what the killed run logged after its checkpoint, its summary and
 * a half line go), so the resumed run's lines follow them and the file
 * reads as one run's. false with a message in err on failure. */
bool json_log_resume(json_log *l, int64_t step, char *err, size_t err_len);

/* Writes obj as one line; obj stays the caller's. */
bool json_log_write(json_log *l, const cJSON *obj);

/* One step's line. loss NAN gives null; budget_limited false writes
 * budget_bytes as null (the arena was sized to fit, nobody chose it).
 * batch and seq_len: the step's shape (seq_len 0: not written); val_loss:
 * the validation loss computed after the step (NAN: none, not written);
 * lr: the step's learning rate (NAN: a constant one, not written);
 * grad_norm: the gradients' global norm with --grad-clip (NAN: not
 * written). */
bool json_log_step(json_log *l, int64_t step, double loss,
                   const delta_step_stats *st, bool budget_limited,
                   int64_t batch, int64_t seq_len, double val_loss,
                   double lr, double grad_norm);

/* A validation's line outside a step's: {"step": step, "val_loss": v}
 * (step 0: before training, as llm.c validates). */
bool json_log_val(json_log *l, int64_t step, double val_loss);

/* Adds a number, or null when v is not finite, to obj under key. */
void json_add_number_or_null(cJSON *obj, const char *key, double v);

/* Flushes, fsyncs and closes; false with a message in err if any write
 * failed along the way. NULL is a no-op that succeeds. */
bool json_log_close(json_log *l, char *err, size_t err_len);

#endif
