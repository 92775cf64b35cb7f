/* The collective ops' CPU kernels: data parallel across ranks
 * (graph_impl.h, "data parallel"; docs/KERNELS.md, "Collective ops"). They
 * run on the backend's communication stream and move their bytes with MPI
 * (src/comm/comm.c); with one rank nothing moves and the mean of one value
 * is the value. */
#include "backend/cpu/kernels.h"
#include "comm/comm_impl.h"

#include <string.h>

/* The comm an op runs over: it must have the ranks the program was built
 * for, and this process must be the rank it was built for. */
static delta_comm *comm_of(const delta_kargs *k) {
    const delta_op *op = k->op;
    delta_comm *c = k->env ? k->env->comm : NULL;
    int size = delta_comm_size(c), rank = delta_comm_rank(c);
    DELTA_ASSERTF(size == op->a.ranks && rank == op->a.rank,
                  "op %d (%s) was built for rank %d of %d and runs on rank %d "
                  "of %d (the session's comm)", op->id, op->name, op->a.rank,
                  op->a.ranks, rank, size);
    return c;
}

typedef struct operands {
    int n;
    const float *in[DELTA_MAX_OP_IN];
    float *out[DELTA_MAX_OP_IN];
    int64_t numel[DELTA_MAX_OP_IN];
} operands;

/* The inputs, and the outputs by input: out[i] is input i's output, NULL
 * for a reduce-scatter's input another rank owns. */
static operands operands_of(const delta_kargs *k) {
    const delta_op *op = k->op;
    operands o = {.n = op->n_in};
    int j = 0;
    for (int i = 0; i < op->n_in; i++) {
        o.in[i] = k->in[i];
        o.numel[i] = k->in_t[i]->numel;
        bool has_out = op->type != DELTA_OP_REDUCE_SCATTER ||
                       op->a.owner[i] == op->a.rank;
        o.out[i] = has_out ? k->out[j++] : NULL;
    }
    DELTA_ASSERT(j == op->n_out);
    return o;
}

void delta_k_allreduce(const delta_kargs *k) {
    delta_comm *c = comm_of(k);
    operands o = operands_of(k);
    if (k->op->a.ranks == 1) { /* s / 1 == s */
        for (int i = 0; i < o.n; i++)
            memcpy(o.out[i], o.in[i], (size_t)o.numel[i] * sizeof(float));
        return;
    }
    delta_comm_allreduce_mean(c, o.n, o.in, o.out, o.numel, k->ws,
                              k->op->name);
}

void delta_k_reduce_scatter(const delta_kargs *k) {
    delta_comm *c = comm_of(k);
    operands o = operands_of(k);
    if (k->op->a.ranks == 1) {
        for (int i = 0; i < o.n; i++)
            memcpy(o.out[i], o.in[i], (size_t)o.numel[i] * sizeof(float));
        return;
    }
    delta_comm_reduce_mean(c, o.n, o.in, o.out, o.numel, k->op->a.owner,
                           k->ws, k->op->name);
}

void delta_k_allgather(const delta_kargs *k) {
    delta_comm *c = comm_of(k);
    operands o = operands_of(k);
    if (k->op->a.ranks == 1) return; /* in place: nothing to send */
    delta_comm_broadcast(c, o.n, o.out, o.numel, k->op->a.owner, k->op->name);
}
