// PlanRmsNormGradCustom: gradInputOut and (with a weight) gradWeightOut of
// RmsNormCustom.
//
// The generated entry has checked one dtype, contiguity, gradInputOut's shape
// and that gradWeightOut comes exactly with weightOptional, in its shape.
// Beyond the prototype: gradOutput has input's shape; normalizedShape names
// input's trailing dims, which weightOptional has. eps is a number (the caller
// resolves eps=None). Launches rms_norm_grad_custom twice when there is a
// weight (rows, then columns: see rms_norm_grad_custom_tiling.h); the
// workspace carries the rows' rstd from the first launch to the second.
#include "aclnn_rms_norm_grad_custom_args.h"

#include "kernel_launch.h"
#include "rms_norm_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rms_norm_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rms_norm_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight,
                      OP_EXT_GM_ADDR gradResidual, OP_EXT_GM_ADDR gradInput, OP_EXT_GM_ADDR gradWeight,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanRmsNormGradCustom(const RmsNormGradCustomArgs& args) {
  const char* op = args.kOp;
  const std::vector<int64_t> shape = NormalizedShape(op, args.input, args.normalizedShape);
  const RowShape rs = NormRows(op, args.input, shape);
  if (args.weightOptional) CheckAffine(op, "weightOptional", *args.weightOptional, args.input, shape);
  CheckSameShape(op, "input", args.input, "gradOutput", args.gradOutput);
  LaunchPlan plan;
  if (rs.cols == 0) return plan;  // every output is empty
  const bool hasWeight = args.weightOptional.has_value();
  const auto tiling = ascend::ComputeRmsNormGradTiling(rs.rows, rs.cols, args.dtype, hasWeight, args.eps, args.soc);
  plan.kernelWorkspaceBytes = ascend::RmsNormGradWorkspaceBytes(tiling);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* xd = args.input.data;
  uint8_t* wd = DataOf(args.weightOptional);
  uint8_t* dxd = args.gradInputOut.data;
  uint8_t* dwd = DataOf(args.gradWeightOut);
  AddNormGradLaunches(plan, tiling, hasWeight, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(rms_norm_grad_custom, blockDim, stream, dyd, xd, wd, nullptr, dxd, dwd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
