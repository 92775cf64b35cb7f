/* Conv2d geometry and im2col workspace, shared by the graph (output shapes,
 * declared workspace) and the CPU kernels (which must stay inside it).
 *
 * The CPU kernels lower a convolution to GEMMs over im2col columns laid out
 * as [C*R*S, cols]. A "block" of columns is either `chunk` whole images
 * (cols = chunk*P*Q, used when one image's columns are small, so the GEMMs
 * stay wide) or, when a single image's columns exceed the budget, a band of
 * output rows of one image (chunk = 1; the kernels take as many output rows
 * per band as the declared workspace holds).
 *
 * Workspace layout (floats), the three conv op types alike:
 *   col   C*R*S * cols            im2col columns of one block
 *   tbuf  K * chunk*P*Q           only when chunk > 1: the block's y
 *                                 (forward) or dy (dx, dw) in
 *                                 [K, (p, q, image)] order
 *   xbuf  C*H*Wp * chunk          when chunk > 1 or stride > 1: the block's
 *                                 x (forward, dw) or dx (dx) in
 *                                 [C, H, W phase, W / stride, image] order,
 *                                 Wp = stride * ceil(W / stride)
 * With several images a block, columns are ordered (p, q, image), image
 * innermost. conv2d_dx of a stride-1 "same" convolution has its own layout
 * (dx_as_forward below). A 1x1, stride-1, unpadded convolution with
 * chunk == 1 needs no workspace: its columns are the input image itself. */
#include "graph/graph_impl.h"

/* GEMMs narrower than this many columns run below peak: batch small images
 * into one block until the block is at least this wide. */
#ifndef DELTA_CONV_TARGET_COLS
#define DELTA_CONV_TARGET_COLS 2048
#endif
/* Bytes of im2col columns per block (before the transposed buffer). Both
 * can be set at build time, so tests can force small blocks and bands. */
#ifndef DELTA_CONV_COL_BUDGET
#define DELTA_CONV_COL_BUDGET (8 * 1024 * 1024)
#endif
#define CONV_TARGET_COLS ((int64_t)DELTA_CONV_TARGET_COLS)
#define CONV_COL_BUDGET ((double)DELTA_CONV_COL_BUDGET)

delta_conv_geom delta_conv_geom_of(const int64_t *xs, const int64_t *ws,
                                   int stride, int pad) {
    delta_conv_geom g;
    g.n = xs[0]; g.c = xs[1]; g.h = xs[2]; g.w = xs[3];
    g.k = ws[0]; g.r = ws[2]; g.s = ws[3];
    g.stride = stride;
    g.pad = pad;
    g.p = (g.h + 2 * pad - g.r) / stride + 1;
    g.q = (g.w + 2 * pad - g.s) / stride + 1;
    int64_t pq = g.p * g.q;
    double per_image = (double)g.c * g.r * g.s * pq * sizeof(float);
    int64_t chunk = 1;
    if (pq > 0 && per_image > 0) {
        chunk = (CONV_TARGET_COLS + pq - 1) / pq;
        int64_t fit = (int64_t)(CONV_COL_BUDGET / per_image);
        if (chunk > fit) chunk = fit;
    }
    if (chunk > g.n) chunk = g.n;
    if (chunk < 1) chunk = 1;
    /* even blocks: the fewest blocks of at most `chunk` images, as equal as
     * possible (16 images at up to 9 a block run as 8 + 8, not 9 + 7) */
    if (g.n > chunk) {
        int64_t blocks = (g.n + chunk - 1) / chunk;
        chunk = (g.n + blocks - 1) / blocks;
    }
    g.chunk = chunk;
    return g;
}

/* conv2d_dx of a stride-1 "same" convolution (square odd kernel, padding
 * (R-1)/2, so P = H and Q = W) runs as the forward convolution of dy with
 * the flipped, transposed weights: im2col of dy [K*R*S, cols] and one GEMM
 * with a K*R*S-long reduction, instead of a GEMM with a K-long reduction
 * and col2im. Not worth flipping the weights when they outweigh the data
 * (N*H*W small); only for K <= C, so that its columns (K*R*S rows) fit the
 * budget the blocks were sized for. The same test is in k_conv.c. */
static bool dx_as_forward(const delta_conv_geom *g) {
    return g->stride == 1 && g->r == g->s && g->r > 1 &&
           2 * g->pad == g->r - 1 && g->k <= g->c &&
           g->n * g->h * g->w >= 512;
}

size_t delta_conv_workspace(const delta_conv_geom *g, delta_op_type type) {
    size_t crs = (size_t)(g->c * g->r * g->s);
    size_t pq = (size_t)(g->p * g->q);
    if (crs == 0 || pq == 0 || g->n == 0 || g->k == 0) return 0;
    size_t st = (size_t)g->stride;
    if (type == DELTA_OP_CONV2D_DX && dx_as_forward(g)) {
        /* col [K*R*S, cols] | tbuf (dy) | xbuf (dx) | flipped weights */
        size_t krs = (size_t)(g->k * g->r * g->s);
        size_t wflip = krs * (size_t)g->c * sizeof(float);
        if (g->chunk > 1)
            return ((krs + (size_t)g->k) * pq + (size_t)(g->c * g->h * g->w)) *
                       (size_t)g->chunk * sizeof(float) + wflip;
        size_t row = krs * (size_t)g->q * sizeof(float);
        size_t rows = (size_t)(CONV_COL_BUDGET / (double)row);
        if (rows < 1) rows = 1;
        if (rows > (size_t)g->p) rows = (size_t)g->p;
        return rows * row + wflip;
    }
    /* x in [C, H, W phase, W / stride, image] order, except for 1x1
     * unpadded strided taps, gathered straight from x */
    bool gather = g->r == 1 && g->s == 1 && g->pad == 0 && st > 1;
    size_t xplane = gather ? 0
                           : (size_t)(g->c * g->h) * st *
                                 (((size_t)g->w + st - 1) / st);
    if (g->chunk > 1)
        return ((crs + (size_t)g->k) * pq + xplane) * (size_t)g->chunk *
               sizeof(float);
    if (g->r == 1 && g->s == 1 && g->stride == 1 && g->pad == 0) return 0;
    /* one image, in bands of output rows that fit the budget */
    size_t row = crs * (size_t)g->q * sizeof(float);
    size_t rows = (size_t)(CONV_COL_BUDGET / (double)row);
    if (rows < 1) rows = 1;
    if (rows > (size_t)g->p) rows = (size_t)g->p;
    return rows * row + (st > 1 ? xplane * sizeof(float) : 0);
}
