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
 * and fp16 on V100, which has no tf32. */
#include "delta/backend.h"

#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define T 1e12
#define GB 1e9
#define US 1e-6

static const delta_gpu_preset presets[] = {
    {"v100-16g", "NVIDIA V100 SXM2 16 GB, PCIe 3 x16 host link",
     16 * GIB, 15.7 * T, 125 * T, 900 * GB, 12 * GB, 10 * US},
    {"v100-32g", "NVIDIA V100 SXM2 32 GB, PCIe 3 x16 host link",
     32 * GIB, 15.7 * T, 125 * T, 900 * GB, 12 * GB, 10 * US},
    {"a100-40g", "NVIDIA A100 SXM4 40 GB, PCIe 4 x16 host link",
     40 * GIB, 19.5 * T, 156 * T, 1555 * GB, 25 * GB, 10 * US},
    {"a100-80g", "NVIDIA A100 SXM4 80 GB, PCIe 4 x16 host link",
     80 * GIB, 19.5 * T, 156 * T, 2039 * GB, 25 * GB, 10 * US},
    {"h100-80g", "NVIDIA H100 SXM5 80 GB, PCIe 5 x16 host link",
     80 * GIB, 67 * T, 495 * T, 3350 * GB, 50 * GB, 10 * US},
    {NULL, NULL, 0, 0, 0, 0, 0, 0},
};

const delta_gpu_preset *delta_gpu_presets(void) { return presets; }

const delta_gpu_preset *delta_gpu_preset_find(const char *name) {
    if (!name) return NULL;
    for (const delta_gpu_preset *p = presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}
