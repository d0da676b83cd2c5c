// PlanFusedAddRmsNormCustom: residualOutOut = input + residual;
// outputOut = rms_norm(residualOutOut) over the trailing normalizedShape dims.
//
// The generated entry has checked one dtype (float16, float32, bfloat16),
// contiguity and the outputs' shapes (input's). Beyond the prototype: residual
// has input's shape; normalizedShape names input's trailing dims, which
// weightOptional (or null) has. eps is a number: the caller resolves eps=None
// (float32's machine epsilon, as rms_norm).
#include "aclnn_fused_add_rms_norm_custom_args.h"

#include "fused_add_rms_norm_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_fused_add_rms_norm_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(fused_add_rms_norm_custom, OP_EXT_GM_ADDR input, OP_EXT_GM_ADDR residual,
                      OP_EXT_GM_ADDR weight, OP_EXT_GM_ADDR output, OP_EXT_GM_ADDR residualOut,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanFusedAddRmsNormCustom(const FusedAddRmsNormCustomArgs& args) {
  const char* op = args.kOp;
  const std::vector<int64_t> shape = NormalizedShape(op, args.input, args.normalizedShape);
  CheckSameShape(op, "input", args.input, "residual", args.residual);
  const RowShape rs = NormRows(op, args.input, shape);
  if (args.weightOptional) CheckAffine(op, "weightOptional", *args.weightOptional, args.input, shape);
  LaunchPlan plan;
  // The tiling runs for empty inputs too: its SoC checks apply to every shape.
  const auto tiling = ascend::ComputeFusedAddRmsNormTiling(rs.rows, rs.cols, args.dtype,
                                                           args.weightOptional.has_value(), args.eps, args.soc);
  if (rs.rows == 0 || rs.cols == 0) return plan;
  uint8_t* xd = args.input.data;
  uint8_t* rd = args.residual.data;
  uint8_t* wd = DataOf(args.weightOptional);
  uint8_t* yd = args.outputOut.data;
  uint8_t* zd = args.residualOutOut.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(fused_add_rms_norm_custom, blockDim, stream, xd, rd, wd, yd, zd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
