// The custom ops on Ascend NPUs (torch_npu's `npu` device, dispatch key
// PrivateUse1): the same input checks as on CPU, then the Ascend custom
// kernels through their aclnn entry points (csrc/host/aclnn/aclnn_*_custom.h).
//
// What the Ascend kernels do not cover is done here, explicitly:
// - they read dense row-major ND memory: every input goes through dense()
//   (private NPU formats cast to ND, strided views copied);
// - AddCustom adds two tensors of one shape: broadcasting is materialised with
//   expand().contiguous() first;
// - they compute float16, bfloat16 and float32 only: float64 is a TypeError;
// - every op, forward and backward, has an Ascend kernel: training on npu
//   never leaves the device.
// Empty tensors never reach a kernel.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../checks.h"
#include "op_ext_glue.h"
#include "aclnn_add_custom.h"
#include "aclnn_add_grad_custom.h"
#include "aclnn_call.h"
#include "aclnn_fused_add_rms_norm_custom.h"
#include "aclnn_fused_add_rms_norm_grad_custom.h"
#include "aclnn_geglu_custom.h"
#include "aclnn_geglu_grad_custom.h"
#include "aclnn_gelu_custom.h"
#include "aclnn_gelu_grad_custom.h"
#include "aclnn_layer_norm_custom.h"
#include "aclnn_layer_norm_grad_custom.h"
#include "aclnn_rms_norm_custom.h"
#include "aclnn_rms_norm_grad_custom.h"
#include "aclnn_softmax_custom.h"
#include "aclnn_softmax_grad_custom.h"
#include "aclnn_rotary_embedding_backward_custom.h"
#include "aclnn_rotary_embedding_custom.h"
#include "aclnn_swiglu_custom.h"
#include "aclnn_swiglu_grad_custom.h"
#include "op_ext_schemas.h"
#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace op_ext::npu {
namespace {

namespace gen = op_ext::generated;
using at::IntArrayRef;
using at::Tensor;
using OptTensor = std::optional<Tensor>;

// ---- what every op does before its kernel ---------------------------------------

// The Ascend kernels compute in float32 internally and take 16- and 32-bit floats.
constexpr std::array<c10::ScalarType, 3> kNpuDtypes = {at::kHalf, at::kFloat, at::kBFloat16};

// After the CPU dtype check (same message for dtypes no device supports), the
// ones the Ascend kernels lack.
void check_npu_dtype(const char* op, const Tensor& t, const char* name) {
  const bool supported =
      std::find(kNpuDtypes.begin(), kNpuDtypes.end(), t.scalar_type()) != kNpuDtypes.end();
  TORCH_CHECK_TYPE(supported, op, ": ", name, " has dtype ", t.scalar_type(),
                   ", which is not supported on npu; supported dtypes on npu: Half, Float, BFloat16");
}

// Formats whose storage is the logical shape in row-major order; torch_npu
// gives plain tensors one of these, depending on their number of dims.
bool is_row_major_format(int64_t format) {
  return format == ACL_FORMAT_ND || format == ACL_FORMAT_NCHW || format == ACL_FORMAT_NCL ||
         format == ACL_FORMAT_NCDHW;
}

// The layout the Ascend kernels read: a dense, row-major ND tensor.
Tensor dense(const Tensor& t) {
  const Tensor row_major = is_row_major_format(at_npu::native::get_npu_format(t))
                               ? t
                               : at_npu::native::npu_format_cast(t, ACL_FORMAT_ND);
  return row_major.contiguous();
}

OptTensor dense(const OptTensor& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return dense(*t);
}

// ---- add ------------------------------------------------------------------------

Tensor add_npu(const Tensor& input, const Tensor& other, double alpha) {
  constexpr const char* op = "custom::add";
  const auto shape = glue::check_add(op, input, other);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  Tensor out = at::empty(shape, input.options());
  if (out.numel() == 0) return out;
  // AddCustom takes operands of the output's shape: broadcast dims are
  // materialised (one extra read and write of the broadcast operand).
  const Tensor a = dense(input.sizes() == IntArrayRef(shape) ? input : input.expand(shape));
  const Tensor b = dense(other.sizes() == IntArrayRef(shape) ? other : other.expand(shape));
  call_aclnn(op, "aclnnAddCustom", input.device(), aclnnAddCustomGetWorkspaceSize, aclnnAddCustom,
             a, b, alpha, out);
  return glue::keeps_layout(input, other) ? glue::in_layout_of(input, out) : out;
}

Tensor add_backward_npu(const Tensor& grad_output, IntArrayRef input_size, double alpha) {
  constexpr const char* op = "custom::add_backward";
  glue::check_add_backward(op, grad_output, input_size);
  check_npu_dtype(op, grad_output, "grad_output");
  const c10::DeviceGuard guard(grad_output.device());
  // A sum over no elements is zero.
  if (grad_output.numel() == 0) return at::zeros(input_size, grad_output.options());
  const Tensor grad = dense(grad_output);
  Tensor out = at::empty(input_size, grad_output.options());
  call_aclnn(op, "aclnnAddGradCustom", grad.device(), aclnnAddGradCustomGetWorkspaceSize,
             aclnnAddGradCustom, grad, input_size, alpha, out);
  return out;
}

// ---- activations ----------------------------------------------------------------

Tensor gelu_npu(const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu";
  glue::check_gelu(op, input, approximate);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnGeluCustom", x.device(), aclnnGeluCustomGetWorkspaceSize, aclnnGeluCustom, x,
             approximate, out);
  return glue::keeps_layout(input) ? glue::in_layout_of(input, out) : out;
}

