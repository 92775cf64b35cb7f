/* Single-precision GEMM: OpenBLAS when built with it and selected, else the
 * built-in kernel below.
 *
 * The built-in GEMM follows the BLIS/Goto layout: for each NC-wide column
 * block of C and each KC-deep slice of K, a KC x NC block of op(B) is packed
 * into NR-wide panels, then each MC x KC block of op(A) is packed into
 * MR-high panels, and an MR x NR register-blocked micro-kernel walks the
 * panels. The micro-kernel is AVX2+FMA (chosen at run time with
 * __builtin_cpu_supports) with a portable vector-extension fallback.
 *
 * Threads split C into a grid of rectangular regions (never K), and each
 * element of C is computed by the same instruction sequence whatever region
 * and position in a region it falls in: edge tiles go through the same
 * micro-kernel on a padded copy. K slices depend only on k. So the result is
 * bit-identical for any thread count.
 *
 * Packing buffers are per thread, allocated once on a thread's first GEMM at
 * a fixed size given by the block sizes, and freed when the thread exits. */
#include "backend/cpu/kernels.h"
#include "delta/cpu.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef DELTA_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GEMM_X86 1
#endif

/* Micro-tile MR x NR; blocks MC x KC of A (L2) and KC x NC of B (L3). */
#define MR 6
#define NR 16
#define KC 256
#define MC 144 /* multiple of MR */
#define NC 1024 /* multiple of NR */
#define BUF_FLOATS ((size_t)MC * KC + (size_t)KC * NC)

/* C (MR x NR at c, row stride ldc) = alpha * Apanel Bpanel + beta * C; C is
 * not read when beta == 0. pa: kc x MR (MR per k), pb: kc x NR, 64-byte
 * aligned. */
typedef void (*ukernel_fn)(int64_t kc, const float *pa, const float *pb,
                           float *c, int64_t ldc, float alpha, float beta);

/* ---- micro-kernels ------------------------------------------------------ */

typedef float v4f __attribute__((vector_size(16)));

#if defined(__GNUC__) && !defined(__clang__)
#define GEMM_OPT_O3 __attribute__((optimize("O3")))
#else
#define GEMM_OPT_O3
#endif

static inline v4f v4_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v4_store(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* Portable kernel: two 6x8 halves, each 12 4-wide accumulators. */
GEMM_OPT_O3 static void
ukernel_generic(int64_t kc, const float *pa, const float *pb, float *c,
                int64_t ldc, float alpha, float beta) {
    for (int h = 0; h < 2; h++) {
        v4f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0},
            c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
        const float *a = pa, *b = pb + h * 8;
        for (int64_t p = 0; p < kc; p++) {
            v4f b0 = v4_load(b), b1 = v4_load(b + 4), ai;
#define GSTEP(i, x0, x1)                                                   \
    ai = (v4f){a[i], a[i], a[i], a[i]};                                    \
    x0 += ai * b0;                                                         \
    x1 += ai * b1;
            GSTEP(0, c00, c01) GSTEP(1, c10, c11) GSTEP(2, c20, c21)
            GSTEP(3, c30, c31) GSTEP(4, c40, c41) GSTEP(5, c50, c51)
#undef GSTEP
            a += MR;
            b += NR;
        }
        v4f va = {alpha, alpha, alpha, alpha}, vb = {beta, beta, beta, beta};
#define GROW(i, x0, x1)                                                    \
    do {                                                                   \
        float *cr = c + (i) * ldc + h * 8;                                 \
        v4f r0 = va * x0, r1 = va * x1;                                    \
        if (beta != 0.0f) {                                                \
            r0 += vb * v4_load(cr);                                        \
            r1 += vb * v4_load(cr + 4);                                    \
        }                                                                  \
        v4_store(cr, r0);                                                  \
        v4_store(cr + 4, r1);                                              \
    } while (0)
        GROW(0, c00, c01); GROW(1, c10, c11); GROW(2, c20, c21);
        GROW(3, c30, c31); GROW(4, c40, c41); GROW(5, c50, c51);
#undef GROW
    }
}

