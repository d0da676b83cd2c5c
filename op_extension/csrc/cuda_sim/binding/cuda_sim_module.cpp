// op_extension._cuda_sim: the CUDA kernels (kernel/cuda/*.cu, compiled by g++
// with OP_EXT_CUDA_SIM) run on the CPU harness, for CPU tensors.
//
// The ops are the real ones: the shared glue (torch_ext/ops_glue.h: checks,
// dense inputs, outputs, args structs) with a Kernels type that calls the CUDA
// launchers, registered as torch.ops.cuda_sim.<op> with the schemas of
// torch.ops.custom.<op>. So the sim runs exactly what cuda_ops.cpp runs on a
// GPU; only the memory is the host's. Every output (and workspace) is filled with
// NaN bits before the launch, so an element a kernel forgets to write shows.
#include <torch/extension.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include "../../kernel/cuda/cuda_kernels.h"
#include "../../kernel/cuda/rotary_embedding.cuh"
#include "../../torch_ext/ops_glue.h"
#include "cuda_sim/runtime.h"
#include "op_ext_schemas.h"

extern "C" void op_ext_cuda_sim_run_misuse_kernel(const char* name);
extern "C" float op_ext_cuda_sim_order_dependent_sum();

namespace op_ext {
namespace {

size_t element_size(cpu::DType d) {
  switch (d) {
    case cpu::DType::Float64:
      return 8;
    case cpu::DType::Float32:
      return 4;
    default:
      return 2;
  }
}

class SimKernels {
 public:
  explicit SimKernels(const Tensor&) {}

  void add(cpu::DType d, const cpu::AddArgs& a) const {
    int64_t n = 1;
    for (int i = 0; i < a.ndim; ++i) n *= a.sizes[i];
    poison(a.out, n, d);
    cuda::add_forward(d, a, nullptr);
  }
  void reduce_to(cpu::DType d, const cpu::ReduceToArgs& a) const {
    int64_t n = 1;
    for (int i = 0; i < a.ndim; ++i) n *= a.reduced[i] ? 1 : a.sizes[i];
    poison(a.out, n, d);
    const Tensor ws = workspace(cuda::reduce_to_workspace_bytes(d, a));
    cuda::reduce_to(d, a, ws.data_ptr(), nullptr);
  }
  void gelu_forward(cpu::DType d, const cpu::GeluArgs& a) const {
    poison(a.output, a.n, d);
    cuda::gelu_forward(d, a, nullptr);
  }
  void gelu_backward(cpu::DType d, const cpu::GeluBackwardArgs& a) const {
    poison(a.grad_input, a.n, d);
    cuda::gelu_backward(d, a, nullptr);
  }
  void swiglu_forward(cpu::DType d, const cpu::GluArgs& a) const {
    poison(a.output, a.n, d);
    cuda::swiglu_forward(d, a, nullptr);
  }
  void swiglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    poison(a.grad_gate, a.n, d);
    poison(a.grad_up, a.n, d);
    cuda::swiglu_backward(d, a, nullptr);
  }
  void geglu_forward(cpu::DType d, const cpu::GluArgs& a) const {
    poison(a.output, a.n, d);
    cuda::geglu_forward(d, a, nullptr);
  }
  void geglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    poison(a.grad_gate, a.n, d);
    poison(a.grad_up, a.n, d);
    cuda::geglu_backward(d, a, nullptr);
  }
  void rms_norm_forward(cpu::DType d, const cpu::RmsNormArgs& a) const {
    poison(a.output, a.rows * a.cols, d);
    poison(a.residual_out, a.rows * a.cols, d);
    cuda::rms_norm_forward(d, a, nullptr);
  }
  void rms_norm_backward(cpu::DType d, const cpu::RmsNormBackwardArgs& a) const {
    poison(a.grad_input, a.rows * a.cols, d);
    poison(a.grad_weight, a.cols, d);
    const Tensor ws = workspace(cuda::rms_norm_backward_workspace_bytes(d, a));
    cuda::rms_norm_backward(d, a, ws.data_ptr(), nullptr);
  }
  void layer_norm_forward(cpu::DType d, const cpu::LayerNormArgs& a) const {
    poison(a.output, a.rows * a.cols, d);
    cuda::layer_norm_forward(d, a, nullptr);
  }
  void layer_norm_backward(cpu::DType d, const cpu::LayerNormBackwardArgs& a) const {
    poison(a.grad_input, a.rows * a.cols, d);
    poison(a.grad_weight, a.cols, d);
    poison(a.grad_bias, a.cols, d);
    const Tensor ws = workspace(cuda::layer_norm_backward_workspace_bytes(d, a));
    cuda::layer_norm_backward(d, a, ws.data_ptr(), nullptr);
  }
  void softmax_forward(cpu::DType d, const cpu::SoftmaxArgs& a) const {
    poison(a.output, a.outer * a.dim_size * a.inner, d);
    cuda::softmax_forward(d, a, nullptr);
  }
  void softmax_backward(cpu::DType d, const cpu::SoftmaxBackwardArgs& a) const {
    poison(a.grad_input, a.outer * a.dim_size * a.inner, d);
    cuda::softmax_backward(d, a, nullptr);
  }
  void rotary_embedding_forward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    poison(a.output, a.rows * a.dim, d);
    cuda::rotary_embedding_forward(d, a, nullptr);
  }
  void rotary_embedding_backward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    poison(a.output, a.rows * a.dim, d);
    cuda::rotary_embedding_backward(d, a, nullptr);
  }

 private:
  // All-ones bits: NaN in every floating dtype.
  static void poison(void* p, int64_t n, cpu::DType d) {
    if (p != nullptr && n > 0) std::memset(p, 0xff, static_cast<size_t>(n) * element_size(d));
  }
  static Tensor workspace(size_t bytes) {
    Tensor t = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
    if (bytes > 0) std::memset(t.data_ptr(), 0xff, bytes);
    return t;
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
  m.def("set_arch", &op_ext::set_arch);
  m.def("set_block_order", &op_ext::set_block_order);
  m.def("_run_misuse", &op_ext_cuda_sim_run_misuse_kernel);
  m.def("_order_dependent_sum", &op_ext_cuda_sim_order_dependent_sum);
  m.def("_rotary_embedding", &op_ext::rotary_embedding_kernel, "rotary_embedding's CUDA launchers on "
        "the harness: (x, cos, sin, cos_row_strides, backward) -> out; see op_extension.cuda_sim");
}
