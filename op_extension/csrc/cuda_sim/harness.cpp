// The CPU harness's scheduler: blocks one after another (a thread-block
// cluster's blocks together), a block's threads as fibers on the calling OS
// thread (see include/cuda_sim/runtime.h for what it checks).
//
// A cluster (a launch without clusters: each block is a cluster of one) runs in
// rounds: every runnable fiber runs until it blocks (at __syncthreads,
// cluster_sync or a shuffle) or returns. When none is runnable, the shuffles
// whose lanes have all arrived complete; failing that, each block whose threads
// all wait at the same __syncthreads goes on; failing that, the cluster barrier
// opens if every thread of the cluster waits at the same cluster_sync. Anything
// else is a kernel that would hang or read garbage on the GPU, and is reported.
//
// Shared memory is checked at every access. The kernels' load/store helpers
// (kernel/cuda/cuda_common.cuh: load_shared, store_shared and the pack
// helpers) call memory_access(), which checks every byte of the access against the
// bounds of the array it falls in or next to and against the other threads'
// accesses that no barrier orders before it (racecheck's read-after-write,
// write-after-read and write-after-write hazards between threads, of one block
// or, through distributed shared memory, of two blocks of a cluster), then
// hands back the same bytes in a second, unwatched view of their pages (a
// memfd mapped twice), so the access costs a function call. Any other access
// (a kernel indexing a __shared__ array directly) is caught too (x86-64
// Linux): each block's dynamic window, and the pages around the kernels' static
// __shared__ arrays, stay PROT_NONE during a launch, so such an access faults;
// the SIGSEGV handler makes the same checks for the byte it faulted on, then
// opens the page for one single-stepped instruction and the SIGTRAP handler
// closes it again: exact for that byte, and some 20 us an access, which is why
// the kernels use the helpers (the traffic test holds them to it:
// shared_faults()). A report leaves the fiber through fail_in_fiber(), from
// the helper or, after a fault, in place of the faulting instruction.
//
// A static __shared__ array is one C++ static, but each block of a cluster has
// its own: the bytes in place are one block's copy (its owner), the others wait
// in the Watch, and an access by another block's thread (it faults, as every
// access does) swaps that block's copy in first.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_sim/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// cuda_sim_stack_switch: see "switching stacks" below. At file scope: it has C linkage.
#if defined(__x86_64__) && defined(__linux__)
#define CUDA_SIM_STACK_SWITCH 1
extern "C" void cuda_sim_stack_switch(void** save_sp, void* to_sp);
asm(R"(
  .pushsection .text
  .p2align 4
  .globl cuda_sim_stack_switch
  .hidden cuda_sim_stack_switch
  .type cuda_sim_stack_switch, @function
cuda_sim_stack_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_sim_stack_switch, .-cuda_sim_stack_switch
  .popsection
)");
#else
#define CUDA_SIM_STACK_SWITCH 0
#endif

namespace cuda_sim {

thread_local ThreadView g_view;

namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 0x7fffffffu;
constexpr unsigned kMaxGridDimYZ = 65535;
// Without cudaFuncSetAttribute a block gets 48 KiB of dynamic shared memory;
// a kernel may opt into up to 163 KiB on sm_80 and 227 KiB on sm_90 (CUDA C++
// Programming Guide, compute capabilities table: "Maximum amount of shared
// memory per thread block"; the static arrays count against the same total).
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kOptinDynamicSharedSm80 = 163 * 1024;
constexpr size_t kOptinDynamicSharedSm90 = 227 * 1024;
// The portable cluster size (CUDA C++ Programming Guide, "Thread Block
// Clusters"): 16 needs cudaFuncAttributeNonPortableClusterSizeAllowed, which
// the kernels do not ask for.
constexpr unsigned kMaxClusterBlocks = 8;
// Kernels keep few locals; ASan builds need the extra room.
constexpr size_t kStackBytes = 256 * 1024;

enum class State { Runnable, AtBarrier, AtClusterBarrier, AtShuffle, Exited };

// ---- switching stacks -----------------------------------------------------------------
//
// A fiber switch happens at every __syncthreads, shuffle and cluster_sync of
// every thread. glibc's swapcontext saves and restores the signal mask there, a
// system call each time: perf put __swapcontext and the kernel's
// rt_sigprocmask at 60% of the harness's time (rms_norm_backward, 3000 rows of
// 37, on the 2-core VM). On x86-64 Linux a switch is done here instead, by
// cuda_sim_stack_switch: it saves on the stack it leaves what the System V ABI
// makes a callee keep (rbx, rbp, r12-r15, MXCSR's control bits, the x87 control
// word; the caller has saved every other register around the call), stores the
// stack pointer, takes the other one and restores the same from it. A process
// with a CET shadow stack (a `ret` to another stack would break it), other
// targets, and OP_EXT_CUDA_SIM_SWITCH=ucontext (tests/test_cuda_sim.py runs the
// harness's checks that way too) keep ucontext, which carries the signal mask.

// Where a fiber (or the scheduler) stopped: the stack pointer of
// cuda_sim_stack_switch's frame, or a ucontext.
struct SwitchContext {
  void* sp = nullptr;
  // Zeroed: ASan's swapcontext interceptor reads the stack of the context it
  // switches to, which getcontext/swapcontext never fill in for the scheduler's.
  ucontext_t uc{};
};

// Whether cuda_sim_stack_switch is used (decided once per process; see above).
// Asked before a launch's watch starts, and kept in the Launch: the decision's
// static lives in .bss, whose pages next to the kernels' __shared__ arrays are
// PROT_NONE during a launch.
bool use_stack_switch() {
  static const bool use = [] {
#if CUDA_SIM_STACK_SWITCH
    const char* asked = std::getenv("OP_EXT_CUDA_SIM_SWITCH");
    if (asked != nullptr && std::strcmp(asked, "ucontext") == 0) return false;
    // rdssp reads the shadow-stack pointer; without one (or without CET: it is
    // a hint NOP there) it leaves its operand as it was, 0.
    unsigned long long ssp = 0;
    asm volatile("rdsspq %0" : "+r"(ssp));
    return ssp == 0;
#else
    return false;
#endif
  }();
  return use;
}

[[noreturn]] void fiber_entry();

// Makes `c` start fiber_entry on [stack, stack + bytes) at the first switch to
// it. `stack_switch`: use_stack_switch(), as the launch took it.
void make_context(SwitchContext& c, void* stack, size_t bytes, bool stack_switch) {
#if CUDA_SIM_STACK_SWITCH
  if (stack_switch) {
    // The frame cuda_sim_stack_switch returns from, as it would have left it:
    // from the bottom, the control words, r15-r12, rbx, rbp (zero: frame-pointer
    // unwinding stops there), the return address fiber_entry, and above it a
    // null return address for fiber_entry (unwinders stop there too), at a
    // 16-byte boundary less 8, as after a call.
    auto* slot = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15});
    *--slot = 0;
    *--slot = reinterpret_cast<uint64_t>(&fiber_entry);
    for (int i = 0; i < 6; ++i) *--slot = 0;
    uint32_t mxcsr = 0;
    uint16_t x87_control = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(x87_control));
    *--slot = uint64_t{mxcsr} | uint64_t{x87_control} << 32;
    c.sp = slot;
    return;
  }
#endif
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;  // fiber_entry never returns
  makecontext(&c.uc, fiber_entry, 0);
}

// Saves where the running code is in `from` and goes on at `to`.
void switch_context(SwitchContext& from, SwitchContext& to, bool stack_switch) {
#if CUDA_SIM_STACK_SWITCH
  if (stack_switch) return cuda_sim_stack_switch(&from.sp, to.sp);
#endif
  swapcontext(&from.uc, &to.uc);
}

// Goes on at `to`, leaving the running code for good.
[[noreturn]] void jump_to_context(SwitchContext& to, bool stack_switch) {
#if CUDA_SIM_STACK_SWITCH
  if (stack_switch) {
    void* abandoned = nullptr;
    cuda_sim_stack_switch(&abandoned, to.sp);
    __builtin_unreachable();
  }
#endif
  setcontext(&to.uc);
  __builtin_unreachable();
}

struct Fiber {
  SwitchContext context;
  void* stack = nullptr;
  State state = State::Runnable;
  uint3 thread_idx{};
  unsigned thread = 0;  // linear index in its block
  uint32_t launch_thread = 0;  // 1 + its index in the launch (global racecheck; 0 is no thread)
  // Its block: the fibers of a cluster's blocks are scheduled together.
  unsigned rank = 0;
  uint3 block_idx{};
  // AtBarrier, AtClusterBarrier: where
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  // AtShuffle: the exchange
  unsigned mask = 0;
  ShuffleKind kind = ShuffleKind::Idx;
  int arg = 0, width = 32;
  size_t size = 0;
  unsigned char value[16] = {};
  unsigned char result[16] = {};
  void* fake_stack = nullptr;  // ASan's, kept while the fiber is switched out
};

const char* kind_name(ShuffleKind k) {
  switch (k) {
    case ShuffleKind::Idx:
      return "__shfl_sync";
    case ShuffleKind::Up:
      return "__shfl_up_sync";
    case ShuffleKind::Down:
      return "__shfl_down_sync";
    case ShuffleKind::Xor:
      return "__shfl_xor_sync";
  }
  return "shuffle";
}

