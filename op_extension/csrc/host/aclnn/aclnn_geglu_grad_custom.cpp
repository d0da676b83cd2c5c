// PlanGeGluGradCustom: gradGateOut = gradOutput * up * gelu'(gate),
// gradUpOut = gradOutput * gelu(gate), approximate "none" (erf) or "tanh".
//
// The generated entry has checked one dtype, contiguity, the outputs' shapes
// and approximate's values. Beyond the prototype: gradOutput and up have
// gate's shape.
#include "aclnn_geglu_grad_custom_args.h"

#include "geglu_grad_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_geglu_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(geglu_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR gate, OP_EXT_GM_ADDR up,
                      OP_EXT_GM_ADDR gradGate, OP_EXT_GM_ADDR gradUp, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanGeGluGradCustom(const GeGluGradCustomArgs& args) {
  const uint32_t approx = GeluApproximate(args.kOp, args.approximate);
  CheckSameShape(args.kOp, "gate", args.gate, "gradOutput", args.gradOutput);
  CheckSameShape(args.kOp, "gate", args.gate, "up", args.up);
  LaunchPlan plan;
  if (args.gate.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeGeGluGradTiling(args.gate.Numel(), args.dtype, approx, args.soc);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* gd = args.gate.data;
  uint8_t* ud = args.up.data;
  uint8_t* dgd = args.gradGateOut.data;
  uint8_t* dud = args.gradUpOut.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(geglu_grad_custom, blockDim, stream, dyd, gd, ud, dgd, dud, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
