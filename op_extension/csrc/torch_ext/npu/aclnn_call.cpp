#include "aclnn_call.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "aclnn_op_ext_error.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace op_ext::npu {
namespace {

// Why an aclnn call failed: our entry points record their own message (naming
// the op and the argument); CANN's runtime errors are in aclGetRecentErrMsg.
std::string aclnn_error() {
  const char* ours = aclnnOpExtGetLastErrorMessage();
  if (ours != nullptr && *ours != '\0') return ours;
  const char* runtime = aclGetRecentErrMsg();
  return runtime != nullptr ? runtime : "";
}

}  // namespace

aclDataType acl_dtype(const char* op, c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return ACL_FLOAT;
    case at::kHalf:
      return ACL_FLOAT16;
    case at::kBFloat16:
      return ACL_BF16;
    case at::kDouble:
      return ACL_DOUBLE;
    default:
      TORCH_CHECK_TYPE(false, op, ": no aclDataType for dtype ", dtype);
  }
}

AclnnArgs::~AclnnArgs() {
  for (aclTensor* t : tensors_) aclDestroyTensor(t);
  for (aclIntArray* a : int_arrays_) aclDestroyIntArray(a);
}

const aclTensor* AclnnArgs::tensor(const at::Tensor& t) {
  const int64_t itemsize = static_cast<int64_t>(t.itemsize());
  // The whole storage as a 1-D array of elements; the view says which part is `t`.
  const int64_t storage_elements = static_cast<int64_t>(t.storage().nbytes()) / itemsize;
  aclTensor* handle = aclCreateTensor(
      t.sizes().data(), t.sizes().size(), acl_dtype(op_, t.scalar_type()), t.strides().data(),
      t.storage_offset(), ACL_FORMAT_ND, &storage_elements, 1,
      const_cast<void*>(t.storage().data()));
  TORCH_CHECK(handle != nullptr, op_, ": aclCreateTensor failed for a tensor of shape ", t.sizes(),
              ": ", aclGetRecentErrMsg());
  tensors_.push_back(handle);
  return handle;
}

const aclTensor* AclnnArgs::tensor(const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return nullptr;
  return tensor(*t);
}

const aclIntArray* AclnnArgs::int_array(at::IntArrayRef values) {
  aclIntArray* handle = aclCreateIntArray(values.data(), values.size());
  TORCH_CHECK(handle != nullptr, op_, ": aclCreateIntArray failed for ", values, ": ",
              aclGetRecentErrMsg());
  int_arrays_.push_back(handle);
  return handle;
}

char* AclnnArgs::string(c10::string_view s) {
  strings_.push_back(std::make_unique<std::string>(s.data(), s.size()));
  return strings_.back()->data();
}

void run_aclnn(const char* op, const char* api, const at::Device& device,
               AclnnGetWorkspaceSize get_workspace_size, AclnnLaunch launch) {
  // Shared, because std::function (the task queue's type) needs a copyable callable.
  const auto args = std::make_shared<AclnnArgs>(op);
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  const aclnnStatus prepared = get_workspace_size(*args, &workspace_size, &executor);
  TORCH_CHECK(prepared == 0, op, ": ", api, "GetWorkspaceSize failed with status ", prepared, ": ",
              aclnn_error());

  // The workspace block goes back to the caching allocator when this function
  // returns. That is safe for the same reason torch_npu's own temporaries are:
  // a freed block is only handed to work queued later on the same stream.
  at::Tensor workspace;
  void* workspace_addr = nullptr;
  if (workspace_size > 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_size)},
                          at::TensorOptions().dtype(at::kByte).device(device));
    workspace_addr = workspace.data_ptr();
  }

  // stream(false): the launch goes into torch_npu's task queue (RunOpApiV2)
  // behind the work already queued, so the queue must not be drained first.
  const aclrtStream stream = c10_npu::getCurrentNPUStream(device.index()).stream(false);
  at_npu::native::OpCommand::RunOpApiV2(
      api, [args, workspace_addr, workspace_size, executor, stream, launch, op, api]() -> int {
        const aclnnStatus launched = launch(workspace_addr, workspace_size, executor, stream);
        TORCH_CHECK(launched == 0, op, ": ", api, " failed with status ", launched, ": ",
                    aclnn_error());
        return launched;
      });
}

}  // namespace op_ext::npu
