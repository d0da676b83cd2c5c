// op_extension._ascend_sim: runs the Ascend aclnn entry points, tilings and
// Ascend C kernels on the CPU simulator, for CPU tensors.
//
// This file is the only one of the module that knows torch. Each op's entry,
// _ascend_sim.<name>, is generated from its prototype (op_ext_ascend_sim_ops.h,
// op_extension/_cpp_gen.py: generate_ascend_sim_ops) and does what the torch_npu
// glue does around the aclnn call -- and nothing the kernels should do:
//   * every tensor argument is made contiguous and put in simulated device
//     memory (AclTensor);
//   * outputs are allocated NaN-filled (Unwritten) by the prototype's shape
//     rules; the gradient of an optional parameter the op ran without is an
//     empty [0] tensor, passed to aclnn as a null output (ParamGrad);
//   * the arguments go to aclnn<OpType>Custom in CANN's order: inputs, attrs,
//     outputs.
// What an op's glue does beyond that (add materialises a broadcast, softmax
// passes a 0-dim tensor as [1], eps=None is resolved) is done by ascend_sim.py
// with the op module's NPU_GLUE_ARGS and SIMULATOR_ARGS (op_extension/op_defs).
// Then: aclCreateTensor over the CPU memory (the simulator registers it as
// device memory), aclnn<Op>CustomGetWorkspaceSize, a workspace from aclrtMalloc,
// aclnn<Op>Custom. A non-zero status raises RuntimeError with the op's message.
#include <torch/extension.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnn_op_ext_error.h"
#include "ascendc_sim/core.h"
#include "soc_spec.h"
#include "tiling_util.h"

extern "C" aclError op_ext_sim_run_misuse_kernel(const char* name);

namespace {

using at::Tensor;

aclDataType AclDType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ACL_FLOAT;
    case at::kHalf:
      return ACL_FLOAT16;
    case at::kBFloat16:
      return ACL_BF16;
    case at::kDouble:
      return ACL_DOUBLE;
    case at::kInt:
      return ACL_INT32;
    case at::kLong:
      return ACL_INT64;
    case at::kBool:
      return ACL_BOOL;
    default:
      return ACL_DT_UNDEFINED;
  }
}

// An uninitialised tensor in simulated device memory, allocated as torch_npu's
// caching allocator hands out NPU tensors (Ascend/pytorch,
// torch_npu/csrc/core/npu/NPUCachingAllocator.cpp, round_size: the size plus 32
// bytes, rounded up to 512; the block starts 512-byte aligned). The simulator
// lets kernels read only the padding every device allocation has
// (ascendc_sim::AllocatorPadding, round_up(n, 32) + 32 bytes), not the whole
// block. Not through aclrtMalloc: the caching allocator serves tensors from its
// cache, and the runtime counters count only what the aclnn path allocates.
// CPU memory from at::empty has no padding at all, hence this allocator.
Tensor DeviceEmpty(at::IntArrayRef shape, const at::TensorOptions& options) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const uint64_t bytes = uint64_t(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (bytes == 0) return at::empty(shape, options);
  const uint64_t block = (bytes + 32 + 511) / 512 * 512;
  void* p = std::aligned_alloc(512, block);
  TORCH_CHECK(p != nullptr, "ascend_sim: device allocation of ", bytes, " bytes failed");
  std::memset(p, ascendc_sim::kGarbageByte, block);
  ascendc_sim::RegisterGm(p, bytes, "device tensor", ascendc_sim::AllocatorPadding(bytes));
  return at::from_blob(p, shape, [](void* q) {
    ascendc_sim::UnregisterGm(q);
    std::free(q);
  }, options);
}

