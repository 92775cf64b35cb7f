/* Data movement on the GPU: embedding and its backward, transpose of two
 * dims, split and concat (semantics: src/backend/cpu/k_layout.c). All but
 * embedding_bwd are copies (bit-exact); transpose, split and concat move
 * elements of their dtype's size, F32 or BF16. embedding_bwd sorts the tokens by
 * id (CUB's radix sort: stable, so each id's tokens stay in token order),
 * then gives each (id, column) one thread that adds that id's tokens'
 * gradients in token order from 0, exactly as the CPU does: bit-identical
 * to it, and parallel over the ids and columns (the old form, one thread a
 * column over every token, took 4.2 ms of GPT-2 small's step at batch 8 on
 * an H200; it stays as the fallback when the sort's buffers do not fit the
 * scratch). */
#include "backend/cuda/cu_common.cuh"

#include <cub/device/device_radix_sort.cuh>

__global__ static void embedding_k(const int32_t *ids, const float *table,
                                   float *y, int64_t n, int64_t v, int64_t d) {
    CU_FOR(e, n * d) {
        int64_t i = e / d, c = e % d;
        int32_t id = ids[i];
        y[e] = id >= 0 && (int64_t)id < v ? table[id * d + c] : 0.0f;
    }
}

void delta_cu_embedding(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = k->in_t[0]->numel;
    int64_t v = k->in_t[1]->shape[0], d = k->in_t[1]->shape[1];
    CU_LAUNCH(embedding_k, c, n * d, (const int32_t *)k->in[0],
              (const float *)k->in[1], (float *)k->out[0], n, v, d);
}

/* Thread per column c: dt[id, c] += dy[i, c] for the tokens i in order
 * (dt zeroed first). The fallback. */
__global__ static void embedding_bwd_k(const int32_t *ids, const float *dy,
                                       float *dt, int64_t n, int64_t v,
                                       int64_t d) {
    CU_FOR(c, d) {
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id < 0 || (int64_t)id >= v) continue;
            dt[id * d + c] += dy[i * d + c];
        }
    }
}

/* The sort's input: key = the id, or v for an id outside [0, v) (sorted
 * last, skipped); value = the token's index. */
__global__ static void emb_keys_k(const int32_t *ids, int32_t *keys,
                                  int32_t *idx, int n, int v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        int32_t id = ids[i];
        keys[i] = id >= 0 && id < v ? id : v;
        idx[i] = i;
    }
}

/* Block x = a position in the sorted order; where an id's run of tokens
 * starts, its threads (one per column) sum the run in token order. */
__global__ static void emb_runs_k(const int32_t *keys, const int32_t *idx,
                                  const float *dy, float *dt, int n, int v,
                                  int64_t d) {
    const int s = blockIdx.x;
    const int32_t key = keys[s];
    if (key >= v || (s > 0 && keys[s - 1] == key)) return;
    for (int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; c < d;
         c += (int64_t)blockDim.x * gridDim.y) {
        float acc = 0.0f;
        for (int j = s; j < n && keys[j] == key; j++)
            acc += dy[(int64_t)idx[j] * d + c];
        dt[(int64_t)key * d + c] = acc;
    }
}

/* Bits to sort keys in [0, v]. */
static int key_bits(int64_t v) {
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) <= v) b++;
    return b;
}

void delta_cu_embedding_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = k->in_t[0]->numel;
    int64_t v = k->out_t[0]->shape[0], d = k->out_t[0]->shape[1];
    const int32_t *ids = (const int32_t *)k->in[0];
    const float *dy = (const float *)k->in[1];
    float *dt = (float *)k->out[0];
    cudaMemsetAsync(dt, 0, (size_t)(v * d) * sizeof(float), c->stream);
    if (n == 0 || d == 0) return;
    /* the sort's four arrays and CUB's temporary storage in the scratch */
    size_t temp = 0;
    bool sorted = n < INT32_MAX / 4 && v < INT32_MAX &&
                  cub::DeviceRadixSort::SortPairs(
                      NULL, temp, (const int32_t *)NULL, (int32_t *)NULL,
                      (const int32_t *)NULL, (int32_t *)NULL, (int)n, 0,
                      key_bits(v), c->stream) == cudaSuccess;
    size_t arrays = 4 * (size_t)n * sizeof(int32_t);
    sorted = sorted && c->scratch && arrays + temp + 256 <= c->scratch_bytes;
    if (!sorted) {
        CU_LAUNCH(embedding_bwd_k, c, d, ids, dy, dt, n, v, d);
        return;
    }
    int32_t *keys = (int32_t *)c->scratch, *keys2 = keys + n;
    int32_t *idx = keys2 + n, *idx2 = idx + n;
    void *tmp = (char *)c->scratch + ((arrays + 255) / 256) * 256;
    emb_keys_k<<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(ids, keys, idx,
                                                          (int)n, (int)v);
    cudaError_t e = cub::DeviceRadixSort::SortPairs(
        tmp, temp, keys, keys2, idx, idx2, (int)n, 0, key_bits(v), c->stream);
    DELTA_ASSERTF(e == cudaSuccess, "embedding_bwd: CUB sort: %s",
                  cudaGetErrorString(e));
    unsigned cols = (unsigned)((d + CU_THREADS - 1) / CU_THREADS);
    dim3 grid((unsigned)n, cols < CU_MAX_BLOCKS ? cols : CU_MAX_BLOCKS);
    emb_runs_k<<<grid, CU_THREADS, 0, c->stream>>>(keys2, idx2, dy, dt,
                                                   (int)n, (int)v, d);
}

