// CUDA implementations of the custom ops: the shared glue (../ops_glue.h:
// checks, dense inputs, outputs) running the CUDA launchers of
// kernel/cuda/cuda_kernels.h.
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

#include "../../kernel/cuda/cuda_kernels.h"
#include "../../kernel/cuda/rotary_embedding.cuh"
#include "../ops_glue.h"

namespace op_ext {
namespace {

class CudaKernels {
 public:
  // Only remembers where the op's tensors are; the glue's checks run next.
  explicit CudaKernels(const Tensor& ref) : options_(ref.options()) {}

  void add(cpu::DType d, const cpu::AddArgs& a) const {
    launch([&](cudaStream_t s) { cuda::add_forward(d, a, s); });
  }
  void reduce_to(cpu::DType d, const cpu::ReduceToArgs& a) const {
    const Tensor workspace = allocate(cuda::reduce_to_workspace_bytes(d, a));
    launch([&](cudaStream_t s) { cuda::reduce_to(d, a, workspace.data_ptr(), s); });
  }
  void gelu_forward(cpu::DType d, const cpu::GeluArgs& a) const {
    launch([&](cudaStream_t s) { cuda::gelu_forward(d, a, s); });
  }
  void gelu_backward(cpu::DType d, const cpu::GeluBackwardArgs& a) const {
    launch([&](cudaStream_t s) { cuda::gelu_backward(d, a, s); });
  }
  void swiglu_forward(cpu::DType d, const cpu::GluArgs& a) const {
    launch([&](cudaStream_t s) { cuda::swiglu_forward(d, a, s); });
  }
  void swiglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    launch([&](cudaStream_t s) { cuda::swiglu_backward(d, a, s); });
  }
  void geglu_forward(cpu::DType d, const cpu::GluArgs& a) const {
    launch([&](cudaStream_t s) { cuda::geglu_forward(d, a, s); });
  }
  void geglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    launch([&](cudaStream_t s) { cuda::geglu_backward(d, a, s); });
  }
  void rms_norm_forward(cpu::DType d, const cpu::RmsNormArgs& a) const {
    launch([&](cudaStream_t s) { cuda::rms_norm_forward(d, a, s); });
  }
  void rms_norm_backward(cpu::DType d, const cpu::RmsNormBackwardArgs& a) const {
    const Tensor workspace = allocate(cuda::rms_norm_backward_workspace_bytes(d, a));
    launch([&](cudaStream_t s) { cuda::rms_norm_backward(d, a, workspace.data_ptr(), s); });
  }
  void layer_norm_forward(cpu::DType d, const cpu::LayerNormArgs& a) const {
    launch([&](cudaStream_t s) { cuda::layer_norm_forward(d, a, s); });
  }
  void layer_norm_backward(cpu::DType d, const cpu::LayerNormBackwardArgs& a) const {
    const Tensor workspace = allocate(cuda::layer_norm_backward_workspace_bytes(d, a));
    launch([&](cudaStream_t s) { cuda::layer_norm_backward(d, a, workspace.data_ptr(), s); });
  }
  void softmax_forward(cpu::DType d, const cpu::SoftmaxArgs& a) const {
    launch([&](cudaStream_t s) { cuda::softmax_forward(d, a, s); });
  }
  void softmax_backward(cpu::DType d, const cpu::SoftmaxBackwardArgs& a) const {
    launch([&](cudaStream_t s) { cuda::softmax_backward(d, a, s); });
  }
  void rotary_embedding_forward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    launch([&](cudaStream_t s) { cuda::rotary_embedding_forward(d, a, s); });
  }
  void rotary_embedding_backward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    launch([&](cudaStream_t s) { cuda::rotary_embedding_backward(d, a, s); });
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
