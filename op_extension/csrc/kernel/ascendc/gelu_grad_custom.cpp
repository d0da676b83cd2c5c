// GeluGradCustom: dx = dy * gelu'(x), exact (erf) or tanh approximation, in float
// for every element type. Math: gelu_common.h. Tiling:
// host/tiling/gelu_grad_custom_tiling.h.
#include "gelu_common.h"
#include "gelu_grad_custom_tiling.h"
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelGeluGrad {
 public:
  __aicore__ inline KernelGeluGrad() {}

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR x, GM_ADDR dx, const optiling::GeluGradCustomTilingData& tiling,
                              TPipe* pipe) {
    tanh_ = tiling.approximate == 1;
    tileLength_ = tiling.tileLength;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dy), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    dxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dx), tiling.totalLength);
    pipe->InitBuffer(inQueueDy_, kBufferNum, tiling.tileLength * sizeof(T));
    pipe->InitBuffer(inQueueX_, kBufferNum, tiling.tileLength * sizeof(T));
    pipe->InitBuffer(outQueueDx_, kBufferNum, tiling.tileLength * sizeof(T));
    // Scratch rows: GeluGradScratchRows() of the tiling header.
    pipe->InitBuffer(scratch_, kScratchRows * tiling.tileLength * sizeof(float));
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
  static constexpr bool kIsFloat = IsSameType<T, float>::value;
  static constexpr uint32_t kScratchRows = kIsFloat ? 4 : 6;

  __aicore__ inline void CopyIn(uint64_t offset, uint32_t count) {
    LocalTensor<T> dy = inQueueDy_.template AllocTensor<T>();
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    op_ext_kernel::CopyGmToUb(dy, dyGm_[offset], count);
    op_ext_kernel::CopyGmToUb(x, xGm_[offset], count);
    inQueueDy_.EnQue(dy);
    inQueueX_.EnQue(x);
  }

  __aicore__ inline void Compute(uint32_t count) {
    LocalTensor<T> dy = inQueueDy_.template DeQue<T>();
    LocalTensor<T> x = inQueueX_.template DeQue<T>();
    LocalTensor<T> dx = outQueueDx_.template AllocTensor<T>();
    LocalTensor<float> s = scratch_.template Get<float>();
    const int32_t n = static_cast<int32_t>(count);
    const LocalTensor<float> s0 = s;
    const LocalTensor<float> s1 = s[tileLength_];
    const LocalTensor<float> s2 = s[2 * tileLength_];
    const LocalTensor<float> s3 = s[3 * tileLength_];
    if constexpr (kIsFloat) {
      Run(dx, dy, x, s0, s1, s2, s3, n);
    } else {
      LocalTensor<float> dyf = s[4 * tileLength_];
      LocalTensor<float> xf = s[5 * tileLength_];
      PipeBarrier<PIPE_V>();
      Cast(dyf, dy, RoundMode::CAST_NONE, count);
      Cast(xf, x, RoundMode::CAST_NONE, count);
      PipeBarrier<PIPE_V>();
      Run(dyf, dyf, xf, s0, s1, s2, s3, n);  // in place: dyf is read last, as the final factor
      PipeBarrier<PIPE_V>();
      Cast(dx, dyf, op_ext_kernel::NarrowRound<T>(), count);
    }
    outQueueDx_.EnQue(dx);
    inQueueDy_.FreeTensor(dy);
    inQueueX_.FreeTensor(x);
  }

  __aicore__ inline void Run(const LocalTensor<float>& dx, const LocalTensor<float>& dy, const LocalTensor<float>& x,
                             const LocalTensor<float>& s0, const LocalTensor<float>& s1,
                             const LocalTensor<float>& s2, const LocalTensor<float>& s3, int32_t n) {
    if (tanh_) {
      PipeBarrier<PIPE_V>();
      op_ext_kernel::GeluTanhGrad(dx, dy, x, s0, s1, s2, n);
    } else {
      PipeBarrier<PIPE_V>();
      op_ext_kernel::GeluErfGrad(dx, dy, x, s0, s1, s2, s3, n);
    }
  }

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {
    LocalTensor<T> dx = outQueueDx_.template DeQue<T>();
    tiles_.CopyOut(dxGm_, dx, offset, count);
    outQueueDx_.FreeTensor(dx);
  }

  TQue<TPosition::VECIN, kBufferNum> inQueueDy_;
  TQue<TPosition::VECIN, kBufferNum> inQueueX_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueDx_;
  TBuf<TPosition::VECCALC> scratch_;
  GlobalTensor<T> dyGm_;
  GlobalTensor<T> xGm_;
  GlobalTensor<T> dxGm_;
  op_ext_kernel::ElementwiseTiles<T> tiles_;
  uint32_t tileLength_ = 0;
  bool tanh_ = false;
};

template <typename T>
__aicore__ inline void RunGeluGrad(GM_ADDR dy, GM_ADDR x, GM_ADDR dx, const optiling::GeluGradCustomTilingData& tiling) {
  TPipe pipe;
  KernelGeluGrad<T> op;
  op.Init(dy, x, dx, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void gelu_grad_custom(GM_ADDR dy, GM_ADDR x, GM_ADDR dx, GM_ADDR workspace,
                                                       GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunGeluGrad<float>(dy, x, dx, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunGeluGrad<half>(dy, x, dx, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunGeluGrad<bfloat16_t>(dy, x, dx, tilingData);
#endif
  }
}
