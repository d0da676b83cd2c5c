// Pieces every Ascend C kernel of op_extension uses: copies that pick DataCopy
// or DataCopyPad by alignment, the per-core range of an elementwise split, the
// tile walk with its tail rule, and the dtype dispatch of the entry points.
// The host side of each contract is in host/tiling/.
//
// Synchronisation the kernels write by hand (the rest comes from the queues):
//   * PipeBarrier<PIPE_V>() between two vector instructions where the second
//     reads bytes the first wrote: the devkit documents the compiler inserting
//     it for NPU arch 2201 (Atlas A2) only, not for 2002 (Ascend310P)
//     (同步控制/核内同步/关键特性说明.md); on 2201 it is the barrier the compiler
//     would add anyway;
//   * PipeBarrier<PIPE_MTE3>() between copies out whose GM ranges overlap (the
//     310P tail scheme rewrites a last whole block): PipeBarrier page;
//   * SetFlag/WaitFlag pairs where data passes between pipes outside a queue.
#ifndef OP_EXT_KERNEL_ASCENDC_KERNEL_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_KERNEL_COMMON_H_

#include "kernel_operator.h"

// DataCopyPad and bfloat16 exist on Atlas A2 (__CCE_AICORE__ 220) and on the
// simulator (which refuses them at run time on SoCs without them); the 310P
// device compiler (__CCE_AICORE__ 200) has neither, and the tilings never ask
// for them there.
#if !defined(__CCE_AICORE__) || __CCE_AICORE__ >= 220
#define OP_EXT_HAS_DATA_COPY_PAD 1
#define OP_EXT_HAS_BF16 1
#else
#define OP_EXT_HAS_DATA_COPY_PAD 0
#define OP_EXT_HAS_BF16 0
#endif

namespace op_ext_kernel {

constexpr int32_t kBufferNum = 2;       // double buffering
constexpr uint32_t kBlockBytes = 32;    // DataCopy / UB alignment unit
constexpr uint32_t kDTypeFloat = 0;     // KernelDType of host/tiling/tiling_util.h
constexpr uint32_t kDTypeHalf = 1;
constexpr uint32_t kDTypeBf16 = 2;
constexpr uint32_t kTailPad = 0;        // TailMode of host/tiling/elementwise_tiling.h
constexpr uint32_t kTailOverlap = 1;

// The Cast round mode that rounds float to T (half or bfloat16_t) to nearest even
// on every SoC. The Cast page's per-SoC tables: float -> half takes CAST_NONE
// everywhere (nearest even when inexact) but CAST_RINT only on Atlas A2 -- on
// Ascend310P the RINT branch is an assert, empty in device builds, so nothing is
// written; float -> bfloat16_t (Atlas A2 only) takes CAST_RINT but not CAST_NONE.
template <typename T>
__aicore__ inline constexpr AscendC::RoundMode NarrowRound() {
  return AscendC::IsSameType<T, half>::value ? AscendC::RoundMode::CAST_NONE : AscendC::RoundMode::CAST_RINT;
}

// float -> T (half or bfloat16_t), rounded to nearest even on every SoC
// (NarrowRound), and T -> float, exact (widening takes only CAST_NONE): every
// Cast of the kernels that convert whole rows goes through these two.
template <typename T>
__aicore__ inline void CastFromFloat(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<float>& src,
                                     uint32_t count) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Cast(dst, src, NarrowRound<T>(), count);
}
template <typename T>
__aicore__ inline void CastToFloat(const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<T>& src,
                                   uint32_t count) {
  AscendC::Cast(dst, src, AscendC::RoundMode::CAST_NONE, count);
}

template <typename T>
__aicore__ inline constexpr uint32_t BlockElems() {
  return kBlockBytes / sizeof(T);
}

template <typename T>
__aicore__ inline uint32_t AlignToBlock(uint32_t count) {
  return (count + BlockElems<T>() - 1) / BlockElems<T>() * BlockElems<T>();
}