/* x viewed as (A, M, Bm, N, C) -> y (A, N, Bm, M, C), moved in units of
 * U (uint32_t: an F32 element, uint16_t: a BF16 one, or uint4: 16 bytes
 * of a row of C when the row's bytes are a multiple of 16, as attention's
 * head split has: C = the head size), with index arithmetic in I (32-bit
 * whenever the unit count fits: a 64-bit division costs tens of
 * instructions, and this kernel does four a unit). One thread per output
 * unit; consecutive threads write consecutive units and, within a row of
 * C, read consecutive ones. Bits are moved, never converted. On an H200
 * GPT-2 small's 96 transposes a step took 6.2 ms with one 64-bit-indexed
 * thread per element (about 5x the bytes' time at 4 TB/s). */
template <typename U, typename I>
__global__ static void transpose_k(const U *x, U *y, I a, I m, I bm, I n,
                                   I c) {
    const I total = a * n * bm * m * c;
    for (I o = (I)(blockIdx.x * blockDim.x + threadIdx.x); o < total;
         o += (I)(blockDim.x * gridDim.x)) {
        I ci = o % c, t = o / c;
        I mi = t % m;
        t /= m;
        I bi = t % bm;
        t /= bm;
        I ni = t % n, ai = t / n;
        y[o] = x[(((ai * m + mi) * bm + bi) * n + ni) * c + ci];
    }
}

template <typename U>
static void transpose_as(const delta_cuda_kctx *c, const void *x, void *y,
                         int64_t a, int64_t m, int64_t bm, int64_t n,
                         int64_t units) {
    int64_t total = a * m * bm * n * units;
    if (total <= 0) return;
    unsigned blocks = cu_blocks(total);
    if (total < INT32_MAX - (int64_t)blocks * CU_THREADS)
        transpose_k<U, int32_t><<<blocks, CU_THREADS, 0, c->stream>>>(
            (const U *)x, (U *)y, (int32_t)a, (int32_t)m, (int32_t)bm,
            (int32_t)n, (int32_t)units);
    else
        transpose_k<U, int64_t><<<blocks, CU_THREADS, 0, c->stream>>>(
            (const U *)x, (U *)y, a, m, bm, n, units);
}

void delta_cu_transpose(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    int d0 = k->op->a.dim, d1 = k->op->a.dim1;
    DELTA_ASSERT(0 <= d0 && d0 < d1 && d1 < xt->ndim);
    const size_t es = delta_dtype_size(xt->dtype);
    DELTA_ASSERTF(es == 4 || es == 2, "transpose op %d: %zu-byte elements",
                  k->op->id, es);
    int64_t a = 1, m = xt->shape[d0], bm = 1, n = xt->shape[d1], cc = 1;
    for (int i = 0; i < d0; i++) a *= xt->shape[i];
    for (int i = d0 + 1; i < d1; i++) bm *= xt->shape[i];
    for (int i = d1 + 1; i < xt->ndim; i++) cc *= xt->shape[i];
    const size_t row = (size_t)cc * es; /* bytes of a row of C */
    if (row % 16 == 0 && (uintptr_t)k->in[0] % 16 == 0 &&
        (uintptr_t)k->out[0] % 16 == 0)
        transpose_as<uint4>(c, k->in[0], k->out[0], a, m, bm, n,
                            (int64_t)(row / 16));
    else if (es == 4)
        transpose_as<uint32_t>(c, k->in[0], k->out[0], a, m, bm, n, cc);
    else
        transpose_as<uint16_t>(c, k->in[0], k->out[0], a, m, bm, n, cc);
}

/* Whole (outer, sum of parts, inner) <-> parts (outer, part_i, inner): one
 * 2-D device copy per part (outer rows of the part's bytes). */
static void move_parts(const delta_cuda_kctx *c, char *whole,
                       char *const *parts, const delta_tensor *wt,
                       const delta_tensor *const *pt, int n, int dim,
                       bool to_parts) {
    DELTA_ASSERT(dim >= 0 && dim < wt->ndim && n >= 1);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < dim; i++) outer *= wt->shape[i];
    for (int i = dim + 1; i < wt->ndim; i++) inner *= wt->shape[i];
    size_t es = delta_dtype_size(wt->dtype);
    size_t row = (size_t)(wt->shape[dim] * inner) * es, off = 0;
    if (row == 0 || outer == 0) return;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)(pt[i]->shape[dim] * inner) * es;
        if (len) {
            cudaError_t e =
                to_parts ? cudaMemcpy2DAsync(parts[i], len, whole + off, row,
                                             len, (size_t)outer,
                                             cudaMemcpyDeviceToDevice,
                                             c->stream)
                         : cudaMemcpy2DAsync(whole + off, row, parts[i], len,
                                             len, (size_t)outer,
                                             cudaMemcpyDeviceToDevice,
                                             c->stream);
            DELTA_ASSERTF(e == cudaSuccess, "cudaMemcpy2DAsync: %s",
                          cudaGetErrorString(e));
        }
        off += len;
    }
    DELTA_ASSERT(off == row);
}

void delta_cu_split(const delta_cuda_kctx *c, const delta_kargs *k) {
    move_parts(c, (char *)k->in[0], (char *const *)k->out, k->in_t[0],
               k->out_t, k->op->n_out, k->op->a.dim, true);
}

void delta_cu_concat(const delta_cuda_kctx *c, const delta_kargs *k) {
    move_parts(c, (char *)k->out[0], (char *const *)k->in, k->out_t[0],
               k->in_t, k->op->n_in, k->op->a.dim, false);
}
