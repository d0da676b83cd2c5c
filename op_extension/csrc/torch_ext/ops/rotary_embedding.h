// The glue of custom::rotary_embedding and custom::rotary_embedding_backward: rotary position embedding of q and k (Hugging Face's apply_rotary_pos_emb).
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include <algorithm>
#include <array>
#include <numeric>

#include <ATen/OpMathType.h>

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

// ---- custom::rotary_embedding_table_backward: the gradients of cos and sin ---------------
//
// What RotaryEmbeddingFunction's backward (csrc/torch_ext/autograd/rotary_embedding.cpp)
// calls when cos or sin requires grad: grad_cos, the sum of grad_q_embed * q and
// grad_k_embed * k over what cos broadcasts over (the heads; the batch where cos
// has batch 1), and grad_sin, that of the gradients times rotate_half(q) and
// rotate_half(k); each only where its flag asks for it, else an empty [0]
// placeholder. It has no prototype: op_protos/ describes ops with an Ascend
// kernel (every prototype gets an aclnn entry and an npu registration), and this
// one's Ascend path is the composite. Its schema and the composite (the
// CompositeExplicitAutograd kernel: CPU, NPU) are registered by the autograd file
// above, its CUDA kernel by torch_ext/cuda/rotary_embedding_table.cpp, its harness
// entry by csrc/cuda_sim/probes/rotary_embedding_table.cpp, its fake kernel by
// op_extension/op_defs/rotary_embedding.py (EXTRA_FAKE).
inline constexpr const char* kRotaryTableBackward = "rotary_embedding_table_backward";
inline constexpr const char* kRotaryTableBackwardSchema =
    "rotary_embedding_table_backward(Tensor grad_q_embed, Tensor grad_k_embed, Tensor q, Tensor k, Tensor cos, "
    "int unsqueeze_dim=1, bool cos_grad=True, bool sin_grad=True) -> (Tensor grad_cos, Tensor grad_sin)";

// Every check of the op, before anything is allocated or run (the fake kernel's
// are the same, with the same messages).
inline RotaryInputs check_rotary_table(const char* op, const Tensor& grad_q_embed, const Tensor& grad_k_embed,
                                       const Tensor& q, const Tensor& k, const Tensor& cos, int64_t unsqueeze_dim,
                                       bool cos_grad, bool sin_grad) {
  TORCH_CHECK_VALUE(cos_grad || sin_grad, op, ": cos_grad and sin_grad are both false: nothing to compute");
  // cos stands for sin too: the tables share one shape.
  const RotaryInputs r = check_rotary(op, q, "q", k, "k", cos, cos, unsqueeze_dim, gen::kRotaryEmbeddingDtypes);
  check_same(op, q, "q", grad_q_embed, "grad_q_embed");
  check_same(op, q, "q", grad_k_embed, "grad_k_embed");
  check_same_shape(op, q, "q", grad_q_embed, "grad_q_embed");
  check_same_shape(op, k, "k", grad_k_embed, "grad_k_embed");
  rotary_args(op, q, "q", r);
  rotary_args(op, k, "k", r);
  return r;
}

inline Tensor rotary_table_output(const Tensor& cos, bool wanted) {
  return wanted ? at::empty(cos.sizes(), cos.options().memory_format(at::MemoryFormat::Contiguous))
                : at::empty({0}, cos.options());
}

