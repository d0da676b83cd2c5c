// aclnnRotaryEmbeddingCustom: q_embed = q cos + rotate_half(q) sin and k_embed the
// same for k (Hugging Face's apply_rotary_pos_emb), one kernel launch per tensor.
// Contract and checks: aclnn_rope_common.h.
#include "aclnn_rotary_embedding_custom.h"

#include "aclnn_common.h"
#include "aclnn_rope_common.h"
#include "kernel_launch.h"
#include "rotary_embedding_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rotary_embedding_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rotary_embedding_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR cos, OP_EXT_GM_ADDR sin,
                      OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "RotaryEmbeddingCustom";

}  // namespace

extern "C" aclnnStatus aclnnRotaryEmbeddingCustomGetWorkspaceSize(const aclTensor* q, const aclTensor* k,
                                                                  const aclTensor* cos, const aclTensor* sin,
                                                                  int64_t unsqueeze_dim, const aclTensor* q_embedOut,
                                                                  const aclTensor* k_embedOut, uint64_t* workspaceSize,
                                                                  aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() -> LaunchPlan {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const RopeTensors r{{"q", "k", "cos", "sin", "q_embedOut", "k_embedOut"},
                        {q, k, cos, sin, q_embedOut, k_embedOut}};
    const RopeArgs a = ReadRopeArgs(kOp, r, unsqueeze_dim, soc);
    return PlanRopeLaunches(
        a, [&](const op_ext::ascend::RopeShape& s) { return op_ext::ascend::ComputeRotaryEmbeddingTiling(s, a.dtype, soc); },
        [](uint32_t blockDim, aclrtStream stream, uint8_t* xd, uint8_t* cd, uint8_t* sd, uint8_t* yd, uint8_t* ws,
           uint8_t* td) { return OP_EXT_LAUNCH_KERNEL(rotary_embedding_custom, blockDim, stream, xd, cd, sd, yd, ws, td); });
  });
}

extern "C" aclnnStatus aclnnRotaryEmbeddingCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                  aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