// GM -> UB of `count` elements; the UB side ends up padded to whole blocks
// (padding content undefined).
template <typename T>
__aicore__ inline void CopyGmToUb(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                                  uint32_t count) {
  if ((count * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, count);
    return;
  }
#if OP_EXT_HAS_DATA_COPY_PAD
  AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, T(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
#endif
}

// UB -> GM of exactly `count` elements.
template <typename T>
__aicore__ inline void CopyUbToGm(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                  uint32_t count) {
  if ((count * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, count);
    return;
  }
#if OP_EXT_HAS_DATA_COPY_PAD
  AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPad(dst, src, params);
#endif
}

// GM -> UB of `rows` consecutive rows of `cols` elements; in the UB each row
// starts on a 32-byte block (row stride: cols rounded up to a block).
template <typename T>
__aicore__ inline void CopyRowsGmToUb(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                                      uint32_t rows, uint32_t cols) {
  if ((cols * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, rows * cols);
    return;
  }
#if OP_EXT_HAS_DATA_COPY_PAD
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, T(0)};
  AscendC::DataCopyPad(dst, src, params, pad);
#endif
}

// UB -> GM of `rows` rows laid out as CopyRowsGmToUb leaves them.
template <typename T>
__aicore__ inline void CopyRowsUbToGm(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                      uint32_t rows, uint32_t cols) {
  if ((cols * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, rows * cols);
    return;
  }
#if OP_EXT_HAS_DATA_COPY_PAD
  AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * sizeof(T)), 0, 0, 0};
  AscendC::DataCopyPad(dst, src, params);
#endif
}

// Elements an input GlobalTensor may be read over. With kTailOverlap (no
// DataCopyPad) reads are whole blocks, so a run that ends less than a block before
// the tensor's end is read up to B - 1 elements past it, into the padding the
// device allocator guarantees behind every allocation (at least up to the next 32
// bytes plus 32: aclrtMalloc and torch_npu's caching allocator; docs/ascend.md,
// "Tails"). Outputs are never written past their end: that padding may hold
// another tensor.
template <typename T>
__aicore__ inline uint64_t ReadableLength(uint64_t totalLength, uint32_t tailMode) {
  return (tailMode == kTailOverlap && totalLength > 0) ? totalLength + BlockElems<T>() - 1 : totalLength;
}

// The first n (< one block) elements of src to GM, one scalar store each: a
// DataCopy would write the whole block, past the tensor's end. GlobalTensor
// SetValue exists on Atlas inference AI Core as on Atlas A2; it writes into the
// core's Data Cache, so every 64-byte line the n elements touch is cleaned out
// to GM (DataCacheCleanAndInvalid, SINGLE_CACHE_LINE: the prototype without
// dcciDst is the one Ascend310P has). A clean acts only from its address to the
// next 64-byte boundary (the devkit's DataCacheCleanAndInvalid page, example 2),
// so it is issued at dst and at each line boundary inside the run: cleaning the
// first and the last element only would leave the bytes of the last line before
// the last element in the cache when the run crosses a boundary. Only one core
// writes such a tensor (the tiling uses one core below kMinBytesPerCore), as the
// SetValue page asks of cores sharing a cache line. The values come from the
// vector unit: V->S event before the scalar unit reads them.
//
// The cache writes a line back whole (64-byte granularity: the
// ReadGmByPassDCache page), the bytes around the stores included, so the lines
// must hold what GM holds now when the stores land in them. A line an earlier
// kernel left cached may not: a clean issued mid-line leaves the line's bytes
// before it cached, and the devkit does not say a kernel starts with an empty
// cache. So the whole cache is dropped first (ENTIRE_DATA_CACHE) and the stores'
// write-allocate reads GM. This path only writes tensors under one block.
constexpr uint64_t kDataCacheLineBytes = 64;