Tensor gelu_backward_npu(const Tensor& grad_output, const Tensor& input,
                         c10::string_view approximate) {
  constexpr const char* op = "custom::gelu_backward";
  glue::check_gelu_backward(op, grad_output, input, approximate);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  Tensor dx = at::empty(x.sizes(), x.options());
  if (dx.numel() == 0) return dx;
  call_aclnn(op, "aclnnGeluGradCustom", x.device(), aclnnGeluGradCustomGetWorkspaceSize,
             aclnnGeluGradCustom, dy, x, approximate, dx);
  return glue::keeps_layout(input, grad_output) ? glue::in_layout_of(input, dx) : dx;
}

Tensor swiglu_npu(const Tensor& gate, const Tensor& up) {
  constexpr const char* op = "custom::swiglu";
  glue::check_glu(op, gate, up, gen::kSwigluDtypes);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor out = at::empty(g.sizes(), g.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnSwiGluCustom", g.device(), aclnnSwiGluCustomGetWorkspaceSize,
             aclnnSwiGluCustom, g, u, out);
  return glue::keeps_layout(gate, up) ? glue::in_layout_of(gate, out) : out;
}

Tensor geglu_npu(const Tensor& gate, const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu";
  glue::check_geglu(op, gate, up, approximate);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor out = at::empty(g.sizes(), g.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnGeGluCustom", g.device(), aclnnGeGluCustomGetWorkspaceSize, aclnnGeGluCustom,
             g, u, approximate, out);
  return glue::keeps_layout(gate, up) ? glue::in_layout_of(gate, out) : out;
}

std::tuple<Tensor, Tensor> swiglu_backward_npu(const Tensor& grad_output, const Tensor& gate,
                                               const Tensor& up) {
  constexpr const char* op = "custom::swiglu_backward";
  glue::check_swiglu_backward(op, grad_output, gate, up);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor dy = dense(grad_output);
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor grad_gate = at::empty(g.sizes(), g.options());
  Tensor grad_up = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return {grad_gate, grad_up};
  call_aclnn(op, "aclnnSwiGluGradCustom", g.device(), aclnnSwiGluGradCustomGetWorkspaceSize,
             aclnnSwiGluGradCustom, dy, g, u, grad_gate, grad_up);
  if (glue::keeps_layout(gate, up, grad_output)) {
    return {glue::in_layout_of(gate, grad_gate), glue::in_layout_of(gate, grad_up)};
  }
  return {grad_gate, grad_up};
}