// Global-memory racecheck's record of one launch: per 2-byte granule a kernel
// thread accessed, its last writer and up to two readers that later accesses
// must follow, each with the barrier interval it was in (Launch::block_epoch).
// 2 bytes: the kernels' smallest element (half, bfloat16), so two threads
// writing neighbouring elements never share a granule; a 1-byte access (none
// of the kernels makes one) would be checked as its whole granule. Pages of
// 4 KiB, made as the kernel first touches them; a launch starts with none (the
// end of a launch orders everything before it: one stream).
struct GlobalAccess {
  uint32_t thread = 0;  // Fiber::launch_thread; 0: none
  uint32_t stamp = 0;
};
constexpr uint64_t kGlobalGranuleBytes = 2;
constexpr uint64_t kGlobalPageBytes = 4096;
constexpr uint64_t kGranulesPerPage = kGlobalPageBytes / kGlobalGranuleBytes;
struct GlobalShadowPage {
  GlobalAccess writer[kGranulesPerPage];
  GlobalAccess reader[kGranulesPerPage];
  GlobalAccess other_reader[kGranulesPerPage];
};
// 12 bytes of record per byte (48 KiB a page). Each page's record is mapped on
// its own and unmapped when more than kKeptShadowPages are free; those are
// kept for the next launches (cleared when taken), so that a launch's records
// cost no page faults in the common case, and records freed to the heap do
// not keep the largest launch's (hundreds of MB) in the process.
constexpr size_t kKeptShadowPages = 512;  // 24 MiB
thread_local std::vector<GlobalShadowPage*> g_kept_shadow_pages;

struct GlobalShadow {
  std::unordered_map<uint64_t, GlobalShadowPage*> pages;
  uint64_t last_number = UINT64_MAX;  // the page the last access found
  GlobalShadowPage* last = nullptr;
  GlobalShadow() = default;
  GlobalShadow(const GlobalShadow&) = delete;
  GlobalShadow& operator=(const GlobalShadow&) = delete;
  ~GlobalShadow() {
    for (auto& [number, page] : pages) {
      if (g_kept_shadow_pages.size() < kKeptShadowPages) {
        g_kept_shadow_pages.push_back(page);
      } else {
        munmap(page, sizeof(GlobalShadowPage));
      }
    }
  }
  // Page `number`'s record; nullptr if it cannot be mapped (a kernel thread
  // reports that: an exception cannot leave a fiber).
  GlobalShadowPage* page(uint64_t number) {
    if (number != last_number) {
      GlobalShadowPage*& slot = pages[number];
      if (slot == nullptr) {
        if (!g_kept_shadow_pages.empty()) {
          slot = g_kept_shadow_pages.back();
          g_kept_shadow_pages.pop_back();
          std::memset(static_cast<void*>(slot), 0, sizeof(GlobalShadowPage));
        } else {
          // Anonymous pages read as zeros: no record yet.
          void* m = mmap(nullptr, sizeof(GlobalShadowPage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (m == MAP_FAILED) {
            pages.erase(number);
            return nullptr;
          }
          slot = static_cast<GlobalShadowPage*>(m);
        }
      }
      last_number = number;
      last = slot;
    }
    return last;
  }
};

// initcheck's record (see "initcheck" below): the allocations tracked, per byte
// whether a kernel wrote it. On the heap, and reached during a launch only
// through Launch::initcheck: while a launch runs, the pages around the static
// __shared__ slots are watched, and a variable of this library's .bss may share
// one of them (it did: a kernel thread reading such a variable faulted and was
// reported as a shared-memory access).
struct TrackedAllocation {
  size_t bytes = 0;
  std::vector<uint8_t> written;  // per byte: a kernel wrote it
};
struct InitcheckState {
  std::mutex mutex;
  std::map<uintptr_t, TrackedAllocation> tracked;  // by first byte
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> total{0};
};
InitcheckState& initcheck_state() {
  static InitcheckState* const state = new InitcheckState();
  return *state;
}

struct Launch {
  std::string name;
  dim3 grid, block;
  unsigned cluster_blocks = 1;
  size_t threads = 0;  // per block
  size_t dynamic_bytes = 0;  // per block
  void (*body)(void*) = nullptr;
  void* closure = nullptr;
  // One per thread of the current cluster: rank * threads + linear thread index.
  std::vector<Fiber> fibers;
  std::vector<unsigned char*> dynamic_shared;  // per rank, inside its watched window; none without
  std::vector<size_t> exited;                  // per rank: its threads that have exited
  // Barrier intervals, read by racecheck: every opening of a barrier takes the
  // next value of `clock`. block_epoch[rank] is when the block's last barrier
  // (__syncthreads or cluster_sync) opened, cluster_epoch when the last
  // cluster_sync did (or the cluster started). Two accesses of one block are
  // ordered if the block's epoch moved between them, of two blocks if the
  // cluster's did: an access stamped before cluster_epoch precedes it. 32 bits:
  // a launch that opens 2^32 barriers would take the harness days.
  uint32_t clock = 0;
  uint32_t cluster_epoch = 0;
  std::vector<uint32_t> block_epoch;
  GlobalShadow global;
  InitcheckState* initcheck = nullptr;
  SwitchContext scheduler;
  bool stack_switch = false;  // use_stack_switch(), taken before the watch
  int current = -1;
  std::string error;  // the first report; the block stops at once
  // The scheduler's stack as ASan knows it (the OS thread's), and its fake stack.
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
  void* scheduler_fake_stack = nullptr;
};

thread_local Launch* g_launch = nullptr;
thread_local Arch g_arch = Arch::Sm80;
thread_local BlockOrder g_block_order = BlockOrder::Linear;
// Fiber stacks outlive launches: mapping 1024 of them per launch would cost more
// than the kernels. Pages are only touched as far as a kernel's frames go.
thread_local std::vector<void*> g_stacks;

std::string where(const Fiber& f) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", f.block_idx.x, f.block_idx.y,
                f.block_idx.z, f.thread_idx.x, f.thread_idx.y, f.thread_idx.z);
  return buf;
}

std::string report(const Launch& l, const Fiber& f, const std::string& what) {
  return "cuda_sim: kernel " + l.name + ": " + where(f) + ": " + what;
}

// A cluster starts, or its cluster_sync opens: every shared-memory access of the
// cluster before it is ordered before every access after it.
void open_cluster_interval(Launch& l) {
  l.cluster_epoch = ++l.clock;
  l.block_epoch.assign(l.cluster_blocks, l.cluster_epoch);
}

// ASan keeps one stack per thread: it must be told of every switch between the
// scheduler's stack and a fiber's, or it takes fiber frames for wild accesses
// to the thread's stack (and __asan_handle_no_return, before a report leaves a
// fiber, refuses to clean up). start: about to switch to [bottom, bottom +
// size), saving this stack's fake stack in *save (nullptr: this stack is left
// for good); finish: arrived, restoring `saved`, learning the previous stack.
void switch_start(void** save, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(save, bottom, size);
#else
  (void)save, (void)bottom, (void)size;
#endif
}

void switch_finish(void* saved, const void** bottom_old, size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(saved, bottom_old, size_old);
#else
  (void)saved, (void)bottom_old, (void)size_old;
#endif
}

// From inside a fiber: back to the scheduler until it resumes us.
void yield() {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  switch_start(&f.fake_stack, l.scheduler_stack, l.scheduler_stack_bytes);
  switch_context(f.context, l.scheduler, l.stack_switch);
  switch_finish(f.fake_stack, &l.scheduler_stack, &l.scheduler_stack_bytes);
}

[[noreturn]] void fail_in_fiber(const std::string& what) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  if (l.error.empty()) l.error = report(l, f, what);
  f.state = State::Exited;
  // The fiber's stack is abandoned: kernels hold no resources.
  switch_start(nullptr, l.scheduler_stack, l.scheduler_stack_bytes);
  jump_to_context(l.scheduler, l.stack_switch);
}

// ---- watched shared memory ------------------------------------------------------------

constexpr size_t kPage = 4096;

// runtime.h's __shared__ starts every static array at a slot of this size.
constexpr size_t kSharedSlot = CUDA_SIM_SHARED_SLOT;
static_assert(kSharedSlot >= 2 * kPage && kSharedSlot % kPage == 0, "a slot is whole pages, at least two");

uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(kPage - 1); }

// One watched array: a block's dynamic shared memory, or a static __shared__
// array of some kernel (found in this library's symbol table).
struct Region {
  uintptr_t begin = 0, end = 0;
  // Watched memory around it in which no other shared array lies: an access
  // there that is not in [begin, end) is out of bounds of this array.
  uintptr_t guard_begin = 0, guard_end = 0;
  std::string name;            // for reports
  const char* unit = "array";  // "... byte offset 132 of a 132-byte <unit>"
  // Index of its first byte in a block's part of the Watch's shadow arrays.
  size_t shadow = 0;
  // A dynamic window: the rank of the block it belongs to. A static array
  // (-1): the bytes in place are the accessing block's (see own_static_copy).
  int rank = -1;
  // Where `begin` is in the unwatched view of the same pages, which the
  // helpers' accesses use (memory_access).
  uintptr_t alias = 0;
};

// A block's dynamic shared memory: guard page, data pages, guard page; the
// data pages are mapped a second time, unwatched, at region.alias.
struct Window {
  unsigned char* map = nullptr;
  size_t map_bytes = 0;
  unsigned char* alias = nullptr;
  Region region;
};

