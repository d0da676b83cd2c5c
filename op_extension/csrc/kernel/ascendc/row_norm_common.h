// Pieces the row-norm kernels share (rms_norm, fused_add_rms_norm, layer_norm and
// their backward), so each kernel's .cpp keeps only its own math:
//   * the split of rows over cores, tiles and chunks (host/tiling/row_tiling.h,
//     row_norm_tiling.h) and the float copies of 16-bit rows;
//   * the per-row statistics on the vector unit (sums, rstd by Sqrt then Div, the
//     rescue of rows whose sum of squares overflows or underflows) and RMSNorm's
//     output;
//   * NormRowsIo: what every forward moves (x in, y out, the weight), and the walk
//     over its rows (NormRowsPasses);
//   * the backward's last gradInput steps, its workspace statistics, NormGradIo
//     (x, dy in, gradInput out, the weight), the walk of its two passes
//     (NormGradPasses) and its column chunks (ColumnChunks).
// Queues and buffers are initialised by each kernel in the order of its UB plan
// (host/tiling/<op>_tiling.h); the helpers take the tensors they work on.
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

// A whole row whose sum of squares overflowed or underflowed (NeedsRescue(rstd)):
// xs = xf * s and rstd = rsqrt(mean(xs^2) + eps s^2), s = RescueScale(max|xf|,
// rstd, eps) (kernel_common.h). False, with nothing
// changed, when some |xf| is inf or NaN: the plain result stands. xs may be xf;
// sq: n floats of scratch.
__aicore__ inline bool RescaleRmsRow(const AscendC::LocalTensor<float>& stat, const AscendC::LocalTensor<float>& work,
                                     const AscendC::LocalTensor<float>& xs, const AscendC::LocalTensor<float>& xf,
                                     const AscendC::LocalTensor<float>& sq, int32_t n, float invCols, float eps,
                                     float& rstd) {
  const float maxAbs = RowMaxAbs(stat, xf, sq, work, n);
  if (!(maxAbs <= kFloatMax)) return false;
  const float s = RescueScale(maxAbs);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Muls(xs, xf, s, n);
  rstd = RstdFromSumOfSquares(SumOfSquaresInto(stat, xs, sq, work, n), invCols, eps * s * s, work);
  return true;
}

// RMSNorm's output of one row (or chunk): y = xf * rstd (* wf), rounded once to T.
// For float, xf may be y's own row; for 16-bit, sq (count floats) holds the float
// result before the Cast. The 16-bit path starts without a barrier, as the kernels
// did: every caller's last vector write of xf (and of wf) is already behind one.
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

// What every forward row norm moves: x in, y out, the weight; the two queues, the
// copier and this core's rows. Each kernel initialises the queues itself (in its UB
// plan's order) and adds what only it moves (residual, bias).
template <typename T>
struct NormRowsIo {
  // GM tensors, the rows of this core, and the copier (its stage first in the UB).
  template <typename Tiling>
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR w, GM_ADDR y, const Tiling& t, AscendC::TPipe* pipe) {
    rows = RowsOfCore(AscendC::GetBlockIdx(), t.rowsPerCore, t.bigCoreNum);
    const uint64_t total = t.rows * t.cols;
    xGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), ReadableLength<T>(total, t.tailMode));
    yGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), total);
    if (t.hasWeight) wGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(w), ReadableLength<T>(t.cols, t.tailMode));
    copier.Init(pipe, t.tailMode);
  }

  // A parameter row (weight or bias), once per core, through x's queue into a float row.
  __aicore__ inline void LoadParamRow(const AscendC::GlobalTensor<T>& gm,
                                      AscendC::TBuf<AscendC::TPosition::VECCALC>& dst, uint32_t cols,
                                      uint32_t rowStride) {
    LoadParamRowAsFloat(copier, inX, gm, dst.template Get<float>(), cols, rowStride);
  }

  // k whole rows of x from `row` on, enqueued.
  __aicore__ inline void RowsIn(uint64_t row, uint32_t k, uint32_t cols) {
    AscendC::LocalTensor<T> x = inX.template AllocTensor<T>();
    copier.RowsIn(x, xGm[row * cols], k, cols);
    inX.EnQue(x);
  }

  // The k rows of y the output queue holds, to GM from `row` on.
  __aicore__ inline void RowsOut(uint64_t row, uint32_t k, uint32_t cols) {
    AscendC::LocalTensor<T> y = outY.template DeQue<T>();
    copier.RowsOut(yGm[row * cols], y, k, cols);
    outY.FreeTensor(y);
  }

  // A chunk of x, copied in and dequeued (the caller frees it).
  __aicore__ inline AscendC::LocalTensor<T> ChunkIn(uint64_t offset, uint32_t len) {
    AscendC::LocalTensor<T> x = inX.template AllocTensor<T>();
    copier.In(x, xGm[offset], len);
    inX.EnQue(x);
    return inX.template DeQue<T>();
  }

  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inX;  // x, and the parameter rows
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> outY;
  RowCopier<T> copier;
  AscendC::GlobalTensor<T> xGm;
  AscendC::GlobalTensor<T> wGm;
  AscendC::GlobalTensor<T> yGm;
  CoreRows rows;
};

