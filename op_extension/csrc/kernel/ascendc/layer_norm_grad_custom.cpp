// LayerNormGradCustom: gradInput over rows (pass 0), gradWeight and gradBias over
// columns (pass 1), all in float. Passes, split and workspace layout:
// host/tiling/layer_norm_grad_custom_tiling.h (its UB plans mirror the Init* here).
//
// With g = dy * w, c = x - mean (centred), xhat = c * rstd:
//   gradInput = rstd * ((g - mean(g)) - xhat * mean(g * xhat)),  mean(g * xhat) = rstd * mean(g * c),
// never rstd^2 or rstd^3 alone (which underflow for rows with a large spread).
// gradWeight sums dy * xhat (xhat first: dy * c may overflow), gradBias sums dy.
// The statistics are the forward's (layer_norm_custom.cpp), decided from the
// scalars the kernel reads anyway, so ordinary rows pay nothing more:
//   * statistics overflow (mean, sum((x - mean)^2) or sum(g * c) not finite) while
//     max|x| is finite: redone on x * s (kernel_common.h, PowerOfTwoScale), and
//     gradInput = (rstd_s * (...)) * s; or they underflow (rstd above 2^51, or NaN,
//     the Sqrt of 0: eps 0 and a spread below ~1e-19): the same with s scaling up
//     (UnderflowScale);
//   * |mean| * rstd > kMeanCorrectionRatio: mean += mean(x - mean), then the sums are
//     taken again. A constant row then centres to exact zeros, so eps = 0 gives
//     0 * inf = NaN as torch and the CPU op do.
// rstd is 1 / Sqrt(var + eps) by Div, not the vector Rsqrt (an approximation on hardware).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "row_norm_common.h"
#include "layer_norm_grad_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::AsFloat;
using op_ext_kernel::kBufferNum;

// As layer_norm_custom.cpp: above this |mean| * rstd the mean is corrected.
constexpr float kMeanCorrectionRatio = 16.0f;
constexpr uint32_t kStatFloats = 4;  // per row in the workspace: mean_s, rstd_s, s, unused

// The sums one pass over a row gives, for c = x * s - mean.
struct RowSums {
  float sumSq;  // sum c^2
  float sumG;   // sum g
  float sumGc;  // sum g * c
};

