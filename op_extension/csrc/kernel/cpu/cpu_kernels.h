// The CPU kernels' interface: raw pointers, element counts and strides.
//
// Nothing here knows torch. Every kernel is compiled once per instruction set
// (DEFAULT, AVX2, AVX512; see setup.py) and reached through a KernelStub that picks
// the best variant the running CPU supports, the way ATen's DispatchStub does.
// All tensors passed in are dense and row-major unless a stride argument says
// otherwise; outputs never alias inputs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace op_ext::cpu {

enum class DType : int8_t { Float32, Float64, Float16, BFloat16 };
enum class GeluApprox : int8_t { None, Tanh };

inline constexpr int kMaxDims = 16;

// out[i] = a[i] + alpha * b[i] over `sizes`, with per-operand element strides
// (0 on broadcast dims). `out` is dense with shape `sizes`.
struct AddArgs {
  const void* a;
  const void* b;
  void* out;
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t a_strides[kMaxDims];
  int64_t b_strides[kMaxDims];
  double alpha;
};

// out = alpha * (grad summed over the dims where out has size 1).
// grad is dense with shape `sizes`; out is dense with shape `sizes` where
// `reduced[d]` dims have size 1.
struct ReduceToArgs {
  const void* grad;
  void* out;
  int ndim;
  int64_t sizes[kMaxDims];
  bool reduced[kMaxDims];
  double alpha;
};

// Row-wise ops see the input as [rows, cols] (cols = prod(normalized_shape)).
struct RmsNormArgs {
  const void* input;     // [rows, cols]
  const void* residual;  // [rows, cols] or nullptr: fused add + RMSNorm when set
  const void* weight;    // [cols] or nullptr
  void* output;          // [rows, cols]
  void* residual_out;    // [rows, cols], required when residual is set
  int64_t rows;
  int64_t cols;
  double eps;
};

struct RmsNormBackwardArgs {
  const void* grad_output;        // [rows, cols]
  const void* grad_residual_out;  // [rows, cols] or nullptr: added to grad_input
  const void* input;              // [rows, cols]: the normalised tensor
  const void* weight;             // [cols] or nullptr
  void* grad_input;               // [rows, cols]
  void* grad_weight;              // [cols], only when weight is set
  int64_t rows;
  int64_t cols;
  double eps;
};

struct LayerNormArgs {
  const void* input;   // [rows, cols]
  const void* weight;  // [cols] or nullptr
  const void* bias;    // [cols] or nullptr
  void* output;        // [rows, cols]
  int64_t rows;
  int64_t cols;
  double eps;
};

struct LayerNormBackwardArgs {
  const void* grad_output;  // [rows, cols]
  const void* input;        // [rows, cols]
  const void* weight;       // [cols] or nullptr
  void* grad_input;         // [rows, cols]
  void* grad_weight;        // [cols] or nullptr
  void* grad_bias;          // [cols] or nullptr
  int64_t rows;
  int64_t cols;
  double eps;
};

// Softmax over the middle dim of a dense [outer, dim_size, inner] view.
struct SoftmaxArgs {
  const void* input;
  void* output;
  int64_t outer;
  int64_t dim_size;
  int64_t inner;
};

struct SoftmaxBackwardArgs {
  const void* grad_output;
  const void* output;
  void* grad_input;
  int64_t outer;
  int64_t dim_size;
  int64_t inner;
};

// Elementwise activations over n dense elements.
struct GeluArgs {
  const void* input;
  void* output;
  int64_t n;
  GeluApprox approximate;
};

struct GeluBackwardArgs {
  const void* grad_output;
  const void* input;
  void* grad_input;
  int64_t n;
  GeluApprox approximate;
};

// Gated linear units: output = act(gate) * up. `approximate` is used by GEGLU only.
struct GluArgs {
  const void* gate;
  const void* up;
  void* output;
  int64_t n;
  GeluApprox approximate;
};

