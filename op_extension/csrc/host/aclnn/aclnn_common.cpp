#include "aclnn_common.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>

#include "aclnn_op_ext_error.h"
#include "tiling_util.h"

#ifdef OP_EXT_ASCEND_SIM
#include "ascendc_sim/host_state.h"
#else
// CANN: aclIntArray's accessors (Size(), operator[]) come from the opdev headers.
#include "opdev/common_types.h"
#endif

namespace op_ext::aclnn {

namespace {

constexpr uint64_t kWorkspaceAlign = 512;

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

// Copies `bytes` of host data to device memory in stream order.
aclError UploadToDevice(void* device, const void* host, uint64_t bytes, aclrtStream stream) {
#ifdef OP_EXT_ASCEND_SIM
  return aclrtMemcpyAsync(device, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
#else
  // CANN 8.0: an asynchronous host-to-device copy must read page-locked memory
  // (aclrtMallocHost) that stays valid until the copy has run. Stage the bytes
  // there and release each staging buffer once an event recorded after its copy
  // has completed. (Not exercised in this repository's CI: no NPU.)
  struct Staged {
    void* host;
    aclrtEvent done;
  };
  static std::mutex mutex;
  static std::vector<Staged> staged;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = staged.begin(); it != staged.end();) {
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    if (aclrtQueryEventStatus(it->done, &status) == ACL_SUCCESS && status == ACL_EVENT_RECORDED_STATUS_COMPLETE) {
      aclrtDestroyEvent(it->done);
      aclrtFreeHost(it->host);
      it = staged.erase(it);
    } else {
      ++it;
    }
  }
  void* pinned = nullptr;
  aclError err = aclrtMallocHost(&pinned, bytes);
  if (err != ACL_SUCCESS) return err;
  std::memcpy(pinned, host, bytes);
  err = aclrtMemcpyAsync(device, bytes, pinned, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
  aclrtEvent done = nullptr;
  if (err == ACL_SUCCESS) err = aclrtCreateEvent(&done);
  if (err == ACL_SUCCESS) err = aclrtRecordEvent(done, stream);
  if (err != ACL_SUCCESS) {
    aclrtSynchronizeStream(stream);
    if (done != nullptr) aclrtDestroyEvent(done);
    aclrtFreeHost(pinned);
    return err;
  }
  staged.push_back({pinned, done});
  return ACL_SUCCESS;
#endif
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

std::vector<int64_t> IntArrayValues(const char* op, const char* name, const aclIntArray* array) {
  if (array == nullptr) throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": " + name + " is null");
  std::vector<int64_t> v(array->Size());
  for (uint64_t i = 0; i < v.size(); ++i) v[i] = (*array)[i];
  return v;
}

uint32_t KernelDType(const char* op, const char* name, aclDataType dtype, const ascend::SocSpec& soc) {
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
      Invalid(op, std::string(name) + " has dtype " + DataTypeName(dtype) +
                      "; supported: float16, float32, bfloat16 (bfloat16 not on Ascend310P)");
  }
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

void CheckAffine(const char* op, const char* name, const TensorDesc& param, const TensorDesc& input,
                 const std::vector<int64_t>& normalizedShape) {
  if (param.shape != normalizedShape) {
    Invalid(op, std::string(name) + " has shape " + ShapeString(param.shape) + " but normalizedShape is " +
                    ShapeString(normalizedShape));
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
  uint64_t bytes = 0;
  for (const auto& l : plan.launches) bytes += ascend::RoundUp(l.tiling.size(), kWorkspaceAlign);
  if (plan.launches.empty()) return 0;
  return bytes + ascend::RoundUp(plan.kernelWorkspaceBytes, kWorkspaceAlign);
}

aclnnStatus PrepareLaunch(const char* op, uint64_t* workspaceSize, aclOpExecutor** executor,
                          const std::function<LaunchPlan()>& build) {
  try {
    if (workspaceSize == nullptr || executor == nullptr) {
      throw ArgError(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": workspaceSize and executor must not be null");
    }
    auto plan = std::make_unique<LaunchPlan>(build());
    plan->op = op;
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
  uint64_t tilingOffset = 0;
  for (const auto& l : plan->launches) tilingOffset += ascend::RoundUp(l.tiling.size(), kWorkspaceAlign);
  uint8_t* kernelWorkspace = base + tilingOffset;
  uint64_t offset = 0;
  for (const auto& l : plan->launches) {
    uint8_t* tilingDevice = base + offset;
    offset += ascend::RoundUp(l.tiling.size(), kWorkspaceAlign);
    aclError err = UploadToDevice(tilingDevice, l.tiling.data(), l.tiling.size(), stream);
    if (err != ACL_SUCCESS) {
      SetLastError(std::string(op) + ": copying the tiling data to the device failed (error " + std::to_string(err) + ")");
      return ACLNN_ERR_RUNTIME_ERROR;
    }
    err = l.launch(tilingDevice, kernelWorkspace, stream);
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
