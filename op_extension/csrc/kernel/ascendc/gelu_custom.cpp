// GeluCustom: y = gelu(x), exact (erf) or tanh approximation, in float for every
// element type (16-bit inputs are cast up, the result rounded once on the way
// down). Math: gelu_common.h. Tiling: host/tiling/gelu_custom_tiling.h.
#include "gelu_common.h"
#include "gelu_custom_tiling.h"
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"

namespace {

using namespace AscendC;
using op_ext_kernel::kBufferNum;

template <typename T>
class KernelGelu {
 public:
  __aicore__ inline KernelGelu() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const optiling::GeluCustomTilingData& tiling, TPipe* pipe) {
    tanh_ = tiling.approximate == 1;
    tileLength_ = tiling.tileLength;
    tiles_.Init(tiling.totalLength, tiling.blocksPerCore, tiling.bigCoreNum, tiling.tileLength, tiling.tailMode);
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), op_ext_kernel::ReadableLength<T>(tiling.totalLength, tiling.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), tiling.totalLength);
    pipe->InitBuffer(inQueueX_, kBufferNum, tiling.tileLength * sizeof(T));
    pipe->InitBuffer(outQueueY_, kBufferNum, tiling.tileLength * sizeof(T));
    // Scratch rows: GeluScratchRows() of the tiling header.
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
    LocalTensor<T> x = inQueueX_.template AllocTensor<T>();
    op_ext_kernel::CopyGmToUb(x, xGm_[offset], count);
    inQueueX_.EnQue(x);
  }

  __aicore__ inline void Compute(uint32_t count) {
    LocalTensor<T> x = inQueueX_.template DeQue<T>();
    LocalTensor<T> y = outQueueY_.template AllocTensor<T>();
    LocalTensor<float> s = scratch_.template Get<float>();
    const int32_t n = static_cast<int32_t>(count);
    const LocalTensor<float> s0 = s;
    const LocalTensor<float> s1 = s[tileLength_];
    const LocalTensor<float> s2 = s[2 * tileLength_];
    const LocalTensor<float> s3 = s[3 * tileLength_];
    if constexpr (kIsFloat) {
      Run(y, x, s0, s1, s2, s3, n);
    } else {
      LocalTensor<float> xf = s[4 * tileLength_];
      LocalTensor<float> yf = s[5 * tileLength_];
      PipeBarrier<PIPE_V>();
      Cast(xf, x, RoundMode::CAST_NONE, count);
      PipeBarrier<PIPE_V>();
      Run(yf, xf, s0, s1, s2, s3, n);
      PipeBarrier<PIPE_V>();
      Cast(y, yf, op_ext_kernel::NarrowRound<T>(), count);
    }
    outQueueY_.EnQue(y);
    inQueueX_.FreeTensor(x);
  }

  __aicore__ inline void Run(const LocalTensor<float>& y, const LocalTensor<float>& x, const LocalTensor<float>& s0,
                             const LocalTensor<float>& s1, const LocalTensor<float>& s2,
                             const LocalTensor<float>& s3, int32_t n) {
    if (tanh_) {
      PipeBarrier<PIPE_V>();
      op_ext_kernel::GeluTanh(y, x, s0, n);
    } else {
      PipeBarrier<PIPE_V>();
      op_ext_kernel::GeluErf(y, x, s0, s1, s2, s3, n);
    }
  }

  __aicore__ inline void CopyOut(uint64_t offset, uint32_t count) {
    LocalTensor<T> y = outQueueY_.template DeQue<T>();
    tiles_.CopyOut(yGm_, y, offset, count);
    outQueueY_.FreeTensor(y);
  }

  TQue<TPosition::VECIN, kBufferNum> inQueueX_;
  TQue<TPosition::VECOUT, kBufferNum> outQueueY_;
  TBuf<TPosition::VECCALC> scratch_;
  GlobalTensor<T> xGm_;
  GlobalTensor<T> yGm_;
  op_ext_kernel::ElementwiseTiles<T> tiles_;
  uint32_t tileLength_ = 0;
  bool tanh_ = false;
};

template <typename T>
__aicore__ inline void RunGelu(GM_ADDR x, GM_ADDR y, const optiling::GeluCustomTilingData& tiling) {
  TPipe pipe;
  KernelGelu<T> op;
  op.Init(x, y, tiling, &pipe);
  op.Process();
}

}  // namespace

extern "C" __global__ __aicore__ void gelu_custom(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  if (tilingData.dataType == op_ext_kernel::kDTypeFloat) {
    RunGelu<float>(x, y, tilingData);
  } else if (tilingData.dataType == op_ext_kernel::kDTypeHalf) {
    RunGelu<half>(x, y, tilingData);
#if OP_EXT_HAS_BF16
  } else if (tilingData.dataType == op_ext_kernel::kDTypeBf16) {
    RunGelu<bfloat16_t>(x, y, tilingData);
#endif
  }
}
