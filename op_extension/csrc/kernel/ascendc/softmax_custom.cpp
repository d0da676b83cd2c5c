// SoftmaxCustom: y = exp(x - max) / sum(exp(x - max)) along `dim` of a
// contiguous [outer, dimSize, inner] input, in float for every element type
// (16-bit inputs are cast up, the result rounded once).
//
// Rows mode (inner == 1): per row ReduceMax, x - max, Exp, ReduceSum, times 1/sum.
//   A row that does not fit in the UB is read three times in chunks: the max
//   (chunk maxima combined on the scalar unit), the sum of exp (chunk sums added
//   in order), the output.
// Columns mode (inner > 1): per slab [dim rows, innerTile] the max and the sum
//   are rows of innerTile floats built with elementwise Max / Add across the
//   slab's rows; out = exp(x - max) / sum by Div. A slab is dimSize rows, or --
//   when dim is split -- read three times in chunks of dim rows.
// A -inf input contributes exp(-inf) = 0; a row (column) of only -inf gives NaN,
// as torch.softmax (its max is -inf and -inf - -inf is NaN). 16-bit rows whose max
// is not finite are written as NaN bits (saturation mode would make them 0); 16-bit
// columns are not: on Ascend310P a fully masked column gives 0 (docs/ascend.md).
// Tiling: host/tiling/softmax_custom_tiling.h (the UB plan there mirrors Init).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "softmax_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelSoftmax {
 public:
  __aicore__ inline KernelSoftmax() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const optiling::SoftmaxCustomTilingData& tiling, TPipe* pipe) {
    t_ = tiling;
    const uint64_t core = GetBlockIdx();
    firstUnit_ = core * t_.unitsPerCore + (core < t_.bigCoreNum ? core : t_.bigCoreNum);
    unitCount_ = t_.unitsPerCore + (core < t_.bigCoreNum ? 1 : 0);
    const uint64_t total = t_.outer * t_.dimSize * t_.inner;
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), op_ext_kernel::ReadableLength<T>(total, t_.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), total);
    copier_.Init(pipe, t_.tailMode);
    uint32_t tileElems = 0;
    if (t_.columns) {
      tileElems = t_.chunkLength * t_.innerTile;
      pipe->InitBuffer(maxRow_, t_.innerTile * sizeof(float));
      pipe->InitBuffer(sumRow_, t_.innerTile * sizeof(float));
    } else {
      tileElems = t_.split ? t_.chunkLength : t_.rowsPerTile * t_.rowStride;
      const uint32_t rowElems = t_.split ? t_.chunkLength : t_.rowStride;
      if constexpr (!kIsFloat) pipe->InitBuffer(inputF_, rowElems * sizeof(float));
      pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
      pipe->InitBuffer(stat_, op_ext_kernel::kBlockBytes);
    }
    pipe->InitBuffer(inQueueX_, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(outQueueY_, kBufferNum, tileElems * sizeof(T));
    if (t_.columns && !kIsFloat) pipe->InitBuffer(inputF_, tileElems * sizeof(float));
  }

  __aicore__ inline void Process() {
    if (t_.columns) {
      for (uint64_t u = 0; u < unitCount_; ++u) ProcessSlab(firstUnit_ + u);
    } else if (t_.split) {
      for (uint64_t r = 0; r < unitCount_; ++r) ProcessSplitRow(firstUnit_ + r);
    } else {
      for (uint64_t r = 0; r < unitCount_; r += t_.rowsPerTile) {
        const uint32_t k = static_cast<uint32_t>(unitCount_ - r < t_.rowsPerTile ? unitCount_ - r : t_.rowsPerTile);
        CopyInRows(firstUnit_ + r, k);
        ComputeRows(k);
        CopyOutRows(firstUnit_ + r, k);
      }
    }
  }

 private:
  static constexpr bool kIsFloat = IsSameType<T, float>::value;

  // ---- rows mode, whole rows ----------------------------------------------------

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) {
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    copier_.RowsIn(x, xGm_[row * t_.dimSize], k, t_.dimSize);
    inQueueX_.EnQue(x);
  }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = inQueueX_.template DeQue<T>();
    LocalTensor<T> y = outQueueY_.template AllocTensor<T>();
    const int32_t n = static_cast<int32_t>(t_.dimSize);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      // e: exp(x - max) in float -- in y's row for float, in inputF_ for 16-bit.
      LocalTensor<float> e = kIsFloat ? y[at].template ReinterpretCast<float>() : inputF_.template Get<float>();
      LocalTensor<float> xf = InputAsFloat(x[at], t_.dimSize);
      PipeBarrier<PIPE_V>();
      const float rowMax = ReadReduce(xf, n, true);
      PipeBarrier<PIPE_V>();
      Adds(e, xf, -rowMax, n);
      PipeBarrier<PIPE_V>();
      Exp(e, e, n);
      PipeBarrier<PIPE_V>();
      const float sum = ReadReduce(e, n, false);
      PipeBarrier<PIPE_V>();
      Muls(e, e, 1.0f / sum, n);
      if constexpr (!kIsFloat) {
        PipeBarrier<PIPE_V>();
        Cast(y[at], e, op_ext_kernel::NarrowRound<T>(), t_.dimSize);
        if (!IsFinite(rowMax)) WriteNanRow(y[at], t_.dimSize);
      }
    }
    outQueueY_.EnQue(y);
    inQueueX_.FreeTensor(x);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k) {
    LocalTensor<T> y = outQueueY_.template DeQue<T>();
    copier_.RowsOut(yGm_[row * t_.dimSize], y, k, t_.dimSize);
    outQueueY_.FreeTensor(y);
  }

  // ---- rows mode, split rows ----------------------------------------------------

  __aicore__ inline void ProcessSplitRow(uint64_t row) {
    const uint64_t base = row * t_.dimSize;
    // Pass 1: the max. NaN wins, as in ReduceMax.
    float rowMax = 0.0f;
    for (uint32_t c = 0; c < t_.dimSize; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      LocalTensor<T> x = CopyInChunk(base + c, len);
      const float m = ReadReduce(InputAsFloat(x, len), static_cast<int32_t>(len), true);
      if (c == 0 || m != m || (rowMax == rowMax && m > rowMax)) rowMax = m;
      inQueueX_.FreeTensor(x);
    }
    // Pass 2: the sum of exp(x - max), chunk sums added in order.
    float sum = 0.0f;
    for (uint32_t c = 0; c < t_.dimSize; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> x = CopyInChunk(base + c, len);
      PipeBarrier<PIPE_V>();
      LocalTensor<float> xf = InputAsFloat(x, len);  // float: x's own buffer, overwritten in place
      PipeBarrier<PIPE_V>();
      Adds(xf, xf, -rowMax, n);
      PipeBarrier<PIPE_V>();
      Exp(xf, xf, n);
      sum += ReadReduce(xf, n, false);
      inQueueX_.FreeTensor(x);
    }
    const float scale = 1.0f / sum;
    // Pass 3: output (the last chunk shifted back to whole blocks where only
    // whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.dimSize; c0 += t_.chunkLength) {
      uint64_t c = c0;
      uint32_t len = ChunkLen(c0);
      copier_.ShiftLastChunk(0, c, len);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> x = CopyInChunk(base + c, len);
      LocalTensor<T> y = outQueueY_.template AllocTensor<T>();
      PipeBarrier<PIPE_V>();
      LocalTensor<float> xf = InputAsFloat(x, len);
      LocalTensor<float> e = kIsFloat ? y.template ReinterpretCast<float>() : xf;
      PipeBarrier<PIPE_V>();
      Adds(e, xf, -rowMax, n);
      PipeBarrier<PIPE_V>();
      Exp(e, e, n);
      PipeBarrier<PIPE_V>();
      Muls(e, e, scale, n);
      if constexpr (!kIsFloat) {
        PipeBarrier<PIPE_V>();
        Cast(y, e, op_ext_kernel::NarrowRound<T>(), len);
        if (!IsFinite(rowMax)) WriteNanRow(y, len);
      }
      outQueueY_.EnQue(y);
      inQueueX_.FreeTensor(x);
      y = outQueueY_.template DeQue<T>();
      copier_.Out(yGm_[base + c], y, len);
      outQueueY_.FreeTensor(y);
    }
  }

  __aicore__ inline uint32_t ChunkLen(uint32_t c) const {
    return t_.dimSize - c < t_.chunkLength ? t_.dimSize - c : t_.chunkLength;
  }

  __aicore__ inline LocalTensor<T> CopyInChunk(uint64_t offset, uint32_t len) {
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    copier_.In(x, xGm_[offset], len);
    inQueueX_.EnQue(x);
    return inQueueX_.template DeQue<T>();
  }

  // `count` elements in float: the tensor itself for float, else cast into inputF_.
  __aicore__ inline LocalTensor<float> InputAsFloat(const LocalTensor<T>& x, uint32_t count) {
    if constexpr (kIsFloat) {
      return x.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> xf = inputF_.template Get<float>();
      Cast(xf, x, RoundMode::CAST_NONE, count);
      PipeBarrier<PIPE_V>();  // the caller computes on the float copy next
      return xf;
    }
  }

  // A row whose max is not finite (all -inf, or holding +inf or NaN) is NaN
  // throughout, as torch.softmax. In float the arithmetic gives that; a 16-bit
  // result under saturation mode (Ascend310P's only mode) would turn each NaN into 0
  // (Cast saturates NaN to 0), so such rows are written as NaN bits by an integer
  // Duplicate, which does not saturate.
  __aicore__ static inline bool IsFinite(float v) { return v - v == 0.0f; }

  __aicore__ inline void WriteNanRow(const LocalTensor<T>& y, uint32_t count) {
    constexpr uint16_t kNanBits = IsSameType<T, half>::value ? 0x7E00 : 0x7FC0;  // quiet NaN of half / bfloat16
    Duplicate(y.template ReinterpretCast<uint16_t>(), kNanBits, static_cast<int32_t>(count));
  }

  // max (or sum) of src[0..n), read as a scalar.
  __aicore__ inline float ReadReduce(const LocalTensor<float>& src, int32_t n, bool max) {
    LocalTensor<float> stat = stat_.template Get<float>();
    LocalTensor<float> work = work_.template Get<float>();
    if (max) {
      PipeBarrier<PIPE_V>();
      ReduceMax(stat, src, work, n);
    } else {
      PipeBarrier<PIPE_V>();
      ReduceSum(stat, src, work, n);
    }
    return op_ext_kernel::ReadScalarAfterVector(stat);
  }

  // ---- columns mode -----------------------------------------------------------

  // One slab: outer index o, inner elements [i0, i0 + len).
  __aicore__ inline void ProcessSlab(uint64_t unit) {
    const uint64_t o = unit / t_.innerTiles;
    uint64_t i0 = (unit % t_.innerTiles) * t_.innerTile;
    uint32_t len = static_cast<uint32_t>(t_.inner - i0 < t_.innerTile ? t_.inner - i0 : t_.innerTile);
    // Where only whole blocks move, a last slab that is not whole blocks moves back
    // to end on inner's end: its first columns are the slab before's, recomputed
    // (a column's softmax depends on that column only) and written again with the
    // same values -- possibly by another core, with the same bytes.
    copier_.ShiftLastChunk(0, i0, len);
    const uint64_t base = o * t_.dimSize * t_.inner + i0;  // GM offset of the slab's row 0
    LocalTensor<float> maxRow = maxRow_.template Get<float>();
    LocalTensor<float> sumRow = sumRow_.template Get<float>();
    if (!t_.split) {
      LocalTensor<T> x = CopyInSlab(base, t_.dimSize, len);
      LocalTensor<float> xf = SlabAsFloat(x, t_.dimSize, len);
      PipeBarrier<PIPE_V>();
      SlabMax(maxRow, xf, t_.dimSize, len, true);
      LocalTensor<T> y = outQueueY_.template AllocTensor<T>();
      LocalTensor<float> e = kIsFloat ? y.template ReinterpretCast<float>() : xf;
      PipeBarrier<PIPE_V>();
      SlabExp(e, xf, maxRow, t_.dimSize, len);
      PipeBarrier<PIPE_V>();
      SlabSum(sumRow, e, t_.dimSize, len, true);
      PipeBarrier<PIPE_V>();
      FinishSlab(y, e, sumRow, t_.dimSize, len);
      inQueueX_.FreeTensor(x);
      CopyOutSlab(base, t_.dimSize, len);
      return;
    }
    // Pass 1: the max row; pass 2: the sum row; pass 3: output -- dim in chunks.
    for (uint32_t d = 0; d < t_.dimSize; d += t_.chunkLength) {
      const uint32_t rows = DimChunk(d);
      LocalTensor<T> x = CopyInSlab(base + d * t_.inner, rows, len);
      PipeBarrier<PIPE_V>();
      SlabMax(maxRow, SlabAsFloat(x, rows, len), rows, len, d == 0);
      inQueueX_.FreeTensor(x);
    }
    for (uint32_t d = 0; d < t_.dimSize; d += t_.chunkLength) {
      const uint32_t rows = DimChunk(d);
      LocalTensor<T> x = CopyInSlab(base + d * t_.inner, rows, len);
      PipeBarrier<PIPE_V>();
      LocalTensor<float> xf = SlabAsFloat(x, rows, len);  // float: x's own buffer, overwritten in place
      PipeBarrier<PIPE_V>();
      SlabExp(xf, xf, maxRow, rows, len);
      PipeBarrier<PIPE_V>();
      SlabSum(sumRow, xf, rows, len, d == 0);
      inQueueX_.FreeTensor(x);
    }
    for (uint32_t d = 0; d < t_.dimSize; d += t_.chunkLength) {
      const uint32_t rows = DimChunk(d);
      LocalTensor<T> x = CopyInSlab(base + d * t_.inner, rows, len);
      PipeBarrier<PIPE_V>();
      LocalTensor<float> xf = SlabAsFloat(x, rows, len);
      LocalTensor<T> y = outQueueY_.template AllocTensor<T>();
      LocalTensor<float> e = kIsFloat ? y.template ReinterpretCast<float>() : xf;
      PipeBarrier<PIPE_V>();
      SlabExp(e, xf, maxRow, rows, len);
      PipeBarrier<PIPE_V>();
      FinishSlab(y, e, sumRow, rows, len);
      inQueueX_.FreeTensor(x);
      CopyOutSlab(base + d * t_.inner, rows, len);
    }
  }

  __aicore__ inline uint32_t DimChunk(uint32_t d) const {
    return t_.dimSize - d < t_.chunkLength ? t_.dimSize - d : t_.chunkLength;
  }

  // `rows` rows of `len` elements, `inner` apart in GM from xGm_[offset], into a
  // slab with rows innerTile apart; dequeued (the caller frees it).
  __aicore__ inline LocalTensor<T> CopyInSlab(uint64_t offset, uint32_t rows, uint32_t len) {
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    if (t_.stridedCopyPad) {
#if OP_EXT_HAS_DATA_COPY_PAD
      const uint32_t rowBytes = len * sizeof(T);
      const uint32_t ubGapBlocks = (t_.innerTile * sizeof(T) - AlignedBytes(rowBytes)) / op_ext_kernel::kBlockBytes;
      DataCopyExtParams params{static_cast<uint16_t>(rows), rowBytes,
                               static_cast<uint32_t>((t_.inner - len) * sizeof(T)), ubGapBlocks, 0};
      DataCopyPadExtParams<T> pad{false, 0, 0, T(0)};
      DataCopyPad(x, xGm_[offset], params, pad);
#endif
    } else {
      // No DataCopyPad (Ascend310P): row by row, each rounded up to whole blocks.
      for (uint32_t d = 0; d < rows; ++d) copier_.In(x[d * t_.innerTile], xGm_[offset + d * t_.inner], len);
    }
    inQueueX_.EnQue(x);
    return inQueueX_.template DeQue<T>();
  }

  __aicore__ inline void CopyOutSlab(uint64_t offset, uint32_t rows, uint32_t len) {
    LocalTensor<T> y = outQueueY_.template DeQue<T>();
    if (t_.stridedCopyPad) {
#if OP_EXT_HAS_DATA_COPY_PAD
      const uint32_t rowBytes = len * sizeof(T);
      const uint32_t ubGapBlocks = (t_.innerTile * sizeof(T) - AlignedBytes(rowBytes)) / op_ext_kernel::kBlockBytes;
      DataCopyExtParams params{static_cast<uint16_t>(rows), rowBytes, ubGapBlocks,
                               static_cast<uint32_t>((t_.inner - len) * sizeof(T)), 0};
      DataCopyPad(yGm_[offset], y, params);
#endif
    } else {
      for (uint32_t d = 0; d < rows; ++d) copier_.Out(yGm_[offset + d * t_.inner], y[d * t_.innerTile], len);
    }
    outQueueY_.FreeTensor(y);
  }

  __aicore__ inline static uint32_t AlignedBytes(uint32_t bytes) {
    return (bytes + op_ext_kernel::kBlockBytes - 1) / op_ext_kernel::kBlockBytes * op_ext_kernel::kBlockBytes;
  }

  // The slab in float: x itself for float, else each row's `len` elements cast
  // into inputF_ (rows innerTile apart there too, so every row starts block aligned).
  __aicore__ inline LocalTensor<float> SlabAsFloat(const LocalTensor<T>& x, uint32_t rows, uint32_t len) {
    if constexpr (kIsFloat) {
      return x.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> xf = inputF_.template Get<float>();
      for (uint32_t d = 0; d < rows; ++d) {
        Cast(xf[d * t_.innerTile], x[d * t_.innerTile], RoundMode::CAST_NONE, len);
      }
      PipeBarrier<PIPE_V>();  // the caller computes on the float copy next
      return xf;
    }
  }

  // maxRow = max over the slab's rows (first: start from row 0, else fold into maxRow).
  __aicore__ inline void SlabMax(const LocalTensor<float>& maxRow, const LocalTensor<float>& xf, uint32_t rows,
                                 uint32_t len, bool first) {
    const int32_t n = static_cast<int32_t>(len);
    uint32_t d = 0;
    if (first) {
      PipeBarrier<PIPE_V>();
      DataCopy(maxRow, xf, t_.innerTile);  // whole row (innerTile is a block multiple); beyond len unused
      d = 1;
    }
    for (; d < rows; ++d) {
      PipeBarrier<PIPE_V>();  // each reads the one before
      Max(maxRow, maxRow, xf[d * t_.innerTile], n);
    }
  }

  // e[d] = exp(xf[d] - maxRow) for each row; e may be xf.
  __aicore__ inline void SlabExp(const LocalTensor<float>& e, const LocalTensor<float>& xf,
                                 const LocalTensor<float>& maxRow, uint32_t rows, uint32_t len) {
    const int32_t n = static_cast<int32_t>(len);
    for (uint32_t d = 0; d < rows; ++d) {
      PipeBarrier<PIPE_V>();
      Sub(e[d * t_.innerTile], xf[d * t_.innerTile], maxRow, n);
      PipeBarrier<PIPE_V>();
      Exp(e[d * t_.innerTile], e[d * t_.innerTile], n);
    }
  }

  // sumRow (+)= sum over the slab's rows, in row order.
  __aicore__ inline void SlabSum(const LocalTensor<float>& sumRow, const LocalTensor<float>& e, uint32_t rows,
                                 uint32_t len, bool first) {
    const int32_t n = static_cast<int32_t>(len);
    uint32_t d = 0;
    if (first) {
      PipeBarrier<PIPE_V>();
      DataCopy(sumRow, e, t_.innerTile);
      d = 1;
    }
    for (; d < rows; ++d) {
      PipeBarrier<PIPE_V>();  // each reads the one before
      Add(sumRow, sumRow, e[d * t_.innerTile], n);
    }
  }

  // y = e / sumRow per row (rounded to T), enqueued for CopyOutSlab.
  __aicore__ inline void FinishSlab(LocalTensor<T>& y, const LocalTensor<float>& e, const LocalTensor<float>& sumRow,
                                    uint32_t rows, uint32_t len) {
    const int32_t n = static_cast<int32_t>(len);
    for (uint32_t d = 0; d < rows; ++d) {
      PipeBarrier<PIPE_V>();
      Div(e[d * t_.innerTile], e[d * t_.innerTile], sumRow, n);
      PipeBarrier<PIPE_V>();
      if constexpr (!kIsFloat) Cast(y[d * t_.innerTile], e[d * t_.innerTile], op_ext_kernel::NarrowRound<T>(), len);
    }
    outQueueY_.EnQue(y);
  }

  optiling::SoftmaxCustomTilingData t_;
  uint64_t firstUnit_ = 0;
  uint64_t unitCount_ = 0;
  TQue<TPosition::VECIN, kBufferNum> inQueueX_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueY_;
  TBuf<TPosition::VECCALC> inputF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> maxRow_;
  TBuf<TPosition::VECCALC> sumRow_;
  op_ext_kernel::RowCopier<T> copier_;
  GlobalTensor<T> xGm_;
  GlobalTensor<T> yGm_;
};

template <typename T>
__aicore__ inline void RunSoftmax(GM_ADDR x, GM_ADDR y, const optiling::SoftmaxCustomTilingData& tiling) {
  TPipe pipe;
  KernelSoftmax<T> op;
  op.Init(x, y, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void softmax_custom(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunSoftmax<float>(x, y, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunSoftmax<half>(x, y, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunSoftmax<bfloat16_t>(x, y, tilingData);
#endif
  }
}
