/* The --json log (see json_log.h). */
#include "json_log.h"

#include "outfile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

struct json_log {
    FILE *f;
    char *path;
    int write_errno;  /* first write error, 0 if none */
};

json_log *json_log_open(const char *path, bool append, char *err,
                        size_t err_len) {
    FILE *f = outfile_open("--json", path, append ? "a" : "w", err, err_len);
    if (!f) return NULL;
    /* whole lines only: a killed run leaves no half line */
    setvbuf(f, NULL, _IOLBF, 0);
    json_log *l = calloc(1, sizeof *l);
    char *p = strdup(path);
    if (!l || !p) {
        fclose(f);
        free(l);
        free(p);
        snprintf(err, err_len, "out of memory opening %s", path);
        return NULL;
    }
    l->f = f;
    l->path = p;
    return l;
}

bool json_log_write(json_log *l, const cJSON *obj) {
    if (!l) return true;
    char *s = cJSON_PrintUnformatted(obj);
    if (!s) {
        if (!l->write_errno) l->write_errno = ENOMEM;
        return false;
    }
    bool ok = fputs(s, l->f) >= 0 && fputc('\n', l->f) != EOF;
    if (!ok && !l->write_errno) l->write_errno = errno ? errno : EIO;
    cJSON_free(s);
    return ok;
}

void json_add_number_or_null(cJSON *obj, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(obj, key, v);
    else
        cJSON_AddNullToObject(obj, key);
}

bool json_log_val(json_log *l, int64_t step, double val_loss) {
    if (!l) return true;
    cJSON *o = cJSON_CreateObject();
    if (!o) return false;
    cJSON_AddNumberToObject(o, "step", (double)step);
    json_add_number_or_null(o, "val_loss", val_loss);
    bool ok = json_log_write(l, o);
    cJSON_Delete(o);
    return ok;
}

bool json_log_step(json_log *l, int64_t step, double loss,
                   const delta_step_stats *st, bool budget_limited,
                   int64_t batch, int64_t seq_len, double val_loss,
                   double lr, double grad_norm) {
    if (!l) return true;
    cJSON *o = cJSON_CreateObject();
    if (!o) return false;
    cJSON_AddNumberToObject(o, "step", (double)step);
    json_add_number_or_null(o, "loss", loss);
    if (!isnan(val_loss)) json_add_number_or_null(o, "val_loss", val_loss);
    if (!isnan(lr)) cJSON_AddNumberToObject(o, "lr", lr);
    if (!isnan(grad_norm)) json_add_number_or_null(o, "grad_norm", grad_norm);
    cJSON_AddNumberToObject(o, "step_s", st->step_s);
    cJSON_AddNumberToObject(o, "peak_device_bytes",
                            (double)st->peak_device_bytes);
    cJSON_AddNumberToObject(o, "live_peak_bytes",
                            (double)st->live_peak_bytes);
    cJSON_AddNumberToObject(o, "swap_out_bytes", (double)st->swap_out_bytes);
    cJSON_AddNumberToObject(o, "host_bytes", (double)st->host_bytes);
    cJSON_AddNumberToObject(o, "swap_in_bytes", (double)st->swap_in_bytes);
    cJSON_AddNumberToObject(o, "swap_outs", st->swap_outs);
    cJSON_AddNumberToObject(o, "swap_ins", st->swap_ins);
    cJSON_AddNumberToObject(o, "drops", st->drops);
    cJSON_AddNumberToObject(o, "dropped_bytes", (double)st->dropped_bytes);
    cJSON_AddNumberToObject(o, "recomputed_ops", st->recomputed_ops);
    cJSON_AddNumberToObject(o, "recompute_s", st->recompute_s);
    cJSON_AddNumberToObject(o, "stall_s", st->stall_s);
    cJSON_AddNumberToObject(o, "defrag_moves", st->defrag_moves);
    cJSON_AddNumberToObject(o, "defrag_bytes", (double)st->defrag_bytes);
    cJSON_AddNumberToObject(o, "host_syncs", st->host_syncs);
    cJSON_AddNumberToObject(o, "throttle_waits", st->throttle_waits);
    cJSON_AddNumberToObject(o, "host_busy_s", st->host_busy_s);
    cJSON_AddNumberToObject(o, "device_busy_s", st->device_busy_s);
    cJSON_AddBoolToObject(o, "replayed", st->replayed);
    cJSON_AddNumberToObject(o, "baseline_peak_bytes",
                            (double)st->baseline_peak_bytes);
    cJSON_AddNumberToObject(o, "min_budget_bytes",
                            (double)st->min_budget_bytes);
    if (budget_limited)
        cJSON_AddNumberToObject(o, "budget_bytes", (double)st->budget_bytes);
    else
        cJSON_AddNullToObject(o, "budget_bytes");
    cJSON_AddNumberToObject(o, "batch", (double)batch);
    if (seq_len) cJSON_AddNumberToObject(o, "seq_len", (double)seq_len);
    bool ok = json_log_write(l, o);
    cJSON_Delete(o);
    return ok;
}

bool json_log_resume(json_log *l, int64_t step, char *err, size_t err_len) {
    if (!l) return true;
    FILE *in = fopen(l->path, "rb");
    if (!in) {
        snprintf(err, err_len, "--json %s: cannot read it to resume: %s",
                 l->path, strerror(errno));
        return false;
    }
    /* the offset after the last whole line of a step up to `step`; the
     * lines are in step order, so the first one past it ends the scan */
    long keep = 0, at = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        at += (long)n;
        if (line[n - 1] != '\n') break;
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
        bool kept = cJSON_IsNumber(s) && s->valuedouble <= (double)step;
        cJSON_Delete(o);
        if (!kept) break;
        keep = at;
    }
    free(line);
    fclose(in);
    if (fflush(l->f) != 0 || ftruncate(fileno(l->f), (off_t)keep) != 0) {
        snprintf(err, err_len, "--json %s: cannot cut it back to step %"
                 PRId64 ": %s", l->path, step, strerror(errno));
        return false;
    }
    return true;
}

bool json_log_close(json_log *l, char *err, size_t err_len) {
    if (!l) return true;
    int e = l->write_errno;
    if (fflush(l->f) != 0 && !e) e = errno ? errno : EIO;
    if (fsync(fileno(l->f)) != 0 && !e && errno != EINVAL) e = errno;
    if (fclose(l->f) != 0 && !e) e = errno ? errno : EIO;
    if (e)
        snprintf(err, err_len, "writing the JSON log %s failed: %s", l->path,
                 strerror(e));
    free(l->path);
    free(l);
    return e == 0;
}
