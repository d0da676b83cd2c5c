// CPU implementations of the custom ops: every op's glue (ops/<op>.h: checks,
// dense inputs, outputs) running the CPU kernel stubs, which pick the
// instruction-set variant (kernel/cpu/cpu_kernels.h).
#include <torch/library.h>

#include "op_ext_glue.h"

namespace op_ext {
namespace {

struct CpuKernels {
  explicit CpuKernels(const Tensor&) {}

  template <typename Kernel>
  void operator()(const Kernel& kernel, cpu::DType dtype, const typename Kernel::ArgsType& args) const {
    kernel(dtype, args);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  glue::register_ops<CpuKernels>(m);
}

}  // namespace op_ext