// Before scalar loads (GetValue) of GM that a DMA wrote, into a workspace earlier
// calls used too (the backward norms' statistics): the devkit does not say the
// data cache is emptied when a kernel starts, so a line of an earlier call's
// values could still be cached. Drops every line of the core (issue 28, item 4).
// A tensor never given a buffer (nothing to read: no rows, or no gradient that
// needs it) has nothing cached.
template <typename T>
__aicore__ inline void DropDataCacheBeforeReading(const AscendC::GlobalTensor<T>& gm) {
  if (gm.GetSize() > 0) AscendC::DataCacheCleanAndInvalid<T, AscendC::CacheLine::ENTIRE_DATA_CACHE>(gm);
}

template <typename T>
__aicore__ inline void WriteShortTensor(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                        uint32_t n) {
  event_t eventVS = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::V_S));
  AscendC::SetFlag<AscendC::HardEvent::V_S>(eventVS);
  AscendC::WaitFlag<AscendC::HardEvent::V_S>(eventVS);
  AscendC::DataCacheCleanAndInvalid<T, AscendC::CacheLine::ENTIRE_DATA_CACHE>(dst);
  for (uint32_t i = 0; i < n; ++i) dst.SetValue(i, src.GetValue(i));
  // GM addresses of elements are multiples of sizeof(T), so every line boundary
  // falls on an element.
  const uint64_t base = reinterpret_cast<uint64_t>(dst.GetPhyAddr());
  for (uint32_t i = 0; i < n;) {
    AscendC::DataCacheCleanAndInvalid<T, AscendC::CacheLine::SINGLE_CACHE_LINE>(dst[i]);
    const uint64_t nextLine = (base + uint64_t(i) * sizeof(T)) / kDataCacheLineBytes * kDataCacheLineBytes +
                              kDataCacheLineBytes;
    i = static_cast<uint32_t>((nextLine - base) / sizeof(T));
  }
}

// Copies of runs that need not be whole 32-byte blocks (rows, chunks and slab rows
// of the row kernels), on every SoC. tailMode (host/tiling/row_tiling.h):
//   kTailPad (DataCopyPad exists): DataCopyPad moves any length.
//   kTailOverlap (Ascend310P: DataCopy only, whole blocks, 32-byte aligned UB
//   addresses), the way the official ops move unaligned rows there:
//   * reads round the length up to whole blocks. The extra elements (under one
//     block) are the next row's or, at the tensor's end, the allocator's padding
//     (ReadableLength); no vector op reads them (every op takes the exact count);
//   * a write of n >= one block moves the whole blocks, then the run's last block
//     [n - B, n), which starts off a 32-byte boundary in the UB: the scalar unit
//     copies those B elements into an aligned one-block stage that DataCopy then
//     moves. The last block rewrites up to B - 1 elements of the first copy with
//     the same values; nothing outside the run is written;
//   * a write of n < one block stores element by element (WriteShortTensor); the
//     tilings give a tensor whose rows are under one block a single core;
//   * a walk in chunks shifts its last chunk back to end on the row's end with a
//     whole number of blocks (ShiftLastChunk), recomputing a few elements of the
//     chunk before it (same core, same values), so its output is a plain DataCopy.
template <typename T>
class RowCopier {
 public:
  __aicore__ inline RowCopier() {}

  // The stage is allocated on every SoC (one block), so the host's UB plans count
  // kBlockBytes for it unconditionally.
  __aicore__ inline void Init(AscendC::TPipe* pipe, uint32_t tailMode) {
    tailMode_ = tailMode;
    pipe->InitBuffer(stage_, kBlockBytes);
  }

  __aicore__ inline uint32_t TailMode() const { return tailMode_; }