// The walk of a forward row norm over this core's rows (row_tiling.h): split rows
// one at a time, or whole rows in tiles of rowsPerTile after the parameter rows are
// loaded once. The kernel, which makes this a friend, provides
// ProcessSplitRow(row), LoadParams(), CopyInRows(row, k), ComputeRows(k) and
// CopyOutRows(row, k).
struct NormRowsPasses {
  template <typename Kernel, typename T, typename Tiling>
  __aicore__ static inline void Process(Kernel& kernel, const NormRowsIo<T>& io, const Tiling& t) {
    if (t.splitRow) {
      for (uint64_t r = 0; r < io.rows.count; ++r) kernel.ProcessSplitRow(io.rows.first + r);
      return;
    }
    kernel.LoadParams();
    for (uint64_t r = 0; r < io.rows.count; r += t.rowsPerTile) {
      const uint32_t k = TileRows(io.rows.count, r, t.rowsPerTile);
      kernel.CopyInRows(io.rows.first + r, k);
      kernel.ComputeRows(k);
      kernel.CopyOutRows(io.rows.first + r, k);
    }
  }
};

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

// What both passes of a norm's backward (rms_norm_grad, layer_norm_grad) move: x and
// dy in, gradInput out, the weight; their queues and float copies; the workspace of
// per-row statistics the row pass writes and the column pass reads; the rows of this
// core. Each kernel adds its own buffers (initialised after InitQueues, in its UB
// plan's order) and what only it moves.
template <typename T>
struct NormGradIo {
  // Init: GM tensors and the copier (its stage first in the UB); statFloats: the
  // workspace's floats (used only with a weight).
  template <typename Tiling>
  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR dx, GM_ADDR dw, GM_ADDR workspace,
                              uint64_t statFloats, const Tiling& t, AscendC::TPipe* pipe) {
    const uint64_t total = t.rows * t.cols;
    const uint64_t readable = ReadableLength<T>(total, t.tailMode);
    dyGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dy), readable);
    xGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), readable);
    copier.Init(pipe, t.tailMode);
    if (t.hasWeight) {
      wGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(w), ReadableLength<T>(t.cols, t.tailMode));
      dwGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dw), t.cols);
      if (statFloats > 0) statGm.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(workspace), statFloats);
    }
    if (t.pass == 0) {
      dxGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dx), total);
      core = AscendC::GetBlockIdx();
      rows = RowsOfCore(core, t.rowsPerCore, t.bigCoreNum);
    }
  }

  // The x, dy and output queues, each of kBufferNum buffers of `bytes`.
  __aicore__ inline void InitQueues(AscendC::TPipe* pipe, uint32_t bytes) {
    pipe->InitBuffer(inX, kBufferNum, bytes);
    pipe->InitBuffer(inDy, kBufferNum, bytes);
    pipe->InitBuffer(out, kBufferNum, bytes);
  }

  // k whole rows of x and dy from `row` on, enqueued.
  __aicore__ inline void RowsIn(uint64_t row, uint32_t k, uint32_t cols) {
    AscendC::LocalTensor<T> x = inX.template AllocTensor<T>();
    AscendC::LocalTensor<T> dy = inDy.template AllocTensor<T>();
    copier.RowsIn(x, xGm[row * cols], k, cols);
    copier.RowsIn(dy, dyGm[row * cols], k, cols);
    inX.EnQue(x);
    inDy.EnQue(dy);
  }

  // The k rows of gradInput the output queue holds, to GM from `row` on.
  __aicore__ inline void RowsOut(uint64_t row, uint32_t k, uint32_t cols) {
    AscendC::LocalTensor<T> dx = out.template DeQue<T>();
    copier.RowsOut(dxGm[row * cols], dx, k, cols);
    out.FreeTensor(dx);
  }

  // Row x, dy of a whole-rows tile: x in float (xf), and g = dy (* w) in float (the
  // weight row from LoadWeightRow).
  __aicore__ inline void RowAsFloat(const AscendC::LocalTensor<T>& x, const AscendC::LocalTensor<T>& dy,
                                    uint32_t cols, bool hasWeight, AscendC::LocalTensor<float>& xf,
                                    AscendC::LocalTensor<float>& g) {
    xf = AsFloat(x, xF, cols);
    AscendC::PipeBarrier<PIPE_V>();
    g = AsFloat(dy, gF, cols);
    AscendC::PipeBarrier<PIPE_V>();
    if (hasWeight) AscendC::Mul(g, g, wF.template Get<float>(), static_cast<int32_t>(cols));
  }

  // The weight row in float (wF), once per core, for whole rows.
  __aicore__ inline void LoadWeightRow(uint32_t cols, uint32_t rowStride) {
    LoadParamRowAsFloat(copier, inX, wGm, wF.template Get<float>(), cols, rowStride);
  }

  // Chunk [c, c + len) of row `row`: x in float (xf), and with withGrad g = dy (* w)
  // in float; the weight chunk goes through x's queue. ReleaseChunk frees it.
  __aicore__ inline void LoadChunk(uint64_t row, uint32_t cols, uint32_t c, uint32_t len, bool withGrad,
                                   bool hasWeight, AscendC::LocalTensor<T>& w, AscendC::LocalTensor<T>& x,
                                   AscendC::LocalTensor<T>& dy, AscendC::LocalTensor<float>& xf,
                                   AscendC::LocalTensor<float>& g) {
    const uint64_t base = row * cols + c;
    const bool withWeight = withGrad && hasWeight;
    if (withWeight) {
      w = inX.template AllocTensor<T>();
      copier.In(w, wGm[c], len);
      inX.EnQue(w);
    }
    x = inX.template AllocTensor<T>();
    copier.In(x, xGm[base], len);
    inX.EnQue(x);
    if (withGrad) {
      dy = inDy.template AllocTensor<T>();
      copier.In(dy, dyGm[base], len);
      inDy.EnQue(dy);
    }
    if (withWeight) w = inX.template DeQue<T>();
    x = inX.template DeQue<T>();
    xf = AsFloat(x, xF, len);
    if (withGrad) {
      dy = inDy.template DeQue<T>();
      AscendC::PipeBarrier<PIPE_V>();
      g = AsFloat(dy, gF, len);
      AscendC::PipeBarrier<PIPE_V>();
      if (withWeight) AscendC::Mul(g, g, AsFloat(w, wF, len), static_cast<int32_t>(len));
    }
  }

  __aicore__ inline void ReleaseChunk(bool withGrad, bool hasWeight, AscendC::LocalTensor<T>& w,
                                      AscendC::LocalTensor<T>& x, AscendC::LocalTensor<T>& dy) {
    if (withGrad && hasWeight) inX.FreeTensor(w);
    inX.FreeTensor(x);
    if (withGrad) inDy.FreeTensor(dy);
  }

  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inX;  // x, and the weight's chunks
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inDy;
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> out;  // gradInput; column sums
  AscendC::TBuf<AscendC::TPosition::VECCALC> xF;  // float copies of 16-bit x, dy, w
  AscendC::TBuf<AscendC::TPosition::VECCALC> gF;
  AscendC::TBuf<AscendC::TPosition::VECCALC> wF;  // also the whole weight row (any T)
  RowCopier<T> copier;
  AscendC::GlobalTensor<T> xGm;
  AscendC::GlobalTensor<T> dyGm;
  AscendC::GlobalTensor<T> wGm;
  AscendC::GlobalTensor<T> dxGm;
  AscendC::GlobalTensor<T> dwGm;
  AscendC::GlobalTensor<float> statGm;  // the workspace
  uint64_t core = 0;
  CoreRows rows;
};

