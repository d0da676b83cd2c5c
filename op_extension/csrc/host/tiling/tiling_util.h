// Shared pieces of the host tiling functions: the kernel dtype codes, the error
// a tiling function raises for a shape it cannot run, the balanced split of
// aligned blocks over cores, and a registry that lets tests inspect any op's
// TilingData by name.
#ifndef OP_EXT_HOST_TILING_TILING_UTIL_H_
#define OP_EXT_HOST_TILING_TILING_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "soc_spec.h"
#include "tiling_def.h"

namespace op_ext::ascend {

// Element type code carried in every TilingData's dataType field; the kernel
// entry picks its template instantiation from it.
enum KernelDType : uint32_t { kDTypeFloat = 0, kDTypeHalf = 1, kDTypeBf16 = 2 };

inline uint32_t DTypeBytes(uint32_t dtype) { return dtype == kDTypeFloat ? 4 : 2; }
inline const char* DTypeName(uint32_t dtype) {
  return dtype == kDTypeFloat ? "float32" : dtype == kDTypeHalf ? "float16" : "bfloat16";
}

inline constexpr uint32_t kBlockBytes = 32;   // DataCopy / UB alignment unit
inline constexpr uint32_t kBufferNum = 2;     // double buffering of every queue
inline constexpr uint32_t kMaxBlockCount = 4095;  // DataCopyPad blockCount limit

inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
inline uint64_t RoundUp(uint64_t a, uint64_t b) { return CeilDiv(a, b) * b; }
inline uint64_t RoundDown(uint64_t a, uint64_t b) { return a / b * b; }

// A shape the kernel cannot process on this SoC (the message names the op).
class TilingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `units` work units over at most `coreNum` cores, each core getting at least
// `minUnitsPerCore` (the last may get fewer), balanced so that core counts differ
// by at most one unit: the first bigCoreNum cores get unitsPerCore + 1.
struct CoreSplit {
  uint32_t usedCoreNum = 0;
  uint64_t unitsPerCore = 0;
  uint32_t bigCoreNum = 0;
};

inline CoreSplit SplitOverCores(uint64_t units, uint32_t coreNum, uint64_t minUnitsPerCore = 1) {
  CoreSplit s;
  if (units == 0) return s;
  const uint64_t maxCores = std::max<uint64_t>(1, units / std::max<uint64_t>(1, minUnitsPerCore));
  s.usedCoreNum = uint32_t(std::min<uint64_t>({uint64_t(coreNum), units, maxCores}));
  s.unitsPerCore = units / s.usedCoreNum;
  s.bigCoreNum = uint32_t(units % s.usedCoreNum);
  return s;
}

// First unit of core `c` under a CoreSplit (the kernels compute the same).
inline uint64_t CoreFirstUnit(const CoreSplit& s, uint64_t c) {
  return c * s.unitsPerCore + std::min<uint64_t>(c, s.bigCoreNum);
}

inline uint64_t Numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

// ---- inspection registry (tests) -------------------------------------------

// What a test asks a tiling function: tensor shapes, element type and the
// op's attributes by name.
struct TilingQuery {
  std::vector<std::vector<int64_t>> shapes;
  uint32_t dtype = kDTypeFloat;
  std::map<std::string, double> attrs;
  std::map<std::string, std::string> strAttrs;
};

// One TilingData as (field name, value) pairs, in declaration order.
using TilingFields = std::vector<std::pair<std::string, double>>;

template <typename TilingData>
TilingFields DumpTiling(const TilingData& data) {
  const auto& list = TilingData::OpExtFields();
  if ((list.end + alignof(TilingData) - 1) / alignof(TilingData) * alignof(TilingData) != sizeof(TilingData)) {
    throw std::logic_error("tiling field list does not match the struct layout");
  }
  TilingFields out;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&data);
  for (const auto& f : list.fields) {
    double v = 0;
    if (f.isFloat && f.size == 4) {
      float x;
      std::memcpy(&x, bytes + f.offset, 4);
      v = x;
    } else if (f.isFloat) {
      std::memcpy(&v, bytes + f.offset, 8);
    } else {
      uint64_t u = 0;
      std::memcpy(&u, bytes + f.offset, f.size);
      if (f.isSigned && f.size < 8 && (u >> (8 * f.size - 1)) & 1) u |= ~uint64_t(0) << (8 * f.size);
      v = f.isSigned ? double(int64_t(u)) : double(u);
    }
    out.emplace_back(f.name, v);
  }
  return out;
}

using TilingInspector = std::function<std::vector<TilingFields>(const TilingQuery&, const SocSpec&)>;

inline std::map<std::string, TilingInspector>& TilingRegistry() {
  static std::map<std::string, TilingInspector> registry;
  return registry;
}

struct RegisterTilingInspector {
  RegisterTilingInspector(const char* op, TilingInspector fn) { TilingRegistry()[op] = std::move(fn); }
};

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_TILING_UTIL_H_