struct GluBackwardArgs {
  const void* grad_output;
  const void* gate;
  const void* up;
  void* grad_gate;
  void* grad_up;
  int64_t n;
  GeluApprox approximate;
};

template <typename Args>
using KernelFn = void (*)(DType, const Args&);

// Where a device kernel runs: the stream (a cudaStream_t) and the workspace the
// device glue allocated for it (nullptr when the kernel asks for none). Opaque
// here, so that this header stays free of CUDA as well as of torch.
struct DeviceLaunch {
  void* stream;
  void* workspace;
};

// One kernel, as the glue names it (torch_ext/ops/<op>.h calls
// kernels(cpu::<kernel>, dtype, args)): its CPU variants, one per instruction
// set, filled in by static registration from each variant's translation unit
// (register_kernel.h), and its CUDA launcher, registered by the kernel's .cu file
// (kernel/cuda/cuda_kernels.h), as ATen's DispatchStub keeps its CPU and CUDA
// slots. Declared `inline` in the kernel's own header, so a new kernel adds no
// line to a shared file; constant-initialised, so the registrations may run in
// any order.
template <typename Args>
struct KernelStub {
  using ArgsType = Args;

  constexpr explicit KernelStub(const char* kernel_name) : name(kernel_name) {}

  const char* name;
  KernelFn<Args> default_fn = nullptr;
  KernelFn<Args> avx2_fn = nullptr;
  KernelFn<Args> avx512_fn = nullptr;
  void (*cuda_fn)(DType, const Args&, const DeviceLaunch&) = nullptr;
  // Bytes of workspace the CUDA launcher needs; nullptr: none.
  size_t (*cuda_workspace_bytes)(DType, const Args&) = nullptr;

  // Runs the best CPU variant.
  void operator()(DType dtype, const Args& args) const;
};

enum class Isa : int8_t { Default, Avx2, Avx512 };

// The best instruction set this CPU runs, lowered by OP_EXT_CPU_ISA=default|avx2|avx512.
Isa active_isa();
// The best instruction set this CPU supports.
Isa best_isa();
// Selects a variant for later calls (tests run every variant this way). Returns
// false, changing nothing, when the CPU cannot run `isa`.
bool set_active_isa(Isa isa);
const char* isa_name(Isa isa);

template <typename Args>
void KernelStub<Args>::operator()(DType dtype, const Args& args) const {
  KernelFn<Args> fn = default_fn;
  const Isa isa = active_isa();
  if (isa == Isa::Avx512 && avx512_fn) {
    fn = avx512_fn;
  } else if (isa >= Isa::Avx2 && avx2_fn) {
    fn = avx2_fn;
  }
  fn(dtype, args);
}

inline KernelStub<AddArgs> add_forward{"add_forward"};
inline KernelStub<ReduceToArgs> reduce_to{"reduce_to"};
inline KernelStub<GeluArgs> gelu_forward{"gelu_forward"};
inline KernelStub<GeluBackwardArgs> gelu_backward{"gelu_backward"};
inline KernelStub<GluArgs> swiglu_forward{"swiglu_forward"};
inline KernelStub<GluBackwardArgs> swiglu_backward{"swiglu_backward"};
inline KernelStub<GluArgs> geglu_forward{"geglu_forward"};
inline KernelStub<GluBackwardArgs> geglu_backward{"geglu_backward"};
inline KernelStub<RmsNormArgs> rms_norm_forward{"rms_norm_forward"};
inline KernelStub<RmsNormBackwardArgs> rms_norm_backward{"rms_norm_backward"};
inline KernelStub<LayerNormArgs> layer_norm_forward{"layer_norm_forward"};
inline KernelStub<LayerNormBackwardArgs> layer_norm_backward{"layer_norm_backward"};
inline KernelStub<SoftmaxArgs> softmax_forward{"softmax_forward"};
inline KernelStub<SoftmaxBackwardArgs> softmax_backward{"softmax_backward"};

}  // namespace op_ext::cpu
