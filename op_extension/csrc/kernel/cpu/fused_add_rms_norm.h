// FusedAddRmsNorm (fused_add_rms_norm): no kernels of its own. It runs RMSNorm's
// (rms_norm.h) with RmsNormArgs::residual set (residual_out = input + residual,
// then RMSNorm of it), and its backward with RmsNormBackwardArgs::grad_residual_out.
#pragma once

#include "rms_norm.h"
