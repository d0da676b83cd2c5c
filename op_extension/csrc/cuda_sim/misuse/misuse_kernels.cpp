// Planted mistakes for the CPU harness's checks, one per kernel, written in
// CUDA as a kernel file would be. Each must be reported (tests/test_cuda_sim.py);
// "clean" uses the same features correctly and must pass.
// Standard headers first: runtime.h defines __noinline__, which libstdc++'s
// <memory> uses as an attribute name.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "../../kernel/cuda/cuda_common.cuh"

// UBSan's bounds and object-size checks (-fsanitize=undefined, the sanitizer
// build) would stop an index past a fixed-size array before the access; the
// planted static __shared__ overruns are there for the harness's own check, in
// every build.
#define CUDA_SIM_PLANTED_OVERRUN __attribute__((no_sanitize("bounds,object-size")))

// In op_ext::cuda like the real kernels, so that the harness finds their static
// __shared__ arrays the same way (function-local statics of op_ext::cuda).
namespace op_ext::cuda::misuse {

// A warp sum through shuffles, then a block sum through shared memory.
__global__ void clean_kernel(float* out) {
  __shared__ float partial[32];
  float v = 1.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  v = __shfl_sync(0xffffffffu, v, 0);
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}

__global__ void barrier_after_exit_kernel() {
  if (threadIdx.x == 5) return;  // thread 5 never reaches the barrier
  __syncthreads();
}

__global__ void barrier_in_branch_kernel() {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();  // another barrier: undefined on the GPU
  }
}

__global__ void shuffle_mask_leaves_out_caller_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xfffffffeu, 1.0f, 1);  // lane 0 calls with bit 0 clear
}

__global__ void shuffle_lane_absent_kernel(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);  // lanes 16..31 skip
}

