// The gated-unit kernels SwiGluCustom and GeGluCustom: out = act(gate) * up,
// elementwise over same-shape contiguous tensors, in float for every element
// type (16-bit inputs cast up, the product rounded once on the way down).
//   silu(g)      = g / (1 + exp(-g))
//   gelu(g)      = gelu_common.h (erf form or tanh form)
// One class serves both entries; the activation comes from the TilingData
// (host/tiling/glu_tiling.h, whose UB plan mirrors Init).
#ifndef OP_EXT_KERNEL_ASCENDC_GLU_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_GLU_COMMON_H_

#include "gelu_common.h"
#include "kernel_common.h"
#include "kernel_operator.h"

namespace op_ext_kernel {

constexpr uint32_t kGluSilu = 0;      // GluActivation of host/tiling/glu_tiling.h
constexpr uint32_t kGluGeluErf = 1;
constexpr uint32_t kGluGeluTanh = 2;

// TilingData: an elementwise TilingData with an `activation` field.
template <typename T, typename TilingData>
class KernelGlu {
 public:
  __aicore__ inline KernelGlu() {}

  __aicore__ inline void Init(GM_ADDR gate, GM_ADDR up, GM_ADDR out, const TilingData& tiling,
                              AscendC::TPipe* pipe) {
    activation_ = tiling.activation;
    tileLength_ = tiling.tileLength;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    gateGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gate), ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    upGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(up), ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), tiling.totalLength);
    const uint32_t tileBytes = tiling.tileLength * sizeof(T);
    pipe->InitBuffer(inQueueGate_, kBufferNum, tileBytes);
    pipe->InitBuffer(inQueueUp_, kBufferNum, tileBytes);
    pipe->InitBuffer(outQueue_, kBufferNum, tileBytes);
    // GluScratchRows() of glu_tiling.h.
    const uint32_t rows = (activation_ == kGluSilu ? 1 : 4) + (kIsFloat ? 0 : 2);
    pipe->InitBuffer(scratch_, rows * tiling.tileLength * sizeof(float));
  }

  __aicore__ inline void Process() {
    uint64_t offset;
    uint32_t count;
    while (tiles_.Next(offset, count)) {
      CopyIn(offset, count);
      Compute(count);
      CopyOut(offset, count);
    }
  }

 private:
  static constexpr bool kIsFloat = AscendC::IsSameType<T, float>::value;

  __aicore__ inline void CopyIn(uint64_t offset, uint32_t count) {
    AscendC::LocalTensor<T> g = inQueueGate_.template AllocTensor<T>();
    AscendC::LocalTensor<T> u = inQueueUp_.template AllocTensor<T>();
    CopyGmToUb(g, gateGm_[offset], count);
    CopyGmToUb(u, upGm_[offset], count);
    inQueueGate_.EnQue(g);
    inQueueUp_.EnQue(u);
  }

  __aicore__ inline void Compute(uint32_t count) {
    using namespace AscendC;
    LocalTensor<T> g = inQueueGate_.template DeQue<T>();
    LocalTensor<T> u = inQueueUp_.template DeQue<T>();
    LocalTensor<T> y = outQueue_.template AllocTensor<T>();
    LocalTensor<float> s = scratch_.template Get<float>();
    const int32_t n = static_cast<int32_t>(count);
    const uint32_t mathRows = activation_ == kGluSilu ? 1 : 4;
    if constexpr (kIsFloat) {
      Activate(y, g, s, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(y, y, u, n);
    } else {
      LocalTensor<float> gf = s[mathRows * tileLength_];
      LocalTensor<float> uf = s[(mathRows + 1) * tileLength_];
      Cast(gf, g, RoundMode::CAST_NONE, count);
      Cast(uf, u, RoundMode::CAST_NONE, count);
      AscendC::PipeBarrier<PIPE_V>();
      Activate(gf, gf, s, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(gf, gf, uf, n);
      AscendC::PipeBarrier<PIPE_V>();
      Cast(y, gf, op_ext_kernel::NarrowRound<T>(), count);
    }
    outQueue_.EnQue(y);
    inQueueGate_.FreeTensor(g);
    inQueueUp_.FreeTensor(u);
  }

  // y = act(g); y may be g (every formula reads g for the last time in its last
  // instruction). s: the math scratch rows.
  __aicore__ inline void Activate(const AscendC::LocalTensor<float>& y, const AscendC::LocalTensor<float>& g,
                                  const AscendC::LocalTensor<float>& s, int32_t n) {
    using namespace AscendC;
    const LocalTensor<float> s0 = s;
    if (activation_ == kGluSilu) {
      AscendC::PipeBarrier<PIPE_V>();
      Muls(s0, g, -1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Exp(s0, s0, n);
      AscendC::PipeBarrier<PIPE_V>();
      Adds(s0, s0, 1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Div(y, g, s0, n);  // exp overflow for very negative g: g / inf = -0, as silu
    } else if (activation_ == kGluGeluTanh) {
      AscendC::PipeBarrier<PIPE_V>();
      GeluTanh(y, g, s0, n);
    } else {
      AscendC::PipeBarrier<PIPE_V>();
      GeluErf(y, g, s0, s[tileLength_], s[2 * tileLength_], s[3 * tileLength_], n);
    }
  }

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {
    AscendC::LocalTensor<T> y = outQueue_.template DeQue<T>();
    tiles_.CopyOut(outGm_, y, offset, count);
    outQueue_.FreeTensor(y);
  }

  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inQueueGate_;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inQueueUp_;
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> outQueue_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> scratch_;
  AscendC::GlobalTensor<T> gateGm_;
  AscendC::GlobalTensor<T> upGm_;
  AscendC::GlobalTensor<T> outGm_;
  ElementwiseTiles<T> tiles_;
  uint32_t tileLength_ = 0;
  uint32_t activation_ = kGluSilu;
};

template <typename T, typename TilingData>
__aicore__ inline void RunGlu(GM_ADDR gate, GM_ADDR up, GM_ADDR out, const TilingData& tiling) {
  AscendC::TPipe pipe;
  KernelGlu<T, TilingData> op;
  op.Init(gate, up, out, tiling, &pipe);
  op.Process();
}

// The entry's dtype dispatch.
template <typename TilingData>
__aicore__ inline void DispatchGlu(GM_ADDR gate, GM_ADDR up, GM_ADDR out, const TilingData& tiling) {
  if (tiling.dataType == kDTypeFloat) {
    RunGlu<float>(gate, up, out, tiling);
  } else if (tiling.dataType == kDTypeHalf) {
    RunGlu<half>(gate, up, out, tiling);
#if OP_EXT_HAS_BF16
  } else if (tiling.dataType == kDTypeBf16) {
    RunGlu<bfloat16_t>(gate, up, out, tiling);
#endif
  }
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_GLU_COMMON_H_
