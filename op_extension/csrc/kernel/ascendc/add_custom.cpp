// AddCustom: z = x + alpha * y over same-shape contiguous tensors.
//
// float and half compute in their own type (half: every instruction rounds to
// half, so alpha != 1 rounds twice); bfloat16 has no arithmetic instructions and
// goes through float: cast, add, cast with round-to-nearest-even.
// Tiling: host/tiling/add_custom_tiling.h; split: elementwise_tiling.h.
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "add_custom_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelAdd {
 public:
  __aicore__ inline KernelAdd() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const optiling::AddCustomTilingData& tiling,
                              TPipe* pipe) {
    alpha_ = tiling.alpha;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    zGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(z), tiling.totalLength);
    const uint32_t tileBytes = tiling.tileLength * sizeof(T);
    pipe->InitBuffer(inQueueX_, kBufferNum, tileBytes);
    pipe->InitBuffer(inQueueY_, kBufferNum, tileBytes);
    pipe->InitBuffer(outQueueZ_, kBufferNum, tileBytes);
    if constexpr (kViaFloat) {
      pipe->InitBuffer(xFloat_, tiling.tileLength * sizeof(float));
      pipe->InitBuffer(yFloat_, tiling.tileLength * sizeof(float));
    }
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
  static constexpr bool kViaFloat = !IsSameType<T, float>::value && !IsSameType<T, half>::value;

  __aicore__ inline void CopyIn(uint64_t offset, uint32_t count) {
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    LocalTensor<T> y = inQueueY_.template AllocTensor<T>();
    op_ext_kernel::CopyGmToUb(x, xGm_[offset], count);
    op_ext_kernel::CopyGmToUb(y, yGm_[offset], count);
    inQueueX_.EnQue(x);
    inQueueY_.EnQue(y);
  }

  __aicore__ inline void Compute(uint32_t count) {
    LocalTensor<T> x = inQueueX_.template DeQue<T>();
    LocalTensor<T> y = inQueueY_.template DeQue<T>();
    LocalTensor<T> z = outQueueZ_.template AllocTensor<T>();
    const int32_t n = static_cast<int32_t>(count);
    if constexpr (kViaFloat) {
      LocalTensor<float> xf = xFloat_.template Get<float>();
      LocalTensor<float> yf = yFloat_.template Get<float>();
      Cast(xf, x, RoundMode::CAST_NONE, count);
      Cast(yf, y, RoundMode::CAST_NONE, count);
      PipeBarrier<PIPE_V>();
      if (alpha_ != 1.0f) Muls(yf, yf, alpha_, n);
      PipeBarrier<PIPE_V>();
      Add(xf, xf, yf, n);
      PipeBarrier<PIPE_V>();
      Cast(z, xf, op_ext_kernel::NarrowRound<T>(), count);
    } else {
      if (alpha_ != 1.0f) {
        Muls(y, y, static_cast<T>(alpha_), n);
      }
      PipeBarrier<PIPE_V>();
      Add(z, x, y, n);
    }
    outQueueZ_.EnQue(z);
    inQueueX_.FreeTensor(x);
    inQueueY_.FreeTensor(y);
  }

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {
    LocalTensor<T> z = outQueueZ_.template DeQue<T>();
    tiles_.CopyOut(zGm_, z, offset, count);
    outQueueZ_.FreeTensor(z);
  }

  TQue<TPosition::VECIN, kBufferNum> inQueueX_;
  TQue<TPosition::VECIN, kBufferNum> inQueueY_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueZ_;
  TBuf<TPosition::VECCALC> xFloat_;
  TBuf<TPosition::VECCALC> yFloat_;
  GlobalTensor<T> xGm_;
  GlobalTensor<T> yGm_;
  GlobalTensor<T> zGm_;
  op_ext_kernel::ElementwiseTiles<T> tiles_;
  float alpha_ = 1.0f;
};

template <typename T>
__aicore__ inline void RunAdd(GM_ADDR x, GM_ADDR y, GM_ADDR z, const optiling::AddCustomTilingData& tiling) {
  TPipe pipe;
  KernelAdd<T> op;
  op.Init(x, y, z, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunAdd<float>(x, y, z, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunAdd<half>(x, y, z, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunAdd<bfloat16_t>(x, y, z, tilingData);
#endif
  }
}
