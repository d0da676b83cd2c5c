// The CPU harness's scheduler: blocks one after another, a block's threads as
// ucontext fibers on the calling OS thread (see include/cuda_sim/runtime.h for
// what it checks).
//
// A block runs in rounds: every runnable fiber runs until it blocks (at
// __syncthreads or a shuffle) or returns. When none is runnable, the shuffles
// whose lanes have all arrived complete; failing that, the barrier opens if
// every thread waits at the same one. Anything else is a kernel that would hang
// or read garbage on the GPU, and is reported.
//
// Shared memory is watched (x86-64 Linux): the dynamic window's pages, and the
// pages around the kernels' static __shared__ arrays, stay PROT_NONE during a
// launch, so every access faults; the SIGSEGV handler checks the address against
// the bounds of the array it falls in or next to and against the other threads'
// accesses since the last barrier (racecheck's read-after-write,
// write-after-read and write-after-write hazards between threads), then opens
// the page for one single-stepped instruction and the SIGTRAP handler closes it
// again. Slow per access, exact, and it needs nothing from the kernel sources. A
// report leaves the fiber through report_pending() instead of the faulting
// instruction.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <atomic>
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
// Kernels keep few locals; ASan builds need the extra room.
constexpr size_t kStackBytes = 256 * 1024;

enum class State { Runnable, AtBarrier, AtShuffle, Exited };

struct Fiber {
  ucontext_t context;
  void* stack = nullptr;
  State state = State::Runnable;
  uint3 thread_idx{};
  // AtBarrier: where
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

struct Launch {
  std::string name;
  dim3 grid, block;
  uint3 block_idx{};
  void (*body)(void*) = nullptr;
  void* closure = nullptr;
  std::vector<Fiber> fibers;  // one per thread of the current block, in linear order
  unsigned char* dynamic_shared = nullptr;  // inside the watched window
  // Zeroed: ASan's swapcontext interceptor reads the stack of the context it
  // switches to, which getcontext/swapcontext never fill in for this one.
  ucontext_t scheduler{};
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

std::string where(const Launch& l, const Fiber& f) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", l.block_idx.x, l.block_idx.y,
                l.block_idx.z, f.thread_idx.x, f.thread_idx.y, f.thread_idx.z);
  return buf;
}

std::string report(const Launch& l, const Fiber& f, const std::string& what) {
  return "cuda_sim: kernel " + l.name + ": " + where(l, f) + ": " + what;
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
  swapcontext(&f.context, &l.scheduler);
  switch_finish(f.fake_stack, &l.scheduler_stack, &l.scheduler_stack_bytes);
}

[[noreturn]] void fail_in_fiber(const std::string& what) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  if (l.error.empty()) l.error = report(l, f, what);
  f.state = State::Exited;
  // The fiber's stack is abandoned: kernels hold no resources.
  switch_start(nullptr, l.scheduler_stack, l.scheduler_stack_bytes);
  setcontext(&l.scheduler);
  __builtin_unreachable();
}

// ---- watched shared memory ------------------------------------------------------------

constexpr size_t kPage = 4096;

// runtime.h's __shared__ starts every static array at a slot of this size.
constexpr size_t kSharedSlot = CUDA_SIM_SHARED_SLOT;
static_assert(kSharedSlot >= 2 * kPage && kSharedSlot % kPage == 0, "a slot is whole pages, at least two");

uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(kPage - 1); }

// One watched array: the launch's dynamic shared memory, or a static __shared__
// array of some kernel (found in this library's symbol table).
struct Region {
  uintptr_t begin = 0, end = 0;
  // Watched memory around it in which no other shared array lies: an access
  // there that is not in [begin, end) is out of bounds of this array.
  uintptr_t guard_begin = 0, guard_end = 0;
  std::string name;            // for reports
  const char* unit = "array";  // "... byte offset 132 of a 132-byte <unit>"
  size_t shadow = 0;           // index of its first byte in the Watch's shadow arrays
};

struct Watch {
  unsigned char* map = nullptr;  // dynamic: guard page, data pages, guard page
  size_t map_bytes = 0;
  Region dynamic;
  std::vector<Region> statics;
  std::vector<std::pair<uintptr_t, size_t>> static_pages;  // (first page, bytes): runs closed during the launch
  // Per watched byte: the last writer and reader (fiber index) and when.
  std::vector<int32_t> writer, reader;
  std::vector<uint64_t> write_epoch, read_epoch;
  std::vector<uint8_t> many_readers;
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
  // The barrier interval every access belongs to: bumped when a barrier opens
  // and when a block starts, so hazards never span a barrier or two blocks.
  uint64_t epoch = 1;
};
static_assert(sizeof(HandlerState) == kPage, "the handlers' state fills its page");
HandlerState g_handler;
std::mutex g_watch_mutex;  // one launch at a time holds the process-wide handlers

