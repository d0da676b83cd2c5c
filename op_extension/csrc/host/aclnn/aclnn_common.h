// Shared machinery of the op_extension aclnn entry points.
//
// Each op's entry points are generated from its prototype at build time
// (op_extension/_cpp_gen.py: aclnn_<stem>.h, aclnn_<stem>_args.h and
// op_ext_aclnn_entries.cpp in build/generated). The first phase
// (aclnn<Op>CustomGetWorkspaceSize) reads and checks what the prototype says
// about its arguments, then calls the op's hand-written Plan<Op>Custom
// (csrc/host/aclnn/aclnn_<stem>.cpp), which checks the rest, runs the tiling
// function and returns a LaunchPlan, kept as the executor; the second phase
// (aclnn<Op>Custom) copies the TilingData of all its launches
// into the head of the workspace with one asynchronous copy and launches the
// kernel(s) on the stream (docs/ascend_npu_glue.md, "Per-launch cost"). Argument problems become
// ACLNN_ERR_PARAM_* statuses with a message naming the op
// (aclnnOpExtGetLastErrorMessage); nothing is launched then.
//
// Workspace layout: [TilingData of launch 0][TilingData of launch 1]...[kernel
// workspace]; each TilingData 64-byte aligned (CANN's async copy wants 64), the
// kernel workspace 512-byte aligned (as device allocations are).
#ifndef OP_EXT_ACLNN_ACLNN_COMMON_H_
#define OP_EXT_ACLNN_ACLNN_COMMON_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "soc_spec.h"

namespace op_ext::aclnn {

// A checked argument problem: the status to return and the message.
class ArgError : public std::runtime_error {
 public:
  ArgError(aclnnStatus status, const std::string& message) : std::runtime_error(message), status_(status) {}
  aclnnStatus status() const { return status_; }