std::tuple<Tensor, Tensor> geglu_backward_npu(const Tensor& grad_output, const Tensor& gate,
                                              const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu_backward";
  glue::check_geglu_backward(op, grad_output, gate, up, approximate);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor dy = dense(grad_output);
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor grad_gate = at::empty(g.sizes(), g.options());
  Tensor grad_up = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return {grad_gate, grad_up};
  call_aclnn(op, "aclnnGeGluGradCustom", g.device(), aclnnGeGluGradCustomGetWorkspaceSize,
             aclnnGeGluGradCustom, dy, g, u, approximate, grad_gate, grad_up);
  if (glue::keeps_layout(gate, up, grad_output)) {
    return {glue::in_layout_of(gate, grad_gate), glue::in_layout_of(gate, grad_up)};
  }
  return {grad_gate, grad_up};
}

// ---- norms ----------------------------------------------------------------------

Tensor rms_norm_npu(const Tensor& input, IntArrayRef normalized_shape, const OptTensor& weight,
                    std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm";
  glue::check_rms_norm(op, input, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const OptTensor w = dense(weight);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnRmsNormCustom", x.device(), aclnnRmsNormCustomGetWorkspaceSize,
             aclnnRmsNormCustom, x, w, normalized_shape, rms_norm_eps(input, eps), out);
  return glue::in_memory_format_of(input, out);
}

