// PlanRotaryEmbeddingGradCustom: gradQOut and gradKOut of rotary_embedding from
// gradQEmbed and gradKEmbed (the transposed rotation), one kernel launch per
// tensor. Contract and checks: aclnn_rope_common.h.
#include "aclnn_rotary_embedding_grad_custom_args.h"

#include "aclnn_rope_common.h"
#include "kernel_launch.h"
#include "rotary_embedding_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rotary_embedding_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rotary_embedding_grad_custom, OP_EXT_GM_ADDR gradY, OP_EXT_GM_ADDR cos,
                      OP_EXT_GM_ADDR sin, OP_EXT_GM_ADDR gradX, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanRotaryEmbeddingGradCustom(const RotaryEmbeddingGradCustomArgs& args) {
  RopeArgs a{{"gradQEmbed", "gradKEmbed"}, {args.gradQEmbed, args.gradKEmbed}, args.cos, args.sin,
             {args.gradQOut, args.gradKOut}, args.dtype, {}};
  CheckRopeShapes(args.kOp, a, args.unsqueezeDim);
  return PlanRopeLaunches(
      a, [&](const ascend::RopeShape& s) { return ascend::ComputeRotaryEmbeddingGradTiling(s, a.dtype, args.soc); },
      [](uint32_t blockDim, aclrtStream stream, uint8_t* xd, uint8_t* cd, uint8_t* sd, uint8_t* yd, uint8_t* ws,
         uint8_t* td) {
        return OP_EXT_LAUNCH_KERNEL(rotary_embedding_grad_custom, blockDim, stream, xd, cd, sd, yd, ws, td);
      });
}

}  // namespace op_ext::aclnn
