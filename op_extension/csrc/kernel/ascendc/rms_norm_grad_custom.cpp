// RmsNormGradCustom: gradInput over rows (pass 0) and gradWeight over columns
// (pass 1), both in float. Passes, split and workspace layout:
// host/tiling/rms_norm_grad_custom_tiling.h (its UB plans mirror the Init* here).
//
// gradInput is computed as (g - x * c2) * rstd, g = dy * w, c2 = rstd * mean(g * xhat),
// mean(g * xhat) = rstd * mean(g * x): every product is of values near their final
// size, never rstd^2 or rstd^3 alone (which underflow for |x| above ~1e13).
// gradWeight sums dy * (x * rstd), not (dy * x) * rstd, which overflows first.
// A row whose sum of squares overflows (rstd comes out 0, |x| finite) or
// underflows (rstd above 2^51, or NaN, the Sqrt of 0: eps 0 and |x| below ~1e-19)
// is redone on x * s (kernel_common.h, RescueScale): rstd_s, c2_s from x * s, and
// gradInput = ((g - (x s) * c2_s) * rstd_s) * s; the workspace keeps rstd_s and s,
// and gradWeight sums dy * ((x s) * rstd_s) for such a row. Split rows then take
// two more reads.
// FusedAddRmsNormGradCustom is this kernel with hasGradResidual: x is the forward's
// residualOut, and gradResidualOut is added to gradInput before its one rounding.
// rstd is 1 / Sqrt(...) by Div, not the vector Rsqrt (an approximation on hardware).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "row_norm_common.h"
#include "rms_norm_grad_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::AsFloat;
using op_ext_kernel::kBufferNum;

constexpr uint32_t kStatFloats = 2;  // per row in the workspace: rstd_s, s (kRmsNormGradStatFloats)