#ifdef GEMM_X86
/* AVX2 + FMA kernel: 6x16 tile in 12 ymm accumulators. */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2(int64_t kc, const float *pa, const float *pb, float *c,
             int64_t ldc, float alpha, float beta) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    __m256 b0, b1, ai;
#define ASTEP(off)                                                         \
    b0 = _mm256_load_ps(pb + (off) * NR);                                  \
    b1 = _mm256_load_ps(pb + (off) * NR + 8);                              \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 0);                         \
    c00 = _mm256_fmadd_ps(ai, b0, c00);                                    \
    c01 = _mm256_fmadd_ps(ai, b1, c01);                                    \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 1);                         \
    c10 = _mm256_fmadd_ps(ai, b0, c10);                                    \
    c11 = _mm256_fmadd_ps(ai, b1, c11);                                    \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 2);                         \
    c20 = _mm256_fmadd_ps(ai, b0, c20);                                    \
    c21 = _mm256_fmadd_ps(ai, b1, c21);                                    \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 3);                         \
    c30 = _mm256_fmadd_ps(ai, b0, c30);                                    \
    c31 = _mm256_fmadd_ps(ai, b1, c31);                                    \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 4);                         \
    c40 = _mm256_fmadd_ps(ai, b0, c40);                                    \
    c41 = _mm256_fmadd_ps(ai, b1, c41);                                    \
    ai = _mm256_broadcast_ss(pa + (off) * MR + 5);                         \
    c50 = _mm256_fmadd_ps(ai, b0, c50);                                    \
    c51 = _mm256_fmadd_ps(ai, b1, c51);
    for (int i = 0; i < MR; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
    int64_t p = 0;
    for (; p + 4 <= kc; p += 4) {
        _mm_prefetch((const char *)(pa + 8 * MR), _MM_HINT_T0);
        ASTEP(0) ASTEP(1) ASTEP(2) ASTEP(3)
        pa += 4 * MR;
        pb += 4 * NR;
    }
    for (; p < kc; p++) {
        ASTEP(0)
        pa += MR;
        pb += NR;
    }
#undef ASTEP
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#define AROW(i, x0, x1)                                                    \
    do {                                                                   \
        float *cr = c + (i) * ldc;                                         \
        __m256 r0 = _mm256_mul_ps(va, x0), r1 = _mm256_mul_ps(va, x1);     \
        if (beta != 0.0f) {                                                \
            r0 = _mm256_add_ps(r0, _mm256_mul_ps(vb, _mm256_loadu_ps(cr))); \
            r1 = _mm256_add_ps(r1,                                         \
                               _mm256_mul_ps(vb, _mm256_loadu_ps(cr + 8))); \
        }                                                                  \
        _mm256_storeu_ps(cr, r0);                                          \
        _mm256_storeu_ps(cr + 8, r1);                                      \
    } while (0)
    AROW(0, c00, c01); AROW(1, c10, c11); AROW(2, c20, c21);
    AROW(3, c30, c31); AROW(4, c40, c41); AROW(5, c50, c51);
#undef AROW
}
#endif

/* Kernel override for tests: 0 auto, 1 portable, 2 AVX2 (if supported).
 * Not in a header: tests declare it themselves. Returns the kernel used
 * from now on (1 or 2). */
static int ukernel_force;

static bool cpu_has_avx2(void) {
#ifdef GEMM_X86
    static int has = -1; /* filled once; racing threads store the same */
    int h = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&has, h, __ATOMIC_RELAXED);
    }
    return h;
#else
    return false;
#endif
}

int delta_gemm_builtin_kernel(int force);
int delta_gemm_builtin_kernel(int force) {
    __atomic_store_n(&ukernel_force, force, __ATOMIC_RELAXED);
    if (force == 1 || !cpu_has_avx2()) return 1;
    return 2;
}

static ukernel_fn pick_ukernel(void) {
#ifdef GEMM_X86
    if (__atomic_load_n(&ukernel_force, __ATOMIC_RELAXED) != 1 &&
        cpu_has_avx2())
        return ukernel_avx2;
#endif
    return ukernel_generic;
}

/* ---- packing ------------------------------------------------------------ */

/* Packs op(A)[i0:i0+mc, p0:p0+kc] into MR-high panels ([kc][MR] each), zero
 * padding the last panel. op(A)(i, p) = ta ? a[p*lda + i] : a[i*lda + p].
 * Source rows are read front to back (prefetch-friendly). */
