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

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_HOST_STATE_H_
