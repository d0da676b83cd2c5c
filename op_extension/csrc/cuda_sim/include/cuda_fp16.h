// 16-bit float types as the CPU harness provides them (see cuda_sim/half.h).
#pragma once
#include "cuda_sim/half.h"
