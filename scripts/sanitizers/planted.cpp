// Planted mistakes for scripts/check_sanitizers.sh: compiled with the same
// sanitizer flags as the extensions and called from Python through ctypes under
// the same preload and options as the test run. The script requires each call
// to die with a report its detection logic finds; a sanitizer setup that has
// stopped working (flags lost, runtime not loaded, reports not written where
// the script looks) then fails the check instead of passing silently.
//
// Sizes and values come from the caller, so the compiler cannot see the
// mistake and fold it away.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

// The build's flags hide every symbol (setup.py's HIDDEN): the planted calls are
// this library's interface, reached through ctypes, so they are exported.
#pragma GCC visibility push(default)
extern "C" {

// Reads one element past the end of a heap block, in a worker thread: a report
// from a thread other than Python's must be found as well.
int planted_heap_overflow(int n) {
  int result = 0;
  std::thread worker([&] {
    int* block = static_cast<int*>(std::malloc(sizeof(int) * n));
    std::memset(block, 0, sizeof(int) * n);
    result = block[n];  // MISTAKE: heap-buffer-overflow
    std::free(block);
  });
  worker.join();
  return result;
}

// Signed integer overflow (undefined behaviour).
int planted_signed_overflow(int a, int b) {
  return a + b;  // MISTAKE when a + b > INT_MAX
}

// A float read through a pointer that is not 4-byte aligned (undefined behaviour).
float planted_misaligned_load(int offset) {
  alignas(8) unsigned char bytes[16] = {};
  const float* p = reinterpret_cast<const float*>(bytes + offset);
  return *p;  // MISTAKE when offset % 4 != 0
}

// No mistake: a C++ exception thrown and caught, as torch does for every error.
// Fails (ASan CHECK failure) where the runtime was preloaded without libstdc++.
int planted_throw_and_catch(int n) {
  try {
    throw std::runtime_error("expected");
  } catch (const std::runtime_error&) {
    return n;
  }
}

}  // extern "C"
#pragma GCC visibility pop
