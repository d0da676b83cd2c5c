// aclnn entry points of the SoftmaxGradCustom Ascend custom operator, in the two-phase form CANN
// generates for custom operator packages: inputs, then attributes, then outputs, then
// the workspace size and executor. Optional inputs carry the `Optional` suffix; a single
// output is `out`, several are `<name>Out`. The first phase checks the arguments, runs
// the tiling function and sizes the workspace; the second launches the kernel on `stream`.
#ifndef OP_EXT_ACLNN_SOFTMAX_GRAD_CUSTOM_H_
#define OP_EXT_ACLNN_SOFTMAX_GRAD_CUSTOM_H_

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

aclnnStatus aclnnSoftmaxGradCustomGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *output, int64_t dim, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnSoftmaxGradCustom(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_ACLNN_SOFTMAX_GRAD_CUSTOM_H_