// Pages of a memfd mapped twice: at `watched` (MAP_FIXED over what is there,
// protection `prot`) and somewhere unwatched (read-write), which is returned.
// Both views are the same memory. `bytes`: whole pages.
unsigned char* map_twice(void* watched, size_t bytes, int prot) {
  const int fd = memfd_create("cuda_sim shared memory", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("cuda_sim: cannot create the shared-memory views (memfd_create)");
  }
  void* const fixed = mmap(watched, bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0);
  void* const alias = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mappings keep the memory
  if (fixed == MAP_FAILED || alias == MAP_FAILED) throw std::runtime_error("cuda_sim: cannot map shared memory twice");
  return static_cast<unsigned char*>(alias);
}

struct Watch {
  std::vector<Window> windows;  // per rank; none without dynamic shared memory
  std::vector<Region> statics;
  std::vector<std::pair<uintptr_t, size_t>> static_pages;  // (first page, bytes): runs closed during the launch
  // Cluster launches: per static array, the rank whose copy is in place, and
  // every rank's copy (rank-major; the owner's is stale until it is swapped out).
  std::vector<unsigned> static_owner;
  std::vector<std::vector<unsigned char>> static_copies;
  // Per watched byte of each block (rank * block_shadow + Region::shadow +
  // offset): the last writer and two readers (fiber index, -1: none) and the
  // barrier interval of their block when they accessed it (Launch::block_epoch).
  size_t block_shadow = 0;
  std::vector<int32_t> writer, reader, other_reader;
  std::vector<uint32_t> write_stamp, read_stamp, other_stamp;
  uintptr_t open_pages[2] = {0, 0};  // opened for the instruction being stepped
  std::string pending;               // a report on its way to report_pending()
  struct sigaction old_segv {}, old_trap {};
};

// What the signal handlers read. Static shared arrays sit in .bss among other
// objects and their pages are closed during a launch: this state has a page of
// its own so that the handlers never fault on it.
struct alignas(kPage) HandlerState {
  Watch* watch = nullptr;
  Launch* launch = nullptr;
  // The thread running the launch: only its faults are the fibers' accesses.
  // Another thread touching an unrelated object on a closed page is let through.
  pthread_t thread{};
  // Accesses of shared memory by kernel threads that bypassed the helpers:
  // each was checked through a fault (shared_faults()).
  std::atomic<uint64_t> faults{0};
};
static_assert(sizeof(HandlerState) == kPage, "the handlers' state fills its page");
HandlerState g_handler;
std::mutex g_watch_mutex;  // one launch at a time holds the process-wide handlers

[[noreturn]] void report_pending() {
  std::string what;
  what.swap(g_handler.watch->pending);
  fail_in_fiber(what);
}

// "" when the access of `bytes` bytes at addr (inside r's guard) is fine;
// records it, byte by byte.
std::string check_access(Watch& w, const Launch& l, const Region& r, uintptr_t addr, size_t bytes, bool write) {
  const int me = l.current;
  const unsigned my_rank = l.fibers[me].rank;
  char what[640];
  if (addr < r.begin || addr + bytes > r.end) {
    const uintptr_t outside = addr < r.begin ? addr : std::max(addr, r.end);  // its first byte out of bounds
    std::snprintf(what, sizeof what, "%s %s out of bounds: byte offset %lld of a %zu-byte %s", r.name.c_str(),
                  write ? "write" : "read", static_cast<long long>(outside - r.begin),
                  static_cast<size_t>(r.end - r.begin), r.unit);
    return what;
  }
  // Undefined on the GPU (the block's SM may already run another block); the
  // harness still has the window, so it can say so.
  if (r.rank >= 0 && l.exited[r.rank] == l.threads) {
    std::snprintf(what, sizeof what,
                  "%s at byte offset %zu of %s: block rank %d of the cluster has exited: its shared memory is gone "
                  "(cluster_sync before a block exits)",
                  write ? "write" : "read", static_cast<size_t>(addr - r.begin), r.name.c_str(), r.rank);
    return what;
  }
  const size_t owner = r.rank >= 0 ? static_cast<size_t>(r.rank) : my_rank;  // a static: the accessing block's copy
  const uint32_t now = l.block_epoch[my_rank];
  // Whether fiber `other`'s access in its block's interval `stamp` happens before this one.
  auto ordered = [&](int32_t other, uint32_t stamp) {
    if (other < 0 || other == me) return true;
    if (l.fibers[other].rank == my_rank) return stamp != now;  // a barrier of this block between
    return stamp < l.cluster_epoch;                           // a cluster_sync between
  };
  for (size_t k = 0; k < bytes; ++k) {
    const size_t offset = addr + k - r.begin;
    const size_t i = owner * w.block_shadow + r.shadow + offset;
    auto race = [&](const char* hazard, int other) {
      const bool same_block = l.fibers[other].rank == my_rank;
      std::snprintf(what, sizeof what, "shared memory race (%s) at byte offset %zu of %s with %s, no %s between",
                    hazard, offset, r.name.c_str(), where(l.fibers[other]).c_str(),
                    same_block ? "__syncthreads" : "cluster_sync");
      return std::string(what);
    };
    if (write) {
      if (!ordered(w.writer[i], w.write_stamp[i])) return race("write after write", w.writer[i]);
      if (!ordered(w.reader[i], w.read_stamp[i])) return race("write after read", w.reader[i]);
      if (!ordered(w.other_reader[i], w.other_stamp[i])) return race("write after read", w.other_reader[i]);
      w.writer[i] = me;
      w.write_stamp[i] = now;
    } else {
      if (!ordered(w.writer[i], w.write_stamp[i])) return race("read after write", w.writer[i]);
      // A later write races with every reader it does not follow. A reader that
      // this one follows can be forgotten: whatever does not follow it does not
      // follow this one either. Two are kept, which sees every hazard within a
      // block (the readers of an interval all precede its next barrier); a third
      // reader from another block while two are outstanding is not recorded.
      if (w.reader[i] == me) {
        w.read_stamp[i] = now;
      } else if (w.other_reader[i] == me) {
        w.other_stamp[i] = now;
      } else if (ordered(w.reader[i], w.read_stamp[i])) {
        w.reader[i] = me;
        w.read_stamp[i] = now;
      } else if (ordered(w.other_reader[i], w.other_stamp[i])) {
        w.other_reader[i] = me;
        w.other_stamp[i] = now;
      }
    }
  }
  return "";
}

// ---- global-memory races ---------------------------------------------------------------
//
// The PTX ISA's memory consistency model ("Memory Consistency Model": "Data
// races") makes two overlapping accesses, at least one a write, by threads that
// nothing orders a data race, whose result is undefined. The kernels use no
// atomics and no fences, so within a launch only barriers order two threads:
// __syncthreads those of one block (CUDA C++ Programming Guide, "Synchronization
// Functions": the global and shared memory accesses before it are visible to
// every thread of the block after it), and barrier.cluster those of one cluster
// (cluster_sync: its arrive releases and its wait acquires at cluster scope; PTX
// ISA, "barrier.cluster"). Blocks in different clusters (without clusters: any
// two blocks) are never ordered: a GPU runs them in any order, or at once, where
// the harness runs them one after another and so always gives one answer.
// compute-sanitizer's racecheck checks shared memory only; this is the same
// check for the global accesses of the kernels' helpers, per 2-byte granule.

// "block (x,y,z) thread (x,y,z)" of the thread numbered `id` (Fiber::launch_thread).
std::string where_in_launch(const Launch& l, uint32_t id) {
  const uint64_t i = id - 1, block = i / l.threads, t = i % l.threads;
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%llu,%llu,%llu) thread (%llu,%llu,%llu)",
                static_cast<unsigned long long>(block % l.grid.x),
                static_cast<unsigned long long>(block / l.grid.x % l.grid.y),
                static_cast<unsigned long long>(block / (1ull * l.grid.x * l.grid.y)),
                static_cast<unsigned long long>(t % l.block.x),
                static_cast<unsigned long long>(t / l.block.x % l.block.y),
                static_cast<unsigned long long>(t / (1ull * l.block.x * l.block.y)));
  return buf;
}

