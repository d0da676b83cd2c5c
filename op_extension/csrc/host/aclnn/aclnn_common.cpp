#include "aclnn_common.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "aclnn_op_ext_error.h"
#include "tiling_util.h"

#ifdef OP_EXT_ASCEND_SIM
#include "ascendc_sim/host_state.h"
#endif

namespace op_ext::aclnn {

namespace {

// Workspace layout: the TilingData of each launch at a 64-byte aligned offset
// (CANN's async copies want 64-byte aligned addresses; kernels read the
// TilingData in 32-bit words), then the kernel workspace at a 512-byte offset.
constexpr uint64_t kTilingAlign = 64;
constexpr uint64_t kWorkspaceAlign = 512;

uint64_t TilingImageBytes(const LaunchPlan& plan) {
  uint64_t bytes = 0;
  for (const auto& l : plan.launches) bytes += ascend::RoundUp(l.tiling.size(), kTilingAlign);
  return bytes;
}

std::string& LastErrorStorage() {
  static thread_local std::string message;
  return message;
}

void SetLastError(const std::string& message) {
  LastErrorStorage() = message;
#ifdef OP_EXT_ASCEND_SIM
  ascendc_sim::HostState().lastError = message;
#endif
}

// The host side of the tiling upload: one aclrtMemcpyAsync per aclnn call, of
// every launch's TilingData at once, from page-locked memory (CANN's
// aclrtMemcpyAsync reads host memory when the copy runs, so the source must be
// pinned and stay untouched until then).
//
// Per stream, a ring of kSegments segments of pinned memory, allocated with one
// aclrtMallocHost, each with an event created once. Calls fill the current
// segment; when it is full its event is recorded on the stream (after its last
// copy) and the next segment is taken, first waiting for that segment's event
// from its previous lap -- copies kSegments - 1 segments ago, long finished in
// practice. So once a stream has its ring (the first call on it), a call costs
// a memcpy into pinned memory and one aclrtMemcpyAsync; an event record comes
// once per segment (hundreds of calls); nothing is allocated or created.
// Copies on one stream run in order, hence one ring per stream. The rings live
// as long as the process (never freed: CANN may be finalised before static
// destructors run).
class TilingStaging {
 public:
  static constexpr uint64_t kSegmentBytes = 64 * 1024;
  static constexpr uint32_t kSegments = 4;

