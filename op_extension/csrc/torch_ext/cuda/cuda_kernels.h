// CudaKernels: how the CUDA glue runs a kernel (the Kernels type of glue_util.h),
// shared by cuda_ops.cpp, which registers every prototype's glue with it, and the
// files here that register an op without a prototype (op_defs.extra_ops()). Only
// built with the CUDA extension.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "op_ext_cuda_launchers.h"
#include "../glue_util.h"

namespace op_ext {

class CudaKernels {
 public:
  // Only remembers where the op's tensors are; the glue's checks run next.
  explicit CudaKernels(const Tensor& ref) : options_(ref.options()) {}

  // Runs the kernel's CUDA launcher with the workspace it asks for.
  template <typename Kernel>
  void operator()(const Kernel& kernel, cpu::DType dtype, const typename Kernel::ArgsType& args) const {
    const auto launcher = cuda::launcher(kernel);
    const size_t workspace_bytes = launcher.workspace_bytes(dtype, args);
    const Tensor workspace = workspace_bytes > 0 ? allocate(workspace_bytes) : Tensor();
    launch([&](cudaStream_t s) { launcher(dtype, args, workspace.defined() ? workspace.data_ptr() : nullptr, s); });
  }

 private:
  // Freed when the caller returns: the caching allocator only hands the block
  // out again for work queued after ours on the same stream.
  Tensor allocate(size_t bytes) const {
    return at::empty({static_cast<int64_t>(bytes)}, options_.dtype(at::kByte));
  }

  template <typename Launcher>
  void launch(const Launcher& launcher) const {
    const c10::cuda::CUDAGuard guard(options_.device());
    launcher(c10::cuda::getCurrentCUDAStream(options_.device().index()).stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  at::TensorOptions options_;
};

}  // namespace op_ext