// The two passes of a norm backward over this core's share (row_norm_tiling.h,
// <op>_grad_custom_tiling.h): pass 0 gradInput by rows, one at a time in chunks or
// in whole-row tiles, each tile's statistics to the workspace; pass 1 the weight
// (and bias) gradients by column chunks. The kernel, which makes this a friend,
// provides InitRows / InitChunks / InitColumns(pipe) (its buffers after the
// queues), ProcessSplitRow(local row), CopyInRows(row, k), ComputeRows(k),
// CopyOutRows(row, k, tile) and ProcessColumns().
struct NormGradPasses {
  template <typename Kernel, typename Tiling>
  __aicore__ static inline void InitBuffers(Kernel& kernel, const Tiling& t, AscendC::TPipe* pipe) {
    if (t.pass != 0) {
      kernel.InitColumns(pipe);
    } else if (t.splitRow) {
      kernel.InitChunks(pipe);
    } else {
      kernel.InitRows(pipe);
    }
  }

  template <typename Kernel, typename T, typename Tiling>
  __aicore__ static inline void Process(Kernel& kernel, NormGradIo<T>& io, const Tiling& t) {
    if (t.pass == 1) {
      kernel.ProcessColumns();
    } else if (t.splitRow) {
      for (uint64_t r = 0; r < io.rows.count; ++r) kernel.ProcessSplitRow(r);
    } else {
      if (t.hasWeight) io.LoadWeightRow(t.cols, t.rowStride);
      uint32_t tile = 0;
      for (uint64_t r = 0; r < io.rows.count; r += t.rowsPerTile, ++tile) {
        const uint32_t k = TileRows(io.rows.count, r, t.rowsPerTile);
        kernel.CopyInRows(io.rows.first + r, k);
        kernel.ComputeRows(k);
        kernel.CopyOutRows(io.rows.first + r, k, tile);
      }
    }
  }
};

// The column chunks of this core in the backward's column pass, in order, each at
// most chunkCols wide; the last shifted back to whole blocks where only whole
// blocks move (RowCopier::ShiftLastChunk).
template <typename T>
class ColumnChunks {
 public:
  __aicore__ inline void Init(uint64_t cols, uint64_t blocksPerCore, uint64_t bigCoreNum, uint64_t usedCoreNum,
                              uint32_t chunkCols) {
    ColumnsOfCore<T>(cols, blocksPerCore, bigCoreNum, usedCoreNum, begin_, end_);
    next_ = begin_;
    chunkCols_ = chunkCols;
  }

  __aicore__ inline bool Next(const RowCopier<T>& copier, uint64_t& c, uint32_t& width) {
    if (next_ >= end_) return false;
    c = next_;
    width = static_cast<uint32_t>(end_ - next_ < chunkCols_ ? end_ - next_ : chunkCols_);
    next_ += chunkCols_;
    copier.ShiftLastChunk(begin_, c, width);
    return true;
  }

 private:
  uint64_t begin_ = 0;
  uint64_t end_ = 0;
  uint64_t next_ = 0;
  uint32_t chunkCols_ = 0;
};

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_ROW_NORM_COMMON_H_
