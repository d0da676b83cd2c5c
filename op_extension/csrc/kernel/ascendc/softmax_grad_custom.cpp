// SoftmaxGradCustom: dx = y * (dy - sum(dy * y)) along `dim` of contiguous dy
// (gradOutput) and y (the softmax output) viewed as [outer, dimSize, inner], in
// float for every element type (16-bit inputs are cast up, the result rounded
// once), as the CPU kernel computes it.
//
// Rows mode (inner == 1): per row p = dy * y, s = ReduceSum(p), dx = (dy - s) * y.
//   A row that does not fit in the UB is read twice in chunks: the sum (chunk sums
//   added in order on the scalar unit), then the output.
// Columns mode (inner > 1): per slab [dim rows, innerTile] the sum is a row of
//   innerTile floats built with Mul / Add across the slab's rows, in row order;
//   dx = (dy - sum) * y row by row. When dim is split, the slab is read twice in
//   chunks of dim rows (sum, output).
// dy * y is formed where it costs no UB of its own: in the dx tile (float, it is
// overwritten by the result next), in dy's own buffer (a sum pass, which needs
// nothing else of dy), or in dy's float copy (16-bit), which is then cast again
// from the input still held in its queue.
// Non-finite values follow from the formula, as on CPU: a NaN in a row's dy * y
// makes the whole row NaN, an infinite one makes the others -inf * y (or NaN).
// Tiling: host/tiling/softmax_grad_custom_tiling.h (the UB plan there mirrors Init).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "softmax_grad_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelSoftmaxGrad {
 public:
  __aicore__ inline KernelSoftmaxGrad() {}

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR y, GM_ADDR dx, const optiling::SoftmaxGradCustomTilingData& tiling,
                              TPipe* pipe) {
    t_ = tiling;
    const uint64_t core = GetBlockIdx();
    firstUnit_ = core * t_.unitsPerCore + (core < t_.bigCoreNum ? core : t_.bigCoreNum);
    unitCount_ = t_.unitsPerCore + (core < t_.bigCoreNum ? 1 : 0);
    const uint64_t total = t_.outer * t_.dimSize * t_.inner;
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dy), op_ext_kernel::ReadableLength<T>(total, t_.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), op_ext_kernel::ReadableLength<T>(total, t_.tailMode));
    dxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dx), total);
    copier_.Init(pipe, t_.tailMode);
    uint32_t tileElems = 0;
    uint32_t floatElems = 0;  // elements of each float copy (dy, y) for 16-bit types
    if (t_.columns) {
      tileElems = t_.chunkLength * t_.innerTile;
      floatElems = tileElems;
      pipe->InitBuffer(sumRow_, t_.innerTile * sizeof(float));
    } else {
      tileElems = t_.split ? t_.chunkLength : t_.rowsPerTile * t_.rowStride;
      floatElems = t_.split ? t_.chunkLength : t_.rowStride;  // one row at a time
      pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
      pipe->InitBuffer(stat_, op_ext_kernel::kBlockBytes);
    }
    pipe->InitBuffer(inQueueDy_, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(inQueueY_, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(outQueueDx_, kBufferNum, tileElems * sizeof(T));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(dyF_, floatElems * sizeof(float));
      pipe->InitBuffer(yF_, floatElems * sizeof(float));
    }
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
    LocalTensor<T> dy = inQueueDy_.template AllocTensor<T>();
    LocalTensor<T> y = inQueueY_.template AllocTensor<T>();
    copier_.RowsIn(dy, dyGm_[row * t_.dimSize], k, t_.dimSize);
    copier_.RowsIn(y, yGm_[row * t_.dimSize], k, t_.dimSize);
    inQueueDy_.EnQue(dy);
    inQueueY_.EnQue(y);
  }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
    LocalTensor<T> y = inQueueY_.template DeQue<T>();
    LocalTensor<T> dx = outQueueDx_.template AllocTensor<T>();
    const uint32_t len = t_.dimSize;
    const int32_t n = static_cast<int32_t>(len);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      if constexpr (kIsFloat) {
        const LocalTensor<float> dyr = dy[at];
        const LocalTensor<float> yr = y[at];
        const LocalTensor<float> dxr = dx[at];
        Mul(dxr, dyr, yr, n);
        PipeBarrier<PIPE_V>();
        const float s = ReadSum(dxr, n);
        PipeBarrier<PIPE_V>();
        Adds(dxr, dyr, -s, n);
        PipeBarrier<PIPE_V>();
        Mul(dxr, dxr, yr, n);
      } else {
        LocalTensor<float> dyf = dyF_.template Get<float>();
        LocalTensor<float> yf = yF_.template Get<float>();
        op_ext_kernel::CastToFloat(dyf, dy[at], len);
        PipeBarrier<PIPE_V>();
        op_ext_kernel::CastToFloat(yf, y[at], len);
        PipeBarrier<PIPE_V>();
        Mul(dyf, dyf, yf, n);
        PipeBarrier<PIPE_V>();
        const float s = ReadSum(dyf, n);
        PipeBarrier<PIPE_V>();
        op_ext_kernel::CastToFloat(dyf, dy[at], len);
        PipeBarrier<PIPE_V>();
        Adds(dyf, dyf, -s, n);
        PipeBarrier<PIPE_V>();
        Mul(dyf, dyf, yf, n);
        PipeBarrier<PIPE_V>();
        op_ext_kernel::CastFromFloat(dx[at], dyf, len);
      }
    }
    outQueueDx_.EnQue(dx);
    inQueueDy_.FreeTensor(dy);
    inQueueY_.FreeTensor(y);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k) {
    LocalTensor<T> dx = outQueueDx_.template DeQue<T>();
    copier_.RowsOut(dxGm_[row * t_.dimSize], dx, k, t_.dimSize);
    outQueueDx_.FreeTensor(dx);
  }

  // sum of src[0..n), read as a scalar.
  __aicore__ inline float ReadSum(const LocalTensor<float>& src, int32_t n) {
    LocalTensor<float> stat = stat_.template Get<float>();
    LocalTensor<float> work = work_.template Get<float>();
    PipeBarrier<PIPE_V>();
    ReduceSum(stat, src, work, n);
    return op_ext_kernel::ReadScalarAfterVector(stat);
  }

  // ---- rows mode, split rows ----------------------------------------------------

  __aicore__ inline void ProcessSplitRow(uint64_t row) {
    const uint64_t base = row * t_.dimSize;
    // Pass 1: sum(dy * y), chunk sums added in order.
    float sum = 0.0f;
    for (uint32_t c = 0; c < t_.dimSize; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      const int32_t n = static_cast<int32_t>(len);
      CopyIn(base + c, len);
      LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
      LocalTensor<T> y = inQueueY_.template DeQue<T>();
      // dy * y in dy's float row: dy's own buffer for float (not needed again in this pass).
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> dyf = AsFloat(dyF_, dy, len);
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> yf = AsFloat(yF_, y, len);
      PipeBarrier<PIPE_V>();
      Mul(dyf, dyf, yf, n);
      sum += ReadSum(dyf, n);
      inQueueDy_.FreeTensor(dy);
      inQueueY_.FreeTensor(y);
    }
    // Pass 2: dx = (dy - sum) * y (the last chunk shifted back to whole blocks
    // where only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.dimSize; c0 += t_.chunkLength) {
      uint64_t c = c0;
      uint32_t len = ChunkLen(c0);
      copier_.ShiftLastChunk(0, c, len);
      const int32_t n = static_cast<int32_t>(len);
      CopyIn(base + c, len);
      LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
      LocalTensor<T> y = inQueueY_.template DeQue<T>();
      LocalTensor<T> dx = outQueueDx_.template AllocTensor<T>();
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> dyf = AsFloat(dyF_, dy, len);
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> yf = AsFloat(yF_, y, len);
      const LocalTensor<float> out = kIsFloat ? dx.template ReinterpretCast<float>() : dyf;
      PipeBarrier<PIPE_V>();
      Adds(out, dyf, -sum, n);
      PipeBarrier<PIPE_V>();
      Mul(out, out, yf, n);
      if constexpr (!kIsFloat) op_ext_kernel::CastFromFloat(dx, out, len);
      outQueueDx_.EnQue(dx);
      inQueueDy_.FreeTensor(dy);
      inQueueY_.FreeTensor(y);
      dx = outQueueDx_.template DeQue<T>();
      copier_.Out(dxGm_[base + c], dx, len);
      outQueueDx_.FreeTensor(dx);
    }
  }

  __aicore__ inline uint32_t ChunkLen(uint32_t c) const {
    return t_.dimSize - c < t_.chunkLength ? t_.dimSize - c : t_.chunkLength;
  }

  // `len` elements of dy and y from GM offset `offset`, enqueued.
  __aicore__ inline void CopyIn(uint64_t offset, uint32_t len) {
    LocalTensor<T> dy = inQueueDy_.template AllocTensor<T>();
    LocalTensor<T> y = inQueueY_.template AllocTensor<T>();
    copier_.In(dy, dyGm_[offset], len);
    copier_.In(y, yGm_[offset], len);
    inQueueDy_.EnQue(dy);
    inQueueY_.EnQue(y);
  }

  // `count` elements in float: the tensor itself for float, else cast into buf.
  __aicore__ inline LocalTensor<float> AsFloat(TBuf<TPosition::VECCALC>& buf, const LocalTensor<T>& x,
                                               uint32_t count) {
    if constexpr (kIsFloat) {
      return x.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> xf = buf.template Get<float>();
      op_ext_kernel::CastToFloat(xf, x, count);
      PipeBarrier<PIPE_V>();  // the caller computes on the float copy next
      return xf;
    }
  }

  // ---- columns mode -----------------------------------------------------------

  // One slab: outer index o, inner elements [i0, i0 + len).
  __aicore__ inline void ProcessSlab(uint64_t unit) {
    const uint64_t o = unit / t_.innerTiles;
    uint64_t i0 = (unit % t_.innerTiles) * t_.innerTile;
    uint32_t len = static_cast<uint32_t>(t_.inner - i0 < t_.innerTile ? t_.inner - i0 : t_.innerTile);
    // A last slab that is not whole blocks moves back where only whole blocks move
    // (as in softmax_custom.cpp: its first columns are recomputed, same values).
    copier_.ShiftLastChunk(0, i0, len);
    const uint64_t base = o * t_.dimSize * t_.inner + i0;  // GM offset of the slab's row 0
    LocalTensor<float> sumRow = sumRow_.template Get<float>();
    if (!t_.split) {
      CopyInSlab(base, t_.dimSize, len);
      LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
      LocalTensor<T> y = inQueueY_.template DeQue<T>();
      LocalTensor<T> dx = outQueueDx_.template AllocTensor<T>();
      LocalTensor<float> dyf = SlabAsFloat(dyF_, dy, t_.dimSize, len);
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> yf = SlabAsFloat(yF_, y, t_.dimSize, len);
      // float: dy * y in the dx tile; 16-bit: in dy's float copy, cast again after.
      PipeBarrier<PIPE_V>();
      SlabDot(sumRow, dyf, yf, kIsFloat ? dx.template ReinterpretCast<float>() : dyf, t_.dimSize, len, true);
      if constexpr (!kIsFloat) dyf = SlabAsFloat(dyF_, dy, t_.dimSize, len);
      PipeBarrier<PIPE_V>();
      FinishSlab(dx, dyf, yf, sumRow, t_.dimSize, len);
      inQueueDy_.FreeTensor(dy);
      inQueueY_.FreeTensor(y);
      CopyOutSlab(base, t_.dimSize, len);
      return;
    }
    // Pass 1: the sum row; pass 2: output -- dim in chunks.
    for (uint32_t d = 0; d < t_.dimSize; d += t_.chunkLength) {
      const uint32_t rows = DimChunk(d);
      CopyInSlab(base + d * t_.inner, rows, len);
      LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
      LocalTensor<T> y = inQueueY_.template DeQue<T>();
      PipeBarrier<PIPE_V>();
      const LocalTensor<float> dyf = SlabAsFloat(dyF_, dy, rows, len);  // float: dy's own buffer
      PipeBarrier<PIPE_V>();
      SlabDot(sumRow, dyf, SlabAsFloat(yF_, y, rows, len), dyf, rows, len, d == 0);
      inQueueDy_.FreeTensor(dy);
      inQueueY_.FreeTensor(y);
    }
    for (uint32_t d = 0; d < t_.dimSize; d += t_.chunkLength) {
      const uint32_t rows = DimChunk(d);
      CopyInSlab(base + d * t_.inner, rows, len);
      LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
      LocalTensor<T> y = inQueueY_.template DeQue<T>();
      LocalTensor<T> dx = outQueueDx_.template AllocTensor<T>();
      PipeBarrier<PIPE_V>();
      FinishSlab(dx, SlabAsFloat(dyF_, dy, rows, len), SlabAsFloat(yF_, y, rows, len), sumRow, rows, len);
      inQueueDy_.FreeTensor(dy);
      inQueueY_.FreeTensor(y);
      CopyOutSlab(base + d * t_.inner, rows, len);
    }
  }

  __aicore__ inline uint32_t DimChunk(uint32_t d) const {
    return t_.dimSize - d < t_.chunkLength ? t_.dimSize - d : t_.chunkLength;
  }

  // `rows` rows of `len` elements of dy and of y, `inner` apart in GM from
  // offset, into slabs with rows innerTile apart; enqueued.
  __aicore__ inline void CopyInSlab(uint64_t offset, uint32_t rows, uint32_t len) {
    LocalTensor<T> dy = inQueueDy_.template AllocTensor<T>();
    LocalTensor<T> y = inQueueY_.template AllocTensor<T>();
    SlabFromGm(dy, dyGm_, offset, rows, len);
    PipeBarrier<PIPE_V>();
    SlabFromGm(y, yGm_, offset, rows, len);
    inQueueDy_.EnQue(dy);
    inQueueY_.EnQue(y);
  }

  __aicore__ inline void SlabFromGm(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint64_t offset,
                                    uint32_t rows, uint32_t len) {
    if (t_.stridedCopyPad) {
#if OP_EXT_HAS_DATA_COPY_PAD
      const uint32_t rowBytes = len * sizeof(T);
      DataCopyExtParams params{static_cast<uint16_t>(rows), rowBytes,
                               static_cast<uint32_t>((t_.inner - len) * sizeof(T)), UbGapBlocks(rowBytes), 0};
      DataCopyPadExtParams<T> pad{false, 0, 0, T(0)};
      DataCopyPad(dst, src[offset], params, pad);
#endif
    } else {
      // No DataCopyPad (Ascend310P): row by row, each rounded up to whole blocks.
      for (uint32_t d = 0; d < rows; ++d) copier_.In(dst[d * t_.innerTile], src[offset + d * t_.inner], len);
    }
  }

  __aicore__ inline void CopyOutSlab(uint64_t offset, uint32_t rows, uint32_t len) {
    LocalTensor<T> dx = outQueueDx_.template DeQue<T>();
    if (t_.stridedCopyPad) {
#if OP_EXT_HAS_DATA_COPY_PAD
      const uint32_t rowBytes = len * sizeof(T);
      DataCopyExtParams params{static_cast<uint16_t>(rows), rowBytes, UbGapBlocks(rowBytes),
                               static_cast<uint32_t>((t_.inner - len) * sizeof(T)), 0};
      DataCopyPad(dxGm_[offset], dx, params);
#endif
    } else {
      for (uint32_t d = 0; d < rows; ++d) copier_.Out(dxGm_[offset + d * t_.inner], dx[d * t_.innerTile], len);
    }
    outQueueDx_.FreeTensor(dx);
  }

  // Whole 32-byte blocks between the end of a slab row's data and the next row in the UB.
  __aicore__ inline uint32_t UbGapBlocks(uint32_t rowBytes) const {
    const uint32_t aligned = (rowBytes + op_ext_kernel::kBlockBytes - 1) / op_ext_kernel::kBlockBytes *
                             op_ext_kernel::kBlockBytes;
    return (t_.innerTile * sizeof(T) - aligned) / op_ext_kernel::kBlockBytes;
  }

  // The slab in float: x itself for float, else each row's `len` elements cast
  // into buf (rows innerTile apart there too, so every row starts block aligned).
  __aicore__ inline LocalTensor<float> SlabAsFloat(TBuf<TPosition::VECCALC>& buf, const LocalTensor<T>& x,
                                                   uint32_t rows, uint32_t len) {
    if constexpr (kIsFloat) {
      return x.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> xf = buf.template Get<float>();
      for (uint32_t d = 0; d < rows; ++d) op_ext_kernel::CastToFloat(xf[d * t_.innerTile], x[d * t_.innerTile], len);
      PipeBarrier<PIPE_V>();  // the caller computes on the float copy next
      return xf;
    }
  }

  // sumRow (+)= sum over the slab's rows of dyf * yf, in row order (first: start
  // from row 0's product). Each product goes to the same row of prod (which may be dyf).
  __aicore__ inline void SlabDot(const LocalTensor<float>& sumRow, const LocalTensor<float>& dyf,
                                 const LocalTensor<float>& yf, const LocalTensor<float>& prod, uint32_t rows,
                                 uint32_t len, bool first) {
    const int32_t n = static_cast<int32_t>(len);
    uint32_t d = 0;
    if (first) {
      PipeBarrier<PIPE_V>();
      Mul(sumRow, dyf, yf, n);
      d = 1;
    }
    for (; d < rows; ++d) {
      const uint32_t at = d * t_.innerTile;
      PipeBarrier<PIPE_V>();
      Mul(prod[at], dyf[at], yf[at], n);
      PipeBarrier<PIPE_V>();
      Add(sumRow, sumRow, prod[at], n);
    }
  }

  // dx = (dyf - sumRow) * yf per row, rounded to T (16-bit: computed in dyf),
  // enqueued for CopyOutSlab.
  __aicore__ inline void FinishSlab(LocalTensor<T>& dx, const LocalTensor<float>& dyf, const LocalTensor<float>& yf,
                                    const LocalTensor<float>& sumRow, uint32_t rows, uint32_t len) {
    const int32_t n = static_cast<int32_t>(len);
    const LocalTensor<float> out = kIsFloat ? dx.template ReinterpretCast<float>() : dyf;
    for (uint32_t d = 0; d < rows; ++d) {
      const uint32_t at = d * t_.innerTile;
      PipeBarrier<PIPE_V>();
      Sub(out[at], dyf[at], sumRow, n);
      PipeBarrier<PIPE_V>();
      Mul(out[at], out[at], yf[at], n);
      if constexpr (!kIsFloat) op_ext_kernel::CastFromFloat(dx[at], out[at], len);
    }
    outQueueDx_.EnQue(dx);
  }

  optiling::SoftmaxGradCustomTilingData t_;
  uint64_t firstUnit_ = 0;
  uint64_t unitCount_ = 0;
  TQue<TPosition::VECIN, kBufferNum> inQueueDy_;
  TQue<TPosition::VECIN, kBufferNum> inQueueY_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueDx_;
  TBuf<TPosition::VECCALC> dyF_;
  TBuf<TPosition::VECCALC> yF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> sumRow_;
  op_ext_kernel::RowCopier<T> copier_;
  GlobalTensor<T> dyGm_;
  GlobalTensor<T> yGm_;
  GlobalTensor<T> dxGm_;
};

template <typename T>
__aicore__ inline void RunSoftmaxGrad(GM_ADDR dy, GM_ADDR y, GM_ADDR dx,
                                      const optiling::SoftmaxGradCustomTilingData& tiling) {
  TPipe pipe;
  KernelSoftmaxGrad<T> op;
  op.Init(dy, y, dx, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void softmax_grad_custom(GM_ADDR dy, GM_ADDR y, GM_ADDR dx, GM_ADDR workspace,
                                                          GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunSoftmaxGrad<float>(dy, y, dx, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunSoftmaxGrad<half>(dy, y, dx, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunSoftmaxGrad<bfloat16_t>(dy, y, dx, tilingData);
#endif
  }
}
