// The gated-unit backward kernels SwiGluGradCustom and GeGluGradCustom: for
// out = act(gate) * up,
//   gradGate = dy * up * act'(gate),   gradUp = dy * act(gate),
// elementwise over same-shape contiguous tensors, in float for every element
// type (16-bit inputs cast up, each result rounded once on the way down). The
// products are taken in the CPU kernel's order (kernel/cpu/activation.cpp), so an
// overflow or an infinity gives what the CPU op gives:
//   silu:  s = 1 / (1 + exp(-g)), gradGate = ((dy up) s) (1 + g (1 - s)), gradUp = (dy g) s
//   gelu:  gradGate = (dy up) gelu'(g), gradUp = dy gelu(g)   (gelu_common.h)
// One class serves both entries; the activation comes from the TilingData
// (host/tiling/glu_tiling.h, whose GluGradUbBytesPerElement mirrors Init).
#ifndef OP_EXT_KERNEL_ASCENDC_GLU_GRAD_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_GLU_GRAD_COMMON_H_

#include "gelu_common.h"
#include "glu_common.h"
#include "kernel_common.h"
#include "kernel_operator.h"

namespace op_ext_kernel {

// Float scratch rows of the math (GluGradMathRows of glu_tiling.h): SiLU two
// (s and 1 + g (1 - s)), GELU four (gelu_common.h's s0..s3).
__aicore__ inline uint32_t GluGradMathRows(uint32_t activation) { return activation == kGluSilu ? 2 : 4; }

// TilingData: an elementwise TilingData with an `activation` field.
template <typename T, typename TilingData>
class KernelGluGrad {
 public:
  __aicore__ inline KernelGluGrad() {}

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR gradGate, GM_ADDR gradUp,
                              const TilingData& tiling, AscendC::TPipe* pipe) {
    activation_ = tiling.activation;
    tileLength_ = tiling.tileLength;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dy), ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    gateGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gate), ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    upGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(up), ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    gradGateGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gradGate), tiling.totalLength);
    gradUpGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gradUp), tiling.totalLength);
    const uint32_t tileBytes = tiling.tileLength * sizeof(T);
    pipe->InitBuffer(inQueueDy_, kBufferNum, tileBytes);
    pipe->InitBuffer(inQueueGate_, kBufferNum, tileBytes);
    pipe->InitBuffer(inQueueUp_, kBufferNum, tileBytes);
    pipe->InitBuffer(outQueueGradGate_, kBufferNum, tileBytes);
    pipe->InitBuffer(outQueueGradUp_, kBufferNum, tileBytes);
    // GluGradScratchRows() of glu_tiling.h: the math rows, then dy, gate and up
    // in float for 16-bit types.
    const uint32_t rows = GluGradMathRows(activation_) + (kIsFloat ? 0 : 3);
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
    AscendC::LocalTensor<T> dy = inQueueDy_.template AllocTensor<T>();
    AscendC::LocalTensor<T> g = inQueueGate_.template AllocTensor<T>();
    AscendC::LocalTensor<T> u = inQueueUp_.template AllocTensor<T>();
    CopyGmToUb(dy, dyGm_[offset], count);
    CopyGmToUb(g, gateGm_[offset], count);
    CopyGmToUb(u, upGm_[offset], count);
    inQueueDy_.EnQue(dy);
    inQueueGate_.EnQue(g);
    inQueueUp_.EnQue(u);
  }

  __aicore__ inline void Compute(uint32_t count) {
    using namespace AscendC;
    LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
    LocalTensor<T> g = inQueueGate_.template DeQue<T>();
    LocalTensor<T> u = inQueueUp_.template DeQue<T>();
    LocalTensor<T> dg = outQueueGradGate_.template AllocTensor<T>();
    LocalTensor<T> du = outQueueGradUp_.template AllocTensor<T>();
    LocalTensor<float> s = scratch_.template Get<float>();
    const int32_t n = static_cast<int32_t>(count);
    if constexpr (kIsFloat) {
      // The results go straight into the output tiles.
      Grads(dg, du, dy, g, u, s, n);
    } else {
      const uint32_t mathRows = GluGradMathRows(activation_);
      LocalTensor<float> dyf = s[mathRows * tileLength_];
      LocalTensor<float> gf = s[(mathRows + 1) * tileLength_];
      LocalTensor<float> uf = s[(mathRows + 2) * tileLength_];
      AscendC::PipeBarrier<PIPE_V>();
      CastToFloat(dyf, dy, count);
      AscendC::PipeBarrier<PIPE_V>();
      CastToFloat(gf, g, count);
      AscendC::PipeBarrier<PIPE_V>();
      CastToFloat(uf, u, count);
      // In place: gate is last read before gradUp is written over it (Grads' order), up
      // is last read as gradGate's first factor.
      AscendC::PipeBarrier<PIPE_V>();
      Grads(uf, gf, dyf, gf, uf, s, n);
      AscendC::PipeBarrier<PIPE_V>();
      CastFromFloat(dg, uf, count);
      AscendC::PipeBarrier<PIPE_V>();
      CastFromFloat(du, gf, count);
    }
    outQueueGradGate_.EnQue(dg);
    outQueueGradUp_.EnQue(du);
    inQueueDy_.FreeTensor(dy);
    inQueueGate_.FreeTensor(g);
    inQueueUp_.FreeTensor(u);
  }

  // dg = dy * up * act'(g), du = dy * act(g), on float rows. The activation
  // terms are computed into the scratch rows s first, so dg may be u and du
  // may be g: each is written after the last read of what it overwrites.
  __aicore__ inline void Grads(const AscendC::LocalTensor<float>& dg, const AscendC::LocalTensor<float>& du,
                               const AscendC::LocalTensor<float>& dy, const AscendC::LocalTensor<float>& g,
                               const AscendC::LocalTensor<float>& u, const AscendC::LocalTensor<float>& s,
                               int32_t n) {
    using namespace AscendC;
    const LocalTensor<float> s0 = s;
    const LocalTensor<float> s1 = s[tileLength_];
    if (activation_ == kGluSilu) {
      AscendC::PipeBarrier<PIPE_V>();
      Muls(s0, g, -1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Exp(s0, s0, n);
      AscendC::PipeBarrier<PIPE_V>();
      Adds(s0, s0, 1.0f, n);
      // s = sigmoid(g), by Div: Reciprocal misses 1e-4 relative on hardware (API page).
      // exp overflow for very negative g: 1 / inf = 0.
      Duplicate(s1, 1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Div(s0, s1, s0, n);
      AscendC::PipeBarrier<PIPE_V>();
      Muls(s1, s0, -1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Adds(s1, s1, 1.0f, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(s1, s1, g, n);
      AscendC::PipeBarrier<PIPE_V>();
      Adds(s1, s1, 1.0f, n);  // 1 + g (1 - s)
      AscendC::PipeBarrier<PIPE_V>();
      Mul(du, dy, g, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(du, du, s0, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(dg, dy, u, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(dg, dg, s0, n);
      AscendC::PipeBarrier<PIPE_V>();
      Mul(dg, dg, s1, n);
      return;
    }
    // s0 = gelu'(g), s1 = gelu(g)
    if (activation_ == kGluGeluTanh) {
      GeluTanhValueAndGrad(g, s0, s1, s[2 * tileLength_], s[3 * tileLength_], n);
    } else {
      AscendC::PipeBarrier<PIPE_V>();
      GeluErfValueAndGrad(g, s0, s1, s[2 * tileLength_], s[3 * tileLength_], n);
    }
    AscendC::PipeBarrier<PIPE_V>();
    Mul(du, dy, s1, n);
    AscendC::PipeBarrier<PIPE_V>();
    Mul(dg, dy, u, n);
    AscendC::PipeBarrier<PIPE_V>();
    Mul(dg, dg, s0, n);
  }

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {
    AscendC::LocalTensor<T> dg = outQueueGradGate_.template DeQue<T>();
    AscendC::LocalTensor<T> du = outQueueGradUp_.template DeQue<T>();
    tiles_.CopyOut(gradGateGm_, dg, offset, count);
    tiles_.CopyOut(gradUpGm_, du, offset, count);
    outQueueGradGate_.FreeTensor(dg);
    outQueueGradUp_.FreeTensor(du);
  }

  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inQueueDy_;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inQueueGate_;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inQueueUp_;
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> outQueueGradGate_;
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> outQueueGradUp_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> scratch_;
  AscendC::GlobalTensor<T> dyGm_;
  AscendC::GlobalTensor<T> gateGm_;
  AscendC::GlobalTensor<T> upGm_;
  AscendC::GlobalTensor<T> gradGateGm_;
  AscendC::GlobalTensor<T> gradUpGm_;
  ElementwiseTiles<T> tiles_;
  uint32_t tileLength_ = 0;
  uint32_t activation_ = kGluSilu;
};

template <typename T, typename TilingData>
__aicore__ inline void RunGluGrad(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR gradGate, GM_ADDR gradUp,
                                  const TilingData& tiling) {
  AscendC::TPipe pipe;
  KernelGluGrad<T, TilingData> op;
  op.Init(dy, gate, up, gradGate, gradUp, tiling, &pipe);
  op.Process();
}

// The entry's dtype dispatch.
template <typename TilingData>
__aicore__ inline void DispatchGluGrad(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR gradGate, GM_ADDR gradUp,
                                       const TilingData& tiling) {
  if (tiling.dataType == kDTypeFloat) {
    RunGluGrad<float>(dy, gate, up, gradGate, gradUp, tiling);
  } else if (tiling.dataType == kDTypeHalf) {
    RunGluGrad<half>(dy, gate, up, gradGate, gradUp, tiling);
#if OP_EXT_HAS_BF16
  } else if (tiling.dataType == kDTypeBf16) {
    RunGluGrad<bfloat16_t>(dy, gate, up, gradGate, gradUp, tiling);
#endif
  }
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_GLU_GRAD_COMMON_H_
