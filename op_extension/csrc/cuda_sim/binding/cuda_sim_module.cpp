// op_extension._cuda_sim: the CUDA kernels (kernel/cuda/*.cu, compiled by g++
// with OP_EXT_CUDA_SIM) run on the CPU harness, for CPU tensors.
//
// The ops are the real ones: every op's glue (torch_ext/ops/<op>.h: checks,
// dense inputs, outputs, args structs) with a Kernels type that calls each
// kernel's CUDA launcher (cuda::launcher, kernel/cuda/<op>.cuh, bound at link
// time to the .cu code compiled into this library), registered as
// torch.ops.cuda_sim.<op> with the schemas of torch.ops.custom.<op> (both
// generated from the prototypes). So the sim runs exactly what cuda_ops.cpp runs
// on a GPU; only the memory is the host's. Every output (and workspace) is filled
// with NaN bits before the launch, so an element a kernel forgets to write shows;
// a workspace byte read before a kernel wrote it is reported (initcheck).
#include <torch/extension.h>
#include <torch/library.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>

#include "cuda_sim/runtime.h"
#include "op_ext_cuda_launchers.h"
#include "op_ext_glue.h"
#include "op_ext_schemas.h"

extern "C" void op_ext_cuda_sim_run_misuse_kernel(const char* name);
extern "C" float op_ext_cuda_sim_order_dependent_sum();
extern "C" void op_ext_cuda_sim_cluster_clean(unsigned threads, float* sums, float* totals);