  aclError Upload(void* device, const void* host, uint64_t bytes, aclrtStream stream) {
    if (bytes > kSegmentBytes) return ACL_ERROR_INVALID_PARAM;  // PrepareLaunch keeps images far smaller
    std::lock_guard<std::mutex> lock(mutex_);
    Ring& ring = rings_[stream];
    aclError err = ring.base == nullptr ? Init(ring) : ACL_SUCCESS;
    if (err == ACL_SUCCESS && ring.used + bytes > kSegmentBytes) err = Advance(ring, stream);
    if (err != ACL_SUCCESS) return err;
    uint8_t* slot = ring.base + ring.current * kSegmentBytes + ring.used;
    std::memcpy(slot, host, bytes);
    ring.used += ascend::RoundUp(bytes, 64);
    return aclrtMemcpyAsync(device, bytes, slot, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
  }

 private:
  struct Ring {
    uint8_t* base = nullptr;
    aclrtEvent done[kSegments] = {};
    bool pending[kSegments] = {};
    uint32_t current = 0;
    uint64_t used = 0;
  };

  static aclError Init(Ring& ring) {
    void* base = nullptr;
    aclError err = aclrtMallocHost(&base, kSegments * kSegmentBytes);
    for (uint32_t i = 0; err == ACL_SUCCESS && i < kSegments; ++i) err = aclrtCreateEvent(&ring.done[i]);
    if (err != ACL_SUCCESS) {
      for (aclrtEvent& e : ring.done) {
        if (e != nullptr) aclrtDestroyEvent(e);
        e = nullptr;
      }
      if (base != nullptr) aclrtFreeHost(base);
      return err;
    }
    ring.base = static_cast<uint8_t*>(base);
    return ACL_SUCCESS;
  }

  static aclError Advance(Ring& ring, aclrtStream stream) {
    aclError err = aclrtRecordEvent(ring.done[ring.current], stream);
    if (err != ACL_SUCCESS) return err;
    ring.pending[ring.current] = true;
    ring.current = (ring.current + 1) % kSegments;
    ring.used = 0;
    if (ring.pending[ring.current]) {
      err = aclrtSynchronizeEvent(ring.done[ring.current]);
      if (err != ACL_SUCCESS) return err;
      ring.pending[ring.current] = false;
    }
    return ACL_SUCCESS;
  }

  std::mutex mutex_;
  std::map<aclrtStream, Ring> rings_;
};

TilingStaging& Staging() {
  static TilingStaging* staging = new TilingStaging;  // never destroyed (see above)
  return *staging;
}

}  // namespace

void Invalid(const char* op, const std::string& message) {
  throw ArgError(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": " + message);
}

uint64_t TensorDesc::Numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

bool TensorDesc::IsContiguous() const {
  // As torch: an empty tensor is contiguous whatever its strides ([3, 0, 4] has (4, 4, 1)).
  if (Numel() == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

const char* DataTypeName(aclDataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
      return "float32";
    case ACL_FLOAT16:
      return "float16";
    case ACL_BF16:
      return "bfloat16";
    case ACL_DOUBLE:
      return "float64";
    case ACL_INT32:
      return "int32";
    case ACL_INT64:
      return "int64";
    case ACL_INT8:
      return "int8";
    case ACL_UINT8:
      return "uint8";
    case ACL_INT16:
      return "int16";
    case ACL_BOOL:
      return "bool";
    default:
      return "unsupported dtype";
  }
}

static uint64_t ElementBytes(aclDataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
      return 4;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
      return 2;
    case ACL_DOUBLE:
    case ACL_INT64:
    case ACL_UINT64:
      return 8;
    default:
      return 1;
  }
}

TensorDesc DescribeTensor(const char* op, const char* name, const aclTensor* tensor) {
  if (tensor == nullptr) throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": " + name + " is null");
  TensorDesc d;
  int64_t* dims = nullptr;
  uint64_t ndim = 0;
  int64_t* strides = nullptr;
  uint64_t nstrides = 0;
  void* storage = nullptr;
  if (aclGetViewShape(tensor, &dims, &ndim) != ACLNN_SUCCESS ||
      aclGetViewStrides(tensor, &strides, &nstrides) != ACLNN_SUCCESS ||
      aclGetViewOffset(tensor, &d.offset) != ACLNN_SUCCESS || aclGetDataType(tensor, &d.dtype) != ACLNN_SUCCESS ||
      aclGetRawTensorAddr(tensor, &storage) != ACLNN_SUCCESS) {
    delete[] dims;
    delete[] strides;
    throw ArgError(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": cannot read tensor " + name);
  }
  std::unique_ptr<int64_t[]> dimsOwner(dims), stridesOwner(strides);
  d.shape.assign(dims, dims + ndim);
  d.strides.assign(strides, strides + nstrides);
  if (d.strides.size() != d.shape.size()) Invalid(op, std::string(name) + " has strides of the wrong rank");
  for (int64_t s : d.shape) {
    if (s < 0) Invalid(op, std::string(name) + " has a negative dimension " + ShapeString(d.shape));
  }
  d.data = static_cast<uint8_t*>(storage) + d.offset * ElementBytes(d.dtype);
  if (d.Numel() > 0 && storage == nullptr) {
    throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": " + name + " has no device memory");
  }
  return d;
}

uint64_t IntArraySize(const char* op, const char* name, const aclIntArray* array) {
  if (array == nullptr) throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": " + name + " is null");
  uint64_t size = 0;
  if (aclGetIntArraySize(array, &size) != ACLNN_SUCCESS) {
    throw ArgError(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": cannot read the size of " + name);
  }
  return size;
}

std::vector<int64_t> NormalizedShape(const char* op, const TensorDesc& input, const aclIntArray* normalizedShape) {
  const uint64_t n = IntArraySize(op, "normalizedShape", normalizedShape);
  if (n == 0) Invalid(op, "normalizedShape is empty (it names at least one trailing dim)");
  if (n > input.shape.size()) {
    Invalid(op, "normalizedShape has " + std::to_string(n) + " dims, more than input " + ShapeString(input.shape));
  }
  return std::vector<int64_t>(input.shape.end() - static_cast<std::ptrdiff_t>(n), input.shape.end());
}

std::vector<int64_t> InputSizeFromOut(const char* op, const aclIntArray* inputSize, const TensorDesc& out) {
  const uint64_t n = IntArraySize(op, "inputSize", inputSize);
  if (n != out.shape.size()) {
    Invalid(op, "inputSize has " + std::to_string(n) + " dims but out has shape " + ShapeString(out.shape) +
                    " (out must have shape inputSize)");
  }
  return out.shape;
}

