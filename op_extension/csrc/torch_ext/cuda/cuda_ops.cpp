// CUDA implementations of the custom ops: every op's glue (../ops/<op>.h:
// checks, dense inputs, outputs) running each kernel's CUDA launcher, which
// `cuda::launcher(kernel)` (kernel/cuda/<op>.cuh, all included by the generated
// op_ext_cuda_launchers.h) names and the linker binds to this library's .cu code.
//
// Every launch happens under a device guard for the tensors' device, on that
// device's current stream (so user streams, CUDA graphs and
// torch.compile(mode="reduce-overhead") see our kernels where they expect
// them), and is followed by a launch-error check. Workspaces come from
// PyTorch's caching allocator on the same stream, so they are graph-safe too.
// Only built when setup.py builds the CUDA extension (OP_EXT_WITH_CUDA).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "op_ext_cuda_launchers.h"
#include "op_ext_glue.h"

namespace op_ext {
namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  glue::register_ops<CudaKernels>(m);
}

}  // namespace op_ext
