/* The collective ops (data parallel) on the GPU through NCCL, found at run
 * time: dlopen("libnccl.so.2"), as cudnn_conv.c finds cuDNN, so a machine
 * without it still runs one rank. <nccl.h> is only needed at build time
 * for its types (the Makefile defines DELTA_HAVE_NCCL_H when the toolkit
 * has it; without it this file only says NCCL is not available).
 *
 * Bootstrap: the first collective a backend runs opens NCCL: rank 0 makes
 * the unique id (ncclGetUniqueId), every rank gets it over MPI
 * (delta_comm_bcast on the ranks' comm, env->comm) and joins
 * (ncclCommInitRank), as llm.c does. Everything is issued on the
 * backend's communication stream.
 *
 * The algorithms are the cpu backend's (src/comm/comm.c), with ncclSend and
 * ncclRecv in groups in place of MPI's messages, so the bits are the
 * same: NCCL moves bytes and never adds; every mean is taken by
 * delta_cu_dp_mean (cu_dp.cu) in rank order, a piece of DELTA_DP_PIECE
 * elements at a time, into the op's workspace ((P - 1) pieces, as cost.c
 * declares). NCCL's own allreduce sums in an order that depends on the
 * ring it builds, which would break bit-identity with ZeRO-1 (a
 * reduce-scatter) and with the cpu.
 *
 * A round is one ncclGroupStart/End: in an allreduce's round k each rank
 * sends piece k of every other rank's chunk and receives piece k of its
 * own from each; then the mean of that piece. With one rank a collective
 * still goes through NCCL: the rank sends its gradients to itself (what
 * test_cuda checks against the plain run). */
#include "backend/cuda/cuda_kernels.h"
#include "comm/comm_impl.h"
#include "delta/backend.h" /* delta_cuda_nccl_available is public (DELTA_API) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DELTA_HAVE_NCCL_H
#include <dlfcn.h>
#include <nccl.h>

#define NCCL_FUNCS(X)                                                      \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank)              \
    X(ncclCommDestroy) X(ncclGetErrorString) X(ncclSend) X(ncclRecv)      \
    X(ncclGroupStart) X(ncclGroupEnd)

#define NCCL_FIELD(name) __typeof__(name) *f_##name;

struct delta_nccl {
    void *lib;
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, size, version;
    NCCL_FUNCS(NCCL_FIELD)
};

#define NK(d, call)                                                        \
    do {                                                                   \
        ncclResult_t r_ = (d)->f_##call;                                   \
        DELTA_ASSERTF(r_ == ncclSuccess, "NCCL %s: %s", #call,             \
                      (d)->f_ncclGetErrorString(r_));                      \
    } while (0)

static void *load(char *why, size_t n) {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, n, "libnccl.so.2 not found (%s); install NCCL (the "
                 "GPU machines' PyTorch ships it) or train one rank",
                 e ? e : "dlopen");
    }
    return lib;
}

bool delta_cuda_nccl_available(char *why, size_t n) {
    void *lib = load(why, n);
    if (lib) dlclose(lib);
    return lib != NULL;
}

void delta_nccl_close(delta_nccl *d) {
    if (!d) return;
    if (d->comm) d->f_ncclCommDestroy(d->comm);
    if (d->lib) dlclose(d->lib);
    free(d);
}

delta_nccl *delta_nccl_open(delta_comm *comm, cudaStream_t stream, char *why,
                            size_t n) {
    delta_nccl *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(why, n, "out of host memory");
        return NULL;
    }
    d->lib = load(why, n);
    if (!d->lib) {
        free(d);
        return NULL;
    }
