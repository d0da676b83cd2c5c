// Host-side state of the simulated ACL runtime (last error message).
#ifndef ASCENDC_SIM_HOST_STATE_H_
#define ASCENDC_SIM_HOST_STATE_H_

#include <string>

namespace ascendc_sim {

struct HostStateData {
  std::string lastError;
};

inline HostStateData &HostState() {
  static thread_local HostStateData state;
  return state;
}

// Calls of the simulated ACL runtime, process-wide, so tests can assert what a
// launch costs (tests/test_ascend_host.py: no pinned allocation and no event
// per launch once warm).
struct RuntimeCountersData {
  uint64_t aclrtMalloc = 0;
  uint64_t aclrtFree = 0;
  uint64_t aclrtMallocHost = 0;
  uint64_t aclrtFreeHost = 0;
  uint64_t aclrtMemcpy = 0;
  uint64_t aclrtMemcpyAsync = 0;
  uint64_t aclrtCreateEvent = 0;
  uint64_t aclrtDestroyEvent = 0;
  uint64_t aclrtRecordEvent = 0;
  uint64_t aclrtSynchronizeEvent = 0;
  uint64_t aclrtSynchronizeStream = 0;
  uint64_t kernelLaunches = 0;
};

inline RuntimeCountersData &RuntimeCounters() {
  static RuntimeCountersData counters;
  return counters;
}

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_HOST_STATE_H_
