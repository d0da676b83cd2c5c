// The CUDA kernels' interface: launchers that take raw device pointers, sizes,
// strides and the stream to launch on. Nothing here knows torch, so the .cu
// files compile with plain nvcc (CI does that on a machine without a GPU).
//
// The args structs are the torch-free contract of kernel/cpu/cpu_kernels.h
// (same fields, same meaning: dense row-major tensors unless a stride says
// otherwise, outputs never alias inputs), so one glue (torch_ext/ops/<op>.h)
// fills them for every device. Pointers here point to device memory. Each .cu
// file registers its launchers in the kernels' stubs (OP_EXT_REGISTER_CUDA_KERNEL
// below), where the device glue (torch_ext/cuda/cuda_ops.cpp, the CUDA harness)
// finds them: a new kernel adds no line to a shared file.
//
// Every launcher returns without launching when there is nothing to compute,
// launches on `stream` only, and never synchronises or allocates, so that it can
// be captured in a CUDA graph. The caller checks for launch errors afterwards.
// Norm backward and add_backward sum over rows in two passes through a
// caller-allocated workspace (of *_workspace_bytes bytes; may be 0), in a
// fixed order, so their results are bit-identical run after run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "../cpu/cpu_kernels.h"

namespace op_ext::cuda {

using cpu::AddArgs;
using cpu::DType;
using cpu::GeluApprox;
using cpu::GeluArgs;
using cpu::GeluBackwardArgs;
using cpu::GluArgs;
using cpu::GluBackwardArgs;
using cpu::kMaxDims;
using cpu::LayerNormArgs;
using cpu::LayerNormBackwardArgs;
using cpu::ReduceToArgs;
using cpu::RmsNormArgs;
using cpu::RmsNormBackwardArgs;
using cpu::SoftmaxArgs;
using cpu::SoftmaxBackwardArgs;

// elementwise.cu
void add_forward(DType dtype, const AddArgs& args, cudaStream_t stream);
size_t reduce_to_workspace_bytes(DType dtype, const ReduceToArgs& args);
void reduce_to(DType dtype, const ReduceToArgs& args, void* workspace, cudaStream_t stream);

// activation.cu
void gelu_forward(DType dtype, const GeluArgs& args, cudaStream_t stream);
void gelu_backward(DType dtype, const GeluBackwardArgs& args, cudaStream_t stream);
void swiglu_forward(DType dtype, const GluArgs& args, cudaStream_t stream);
void swiglu_backward(DType dtype, const GluBackwardArgs& args, cudaStream_t stream);
void geglu_forward(DType dtype, const GluArgs& args, cudaStream_t stream);
void geglu_backward(DType dtype, const GluBackwardArgs& args, cudaStream_t stream);

// norm.cu
void rms_norm_forward(DType dtype, const RmsNormArgs& args, cudaStream_t stream);
size_t rms_norm_backward_workspace_bytes(DType dtype, const RmsNormBackwardArgs& args);
void rms_norm_backward(DType dtype, const RmsNormBackwardArgs& args, void* workspace,
                       cudaStream_t stream);
void layer_norm_forward(DType dtype, const LayerNormArgs& args, cudaStream_t stream);
size_t layer_norm_backward_workspace_bytes(DType dtype, const LayerNormBackwardArgs& args);
void layer_norm_backward(DType dtype, const LayerNormBackwardArgs& args, void* workspace,
                         cudaStream_t stream);

// softmax.cu
void softmax_forward(DType dtype, const SoftmaxArgs& args, cudaStream_t stream);
void softmax_backward(DType dtype, const SoftmaxBackwardArgs& args, cudaStream_t stream);

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
