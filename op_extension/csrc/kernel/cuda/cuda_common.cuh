// Device helpers shared by the CUDA kernel files: accumulation types, 128-bit
// loads and stores that widen float16/bfloat16 to float, block reductions, the
// elementwise map kernel, the fixed-order sum of per-block partial rows and the
// dtype switch. Plain CUDA: no torch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda_kernels.h"

namespace op_ext::cuda {
namespace detail {

// ---- dynamic shared memory past 48 KiB ----------------------------------------------
//
// A block gets 48 KiB of dynamic shared memory unless its kernel opts into more
// (cudaFuncSetAttribute, MaxDynamicSharedMemorySize), up to the device's opt-in
// maximum: 163 KiB on sm_80, 227 KiB on sm_90, 99 KiB on sm_86/sm_89.
inline constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;
inline constexpr int kMaxDevices = 64;

#ifndef OP_EXT_CUDA_SIM
// The current device, as an index into the per-device tables below; -1 where it
// cannot be read or is past them (then nothing is cached for it).
inline int current_device_slot() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    (void)cudaGetLastError();
    return -1;
  }
  return device;
}
#endif

// The current device's opt-in maximum, read once per device (48 KiB where it
// cannot be read).
inline size_t max_dynamic_shared_optin() {
#ifdef OP_EXT_CUDA_SIM
  return ::cuda_sim::max_dynamic_shared_optin();
#else
  static std::atomic<int> read_bytes[kMaxDevices];  // 0: not read yet
  const int device = current_device_slot();
  if (device < 0) return kDefaultDynamicSharedBytes;
  int bytes = read_bytes[device].load(std::memory_order_relaxed);
  if (bytes == 0) {
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
        bytes < static_cast<int>(kDefaultDynamicSharedBytes)) {
      (void)cudaGetLastError();
      bytes = static_cast<int>(kDefaultDynamicSharedBytes);
    }
    read_bytes[device].store(bytes, std::memory_order_relaxed);
  }
  return static_cast<size_t>(bytes);
#endif
}

// Lets Kernel launch with `bytes` of dynamic shared memory on the current device.
// The attribute is the kernel's (per device), so it is set when a launch first
// needs more than the kernel was given, not on every launch. Setting it is no
// stream operation and is allowed while a CUDA graph is being captured.
template <auto Kernel>
void allow_dynamic_shared(size_t bytes) {
#ifdef OP_EXT_CUDA_SIM
  ::cuda_sim::allow_dynamic_shared(::cuda_sim::detail::kernel_name<Kernel>().c_str(), bytes);
#else
  static std::atomic<size_t> allowed[kMaxDevices];
  const int device = current_device_slot();
  if (device >= 0 && bytes <= allowed[device].load(std::memory_order_relaxed)) return;
  // A failure shows as the launch's error, which the glue checks.
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(Kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) == cudaSuccess &&
      device >= 0) {
    size_t seen = allowed[device].load(std::memory_order_relaxed);
    while (seen < bytes && !allowed[device].compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
    }
  }
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...). Every launch goes
// through here so that the same sources also run on the CPU harness
// (op_extension/csrc/cuda_sim, built with g++ and OP_EXT_CUDA_SIM).
template <auto Kernel, typename... Args>
void launch_kernel(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  if (shared_bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared<Kernel>(shared_bytes);
#ifdef OP_EXT_CUDA_SIM
  ::cuda_sim::launch_kernel<Kernel>(grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
  Kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
}

// ---- thread-block clusters (sm_90) ------------------------------------------------------
//
// A cluster's blocks run at once on neighbouring SMs and can read each other's
// shared memory (distributed shared memory), so a row too long for one block's
// registers and shared memory can still be read once: each block of the
// cluster holds a slice of it (norm.cu, "rows held by a cluster").

// Whether the current device launches clusters (compute capability 9.0 and
// up: cudaDevAttrClusterLaunch), read once per device; on the harness, when it
// is configured as sm_90.
inline bool cluster_launch_supported() {
#ifdef OP_EXT_CUDA_SIM
  return ::cuda_sim::arch() == ::cuda_sim::Arch::Sm90;
#else
  static std::atomic<int> read_support[kMaxDevices];  // 0: not read, 1: no, 2: yes
  const int device = current_device_slot();
  if (device < 0) return false;
  int support = read_support[device].load(std::memory_order_relaxed);
  if (support == 0) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
      (void)cudaGetLastError();
      value = 0;
    }
    support = value != 0 ? 2 : 1;
    read_support[device].store(support, std::memory_order_relaxed);
  }
  return support == 2;
#endif
}

