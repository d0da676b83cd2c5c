// PlanSwiGluCustom: out = silu(gate) * up.
//
// The generated entry has checked one dtype, contiguity and out's shape.
// Beyond the prototype: up has gate's shape.
#include "aclnn_swiglu_custom_args.h"

#include "swiglu_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_swiglu_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(swiglu_custom, OP_EXT_GM_ADDR gate, OP_EXT_GM_ADDR up, OP_EXT_GM_ADDR out,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanSwiGluCustom(const SwiGluCustomArgs& args) {
  CheckSameShape(args.kOp, "gate", args.gate, "up", args.up);
  LaunchPlan plan;
  if (args.gate.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeSwiGluTiling(args.gate.Numel(), args.dtype, args.soc);
  uint8_t* gd = args.gate.data;
  uint8_t* ud = args.up.data;
  uint8_t* yd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(swiglu_custom, blockDim, stream, gd, ud, yd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