 private:
  aclnnStatus status_;
};

// [[noreturn]] helper: throw ArgError(ACLNN_ERR_PARAM_INVALID, "<op>: <message>").
[[noreturn]] void Invalid(const char* op, const std::string& message);

struct TensorDesc {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;  // elements from the storage start
  aclDataType dtype = ACL_DT_UNDEFINED;
  uint8_t* data = nullptr;  // address of the first element
  uint64_t Numel() const;
  bool IsContiguous() const;
};

std::string ShapeString(const std::vector<int64_t>& shape);
const char* DataTypeName(aclDataType dtype);

// Reads a tensor argument (null: ACLNN_ERR_PARAM_NULLPTR naming it).
TensorDesc DescribeTensor(const char* op, const char* name, const aclTensor* tensor);

// aclIntArray arguments. CANN's public aclnn API (aclnn/acl_meta.h) gives an
// aclIntArray's length (aclGetIntArraySize) but not its values, which only the
// internal opdev headers reach (opdev/common_types.h, which needs securec and
// the graph-engine headers a custom-op build does not have). So each int array
// of our contracts names a shape that a tensor argument also carries, and the
// values are read from that tensor; the array's length is checked against it.
// Callers (the torch glue) pass arrays equal to those shapes and check them
// before calling.
uint64_t IntArraySize(const char* op, const char* name, const aclIntArray* array);
// normalizedShape: the trailing IntArraySize(normalizedShape) dims of input.
std::vector<int64_t> NormalizedShape(const char* op, const TensorDesc& input, const aclIntArray* normalizedShape);
// inputSize of AddGradCustom: the shape of out (as many dims as inputSize has).
std::vector<int64_t> InputSizeFromOut(const char* op, const aclIntArray* inputSize, const TensorDesc& out);

// The kernel dtype code (KernelDType) of a tensor whose dtype is one of `listed`
// (the dtypes of the op's prototype that the Ascend kernels take: float16,
// float32, bfloat16); anything else, or bfloat16 on a SoC without it, is an
// error naming the op.
uint32_t KernelDType(const char* op, const char* name, aclDataType dtype, const ascend::SocSpec& soc,
                     std::initializer_list<aclDataType> listed = {ACL_FLOAT16, ACL_FLOAT, ACL_BF16});

// A string attribute: `value`, or `fallback` (the prototype's default) when null;
// a value not in `allowed` is an error naming the op and the attribute.
const char* AllowedValue(const char* op, const char* name, const char* value, const char* fallback,
                         std::initializer_list<const char*> allowed);

// 0 for "none" (or null: the prototype's default), 1 for "tanh"; else an error.
uint32_t GeluApproximate(const char* op, const char* approximate);

// [rows, cols] view of `input` for a norm over its trailing `normalizedShape`
// dims (which must match them); rows = product of the leading dims.
struct RowShape {
  uint64_t rows = 0;
  uint64_t cols = 0;
};
RowShape NormRows(const char* op, const TensorDesc& input, const std::vector<int64_t>& normalizedShape);

// A softmax along `dim` of `t` as [outer, dimSize, inner]: t has at least one
// dim (the callers view a 0-dim tensor as [1]) and dim is in [-ndim, ndim).
struct SoftmaxDims {
  uint64_t outer = 1;
  uint64_t dimSize = 1;
  uint64_t inner = 1;
};
SoftmaxDims SoftmaxDimsOf(const char* op, const char* name, const TensorDesc& t, int64_t dim);

// A norm's affine parameter: same shape as normalizedShape, same dtype as input, contiguous.
void CheckAffine(const char* op, const char* name, const TensorDesc& param, const TensorDesc& input,
                 const std::vector<int64_t>& normalizedShape);

// The device address of an optional tensor, null when it is absent.
inline uint8_t* DataOf(const std::optional<TensorDesc>& t) { return t ? t->data : nullptr; }

void CheckContiguous(const char* op, const char* name, const TensorDesc& t);
void CheckSameShape(const char* op, const char* nameA, const TensorDesc& a, const char* nameB, const TensorDesc& b);
void CheckSameDType(const char* op, const char* nameA, const TensorDesc& a, const char* nameB, const TensorDesc& b);

// One kernel launch of the second phase.
struct KernelLaunch {
  std::vector<uint8_t> tiling;  // TilingData bytes
  // Launches the kernel with the device addresses of its TilingData and of the
  // kernel workspace; returns the launch status.
  std::function<aclError(uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream)> launch;
};

struct LaunchPlan {
  std::string op;
  std::vector<KernelLaunch> launches;  // run in order on the stream
  uint64_t kernelWorkspaceBytes = 0;
  std::vector<uint8_t> tilingImage;  // every launch's TilingData as laid out in the workspace (PrepareLaunch)
};

uint64_t WorkspaceBytes(const LaunchPlan& plan);

// Adds a launch of `launchKernel(blockDim, stream, kernelWorkspace, tilingDevice)`
// with `tiling` (a TilingData) as its TilingData.
template <typename TilingData, typename LaunchFn>
void AddLaunch(LaunchPlan& plan, const TilingData& tiling, uint32_t blockDim, LaunchFn launchKernel) {
  KernelLaunch launch;
  launch.tiling.resize(tiling.GetDataSize());
  tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
  launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
    return launchKernel(blockDim, stream, kernelWorkspace, tilingDevice);
  };
  plan.launches.push_back(std::move(launch));
}

// A norm backward's launches (RmsNormGradCustom's and LayerNormGradCustom's
// TilingData): the rows, when any core has some, then, with a parameter
// gradient, the columns -- the same TilingData with pass 1, on its
// dwUsedCoreNum cores; the kernel workspace carries the rows' statistics from
// the first launch to the second.
template <typename TilingData, typename LaunchFn>
void AddNormGradLaunches(LaunchPlan& plan, const TilingData& tiling, bool hasParamGrad, LaunchFn launchKernel) {
  if (tiling.usedCoreNum > 0) AddLaunch(plan, tiling, tiling.usedCoreNum, launchKernel);
  if (hasParamGrad) {
    TilingData columns = tiling;
    columns.set_pass(1);
    AddLaunch(plan, columns, tiling.dwUsedCoreNum, launchKernel);
  }
}

// First phase: `build` checks the arguments and tiles (throwing ArgError or
// ascend::TilingError); the plan becomes *executor.
aclnnStatus PrepareLaunch(const char* op, uint64_t* workspaceSize, aclOpExecutor** executor,
                          const std::function<LaunchPlan()>& build);

// Second phase: uploads the tilings, launches, frees the executor.
aclnnStatus RunLaunch(const char* op, void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                      aclrtStream stream);

}  // namespace op_ext::aclnn

#endif  // OP_EXT_ACLNN_ACLNN_COMMON_H_