template <typename T>
class KernelLayerNormGrad {
 public:
  __aicore__ inline KernelLayerNormGrad() {}

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR dx, GM_ADDR dw, GM_ADDR db,
                              GM_ADDR workspace, const optiling::LayerNormGradCustomTilingData& tiling, TPipe* pipe) {
    t_ = tiling;
    // The workspace: each row's (mean_s, rstd_s, s), in slots of a tile's rows.
    io_.Init(dy, x, w, dx, dw, workspace, uint64_t(t_.usedCoreNum) * t_.statTilesPerCore * t_.statPitch, t_, pipe);
    if (t_.hasBias) dbGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(db), t_.cols);
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
    pipe->InitBuffer(io_.wF, t_.rowStride * sizeof(float));
    pipe->InitBuffer(cen_, t_.rowStride * sizeof(float));
    pipe->InitBuffer(tmp_, t_.rowStride * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(io_.xF, t_.rowStride * sizeof(float));
      pipe->InitBuffer(io_.gF, t_.rowStride * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, 2 * op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(statTile_, (kStatFloats * t_.rowsPerTile + 7) / 8 * 8 * sizeof(float));
  }

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) { io_.RowsIn(row, k, t_.cols); }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> dy = io_.inDy.template DeQue<T>();
    LocalTensor<T> dx = io_.out.template AllocTensor<T>();
    LocalTensor<float> statTile = statTile_.template Get<float>();
    LocalTensor<float> c = cen_.template Get<float>();
    LocalTensor<float> tmp = tmp_.template Get<float>();
    const int32_t n = static_cast<int32_t>(t_.cols);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      LocalTensor<float> xf, g;
      io_.RowAsFloat(x[at], dy[at], t_.cols, t_.hasWeight != 0, xf, g);
      float s = 1.0f;
      float eps = t_.eps;
      float mean = ScaledSum(xf, s, 0.0f, n) * t_.invCols;
      PipeBarrier<PIPE_V>();
      RowSums sums = CentredSums(xf, g, s, mean, n);
      PipeBarrier<PIPE_V>();
      float rstd = Rstd(sums.sumSq, eps);
      if (NeedsRescue(mean, rstd, sums)) {
        const float maxAbs = op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), xf, tmp, work_.template Get<float>(), n);
        // inf or NaN in the row: s stays 1 and the row gives the plain path's NaN.
        if (maxAbs <= op_ext_kernel::kFloatMax && maxAbs > 0.0f) {
          s = op_ext_kernel::RescueScale(maxAbs);
          eps = t_.eps * s * s;
          mean = ScaledSum(xf, s, 0.0f, n) * t_.invCols;
          PipeBarrier<PIPE_V>();
          sums = CentredSums(xf, g, s, mean, n);
          PipeBarrier<PIPE_V>();
          rstd = Rstd(sums.sumSq, eps);
        }
      }
      if (NeedsMeanCorrection(mean, rstd)) {
        mean += ReadSum(c, n) * t_.invCols;  // c = x * s - mean from the last CentredSums
        sums = CentredSums(xf, g, s, mean, n);
        PipeBarrier<PIPE_V>();
        rstd = Rstd(sums.sumSq, eps);
      }
      UnscaleConstantRow(sums, s, mean, eps, rstd);  // after the correction: a rounded mean left c +-tiny
      PipeBarrier<PIPE_V>();
      WriteGradInput(dx[at], c, g, sums, rstd, s, n);
      if (t_.hasWeight) {
        statTile.SetValue(kStatFloats * j, mean);
        statTile.SetValue(kStatFloats * j + 1, rstd);
        statTile.SetValue(kStatFloats * j + 2, s);
        statTile.SetValue(kStatFloats * j + 3, 0.0f);
      }
    }
    io_.out.EnQue(dx);
    io_.inX.FreeTensor(x);
    io_.inDy.FreeTensor(dy);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k, uint32_t tile) {
    io_.RowsOut(row, k, t_.cols);
    if (t_.hasWeight) StoreStats(tile);
  }

  // The slot's statistics (scalar writes into statTile_) to their workspace slot.
  __aicore__ inline void StoreStats(uint32_t slot) {
    op_ext_kernel::StoreStatTile(io_.statGm, statTile_.template Get<float>(),
                                 (io_.core * t_.statTilesPerCore + slot) * t_.statPitch, t_.statPitch);
  }

  // ---- pass 0, rows in chunks -------------------------------------------------------

  __aicore__ inline void InitChunks(TPipe* pipe) {
    const uint32_t chunkBytes = t_.chunkLength * sizeof(T);
    io_.InitQueues(pipe, chunkBytes);
    pipe->InitBuffer(cen_, t_.chunkLength * sizeof(float));
    pipe->InitBuffer(tmp_, t_.chunkLength * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(io_.xF, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(io_.gF, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(io_.wF, t_.chunkLength * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, 2 * op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(statTile_, op_ext_kernel::kBlockBytes);
  }

  __aicore__ inline uint32_t ChunkLen(uint32_t c) const {
    return op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
  }

  // Chunk [c, c + len) of row `row`: x in float, and (withGrad) g = dy * w in float.
  // The caller releases it with ReleaseChunk.
  __aicore__ inline void LoadChunk(uint64_t row, uint32_t c, uint32_t len, bool withGrad, LocalTensor<T>& w,
                                   LocalTensor<T>& x, LocalTensor<T>& dy, LocalTensor<float>& xf,
                                   LocalTensor<float>& g) {
    io_.LoadChunk(row, t_.cols, c, len, withGrad, t_.hasWeight != 0, w, x, dy, xf, g);
  }

  __aicore__ inline void ReleaseChunk(bool withGrad, LocalTensor<T>& w, LocalTensor<T>& x, LocalTensor<T>& dy) {
    io_.ReleaseChunk(withGrad, t_.hasWeight != 0, w, x, dy);
  }

  // sum over the row of x * s - m (chunk sums added in chunk order): one read of x.
  __aicore__ inline float SplitSum(uint64_t row, float s, float m) {
    float acc = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      PipeBarrier<PIPE_V>();
      LoadChunk(row, c, len, false, w, x, dy, xf, g);
      acc += ScaledSum(xf, s, m, static_cast<int32_t>(len));
      PipeBarrier<PIPE_V>();
      ReleaseChunk(false, w, x, dy);
    }
    return acc;
  }

  // The row's RowSums for c = x * s - mean: one read of x, dy (and w).
  __aicore__ inline RowSums SplitSums(uint64_t row, float s, float mean) {
    RowSums acc{0.0f, 0.0f, 0.0f};
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      PipeBarrier<PIPE_V>();
      LoadChunk(row, c, len, true, w, x, dy, xf, g);
      PipeBarrier<PIPE_V>();
      const RowSums part = CentredSums(xf, g, s, mean, static_cast<int32_t>(len));
      acc.sumSq += part.sumSq;
      acc.sumG += part.sumG;
      acc.sumGc += part.sumGc;
      ReleaseChunk(true, w, x, dy);
    }
    return acc;
  }

  __aicore__ inline float SplitMaxAbs(uint64_t row) {
    float maxAbs = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      PipeBarrier<PIPE_V>();
      LoadChunk(row, c, len, false, w, x, dy, xf, g);
      maxAbs = op_ext_kernel::MaxOrNan(
          maxAbs, op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), xf, tmp_.template Get<float>(),
                                           work_.template Get<float>(), static_cast<int32_t>(len)));
      PipeBarrier<PIPE_V>();
      ReleaseChunk(false, w, x, dy);
    }
    return maxAbs;
  }

  // A row in chunks: reads for the mean and the sums (more for careful statistics),
  // then one to write gradInput.
  __aicore__ inline void ProcessSplitRow(uint64_t local) {
    const uint64_t row = io_.rows.first + local;
    float s = 1.0f;
    float eps = t_.eps;
    float mean = SplitSum(row, s, 0.0f) * t_.invCols;
    RowSums sums = SplitSums(row, s, mean);
    PipeBarrier<PIPE_V>();
    float rstd = Rstd(sums.sumSq, eps);
    if (NeedsRescue(mean, rstd, sums)) {
      const float maxAbs = SplitMaxAbs(row);
      if (maxAbs <= op_ext_kernel::kFloatMax && maxAbs > 0.0f) {
        s = op_ext_kernel::RescueScale(maxAbs);
        eps = t_.eps * s * s;
        mean = SplitSum(row, s, 0.0f) * t_.invCols;
        PipeBarrier<PIPE_V>();
        sums = SplitSums(row, s, mean);
        PipeBarrier<PIPE_V>();
        rstd = Rstd(sums.sumSq, eps);
      }
    }
    if (NeedsMeanCorrection(mean, rstd)) {
      mean += SplitSum(row, s, mean) * t_.invCols;
      sums = SplitSums(row, s, mean);
      PipeBarrier<PIPE_V>();
      rstd = Rstd(sums.sumSq, eps);
    }
    UnscaleConstantRow(sums, s, mean, eps, rstd);  // after the correction: a rounded mean left c +-tiny
    LocalTensor<float> cen = cen_.template Get<float>();
    // gradInput chunk by chunk (the last one shifted back to whole blocks where
    // only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.cols; c0 += t_.chunkLength) {
      uint64_t shifted = c0;
      uint32_t len = ChunkLen(c0);
      io_.copier.ShiftLastChunk(0, shifted, len);
      const uint32_t c = static_cast<uint32_t>(shifted);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> w, x, dy;
      LocalTensor<float> xf, g;
      PipeBarrier<PIPE_V>();
      LoadChunk(row, c, len, true, w, x, dy, xf, g);
      PipeBarrier<PIPE_V>();
      Centre(cen, xf, s, mean, n);
      LocalTensor<T> dx = io_.out.template AllocTensor<T>();
      PipeBarrier<PIPE_V>();
      WriteGradInput(dx, cen, g, sums, rstd, s, n);
      io_.out.EnQue(dx);
      ReleaseChunk(true, w, x, dy);
      dx = io_.out.template DeQue<T>();
      io_.copier.Out(io_.dxGm[row * t_.cols + c], dx, len);
      io_.out.FreeTensor(dx);
    }
    if (t_.hasWeight) {
      LocalTensor<float> statTile = statTile_.template Get<float>();
      statTile.SetValue(0, mean);
      statTile.SetValue(1, rstd);
      statTile.SetValue(2, s);
      for (uint32_t i = 3; i < t_.statPitch; ++i) statTile.SetValue(i, 0.0f);
      StoreStats(static_cast<uint32_t>(local));
    }
  }

  // ---- pass 0, shared ------------------------------------------------------------------

  // dst = xf * s - m (n elements).
  __aicore__ inline void Centre(const LocalTensor<float>& dst, const LocalTensor<float>& xf, float s, float m,
                                int32_t n) {
    if (s != 1.0f) {
      PipeBarrier<PIPE_V>();
      Muls(dst, xf, s, n);
      PipeBarrier<PIPE_V>();
      Adds(dst, dst, -m, n);
    } else {
      PipeBarrier<PIPE_V>();
      Adds(dst, xf, -m, n);
    }
  }

  // sum of xf * s - m over n elements (cen_ is scratch).
  __aicore__ inline float ScaledSum(const LocalTensor<float>& xf, float s, float m, int32_t n) {
    if (s == 1.0f && m == 0.0f) return ReadSum(xf, n);
    LocalTensor<float> c = cen_.template Get<float>();
    PipeBarrier<PIPE_V>();
    Centre(c, xf, s, m, n);
    PipeBarrier<PIPE_V>();
    return ReadSum(c, n);
  }

  // cen_ = xf * s - mean; the sums of cen^2, g and g * cen (tmp_ is scratch).
  __aicore__ inline RowSums CentredSums(const LocalTensor<float>& xf, const LocalTensor<float>& g, float s,
                                        float mean, int32_t n) {
    LocalTensor<float> c = cen_.template Get<float>();
    LocalTensor<float> tmp = tmp_.template Get<float>();
    Centre(c, xf, s, mean, n);
    RowSums sums;
    PipeBarrier<PIPE_V>();
    Mul(tmp, c, c, n);
    sums.sumSq = ReadSum(tmp, n);
    sums.sumG = ReadSum(g, n);
    Mul(tmp, g, c, n);
    sums.sumGc = ReadSum(tmp, n);
    return sums;
  }

  __aicore__ inline float ReadSum(const LocalTensor<float>& src, int32_t n) {
    return op_ext_kernel::ReadSum(stat_.template Get<float>(), src, work_.template Get<float>(), n);
  }

  // 1 / sqrt(sumSq / cols + eps) on the vector unit (Sqrt, then Div), read as a scalar.
  __aicore__ inline float Rstd(float sumSq, float eps) {
    LocalTensor<float> stat = op_ext_kernel::ScalarToVector(stat_.template Get<float>(), sumSq);
    return op_ext_kernel::RstdFromSumOfSquares(stat, t_.invCols, eps, work_.template Get<float>());
  }

  // A rescued row whose scaled variance is 0 is constant: every x * s equals the
  // scaled mean exactly. Its rstd at scale s, 1 / (sqrt(eps) * s), is past
  // float's range (eps * s^2 underflows), and c * rstd = 0 * inf gave NaN where
  // the gradient is rstd * (g - mean(g)). Its statistics are exact unscaled: back
  // to s = 1 with mean / s and rstd = 1 / sqrt(eps); c and the sums, 0 at either
  // scale, stand. With eps 0 rstd is inf and the gradient NaN, as 0 / 0 is.
  __aicore__ inline void UnscaleConstantRow(const RowSums& sums, float& s, float& mean, float& eps, float& rstd) {
    if (s == 1.0f || sums.sumSq != 0.0f) return;
    mean = mean / s;  // a power of two: exact
    s = 1.0f;
    eps = t_.eps;
    rstd = Rstd(sums.sumSq, eps);
  }

  __aicore__ static inline bool IsFinite(float v) {
    return v <= op_ext_kernel::kFloatMax && v >= -op_ext_kernel::kFloatMax;
  }
  // Statistics that overflowed, or that underflowed (kernel_common.h: eps 0 and a
  // spread below ~1e-19); RescueScale tells them apart by rstd.
  __aicore__ static inline bool NeedsRescue(float mean, float rstd, const RowSums& sums) {
    return !IsFinite(mean) || rstd == 0.0f || !IsFinite(sums.sumGc) || op_ext_kernel::StatisticUnderflowed(rstd);
  }
  __aicore__ static inline bool NeedsMeanCorrection(float mean, float rstd) {
    return (mean < 0.0f ? -mean : mean) * rstd > kMeanCorrectionRatio;
  }

  // dx = ((g - mean(g)) - c * rstd * mg) * rstd (* s), mg = rstd * mean(g * c),
  // into `dx` (n elements); c is the centred x * s - mean; g is overwritten.
  __aicore__ inline void WriteGradInput(const LocalTensor<T>& dx, const LocalTensor<float>& c,
                                        const LocalTensor<float>& g, const RowSums& sums, float rstd, float s,
                                        int32_t n) {
    LocalTensor<float> tmp = tmp_.template Get<float>();
    const float meanG = sums.sumG * t_.invCols;
    const float meanGxhat = rstd * (sums.sumGc * t_.invCols);
    PipeBarrier<PIPE_V>();
    Adds(g, g, -meanG, n);
    PipeBarrier<PIPE_V>();
    Muls(tmp, c, rstd, n);  // xhat
    PipeBarrier<PIPE_V>();
    Muls(tmp, tmp, -meanGxhat, n);
    PipeBarrier<PIPE_V>();
    Add(tmp, tmp, g, n);
    op_ext_kernel::GradInputOutput(dx, tmp, rstd, s, n);
  }

  // ---- pass 1: gradWeight and gradBias over columns -------------------------------------

  __aicore__ inline void InitColumns(TPipe* pipe) {
    const uint32_t chunkBytes = t_.dwChunkCols * sizeof(T);
    io_.InitQueues(pipe, chunkBytes);
    pipe->InitBuffer(accW_, t_.dwChunkCols * sizeof(float));
    pipe->InitBuffer(accB_, t_.dwChunkCols * sizeof(float));
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
    LocalTensor<float> accW = accW_.template Get<float>();
    LocalTensor<float> accB = accB_.template Get<float>();
    LocalTensor<float> tmp = tmp_.template Get<float>();
    if (t_.hasWeight) Duplicate(accW, 0.0f, n);
    if (t_.hasBias) Duplicate(accB, 0.0f, n);
    for (uint64_t r = 0; r < t_.rows; ++r) {
      LocalTensor<T> x;
      if (t_.hasWeight) {
        x = io_.inX.template AllocTensor<T>();
        io_.copier.In(x, io_.xGm[r * t_.cols + col], width);
        io_.inX.EnQue(x);
      }
      LocalTensor<T> dy = io_.inDy.template AllocTensor<T>();
      io_.copier.In(dy, io_.dyGm[r * t_.cols + col], width);
      io_.inDy.EnQue(dy);
      dy = io_.inDy.template DeQue<T>();
      LocalTensor<float> dyf = AsFloat(dy, io_.gF, width);
      if (t_.hasWeight) {
        x = io_.inX.template DeQue<T>();
        const uint64_t at = StatIndex(r);
        const float mean = io_.statGm.GetValue(at);
        const float rstd = io_.statGm.GetValue(at + 1);
        const float s = io_.statGm.GetValue(at + 2);
        Centre(tmp, AsFloat(x, io_.xF, width), s, mean, n);
        PipeBarrier<PIPE_V>();
        Muls(tmp, tmp, rstd, n);  // xhat first: dy * (x - mean) may overflow
        PipeBarrier<PIPE_V>();
        Mul(tmp, tmp, dyf, n);
        PipeBarrier<PIPE_V>();
        Add(accW, accW, tmp, n);
        io_.inX.FreeTensor(x);
      }
      PipeBarrier<PIPE_V>();
      if (t_.hasBias) Add(accB, accB, dyf, n);
      io_.inDy.FreeTensor(dy);
    }
    if (t_.hasWeight) op_ext_kernel::StoreFloatRow(io_.copier, io_.out, io_.dwGm[col], accW, width);
    if (t_.hasBias) op_ext_kernel::StoreFloatRow(io_.copier, io_.out, dbGm_[col], accB, width);
  }

  optiling::LayerNormGradCustomTilingData t_;
  op_ext_kernel::NormGradIo<T> io_;
  TBuf<TPosition::VECCALC> cen_;
  TBuf<TPosition::VECCALC> tmp_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> statTile_;
  TBuf<TPosition::VECCALC> accW_;
  TBuf<TPosition::VECCALC> accB_;
  GlobalTensor<T> dbGm_;
};

template <typename T>
__aicore__ inline void RunLayerNormGrad(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR dx, GM_ADDR dw, GM_ADDR db,
                                        GM_ADDR workspace, const optiling::LayerNormGradCustomTilingData& tiling) {
  TPipe pipe;
  KernelLayerNormGrad<T> op;
  op.Init(dy, x, w, dx, dw, db, workspace, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void layer_norm_grad_custom(GM_ADDR gradOutput, GM_ADDR x, GM_ADDR weight,
                                                             GM_ADDR gradInput, GM_ADDR gradWeight, GM_ADDR gradBias,
                                                             GM_ADDR workspace, GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunLayerNormGrad<float>(gradOutput, x, weight, gradInput, gradWeight, gradBias, workspace, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunLayerNormGrad<half>(gradOutput, x, weight, gradInput, gradWeight, gradBias, workspace, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunLayerNormGrad<bfloat16_t>(gradOutput, x, weight, gradInput, gradWeight, gradBias, workspace, tilingData);
#endif
  }
}
