// The CUDA language and runtime pieces the kernels use, for g++ and the CPU
// harness (harness.cpp). A launch runs every block in turn (the blocks of a
// thread-block cluster together); a block runs each of its threads as a fiber on
// the calling OS thread, switching at __syncthreads, cluster_sync and warp
// shuffles, so barriers and shuffles have their GPU meaning, and misuse that a
// GPU would turn into a hang or garbage is reported instead:
//   * a __syncthreads not reached by every thread of the block, or a
//     cluster_sync not reached by every thread of the cluster (a thread exited,
//     or waits at a shuffle or at another barrier);
//   * a shuffle whose mask leaves out the calling lane, names a lane that does
//     not exist, or names a lane that does not reach the same shuffle;
//   * launch configurations beyond the GPU's limits (threads, grid, dynamic
//     shared memory for the configured sm_80 / sm_90);
//   * shared memory accessed by two threads between the same two barriers with
//     at least one write (threads of two blocks of a cluster: with no
//     cluster_sync between), and shared memory accessed out of bounds: dynamic
//     shared memory beyond the launch's size, a static __shared__ array past
//     its end or before its start (every byte of an access through the
//     kernels' helpers; on x86-64 Linux any other access is trapped too, see
//     harness.cpp);
//   * distributed shared memory misused: a block rank past the cluster, an
//     address outside the dynamic window mapped, an access to the shared memory
//     of a block whose threads have all exited.
// A report is a std::runtime_error naming the kernel, block and thread, thrown
// by the launch. A lane that reads a shuffled value from a lane outside the mask
// gets NaN bits (all ones), as undefined as on the GPU but easy to see.
#pragma once

#include <math.h>  // the global-namespace float overloads device code calls unqualified

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
// Always inlined, as nvcc does: memory_access tells accesses apart by the place
// in the kernel it returns to.
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one after another, so a static variable is one block's shared
// memory. The blocks of a cluster run together: each has its own copy of every
// array, which the harness puts in place when one of the block's threads
// accesses the array (harness.cpp). Dynamic shared memory:
// cuda_sim::dynamic_shared_memory().
//
// Each static __shared__ array starts a slot of its own (CUDA_SIM_SHARED_SLOT
// bytes, at least two pages): the linker puts no other shared array in the rest
// of the slot, so an index just past the end (or before the start, in the page
// the harness watches in front of the slot) lands in memory that is no shared
// array and is reported as out of bounds, where arrays packed next to each other
// would have taken it for an access to the neighbour. .bss address space only.
#define CUDA_SIM_SHARED_SLOT 8192
#define __shared__ static __attribute__((aligned(CUDA_SIM_SHARED_SLOT)))

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef struct CUstream_st* cudaStream_t;

enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }

