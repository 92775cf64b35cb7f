/* The mean over the ranks that every collective takes on the GPU (nccl.c):
 * one thread per element, the ranks' values added in rank order and the
 * sum divided by P, in float; with FMA contraction off and IEEE division
 * (nvcc's defaults) the CPU's bits (src/comm/comm.c, mean_in_rank_order). */
#include "backend/cuda/cu_common.cuh"

/* out[e]: rank me's value is mine[e], rank q's ws[slot(q) * stride + e]
 * (slots: the other ranks in rank order). */
__global__ static void dp_mean_k(float *out, const float *mine,
                                 const float *ws, int64_t stride, int P,
                                 int me, int64_t n) {
    CU_FOR(e, n) {
        float s = me == 0 ? mine[e] : ws[e];
        for (int q = 1; q < P; q++)
            s += q == me ? mine[e]
                         : ws[(int64_t)(q < me ? q : q - 1) * stride + e];
        out[e] = s / (float)P;
    }
}

void delta_cu_dp_mean(cudaStream_t stream, float *out, const float *mine,
                      const float *ws, int64_t stride, int P, int me,
                      int64_t n) {
    if (n > 0)
        dp_mean_k<<<cu_blocks(n), CU_THREADS, 0, stream>>>(out, mine, ws,
                                                           stride, P, me, n);
}
