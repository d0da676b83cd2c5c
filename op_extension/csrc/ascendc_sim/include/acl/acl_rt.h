// Runtime subset (CANN's acl/acl_rt.h) for the op_extension Ascend C simulator:
// device memory is host memory registered as simulated GM, and the "stream"
// executes everything at once, in order.
#ifndef ASCENDC_SIM_ACL_ACL_RT_H_
#define ASCENDC_SIM_ACL_ACL_RT_H_

#include <cstdlib>
#include <cstring>

#include "acl/acl_base.h"
#include "ascendc_sim/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST,
  ACL_MEMCPY_HOST_TO_DEVICE,
  ACL_MEMCPY_DEVICE_TO_HOST,
  ACL_MEMCPY_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST,
  ACL_MEM_MALLOC_HUGE_ONLY,
  ACL_MEM_MALLOC_NORMAL_ONLY,
} aclrtMemMallocPolicy;

inline const char *aclrtGetSocName() { return ascendc_sim::Device().spec.socName.c_str(); }

// Float overflow mode of the device (CANN runtime API, aclrtFloatOverflowMode
// page): in saturation mode an inf result is +-max and a NaN result is 0 (for
// float16 / bfloat16 results, CTRL[48] of the SetCtrlSpr page). Atlas A2 defaults
// to inf/NaN mode; Atlas inference (310P) supports only saturation mode.
typedef enum aclrtFloatOverflowMode {
  ACL_RT_OVERFLOW_MODE_SATURATION = 0,
  ACL_RT_OVERFLOW_MODE_INFNAN,
  ACL_RT_OVERFLOW_MODE_UNDEF,
} aclrtFloatOverflowMode;

inline aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode) {
  auto &spec = ascendc_sim::Device().spec;
  if (mode == ACL_RT_OVERFLOW_MODE_SATURATION) {
    spec.saturation = true;
    return ACL_SUCCESS;
  }
  if (mode == ACL_RT_OVERFLOW_MODE_INFNAN && !spec.saturationOnly) {
    spec.saturation = false;
    return ACL_SUCCESS;
  }
  ascendc_sim::HostState().lastError =
      mode == ACL_RT_OVERFLOW_MODE_INFNAN
          ? "aclrtSetDeviceSatMode: " + spec.socName + " supports only ACL_RT_OVERFLOW_MODE_SATURATION"
          : std::string("aclrtSetDeviceSatMode: invalid mode");
  return ACL_ERROR_INVALID_PARAM;
}

inline aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode) {
  if (mode == nullptr) return ACL_ERROR_INVALID_PARAM;
  *mode = ascendc_sim::Device().spec.saturation ? ACL_RT_OVERFLOW_MODE_SATURATION : ACL_RT_OVERFLOW_MODE_INFNAN;
  return ACL_SUCCESS;
}

inline aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  if (devPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  // 512-byte aligned, as the device allocator returns, with the padding the
  // runtime guarantees behind the end (ascendc_sim::AllocatorPadding).
  const uint64_t padding = ascendc_sim::AllocatorPadding(size);
  const size_t rounded = (size + padding + 511) / 512 * 512;
  ++ascendc_sim::RuntimeCounters().aclrtMalloc;
  void *p = std::aligned_alloc(512, rounded);
  if (p == nullptr) return ACL_ERROR_BAD_ALLOC;
  std::memset(p, ascendc_sim::kGarbageByte, rounded);
  ascendc_sim::RegisterGm(p, size, "aclrtMalloc buffer", padding);
  *devPtr = p;
  return ACL_SUCCESS;
}

inline aclError aclrtFree(void *devPtr) {
  if (devPtr == nullptr) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtFree;
  ascendc_sim::UnregisterGm(devPtr);
  std::free(devPtr);
  return ACL_SUCCESS;
}

inline aclError aclrtMallocHost(void **hostPtr, size_t size) {
  if (hostPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtMallocHost;
  *hostPtr = std::aligned_alloc(64, (size + 63) / 64 * 64);
  return *hostPtr == nullptr ? ACL_ERROR_BAD_ALLOC : ACL_SUCCESS;
}

inline aclError aclrtFreeHost(void *hostPtr) {
  ++ascendc_sim::RuntimeCounters().aclrtFreeHost;
  std::free(hostPtr);
  return ACL_SUCCESS;
}

#ifdef __cplusplus
}
#endif

namespace ascendc_sim {
inline aclError Memcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  if (dst == nullptr || src == nullptr || count > destMax) return ACL_ERROR_INVALID_PARAM;
  try {
    if (kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE) {
      ascendc_sim::CheckGm(src, count, "aclrtMemcpy source");
    }
    if (kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE) {
      ascendc_sim::WriteGm(dst, src, count, "aclrtMemcpy destination");
    } else {
      std::memmove(dst, src, count);
    }
  } catch (const ascendc_sim::SimError &e) {
    ascendc_sim::HostState().lastError = e.what();
    return ACL_ERROR_INVALID_PARAM;
  }
  return ACL_SUCCESS;
}
}  // namespace ascendc_sim

#ifdef __cplusplus
extern "C" {
#endif

inline aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  ++ascendc_sim::RuntimeCounters().aclrtMemcpy;
  return ascendc_sim::Memcpy(dst, destMax, src, count, kind);
}

// Runs at once: the simulated stream has nothing queued before it.
inline aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                 aclrtStream /*stream*/) {
  ++ascendc_sim::RuntimeCounters().aclrtMemcpyAsync;
  return ascendc_sim::Memcpy(dst, destMax, src, count, kind);
}

inline aclError aclrtSynchronizeStream(aclrtStream /*stream*/) {
  ++ascendc_sim::RuntimeCounters().aclrtSynchronizeStream;
  return ACL_SUCCESS;
}

// Events: everything on a simulated stream has run when the next call starts,
// so an event is complete as soon as it is recorded. What is checked is the
// protocol: only created, not destroyed events are recorded or waited for.
#ifdef __cplusplus
}
#endif

namespace ascendc_sim {
struct SimEvent {
  uint32_t magic = 0x45564e54;  // "EVNT"; cleared on destroy
  bool recorded = false;
};
inline SimEvent *AsEvent(aclrtEvent event) {
  auto *e = static_cast<SimEvent *>(event);
  return e != nullptr && e->magic == 0x45564e54 ? e : nullptr;
}
}  // namespace ascendc_sim

#ifdef __cplusplus
extern "C" {
#endif

inline aclError aclrtCreateEvent(aclrtEvent *event) {
  if (event == nullptr) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtCreateEvent;
  *event = new ascendc_sim::SimEvent;
  return ACL_SUCCESS;
}

inline aclError aclrtDestroyEvent(aclrtEvent event) {
  auto *e = ascendc_sim::AsEvent(event);
  if (e == nullptr) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtDestroyEvent;
  e->magic = 0;
  delete e;
  return ACL_SUCCESS;
}

inline aclError aclrtRecordEvent(aclrtEvent event, aclrtStream /*stream*/) {
  auto *e = ascendc_sim::AsEvent(event);
  if (e == nullptr) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtRecordEvent;
  e->recorded = true;
  return ACL_SUCCESS;
}

inline aclError aclrtSynchronizeEvent(aclrtEvent event) {
  if (ascendc_sim::AsEvent(event) == nullptr) return ACL_ERROR_INVALID_PARAM;
  ++ascendc_sim::RuntimeCounters().aclrtSynchronizeEvent;
  return ACL_SUCCESS;
}

#ifdef __cplusplus
}
#endif

#endif  // ASCENDC_SIM_ACL_ACL_RT_H_
