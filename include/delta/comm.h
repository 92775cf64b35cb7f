/* delta — the ranks of a data-parallel run (docs/ARCHITECTURE.md, "Data
 * parallel").
 *
 * A run launched by an MPI launcher (`mpirun -np P delta train ...`) is P
 * processes, the ranks 0..P-1; anything else is one rank and never touches
 * MPI. A step program built for P ranks (delta_data_parallel, graph.h)
 * holds collective ops: the gradients' fixed-order mean (allreduce; with
 * ZeRO-1 a reduce to each parameter's owner) and the owners' parameters
 * sent to every rank (allgather). A session runs them over the comm given
 * in its options (session.h), on the backend's communication stream: MPI
 * point-to-point messages on the cpu backend, NCCL on cuda.
 *
 * The calls below that move data between ranks are host-side collectives:
 * every rank calls them in the same order, between runs. Each waits at
 * most the comm's timeout for the other ranks; past it the process says
 * which call was waiting and stops every rank (MPI_Abort), so a rank that
 * is gone or stuck never hangs the others. */
#ifndef DELTA_COMM_H
#define DELTA_COMM_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_comm delta_comm;

/* The ranks this process belongs to. Launched by an MPI launcher (its
 * environment says so: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), MPI
 * is initialized (MPI_THREAD_MULTIPLE) and the comm is MPI_COMM_WORLD;
 * otherwise a comm of one rank, without MPI. NULL with a message in err
 * when launched by one but built without MPI, or when MPI fails to start. */
DELTA_API delta_comm *delta_comm_world(char *err, size_t err_len);
/* Finalizes MPI when delta_comm_world started it. NULL: a no-op. */
DELTA_API void delta_comm_free(delta_comm *c);
DELTA_API int delta_comm_rank(const delta_comm *c);
DELTA_API int delta_comm_size(const delta_comm *c);
/* Whether delta was built with MPI (make probes for Open MPI). */
DELTA_API bool delta_comm_built(void);
/* Seconds a wait for the other ranks may last before every rank is
 * stopped (default 300; DELTA_COMM_TIMEOUT_S in the environment sets the
 * default). */
DELTA_API void delta_comm_set_timeout(delta_comm *c, double seconds);
DELTA_API double delta_comm_timeout(const delta_comm *c);

/* Stops every rank with exit status code (MPI_Abort; one rank: exit). */
DELTA_API void delta_comm_abort(delta_comm *c, int code)
    __attribute__((noreturn));

/* Host-side collectives (see the top). `what` names the call in the
 * timeout's message. */
/* bytes at buf of rank root to every rank. */
DELTA_API void delta_comm_bcast(delta_comm *c, void *buf, size_t bytes,
                                int root, const char *what);
/* Every rank's `bytes` at mine into all (size * bytes, in rank order). */
DELTA_API void delta_comm_allgather(delta_comm *c, const void *mine,
                                    void *all, size_t bytes,
                                    const char *what);
/* The sum over ranks of v[0..n) into every rank's v, added in rank order
 * (the same bits on every rank and every run). */
DELTA_API void delta_comm_sum(delta_comm *c, double *v, int n,
                              const char *what);
/* The largest over ranks of v[0..n), into every rank's v. */
DELTA_API void delta_comm_max(delta_comm *c, double *v, int n,
                              const char *what);
/* Point to point: bytes from this rank to rank `to` / into buf from rank
 * `from` (any size; in order between a pair of ranks). */
DELTA_API void delta_comm_send(delta_comm *c, const void *buf, size_t bytes,
                               int to, const char *what);
DELTA_API void delta_comm_recv(delta_comm *c, void *buf, size_t bytes,
                               int from, const char *what);

#ifdef __cplusplus
}
#endif
#endif
