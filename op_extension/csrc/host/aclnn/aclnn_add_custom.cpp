// PlanAddCustom: out = input + alpha * other.
//
// The generated entry (build/generated/op_ext_aclnn_entries.cpp) has checked
// one dtype (float16, float32, bfloat16), contiguity and out's shape. Beyond the
// prototype, whose output broadcasts: the kernel takes no broadcast, so other
// has input's shape (the caller materialises it expanded), and the kernel reads
// three dense runs of memory.
#include "aclnn_add_custom_args.h"

#include "add_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_add_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(add_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR z, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanAddCustom(const AddCustomArgs& args) {
  CheckSameShape(args.kOp, "input", args.input, "other", args.other);
  LaunchPlan plan;
  if (args.input.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeAddTiling(args.input.Numel(), args.dtype, args.alpha, args.soc);
  uint8_t* xd = args.input.data;
  uint8_t* yd = args.other.data;
  uint8_t* zd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(add_custom, blockDim, stream, xd, yd, zd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
