// Add (add) on CUDA: the launchers (raw device pointers, the stream; no torch, so
// plain nvcc compiles them), defined in elementwise.cu. add_backward runs
// reduce_to, which sums over rows through a caller-allocated workspace of
// reduce_to_workspace_bytes bytes (may be 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda_kernels.h"
#include "../cpu/add.h"

namespace op_ext::cuda {

// elementwise.cu names them unqualified.
using cpu::AddArgs;
using cpu::ReduceToArgs;

void add_forward(DType dtype, const cpu::AddArgs& args, cudaStream_t stream);
size_t reduce_to_workspace_bytes(DType dtype, const cpu::ReduceToArgs& args);
void reduce_to(DType dtype, const cpu::ReduceToArgs& args, void* workspace, cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/add.h.
constexpr Launcher<cpu::AddArgs> launcher(const cpu::AddForward&) { return {&add_forward}; }
constexpr Launcher<cpu::ReduceToArgs> launcher(const cpu::ReduceTo&) {
  return {&reduce_to, &reduce_to_workspace_bytes};
}

}  // namespace op_ext::cuda
