// op_extension._cuda_sim: the CUDA kernels (kernel/cuda/*.cu, compiled by g++
// with OP_EXT_CUDA_SIM) run on the CPU harness, for CPU tensors.
//
// The ops are the real ones: every op's glue (torch_ext/ops/<op>.h: checks,
// dense inputs, outputs, args structs) with a Kernels type that calls the CUDA
// launchers registered in the kernels' stubs, registered as
// torch.ops.cuda_sim.<op> with the schemas of torch.ops.custom.<op> (both
// generated from the prototypes). So the sim runs exactly what cuda_ops.cpp runs
// on a GPU; only the memory is the host's. Every output (and workspace) is filled
// with NaN bits before the launch, so an element a kernel forgets to write shows.
#include <torch/extension.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>

#include "../../kernel/cuda/rotary_embedding.cuh"
#include "cuda_sim/runtime.h"
#include "op_ext_glue.h"
#include "op_ext_schemas.h"

extern "C" void op_ext_cuda_sim_run_misuse_kernel(const char* name);
extern "C" float op_ext_cuda_sim_order_dependent_sum();

namespace op_ext {
namespace {

// Every CPU allocation made while one of this module's ops runs (its outputs,
// the CUDA launchers' workspaces) is filled with NaN bits first, so an element
// a kernel forgets to write shows in the tests, whatever the op. The module's
// ops run on the CPU, so their allocations come from torch's CPU allocator,
// which this one wraps; outside an op it passes allocations through untouched.
thread_local int poisoning_depth = 0;

class PoisoningAllocator final : public c10::Allocator {
 public:
  explicit PoisoningAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr data = base_->allocate(bytes);
    // All-ones bits: NaN in every floating dtype.
    if (poisoning_depth > 0 && bytes > 0) std::memset(data.get(), 0xff, bytes);
    return data;
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  bool is_simple_data_ptr(const c10::DataPtr& data) const override { return base_->is_simple_data_ptr(data); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

void install_poisoning_allocator() {
  static PoisoningAllocator allocator(c10::GetCPUAllocator());
  // Priority 1: above torch's default CPU allocator (0).
  c10::SetCPUAllocator(&allocator, 1);
}

// Runs each kernel's CUDA launcher (registered in its stub by the .cu file,
// compiled here by g++) on the harness, with the workspace it asks for.
class SimKernels {
 public:
  explicit SimKernels(const Tensor&) { ++poisoning_depth; }
  ~SimKernels() { --poisoning_depth; }
  SimKernels(const SimKernels&) = delete;
  SimKernels& operator=(const SimKernels&) = delete;

  template <typename Args>
  void operator()(const cpu::KernelStub<Args>& kernel, cpu::DType dtype, const Args& args) const {
    TORCH_CHECK(kernel.cuda_fn != nullptr, "cuda_sim: the kernel ", kernel.name,
                " has no CUDA launcher (its .cu file registers none with OP_EXT_REGISTER_CUDA_KERNEL)");
    const Tensor workspace = kernel.cuda_workspace_bytes != nullptr
                                 ? at::empty({static_cast<int64_t>(kernel.cuda_workspace_bytes(dtype, args))}, at::kByte)
                                 : Tensor();
    kernel.cuda_fn(dtype, args, {nullptr, workspace.defined() ? workspace.data_ptr() : nullptr});
  }
};

void set_arch(const std::string& arch) {
  if (arch == "sm_80") {
    cuda_sim::set_arch(cuda_sim::Arch::Sm80);
  } else if (arch == "sm_90") {
    cuda_sim::set_arch(cuda_sim::Arch::Sm90);
  } else {
    TORCH_CHECK_VALUE(false, "cuda_sim: arch must be sm_80 or sm_90, got ", arch);
  }
}

void set_block_order(const std::string& order) {
  if (order == "linear") {
    cuda_sim::set_block_order(cuda_sim::BlockOrder::Linear);
  } else if (order == "reverse") {
    cuda_sim::set_block_order(cuda_sim::BlockOrder::Reverse);
  } else {
    TORCH_CHECK_VALUE(false, "cuda_sim: block_order must be linear or reverse, got ", order);
  }
}

// rotary_embedding's launchers called directly, without an op's glue (the op's
// glue, which calls them once for q and once for k, lives in torch_ext): x is
// [..., dim], dense; cos and sin are dense rows of dim elements; the cos/sin row
// of x's row (r_0, ..., r_{n-1}) is sum_d r_d * cos_row_strides[d], over x's
// leading dims. The output sits between two guards of NaN bits, which must
// survive the launch: a write past either end of the output raises.
Tensor rotary_embedding_kernel(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               const std::vector<int64_t>& cos_row_strides, bool backward) {
  constexpr const char* op = "cuda_sim rotary_embedding";
  TORCH_CHECK_TYPE(x.scalar_type() == cos.scalar_type() && x.scalar_type() == sin.scalar_type(), op,
                   ": x, cos and sin must have one dtype, got ", x.scalar_type(), ", ",
                   cos.scalar_type(), ", ", sin.scalar_type());
  const cpu::DType dtype = kernel_dtype(x.scalar_type());
  TORCH_CHECK_VALUE(x.dim() >= 2 && x.dim() - 1 <= cpu::kMaxDims, op, ": x must have 2 to ",
                    cpu::kMaxDims + 1, " dims, got shape ", x.sizes());
  TORCH_CHECK_VALUE(x.is_contiguous() && cos.is_contiguous() && sin.is_contiguous(), op,
                    ": x, cos and sin must be contiguous");
  const int64_t dim = x.size(-1);
  TORCH_CHECK_VALUE(dim > 0 && dim % 2 == 0, op, ": the last dim must be even and > 0, got ", dim);
  TORCH_CHECK_VALUE(cos.sizes() == sin.sizes() && cos.dim() >= 1 && cos.size(-1) == dim, op,
                    ": cos and sin must have one shape, with last dim ", dim, ", got ", cos.sizes(),
                    " and ", sin.sizes());
  const int ndim = static_cast<int>(x.dim() - 1);
  TORCH_CHECK_VALUE(static_cast<int>(cos_row_strides.size()) == ndim, op, ": ", ndim,
                    " cos_row_strides expected (one per leading dim of x), got ", cos_row_strides.size());
  cpu::RotaryEmbeddingArgs args{};
  args.ndim = ndim;
  args.dim = dim;
  args.rows = 1;
  int64_t last_cos_row = 0;
  for (int d = 0; d < ndim; ++d) {
    TORCH_CHECK_VALUE(cos_row_strides[d] >= 0, op, ": cos_row_strides must be >= 0");
    args.sizes[d] = x.size(d);
    args.cos_row_strides[d] = cos_row_strides[d];
    args.rows *= x.size(d);
    last_cos_row += (x.size(d) - 1) * cos_row_strides[d];
  }
  const int64_t cos_rows = cos.numel() / dim;
  TORCH_CHECK_VALUE(args.rows == 0 || last_cos_row < cos_rows, op, ": cos_row_strides reach cos row ",
                    last_cos_row, " of ", cos_rows);
  // [guard | output | guard], every bit set: NaN in every floating dtype.
  constexpr int64_t kGuard = 256;
  const int64_t n = x.numel();
  Tensor buffer = at::empty({n + 2 * kGuard}, x.options());
  std::memset(buffer.data_ptr(), 0xff, static_cast<size_t>(buffer.numel()) * x.element_size());
  Tensor out = buffer.narrow(0, kGuard, n).view(x.sizes());
  args.input = x.data_ptr();
  args.cos = cos.data_ptr();
  args.sin = sin.data_ptr();
  args.output = out.data_ptr();
  if (backward) {
    cuda::rotary_embedding_backward(dtype, args, nullptr);
  } else {
    cuda::rotary_embedding_forward(dtype, args, nullptr);
  }
  const auto* bytes = static_cast<const unsigned char*>(buffer.data_ptr());
  const size_t guard_bytes = static_cast<size_t>(kGuard) * x.element_size();
  const size_t tail = static_cast<size_t>(kGuard + n) * x.element_size();
  for (size_t b = 0; b < guard_bytes; ++b) {
    TORCH_CHECK(bytes[b] == 0xff && bytes[tail + b] == 0xff, op,
                ": the kernel wrote out of bounds of its output, ",
                bytes[b] != 0xff ? "before its start" : "past its end");
  }
  return out;
}

}  // namespace

// The same schemas as torch.ops.custom (registration.cpp), in their own namespace.
TORCH_LIBRARY(cuda_sim, m) {
  for (const char* schema : generated::kSchemas) m.def(schema);
}

TORCH_LIBRARY_IMPL(cuda_sim, CPU, m) {
  glue::register_ops<SimKernels>(m);
}

}  // namespace op_ext

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CUDA kernels on the CPU harness; see op_extension.cuda_sim";
  op_ext::install_poisoning_allocator();
  m.def("set_arch", &op_ext::set_arch);
  m.def("set_block_order", &op_ext::set_block_order);
  m.def("_run_misuse", &op_ext_cuda_sim_run_misuse_kernel);
  m.def("_order_dependent_sum", &op_ext_cuda_sim_order_dependent_sum);
  m.def("_rotary_embedding", &op_ext::rotary_embedding_kernel, "rotary_embedding's CUDA launchers on "
        "the harness: (x, cos, sin, cos_row_strides, backward) -> out; see op_extension.cuda_sim");
}
