// Pieces the row-norm kernels share (rms_norm, fused_add_rms_norm, layer_norm and
// their backward): the split of rows over cores and tiles (host/tiling/row_tiling.h,
// row_norm_tiling.h), the float copies of 16-bit rows, the per-row statistics on the
// vector unit, the forward's RMS output, the backward's last gradInput steps, and the
// backward's workspace statistics and column split. Each kernel keeps its own queues,
// buffers and math; these helpers take the tensors they work on, so the UB plans of
// the tilings stay the kernels' own.
//
// Every PipeBarrier<PIPE_V> below separates a vector instruction from an earlier
// one whose output it reads (or whose input it overwrites): Ascend310P needs each
// one (kernel_common.h, "Synchronisation"); on Atlas A2 they are the barriers the
// compiler would insert.
#ifndef OP_EXT_KERNEL_ASCENDC_ROW_NORM_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_ROW_NORM_COMMON_H_

#include "kernel_common.h"
#include "kernel_operator.h"

namespace op_ext_kernel {

// ---- rows of a core, tiles and chunks -----------------------------------------------

// The rows of one core: the first bigCoreNum cores take rowsPerCore + 1 rows.
struct CoreRows {
  uint64_t first = 0;
  uint64_t count = 0;
};

__aicore__ inline CoreRows RowsOfCore(uint64_t core, uint64_t rowsPerCore, uint64_t bigCoreNum) {
  CoreRows rows;
  rows.first = core * rowsPerCore + (core < bigCoreNum ? core : bigCoreNum);
  rows.count = rowsPerCore + (core < bigCoreNum ? 1 : 0);
  return rows;
}

// The core that owns row r under RowsOfCore, and r's index among that core's rows:
// where the backward's row pass left r's statistics.
__aicore__ inline void RowOwner(uint64_t r, uint64_t rowsPerCore, uint64_t bigCoreNum, uint64_t& core,
                                uint64_t& local) {
  const uint64_t bigRows = bigCoreNum * (rowsPerCore + 1);
  if (r < bigRows) {
    core = r / (rowsPerCore + 1);
    local = r % (rowsPerCore + 1);
  } else {
    core = bigCoreNum + (r - bigRows) / rowsPerCore;
    local = (r - bigRows) % rowsPerCore;
  }
}

// Rows in the tile that starts `done` rows into a core's `count` rows.
__aicore__ inline uint32_t TileRows(uint64_t count, uint64_t done, uint32_t rowsPerTile) {
  return static_cast<uint32_t>(count - done < rowsPerTile ? count - done : rowsPerTile);
}

// Length of the chunk of a split row that starts at column c.
__aicore__ inline uint32_t ChunkLength(uint32_t cols, uint32_t c, uint32_t chunkLength) {
  return cols - c < chunkLength ? cols - c : chunkLength;
}

// `count` elements of `t` in float: `t` itself for float, else cast into `buf`.
template <typename T>
__aicore__ inline AscendC::LocalTensor<float> AsFloat(const AscendC::LocalTensor<T>& t,
                                                      AscendC::TBuf<AscendC::TPosition::VECCALC>& buf,
                                                      uint32_t count) {
  if constexpr (AscendC::IsSameType<T, float>::value) {
    return t.template ReinterpretCast<float>();
  } else {
    AscendC::LocalTensor<float> f = buf.template Get<float>();
    AscendC::Cast(f, t, AscendC::RoundMode::CAST_NONE, count);
    AscendC::PipeBarrier<PIPE_V>();  // the caller computes on the float copy next
    return f;
  }
}

// ---- statistics of a row (or chunk) -------------------------------------------------
// stat: one block, where the vector unit leaves a statistic for the scalar unit;
// work: the reduce work tensor (also the `one` scratch of InvSqrt, idle between
// reductions).

// stat[0] = sum of src[0..n).
__aicore__ inline AscendC::LocalTensor<float> SumInto(const AscendC::LocalTensor<float>& stat,
                                                      const AscendC::LocalTensor<float>& src,
                                                      const AscendC::LocalTensor<float>& work, int32_t n) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::ReduceSum(stat, src, work, n);
  return stat;
}

// The same, read as a scalar.
__aicore__ inline float ReadSum(const AscendC::LocalTensor<float>& stat, const AscendC::LocalTensor<float>& src,
                                const AscendC::LocalTensor<float>& work, int32_t n) {
  return ReadScalarAfterVector(SumInto(stat, src, work, n));
}

// stat[0] = sum of xf[i]^2 over n elements (sq: n floats of scratch).
__aicore__ inline AscendC::LocalTensor<float> SumOfSquaresInto(const AscendC::LocalTensor<float>& stat,
                                                               const AscendC::LocalTensor<float>& xf,
                                                               const AscendC::LocalTensor<float>& sq,
                                                               const AscendC::LocalTensor<float>& work, int32_t n) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Mul(sq, xf, xf, n);
  return SumInto(stat, sq, work, n);
}

// 1 / sqrt(sumSq[0] * invCols + eps), computed by the vector unit in place on
// sumSq[0] (Sqrt then Div: InvSqrt), read as a scalar.
__aicore__ inline float RstdFromSumOfSquares(const AscendC::LocalTensor<float>& sumSq, float invCols, float eps,
                                             const AscendC::LocalTensor<float>& work) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Muls(sumSq, sumSq, invCols, 1);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Adds(sumSq, sumSq, eps, 1);
  AscendC::PipeBarrier<PIPE_V>();
  InvSqrt(sumSq, work);
  return ReadScalarAfterVector(sumSq);
}

