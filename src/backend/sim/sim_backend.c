/* The sim backend: a virtual GPU. Nothing is computed and nothing is
 * allocated; ops and copies advance virtual clocks (seconds), one per
 * stream and one for the host that issues them, so the runtime and its
 * policies can plan and be measured on paper-scale models in seconds.
 * Deterministic: the same calls give the same clocks, bit for bit.
 *
 * Cost model (also docs/DEVICE.md; constants in src/backend/backend.h):
 *   t(reshape) = 0 (a view: no kernel, no data moved)
 *   t(op) = launch + max(flops / (peak * eff_compute),
 *                        bytes / (hbm * eff_mem))
 *     launch       5 us per kernel: the device's side of a kernel (its
 *                  shortest run and the gap before the next); the host's
 *                  side is the host clock's (below)
 *     GEMM-like ops (matmul, linear, conv2d, conv2d_dx, conv2d_dw):
 *                  peak = bf16_flops for BF16 operands (always on the
 *                  tensor cores, as cuBLAS runs them), else tensor_flops
 *                  with tensor_cores, else fp32_flops;
 *                  eff_compute = 0.7 (cuBLAS/cuDNN reach 60-75% of peak on
 *                  large shapes)
 *     other ops:   peak = fp32_flops, eff_compute = 0.25 (they are memory
 *                  bound: the term only matters for flop-heavy pointwise
 *                  ops such as GELU)
 *     eff_mem      0.8 of the HBM bandwidth (what STREAM-like kernels reach)
 *   a copy on a copy stream: latency + bytes / link_bytes_per_s; while
 *     the other direction's stream is still busy, at (link_duplex - 1) of
 *     that rate (a device file's measured duplex; full duplex, 2, where it
 *     gives none: the newer copy has the share the link has left over, the
 *     older one runs on as issued, which keeps every clock already handed
 *     out in an event true);
 *   a copy on the compute stream (a device-side move): launch +
 *     2 bytes / (hbm * eff_mem) (read and write);
 *   a collective op (COMM stream) over P ranks of the op's input bytes B:
 *     a ring on the interconnect, delta_collective_seconds (allreduce
 *     2 (P - 1) / P x B / bandwidth + 2 (P - 1) latencies, reduce-scatter
 *     and allgather half of it).
 * A device description from a file (delta calibrate; device_file.c)
 * replaces the constants where it gives figures: launch by kernel_s,
 * eff_compute and eff_mem by curves per kind of op, each op type's time
 * scaled by its factor, each copy stream at its direction's rate, and a
 * kernel starting no earlier than kernel_gap_s after the one before. The
 * presets give none of these: their costs are the constants'.
 *
 * Clocks: one per stream, and the host's. Every stream is asynchronous to
 * the host, which issues work ahead of the device and only waits for it in
 * sync. The host's costs are the preset's (launch_host_s, library_host_s,
 * launch_latency_s, sync_wake_s; presets.c and docs/DEVICE.md).
 *   run(op)      host += the device file's op_host_s for the op's type
 *                when it has one, else launch_host_s (+ library_host_s for
 *                GEMM-like ops,
 *                which go through cuBLAS/cuDNN on the GPU); the kernel
 *                starts at max(compute clock, host + launch_latency_s) and
 *                ends t(op) later, the new compute clock. A reshape
 *                launches nothing: no host cost, no time.
 *   copy(s)      host += launch_host_s (issuing cudaMemcpyAsync); on a copy
 *                stream it starts at max(clock[s], host): the link latency
 *                inside t(copy) covers the DMA's start. On the compute
 *                stream (a device-side move) it starts as a kernel would.
 *   record(s)    {s, items issued on s, max(clock[s], host)}: when the
 *                device reaches that point of s (an idle stream reaches it
 *                when it is recorded). Costs the host nothing: an event is
 *                a sequence number here, and the record's driver call is
 *                counted in the wait that nearly always follows it.
 *   wait(s, e)   clock[s] = max(clock[s], e.time); the host pays
 *                DELTA_SIM_WAIT_HOST_S for the call (none when e is of s
 *                itself or empty: the CUDA backend makes no call then).
 *   query(e)     e.time <= host. Free, and it does not move the host: a
 *                runtime that polls in a loop must sync instead.
 *   sync(e)      when e.time > host the host blocks: host = e.time +
 *                sync_wake_s. Nothing when e is already complete.
 *   span(e)      the item's start and end once end <= host.
 *   event_time   e.time once e.time <= host.
 *   clock()      the host clock.
 * So a step of many small kernels ends where the host's launches end
 * (host-bound: the device idles between kernels), and a step of large
 * kernels where the compute clock ends (device-bound: the host runs ahead,
 * up to the runtime's throttle). t(op) is the device's time alone, so dry
 * planning (delta_sim_op_seconds) sees no host costs.
 *
 * Memory. arena_create succeeds for any size with base NULL (only offsets
 * matter). host_alloc hands out unique fake addresses from a private
 * counter (starting at 1 MiB, each block padded to 4 KiB so the ranges never
 * overlap); they are tokens, never memory, and must not be dereferenced.
 * It returns NULL only when the fake address space would run out. */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_backend {
    delta_backend base;  /* base.ctx == this */
    const delta_gpu_preset *gpu;
    const delta_interconnect *ic; /* collectives' link */
    bool tensor_cores;
    double clock[DELTA_STREAM_COUNT]; /* when each stream's last item ends */
    double host;                      /* the host's clock */
    uint64_t seq[DELTA_STREAM_COUNT];
    /* start and end of every stream's items, by seq % DELTA_SPAN_HISTORY */
    double span[DELTA_STREAM_COUNT][DELTA_SPAN_HISTORY][2];
    uint64_t next_token;
} sim_backend;