uint32_t KernelDType(const char* op, const char* name, aclDataType dtype, const ascend::SocSpec& soc,
                     std::initializer_list<aclDataType> listed) {
  bool isListed = false;
  std::string supported;
  for (aclDataType d : listed) {
    isListed = isListed || d == dtype;
    supported += (supported.empty() ? "" : ", ") + std::string(DataTypeName(d));
  }
  const bool bf16Listed = std::find(listed.begin(), listed.end(), ACL_BF16) != listed.end();
  if (isListed) {
    switch (dtype) {
      case ACL_FLOAT:
        return ascend::kDTypeFloat;
      case ACL_FLOAT16:
        return ascend::kDTypeHalf;
      case ACL_BF16:
        if (!soc.hasBfloat16) {
          Invalid(op, std::string(name) + " is bfloat16, which " + soc.name + " does not support (float16, float32)");
        }
        return ascend::kDTypeBf16;
      default:
        break;  // no Ascend kernel takes it, listed or not
    }
  }
  Invalid(op, std::string(name) + " has dtype " + DataTypeName(dtype) + "; supported: " + supported +
                  (bf16Listed ? " (bfloat16 not on Ascend310P)" : ""));
}

const char* AllowedValue(const char* op, const char* name, const char* value, const char* fallback,
                         std::initializer_list<const char*> allowed) {
  if (value == nullptr) return fallback;
  std::string expected;
  size_t i = 0;
  for (const char* a : allowed) {
    if (std::strcmp(value, a) == 0) return a;
    expected += std::string(i == 0 ? "" : (i + 1 == allowed.size() ? " or " : ", ")) + "'" + a + "'";
    ++i;
  }
  Invalid(op, std::string(name) + " must be " + expected + ", got '" + value + "'");
}

uint32_t GeluApproximate(const char* op, const char* approximate) {
  if (approximate == nullptr || std::strcmp(approximate, "none") == 0) return 0;
  if (std::strcmp(approximate, "tanh") == 0) return 1;
  Invalid(op, std::string("approximate must be 'none' or 'tanh', got '") + approximate + "'");
}

RowShape NormRows(const char* op, const TensorDesc& input, const std::vector<int64_t>& normalizedShape) {
  if (normalizedShape.empty()) Invalid(op, "normalizedShape is empty (it names at least one trailing dim)");
  if (normalizedShape.size() > input.shape.size()) {
    Invalid(op, "normalizedShape " + ShapeString(normalizedShape) + " has more dims than input " +
                    ShapeString(input.shape));
  }
  const size_t lead = input.shape.size() - normalizedShape.size();
  RowShape rs;
  rs.rows = 1;
  rs.cols = 1;
  for (size_t i = 0; i < normalizedShape.size(); ++i) {
    if (normalizedShape[i] != input.shape[lead + i]) {
      Invalid(op, "normalizedShape " + ShapeString(normalizedShape) + " does not match the trailing dims of input " +
                      ShapeString(input.shape));
    }
    rs.cols *= uint64_t(normalizedShape[i]);
  }
  for (size_t i = 0; i < lead; ++i) rs.rows *= uint64_t(input.shape[i]);
  return rs;
}

SoftmaxDims SoftmaxDimsOf(const char* op, const char* name, const TensorDesc& t, int64_t dim) {
  const int64_t ndim = static_cast<int64_t>(t.shape.size());
  if (ndim == 0) Invalid(op, std::string(name) + " has no dims (view a 0-dim tensor as [1] first)");
  if (dim < -ndim || dim >= ndim) {
    Invalid(op, "dim " + std::to_string(dim) + " is out of range for " + name + " " + ShapeString(t.shape) +
                    " (expected [" + std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "])");
  }
  const size_t d = static_cast<size_t>(dim < 0 ? dim + ndim : dim);
  SoftmaxDims dims;
  for (size_t i = 0; i < d; ++i) dims.outer *= uint64_t(t.shape[i]);
  for (size_t i = d + 1; i < t.shape.size(); ++i) dims.inner *= uint64_t(t.shape[i]);
  dims.dimSize = uint64_t(t.shape[d]);
  return dims;
}

void CheckAffine(const char* op, const char* name, const TensorDesc& param, const TensorDesc& input,
                 const std::vector<int64_t>& normalizedShape) {
  if (param.shape != normalizedShape) {
    Invalid(op, std::string(name) + " has shape " + ShapeString(param.shape) + " but normalizedShape (input's trailing " +
                    std::to_string(normalizedShape.size()) + " dims) is " + ShapeString(normalizedShape));
  }
  CheckSameDType(op, "input", input, name, param);
  CheckContiguous(op, name, param);
}

void CheckContiguous(const char* op, const char* name, const TensorDesc& t) {
  if (!t.IsContiguous()) {
    Invalid(op, std::string(name) + " of shape " + ShapeString(t.shape) +
                    " is not contiguous (the kernel reads dense row-major memory; make it contiguous first)");
  }
}