std::tuple<Tensor, Tensor> rms_norm_backward_npu(const Tensor& grad_output, const Tensor& input,
                                                 IntArrayRef normalized_shape,
                                                 const OptTensor& weight,
                                                 std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm_backward";
  glue::check_rms_norm_backward(op, grad_output, input, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  const OptTensor w = dense(weight);
  Tensor dx = at::empty(x.sizes(), x.options());
  // As on CPU: an empty placeholder when the op ran without a weight.
  Tensor dw = glue::param_grad(weight, x);
  if (x.numel() == 0) return {dx, dw.zero_()};  // no rows: the weight gradient is a sum of nothing
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  call_aclnn(op, "aclnnRmsNormGradCustom", x.device(), aclnnRmsNormGradCustomGetWorkspaceSize,
             aclnnRmsNormGradCustom, dy, x, w, normalized_shape, rms_norm_eps(input, eps), dx,
             dw_out);
  return {dx, dw};
}

std::tuple<Tensor, Tensor> fused_add_rms_norm_npu(const Tensor& input, const Tensor& residual,
                                                  IntArrayRef normalized_shape,
                                                  const OptTensor& weight,
                                                  std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm";
  glue::check_fused_add_rms_norm(op, input, residual, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor r = dense(residual);
  const OptTensor w = dense(weight);
  Tensor out = at::empty(x.sizes(), x.options());
  Tensor residual_out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return {out, residual_out};
  call_aclnn(op, "aclnnFusedAddRmsNormCustom", x.device(),
             aclnnFusedAddRmsNormCustomGetWorkspaceSize, aclnnFusedAddRmsNormCustom, x, r, w,
             normalized_shape, rms_norm_eps(input, eps), out, residual_out);
  return {out, residual_out};
}

std::tuple<Tensor, Tensor> fused_add_rms_norm_backward_npu(const Tensor& grad_output,
                                                           const OptTensor& grad_residual_out,
                                                           const Tensor& residual_out,
                                                           IntArrayRef normalized_shape, const OptTensor& weight,
                                                           std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm_backward";
  glue::check_fused_add_rms_norm_backward(op, grad_output, grad_residual_out, residual_out, normalized_shape,
                                          weight);
  check_npu_dtype(op, residual_out, "residual_out");
  const c10::DeviceGuard guard(residual_out.device());
  const Tensor z = dense(residual_out);
  const Tensor dy = dense(grad_output);
  const OptTensor gr = dense(grad_residual_out);
  const OptTensor w = dense(weight);
  Tensor dx = at::empty(z.sizes(), z.options());
  Tensor dw = glue::param_grad(weight, z);
  if (z.numel() == 0) return {dx, dw.zero_()};  // no rows: the weight gradient is a sum of nothing
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  call_aclnn(op, "aclnnFusedAddRmsNormGradCustom", z.device(), aclnnFusedAddRmsNormGradCustomGetWorkspaceSize,
             aclnnFusedAddRmsNormGradCustom, dy, gr, z, w, normalized_shape, rms_norm_eps(residual_out, eps), dx,
             dw_out);
  return {dx, dw};
}

Tensor layer_norm_npu(const Tensor& input, IntArrayRef normalized_shape, const OptTensor& weight,
                      const OptTensor& bias, double eps) {
  constexpr const char* op = "custom::layer_norm";
  glue::check_layer_norm(op, input, normalized_shape, weight, bias);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const OptTensor w = dense(weight);
  const OptTensor b = dense(bias);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnLayerNormCustom", x.device(), aclnnLayerNormCustomGetWorkspaceSize,
             aclnnLayerNormCustom, x, w, b, normalized_shape, eps, out);
  return out;
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_npu(const Tensor& grad_output, const Tensor& input,
                                                           IntArrayRef normalized_shape, const OptTensor& weight,
                                                           const OptTensor& bias, double eps) {
  constexpr const char* op = "custom::layer_norm_backward";
  glue::check_layer_norm_backward(op, grad_output, input, normalized_shape, weight, bias);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  const OptTensor w = dense(weight);
  const OptTensor b = dense(bias);
  Tensor dx = at::empty(x.sizes(), x.options());
  // As on CPU: empty placeholders for the parameters the op ran without.
  Tensor dw = glue::param_grad(weight, x);
  Tensor db = glue::param_grad(bias, x);
  if (x.numel() == 0) return {dx, dw.zero_(), db.zero_()};  // sums over no rows
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  const OptTensor db_out = b.has_value() ? OptTensor(db) : std::nullopt;
  call_aclnn(op, "aclnnLayerNormGradCustom", x.device(), aclnnLayerNormGradCustomGetWorkspaceSize,
             aclnnLayerNormGradCustom, dy, x, w, b, normalized_shape, eps, dx, dw_out, db_out);
  return {dx, dw, db};
}

// ---- softmax --------------------------------------------------------------------

Tensor softmax_npu(const Tensor& input, int64_t dim) {
  constexpr const char* op = "custom::softmax";
  check_dtype(op, input, "input", gen::kSoftmaxDtypes);
  const int64_t wrapped = wrap_dim(op, dim, input.dim());
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  // A 0-dim tensor is softmaxed as the one-element vector it holds.
  const Tensor x = dense(input.dim() == 0 ? input.reshape({1}) : input);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out.view(input.sizes());
  call_aclnn(op, "aclnnSoftmaxCustom", x.device(), aclnnSoftmaxCustomGetWorkspaceSize,
             aclnnSoftmaxCustom, x, wrapped, out);
  return out.view(input.sizes());
}

Tensor softmax_backward_npu(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  constexpr const char* op = "custom::softmax_backward";
  glue::check_softmax_backward(op, grad_output, output, dim);
  const int64_t wrapped = wrap_dim(op, dim, output.dim());
  check_npu_dtype(op, output, "output");
  const c10::DeviceGuard guard(output.device());
  // 0-dim tensors as the one-element vectors they hold, as in softmax_npu.
  const Tensor y = dense(output.dim() == 0 ? output.reshape({1}) : output);
  const Tensor dy = dense(grad_output.dim() == 0 ? grad_output.reshape({1}) : grad_output);
  Tensor dx = at::empty(y.sizes(), y.options());
  if (dx.numel() == 0) return dx.view(output.sizes());
  call_aclnn(op, "aclnnSoftmaxGradCustom", y.device(), aclnnSoftmaxGradCustomGetWorkspaceSize,
             aclnnSoftmaxGradCustom, dy, y, wrapped, dx);
  return dx.view(output.sizes());
}

}  // namespace

// The kernel takes q and k of [batch, heads, seq, dim] (unsqueeze_dim 1) or
// [batch, seq, heads, dim] (2) with cos/sin of [batch or 1, seq, dim]; the aclnn
// entry refuses other layouts with its own message (docs/ascend.md).
std::tuple<Tensor, Tensor> rotary_embedding_npu(const Tensor& q, const Tensor& k, const Tensor& cos,
                                                const Tensor& sin, int64_t unsqueeze_dim) {
  constexpr const char* op = "custom::rotary_embedding";
  glue::check_rotary(op, q, "q", k, "k", cos, sin, unsqueeze_dim, gen::kRotaryEmbeddingDtypes);
  check_npu_dtype(op, q, "q");
  const c10::DeviceGuard guard(q.device());
  const Tensor qd = dense(q), kd = dense(k), c = dense(cos), s = dense(sin);
  Tensor q_embed = at::empty(qd.sizes(), qd.options());
  Tensor k_embed = at::empty(kd.sizes(), kd.options());
  if (q_embed.numel() == 0 && k_embed.numel() == 0) return {q_embed, k_embed};
  call_aclnn(op, "aclnnRotaryEmbeddingCustom", qd.device(), aclnnRotaryEmbeddingCustomGetWorkspaceSize,
             aclnnRotaryEmbeddingCustom, qd, kd, c, s, unsqueeze_dim, q_embed, k_embed);
  return {q_embed, k_embed};
}

std::tuple<Tensor, Tensor> rotary_embedding_backward_npu(const Tensor& grad_q_embed, const Tensor& grad_k_embed,
                                                         const Tensor& cos, const Tensor& sin,
                                                         int64_t unsqueeze_dim) {
  constexpr const char* op = "custom::rotary_embedding_backward";
  glue::check_rotary(op, grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", cos, sin, unsqueeze_dim,
                     gen::kRotaryEmbeddingBackwardDtypes);
  check_npu_dtype(op, grad_q_embed, "grad_q_embed");
  const c10::DeviceGuard guard(grad_q_embed.device());
  const Tensor gq = dense(grad_q_embed), gk = dense(grad_k_embed), c = dense(cos), s = dense(sin);
  Tensor grad_q = at::empty(gq.sizes(), gq.options());
  Tensor grad_k = at::empty(gk.sizes(), gk.options());
  if (grad_q.numel() == 0 && grad_k.numel() == 0) return {grad_q, grad_k};
  call_aclnn(op, "aclnnRotaryEmbeddingBackwardCustom", gq.device(),
             aclnnRotaryEmbeddingBackwardCustomGetWorkspaceSize, aclnnRotaryEmbeddingBackwardCustom, gq, gk, c, s,
             unsqueeze_dim, grad_q, grad_k);
  return {grad_q, grad_k};
}

TORCH_LIBRARY_IMPL(custom, PrivateUse1, m) {
  m.impl("add", &add_npu);
  m.impl("add_backward", &add_backward_npu);
  m.impl("gelu", &gelu_npu);
  m.impl("gelu_backward", &gelu_backward_npu);
  m.impl("swiglu", &swiglu_npu);
  m.impl("swiglu_backward", &swiglu_backward_npu);
  m.impl("geglu", &geglu_npu);
  m.impl("geglu_backward", &geglu_backward_npu);
  m.impl("rms_norm", &rms_norm_npu);
  m.impl("rms_norm_backward", &rms_norm_backward_npu);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_npu);
  m.impl("fused_add_rms_norm_backward", &fused_add_rms_norm_backward_npu);
  m.impl("layer_norm", &layer_norm_npu);
  m.impl("layer_norm_backward", &layer_norm_backward_npu);
  m.impl("softmax", &softmax_npu);
  m.impl("softmax_backward", &softmax_backward_npu);
  m.impl("rotary_embedding", &rotary_embedding_npu);
  m.impl("rotary_embedding_backward", &rotary_embedding_backward_npu);
}

}  // namespace op_ext::npu
