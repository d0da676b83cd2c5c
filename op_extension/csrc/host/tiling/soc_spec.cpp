#include "soc_spec.h"

#include <stdexcept>

#include "acl/acl.h"
#ifdef OP_EXT_ASCEND_SIM
#include "ascendc_sim/core.h"
#endif

namespace op_ext::ascend {

const std::vector<SocSpec>& SocTable() {
  static const std::vector<SocSpec> table = {
      {"Ascend910B", 48, 196608, true, true, false, 2201, false,
       "CANN platform config Ascend910B2.ini ([SoCInfo] vector_core_cnt=48, [AICoreSpec] ub_size=196608); "
       "910B3/910B4 have 40 vector cores. DataCopyPad and bfloat16 casts: CANN 8 Ascend C API pages "
       "(Atlas A2). ReduceSum adds repeat partials in order for the first-n form (ReduceSum page). "
       "Overflow mode: inf/NaN by default, saturation selectable (aclrtFloatOverflowMode page)."},
      {"Ascend310P", 8, 262144, false, false, true, 2002, true,
       "CANN platform config Ascend310P3.ini ([SoCInfo] ai_core_cnt=8, [AICoreSpec] ub_size=262144), as quoted "
       "in public CANN-based projects; not checked on hardware here. No DataCopyPad and no bfloat16 on Atlas "
       "inference AI Core (CANN 8 DataCopyPad / Cast pages); ReduceSum adds repeat partials as a binary tree. "
       "Saturation mode only (aclrtFloatOverflowMode page: Atlas inference supports only saturation)."},
  };
  return table;
}

const SocSpec* FindSocSpec(const std::string& socName) {
  for (const auto& s : SocTable()) {
    if (socName.compare(0, s.name.size(), s.name) == 0) return &s;
  }
  return nullptr;
}

SocSpec CurrentSocSpec() {
  const char* name = aclrtGetSocName();
  const SocSpec* known = FindSocSpec(name == nullptr ? "" : name);
  if (known == nullptr) {
    std::string list;
    for (const auto& s : SocTable()) list += (list.empty() ? "" : ", ") + s.name;
    throw std::runtime_error(std::string("op_extension Ascend kernels: unsupported SoC '") +
                             (name == nullptr ? "(null)" : name) + "' (supported: " + list + ")");
  }
  SocSpec spec = *known;
#ifdef OP_EXT_ASCEND_SIM
  // Tests may shrink the simulated device (fewer cores, a smaller UB) to reach
  // many-tile and split-row cases with small inputs.
  const auto& dev = ascendc_sim::Device().spec;
  spec.vectorCoreNum = dev.coreNum;
  spec.ubSize = dev.ubSize;
#endif
  return spec;
}

}  // namespace op_ext::ascend
