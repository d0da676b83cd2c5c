// LayerNormCustom: y = (x - mean) * rsqrt(var + eps) * w + b per row of
// [rows, cols]; weight and bias optional.
//
// Everything is computed in float (16-bit inputs are cast up; the result is
// rounded once). The variance is the mean of the squared centred values (two
// passes over the row), never E[x^2] - mean^2, which cancels catastrophically
// for rows whose mean is large next to their spread. Two ways through a core's
// rows (row_tiling.h):
//   whole rows: rowsPerTile rows per tile, one copy in and one copy out each;
//   split rows: a row at a time in chunks, read three times (sum, sum of squared
//     centred values, output); chunk sums are added in chunk order.
// Two kinds of rows get their statistics redone ("careful" statistics), decided
// from the mean and rstd the scalar unit reads anyway, so other rows cost nothing:
//   * the statistics overflow (mean not finite, or rstd 0: var inf) while max|x| is
//     finite: they are redone on x * s, s an exact power of two with max|x| * s <= 1
//     (kernel_common.h), y = (x s - mean_s) * rstd_s * w + b with
//     rstd_s = rsqrt(var_s + eps s^2);
//   * the statistics underflow (rstd above 2^51, or NaN, the Sqrt of 0: eps 0 and a
//     spread below ~1e-19, whose squares are subnormal or 0): the same on x * s, s the
//     power of two that brings max|x| up into [0.5, 1) (kernel_common.h,
//     UnderflowScale);
//   * |mean| * rstd > kMeanCorrectionRatio: the spread is small next to the mean,
//     and the mean's rounding error (sum * (1/cols) is not exact) is no longer small
//     next to the spread. The mean is corrected by the mean of the centred values
//     (mean += mean(x - mean)) before centring again. This makes a constant row
//     centre to exact zeros, so with eps = 0 it gives 0 * inf = NaN as torch does,
//     instead of +-1 from centred values of +-1 ulp.
// Split rows take two (or, with the scale, four) more reads in those cases.
// Tiling: host/tiling/layer_norm_custom_tiling.h (the UB plan there mirrors Init).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "row_norm_common.h"
#include "layer_norm_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

// Above this |mean| * rstd the mean is corrected (see the top). The uncorrected
// mean is off by a few ulps of |mean|, i.e. by about 1e-7 * |mean| * rstd in units of
// the output: below the ratio that is under 2e-6.
constexpr float kMeanCorrectionRatio = 16.0f;

