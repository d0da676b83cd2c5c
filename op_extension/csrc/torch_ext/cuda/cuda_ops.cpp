// CUDA implementations of the custom ops: every op's glue (../ops/<op>.h:
// checks, dense inputs, outputs) running the CUDA launchers that the .cu files
// registered in the kernels' stubs (kernel/cuda/cuda_kernels.h).
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

#include "op_ext_glue.h"

namespace op_ext {
namespace {

class CudaKernels {
 public:
  // Only remembers where the op's tensors are; the glue's checks run next.
  explicit CudaKernels(const Tensor& ref) : options_(ref.options()) {}

  // Runs the CUDA launcher that the kernel's .cu file registered in its stub,
  // with the workspace it asks for.
  template <typename Args>
  void operator()(const cpu::KernelStub<Args>& kernel, cpu::DType dtype, const Args& args) const {
    TORCH_CHECK(kernel.cuda_fn != nullptr, "op_extension: the kernel ", kernel.name,
                " has no CUDA launcher (its .cu file registers none with OP_EXT_REGISTER_CUDA_KERNEL)");
    const Tensor workspace =
        kernel.cuda_workspace_bytes != nullptr ? allocate(kernel.cuda_workspace_bytes(dtype, args)) : Tensor();
    launch([&](cudaStream_t s) {
      kernel.cuda_fn(dtype, args, {s, workspace.defined() ? workspace.data_ptr() : nullptr});
    });
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
