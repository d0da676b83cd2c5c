// Test stand-in for torch_npu's NPUFormat.h (tests/npu_sim only): the simulated
// device stores every tensor in the plain ND format.
#pragma once

#include <ATen/core/Tensor.h>

#include "acl/acl_base.h"

// The simulator's acl_base.h lists fewer formats than CANN's; the glue names
// these two, which a tensor here never has.
#ifndef ACL_FORMAT_NCL
#define ACL_FORMAT_NCL static_cast<aclFormat>(47)
#endif
#ifndef ACL_FORMAT_NCDHW
#define ACL_FORMAT_NCDHW static_cast<aclFormat>(30)
#endif

namespace at_npu::native {

inline int64_t get_npu_format(const at::Tensor& /*self*/) { return ACL_FORMAT_ND; }

inline at::Tensor npu_format_cast(const at::Tensor& self, int64_t /*acl_format*/) { return self; }

}  // namespace at_npu::native
