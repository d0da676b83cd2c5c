// DataCopy and DataCopyPad between GM and the Unified Buffer, with the
// alignment rules of CANN 8 ("Non-Alignment Scenario" and the DataCopy /
// DataCopyPad API pages):
//   * DataCopy moves a multiple of 32 bytes, and its UB address is 32-byte
//     aligned; GM addresses have no alignment rule.
//   * DataCopyPad moves blockLen bytes per block (any length); in the UB every
//     block starts 32-byte aligned and occupies a whole number of 32-byte units.
//     GM -> UB: the leftPadding / rightPadding elements get paddingValue when
//     isPad is set; every other byte of the block's last 32-byte unit is
//     undefined on hardware and filled with NaN here, so a kernel that computes
//     on it sees the damage. DataCopyPad does not exist on every SoC (not on
//     Atlas inference / 310P); the simulator refuses it there.
//   * DataCopyExtParams' ranges (DataCopyPad GMToUB / UBToGM pages, 约束说明
//     表5 / 表4): blockCount in [0, 4095], blockLen in [0, 2097151] bytes,
//     srcStride and dstStride the whole uint32_t range; a blockCount or blockLen
//     of 0 makes the call a NOP on Atlas A2 (the only modelled SoC that has it).
#ifndef ASCENDC_SIM_DATA_COPY_H_
#define ASCENDC_SIM_DATA_COPY_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ascendc_sim/core.h"
#include "ascendc_sim/tensor.h"

namespace AscendC {

struct DataCopyParams {
  DataCopyParams() = default;
  DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;  // in 32-byte units
  uint16_t srcStride = 0;
  uint16_t dstStride = 0;
};

struct DataCopyExtParams {
  DataCopyExtParams() = default;
  DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = 0;
  uint32_t blockLen = 0;   // bytes
  uint32_t srcStride = 0;  // GM source: bytes; UB source: 32-byte units
  uint32_t dstStride = 0;  // GM destination: bytes; UB destination: 32-byte units
  uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() = default;
  DataCopyPadExtParams(bool isPadValue, uint8_t leftPadValue, uint8_t rightPadValue, T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue = T(0);
};

}  // namespace AscendC

namespace ascendc_sim {

template <typename T>
inline void CheckMoveType(const char* api) {
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    if (!Device().spec.hasBfloat16) Fail(Str(api, ": bfloat16_t is not supported on ", Device().spec.socName));
  }
}

inline void CheckCopyBytes(const char* api, uint64_t bytes, uint64_t count, const char* type) {
  if (count == 0) Fail(Str(api, ": count is 0"));
  if (bytes % kUbBlockBytes != 0) {
    Fail(Str(api, ": moves ", count, " x ", type, " = ", bytes,
             " bytes, not a multiple of 32 bytes (DataCopy needs 32-byte aligned lengths; use DataCopyPad for "
             "tails)"));
  }
}

inline uint64_t RoundUpBlock(uint64_t bytes) { return (bytes + kUbBlockBytes - 1) / kUbBlockBytes * kUbBlockBytes; }

// DataCopyExtParams ranges of the DataCopyPad pages (约束说明, 表5 GMToUB / 表4
// UBToGM). blockCount is a uint16_t, so a count past 4095 compiles; on hardware
// the instruction's field is 12 bits wide and such a copy moves something else.
// The strides take the whole uint32_t range, so only the UB bounds limit them.
inline constexpr uint32_t kMaxPadBlockCount = 4095;
inline constexpr uint32_t kMaxPadBlockLen = 2097151;

inline void CheckPadParams(const char* api, const AscendC::DataCopyExtParams& params) {
  if (params.blockCount > kMaxPadBlockCount) {
    Fail(Str(api, ": DataCopyExtParams.blockCount ", params.blockCount, " is out of range [0, ", kMaxPadBlockCount,
             "] (rule: DataCopyExtParams ranges, DataCopyPad page 约束说明)"));
  }
  if (params.blockLen > kMaxPadBlockLen) {
    Fail(Str(api, ": DataCopyExtParams.blockLen ", params.blockLen, " bytes is out of range [0, ", kMaxPadBlockLen,
             "] (rule: DataCopyExtParams ranges, DataCopyPad page 约束说明)"));
  }
}

}  // namespace ascendc_sim

