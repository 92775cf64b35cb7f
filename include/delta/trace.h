/* delta — Chrome trace-event files of what a session did: one track per
 * stream (compute, copies to the host, copies to the device) with every op,
 * recomputation and transfer as a span, a track of the host issuing them
 * (where the host's time per op goes), and a counter track of device bytes
 * in use. The file opens in Perfetto (ui.perfetto.dev) or chrome://tracing.
 *
 * Events are streamed to the file as they happen (stdio buffering), so a
 * long run needs no memory for its trace; the file is a complete JSON
 * document only after delta_trace_close. Times are microseconds from the
 * first event, on the backend's clock (wall time on cpu, simulated on sim). */
#ifndef DELTA_TRACE_H
#define DELTA_TRACE_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_trace delta_trace;

/* Creates path (truncating it). NULL with a message in err when it cannot
 * be written. */
DELTA_API delta_trace *delta_trace_open(const char *path, char *err, size_t err_len);
/* Ends the JSON document, flushes and closes. DELTA_ERR_IO (message in err)
 * when a write failed at any point; the trace is freed either way. NULL is
 * a no-op. */
DELTA_API delta_status delta_trace_close(delta_trace *t, char *err, size_t err_len);

/* The tracks. */
typedef enum delta_trace_track {
    DELTA_TRACK_COMPUTE = 0,
    DELTA_TRACK_TO_HOST,
    DELTA_TRACK_TO_DEVICE,
    DELTA_TRACK_COMM,      /* collective ops between ranks (data parallel) */
    DELTA_TRACK_HOST,      /* the host issuing the step: per op a span of
                              cat "host" (the step loop's work on it, the
                              policy's hooks and the launch included), and
                              inside it "launch" (the backend's run and
                              record) and "throttle" (waiting for the device
                              to come within the run-ahead bound) */
} delta_trace_track;

/* A span [t0, t1] seconds on a track. cat names its kind ("op",
 * "recompute", "swap_out", "swap_in", "stall", "defrag"); args is NULL or
 * the inside of a JSON object (e.g. "\"op\":3,\"bytes\":512"). */
DELTA_API void delta_trace_span(delta_trace *t, delta_trace_track track,
                      const char *name, const char *cat, double t0, double t1,
                      const char *args);
/* A point of the device-memory counter at time t: bytes in use and the
 * budget (drawn as a second series so the limit is visible). */
DELTA_API void delta_trace_memory(delta_trace *t, double time, size_t in_use,
                        size_t budget);
/* A marker (e.g. a drop, a step boundary) at time t on a track. The
 * session marks the start of every training step with name and cat
 * "step" on the compute track. */
DELTA_API void delta_trace_instant(delta_trace *t, delta_trace_track track,
                         const char *name, const char *cat, double time);

#ifdef __cplusplus
}
#endif
#endif
