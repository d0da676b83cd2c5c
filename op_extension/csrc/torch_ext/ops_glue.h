// The device-independent half of every op's glue: check the inputs, lay them
// out densely, allocate the outputs and fill the kernel's args struct. Each
// device file (cpu_ops.cpp, cuda/cuda_ops.cpp) supplies a `Kernels` type that
// runs one args struct on its device and registers glue::<op><Kernels> under
// its dispatch key, so every device applies the same checks, in the same order,
// with the same messages.
//
// A Kernels type is constructed from the op's first tensor (before any check:
// it may only remember the device) and has one const member per kernel:
//   void add(DType, const AddArgs&), reduce_to, gelu_forward, gelu_backward,
//   swiglu_forward, swiglu_backward, geglu_forward, geglu_backward,
//   rms_norm_forward, rms_norm_backward, layer_norm_forward, layer_norm_backward,
//   softmax_forward, softmax_backward, rotary_embedding_forward,
//   rotary_embedding_backward.
// The args structs are the torch-free contract of kernel/cpu/cpu_kernels.h,
// which the CUDA kernels take as well.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernel/cpu/rotary_embedding.h"
#include "checks.h"
#include "op_ext_schemas.h"

namespace op_ext::glue {

namespace gen = op_ext::generated;
using cpu::DType;
using cpu::GeluApprox;

// ---- output layout ----------------------------------------------------------------

// The layout torch's elementwise ops (and F.rms_norm, written with them) give their
// output: that of the operands when they all share one dense, non-overlapping
// layout other than row-major (channels_last, a transpose, ...); row-major
// otherwise. _fake.py's keeps_layout applies the same rule.
inline bool keeps_layout(const Tensor& a) { return !a.is_contiguous() && a.is_non_overlapping_and_dense(); }

inline bool keeps_layout(const Tensor& a, const Tensor& b) {
  return keeps_layout(a) && b.sizes() == a.sizes() && b.strides() == a.strides();
}

inline bool keeps_layout(const Tensor& a, const Tensor& b, const Tensor& c) {
  return keeps_layout(a, b) && keeps_layout(a, c);
}

// A row-major result put in `like`'s layout, for kernels that need row-major rows.
inline Tensor in_layout_of(const Tensor& like, const Tensor& result) {
  Tensor out = at::empty_like(like);
  out.copy_(result);
  return out;
}

// torch's rms_norm keeps a channels_last (3d) input's memory format, and gives
// any other layout a row-major output: a row-major result converted to it.
inline Tensor in_memory_format_of(const Tensor& like, const Tensor& result) {
  const auto format = like.suggest_memory_format();
  if (format == at::MemoryFormat::Contiguous || like.is_contiguous()) return result;
  return result.contiguous(format);
}

// ---- add ----------------------------------------------------------------------

inline std::vector<int64_t> broadcast_shape(const char* op, IntArrayRef a, IntArrayRef b) {
  const size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> out(nd);
  for (const auto i : c10::irange(nd)) {
    const int64_t sa = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t sb = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    TORCH_CHECK_VALUE(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b,
                      " are not broadcastable (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

// Element strides of `t` seen through the broadcast `shape` (0 on broadcast dims).
inline std::vector<int64_t> broadcast_strides(const Tensor& t, IntArrayRef shape) {
  const int64_t offset = static_cast<int64_t>(shape.size()) - t.dim();
  std::vector<int64_t> strides(shape.size(), 0);
  for (const auto d : c10::irange(t.dim())) {
    strides[d + offset] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  return strides;
}

// The input checks of each op, shared with the npu glue (npu/npu_ops.cpp).
// They return what the checks computed on the way.

inline std::vector<int64_t> check_add(const char* op, const Tensor& input, const Tensor& other) {
  check_dtype(op, input, "input", gen::kAddDtypes);
  check_same(op, input, "input", other, "other");
  return broadcast_shape(op, input.sizes(), other.sizes());
}

inline void check_add_backward(const char* op, const Tensor& grad_output, IntArrayRef input_size) {
  check_dtype(op, grad_output, "grad_output", gen::kAddBackwardDtypes);
  check_add_backward_size(op, grad_output, input_size);
}

template <typename Kernels>
Tensor add(const Tensor& input, const Tensor& other, double alpha) {
  constexpr const char* op = "custom::add";
  const Kernels kernels(input);
  const auto shape = check_add(op, input, other);
  if (keeps_layout(input, other)) {
    // Same shape, same dense layout: element i of each is at the same offset, so
    // the kernel adds the storage as one flat run, into an output of that layout.
    Tensor out = at::empty_like(input);
    cpu::AddArgs args{};
    args.a = input.const_data_ptr();
    args.b = other.const_data_ptr();
    args.out = out.mutable_data_ptr();
    args.alpha = alpha;
    args.ndim = 1;
    args.sizes[0] = input.numel();
    args.a_strides[0] = 1;
    args.b_strides[0] = 1;
    kernels.add(kernel_dtype(input.scalar_type()), args);
    return out;
  }
  Tensor out = at::empty(shape, input.options());
  if (out.numel() == 0) return out;

  cpu::AddArgs args{};
  args.a = input.const_data_ptr();
  args.b = other.const_data_ptr();
  args.out = out.mutable_data_ptr();
  args.alpha = alpha;
  // Drop size-1 dims and merge neighbours that both operands walk contiguously,
  // so that the kernel's inner loop is as long as possible.
  const auto sa = broadcast_strides(input, shape);
  const auto sb = broadcast_strides(other, shape);
  int nd = 0;
  for (const auto d : c10::irange(shape.size())) {
    if (shape[d] == 1) continue;
    if (nd > 0 && args.a_strides[nd - 1] == sa[d] * shape[d] &&
        args.b_strides[nd - 1] == sb[d] * shape[d]) {
      args.sizes[nd - 1] *= shape[d];
      args.a_strides[nd - 1] = sa[d];
      args.b_strides[nd - 1] = sb[d];
      continue;
    }
    if (nd == cpu::kMaxDims) {  // too many dims to walk: densify and walk flat
      const Tensor a = input.expand(shape).contiguous();
      const Tensor b = other.expand(shape).contiguous();
      return glue::add<Kernels>(a, b, alpha);
    }
    args.sizes[nd] = shape[d];
    args.a_strides[nd] = sa[d];
    args.b_strides[nd] = sb[d];
    ++nd;
  }
  if (nd == 0) {  // every dim is 1: a single element
    args.sizes[0] = 1;
    nd = 1;
  }
  args.ndim = nd;
  kernels.add(kernel_dtype(input.scalar_type()), args);
  return out;
}

template <typename Kernels>
Tensor add_backward(const Tensor& grad_output, IntArrayRef input_size, double alpha) {
  constexpr const char* op = "custom::add_backward";
  const Kernels kernels(grad_output);
  check_add_backward(op, grad_output, input_size);
  const int64_t nd = grad_output.dim();
  const int64_t offset = nd - static_cast<int64_t>(input_size.size());
  const Tensor grad = grad_output.contiguous();

  // Group neighbouring dims that are all kept or all summed over.
  std::vector<std::pair<int64_t, bool>> groups;  // (size, reduced)
  for (const auto d : c10::irange(nd)) {
    const int64_t size = grad_output.size(d);
    if (size == 1) continue;
    const bool reduced = d < offset || input_size[d - offset] == 1;
    if (!groups.empty() && groups.back().second == reduced) {
      groups.back().first *= size;
    } else {
      groups.emplace_back(size, reduced);
    }
  }
  if (groups.empty()) groups.emplace_back(1, false);
  const DType dtype = kernel_dtype(grad_output.scalar_type());

  if (groups.size() <= static_cast<size_t>(cpu::kMaxDims)) {
    Tensor out = at::empty(input_size, grad_output.options());
    cpu::ReduceToArgs args{};
    args.grad = grad.const_data_ptr();
    args.out = out.mutable_data_ptr();
    args.alpha = alpha;
    args.ndim = static_cast<int>(groups.size());
    for (const auto i : c10::irange(groups.size())) {
      args.sizes[i] = groups[i].first;
      args.reduced[i] = groups[i].second;
    }
    kernels.reduce_to(dtype, args);
    return out;
  }
  // More alternations than the kernel walks at once: sum one group at a time,
  // each a [before, group, after] -> [before, after] reduction, last group first.
  Tensor current = grad;
  bool scaled = false;
  for (size_t g = groups.size(); g-- > 0;) {
    if (!groups[g].second) continue;
    int64_t before = 1, after = 1;
    for (size_t i = 0; i < g; ++i) before *= groups[i].first;
    for (size_t i = g + 1; i < groups.size(); ++i) after *= groups[i].first;
    Tensor next = at::empty({before * after}, grad.options());
    cpu::ReduceToArgs args{};
    args.grad = current.const_data_ptr();
    args.out = next.mutable_data_ptr();
    args.alpha = scaled ? 1.0 : alpha;
    args.ndim = 3;
    args.sizes[0] = before;
    args.sizes[1] = groups[g].first;
    args.sizes[2] = after;
    args.reduced[1] = true;
    kernels.reduce_to(dtype, args);
    scaled = true;
    groups[g].first = 1;
    current = next;
  }
  return current.view(input_size);
}

// ---- activations --------------------------------------------------------------

inline GeluApprox check_gelu(const char* op, const Tensor& input, c10::string_view approximate) {
  check_dtype(op, input, "input", gen::kGeluDtypes);
  return parse_gelu_approximate(op, approximate);
}

inline GeluApprox check_gelu_backward(const char* op, const Tensor& grad_output,
                                      const Tensor& input, c10::string_view approximate) {
  check_dtype(op, input, "input", gen::kGeluBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  return parse_gelu_approximate(op, approximate);
}

template <typename Kernels>
Tensor gelu(const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu";
  const Kernels kernels(input);
  const auto approx = check_gelu(op, input, approximate);
  // Elementwise: a dense layout other than row-major is walked as it lies.
  const bool keep = keeps_layout(input);
  const Tensor x = keep ? input : input.contiguous();
  Tensor out = keep ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  kernels.gelu_forward(kernel_dtype(x.scalar_type()),
                       {x.const_data_ptr(), out.mutable_data_ptr(), x.numel(), approx});
  return out;
}

template <typename Kernels>
Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu_backward";
  const Kernels kernels(input);
  const auto approx = check_gelu_backward(op, grad_output, input, approximate);
  const bool keep = keeps_layout(input, grad_output);
  const Tensor x = keep ? input : input.contiguous();
  const Tensor dy = keep ? grad_output : grad_output.contiguous();
  Tensor dx = keep ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  kernels.gelu_backward(kernel_dtype(x.scalar_type()), {dy.const_data_ptr(), x.const_data_ptr(),
                                                        dx.mutable_data_ptr(), x.numel(), approx});
  return dx;
}

template <size_t N>
void check_glu(const char* op, const Tensor& gate, const Tensor& up,
               const std::array<c10::ScalarType, N>& dtypes) {
  check_dtype(op, gate, "gate", dtypes);
  check_same(op, gate, "gate", up, "up");
  check_same_shape(op, gate, "gate", up, "up");
}

inline GeluApprox check_geglu(const char* op, const Tensor& gate, const Tensor& up,
                              c10::string_view approximate) {
  check_glu(op, gate, up, gen::kGegluDtypes);
  return parse_gelu_approximate(op, approximate);
}

// `launch(dtype, args)` runs the device's SwiGLU or GEGLU kernel.
template <typename Launch>
Tensor glu_forward(const Launch& launch, const Tensor& gate, const Tensor& up, GeluApprox approx) {
  const bool keep = keeps_layout(gate, up);
  const Tensor g = keep ? gate : gate.contiguous();
  const Tensor u = keep ? up : up.contiguous();
  Tensor out = keep ? at::empty_like(g) : at::empty(g.sizes(), g.options());
  launch(kernel_dtype(g.scalar_type()),
         cpu::GluArgs{g.const_data_ptr(), u.const_data_ptr(), out.mutable_data_ptr(), g.numel(),
                      approx});
  return out;
}

// The backward ops' checks (CPU, CUDA and npu glue call these, in this order).
inline void check_swiglu_backward(const char* op, const Tensor& grad_output, const Tensor& gate,
                                  const Tensor& up) {
  check_glu(op, gate, up, gen::kSwigluBackwardDtypes);
  check_same(op, gate, "gate", grad_output, "grad_output");
  check_same_shape(op, gate, "gate", grad_output, "grad_output");
}

inline GeluApprox check_geglu_backward(const char* op, const Tensor& grad_output,
                                       const Tensor& gate, const Tensor& up,
                                       c10::string_view approximate) {
  check_glu(op, gate, up, gen::kGegluBackwardDtypes);
  const auto approx = parse_gelu_approximate(op, approximate);
  check_same(op, gate, "gate", grad_output, "grad_output");
  check_same_shape(op, gate, "gate", grad_output, "grad_output");
  return approx;
}

// After check_swiglu_backward / check_geglu_backward.
template <typename Launch>
std::tuple<Tensor, Tensor> glu_backward(const Launch& launch, const Tensor& grad_output,
                                        const Tensor& gate, const Tensor& up, GeluApprox approx) {
  const bool keep = keeps_layout(gate, up, grad_output);
  const Tensor dy = keep ? grad_output : grad_output.contiguous();
  const Tensor g = keep ? gate : gate.contiguous();
  const Tensor u = keep ? up : up.contiguous();
  Tensor dg = keep ? at::empty_like(g) : at::empty(g.sizes(), g.options());
  Tensor du = keep ? at::empty_like(g) : at::empty(g.sizes(), g.options());
  launch(kernel_dtype(g.scalar_type()),
         cpu::GluBackwardArgs{dy.const_data_ptr(), g.const_data_ptr(), u.const_data_ptr(),
                              dg.mutable_data_ptr(), du.mutable_data_ptr(), g.numel(), approx});
  return {dg, du};
}

template <typename Kernels>
Tensor swiglu(const Tensor& gate, const Tensor& up) {
  constexpr const char* op = "custom::swiglu";
  const Kernels kernels(gate);
  check_glu(op, gate, up, gen::kSwigluDtypes);
  return glu_forward([&](DType d, const cpu::GluArgs& a) { kernels.swiglu_forward(d, a); }, gate,
                     up, GeluApprox::None);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> swiglu_backward(const Tensor& grad_output, const Tensor& gate,
                                           const Tensor& up) {
  constexpr const char* op = "custom::swiglu_backward";
  const Kernels kernels(gate);
  check_swiglu_backward(op, grad_output, gate, up);
  return glu_backward(
      [&](DType d, const cpu::GluBackwardArgs& a) { kernels.swiglu_backward(d, a); },
      grad_output, gate, up, GeluApprox::None);
}

template <typename Kernels>
Tensor geglu(const Tensor& gate, const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu";
  const Kernels kernels(gate);
  const auto approx = check_geglu(op, gate, up, approximate);
  return glu_forward([&](DType d, const cpu::GluArgs& a) { kernels.geglu_forward(d, a); }, gate,
                     up, approx);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> geglu_backward(const Tensor& grad_output, const Tensor& gate,
                                          const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu_backward";
  const Kernels kernels(gate);
  const auto approx = check_geglu_backward(op, grad_output, gate, up, approximate);
  return glu_backward(
      [&](DType d, const cpu::GluBackwardArgs& a) { kernels.geglu_backward(d, a); },
      grad_output, gate, up, approx);
}

// ---- norms --------------------------------------------------------------------

// Output for a parameter gradient: shape of the parameter, or an empty tensor
// when the op ran without that parameter.
inline Tensor param_grad(const std::optional<Tensor>& param, const Tensor& like) {
  if (param.has_value() && param->defined()) return at::empty(param->sizes(), like.options());
  return at::empty({0}, like.options());
}

inline void* param_grad_data(const std::optional<Tensor>& param, Tensor& grad) {
  return param.has_value() && param->defined() ? grad.mutable_data_ptr() : nullptr;
}

inline RowShape check_rms_norm(const char* op, const Tensor& input, IntArrayRef normalized_shape,
                               const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kRmsNormDtypes);
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

inline RowShape check_rms_norm_backward(const char* op, const Tensor& grad_output,
                                        const Tensor& input, IntArrayRef normalized_shape,
                                        const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kRmsNormBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

inline RowShape check_fused_add_rms_norm(const char* op, const Tensor& input,
                                         const Tensor& residual, IntArrayRef normalized_shape,
                                         const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kFusedAddRmsNormDtypes);
  check_same(op, input, "input", residual, "residual");
  check_same_shape(op, input, "input", residual, "residual");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

inline RowShape check_layer_norm(const char* op, const Tensor& input, IntArrayRef normalized_shape,
                                 const std::optional<Tensor>& weight,
                                 const std::optional<Tensor>& bias) {
  check_dtype(op, input, "input", gen::kLayerNormDtypes);
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  check_affine(op, bias, "bias", input, normalized_shape);
  return rs;
}

template <typename Kernels>
Tensor rms_norm(const Tensor& input, IntArrayRef normalized_shape,
                const std::optional<Tensor>& weight, std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm";
  const Kernels kernels(input);
  const RowShape rs = check_rms_norm(op, input, normalized_shape, weight);
  const Tensor x = input.contiguous();
  Tensor w_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  cpu::RmsNormArgs args{x.const_data_ptr(), nullptr, optional_data(weight, w_holder),
                        out.mutable_data_ptr(), nullptr, rs.rows, rs.cols,
                        rms_norm_eps(input, eps)};
  kernels.rms_norm_forward(kernel_dtype(x.scalar_type()), args);
  // The kernel needs row-major rows; the output takes the input's memory format, as F.rms_norm's.
  return in_memory_format_of(input, out);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& grad_output, const Tensor& input,
                                             IntArrayRef normalized_shape,
                                             const std::optional<Tensor>& weight,
                                             std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm_backward";
  const Kernels kernels(input);
  const RowShape rs = check_rms_norm_backward(op, grad_output, input, normalized_shape, weight);
  const Tensor x = input.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder;
  Tensor dx = at::empty(x.sizes(), x.options());
  Tensor dw = param_grad(weight, x);
  cpu::RmsNormBackwardArgs args{dy.const_data_ptr(), nullptr, x.const_data_ptr(),
                                optional_data(weight, w_holder), dx.mutable_data_ptr(),
                                param_grad_data(weight, dw), rs.rows, rs.cols,
                                rms_norm_eps(input, eps)};
  kernels.rms_norm_backward(kernel_dtype(x.scalar_type()), args);
  return {dx, dw};
}

template <typename Kernels>
std::tuple<Tensor, Tensor> fused_add_rms_norm(const Tensor& input, const Tensor& residual,
                                              IntArrayRef normalized_shape,
                                              const std::optional<Tensor>& weight,
                                              std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm";
  const Kernels kernels(input);
  const RowShape rs = check_fused_add_rms_norm(op, input, residual, normalized_shape, weight);
  const Tensor x = input.contiguous();
  const Tensor r = residual.contiguous();
  Tensor w_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  Tensor residual_out = at::empty(x.sizes(), x.options());
  cpu::RmsNormArgs args{x.const_data_ptr(), r.const_data_ptr(), optional_data(weight, w_holder),
                        out.mutable_data_ptr(), residual_out.mutable_data_ptr(), rs.rows, rs.cols,
                        rms_norm_eps(input, eps)};
  kernels.rms_norm_forward(kernel_dtype(x.scalar_type()), args);
  return {out, residual_out};
}

inline RowShape check_fused_add_rms_norm_backward(const char* op, const Tensor& grad_output,
                                                  const std::optional<Tensor>& grad_residual_out,
                                                  const Tensor& residual_out,
                                                  IntArrayRef normalized_shape,
                                                  const std::optional<Tensor>& weight) {
  check_dtype(op, residual_out, "residual_out", gen::kFusedAddRmsNormBackwardDtypes);
  check_same(op, residual_out, "residual_out", grad_output, "grad_output");
  check_same_shape(op, residual_out, "residual_out", grad_output, "grad_output");
  if (grad_residual_out.has_value() && grad_residual_out->defined()) {
    check_same(op, residual_out, "residual_out", *grad_residual_out, "grad_residual_out");
    check_same_shape(op, residual_out, "residual_out", *grad_residual_out, "grad_residual_out");
  }
  const RowShape rs = check_normalized_shape(op, residual_out, normalized_shape);
  check_affine(op, weight, "weight", residual_out, normalized_shape);
  return rs;
}

template <typename Kernels>
std::tuple<Tensor, Tensor> fused_add_rms_norm_backward(
    const Tensor& grad_output, const std::optional<Tensor>& grad_residual_out,
    const Tensor& residual_out, IntArrayRef normalized_shape, const std::optional<Tensor>& weight,
    std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm_backward";
  const Kernels kernels(residual_out);
  const RowShape rs = check_fused_add_rms_norm_backward(op, grad_output, grad_residual_out,
                                                        residual_out, normalized_shape, weight);
  const Tensor z = residual_out.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder, gr_holder;
  Tensor dx = at::empty(z.sizes(), z.options());
  Tensor dw = param_grad(weight, z);
  cpu::RmsNormBackwardArgs args{dy.const_data_ptr(), optional_data(grad_residual_out, gr_holder),
                                z.const_data_ptr(), optional_data(weight, w_holder),
                                dx.mutable_data_ptr(), param_grad_data(weight, dw), rs.rows, rs.cols,
                                rms_norm_eps(residual_out, eps)};
  kernels.rms_norm_backward(kernel_dtype(z.scalar_type()), args);
  return {dx, dw};
}

template <typename Kernels>
Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  constexpr const char* op = "custom::layer_norm";
  const Kernels kernels(input);
  const RowShape rs = check_layer_norm(op, input, normalized_shape, weight, bias);
  const Tensor x = input.contiguous();
  Tensor w_holder, b_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  cpu::LayerNormArgs args{x.const_data_ptr(), optional_data(weight, w_holder),
                          optional_data(bias, b_holder), out.mutable_data_ptr(), rs.rows, rs.cols,
                          eps};
  kernels.layer_norm_forward(kernel_dtype(x.scalar_type()), args);
  return out;
}

inline RowShape check_layer_norm_backward(const char* op, const Tensor& grad_output,
                                          const Tensor& input, IntArrayRef normalized_shape,
                                          const std::optional<Tensor>& weight,
                                          const std::optional<Tensor>& bias) {
  check_dtype(op, input, "input", gen::kLayerNormBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  check_affine(op, bias, "bias", input, normalized_shape);
  return rs;
}

template <typename Kernels>
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       IntArrayRef normalized_shape,
                                                       const std::optional<Tensor>& weight,
                                                       const std::optional<Tensor>& bias,
                                                       double eps) {
  constexpr const char* op = "custom::layer_norm_backward";
  const Kernels kernels(input);
  const RowShape rs = check_layer_norm_backward(op, grad_output, input, normalized_shape, weight, bias);
  const Tensor x = input.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder;
  Tensor dx = at::empty(x.sizes(), x.options());
  Tensor dw = param_grad(weight, x);
  Tensor db = param_grad(bias, x);
  cpu::LayerNormBackwardArgs args{dy.const_data_ptr(), x.const_data_ptr(),
                                  optional_data(weight, w_holder), dx.mutable_data_ptr(),
                                  param_grad_data(weight, dw), param_grad_data(bias, db),
                                  rs.rows, rs.cols, eps};
  kernels.layer_norm_backward(kernel_dtype(x.scalar_type()), args);
  return {dx, dw, db};
}

// ---- softmax ------------------------------------------------------------------

struct SoftmaxShape {
  int64_t outer = 1, dim_size = 1, inner = 1;
};

inline SoftmaxShape softmax_shape(const char* op, const Tensor& t, int64_t dim) {
  SoftmaxShape s;
  if (t.dim() == 0) {
    wrap_dim(op, dim, 0);
    return s;
  }
  const int64_t d = wrap_dim(op, dim, t.dim());
  for (const auto i : c10::irange(d)) s.outer *= t.size(i);
  s.dim_size = t.size(d);
  for (const auto i : c10::irange(d + 1, t.dim())) s.inner *= t.size(i);
  return s;
}

template <typename Kernels>
Tensor softmax(const Tensor& input, int64_t dim) {
  constexpr const char* op = "custom::softmax";
  const Kernels kernels(input);
  check_dtype(op, input, "input", gen::kSoftmaxDtypes);
  const SoftmaxShape s = softmax_shape(op, input, dim);
  const Tensor x = input.contiguous();
  Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  kernels.softmax_forward(kernel_dtype(x.scalar_type()), {x.const_data_ptr(), out.mutable_data_ptr(),
                                                          s.outer, s.dim_size, s.inner});
  return out;
}

inline SoftmaxShape check_softmax_backward(const char* op, const Tensor& grad_output,
                                           const Tensor& output, int64_t dim) {
  check_dtype(op, output, "output", gen::kSoftmaxBackwardDtypes);
  check_same(op, output, "output", grad_output, "grad_output");
  check_same_shape(op, output, "output", grad_output, "grad_output");
  return softmax_shape(op, output, dim);
}

template <typename Kernels>
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  constexpr const char* op = "custom::softmax_backward";
  const Kernels kernels(output);
  const SoftmaxShape s = check_softmax_backward(op, grad_output, output, dim);
  const Tensor y = output.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor dx = at::empty(y.sizes(), y.options());
  if (y.numel() == 0) return dx;
  kernels.softmax_backward(kernel_dtype(y.scalar_type()),
                           {dy.const_data_ptr(), y.const_data_ptr(), dx.mutable_data_ptr(), s.outer,
                            s.dim_size, s.inner});
  return dx;
}

// ---- rotary_embedding ---------------------------------------------------------------
// Hugging Face's apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim): cos and sin,
// unsqueezed at unsqueeze_dim, broadcast to q and to k (each output has the
// shape of its input); the last size is the head dim, even.

struct RotaryInputs {
  Tensor cos;  // contiguous
  Tensor sin;
  int64_t unsqueeze_dim;  // wrapped into [0, cos.dim()]
};

inline RotaryInputs check_rotary(const char* op, const Tensor& q, const char* q_name, const Tensor& k,
                                 const char* k_name, const Tensor& cos, const Tensor& sin,
                                 int64_t unsqueeze_dim, const std::array<c10::ScalarType, 4>& dtypes) {
  check_dtype(op, q, q_name, dtypes);
  check_same(op, q, q_name, k, k_name);
  check_same(op, q, q_name, cos, "cos");
  check_same(op, q, q_name, sin, "sin");
  check_same_shape(op, cos, "cos", sin, "sin");
  const int64_t nd = cos.dim();
  TORCH_CHECK_VALUE(nd >= 1, op, ": cos must have at least one dim (the head dim), got shape ", cos.sizes());
  TORCH_CHECK_INDEX(unsqueeze_dim >= -(nd + 1) && unsqueeze_dim <= nd, op, ": unsqueeze_dim ", unsqueeze_dim,
                    " is out of range for cos of ", nd, " dims (allowed: ", -(nd + 1), " to ", nd, ")");
  const int64_t dim = unsqueeze_dim < 0 ? unsqueeze_dim + nd + 1 : unsqueeze_dim;
  TORCH_CHECK_VALUE(dim != nd, op, ": unsqueeze_dim ", unsqueeze_dim,
                    " would put cos's head dim off the last position; use a dim before the last");
  return {cos.contiguous(), sin.contiguous(), dim};
}

// The kernel's view of one of q, k (or their gradients): its rows, and per
// leading dim the step in cos rows (0 where cos.unsqueeze(dim) broadcasts).
inline cpu::RotaryEmbeddingArgs rotary_args(const char* op, const Tensor& x, const char* name,
                                            const RotaryInputs& r, const Tensor& out) {
  const Tensor cos_u = r.cos.unsqueeze(r.unsqueeze_dim);
  const int64_t head = x.dim() >= 1 ? x.size(-1) : 0;
  TORCH_CHECK_VALUE(x.dim() >= 2 && x.dim() - 1 <= cpu::kMaxDims, op, ": ", name,
                    " must have 2 to ", cpu::kMaxDims + 1, " dims (leading dims, then the head dim), got shape ",
                    x.sizes());
  TORCH_CHECK_VALUE(head % 2 == 0, op, ": the head dim (last) of ", name, " must be even, got ", head);
  bool broadcasts = cos_u.dim() <= x.dim() && cos_u.size(-1) == head;
  for (int64_t d = 1; broadcasts && d < cos_u.dim(); ++d) {
    const int64_t c = cos_u.size(-1 - d);
    broadcasts = c == 1 || c == x.size(-1 - d);
  }
  TORCH_CHECK_VALUE(broadcasts, op, ": cos.unsqueeze(", r.unsqueeze_dim, ") of shape ", cos_u.sizes(),
                    " does not broadcast to ", name, "'s shape ", x.sizes(),
                    " (the result must have ", name, "'s shape)");
  cpu::RotaryEmbeddingArgs a{};
  a.input = x.const_data_ptr();
  a.cos = r.cos.const_data_ptr();
  a.sin = r.sin.const_data_ptr();
  a.output = out.mutable_data_ptr();
  a.dim = head;
  a.ndim = static_cast<int>(x.dim() - 1);
  a.rows = 1;
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = x.size(d);
    a.rows *= x.size(d);
    const int64_t cd = d - (x.dim() - cos_u.dim());  // the matching dim of cos_u, if any
    a.cos_row_strides[d] = cd < 0 || cos_u.size(cd) == 1 ? 0 : cos_u.stride(cd) / head;
  }
  return a;
}

template <typename Launch>
std::tuple<Tensor, Tensor> rotary_pair(const char* op, const Launch& launch, const Tensor& q, const char* q_name,
                                       const Tensor& k, const char* k_name, const RotaryInputs& r) {
  const Tensor qc = q.contiguous();
  const Tensor kc = k.contiguous();
  Tensor q_out = at::empty(qc.sizes(), qc.options());
  Tensor k_out = at::empty(kc.sizes(), kc.options());
  const auto qa = rotary_args(op, qc, q_name, r, q_out);  // both checked before either runs
  const auto ka = rotary_args(op, kc, k_name, r, k_out);
  const DType d = kernel_dtype(q.scalar_type());
  if (qa.rows > 0 && qa.dim > 0) launch(d, qa);
  if (ka.rows > 0 && ka.dim > 0) launch(d, ka);
  return {q_out, k_out};
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rotary_embedding(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin,
                                            int64_t unsqueeze_dim) {
  constexpr const char* op = "custom::rotary_embedding";
  const Kernels kernels(q);
  const RotaryInputs r = check_rotary(op, q, "q", k, "k", cos, sin, unsqueeze_dim, gen::kRotaryEmbeddingDtypes);
  return rotary_pair(
      op, [&](DType d, const cpu::RotaryEmbeddingArgs& a) { kernels.rotary_embedding_forward(d, a); }, q, "q", k,
      "k", r);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rotary_embedding_backward(const Tensor& grad_q_embed, const Tensor& grad_k_embed,
                                                     const Tensor& cos, const Tensor& sin, int64_t unsqueeze_dim) {
  constexpr const char* op = "custom::rotary_embedding_backward";
  const Kernels kernels(grad_q_embed);
  const RotaryInputs r = check_rotary(op, grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", cos, sin,
                                      unsqueeze_dim, gen::kRotaryEmbeddingBackwardDtypes);
  return rotary_pair(
      op, [&](DType d, const cpu::RotaryEmbeddingArgs& a) { kernels.rotary_embedding_backward(d, a); },
      grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", r);
}

// Registers all 18 ops, implemented with `Kernels`, in a TORCH_LIBRARY_IMPL block.
template <typename Kernels>
void register_ops(torch::Library& m) {
  m.impl("add", &glue::add<Kernels>);
  m.impl("add_backward", &glue::add_backward<Kernels>);
  m.impl("gelu", &glue::gelu<Kernels>);
  m.impl("gelu_backward", &glue::gelu_backward<Kernels>);
  m.impl("swiglu", &glue::swiglu<Kernels>);
  m.impl("swiglu_backward", &glue::swiglu_backward<Kernels>);
  m.impl("geglu", &glue::geglu<Kernels>);
  m.impl("geglu_backward", &glue::geglu_backward<Kernels>);
  m.impl("rms_norm", &glue::rms_norm<Kernels>);
  m.impl("rms_norm_backward", &glue::rms_norm_backward<Kernels>);
  m.impl("fused_add_rms_norm", &glue::fused_add_rms_norm<Kernels>);
  m.impl("fused_add_rms_norm_backward", &glue::fused_add_rms_norm_backward<Kernels>);
  m.impl("layer_norm", &glue::layer_norm<Kernels>);
  m.impl("layer_norm_backward", &glue::layer_norm_backward<Kernels>);
  m.impl("softmax", &glue::softmax<Kernels>);
  m.impl("softmax_backward", &glue::softmax_backward<Kernels>);
  m.impl("rotary_embedding", &glue::rotary_embedding<Kernels>);
  m.impl("rotary_embedding_backward", &glue::rotary_embedding_backward<Kernels>);
}

}  // namespace op_ext::glue
