// The glue of custom::add and custom::add_backward: input + alpha * other, with broadcasting; its backward sums back to a size.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/add.h"
#include "../glue_util.h"

namespace op_ext::glue {

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

// The input checks of each op, shared with the npu glue (npu/ops/add.cpp).
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
    kernels(cpu::add_forward, kernel_dtype(input.scalar_type()), args);
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
  kernels(cpu::add_forward, kernel_dtype(input.scalar_type()), args);
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
    kernels(cpu::reduce_to, dtype, args);
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
    kernels(cpu::reduce_to, dtype, args);
    scaled = true;
    groups[g].first = 1;
    current = next;
  }
  return current.view(input_size);
}

}  // namespace op_ext::glue