#ifndef OP_EXT_CUDA_SIM
// Whether Kernel's code for the current device was generated for sm_90 or later
// (its virtual arch, cudaFuncAttributes::ptxVersion), read once per device. Its
// cluster calls exist only there: built for an older arch (TORCH_CUDA_ARCH_LIST
// without 9.0, the PTX JIT-compiled on an H100) they trap.
template <auto Kernel>
bool compiled_for_clusters() {
  static std::atomic<int> known[kMaxDevices];  // 0: not read, 1: no, 2: yes
  const int device = current_device_slot();
  if (device < 0) return false;
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    cudaFuncAttributes attributes{};
    const bool read = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(Kernel)) == cudaSuccess;
    if (!read) (void)cudaGetLastError();
    state = read && attributes.ptxVersion >= 90 ? 2 : 1;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}
#endif

// Kernel<<<grid, block, shared_bytes, stream>>>(args...) in clusters of
// cluster_blocks blocks along x (grid.x a multiple of it; at most 8, the
// portable cluster size). False, with the error cleared, where the GPU cannot
// co-schedule such a cluster (cudaErrorClusterOutOfResources and the like), and
// without launching where the kernel was not built for sm_90: the caller then
// launches its one-block kernel instead. A sticky error (a fault of an earlier
// kernel) is left for the glue's launch check.
template <auto Kernel, typename... Args>
bool launch_cluster_kernel(dim3 grid, dim3 block, unsigned cluster_blocks, size_t shared_bytes,
                           cudaStream_t stream, Args&&... args) {
#ifdef OP_EXT_CUDA_SIM
  if (shared_bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared<Kernel>(shared_bytes);
  ::cuda_sim::launch_kernel_cluster<Kernel>(grid, block, cluster_blocks, shared_bytes, stream,
                                            std::forward<Args>(args)...);
  return true;
#else
  if (!compiled_for_clusters<Kernel>()) return false;
  if (shared_bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared<Kernel>(shared_bytes);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster_blocks;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  if (cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...) == cudaSuccess) return true;
  (void)cudaGetLastError();                     // clears a launch error ...
  return cudaPeekAtLastError() != cudaSuccess;  // ... but not a sticky one
#endif
}

// The block's rank in its cluster (%cluster_ctarank).
__device__ __forceinline__ unsigned cluster_block_rank() {
#if defined(OP_EXT_CUDA_SIM)
  return ::cuda_sim::cluster_block_rank();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
#else
  return 0;  // no clusters before sm_90: the host never launches one there
#endif
}

// Every thread of every block of the cluster: a barrier that also orders their
// shared-memory accesses, this block's and the others' (release, acquire). The
// harness's reports name the caller's line.
#if defined(OP_EXT_CUDA_SIM)
__device__ __forceinline__ void cluster_sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cuda_sim::cluster_sync(file, line);
}
#else
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}
#endif

// The address that `p`, in this block's dynamic shared memory, has in block
// `rank` of the cluster (mapa): read with ordinary loads.
template <typename T>
__device__ __forceinline__ T* cluster_map_shared(T* p, unsigned rank) {
#if defined(OP_EXT_CUDA_SIM)
  return static_cast<T*>(::cuda_sim::map_shared_rank(const_cast<void*>(static_cast<const void*>(p)), rank));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t mapped;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(mapped) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<T*>(mapped);
#else
  (void)rank;
  return p;
#endif
}