// stat[0] = v, written by the scalar unit and ordered (S -> V) before the next
// vector instruction: a sum added up on the scalar unit (chunk by chunk) taken
// back to the vector unit.
__aicore__ inline AscendC::LocalTensor<float> ScalarToVector(const AscendC::LocalTensor<float>& stat, float v) {
  stat.SetValue(0, v);
  event_t eventSV = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::S_V));
  AscendC::SetFlag<AscendC::HardEvent::S_V>(eventSV);
  AscendC::WaitFlag<AscendC::HardEvent::S_V>(eventSV);
  return stat;
}

// ---- forward ---------------------------------------------------------------------

// A whole row whose sum of squares overflowed (rstd read 0): xs = xf * s and rstd =
// rsqrt(mean(xs^2) + eps s^2), s = PowerOfTwoScale(max|xf|). False, with nothing
// changed, when some |xf| is inf or NaN: the plain result stands. xs may be xf;
// sq: n floats of scratch.
__aicore__ inline bool RescaleRmsRow(const AscendC::LocalTensor<float>& stat, const AscendC::LocalTensor<float>& work,
                                     const AscendC::LocalTensor<float>& xs, const AscendC::LocalTensor<float>& xf,
                                     const AscendC::LocalTensor<float>& sq, int32_t n, float invCols, float eps,
                                     float& rstd) {
  const float maxAbs = RowMaxAbs(stat, xf, sq, work, n);
  if (!(maxAbs <= kFloatMax)) return false;
  const float s = PowerOfTwoScale(maxAbs);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Muls(xs, xf, s, n);
  rstd = RstdFromSumOfSquares(SumOfSquaresInto(stat, xs, sq, work, n), invCols, eps * s * s, work);
  return true;
}

// RMSNorm's output of one row (or chunk): y = xf * rstd (* wf), rounded once to T.
// For float, xf may be y's own row; for 16-bit, sq (count floats) holds the float
// result before the Cast.
template <typename T>
__aicore__ inline void RmsNormOutput(const AscendC::LocalTensor<T>& y, const AscendC::LocalTensor<float>& xf,
                                     const AscendC::LocalTensor<float>& wf, float rstd,
                                     const AscendC::LocalTensor<float>& sq, bool hasWeight, uint32_t count) {
  const int32_t n = static_cast<int32_t>(count);
  if constexpr (AscendC::IsSameType<T, float>::value) {
    AscendC::LocalTensor<float> yf = y.template ReinterpretCast<float>();
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Muls(yf, xf, rstd, n);
    AscendC::PipeBarrier<PIPE_V>();
    if (hasWeight) AscendC::Mul(yf, yf, wf, n);
  } else {
    AscendC::Muls(sq, xf, rstd, n);
    AscendC::PipeBarrier<PIPE_V>();
    if (hasWeight) AscendC::Mul(sq, sq, wf, n);
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Cast(y, sq, NarrowRound<T>(), count);
  }
}

// ---- backward --------------------------------------------------------------------

// gradInput's last steps: dx = (sum * rstd) (* scale, for a rescaled row), rounded
// once to T; `sum` (n floats) is the bracket of the op's formula, overwritten.
// Scaling last keeps subnormal results to the one step that may produce them.
template <typename T>
__aicore__ inline void GradInputOutput(const AscendC::LocalTensor<T>& dx, const AscendC::LocalTensor<float>& sum,
                                       float rstd, float scale, int32_t n) {
  if constexpr (AscendC::IsSameType<T, float>::value) {
    if (scale != 1.0f) {
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Muls(sum, sum, rstd, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Muls(dx, sum, scale, n);  // last: the only step that may land on subnormals
    } else {
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Muls(dx, sum, rstd, n);
    }
  } else {
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Muls(sum, sum, rstd, n);
    AscendC::PipeBarrier<PIPE_V>();
    if (scale != 1.0f) AscendC::Muls(sum, sum, scale, n);
    CastFromFloat(dx, sum, static_cast<uint32_t>(n));
  }
}

// A tile of per-row statistics (scalar writes into `tile`) to its workspace slot
// at `at`: S -> MTE3 before the copy, and MTE3 -> S after it, before the scalar
// unit writes the tile again.
__aicore__ inline void StoreStatTile(const AscendC::GlobalTensor<float>& gm, const AscendC::LocalTensor<float>& tile,
                                     uint64_t at, uint32_t pitch) {
  event_t eventSMte3 = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::S_MTE3));
  AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(eventSMte3);
  AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(eventSMte3);
  AscendC::DataCopy(gm[at], tile, pitch);
  event_t eventMte3S = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::MTE3_S));
  AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(eventMte3S);
  AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(eventMte3S);
}

// The columns [begin, end) of this core in the backward's column pass (weight and
// bias gradients), split in whole blocks. The last core's columns run to the end:
// with only whole blocks moving, the tiling joins a last partial block to the one
// before it (ColumnUnits).
template <typename T>
__aicore__ inline void ColumnsOfCore(uint64_t cols, uint64_t blocksPerCore, uint64_t bigCoreNum,
                                     uint64_t usedCoreNum, uint64_t& begin, uint64_t& end) {
  const uint64_t core = AscendC::GetBlockIdx();
  const uint64_t firstBlock = core * blocksPerCore + (core < bigCoreNum ? core : bigCoreNum);
  const uint64_t blocks = blocksPerCore + (core < bigCoreNum ? 1 : 0);
  begin = firstBlock * BlockElems<T>();
  end = begin + blocks * BlockElems<T>();
  if (end > cols || core + 1 == usedCoreNum) end = cols;
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_ROW_NORM_COMMON_H_
