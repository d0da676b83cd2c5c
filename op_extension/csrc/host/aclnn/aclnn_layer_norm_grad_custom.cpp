// PlanLayerNormGradCustom: gradInputOut and (with a weight) gradWeightOut and (with a
// bias) gradBiasOut of LayerNormCustom.
//
// The generated entry has checked one dtype, contiguity, gradInputOut's shape
// and that gradWeightOut / gradBiasOut come exactly with weightOptional /
// biasOptional, in their shapes. Beyond the prototype: gradOutput has input's
// shape; normalizedShape names input's trailing dims, which the parameters
// have. Launches layer_norm_grad_custom once (rows), then, with a weight or a
// bias, again (columns: see layer_norm_grad_custom_tiling.h); the workspace
// carries the rows' statistics from the first launch to the second.
#include "aclnn_layer_norm_grad_custom_args.h"

#include "kernel_launch.h"
#include "layer_norm_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_layer_norm_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(layer_norm_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight,
                      OP_EXT_GM_ADDR gradInput, OP_EXT_GM_ADDR gradWeight, OP_EXT_GM_ADDR gradBias,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanLayerNormGradCustom(const LayerNormGradCustomArgs& args) {
  const char* op = args.kOp;
  const std::vector<int64_t> shape = NormalizedShape(op, args.input, args.normalizedShape);
  const RowShape rs = NormRows(op, args.input, shape);
  if (args.weightOptional) CheckAffine(op, "weightOptional", *args.weightOptional, args.input, shape);
  if (args.biasOptional) CheckAffine(op, "biasOptional", *args.biasOptional, args.input, shape);
  CheckSameShape(op, "input", args.input, "gradOutput", args.gradOutput);
  LaunchPlan plan;
  if (rs.cols == 0) return plan;  // every output is empty
  const bool hasWeight = args.weightOptional.has_value();
  const bool hasBias = args.biasOptional.has_value();
  const auto tiling =
      ascend::ComputeLayerNormGradTiling(rs.rows, rs.cols, args.dtype, hasWeight, hasBias, args.eps, args.soc);
  plan.kernelWorkspaceBytes = ascend::LayerNormGradWorkspaceBytes(tiling);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* xd = args.input.data;
  uint8_t* wd = DataOf(args.weightOptional);
  uint8_t* dxd = args.gradInputOut.data;
  uint8_t* dwd = DataOf(args.gradWeightOut);
  uint8_t* dbd = DataOf(args.gradBiasOut);
  AddNormGradLaunches(plan, tiling, hasWeight || hasBias,
                      [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
                        return OP_EXT_LAUNCH_KERNEL(layer_norm_grad_custom, blockDim, stream, dyd, xd, wd, dxd, dwd,
                                                    dbd, ws, td);
                      });
  return plan;
}

}  // namespace op_ext::aclnn