namespace AscendC {

// GM -> UB, contiguous.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
  constexpr const char* api = "DataCopy(GM->UB)";
  ascendc_sim::CheckMoveType<T>(api);
  const uint64_t bytes = uint64_t(count) * sizeof(T);
  ascendc_sim::CheckCopyBytes(api, bytes, count, ascendc_sim::TypeName<T>::value);
  T* d = dst.Access(count, api, true);
  const T* s = src.Access(count, api);
  ascendc_sim::CheckDmaReadNotDirty(s, bytes, api);
  ascendc_sim::RecordGmRead(s, bytes, api);
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kMte2);
  ascendc_sim::ReadGmByMte2(n, api, reinterpret_cast<uintptr_t>(s), bytes);
  dst.Use(ascendc_sim::Pipe::kMte2, n, api, count, true);
  std::memcpy(d, s, bytes);
}

// UB -> GM, contiguous.
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  constexpr const char* api = "DataCopy(UB->GM)";
  ascendc_sim::CheckMoveType<T>(api);
  const uint64_t bytes = uint64_t(count) * sizeof(T);
  ascendc_sim::CheckCopyBytes(api, bytes, count, ascendc_sim::TypeName<T>::value);
  const T* s = src.Access(count, api, true);
  T* d = dst.Access(count, api);
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kMte3);
  src.Use(ascendc_sim::Pipe::kMte3, n, api, count, false);
  ascendc_sim::UseGmByMte3(n, api, reinterpret_cast<uintptr_t>(d), bytes);
  ascendc_sim::WriteGm(d, s, bytes, api);
}

// UB -> UB, contiguous.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  constexpr const char* api = "DataCopy(UB->UB)";
  ascendc_sim::CheckMoveType<T>(api);
  const uint64_t bytes = uint64_t(count) * sizeof(T);
  ascendc_sim::CheckCopyBytes(api, bytes, count, ascendc_sim::TypeName<T>::value);
  T* d = dst.Access(count, api, true);
  const T* s = src.Access(count, api, true);
  // A UB -> UB copy runs on the vector pipe.
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kV);
  src.Use(ascendc_sim::Pipe::kV, n, api, count, false);
  dst.Use(ascendc_sim::Pipe::kV, n, api, count, true);
  std::memmove(d, s, bytes);
}

// GM -> UB, blocks of any byte length, each landing 32-byte aligned in the UB.
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& params,
                        const DataCopyPadExtParams<T>& padParams) {
  using ascendc_sim::Fail;
  using ascendc_sim::Str;
  constexpr const char* api = "DataCopyPad(GM->UB)";
  const auto& spec = ascendc_sim::Device().spec;
  if (!spec.hasDataCopyPad) {
    Fail(Str(api, ": DataCopyPad is not available on ", spec.socName,
             " (Atlas inference products have no unaligned copy; move whole 32-byte blocks with DataCopy)"));
  }
  ascendc_sim::CheckMoveType<T>(api);
  ascendc_sim::CheckPadParams(api, params);
  if (params.blockCount == 0 || params.blockLen == 0) return;  // a NOP (约束说明, Atlas A2)
  if (params.blockLen % sizeof(T) != 0) {
    Fail(Str(api, ": blockLen ", params.blockLen, " bytes is not a whole number of ", ascendc_sim::TypeName<T>::value,
             " elements"));
  }
  const uint64_t padLimit = ascendc_sim::kUbBlockBytes / sizeof(T);
  if (padParams.leftPadding > padLimit || padParams.rightPadding > padLimit) {
    Fail(Str(api, ": leftPadding ", int(padParams.leftPadding), " / rightPadding ", int(padParams.rightPadding),
             " elements exceed 32 bytes (", padLimit, " elements of ", ascendc_sim::TypeName<T>::value, ")"));
  }
  const uint64_t left = padParams.leftPadding * sizeof(T);
  const uint64_t right = padParams.rightPadding * sizeof(T);
  const uint64_t rowBytes = ascendc_sim::RoundUpBlock(left + params.blockLen + right);
  const uint64_t rowPitch = rowBytes + uint64_t(params.dstStride) * ascendc_sim::kUbBlockBytes;
  const uint64_t totalUb = rowPitch * (params.blockCount - 1) + rowBytes;
  if (totalUb % sizeof(T) != 0) Fail(Str(api, ": UB layout not a whole number of elements"));
  auto* d = reinterpret_cast<uint8_t*>(dst.Access(totalUb / sizeof(T), api, true));
  const uint64_t gmPitch = uint64_t(params.blockLen) + params.srcStride;
  const uint64_t gmTotal = gmPitch * (params.blockCount - 1) + params.blockLen;
  if (gmTotal % sizeof(T) != 0) Fail(Str(api, ": srcStride ", params.srcStride, " bytes splits an element"));
  const auto* s = reinterpret_cast<const uint8_t*>(src.Access(gmTotal / sizeof(T), api));
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kMte2);
  for (uint32_t b = 0; b < params.blockCount; ++b) {
    ascendc_sim::CheckDmaReadNotDirty(s + b * gmPitch, params.blockLen, api);
    ascendc_sim::RecordGmRead(s + b * gmPitch, params.blockLen, api);
    ascendc_sim::ReadGmByMte2(n, api, reinterpret_cast<uintptr_t>(s + b * gmPitch), params.blockLen);
    dst[uint32_t(b * rowPitch / sizeof(T))].Use(ascendc_sim::Pipe::kMte2, n, api, rowBytes / sizeof(T), true);
    uint8_t* row = d + b * rowPitch;
    std::memset(row, ascendc_sim::kGarbageByte, rowBytes);
    std::memcpy(row + left, s + b * gmPitch, params.blockLen);
    if (padParams.isPad) {
      for (uint64_t i = 0; i < padParams.leftPadding; ++i) std::memcpy(row + i * sizeof(T), &padParams.paddingValue, sizeof(T));
      for (uint64_t i = 0; i < padParams.rightPadding; ++i) {
        std::memcpy(row + left + params.blockLen + i * sizeof(T), &padParams.paddingValue, sizeof(T));
      }
    }
  }
}

