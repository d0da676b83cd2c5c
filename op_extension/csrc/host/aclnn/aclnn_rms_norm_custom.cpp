// PlanRmsNormCustom: out = input * rsqrt(mean(input^2) + eps) * weight, the mean
// over the trailing normalizedShape dims.
//
// The generated entry has checked one dtype (float16, float32, bfloat16),
// contiguity and out's shape. Beyond the prototype: normalizedShape names
// input's trailing dims, and weightOptional (or null) has that shape. eps is a
// number: the caller resolves F.rms_norm's eps=None (the machine epsilon of
// float32 for every supported dtype).
#include "aclnn_rms_norm_custom_args.h"

#include "kernel_launch.h"
#include "rms_norm_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rms_norm_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rms_norm_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight, OP_EXT_GM_ADDR y,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanRmsNormCustom(const RmsNormCustomArgs& args) {
  const char* op = args.kOp;
  const std::vector<int64_t> shape = NormalizedShape(op, args.input, args.normalizedShape);
  const RowShape rs = NormRows(op, args.input, shape);
  if (args.weightOptional) CheckAffine(op, "weightOptional", *args.weightOptional, args.input, shape);
  LaunchPlan plan;
  // The tiling runs for empty inputs too: its SoC checks apply to every shape.
  const auto tiling =
      ascend::ComputeRmsNormTiling(rs.rows, rs.cols, args.dtype, args.weightOptional.has_value(), args.eps, args.soc);
  if (rs.rows == 0 || rs.cols == 0) return plan;
  uint8_t* xd = args.input.data;
  uint8_t* wd = DataOf(args.weightOptional);
  uint8_t* yd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(rms_norm_custom, blockDim, stream, xd, wd, yd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
