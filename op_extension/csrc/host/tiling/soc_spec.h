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
  // Short SoC version, CANN platform config's Short_SoC_version ("Ascend910B",
  // "Ascend910_93", "Ascend310P"): the instruction set, and the SoC named in
  // messages about what it lacks.
  std::string name;
  // SoC version as aclrtGetSocName() returns it and platform_config/<SoC>.ini is
  // named ("Ascend910B4", "Ascend910_9391").
  std::string socVersion;
  uint32_t vectorCoreNum = 0;  // cores a vector kernel runs on (blockDim limit used by the tilings)
  uint32_t ubSize = 0;         // Unified Buffer bytes per core
  bool hasDataCopyPad = false; // unaligned GM<->UB copies (DataCopyPad)
  bool hasBfloat16 = false;    // bfloat16_t moves and casts
  bool reduceSumTree = false;  // ReduceSum adds repeat partials as a tree (else in order)
  uint32_t npuArch = 0;        // __NPU_ARCH__ of its AI core: 2201 (dav_c220), 2002 (dav_m200)
  bool saturationOnly = false; // float16 results saturate (inf -> +-max, NaN -> 0); no inf/NaN mode
  std::string source;          // where the figures come from
};

// The built-in table, one entry per SoC version.
const std::vector<SocSpec>& SocTable();

// The entry for SoC version `socVersion` (exact name, as aclrtGetSocName()
// returns it), or nullptr.
const SocSpec* FindSocSpec(const std::string& socVersion);

// For the simulator: FindSocSpec, or for a short SoC version ("Ascend910B",
// "Ascend310P") the SoC version the simulator stands in for it (Ascend910B2,
// Ascend310P3), or nullptr.
const SocSpec* FindSimulatedSoc(const std::string& name);

// "op_extension Ascend kernels: unsupported SoC '<name>' (supported: ...)".
std::string UnsupportedSocMessage(const std::string& socVersion);

// The SoC the current process runs on: aclrtGetSocName() looked up in the
// table. With CANN, the vector core count and UB size are then read from the
// platform API (platform_ascendc::PlatformAscendCManager), which knows the
// machine, when it answers; on the simulator they are the simulated device's
// (the table's, or a test's override). Throws std::runtime_error for an
// unknown SoC.
SocSpec CurrentSocSpec();

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_SOC_SPEC_H_