static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0,
                   int64_t mc, int64_t p0, int64_t kc, float *dst) {
    if (ta) {
        for (int64_t p = 0; p < kc; p++) {
            const float *s = a + (p0 + p) * lda + i0;
            float *d = dst + p * MR;
            int64_t ir = 0;
            for (; ir + MR <= mc; ir += MR) memcpy(d + ir * kc, s + ir,
                                                   MR * sizeof(float));
            for (int64_t i = 0; ir < mc && i < MR; i++)
                d[ir * kc + i] = ir + i < mc ? s[ir + i] : 0.0f;
        }
        return;
    }
    for (int64_t ir = 0; ir < mc; ir += MR, dst += MR * kc) {
        int64_t mr = mc - ir < MR ? mc - ir : MR;
        const float *r[MR];
        for (int64_t i = 0; i < MR; i++)
            r[i] = a + (i0 + ir + (i < mr ? i : 0)) * lda + p0;
        if (mr == MR) {
            for (int64_t p = 0; p < kc; p++) {
                float *d = dst + p * MR;
                d[0] = r[0][p]; d[1] = r[1][p]; d[2] = r[2][p];
                d[3] = r[3][p]; d[4] = r[4][p]; d[5] = r[5][p];
            }
        } else {
            for (int64_t p = 0; p < kc; p++)
                for (int64_t i = 0; i < MR; i++)
                    dst[p * MR + i] = i < mr ? r[i][p] : 0.0f;
        }
    }
}

#ifdef GEMM_X86
/* One full NR-wide panel of a transposed B (b[j*ldb + p]): 8x8 blocks
 * transposed in registers. */
