// PlanGeluCustom: out = gelu(input), approximate "none" (erf) or "tanh".
//
// The generated entry has checked everything the op needs (one dtype,
// contiguity, out's shape, approximate's values): this tiles and launches.
#include "aclnn_gelu_custom_args.h"

#include "gelu_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_gelu_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(gelu_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanGeluCustom(const GeluCustomArgs& args) {
  const uint32_t approx = GeluApproximate(args.kOp, args.approximate);
  LaunchPlan plan;
  if (args.input.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeGeluTiling(args.input.Numel(), args.dtype, approx, args.soc);
  uint8_t* xd = args.input.data;
  uint8_t* yd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(gelu_custom, blockDim, stream, xd, yd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
