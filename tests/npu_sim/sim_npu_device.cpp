// A PrivateUse1 device for tests (tests/npu_sim only), so that the real npu
// glue (csrc/torch_ext/npu/*.cpp) runs on a machine without an NPU: its memory
// is the Ascend C simulator's device memory (aclrtMalloc: host memory the
// simulator tracks as GM), its launches go through the simulator's aclnn entry
// points, tilings and kernels. Like PyTorch's OpenReg test backend: a few
// kernels that create tensors and views, copies, and a CPU fallback for every
// other aten op.
//
// What it keeps of a real device: launches are queued (see OpCommand.h) and run
// at the next synchronisation, and memory freed while launches are queued is
// released only after they have run, as torch_npu's caching allocator never
// hands a block to work that could run before the work already queued.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "acl/acl_rt.h"
#include "soc_spec.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace npu_sim {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

std::vector<void*>& frees_after_queue() {
  static std::vector<void*> pending;
  return pending;
}

void release(void* ptr) {
  if (ptr == nullptr) return;
  if (launch_queue().empty()) {
    aclrtFree(ptr);
  } else {
    frees_after_queue().push_back(ptr);
  }
}

struct SimAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = nullptr;
    if (bytes > 0) {
      TORCH_CHECK(aclrtMalloc(&ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS,
                  "npu_sim: aclrtMalloc of ", bytes, " bytes failed");
    }
    return {ptr, ptr, &release, c10::Device(kNpu, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

SimAllocator allocator;

// One device, one stream, everything synchronous but the launch queue.
struct SimGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device) const override { return {kNpu, 0}; }
  c10::Device getDevice() const override { return {kNpu, 0}; }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.index() <= 0, "npu_sim: only npu:0 exists");
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const override {
    return c10::Stream(c10::Stream::DEFAULT, {kNpu, 0});
  }
  c10::Stream exchangeStream(c10::Stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, {kNpu, 0});
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeStream(const c10::Stream&) const override { synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { synchronize(); }
};

// What autograd's engine asks the device (it runs npu backward work on a thread
// of its own for the device).
struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  at::Device getDeviceFromPtr(void*) const override { return {kNpu, 0}; }
};

// A CPU tensor over the same memory as `t` (device memory is host memory here).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), [](void*) {},
                       t.options().device(at::kCPU));
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device>,
                               std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  synchronize();
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "npu_sim: resizing copies are not simulated");
  return copy_from(self, dst, false);
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  synchronize();
  at::native::cpu_fallback(op, stack);
}

// Makes the simulated device the SoC `name` of the tilings' table, as
// op_extension.ascend_sim.run(..., soc=name) does for its own copy of the simulator.
void use_soc(const std::string& name) {
  const op_ext::ascend::SocSpec* spec = op_ext::ascend::FindSimulatedSoc(name);
  TORCH_CHECK(spec != nullptr, "npu_sim: unknown SoC ", name);
  auto& device = ascendc_sim::Device().spec;
  device.socName = spec->socVersion;
  device.coreNum = spec->vectorCoreNum;
  device.ubSize = spec->ubSize;
  device.hasDataCopyPad = spec->hasDataCopyPad;
  device.hasBfloat16 = spec->hasBfloat16;
  device.reduceOrder = spec->reduceSumTree ? ascendc_sim::ReduceOrder::kRepeatsBinaryTree
                                           : ascendc_sim::ReduceOrder::kRepeatsSequential;
}

}  // namespace

void synchronize() {
  // A launch may queue nothing further, but take the queue first anyway.
  std::vector<std::function<int()>> launches;
  launches.swap(launch_queue());
  for (const auto& launch : launches) launch();
  launches.clear();  // the launches own the glue's aclTensors: destroy them now
  for (void* ptr : frees_after_queue()) aclrtFree(ptr);
  frees_after_queue().clear();
}

}  // namespace npu_sim

C10_REGISTER_GUARD_IMPL(PrivateUse1, npu_sim::SimGuard);
static const bool npu_sim_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new npu_sim::SimHooks());
  return true;
}();
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &npu_sim::allocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &npu_sim::empty_memory_format);
  m.impl("empty_strided", &npu_sim::empty_strided);
  m.impl("as_strided", &npu_sim::as_strided);
  m.impl("view", &npu_sim::view);
  m.impl("_copy_from", &npu_sim::copy_from);
  m.impl("_copy_from_and_resize", &npu_sim::copy_from_and_resize);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&npu_sim::fallback>());
}

// torch.ops.npu_sim.synchronize(): run what is queued; queued_launches(): how many are;
// use_soc("Ascend310P"): which SoC the simulated device is; soc_name(): which it is now.
TORCH_LIBRARY(npu_sim, m) {
  m.def("synchronize() -> ()", [] { npu_sim::synchronize(); });
  m.def("queued_launches() -> int", [] { return static_cast<int64_t>(npu_sim::launch_queue().size()); });
  m.def("use_soc(str name) -> ()", [](c10::string_view name) { npu_sim::use_soc(std::string(name)); });
  // What torch.npu.get_device_name() answers on a real NPU: the SoC's name.
  m.def("soc_name() -> str", [] { return std::string(aclrtGetSocName()); });
}