// UB -> GM, blocks of any byte length read from 32-byte aligned UB rows.
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& params) {
  using ascendc_sim::Fail;
  using ascendc_sim::Str;
  constexpr const char* api = "DataCopyPad(UB->GM)";
  const auto& spec = ascendc_sim::Device().spec;
  if (!spec.hasDataCopyPad) {
    Fail(Str(api, ": DataCopyPad is not available on ", spec.socName,
             " (Atlas inference products have no unaligned copy; move whole 32-byte blocks with DataCopy)"));
  }
  ascendc_sim::CheckMoveType<T>(api);
  ascendc_sim::CheckPadParams(api, params);
  if (params.blockCount == 0 || params.blockLen == 0) return;  // a NOP (约束说明, Atlas A2)
  if (params.blockLen % sizeof(T) != 0) {
    Fail(Str(api, ": blockLen ", params.blockLen, " bytes is not a whole number of ", ascendc_sim::TypeName<T>::value,
             " elements"));
  }
  const uint64_t rowBytes = ascendc_sim::RoundUpBlock(params.blockLen);
  const uint64_t rowPitch = rowBytes + uint64_t(params.srcStride) * ascendc_sim::kUbBlockBytes;
  const uint64_t ubTotal = rowPitch * (params.blockCount - 1) + params.blockLen;
  const auto* s = reinterpret_cast<const uint8_t*>(src.Access((ubTotal + sizeof(T) - 1) / sizeof(T), api, true));
  const uint64_t gmPitch = uint64_t(params.blockLen) + params.dstStride;
  const uint64_t gmTotal = gmPitch * (params.blockCount - 1) + params.blockLen;
  if (gmTotal % sizeof(T) != 0) Fail(Str(api, ": dstStride ", params.dstStride, " bytes splits an element"));
  auto* d = reinterpret_cast<uint8_t*>(dst.Access(gmTotal / sizeof(T), api));
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kMte3);
  for (uint32_t b = 0; b < params.blockCount; ++b) {
    src[uint32_t(b * rowPitch / sizeof(T))].Use(ascendc_sim::Pipe::kMte3, n, api, params.blockLen / sizeof(T), false);
    ascendc_sim::UseGmByMte3(n, api, reinterpret_cast<uintptr_t>(d + b * gmPitch), params.blockLen);
    ascendc_sim::WriteGm(d + b * gmPitch, s + b * rowPitch, params.blockLen, api);
  }
}

}  // namespace AscendC

#endif  // ASCENDC_SIM_DATA_COPY_H_
