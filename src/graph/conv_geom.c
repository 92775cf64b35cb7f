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
 * Workspace layout (floats), all three conv op types alike:
 *   col   C*R*S * cols             im2col columns of one block
 *   tbuf  K * chunk*P*Q            only when chunk > 1: the block's output
 *                                  (forward) or dy (dx, dw) in [K, cols]
 *                                  layout, transposed to/from NCHW
 * A 1x1, stride-1, unpadded convolution with chunk == 1 needs no workspace:
 * its columns are the input image itself. */
#include "graph/graph_impl.h"

/* GEMMs narrower than this many columns run below peak: batch small images
 * into one block until the block is at least this wide. */
#define CONV_TARGET_COLS 2048
/* Bytes of im2col columns per block (before the transposed buffer). */
#define CONV_COL_BUDGET ((double)(8 * 1024 * 1024))

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

size_t delta_conv_workspace(const delta_conv_geom *g, delta_op_type type) {
    (void)type; /* the three conv op types share one layout */
    size_t crs = (size_t)(g->c * g->r * g->s);
    size_t pq = (size_t)(g->p * g->q);
    if (crs == 0 || pq == 0 || g->n == 0 || g->k == 0) return 0;
    if (g->chunk > 1)
        return (crs + (size_t)g->k) * (size_t)g->chunk * pq * sizeof(float);
    if (g->r == 1 && g->s == 1 && g->stride == 1 && g->pad == 0) return 0;
    /* one image, in bands of output rows that fit the budget */
    size_t row = crs * (size_t)g->q * sizeof(float);
    size_t rows = (size_t)(CONV_COL_BUDGET / (double)row);
    if (rows < 1) rows = 1;
    if (rows > (size_t)g->p) rows = (size_t)g->p;
    return rows * row;
}
