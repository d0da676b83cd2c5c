// Rotary position embedding (rotate_half convention, Hugging Face's
// apply_rotary_pos_emb) of one tensor x [rows, dim] per launch, forward and
// backward. With h = dim / 2 and c, s the cos / sin row of x's row:
//   forward:  y[i]     = x[i] c[i]         - x[i + h] s[i]
//             y[i + h] = x[i + h] c[i + h] + x[i] s[i + h]
//   backward (x is the output's gradient g, y the input's):
//             y[i]     = g[i] c[i]         + g[i + h] s[i + h]
//             y[i + h] = g[i + h] c[i + h] - g[i] s[i]
// Computed in float (16-bit inputs cast up, one Cast down per output element).
// Every row is moved as its two halves, each on a 32-byte block of the UB
// (halfStride apart), so the second half's vector instructions start aligned for
// any even dim; the RowCopier moves halves that are not whole blocks on every SoC.
// The cos / sin rows of a row come from its index (rope_tiling.h, CosRow).
// Tiling and UB plan: host/tiling/rope_tiling.h (mirrors Init).
#ifndef OP_EXT_KERNEL_ASCENDC_ROTARY_EMBEDDING_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_ROTARY_EMBEDDING_COMMON_H_

#include "kernel_common.h"
#include "kernel_operator.h"

namespace op_ext_kernel {

template <typename T, typename TilingData, bool kBackward>
class KernelRope {
 public:
  __aicore__ inline KernelRope() {}

