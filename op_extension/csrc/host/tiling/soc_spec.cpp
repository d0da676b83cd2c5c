#include "soc_spec.h"

#include <stdexcept>

#include "acl/acl.h"
#ifdef OP_EXT_ASCEND_SIM
#include "ascendc_sim/core.h"
#else
#include "tiling/platform/platform_ascendc.h"
#endif

namespace op_ext::ascend {

namespace {

// Figures per SoC version: [SoCInfo] vector_core_cnt (ai_core_cnt on 310P, whose
// vector kernels run on the AI Cores) and [AICoreSpec] ub_size of CANN's
// platform config <arch>-linux/data/platform_config/<SoC>.ini. Unless said
// otherwise, as shipped in CANN 8.1.RC1 (mirrored publicly in the GitHub
// repository leideng/CANN-8.1.RC1, Ascend/ascend-toolkit/8.1.RC1/aarch64-linux/
// data/platform_config/). A SoC version not listed is refused rather than
// guessed: its .ini gives the two figures to add.
constexpr const char* kCann81 = "CANN 8.1.RC1 platform_config/";

// Atlas A2 (Short_SoC_version Ascend910B) and A3 (Ascend910_93) share the
// AI Core generation (dav-c220): DataCopyPad and bfloat16 casts per the CANN 8
// Ascend C API pages; ReduceSum adds repeat partials in order for the first-n
// form (ReduceSum page). Overflow mode: inf/NaN by default, saturation
// selectable (aclrtFloatOverflowMode page).
SocSpec A2A3(const char* family, const char* socVersion, uint32_t vectorCores, const std::string& source) {
  return {family, socVersion, vectorCores, 196608, true, true, false, 2201, false, source};
}
// Atlas inference AI Core (Short_SoC_version Ascend310P): no DataCopyPad and no
// bfloat16 (CANN 8 DataCopyPad / Cast pages); ReduceSum adds repeat partials as
// a binary tree. Saturation mode only (aclrtFloatOverflowMode page: Atlas
// inference supports only saturation).
SocSpec P310(const char* socVersion, uint32_t aiCores) {
  return {"Ascend310P", socVersion, aiCores, 262144, false, false, true, 2002, true,
          std::string(kCann81) + socVersion + ".ini: ai_core_cnt=" + std::to_string(aiCores) +
              ", ub_size=262144 (its vector_core_cnt counts the separate Vector Cores, not used)"};
}
std::string Ini(const char* socVersion, uint32_t aiCores, uint32_t vectorCores) {
  return std::string(kCann81) + socVersion + ".ini: ai_core_cnt=" + std::to_string(aiCores) +
         ", vector_core_cnt=" + std::to_string(vectorCores) + ", ub_size=196608";
}

// The SoC version the simulator runs for a short SoC version: the figures the
// tests were written against (48 cores; 8 cores and the 256 KiB UB).
const char* SimulatedDefault(const std::string& family) {
  if (family == "Ascend910B") return "Ascend910B2";
  if (family == "Ascend910_93") return "Ascend910_9391";
  if (family == "Ascend310P") return "Ascend310P3";
  return nullptr;
}

}  // namespace

const std::vector<SocSpec>& SocTable() {
  static const std::vector<SocSpec> table = {
      A2A3("Ascend910B", "Ascend910B1", 48, Ini("Ascend910B1", 24, 48)),
      A2A3("Ascend910B", "Ascend910B2", 48, Ini("Ascend910B2", 24, 48)),
      A2A3("Ascend910B", "Ascend910B2C", 48, Ini("Ascend910B2C", 24, 48)),
      A2A3("Ascend910B", "Ascend910B3", 40, Ini("Ascend910B3", 20, 40)),
      A2A3("Ascend910B", "Ascend910B4", 40, Ini("Ascend910B4", 20, 40)),
      A2A3("Ascend910_93", "Ascend910_9362", 40, Ini("Ascend910_9362", 20, 40)),
      A2A3("Ascend910_93", "Ascend910_9391", 48, Ini("Ascend910_9391", 24, 48)),
      // Not in the 8.1.RC1 mirror: Ascend910_9392.ini's [SoCInfo] / [AICoreSpec]
      // as quoted (ai_core_cnt=24, vector_core_cnt=48, ub_size=196608) in public
      // CANN operator-generation material; to be checked against a CANN install.
      A2A3("Ascend910_93", "Ascend910_9392", 48,
           "Ascend910_9392.ini as quoted in public CANN material (vector_core_cnt=48, ub_size=196608); "
           "not in the CANN 8.1.RC1 mirror"),
      P310("Ascend310P1", 10),
      P310("Ascend310P3", 8),
      P310("Ascend310P5", 8),
      P310("Ascend310P7", 8),
  };
  return table;
}

const SocSpec* FindSocSpec(const std::string& socVersion) {
  for (const auto& s : SocTable()) {
    if (s.socVersion == socVersion) return &s;
  }
  return nullptr;
}

const SocSpec* FindSimulatedSoc(const std::string& name) {
  if (const SocSpec* exact = FindSocSpec(name)) return exact;
  const char* stand_in = SimulatedDefault(name);
  return stand_in == nullptr ? nullptr : FindSocSpec(stand_in);
}

std::string UnsupportedSocMessage(const std::string& socVersion) {
  std::string list;
  for (const auto& s : SocTable()) list += (list.empty() ? "" : ", ") + s.socVersion;
  return "op_extension Ascend kernels: unsupported SoC '" + socVersion + "' (supported: " + list +
         "; a new one needs its vector_core_cnt and ub_size from CANN's platform_config/<SoC>.ini in "
         "host/tiling/soc_spec.cpp)";
}

SocSpec CurrentSocSpec() {
  const char* name = aclrtGetSocName();
  const std::string socVersion = name == nullptr ? "(null)" : name;
  const SocSpec* known = FindSocSpec(socVersion);
  if (known == nullptr) throw std::runtime_error(UnsupportedSocMessage(socVersion));
  SocSpec spec = *known;
#ifdef OP_EXT_ASCEND_SIM
  // Tests may shrink the simulated device (fewer cores, a smaller UB) to reach
  // many-tile and split-row cases with small inputs.
  const auto& dev = ascendc_sim::Device().spec;
  spec.vectorCoreNum = dev.coreNum;
  spec.ubSize = dev.ubSize;
#else
  // The machine's own figures where CANN's platform API has them (it reads the
  // platform config of the SoC it runs on, and knows a core-limited device);
  // the table stays the fallback. Not exercised without CANN.
  if (auto* platform = platform_ascendc::PlatformAscendCManager::GetInstance()) {
    const uint32_t cores = platform->GetCoreNumAiv();
    if (cores > 0) spec.vectorCoreNum = cores;
    uint64_t ub = 0;
    platform->GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);
    if (ub > 0) spec.ubSize = static_cast<uint32_t>(ub);
  }
#endif
  return spec;
}

}  // namespace op_ext::ascend