// The launch's dynamic shared memory (its shared_bytes), 16-byte aligned.
__device__ __forceinline__ unsigned char* dynamic_shared_bytes() {
#ifdef OP_EXT_CUDA_SIM
  return ::cuda_sim::dynamic_shared_memory();
#else
  extern __shared__ __align__(16) unsigned char bytes[];
  return bytes;
#endif
}

// float16 and bfloat16 are computed in float; double stays double.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Elements of T in one 128-bit access.
template <typename T>
inline constexpr int kVecOf = static_cast<int>(16 / sizeof(T));

inline bool is_aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid sizes are capped; every kernel walks its work in grid-stride loops.
inline constexpr int64_t kMaxGridBlocks = int64_t{1} << 20;

inline unsigned grid_for(int64_t work_items, int threads) {
  const int64_t blocks = ceil_div(work_items, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxGridBlocks ? kMaxGridBlocks : blocks));
}

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// Rounds to T and back, so later math sees exactly what was stored.
template <typename T>
__device__ __forceinline__ acc_t<T> round_to(acc_t<T> v) {
  return to_acc(from_acc<T>(v));
}

// ---- memory accesses ---------------------------------------------------------------
//
// Every memory access of the kernels goes through these helpers: load_global /
// store_global or load_pack / store_pack for global memory (the pack helpers
// serve shared memory too), load_shared / store_shared for one element of
// shared memory. On the GPU they are plain loads and stores. On the CPU harness
// they call cuda_sim::memory_access, which counts the bytes each launch reads
// and writes in global memory and the 32-byte sectors each warp-wide access
// touches (op_extension.cuda_sim.traffic, held in CI against each kernel's
// minimum), and checks every byte of each shared-memory access for bounds and
// races, at the cost of a call. A shared access that bypasses them is still
// checked, through a page fault that costs some 20 us: the traffic test holds
// every kernel to zero of those.

#ifdef OP_EXT_CUDA_SIM
// The address to access: p, or for shared memory the harness's unwatched view of it.
template <typename T>
__device__ __forceinline__ T* sim_access(T* p, size_t bytes, bool write,
                                         ::cuda_sim::Space space = ::cuda_sim::Space::Any) {
  return static_cast<T*>(::cuda_sim::memory_access(p, bytes, write, space));
}
#endif

template <typename T>
__device__ __forceinline__ T load_global(const T* p) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(T), false);
#endif
  return *p;
}

template <typename T>
__device__ __forceinline__ void store_global(T* p, T value) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(T), true);
#endif
  *p = value;
}

// One element of shared memory (a __shared__ array, dynamic shared memory, or
// a peer block's through cluster_map_shared).
template <typename T>
__device__ __forceinline__ T load_shared(const T* p) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(T), false, ::cuda_sim::Space::Shared);
#endif
  return *p;
}

template <typename T>
__device__ __forceinline__ void store_shared(T* p, T value) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(T), true, ::cuda_sim::Space::Shared);
#endif
  *p = value;
}

// N elements of T as one aligned access (N * sizeof(T) == 16 for the vector path).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(Pack<T, N>), false);
#endif
  if constexpr (N == 1) {
    return Pack<T, 1>{{p[0]}};
  } else {
    return *reinterpret_cast<const Pack<T, N>*>(p);
  }
}

template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
#ifdef OP_EXT_CUDA_SIM
  p = sim_access(p, sizeof(Pack<T, N>), true);
#endif
  if constexpr (N == 1) {
    p[0] = pack.v[0];
  } else {
    *reinterpret_cast<Pack<T, N>*>(p) = pack;
  }
}

