// How the npu glue calls an aclnn entry point: at::Tensor -> aclTensor, the
// two-phase call (GetWorkspaceSize, then launch) on the current NPU stream, and
// the lifetime of everything the launch reads.
//
// Only the npu glue includes this; it needs CANN's aclnn/acl_meta.h and
// torch_npu, so it is compiled only in an NPU build (setup.py) and by the
// compile check (scripts/check_npu_glue.sh).
#pragma once

#include <ATen/core/Tensor.h>
#include <acl/acl.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/string_view.h>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "aclnn/acl_meta.h"

namespace op_ext::npu {

// The aclDataType of a torch dtype; TypeError for dtypes aclnn has no name for.
aclDataType acl_dtype(const char* op, c10::ScalarType dtype);

// The arguments of one aclnn call, converted and owned until its launch has run.
// The launch may run later, on torch_npu's task-queue thread, so nothing it
// reads may live on the caller's stack.
class AclnnArgs {
 public:
  explicit AclnnArgs(const char* op) : op_(op) {}
  AclnnArgs(const AclnnArgs&) = delete;
  AclnnArgs& operator=(const AclnnArgs&) = delete;
  ~AclnnArgs();

  // A view of `t` as CANN's aclCreateTensor takes it: the storage's base
  // address and element count, the view's sizes, strides and offset (in
  // elements), format ND. `t` must be a dense (base-format) npu tensor; its
  // memory stays owned by torch.
  const aclTensor* tensor(const at::Tensor& t);
  // nullptr when absent: the aclnn `...Optional` inputs and outputs.
  const aclTensor* tensor(const std::optional<at::Tensor>& t);
  const aclIntArray* int_array(at::IntArrayRef values);
  // A NUL-terminated copy, for the aclnn `char*` attributes.
  char* string(c10::string_view s);

 private:
  const char* op_;
  std::vector<aclTensor*> tensors_;
  std::vector<aclIntArray*> int_arrays_;
  std::vector<std::unique_ptr<std::string>> strings_;  // stable addresses
};

// Phase 1 of an aclnn op: converts its arguments into `args` and calls
// aclnn<Op>GetWorkspaceSize with them, which fills the workspace size and executor.
using AclnnGetWorkspaceSize =
    c10::function_ref<aclnnStatus(AclnnArgs& args, uint64_t*, aclOpExecutor**)>;
// Phase 2: every aclnn op has this signature.
using AclnnLaunch = aclnnStatus (*)(void*, uint64_t, aclOpExecutor*, aclrtStream);

// Runs `get_workspace_size` now (it checks the arguments and tiles), allocates
// the workspace from torch_npu's caching allocator on `device`, and queues
// `launch` on the current NPU stream of `device` the way torch_npu's own ops
// are queued; the converted arguments are released after the launch. `api`
// names the entry point in error messages ("aclnnGeluCustom"). The caller
// holds a device guard for `device`.
void run_aclnn(const char* op, const char* api, const at::Device& device,
               AclnnGetWorkspaceSize get_workspace_size, AclnnLaunch launch);

namespace detail {
// One argument of an aclnn entry point as it takes it: tensors, int lists and
// strings converted into (and owned by) `args`; numbers passed through.
inline const aclTensor* aclnn_arg(AclnnArgs& args, const at::Tensor& t) { return args.tensor(t); }
inline const aclTensor* aclnn_arg(AclnnArgs& args, const std::optional<at::Tensor>& t) {
  return args.tensor(t);
}
inline const aclIntArray* aclnn_arg(AclnnArgs& args, at::IntArrayRef v) {
  return args.int_array(v);
}
inline char* aclnn_arg(AclnnArgs& args, c10::string_view s) { return args.string(s); }
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
T aclnn_arg(AclnnArgs& /*args*/, T value) {
  return value;
}
}  // namespace detail

// run_aclnn for an entry point taking `args...` (converted as above) followed
// by the workspace size and executor:
//   call_aclnn(op, "aclnnGeluCustom", device, aclnnGeluCustomGetWorkspaceSize,
//              aclnnGeluCustom, x, approximate, out);
template <typename GetWorkspaceSize, typename... Args>
void call_aclnn(const char* op, const char* api, const at::Device& device,
                GetWorkspaceSize get_workspace_size, AclnnLaunch launch, const Args&... args) {
  run_aclnn(
      op, api, device,
      [&](AclnnArgs& owned, uint64_t* workspace_size, aclOpExecutor** executor) {
        return get_workspace_size(detail::aclnn_arg(owned, args)..., workspace_size, executor);
      },
      launch);
}

}  // namespace op_ext::npu
