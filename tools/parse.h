/* Parsing of command-line values: integers and reals with ranges, byte
 * sizes ("512MiB", "2GB", "1.5GiB", "1048576") and budgets ("unlimited",
 * "40%", a size). Every parser takes the option's name for its message,
 * writes a message that says what was expected and what was found into
 * err, and returns false on a bad value; nothing here prints or exits. */
#ifndef DELTA_TOOLS_PARSE_H
#define DELTA_TOOLS_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delta/train.h"

/* A whole decimal integer in [lo, hi] (no trailing characters). */
bool parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi,
               int64_t *out, char *err, size_t err_len);
/* A finite real in [lo, hi]. */
bool parse_f64(const char *opt, const char *s, double lo, double hi,
               double *out, char *err, size_t err_len);

/* A byte size: a non-negative number (decimals allowed with a unit) and an
 * optional unit, case-insensitive, with or without a space:
 *   B; KB MB GB TB (powers of 1000); KiB MiB GiB TiB and the short forms
 *   K M G T (powers of 1024). Fails on overflow past SIZE_MAX. */
bool parse_size(const char *opt, const char *s, size_t *out, char *err,
                size_t err_len);


/* "unlimited", "N%" (N > 0, decimals allowed, at most 1000) or a size
 * > 0, as a delta_budget (delta/train.h). */
bool parse_budget(const char *opt, const char *s, delta_budget *out, char *err,
                  size_t err_len);

/* A comma-separated list of at most cap non-empty items: copies s into buf
 * (buf_len bytes) and points items[0..*n) into it. */
bool parse_list(const char *opt, const char *s, char *buf, size_t buf_len,
                const char **items, int cap, int *n, char *err,
                size_t err_len);

#endif