namespace cuda_sim {

// What the built-in variables read: the scheduler sets it before it resumes a fiber.
struct ThreadView {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local ThreadView g_view;

void syncthreads(const char* file, int line);

enum class ShuffleKind { Idx, Up, Down, Xor };
// Exchanges `size` bytes among the lanes of `mask`; writes the value this lane reads.
void shuffle(unsigned mask, ShuffleKind kind, int arg, int width, const void* value, void* result,
             size_t size);

template <typename T>
T shuffle_typed(unsigned mask, ShuffleKind kind, int arg, int width, const T& value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle of a non-register type");
  T result;
  shuffle(mask, kind, arg, width, &value, &result, sizeof(T));
  return result;
}

// The launch's dynamic shared memory (the bytes of its third <<<>>> argument):
// the calling thread's block's.
unsigned char* dynamic_shared_memory();

// GPU generations whose limits the launches are checked against.
enum class Arch { Sm80, Sm90 };
void set_arch(Arch arch);
Arch arch();
// cudaDevAttrMaxSharedMemoryPerBlockOptin of the configured arch: 163 KiB on
// sm_80, 227 KiB on sm_90.
size_t max_dynamic_shared_optin();
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes):
// the kernel's later launches may use up to `bytes` of dynamic shared memory
// (48 KiB without). Past the arch's opt-in maximum it is reported (thrown), as
// the call fails on the GPU.
void allow_dynamic_shared(const char* kernel_name, size_t bytes);

// The order the blocks of a launch run in. A GPU runs them in any order, at
// once: a kernel whose result depends on it (float sums across blocks in
// arrival order, as atomics give) shows different bits under Reverse.
enum class BlockOrder { Linear, Reverse };
void set_block_order(BlockOrder order);

// Kernel launches made by this process's harness so far (every launch counts,
// including one that reports a misuse).
uint64_t launches();

// Global-memory traffic of the launches between traffic_begin() and
// traffic_end() on this thread (op_extension.cuda_sim.traffic): bytes the
// kernels read and wrote through their load/store helpers, the distinct bytes
// each warp-wide access asked for and the bytes of the 32-byte sectors they lie
// in (their ratio is the coalescing: 1.0 when every sector is used whole), and
// the workspace the glue allocated for them; and of shared memory, the
// wavefronts each warp-wide access takes through the 32 banks.
// One launch's share of it: the kernel (as the harness names it), its geometry
// (what a GPU's occupancy depends on beside the kernel's registers and static
// shared memory: op_extension/cuda_occupancy.py) and its bytes.
struct LaunchTraffic {
  std::string kernel;
  unsigned cluster_blocks = 1;  // blocks per thread-block cluster (1: none)
  dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};
struct TrafficCounts {
  uint64_t launches = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t requested_bytes = 0;
  uint64_t sector_bytes = 0;
  uint64_t workspace_bytes = 0;
  // Shared memory: the wavefronts its warp-wide accesses take with the bank
  // conflicts they have, and without (one per phase of the access).
  uint64_t shared_wavefronts = 0;
  uint64_t shared_ideal_wavefronts = 0;
  std::vector<LaunchTraffic> per_launch;  // in launch order
};
// launches_only: until traffic_end(), a launch is checked (check_config) and
// recorded with its geometry but does not run (no bytes are counted, outputs are
// left as they were): the launches of an op at shapes too large to run here.
void traffic_begin(bool launches_only = false);
TrafficCounts traffic_end();
void note_workspace(uint64_t bytes);
// Called by the kernels' load/store helpers (kernel/cuda/cuda_common.cuh) for
// every access of `bytes` bytes at p. Shared memory (a block's dynamic window,
// a static __shared__ array) is checked for every byte, as watched memory is
// (bounds, races: reported like a fault's finding), and the same bytes are
// returned at their unwatched address, so the access does not fault; global
// memory is counted (traffic) and p returned. Space::Shared: p must be shared
// memory (load_shared, store_shared), anything else is reported.
enum class Space { Any, Shared };
void* memory_access(const void* p, size_t bytes, bool write, Space space);
// initcheck (compute-sanitizer's, for global memory): `bytes` at p were just
// allocated as a launcher's workspace, which only kernels write. A kernel
// thread that reads a byte of it no kernel has written is reported.
// forget_allocation: p's tracking ends (the call is over). uninitialized_bytes_tracked:
// all bytes ever tracked in this process (tests show the op paths register theirs).
void track_uninitialized(const void* p, size_t bytes);
void forget_allocation(const void* p);
uint64_t uninitialized_bytes_tracked();
// Tracks `bytes` at p (nullptr or 0: nothing) while it lives: a launcher call's workspace.
class TrackedWorkspace {
 public:
  TrackedWorkspace(const void* p, size_t bytes) : p_(p) { track_uninitialized(p, bytes); }
  ~TrackedWorkspace() { forget_allocation(p_); }
  TrackedWorkspace(const TrackedWorkspace&) = delete;
  TrackedWorkspace& operator=(const TrackedWorkspace&) = delete;

