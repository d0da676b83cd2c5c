// custom::rotary_embedding_table_backward on the CPU harness, as
// torch.ops.cuda_sim.rotary_embedding_table_backward (op_extension.cuda_sim.run):
// the op's own glue (torch_ext/ops/rotary_embedding.h) running its CUDA kernel,
// compiled here by g++. The op has no prototype, so the harness module's
// generated registration does not name it; this file adds it with a fragment.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>

#include "../../kernel/cuda/rotary_embedding.cuh"
#include "../../torch_ext/ops/rotary_embedding.h"

namespace op_ext {
namespace {

// The Kernels of the glue (glue_util.h) for this op: the launcher on the harness,
// its outputs filled with NaN bits first (as the module does for every
// prototype's outputs), so a table element the kernel leaves unwritten shows.
struct TableSimKernels {
  explicit TableSimKernels(const Tensor&) {}

  void operator()(const cpu::RotaryEmbeddingTableBackward& kernel, cpu::DType dtype,
                  const cpu::RotaryTableGradArgs& args) const {
    const size_t bytes = static_cast<size_t>(args.table_rows * args.dim) * element_bytes(dtype);
    for (void* out : {args.grad_cos, args.grad_sin}) {
      if (out != nullptr) std::memset(out, 0xff, bytes);
    }
    cuda::launcher(kernel)(dtype, args, nullptr, nullptr);
  }

  static size_t element_bytes(cpu::DType dtype) {
    switch (dtype) {
      case cpu::DType::Float64:
        return 8;
      case cpu::DType::Float32:
        return 4;
      default:
        return 2;
    }
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(cuda_sim, m) {
  m.def(glue::kRotaryTableBackwardSchema);
}

TORCH_LIBRARY_IMPL(cuda_sim, CPU, m) {
  m.impl(glue::kRotaryTableBackward, &glue::rotary_embedding_table_backward<TableSimKernels>);
}

}  // namespace op_ext
