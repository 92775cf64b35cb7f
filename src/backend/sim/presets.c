/* Simulated GPU presets.
 *
 * Sources (public spec sheets; the table in the project's REFERENCES.md):
 *  - V100 SXM2: NVIDIA Tesla V100 GPU Accelerator datasheet (2018):
 *    15.7 TFLOP/s fp32, 125 TFLOP/s tensor (fp16), 900 GB/s HBM2, 16 or
 *    32 GB.
 *  - A100 SXM4: NVIDIA A100 Tensor Core GPU datasheet (2021): 19.5 TFLOP/s
 *    fp32, 156 TFLOP/s tf32 dense (312 bf16 dense), 1,555 GB/s HBM2 (40 GB)
 *    and 2,039 GB/s HBM2e (80 GB).
 *  - H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (2023): 67 TFLOP/s
 *    fp32, 495 TFLOP/s tf32 dense (989 bf16 dense), 3.35 TB/s HBM3, 80 GB.
 *  - H200 SXM: NVIDIA H200 Tensor Core GPU datasheet (2024): the H100's
 *    compute (67 TFLOP/s fp32, 495 tf32 dense, 989 bf16 dense) with 141 GB
 *    of HBM3e at 4.8 TB/s. The "141 GB" is the usable part of six 24 GiB
 *    stacks: nvidia-smi shows 143,771 MiB (140.4 GiB) on the lent H200s,
 *    so 140 GiB is taken here.
 *  - Host link, per direction: PCIe 3/4/5 x16 are 15.75/31.5/63 GB/s raw;
 *    pinned-memory cudaMemcpyAsync reaches about 12/25/50 GB/s (the
 *    effective figures of NVIDIA's bandwidthTest on such hosts, ~80% of
 *    raw). Latency: ~10 us per copy (launch plus DMA setup), the same for
 *    every generation.
 *
 * Memory: the nominal capacity in GiB (16 GiB = 16 x 2^30 bytes; HBM stacks
 * come in binary sizes). What a program can use is a little less (nvidia-smi
 * reports e.g. 16,160 MiB on a V100-16GB, and the CUDA context takes a few
 * hundred MiB); a budget is given explicitly anyway, this is its ceiling.
 * tensor_flops is tf32 dense on A100/H100 (fp32 training on tensor cores)
 * and fp16 on V100, which has no tf32. bf16_flops is the dense BF16
 * tensor-core peak: 312 T on A100, 989 T on H100 (the datasheets above);
 * V100 has no BF16 units, so its fp16 tensor peak (125 T) stands in: a
 * BF16 program priced on a V100 is what an fp16 one would cost there.
 *
 * The host's side (HOST_SIDE below, the same for every preset: these costs
 * are the host CPU's and the driver's, not the GPU's, and no public source
 * separates them by GPU generation). Estimates, not calibrated on a GPU of
 * delta's; docs/DEVICE.md ("Host clock") gives the sources:
 *  - launch_host_s 3 us: host time in cudaLaunchKernel (and, taken the
 *    same, cudaMemcpyAsync). ~3 us measured on an RTX 3080 (velox PR 6096);
 *    at most 3.8 us on a V100 (NVIDIA's "Getting Started with CUDA Graphs":
 *    2.9 us kernels issued back to back ran at 3.8 us each, and they kept
 *    the GPU busy); 4-6 us per launch-and-wait on CUDA 13 (pegainfer blog).
 *  - library_host_s 6 us more for a cuBLAS or cuDNN call (a GEMM's kernel
 *    choice, cuDNN's descriptors): an estimate, no public figure found.
 *  - launch_latency_s 2 us and sync_wake_s 2 us: the Graphs post's 9.6 us
 *    per kernel when the host waits for each, less the 2.9 us kernel and
 *    the launch, leaves ~3.7 us for latency plus wake-up; split evenly,
 *    in line with a blocking wait costing ~2.4 us more than spinning
 *    (CUDA.jl PR 896: 7.1 us vs 4.7 us for a tiny kernel and its wait). */
#include "delta/backend.h"

#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define T 1e12
#define GB 1e9
#define US 1e-6

#define HOST_SIDE                                                          \
    .launch_host_s = 3 * US, .library_host_s = 6 * US,                    \
    .launch_latency_s = 2 * US, .sync_wake_s = 2 * US

