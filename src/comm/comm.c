/* The ranks of a data-parallel run (delta/comm.h) and the collective ops'
 * messages (comm_impl.h). With MPI (DELTA_HAVE_MPI: Open MPI, probed by the
 * Makefile) a run under an MPI launcher is MPI_COMM_WORLD; every other run,
 * and every run of a build without MPI, is one rank that never calls MPI.
 *
 * Two duplicates of MPI_COMM_WORLD keep the two kinds of traffic apart: the
 * collective ops' messages (the communication stream's thread, during a
 * step) and the host-side collectives (the host thread, between steps). A
 * rank may be a whole step ahead of another, so without that its loss
 * could match a gradient's receive. Every wait polls its requests
 * (MPI_Testall, which also drives MPI's progress) with short sleeps and
 * gives up after the timeout: the message names the call and every rank
 * is stopped (MPI_Abort), so a rank that died or hangs never leaves the
 * others waiting forever. */
#include "comm/comm_impl.h"
#include "graph/graph_impl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DELTA_HAVE_MPI
#include <mpi.h>
#endif

#define DEFAULT_TIMEOUT_S 300.0
/* Elements per message at most: MPI counts are int. */
#define PIECE ((int64_t)1 << 28)
/* Tags: one per kind of message of the collective ops. */
enum { TAG_CHUNK = 1, TAG_GATHER, TAG_REDUCE, TAG_BCAST, TAG_P2P };

struct delta_comm {
    int rank, size;
    bool started;     /* delta_comm_world called MPI_Init_thread */
    double timeout_s;
#ifdef DELTA_HAVE_MPI
    MPI_Comm ops;     /* the collective ops' messages */
    MPI_Comm host;    /* the host-side collectives */
    MPI_Request *rq;  /* the ops' requests (their thread only) */
    int rq_cap;
#endif
};

bool delta_comm_built(void) {
#ifdef DELTA_HAVE_MPI
    return true;
#else
    return false;
#endif
}

__attribute__((unused)) static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The launcher's variable that says this process is one of several, or
 * NULL: Open MPI's mpirun, MPICH's and Intel's hydra, PMIx launchers. */
static const char *launcher_var(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                       "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return vars[i];
    return NULL;
}

delta_comm *delta_comm_world(char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    delta_comm *c = calloc(1, sizeof *c);
    if (!c) {
        if (err) snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->size = 1;
    c->timeout_s = DEFAULT_TIMEOUT_S;
    const char *t = getenv("DELTA_COMM_TIMEOUT_S");
    if (t && atof(t) > 0) c->timeout_s = atof(t);
    const char *var = launcher_var();
    if (!var) return c;
#ifndef DELTA_HAVE_MPI
    if (err)
        snprintf(err, err_len, "this process was started by an MPI launcher "
                 "(%s is set), but this delta was built without MPI, so "
                 "every process would train alone; install libopenmpi-dev "
                 "(make deps) and rebuild, or run without mpirun", var);
    free(c);
    return NULL;
#else
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) !=
            MPI_SUCCESS) {
            if (err) snprintf(err, err_len, "MPI failed to start");
            free(c);
            return NULL;
        }
        c->started = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        if (err)
            snprintf(err, err_len, "this MPI gives thread level %d, and delta "
                     "needs MPI_THREAD_MULTIPLE (%d): the collective ops run "
                     "on a thread of their own", provided,
                     MPI_THREAD_MULTIPLE);
        if (c->started) MPI_Finalize();
        free(c);
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->ops);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->host);
    return c;
#endif
}

void delta_comm_free(delta_comm *c) {
    if (!c) return;
#ifdef DELTA_HAVE_MPI
    if (c->size > 1 || c->started) {
        MPI_Comm_free(&c->ops);
        MPI_Comm_free(&c->host);
    }
    free(c->rq);
    if (c->started) MPI_Finalize();
#endif
    free(c);
}

int delta_comm_rank(const delta_comm *c) { return c ? c->rank : 0; }
int delta_comm_size(const delta_comm *c) { return c ? c->size : 1; }
void delta_comm_set_timeout(delta_comm *c, double s) {
    if (c && s > 0) c->timeout_s = s;
}
double delta_comm_timeout(const delta_comm *c) {
    return c ? c->timeout_s : DEFAULT_TIMEOUT_S;
}