__global__ void shuffle_lane_beyond_warp_kernel(float* out) {
  // Launched with 20 threads: lanes 20..31 do not exist.
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

__global__ void shuffle_lane_at_barrier_kernel(float* out) {
  if (threadIdx.x == 3) {
    __syncthreads();
    return;
  }
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

__global__ void empty_kernel() {}

// Each thread writes its own float, then (after the barrier) reads its neighbour's.
// Writes the last byte of its dynamic shared memory (its size in out[0]'s bytes):
// beyond 48 KiB only after the kernel opted in.
__global__ void shared_last_byte_kernel(float* out) {
  unsigned char* bytes = cuda_sim::dynamic_shared_memory();
  if (threadIdx.x == 0) {
    size_t size = 100 * 1024;
    bytes[size - 1] = 1;
    out[0] = static_cast<float>(size);
  }
}

__global__ void clean_shared_kernel(float* out) {
  float* slots = reinterpret_cast<float*>(cuda_sim::dynamic_shared_memory());
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

__global__ void shared_out_of_bounds_kernel() {
  float* slots = reinterpret_cast<float*>(cuda_sim::dynamic_shared_memory());
  slots[threadIdx.x + 1] = 0.0f;  // launched with blockDim.x floats: the last thread writes past them
}

__global__ void shared_read_after_write_kernel(float* out) {
  float* slots = reinterpret_cast<float*>(cuda_sim::dynamic_shared_memory());
  slots[threadIdx.x] = 1.0f;
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];  // the barrier is missing
}

__global__ void shared_write_after_read_kernel(float* out) {
  float* slots = reinterpret_cast<float*>(cuda_sim::dynamic_shared_memory());
  if (threadIdx.x == 0) slots[0] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = slots[0];
  if (threadIdx.x == 1) slots[0] = 2.0f;  // thread 0 read it in this interval
}

__global__ void shared_write_after_write_kernel() {
  float* slots = reinterpret_cast<float*>(cuda_sim::dynamic_shared_memory());
  slots[0] = static_cast<float>(threadIdx.x);  // every thread, the same word
}

__global__ void static_shared_race_kernel(float* out) {
  __shared__ float total;
  if (threadIdx.x == 0) total = 0.0f;
  out[threadIdx.x] = total;  // the barrier after the write is missing
}

// Two arrays, as a kernel with a cache and a reduction has: packed next to each
// other, first[32] would be second[0] and pass for an access to it.
CUDA_SIM_PLANTED_OVERRUN __global__ void static_shared_past_end_kernel(float* out) {
  __shared__ float first[32];
  __shared__ float second[32];
  second[threadIdx.x] = 0.0f;
  first[threadIdx.x + 1] = 1.0f;  // launched with 32 threads: the last writes past the end
  __syncthreads();
  out[threadIdx.x] = first[threadIdx.x] + second[threadIdx.x];
}

CUDA_SIM_PLANTED_OVERRUN __global__ void static_shared_before_start_kernel(float* out) {
  __shared__ float slots[32];
  slots[threadIdx.x] = 1.0f;
  __syncthreads();
  const int left = static_cast<int>(threadIdx.x) - 1;  // thread 0 reads slots[-1]
  out[threadIdx.x] = slots[left];
}

// ---- shared memory through the kernels' helpers ----------------------------------
//
// The op kernels access shared memory through load_shared / store_shared and
// the pack helpers: the harness checks every byte of each access in the
// helper, without a fault. The mistakes below are each reported there; the
// first two would pass the fault path, which checks the first byte only.

// clean_kernel and clean_shared_kernel through the helpers.
__global__ void clean_helpers_kernel(float* out) {
  __shared__ float partial[32];
  float* slots = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  detail::store_shared(slots + threadIdx.x, static_cast<float>(threadIdx.x));
  if (threadIdx.x % 32 == 0) detail::store_shared(&partial[threadIdx.x / 32], 32.0f);
  __syncthreads();
  float v = detail::load_shared(slots + (threadIdx.x + 1) % blockDim.x);
  if (threadIdx.x % 4 == 0) {
    const detail::Pack<float, 4> pack = detail::load_pack<4>(slots + threadIdx.x);
    v += pack.v[0] - pack.v[0];
  }
  if (threadIdx.x == 0) {
    for (unsigned w = 0; w < blockDim.x / 32; ++w) v += detail::load_shared(&partial[w]);
  }
  out[threadIdx.x] = v;
}

// Launched with 30 floats of dynamic shared memory, 8 threads: thread 7's
// 16-byte pack covers bytes 112-127, the last 8 past the window's 120 (in the
// same page: no fault would see them).
__global__ void pack_past_the_end_kernel() {
  float* slots = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  detail::store_pack<4>(slots + 4 * threadIdx.x, detail::Pack<float, 4>{{1.0f, 2.0f, 3.0f, 4.0f}});
}

// Thread 0 writes float 3; thread 1 then reads floats 0-3 as one pack with no
// barrier between: the race is on the pack's 13th byte, not its first.
__global__ void race_on_a_later_byte_kernel(float* out) {
  float* slots = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  if (threadIdx.x == 0) detail::store_shared(slots + 3, 1.0f);
  if (threadIdx.x == 1) out[0] = detail::load_pack<4>(slots).v[3];  // MISTAKE: no __syncthreads before
}

CUDA_SIM_PLANTED_OVERRUN __global__ void helper_static_past_end_kernel(float* out) {
  __shared__ float cache[32];
  detail::store_shared(cache + threadIdx.x + 1, 1.0f);  // launched with 32 threads: the last writes past the end
  __syncthreads();
  out[threadIdx.x] = detail::load_shared(cache + threadIdx.x);
}

// A 16-byte pack of global memory 4 bytes past an aligned start: the vector
// path taken for a tensor whose data is not 16-byte aligned.
__global__ void misaligned_pack_kernel(const float* in, float* out) {
  const detail::Pack<float, 4> pack = detail::load_pack<4>(in + 1 + 4 * threadIdx.x);  // MISTAKE: in + 1
  detail::store_global(out + threadIdx.x, pack.v[0]);
}

__global__ void load_shared_of_global_kernel(const float* in, float* out) {
  out[threadIdx.x] = detail::load_shared(in + threadIdx.x);  // MISTAKE: `in` is global memory
}

// cluster_remote_read_without_sync_kernel through the helpers.
__global__ void cluster_helper_remote_read_without_sync_kernel(float* out) {
  float* mine = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  const unsigned peer = (detail::cluster_block_rank() + 1) % cuda_sim::cluster_blocks();
  detail::store_shared(mine + threadIdx.x, static_cast<float>(threadIdx.x));
  // MISTAKE: no cluster_sync between the peer's write and this read.
  out[blockIdx.x * blockDim.x + threadIdx.x] = detail::load_shared(detail::cluster_map_shared(mine, peer) + threadIdx.x);
  detail::cluster_sync();
}

// Global memory is not watched by the harness: AddressSanitizer sees it in the
// sanitizer build (scripts/check_sanitizers.sh requires this report).
__global__ void global_out_of_bounds_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[0] = in[i];  // MISTAKE: `<=` reads in[n], one past the buffer
}

// Global-memory traffic (op_extension.cuda_sim.traffic; tests/test_cuda_sim_traffic.py):
// a copy through the kernels' load/store helpers, moving each byte once in whole
// sectors; the same copy with an extra pass over its input; and a copy whose
// lanes read every 8th float, so that each lane's 4 bytes cost a 32-byte sector.
__global__ void traffic_copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) detail::store_global(out + i, detail::load_global(in + i));
}

