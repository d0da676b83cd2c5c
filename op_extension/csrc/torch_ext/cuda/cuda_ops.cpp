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
#include <torch/library.h>

#include "cuda_kernels.h"
#include "op_ext_glue.h"

namespace op_ext {

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  glue::register_ops<CudaKernels>(m);
}

}  // namespace op_ext