void CheckSameShape(const char* op, const char* nameA, const TensorDesc& a, const char* nameB, const TensorDesc& b) {
  if (a.shape != b.shape) {
    Invalid(op, std::string(nameB) + " has shape " + ShapeString(b.shape) + " but " + nameA + " has " +
                    ShapeString(a.shape) + " (they must match)");
  }
}

void CheckSameDType(const char* op, const char* nameA, const TensorDesc& a, const char* nameB, const TensorDesc& b) {
  if (a.dtype != b.dtype) {
    Invalid(op, std::string(nameB) + " has dtype " + DataTypeName(b.dtype) + " but " + nameA + " has " +
                    DataTypeName(a.dtype) + " (they must match)");
  }
}

uint64_t WorkspaceBytes(const LaunchPlan& plan) {
  if (plan.launches.empty()) return 0;
  return ascend::RoundUp(TilingImageBytes(plan), kWorkspaceAlign) +
         ascend::RoundUp(plan.kernelWorkspaceBytes, kWorkspaceAlign);
}

aclnnStatus PrepareLaunch(const char* op, uint64_t* workspaceSize, aclOpExecutor** executor,
                          const std::function<LaunchPlan()>& build) {
  try {
    if (workspaceSize == nullptr || executor == nullptr) {
      throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": workspaceSize and executor must not be null");
    }
    auto plan = std::make_unique<LaunchPlan>(build());
    plan->op = op;
    // The TilingData of every launch, laid out as in the workspace head, so the
    // second phase uploads it with one copy.
    plan->tilingImage.assign(TilingImageBytes(*plan), 0);
    uint64_t offset = 0;
    for (const auto& l : plan->launches) {
      std::memcpy(plan->tilingImage.data() + offset, l.tiling.data(), l.tiling.size());
      offset += ascend::RoundUp(l.tiling.size(), kTilingAlign);
    }
    if (plan->tilingImage.size() > TilingStaging::kSegmentBytes) {
      throw std::runtime_error("the TilingData of the launches exceed the staging segment");
    }
    *workspaceSize = WorkspaceBytes(*plan);
    *executor = reinterpret_cast<aclOpExecutor*>(plan.release());
    SetLastError("");
    return ACLNN_SUCCESS;
  } catch (const ArgError& e) {
    SetLastError(e.what());
    return e.status();
  } catch (const ascend::TilingError& e) {
    SetLastError(e.what());
    return ACLNN_ERR_PARAM_INVALID;
  } catch (const std::exception& e) {
    SetLastError(std::string(op) + ": internal error: " + e.what());
    return ACLNN_ERR_INNER;
  }
}

aclnnStatus RunLaunch(const char* op, void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                      aclrtStream stream) {
  if (executor == nullptr) {
    SetLastError(std::string(op) + ": executor is null (call the GetWorkspaceSize phase first)");
    return ACLNN_ERR_PARAM_NULLPTR;
  }
  std::unique_ptr<LaunchPlan> plan(reinterpret_cast<LaunchPlan*>(executor));
  const uint64_t need = WorkspaceBytes(*plan);
  if (workspaceSize < need || (need > 0 && workspace == nullptr)) {
    SetLastError(std::string(op) + ": workspace of " + std::to_string(workspaceSize) + " bytes given, " +
                 std::to_string(need) + " needed");
    return ACLNN_ERR_PARAM_INVALID;
  }
  auto* base = static_cast<uint8_t*>(workspace);
  uint8_t* kernelWorkspace = base + ascend::RoundUp(plan->tilingImage.size(), kWorkspaceAlign);
  if (!plan->tilingImage.empty()) {
    const aclError err = Staging().Upload(base, plan->tilingImage.data(), plan->tilingImage.size(), stream);
    if (err != ACL_SUCCESS) {
      SetLastError(std::string(op) + ": copying the tiling data to the device failed (error " + std::to_string(err) + ")");
      return ACLNN_ERR_RUNTIME_ERROR;
    }
  }
  uint64_t offset = 0;
  for (const auto& l : plan->launches) {
    uint8_t* tilingDevice = base + offset;
    offset += ascend::RoundUp(l.tiling.size(), kTilingAlign);
    const aclError err = l.launch(tilingDevice, kernelWorkspace, stream);
    if (err != ACL_SUCCESS) {
      const char* detail = aclGetRecentErrMsg();
      SetLastError(std::string(op) + ": kernel launch failed (error " + std::to_string(err) + ")" +
                   (detail != nullptr && *detail ? std::string(": ") + detail : std::string()));
      return ACLNN_ERR_RUNTIME_ERROR;
    }
  }
  SetLastError("");
  return ACLNN_SUCCESS;
}

}  // namespace op_ext::aclnn

extern "C" const char* aclnnOpExtGetLastErrorMessage(void) {
  return op_ext::aclnn::LastErrorStorage().c_str();
}
