// PlanGeluGradCustom: out = gradOutput * gelu'(input), approximate "none" or "tanh".
//
// The generated entry has checked one dtype, contiguity, out's shape and
// approximate's values. Beyond the prototype: gradOutput has input's shape.
#include "aclnn_gelu_grad_custom_args.h"

#include "gelu_grad_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_gelu_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(gelu_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR dx,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanGeluGradCustom(const GeluGradCustomArgs& args) {
  const uint32_t approx = GeluApproximate(args.kOp, args.approximate);
  CheckSameShape(args.kOp, "input", args.input, "gradOutput", args.gradOutput);
  LaunchPlan plan;
  if (args.input.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeGeluGradTiling(args.input.Numel(), args.dtype, approx, args.soc);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* xd = args.input.data;
  uint8_t* dxd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(gelu_grad_custom, blockDim, stream, dyd, xd, dxd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