namespace op_ext {
namespace {

// Every CPU allocation made while one of this module's ops runs (its outputs,
// the CUDA launchers' workspaces) is filled with NaN bits first, so an element
// a kernel forgets to write shows in the tests, whatever the op. The module's
// ops run on the CPU, so their allocations come from torch's CPU allocator,
// which this one wraps; outside an op it passes allocations through untouched.
thread_local int poisoning_depth = 0;

class PoisoningAllocator final : public c10::Allocator {
 public:
  explicit PoisoningAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr data = base_->allocate(bytes);
    // All-ones bits: NaN in every floating dtype.
    if (poisoning_depth > 0 && bytes > 0) std::memset(data.get(), 0xff, bytes);
    return data;
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  bool is_simple_data_ptr(const c10::DataPtr& data) const override { return base_->is_simple_data_ptr(data); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

void install_poisoning_allocator() {
  static PoisoningAllocator allocator(c10::GetCPUAllocator());
  // Priority 1: above torch's default CPU allocator (0).
  c10::SetCPUAllocator(&allocator, 1);
}

// Runs each kernel's CUDA launcher (its .cu file compiled here by g++) on the
// harness, with the workspace it asks for.
class SimKernels {
 public:
  explicit SimKernels(const Tensor&) { ++poisoning_depth; }
  ~SimKernels() { --poisoning_depth; }
  SimKernels(const SimKernels&) = delete;
  SimKernels& operator=(const SimKernels&) = delete;

  template <typename Kernel>
  void operator()(const Kernel& kernel, cpu::DType dtype, const typename Kernel::ArgsType& args) const {
    const auto launcher = cuda::launcher(kernel);
    const size_t workspace_bytes = launcher.workspace_bytes(dtype, args);
    const Tensor workspace =
        workspace_bytes > 0 ? at::empty({static_cast<int64_t>(workspace_bytes)}, at::kByte) : Tensor();
    cuda_sim::note_workspace(workspace_bytes);
    void* const scratch = workspace.defined() ? workspace.data_ptr() : nullptr;
    // Only the launcher's kernels write the workspace (as on a GPU, where it is
    // uninitialized device memory): initcheck holds their reads to what they wrote.
    const cuda_sim::TrackedWorkspace tracked(scratch, workspace_bytes);
    launcher(dtype, args, scratch, nullptr);
  }
};

void set_arch(const std::string& arch) {
  if (arch == "sm_80") {
    cuda_sim::set_arch(cuda_sim::Arch::Sm80);
  } else if (arch == "sm_90") {
    cuda_sim::set_arch(cuda_sim::Arch::Sm90);
  } else {
    TORCH_CHECK_VALUE(false, "cuda_sim: arch must be sm_80 or sm_90, got ", arch);
  }
}

void set_block_order(const std::string& order) {
  if (order == "linear") {
    cuda_sim::set_block_order(cuda_sim::BlockOrder::Linear);
  } else if (order == "reverse") {
    cuda_sim::set_block_order(cuda_sim::BlockOrder::Reverse);
  } else {
    TORCH_CHECK_VALUE(false, "cuda_sim: block_order must be linear or reverse, got ", order);
  }
}

}  // namespace

// The same schemas as torch.ops.custom (registration.cpp), in their own namespace.
TORCH_LIBRARY(cuda_sim, m) {
  for (const char* schema : generated::kSchemas) m.def(schema);
}

TORCH_LIBRARY_IMPL(cuda_sim, CPU, m) {
  glue::register_ops<SimKernels>(m);
}

}  // namespace op_ext

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CUDA kernels on the CPU harness; see op_extension.cuda_sim";
  op_ext::install_poisoning_allocator();
  m.def("set_arch", &op_ext::set_arch);
  m.def("set_block_order", &op_ext::set_block_order);
  m.def("launch_count", &cuda_sim::launches, "Kernel launches made on the harness in this process.");
  m.def("uninitialized_bytes_tracked", &cuda_sim::uninitialized_bytes_tracked,
        "Bytes of launcher workspaces registered with the harness's initcheck in this process.");
  m.def("shared_fault_count", &cuda_sim::shared_faults,
        "Shared-memory accesses of kernel threads that bypassed the load/store helpers in this process "
        "(each checked through a page fault).");
  m.def("fiber_switch", &cuda_sim::fiber_switch,
        "How the harness switches between a block's threads: 'stack' or 'ucontext' (OP_EXT_CUDA_SIM_SWITCH).");
  m.def("_traffic_begin", &cuda_sim::traffic_begin, pybind11::arg("launches_only") = false);
  m.def("_traffic_end", [] {
    const cuda_sim::TrafficCounts c = cuda_sim::traffic_end();
    pybind11::dict counts;
    counts["launches"] = c.launches;
    counts["bytes_read"] = c.bytes_read;
    counts["bytes_written"] = c.bytes_written;
    counts["requested_bytes"] = c.requested_bytes;
    counts["sector_bytes"] = c.sector_bytes;
    counts["workspace_bytes"] = c.workspace_bytes;
    counts["shared_wavefronts"] = c.shared_wavefronts;
    counts["shared_ideal_wavefronts"] = c.shared_ideal_wavefronts;
    pybind11::list per_launch;
    for (const cuda_sim::LaunchTraffic& l : c.per_launch) {
      per_launch.append(pybind11::make_tuple(l.kernel, l.cluster_blocks, l.bytes_read, l.bytes_written,
                                             pybind11::make_tuple(l.grid.x, l.grid.y, l.grid.z),
                                             pybind11::make_tuple(l.block.x, l.block.y, l.block.z),
                                             l.dynamic_shared_bytes));
    }
    counts["per_launch"] = per_launch;
    return counts;
  });
  // The address of one kernel stub as this library's code sees it: differs from
  // _C's unless the dynamic linker merged the two (tests/test_library_isolation.py).
  m.def("_kernel_stub_address", [] { return reinterpret_cast<uintptr_t>(&op_ext::cpu::rms_norm_forward); });
  m.def("_run_misuse", &op_ext_cuda_sim_run_misuse_kernel);
  m.def("_order_dependent_sum", &op_ext_cuda_sim_order_dependent_sum);
  // The planted clean cluster kernel's outputs: per-thread sums (8 blocks of
  // `threads`) and per-block totals.
  m.def("_cluster_clean", [](unsigned threads) {
    std::vector<float> sums(8 * static_cast<size_t>(threads)), totals(8);
    op_ext_cuda_sim_cluster_clean(threads, sums.data(), totals.data());
    return pybind11::make_tuple(sums, totals);
  });
}
