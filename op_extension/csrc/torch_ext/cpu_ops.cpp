// CPU implementations of the custom ops: the shared glue (ops_glue.h: checks,
// dense inputs, outputs) running the CPU kernel stubs, which pick the
// instruction-set variant (cpu_kernels.h).
#include <torch/library.h>

#include "ops_glue.h"

namespace op_ext {
namespace {

struct CpuKernels {
  explicit CpuKernels(const Tensor&) {}

  void add(cpu::DType d, const cpu::AddArgs& a) const { cpu::add_forward(d, a); }
  void reduce_to(cpu::DType d, const cpu::ReduceToArgs& a) const { cpu::reduce_to(d, a); }
  void gelu_forward(cpu::DType d, const cpu::GeluArgs& a) const { cpu::gelu_forward(d, a); }
  void gelu_backward(cpu::DType d, const cpu::GeluBackwardArgs& a) const {
    cpu::gelu_backward(d, a);
  }
  void swiglu_forward(cpu::DType d, const cpu::GluArgs& a) const { cpu::swiglu_forward(d, a); }
  void swiglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    cpu::swiglu_backward(d, a);
  }
  void geglu_forward(cpu::DType d, const cpu::GluArgs& a) const { cpu::geglu_forward(d, a); }
  void geglu_backward(cpu::DType d, const cpu::GluBackwardArgs& a) const {
    cpu::geglu_backward(d, a);
  }
  void rms_norm_forward(cpu::DType d, const cpu::RmsNormArgs& a) const {
    cpu::rms_norm_forward(d, a);
  }
  void rms_norm_backward(cpu::DType d, const cpu::RmsNormBackwardArgs& a) const {
    cpu::rms_norm_backward(d, a);
  }
  void layer_norm_forward(cpu::DType d, const cpu::LayerNormArgs& a) const {
    cpu::layer_norm_forward(d, a);
  }
  void layer_norm_backward(cpu::DType d, const cpu::LayerNormBackwardArgs& a) const {
    cpu::layer_norm_backward(d, a);
  }
  void softmax_forward(cpu::DType d, const cpu::SoftmaxArgs& a) const {
    cpu::softmax_forward(d, a);
  }
  void softmax_backward(cpu::DType d, const cpu::SoftmaxBackwardArgs& a) const {
    cpu::softmax_backward(d, a);
  }
  void rotary_embedding_forward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    cpu::rotary_embedding_forward(d, a);
  }
  void rotary_embedding_backward(cpu::DType d, const cpu::RotaryEmbeddingArgs& a) const {
    cpu::rotary_embedding_backward(d, a);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(custom, CPU, m) {
  glue::register_ops<CpuKernels>(m);
}

}  // namespace op_ext
