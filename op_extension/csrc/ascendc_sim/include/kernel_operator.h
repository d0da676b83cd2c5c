// The Ascend C kernel API subset our kernels use, implemented for g++ by the
// op_extension CPU simulator (see docs/ascend.md). Kernel sources include this
// exactly as they include CANN's kernel_operator.h; compile with
// -DOP_EXT_ASCEND_SIM and this directory first on the include path.
#ifndef ASCENDC_SIM_KERNEL_OPERATOR_H_
#define ASCENDC_SIM_KERNEL_OPERATOR_H_

#include <cstdint>

// Address-space and entry qualifiers of the Ascend C language: meaningless on the host.
#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR __gm__ uint8_t*

#include "ascendc_sim/core.h"
#include "ascendc_sim/data_copy.h"
#include "ascendc_sim/float16.h"
#include "ascendc_sim/tensor.h"
#include "ascendc_sim/vector_ops.h"

#endif  // ASCENDC_SIM_KERNEL_OPERATOR_H_