__global__ void traffic_extra_pass_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const float first = detail::load_global(in + i);
  detail::store_global(out + i, first + detail::load_global(in + i) - first);
}

__global__ void traffic_strided_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) detail::store_global(out + i, detail::load_global(in + 8 * i));
}

// Shared-memory bank conflicts (traffic()'s bank_efficiency): 64 threads, 2048
// floats of dynamic shared memory. Conflict-free: consecutive floats, one word
// read by the whole warp (a broadcast), 16-byte packs side by side. Two-way:
// lanes 16 apart in one bank. 32-way: a column of a 32 x 32 tile, every lane in
// bank 0.
__global__ void banks_conflict_free_kernel(float* out) {
  float* tile = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  const unsigned t = threadIdx.x;
  detail::store_pack<4>(tile + 4 * t, detail::Pack<float, 4>{{1.0f, 1.0f, 1.0f, 1.0f}});
  __syncthreads();
  float v = detail::load_shared(tile + t) + detail::load_shared(tile + 7);
  v += detail::load_pack<4>(tile + 4 * t).v[1];
  detail::store_global(out + t, v);
}

__global__ void banks_two_way_kernel(float* out) {
  float* tile = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  detail::store_shared(tile + 2 * threadIdx.x, 1.0f);
  __syncthreads();
  detail::store_global(out + threadIdx.x, detail::load_shared(tile + 2 * threadIdx.x));
}

__global__ void banks_column_kernel(float* out) {
  float* tile = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  detail::store_shared(tile + 32 * (threadIdx.x % 32) + threadIdx.x / 32, 1.0f);  // MISTAKE: stride 32 floats
  __syncthreads();
  detail::store_global(out + threadIdx.x, detail::load_shared(tile + 32 * (threadIdx.x % 32) + threadIdx.x / 32));
}

// ---- global-memory races (the harness's global racecheck) -----------------------------
//
// Through the kernels' global helpers, as the kernels access global memory.

// Every block's thread 0 writes the same element: on a GPU the last block to
// store wins, whichever that is.
__global__ void global_blocks_write_one_element_kernel(float* out) {
  if (threadIdx.x == 0) detail::store_global(out, static_cast<float>(blockIdx.x));  // MISTAKE: one element, every block
}

// The "last block sums the partials" pattern without its atomic counter and
// fence: block 1 reads block 0's partial, which a GPU may not have written yet.
__global__ void global_block_reads_another_blocks_partial_kernel(float* partial, float* out) {
  if (threadIdx.x != 0) return;
  detail::store_global(partial + blockIdx.x, 1.0f);
  if (blockIdx.x == gridDim.x - 1) {
    float s = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) s += detail::load_global(partial + b);  // MISTAKE: unordered with b's store
    detail::store_global(out, s);
  }
}

// Thread 1 reads what thread 0 of its block wrote, with no __syncthreads between.
__global__ void global_read_after_write_in_block_kernel(float* out) {
  if (threadIdx.x == 0) detail::store_global(out, 1.0f);
  if (threadIdx.x == 1) detail::store_global(out + 1, detail::load_global(out));  // MISTAKE: no barrier
}

// An in-place shift: thread t reads element t + 1, which thread t + 1 overwrites.
__global__ void global_write_after_read_in_block_kernel(float* data) {
  const unsigned t = threadIdx.x;
  const float next = t + 1 < blockDim.x ? detail::load_global(data + t + 1) : 0.0f;
  detail::store_global(data + t, next);  // MISTAKE: thread t - 1 read this element, unordered
}

