// aclnn entry points of the GeGluGradCustom Ascend custom operator, in the two-phase form CANN
// generates for custom operator packages: inputs, then attributes, then outputs, then
// the workspace size and executor. Optional inputs carry the `Optional` suffix; a single
// output is `out`, several are `<name>Out`. The first phase checks the arguments, runs
// the tiling function and sizes the workspace; the second launches the kernel on `stream`.
#ifndef OP_EXT_ACLNN_GEGLU_GRAD_CUSTOM_H_
#define OP_EXT_ACLNN_GEGLU_GRAD_CUSTOM_H_

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

aclnnStatus aclnnGeGluGradCustomGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *gate, const aclTensor *up, char *approximate,
    const aclTensor *gradGateOut, const aclTensor *gradUpOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnGeGluGradCustom(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_ACLNN_GEGLU_GRAD_CUSTOM_H_
