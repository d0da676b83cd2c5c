// LayerNorm (layer_norm): the torch-free contract of its kernels, shared by the CPU
// kernels (norm.cpp) and the CUDA launchers (../cuda/layer_norm.cuh).
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {

// Row-wise: the input is seen as [rows, cols] (cols = prod(normalized_shape)).
struct LayerNormArgs {
  const void* input;   // [rows, cols]
  const void* weight;  // [cols] or nullptr
  const void* bias;    // [cols] or nullptr
  void* output;        // [rows, cols]
  int64_t rows;
  int64_t cols;
  double eps;
};

struct LayerNormBackwardArgs {
  const void* grad_output;  // [rows, cols]
  const void* input;        // [rows, cols]
  const void* weight;       // [cols] or nullptr
  void* grad_input;         // [rows, cols]
  void* grad_weight;        // [cols] or nullptr
  void* grad_bias;          // [cols] or nullptr
  int64_t rows;
  int64_t cols;
  double eps;
};

// The kernels, as the glue names them: filled by norm.cpp, once per
// instruction set (register_kernel.h), and by ../cuda/norm.cu with its
// CUDA launchers (OP_EXT_REGISTER_CUDA_KERNEL_WITH_WORKSPACE for the backward).
inline KernelStub<LayerNormArgs> layer_norm_forward{"layer_norm_forward"};
inline KernelStub<LayerNormBackwardArgs> layer_norm_backward{"layer_norm_backward"};

}  // namespace op_ext::cpu