template <int N, typename T>
__device__ __forceinline__ void widen(const Pack<T, N>& pack, acc_t<T> (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_acc(pack.v[i]);
}

template <int N, typename T>
__device__ __forceinline__ void load_acc(const T* p, acc_t<T> (&out)[N]) {
  widen(load_pack<N>(p), out);
}

template <int N, typename T>
__device__ __forceinline__ void store_acc(T* p, const acc_t<T> (&in)[N]) {
  Pack<T, N> pack;
#pragma unroll
  for (int i = 0; i < N; ++i) pack.v[i] = from_acc<T>(in[i]);
  store_pack<N>(p, pack);
}

// ---- math with float and double overloads --------------------------------------

__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return exp(x); }
__device__ __forceinline__ float dev_erf(float x) { return erff(x); }
__device__ __forceinline__ double dev_erf(double x) { return erf(x); }
__device__ __forceinline__ float dev_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double dev_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float dev_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double dev_erfc(double x) { return erfc(x); }
__device__ __forceinline__ float dev_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dev_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dev_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double dev_abs(double x) { return fabs(x); }
__device__ __forceinline__ bool dev_isfinite(float x) { return isfinite(x); }
__device__ __forceinline__ bool dev_isfinite(double x) { return isfinite(x); }
__device__ __forceinline__ float dev_frexp(float x, int* e) { return frexpf(x, e); }
__device__ __forceinline__ double dev_frexp(double x, int* e) { return frexp(x, e); }
__device__ __forceinline__ float dev_ldexp(float x, int e) { return ldexpf(x, e); }
__device__ __forceinline__ double dev_ldexp(double x, int e) { return ldexp(x, e); }
// 1 / p for a power of two p, exactly, without a division (whose IEEE slow path
// is a call, and a call spills): the exponent field reflected about the bias.
// For a normal p in [2^-126, 2^126] (float), [2^-1022, 2^1022] (double).
__device__ __forceinline__ float dev_pow2_reciprocal(float p) {
  unsigned int bits = 0;
  __builtin_memcpy(&bits, &p, sizeof bits);
  bits = 0x7F000000u - bits;
  float r = 0;
  __builtin_memcpy(&r, &bits, sizeof r);
  return r;
}
__device__ __forceinline__ double dev_pow2_reciprocal(double p) {
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &p, sizeof bits);
  bits = 0x7FE0000000000000ull - bits;
  double r = 0;
  __builtin_memcpy(&r, &bits, sizeof r);
  return r;
}

template <typename Acc>
__device__ __forceinline__ Acc neg_infinity() {
  return -static_cast<Acc>(INFINITY);
}

// ---- block reductions ------------------------------------------------------------

struct SumOp {
  template <typename Acc>
  __device__ __forceinline__ Acc operator()(Acc a, Acc b) const { return a + b; }
  template <typename Acc>
  __device__ __forceinline__ Acc identity() const { return Acc(0); }
};

// max that propagates NaN, as torch.max does (fmax would drop it).
struct MaxOp {
  template <typename Acc>
  __device__ __forceinline__ Acc operator()(Acc a, Acc b) const {
    return (a > b || a != a) ? a : b;
  }
  template <typename Acc>
  __device__ __forceinline__ Acc identity() const { return neg_infinity<Acc>(); }
};

// Reduces v[0..N) across the lanes [0, lanes) of the calling warp into lane 0.
// Works for a partial last warp (blockDim.x not a multiple of 32): only lanes
// that exist take part, and a lane ignores values shuffled from missing lanes.
template <typename Op, typename Acc, int N>
__device__ __forceinline__ void warp_reduce(Acc (&v)[N], int lanes, const Op& op) {
  const unsigned mask = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const Acc other = __shfl_down_sync(mask, v[i], offset);
      if (lane + offset < lanes) v[i] = op(v[i], other);
    }
  }
}

