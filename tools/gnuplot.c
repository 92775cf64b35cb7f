/* Plots through gnuplot (see gnuplot.h). */
#include "gnuplot.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void gnuplot_preamble(FILE *gp, const char *what) {
    fprintf(gp,
"# %s: gnuplot this file (paths are relative to where delta ran).\n"
"if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
"    set terminal pngcairo size 960,560 font \",11\"\n"
"} else {\n"
"    set terminal png size 960,560\n"
"}\n"
"set datafile missing \"-\"\n"
"set grid\n"
"set key outside right top\n", what);
}

bool gnuplot_plain_path(const char *p) {
    return *p && !strpbrk(p, "\"\\\n'`$");
}

bool gnuplot_run(const char *script, const char *cmd) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int ws = 0;
    int rc = 1;
    if (pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws))
        rc = WEXITSTATUS(ws);
    if (rc == 127)
        fprintf(stderr, "delta %s: gnuplot is not installed (Debian: "
                "apt-get install gnuplot-nox), so there is no PNG; "
                "'gnuplot %s' draws it\n", cmd, script);
    else if (rc != 0)
        fprintf(stderr, "delta %s: gnuplot %s exited with status %d\n", cmd,
                script, rc);
    return rc == 0;
}
