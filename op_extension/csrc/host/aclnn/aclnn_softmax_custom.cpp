// PlanSoftmaxCustom: out = softmax(input) along dim.
//
// The generated entry has checked one dtype, contiguity and out's shape.
// Beyond the prototype: input has at least one dim (the caller views a 0-dim
// tensor as [1]); dim is in [-ndim, ndim). Any dim is handled in place -- the
// kernel reads input as [outer, dimSize, inner] (softmax_custom_tiling.h), so
// the caller transposes nothing.
#include "aclnn_softmax_custom_args.h"

#include "kernel_launch.h"
#include "softmax_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_softmax_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(softmax_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanSoftmaxCustom(const SoftmaxCustomArgs& args) {
  const SoftmaxDims dims = SoftmaxDimsOf(args.kOp, "input", args.input, args.dim);
  LaunchPlan plan;
  if (args.input.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeSoftmaxTiling(dims.outer, dims.dimSize, dims.inner, args.dtype, args.soc);
  uint8_t* xd = args.input.data;
  uint8_t* yd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(softmax_custom, blockDim, stream, xd, yd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
