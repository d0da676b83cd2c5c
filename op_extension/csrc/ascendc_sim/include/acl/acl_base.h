// Host-side ACL types (subset of CANN's acl/acl_base.h) for the op_extension
// Ascend C simulator. Values are CANN's.
#ifndef ASCENDC_SIM_ACL_ACL_BASE_H_
#define ASCENDC_SIM_ACL_ACL_BASE_H_

#include <cstddef>
#include <cstdint>

#include "ascendc_sim/host_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;

#define ACL_SUCCESS 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_BAD_ALLOC 200000
#define ACL_ERROR_FAILURE 500000

typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_FRACTAL_NZ = 29
} aclFormat;

// Message of the last failed call on this thread ("" when none).
inline const char *aclGetRecentErrMsg() { return ascendc_sim::HostState().lastError.c_str(); }

#ifdef __cplusplus
}
#endif

#endif  // ASCENDC_SIM_ACL_ACL_BASE_H_
