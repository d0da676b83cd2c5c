// The choice of instruction set for the kernel stubs (cpu_kernels.h). Compiled
// once, without ISA flags: the variants register themselves into the stubs from
// their own translation units (see register_kernel.h).
#include "cpu_kernels.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace op_ext::cpu {

namespace {

Isa detect_cpu_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma")) {
    return Isa::Avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::Avx2;
  }
#endif
  return Isa::Default;
}

// The environment can only lower the choice: asking for an instruction set the
// CPU lacks would crash with SIGILL instead of failing cleanly.
Isa initial_isa() {
  Isa best = detect_cpu_isa();
  const char* requested = std::getenv("OP_EXT_CPU_ISA");
  if (requested == nullptr) {
    return best;
  }
  Isa want = best;
  if (std::strcmp(requested, "default") == 0) {
    want = Isa::Default;
  } else if (std::strcmp(requested, "avx2") == 0) {
    want = Isa::Avx2;
  } else if (std::strcmp(requested, "avx512") == 0) {
    want = Isa::Avx512;
  }
  return want < best ? want : best;
}

std::atomic<Isa>& isa_slot() {
  static std::atomic<Isa> slot{initial_isa()};
  return slot;
}

}  // namespace

Isa active_isa() {
  return isa_slot().load(std::memory_order_relaxed);
}

Isa best_isa() {
  static const Isa best = detect_cpu_isa();
  return best;
}

bool set_active_isa(Isa isa) {
  if (isa > best_isa()) {
    return false;
  }
  isa_slot().store(isa, std::memory_order_relaxed);
  return true;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    default:
      return "default";
  }
}

}  // namespace op_ext::cpu