// Reduces v[0..N) over the whole (1-D) block; every thread gets the result.
// The order of the operations depends on blockDim.x only, so a row reduces to
// the same bits every run. Safe to call repeatedly in one kernel.
template <typename Op, typename Acc, int N>
__device__ __forceinline__ void block_reduce(Acc (&v)[N], const Op& op) {
  __shared__ Acc partial[N][33];  // [value][warp], slot 32 holds the result
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int nwarps = (nthreads + 31) >> 5;
  __syncthreads();  // the previous call's readers are done with `partial`
  warp_reduce(v, min(32, nthreads - warp * 32), op);
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) store_shared(&partial[i][warp], v[i]);
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = lane < nwarps ? load_shared(&partial[i][lane]) : op.template identity<Acc>();
    warp_reduce(v, min(32, nthreads), op);
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) store_shared(&partial[i][32], v[i]);
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = load_shared(&partial[i][32]);
}

// ---- elementwise map ---------------------------------------------------------------

template <typename T, int kIn, int kOut>
struct MapPtrs {
  const T* in[kIn];
  T* out[kOut];
};

// Threads per block of map_kernel. Declared as its launch bound so that ptxas
// budgets registers for this block size (the double GEGLU backward needs 70,
// more than a 1024-thread block could have; check_cuda_compile.sh checks).
inline constexpr int kMapThreads = 256;

// out[k][i] = f(in[0][i], ..., in[kIn-1][i]) for i in [0, n), kVec elements per
// access; the last n % kVec elements are done one by one by the first threads.
// f(const Acc (&in)[kIn], Acc (&out)[kOut]) computes one element.
template <typename T, int kVec, int kIn, int kOut, typename F>
__global__ void __launch_bounds__(kMapThreads) map_kernel(MapPtrs<T, kIn, kOut> p, int64_t n, F f) {
  using Acc = acc_t<T>;
  const int64_t nvec = n / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = first; v < nvec; v += stride) {
    const int64_t i = v * kVec;
    Acc in[kIn][kVec];
#pragma unroll
    for (int k = 0; k < kIn; ++k) load_acc<kVec>(p.in[k] + i, in[k]);
    Acc out[kOut][kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      Acc a[kIn], o[kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) a[k] = in[k][e];
      f(a, o);
#pragma unroll
      for (int k = 0; k < kOut; ++k) out[k][e] = o[k];
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) store_acc<kVec>(p.out[k] + i, out[k]);
  }
  const int64_t tail = nvec * kVec + first;
  if (kVec > 1 && tail < n) {
    Acc a[kIn], o[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) a[k] = to_acc(load_global(p.in[k] + tail));
    f(a, o);
#pragma unroll
    for (int k = 0; k < kOut; ++k) store_global(p.out[k] + tail, from_acc<T>(o[k]));
  }
}

// Launches map_kernel with 128-bit accesses when every pointer allows them.
template <typename T, int kIn, int kOut, typename F>
void launch_map(const MapPtrs<T, kIn, kOut>& p, int64_t n, const F& f, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = kMapThreads;
  constexpr int kVec = kVecOf<T>;
  bool aligned = true;
  for (int k = 0; k < kIn; ++k) aligned = aligned && is_aligned16(p.in[k]);
  for (int k = 0; k < kOut; ++k) aligned = aligned && is_aligned16(p.out[k]);
  if (aligned) {
    launch_kernel<map_kernel<T, kVec, kIn, kOut, F>>(grid_for(n / kVec, kThreads), kThreads, 0,
        stream, p, n, f);
  } else {
    launch_kernel<map_kernel<T, 1, kIn, kOut, F>>(grid_for(n, kThreads), kThreads, 0, stream, p, n,
        f);
  }
}

// ---- fixed-order sums of partial rows ------------------------------------------------