std::string check_global_access(Launch& l, uintptr_t addr, size_t bytes, bool write) {
  const Fiber& f = l.fibers[l.current];
  const uint32_t me = f.launch_thread;
  const uint64_t my_block = (me - 1) / l.threads;
  const uint32_t now = l.block_epoch[f.rank];
  // What orders `other` before this access, if anything does.
  enum class Order { Ordered, SameBlock, SameCluster, Unordered };
  auto order = [&](const GlobalAccess& other) {
    if (other.thread == 0 || other.thread == me) return Order::Ordered;
    const uint64_t block = (other.thread - 1) / l.threads;
    if (block == my_block) return other.stamp != now ? Order::Ordered : Order::SameBlock;
    // Clusters are 1-D along x and grid.x is a multiple of their size, so the
    // blocks of one cluster are consecutive in the launch's numbering.
    if (block / l.cluster_blocks == my_block / l.cluster_blocks) {
      return other.stamp < l.cluster_epoch ? Order::Ordered : Order::SameCluster;
    }
    return Order::Unordered;
  };
  auto race = [&](const char* hazard, uintptr_t a, const GlobalAccess& other, Order o) {
    const char* why = o == Order::SameBlock     ? "no __syncthreads between"
                      : o == Order::SameCluster ? "another block of the cluster, no cluster_sync between"
                      : l.cluster_blocks > 1
                          ? "another cluster: nothing orders two clusters of a launch (a GPU runs them in any "
                            "order, or at once)"
                          : "another block: nothing orders two blocks of a launch (a GPU runs them in any order, "
                            "or at once)";
    char what[512];
    std::snprintf(what, sizeof what, "global memory race (%s) at %p with %s, %s", hazard, reinterpret_cast<void*>(a),
                  where_in_launch(l, other.thread).c_str(), why);
    return std::string(what);
  };
  const uintptr_t first = addr / kGlobalGranuleBytes * kGlobalGranuleBytes;
  for (uintptr_t a = first; a < addr + bytes; a += kGlobalGranuleBytes) {
    GlobalShadowPage* const record = l.global.page(a / kGlobalPageBytes);
    if (record == nullptr) return "the harness cannot map the global racecheck's record (out of memory)";
    GlobalShadowPage& page = *record;
    const size_t i = a % kGlobalPageBytes / kGlobalGranuleBytes;
    GlobalAccess& writer = page.writer[i];
    GlobalAccess& reader = page.reader[i];
    GlobalAccess& other_reader = page.other_reader[i];
    if (write) {
      if (const Order o = order(writer); o != Order::Ordered) return race("write after write", a, writer, o);
      if (const Order o = order(reader); o != Order::Ordered) return race("write after read", a, reader, o);
      if (const Order o = order(other_reader); o != Order::Ordered) {
        return race("write after read", a, other_reader, o);
      }
      writer = {me, now};
    } else {
      if (const Order o = order(writer); o != Order::Ordered) return race("read after write", a, writer, o);
      // As for shared memory (check_access): a reader this one follows can be
      // forgotten, two are kept. A byte read by many blocks (a weight) keeps two
      // of them, and a later write by any thread outside their block races
      // with the first and is reported.
      if (reader.thread == me) {
        reader.stamp = now;
      } else if (other_reader.thread == me) {
        other_reader.stamp = now;
      } else if (order(reader) == Order::Ordered) {
        reader = {me, now};
      } else if (order(other_reader) == Order::Ordered) {
        other_reader = {me, now};
      }
    }
  }
  return "";
}

// ---- initcheck: reads of global memory no kernel wrote -------------------------------
//
// compute-sanitizer's initcheck reports a device read of global memory that was
// never written since its allocation. The harness tracks the launchers'
// workspaces (binding/cuda_sim_module.cpp registers each for its call), which
// only their kernels write, and per byte whether a kernel wrote it. The poison
// they are filled with (NaN bits) shows most such reads in a float sum, but a
// max, a comparison or an integer swallows it; this reports the read itself.
// (Outputs are poisoned and compared with the reference instead: the host may
// write them, a copy or a fill the harness does not see.)

// The allocation holding [a, a + bytes), if tracked: marks a write, checks a read.
std::string check_initialized(InitcheckState& state, uintptr_t a, size_t bytes, bool write) {
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.tracked.upper_bound(a);
  if (it == state.tracked.begin()) return "";
  --it;
  TrackedAllocation& t = it->second;
  if (a >= it->first + t.bytes) return "";
  const size_t offset = a - it->first;
  const size_t n = std::min(bytes, t.bytes - offset);
  if (write) {
    std::fill_n(t.written.begin() + static_cast<std::ptrdiff_t>(offset), n, uint8_t{1});
    return "";
  }
  for (size_t k = 0; k < n; ++k) {
    if (!t.written[offset + k]) {
      char what[320];
      std::snprintf(what, sizeof what,
                    "read of uninitialized global memory (initcheck) at byte offset %zu of a %zu-byte workspace, "
                    "which no kernel has written",
                    offset + k, t.bytes);
      return what;
    }
  }
  return "";
}

// The static __shared__ arrays of the kernels: function-local statics of
// op_ext::cuda (CUDA allows no other statics in device code) that start a
// slot as runtime.h's __shared__ places them, read from the symbol table of
// this library's file once. Each is watched from the page before it to the end
// of its slot's last page plus one: no other shared array starts in there.
std::vector<Region> find_static_shared() {
  std::vector<Region> regions;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&find_static_shared), &info) == 0 || info.dli_fname == nullptr) return regions;
  std::ifstream file(info.dli_fname, std::ios::binary);
  const std::string elf((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return regions;
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  auto section = [&](size_t k) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + k * eh.e_shentsize, sizeof sh);
    return sh;
  };
  for (size_t k = 0; k < eh.e_shnum; ++k) {
    const Elf64_Shdr symtab = section(k);
    if (symtab.sh_type != SHT_SYMTAB) continue;
    const Elf64_Shdr strtab = section(symtab.sh_link);
    for (size_t s = 0; s < symtab.sh_size / sizeof(Elf64_Sym); ++s) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + symtab.sh_offset + s * sizeof sym, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_size == 0 || sym.st_shndx == SHN_UNDEF) continue;
      const char* name = elf.data() + strtab.sh_offset + sym.st_name;
      if (std::strncmp(name, "_ZZN6op_ext4cuda", 16) != 0) continue;
      Region r;
      r.begin = reinterpret_cast<uintptr_t>(info.dli_fbase) + sym.st_value;
      r.end = r.begin + sym.st_size;
      if (r.begin % kSharedSlot != 0) continue;  // a static that is not __shared__
      r.guard_begin = r.begin - kPage;
      r.guard_end = page_up(r.end) + kPage;
      // The handlers' own page must stay open; being page-sized, it can only
      // be a guard's first or last page.
      const auto handler_page = reinterpret_cast<uintptr_t>(&g_handler);
      if (r.guard_begin == handler_page) r.guard_begin += kPage;
      if (r.guard_end == handler_page + kPage) r.guard_end -= kPage;
#if defined(__SANITIZE_ADDRESS__)
      // ASan gives every global a poisoned redzone after it (and other globals'
      // redzones may end just before the slot): an index past the array would
      // be ASan's global-buffer-overflow before it faulted here. The harness
      // checks these bytes itself, so ASan is told they are addressable.
      ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(r.guard_begin), page_up(r.end) - r.guard_begin);
#endif
      int status = 0;
      char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
      r.name = std::string("static __shared__ ") + (status == 0 ? demangled : name);
      std::free(demangled);
      regions.push_back(std::move(r));
    }
  }
  return regions;
}

// Each static array's pages, from its start to the end of its last page, are
// given an unwatched view (map_twice); their bytes, including any other
// object's in the last page, are carried over. Done when the library loads,
// before any of its code can run on another thread.
void alias_static_arrays(std::vector<Region>& regions, int prot) {
  for (Region& r : regions) {
    const size_t span = page_up(r.end) - r.begin;  // r.begin starts a slot, so a page
    const auto* current = reinterpret_cast<const unsigned char*>(r.alias != 0 ? r.alias : r.begin);
    const std::vector<unsigned char> bytes(current, current + span);
    if (r.alias != 0) munmap(reinterpret_cast<void*>(r.alias), span);  // the parent's view, in a child
    unsigned char* alias = map_twice(reinterpret_cast<void*>(r.begin), span, prot);
    std::memcpy(alias, bytes.data(), span);
    r.alias = reinterpret_cast<uintptr_t>(alias);
  }
}

std::vector<Region>& static_shared_arrays();

// A forked child would share the views with its parent (MAP_SHARED): it gets
// views of its own, with the bytes as they were at the fork (read through the
// parent's unwatched view: a launch on another thread may have closed the
// watched one, and the child has no such thread).
void give_child_its_own_statics() { alias_static_arrays(static_shared_arrays(), PROT_READ | PROT_WRITE); }

std::vector<Region>& static_shared_arrays() {
  static std::vector<Region> statics = [] {
    std::vector<Region> found = find_static_shared();
    alias_static_arrays(found, PROT_READ | PROT_WRITE);
    pthread_atfork(nullptr, nullptr, give_child_its_own_statics);
    return found;
  }();
  return statics;
}
[[maybe_unused]] const bool g_statics_aliased_at_load = !static_shared_arrays().empty();

// Puts block `rank`'s copy of static array r in place (a cluster launch),
// through the unwatched view.
void own_static_copy(Watch& w, const Region& r, unsigned rank) {
  if (w.static_copies.empty()) return;  // one block at a time: the bytes in place are its
  const auto k = static_cast<size_t>(&r - w.statics.data());
  const unsigned owner = w.static_owner[k];
  if (owner == rank) return;
  const size_t bytes = r.end - r.begin;
  auto* in_place = reinterpret_cast<unsigned char*>(r.alias);
  unsigned char* copies = w.static_copies[k].data();
  std::memcpy(copies + owner * bytes, in_place, bytes);
  std::memcpy(in_place, copies + rank * bytes, bytes);
  w.static_owner[k] = rank;
}