__attribute__((target("avx2"))) GEMM_OPT_O3 static void
pack_bt_panel_avx2(const float *b, int64_t ldb, int64_t kc, float *dst) {
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        for (int h = 0; h < 2; h++) {
            const float *s = b + (int64_t)h * 8 * ldb + p;
            __m256 r[8], t[8], u[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + i * ldb);
            for (int i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
                u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
            }
            float *d = dst + p * NR + h * 8;
            for (int i = 0; i < 4; i++) {
                _mm256_store_ps(d + i * NR,
                                _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
                _mm256_store_ps(d + (i + 4) * NR,
                                _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
            }
        }
    }
    for (; p < kc; p++)
        for (int64_t j = 0; j < NR; j++) dst[p * NR + j] = b[j * ldb + p];
}
#endif

/* Packs op(B)[p0:p0+kc, j0:j0+nc] into NR-wide panels ([kc][NR] each), zero
 * padding the last panel. op(B)(p, j) = tb ? b[j*ldb + p] : b[p*ldb + j]. */
static void pack_b(bool tb, const float *b, int64_t ldb, int64_t p0,
                   int64_t kc, int64_t j0, int64_t nc, float *dst) {
    if (!tb) {
        /* row by row of B: panel jr/NR starts at dst + jr*kc */
        for (int64_t p = 0; p < kc; p++) {
            const float *s = b + (p0 + p) * ldb + j0;
            float *d = dst + p * NR;
            int64_t jr = 0;
            for (; jr + NR <= nc; jr += NR)
                memcpy(d + jr * kc, s + jr, NR * sizeof(float));
            for (int64_t j = 0; jr < nc && j < NR; j++)
                d[jr * kc + j] = jr + j < nc ? s[jr + j] : 0.0f;
        }
        return;
    }
    for (int64_t jr = 0; jr < nc; jr += NR, dst += NR * kc) {
        int64_t nr = nc - jr < NR ? nc - jr : NR;
#ifdef GEMM_X86
        if (nr == NR && cpu_has_avx2()) {
            pack_bt_panel_avx2(b + (j0 + jr) * ldb + p0, ldb, kc, dst);
            continue;
        }
#endif
        for (int64_t j = 0; j < NR; j++) {
            if (j < nr) {
                const float *s = b + (j0 + jr + j) * ldb + p0;
                for (int64_t p = 0; p < kc; p++) dst[p * NR + j] = s[p];
            } else {
                for (int64_t p = 0; p < kc; p++) dst[p * NR + j] = 0.0f;
            }
        }
    }
}

/* ---- blocked driver ----------------------------------------------------- */

/* C block (mc x nc) from packed A (mc x kc) and packed B (kc x nc). */
static void macro_kernel(ukernel_fn uk, int64_t mc, int64_t nc, int64_t kc,
                         const float *pa, const float *pb, float *c,
                         int64_t ldc, float alpha, float beta) {
    float tile[MR * NR] __attribute__((aligned(64)));
    for (int64_t jr = 0; jr < nc; jr += NR) {
        int64_t nr = nc - jr < NR ? nc - jr : NR;
        for (int64_t ir = 0; ir < mc; ir += MR) {
            int64_t mr = mc - ir < MR ? mc - ir : MR;
            const float *a = pa + ir * kc, *b = pb + jr * kc;
            float *cc = c + ir * ldc + jr;
            if (mr == MR && nr == NR) {
                uk(kc, a, b, cc, ldc, alpha, beta);
                continue;
            }
            /* Edge tile: same kernel on a padded copy, so every element
             * gets the same arithmetic as in a full tile. */
            if (beta != 0.0f) {
                for (int64_t i = 0; i < MR; i++)
                    for (int64_t j = 0; j < NR; j++)
                        tile[i * NR + j] =
                            i < mr && j < nr ? cc[i * ldc + j] : 0.0f;
            }
            uk(kc, a, b, tile, NR, alpha, beta);
            for (int64_t i = 0; i < mr; i++)
                memcpy(cc + i * ldc, tile + i * NR,
                       (size_t)nr * sizeof(float));
        }
    }
}

typedef struct gemm_args {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    int64_t kslices; /* K split into this many near-equal slices <= KC */
    ukernel_fn uk;
} gemm_args;

/* Rows [m0, m1) x columns [n0, n1) of C, with a thread's buffer. */
static void gemm_region(const gemm_args *g, int64_t m0, int64_t m1,
                        int64_t n0, int64_t n1, float *buf) {
    float *pa = buf, *pb = buf + (size_t)MC * KC;
    for (int64_t jc = n0; jc < n1; jc += NC) {
        int64_t nc = n1 - jc < NC ? n1 - jc : NC;
        for (int64_t s = 0; s < g->kslices; s++) {
            int64_t pc = g->k * s / g->kslices;
            int64_t kc = g->k * (s + 1) / g->kslices - pc;
            float beta = s == 0 ? g->beta : 1.0f;
            pack_b(g->tb, g->b, g->ldb, pc, kc, jc, nc, pb);
            for (int64_t ic = m0; ic < m1; ic += MC) {
                int64_t mc = m1 - ic < MC ? m1 - ic : MC;
                pack_a(g->ta, g->a, g->lda, ic, mc, pc, kc, pa);
                macro_kernel(g->uk, mc, nc, kc, pa, pb, g->c + ic * g->ldc + jc,
                             g->ldc, g->alpha, beta);
            }
        }
    }
}

/* ---- per-thread packing buffers ----------------------------------------- */

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

static void buf_release(void *p) { delta_free_aligned(p); }
static void buf_key_init(void) {
    int rc = pthread_key_create(&buf_key, buf_release);
    DELTA_ASSERTF(rc == 0, "pthread_key_create failed (%d)", rc);
}

/* This thread's packing buffer (BUF_FLOATS floats), made on first use and
 * freed at thread exit. */
static float *thread_buffer(void) {
    static _Thread_local float *buf;
    if (!buf) {
        buf = delta_alloc_aligned(BUF_FLOATS * sizeof(float));
        DELTA_ASSERTF(buf, "GEMM packing buffer: out of memory (%zu bytes)",
                      BUF_FLOATS * sizeof(float));
        pthread_once(&buf_once, buf_key_init);
        pthread_setspecific(buf_key, buf);
    }
    return buf;
}

/* ---- entry points ------------------------------------------------------- */

/* C = beta * C (zeros when beta == 0: C is not read). */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        float *r = c + i * ldc;
        if (beta == 0.0f) {
            memset(r, 0, (size_t)n * sizeof(float));
        } else if (beta != 1.0f) {
            for (int64_t j = 0; j < n; j++) r[j] *= beta;
        }
    }
}