#define NCCL_BIND(name)                                                    \
    *(void **)&d->f_##name = dlsym(d->lib, #name);                         \
    if (!d->f_##name) {                                                    \
        snprintf(why, n, "libnccl.so.2 has no %s", #name);                \
        delta_nccl_close(d);                                               \
        return NULL;                                                       \
    }
    NCCL_FUNCS(NCCL_BIND)
#undef NCCL_BIND
    d->f_ncclGetVersion(&d->version);
    d->stream = stream;
    d->rank = delta_comm_rank(comm);
    d->size = delta_comm_size(comm);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) NK(d, ncclGetUniqueId(&id));
    delta_comm_bcast(comm, &id, sizeof id, 0, "NCCL's unique id");
    ncclResult_t r = d->f_ncclCommInitRank(&d->comm, d->size, id, d->rank);
    if (r != ncclSuccess) {
        snprintf(why, n, "ncclCommInitRank (rank %d of %d): %s", d->rank,
                 d->size, d->f_ncclGetErrorString(r));
        d->comm = NULL;
        delta_nccl_close(d);
        return NULL;
    }
    return d;
}

int delta_nccl_version(const delta_nccl *d) { return d ? d->version : 0; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void send(delta_nccl *d, const float *p, int64_t len, int to) {
    if (len) NK(d, ncclSend(p, (size_t)len, ncclFloat32, to, d->comm, d->stream));
}

static void recv(delta_nccl *d, float *p, int64_t len, int from) {
    if (len) NK(d, ncclRecv(p, (size_t)len, ncclFloat32, from, d->comm, d->stream));
}

#define SEGMENTS DELTA_DP_SEGMENTS
#define ws_slot delta_dp_ws_slot

#define S DELTA_DP_PIECE

/* ALLREDUCE: rounds over pieces of the chunks, then the chunks' means to
 * every rank. */
static void allreduce(delta_nccl *d, int n, const float *const *in,
                      float *const *out, const int64_t *numel, float *ws) {
    int P = d->size, me = d->rank;
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += numel[i];
    int64_t lo = delta_dp_chunk_lo(total, P, me),
            hi = delta_dp_chunk_lo(total, P, me + 1);
    if (P == 1) { /* through NCCL all the same: to itself */
        NK(d, ncclGroupStart());
        SEGMENTS(n, numel, 0, total, {
            send(d, in[i] + off, len, 0);
            recv(d, out[i] + off, len, 0);
        });
        NK(d, ncclGroupEnd());
        return;
    }
    int64_t rounds = 0;
    for (int q = 0; q < P; q++) {
        int64_t c = delta_dp_chunk_lo(total, P, q + 1) -
                    delta_dp_chunk_lo(total, P, q);
        if ((c + S - 1) / S > rounds) rounds = (c + S - 1) / S;
    }
    for (int64_t k = 0; k < rounds; k++) {
        NK(d, ncclGroupStart());
        for (int q = 0; q < P; q++) {
            if (q == me) continue;
            int64_t qlo = delta_dp_chunk_lo(total, P, q) + k * S,
                    qhi = min64(qlo + S, delta_dp_chunk_lo(total, P, q + 1));
            SEGMENTS(n, numel, qlo, qhi, { send(d, in[i] + off, len, q); });
            float *dst = ws + (int64_t)ws_slot(q, me) * S;
            SEGMENTS(n, numel, lo + k * S, min64(lo + (k + 1) * S, hi), {
                (void)off;
                recv(d, dst, len, q);
                dst += len;
            });
        }
        NK(d, ncclGroupEnd());
        int64_t at = 0;
        SEGMENTS(n, numel, lo + k * S, min64(lo + (k + 1) * S, hi), {
            delta_cu_dp_mean(d->stream, out[i] + off, in[i] + off, ws + at, S,
                             P, me, len);
            at += len;
        });
    }
    NK(d, ncclGroupStart());
    for (int q = 0; q < P; q++) {
        if (q == me) continue;
        SEGMENTS(n, numel, lo, hi, { send(d, out[i] + off, len, q); });
        SEGMENTS(n, numel, delta_dp_chunk_lo(total, P, q),
                 delta_dp_chunk_lo(total, P, q + 1),
                 { recv(d, out[i] + off, len, q); });
    }
    NK(d, ncclGroupEnd());
}

/* REDUCE_SCATTER: per tensor and piece, a round to its owner, then the
 * owner's mean. */
static void reduce(delta_nccl *d, int n, const float *const *in,
                   float *const *out, const int64_t *numel, const int *owner,
                   float *ws) {
    int P = d->size, me = d->rank;
    for (int i = 0; i < n; i++)
        for (int64_t a = 0; a < numel[i]; a += S) {
            int64_t len = min64(S, numel[i] - a);
            NK(d, ncclGroupStart());
            if (P == 1) {
                send(d, in[i] + a, len, 0);
                recv(d, out[i] + a, len, 0);
            } else if (owner[i] != me) {
                send(d, in[i] + a, len, owner[i]);
            } else {
                for (int q = 0; q < P; q++)
                    if (q != me)
                        recv(d, ws + (int64_t)ws_slot(q, me) * S, len, q);
            }
            NK(d, ncclGroupEnd());
            if (P > 1 && owner[i] == me)
                delta_cu_dp_mean(d->stream, out[i] + a, in[i] + a, ws, S, P,
                                 me, len);
        }
}

/* ALLGATHER: every owner's tensors to every other rank, in one round. */
static void broadcast(delta_nccl *d, int n, float *const *buf,
                      const int64_t *numel, const int *owner) {
    int P = d->size, me = d->rank;
    if (P == 1) return;
    NK(d, ncclGroupStart());
    for (int i = 0; i < n; i++) {
        if (owner[i] == me) {
            for (int q = 0; q < P; q++)
                if (q != me) send(d, buf[i], numel[i], q);
        } else {
            recv(d, buf[i], numel[i], owner[i]);
        }
    }
    NK(d, ncclGroupEnd());
}

#undef S

void delta_nccl_run(delta_nccl *d, const delta_kargs *k) {
    const delta_op *op = k->op;
    DELTA_ASSERTF(op->a.ranks == d->size && op->a.rank == d->rank,
                  "op %d (%s) was built for rank %d of %d and runs on rank %d "
                  "of %d", op->id, op->name, op->a.rank, op->a.ranks, d->rank,
                  d->size);
    const float *in[DELTA_MAX_OP_IN];
    float *out[DELTA_MAX_OP_IN];
    int64_t numel[DELTA_MAX_OP_IN];
    int j = 0;
    for (int i = 0; i < op->n_in; i++) {
        in[i] = k->in[i];
        numel[i] = k->in_t[i]->numel;
        bool has_out = op->type != DELTA_OP_REDUCE_SCATTER ||
                       op->a.owner[i] == op->a.rank;
        out[i] = has_out ? k->out[j++] : NULL;
    }
    switch (op->type) {
    case DELTA_OP_ALLREDUCE:
        allreduce(d, op->n_in, in, out, numel, k->ws);
        break;
    case DELTA_OP_REDUCE_SCATTER:
        reduce(d, op->n_in, in, out, numel, op->a.owner, k->ws);
        break;
    case DELTA_OP_ALLGATHER:
        broadcast(d, op->n_in, out, numel, op->a.owner);
        break;
    default:
        DELTA_ASSERTF(false, "op %d (%s) is no collective", op->id, op->name);
    }
}

#else /* no nccl.h at build time */

#define NO_NCCL "this build had no nccl.h (the CUDA toolkit's); rebuild " \
                "with it to train several ranks on GPUs"

bool delta_cuda_nccl_available(char *why, size_t n) {
    snprintf(why, n, "%s", NO_NCCL);
    return false;
}
delta_nccl *delta_nccl_open(delta_comm *comm, cudaStream_t stream, char *why,
                            size_t n) {
    (void)comm, (void)stream;
    snprintf(why, n, "%s", NO_NCCL);
    return NULL;
}
void delta_nccl_close(delta_nccl *d) { (void)d; }
int delta_nccl_version(const delta_nccl *d) { (void)d; return 0; }
void delta_nccl_run(delta_nccl *d, const delta_kargs *k) {
    (void)d, (void)k;
    DELTA_ASSERTF(false, "%s", NO_NCCL);
}

#endif
