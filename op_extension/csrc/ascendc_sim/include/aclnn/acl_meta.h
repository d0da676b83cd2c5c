// aclnn meta types and the tensor / int-array API (subset of CANN 8's
// aclnn/acl_meta.h) for the op_extension Ascend C simulator. Signatures and
// status codes are CANN's; a tensor's storage is registered as simulated GM so
// kernels may only touch memory that was handed to them.
#ifndef ASCENDC_SIM_ACLNN_ACL_META_H_
#define ASCENDC_SIM_ACLNN_ACL_META_H_

#include <cstdint>
#include <vector>

#include "acl/acl_base.h"
#include "ascendc_sim/core.h"

typedef int32_t aclnnStatus;

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000

// Opaque on CANN. Here: the view (shape, strides, offset in elements) over a
// storage of storageDims elements starting at `storage`.
struct aclTensor {
  std::vector<int64_t> viewDims;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  aclDataType dataType = ACL_DT_UNDEFINED;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> storageDims;
  void *storage = nullptr;
};

// Opaque on CANN (a class of the internal opdev/common_types.h). Here it has no
// accessors, so host code can only use the public functions below, as a
// custom-op build against CANN's aclnn/acl_meta.h must.
struct aclIntArray {
  std::vector<int64_t> simValues;
};

// Created by each op's first-phase call, consumed by its second phase.
struct aclOpExecutor;

namespace ascendc_sim {

inline uint64_t DataTypeBytes(aclDataType t) {
  switch (t) {
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
      return 4;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
      return 2;
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
      return 1;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
    case ACL_COMPLEX64:
      return 8;
    case ACL_COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace ascendc_sim

#ifdef __cplusplus
extern "C" {
#endif

inline aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                  const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
                                  uint64_t storageDimsNum, void *tensorData) {
  if ((viewDimsNum > 0 && (viewDims == nullptr || stride == nullptr)) || offset < 0 ||
      (storageDimsNum > 0 && storageDims == nullptr)) {
    return nullptr;
  }
  auto *t = new aclTensor;
  t->viewDims.assign(viewDims, viewDims + viewDimsNum);
  t->strides.assign(stride, stride + viewDimsNum);
  t->offset = offset;
  t->dataType = dataType;
  t->format = format;
  t->storageDims.assign(storageDims, storageDims + storageDimsNum);
  t->storage = tensorData;
  uint64_t elements = 1;
  for (int64_t d : t->storageDims) elements *= uint64_t(d < 0 ? 0 : d);
  const uint64_t bytes = elements * ascendc_sim::DataTypeBytes(dataType);
  try {
    ascendc_sim::RegisterGm(tensorData, bytes, "tensor storage");
  } catch (const ascendc_sim::SimError &e) {
    ascendc_sim::HostState().lastError = e.what();
    delete t;
    return nullptr;
  }
  return t;
}

inline aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
  if (tensor == nullptr) return ACLNN_SUCCESS;
  ascendc_sim::UnregisterGm(tensor->storage);
  delete tensor;
  return ACLNN_SUCCESS;
}

inline aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  auto *a = new aclIntArray;
  a->simValues.assign(value, value + size);
  return a;
}

inline aclnnStatus aclDestroyIntArray(const aclIntArray *array) {
  delete array;
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetIntArraySize(const aclIntArray *array, uint64_t *size) {
  if (array == nullptr || size == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *size = array->simValues.size();
  return ACLNN_SUCCESS;
}

// The caller frees *viewDims / *stridesValue with delete[].
inline aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum) {
  if (tensor == nullptr || viewDims == nullptr || viewDimsNum == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *viewDimsNum = tensor->viewDims.size();
  *viewDims = new int64_t[tensor->viewDims.size() + 1];
  for (size_t i = 0; i < tensor->viewDims.size(); ++i) (*viewDims)[i] = tensor->viewDims[i];
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue, uint64_t *stridesNum) {
  if (tensor == nullptr || stridesValue == nullptr || stridesNum == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *stridesNum = tensor->strides.size();
  *stridesValue = new int64_t[tensor->strides.size() + 1];
  for (size_t i = 0; i < tensor->strides.size(); ++i) (*stridesValue)[i] = tensor->strides[i];
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset) {
  if (tensor == nullptr || offset == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *offset = tensor->offset;
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType) {
  if (tensor == nullptr || dataType == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *dataType = tensor->dataType;
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format) {
  if (tensor == nullptr || format == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *format = tensor->format;
  return ACLNN_SUCCESS;
}

inline aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr) {
  if (tensor == nullptr || addr == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *addr = tensor->storage;
  return ACLNN_SUCCESS;
}

#ifdef __cplusplus
}
#endif

#endif  // ASCENDC_SIM_ACLNN_ACL_META_H_
