// Add (add): the torch-free contract of its kernels, shared by the CPU kernels
// (elementwise.cpp) and the CUDA launchers (../cuda/add.cuh). add_backward runs
// reduce_to.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {

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

// The kernels, as the glue names them: their CPU variants filled in by elementwise.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/elementwise.cu and bound to them by cuda::launcher (../cuda/add.cuh).
struct AddForward final : KernelStub<AddArgs> {
  using KernelStub::KernelStub;
};
inline AddForward add_forward{"add_forward"};
struct ReduceTo final : KernelStub<ReduceToArgs> {
  using KernelStub::KernelStub;
};
inline ReduceTo reduce_to{"reduce_to"};

}  // namespace op_ext::cpu
