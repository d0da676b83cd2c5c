// RmsNormCustom: y = x * rsqrt(mean(x^2) + eps) * w per row of [rows, cols].
//
// Everything is computed in float (16-bit inputs are cast up; the result is
// rounded once). The sum of squares is a float ReduceSum per row (or per chunk,
// chunk sums added in order). Two ways through a core's rows (row_tiling.h):
//   whole rows: rowsPerTile rows per tile, one copy in and one copy out each;
//   split rows: a row at a time in chunks, read twice (sum of squares, then output).
// A row whose sum of squares overflows (rstd comes out 0, |x| finite) or
// underflows (rstd above 2^51, or NaN, the Sqrt of 0: eps 0 and |x| below ~1e-19)
// is redone on x * s (kernel_common.h, RescueScale): y = (x * s) * rstd_s * w with
// rstd_s = rsqrt(mean((x s)^2) + eps s^2); split rows then take two more reads.
// Tiling: host/tiling/rms_norm_custom_tiling.h (the UB plan there mirrors Init*).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "row_norm_common.h"
#include "rms_norm_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelRmsNorm {
 public:
  __aicore__ inline KernelRmsNorm() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR w, GM_ADDR y, const optiling::RmsNormCustomTilingData& tiling,
                              TPipe* pipe) {
    t_ = tiling;
    io_.Init(x, w, y, t_, pipe);
    if (t_.splitRow) {
      InitChunks(pipe);
    } else {
      InitRows(pipe);
    }
  }

  __aicore__ inline void Process() { op_ext_kernel::NormRowsPasses::Process(*this, io_, t_); }

 private:
  friend struct op_ext_kernel::NormRowsPasses;

  static constexpr bool kIsFloat = IsSameType<T, float>::value;

  // ---- whole rows -----------------------------------------------------------

  __aicore__ inline void InitRows(TPipe* pipe) {
    const uint32_t tileBytes = t_.rowsPerTile * t_.rowStride * sizeof(T);
    pipe->InitBuffer(io_.inX, kBufferNum, tileBytes);
    pipe->InitBuffer(io_.outY, kBufferNum, tileBytes);
    pipe->InitBuffer(weightF_, t_.rowStride * sizeof(float));
    pipe->InitBuffer(square_, t_.rowStride * sizeof(float));
    if constexpr (!kIsFloat) pipe->InitBuffer(inputF_, t_.rowStride * sizeof(float));
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, op_ext_kernel::kBlockBytes);
  }

  // The parameter rows, once per core, into float rows.
  __aicore__ inline void LoadParams() {
    if (t_.hasWeight) io_.LoadParamRow(io_.wGm, weightF_, t_.cols, t_.rowStride);
  }

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) { io_.RowsIn(row, k, t_.cols); }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> y = io_.outY.template AllocTensor<T>();
    LocalTensor<float> sq = square_.template Get<float>();
    LocalTensor<float> wf = weightF_.template Get<float>();
    const int32_t n = static_cast<int32_t>(t_.cols);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      LocalTensor<float> xf = InputAsFloat(x[at], t_.cols);
      PipeBarrier<PIPE_V>();
      float rstd = RowRstd(SumOfSquares(xf, sq, n), t_.eps);
      if (op_ext_kernel::NeedsRescue(rstd)) {
        // The scaled row goes to y's row (float) or in place (16-bit: xf is a copy).
        LocalTensor<float> xs = kIsFloat ? y[at].template ReinterpretCast<float>() : xf;
        if (RescaleRow(xs, xf, sq, n, rstd)) xf = xs;
      }
      op_ext_kernel::RmsNormOutput(y[at], xf, wf, rstd, sq, t_.hasWeight != 0, t_.cols);
    }
    io_.outY.EnQue(y);
    io_.inX.FreeTensor(x);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k) { io_.RowsOut(row, k, t_.cols); }

  // ---- split rows -------------------------------------------------------------

  __aicore__ inline void InitChunks(TPipe* pipe) {
    const uint32_t chunkBytes = t_.chunkLength * sizeof(T);
    pipe->InitBuffer(io_.inX, kBufferNum, chunkBytes);
    pipe->InitBuffer(io_.outY, kBufferNum, chunkBytes);
    pipe->InitBuffer(square_, t_.chunkLength * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(inputF_, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(weightF_, t_.chunkLength * sizeof(float));
    }
    pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
    pipe->InitBuffer(stat_, op_ext_kernel::kBlockBytes);
    pipe->InitBuffer(acc_, op_ext_kernel::kBlockBytes);
  }

  __aicore__ inline void ProcessSplitRow(uint64_t row) {
    const uint64_t base = row * t_.cols;
    LocalTensor<float> sq = square_.template Get<float>();
    // Pass 1: sum of squares.
    float rstd = SplitRowRstd(base, 1.0f);
    float scale = 1.0f;
    if (op_ext_kernel::NeedsRescue(rstd)) RescaleSplitRow(base, rstd, scale);
    // Pass 2: output, chunk by chunk (the last one shifted back to whole blocks
    // where only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.cols; c0 += t_.chunkLength) {
      uint64_t c = c0;
      uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c0, t_.chunkLength);
      io_.copier.ShiftLastChunk(0, c, len);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> w;
      if (t_.hasWeight) {
        w = io_.inX.template AllocTensor<T>();
        io_.copier.In(w, io_.wGm[c], len);
        io_.inX.EnQue(w);
      }
      LocalTensor<T> x = io_.inX.template AllocTensor<T>();
      io_.copier.In(x, io_.xGm[base + c], len);
      io_.inX.EnQue(x);
      if (t_.hasWeight) w = io_.inX.template DeQue<T>();
      x = io_.inX.template DeQue<T>();
      LocalTensor<T> y = io_.outY.template AllocTensor<T>();
      LocalTensor<float> xf = InputAsFloat(x, len);
      PipeBarrier<PIPE_V>();
      if (scale != 1.0f) Muls(xf, xf, scale, n);
      LocalTensor<float> wf;
      if (t_.hasWeight) wf = op_ext_kernel::AsFloat(w, weightF_, len);
      PipeBarrier<PIPE_V>();
      op_ext_kernel::RmsNormOutput(y, xf, wf, rstd, sq, t_.hasWeight != 0, len);
      io_.outY.EnQue(y);
      if (t_.hasWeight) io_.inX.FreeTensor(w);
      io_.inX.FreeTensor(x);
      y = io_.outY.template DeQue<T>();
      io_.copier.Out(io_.yGm[base + c], y, len);
      io_.outY.FreeTensor(y);
    }
  }

  // ---- shared -------------------------------------------------------------------

  // `count` elements of a row (or chunk) in float: the tensor itself for float,
  // else cast into inputF_.
  __aicore__ inline LocalTensor<float> InputAsFloat(const LocalTensor<T>& x, uint32_t count) {
    return op_ext_kernel::AsFloat(x, inputF_, count);
  }

  // stat[0] = sum of xf[i]^2 over n elements (sq is scratch).
  __aicore__ inline LocalTensor<float> SumOfSquares(const LocalTensor<float>& xf, const LocalTensor<float>& sq,
                                                    int32_t n) {
    return op_ext_kernel::SumOfSquaresInto(stat_.template Get<float>(), xf, sq, work_.template Get<float>(), n);
  }

  // 1 / sqrt(sumSq / cols + eps), computed by the vector unit on sumSq[0], read as a scalar.
  __aicore__ inline float RowRstd(const LocalTensor<float>& sumSq, float eps) {
    return op_ext_kernel::RstdFromSumOfSquares(sumSq, t_.invCols, eps, work_.template Get<float>());
  }

  // A whole row whose sum of squares overflowed or underflowed: xs = xf * s, rstd = rstd_s (the
  // output is xs * rstd_s). False (nothing changed) when some |x| is inf or NaN.
  __aicore__ inline bool RescaleRow(const LocalTensor<float>& xs, const LocalTensor<float>& xf,
                                    const LocalTensor<float>& sq, int32_t n, float& rstd) {
    return op_ext_kernel::RescaleRmsRow(stat_.template Get<float>(), work_.template Get<float>(), xs, xf, sq, n,
                                        t_.invCols, t_.eps, rstd);
  }

  // The same for a split row: a pass for max|x|, a pass for the scaled sum of squares.
  __aicore__ inline void RescaleSplitRow(uint64_t base, float& rstd, float& scale) {
    LocalTensor<float> sq = square_.template Get<float>();
    float maxAbs = 0.0f;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      const float m = op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), InputAsFloat(x, len), sq,
                                               work_.template Get<float>(), static_cast<int32_t>(len));
      maxAbs = op_ext_kernel::MaxOrNan(maxAbs, m);
      io_.inX.FreeTensor(x);
    }
    if (!(maxAbs <= op_ext_kernel::kFloatMax)) return;
    scale = op_ext_kernel::RescueScale(maxAbs);
    rstd = SplitRowRstd(base, scale);
  }

  // rstd of a split row's x * s (s = 1: x itself): one read of the row, chunk sums
  // of squares added in order.
  __aicore__ inline float SplitRowRstd(uint64_t base, float s) {
    LocalTensor<float> sq = square_.template Get<float>();
    LocalTensor<float> acc = acc_.template Get<float>();
    Duplicate(acc, 0.0f, 8);
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
      const int32_t n = static_cast<int32_t>(len);
      LocalTensor<T> x = io_.ChunkIn(base + c, len);
      LocalTensor<float> xf = InputAsFloat(x, len);
      if (s != 1.0f) {
        PipeBarrier<PIPE_V>();
        Muls(xf, xf, s, n);
      }
      LocalTensor<float> part = SumOfSquares(xf, sq, n);
      PipeBarrier<PIPE_V>();
      Add(acc, acc, part, 1);
      io_.inX.FreeTensor(x);
    }
    PipeBarrier<PIPE_V>();
    return RowRstd(acc, t_.eps * s * s);
  }

  optiling::RmsNormCustomTilingData t_;
  op_ext_kernel::NormRowsIo<T> io_;
  TBuf<TPosition::VECCALC> weightF_;
  TBuf<TPosition::VECCALC> square_;
  TBuf<TPosition::VECCALC> inputF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> acc_;
};

template <typename T>
__aicore__ inline void RunRmsNorm(GM_ADDR x, GM_ADDR w, GM_ADDR y, const optiling::RmsNormCustomTilingData& tiling) {
  TPipe pipe;
  KernelRmsNorm<T> op;
  op.Init(x, w, y, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void rms_norm_custom(GM_ADDR x, GM_ADDR weight, GM_ADDR y, GM_ADDR workspace,
                                                      GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunRmsNorm<float>(x, weight, y, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunRmsNorm<half>(x, weight, y, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunRmsNorm<bfloat16_t>(x, weight, y, tilingData);
#endif
  }
}
