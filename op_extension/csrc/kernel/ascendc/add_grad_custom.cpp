// AddGradCustom: out = alpha * (gradOutput summed down to out's shape), the sums
// accumulated in float in a fixed order (deterministic, independent of the core
// count). Modes and split: host/tiling/add_grad_custom_tiling.h.
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "add_grad_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

constexpr uint32_t kMaxGroups = 8;

template <typename T>
class KernelAddGrad {
 public:
  __aicore__ inline KernelAddGrad() {}

  __aicore__ inline void Init(GM_ADDR grad, GM_ADDR out, const optiling::AddGradCustomTilingData& tiling,
                              TPipe* pipe) {
    t_ = tiling;
    groupSize_[0] = t_.groupSize0;
    groupSize_[1] = t_.groupSize1;
    groupSize_[2] = t_.groupSize2;
    groupSize_[3] = t_.groupSize3;
    groupSize_[4] = t_.groupSize4;
    groupSize_[5] = t_.groupSize5;
    groupSize_[6] = t_.groupSize6;
    groupSize_[7] = t_.groupSize7;
    uint64_t stride = 1;
    uint64_t gradElems = 1;
    for (int32_t g = static_cast<int32_t>(t_.groupNum) - 1; g >= 0; --g) {
      groupStride_[g] = stride;
      stride *= groupSize_[g];
      gradElems *= groupSize_[g];
    }
    const uint64_t outElems = t_.mode == 0 ? t_.outRows * t_.outCols : t_.outRows;
    // Without DataCopyPad, runs and rows are read as whole blocks from their
    // start: up to one block minus one element past gradOutput's end, inside the
    // allocator's padding (kernel_common.h, ReadableLength).
    const bool overlap = t_.tailMode == op_ext_kernel::kTailOverlap && gradElems > 0;
    gradGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(grad),
                            gradElems + (overlap ? op_ext_kernel::BlockElems<T>() - 1 : 0));
    outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), outElems);
    const uint64_t core = GetBlockIdx();
    firstUnit_ = core * t_.unitsPerCore + (core < t_.bigCoreNum ? core : t_.bigCoreNum);
    unitCount_ = t_.unitsPerCore + (core < t_.bigCoreNum ? 1 : 0);
    const uint32_t chunkBytes = t_.chunkLength * sizeof(T);
    pipe->InitBuffer(inQueue_, kBufferNum, chunkBytes);
    if (t_.mode == 0) {
      pipe->InitBuffer(outQueue_, kBufferNum, chunkBytes);
      pipe->InitBuffer(acc_, t_.chunkLength * sizeof(float));
      if constexpr (!kIsFloat) pipe->InitBuffer(inputF_, t_.chunkLength * sizeof(float));
    } else {
      if constexpr (!kIsFloat) pipe->InitBuffer(inputF_, t_.chunkLength * sizeof(float));
      pipe->InitBuffer(work_, t_.reduceWorkLength * sizeof(float));
      pipe->InitBuffer(stat_, 2 * op_ext_kernel::kBlockBytes);
      pipe->InitBuffer(outF_, t_.outTile * sizeof(float));
      pipe->InitBuffer(outQueue_, kBufferNum, t_.outTile * sizeof(T));
    }
  }

  __aicore__ inline void Process() {
    if (t_.mode == 0) {
      ProcessKeptInnermost();
    } else {
      ProcessSummedInnermost();
    }
  }

 private:
  static constexpr bool kIsFloat = IsSameType<T, float>::value;

  __aicore__ inline bool Summed(uint32_t g) const { return (t_.reducedMask >> g) & 1u; }

  // Input offset of out index `o` over the kept groups (all but the innermost in mode 0).
  __aicore__ inline uint64_t KeptOffset(uint64_t o) const {
    uint64_t off = 0;
    const int32_t last = static_cast<int32_t>(t_.groupNum) - (t_.mode == 0 ? 2 : 1);
    for (int32_t g = last; g >= 0; --g) {
      if (Summed(g)) continue;
      off += (o % groupSize_[g]) * groupStride_[g];
      o /= groupSize_[g];
    }
    return off;
  }

  // Input offset of the s-th combination of the summed groups (all but the innermost in mode 1).
  __aicore__ inline uint64_t SummedOffset(uint64_t s) const {
    uint64_t off = 0;
    const int32_t last = static_cast<int32_t>(t_.groupNum) - (t_.mode == 1 ? 2 : 1);
    for (int32_t g = last; g >= 0; --g) {
      if (!Summed(g)) continue;
      off += (s % groupSize_[g]) * groupStride_[g];
      s /= groupSize_[g];
    }
    return off;
  }

  // `count` input elements at `offset` in float, through the input queue; the
  // caller frees `raw` with inQueue_.FreeTensor after use.
  __aicore__ inline LocalTensor<float> LoadInput(uint64_t offset, uint32_t count, LocalTensor<T>& raw) {
    raw = inQueue_.template AllocTensor<T>();
    op_ext_kernel::CopyGmToUb(raw, gradGm_[offset], count);
    inQueue_.EnQue(raw);
    raw = inQueue_.template DeQue<T>();
    if constexpr (kIsFloat) {
      return raw.template ReinterpretCast<float>();
    } else {
      LocalTensor<float> xf = inputF_.template Get<float>();
      Cast(xf, raw, RoundMode::CAST_NONE, count);
      return xf;
    }
  }

  // ---- mode 0: out [outRows, outCols], each value a sum of sumCount input rows ----

  __aicore__ inline void ProcessKeptInnermost() {
    const uint32_t blockElems = op_ext_kernel::BlockElems<T>();
    const uint64_t end = firstUnit_ + unitCount_;
    const bool overlapTail = t_.tailMode == op_ext_kernel::kTailOverlap && t_.outCols % blockElems != 0;
    for (uint64_t u = firstUnit_; u < end;) {
      const uint64_t row = u / t_.colBlocks;
      const uint64_t block = u % t_.colBlocks;
      const uint64_t blocks = t_.colBlocks - block < end - u ? t_.colBlocks - block : end - u;
      const uint64_t colStart = block * blockElems;
      uint64_t colEnd = (block + blocks) * blockElems < t_.outCols ? (block + blocks) * blockElems : t_.outCols;
      const bool tail = overlapTail && colEnd == t_.outCols;
      if (tail) colEnd = colEnd / blockElems * blockElems < colStart ? colStart : colEnd / blockElems * blockElems;
      for (uint64_t c = colStart; c < colEnd; c += t_.chunkLength) {
        const uint32_t width = static_cast<uint32_t>(colEnd - c < t_.chunkLength ? colEnd - c : t_.chunkLength);
        SumColumns(row, c, width);
      }
      // The row's last whole block, overlapping columns already written with the same values;
      // a row below one block is computed as one block and written element-wise.
      if (tail && t_.outCols < blockElems) {
        PipeBarrier<PIPE_V>();
        SumColumns(row, 0, blockElems, t_.outCols);
      } else if (tail) {
        // Two MTE3 copies to overlapping GM must be serialised (PipeBarrier page).
        PipeBarrier<PIPE_MTE3>();
        PipeBarrier<PIPE_V>();
        SumColumns(row, t_.outCols - blockElems, blockElems);
      }
      u += blocks;
    }
  }

  // Writes `valid` (default: width) of the `width` columns computed; fewer only
  // for a row below one block (element-wise).
  __aicore__ inline void SumColumns(uint64_t row, uint64_t col, uint32_t width, uint32_t valid = 0) {
    const int32_t n = static_cast<int32_t>(width);
    LocalTensor<float> acc = acc_.template Get<float>();
    Duplicate(acc, 0.0f, n);
    const uint64_t base = KeptOffset(row) + col;
    for (uint64_t s = 0; s < t_.sumCount; ++s) {
      LocalTensor<T> raw;
      LocalTensor<float> x = LoadInput(base + SummedOffset(s), width, raw);
      PipeBarrier<PIPE_V>();
      Add(acc, acc, x, n);
      inQueue_.FreeTensor(raw);
    }
    LocalTensor<T> out = outQueue_.template AllocTensor<T>();
    if constexpr (kIsFloat) {
      PipeBarrier<PIPE_V>();
      Muls(out, acc, t_.alpha, n);
    } else {
      PipeBarrier<PIPE_V>();
      Muls(acc, acc, t_.alpha, n);
      PipeBarrier<PIPE_V>();
      Cast(out, acc, op_ext_kernel::NarrowRound<T>(), width);
    }
    outQueue_.EnQue(out);
    out = outQueue_.template DeQue<T>();
    if (valid != 0 && valid < width) {
      op_ext_kernel::WriteShortTensor(outGm_[row * t_.outCols + col], out, valid);
    } else {
      op_ext_kernel::CopyUbToGm(outGm_[row * t_.outCols + col], out, width);
    }
    outQueue_.FreeTensor(out);
  }

  // ---- mode 1: out [outRows], each value a sum of sumCount runs of runLength ----

  __aicore__ inline void ProcessSummedInnermost() {
    const uint64_t blockElems = op_ext_kernel::BlockElems<T>();
    const uint64_t begin = firstUnit_ * blockElems;
    uint64_t end = (firstUnit_ + unitCount_) * blockElems;
    if (end > t_.outRows) end = t_.outRows;
    const bool tail = t_.tailMode == op_ext_kernel::kTailOverlap && end == t_.outRows && end % blockElems != 0;
    const uint64_t alignedEnd = tail ? (end / blockElems * blockElems < begin ? begin : end / blockElems * blockElems)
                                     : end;
    for (uint64_t o = begin; o < alignedEnd; o += t_.outTile) {
      const uint32_t m = static_cast<uint32_t>(alignedEnd - o < t_.outTile ? alignedEnd - o : t_.outTile);
      SumRuns(o, m);
    }
    // The output's last whole block, overlapping values already written with the same values;
    // an output below one block is written element-wise (SumRuns).
    if (tail && t_.outRows < blockElems) {
      SumRuns(0, static_cast<uint32_t>(t_.outRows));
    } else if (tail) {
      PipeBarrier<PIPE_MTE3>();  // overlapping GM writes must be serialised (PipeBarrier page)
      PipeBarrier<PIPE_V>();
      SumRuns(t_.outRows - blockElems, static_cast<uint32_t>(blockElems));
    }
  }

  __aicore__ inline void SumRuns(uint64_t first, uint32_t m) {
    LocalTensor<float> outF = outF_.template Get<float>();
    LocalTensor<float> stat = stat_.template Get<float>();
    LocalTensor<float> acc = stat[8];
    LocalTensor<float> work = work_.template Get<float>();
    for (uint32_t j = 0; j < m; ++j) {
      Duplicate(acc, 0.0f, 8);
      const uint64_t base = KeptOffset(first + j);
      for (uint64_t s = 0; s < t_.sumCount; ++s) {
        const uint64_t runStart = base + SummedOffset(s);
        for (uint32_t c = 0; c < t_.runLength; c += t_.chunkLength) {
          const uint32_t len = t_.runLength - c < t_.chunkLength ? t_.runLength - c : t_.chunkLength;
          SumRunChunk(runStart + c, len, stat, work);
          PipeBarrier<PIPE_V>();
          Add(acc, acc, stat, 1);
        }
      }
      outF.SetValue(j, op_ext_kernel::ReadScalarAfterVector(acc));
    }
    event_t eventSV = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(eventSV);
    WaitFlag<HardEvent::S_V>(eventSV);
    const int32_t n = static_cast<int32_t>(m);
    LocalTensor<T> out = outQueue_.template AllocTensor<T>();
    if constexpr (kIsFloat) {
      Muls(out, outF, t_.alpha, n);
    } else {
      Muls(outF, outF, t_.alpha, n);
      PipeBarrier<PIPE_V>();
      Cast(out, outF, op_ext_kernel::NarrowRound<T>(), m);
    }
    outQueue_.EnQue(out);
    out = outQueue_.template DeQue<T>();
    if ((m * sizeof(T)) % op_ext_kernel::kBlockBytes != 0 && t_.tailMode == op_ext_kernel::kTailOverlap) {
      op_ext_kernel::WriteShortTensor(outGm_[first], out, m);  // the whole output, below one block
    } else {
      op_ext_kernel::CopyUbToGm(outGm_[first], out, m);
    }
    outQueue_.FreeTensor(out);
  }

  // stat[0] = sum of the `len` input elements at `offset`. Without DataCopyPad a
  // length that is not whole blocks is read as the whole blocks starting at
  // `offset` (ReduceSum then counts only `len`); past the end of gradOutput they
  // lie in the allocator's padding.
  __aicore__ inline void SumRunChunk(uint64_t offset, uint32_t len, const LocalTensor<float>& stat,
                                     const LocalTensor<float>& work) {
    const uint32_t blockElems = op_ext_kernel::BlockElems<T>();
    LocalTensor<T> raw;
    if (t_.tailMode != op_ext_kernel::kTailOverlap || len % blockElems == 0) {
      LocalTensor<float> x = LoadInput(offset, len, raw);
      PipeBarrier<PIPE_V>();
      ReduceSum(stat, x, work, static_cast<int32_t>(len));
    } else {
      const uint32_t whole = (len + blockElems - 1) / blockElems * blockElems;
      LocalTensor<float> x = LoadInput(offset, whole, raw);
      PipeBarrier<PIPE_V>();
      ReduceSum(stat, x, work, static_cast<int32_t>(len));
    }
    inQueue_.FreeTensor(raw);
  }

  optiling::AddGradCustomTilingData t_;
  uint64_t groupSize_[kMaxGroups] = {};
  uint64_t groupStride_[kMaxGroups] = {};
  uint64_t firstUnit_ = 0;
  uint64_t unitCount_ = 0;
  TQue<TPosition::VECIN, kBufferNum> inQueue_;
  TQue<TPosition::VECOUT, kBufferNum> outQueue_;
  TBuf<TPosition::VECCALC> acc_;
  TBuf<TPosition::VECCALC> inputF_;
  TBuf<TPosition::VECCALC> work_;
  TBuf<TPosition::VECCALC> stat_;
  TBuf<TPosition::VECCALC> outF_;
  GlobalTensor<T> gradGm_;
  GlobalTensor<T> outGm_;
};

template <typename T>
__aicore__ inline void RunAddGrad(GM_ADDR grad, GM_ADDR out, const optiling::AddGradCustomTilingData& tiling) {
  TPipe pipe;
  KernelAddGrad<T> op;
  op.Init(grad, out, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void add_grad_custom(GM_ADDR gradOutput, GM_ADDR out, GM_ADDR workspace,
                                                      GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunAddGrad<float>(gradOutput, out, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunAddGrad<half>(gradOutput, out, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunAddGrad<bfloat16_t>(gradOutput, out, tilingData);
#endif
  }
}
