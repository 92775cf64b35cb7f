/* delta — train deep networks inside a fixed device-memory budget.
 * The umbrella header: include this one. */
#ifndef DELTA_H
#define DELTA_H

#include "delta/common.h"
#include "delta/graph.h"
#include "delta/exec.h"
#include "delta/cpu.h"
#include "delta/safetensors.h"
#include "delta/models.h"
#include "delta/data.h"
#include "delta/backend.h"
#include "delta/pool.h"
#include "delta/dryplan.h"
#include "delta/session.h"
#include "delta/train.h"
#include "delta/comm.h"
#include "delta/calibrate.h"
#include "delta/tokenizer.h"

#endif
