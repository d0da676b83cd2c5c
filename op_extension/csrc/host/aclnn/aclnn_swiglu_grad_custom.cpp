// PlanSwiGluGradCustom: gradGateOut = gradOutput * up * silu'(gate),
// gradUpOut = gradOutput * silu(gate).
//
// The generated entry has checked one dtype, contiguity and the outputs'
// shapes. Beyond the prototype: gradOutput and up have gate's shape.
#include "aclnn_swiglu_grad_custom_args.h"

#include "swiglu_grad_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_swiglu_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(swiglu_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR gate, OP_EXT_GM_ADDR up,
                      OP_EXT_GM_ADDR gradGate, OP_EXT_GM_ADDR gradUp, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanSwiGluGradCustom(const SwiGluGradCustomArgs& args) {
  CheckSameShape(args.kOp, "gate", args.gate, "gradOutput", args.gradOutput);
  CheckSameShape(args.kOp, "gate", args.gate, "up", args.up);
  LaunchPlan plan;
  if (args.gate.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeSwiGluGradTiling(args.gate.Numel(), args.dtype, args.soc);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* gd = args.gate.data;
  uint8_t* ud = args.up.data;
  uint8_t* dgd = args.gradGateOut.data;
  uint8_t* dud = args.gradUpOut.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(swiglu_grad_custom, blockDim, stream, dyd, gd, ud, dgd, dud, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