#define TOKEN_START ((uint64_t)1 << 20)
#define TOKEN_ALIGN ((uint64_t)4096)
#define TOKEN_LIMIT ((uint64_t)1 << 62)

static double max2(double a, double b) { return a > b ? a : b; }

static bool gemm_like(delta_op_type t) {
    return t == DELTA_OP_MATMUL || t == DELTA_OP_LINEAR ||
           t == DELTA_OP_CONV2D || t == DELTA_OP_CONV2D_DX ||
           t == DELTA_OP_CONV2D_DW;
}

/* The device's fixed time per kernel: the description's, else the
 * constant. */
static double kernel_s(const delta_gpu_preset *gpu) {
    return gpu->kernel_s > 0 ? gpu->kernel_s : DELTA_SIM_LAUNCH_S;
}

/* The measured curve of kind k, or NULL; conv dx and dw fall back to
 * conv2d's curve and conv2d to gemm's (a convolution is a GEMM on
 * im2col's columns where nothing better was measured). */
static const delta_sim_curve *curve_of(const delta_sim_efficiency *e,
                                       delta_sim_kind k) {
    if (!e) return NULL;
    for (;;) {
        if (e->curve[k].n) return &e->curve[k];
        if (k == DELTA_SIM_KIND_CONV2D_DX || k == DELTA_SIM_KIND_CONV2D_DW)
            k = DELTA_SIM_KIND_CONV2D;
        else if (k == DELTA_SIM_KIND_CONV2D)
            k = DELTA_SIM_KIND_GEMM;
        else
            return NULL;
    }
}