// The same exchanges, ordered: within a block by __syncthreads; each block on a
// slice of its own. Must pass.
__global__ void global_clean_kernel(float* data, float* out) {
  const unsigned t = threadIdx.x, n = blockDim.x;
  float* mine = data + blockIdx.x * n;
  const float next = t + 1 < n ? detail::load_global(mine + t + 1) : 0.0f;
  __syncthreads();
  detail::store_global(mine + t, next);
  __syncthreads();
  detail::store_global(out + blockIdx.x * n + t, detail::load_global(mine + (t + 1) % n));
}

// initcheck: a running max over a buffer allocated for the call. fmaxf drops a
// NaN operand, so poisoned bytes read here leave no trace in the result; the
// harness reports the read itself.
__global__ void global_max_of_buffer_kernel(const float* buffer, float* out) {
  detail::store_global(out + threadIdx.x, fmaxf(0.0f, detail::load_global(buffer + threadIdx.x)));
}

__global__ void global_fill_buffer_kernel(float* buffer) {
  detail::store_global(buffer + threadIdx.x, static_cast<float>(threadIdx.x));
}

// Not a mistake the harness reports: one thread per block adds its block's
// value to a global total, in block order, as atomicAdd would in arrival order
// (the harness has no atomics: the direct access stands in for one, and the
// global racecheck sees only the helpers' accesses). Float addition does not
// associate, so the bits depend on the order.
__global__ void order_dependent_sum_kernel(const float* values, float* total) {
  if (threadIdx.x == 0) *total += values[blockIdx.x];
}

// ---- thread-block clusters (sm_90; tests/test_cuda_sim_cluster.py) ------------------
//
// Through cuda_common.cuh's wrappers, as the kernels use them. The cluster's
// size is the harness's cuda_sim::cluster_blocks() (%cluster_nctarank).

// Every block fills its dynamic shared memory with values of its own; after a
// cluster_sync each thread adds to its own value one value of every block of the
// cluster, read through distributed shared memory in rank order (its own value
// makes each block's total differ, so a block that summed another's static
// __shared__ array would show); the block then sums those as
// block_reduce does (a warp sum through shuffles, the last warp possibly
// partial, and the warps' sums through a static __shared__ array); the last
// cluster_sync keeps each block's shared memory alive while peers read it.
__global__ void cluster_clean_kernel(float* sums, float* totals) {
  float* mine = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  const unsigned t = threadIdx.x, threads = blockDim.x;
  mine[t] = static_cast<float>(blockIdx.x * 1000 + t);
  detail::cluster_sync();
  float s = mine[t];
  for (unsigned rank = 0; rank < cuda_sim::cluster_blocks(); ++rank) {
    s += detail::cluster_map_shared(mine, rank)[(t + rank) % threads];
  }
  sums[blockIdx.x * threads + t] = s;
  __shared__ float warp_sums[32];
  const unsigned lane = t % 32, warp = t / 32;
  const unsigned lanes = min(32u, threads - warp * 32);
  const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  float v = s;
  for (unsigned offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(mask, v, offset);
    if (lane + offset < lanes) v += other;
  }
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (t == 0) {
    float total = 0.0f;
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) total += warp_sums[w];
    totals[blockIdx.x] = total;
  }
  detail::cluster_sync();
}

// Each block writes its rank into a static __shared__ array and reads it back:
// its own copy, whatever the other blocks of the cluster wrote into theirs.
__global__ void cluster_static_shared_per_block_kernel(unsigned* out) {
  __shared__ unsigned ranks[64];
  ranks[threadIdx.x] = detail::cluster_block_rank();
  detail::cluster_sync();
  out[blockIdx.x * blockDim.x + threadIdx.x] = ranks[threadIdx.x];
}

__global__ void cluster_remote_read_without_sync_kernel(float* out) {
  float* mine = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  const unsigned peer = (detail::cluster_block_rank() + 1) % cuda_sim::cluster_blocks();
  mine[threadIdx.x] = static_cast<float>(threadIdx.x);
  // MISTAKE: no cluster_sync between the peer's write and this read.
  out[blockIdx.x * blockDim.x + threadIdx.x] = detail::cluster_map_shared(mine, peer)[threadIdx.x];
  detail::cluster_sync();
}

