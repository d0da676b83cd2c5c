// op_extension._ascend_sim: runs the Ascend aclnn entry points, tilings and
// Ascend C kernels on the CPU simulator, for CPU tensors.
//
// This file is the only one of the module that knows torch. For each op it does
// exactly what the torch_npu glue does before calling aclnn -- and nothing the
// kernels should do:
//   * every tensor argument is made contiguous (.contiguous());
//   * add: input and other are expanded to the broadcast shape and made
//     contiguous (materialised), since AddCustom takes same-shape tensors;
//   * outputs are allocated here (rms_norm_backward, fused_add_rms_norm_backward
//     and layer_norm_backward without weight (bias) get an empty [0] grad_weight
//     (grad_bias) and pass a null output for it);
//   * rms_norm's and fused_add_rms_norm's eps=None is resolved by the Python
//     wrapper (ascend_sim.py);
//   * softmax and softmax_backward: a 0-dim input is passed as [1]; `dim` goes
//     to aclnn unchanged (no transpose: the kernel handles any dim).
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
#include "aclnn_add_custom.h"
#include "aclnn_add_grad_custom.h"
#include "aclnn_fused_add_rms_norm_custom.h"
#include "aclnn_fused_add_rms_norm_grad_custom.h"
#include "aclnn_gelu_custom.h"
#include "aclnn_gelu_grad_custom.h"
#include "aclnn_layer_norm_custom.h"
#include "aclnn_layer_norm_grad_custom.h"
#include "aclnn_geglu_custom.h"
#include "aclnn_geglu_grad_custom.h"
#include "aclnn_op_ext_error.h"
#include "aclnn_rms_norm_custom.h"
#include "aclnn_rms_norm_grad_custom.h"
#include "aclnn_rotary_embedding_backward_custom.h"
#include "aclnn_rotary_embedding_custom.h"
#include "aclnn_softmax_custom.h"
#include "aclnn_softmax_grad_custom.h"
#include "aclnn_swiglu_custom.h"
#include "aclnn_swiglu_grad_custom.h"
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
}

// Outputs start as NaN rather than as whatever memory at::empty hands out, so an
// element that a kernel (or a tiling) never writes fails every comparison with
// the reference instead of passing by chance.
Tensor Unwritten(at::IntArrayRef shape, const at::TensorOptions& options) {
  return DeviceEmpty(shape, options).fill_(std::numeric_limits<double>::quiet_NaN());
}

Tensor Add(const Tensor& input, const Tensor& other, double alpha) {
  const auto shape = at::infer_size(input.sizes(), other.sizes());
  const Tensor x = input.expand(shape).contiguous();
  const Tensor y = other.expand(shape).contiguous();
  Tensor out = Unwritten(shape, input.options());
  AclTensor ax(x), ay(y), aout(out);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnAddCustomGetWorkspaceSize(ax.get(), ay.get(), alpha, aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnAddCustom(w, n, ex, nullptr); });
  return out;
}

Tensor AddBackward(const Tensor& gradOutput, const std::vector<int64_t>& inputSize, double alpha) {
  const Tensor g = gradOutput.contiguous();
  Tensor out = Unwritten(inputSize, gradOutput.options());
  AclTensor ag(g), aout(out);
  AclIntArray size(inputSize);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnAddGradCustomGetWorkspaceSize(ag.get(), size.get(), alpha, aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnAddGradCustom(w, n, ex, nullptr); });
  return out;
}

Tensor Gelu(const Tensor& input, const std::string& approximate) {
  const Tensor x = input.contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  AclTensor ax(x), aout(out);
  std::string approx = approximate;
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnGeluCustomGetWorkspaceSize(ax.get(), approx.data(), aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnGeluCustom(w, n, ex, nullptr); });
  return out;
}

Tensor GeluBackward(const Tensor& gradOutput, const Tensor& input, const std::string& approximate) {
  const Tensor g = gradOutput.contiguous();
  const Tensor x = input.contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  AclTensor ag(g), ax(x), aout(out);
  std::string approx = approximate;
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnGeluGradCustomGetWorkspaceSize(ag.get(), ax.get(), approx.data(), aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnGeluGradCustom(w, n, ex, nullptr); });
  return out;
}

