// FusedAddRmsNormCustom: z = x + r (written out as residualOut, in T), then
// y = z * rsqrt(mean(z^2) + eps) * w per row of [rows, cols].
//
// The norm reads z as stored: for 16-bit types z is added in float, rounded to
// T (residualOut) and cast back, so output is exactly rms_norm(residualOut).
// Statistics and output are computed in float. Two ways through a core's rows
// (row_tiling.h):
//   whole rows: rowsPerTile rows per tile, x and r in, z and y out;
//   split rows: a row at a time in chunks, read twice: pass 1 adds, writes z and
//     sums squares; pass 2 re-reads x and r and recomputes z (the same bits)
//     rather than reading back residualOut, which would need an MTE3 -> MTE2
//     ordering of this core's own GM writes.
// A row whose sum of squares overflows (rstd comes out 0, |z| finite) or
// underflows (rstd above 2^51, or NaN, the Sqrt of 0: eps 0 and |z| below ~1e-19)
// is redone on z * s (kernel_common.h, RescueScale): y = (z * s) * rstd_s * w with
// rstd_s = rsqrt(mean((z s)^2) + eps s^2); split rows then take two more reads.
// Tiling: host/tiling/fused_add_rms_norm_custom_tiling.h (the UB plan there mirrors Init*).
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "row_norm_common.h"
#include "fused_add_rms_norm_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelFusedAddRmsNorm {
 public:
  __aicore__ inline KernelFusedAddRmsNorm() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR r, GM_ADDR w, GM_ADDR y, GM_ADDR z,
                              const optiling::FusedAddRmsNormCustomTilingData& tiling, TPipe* pipe) {
    t_ = tiling;
    io_.Init(x, w, y, t_, pipe);
    const uint64_t total = t_.rows * t_.cols;
    rGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(r), op_ext_kernel::ReadableLength<T>(total, t_.tailMode));
    zGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(z), total);
    const uint32_t tileElems = t_.splitRow ? t_.chunkLength : t_.rowsPerTile * t_.rowStride;
    const uint32_t rowElems = t_.splitRow ? t_.chunkLength : t_.rowStride;
    pipe->InitBuffer(io_.inX, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(inQueueR_, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(io_.outY, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(outQueueZ_, kBufferNum, tileElems * sizeof(T));
    pipe->InitBuffer(square_, rowElems * sizeof(float));
    if (!t_.splitRow || !kIsFloat) pipe->InitBuffer(weightF_, rowElems * sizeof(float));
    if constexpr (!kIsFloat) pipe->InitBuffer(sumF_, rowElems * sizeof(float));
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
  }

  __aicore__ inline void CopyInRows(uint64_t row, uint32_t k) {
    LocalTensor<T> x = io_.inX.template AllocTensor<T>();
    LocalTensor<T> r = inQueueR_.template AllocTensor<T>();
    io_.copier.RowsIn(x, io_.xGm[row * t_.cols], k, t_.cols);
    io_.copier.RowsIn(r, rGm_[row * t_.cols], k, t_.cols);
    io_.inX.EnQue(x);
    inQueueR_.EnQue(r);
  }

  __aicore__ inline void ComputeRows(uint32_t k) {
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> r = inQueueR_.template DeQue<T>();
    LocalTensor<T> y = io_.outY.template AllocTensor<T>();
    LocalTensor<T> z = outQueueZ_.template AllocTensor<T>();
    LocalTensor<float> sq = square_.template Get<float>();
    LocalTensor<float> wf = weightF_.template Get<float>();
    const int32_t n = static_cast<int32_t>(t_.cols);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t at = j * t_.rowStride;
      LocalTensor<float> zf = AddResidual(z[at], x[at], r[at], sq, t_.cols);
      PipeBarrier<PIPE_V>();
      float rstd = RowRstd(SumOfSquares(zf, sq, n), t_.eps);
      if (op_ext_kernel::NeedsRescue(rstd)) {
        // z itself is residualOut: the scaled row goes to y's row (float) or in place
        // in the float copy (16-bit).
        LocalTensor<float> zs = kIsFloat ? y[at].template ReinterpretCast<float>() : zf;
        if (op_ext_kernel::RescaleRmsRow(stat_.template Get<float>(), work_.template Get<float>(), zs, zf, sq, n,
                                         t_.invCols, t_.eps, rstd)) {
          zf = zs;
        }
      }
      PipeBarrier<PIPE_V>();
      op_ext_kernel::RmsNormOutput(y[at], zf, wf, rstd, sq, t_.hasWeight != 0, t_.cols);
    }
    io_.outY.EnQue(y);
    outQueueZ_.EnQue(z);
    io_.inX.FreeTensor(x);
    inQueueR_.FreeTensor(r);
  }

  __aicore__ inline void CopyOutRows(uint64_t row, uint32_t k) {
    LocalTensor<T> y = io_.outY.template DeQue<T>();
    LocalTensor<T> z = outQueueZ_.template DeQue<T>();
    io_.copier.RowsOut(io_.yGm[row * t_.cols], y, k, t_.cols);
    io_.copier.RowsOut(zGm_[row * t_.cols], z, k, t_.cols);
    io_.outY.FreeTensor(y);
    outQueueZ_.FreeTensor(z);
  }

  // ---- split rows -------------------------------------------------------------

  __aicore__ inline void ProcessSplitRow(uint64_t row) {
    const uint64_t base = row * t_.cols;
    LocalTensor<float> sq = square_.template Get<float>();
    float sumSq = 0.0f;
    // Pass 1: z = x + r, written out; sum of squares, chunk sums added in order.
    // Where only whole blocks move, a last chunk that is not whole blocks is
    // written after the pass, shifted back (WriteResidualChunk).
    bool deferredLast = false;
    for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
      const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
      CopyInChunk(base + c, len);
      LocalTensor<T> x = io_.inX.template DeQue<T>();
      LocalTensor<T> r = inQueueR_.template DeQue<T>();
      LocalTensor<T> z = outQueueZ_.template AllocTensor<T>();
      LocalTensor<float> zf = AddResidual(z, x, r, sq, len);
      PipeBarrier<PIPE_V>();
      LocalTensor<float> part = SumOfSquares(zf, sq, static_cast<int32_t>(len));
      // Chunk sums are added on the scalar unit in chunk order (one float per chunk).
      sumSq += op_ext_kernel::ReadScalarAfterVector(part);
      outQueueZ_.EnQue(z);
      io_.inX.FreeTensor(x);
      inQueueR_.FreeTensor(r);
      z = outQueueZ_.template DeQue<T>();
      uint64_t at = c;
      uint32_t whole = len;
      io_.copier.ShiftLastChunk(0, at, whole);
      if (at == c) {
        io_.copier.Out(zGm_[base + c], z, len);
      } else {
        deferredLast = true;
      }
      outQueueZ_.FreeTensor(z);
    }
    if (deferredLast) {
      const uint32_t lastLen = t_.cols % t_.chunkLength;
      uint64_t at = t_.cols - lastLen;
      uint32_t whole = lastLen;
      io_.copier.ShiftLastChunk(0, at, whole);
      WriteResidualChunk(base + at, whole);
    }
    float rstd = ScalarRstd(sumSq, t_.eps);
    float scale = 1.0f;
    if (op_ext_kernel::NeedsRescue(rstd)) RescaleSplitRow(base, rstd, scale);
    // Pass 2: output, chunk by chunk, from x + r recomputed (the last chunk
    // shifted back to whole blocks where only whole blocks move).
    for (uint32_t c0 = 0; c0 < t_.cols; c0 += t_.chunkLength) {
      uint64_t c = c0;
      uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c0, t_.chunkLength);
      io_.copier.ShiftLastChunk(0, c, len);
      LocalTensor<T> w;
      if (t_.hasWeight) {
        w = io_.inX.template AllocTensor<T>();
        io_.copier.In(w, io_.wGm[c], len);
        io_.inX.EnQue(w);
      }
      CopyInChunk(base + c, len);
      if (t_.hasWeight) w = io_.inX.template DeQue<T>();
      LocalTensor<T> x = io_.inX.template DeQue<T>();
      LocalTensor<T> r = inQueueR_.template DeQue<T>();
      LocalTensor<T> y = io_.outY.template AllocTensor<T>();
      // y holds z (in T) until the output overwrites it.
      LocalTensor<float> zf = AddResidual(y, x, r, sq, len);
      PipeBarrier<PIPE_V>();
      if (scale != 1.0f) Muls(zf, zf, scale, static_cast<int32_t>(len));
      LocalTensor<float> wf;
      if (t_.hasWeight) wf = op_ext_kernel::AsFloat(w, weightF_, len);
      PipeBarrier<PIPE_V>();
      op_ext_kernel::RmsNormOutput(y, zf, wf, rstd, sq, t_.hasWeight != 0, len);
      io_.outY.EnQue(y);
      if (t_.hasWeight) io_.inX.FreeTensor(w);
      io_.inX.FreeTensor(x);
      inQueueR_.FreeTensor(r);
      y = io_.outY.template DeQue<T>();
      io_.copier.Out(io_.yGm[base + c], y, len);
      io_.outY.FreeTensor(y);
    }
  }

  __aicore__ inline void CopyInChunk(uint64_t offset, uint32_t len) {
    LocalTensor<T> x = io_.inX.template AllocTensor<T>();
    LocalTensor<T> r = inQueueR_.template AllocTensor<T>();
    io_.copier.In(x, io_.xGm[offset], len);
    io_.copier.In(r, rGm_[offset], len);
    io_.inX.EnQue(x);
    inQueueR_.EnQue(r);
  }

  // z = x + r over [offset, offset + len) of the tensor, recomputed and written (a
  // split row's last chunk, shifted back to whole blocks: the elements it shares
  // with the chunk before get the same values again).
  __aicore__ inline void WriteResidualChunk(uint64_t offset, uint32_t len) {
    CopyInChunk(offset, len);
    LocalTensor<T> x = io_.inX.template DeQue<T>();
    LocalTensor<T> r = inQueueR_.template DeQue<T>();
    LocalTensor<T> z = outQueueZ_.template AllocTensor<T>();
    AddResidual(z, x, r, square_.template Get<float>(), len);
    outQueueZ_.EnQue(z);
    io_.inX.FreeTensor(x);
    inQueueR_.FreeTensor(r);
    z = outQueueZ_.template DeQue<T>();
    io_.copier.Out(zGm_[offset], z, len);
    outQueueZ_.FreeTensor(z);
  }

  // ---- shared -------------------------------------------------------------------

  // z = x + r stored in T; returns z in float as stored (float: z itself;
  // 16-bit: sumF_, cast back from the rounded z). sq is scratch.
  __aicore__ inline LocalTensor<float> AddResidual(const LocalTensor<T>& z, const LocalTensor<T>& x,
                                                   const LocalTensor<T>& r, const LocalTensor<float>& sq,
                                                   uint32_t count) {
    const int32_t n = static_cast<int32_t>(count);
    if constexpr (kIsFloat) {
      Add(z, x, r, n);
      return z.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> zf = sumF_.template Get<float>();
      Cast(zf, x, RoundMode::CAST_NONE, count);
      Cast(sq, r, RoundMode::CAST_NONE, count);
      PipeBarrier<PIPE_V>();
      Add(zf, zf, sq, n);
      PipeBarrier<PIPE_V>();
      Cast(z, zf, op_ext_kernel::NarrowRound<T>(), count);
      PipeBarrier<PIPE_V>();
      Cast(zf, z, RoundMode::CAST_NONE, count);
      return zf;
    }
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

  // The same from a sum added up on the scalar unit.
  __aicore__ inline float ScalarRstd(float sumSq, float eps) {
    return RowRstd(op_ext_kernel::ScalarToVector(stat_.template Get<float>(), sumSq), eps);
  }

  // A split row whose sum of squares overflowed or underflowed: max|z| over a pass, then the sum
  // of squares of z * s over another (z recomputed from x + r, in y's buffer,
  // which is not written out here).
  __aicore__ inline void RescaleSplitRow(uint64_t base, float& rstd, float& scale) {
    LocalTensor<float> sq = square_.template Get<float>();
    float maxAbs = 0.0f;
    float sumSq = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t c = 0; c < t_.cols; c += t_.chunkLength) {
        const uint32_t len = op_ext_kernel::ChunkLength(t_.cols, c, t_.chunkLength);
        const int32_t n = static_cast<int32_t>(len);
        CopyInChunk(base + c, len);
        LocalTensor<T> x = io_.inX.template DeQue<T>();
        LocalTensor<T> r = inQueueR_.template DeQue<T>();
        LocalTensor<T> z = io_.outY.template AllocTensor<T>();
        LocalTensor<float> zf = AddResidual(z, x, r, sq, len);
        if (pass == 0) {
          PipeBarrier<PIPE_V>();
          const float m =
              op_ext_kernel::RowMaxAbs(stat_.template Get<float>(), zf, sq, work_.template Get<float>(), n);
          maxAbs = op_ext_kernel::MaxOrNan(maxAbs, m);
        } else {
          PipeBarrier<PIPE_V>();
          Muls(zf, zf, scale, n);
          sumSq += op_ext_kernel::ReadScalarAfterVector(SumOfSquares(zf, sq, n));
        }
        io_.outY.FreeTensor(z);
        io_.inX.FreeTensor(x);
        inQueueR_.FreeTensor(r);
      }
      if (pass == 0) {
        if (!(maxAbs <= op_ext_kernel::kFloatMax)) return;
        scale = op_ext_kernel::RescueScale(maxAbs);
      }
    }
    rstd = ScalarRstd(sumSq, t_.eps * scale * scale);
  }

  optiling::FusedAddRmsNormCustomTilingData t_;
  op_ext_kernel::NormRowsIo<T> io_;
  TQue<TPosition::VECIN, kBufferNum> inQueueR_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueZ_;
  TBuf<TPosition::VECCALC> weightF_;
  TBuf<TPosition::VECCALC> square_;
  TBuf<TPosition::VECCALC> sumF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  GlobalTensor<T> rGm_;
  GlobalTensor<T> zGm_;
};

template <typename T>
__aicore__ inline void RunFusedAddRmsNorm(GM_ADDR x, GM_ADDR r, GM_ADDR w, GM_ADDR y, GM_ADDR z,
                                          const optiling::FusedAddRmsNormCustomTilingData& tiling) {
  TPipe pipe;
  KernelFusedAddRmsNorm<T> op;
  op.Init(x, r, w, y, z, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void fused_add_rms_norm_custom(GM_ADDR input, GM_ADDR residual, GM_ADDR weight,
                                                                GM_ADDR output, GM_ADDR residualOut,
                                                                GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunFusedAddRmsNorm<float>(input, residual, weight, output, residualOut, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunFusedAddRmsNorm<half>(input, residual, weight, output, residualOut, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunFusedAddRmsNorm<bfloat16_t>(input, residual, weight, output, residualOut, tilingData);
#endif
  }
}