__global__ void cluster_peer_exited_kernel(float* out) {
  float* mine = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  mine[threadIdx.x] = 1.0f;
  if (detail::cluster_block_rank() == 1) return;  // MISTAKE: no cluster_sync before rank 1 exits
  // On the harness rank 1's threads run to their end while rank 0's wait here
  // (on the GPU they may or may not have: undefined either way).
  __syncthreads();
  out[threadIdx.x] = detail::cluster_map_shared(mine, 1)[threadIdx.x];
}

__global__ void cluster_sync_skipped_by_a_block_kernel() {
  if (detail::cluster_block_rank() != 0) detail::cluster_sync();  // MISTAKE: rank 0 skips this one
  detail::cluster_sync();
}

__global__ void cluster_sync_after_exit_kernel() {
  if (detail::cluster_block_rank() == 1 && threadIdx.x == 5) return;  // MISTAKE: one thread of rank 1 leaves
  detail::cluster_sync();
}

__global__ void cluster_rank_out_of_range_kernel(float* out) {
  float* mine = reinterpret_cast<float*>(detail::dynamic_shared_bytes());
  mine[threadIdx.x] = 1.0f;
  detail::cluster_sync();
  out[threadIdx.x] = *detail::cluster_map_shared(mine, cuda_sim::cluster_blocks());  // MISTAKE: one past the last
  detail::cluster_sync();
}

// Valid on the GPU, beyond what the harness models: it maps dynamic shared memory only.
__global__ void cluster_map_static_shared_kernel(float* out) {
  __shared__ float cache[32];
  cache[threadIdx.x] = 1.0f;
  detail::cluster_sync();
  out[threadIdx.x] = *detail::cluster_map_shared(&cache[threadIdx.x], 1);
  detail::cluster_sync();
}

// A local variable is no shared memory at all (mapa of it is undefined).
__global__ void cluster_map_local_variable_kernel(float* out) {
  float local = 1.0f;
  out[threadIdx.x] = *detail::cluster_map_shared(&local, 0);
}

// Rank 1 of each cluster reads what rank 0 wrote to global memory: ordered by a
// cluster_sync (the control), or not (the mistake). Each cluster on its own
// element.
template <bool kSync>
__global__ void global_cluster_exchange_kernel(float* data, float* out) {
  const unsigned cluster = blockIdx.x / cuda_sim::cluster_blocks();
  const unsigned rank = detail::cluster_block_rank();
  if (rank == 0 && threadIdx.x == 0) detail::store_global(data + cluster, static_cast<float>(cluster + 1));
  if constexpr (kSync) detail::cluster_sync();
  if (rank == 1 && threadIdx.x == 0) detail::store_global(out + cluster, detail::load_global(data + cluster));
  if constexpr (!kSync) detail::cluster_sync();  // MISTAKE: after the read, not before
}

}  // namespace op_ext::cuda::misuse

// cluster_clean_kernel over 8 blocks of `threads` threads in clusters of 4:
// sums[8 * threads], totals[8] (tests/test_cuda_sim_cluster.py checks them).
extern "C" void op_ext_cuda_sim_cluster_clean(unsigned threads, float* sums, float* totals) {
  using namespace op_ext::cuda;
  (void)detail::launch_cluster_kernel<misuse::cluster_clean_kernel>(8, threads, 4, threads * sizeof(float), nullptr,
                                                                    sums, totals);
}

