// Weak definitions of every aclnn entry point of the contract (tests/npu_sim
// only). Entry points implemented in csrc/host/aclnn/ are strong definitions
// and replace these at link time; the rest fail the way a missing operator
// does, with a message the glue reports, so the npu glue can be linked and run
// before every Ascend kernel exists.
#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnn_add_custom.h"
#include "aclnn_add_grad_custom.h"
#include "aclnn_fused_add_rms_norm_custom.h"
#include "aclnn_fused_add_rms_norm_grad_custom.h"
#include "aclnn_geglu_custom.h"
#include "aclnn_gelu_custom.h"
#include "aclnn_gelu_grad_custom.h"
#include "aclnn_layer_norm_custom.h"
#include "aclnn_layer_norm_grad_custom.h"
#include "aclnn_rms_norm_custom.h"
#include "aclnn_rms_norm_grad_custom.h"
#include "aclnn_softmax_custom.h"
#include "aclnn_swiglu_custom.h"

namespace {

aclnnStatus missing(const char* api) {
  ascendc_sim::HostState().lastError = std::string(api) + " is not implemented in csrc/host/aclnn yet";
  return ACLNN_ERR_INNER;
}

}  // namespace

#define OP_EXT_MISSING_LAUNCH(Op)                                                       \
  extern "C" __attribute__((weak)) aclnnStatus aclnn##Op(void*, uint64_t, aclOpExecutor*, \
                                                         aclrtStream) {                  \
    return missing("aclnn" #Op);                                                        \
  }

extern "C" {

__attribute__((weak)) aclnnStatus aclnnAddCustomGetWorkspaceSize(const aclTensor*, const aclTensor*, double,
                                                                 const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnAddCustom");
}
__attribute__((weak)) aclnnStatus aclnnAddGradCustomGetWorkspaceSize(const aclTensor*, const aclIntArray*, double,
                                                                     const aclTensor*, uint64_t*,
                                                                     aclOpExecutor**) {
  return missing("aclnnAddGradCustom");
}
__attribute__((weak)) aclnnStatus aclnnGeluCustomGetWorkspaceSize(const aclTensor*, char*, const aclTensor*,
                                                                  uint64_t*, aclOpExecutor**) {
  return missing("aclnnGeluCustom");
}
__attribute__((weak)) aclnnStatus aclnnGeluGradCustomGetWorkspaceSize(const aclTensor*, const aclTensor*, char*,
                                                                      const aclTensor*, uint64_t*,
                                                                      aclOpExecutor**) {
  return missing("aclnnGeluGradCustom");
}
__attribute__((weak)) aclnnStatus aclnnSwiGluCustomGetWorkspaceSize(const aclTensor*, const aclTensor*,
                                                                    const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnSwiGluCustom");
}
__attribute__((weak)) aclnnStatus aclnnGeGluCustomGetWorkspaceSize(const aclTensor*, const aclTensor*, char*,
                                                                   const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnGeGluCustom");
}
__attribute__((weak)) aclnnStatus aclnnRmsNormCustomGetWorkspaceSize(const aclTensor*, const aclTensor*,
                                                                     const aclIntArray*, double, const aclTensor*,
                                                                     uint64_t*, aclOpExecutor**) {
  return missing("aclnnRmsNormCustom");
}
__attribute__((weak)) aclnnStatus aclnnRmsNormGradCustomGetWorkspaceSize(const aclTensor*, const aclTensor*,
                                                                         const aclTensor*, const aclIntArray*,
                                                                         double, const aclTensor*,
                                                                         const aclTensor*, uint64_t*,
                                                                         aclOpExecutor**) {
  return missing("aclnnRmsNormGradCustom");
}
__attribute__((weak)) aclnnStatus aclnnFusedAddRmsNormCustomGetWorkspaceSize(
    const aclTensor*, const aclTensor*, const aclTensor*, const aclIntArray*, double, const aclTensor*,
    const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnFusedAddRmsNormCustom");
}
__attribute__((weak)) aclnnStatus aclnnLayerNormCustomGetWorkspaceSize(const aclTensor*, const aclTensor*,
                                                                       const aclTensor*, const aclIntArray*,
                                                                       double, const aclTensor*, uint64_t*,
                                                                       aclOpExecutor**) {
  return missing("aclnnLayerNormCustom");
}
__attribute__((weak)) aclnnStatus aclnnFusedAddRmsNormGradCustomGetWorkspaceSize(
    const aclTensor*, const aclTensor*, const aclTensor*, const aclTensor*, const aclIntArray*, double,
    const aclTensor*, const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnFusedAddRmsNormGradCustom");
}
__attribute__((weak)) aclnnStatus aclnnLayerNormGradCustomGetWorkspaceSize(
    const aclTensor*, const aclTensor*, const aclTensor*, const aclTensor*, const aclIntArray*, double,
    const aclTensor*, const aclTensor*, const aclTensor*, uint64_t*, aclOpExecutor**) {
  return missing("aclnnLayerNormGradCustom");
}
__attribute__((weak)) aclnnStatus aclnnSoftmaxCustomGetWorkspaceSize(const aclTensor*, int64_t, const aclTensor*,
                                                                     uint64_t*, aclOpExecutor**) {
  return missing("aclnnSoftmaxCustom");
}

}  // extern "C"

OP_EXT_MISSING_LAUNCH(AddCustom)
OP_EXT_MISSING_LAUNCH(AddGradCustom)
OP_EXT_MISSING_LAUNCH(GeluCustom)
OP_EXT_MISSING_LAUNCH(GeluGradCustom)
OP_EXT_MISSING_LAUNCH(SwiGluCustom)
OP_EXT_MISSING_LAUNCH(GeGluCustom)
OP_EXT_MISSING_LAUNCH(RmsNormCustom)
OP_EXT_MISSING_LAUNCH(RmsNormGradCustom)
OP_EXT_MISSING_LAUNCH(FusedAddRmsNormCustom)
OP_EXT_MISSING_LAUNCH(FusedAddRmsNormGradCustom)
OP_EXT_MISSING_LAUNCH(LayerNormCustom)
OP_EXT_MISSING_LAUNCH(LayerNormGradCustom)
OP_EXT_MISSING_LAUNCH(SoftmaxCustom)
