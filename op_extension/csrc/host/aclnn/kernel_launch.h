// The one place where launching an Ascend C kernel differs between CANN and the
// simulator.
//
// CANN: the kernels are compiled into a kernel-launch library by CMake's
// ascendc_library(), which generates aclrtlaunch_<kernel>.h declaring
// ACLRT_LAUNCH_KERNEL(<kernel>)(blockDim, stream, args...); each aclnn file
// includes that header for its kernel. (GM_ADDR arguments are void* there; the
// uint8_t* we pass converts.)
// Simulator (-DOP_EXT_ASCEND_SIM): the kernel is an ordinary extern "C" function
// run once per simulated core by ascendc_sim::LaunchKernel.
//
//   OP_EXT_DECLARE_KERNEL(add_custom, GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling);
//   aclError err = OP_EXT_LAUNCH_KERNEL(add_custom, blockDim, stream, x, y, z, workspace, tiling);
#ifndef OP_EXT_ACLNN_KERNEL_LAUNCH_H_
#define OP_EXT_ACLNN_KERNEL_LAUNCH_H_

#include <cstdint>

#ifdef OP_EXT_ASCEND_SIM
#include "ascendc_sim/launch.h"

#define OP_EXT_GM_ADDR uint8_t*
#define OP_EXT_DECLARE_KERNEL(name, ...) extern "C" void name(__VA_ARGS__)
#define OP_EXT_LAUNCH_KERNEL(name, blockDim, stream, ...) \
  ::ascendc_sim::LaunchKernel(#name, (blockDim), [&]() { name(__VA_ARGS__); })

#else
#define OP_EXT_GM_ADDR uint8_t*
// Declared by aclrtlaunch_<name>.h, which the aclnn file includes.
#define OP_EXT_DECLARE_KERNEL(name, ...) static_assert(true, "")
#define OP_EXT_LAUNCH_KERNEL(name, blockDim, stream, ...) \
  static_cast<aclError>(ACLRT_LAUNCH_KERNEL(name)((blockDim), (stream), __VA_ARGS__))

#endif

#endif  // OP_EXT_ACLNN_KERNEL_LAUNCH_H_