template <typename T>
class KernelLayerNorm {
 public:
  __aicore__ inline KernelLayerNorm() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR w, GM_ADDR b, GM_ADDR y,
                              const optiling::LayerNormCustomTilingData& tiling, TPipe* pipe) {
    t_ = tiling;
    io_.Init(x, w, y, t_, pipe);
    if (t_.hasBias) {
      bGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(b), op_ext_kernel::ReadableLength<T>(t_.cols, t_.tailMode));
    }
    if (t_.splitRow) {
      pipe->InitBuffer(io_.inX, kBufferNum, t_.chunkLength * sizeof(T));
      pipe->InitBuffer(inQueueWB_, kBufferNum, t_.chunkLength * sizeof(T));
      pipe->InitBuffer(io_.outY, kBufferNum, t_.chunkLength * sizeof(T));
      pipe->InitBuffer(square_, t_.chunkLength * sizeof(float));
      if constexpr (!kIsFloat) {
        pipe->InitBuffer(inputF_, t_.chunkLength * sizeof(float));
        pipe->InitBuffer(weightF_, t_.chunkLength * sizeof(float));
      }
    } else {
      const uint32_t tileBytes = t_.rowsPerTile * t_.rowStride * sizeof(T);
      pipe->InitBuffer(io_.inX, kBufferNum, tileBytes);
      pipe->InitBuffer(io_.outY, kBufferNum, tileBytes);
      pipe->InitBuffer(weightF_, t_.rowStride * sizeof(float));
      pipe->InitBuffer(biasF_, t_.rowStride * sizeof(float));
      pipe->InitBuffer(square_, t_.rowStride * sizeof(float));
      if constexpr (!kIsFloat) pipe->InitBuffer(inputF_, t_.rowStride * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, op_ext_kernel::kBlockBytes);
  }

  __aicore__ inline void Process() { op_ext_kernel::NormRowsPasses::Process(*this, io_, t_); }

 private:
  friend struct op_ext_kernel::NormRowsPasses;

  static constexpr bool kIsFloat = IsSameType<T, float>::value;

  // ---- whole rows -----------------------------------------------------------

  // The parameter rows, once per core, into float rows.
  __aicore__ inline void LoadParams() {
    if (t_.hasWeight) io_.LoadParamRow(io_.wGm, weightF_, t_.cols, t_.rowStride);
    if (t_.hasBias) io_.LoadParamRow(bGm_, biasF_, t_.cols, t_.rowStride);
  }

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) { io_.RowsIn(row, k, t_.cols); }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> y = io_.outY.template AllocTensor<T>();
    LocalTensor<float> sq = square_.template Get<float>();
    LocalTensor<float> wf = weightF_.template Get<float>();
    LocalTensor<float> bf = biasF_.template Get<float>();
    const int32_t n = static_cast<int32_t>(t_.cols);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      // c: the centred row in float -- y's own row for float, inputF_ for 16-bit.
      LocalTensor<float> c = kIsFloat ? y[at].template ReinterpretCast<float>() : inputF_.template Get<float>();
      LocalTensor<float> xf = InputAsFloat(x[at], t_.cols);
      PipeBarrier<PIPE_V>();
      const float mean = RowMean(xf, n);
      PipeBarrier<PIPE_V>();
      Adds(c, xf, -mean, n);
      PipeBarrier<PIPE_V>();
      Mul(sq, c, c, n);
      float rstd = Rstd(Sum(sq, n), t_.eps);
      if (NeedsRescue(mean, rstd) || NeedsMeanCorrection(mean, rstd)) {
        PipeBarrier<PIPE_V>();
        rstd = CarefulRowStats(InputAsFloat(x[at], t_.cols), c, sq, n, mean, rstd);
      }
      LocalTensor<float> out = kIsFloat ? c : sq;
      PipeBarrier<PIPE_V>();
      Muls(out, c, rstd, n);
      PipeBarrier<PIPE_V>();
      if (t_.hasWeight) Mul(out, out, wf, n);
      PipeBarrier<PIPE_V>();
      if (t_.hasBias) Add(out, out, bf, n);
      PipeBarrier<PIPE_V>();
      if constexpr (!kIsFloat) Cast(y[at], out, op_ext_kernel::NarrowRound<T>(), t_.cols);
    }
    io_.outY.EnQue(y);
    io_.inX.FreeTensor(x);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k) { io_.RowsOut(row, k, t_.cols); }

  // ---- split rows -------------------------------------------------------------

  __aicore__ inline void ProcessSplitRow(uint64_t row) {
    const uint64_t base = row * t_.cols;
    LocalTensor<float> sq = square_.template Get<float>();
    // Pass 1: the mean.
    float sum = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      sum += ReadSum(InputAsFloat(x, len), static_cast<int32_t>(len));
      io_.inX.FreeTensor(x);
    }
    float mean = sum * t_.invCols;
    // Pass 2: the sum of squared centred values.
    float sumSq = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      PipeBarrier<PIPE_V>();
      Adds(sq, InputAsFloat(x, len), -mean, n);
      PipeBarrier<PIPE_V>();
      Mul(sq, sq, sq, n);
      sumSq += ReadSum(sq, n);
      io_.inX.FreeTensor(x);
    }
    float rstd = Rstd(ScalarToStat(sumSq), t_.eps);
    float scale = 1.0f;
    if (NeedsRescue(mean, rstd) || NeedsMeanCorrection(mean, rstd)) {
      PipeBarrier<PIPE_V>();
      CarefulSplitRowStats(base, mean, rstd, scale);
    }
    // Pass 3: output, chunk by chunk (the last one shifted back to whole blocks
    // where only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.cols; c0 += t_.chunkLength) {
      uint64_t c = c0;
      uint32_t len = ChunkLen(c0);
      io_.copier.ShiftLastChunk(0, c, len);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> w, b;
      if (t_.hasWeight) w = CopyInParamChunk(io_.wGm[c], len);
      if (t_.hasBias) b = CopyInParamChunk(bGm_[c], len);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      LocalTensor<T> y = io_.outY.template AllocTensor<T>();
      if constexpr (kIsFloat) {
        if (scale != 1.0f) Muls(x, x, scale, n);
        PipeBarrier<PIPE_V>();
        Adds(y, x, -mean, n);
        PipeBarrier<PIPE_V>();
        Muls(y, y, rstd, n);
        PipeBarrier<PIPE_V>();
        if (t_.hasWeight) Mul(y, y, w, n);
        PipeBarrier<PIPE_V>();
        if (t_.hasBias) Add(y, y, b, n);
      } else {
        LocalTensor<float> xf = InputAsFloat(x, len);
        LocalTensor<float> pf = weightF_.template Get<float>();
        PipeBarrier<PIPE_V>();
        if (scale != 1.0f) Muls(xf, xf, scale, n);
        PipeBarrier<PIPE_V>();
        Adds(xf, xf, -mean, n);
        PipeBarrier<PIPE_V>();
        Muls(xf, xf, rstd, n);
        if (t_.hasWeight) {
          Cast(pf, w, RoundMode::CAST_NONE, len);
          PipeBarrier<PIPE_V>();
          Mul(xf, xf, pf, n);
        }
        if (t_.hasBias) {
          Cast(pf, b, RoundMode::CAST_NONE, len);
          PipeBarrier<PIPE_V>();
          Add(xf, xf, pf, n);
        }
        PipeBarrier<PIPE_V>();
        Cast(y, xf, op_ext_kernel::NarrowRound<T>(), len);
      }
      io_.outY.EnQue(y);
      if (t_.hasWeight) inQueueWB_.FreeTensor(w);
      if (t_.hasBias) inQueueWB_.FreeTensor(b);
      io_.inX.FreeTensor(x);
      y = io_.outY.template DeQue<T>();
      io_.copier.Out(io_.yGm[base + c], y, len);
      io_.outY.FreeTensor(y);
    }
  }

  __aicore__ inline uint32_t ChunkLen(uint32_t c) const {
    return op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
  }

  __aicore__ inline LocalTensor<T> CopyInParamChunk(const GlobalTensor<T>& gm, uint32_t len) {
    LocalTensor<T> p = inQueueWB_.template AllocTensor<T>();
    io_.copier.In(p, gm, len);
    inQueueWB_.EnQue(p);
    return inQueueWB_.template DeQue<T>();
  }

  // ---- shared -------------------------------------------------------------------

  // `count` elements in float: the tensor itself for float, else cast into inputF_.
  __aicore__ inline LocalTensor<float> InputAsFloat(const LocalTensor<T>& x, uint32_t count) {
    return op_ext_kernel::AsFloat(x, inputF_, count);
  }

  // stat[0] = sum of src[0..n).
  __aicore__ inline LocalTensor<float> Sum(const LocalTensor<float>& src, int32_t n) {
    return op_ext_kernel::SumInto(stat_.template Get<float>(), src, work_.template Get<float>(), n);
  }

  __aicore__ inline float ReadSum(const LocalTensor<float>& src, int32_t n) {
    return op_ext_kernel::ReadScalarAfterVector(Sum(src, n));
  }

  __aicore__ inline float RowMean(const LocalTensor<float>& src, int32_t n) {
    LocalTensor<float> stat = Sum(src, n);
    PipeBarrier<PIPE_V>();
    Muls(stat, stat, t_.invCols, 1);
    return op_ext_kernel::ReadScalarAfterVector(stat);
  }

  // 1 / sqrt(sumSq / cols + eps) on the vector unit, from stat[0] = sumSq, read as a scalar.
  __aicore__ inline float Rstd(const LocalTensor<float>& sumSq, float eps) {
    return op_ext_kernel::RstdFromSumOfSquares(sumSq, t_.invCols, eps, work_.template Get<float>());
  }

  // stat[0] = v, written by the scalar unit and ordered before the next vector instruction.
  __aicore__ inline LocalTensor<float> ScalarToStat(float v) {
    return op_ext_kernel::ScalarToVector(stat_.template Get<float>(), v);
  }

  // ---- careful statistics (see the top) -----------------------------------------

  __aicore__ static inline bool Overflowed(float mean, float rstd) {
    return !(mean <= op_ext_kernel::kFloatMax && mean >= -op_ext_kernel::kFloatMax) || rstd == 0.0f;
  }
  __aicore__ static inline bool NeedsMeanCorrection(float mean, float rstd) {
    return (mean < 0.0f ? -mean : mean) * rstd > kMeanCorrectionRatio;
  }
  // Statistics that overflowed, or that underflowed (kernel_common.h: eps 0 and
  // a spread below ~1e-19), from the first mean and rstd.
  __aicore__ static inline bool NeedsRescue(float mean, float rstd) {
    return Overflowed(mean, rstd) || op_ext_kernel::StatisticUnderflowed(rstd);
  }
  // The rescue's scale for a row of that max|x| (1 where inf or NaN is in the
  // row, which keeps the plain path's NaN, or the row is all zeros).
  __aicore__ static inline float RescueScale(float maxAbs) {
    if (!(maxAbs <= op_ext_kernel::kFloatMax && maxAbs > 0.0f)) return 1.0f;
    return op_ext_kernel::RescueScale(maxAbs);
  }

  // A whole row: c = x * s - mean_s (mean corrected), returns rstd_s; mean and
  // rstd are the row's first statistics. xf (the row in float) may be c (16-bit:
  // both inputF_); sq is scratch.
  __aicore__ inline float CarefulRowStats(const LocalTensor<float>& xf, const LocalTensor<float>& c,
                                          const LocalTensor<float>& sq, int32_t n, float firstMean,
                                          float firstRstd) {
    float s = 1.0f;
    if (NeedsRescue(firstMean, firstRstd)) {
      const float maxAbs =
          op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), xf, sq, work_.template Get<float>(), n);
      s = RescueScale(maxAbs);
    }
    PipeBarrier<PIPE_V>();
    Muls(c, xf, s, n);
    PipeBarrier<PIPE_V>();
    float mean = RowMean(c, n);
    PipeBarrier<PIPE_V>();
    Adds(sq, c, -mean, n);
    mean += ReadSum(sq, n) * t_.invCols;
    Adds(c, c, -mean, n);
    PipeBarrier<PIPE_V>();
    Mul(sq, c, c, n);
    if (s == 1.0f) return Rstd(Sum(sq, n), t_.eps);
    const float sumSq = ReadSum(sq, n);
    return Rstd(ScalarToStat(sumSq), ScaledEps(sumSq, s));
  }

  // eps at scale s. A rescued row whose scaled variance is 0 is constant (c is
  // 0): its rstd at that scale, 1 / (sqrt(eps) * s), is past float's range
  // (eps * s^2 underflows), and c * rstd = 0 * inf gave NaN where the output is
  // the bias. The true rstd, 1 / sqrt(eps), leaves c * rstd = 0; with eps 0 it
  // is inf and the output NaN, as 0 / 0 is.
  __aicore__ inline float ScaledEps(float scaledSumSq, float s) const {
    return scaledSumSq == 0.0f ? t_.eps : t_.eps * s * s;
  }

  // A split row: the statistics of x * scale, by chunk passes (max|x|, sum, sum of
  // centred values, sum of squared centred values). Pass 3 then outputs
  // (x * scale - mean) * rstd.
  __aicore__ inline void CarefulSplitRowStats(uint64_t base, float& mean, float& rstd, float& scale) {
    if (NeedsRescue(mean, rstd)) {
      const float maxAbs = SplitRowPass(base, kPassMaxAbs, 1.0f, 0.0f);
      scale = RescueScale(maxAbs);
      mean = SplitRowPass(base, kPassSum, scale, 0.0f) * t_.invCols;
    }
    mean += SplitRowPass(base, kPassSum, scale, mean) * t_.invCols;
    const float sumSq = SplitRowPass(base, kPassSumSq, scale, mean);
    rstd = Rstd(ScalarToStat(sumSq), ScaledEps(sumSq, scale));
  }

  static constexpr uint32_t kPassSum = 0;     // sum of v
  static constexpr uint32_t kPassSumSq = 1;   // sum of v^2
  static constexpr uint32_t kPassMaxAbs = 2;  // max |x|
  // One read of a split row, v = x * s - m per chunk; chunk results combined in order.
  __aicore__ inline float SplitRowPass(uint64_t base, uint32_t kind, float s, float m) {
    LocalTensor<float> sq = square_.template Get<float>();
    float acc = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = ChunkLen(c);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      PipeBarrier<PIPE_V>();
      LocalTensor<float> xf = InputAsFloat(x, len);
      if (kind == kPassMaxAbs) {
        acc = op_ext_kernel::MaxOrNan(
            acc, op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), xf, sq, work_.template Get<float>(), n));
      } else {
        PipeBarrier<PIPE_V>();
        Muls(sq, xf, s, n);
        PipeBarrier<PIPE_V>();
        Adds(sq, sq, -m, n);
        PipeBarrier<PIPE_V>();
        if (kind == kPassSumSq) Mul(sq, sq, sq, n);
        acc += ReadSum(sq, n);
      }
      io_.inX.FreeTensor(x);
    }
    return acc;
  }

  optiling::LayerNormCustomTilingData t_;
  op_ext_kernel::NormRowsIo<T> io_;
  TQue<TPosition::VECIN, kBufferNum> inQueueWB_;
  TBuf<TPosition::VECCALC> weightF_;
  TBuf<TPosition::VECCALC> biasF_;
  TBuf<TPosition::VECCALC> square_;
  TBuf<TPosition::VECCALC> inputF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  GlobalTensor<T> bGm_;
};

template <typename T>
__aicore__ inline void RunLayerNorm(GM_ADDR x, GM_ADDR w, GM_ADDR b, GM_ADDR y,
                                    const optiling::LayerNormCustomTilingData& tiling) {
  TPipe pipe;
  KernelLayerNorm<T> op;
  op.Init(x, w, b, y, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void layer_norm_custom(GM_ADDR x, GM_ADDR weight, GM_ADDR bias, GM_ADDR y,
                                                        GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunLayerNorm<float>(x, weight, bias, y, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunLayerNorm<half>(x, weight, bias, y, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunLayerNorm<bfloat16_t>(x, weight, bias, y, tilingData);
#endif
  }
}