// The shared array that `addr` falls in or next to, or nullptr: a block's
// dynamic window (its guard pages included), else the static array whose
// guard holds it (the nearest: an index past the end, or before the start, of
// that array). *closed: the address is on a page closed during the launch.
const Region* shared_region(const Watch& w, uintptr_t addr, bool* closed) {
  for (const Window& window : w.windows) {
    const auto map = reinterpret_cast<uintptr_t>(window.map);
    if (addr >= map && addr < map + window.map_bytes) {
      *closed = true;
      return &window.region;
    }
  }
  *closed = false;
  for (const auto& [first, bytes] : w.static_pages) *closed = *closed || (addr >= first && addr < first + bytes);
  const Region* region = nullptr;
  uintptr_t best = ~uintptr_t{0};
  for (const Region& r : w.statics) {
    if (addr < r.guard_begin || addr >= r.guard_end) continue;
    const uintptr_t distance = addr < r.begin ? r.begin - addr : (addr >= r.end ? addr - r.end + 1 : 0);
    if (distance < best) {
      best = distance;
      region = &r;
    }
  }
  return region;
}

#if defined(__x86_64__) && defined(__linux__)
constexpr bool kCanWatch = true;
constexpr greg_t kTrapFlag = 0x100;

void on_segv(int, siginfo_t* si, void* raw) {
  auto* uc = static_cast<ucontext_t*>(raw);
  Watch* w = g_handler.watch;
  const Launch* l = g_handler.launch;
  const auto addr = reinterpret_cast<uintptr_t>(si->si_addr);
  const uintptr_t page = addr & ~(kPage - 1);
  bool watched = false;
  const Region* region = w != nullptr ? shared_region(*w, addr, &watched) : nullptr;
  if (!watched) {
    // Not ours: the previous handler gets the fault when the access repeats.
    if (w != nullptr) sigaction(SIGSEGV, &w->old_segv, nullptr);
    return;
  }
  // A kernel thread's access is checked. The scheduler's (filling the arrays),
  // and other threads' accesses to unrelated objects on a closed page, pass.
  if (region != nullptr && l != nullptr && l->current >= 0 && pthread_equal(pthread_self(), g_handler.thread)) {
    g_handler.faults.fetch_add(1, std::memory_order_relaxed);
    const bool write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    if (region->rank < 0) own_static_copy(*w, *region, l->fibers[l->current].rank);
    std::string problem = check_access(*w, *l, *region, addr, 1, write);
    if (!problem.empty()) {
      w->pending = std::move(problem);
      // Resume in report_pending() on this fiber's stack, below the red zone,
      // aligned as at a function's entry.
      const auto sp = ((static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]) - 1024) & ~uintptr_t{15}) - 8;
      uc->uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(sp);
      uc->uc_mcontext.gregs[REG_RIP] = reinterpret_cast<greg_t>(&report_pending);
      return;
    }
  }
  mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_WRITE);
  w->open_pages[w->open_pages[0] == 0 ? 0 : 1] = page;
  uc->uc_mcontext.gregs[REG_EFL] |= kTrapFlag;
}

void on_trap(int, siginfo_t*, void* raw) {
  auto* uc = static_cast<ucontext_t*>(raw);
  Watch* w = g_handler.watch;
  if (w == nullptr || w->open_pages[0] == 0) {
    if (w != nullptr) sigaction(SIGTRAP, &w->old_trap, nullptr);
    raise(SIGTRAP);
    return;
  }
  for (uintptr_t& page : w->open_pages) {
    if (page != 0) mprotect(reinterpret_cast<void*>(page), kPage, PROT_NONE);
    page = 0;
  }
  uc->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
}
#else
constexpr bool kCanWatch = false;
#endif

void protect_statics(const Watch& w, int prot) {
  for (const auto& [first, bytes] : w.static_pages) mprotect(reinterpret_cast<void*>(first), bytes, prot);
}

// Maps each block's dynamic window for `size` bytes (if any) twice (watched,
// and the helpers' view), takes the static arrays, closes their pages and,
// where possible, installs the handlers.
void watch_begin(Watch& w, Launch& l, size_t size) {
  const unsigned blocks = l.cluster_blocks;
  if (size > 0) {
    const size_t data = (size + kPage - 1) / kPage * kPage;
    w.windows.resize(blocks);
    for (unsigned rank = 0; rank < blocks; ++rank) {
      Window& window = w.windows[rank];
      window.map_bytes = data + 2 * kPage;
      void* m = mmap(nullptr, window.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) throw std::runtime_error("cuda_sim: cannot map dynamic shared memory");
      window.map = static_cast<unsigned char*>(m);
      window.alias = map_twice(window.map + kPage, data, kCanWatch ? PROT_NONE : PROT_READ | PROT_WRITE);
      Region& r = window.region;
      r.begin = reinterpret_cast<uintptr_t>(window.map) + kPage;
      r.end = r.begin + size;
      r.alias = reinterpret_cast<uintptr_t>(window.alias);
      // A launch without clusters keeps the name its reports always had.
      r.name = blocks == 1 ? "dynamic shared memory" : "dynamic shared memory of block rank " + std::to_string(rank);
      r.unit = "allocation";
      r.rank = static_cast<int>(rank);
      l.dynamic_shared.push_back(window.map + kPage);
    }
  }
  w.statics = static_shared_arrays();
  w.block_shadow = size;
  for (Region& r : w.statics) {
    r.shadow = w.block_shadow;
    w.block_shadow += r.end - r.begin;
  }
  if (blocks > 1) {
    w.static_owner.assign(w.statics.size(), 0);
    for (const Region& r : w.statics) w.static_copies.emplace_back(blocks * (r.end - r.begin));
  }
  // The guards as runs of whole pages (they may overlap): one mprotect per run.
  std::vector<std::pair<uintptr_t, uintptr_t>> guards;
  for (const Region& r : w.statics) guards.emplace_back(r.guard_begin, r.guard_end);
  std::sort(guards.begin(), guards.end());
  for (const auto& [first, last] : guards) {
    if (!w.static_pages.empty() && first <= w.static_pages.back().first + w.static_pages.back().second) {
      auto& run = w.static_pages.back();
      run.second = std::max(run.second, static_cast<size_t>(last - run.first));
    } else {
      w.static_pages.emplace_back(first, last - first);
    }
  }
  const size_t shadow = blocks * w.block_shadow;
  w.writer.assign(shadow, -1);
  w.reader.assign(shadow, -1);
  w.other_reader.assign(shadow, -1);
  w.write_stamp.assign(shadow, 0);
  w.read_stamp.assign(shadow, 0);
  w.other_stamp.assign(shadow, 0);
  g_handler.watch = &w;
  g_handler.launch = &l;
  g_handler.thread = pthread_self();
#if defined(__x86_64__) && defined(__linux__)
  struct sigaction sa {};
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = on_segv;
  sigaction(SIGSEGV, &sa, &w.old_segv);
  sa.sa_sigaction = on_trap;
  sigaction(SIGTRAP, &sa, &w.old_trap);
  protect_statics(w, PROT_NONE);  // after the handlers: the scheduler's own accesses to those pages pass
#endif
}

// At a cluster's start: shared memory is garbage on the GPU, NaN bits here, in
// every block's window and every block's copy of the static arrays (written
// through the unwatched views: the watched pages stay closed).
void watch_cluster(Watch& w) {
  for (Window& window : w.windows) std::memset(window.alias, 0xff, window.region.end - window.region.begin);
  for (const Region& r : w.statics) std::memset(reinterpret_cast<void*>(r.alias), 0xff, r.end - r.begin);
  for (auto& copies : w.static_copies) std::fill(copies.begin(), copies.end(), 0xff);
  std::fill(w.static_owner.begin(), w.static_owner.end(), 0u);
}

void watch_end(Watch& w) {
  protect_statics(w, PROT_READ | PROT_WRITE);
  if (g_handler.watch == &w) {
#if defined(__x86_64__) && defined(__linux__)
    sigaction(SIGSEGV, &w.old_segv, nullptr);
    sigaction(SIGTRAP, &w.old_trap, nullptr);
#endif
    g_handler.watch = nullptr;
    g_handler.launch = nullptr;
  }
  for (Window& window : w.windows) {
    munmap(window.map, window.map_bytes);
    munmap(window.alias, window.map_bytes - 2 * kPage);
  }
  w.windows.clear();
}

void fiber_main() {
  Launch& l = *g_launch;
  switch_finish(nullptr, &l.scheduler_stack, &l.scheduler_stack_bytes);
  l.body(l.closure);
  Fiber& f = l.fibers[l.current];
  f.state = State::Exited;
  ++l.exited[f.rank];  // the block's shared memory is gone with its last thread
}

// Where every fiber starts: its thread, then back to the scheduler for good.
void fiber_entry() {
  fiber_main();
  Launch& l = *g_launch;
  switch_start(nullptr, l.scheduler_stack, l.scheduler_stack_bytes);
  jump_to_context(l.scheduler, l.stack_switch);
}

const char* state_name(State s) {
  switch (s) {
    case State::Runnable:
      return "runs on";
    case State::AtBarrier:
      return "waits at __syncthreads";
    case State::AtClusterBarrier:
      return "waits at cluster_sync";
    case State::AtShuffle:
      return "waits at a shuffle";
    case State::Exited:
      return "has exited";
  }
  return "?";
}