  // GM -> UB of `count` elements; the UB side ends up padded to whole blocks
  // (padding content undefined).
  __aicore__ inline void In(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                            uint32_t count) const {
    if (count % BlockElems<T>() == 0 || tailMode_ == kTailOverlap) {
      AscendC::DataCopy(dst, src, AlignToBlock<T>(count));
      return;
    }
    CopyGmToUb(dst, src, count);
  }

  // GM -> UB of `rows` consecutive rows of `cols` elements; in the UB each row
  // starts on a block (stride AlignToBlock(cols)).
  __aicore__ inline void RowsIn(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                                uint32_t rows, uint32_t cols) const {
    if (tailMode_ == kTailOverlap && cols % BlockElems<T>() != 0) {
      const uint32_t stride = AlignToBlock<T>(cols);
      for (uint32_t j = 0; j < rows; ++j) AscendC::DataCopy(dst[j * stride], src[uint64_t(j) * cols], stride);
      return;
    }
    CopyRowsGmToUb(dst, src, rows, cols);
  }

  // UB -> GM of exactly `count` elements.
  __aicore__ inline void Out(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                             uint32_t count) {
    constexpr uint32_t kB = BlockElems<T>();
    if (count % kB == 0 || tailMode_ != kTailOverlap) {
      CopyUbToGm(dst, src, count);
      return;
    }
    if (count < kB) {
      WriteShortTensor(dst, src, count);
      return;
    }
    AscendC::DataCopy(dst, src, count / kB * kB);
    // The last block rewrites GM the copy above wrote: MTE3 copies to overlapping
    // GM must be serialised (PipeBarrier page).
    AscendC::PipeBarrier<PIPE_MTE3>();
    AscendC::LocalTensor<T> stage = stage_.template Get<T>();
    // The vector unit wrote src; the scalar unit reads it, then MTE3 reads the stage.
    event_t eventVS = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::V_S));
    AscendC::SetFlag<AscendC::HardEvent::V_S>(eventVS);
    AscendC::WaitFlag<AscendC::HardEvent::V_S>(eventVS);
    for (uint32_t i = 0; i < kB; ++i) stage.SetValue(i, src.GetValue(count - kB + i));
    event_t eventSMte3 = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::S_MTE3));
    AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(eventSMte3);
    AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(eventSMte3);
    AscendC::DataCopy(dst[count - kB], stage, kB);
    // The next Out writes the stage again only after this copy has read it.
    event_t eventMte3S = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::MTE3_S));
    AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(eventMte3S);
    AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(eventMte3S);
  }

  // UB -> GM of `rows` rows laid out as RowsIn leaves them.
  __aicore__ inline void RowsOut(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                 uint32_t rows, uint32_t cols) {
    if (tailMode_ == kTailOverlap && cols % BlockElems<T>() != 0) {
      const uint32_t stride = AlignToBlock<T>(cols);
      for (uint32_t j = 0; j < rows; ++j) Out(dst[uint64_t(j) * cols], src[j * stride], cols);
      return;
    }
    CopyRowsUbToGm(dst, src, rows, cols);
  }

  // In a walk over [begin, end) in chunks (c the chunk's start, len its length, a
  // block multiple for every chunk but the last): with kTailOverlap, the last
  // chunk, if it is not whole blocks and not the first, moves back to
  // [end - AlignToBlock(len), end). Chunks are at most chunkLength long, a block
  // multiple, so it stays inside the walk.
  __aicore__ inline void ShiftLastChunk(uint64_t begin, uint64_t& c, uint32_t& len) const {
    if (tailMode_ == kTailOverlap && c > begin && len % BlockElems<T>() != 0) {
      const uint32_t whole = AlignToBlock<T>(len);
      c = c + len - whole;
      len = whole;
      // The shifted chunk's output overlaps the chunk before it in GM: the MTE3
      // copies must be serialised (PipeBarrier page).
      AscendC::PipeBarrier<PIPE_MTE3>();
    }
  }

 private:
  uint32_t tailMode_ = kTailPad;
  AscendC::TBuf<AscendC::TPosition::VECCALC> stage_;
};