static const delta_gpu_preset presets[] = {
    {.name = "v100-16g",
     .description = "NVIDIA V100 SXM2 16 GB, PCIe 3 x16 host link",
     .memory_bytes = 16 * GIB, .fp32_flops = 15.7 * T,
     .tensor_flops = 125 * T, .bf16_flops = 125 * T, .hbm_bytes_per_s = 900 * GB,
     .link_bytes_per_s = 12 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = "v100-32g",
     .description = "NVIDIA V100 SXM2 32 GB, PCIe 3 x16 host link",
     .memory_bytes = 32 * GIB, .fp32_flops = 15.7 * T,
     .tensor_flops = 125 * T, .bf16_flops = 125 * T, .hbm_bytes_per_s = 900 * GB,
     .link_bytes_per_s = 12 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = "a100-40g",
     .description = "NVIDIA A100 SXM4 40 GB, PCIe 4 x16 host link",
     .memory_bytes = 40 * GIB, .fp32_flops = 19.5 * T,
     .tensor_flops = 156 * T, .bf16_flops = 312 * T, .hbm_bytes_per_s = 1555 * GB,
     .link_bytes_per_s = 25 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = "a100-80g",
     .description = "NVIDIA A100 SXM4 80 GB, PCIe 4 x16 host link",
     .memory_bytes = 80 * GIB, .fp32_flops = 19.5 * T,
     .tensor_flops = 156 * T, .bf16_flops = 312 * T, .hbm_bytes_per_s = 2039 * GB,
     .link_bytes_per_s = 25 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = "h100-80g",
     .description = "NVIDIA H100 SXM5 80 GB, PCIe 5 x16 host link",
     .memory_bytes = 80 * GIB, .fp32_flops = 67 * T,
     .tensor_flops = 495 * T, .bf16_flops = 989 * T, .hbm_bytes_per_s = 3350 * GB,
     .link_bytes_per_s = 50 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = "h200-141g",
     .description = "NVIDIA H200 SXM 141 GB, PCIe 5 x16 host link",
     .memory_bytes = 140 * GIB, .fp32_flops = 67 * T,
     .tensor_flops = 495 * T, .bf16_flops = 989 * T, .hbm_bytes_per_s = 4800 * GB,
     .link_bytes_per_s = 50 * GB, .link_latency_s = 10 * US, HOST_SIDE},
    {.name = NULL},
};

/* The GPUs' links for data parallel (docs/DEVICE.md, "Interconnects"): the
 * raw per-direction rate of one GPU's link from NVIDIA's datasheets at the
 * ~80% that transfers reach (as for the host links above), and NCCL's own
 * per-step latency of a ring with its Simple protocol (the hwLat table of
 * NCCL's cost model, src/graph/tuning.cc: NVLink 3.4, PCI 5.7, network
 * 14 us). */
static const delta_interconnect interconnects[] = {
    {.name = "nvlink",
     .description = "NVLink 4 (H100 SXM5: 900 GB/s both ways, 450 per "
                    "direction), one node",
     .bytes_per_s = 360 * GB, .latency_s = 3.4 * US},
    {.name = "pcie",
     .description = "PCIe 5 x16 between GPUs (63 GB/s per direction)",
     .bytes_per_s = 50 * GB, .latency_s = 5.7 * US},
    {.name = "infiniband",
     .description = "InfiniBand NDR, one 400 Gb/s ConnectX-7 per GPU (50 "
                    "GB/s per direction), across nodes",
     .bytes_per_s = 40 * GB, .latency_s = 14 * US},
    {.name = NULL},
};

const delta_interconnect *delta_interconnects(void) { return interconnects; }

const delta_interconnect *delta_interconnect_find(const char *name) {
    if (!name) return NULL;
    for (const delta_interconnect *p = interconnects; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

double delta_collective_seconds(const delta_interconnect *ic, int ranks,
                                bool allreduce, double bytes) {
    if (ranks <= 1) return 0;
    double steps = (double)(ranks - 1) * (allreduce ? 2 : 1);
    return steps / ranks * bytes / ic->bytes_per_s + steps * ic->latency_s;
}

const delta_gpu_preset *delta_gpu_presets(void) { return presets; }

const delta_gpu_preset *delta_gpu_preset_find(const char *name) {
    if (!name) return NULL;
    for (const delta_gpu_preset *p = presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}