Tensor RmsNorm(const Tensor& input, const std::vector<int64_t>& normalizedShape, const std::optional<Tensor>& weight,
               double eps) {
  const Tensor x = input.contiguous();
  std::optional<Tensor> w;
  if (weight.has_value() && weight->defined()) w = weight->contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  AclTensor ax(x), aw(w), aout(out);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnRmsNormCustomGetWorkspaceSize(ax.get(), aw.get(), shape.get(), eps, aout.get(), ws, ex); },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) { return aclnnRmsNormCustom(wsp, n, ex, nullptr); });
  return out;
}

std::tuple<Tensor, Tensor> RmsNormBackward(const Tensor& gradOutput, const Tensor& input,
                                           const std::vector<int64_t>& normalizedShape,
                                           const std::optional<Tensor>& weight, double eps) {
  const Tensor g = gradOutput.contiguous();
  const Tensor x = input.contiguous();
  std::optional<Tensor> w;
  if (weight.has_value() && weight->defined()) w = weight->contiguous();
  Tensor dx = Unwritten(x.sizes(), x.options());
  Tensor dw = w.has_value() ? Unwritten(w->sizes(), x.options()) : Unwritten({0}, x.options());
  std::optional<Tensor> dwArg;
  if (w.has_value()) dwArg = dw;
  AclTensor ag(g), ax(x), aw(w), adx(dx), adw(dwArg);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnRmsNormGradCustomGetWorkspaceSize(ag.get(), ax.get(), aw.get(), shape.get(), eps, adx.get(),
                                                            adw.get(), ws, ex);
            },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) { return aclnnRmsNormGradCustom(wsp, n, ex, nullptr); });
  return {dx, dw};
}

std::tuple<Tensor, Tensor> RotaryEmbedding(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin,
                                           int64_t unsqueezeDim) {
  const Tensor qc = q.contiguous(), kc = k.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
  Tensor qOut = Unwritten(qc.sizes(), qc.options());
  Tensor kOut = Unwritten(kc.sizes(), kc.options());
  AclTensor aq(qc), ak(kc), ac(cc), as(sc), aqo(qOut), ako(kOut);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnRotaryEmbeddingCustomGetWorkspaceSize(aq.get(), ak.get(), ac.get(), as.get(), unsqueezeDim,
                                                                aqo.get(), ako.get(), ws, ex);
            },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnRotaryEmbeddingCustom(w, n, ex, nullptr); });
  return {qOut, kOut};
}

std::tuple<Tensor, Tensor> RotaryEmbeddingBackward(const Tensor& gradQEmbed, const Tensor& gradKEmbed,
                                                   const Tensor& cos, const Tensor& sin, int64_t unsqueezeDim) {
  const Tensor gq = gradQEmbed.contiguous(), gk = gradKEmbed.contiguous(), cc = cos.contiguous(),
               sc = sin.contiguous();
  Tensor dq = Unwritten(gq.sizes(), gq.options());
  Tensor dk = Unwritten(gk.sizes(), gk.options());
  AclTensor agq(gq), agk(gk), ac(cc), as(sc), adq(dq), adk(dk);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnRotaryEmbeddingBackwardCustomGetWorkspaceSize(agq.get(), agk.get(), ac.get(), as.get(),
                                                                        unsqueezeDim, adq.get(), adk.get(), ws, ex);
            },
            [&](void* w, uint64_t n, aclOpExecutor* ex) {
              return aclnnRotaryEmbeddingBackwardCustom(w, n, ex, nullptr);
            });
  return {dq, dk};
}

Tensor SwiGlu(const Tensor& gate, const Tensor& up) {
  const Tensor g = gate.contiguous();
  const Tensor u = up.contiguous();
  Tensor out = Unwritten(g.sizes(), g.options());
  AclTensor ag(g), au(u), aout(out);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnSwiGluCustomGetWorkspaceSize(ag.get(), au.get(), aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnSwiGluCustom(w, n, ex, nullptr); });
  return out;
}

Tensor GeGlu(const Tensor& gate, const Tensor& up, const std::string& approximate) {
  const Tensor g = gate.contiguous();
  const Tensor u = up.contiguous();
  Tensor out = Unwritten(g.sizes(), g.options());
  AclTensor ag(g), au(u), aout(out);
  std::string approx = approximate;
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnGeGluCustomGetWorkspaceSize(ag.get(), au.get(), approx.data(), aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnGeGluCustom(w, n, ex, nullptr); });
  return out;
}

