// aclnn entry points of the LayerNormGradCustom Ascend custom operator, in the two-phase form CANN
// generates for custom operator packages: inputs, then attributes, then outputs, then
// the workspace size and executor. Optional inputs carry the `Optional` suffix; several
// outputs are `<name>Out`. The first phase checks the arguments, runs the tiling function
// and sizes the workspace; the second launches the kernel on `stream`.
// gradWeightOut is nullptr exactly when weightOptional is, gradBiasOut exactly when
// biasOptional is (the kernel reads no bias: it only says that gradBiasOut is wanted).
#ifndef OP_EXT_ACLNN_LAYER_NORM_GRAD_CUSTOM_H_
#define OP_EXT_ACLNN_LAYER_NORM_GRAD_CUSTOM_H_

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

aclnnStatus aclnnLayerNormGradCustomGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *input, const aclTensor *weightOptional,
    const aclTensor *biasOptional, const aclIntArray *normalizedShape, double eps, const aclTensor *gradInputOut,
    const aclTensor *gradWeightOut, const aclTensor *gradBiasOut, uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnLayerNormGradCustom(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                     aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_ACLNN_LAYER_NORM_GRAD_CUSTOM_H_
