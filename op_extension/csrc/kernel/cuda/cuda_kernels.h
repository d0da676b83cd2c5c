// The machinery every CUDA kernel shares: Launcher, through which the device glue
// (torch_ext/cuda/cuda_ops.cpp, the CUDA harness) runs a kernel. The launchers
// take raw device pointers, sizes, strides and the stream to launch on, and are
// declared in their op's own header, kernel/cuda/<op>.cuh, with the args structs
// of kernel/cpu/<op>.h and one `launcher(kernel)` per kernel, which names the
// launcher the glue runs for that kernel: a new op adds no line here. Nothing here
// knows torch, so the .cu files compile with plain nvcc (CI does that on a
// machine without a GPU).
//
// The binding is made at compile and link time, as vLLM's ops.h does: the glue
// calls `cuda::launcher(cpu::rms_norm_forward)`, which returns the address of
// cuda::rms_norm_forward, defined by the .cu file built into the same library.
// Nothing is written at load time, so two libraries of one process that both
// hold the kernels (_C built by nvcc, _cuda_sim by g++ for the CPU harness)
// cannot overwrite each other's launchers.
//
// The args structs are the torch-free contract of the CPU kernels (same fields,
// same meaning: dense row-major tensors unless a stride says otherwise, outputs
// never alias inputs), so one glue (torch_ext/ops/<op>.h) fills them for every
// device; here their pointers point to device memory.
//
// Every launcher returns without launching when there is nothing to compute,
// launches on `stream` only, and never synchronises or allocates, so that it can
// be captured in a CUDA graph. The caller checks for launch errors afterwards.
// A launcher that sums over rows (norm backward, add_backward) does it in two
// passes through a workspace the caller allocates (of its *_workspace_bytes
// bytes; may be 0), in a fixed order, so its results are bit-identical run
// after run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "../cpu/cpu_kernels.h"

namespace op_ext::cuda {

// Op-independent; every launcher takes a DType.
using cpu::DType;
using cpu::kMaxDims;

// The CUDA launcher of one kernel, as its op's header binds it:
//   constexpr Launcher<RmsNormArgs> launcher(const cpu::RmsNormForward&) { return {&rms_norm_forward}; }
// or, for a launcher that takes a workspace of workspace_bytes(dtype, args) bytes
// (which the device glue allocates on the stream):
//   constexpr Launcher<RmsNormBackwardArgs> launcher(const cpu::RmsNormBackward&) {
//     return {&rms_norm_backward, &rms_norm_backward_workspace_bytes};
//   }
template <typename Args>
struct Launcher {
  using Plain = void (*)(DType, const Args&, cudaStream_t);
  using WithWorkspace = void (*)(DType, const Args&, void*, cudaStream_t);
  using WorkspaceBytes = size_t (*)(DType, const Args&);

  constexpr Launcher(Plain launch) : plain(launch) {}
  constexpr Launcher(WithWorkspace launch, WorkspaceBytes bytes) : with_workspace(launch), workspace_bytes_fn(bytes) {}

  // Bytes of workspace the launch needs (0: none).
  size_t workspace_bytes(DType dtype, const Args& args) const {
    return workspace_bytes_fn != nullptr ? workspace_bytes_fn(dtype, args) : 0;
  }

  void operator()(DType dtype, const Args& args, void* workspace, cudaStream_t stream) const {
    if (with_workspace != nullptr) {
      with_workspace(dtype, args, workspace, stream);
    } else {
      plain(dtype, args, stream);
    }
  }

  Plain plain = nullptr;
  WithWorkspace with_workspace = nullptr;
  WorkspaceBytes workspace_bytes_fn = nullptr;
};

}  // namespace op_ext::cuda