std::tuple<Tensor, Tensor> SwiGluBackward(const Tensor& gradOutput, const Tensor& gate, const Tensor& up) {
  const Tensor dy = gradOutput.contiguous();
  const Tensor g = gate.contiguous();
  const Tensor u = up.contiguous();
  Tensor gradGate = Unwritten(g.sizes(), g.options());
  Tensor gradUp = Unwritten(g.sizes(), g.options());
  AclTensor ady(dy), ag(g), au(u), adg(gradGate), adu(gradUp);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnSwiGluGradCustomGetWorkspaceSize(ady.get(), ag.get(), au.get(), adg.get(), adu.get(), ws,
                                                           ex);
            },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnSwiGluGradCustom(w, n, ex, nullptr); });
  return {gradGate, gradUp};
}

std::tuple<Tensor, Tensor> GeGluBackward(const Tensor& gradOutput, const Tensor& gate, const Tensor& up,
                                         const std::string& approximate) {
  const Tensor dy = gradOutput.contiguous();
  const Tensor g = gate.contiguous();
  const Tensor u = up.contiguous();
  Tensor gradGate = Unwritten(g.sizes(), g.options());
  Tensor gradUp = Unwritten(g.sizes(), g.options());
  AclTensor ady(dy), ag(g), au(u), adg(gradGate), adu(gradUp);
  std::string approx = approximate;
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnGeGluGradCustomGetWorkspaceSize(ady.get(), ag.get(), au.get(), approx.data(), adg.get(),
                                                          adu.get(), ws, ex);
            },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnGeGluGradCustom(w, n, ex, nullptr); });
  return {gradGate, gradUp};
}

std::tuple<Tensor, Tensor> FusedAddRmsNorm(const Tensor& input, const Tensor& residual,
                                           const std::vector<int64_t>& normalizedShape,
                                           const std::optional<Tensor>& weight, double eps) {
  const Tensor x = input.contiguous();
  const Tensor r = residual.contiguous();
  std::optional<Tensor> w;
  if (weight.has_value() && weight->defined()) w = weight->contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  Tensor residualOut = Unwritten(x.sizes(), x.options());
  AclTensor ax(x), ar(r), aw(w), aout(out), az(residualOut);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnFusedAddRmsNormCustomGetWorkspaceSize(ax.get(), ar.get(), aw.get(), shape.get(), eps,
                                                                aout.get(), az.get(), ws, ex);
            },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) { return aclnnFusedAddRmsNormCustom(wsp, n, ex, nullptr); });
  return {out, residualOut};
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

std::tuple<Tensor, Tensor> FusedAddRmsNormBackward(const Tensor& gradOutput,
                                                   const std::optional<Tensor>& gradResidualOut,
                                                   const Tensor& residualOut,
                                                   const std::vector<int64_t>& normalizedShape,
                                                   const std::optional<Tensor>& weight, double eps) {
  const Tensor g = gradOutput.contiguous();
  const Tensor z = residualOut.contiguous();
  const std::optional<Tensor> gr = ContiguousOrNone(gradResidualOut);
  const std::optional<Tensor> w = ContiguousOrNone(weight);
  Tensor dx = Unwritten(z.sizes(), z.options());
  auto [dw, dwArg] = ParamGrad(w, z);
  AclTensor ag(g), agr(gr), az(z), aw(w), adx(dx), adw(dwArg);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnFusedAddRmsNormGradCustomGetWorkspaceSize(ag.get(), agr.get(), az.get(), aw.get(),
                                                                    shape.get(), eps, adx.get(), adw.get(), ws, ex);
            },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) {
              return aclnnFusedAddRmsNormGradCustom(wsp, n, ex, nullptr);
            });
  return {dx, dw};
}

std::tuple<Tensor, Tensor, Tensor> LayerNormBackward(const Tensor& gradOutput, const Tensor& input,
                                                     const std::vector<int64_t>& normalizedShape,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias, double eps) {
  const Tensor g = gradOutput.contiguous();
  const Tensor x = input.contiguous();
  const std::optional<Tensor> w = ContiguousOrNone(weight);
  const std::optional<Tensor> b = ContiguousOrNone(bias);
  Tensor dx = Unwritten(x.sizes(), x.options());
  auto [dw, dwArg] = ParamGrad(w, x);
  auto [db, dbArg] = ParamGrad(b, x);
  AclTensor ag(g), ax(x), aw(w), ab(b), adx(dx), adw(dwArg), adb(dbArg);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnLayerNormGradCustomGetWorkspaceSize(ag.get(), ax.get(), aw.get(), ab.get(), shape.get(),
                                                              eps, adx.get(), adw.get(), adb.get(), ws, ex);
            },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) { return aclnnLayerNormGradCustom(wsp, n, ex, nullptr); });
  return {dx, dw, db};
}

