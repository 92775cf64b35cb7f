/* Parsing of command-line values (see parse.h). */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi,
               int64_t *out, char *err, size_t err_len) {
    char *end = NULL;
    errno = 0;
    long long v = s && *s && !isspace((unsigned char)*s)
                      ? strtoll(s, &end, 10)
                      : 0;
    if (!s || !*s || !end || *end || end == s) {
        snprintf(err, err_len, "%s expects a whole number, got '%s'", opt,
                 s ? s : "");
        return false;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        snprintf(err, err_len, "%s is %s; it must be between %lld and %lld",
                 opt, s, (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool parse_f64(const char *opt, const char *s, double lo, double hi,
               double *out, char *err, size_t err_len) {
    char *end = NULL;
    errno = 0;
    double v = s && *s && !isspace((unsigned char)*s) ? strtod(s, &end) : 0;
    if (!s || !*s || !end || *end || end == s) {
        snprintf(err, err_len, "%s expects a number, got '%s'", opt,
                 s ? s : "");
        return false;
    }
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi) {
        snprintf(err, err_len, "%s is %s; it must be between %g and %g", opt,
                 s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* Unit names and their factors; matched case-insensitively. */
static const struct {
    const char *name;
    double factor;
} units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1024.0},
    {"kib", 1024.0},
    {"kb", 1e3},
    {"m", 1048576.0},
    {"mib", 1048576.0},
    {"mb", 1e6},
    {"g", 1073741824.0},
    {"gib", 1073741824.0},
    {"gb", 1e9},
    {"t", 1099511627776.0},
    {"tib", 1099511627776.0},
    {"tb", 1e12},
};

bool parse_size(const char *opt, const char *s, size_t *out, char *err,
                size_t err_len) {
    static const char *const hint =
        "expected a byte count such as 512MiB, 2GB, 1.5GiB or 1048576";
    if (!s || !isdigit((unsigned char)*s)) {
        snprintf(err, err_len, "%s: '%s' is not a size; %s", opt, s ? s : "",
                 hint);
        return false;
    }
    const char *p = s;
    bool whole = true;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.') {
        whole = false;
        p++;
        if (!isdigit((unsigned char)*p)) {
            snprintf(err, err_len, "%s: '%s' is not a size; %s", opt, s,
                     hint);
            return false;
        }
        while (isdigit((unsigned char)*p)) p++;
    }
    const char *unit = p;
    if (*unit == ' ') unit++;
    double factor = -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(unit, units[i].name)) factor = units[i].factor;
    if (factor < 0 || (unit != p && !*unit)) {
        snprintf(err, err_len, "%s: unknown unit '%s' in '%s'; %s (units: B, "
                 "KB MB GB TB, KiB MiB GiB TiB or K M G T)",
                 opt, unit, s, hint);
        return false;
    }
    if (whole && factor == 1) {
        /* Exact for plain byte counts of any size. */
        errno = 0;
        unsigned long long v = strtoull(s, NULL, 10);
        if (errno == ERANGE || v > SIZE_MAX) {
            snprintf(err, err_len, "%s: %s is too large", opt, s);
            return false;
        }
        *out = (size_t)v;
        return true;
    }
    double v = strtod(s, NULL) * factor;
    if (!isfinite(v) || v >= 18446744073709551616.0 ||
        v >= (double)SIZE_MAX) {
        snprintf(err, err_len, "%s: %s is too large", opt, s);
        return false;
    }
    *out = (size_t)floor(v + 0.5);
    if (*out == 0 && v > 0) *out = 1;
    return true;
}

bool parse_budget(const char *opt, const char *s, delta_budget *out, char *err,
                  size_t err_len) {
    memset(out, 0, sizeof *out);
    if (s && !strcasecmp(s, "unlimited")) {
        out->kind = DELTA_BUDGET_UNLIMITED;
        return true;
    }
    size_t n = s ? strlen(s) : 0;
    if (n > 1 && s[n - 1] == '%') {
        char num[64];
        if (n - 1 >= sizeof num) {
            snprintf(err, err_len, "%s: '%s' is not a percentage", opt, s);
            return false;
        }
        memcpy(num, s, n - 1);
        num[n - 1] = '\0';
        double v;
        char sub[256];
        if (!isdigit((unsigned char)num[0]) ||
            !parse_f64(opt, num, 0, 1000, &v, sub, sizeof sub) || v <= 0) {
            snprintf(err, err_len, "%s: '%s' is not a valid percentage; "
                     "expected a number above 0 and at most 1000 followed by "
                     "%%, e.g. 50%%", opt, s);
            return false;
        }
        out->kind = DELTA_BUDGET_PERCENT;
        out->percent = v;
        return true;
    }
    char sub[256];
    if (!parse_size(opt, s, &out->bytes, sub, sizeof sub)) {
        snprintf(err, err_len, "%s (a budget is a size, 'unlimited', or a "
                 "percentage of the unconstrained peak such as 50%%)", sub);
        return false;
    }
    if (out->bytes == 0) {
        snprintf(err, err_len, "%s: a budget of 0 bytes holds nothing; give "
                 "a size, a percentage or 'unlimited'", opt);
        return false;
    }
    out->kind = DELTA_BUDGET_BYTES;
    return true;
}

bool parse_list(const char *opt, const char *s, char *buf, size_t buf_len,
                const char **items, int cap, int *n, char *err,
                size_t err_len) {
    *n = 0;
    if (strlen(s) >= buf_len) {
        snprintf(err, err_len, "%s: the list '%.40s...' is too long", opt, s);
        return false;
    }
    snprintf(buf, buf_len, "%s", s);
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!*p) {
            snprintf(err, err_len, "%s: expected a comma-separated list "
                     "such as a,b,c with no empty item, got '%s'", opt, s);
            return false;
        }
        if (*n == cap) {
            snprintf(err, err_len, "%s: at most %d items, got more in '%s'",
                     opt, cap, s);
            return false;
        }
        items[(*n)++] = p;
        if (!comma) return true;
        p = comma + 1;
    }
}
