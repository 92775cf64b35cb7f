/* Plots through Debian's gnuplot (gnuplot-nox), for delta bench and delta
 * maxbatch: a script is written beside its data (so a plot can be
 * restyled and redrawn by hand) and gnuplot runs it as a child process. */
#ifndef DELTA_TOOLS_GNUPLOT_H
#define DELTA_TOOLS_GNUPLOT_H

#include <stdbool.h>
#include <stdio.h>

/* The script's first lines: a PNG terminal (pngcairo when gnuplot has it,
 * else png), missing values written "-", a grid and the key outside. */
void gnuplot_preamble(FILE *gp, const char *what);

/* Runs `gnuplot script`; false when it did not draw. Warns on stderr
 * (prefixed "delta CMD: ") when gnuplot is not installed or failed. */
bool gnuplot_run(const char *script, const char *cmd);

/* Whether a path can go into a double-quoted gnuplot string and our
 * messages as it is (no quotes, backslashes, '$', '`' or newline). */
bool gnuplot_plain_path(const char *p);

#endif