double delta_sim_op_seconds(const delta_gpu_preset *gpu, bool tensor_cores,
                            const delta_op *op) {
    if (op->type == DELTA_OP_RESHAPE) return 0.0;
    bool g = gemm_like(op->type);
    double peak = g && op->dtype == DELTA_BF16 ? gpu->bf16_flops
                  : g && tensor_cores          ? gpu->tensor_flops
                                               : gpu->fp32_flops;
    double eff = g ? DELTA_SIM_EFF_GEMM : DELTA_SIM_EFF_OTHER;
    double eff_mem = DELTA_SIM_EFF_MEM;
    const delta_sim_efficiency *e = gpu->eff;
    delta_sim_kind kind = delta_sim_kind_of(op->type);
    const delta_sim_curve *cc = g ? curve_of(e, kind) : NULL;
    const delta_sim_curve *cm =
        curve_of(e, g ? DELTA_SIM_KIND_ELEMENTWISE : kind);
    if (cc) eff = delta_sim_curve_at(cc, op->flops);
    if (cm) eff_mem = delta_sim_curve_at(cm, op->bytes);
    double tc = op->flops / (peak * eff);
    double tm = op->bytes / (gpu->hbm_bytes_per_s * eff_mem);
    double t = kernel_s(gpu) + max2(tc, tm);
    if (e && e->op_factor[op->type] > 0) t *= e->op_factor[op->type];
    return t;
}

double delta_sim_copy_seconds(const delta_gpu_preset *gpu, double bytes) {
    return gpu->link_latency_s + bytes / gpu->link_bytes_per_s;
}

double delta_sim_copy_seconds_dir(const delta_gpu_preset *gpu, double bytes,
                                  bool to_host) {
    double bps = to_host ? gpu->link_to_host_bytes_per_s
                         : gpu->link_to_device_bytes_per_s;
    if (!(bps > 0)) return delta_sim_copy_seconds(gpu, bytes);
    return gpu->link_latency_s + bytes / bps;
}

static delta_status sim_arena_create(void *ctx, size_t bytes, void **base) {
    (void)ctx;
    (void)bytes;
    if (base) *base = NULL;
    return DELTA_OK;
}

static void sim_arena_destroy(void *ctx) { (void)ctx; }

static void *sim_host_alloc(void *ctx, size_t bytes) {
    sim_backend *sb = ctx;
    uint64_t n = (uint64_t)bytes;
    if (n >= TOKEN_LIMIT || sb->next_token >= TOKEN_LIMIT - n) return NULL;
    n = (n + TOKEN_ALIGN - 1) / TOKEN_ALIGN * TOKEN_ALIGN;
    if (n == 0) n = TOKEN_ALIGN;
    void *p = (void *)(uintptr_t)sb->next_token;
    sb->next_token += n;
    return p;
}

static void sim_host_free(void *ctx, void *p) {
    (void)ctx;
    (void)p;
}

/* Remembers the span of stream s's next item and counts it. */
static void add_item(sim_backend *sb, delta_stream s, double t0, double t1) {
    size_t slot = (size_t)(sb->seq[s] + 1) % DELTA_SPAN_HISTORY;
    sb->span[s][slot][0] = t0;
    sb->span[s][slot][1] = t1;
    sb->seq[s]++;
}

/* Issues a kernel (or a device-side move) of dev seconds on the compute
 * stream after host_s of host time. */
static void launch(sim_backend *sb, double host_s, double dev) {
    sb->host += host_s;
    double *c = &sb->clock[DELTA_STREAM_COMPUTE];
    double t0 = max2(*c + sb->gpu->kernel_gap_s,
                     sb->host + sb->gpu->launch_latency_s);
    *c = t0 + dev;
    add_item(sb, DELTA_STREAM_COMPUTE, t0, *c);
}

static void sim_run(void *ctx, const delta_kargs *k) {
    sim_backend *sb = ctx;
    const delta_op *op = k->op;
    if (op->type == DELTA_OP_RESHAPE) { /* a view: nothing is launched */
        double t = max2(sb->clock[DELTA_STREAM_COMPUTE], sb->host);
        add_item(sb, DELTA_STREAM_COMPUTE, t, t);
        return;
    }
    const delta_sim_efficiency *e = sb->gpu->eff;
    double host_s = sb->gpu->launch_host_s;
    if (gemm_like(op->type)) host_s += sb->gpu->library_host_s;
    if (e && e->op_host_s[op->type] > 0) host_s = e->op_host_s[op->type];
    launch(sb, host_s, delta_sim_op_seconds(sb->gpu, sb->tensor_cores, op));
}