// out[a * C + c] = alpha * sum over k in [0, K) of partial[(a * K + k) * C + c].
// Few partial rows (K <= kFewPartialRows: a norm backward of up to 32 rows, a
// cluster's groups): a thread per column adds them in order, no shared memory
// and no barrier. More: a (32 x 8) block owns 32 columns of one `a`: each
// thread row sums every 8th partial in order, then thread row 0 adds the 8 sums
// in order. Which of the two runs depends on K only, and the result on K and C
// only, never on timing: no atomics. With `out_1` set (and A == 2), row a == 1
// goes there instead: two sums of one workspace, each into a tensor of its own
// (LayerNorm's weight and bias gradients), in one launch.
inline constexpr int kPartialCols = 32;
inline constexpr int kPartialRows = 8;
inline constexpr int64_t kFewPartialRows = 16;
inline constexpr int kFewPartialThreads = 256;

template <typename T, bool kFew>
__global__ void sum_partials_kernel(const acc_t<T>* partial, T* out, T* out_1, int64_t A, int64_t K,
                                    int64_t C, acc_t<T> alpha) {
  using Acc = acc_t<T>;
  const auto store_sum = [&](int64_t a, int64_t c, Acc total) {
    store_global(out_1 != nullptr && a == 1 ? out_1 + c : out + a * C + c, from_acc<T>(total * alpha));
  };
  if constexpr (kFew) {
    for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < A * C; i += int64_t{gridDim.x} * blockDim.x) {
      const int64_t a = i / C;
      const int64_t c = i % C;
      Acc total = Acc(0);
      for (int64_t k = 0; k < K; ++k) total += load_global(partial + (a * K + k) * C + c);
      store_sum(a, c, total);
    }
  } else {
    __shared__ Acc sums[kPartialRows][kPartialCols];
    const int64_t col_blocks = ceil_div(C, kPartialCols);
    for (int64_t b = blockIdx.x; b < A * col_blocks; b += gridDim.x) {
      const int64_t a = b / col_blocks;
      const int64_t c = (b % col_blocks) * kPartialCols + threadIdx.x;
      Acc s = Acc(0);
      if (c < C) {
        for (int64_t k = threadIdx.y; k < K; k += kPartialRows) s += load_global(partial + (a * K + k) * C + c);
      }
      store_shared(&sums[threadIdx.y][threadIdx.x], s);
      __syncthreads();
      if (threadIdx.y == 0 && c < C) {
        Acc total = Acc(0);
#pragma unroll
        for (int r = 0; r < kPartialRows; ++r) total += load_shared(&sums[r][threadIdx.x]);
        store_sum(a, c, total);
      }
      __syncthreads();  // `sums` is reused by the next column block
    }
  }
}

template <typename T>
void launch_sum_partials(const acc_t<T>* partial, T* out, int64_t A, int64_t K, int64_t C,
                         acc_t<T> alpha, cudaStream_t stream, T* out_1 = nullptr) {
  if (A <= 0 || C <= 0) return;
  if (K <= kFewPartialRows) {
    launch_kernel<sum_partials_kernel<T, true>>(grid_for(A * C, kFewPartialThreads), kFewPartialThreads, 0, stream,
                                                partial, out, out_1, A, K, C, alpha);
    return;
  }
  const dim3 block(kPartialCols, kPartialRows);
  launch_kernel<sum_partials_kernel<T, false>>(grid_for(A * ceil_div(C, kPartialCols), 1), block, 0,
      stream, partial, out, out_1, A, K, C, alpha);
}

// ---- dtype switch ---------------------------------------------------------------------

template <typename T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<T>{}) with the CUDA type of `dtype` (float16 -> __half, bfloat16 ->
// __nv_bfloat16: same 16-bit layouts as c10::Half and c10::BFloat16).
template <typename F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(TypeTag<float>{});
      break;
    case DType::Float64:
      f(TypeTag<double>{});
      break;
    case DType::Float16:
      f(TypeTag<__half>{});
      break;
    case DType::BFloat16:
      f(TypeTag<__nv_bfloat16>{});
      break;
  }
}

}  // namespace detail
}  // namespace op_ext::cuda
