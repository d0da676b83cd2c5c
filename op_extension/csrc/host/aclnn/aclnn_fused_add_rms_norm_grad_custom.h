// aclnn entry points of the FusedAddRmsNormGradCustom Ascend custom operator, in the two-phase form CANN
// generates for custom operator packages: inputs, then attributes, then outputs, then
// the workspace size and executor. Optional inputs carry the `Optional` suffix; several
// outputs are `<name>Out`. The first phase checks the arguments, runs the tiling function
// and sizes the workspace; the second launches the kernel on `stream`.
// gradWeightOut is nullptr exactly when weightOptional is nullptr.
#ifndef OP_EXT_ACLNN_FUSED_ADD_RMS_NORM_GRAD_CUSTOM_H_
#define OP_EXT_ACLNN_FUSED_ADD_RMS_NORM_GRAD_CUSTOM_H_

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

aclnnStatus aclnnFusedAddRmsNormGradCustomGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *gradResidualOutOptional, const aclTensor *residualOut,
    const aclTensor *weightOptional, const aclIntArray *normalizedShape, double eps, const aclTensor *gradInputOut,
    const aclTensor *gradWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnFusedAddRmsNormGradCustom(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_ACLNN_FUSED_ADD_RMS_NORM_GRAD_CUSTOM_H_
