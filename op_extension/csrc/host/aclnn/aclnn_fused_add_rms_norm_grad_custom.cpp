// PlanFusedAddRmsNormGradCustom: gradInputOut and (with a weight) gradWeightOut of
// FusedAddRmsNormCustom, whose output is rms_norm(residualOut) and whose residualOut
// = input + residual:
//   gradInputOut  = RMSNorm's input gradient at residualOut (+ gradResidualOutOptional)
//   gradWeightOut = RMSNorm's weight gradient at residualOut
// (the same value is the gradient of both input and residual).
//
// The generated entry has checked one dtype, contiguity, gradInputOut's shape
// and that gradWeightOut comes exactly with weightOptional, in its shape.
// Beyond the prototype: gradOutput and gradResidualOutOptional (or null) have
// residualOut's shape; normalizedShape names its trailing dims, which
// weightOptional has. eps is a number (the caller resolves eps=None).
//
// Runs RmsNormGradCustom's kernel, rms_norm_grad_custom, with hasGradResidual in
// its TilingData (rms_norm_grad_custom_tiling.h): the arithmetic is RMSNorm's
// backward plus one Add before gradInput's rounding, so a kernel of its own would
// duplicate the overflow rescue and the deterministic gradWeight pass.
#include "aclnn_fused_add_rms_norm_grad_custom_args.h"

#include "kernel_launch.h"
#include "rms_norm_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rms_norm_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rms_norm_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight,
                      OP_EXT_GM_ADDR gradResidual, OP_EXT_GM_ADDR gradInput, OP_EXT_GM_ADDR gradWeight,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanFusedAddRmsNormGradCustom(const FusedAddRmsNormGradCustomArgs& args) {
  const char* op = args.kOp;
  const TensorDesc& z = args.residualOut;
  const std::vector<int64_t> shape = NormalizedShape(op, z, args.normalizedShape);
  const RowShape rs = NormRows(op, z, shape);
  if (args.weightOptional) CheckAffine(op, "weightOptional", *args.weightOptional, z, shape);
  if (args.gradResidualOutOptional) {
    CheckSameShape(op, "residualOut", z, "gradResidualOutOptional", *args.gradResidualOutOptional);
  }
  CheckSameShape(op, "residualOut", z, "gradOutput", args.gradOutput);
  LaunchPlan plan;
  if (rs.cols == 0) return plan;  // every output is empty
  const bool hasWeight = args.weightOptional.has_value();
  const auto tiling = ascend::ComputeFusedAddRmsNormGradTiling(
      rs.rows, rs.cols, args.dtype, hasWeight, args.gradResidualOutOptional.has_value(), args.eps, args.soc);
  plan.kernelWorkspaceBytes = ascend::RmsNormGradWorkspaceBytes(tiling);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* zd = z.data;
  uint8_t* wd = DataOf(args.weightOptional);
  uint8_t* grd = DataOf(args.gradResidualOutOptional);
  uint8_t* dxd = args.gradInputOut.data;
  uint8_t* dwd = DataOf(args.gradWeightOut);
  AddNormGradLaunches(plan, tiling, hasWeight, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(rms_norm_grad_custom, blockDim, stream, dyd, zd, wd, grd, dxd, dwd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