template <typename T>
class KernelRmsNormGrad {
 public:
  __aicore__ inline KernelRmsNormGrad() {}

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR gr, GM_ADDR dx, GM_ADDR dw,
                              GM_ADDR workspace, const optiling::RmsNormGradCustomTilingData& tiling, TPipe* pipe) {
    t_ = tiling;
    // The workspace: each row's statistics (rstd_s, s), in slots of a tile's rows.
    io_.Init(dy, x, w, dx, dw, workspace, uint64_t(t_.usedCoreNum) * t_.statTilesPerCore * t_.statPitch, t_, pipe);
    if (t_.pass == 0 && t_.hasGradResidual) {
      grGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gr),
                            op_ext_kernel::ReadableLength<T>(t_.rows * t_.cols, t_.tailMode));
    }
    op_ext_kernel::NormGradPasses::InitBuffers(*this, t_, pipe);
  }

  __aicore__ inline void Process() { op_ext_kernel::NormGradPasses::Process(*this, io_, t_); }

 private:
  friend struct op_ext_kernel::NormGradPasses;

  static constexpr bool kIsFloat = IsSameType<T, float>::value;

  // ---- pass 0, whole rows ---------------------------------------------------------

  __aicore__ inline void InitRows(TPipe* pipe) {
    const uint32_t tileBytes = t_.rowsPerTile * t_.rowStride * sizeof(T);
    io_.InitQueues(pipe, tileBytes);
    if (t_.hasGradResidual) pipe->InitBuffer(inQueueGr_, kBufferNum, tileBytes);
    pipe->InitBuffer(io_.wF, t_.rowStride * sizeof(float));
    pipe->InitBuffer(tmp_, t_.rowStride * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(io_.xF, t_.rowStride * sizeof(float));
      pipe->InitBuffer(io_.gF, t_.rowStride * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, 2 * op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(statTile_, (kStatFloats * t_.rowsPerTile + 7) / 8 * 8 * sizeof(float));
  }

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) {
    io_.RowsIn(row, k, t_.cols);
    if (t_.hasGradResidual) {
      LocalTensor<T> gr = inQueueGr_.template AllocTensor<T>();
      io_.copier.RowsIn(gr, grGm_[row * t_.cols], k, t_.cols);
      inQueueGr_.EnQue(gr);
    }
  }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> dy = io_.inDy.template DeQue<T>();
    LocalTensor<T> dx = io_.out.template AllocTensor<T>();
    LocalTensor<T> gr;
    if (t_.hasGradResidual) gr = inQueueGr_.template DeQue<T>();
    LocalTensor<float> statTile = statTile_.template Get<float>();
    const int32_t n = static_cast<int32_t>(t_.cols);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      LocalTensor<float> xf, g;
      io_.RowAsFloat(x[at], dy[at], t_.cols, t_.hasWeight != 0, xf, g);
      LocalTensor<float> stat = stat_.template Get<float>();
      PipeBarrier<PIPE_V>();
      RowSums(xf, g, n, stat);
      float rstd;
      float coeff;
      PipeBarrier<PIPE_V>();
      RstdAndCoeff(stat, t_.eps, rstd, coeff);
      float scale = 1.0f;
      if (op_ext_kernel::NeedsRescue(rstd)) {
        const float maxAbs = op_ext_kernel::RowMaxAbs(stat, xf, tmp_.template Get<float>(),
                                                      work_.template Get<float>(), n);
        if (maxAbs <= op_ext_kernel::kFloatMax) {
          // xf is this core's copy of the row (pass 1 reads x again from GM).
          scale = op_ext_kernel::RescueScale(maxAbs);
          PipeBarrier<PIPE_V>();
          Muls(xf, xf, scale, n);
          PipeBarrier<PIPE_V>();
          RowSums(xf, g, n, stat);
          PipeBarrier<PIPE_V>();
          RstdAndCoeff(stat, t_.eps * scale * scale, rstd, coeff);
        }
      }
      PipeBarrier<PIPE_V>();
      WriteGradInput(dx[at], xf, g, rstd, coeff, scale, n, t_.hasGradResidual ? gr[at] : gr);
      if (t_.hasWeight) {
        statTile.SetValue(kStatFloats * j, rstd);
        statTile.SetValue(kStatFloats * j + 1, scale);
      }
    }
    io_.out.EnQue(dx);
    io_.inX.FreeTensor(x);
    io_.inDy.FreeTensor(dy);
    if (t_.hasGradResidual) inQueueGr_.FreeTensor(gr);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k, uint32_t tile) {
    io_.RowsOut(row, k, t_.cols);
    if (t_.hasWeight) StoreStats(tile);
  }

  // The tile's statistics (scalar writes into statTile_) to their workspace slot.
  __aicore__ inline void StoreStats(uint32_t slot) {
    op_ext_kernel::StoreStatTile(io_.statGm, statTile_.template Get<float>(),
                                 (io_.core * t_.statTilesPerCore + slot) * t_.statPitch, t_.statPitch);
  }

  // ---- pass 0, rows in chunks -------------------------------------------------------

  __aicore__ inline void InitChunks(TPipe* pipe) {
    const uint32_t chunkBytes = t_.chunkLength * sizeof(T);
    io_.InitQueues(pipe, chunkBytes);
    if (t_.hasGradResidual) pipe->InitBuffer(inQueueGr_, kBufferNum, chunkBytes);
    pipe->InitBuffer(tmp_, t_.chunkLength * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(io_.xF, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(io_.gF, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(io_.wF, t_.chunkLength * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, 2 * op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(acc_, 2 * op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(statTile_, op_ext_kernel::kBlockBytes);
  }

  // Chunk [c, c + len) of row `row`: x and g = dy * w, both in float. The caller
  // frees it with ReleaseChunk.
  __aicore__ inline void LoadChunk(uint64_t row, uint32_t c, uint32_t len, LocalTensor<T>& w, LocalTensor<T>& x,
                                   LocalTensor<T>& dy, LocalTensor<float>& xf, LocalTensor<float>& g) {
    io_.LoadChunk(row, t_.cols, c, len, true, t_.hasWeight != 0, w, x, dy, xf, g);
  }

  __aicore__ inline void ReleaseChunk(LocalTensor<T>& w, LocalTensor<T>& x, LocalTensor<T>& dy) {
    io_.ReleaseChunk(true, t_.hasWeight != 0, w, x, dy);
  }

  __aicore__ inline void ProcessSplitRow(uint64_t local) {
    const uint64_t row = io_.rows.first + local;
    // Pass 1: sums of x^2 and of g * x.
    float rstd;
    float coeff;
    SplitRowRstdAndCoeff(row, 1.0f, rstd, coeff);
    float scale = 1.0f;
    if (op_ext_kernel::NeedsRescue(rstd)) RescaleSplitRow(row, rstd, coeff, scale);
    // Pass 2: gradInput chunk by chunk (the last one shifted back to whole blocks
    // where only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.cols; c0 += t_.chunkLength) {
      uint64_t shifted = c0;
      uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c0, t_.chunkLength);
      io_.copier.ShiftLastChunk(0, shifted, len);
      const uint32_t c = static_cast<uint32_t>(shifted);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      LoadChunk(row, c, len, w, x, dy, xf, g);
      LocalTensor<T> gr;
      if (t_.hasGradResidual) {
        gr = inQueueGr_.template AllocTensor<T>();
        io_.copier.In(gr, grGm_[row * t_.cols + c], len);
        inQueueGr_.EnQue(gr);
        gr = inQueueGr_.template DeQue<T>();
      }
      LocalTensor<T> dx = io_.out.template AllocTensor<T>();
      PipeBarrier<PIPE_V>();
      if (scale != 1.0f) Muls(xf, xf, scale, static_cast<int32_t>(len));
      PipeBarrier<PIPE_V>();
      WriteGradInput(dx, xf, g, rstd, coeff, scale, static_cast<int32_t>(len), gr);
      io_.out.EnQue(dx);
      ReleaseChunk(w, x, dy);
      if (t_.hasGradResidual) inQueueGr_.FreeTensor(gr);
      dx = io_.out.template DeQue<T>();
      io_.copier.Out(io_.dxGm[row * t_.cols + c], dx, len);
      io_.out.FreeTensor(dx);
    }
    if (t_.hasWeight) {
      LocalTensor<float> statTile = statTile_.template Get<float>();
      statTile.SetValue(0, rstd);
      statTile.SetValue(1, scale);
      for (uint32_t i = kStatFloats; i < t_.statPitch; ++i) statTile.SetValue(i, 0.0f);
      PipeBarrier<PIPE_V>();
      StoreStats(static_cast<uint32_t>(local));
    }
  }

  // ---- pass 0, shared ------------------------------------------------------------------

  // stat[0] = sum x^2, stat[8] = sum g * x over n elements (tmp_ is scratch).
  __aicore__ inline void RowSums(const LocalTensor<float>& xf, const LocalTensor<float>& g, int32_t n,
                                 const LocalTensor<float>& stat) {
    LocalTensor<float> tmp = tmp_.template Get<float>();
    LocalTensor<float> work = work_.template Get<float>();
    PipeBarrier<PIPE_V>();
    Mul(tmp, xf, xf, n);
    PipeBarrier<PIPE_V>();
    ReduceSum(stat, tmp, work, n);
    PipeBarrier<PIPE_V>();
    Mul(tmp, g, xf, n);
    LocalTensor<float> dot = stat[8];
    PipeBarrier<PIPE_V>();
    ReduceSum(dot, tmp, work, n);
  }

  // From sums[0] = sum x^2 and sums[8] = sum g x: rstd = 1 / sqrt(mean x^2 + eps) and
  // coeff = rstd * (rstd * mean(g x)) = rstd * mean(g * xhat), computed by the vector
  // unit (Sqrt, then Div: no Rsqrt), read as scalars. Overwrites both sums.
  __aicore__ inline void RstdAndCoeff(const LocalTensor<float>& sums, float eps, float& rstd, float& coeff) {
    LocalTensor<float> dot = sums[8];
    PipeBarrier<PIPE_V>();
    Muls(sums, sums, t_.invCols, 1);
    PipeBarrier<PIPE_V>();
    Adds(sums, sums, eps, 1);
    PipeBarrier<PIPE_V>();
    Sqrt(sums, sums, 1);
    PipeBarrier<PIPE_V>();
    Muls(dot, dot, t_.invCols, 1);
    PipeBarrier<PIPE_V>();
    Div(dot, dot, sums, 1);
    PipeBarrier<PIPE_V>();
    Div(dot, dot, sums, 1);
    coeff = op_ext_kernel::ReadScalarAfterVector(dot);
    Duplicate(dot, 1.0f, 1);
    PipeBarrier<PIPE_V>();
    Div(sums, dot, sums, 1);
    rstd = op_ext_kernel::ReadScalarAfterVector(sums);
  }

  // dx = (g - x * coeff) * rstd (* scale, for a rescaled row) (+ gr, with
  // hasGradResidual), into `dx` (n elements). xf is dead afterwards (its float
  // buffer takes gr for 16-bit types).
  __aicore__ inline void WriteGradInput(const LocalTensor<T>& dx, const LocalTensor<float>& xf,
                                        const LocalTensor<float>& g, float rstd, float coeff, float scale,
                                        int32_t n, const LocalTensor<T>& gr) {
    LocalTensor<float> tmp = tmp_.template Get<float>();
    PipeBarrier<PIPE_V>();
    Muls(tmp, xf, -coeff, n);
    PipeBarrier<PIPE_V>();
    Add(tmp, tmp, g, n);
    if (!t_.hasGradResidual) {
      op_ext_kernel::GradInputOutput(dx, tmp, rstd, scale, n);
      return;
    }
    PipeBarrier<PIPE_V>();
    Muls(tmp, tmp, rstd, n);
    PipeBarrier<PIPE_V>();
    if (scale != 1.0f) Muls(tmp, tmp, scale, n);
    PipeBarrier<PIPE_V>();
    if constexpr (kIsFloat) {
      Add(dx, tmp, gr, n);
    } else {
      Add(tmp, tmp, AsFloat(gr, io_.xF, static_cast<uint32_t>(n)), n);
      op_ext_kernel::CastFromFloat(dx, tmp, static_cast<uint32_t>(n));
    }
  }

  // A split row whose sum of squares overflowed or underflowed: max|x| over a pass, then the sums
  // of (x s)^2 and g * (x s) over another; rstd and coeff are then rstd_s and c2_s.
  __aicore__ inline void RescaleSplitRow(uint64_t row, float& rstd, float& coeff, float& scale) {
    LocalTensor<float> stat = stat_.template Get<float>();
    float maxAbs = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      LoadChunk(row, c, len, w, x, dy, xf, g);
      maxAbs = op_ext_kernel::MaxOrNan(
          maxAbs, op_ext_kernel::RowMaxAbs(stat, xf, tmp_.template Get<float>(), work_.template Get<float>(),
                                           static_cast<int32_t>(len)));
      PipeBarrier<PIPE_V>();
      ReleaseChunk(w, x, dy);
    }
    if (!(maxAbs <= op_ext_kernel::kFloatMax)) return;
    const float s = op_ext_kernel::RescueScale(maxAbs);
    SplitRowRstdAndCoeff(row, s, rstd, coeff);
    scale = s;
  }

  // rstd and coeff of a split row's x * s (s = 1: x itself): one read of the row,
  // the sums of (x s)^2 and g * (x s), chunk sums added in order.
  __aicore__ inline void SplitRowRstdAndCoeff(uint64_t row, float s, float& rstd, float& coeff) {
    LocalTensor<float> stat = stat_.template Get<float>();
    LocalTensor<float> acc = acc_.template Get<float>();
    Duplicate(acc, 0.0f, 16);
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      LoadChunk(row, c, len, w, x, dy, xf, g);
      if (s != 1.0f) {
        PipeBarrier<PIPE_V>();
        Muls(xf, xf, s, static_cast<int32_t>(len));
      }
      PipeBarrier<PIPE_V>();
      RowSums(xf, g, static_cast<int32_t>(len), stat);
      PipeBarrier<PIPE_V>();
      Add(acc, acc, stat, 1);
      PipeBarrier<PIPE_V>();
      Add(acc[8], acc[8], stat[8], 1);
      ReleaseChunk(w, x, dy);
    }
    PipeBarrier<PIPE_V>();
    RstdAndCoeff(acc, t_.eps * s * s, rstd, coeff);
  }

  // ---- pass 1: gradWeight over columns ------------------------------------------------

  __aicore__ inline void InitColumns(TPipe* pipe) {
    const uint32_t chunkBytes = t_.dwChunkCols * sizeof(T);
    io_.InitQueues(pipe, chunkBytes);
    pipe->InitBuffer(acc_, t_.dwChunkCols * sizeof(float));
    pipe->InitBuffer(tmp_, t_.dwChunkCols * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(io_.xF, t_.dwChunkCols * sizeof(float));
      pipe->InitBuffer(io_.gF, t_.dwChunkCols * sizeof(float));
    }
  }

  // Workspace index of row r's statistics (layout in the tiling header).
  __aicore__ inline uint64_t StatIndex(uint64_t r) const {
    uint64_t core;
    uint64_t local;
    op_ext_kernel::RowOwner(r, t_.rowsPerCore, t_.bigCoreNum, core, local);
    return (core * t_.statTilesPerCore + local / t_.statRowsPerSlot) * t_.statPitch +
           (local % t_.statRowsPerSlot) * kStatFloats;
  }

  __aicore__ inline void ProcessColumns() {
    op_ext_kernel::ColumnChunks<T> chunks;
    chunks.Init(t_.cols, t_.dwBlocksPerCore, t_.dwBigCoreNum, t_.dwUsedCoreNum, t_.dwChunkCols);
    // The statistics below are scalar loads of what the row pass wrote by DMA.
    op_ext_kernel::DropDataCacheBeforeReading(io_.statGm);
    uint64_t c;
    uint32_t width;
    while (chunks.Next(io_.copier, c, width)) SumColumnChunk(c, width);
  }

  __aicore__ inline void SumColumnChunk(uint64_t col, uint32_t width) {
    const int32_t n = static_cast<int32_t>(width);
    LocalTensor<float> acc = acc_.template Get<float>();
    LocalTensor<float> tmp = tmp_.template Get<float>();
    Duplicate(acc, 0.0f, n);
    for (uint64_t r = 0; r < t_.rows; ++r) {
      LocalTensor<T> x = io_.inX.template AllocTensor<T>();
      LocalTensor<T> dy = io_.inDy.template AllocTensor<T>();
      io_.copier.In(x, io_.xGm[r * t_.cols + col], width);
      io_.copier.In(dy, io_.dyGm[r * t_.cols + col], width);
      io_.inX.EnQue(x);
      io_.inDy.EnQue(dy);
      x = io_.inX.template DeQue<T>();
      dy = io_.inDy.template DeQue<T>();
      const uint64_t at = StatIndex(r);
      const float rstd = io_.statGm.GetValue(at);
      const float scale = io_.statGm.GetValue(at + 1);
      PipeBarrier<PIPE_V>();
      Muls(tmp, AsFloat(x, io_.xF, width), scale == 1.0f ? rstd : scale, n);  // x * rstd first: dy * x may overflow
      if (scale != 1.0f) {
        PipeBarrier<PIPE_V>();
        Muls(tmp, tmp, rstd, n);  // a rescued row's (x * s) * rstd_s
      }
      PipeBarrier<PIPE_V>();
      Mul(tmp, tmp, AsFloat(dy, io_.gF, width), n);
      PipeBarrier<PIPE_V>();
      Add(acc, acc, tmp, n);
      io_.inX.FreeTensor(x);
      io_.inDy.FreeTensor(dy);
    }
    PipeBarrier<PIPE_V>();
    op_ext_kernel::StoreFloatRow(io_.copier, io_.out, io_.dwGm[col], acc, width);
  }

  optiling::RmsNormGradCustomTilingData t_;
  op_ext_kernel::NormGradIo<T> io_;
  TQue<TPosition::VECIN, kBufferNum> inQueueGr_;
  TBuf<TPosition::VECCALC> tmp_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> acc_;
  TBuf<TPosition::VECCALC> statTile_;
  GlobalTensor<T> grGm_;
};

template <typename T>
__aicore__ inline void RunRmsNormGrad(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR gr, GM_ADDR dx, GM_ADDR dw,
                                      GM_ADDR workspace, const optiling::RmsNormGradCustomTilingData& tiling) {
  TPipe pipe;
  KernelRmsNormGrad<T> op;
  op.Init(dy, x, w, gr, dx, dw, workspace, tiling, &pipe);
  op.Process();
}

}  // namespace

// gradResidual: FusedAddRmsNormGradCustom's gradResidualOut (null unless hasGradResidual).
extern "C" __global__ __aicore__ void rms_norm_grad_custom(GM_ADDR gradOutput, GM_ADDR x, GM_ADDR weight,
                                                           GM_ADDR gradResidual, GM_ADDR gradInput,
                                                           GM_ADDR gradWeight, GM_ADDR workspace, GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunRmsNormGrad<float>(gradOutput, x, weight, gradResidual, gradInput, gradWeight, workspace, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunRmsNormGrad<half>(gradOutput, x, weight, gradResidual, gradInput, gradWeight, workspace, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunRmsNormGrad<bfloat16_t>(gradOutput, x, weight, gradResidual, gradInput, gradWeight, workspace, tilingData);
#endif
  }
}