/* Seconds of a collective op on the interconnect (its bytes are the
 * buffer's: cost.c). */
static double collective_seconds(const sim_backend *sb, const delta_op *op) {
    return delta_collective_seconds(sb->ic, op->a.ranks,
                                    op->type == DELTA_OP_ALLREDUCE, op->bytes);
}

/* A collective on the COMM stream: issued like a kernel (an NCCL call),
 * it starts when the stream is free and takes the ring's time. */
static void sim_collective(void *ctx, const delta_kargs *k) {
    sim_backend *sb = ctx;
    sb->host += sb->gpu->launch_host_s;
    double *c = &sb->clock[DELTA_STREAM_COMM];
    double t0 = max2(*c, sb->host + sb->gpu->launch_latency_s);
    *c = t0 + collective_seconds(sb, k->op);
    add_item(sb, DELTA_STREAM_COMM, t0, *c);
}

/* Seconds of a copy of `bytes` in one direction that starts while the
 * other direction stays busy for `busy_s` more seconds (<= 0: idle): the
 * link's latency, then its transfer at (duplex - 1) of the direction's
 * rate while they overlap and at the whole rate after. */
static double shared_copy_seconds(const delta_gpu_preset *gpu, double bytes,
                                  bool to_host, double busy_s) {
    double alone = delta_sim_copy_seconds_dir(gpu, bytes, to_host);
    double duplex = gpu->link_duplex > 0 ? gpu->link_duplex : 2;
    if (duplex >= 2 || busy_s <= gpu->link_latency_s) return alone;
    double work = alone - gpu->link_latency_s; /* at the whole rate */
    double window = busy_s - gpu->link_latency_s;
    double share = duplex - 1;
    if (work <= share * window) return gpu->link_latency_s + work / share;
    return gpu->link_latency_s + window + (work - share * window);
}

static void sim_copy(void *ctx, delta_stream s, void *dst, const void *src,
                     size_t bytes) {
    sim_backend *sb = ctx;
    (void)dst;
    (void)src;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT && s != DELTA_STREAM_COMM);
    if (s == DELTA_STREAM_COMPUTE) {
        const delta_sim_curve *cm =
            curve_of(sb->gpu->eff, DELTA_SIM_KIND_ELEMENTWISE);
        double eff = cm ? delta_sim_curve_at(cm, 2.0 * (double)bytes)
                        : DELTA_SIM_EFF_MEM;
        launch(sb, sb->gpu->launch_host_s,
               kernel_s(sb->gpu) +
                   2.0 * (double)bytes / (sb->gpu->hbm_bytes_per_s * eff));
        return;
    }
    sb->host += sb->gpu->launch_host_s;
    double t0 = max2(sb->clock[s], sb->host);
    delta_stream other = s == DELTA_STREAM_TO_HOST ? DELTA_STREAM_TO_DEVICE
                                                   : DELTA_STREAM_TO_HOST;
    sb->clock[s] = t0 + shared_copy_seconds(sb->gpu, (double)bytes,
                                            s == DELTA_STREAM_TO_HOST,
                                            sb->clock[other] - t0);
    add_item(sb, s, t0, sb->clock[s]);
}

static delta_event sim_record(void *ctx, delta_stream s) {
    sim_backend *sb = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    return (delta_event){s, sb->seq[s], max2(sb->clock[s], sb->host)};
}

static void sim_wait(void *ctx, delta_stream s, delta_event e) {
    sim_backend *sb = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT &&
                 (unsigned)e.stream < DELTA_STREAM_COUNT);
    DELTA_ASSERTF(e.seq <= sb->seq[e.stream], "event %llu of stream %d was "
                  "never recorded", (unsigned long long)e.seq, (int)e.stream);
    if (e.stream == s || e.seq == 0) return; /* nothing to wait for */
    sb->host += DELTA_SIM_WAIT_HOST_S;
    sb->clock[s] = max2(sb->clock[s], e.time);
}

