// The glue of custom::rotary_embedding and custom::rotary_embedding_backward: rotary position embedding of q and k (Hugging Face's apply_rotary_pos_emb).
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include <algorithm>
#include <array>
#include <numeric>

#include "../../kernel/cpu/rotary_embedding.h"
#include "../glue_util.h"

namespace op_ext::glue {

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
// Checks x's shape only: the data pointers (of x's dense copy and of its output)
// are the caller's to set, after every check has passed.
inline cpu::RotaryEmbeddingArgs rotary_args(const char* op, const Tensor& x, const char* name,
                                            const RotaryInputs& r) {
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
  a.cos = r.cos.const_data_ptr();
  a.sin = r.sin.const_data_ptr();
  a.dim = head;
  a.ndim = static_cast<int>(x.dim() - 1);
  a.rows = 1;
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = x.size(d);
    a.rows *= x.size(d);
    const int64_t cd = d - (x.dim() - cos_u.dim());  // the matching dim of cos_u, if any
    // head == 0: no element to compute, and no row to step over (nor a division by 0).
    a.cos_row_strides[d] = cd < 0 || cos_u.size(cd) == 1 || head == 0 ? 0 : cos_u.stride(cd) / head;
  }
  return a;
}

// Where the kernel reads x and writes its output. A dense x whose head dim is
// innermost -- contiguous, or a transposed view such as the [batch, heads, seq,
// dim] view of [batch, seq, heads, dim] memory that attention makes of q and k --
// is read in place, its leading dims in the order of their strides, and its
// output has x's strides (empty_like), as Hugging Face's elementwise form gives
// it; `a` is reordered to that memory order. Any other x is copied row-major,
// with a row-major output. The fake kernel's layout rule (LIKE_DENSE_SOURCE,
// op_extension/_fake.py) is the same.
struct RotaryBuffers {
  Tensor input;
  Tensor output;
};

inline RotaryBuffers rotary_buffers(const Tensor& x, cpu::RotaryEmbeddingArgs& a) {
  if (x.is_contiguous()) return {x, at::empty(x.sizes(), x.options())};  // the common case, unchanged
  const int nd = static_cast<int>(x.dim());
  if (x.stride(-1) != 1 || !x.is_non_overlapping_and_dense()) {
    const Tensor xc = x.contiguous();
    return {xc, at::empty(xc.sizes(), xc.options())};
  }
  // The leading dims by decreasing stride: x's memory order (rotary_args allows
  // at most kMaxDims of them). Dense with a unit-stride last dim, x is then a
  // row-major [rows, head] block read in that order.
  std::array<int, cpu::kMaxDims> order{};
  std::iota(order.begin(), order.begin() + (nd - 1), 0);
  std::stable_sort(order.begin(), order.begin() + (nd - 1),
                   [&](int i, int j) { return x.stride(i) > x.stride(j); });
  const cpu::RotaryEmbeddingArgs by_dim = a;
  for (int i = 0; i < nd - 1; ++i) {
    a.sizes[i] = by_dim.sizes[order[i]];
    a.cos_row_strides[i] = by_dim.cos_row_strides[order[i]];
  }
  return {x, at::empty_like(x)};  // x's strides: non-overlapping and dense
}

template <typename Launch>
std::tuple<Tensor, Tensor> rotary_pair(const char* op, const Launch& launch, const Tensor& q, const char* q_name,
                                       const Tensor& k, const char* k_name, const RotaryInputs& r) {
  // Both checked before anything is copied, allocated or run.
  auto qa = rotary_args(op, q, q_name, r);
  auto ka = rotary_args(op, k, k_name, r);
  const RotaryBuffers qb = rotary_buffers(q, qa);
  const RotaryBuffers kb = rotary_buffers(k, ka);
  qa.input = qb.input.const_data_ptr();
  qa.output = qb.output.mutable_data_ptr();
  ka.input = kb.input.const_data_ptr();
  ka.output = kb.output.mutable_data_ptr();
  const DType d = kernel_dtype(q.scalar_type());
  if (qa.rows > 0 && qa.dim > 0) launch(d, qa);
  if (ka.rows > 0 && ka.dim > 0) launch(d, ka);
  return {qb.output, kb.output};
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rotary_embedding(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin,
                                            int64_t unsqueeze_dim) {
  constexpr const char* op = "custom::rotary_embedding";
  const Kernels kernels(q);
  const RotaryInputs r = check_rotary(op, q, "q", k, "k", cos, sin, unsqueeze_dim, gen::kRotaryEmbeddingDtypes);
  return rotary_pair(
      op, [&](DType d, const cpu::RotaryEmbeddingArgs& a) { kernels(cpu::rotary_embedding_forward, d, a); }, q, "q", k,
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
      op, [&](DType d, const cpu::RotaryEmbeddingArgs& a) { kernels(cpu::rotary_embedding_backward, d, a); },
      grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", r);
}

}  // namespace op_ext::glue