// The total of order_dependent_sum_kernel over 4 blocks in the current block
// order: (((1e8 + 1) - 1e8) + 1) = 1 in linear order, 0 in reverse.
extern "C" float op_ext_cuda_sim_order_dependent_sum() {
  const float values[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  float total = 0.0f;
  cuda_sim::launch_kernel<op_ext::cuda::misuse::order_dependent_sum_kernel>(4, 32, 0, nullptr, values, &total);
  return total;
}

namespace {

// The cluster kernels (sm_90), launched as the kernels launch them.
void run_cluster_misuse_kernel(const std::string& n) {
  using cuda_sim::launch_kernel;
  using op_ext::cuda::detail::launch_cluster_kernel;
  using namespace op_ext::cuda::misuse;
  float out[64] = {};
  const size_t shared = 32 * sizeof(float);
  if (n == "cluster_clean") {
    for (const unsigned threads : {64u, 48u}) {
      std::vector<float> sums(8 * threads), totals(8);
      op_ext_cuda_sim_cluster_clean(threads, sums.data(), totals.data());
    }
  } else if (n == "cluster_static_shared_per_block") {
    std::vector<unsigned> ranks(8 * 64, ~0u);
    (void)launch_cluster_kernel<cluster_static_shared_per_block_kernel>(8, 64, 4, 0, nullptr, ranks.data());
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] != i / 64 % 4) {
        throw std::runtime_error("cuda_sim misuse: block " + std::to_string(i / 64) + " read rank " +
                                 std::to_string(ranks[i]) + " from its static __shared__ array");
      }
    }
  } else if (n == "cluster_helper_remote_read_without_sync") {
    (void)launch_cluster_kernel<cluster_helper_remote_read_without_sync_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_remote_read_without_sync") {
    (void)launch_cluster_kernel<cluster_remote_read_without_sync_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_peer_exited") {
    (void)launch_cluster_kernel<cluster_peer_exited_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_sync_skipped_by_a_block") {
    (void)launch_cluster_kernel<cluster_sync_skipped_by_a_block_kernel>(4, 32, 2, 0, nullptr);
  } else if (n == "cluster_sync_after_exit") {
    (void)launch_cluster_kernel<cluster_sync_after_exit_kernel>(2, 32, 2, 0, nullptr);
  } else if (n == "cluster_rank_out_of_range") {
    (void)launch_cluster_kernel<cluster_rank_out_of_range_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_map_outside_dynamic") {
    (void)launch_cluster_kernel<cluster_map_static_shared_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_map_local_variable") {
    (void)launch_cluster_kernel<cluster_map_local_variable_kernel>(2, 32, 2, shared, nullptr, out);
  } else if (n == "cluster_global_exchange") {
    std::vector<float> data(2, 0.0f), got(2, 0.0f);
    (void)launch_cluster_kernel<global_cluster_exchange_kernel<true>>(4, 32, 2, 0, nullptr, data.data(), got.data());
    if (got[0] != 1.0f || got[1] != 2.0f) throw std::runtime_error("cuda_sim misuse: cluster exchange read wrong");
  } else if (n == "cluster_global_exchange_without_sync") {
    std::vector<float> data(2, 0.0f), got(2, 0.0f);
    (void)launch_cluster_kernel<global_cluster_exchange_kernel<false>>(4, 32, 2, 0, nullptr, data.data(), got.data());
  } else if (n == "cluster_sync_on_sm80") {  // run at sm_80, without clusters
    launch_kernel<cluster_sync_skipped_by_a_block_kernel>(1, 32, 0, nullptr);
  } else if (n == "cluster_on_sm80") {  // run at sm_80
    (void)launch_cluster_kernel<empty_kernel>(4, 32, 2, 0, nullptr);
  } else if (n == "cluster_of_16") {
    (void)launch_cluster_kernel<empty_kernel>(16, 32, 16, 0, nullptr);
  } else if (n == "cluster_grid_not_multiple") {
    (void)launch_cluster_kernel<empty_kernel>(6, 32, 4, 0, nullptr);
  } else {
    throw std::invalid_argument("cuda_sim: no misuse kernel " + n);
  }
}

}  // namespace