// Lanes [first, first + count) of the block form one warp.
bool resolve_warp(Launch& l, size_t first, size_t count, bool* resolved) {
  for (size_t i = first; i < first + count; ++i) {
    Fiber& f = l.fibers[i];
    if (f.state != State::AtShuffle) continue;
    // Every lane of the mask must wait at a shuffle with the same mask and kind.
    for (unsigned lane = 0; lane < 32; ++lane) {
      if (!(f.mask >> lane & 1u)) continue;
      const Fiber& o = l.fibers[first + lane];
      if (o.state != State::AtShuffle || o.mask != f.mask || o.kind != f.kind) {
        char what[200];
        std::snprintf(what, sizeof what,
                      "%s with mask 0x%08x names lane %u, which does not take part (it %s%s)",
                      kind_name(f.kind), f.mask, lane, state_name(o.state),
                      o.state == State::AtShuffle ? " with another mask or kind" : "");
        l.error = report(l, f, what);
        return false;
      }
    }
  }
  for (size_t i = first; i < first + count; ++i) {
    Fiber& f = l.fibers[i];
    if (f.state != State::AtShuffle) continue;
    const int lane = static_cast<int>(i - first);
    const int base = lane & ~(f.width - 1), in = lane & (f.width - 1);
    int src = lane;
    switch (f.kind) {
      case ShuffleKind::Idx:
        src = base + (f.arg & (f.width - 1));
        break;
      case ShuffleKind::Up:
        src = in - f.arg >= 0 ? lane - f.arg : lane;
        break;
      case ShuffleKind::Down:
        src = in + f.arg < f.width ? lane + f.arg : lane;
        break;
      case ShuffleKind::Xor:
        src = (in ^ f.arg) < f.width ? base + (in ^ f.arg) : lane;
        break;
    }
    if (src < static_cast<int>(count) && (f.mask >> src & 1u)) {
      std::memcpy(f.result, l.fibers[first + src].value, f.size);
    } else {
      std::memset(f.result, 0xff, f.size);  // undefined on the GPU
    }
  }
  for (size_t i = first; i < first + count; ++i) {
    if (l.fibers[i].state == State::AtShuffle) {
      l.fibers[i].state = State::Runnable;
      *resolved = true;
    }
  }
  return true;
}

// Whether fiber f waits at the same barrier (kind and place) as `waiting`.
bool waits_with(const Fiber& f, const Fiber& waiting) {
  return f.state == waiting.state && f.barrier_line == waiting.barrier_line &&
         std::strcmp(f.barrier_file, waiting.barrier_file) == 0;
}

// Fibers [first, first + count) that do not wait with `waiting`: the first, or nullptr.
const Fiber* first_not_waiting_with(const Launch& l, size_t first, size_t count, const Fiber& waiting) {
  for (size_t i = first; i < first + count; ++i) {
    if (!waits_with(l.fibers[i], waiting)) return &l.fibers[i];
  }
  return nullptr;
}

void run_cluster(Launch& l) {
  const size_t n = l.fibers.size(), threads = l.threads;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = l.fibers[i];
    f.state = State::Runnable;
    make_context(f.context, f.stack, kStackBytes, l.stack_switch);
  }
  l.exited.assign(l.cluster_blocks, 0);
  while (true) {
    bool ran = false;
    for (size_t i = 0; i < n; ++i) {
      Fiber& f = l.fibers[i];
      if (f.state != State::Runnable) continue;
      l.current = static_cast<int>(i);
      g_view.thread_idx = f.thread_idx;
      g_view.block_idx = f.block_idx;
      switch_start(&l.scheduler_fake_stack, f.stack, kStackBytes);
      switch_context(l.scheduler, f.context, l.stack_switch);
      switch_finish(l.scheduler_fake_stack, nullptr, nullptr);
      l.current = -1;  // the scheduler is not a thread of the cluster
      if (!l.error.empty()) return;
      ran = true;
    }
    if (ran) continue;
    // Warps are a block's: one never spans two blocks, even when the block's
    // threads are not a multiple of 32.
    bool resolved = false;
    for (size_t block = 0; block < n; block += threads) {
      for (size_t w = 0; w < threads; w += 32) {
        if (!resolve_warp(l, block + w, std::min<size_t>(32, threads - w), &resolved)) return;
      }
    }
    if (resolved) continue;
    // Only barriers (or nothing) remain. A block whose threads all wait at one
    // __syncthreads goes on, whatever the other blocks wait at.
    bool opened = false;
    for (size_t block = 0; block < n; block += threads) {
      const Fiber& first = l.fibers[block];
      if (first.state != State::AtBarrier || first_not_waiting_with(l, block, threads, first) != nullptr) continue;
      l.block_epoch[first.rank] = ++l.clock;
      for (size_t i = block; i < block + threads; ++i) l.fibers[i].state = State::Runnable;
      opened = true;
    }
    if (opened) continue;
    if (l.fibers[0].state == State::AtClusterBarrier && first_not_waiting_with(l, 0, n, l.fibers[0]) == nullptr) {
      open_cluster_interval(l);
      for (Fiber& f : l.fibers) f.state = State::Runnable;
      continue;
    }
    // A hang on the GPU. A __syncthreads is named first (its block is the
    // smaller scope), then a cluster_sync.
    const Fiber* waiting = nullptr;
    for (const State barrier : {State::AtBarrier, State::AtClusterBarrier}) {
      for (size_t i = 0; i < n && waiting == nullptr; ++i) {
        if (l.fibers[i].state == barrier) waiting = &l.fibers[i];
      }
    }
    if (waiting == nullptr) return;  // every thread has exited
    const bool block_barrier = waiting->state == State::AtBarrier;
    const size_t scope = block_barrier ? static_cast<size_t>(waiting->rank) * threads : 0;
    const Fiber* f = first_not_waiting_with(l, scope, block_barrier ? threads : n, *waiting);
    const char* barrier = block_barrier ? "__syncthreads" : "cluster_sync";
    std::string what = std::string(barrier) + " at " + waiting->barrier_file + ":" +
                       std::to_string(waiting->barrier_line) + " is not reached by " + where(*f) + ", which ";
    if (f->state == State::AtBarrier || f->state == State::AtClusterBarrier) {
      what += std::string(state_name(f->state)) + " at " + f->barrier_file + ":" + std::to_string(f->barrier_line);
    } else {
      what += state_name(f->state);
    }
    l.error = report(l, *waiting, what);
    return;
  }
}

// ---- global-memory traffic ------------------------------------------------------------

// What a GPU's memory system would see of the kernels' global accesses, counted
// while traffic_begin() .. traffic_end() is open. Every global access of the
// kernels goes through their load/store helpers (kernel/cuda/cuda_common.cuh),
// which call memory_access. The helpers are always inlined (runtime.h's
// __forceinline__), so the address memory_access returns to names the access's
// place in the kernel: the k-th time each lane of a warp reaches one place is one
// warp-wide instruction, whose 32-byte sectors are what coalescing is about.
struct TrafficState {
  bool on = false;
  bool launches_only = false;  // record each launch, run none (traffic_begin)
  TrafficCounts counts;
  // This cluster's accesses: per (lane, place) how often it was reached, and per
  // (warp, place, occurrence) the byte ranges its lanes asked for; a warp is
  // rank * 32 + its index in its block (a block has at most 32 warps).
  struct Place {
    uint32_t fiber;
    uintptr_t site;
    bool operator==(const Place& o) const { return fiber == o.fiber && site == o.site; }
  };
  struct PlaceHash {
    size_t operator()(const Place& p) const { return std::hash<uintptr_t>()(p.site * 1315423911u ^ p.fiber); }
  };
  struct Instruction {
    uint32_t warp;
    uintptr_t site;
    uint32_t occurrence;
    bool operator==(const Instruction& o) const {
      return warp == o.warp && site == o.site && occurrence == o.occurrence;
    }
  };
  struct InstructionHash {
    size_t operator()(const Instruction& i) const {
      return std::hash<uintptr_t>()(i.site * 2654435761u ^ (uint64_t{i.warp} << 32 | i.occurrence));
    }
  };
  std::unordered_map<Place, uint32_t, PlaceHash> reached;
  // Each instruction's accesses: (first byte, bytes).
  std::unordered_map<Instruction, std::vector<std::pair<uint64_t, uint64_t>>, InstructionHash> accesses;
  // Each shared-memory instruction's accesses: (lane, first byte, bytes).
  struct SharedAccess {
    uint32_t lane;
    uint64_t begin, bytes;
  };
  std::unordered_map<Instruction, std::vector<SharedAccess>, InstructionHash> shared_accesses;
};
thread_local TrafficState g_traffic;

// Shared memory is 32 banks of 4-byte words (word w in bank w % 32; CUDA C++
// Programming Guide, compute capability 5.x and later, "Shared Memory"). A
// warp-wide access is served in phases of at most 128 bytes: all 32 lanes for
// accesses of up to 4 bytes, half-warps for 8-byte ones, quarter-warps for
// 16-byte ones. Within a phase, lanes that read the same word are served at once
// (a broadcast), and distinct words in one bank take one wavefront each: the
// phase takes as many wavefronts as its busiest bank has distinct words. Without
// conflicts each phase with an active lane is one wavefront.
void count_shared_wavefronts(std::vector<TrafficState::SharedAccess>& lanes) {
  const uint64_t bytes = lanes.front().bytes;
  const uint32_t phases = bytes >= 8 ? static_cast<uint32_t>(std::min<uint64_t>(bytes / 4, 4)) : 1;
  const uint32_t lanes_per_phase = 32 / phases;
  std::sort(lanes.begin(), lanes.end(), [](const auto& a, const auto& b) { return a.lane < b.lane; });
  size_t i = 0;
  while (i < lanes.size()) {
    const uint32_t phase = lanes[i].lane / lanes_per_phase;
    std::vector<uint64_t> words;  // distinct (bank, word) pairs of the phase, as words
    for (; i < lanes.size() && lanes[i].lane / lanes_per_phase == phase; ++i) {
      for (uint64_t w = lanes[i].begin / 4; w <= (lanes[i].begin + lanes[i].bytes - 1) / 4; ++w) words.push_back(w);
    }
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    uint32_t per_bank[32] = {};
    uint32_t busiest = 0;
    for (const uint64_t w : words) busiest = std::max(busiest, ++per_bank[w % 32]);
    g_traffic.counts.shared_wavefronts += busiest;
    g_traffic.counts.shared_ideal_wavefronts += 1;
  }
}

