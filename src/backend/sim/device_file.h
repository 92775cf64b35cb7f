/* Device files (device_file.c): the JSON side, for the code that writes
 * them (delta calibrate, src/backend/calibrate.c). Loading is public:
 * delta_gpu_file_load in include/delta/backend.h. */
#ifndef DELTA_SIM_DEVICE_FILE_H
#define DELTA_SIM_DEVICE_FILE_H

#include <cjson/cJSON.h>

#include "delta/backend.h"

/* g as a device file's object: "format", "version", "name",
 * "description", every figure delta_gpu_file_load requires, "kernel_s",
 * and with g->eff its "efficiency" curves and "op_factors". NULL when out
 * of memory; the caller owns it (cJSON_Delete). */
cJSON *delta_gpu_file_json(const delta_gpu_preset *g);

#endif
