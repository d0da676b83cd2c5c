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

// The kernels, as the glue names them: their CPU variants filled in by norm.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/norm.cu and bound to them by cuda::launcher (../cuda/layer_norm.cuh).
struct LayerNormForward final : KernelStub<LayerNormArgs> {
  using KernelStub::KernelStub;
};
inline LayerNormForward layer_norm_forward{"layer_norm_forward"};
struct LayerNormBackward final : KernelStub<LayerNormBackwardArgs> {
  using KernelStub::KernelStub;
};
inline LayerNormBackward layer_norm_backward{"layer_norm_backward"};

}  // namespace op_ext::cpu
