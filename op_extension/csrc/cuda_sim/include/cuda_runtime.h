// The CUDA runtime as the CPU harness provides it (see cuda_sim/runtime.h).
#pragma once
#include "cuda_sim/runtime.h"
