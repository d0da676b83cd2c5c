// A probe of rotary_embedding's CUDA launchers on the CPU harness, for
// tests/test_cuda_sim_rope.py: torch.ops.cuda_sim.rotary_embedding_launchers.
// An op's own test entries live in files of their own like this one (setup.py
// compiles every file of csrc/cuda_sim/probes into op_extension._cuda_sim), and
// add to the cuda_sim library with a fragment: no shared file names the op.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>

#include "../../kernel/cuda/rotary_embedding.cuh"
#include "../../torch_ext/checks.h"

namespace op_ext {
namespace {

// rotary_embedding's launchers called directly, without an op's glue (the op's
// glue, which calls them once for q and once for k, lives in torch_ext): x is
// [..., dim], dense; cos and sin are dense rows of dim elements; the cos/sin row
// of x's row (r_0, ..., r_{n-1}) is sum_d r_d * cos_row_strides[d], over x's
// leading dims. The output sits between two guards of NaN bits, which must
// survive the launch: a write past either end of the output raises.
at::Tensor rotary_embedding_launchers(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                      c10::IntArrayRef cos_row_strides, bool backward) {
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
  at::Tensor buffer = at::empty({n + 2 * kGuard}, x.options());
  std::memset(buffer.data_ptr(), 0xff, static_cast<size_t>(buffer.numel()) * x.element_size());
  at::Tensor out = buffer.narrow(0, kGuard, n).view(x.sizes());
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

TORCH_LIBRARY_FRAGMENT(cuda_sim, m) {
  m.def("rotary_embedding_launchers(Tensor x, Tensor cos, Tensor sin, int[] cos_row_strides, bool backward) -> Tensor",
        &rotary_embedding_launchers);
}

}  // namespace op_ext
