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

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace op_ext::cpu {

enum class DType : int8_t { Float32, Float64, Float16, BFloat16 };

inline constexpr int kMaxDims = 16;

template <typename Args>
using KernelFn = void (*)(DType, const Args&);

// One kernel's CPU variants, one per instruction set, filled in by static
// registration from each variant's translation unit (register_kernel.h), the
// way ATen's DispatchStub keeps its CPU slots. Constant-initialised, so the
// registrations may run in any order.
//
// Each kernel is a type of its own, derived from this one in its op's header
// (kernel/cpu/<op>.h), with one object the glue names:
//
//   struct RmsNormForward final : KernelStub<RmsNormArgs> { using KernelStub::KernelStub; };
//   inline RmsNormForward rms_norm_forward{"rms_norm_forward"};
//
// so that a device's glue finds that device's implementation of the kernel by
// overload at compile time: the CUDA glue calls `cuda::launcher(kernel)`,
// declared beside the launcher in kernel/cuda/<op>.cuh and bound at link time
// to the function its .cu file defines. Nothing is written into a stub but its
// own library's CPU variants: the extensions are built with hidden visibility,
// so each library (_C, _cuda_sim, _ascend_sim) has its own stubs.
template <typename Args>
struct KernelStub {
  using ArgsType = Args;

  constexpr explicit KernelStub(const char* kernel_name) : name(kernel_name) {}

  const char* name;
  KernelFn<Args> default_fn = nullptr;
  KernelFn<Args> avx2_fn = nullptr;
  KernelFn<Args> avx512_fn = nullptr;

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

// Streaming (non-temporal) stores. A call whose inputs and outputs together
// exceed the last-level cache evicts what it writes before anyone reads it, and
// every line it writes is first read from memory (the read-for-ownership of a
// write-back cache): a third of add's traffic, a quarter of RMSNorm's. Such
// calls write their outputs with non-temporal stores, which skip that read.
// Calls below the threshold keep ordinary stores, so that the next op finds
// their output in cache. Only the AVX2 and AVX512 variants stream; the values
// written are the same either way.
//
// The threshold in bytes moved by one call: the last-level cache of CPU 0
// (Linux sysfs; 32 MiB where it is not found), or OP_EXT_CPU_STREAM_BYTES
// (a byte count; "never"). INT64_MAX: never.
int64_t streaming_store_bytes();
// Sets the threshold for later calls (tests force both paths); returns the old one.
int64_t set_streaming_store_bytes(int64_t bytes);
// Kernel calls that chose streaming stores so far (tests check they were taken).
int64_t streamed_calls();
void count_streamed_call();

// float -> bfloat16 with AVX512-BF16's VCVTNE2PS2BF16 (one instruction for 32
// values) instead of at::vec's integer rounding (about seven per 16), where the
// CPU has it (Zen 4, Sapphire Rapids and later): bfloat16 kernels that are bound
// by their arithmetic spent up to a third of it there. The AVX512 variant only;
// the bits are the same either way (vec_utils.h, narrow; numerics_check.h checks
// every float). Read once per conversion, hence a global rather than a call
// into dispatch.cpp.
extern std::atomic<bool> g_native_bf16_narrowing;
inline bool native_bf16_narrowing() { return g_native_bf16_narrowing.load(std::memory_order_relaxed); }
// Whether the CPU has the instruction.
bool cpu_has_native_bf16_narrowing();
// Switches the native conversion on or off for later calls (tests compare both);
// false, changing nothing, when asked for it on a CPU without the instruction.
bool set_native_bf16_narrowing(bool on);

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
