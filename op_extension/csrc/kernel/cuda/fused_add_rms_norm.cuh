// FusedAddRmsNorm (fused_add_rms_norm) on CUDA: no launchers of its own; it runs
// RMSNorm's (rms_norm.cuh), as on the CPU (../cpu/fused_add_rms_norm.h).
#pragma once

#include "../cpu/fused_add_rms_norm.h"
#include "rms_norm.cuh"