void delta_comm_abort(delta_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef DELTA_HAVE_MPI
    if (c && c->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)c;
#endif
    exit(code);
}

#ifdef DELTA_HAVE_MPI

/* Waits for n requests, polling; past the timeout every rank stops. */
static void wait_all(delta_comm *c, int n, MPI_Request *rq, const char *what) {
    double t0 = now_s();
    for (long it = 0;; it++) {
        int done = 0;
        MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        double w = now_s() - t0;
        if (w > c->timeout_s) {
            fprintf(stderr, "delta: rank %d of %d: %s waited %.0f s for the "
                    "other ranks (the timeout, DELTA_COMM_TIMEOUT_S or "
                    "--comm-timeout): a rank is gone or stuck; stopping every "
                    "rank\n", c->rank, c->size, what, w);
            delta_comm_abort(c, 1);
        }
        if (it < 200) {
            sched_yield();
        } else {
            struct timespec ts = {0, it < 2000 ? 20000 : 200000};
            nanosleep(&ts, NULL);
        }
    }
}

/* A request slot of the ops' array, grown as needed (the ops' thread
 * only: the array is sized once for the largest op). */
static MPI_Request *slot(delta_comm *c, int *n) {
    if (*n == c->rq_cap) {
        int cap = c->rq_cap ? 2 * c->rq_cap : 64;
        MPI_Request *r = realloc(c->rq, sizeof *r * (size_t)cap);
        DELTA_ASSERTF(r, "out of memory for %d MPI requests", cap);
        c->rq = r;
        c->rq_cap = cap;
    }
    return &c->rq[(*n)++];
}

static void isend(delta_comm *c, int *n, const float *p, int64_t len, int to,
                  int tag) {
    for (int64_t k = 0; k < len; k += PIECE) {
        int m = (int)(len - k < PIECE ? len - k : PIECE);
        MPI_Isend(p + k, m, MPI_FLOAT, to, tag, c->ops, slot(c, n));
    }
}

static void irecv(delta_comm *c, int *n, float *p, int64_t len, int from,
                  int tag) {
    for (int64_t k = 0; k < len; k += PIECE) {
        int m = (int)(len - k < PIECE ? len - k : PIECE);
        MPI_Irecv(p + k, m, MPI_FLOAT, from, tag, c->ops, slot(c, n));
    }
}

#define FOR_SEGMENTS DELTA_DP_SEGMENTS
#define ws_slot delta_dp_ws_slot

/* dst[e] = the mean over the ranks, in rank order, where rank me's value
 * is mine[e] and rank q's is ws[ws_slot(q) * stride + e]. */
static void mean_in_rank_order(float *dst, const float *mine, const float *ws,
                               int64_t stride, int P, int me, int64_t len) {
    for (int64_t e = 0; e < len; e++) {
        float s = me == 0 ? mine[e] : ws[e];
        for (int q = 1; q < P; q++)
            s += q == me ? mine[e] : ws[(int64_t)ws_slot(q, me) * stride + e];
        dst[e] = s / (float)P;
    }
}

/* Pieces of DELTA_DP_PIECE elements: a rank's part of a collective is
 * reduced a piece at a time, so its workspace holds one piece per other
 * rank whatever the tensors' size (cost.c sizes it so). Sender and
 * receiver cut a range the same way (at tensor boundaries and every
 * piece), so their messages match one for one, in order. */
