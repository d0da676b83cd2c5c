// What the ops' glue shares (csrc/torch_ext/ops/<op>.h: check the inputs, lay
// them out densely, allocate the outputs and fill the kernel's args struct).
// Each device file (cpu_ops.cpp, cuda/cuda_ops.cpp, the CUDA harness) supplies a
// `Kernels` type and registers glue::<op><Kernels> for every op under its
// dispatch key (generated: op_ext_glue.h's register_ops), so every device
// applies the same checks, in the same order, with the same messages.
//
// A Kernels type is constructed from the op's first tensor (before any check:
// it may only remember the device) and runs one kernel when called as
//   kernels(cpu::<kernel>, dtype, args)
// where cpu::<kernel> is the kernel's stub (kernel/cpu/<op>.h): the CPU
// runs the stub's instruction-set variant, CUDA the launcher its .cu file
// registered in the stub. The args structs are the torch-free contract of the
// kernels, which the CUDA kernels take as well.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernel/cpu/glu.h"
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

// Output for a parameter gradient: shape of the parameter, or an empty tensor
// when the op ran without that parameter.
inline Tensor param_grad(const std::optional<Tensor>& param, const Tensor& like) {
  if (param.has_value() && param->defined()) return at::empty(param->sizes(), like.options());
  return at::empty({0}, like.options());
}

inline void* param_grad_data(const std::optional<Tensor>& param, Tensor& grad) {
  return param.has_value() && param->defined() ? grad.mutable_data_ptr() : nullptr;
}

// ---- gated units (swiglu, geglu) ----------------------------------------------

template <size_t N>
void check_glu(const char* op, const Tensor& gate, const Tensor& up,
               const std::array<c10::ScalarType, N>& dtypes) {
  check_dtype(op, gate, "gate", dtypes);
  check_same(op, gate, "gate", up, "up");
  check_same_shape(op, gate, "gate", up, "up");
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

}  // namespace op_ext::glue
