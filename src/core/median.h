/* The median of a sample, for figures summarized over steps or runs (the
 * trainer's step time, calibration's spans, the tool's cells): one copy,
 * header-only so that the library and the tool share it without an
 * export. */
#ifndef DELTA_CORE_MEDIAN_H
#define DELTA_CORE_MEDIAN_H

#include <stdint.h>
#include <stdlib.h>

static inline int delta_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (the mean of the middle two for even n; 0 for
 * none), sorting v in place. */
static inline double delta_median(double *v, int64_t n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, delta_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
