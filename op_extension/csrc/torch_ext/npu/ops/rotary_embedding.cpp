// custom::rotary_embedding and custom::rotary_embedding_backward on Ascend NPUs (torch_npu's
// PrivateUse1 key): the CPU op's argument checks (csrc/torch_ext/ops/rotary_embedding.h), then the
// Ascend kernels through their aclnn entry points. RotaryEmbeddingCustom and
// RotaryEmbeddingGradCustom. Registered by the generated op_ext_npu_registration.cpp; the steps
// every op shares (npu dtypes, the dense layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/rotary_embedding.h"
#include "aclnn_rotary_embedding_custom.h"
#include "aclnn_rotary_embedding_grad_custom.h"

namespace op_ext::npu {

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
  call_aclnn(op, "aclnnRotaryEmbeddingGradCustom", gq.device(),
             aclnnRotaryEmbeddingGradCustomGetWorkspaceSize, aclnnRotaryEmbeddingGradCustom, gq, gk, c, s,
             unsqueeze_dim, grad_q, grad_k);
  return {grad_q, grad_k};
}

}  // namespace op_ext::npu