// aclTensor over a tensor's storage, destroyed with the holder. A tensor not in
// device memory (an input) is first copied there, as torch_npu inputs live there.
class AclTensor {
 public:
  explicit AclTensor(const std::optional<Tensor>& t) {
    if (!t.has_value() || !t->defined()) return;
    TORCH_CHECK(t->device().is_cpu(), "ascend_sim: tensors must be on the CPU, got ", t->device());
    Tensor d = *t;
    if (d.numel() > 0 && !ascendc_sim::InPaddedAllocation(d.storage().data(), d.storage().nbytes())) {
      TORCH_CHECK(d.is_contiguous(), "ascend_sim: inputs are made contiguous before they reach aclnn");
      device_ = DeviceEmpty(d.sizes(), d.options());
      device_.copy_(d);
      d = device_;
    }
    const auto sizes = d.sizes().vec();
    const auto strides = d.strides().vec();
    const int64_t item = d.element_size();
    const std::vector<int64_t> storageDims = {int64_t(d.storage().nbytes()) / item};
    tensor_ = aclCreateTensor(sizes.data(), sizes.size(), AclDType(d.scalar_type()), strides.data(),
                              d.storage_offset(), ACL_FORMAT_ND, storageDims.data(), storageDims.size(),
                              d.storage().mutable_data());
    TORCH_CHECK(tensor_ != nullptr, "ascend_sim: aclCreateTensor failed: ", aclGetRecentErrMsg());
  }
  AclTensor(const AclTensor&) = delete;
  AclTensor& operator=(const AclTensor&) = delete;
  ~AclTensor() { aclDestroyTensor(tensor_); }
  const aclTensor* get() const { return tensor_; }

 private:
  Tensor device_;  // the device copy of an input
  aclTensor* tensor_ = nullptr;
};

class AclIntArray {
 public:
  explicit AclIntArray(const std::vector<int64_t>& v) : array_(aclCreateIntArray(v.data(), v.size())) {}
  AclIntArray(const AclIntArray&) = delete;
  AclIntArray& operator=(const AclIntArray&) = delete;
  ~AclIntArray() { aclDestroyIntArray(array_); }
  const aclIntArray* get() const { return array_; }

 private:
  aclIntArray* array_;
};

[[noreturn]] void RaiseStatus(aclnnStatus status) {
  const std::string message = aclnnOpExtGetLastErrorMessage();
  throw std::runtime_error(message.empty() ? "aclnn call failed with status " + std::to_string(status)
                                           : message);
}

// The two aclnn phases with a workspace from the (simulated) device allocator.
template <typename Prepare, typename Run>
void CallAclnn(Prepare prepare, Run run) {
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus status = prepare(&workspaceSize, &executor);
  if (status != ACLNN_SUCCESS) RaiseStatus(status);
  void* workspace = nullptr;
  if (workspaceSize > 0) {
    TORCH_CHECK(aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS,
                "ascend_sim: workspace allocation of ", workspaceSize, " bytes failed");
  }
  status = run(workspace, workspaceSize, executor);
  if (workspace != nullptr) aclrtFree(workspace);
  if (status != ACLNN_SUCCESS) RaiseStatus(status);
}