#define S DELTA_DP_PIECE

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void delta_comm_allreduce_mean(delta_comm *c, int n, const float *const *in,
                               float *const *out, const int64_t *numel,
                               float *ws, const char *what) {
    int P = c->size, me = c->rank, nr = 0;
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += numel[i];
    int64_t lo = delta_dp_chunk_lo(total, P, me),
            hi = delta_dp_chunk_lo(total, P, me + 1);
    /* 1: my copies of the other ranks' chunks, piece by piece */
    for (int q = 0; q < P; q++) {
        if (q == me) continue;
        int64_t qhi = delta_dp_chunk_lo(total, P, q + 1);
        for (int64_t a = delta_dp_chunk_lo(total, P, q); a < qhi; a += S)
            FOR_SEGMENTS(n, numel, a, min64(a + S, qhi),
                         { isend(c, &nr, in[i] + off, len, q, TAG_CHUNK); });
    }
    /* 2: my chunk a piece at a time: the other ranks' copies into ws, then
     * the means in rank order (their requests' slots are reused) */
    for (int64_t a = lo; a < hi; a += S) {
        int64_t b = min64(a + S, hi);
        int r0 = nr;
        for (int q = 0; q < P; q++) {
            if (q == me) continue;
            float *dst = ws + (int64_t)ws_slot(q, me) * S;
            FOR_SEGMENTS(n, numel, a, b, {
                (void)off;
                irecv(c, &nr, dst, len, q, TAG_CHUNK);
                dst += len;
            });
        }
        wait_all(c, nr - r0, c->rq + r0, what);
        nr = r0;
        int64_t at = 0;
        FOR_SEGMENTS(n, numel, a, b, {
            mean_in_rank_order(out[i] + off, in[i] + off, ws + at, S, P, me,
                               len);
            at += len;
        });
    }
    /* 3: my chunk of the means to every rank, theirs into out */
    for (int q = 0; q < P; q++) {
        if (q == me) continue;
        FOR_SEGMENTS(n, numel, lo, hi,
                     { isend(c, &nr, out[i] + off, len, q, TAG_GATHER); });
        int64_t qlo = delta_dp_chunk_lo(total, P, q),
                qhi = delta_dp_chunk_lo(total, P, q + 1);
        FOR_SEGMENTS(n, numel, qlo, qhi,
                     { irecv(c, &nr, out[i] + off, len, q, TAG_GATHER); });
    }
    wait_all(c, nr, c->rq, what);
}

void delta_comm_reduce_mean(delta_comm *c, int n, const float *const *in,
                            float *const *out, const int64_t *numel,
                            const int *owner, float *ws, const char *what) {
    int P = c->size, me = c->rank, nr = 0;
    /* my copies of the others' gradients, piece by piece */
    for (int i = 0; i < n; i++)
        for (int64_t a = 0; owner[i] != me && a < numel[i]; a += S)
            isend(c, &nr, in[i] + a, min64(S, numel[i] - a), owner[i],
                  TAG_REDUCE);
    /* mine a piece at a time: the other ranks' copies, then the means */
    for (int i = 0; i < n; i++)
        for (int64_t a = 0; owner[i] == me && a < numel[i]; a += S) {
            int64_t len = min64(S, numel[i] - a);
            int r0 = nr;
            for (int q = 0; q < P; q++)
                if (q != me)
                    irecv(c, &nr, ws + (int64_t)ws_slot(q, me) * S, len, q,
                          TAG_REDUCE);
            wait_all(c, nr - r0, c->rq + r0, what);
            nr = r0;
            mean_in_rank_order(out[i] + a, in[i] + a, ws, S, P, me, len);
        }
    wait_all(c, nr, c->rq, what);
}

#undef S

void delta_comm_broadcast(delta_comm *c, int n, float *const *buf,
                          const int64_t *numel, const int *owner,
                          const char *what) {
    int P = c->size, me = c->rank, nr = 0;
    for (int i = 0; i < n; i++) {
        if (owner[i] == me) {
            for (int q = 0; q < P; q++)
                if (q != me) isend(c, &nr, buf[i], numel[i], q, TAG_BCAST);
        } else {
            irecv(c, &nr, buf[i], numel[i], owner[i], TAG_BCAST);
        }
    }
    wait_all(c, nr, c->rq, what);
}

/* ---- host-side collectives ------------------------------------------------ */

void delta_comm_bcast(delta_comm *c, void *buf, size_t bytes, int root,
                      const char *what) {
    if (!c || c->size == 1) return;
    for (size_t k = 0; k < bytes; k += (size_t)1 << 30) {
        size_t m = bytes - k < (size_t)1 << 30 ? bytes - k : (size_t)1 << 30;
        MPI_Request r;
        MPI_Ibcast((char *)buf + k, (int)m, MPI_BYTE, root, c->host, &r);
        wait_all(c, 1, &r, what);
    }
}

void delta_comm_allgather(delta_comm *c, const void *mine, void *all,
                          size_t bytes, const char *what) {
    if (!c || c->size == 1) {
        memcpy(all, mine, bytes);
        return;
    }
    DELTA_ASSERT(bytes < (size_t)1 << 30);
    MPI_Request r;
    MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                   c->host, &r);
    wait_all(c, 1, &r, what);
}

