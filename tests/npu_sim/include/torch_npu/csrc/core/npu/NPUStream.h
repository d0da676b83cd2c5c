// Test stand-in for torch_npu's NPUStream.h (tests/npu_sim only): one device,
// whose one stream is the Ascend C simulator's (it runs everything at once).
#pragma once

#include <c10/core/Device.h>

#include "acl/acl_base.h"

namespace c10_npu {

class NPUStream {
 public:
  aclrtStream stream(bool /*need_empty*/) const { return nullptr; }
};

inline NPUStream getCurrentNPUStream(c10::DeviceIndex /*device_index*/ = -1) { return {}; }

}  // namespace c10_npu