void Configure(const std::string& soc, std::optional<int64_t> ubSize, std::optional<int64_t> coreNum,
               std::optional<std::string> satMode) {
  // A SoC version of the table, or a short SoC version for the one the simulator stands in for it.
  const op_ext::ascend::SocSpec* spec = op_ext::ascend::FindSimulatedSoc(soc);
  if (spec == nullptr) {
    std::string names = "Ascend910B, Ascend910_93, Ascend310P";
    for (const auto& s : op_ext::ascend::SocTable()) names += ", " + s.socVersion;
    throw std::invalid_argument("ascend_sim: unknown soc '" + soc + "' (known: " + names + ")");
  }
  auto& dev = ascendc_sim::Device().spec;
  const ascendc_sim::DeviceSpec before = dev;
  dev.socName = spec->socVersion;
  dev.coreNum = spec->vectorCoreNum;
  dev.ubSize = spec->ubSize;
  dev.hasDataCopyPad = spec->hasDataCopyPad;
  dev.hasBfloat16 = spec->hasBfloat16;
  dev.reduceOrder = spec->reduceSumTree ? ascendc_sim::ReduceOrder::kRepeatsBinaryTree
                                        : ascendc_sim::ReduceOrder::kRepeatsSequential;
  dev.npuArch = spec->npuArch;
  dev.saturationOnly = spec->saturationOnly;
  dev.saturation = spec->saturationOnly;  // the SoC's default overflow mode
  if (satMode.has_value()) {
    TORCH_CHECK(*satMode == "saturation" || *satMode == "inf_nan",
                "ascend_sim: sat_mode must be 'saturation' or 'inf_nan', got '", *satMode, "'");
    // As a program on the device would: the runtime call, which refuses modes the SoC lacks.
    const aclError err = aclrtSetDeviceSatMode(*satMode == "saturation" ? ACL_RT_OVERFLOW_MODE_SATURATION
                                                                          : ACL_RT_OVERFLOW_MODE_INFNAN);
    TORCH_CHECK(err == ACL_SUCCESS, "ascend_sim: ", aclGetRecentErrMsg());
  }
  if (ubSize.has_value()) {
    TORCH_CHECK(*ubSize >= 1024 && *ubSize <= (1 << 24) && *ubSize % 32 == 0,
                "ascend_sim: ub_size must be a multiple of 32 in [1024, 16 MiB], got ", *ubSize);
    dev.ubSize = uint32_t(*ubSize);
  }
  if (coreNum.has_value()) {
    TORCH_CHECK(*coreNum >= 1 && *coreNum <= 256, "ascend_sim: core_num must be in [1, 256], got ", *coreNum);
    dev.coreNum = uint32_t(*coreNum);
  }
  // Every op call configures the device; the cores' data caches carry lines
  // from one call to the next (core.h, DcacheCarryOver) unless the device
  // changed, whose cores then hold nothing yet.
  if (dev.socName != before.socName || dev.coreNum != before.coreNum || dev.ubSize != before.ubSize) {
    ascendc_sim::ClearCarriedDcache();
  }
}

// Outputs start as NaN rather than as whatever memory at::empty hands out, so an
// element that a kernel (or a tiling) never writes fails every comparison with
// the reference instead of passing by chance.
Tensor Unwritten(at::IntArrayRef shape, const at::TensorOptions& options) {
  return DeviceEmpty(shape, options).fill_(std::numeric_limits<double>::quiet_NaN());
}

std::optional<Tensor> ContiguousOrNone(const std::optional<Tensor>& t) {
  if (t.has_value() && t->defined()) return t->contiguous();
  return std::nullopt;
}

// A parameter's gradient: NaN-filled of the parameter's shape, or an empty [0]
// placeholder (and no aclnn output) when the op ran without that parameter.
std::pair<Tensor, std::optional<Tensor>> ParamGrad(const std::optional<Tensor>& param, const Tensor& like) {
  if (!param.has_value()) return {Unwritten({0}, like.options()), std::nullopt};
  Tensor grad = Unwritten(param->sizes(), like.options());
  return {grad, grad};
}

}  // namespace

// One entry per op, derived from its prototype at build time (sim_<name> and
// register_sim_ops; op_extension/_cpp_gen.py, generate_ascend_sim_ops).
#include "op_ext_ascend_sim_ops.h"