// A parameter row (weight or bias) of `cols` elements from GM into a float row of
// the UB (`dst`, `rowStride` elements), staged through `queue`, a VECIN queue
// whose buffers hold at least one row of T. The norm kernels call it once per core.
template <typename T, typename Queue>
__aicore__ inline void LoadParamRowAsFloat(RowCopier<T>& copier, Queue& queue, const AscendC::GlobalTensor<T>& src,
                                           const AscendC::LocalTensor<float>& dst, uint32_t cols,
                                           uint32_t rowStride) {
  AscendC::LocalTensor<T> raw = queue.template AllocTensor<T>();
  copier.In(raw, src, cols);
  queue.EnQue(raw);
  raw = queue.template DeQue<T>();
  if constexpr (AscendC::IsSameType<T, float>::value) {
    AscendC::DataCopy(dst, raw, rowStride);
  } else {
    AscendC::Cast(dst, raw, AscendC::RoundMode::CAST_NONE, cols);
  }
  queue.FreeTensor(raw);
}

// `width` float sums (a column block of a weight or bias gradient) to GM as T,
// staged through `queue`, a VECOUT queue whose buffers hold `width` T rounded up
// to a block.
template <typename T, typename Queue>
__aicore__ inline void StoreFloatRow(RowCopier<T>& copier, Queue& queue, const AscendC::GlobalTensor<T>& dst,
                                     const AscendC::LocalTensor<float>& src, uint32_t width) {
  AscendC::LocalTensor<T> out = queue.template AllocTensor<T>();
  if constexpr (AscendC::IsSameType<T, float>::value) {
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::DataCopy(out, src, AlignToBlock<float>(width));
  } else {
    AscendC::PipeBarrier<PIPE_V>();
    CastFromFloat(out, src, width);
  }
  queue.EnQue(out);
  out = queue.template DeQue<T>();
  copier.Out(dst, out, width);
  queue.FreeTensor(out);
}

// The tiles of one core under an elementwise split (elementwise_tiling.h):
//   ElementwiseTiles<T> tiles; tiles.Init(...);
//   uint64_t offset; uint32_t count;
//   while (tiles.Next(offset, count)) { CopyIn; Compute; CopyOut; }
template <typename T>
class ElementwiseTiles {
 public:
  __aicore__ inline ElementwiseTiles() {}
  __aicore__ inline void Init(uint64_t totalLength, uint64_t blocksPerCore, uint32_t bigCoreNum, uint32_t tileLength,
                              uint32_t tailMode) {
    const uint64_t core = AscendC::GetBlockIdx();
    const uint64_t blockElems = BlockElems<T>();
    const uint64_t firstBlock = core * blocksPerCore + (core < bigCoreNum ? core : bigCoreNum);
    const uint64_t blocks = blocksPerCore + (core < bigCoreNum ? 1 : 0);
    start_ = firstBlock * blockElems;
    end_ = start_ + blocks * blockElems;
    if (end_ > totalLength) end_ = totalLength;
    if (start_ > end_) start_ = end_;
    tileLength_ = tileLength;
    next_ = start_;
    totalLength_ = totalLength;
    overlapTail_ = false;
    scalarOut_ = false;
    if (tailMode == kTailOverlap && end_ == totalLength && totalLength % blockElems != 0) {
      // Move the aligned part, then the last whole block of the tensor.
      overlapTail_ = true;
      alignedEnd_ = totalLength / blockElems * blockElems;
      if (alignedEnd_ < start_) alignedEnd_ = start_;
      if (totalLength < blockElems) {
        // No whole block ends at the tensor's end: read and compute the block
        // from 0 (the reads run into the allocator's padding), write element-wise.
        tailOffset_ = 0;
        scalarOut_ = true;
      } else {
        tailOffset_ = totalLength - blockElems;
      }
    } else {
      alignedEnd_ = end_;
    }
  }