 private:
  const void* p_;
};
// Accesses of watched shared memory by kernel threads that bypassed the
// helpers, in this process so far: each was checked through a page fault (for
// its first byte), at some 20 us apiece.
uint64_t shared_faults();

// How the harness switches between a block's threads in this process: "stack"
// (its own switch of stacks, x86-64 Linux) or "ucontext" (glibc's swapcontext:
// elsewhere, under a CET shadow stack, or asked by OP_EXT_CUDA_SIM_SWITCH=ucontext).
const char* fiber_switch();

// Runs body(closure) as every thread of every block; throws std::runtime_error
// with the first report. cluster_blocks > 1: a launch of thread-block clusters
// (sm_90; cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension {n, 1, 1}):
// blocks x .. x + n - 1 form one cluster, whose blocks run together (their
// fibers interleave), each with its own shared memory (dynamic and static).
void launch(const char* kernel_name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
            void (*body)(void*), void* closure, unsigned cluster_blocks = 1);

// ---- thread-block clusters (sm_90) ------------------------------------------------------
//
// What a cluster kernel calls (kernel/cuda/cuda_common.cuh wraps them as
// cluster_block_rank, cluster_sync and cluster_map_shared). On a launch without
// clusters a block is a cluster of one, as on the GPU.
// %cluster_ctarank: the block's rank in its cluster, 0 .. cluster_blocks - 1.
unsigned cluster_block_rank();
unsigned cluster_blocks();
// barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every thread of
// every block of the cluster must reach it (a report otherwise, as for
// __syncthreads); it orders all their shared-memory accesses, local and remote.
void cluster_sync(const char* file, int line);
// mapa: the address in block `rank`'s dynamic shared memory that `p` (in this
// block's dynamic shared memory) has in this block's. Reported: a rank past the
// cluster, an address outside dynamic shared memory (the harness models
// distributed shared memory for the dynamic window only). An access through it
// to a block of the cluster whose threads have all exited is reported too.
void* map_shared_rank(void* p, unsigned rank);

namespace detail {

template <auto Kernel>
std::string kernel_name() {
  // GCC spells the template argument: "... [with auto Kernel = ns::name<...>]".
  const std::string pretty = __PRETTY_FUNCTION__;
  const auto at = pretty.find("Kernel = ");
  if (at == std::string::npos) return pretty;
  std::string name = pretty.substr(at + 9);
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    depth += c == '<' ? 1 : (c == '>' ? -1 : 0);
    if (depth == 0 && (c == ';' || c == ']')) return name.substr(0, i);
  }
  return name;
}

template <auto Kernel, typename Fn>
struct KernelLaunch;

template <auto Kernel, typename... Params>
struct KernelLaunch<Kernel, void (*)(Params...)> {
  template <typename... Args>
  static void run(dim3 grid, dim3 block, size_t shared, unsigned cluster_blocks, Args&&... args) {
    // Converted once, as the GPU copies the arguments at the launch; every
    // thread then gets its own by-value copies through the call.
    std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    const std::string name = kernel_name<Kernel>();
    launch(name.c_str(), grid, block, shared,
           [](void* p) { std::apply(Kernel, *static_cast<decltype(params)*>(p)); }, &params, cluster_blocks);
  }
};

}  // namespace detail

// The harness's kernel<<<grid, block, shared, stream>>>(args...); with
// cluster_blocks > 1, cudaLaunchKernelEx of clusters of that many blocks.
template <auto Kernel, typename... Args>
void launch_kernel(dim3 grid, dim3 block, size_t shared, cudaStream_t, Args&&... args) {
  detail::KernelLaunch<Kernel, decltype(Kernel)>::run(grid, block, shared, 1u, std::forward<Args>(args)...);
}
template <auto Kernel, typename... Args>
void launch_kernel_cluster(dim3 grid, dim3 block, unsigned cluster_blocks, size_t shared, cudaStream_t,
                           Args&&... args) {
  detail::KernelLaunch<Kernel, decltype(Kernel)>::run(grid, block, shared, cluster_blocks,
                                                      std::forward<Args>(args)...);
}

}  // namespace cuda_sim

#define threadIdx (::cuda_sim::g_view.thread_idx)
#define blockIdx (::cuda_sim::g_view.block_idx)
#define blockDim (::cuda_sim::g_view.block_dim)
#define gridDim (::cuda_sim::g_view.grid_dim)
constexpr int warpSize = 32;

#define __syncthreads() ::cuda_sim::syncthreads(__FILE__, __LINE__)

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return cuda_sim::shuffle_typed(mask, cuda_sim::ShuffleKind::Idx, src_lane, width, v);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cuda_sim::shuffle_typed(mask, cuda_sim::ShuffleKind::Up, static_cast<int>(delta), width, v);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cuda_sim::shuffle_typed(mask, cuda_sim::ShuffleKind::Down, static_cast<int>(delta), width, v);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return cuda_sim::shuffle_typed(mask, cuda_sim::ShuffleKind::Xor, lane_mask, width, v);
}

// CUDA's overloaded min/max for device code (same-type arguments).
template <typename T>
constexpr T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
constexpr T max(T a, T b) {
  return a < b ? b : a;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