// At a cluster's end: per warp-wide instruction, the distinct bytes its lanes asked
// for (lanes reading one address are served once, as on the GPU) and the distinct
// 32-byte sectors those bytes lie in.
void fold_block_traffic() {
  if (!g_traffic.on) return;
  for (auto& [instruction, ranges] : g_traffic.accesses) {
    std::sort(ranges.begin(), ranges.end());
    uint64_t covered_end = 0, last_sector = UINT64_MAX;
    for (const auto& [begin, bytes] : ranges) {
      const uint64_t end = begin + bytes;
      const uint64_t from = std::max(begin, covered_end);
      if (end <= from) continue;
      g_traffic.counts.requested_bytes += end - from;
      covered_end = end;
      for (uint64_t sector = from / 32; sector <= (end - 1) / 32; ++sector) {
        if (sector != last_sector) g_traffic.counts.sector_bytes += 32;
        last_sector = sector;
      }
    }
  }
  for (auto& [instruction, lanes] : g_traffic.shared_accesses) count_shared_wavefronts(lanes);
  g_traffic.accesses.clear();
  g_traffic.shared_accesses.clear();
  g_traffic.reached.clear();
}

// True for the running fiber's stack (a kernel's local arrays).
bool is_local(uintptr_t a, const void* stack) {
  const auto base = reinterpret_cast<uintptr_t>(stack);
  return a >= base && a < base + kStackBytes;
}

// Each kernel's cudaFuncSetAttribute(MaxDynamicSharedMemorySize), by name.
std::mutex g_allowed_shared_mutex;
std::unordered_map<std::string, size_t> g_allowed_shared;

size_t allowed_dynamic_shared(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_allowed_shared_mutex);
  const auto it = g_allowed_shared.find(name);
  return it == g_allowed_shared.end() ? 0 : it->second;
}

void check_config(const std::string& name, dim3 grid, dim3 block, size_t shared, unsigned cluster_blocks) {
  auto fail = [&](const std::string& what) {
    char dims[128];
    std::snprintf(dims, sizeof dims, " (grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory)",
                  grid.x, grid.y, grid.z, block.x, block.y, block.z, shared);
    throw std::runtime_error("cuda_sim: kernel " + name + ": invalid launch: " + what + dims);
  };
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) fail("an empty grid or block");
  if (threads > kMaxThreadsPerBlock || block.z > kMaxBlockDimZ) {
    fail("more than 1024 threads per block (or blockDim.z > 64)");
  }
  if (grid.x > kMaxGridDimX || grid.y > kMaxGridDimYZ || grid.z > kMaxGridDimYZ) fail("grid beyond the GPU's limits");
  const char* arch_name = g_arch == Arch::Sm80 ? "sm_80" : "sm_90";
  if (cluster_blocks != 1) {
    const std::string cluster = "a cluster of " + std::to_string(cluster_blocks) + " blocks";
    if (cluster_blocks == 0) fail(cluster);
    if (g_arch != Arch::Sm90) fail(cluster + " on " + arch_name + ": thread-block clusters need sm_90");
    if (cluster_blocks > kMaxClusterBlocks) {
      fail(cluster + ", beyond the portable maximum of " + std::to_string(kMaxClusterBlocks));
    }
    if (grid.x % cluster_blocks != 0) {
      fail("grid.x of " + std::to_string(grid.x) + " is not a multiple of the cluster size " +
           std::to_string(cluster_blocks) + " (clusters are 1-D, along x)");
    }
    // Each block of a cluster must have its own static __shared__ arrays: the
    // harness swaps them on the faults of watched memory.
    if (!kCanWatch) fail(cluster + ": the harness runs clusters only where it watches shared memory (x86-64 Linux)");
  }
  if (shared > kDefaultDynamicShared) {
    const size_t allowed = allowed_dynamic_shared(name);
    if (allowed == 0) {
      fail(std::string("dynamic shared memory beyond the 48 KiB a block gets without cudaFuncSetAttribute on ") +
           arch_name);
    }
    if (shared > allowed) {
      fail("dynamic shared memory beyond the " + std::to_string(allowed) +
           " bytes the kernel was given with cudaFuncSetAttribute");
    }
    if (shared > max_dynamic_shared_optin()) {
      fail(std::string("dynamic shared memory beyond the opt-in maximum of ") + arch_name);
    }
  }
}

}  // namespace

void set_arch(Arch a) { g_arch = a; }

size_t max_dynamic_shared_optin() {
  return g_arch == Arch::Sm80 ? kOptinDynamicSharedSm80 : kOptinDynamicSharedSm90;
}

void allow_dynamic_shared(const char* kernel_name, size_t bytes) {
  if (bytes > max_dynamic_shared_optin()) {
    throw std::runtime_error(std::string("cuda_sim: kernel ") + kernel_name + ": cudaFuncSetAttribute(" +
                             "MaxDynamicSharedMemorySize, " + std::to_string(bytes) +
                             ") beyond the opt-in maximum of " + (g_arch == Arch::Sm80 ? "sm_80" : "sm_90") + " (" +
                             std::to_string(max_dynamic_shared_optin()) + " bytes)");
  }
  std::lock_guard<std::mutex> lock(g_allowed_shared_mutex);
  g_allowed_shared[kernel_name] = bytes;
}
void set_block_order(BlockOrder order) { g_block_order = order; }

namespace {
std::atomic<uint64_t> g_launches{0};
}  // namespace

uint64_t launches() { return g_launches.load(std::memory_order_relaxed); }

void traffic_begin(bool launches_only) {
  g_traffic = TrafficState{};
  g_traffic.on = true;
  g_traffic.launches_only = launches_only;
}

TrafficCounts traffic_end() {
  fold_block_traffic();
  const TrafficCounts counts = g_traffic.counts;
  g_traffic = TrafficState{};
  return counts;
}

void note_workspace(uint64_t bytes) {
  if (g_traffic.on) g_traffic.counts.workspace_bytes += bytes;
}

namespace {
// The warp-wide instruction the running fiber's access at `site` belongs to:
// the k-th time its lane reaches the site (TrafficState).
TrafficState::Instruction warp_instruction(const Launch& l, uintptr_t site) {
  const Fiber& f = l.fibers[l.current];
  const uint32_t occurrence = g_traffic.reached[{static_cast<uint32_t>(l.current), site}]++;
  return {f.rank * 32 + f.thread / 32, site, occurrence};
}
}  // namespace

__attribute__((noinline)) void* memory_access(const void* p, size_t bytes, bool write, Space space) {
  Launch* const l = g_launch;
  if (l == nullptr || l->current < 0) return const_cast<void*>(p);  // not a kernel thread
  const auto a = reinterpret_cast<uintptr_t>(p);
  // The GPU's loads and stores of 2, 4, 8 and 16 bytes need an address aligned
  // to their size ("misaligned address" otherwise; CUDA C++ Programming Guide,
  // "Device Memory Accesses"), global and shared alike.
  if ((bytes & (bytes - 1)) == 0 && bytes <= 16 && a % bytes != 0) {
    char what[200];
    std::snprintf(what, sizeof what, "misaligned %zu-byte %s at %p (the GPU needs %zu-byte alignment)", bytes,
                  write ? "store" : "load", p, bytes);
    fail_in_fiber(what);
  }
  Watch* const w = g_handler.watch;
  bool closed = false;
  const Region* const region = w != nullptr ? shared_region(*w, a, &closed) : nullptr;
  if (region != nullptr) {
    if (region->rank < 0) own_static_copy(*w, *region, l->fibers[l->current].rank);
    std::string problem = check_access(*w, *l, *region, a, bytes, write);
    if (!problem.empty()) fail_in_fiber(problem);
    if (g_traffic.on) {
      const uintptr_t site = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
      g_traffic.shared_accesses[warp_instruction(*l, site)].push_back({l->fibers[l->current].thread % 32, a, bytes});
    }
    return reinterpret_cast<void*>(region->alias + (a - region->begin));
  }
  if (space == Space::Shared) {
    char what[160];
    std::snprintf(what, sizeof what, "%s of %zu bytes at %p, which is not shared memory",
                  write ? "store_shared" : "load_shared", bytes, p);
    fail_in_fiber(what);
  }
  if (is_local(a, l->fibers[l->current].stack)) return const_cast<void*>(p);
  const std::string race = check_global_access(*l, a, bytes, write);
  if (!race.empty()) fail_in_fiber(race);
  if (l->initcheck->count.load(std::memory_order_relaxed) > 0) {
    const std::string uninitialized = check_initialized(*l->initcheck, a, bytes, write);
    if (!uninitialized.empty()) fail_in_fiber(uninitialized);
  }
  if (!g_traffic.on) return const_cast<void*>(p);
  const uintptr_t site = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  g_traffic.accesses[warp_instruction(*l, site)].emplace_back(a, bytes);
  (write ? g_traffic.counts.bytes_written : g_traffic.counts.bytes_read) += bytes;
  LaunchTraffic& this_launch = g_traffic.counts.per_launch.back();  // launch() opened it
  (write ? this_launch.bytes_written : this_launch.bytes_read) += bytes;
  return const_cast<void*>(p);
}

