// GET_TILING_DATA for our kernels: copies the TilingData the host wrote to GM
// (see host/tiling/tiling_def.h for why the definition is ours) into a local
// struct of the type the TU's <op>_tiling.h registered.
#ifndef OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_
#define OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_

#include "kernel_operator.h"

namespace op_ext_kernel {

template <typename TilingData>
__aicore__ inline void LoadTilingData(TilingData* dst, GM_ADDR src) {
  static_assert(sizeof(TilingData) % sizeof(uint32_t) == 0, "TilingData is copied in 32-bit words");
  constexpr uint32_t kWords = sizeof(TilingData) / sizeof(uint32_t);
  AscendC::GlobalTensor<uint32_t> gm;
  gm.SetGlobalBuffer(reinterpret_cast<__gm__ uint32_t*>(src), kWords);
  auto* words = reinterpret_cast<uint32_t*>(dst);
  for (uint32_t i = 0; i < kWords; ++i) words[i] = gm.GetValue(i);
}

}  // namespace op_ext_kernel

#define GET_TILING_DATA(tiling_data, tiling_arg)      \
  optiling::OpExtKernelTilingData tiling_data;        \
  ::op_ext_kernel::LoadTilingData(&tiling_data, tiling_arg)

#endif  // OP_EXT_KERNEL_ASCENDC_KERNEL_TILING_H_
