// The choice of instruction set for the kernel stubs (cpu_kernels.h). Compiled
// once, without ISA flags: the variants register themselves into the stubs from
// their own translation units (see register_kernel.h).
#include "cpu_kernels.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

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

// The size of CPU 0's last-level cache from Linux's sysfs, or 0. (glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) reads CPUID, which virtual machines misreport:
// 320 MiB for the 32 MiB of the development VM.)
int64_t sysfs_last_level_cache_bytes() {
  int best_level = 0;
  int64_t best_bytes = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    int level = 0;
    char size[32] = {0};
    FILE* f = std::fopen((dir + "level").c_str(), "r");
    if (f == nullptr) break;
    const bool got_level = std::fscanf(f, "%d", &level) == 1;
    std::fclose(f);
    f = std::fopen((dir + "size").c_str(), "r");
    if (f == nullptr) continue;
    const bool got_size = std::fscanf(f, "%31s", size) == 1;
    std::fclose(f);
    if (!got_level || !got_size || level <= best_level) continue;
    char* unit = nullptr;
    const long long value = std::strtoll(size, &unit, 10);
    const int64_t scale = *unit == 'K' ? 1024 : *unit == 'M' ? 1024 * 1024 : *unit == 'G' ? 1024LL << 20 : 1;
    if (value > 0) {
      best_level = level;
      best_bytes = value * scale;
    }
  }
  return best_bytes;
}

int64_t initial_streaming_store_bytes() {
  const char* requested = std::getenv("OP_EXT_CPU_STREAM_BYTES");
  if (requested != nullptr && *requested != '\0') {
    if (std::strcmp(requested, "never") == 0) return std::numeric_limits<int64_t>::max();
    char* end = nullptr;
    const long long bytes = std::strtoll(requested, &end, 10);
    if (*end == '\0' && bytes >= 0) return bytes;
    // Anything else keeps the default: a typo must not change what runs.
  }
  const int64_t cache = sysfs_last_level_cache_bytes();
  return cache > 0 ? cache : int64_t{32} << 20;
}

std::atomic<int64_t>& streaming_slot() {
  static std::atomic<int64_t> slot{initial_streaming_store_bytes()};
  return slot;
}

std::atomic<int64_t> streamed_call_count{0};

}  // namespace

int64_t streaming_store_bytes() {
  return streaming_slot().load(std::memory_order_relaxed);
}

int64_t set_streaming_store_bytes(int64_t bytes) {
  return streaming_slot().exchange(bytes < 0 ? std::numeric_limits<int64_t>::max() : bytes,
                                   std::memory_order_relaxed);
}

int64_t streamed_calls() {
  return streamed_call_count.load(std::memory_order_relaxed);
}

void count_streamed_call() {
  streamed_call_count.fetch_add(1, std::memory_order_relaxed);
}

bool cpu_has_native_bf16_narrowing() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
#else
  return false;
#endif
}

std::atomic<bool> g_native_bf16_narrowing{cpu_has_native_bf16_narrowing()};

bool set_native_bf16_narrowing(bool on) {
  if (on && !cpu_has_native_bf16_narrowing()) return false;
  g_native_bf16_narrowing.store(on, std::memory_order_relaxed);
  return true;
}

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