[[noreturn]] void report_pending() {
  std::string what;
  what.swap(g_handler.watch->pending);
  fail_in_fiber(what);
}

// "" when the access is fine; records it.
std::string check_access(Watch& w, const Launch& l, const Region& r, uintptr_t addr, bool write) {
  const int me = l.current;
  char what[640];
  if (addr < r.begin || addr >= r.end) {
    std::snprintf(what, sizeof what, "%s %s out of bounds: byte offset %lld of a %zu-byte %s", r.name.c_str(),
                  write ? "write" : "read", static_cast<long long>(addr - r.begin),
                  static_cast<size_t>(r.end - r.begin), r.unit);
    return what;
  }
  const size_t i = r.shadow + (addr - r.begin);
  const uint64_t e = g_handler.epoch;
  auto race = [&](const char* hazard, int other) {
    std::snprintf(what, sizeof what, "shared memory race (%s) at byte offset %zu of %s with %s, no __syncthreads between",
                  hazard, static_cast<size_t>(addr - r.begin), r.name.c_str(), where(l, l.fibers[other]).c_str());
    return std::string(what);
  };
  if (write) {
    if (w.write_epoch[i] == e && w.writer[i] != me) return race("write after write", w.writer[i]);
    if (w.read_epoch[i] == e && (w.reader[i] != me || w.many_readers[i])) {
      return race("write after read", w.reader[i] != me ? w.reader[i] : me);
    }
    w.writer[i] = me;
    w.write_epoch[i] = e;
  } else {
    if (w.write_epoch[i] == e && w.writer[i] != me) return race("read after write", w.writer[i]);
    if (w.read_epoch[i] == e) {
      if (w.reader[i] != me) w.many_readers[i] = 1;
    } else {
      w.reader[i] = me;
      w.read_epoch[i] = e;
      w.many_readers[i] = 0;
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

#if defined(__x86_64__) && defined(__linux__)
constexpr bool kCanWatch = true;
constexpr greg_t kTrapFlag = 0x100;

void on_segv(int, siginfo_t* si, void* raw) {
  auto* uc = static_cast<ucontext_t*>(raw);
  Watch* w = g_handler.watch;
  const Launch* l = g_handler.launch;
  const auto addr = reinterpret_cast<uintptr_t>(si->si_addr);
  const uintptr_t page = addr & ~(kPage - 1);
  const Region* region = nullptr;
  bool watched = false;
  if (w != nullptr) {
    const auto map = reinterpret_cast<uintptr_t>(w->map);
    if (w->map != nullptr && addr >= map && addr < map + w->map_bytes) {
      region = &w->dynamic;
      watched = true;
    } else {
      for (const auto& [first, bytes] : w->static_pages) watched = watched || (addr >= first && addr < first + bytes);
      // The array the address falls in, else the nearest one whose guard holds
      // it: an index past the end (or before the start) of that array.
      uintptr_t best = ~uintptr_t{0};
      for (const Region& r : w->statics) {
        if (addr < r.guard_begin || addr >= r.guard_end) continue;
        const uintptr_t distance = addr < r.begin ? r.begin - addr : (addr >= r.end ? addr - r.end + 1 : 0);
        if (distance < best) {
          best = distance;
          region = &r;
        }
      }
    }
  }
  if (!watched) {
    // Not ours: the previous handler gets the fault when the access repeats.
    if (w != nullptr) sigaction(SIGSEGV, &w->old_segv, nullptr);
    return;
  }
  // A kernel thread's access is checked. The scheduler's (filling the arrays),
  // and other threads' accesses to unrelated objects on a closed page, pass.
  if (region != nullptr && l != nullptr && l->current >= 0 && pthread_equal(pthread_self(), g_handler.thread)) {
    const bool write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    std::string problem = check_access(*w, *l, *region, addr, write);
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

// Maps the dynamic window for `size` bytes (if any), finds the static arrays and,
// where possible, installs the handlers.
void watch_begin(Watch& w, Launch& l, size_t size) {
  static const std::vector<Region> statics = find_static_shared();
  size_t shadow = 0;
  if (size > 0) {
    const size_t data = (size + kPage - 1) / kPage * kPage;
    w.map_bytes = data + 2 * kPage;
    void* m = mmap(nullptr, w.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("cuda_sim: cannot map dynamic shared memory");
    w.map = static_cast<unsigned char*>(m);
    w.dynamic.begin = reinterpret_cast<uintptr_t>(w.map) + kPage;
    w.dynamic.end = w.dynamic.begin + size;
    w.dynamic.name = "dynamic shared memory";
    w.dynamic.unit = "allocation";
    shadow = size;
    l.dynamic_shared = w.map + kPage;
  }
  w.statics = statics;
  for (Region& r : w.statics) {
    r.shadow = shadow;
    shadow += r.end - r.begin;
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
  w.writer.assign(shadow, -1);
  w.reader.assign(shadow, -1);
  w.write_epoch.assign(shadow, 0);
  w.read_epoch.assign(shadow, 0);
  w.many_readers.assign(shadow, 0);
#if defined(__x86_64__) && defined(__linux__)
  struct sigaction sa {};
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = on_segv;
  sigaction(SIGSEGV, &sa, &w.old_segv);
  sa.sa_sigaction = on_trap;
  sigaction(SIGTRAP, &sa, &w.old_trap);
  g_handler.watch = &w;
  g_handler.launch = &l;
  g_handler.thread = pthread_self();
#endif
}

// At a block's start: shared memory is garbage on the GPU, NaN bits here; the
// pages are closed again when watched.
void watch_block(Watch& w) {
  if (w.map != nullptr) {
    mprotect(w.map + kPage, w.map_bytes - 2 * kPage, PROT_READ | PROT_WRITE);
    std::memset(w.map + kPage, 0xff, w.dynamic.end - w.dynamic.begin);
    if (kCanWatch) mprotect(w.map + kPage, w.map_bytes - 2 * kPage, PROT_NONE);
  }
  protect_statics(w, PROT_READ | PROT_WRITE);
  for (const Region& r : w.statics) std::memset(reinterpret_cast<void*>(r.begin), 0xff, r.end - r.begin);
  if (kCanWatch) protect_statics(w, PROT_NONE);
}

void watch_end(Watch& w) {
  protect_statics(w, PROT_READ | PROT_WRITE);
#if defined(__x86_64__) && defined(__linux__)
  if (g_handler.watch == &w) {
    sigaction(SIGSEGV, &w.old_segv, nullptr);
    sigaction(SIGTRAP, &w.old_trap, nullptr);
    g_handler.watch = nullptr;
    g_handler.launch = nullptr;
  }
#endif
  if (w.map != nullptr) munmap(w.map, w.map_bytes);
  w.map = nullptr;
}

void fiber_main() {
  Launch& l = *g_launch;
  switch_finish(nullptr, &l.scheduler_stack, &l.scheduler_stack_bytes);
  l.body(l.closure);
  l.fibers[l.current].state = State::Exited;
  // uc_link returns to the scheduler, for good.
  switch_start(nullptr, l.scheduler_stack, l.scheduler_stack_bytes);
}

const char* state_name(State s) {
  switch (s) {
    case State::Runnable:
      return "runs on";
    case State::AtBarrier:
      return "waits at __syncthreads";
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

void run_block(Launch& l) {
  const size_t n = l.fibers.size();
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = l.fibers[i];
    f.state = State::Runnable;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &l.scheduler;
    makecontext(&f.context, fiber_main, 0);
  }
  while (true) {
    bool ran = false;
    for (size_t i = 0; i < n; ++i) {
      Fiber& f = l.fibers[i];
      if (f.state != State::Runnable) continue;
      l.current = static_cast<int>(i);
      g_view.thread_idx = f.thread_idx;
      switch_start(&l.scheduler_fake_stack, f.stack, kStackBytes);
      swapcontext(&l.scheduler, &f.context);
      switch_finish(l.scheduler_fake_stack, nullptr, nullptr);
      l.current = -1;  // the scheduler is not a thread of the block
      if (!l.error.empty()) return;
      ran = true;
    }
    if (ran) continue;
    bool resolved = false;
    for (size_t w = 0; w < n; w += 32) {
      if (!resolve_warp(l, w, std::min<size_t>(32, n - w), &resolved)) return;
    }
    if (resolved) continue;
    // Only barriers (or nothing) remain.
    const Fiber* waiting = nullptr;
    for (const Fiber& f : l.fibers) {
      if (f.state == State::AtBarrier) {
        waiting = &f;
        break;
      }
    }
    if (waiting == nullptr) return;  // every thread has exited
    for (const Fiber& f : l.fibers) {
      if (f.state == State::AtBarrier &&
          (f.barrier_line == waiting->barrier_line && std::strcmp(f.barrier_file, waiting->barrier_file) == 0)) {
        continue;
      }
      std::string what = "__syncthreads at " + std::string(waiting->barrier_file) + ":" +
                         std::to_string(waiting->barrier_line) + " is not reached by " + where(l, f) +
                         ", which ";
      if (f.state == State::AtBarrier) {
        what += "waits at __syncthreads at " + std::string(f.barrier_file) + ":" + std::to_string(f.barrier_line);
      } else {
        what += state_name(f.state);
      }
      l.error = report(l, *waiting, what);
      return;
    }
    ++g_handler.epoch;
    for (Fiber& f : l.fibers) f.state = State::Runnable;
  }
}

// ---- global-memory traffic ------------------------------------------------------------

// What a GPU's memory system would see of the kernels' global accesses, counted
// while traffic_begin() .. traffic_end() is open. Every global access of the
// kernels goes through their load/store helpers (kernel/cuda/cuda_common.cuh),
// which call record_global. The helpers are always inlined (runtime.h's
// __forceinline__), so the address record_global returns to names the access's
// place in the kernel: the k-th time each lane of a warp reaches one place is one
// warp-wide instruction, whose 32-byte sectors are what coalescing is about.
struct TrafficState {
  bool on = false;
  TrafficCounts counts;
  // This block's accesses: per (lane, place) how often it was reached, and per
  // (warp, place, occurrence) the byte ranges its lanes asked for.
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
};
thread_local TrafficState g_traffic;

// At a block's end: per warp-wide instruction, the distinct bytes its lanes asked
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
  g_traffic.accesses.clear();
  g_traffic.reached.clear();
}

// True for memory that is not global: the launch's shared memory (dynamic, or a
// static __shared__ array) and the running fiber's stack (a kernel's local arrays).
bool is_shared_or_local(uintptr_t a, const void* stack) {
  const Watch* w = g_handler.watch;
  if (w != nullptr) {
    if (w->map != nullptr && a >= reinterpret_cast<uintptr_t>(w->map) &&
        a < reinterpret_cast<uintptr_t>(w->map) + w->map_bytes) {
      return true;
    }
    for (const Region& r : w->statics) {
      if (a >= r.guard_begin && a < r.guard_end) return true;
    }
  }
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

void check_config(const std::string& name, dim3 grid, dim3 block, size_t shared) {
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

void traffic_begin() {
  g_traffic = TrafficState{};
  g_traffic.on = true;
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

__attribute__((noinline)) void record_global(const void* p, size_t bytes, bool write) {
  if (!g_traffic.on || g_launch == nullptr || g_launch->current < 0) return;
  const auto a = reinterpret_cast<uintptr_t>(p);
  Launch& l = *g_launch;
  if (is_shared_or_local(a, l.fibers[l.current].stack)) return;
  const auto site = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  const auto fiber = static_cast<uint32_t>(l.current);
  const uint32_t occurrence = g_traffic.reached[{fiber, site}]++;
  g_traffic.accesses[{fiber / 32, site, occurrence}].emplace_back(a, bytes);
  (write ? g_traffic.counts.bytes_written : g_traffic.counts.bytes_read) += bytes;
  LaunchTraffic& this_launch = g_traffic.counts.per_launch.back();  // launch() opened it
  (write ? this_launch.bytes_written : this_launch.bytes_read) += bytes;
}
Arch arch() { return g_arch; }

unsigned char* dynamic_shared_memory() { return g_launch->dynamic_shared; }

void syncthreads(const char* file, int line) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  f.state = State::AtBarrier;
  // Reports name the file from the package root, not the build machine's path.
  const char* rel = std::strstr(file, "op_extension/");
  f.barrier_file = rel != nullptr ? rel : file;
  f.barrier_line = line;
  yield();
}

void shuffle(unsigned mask, ShuffleKind kind, int arg, int width, const void* value, void* result, size_t size) {
  Launch& l = *g_launch;
  Fiber& f = l.fibers[l.current];
  const unsigned lane = static_cast<unsigned>(l.current) & 31u;
  const size_t warp_first = static_cast<size_t>(l.current) & ~size_t{31};
  const size_t lanes = std::min<size_t>(32, l.fibers.size() - warp_first);
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
            void* closure) {
  check_config(kernel_name, grid, block, dynamic_shared_bytes);
  if (g_launch != nullptr) throw std::runtime_error("cuda_sim: a kernel launched from inside a kernel");
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (g_traffic.on) {
    ++g_traffic.counts.launches;
    g_traffic.counts.per_launch.push_back(LaunchTraffic{kernel_name});
  }
  Launch l;
  l.name = kernel_name;
  l.grid = grid;
  l.block = block;
  l.body = body;
  l.closure = closure;
  const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
  while (g_stacks.size() < threads) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) throw std::runtime_error("cuda_sim: cannot map a fiber stack");
    g_stacks.push_back(s);
  }
  l.fibers.resize(threads);
  for (size_t i = 0; i < threads; ++i) {
    Fiber& f = l.fibers[i];
    f.stack = g_stacks[i];
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
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t b = g_block_order == BlockOrder::Reverse ? blocks - 1 - i : i;
    l.block_idx = uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                        static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y))};
    g_view.block_idx = l.block_idx;
    ++g_handler.epoch;
    watch_block(watch);
    run_block(l);
    fold_block_traffic();
    if (!l.error.empty()) throw std::runtime_error(l.error);
  }
}

}  // namespace cuda_sim