// The composite: ATen ops on any device (the CompositeExplicitAutograd kernel).
// Products and sums in float for 16-bit tables, rounded once, as the kernel.
inline std::tuple<Tensor, Tensor> rotary_table_composite(const Tensor& grad_q_embed, const Tensor& grad_k_embed,
                                                         const Tensor& q, const Tensor& k, const Tensor& cos,
                                                         int64_t unsqueeze_dim, bool cos_grad, bool sin_grad) {
  constexpr const char* op = "custom::rotary_embedding_table_backward";
  const RotaryInputs r = check_rotary_table(op, grad_q_embed, grad_k_embed, q, k, cos, unsqueeze_dim, cos_grad,
                                            sin_grad);
  const auto table_shape = cos.unsqueeze(r.unsqueeze_dim).sym_sizes().vec();
  auto rotate_half = [](const Tensor& x) {
    const c10::SymInt h = x.sym_size(-1) / 2;
    return at::cat({at::neg(x.narrow_symint(-1, h, h)), x.narrow_symint(-1, 0, h)}, -1);
  };
  const c10::ScalarType table_dtype = cos.scalar_type();
  const c10::ScalarType opmath = at::toOpMathType(table_dtype);
  auto wide = [&](const Tensor& t) { return t.to(opmath); };
  auto reduce = [&](const Tensor& t) { return t.sum_to_size_symint(table_shape).squeeze(r.unsqueeze_dim); };
  const Tensor qw = wide(q), kw = wide(k), dq = wide(grad_q_embed), dk = wide(grad_k_embed);
  Tensor grad_cos = at::empty({0}, cos.options()), grad_sin = at::empty({0}, cos.options());
  if (cos_grad) {
    grad_cos = at::add(reduce(at::mul(dq, qw)), reduce(at::mul(dk, kw))).to(table_dtype).contiguous();
  }
  if (sin_grad) {
    grad_sin = at::add(reduce(at::mul(dq, rotate_half(qw))), reduce(at::mul(dk, rotate_half(kw))))
                   .to(table_dtype)
                   .contiguous();
  }
  return {grad_cos, grad_sin};
}

// The kernel's view of x (q or k) and its gradient: x's leading dims as
// rotary_args sees them, each tensor read in place through its strides (only a
// head dim that is not contiguous is copied).
inline cpu::RotaryTableSource rotary_table_source(const cpu::RotaryEmbeddingArgs& a, const Tensor& x,
                                                  const Tensor& grad) {
  cpu::RotaryTableSource s{};
  s.x = x.const_data_ptr();
  s.grad = grad.const_data_ptr();
  s.ndim = a.ndim;
  for (int d = 0; d < a.ndim; ++d) {
    s.sizes[d] = a.sizes[d];
    s.cos_row_strides[d] = a.cos_row_strides[d];
    s.x_strides[d] = x.stride(d);
    s.grad_strides[d] = grad.stride(d);
  }
  return s;
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rotary_embedding_table_backward(const Tensor& grad_q_embed, const Tensor& grad_k_embed,
                                                           const Tensor& q, const Tensor& k, const Tensor& cos,
                                                           int64_t unsqueeze_dim, bool cos_grad, bool sin_grad) {
  constexpr const char* op = "custom::rotary_embedding_table_backward";
  const Kernels kernels(q);
  const RotaryInputs r = check_rotary_table(op, grad_q_embed, grad_k_embed, q, k, cos, unsqueeze_dim, cos_grad,
                                            sin_grad);
  const cpu::RotaryEmbeddingArgs qa = rotary_args(op, q, "q", r);
  const cpu::RotaryEmbeddingArgs ka = rotary_args(op, k, "k", r);
  auto rows = [](const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  const Tensor qx = rows(q), kx = rows(k), dq = rows(grad_q_embed), dk = rows(grad_k_embed);
  Tensor grad_cos = rotary_table_output(cos, cos_grad);
  Tensor grad_sin = rotary_table_output(cos, sin_grad);
  cpu::RotaryTableGradArgs a{};
  a.source[0] = rotary_table_source(qa, qx, dq);
  a.source[1] = rotary_table_source(ka, kx, dk);
  a.grad_cos = cos_grad ? grad_cos.mutable_data_ptr() : nullptr;
  a.grad_sin = sin_grad ? grad_sin.mutable_data_ptr() : nullptr;
  a.dim = qa.dim;
  a.table_rows = a.dim > 0 ? cos.numel() / a.dim : 0;
  if (a.table_rows > 0 && a.dim > 0) kernels(cpu::rotary_embedding_table_backward, kernel_dtype(q.scalar_type()), a);
  return {grad_cos, grad_sin};
}

}  // namespace op_ext::glue