extern "C" void op_ext_cuda_sim_run_misuse_kernel(const char* name) {
  const std::string n = name;
  float out[64] = {};
  using cuda_sim::launch_kernel;
  using namespace op_ext::cuda::misuse;
  if (n == "clean") {
    launch_kernel<clean_kernel>(2, 64, 0, nullptr, out);
    if (out[0] != 64.0f || out[1] != 64.0f) throw std::runtime_error("cuda_sim misuse: clean kernel summed wrong");
    launch_kernel<clean_shared_kernel>(3, 64, 64 * sizeof(float), nullptr, out);
    if (out[0] != 1.0f || out[63] != 0.0f) throw std::runtime_error("cuda_sim misuse: clean shared kernel read wrong");
  } else if (n == "clean_helpers") {
    launch_kernel<clean_helpers_kernel>(2, 64, 64 * sizeof(float), nullptr, out);
    if (out[0] != 1.0f + 64.0f || out[1] != 2.0f || out[63] != 0.0f) {
      throw std::runtime_error("cuda_sim misuse: clean helpers kernel read wrong");
    }
  } else if (n == "pack_past_the_end") {
    launch_kernel<pack_past_the_end_kernel>(1, 8, 30 * sizeof(float), nullptr);
  } else if (n == "race_on_a_later_byte") {
    launch_kernel<race_on_a_later_byte_kernel>(1, 32, 4 * sizeof(float), nullptr, out);
  } else if (n == "helper_static_past_end") {
    launch_kernel<helper_static_past_end_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "misaligned_pack") {
    alignas(16) float in[4 * 32 + 4] = {};
    launch_kernel<misaligned_pack_kernel>(1, 32, 0, nullptr, static_cast<const float*>(in), out);
  } else if (n == "load_shared_of_global") {
    const float in[32] = {};
    launch_kernel<load_shared_of_global_kernel>(1, 32, 0, nullptr, in, out);
  } else if (n == "shared_out_of_bounds") {
    launch_kernel<shared_out_of_bounds_kernel>(1, 32, 32 * sizeof(float), nullptr);
  } else if (n == "shared_read_after_write") {
    launch_kernel<shared_read_after_write_kernel>(1, 32, 32 * sizeof(float), nullptr, out);
  } else if (n == "shared_write_after_read") {
    launch_kernel<shared_write_after_read_kernel>(1, 32, 32 * sizeof(float), nullptr, out);
  } else if (n == "shared_write_after_write") {
    launch_kernel<shared_write_after_write_kernel>(1, 32, 32 * sizeof(float), nullptr);
  } else if (n == "static_shared_race") {
    launch_kernel<static_shared_race_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "static_shared_past_end") {
    launch_kernel<static_shared_past_end_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "static_shared_before_start") {
    launch_kernel<static_shared_before_start_kernel>(1, 32, 0, nullptr, out);
  } else if (n.rfind("global_", 0) == 0 && n != "global_out_of_bounds") {
    std::vector<float> data(4 * 32, 1.0f), got(4 * 32, 0.0f);
    if (n == "global_clean") {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
      launch_kernel<global_clean_kernel>(4, 32, 0, nullptr, data.data(), got.data());
      // Block b's slice i ends as i + 1 (shifted down, 0 last); out reads slot (t + 1) % 32 of that.
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t b = i / 32, t = i % 32, read = (t + 1) % 32;
        const float want = read + 1 < 32 ? static_cast<float>(b * 32 + read + 1) : 0.0f;
        if (got[i] != want) throw std::runtime_error("cuda_sim misuse: global clean kernel read wrong");
      }
    } else if (n == "global_uninitialized_read" || n == "global_initialized_read") {
      // As the harness's op glue hands a launcher its workspace: poisoned, tracked.
      std::vector<float> buffer(32);
      std::memset(buffer.data(), 0xff, buffer.size() * sizeof(float));
      const cuda_sim::TrackedWorkspace tracked(buffer.data(), buffer.size() * sizeof(float));
      // Written by a kernel of an earlier launch: initialized.
      if (n == "global_initialized_read") launch_kernel<global_fill_buffer_kernel>(1, 32, 0, nullptr, buffer.data());
      launch_kernel<global_max_of_buffer_kernel>(1, 32, 0, nullptr, static_cast<const float*>(buffer.data()),
                                                 got.data());
      if (n == "global_initialized_read" && (got[15] != 15.0f || got[31] != 31.0f)) {
        throw std::runtime_error("cuda_sim misuse: initialized buffer read wrong");
      }
    } else if (n == "global_blocks_write_one_element") {
      launch_kernel<global_blocks_write_one_element_kernel>(2, 32, 0, nullptr, got.data());
    } else if (n == "global_block_reads_another_blocks_partial") {
      launch_kernel<global_block_reads_another_blocks_partial_kernel>(3, 32, 0, nullptr, data.data(), got.data());
    } else if (n == "global_read_after_write_in_block") {
      launch_kernel<global_read_after_write_in_block_kernel>(1, 32, 0, nullptr, got.data());
    } else if (n == "global_write_after_read_in_block") {
      launch_kernel<global_write_after_read_in_block_kernel>(1, 32, 0, nullptr, data.data());
    } else {
      throw std::invalid_argument("cuda_sim: no misuse kernel " + n);
    }
  } else if (n == "global_out_of_bounds") {
    // A heap buffer, as a tensor's storage is: ASan puts a redzone after it.
    constexpr int kN = 32;
    const std::unique_ptr<float[]> in(new float[kN]());
    launch_kernel<global_out_of_bounds_kernel>(1, kN + 1, 0, nullptr, in.get(), out, kN);
  } else if (n.rfind("traffic_", 0) == 0) {
    // 4096 floats copied (the input 8 times as long for the strided copy), in
    // buffers aligned as cudaMalloc's (256 bytes): a warp's 128 bytes are 4 sectors.
    constexpr int kN = 4096;
    struct Free {
      void operator()(float* p) const { std::free(p); }
    };
    const std::unique_ptr<float, Free> in(static_cast<float*>(std::aligned_alloc(256, 8 * kN * sizeof(float))));
    const std::unique_ptr<float, Free> copy(static_cast<float*>(std::aligned_alloc(256, kN * sizeof(float))));
    std::fill(in.get(), in.get() + 8 * kN, 1.0f);
    if (n == "traffic_copy") {
      launch_kernel<traffic_copy_kernel>(kN / 256, 256, 0, nullptr, in.get(), copy.get(), kN);
    } else if (n == "traffic_extra_pass") {
      launch_kernel<traffic_extra_pass_kernel>(kN / 256, 256, 0, nullptr, in.get(), copy.get(), kN);
    } else if (n == "traffic_strided") {
      launch_kernel<traffic_strided_kernel>(kN / 256, 256, 0, nullptr, in.get(), copy.get(), kN);
    } else if (n == "traffic_banks_conflict_free") {
      launch_kernel<banks_conflict_free_kernel>(1, 64, 2048 * sizeof(float), nullptr, copy.get());
    } else if (n == "traffic_banks_two_way") {
      launch_kernel<banks_two_way_kernel>(1, 64, 2048 * sizeof(float), nullptr, copy.get());
    } else if (n == "traffic_banks_column") {
      launch_kernel<banks_column_kernel>(1, 64, 2048 * sizeof(float), nullptr, copy.get());
    } else {
      throw std::invalid_argument("cuda_sim: no misuse kernel " + n);
    }
  } else if (n == "barrier_after_exit") {
    launch_kernel<barrier_after_exit_kernel>(1, 32, 0, nullptr);
  } else if (n == "barrier_in_branch") {
    launch_kernel<barrier_in_branch_kernel>(1, 32, 0, nullptr);
  } else if (n == "shuffle_mask_leaves_out_caller") {
    launch_kernel<shuffle_mask_leaves_out_caller_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "shuffle_lane_absent") {
    launch_kernel<shuffle_lane_absent_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "shuffle_lane_beyond_warp") {
    launch_kernel<shuffle_lane_beyond_warp_kernel>(1, 20, 0, nullptr, out);
  } else if (n == "shuffle_lane_at_barrier") {
    launch_kernel<shuffle_lane_at_barrier_kernel>(1, 32, 0, nullptr, out);
  } else if (n == "too_many_threads") {
    launch_kernel<empty_kernel>(1, dim3(32, 33), 0, nullptr);
  } else if (n == "too_much_shared") {
    launch_kernel<empty_kernel>(1, 32, 48 * 1024 + 1, nullptr);
  } else if (n == "shared_past_opt_in") {
    // Opted into 64 KiB, launched with a byte more.
    cuda_sim::allow_dynamic_shared(cuda_sim::detail::kernel_name<shared_last_byte_kernel>().c_str(), 64 * 1024);
    launch_kernel<shared_last_byte_kernel>(1, 32, 64 * 1024 + 1, nullptr, out);
  } else if (n == "opt_in_past_arch_max") {
    // sm_80 blocks may opt into 163 KiB; 200 KiB is an sm_90 size.
    cuda_sim::allow_dynamic_shared(cuda_sim::detail::kernel_name<shared_last_byte_kernel>().c_str(), 200 * 1024);
  } else if (n == "opted_in_shared") {
    // The control: the op kernels' launch helper opts in, then every byte is usable.
    op_ext::cuda::detail::launch_kernel<shared_last_byte_kernel>(1, 32, 100 * 1024, nullptr, out);
    if (out[0] != 100.0f * 1024) throw std::runtime_error("cuda_sim misuse: opted-in shared kernel read wrong");
  } else if (n == "empty_grid") {
    launch_kernel<empty_kernel>(0, 32, 0, nullptr);
  } else if (n.rfind("cluster_", 0) == 0) {
    run_cluster_misuse_kernel(n);
  } else {
    throw std::invalid_argument("cuda_sim: no misuse kernel " + n);
  }
}
