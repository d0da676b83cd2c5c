// PlanAddGradCustom: out = alpha * gradOutput summed over the dims that
// broadcast inputSize to gradOutput's shape (the gradient of one operand of
// AddCustom).
//
// The generated entry has checked one dtype and contiguity. Beyond the
// prototype: out has shape inputSize (read from out: see aclnn_common.h,
// InputSizeFromOut), which broadcasts to gradOutput's shape.
#include "aclnn_add_grad_custom_args.h"

#include "add_grad_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_add_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(add_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR out, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanAddGradCustom(const AddGradCustomArgs& args) {
  const char* op = args.kOp;
  const TensorDesc& g = args.gradOutput;
  const std::vector<int64_t> size = InputSizeFromOut(op, args.inputSize, args.out);
  if (size.size() > g.shape.size()) {
    Invalid(op, "inputSize " + ShapeString(size) + " has more dims than gradOutput " + ShapeString(g.shape));
  }
  const size_t lead = g.shape.size() - size.size();
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] != g.shape[lead + i] && size[i] != 1) {
      Invalid(op, "inputSize " + ShapeString(size) + " does not broadcast to gradOutput " + ShapeString(g.shape));
    }
  }
  LaunchPlan plan;
  if (args.out.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeAddGradTiling(g.shape, size, args.dtype, args.alpha, args.soc);
  uint8_t* gd = g.data;
  uint8_t* od = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(add_grad_custom, blockDim, stream, gd, od, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
