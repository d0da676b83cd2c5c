// PlanRotaryEmbeddingCustom: qEmbedOut = q cos + rotate_half(q) sin and kEmbedOut
// the same for k (Hugging Face's apply_rotary_pos_emb), one kernel launch per
// tensor. Contract and checks: aclnn_rope_common.h.
#include "aclnn_rotary_embedding_custom_args.h"

#include "aclnn_rope_common.h"
#include "kernel_launch.h"
#include "rotary_embedding_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rotary_embedding_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rotary_embedding_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR cos, OP_EXT_GM_ADDR sin,
                      OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanRotaryEmbeddingCustom(const RotaryEmbeddingCustomArgs& args) {
  RopeArgs a{{"q", "k"}, {args.q, args.k}, args.cos, args.sin, {args.qEmbedOut, args.kEmbedOut}, args.dtype, {}};
  CheckRopeShapes(args.kOp, a, args.unsqueezeDim);
  return PlanRopeLaunches(
      a, [&](const ascend::RopeShape& s) { return ascend::ComputeRotaryEmbeddingTiling(s, a.dtype, args.soc); },
      [](uint32_t blockDim, aclrtStream stream, uint8_t* xd, uint8_t* cd, uint8_t* sd, uint8_t* yd, uint8_t* ws,
         uint8_t* td) { return OP_EXT_LAUNCH_KERNEL(rotary_embedding_custom, blockDim, stream, xd, cd, sd, yd, ws, td); });
}

}  // namespace op_ext::aclnn
