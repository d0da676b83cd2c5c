// GET_TILING_DATA for our kernels: copies the TilingData the host wrote to GM
// (see host/tiling/tiling_def.h for why the definition is ours) into a local
// struct of the type the TU's <op>_tiling.h registered.
#ifndef OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_
#define OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_

#include "kernel_operator.h"

namespace op_ext_kernel {

// The words are scalar loads, through the core's data cache. The host writes a
// new TilingData for every launch, often at an address an earlier launch's
// tiling used, and the devkit does not say that a kernel starts with an empty
// data cache on Atlas A2 or Atlas inference (only the Ascend 950 guide says the
// compiler ends each kernel with a DCCI). So every line the TilingData spans is
// dropped first: a clean-and-invalidate acts from its address to the next
// 64-byte boundary (DataCacheCleanAndInvalid page, example 2), hence one at the
// start and one at each boundary inside. A few instructions per launch.
template <typename TilingData>
__aicore__ inline void LoadTilingData(TilingData* dst, GM_ADDR src) {
  static_assert(sizeof(TilingData) % sizeof(uint32_t) == 0, "TilingData is copied in 32-bit words");
  constexpr uint32_t kWords = sizeof(TilingData) / sizeof(uint32_t);
  constexpr uint64_t kLineBytes = 64;
  AscendC::GlobalTensor<uint32_t> gm;
  gm.SetGlobalBuffer(reinterpret_cast<__gm__ uint32_t*>(src), kWords);
  const uint64_t base = reinterpret_cast<uint64_t>(src);
  for (uint32_t i = 0; i < kWords;) {
    AscendC::DataCacheCleanAndInvalid<uint32_t, AscendC::CacheLine::SINGLE_CACHE_LINE>(gm[i]);
    const uint64_t nextLine = (base + uint64_t(i) * sizeof(uint32_t)) / kLineBytes * kLineBytes + kLineBytes;
    i = static_cast<uint32_t>((nextLine - base + sizeof(uint32_t) - 1) / sizeof(uint32_t));
  }
  auto* words = reinterpret_cast<uint32_t*>(dst);
  for (uint32_t i = 0; i < kWords; ++i) words[i] = gm.GetValue(i);
}

}  // namespace op_ext_kernel

#define GET_TILING_DATA(tiling_data, tiling_arg)      \
  optiling::OpExtKernelTilingData tiling_data;        \
  ::op_ext_kernel::LoadTilingData(&tiling_data, tiling_arg)

#endif  // OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_
