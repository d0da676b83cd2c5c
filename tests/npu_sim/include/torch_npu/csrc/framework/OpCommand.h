// Test stand-in for torch_npu's OpCommand (tests/npu_sim only): the part of it
// the npu glue uses, RunOpApiV2, with torch_npu's default behaviour of a task
// queue. Launches are queued, not run: they run in order when the simulated
// device synchronises (a copy to or from it, any other aten op on it, an
// explicit synchronize), which is later than the glue function that queued
// them returns -- so a launch that read anything the glue freed would fail.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace npu_sim {

inline std::vector<std::function<int()>>& launch_queue() {
  static std::vector<std::function<int()>> queue;
  return queue;
}

// Runs the queued launches in order (defined by the simulated device).
void synchronize();

}  // namespace npu_sim

namespace at_npu::native {

using PROC_FUNC = std::function<int()>;

class OpCommand {
 public:
  static void RunOpApiV2(const std::string& /*op_name*/, const PROC_FUNC& func, bool sync = false) {
    npu_sim::launch_queue().push_back(func);
    if (sync) npu_sim::synchronize();
  }
};

}  // namespace at_npu::native