void delta_comm_send(delta_comm *c, const void *buf, size_t bytes, int to,
                     const char *what) {
    if (!c || c->size == 1) return;
    for (size_t k = 0; k < bytes || k == 0; k += (size_t)1 << 30) {
        size_t m = bytes - k < (size_t)1 << 30 ? bytes - k : (size_t)1 << 30;
        MPI_Request r;
        MPI_Isend((const char *)buf + k, (int)m, MPI_BYTE, to, TAG_P2P,
                  c->host, &r);
        wait_all(c, 1, &r, what);
        if (bytes == 0) break;
    }
}

void delta_comm_recv(delta_comm *c, void *buf, size_t bytes, int from,
                     const char *what) {
    if (!c || c->size == 1) return;
    for (size_t k = 0; k < bytes || k == 0; k += (size_t)1 << 30) {
        size_t m = bytes - k < (size_t)1 << 30 ? bytes - k : (size_t)1 << 30;
        MPI_Request r;
        MPI_Irecv((char *)buf + k, (int)m, MPI_BYTE, from, TAG_P2P, c->host,
                  &r);
        wait_all(c, 1, &r, what);
        if (bytes == 0) break;
    }
}

#else /* one rank: nothing moves */

void delta_comm_allreduce_mean(delta_comm *c, int n, const float *const *in,
                               float *const *out, const int64_t *numel,
                               float *ws, const char *what) {
    (void)c, (void)n, (void)in, (void)out, (void)numel, (void)ws, (void)what;
    DELTA_ASSERTF(false, "a collective op over several ranks in a build "
                  "without MPI");
}
void delta_comm_reduce_mean(delta_comm *c, int n, const float *const *in,
                            float *const *out, const int64_t *numel,
                            const int *owner, float *ws, const char *what) {
    (void)c, (void)n, (void)in, (void)out, (void)numel, (void)owner,
        (void)ws, (void)what;
    DELTA_ASSERTF(false, "a collective op over several ranks in a build "
                  "without MPI");
}
void delta_comm_broadcast(delta_comm *c, int n, float *const *buf,
                          const int64_t *numel, const int *owner,
                          const char *what) {
    (void)c, (void)n, (void)buf, (void)numel, (void)owner, (void)what;
    DELTA_ASSERTF(false, "a collective op over several ranks in a build "
                  "without MPI");
}
void delta_comm_bcast(delta_comm *c, void *buf, size_t bytes, int root,
                      const char *what) {
    (void)c, (void)buf, (void)bytes, (void)root, (void)what;
}
void delta_comm_allgather(delta_comm *c, const void *mine, void *all,
                          size_t bytes, const char *what) {
    (void)c, (void)what;
    memcpy(all, mine, bytes);
}
void delta_comm_send(delta_comm *c, const void *buf, size_t bytes, int to,
                     const char *what) {
    (void)c, (void)buf, (void)bytes, (void)to, (void)what;
}
void delta_comm_recv(delta_comm *c, void *buf, size_t bytes, int from,
                     const char *what) {
    (void)c, (void)buf, (void)bytes, (void)from, (void)what;
}

#endif

/* Every rank's v[0..n) combined in rank order (sum or max) into v. */
static void combine(delta_comm *c, double *v, int n, bool max,
                    const char *what) {
    int P = delta_comm_size(c);
    if (P == 1) return;
    double *all = malloc(sizeof *all * (size_t)n * (size_t)P);
    DELTA_ASSERTF(all, "out of memory gathering %d values", n * P);
    delta_comm_allgather(c, v, all, sizeof *v * (size_t)n, what);
    for (int i = 0; i < n; i++) {
        double s = all[i];
        for (int q = 1; q < P; q++) {
            double x = all[(size_t)q * (size_t)n + (size_t)i];
            s = max ? (x > s ? x : s) : s + x;
        }
        v[i] = s;
    }
    free(all);
}

void delta_comm_sum(delta_comm *c, double *v, int n, const char *what) {
    combine(c, v, n, false, what);
}

void delta_comm_max(delta_comm *c, double *v, int n, const char *what) {
    combine(c, v, n, true, what);
}