  __aicore__ inline bool Next(uint64_t& offset, uint32_t& count) {
    if (next_ < alignedEnd_) {
      offset = next_;
      const uint64_t left = alignedEnd_ - next_;
      count = static_cast<uint32_t>(left < tileLength_ ? left : tileLength_);
      next_ += count;
      return true;
    }
    if (overlapTail_) {
      overlapTail_ = false;
      // The tail block overlaps the tiles before it in GM: their MTE3 copies
      // must be complete before its copy starts (PipeBarrier page).
      AscendC::PipeBarrier<PIPE_MTE3>();
      offset = tailOffset_;
      count = BlockElems<T>();
      return true;
    }
    return false;
  }

  __aicore__ inline uint64_t Start() const { return start_; }
  __aicore__ inline uint64_t End() const { return end_; }

  // UB -> GM of the tile Next() gave (offset, count): CopyUbToGm, except for a
  // tensor smaller than one block without DataCopyPad, written element-wise.
  __aicore__ inline void CopyOut(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                 uint64_t offset, uint32_t count) const {
    if (scalarOut_) {
      WriteShortTensor(dst, src, static_cast<uint32_t>(totalLength_));
    } else {
      CopyUbToGm(dst[offset], src, count);
    }
  }

 private:
  uint64_t totalLength_ = 0;
  bool scalarOut_ = false;
  uint64_t start_ = 0;
  uint64_t end_ = 0;
  uint64_t next_ = 0;
  uint64_t alignedEnd_ = 0;
  uint64_t tailOffset_ = 0;
  uint32_t tileLength_ = 0;
  bool overlapTail_ = false;
};

// Reads one float the vector unit just wrote (a reduction result) on the scalar
// unit: the V->S event orders the two pipes on hardware.
__aicore__ inline float ReadScalarAfterVector(const AscendC::LocalTensor<float>& t) {
  event_t eventVS = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::V_S));
  AscendC::SetFlag<AscendC::HardEvent::V_S>(eventVS);
  AscendC::WaitFlag<AscendC::HardEvent::V_S>(eventVS);
  return t.GetValue(0);
}

// v[0] = 1 / sqrt(v[0]) on the vector unit, as Sqrt then Div. Not Rsqrt: its API
// page says float results miss a relative 1e-4 and advises Div and Sqrt where
// precision matters; those two stay within an ulp each. `one` is scratch: a free
// 32-byte-aligned float block not overlapping v (the norm kernels pass their
// reduce work tensor, idle between reductions).
__aicore__ inline void InvSqrt(const AscendC::LocalTensor<float>& v, const AscendC::LocalTensor<float>& one) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Sqrt(v, v, 1);
  AscendC::Duplicate(one, 1.0f, 1);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Div(v, one, v, 1);
}

// ---- rows whose statistics overflow float --------------------------------------
// The norm kernels compute a row's sum of squares (or variance) in float. When it
// overflows while every |x| is finite (|x| above ~1.8e19 / sqrt(cols)), they redo
// that row's statistics on x * s, s an exact power of two with max|x| * s <= 1, so
// the squares cannot overflow and x * s loses nothing (only elements below 2^-126 * max|x|,
// whose squares do not count in float anyway). The check is on the row's rstd,
// a scalar the kernel reads anyway: the common path costs nothing more.

constexpr float kFloatMax = 3.40282347e38f;
constexpr float kMinNormal = 1.17549435e-38f;  // 2^-126

// The largest |src[i]| of n elements (scratch: n floats; work: the ReduceMax work
// tensor; stat: one block). NaN if any element is NaN.
__aicore__ inline float RowMaxAbs(const AscendC::LocalTensor<float>& stat, const AscendC::LocalTensor<float>& src,
                                  const AscendC::LocalTensor<float>& scratch, const AscendC::LocalTensor<float>& work,
                                  int32_t n) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Abs(scratch, src, n);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::ReduceMax(stat, scratch, work, n);
  return ReadScalarAfterVector(stat);
}

