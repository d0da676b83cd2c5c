// The machinery every CUDA kernel shares: the registration of a .cu file's
// launchers in its kernels' stubs (OP_EXT_REGISTER_CUDA_KERNEL below), where the
// device glue (torch_ext/cuda/cuda_ops.cpp, the CUDA harness) finds them. The
// launchers take raw device pointers, sizes, strides and the stream to launch
// on, and are declared in their op's own header, kernel/cuda/<op>.cuh, with the
// args structs of kernel/cpu/<op>.h: a new op adds no line here. Nothing here
// knows torch, so the .cu files compile with plain nvcc (CI does that on a
// machine without a GPU).
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

}  // namespace op_ext::cuda

#define OP_EXT_CUDA_CONCAT_INNER(a, b) a##b
#define OP_EXT_CUDA_CONCAT(a, b) OP_EXT_CUDA_CONCAT_INNER(a, b)

// In namespace op_ext::cuda of a .cu file: `launcher(dtype, args, stream)` becomes
// the CUDA launcher of the stub cpu::<stub>, run at load time of the extension.
#define OP_EXT_REGISTER_CUDA_KERNEL(stub, launcher)                                                     \
  static const bool OP_EXT_CUDA_CONCAT(op_ext_cuda_registered_, stub) = [] {                            \
    using StubArgs = decltype(::op_ext::cpu::stub)::ArgsType;                                           \
    ::op_ext::cpu::stub.cuda_fn = [](::op_ext::cpu::DType d, const StubArgs& a,                         \
                                     const ::op_ext::cpu::DeviceLaunch& l) {                            \
      launcher(d, a, static_cast<cudaStream_t>(l.stream));                                              \
    };                                                                                                  \
    return true;                                                                                        \
  }()

// The same for a launcher that takes a workspace, `launcher(dtype, args,
// workspace, stream)`, of `workspace_bytes(dtype, args)` bytes that the device
// glue allocates on the stream.
#define OP_EXT_REGISTER_CUDA_KERNEL_WITH_WORKSPACE(stub, launcher, workspace_bytes)                     \
  static const bool OP_EXT_CUDA_CONCAT(op_ext_cuda_registered_, stub) = [] {                            \
    using StubArgs = decltype(::op_ext::cpu::stub)::ArgsType;                                           \
    ::op_ext::cpu::stub.cuda_fn = [](::op_ext::cpu::DType d, const StubArgs& a,                         \
                                     const ::op_ext::cpu::DeviceLaunch& l) {                            \
      launcher(d, a, l.workspace, static_cast<cudaStream_t>(l.stream));                                 \
    };                                                                                                  \
    ::op_ext::cpu::stub.cuda_workspace_bytes = &workspace_bytes;                                        \
    return true;                                                                                        \
  }()
