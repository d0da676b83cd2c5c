// Declaration-only stand-in for CANN's aclnn/acl_meta.h, used ONLY by
// scripts/check_npu_glue.sh: the torch_npu wheel ships acl/acl.h but not this
// header, which comes with the CANN toolkit ($ASCEND_HOME_PATH/include). A real
// NPU build compiles against CANN's own copy; nothing here is ever linked.
//
// It declares just what the npu glue and the aclnn_<op>_custom.h contract use,
// with the signatures of CANN 8's header: the opaque handle types, aclnnStatus,
// and create/destroy for tensors and int arrays.
#ifndef OP_EXT_NPU_GLUE_CHECK_ACL_META_H_
#define OP_EXT_NPU_GLUE_CHECK_ACL_META_H_

#include <cstdint>

#include <acl/acl_base.h>  // aclDataType, aclFormat, aclrtStream (shipped in the wheel)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclIntArray aclIntArray;
typedef int32_t aclnnStatus;

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData);
aclnnStatus aclDestroyTensor(const aclTensor* tensor);
aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size);
aclnnStatus aclDestroyIntArray(const aclIntArray* array);

#ifdef __cplusplus
}
#endif

#endif  // OP_EXT_NPU_GLUE_CHECK_ACL_META_H_