uint64_t shared_faults() { return g_handler.faults.load(std::memory_order_relaxed); }

const char* fiber_switch() { return use_stack_switch() ? "stack" : "ucontext"; }

// Called by the host (the glue, around a launcher call), never during a launch.
void track_uninitialized(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
  InitcheckState& state = initcheck_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  TrackedAllocation& t = state.tracked[reinterpret_cast<uintptr_t>(p)];
  t.bytes = bytes;
  t.written.assign(bytes, 0);
  state.count.store(state.tracked.size(), std::memory_order_relaxed);
  state.total.fetch_add(bytes, std::memory_order_relaxed);
}

void forget_allocation(const void* p) {
  InitcheckState& state = initcheck_state();
  if (state.count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(state.mutex);
  state.tracked.erase(reinterpret_cast<uintptr_t>(p));
  state.count.store(state.tracked.size(), std::memory_order_relaxed);
}

uint64_t uninitialized_bytes_tracked() { return initcheck_state().total.load(std::memory_order_relaxed); }

Arch arch() { return g_arch; }

unsigned char* dynamic_shared_memory() {
  const Launch& l = *g_launch;
  if (l.dynamic_shared.empty()) return nullptr;
  return l.dynamic_shared[l.current >= 0 ? l.fibers[l.current].rank : 0];
}

namespace {
void wait_at_barrier(State barrier, const char* file, int line) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  f.state = barrier;
  // Reports name the file from the package root, not the build machine's path.
  const char* rel = std::strstr(file, "op_extension/");
  f.barrier_file = rel != nullptr ? rel : file;
  f.barrier_line = line;
  yield();
}
}  // namespace

void syncthreads(const char* file, int line) { wait_at_barrier(State::AtBarrier, file, line); }

namespace {
// cuda_common.cuh's wrappers __trap() before sm_90, where barrier.cluster and
// mapa do not exist.
void require_clusters(const char* what) {
  if (g_arch != Arch::Sm90) fail_in_fiber(std::string(what) + " on sm_80: thread-block clusters need sm_90");
}
}  // namespace

void cluster_sync(const char* file, int line) {
  require_clusters("cluster_sync");
  wait_at_barrier(State::AtClusterBarrier, file, line);
}

unsigned cluster_block_rank() {
  const Launch* l = g_launch;
  return l != nullptr && l->current >= 0 ? l->fibers[l->current].rank : 0;
}

unsigned cluster_blocks() { return g_launch != nullptr ? g_launch->cluster_blocks : 1; }

void* map_shared_rank(void* p, unsigned rank) {
  require_clusters("map_shared_rank");
  const Launch& l = *g_launch;
  const Fiber& f = l.fibers[l.current];
  const auto a = reinterpret_cast<uintptr_t>(p);
  // One past the end is still a pointer into the window, as in C++.
  const auto mine = l.dynamic_shared.empty() ? 0 : reinterpret_cast<uintptr_t>(l.dynamic_shared[f.rank]);
  if (l.dynamic_shared.empty() || a < mine || a > mine + l.dynamic_bytes) {
    std::string what = "map_shared_rank of an address outside dynamic shared memory";
    const Watch* w = g_handler.watch;
    if (w != nullptr) {
      for (const Region& r : w->statics) {
        if (a >= r.begin && a < r.end) what += " (in " + r.name + ")";
      }
    }
    fail_in_fiber(what + ": the harness models distributed shared memory for the dynamic window only");
  }
  if (rank >= l.cluster_blocks) {
    fail_in_fiber("map_shared_rank to block rank " + std::to_string(rank) + " of a cluster of " +
                  std::to_string(l.cluster_blocks) + " blocks (ranks 0 to " + std::to_string(l.cluster_blocks - 1) +
                  ")");
  }
  return l.dynamic_shared[rank] + (a - mine);
}

void shuffle(unsigned mask, ShuffleKind kind, int arg, int width, const void* value, void* result, size_t size) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  // The warps of the fiber's block (warps never span two blocks of a cluster).
  const unsigned lane = f.thread & 31u;
  const size_t warp_in_block = f.thread & ~size_t{31};
  const size_t lanes = std::min<size_t>(32, l.threads - warp_in_block);
  char what[160];
  if (!(mask >> lane & 1u)) {
    std::snprintf(what, sizeof what, "%s with mask 0x%08x called by lane %u, which the mask leaves out",
                  kind_name(kind), mask, lane);
    fail_in_fiber(what);
  }
  if (lanes < 32 && (mask >> lanes) != 0) {
    std::snprintf(what, sizeof what, "%s with mask 0x%08x names lanes beyond the %zu this warp has",
                  kind_name(kind), mask, lanes);
    fail_in_fiber(what);
  }
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    std::snprintf(what, sizeof what, "%s with width %d (not a power of two up to 32)", kind_name(kind), width);
    fail_in_fiber(what);
  }
  f.state = State::AtShuffle;
  f.mask = mask;
  f.kind = kind;
  f.arg = arg;
  f.width = width;
  f.size = size;
  std::memcpy(f.value, value, size);
  yield();
  std::memcpy(result, f.result, size);
}

void launch(const char* kernel_name, dim3 grid, dim3 block, size_t dynamic_shared_bytes, void (*body)(void*),
            void* closure, unsigned cluster_blocks) {
  check_config(kernel_name, grid, block, dynamic_shared_bytes, cluster_blocks);
  if (g_launch != nullptr) throw std::runtime_error("cuda_sim: a kernel launched from inside a kernel");
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (g_traffic.on) {
    ++g_traffic.counts.launches;
    g_traffic.counts.per_launch.push_back(
        LaunchTraffic{kernel_name, cluster_blocks, grid, block, dynamic_shared_bytes});
    if (g_traffic.launches_only) return;
  }
  Launch l;
  l.name = kernel_name;
  l.grid = grid;
  l.block = block;
  l.cluster_blocks = cluster_blocks;
  l.dynamic_bytes = dynamic_shared_bytes;
  l.body = body;
  l.closure = closure;
  l.initcheck = &initcheck_state();  // before the watch: its static lives in .bss
  l.stack_switch = use_stack_switch();  // the same
  const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
  l.threads = threads;
  // The global racecheck numbers a launch's threads in 32 bits; a launch of
  // 2^32 threads would take the harness weeks.
  if (1.0 * grid.x * grid.y * grid.z * threads >= static_cast<double>(UINT32_MAX)) {
    throw std::runtime_error(std::string("cuda_sim: kernel ") + kernel_name +
                             ": a launch of 2^32 threads or more, beyond what the harness runs");
  }
  const size_t fibers = threads * cluster_blocks;
  while (g_stacks.size() < fibers) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) throw std::runtime_error("cuda_sim: cannot map a fiber stack");
    g_stacks.push_back(s);
  }
  l.fibers.resize(fibers);
  for (size_t k = 0; k < fibers; ++k) {
    Fiber& f = l.fibers[k];
    const size_t i = k % threads;
    f.stack = g_stacks[k];
    f.thread = static_cast<unsigned>(i);
    f.rank = static_cast<unsigned>(k / threads);
    f.thread_idx = uint3{static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y),
                         static_cast<unsigned>(i / (block.x * block.y))};
  }
  g_view.block_dim = block;
  g_view.grid_dim = grid;
  // The launch holds the process-wide signal handlers.
  std::unique_lock<std::mutex> watch_lock(g_watch_mutex, std::defer_lock);
  Watch watch;
  g_launch = &l;
  struct Reset {
    Watch& w;
    ~Reset() {
      watch_end(w);
      g_launch = nullptr;
    }
  } reset{watch};
  watch_lock.lock();
  watch_begin(watch, l, dynamic_shared_bytes);
  // Clusters in order (x fastest), each its blocks x .. x + cluster_blocks - 1;
  // without clusters, the blocks in order.
  const uint64_t clusters_x = grid.x / cluster_blocks;
  const uint64_t clusters = clusters_x * grid.y * grid.z;
  for (uint64_t i = 0; i < clusters; ++i) {
    const uint64_t c = g_block_order == BlockOrder::Reverse ? clusters - 1 - i : i;
    const auto first_x = static_cast<unsigned>(c % clusters_x * cluster_blocks);
    const uint3 first{first_x, static_cast<unsigned>(c / clusters_x % grid.y),
                      static_cast<unsigned>(c / (clusters_x * grid.y))};
    for (Fiber& f : l.fibers) {
      f.block_idx = uint3{first.x + f.rank, first.y, first.z};
      const uint64_t block_number = f.block_idx.x + 1ull * grid.x * (f.block_idx.y + 1ull * grid.y * f.block_idx.z);
      f.launch_thread = static_cast<uint32_t>(1 + block_number * threads + f.thread);
    }
    g_view.block_idx = first;
    open_cluster_interval(l);
    watch_cluster(watch);
    run_cluster(l);
    fold_block_traffic();
    if (!l.error.empty()) throw std::runtime_error(l.error);
  }
}

}  // namespace cuda_sim
