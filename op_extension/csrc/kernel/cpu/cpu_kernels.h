// What every kernel shares: the dtypes, the KernelStub through which the glue
// reaches a kernel, and the choice of instruction set. Each op declares its own
// kernels (args struct and stubs) in its own header, kernel/cpu/<op>.h, so a new
// op adds no line here.
//
// Nothing here knows torch. Kernels take raw pointers, element counts and
// strides; every kernel is compiled once per instruction set (DEFAULT, AVX2,
// AVX512; see setup.py) and reached through a KernelStub that picks the best
// variant the running CPU supports, the way ATen's DispatchStub does. All
// tensors passed in are dense and row-major unless a stride argument says
// otherwise; outputs never alias inputs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace op_ext::cpu {

enum class DType : int8_t { Float32, Float64, Float16, BFloat16 };

inline constexpr int kMaxDims = 16;

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
// (OP_EXT_REGISTER_CUDA_KERNEL, kernel/cuda/cuda_kernels.h), as ATen's
// DispatchStub keeps its CPU and CUDA slots. Declared `inline` in its op's own
// header (kernel/cpu/<op>.h), so a new kernel adds no line to a shared file;
// constant-initialised, so the registrations may run in any order.
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

}  // namespace op_ext::cpu