  __aicore__ inline void Init(GM_ADDR x, GM_ADDR cos, GM_ADDR sin, GM_ADDR y, const TilingData& tiling,
                              AscendC::TPipe* pipe) {
    t_ = tiling;
    const uint64_t core = AscendC::GetBlockIdx();
    firstRow_ = core * t_.rowsPerCore + (core < t_.bigCoreNum ? core : t_.bigCoreNum);
    rowCount_ = t_.rowsPerCore + (core < t_.bigCoreNum ? 1 : 0);
    const uint64_t total = t_.rows * t_.dim;
    const uint64_t cosTotal = t_.cosRows * t_.dim;
    xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), ReadableLength<T>(total, t_.tailMode));
    cosGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(cos), ReadableLength<T>(cosTotal, t_.tailMode));
    sinGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(sin), ReadableLength<T>(cosTotal, t_.tailMode));
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y), total);
    copier_.Init(pipe, t_.tailMode);
    const uint32_t tileBytes = t_.rowsPerTile * 2 * t_.halfStride * sizeof(T);
    pipe->InitBuffer(inX_, kBufferNum, tileBytes);
    pipe->InitBuffer(inCos_, kBufferNum, tileBytes);
    pipe->InitBuffer(inSin_, kBufferNum, tileBytes);
    pipe->InitBuffer(outY_, kBufferNum, tileBytes);
    hf_ = (t_.half + 7) / 8 * 8;
    pipe->InitBuffer(prod_, hf_ * sizeof(float));
    if constexpr (!kIsFloat) {
      pipe->InitBuffer(xf_, 2 * hf_ * sizeof(float));
      pipe->InitBuffer(cf_, 2 * hf_ * sizeof(float));
      pipe->InitBuffer(sf_, 2 * hf_ * sizeof(float));
      pipe->InitBuffer(yf_, 2 * hf_ * sizeof(float));
    }
  }

  __aicore__ inline void Process() {
    for (uint64_t r = 0; r < rowCount_; r += t_.rowsPerTile) {
      const uint32_t k = static_cast<uint32_t>(rowCount_ - r < t_.rowsPerTile ? rowCount_ - r : t_.rowsPerTile);
      CopyIn(firstRow_ + r, k);
      Compute(firstRow_ + r, k);
      CopyOut(firstRow_ + r, k);
    }
  }

 private:
  static constexpr bool kIsFloat = AscendC::IsSameType<T, float>::value;

  __aicore__ inline uint64_t CosRow(uint64_t row) const {
    const uint64_t base = t_.cosBatched ? (row / t_.batchRows) * t_.seqLen : 0;
    return base + (row / t_.seqDiv) % t_.seqLen;
  }

  // x's k rows as 2k half-rows. cos and sin: tile row j's cos row sits in slot j,
  // except that a row with the same cos row as the row before it (the heads of
  // [B, S, N, D], or S = 1) reads the earlier slot (see Compute) and loads nothing;
  // runs of consecutive cos rows (the sequence of [B, N, S, D]) move in one copy.
  __aicore__ inline void CopyIn(uint64_t row, uint32_t k) {
    AscendC::LocalTensor<T> x = inX_.template AllocTensor<T>();
    copier_.RowsIn(x, xGm_[row * t_.dim], 2 * k, t_.half);
    inX_.EnQue(x);
    AscendC::LocalTensor<T> c = inCos_.template AllocTensor<T>();
    AscendC::LocalTensor<T> s = inSin_.template AllocTensor<T>();
    uint32_t j = 0;
    while (j < k) {
      const uint64_t first = CosRow(row + j);
      uint32_t len = 1;
      while (j + len < k && CosRow(row + j + len) == first + len) ++len;
      copier_.RowsIn(c[2 * j * t_.halfStride], cosGm_[first * t_.dim], 2 * len, t_.half);
      copier_.RowsIn(s[2 * j * t_.halfStride], sinGm_[first * t_.dim], 2 * len, t_.half);
      j += len;
      const uint64_t last = first + len - 1;
      while (j < k && CosRow(row + j) == last) ++j;
    }
    inCos_.EnQue(c);
    inSin_.EnQue(s);
  }

  // o1 = x1 c1 -+ x2 sA, o2 = x2 c2 +- x1 sB on n floats (see the top of the file).
  __aicore__ inline void Rotate(const AscendC::LocalTensor<float>& o1, const AscendC::LocalTensor<float>& o2,
                                const AscendC::LocalTensor<float>& x1, const AscendC::LocalTensor<float>& x2,
                                const AscendC::LocalTensor<float>& c1, const AscendC::LocalTensor<float>& c2,
                                const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                int32_t n) {
    AscendC::LocalTensor<float> p = prod_.template Get<float>();
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Mul(o1, x1, c1, n);
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Mul(o2, x2, c2, n);
    if constexpr (kBackward) {
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Mul(p, x2, s2, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Add(o1, o1, p, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Mul(p, x1, s1, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Sub(o2, o2, p, n);
    } else {
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Mul(p, x2, s1, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Sub(o1, o1, p, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Mul(p, x1, s2, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Add(o2, o2, p, n);
    }
  }

  __aicore__ inline void Compute(uint64_t row, uint32_t k) {
    AscendC::LocalTensor<T> x = inX_.template DeQue<T>();
    AscendC::LocalTensor<T> c = inCos_.template DeQue<T>();
    AscendC::LocalTensor<T> s = inSin_.template DeQue<T>();
    AscendC::LocalTensor<T> y = outY_.template AllocTensor<T>();
    const uint32_t hs = t_.halfStride;
    const uint32_t h = t_.half;
    const int32_t n = static_cast<int32_t>(h);
    uint64_t prevCos = 0;
    uint32_t slot = 0;
    for (uint32_t j = 0; j < k; ++j) {
      // The slot CopyIn loaded this row's cos row into.
      const uint64_t cosRow = CosRow(row + j);
      if (j == 0 || cosRow != prevCos) slot = j;
      prevCos = cosRow;
      const uint32_t a = 2 * j * hs;
      const uint32_t b = a + hs;
      const uint32_t ca = 2 * slot * hs;
      const uint32_t cb = ca + hs;
      if constexpr (kIsFloat) {
        Rotate(y[a].template ReinterpretCast<float>(), y[b].template ReinterpretCast<float>(),
               x[a].template ReinterpretCast<float>(), x[b].template ReinterpretCast<float>(),
               c[ca].template ReinterpretCast<float>(), c[cb].template ReinterpretCast<float>(),
               s[ca].template ReinterpretCast<float>(), s[cb].template ReinterpretCast<float>(), n);
      } else {
        AscendC::LocalTensor<float> xf = xf_.template Get<float>();
        AscendC::LocalTensor<float> cf = cf_.template Get<float>();
        AscendC::LocalTensor<float> sf = sf_.template Get<float>();
        AscendC::LocalTensor<float> yf = yf_.template Get<float>();
        CastToFloat(xf, x[a], h);
        AscendC::PipeBarrier<PIPE_V>();
        CastToFloat(xf[hf_], x[b], h);
        if (slot == j) {  // a new cos row (else cf, sf still hold it)
          CastToFloat(cf, c[ca], h);
          AscendC::PipeBarrier<PIPE_V>();
          CastToFloat(cf[hf_], c[cb], h);
          AscendC::PipeBarrier<PIPE_V>();
          CastToFloat(sf, s[ca], h);
          AscendC::PipeBarrier<PIPE_V>();
          CastToFloat(sf[hf_], s[cb], h);
        }
        AscendC::PipeBarrier<PIPE_V>();
        Rotate(yf, yf[hf_], xf, xf[hf_], cf, cf[hf_], sf, sf[hf_], n);
        AscendC::PipeBarrier<PIPE_V>();
        CastFromFloat(y[a], yf, h);
        AscendC::PipeBarrier<PIPE_V>();
        CastFromFloat(y[b], yf[hf_], h);
      }
    }
    outY_.EnQue(y);
    inX_.FreeTensor(x);
    inCos_.FreeTensor(c);
    inSin_.FreeTensor(s);
  }

  __aicore__ inline void CopyOut(uint64_t row, uint32_t k) {
    AscendC::LocalTensor<T> y = outY_.template DeQue<T>();
    copier_.RowsOut(yGm_[row * t_.dim], y, 2 * k, t_.half);
    outY_.FreeTensor(y);
  }

  TilingData t_;
  uint64_t firstRow_ = 0;
  uint64_t rowCount_ = 0;
  uint32_t hf_ = 0;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inX_;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inCos_;
  AscendC::TQue<AscendC::TPosition::VECIN, kBufferNum> inSin_;
  AscendC::TQue<AscendC::TPosition::VECOUT, kBufferNum> outY_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> prod_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> xf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> cf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> sf_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> yf_;
  RowCopier<T> copier_;
  AscendC::GlobalTensor<T> xGm_;
  AscendC::GlobalTensor<T> cosGm_;
  AscendC::GlobalTensor<T> sinGm_;
  AscendC::GlobalTensor<T> yGm_;
};

template <typename T, typename TilingData, bool kBackward>
__aicore__ inline void RunRope(GM_ADDR x, GM_ADDR cos, GM_ADDR sin, GM_ADDR y, const TilingData& tiling) {
  AscendC::TPipe pipe;
  KernelRope<T, TilingData, kBackward> op;
  op.Init(x, cos, sin, y, tiling, &pipe);
  op.Process();
}

// The entry's dtype dispatch (bfloat16 only where the SoC has it).
template <typename TilingData, bool kBackward>
__aicore__ inline void DispatchRope(GM_ADDR x, GM_ADDR cos, GM_ADDR sin, GM_ADDR y, const TilingData& tiling) {
  if (tiling.dataType == kDTypeFloat) {
    RunRope<float, TilingData, kBackward>(x, cos, sin, y, tiling);
  } else if (tiling.dataType == kDTypeHalf) {
    RunRope<half, TilingData, kBackward>(x, cos, sin, y, tiling);
#if OP_EXT_HAS_BF16
  } else if (tiling.dataType == kDTypeBf16) {
    RunRope<bfloat16_t, TilingData, kBackward>(x, cos, sin, y, tiling);
#endif
  }
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_ROTARY_EMBEDDING_COMMON_H_
