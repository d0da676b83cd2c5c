// Running a kernel on the simulator: the body is executed once per core, in
// core order, each time with GetBlockIdx()/GetBlockNum() set and a fresh
// Unified Buffer of the SoC's size whose bytes start out as NaN patterns.
#ifndef ASCENDC_SIM_LAUNCH_H_
#define ASCENDC_SIM_LAUNCH_H_

#include <cstdint>
#include <exception>
#include <string>

#include "acl/acl_base.h"
#include "ascendc_sim/core.h"
#include "ascendc_sim/host_state.h"
#include "ascendc_sim/tensor.h"

namespace ascendc_sim {

// Returns ACL_SUCCESS, or ACL_ERROR_FAILURE with the message in
// aclGetRecentErrMsg(): a simulator check that failed, a scalar GM store left
// dirty in a core's data cache (never written back, so never applied to GM), a
// SetFlag left without its WaitFlag, or a resource the kernel left allocated on
// some core. The lines each core's data cache still holds are carried into the
// launches after it (core.h, DcacheCarryOver).
template <typename Body>
inline aclError LaunchKernel(const char* kernelName, uint32_t blockDim, Body&& body) {
  auto& dev = Device();
  auto fail = [&](const std::string& message) {
    HostState().lastError = Str("kernel ", kernelName, " (blockDim ", blockDim, "): ", message);
    dev.core = nullptr;
    ClearCarriedDcache();  // later kernels start from a clean device, not from this one's half-run state
    return ACL_ERROR_FAILURE;
  };
  if (dev.core != nullptr) return fail("launched from inside another kernel");
  if (blockDim == 0 || blockDim > 65535) return fail("blockDim must be in [1, 65535]");
  ++RuntimeCounters().kernelLaunches;
  ++dev.launches;
  dev.launchKernels.emplace_back(kernelName);
  ResetGmWriters();
  for (uint32_t i = 0; i < blockDim; ++i) {
    CoreState core;
    core.blockIdx = i;
    core.blockNum = blockDim;
    core.launch = dev.launches;
    // Where the runtime places a block is not documented: the simulator puts
    // block i on core i mod coreNum for the lines it carries over, and a later
    // block meets the lines of every core (DcacheFill), wherever it runs.
    core.physicalCore = dev.spec.coreNum == 0 ? i : i % dev.spec.coreNum;
    core.ub.assign(dev.spec.ubSize, kGarbageByte);
    AscendC::detail::QueueCounter() = 0;
    dev.core = &core;
    try {
      body();
    } catch (const SimError& e) {
      return fail(e.what());
    } catch (const std::exception& e) {
      return fail(Str("core ", i, ": ", e.what()));
    }
    // Stores still dirty in the data cache never reach GM: reported, not applied.
    const std::string lost = DcacheLostWrites(core);
    if (!lost.empty()) return fail(Str(CoreTag(), lost));
    // A SetFlag never waited for breaks the flag pairs the next kernel on the core relies on.
    const std::string flags = PendingFlags(core);
    if (!flags.empty()) return fail(Str(CoreTag(), flags));
    if (!core.leaks.empty()) {
      std::string all = core.leaks[0];
      for (size_t k = 1; k < core.leaks.size(); ++k) all += "; " + core.leaks[k];
      return fail(Str(CoreTag(), all));
    }
    DcacheCarryOver(core);
    dev.core = nullptr;
  }
  return ACL_SUCCESS;
}

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_LAUNCH_H_