/* Chooses a tm x tn grid of regions for t threads: as many regions as
 * threads when the matrix has enough tiles, with the least packing per
 * thread. */
static void gemm_grid(int64_t m, int64_t n, int t, int *tm, int *tn) {
    int64_t mu = (m + MR - 1) / MR, nu = (n + NR - 1) / NR;
    *tm = *tn = 1;
    for (int tt = t; tt > 1; tt--) {
        double best = INFINITY;
        for (int a = tt; a >= 1; a--) {
            if (tt % a) continue;
            int b = tt / a;
            if (a > mu || b > nu) continue;
            double rm = (double)((mu + a - 1) / a) * MR;
            double rn = (double)((nu + b - 1) / b) * NR;
            /* compute (~32 flops a cycle) plus packing, per unit of k */
            double cost = rm * rn / 32.0 + rm * ceil(rn / NC) + rn;
            if (cost < best) {
                best = cost;
                *tm = a;
                *tn = b;
            }
        }
        if (best < INFINITY) return;
    }
}

/* The built-in GEMM on at most max_threads threads (1: the calling thread
 * only, safe inside a parallel region). */
static void gemm_builtin(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c,
                         int64_t ldc, int max_threads) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
    gemm_args g = {ta, tb, m, n, k, alpha, beta, a, b, c, lda, ldb, ldc,
                   (k + KC - 1) / KC, pick_ukernel()};
    /* About 2 MFLOP per thread at least: below that, forking costs more. */
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int t = max_threads;
    if ((double)t > flops / (double)(1 << 21)) t = (int)(flops / (1 << 21));
    if (t < 1) t = 1;
    int tm = 1, tn = 1;
    if (t > 1) gemm_grid(m, n, t, &tm, &tn);
    int regions = tm * tn;
    if (regions == 1) {
        gemm_region(&g, 0, m, 0, n, thread_buffer());
        return;
    }
    int64_t mu = (m + MR - 1) / MR, nu = (n + NR - 1) / NR;
#ifdef _OPENMP
#pragma omp parallel num_threads(regions)
#endif
    {
#ifdef _OPENMP
        int tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int tid = 0, nt = 1;
#endif
        float *buf = thread_buffer();
        for (int r = tid; r < regions; r += nt) {
            int ri = r / tn, rj = r % tn;
            int64_t m0 = mu * ri / tm * MR, m1 = mu * (ri + 1) / tm * MR;
            int64_t n0 = nu * rj / tn * NR, n1 = nu * (rj + 1) / tn * NR;
            if (m1 > m) m1 = m;
            if (n1 > n) n1 = n;
            if (m0 < m1 && n0 < n1) gemm_region(&g, m0, m1, n0, n1, buf);
        }
    }
}

void delta_gemm_builtin(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc) {
    gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                 delta_cpu_threads());
}

/* The built-in GEMM on the calling thread alone: for kernels that run many
 * small GEMMs from their own parallel loop (batched matmul). Not in
 * kernels.h; callers declare it. */
void delta_gemm_builtin_serial(bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb,
                               float beta, float *c, int64_t ldc);
void delta_gemm_builtin_serial(bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb,
                               float beta, float *c, int64_t ldc) {
    gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
}

void delta_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
#ifdef DELTA_HAVE_OPENBLAS
    if (delta_cpu_gemm() == DELTA_GEMM_BLAS) {
        /* cblas wants ld >= row width even for a one-row matrix (where the
         * stride is never used); a real overlap of rows goes built-in. */
        int64_t ar = ta ? k : m, aw = ta ? m : k;
        int64_t br = tb ? n : k, bw = tb ? k : n;
        if (ar == 1 && lda < aw) lda = aw;
        if (br == 1 && ldb < bw) ldb = bw;
        if (m == 1 && ldc < n) ldc = n;
        if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda >= aw &&
            lda <= INT_MAX && ldb >= bw && ldb <= INT_MAX && ldc >= n &&
            ldc <= INT_MAX) {
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                        (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c,
                        (int)ldc);
            return;
        }
    }
#endif
    delta_gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