// The running maximum of chunk maxima, NaN-propagating.
__aicore__ inline float MaxOrNan(float a, float b) { return (a != a || b <= a) ? a : b; }

// s = 2^-e with maxAbs * s <= 1 and e as small as that allows, but s >= 2^-126
// (a normal float, so no SoC flushes it; then max|x| * s < 4). Scalar halvings:
// at most 128, and only on a row that overflowed.
__aicore__ inline float PowerOfTwoScale(float maxAbs) {
  float s = 1.0f;
  while (maxAbs * s > 1.0f && s > kMinNormal) s *= 0.5f;
  return s;
}

// ---- rows whose statistics underflow float ------------------------------------
// The other end: a row of tiny values (|x| below ~1e-19) has squares below float's
// normal range, rounded to 2^-149 absolute, or 0. Where eps does not outweigh them
// (eps 0, or an eps itself that small), rstd loses its precision, or is unknown
// (Sqrt of 0: "if src holds a non-positive value, the result may be unknown", NaN
// in the simulator) and the row NaN where x / rms(x) is finite. The kernels then
// redo the row's statistics on x * s, s the power of two that brings max|x| up into
// [0.5, 1), as the CPU and CUDA kernels do. The check is again on the rstd read
// anyway: above 2^51, mean square + eps is below 2^-102, the only place where that
// rounding can reach float's last bit; NaN is the Sqrt of 0 (or a NaN in the row,
// whose max|x| is NaN: the callers then keep the plain result).

constexpr float kUnderflowRstd = 2251799813685248.0f;  // 2^51
constexpr float kMaxScaleUp = 1.26765060e30f;           // 2^100

// True for the rstd of a row whose statistics underflowed: above 2^51, or NaN.
__aicore__ inline bool StatisticUnderflowed(float rstd) { return !(rstd <= kUnderflowRstd); }

// s = 2^e with maxAbs * s in [0.5, 1), but at most 2^100: eps, below 2^-102 where a
// row underflowed, keeps eps * s^2 below 2^98, finite; and a row that would take
// more (max|x| below 2^-100, every x a multiple of 2^-149) has x * s a multiple of
// 2^-49, whose squares, multiples of 2^-98, float holds exactly (the CPU and CUDA
// kernels' cap too). 1 for an all-zero row (its eps-0 statistics are 0 / 0 at any
// scale). Scalar doublings: at most 100, and only on a row that underflowed.
__aicore__ inline float UnderflowScale(float maxAbs) {
  float s = 1.0f;
  if (maxAbs == 0.0f) return s;
  while (maxAbs * s < 0.5f && s < kMaxScaleUp) s *= 2.0f;
  return s;
}

// The scale of a row whose statistics overflowed or underflowed: PowerOfTwoScale
// (down) past max|x| = 1, UnderflowScale (up) below. Chosen by max|x|, as the CPU
// and CUDA kernels choose, not by rstd, which is NaN both for a Sqrt of 0 and for a
// LayerNorm mean whose sum overflowed to inf - inf: a row that underflows has
// max|x| below 2^-35, and one whose g * c sum overflowed (an inf dy) with max|x|
// below 1 is scaled up exactly, to the same result. maxAbs finite.
__aicore__ inline float RescueScale(float maxAbs) {
  return maxAbs > 1.0f ? PowerOfTwoScale(maxAbs) : UnderflowScale(maxAbs);
}

// A row's rstd that asks for a rescue: 0 (its statistics overflowed), above
// kUnderflowRstd or NaN (they underflowed, or the row holds a NaN).
__aicore__ inline bool NeedsRescue(float rstd) { return rstd == 0.0f || StatisticUnderflowed(rstd); }

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_KERNEL_COMMON_H_
