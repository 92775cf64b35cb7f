/* Chrome trace-event writer (see delta/trace.h). JSON is written by hand:
 * the events are flat and their strings are op and tensor names, which are
 * escaped here; nothing is held in memory between events. */
#include "delta/trace.h"
#include "core/files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct delta_trace {
    FILE *f;
    bool any;         /* an event was written (comma before the next) */
    bool have_base;
    double base;      /* backend time of the first event */
    bool failed;
    char err[256];
};

static const char *const track_names[] = {"compute", "copies to host",
                                          "copies to device",
                                          "collectives (ranks)",
                                          "host (issuing ops)"};
#define N_TRACKS (int)(sizeof track_names / sizeof track_names[0])

static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void begin_event(delta_trace *t) {
    fputs(t->any ? ",\n" : "\n", t->f);
    t->any = true;
}

static double us(delta_trace *t, double s) {
    if (!t->have_base) {
        t->have_base = true;
        t->base = s;
    }
    return (s - t->base) * 1e6;
}

delta_trace *delta_trace_open(const char *path, char *err, size_t err_len) {
    delta_trace *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_len, "out of memory opening trace '%s'", path);
        return NULL;
    }
    /* only a regular file is written: a FIFO, a device or a socket at path
     * is refused, never blocked on nor truncated */
    mode_t kind = 0;
    t->f = delta_fopen_regular(path, false, &kind);
    if (!t->f) {
        if (kind)
            snprintf(err, err_len, "cannot write trace '%s': it is %s, not a "
                     "regular file", path, delta_file_kind(kind));
        else
            snprintf(err, err_len, "cannot write trace '%s': %s", path,
                     strerror(errno));
        free(t);
        return NULL;
    }
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", t->f);
    begin_event(t);
    fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
          "\"args\":{\"name\":\"delta device\"}}", t->f);
    for (int k = 0; k < N_TRACKS; k++) {
        begin_event(t);
        fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,"
                "\"tid\":%d,\"args\":{\"name\":\"%s\"}}", k, track_names[k]);
        begin_event(t);
        fprintf(t->f, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,"
                "\"tid\":%d,\"args\":{\"sort_index\":%d}}", k, k);
    }
    return t;
}

delta_status delta_trace_close(delta_trace *t, char *err, size_t err_len) {
    if (!t) return DELTA_OK;
    fputs("\n]}\n", t->f);
    /* the cause is known only for the flush and the close; an earlier
     * failed write leaves just the error flag */
    int cause = 0;
    if (fflush(t->f) != 0) cause = errno;
    bool bad = ferror(t->f) != 0 || cause != 0;
    if (fclose(t->f) != 0) {
        bad = true;
        if (!cause) cause = errno;
    }
    delta_status st = bad ? DELTA_ERR_IO : DELTA_OK;
    if (bad)
        snprintf(err, err_len, "writing the trace failed: %s",
                 cause ? strerror(cause) : "a write to the file failed");
    free(t);
    return st;
}

void delta_trace_span(delta_trace *t, delta_trace_track track,
                      const char *name, const char *cat, double t0, double t1,
                      const char *args) {
    if (!t) return;
    begin_event(t);
    double a = us(t, t0), b = us(t, t1);
    fputs("{\"name\":", t->f);
    put_string(t->f, name);
    fputs(",\"cat\":", t->f);
    put_string(t->f, cat);
    fprintf(t->f, ",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,"
            "\"dur\":%.3f", (int)track, a, b > a ? b - a : 0.0);
    if (args) fprintf(t->f, ",\"args\":{%s}", args);
    fputc('}', t->f);
}

void delta_trace_memory(delta_trace *t, double time, size_t in_use,
                        size_t budget) {
    if (!t) return;
    begin_event(t);
    fprintf(t->f, "{\"name\":\"device memory\",\"ph\":\"C\",\"pid\":1,"
            "\"ts\":%.3f,\"args\":{\"in_use\":%zu,\"budget\":%zu}}",
            us(t, time), in_use, budget);
}

void delta_trace_instant(delta_trace *t, delta_trace_track track,
                         const char *name, const char *cat, double time) {
    if (!t) return;
    begin_event(t);
    fputs("{\"name\":", t->f);
    put_string(t->f, name);
    fputs(",\"cat\":", t->f);
    put_string(t->f, cat);
    fprintf(t->f, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":%d,"
            "\"ts\":%.3f}", (int)track, us(t, time));
}