Tensor LayerNorm(const Tensor& input, const std::vector<int64_t>& normalizedShape, const std::optional<Tensor>& weight,
                 const std::optional<Tensor>& bias, double eps) {
  const Tensor x = input.contiguous();
  std::optional<Tensor> w, b;
  if (weight.has_value() && weight->defined()) w = weight->contiguous();
  if (bias.has_value() && bias->defined()) b = bias->contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  AclTensor ax(x), aw(w), ab(b), aout(out);
  AclIntArray shape(normalizedShape);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnLayerNormCustomGetWorkspaceSize(ax.get(), aw.get(), ab.get(), shape.get(), eps, aout.get(),
                                                          ws, ex);
            },
            [&](void* wsp, uint64_t n, aclOpExecutor* ex) { return aclnnLayerNormCustom(wsp, n, ex, nullptr); });
  return out;
}

// As the torch_npu glue: a 0-dim input is softmaxed as the one-element vector it
// holds; the contiguous input goes to aclnn as it is (the kernel handles any
// dim, nothing is transposed). `dim` is passed unwrapped: aclnn wraps a negative
// dim and rejects one out of range (for 0-dim input, [1] accepts what torch does).
Tensor Softmax(const Tensor& input, int64_t dim) {
  const Tensor x = (input.dim() == 0 ? input.reshape({1}) : input).contiguous();
  Tensor out = Unwritten(x.sizes(), x.options());
  AclTensor ax(x), aout(out);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) { return aclnnSoftmaxCustomGetWorkspaceSize(ax.get(), dim, aout.get(), ws, ex); },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnSoftmaxCustom(w, n, ex, nullptr); });
  return out.view(input.sizes());
}

// As the torch_npu glue: 0-dim tensors as [1], `dim` passed unwrapped (see Softmax).
Tensor SoftmaxBackward(const Tensor& gradOutput, const Tensor& output, int64_t dim) {
  const Tensor dy = (gradOutput.dim() == 0 ? gradOutput.reshape({1}) : gradOutput).contiguous();
  const Tensor y = (output.dim() == 0 ? output.reshape({1}) : output).contiguous();
  Tensor out = Unwritten(y.sizes(), y.options());
  AclTensor ady(dy), ay(y), aout(out);
  CallAclnn([&](uint64_t* ws, aclOpExecutor** ex) {
              return aclnnSoftmaxGradCustomGetWorkspaceSize(ady.get(), ay.get(), dim, aout.get(), ws, ex);
            },
            [&](void* w, uint64_t n, aclOpExecutor* ex) { return aclnnSoftmaxGradCustom(w, n, ex, nullptr); });
  return out.view(output.sizes());
}

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
  m.def("add", &Add);
  m.def("add_backward", &AddBackward);
  m.def("gelu", &Gelu);
  m.def("gelu_backward", &GeluBackward);
  m.def("rms_norm", &RmsNorm);
  m.def("rms_norm_backward", &RmsNormBackward);
  m.def("swiglu", &SwiGlu);
  m.def("swiglu_backward", &SwiGluBackward);
  m.def("geglu", &GeGlu);
  m.def("geglu_backward", &GeGluBackward);
  m.def("fused_add_rms_norm", &FusedAddRmsNorm);
  m.def("fused_add_rms_norm_backward", &FusedAddRmsNormBackward);
  m.def("layer_norm", &LayerNorm);
  m.def("layer_norm_backward", &LayerNormBackward);
  m.def("softmax", &Softmax);
  m.def("softmax_backward", &SoftmaxBackward);
  m.def("rotary_embedding", &RotaryEmbedding);
  m.def("rotary_embedding_backward", &RotaryEmbeddingBackward);
  m.def("tiling", &Tiling);
  m.def("_run_misuse", &RunMisuse);
}
