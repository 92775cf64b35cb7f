/* What the collective ops' kernels call (src/backend/cpu/k_comm.c), on the
 * backend's communication stream (the cpu backend's comm engine thread):
 * MPI point-to-point messages on a communicator of their own, apart from
 * the host-side collectives of comm.h, each wait bounded by the comm's
 * timeout. Every mean is taken in rank order (graph_impl.h, "data
 * parallel"), so the bits do not depend on which rank sums or on when
 * messages arrive. n tensors of numel[i] F32 elements each; ws is the op's
 * workspace (cost.c sizes it); `what` names the op in messages. */
#ifndef DELTA_COMM_IMPL_H
#define DELTA_COMM_IMPL_H

#include "delta/comm.h"

#include <stdint.h>

/* BODY for each tensor that the flat range [lo, hi) of n tensors laid end
 * to end (numel[i] elements each) touches, with i (the tensor), off (the
 * first element in it) and len in scope: how a collective cuts its work,
 * the same on every backend (comm.c, cuda/nccl.c), so that sender and
 * receiver cut a range into the same messages. */
#define DELTA_DP_SEGMENTS(n, numel, lo, hi, BODY)                             \
    do {                                                                      \
        int64_t base_ = 0;                                                    \
        for (int i = 0; i < (n); i++) {                                       \
            int64_t a_ = (lo) > base_ ? (lo) : base_;                         \
            int64_t e_ = base_ + (numel)[i];                                  \
            int64_t b_ = (hi) < e_ ? (hi) : e_;                               \
            if (a_ < b_) {                                                    \
                int64_t off = a_ - base_, len = b_ - a_;                      \
                BODY                                                          \
            }                                                                 \
            base_ = e_;                                                       \
        }                                                                     \
    } while (0)

/* Where rank q's copy of a piece goes in a collective's workspace: the
 * ranks other than `me`, in rank order. */
static inline int delta_dp_ws_slot(int q, int me) { return q < me ? q : q - 1; }

/* ALLREDUCE: out[i] = the mean over the ranks of in[i]. Rank c averages
 * chunk c of the tensors taken as one flat buffer (delta_dp_chunk_lo), a
 * piece of DELTA_DP_PIECE elements at a time, receiving the other ranks'
 * copies of the piece into ws ((P - 1) pieces, or chunks when smaller),
 * then sends its chunk of out to every rank and receives theirs. */
void delta_comm_allreduce_mean(delta_comm *c, int n, const float *const *in,
                               float *const *out, const int64_t *numel,
                               float *ws, const char *what);
/* REDUCE_SCATTER: out[i] (NULL unless owner[i] is this rank) = the mean
 * over the ranks of in[i], taken by its owner, which receives the other
 * ranks' copies a piece at a time into ws ((P - 1) pieces, or its largest
 * tensor when smaller). */
void delta_comm_reduce_mean(delta_comm *c, int n, const float *const *in,
                            float *const *out, const int64_t *numel,
                            const int *owner, float *ws, const char *what);
/* ALLGATHER: buf[i] of rank owner[i] into every other rank's buf[i]. */
void delta_comm_broadcast(delta_comm *c, int n, float *const *buf,
                          const int64_t *numel, const int *owner,
                          const char *what);

#endif