static bool sim_query(void *ctx, delta_event e) {
    sim_backend *sb = ctx;
    return e.time <= sb->host;
}

static void sim_sync(void *ctx, delta_event e) {
    sim_backend *sb = ctx;
    if (e.time <= sb->host) return; /* complete: the host does not block */
    sb->host = e.time + sb->gpu->sync_wake_s;
}

static bool sim_span(void *ctx, delta_event e, double *t0, double *t1) {
    sim_backend *sb = ctx;
    DELTA_ASSERT((unsigned)e.stream < DELTA_STREAM_COUNT);
    if (e.seq == 0 || e.seq > sb->seq[e.stream] ||
        sb->seq[e.stream] - e.seq >= DELTA_SPAN_HISTORY)
        return false;
    size_t slot = (size_t)e.seq % DELTA_SPAN_HISTORY;
    if (sb->span[e.stream][slot][1] > sb->host) return false; /* running */
    *t0 = sb->span[e.stream][slot][0];
    *t1 = sb->span[e.stream][slot][1];
    return true;
}

static bool sim_event_time(void *ctx, delta_event e, double *t) {
    if (!sim_query(ctx, e)) return false;
    *t = e.time;
    return true;
}

static double sim_clock(void *ctx) {
    sim_backend *sb = ctx;
    return sb->host;
}

static double sim_op_cost(void *ctx, const delta_op *op) {
    sim_backend *sb = ctx;
    if (delta_op_is_collective(op->type)) return collective_seconds(sb, op);
    return delta_sim_op_seconds(sb->gpu, sb->tensor_cores, op);
}

static void sim_destroy(void *ctx) { free(ctx); }

static const delta_backend_ops sim_ops = {
    .arena_create = sim_arena_create,
    .arena_destroy = sim_arena_destroy,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .run = sim_run,
    .collective = sim_collective,
    .copy = sim_copy,
    .record = sim_record,
    .wait = sim_wait,
    .query = sim_query,
    .sync = sim_sync,
    .span = sim_span,
    .event_time = sim_event_time,
    .clock = sim_clock,
    .op_cost = sim_op_cost,
    .destroy = sim_destroy,
};

delta_backend *delta_backend_sim_new(const delta_sim_backend_opts *opts,
                                     char *err, size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    const char *name = opts && opts->gpu ? opts->gpu : "v100-16g";
    const delta_gpu_preset *gpu = opts && opts->device
                                      ? opts->device
                                      : delta_gpu_preset_find(name);
    if (!gpu) {
        char names[256] = "";
        size_t len = 0;
        for (const delta_gpu_preset *p = delta_gpu_presets(); p->name; p++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s",
                             len ? ", " : "", p->name);
            if (w < 0 || (size_t)w >= sizeof names - len) break;
            len += (size_t)w;
        }
        snprintf(err, err_len, "unknown GPU preset '%s' (known: %s)", name,
                 names);
        return NULL;
    }
    sim_backend *sb = calloc(1, sizeof *sb);
    if (!sb) {
        snprintf(err, err_len, "sim backend: out of host memory");
        return NULL;
    }
    sb->gpu = gpu;
    sb->ic = opts && opts->interconnect ? opts->interconnect
                                        : delta_interconnect_find("nvlink");
    sb->tensor_cores = opts && opts->tensor_cores;
    sb->next_token = TOKEN_START;
    sb->base.name = "sim";
    sb->base.ops = &sim_ops;
    sb->base.ctx = sb;
    sb->base.link_bps = gpu->link_bytes_per_s;
    sb->base.link_latency_s = gpu->link_latency_s;
    sb->base.device_bytes = gpu->memory_bytes;
    sb->base.has_data = false;
    sb->base.computes_bf16 = true;
    return &sb->base;
}
