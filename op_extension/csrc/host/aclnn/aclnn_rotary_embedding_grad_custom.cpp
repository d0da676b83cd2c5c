// aclnnRotaryEmbeddingGradCustom: grad_q and grad_k of rotary_embedding from
// grad_q_embed and grad_k_embed (the transposed rotation), one kernel launch per
// tensor. Contract and checks: aclnn_rope_common.h.
#include "aclnn_rotary_embedding_grad_custom.h"

#include "aclnn_common.h"
#include "aclnn_rope_common.h"
#include "kernel_launch.h"
#include "rotary_embedding_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rotary_embedding_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rotary_embedding_grad_custom, OP_EXT_GM_ADDR gradY, OP_EXT_GM_ADDR cos,
                      OP_EXT_GM_ADDR sin, OP_EXT_GM_ADDR gradX, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "RotaryEmbeddingGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnRotaryEmbeddingGradCustomGetWorkspaceSize(
    const aclTensor* grad_q_embed, const aclTensor* grad_k_embed, const aclTensor* cos, const aclTensor* sin,
    int64_t unsqueeze_dim, const aclTensor* grad_qOut, const aclTensor* grad_kOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() -> LaunchPlan {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const RopeTensors r{{"grad_q_embed", "grad_k_embed", "cos", "sin", "grad_qOut", "grad_kOut"},
                        {grad_q_embed, grad_k_embed, cos, sin, grad_qOut, grad_kOut}};
    const RopeArgs a = ReadRopeArgs(kOp, r, unsqueeze_dim, soc);
    return PlanRopeLaunches(
        a,
        [&](const op_ext::ascend::RopeShape& s) {
          return op_ext::ascend::ComputeRotaryEmbeddingGradTiling(s, a.dtype, soc);
        },
        [](uint32_t blockDim, aclrtStream stream, uint8_t* xd, uint8_t* cd, uint8_t* sd, uint8_t* yd, uint8_t* ws,
           uint8_t* td) {
          return OP_EXT_LAUNCH_KERNEL(rotary_embedding_grad_custom, blockDim, stream, xd, cd, sd, yd, ws, td);
        });
  });
}

extern "C" aclnnStatus aclnnRotaryEmbeddingGradCustom(void* workspace, uint64_t workspaceSize,
                                                          aclOpExecutor* executor, aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
