// The Ascend SoCs the tiling functions know: how many vector cores a kernel is
// spread over, how big each core's Unified Buffer is, and which instructions
// the kernels may use there.
#ifndef OP_EXT_HOST_TILING_SOC_SPEC_H_
#define OP_EXT_HOST_TILING_SOC_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace op_ext::ascend {

struct SocSpec {
  std::string name;            // short SoC version, as in CANN's platform config ("Ascend910B")
  uint32_t vectorCoreNum = 0;  // cores a vector kernel runs on (blockDim limit used by the tilings)
  uint32_t ubSize = 0;         // Unified Buffer bytes per core
  bool hasDataCopyPad = false; // unaligned GM<->UB copies (DataCopyPad)
  bool hasBfloat16 = false;    // bfloat16_t moves and casts
  bool reduceSumTree = false;  // ReduceSum adds repeat partials as a tree (else in order)
  uint32_t npuArch = 0;        // __NPU_ARCH__ of its AI core: 2201 (dav_c220), 2002 (dav_m200)
  bool saturationOnly = false; // float16 results saturate (inf -> +-max, NaN -> 0); no inf/NaN mode
  std::string source;          // where the figures come from
};

// The built-in table (Ascend910B, Ascend310P).
const std::vector<SocSpec>& SocTable();

// The table entry whose name is a prefix of `socName` ("Ascend910B2" -> Ascend910B),
// or nullptr.
const SocSpec* FindSocSpec(const std::string& socName);

// The SoC the current process runs on: aclrtGetSocName() looked up in the table
// (on the simulator: the simulated device, including test overrides of the core
// count and UB size). Throws std::runtime_error for an unknown SoC.
SocSpec CurrentSocSpec();

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_SOC_SPEC_H_