namespace {

// Every TilingData the op's tiling function produces for these shapes, as dicts.
pybind11::list Tiling(const std::string& op, const std::vector<std::vector<int64_t>>& shapes,
                      const std::string& dtype, const pybind11::dict& attrs) {
  auto& registry = op_ext::ascend::TilingRegistry();
  auto it = registry.find(op);
  TORCH_CHECK(it != registry.end(), "ascend_sim: no tiling registered for op '", op, "'");
  op_ext::ascend::TilingQuery q;
  q.shapes = shapes;
  if (dtype == "float32") {
    q.dtype = op_ext::ascend::kDTypeFloat;
  } else if (dtype == "float16") {
    q.dtype = op_ext::ascend::kDTypeHalf;
  } else if (dtype == "bfloat16") {
    q.dtype = op_ext::ascend::kDTypeBf16;
  } else {
    TORCH_CHECK(false, "ascend_sim: dtype must be float32, float16 or bfloat16, got ", dtype);
  }
  for (auto item : attrs) {
    const std::string key = pybind11::str(item.first);
    if (pybind11::isinstance<pybind11::str>(item.second)) {
      q.strAttrs[key] = pybind11::str(item.second);
    } else {
      q.attrs[key] = item.second.cast<double>();
    }
  }
  const auto soc = op_ext::ascend::CurrentSocSpec();
  pybind11::list out;
  for (const auto& fields : it->second(q, soc)) {
    pybind11::dict d;
    for (const auto& [name, value] : fields) d[pybind11::str(name)] = value;
    out.append(d);
  }
  return out;
}

// The SoC table, and the entry for one SoC version (the message of an unknown one).
pybind11::list SocTableRows() {
  pybind11::list out;
  for (const auto& s : op_ext::ascend::SocTable()) {
    pybind11::dict d;
    d["name"] = s.name;
    d["soc_version"] = s.socVersion;
    d["vector_core_num"] = s.vectorCoreNum;
    d["ub_size"] = s.ubSize;
    d["has_data_copy_pad"] = s.hasDataCopyPad;
    d["has_bfloat16"] = s.hasBfloat16;
    d["reduce_sum_tree"] = s.reduceSumTree;
    d["source"] = s.source;
    out.append(d);
  }
  return out;
}

// What the aclnn entry points see: CurrentSocSpec() on the configured device.
pybind11::dict CurrentSoc() {
  const auto s = op_ext::ascend::CurrentSocSpec();
  pybind11::dict d;
  d["name"] = s.name;
  d["soc_version"] = s.socVersion;
  d["vector_core_num"] = s.vectorCoreNum;
  d["ub_size"] = s.ubSize;
  return d;
}

// Calls of the simulated ACL runtime so far (ascendc_sim::RuntimeCounters).
pybind11::dict RuntimeCounters() {
  const auto& c = ascendc_sim::RuntimeCounters();
  pybind11::dict d;
  d["aclrtMalloc"] = c.aclrtMalloc;
  d["aclrtFree"] = c.aclrtFree;
  d["aclrtMallocHost"] = c.aclrtMallocHost;
  d["aclrtFreeHost"] = c.aclrtFreeHost;
  d["aclrtMemcpy"] = c.aclrtMemcpy;
  d["aclrtMemcpyAsync"] = c.aclrtMemcpyAsync;
  d["aclrtCreateEvent"] = c.aclrtCreateEvent;
  d["aclrtDestroyEvent"] = c.aclrtDestroyEvent;
  d["aclrtRecordEvent"] = c.aclrtRecordEvent;
  d["aclrtSynchronizeEvent"] = c.aclrtSynchronizeEvent;
  d["aclrtSynchronizeStream"] = c.aclrtSynchronizeStream;
  d["kernelLaunches"] = c.kernelLaunches;
  return d;
}

std::string UnsupportedSocMessage(const std::string& name) { return op_ext::ascend::UnsupportedSocMessage(name); }

void RunMisuse(const std::string& name) {
  if (op_ext_sim_run_misuse_kernel(name.c_str()) != ACL_SUCCESS) throw std::runtime_error(aclGetRecentErrMsg());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "op_extension Ascend C kernels on the CPU simulator (see op_extension.ascend_sim)";
  m.def("configure", &Configure, pybind11::arg("soc"), pybind11::arg("ub_size") = pybind11::none(),
        pybind11::arg("core_num") = pybind11::none(), pybind11::arg("sat_mode") = pybind11::none());
  m.def("soc_table", &SocTableRows);
  m.def("runtime_counters", &RuntimeCounters);
  m.def("current_soc", &CurrentSoc);
  m.def("unsupported_soc_message", &UnsupportedSocMessage);
  register_sim_ops(m);
  m.def("tiling", &Tiling);
  m.def("_run_misuse", &RunMisuse);
}
