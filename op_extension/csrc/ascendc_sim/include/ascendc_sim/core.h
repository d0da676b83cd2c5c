// State of the simulated device: the SoC being simulated, Global Memory (GM)
// allocations, and the AI core currently running a kernel.
//
// The simulator runs a launch's cores one after another on the calling thread,
// each with a fresh Unified Buffer (UB). Every misuse it detects throws SimError;
// the launch path (launch.h) turns that into an error status and a message, so
// no C entry point ever throws.
#ifndef ASCENDC_SIM_CORE_H_
#define ASCENDC_SIM_CORE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ascendc_sim {

class SimError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How ReduceSum adds the partial sums of its 256-byte repeats (CANN 8 ReduceSum
// docs): Atlas A2 (910B) adds them in order for the "first n elements" form,
// Atlas inference (310P) adds them as a binary tree. Within one repeat both use a
// binary tree of neighbouring pairs.
enum class ReduceOrder { kRepeatsSequential, kRepeatsBinaryTree };

// What the simulator models of one SoC. Filled by whoever starts the simulation
// (the Python binding) from the host-side SoC table.
struct DeviceSpec {
  std::string socName = "Ascend910B2";  // SoC version, as aclrtGetSocName() returns it
  uint32_t coreNum = 48;        // vector cores a kernel can be launched on
  uint32_t ubSize = 196608;     // Unified Buffer bytes per core
  bool hasDataCopyPad = true;   // DataCopyPad exists (Atlas A2 and later)
  bool hasBfloat16 = true;      // bfloat16_t moves and casts exist
  ReduceOrder reduceOrder = ReduceOrder::kRepeatsSequential;
  // __NPU_ARCH__ of the SoC's AI core (2201: Atlas A2 / dav_c220; 2002: Atlas
  // inference / dav_m200): the devkit picks each API's implementation by it, and
  // so does the simulator for the per-SoC API rules (Cast round modes, ReduceSum's
  // work tensor).
  uint32_t npuArch = 2201;
  // Float overflow mode (aclrtSetDeviceSatMode): in saturation mode a float16 or
  // bfloat16 result of a vector instruction or conversion that is +-inf becomes
  // +-max and one that is NaN becomes 0. Atlas inference supports only saturation
  // mode; Atlas A2 defaults to inf/NaN mode.
  bool saturation = false;
  bool saturationOnly = false;  // the inf/NaN mode cannot be selected
};

inline constexpr uint32_t kUbBlockBytes = 32;   // alignment unit of UB addresses and DataCopy
inline constexpr uint32_t kRepeatBytes = 256;   // bytes one vector repeat processes
inline constexpr uint8_t kGarbageByte = 0xFF;   // UB content nobody wrote: NaN for float types

// One GM allocation the kernel may touch.
struct GmRegion {
  uintptr_t begin = 0;
  uint64_t bytes = 0;
  // Bytes a kernel may read from `begin`: `bytes` plus the padding the device
  // allocator guarantees behind the end (AllocatorPadding); writes stop at `bytes`.
  uint64_t readableBytes = 0;
  std::string name;
  int refs = 1;  // registrations of this same buffer (several tensors may share a storage)
  // Race detection within one launch: which core last wrote each byte (-1:
  // none), and which core read it (-1: none; kSeveralReaders: more than one).
  std::vector<int16_t> writer;
  std::vector<int16_t> reader;
};
inline constexpr int16_t kSeveralReaders = -2;

// One 64-byte line of the scalar unit's Data Cache (DCache), byte by byte:
// `valid` bytes hold what GM held when the line was filled (or what SetValue
// stored since: `dirty`); `stale` bytes are valid bytes that a DMA write
// (DataCopy / DataCopyPad to GM) changed in GM since, without the cache
// knowing; `carriedStale` bytes are valid bytes that a copy of the line an
// earlier kernel left in a core's cache holds with another value than GM
// (`carriedFrom` names that kernel). Bit i of a mask is byte i of the line.
inline constexpr uint32_t kDcacheLineBytes = 64;
struct DcacheLine {
  uint8_t data[kDcacheLineBytes] = {};
  uint64_t valid = 0;
  uint64_t dirty = 0;
  uint64_t stale = 0;
  uint64_t carriedStale = 0;
  std::string carriedFrom;
};

// A line a core's data cache still holds when its block ends, kept for the
// launches after it (core.h, DcacheCarryOver): which core, which launch and
// block filled it, and the bytes it holds.
struct CarriedDcacheLine {
  uint32_t core = 0;
  uint64_t launch = 0;
  int64_t block = 0;
  uint64_t valid = 0;
  uint8_t data[kDcacheLineBytes] = {};
};
// Lines kept per core between launches. The devkit gives no DCache size for
// the AI cores of Atlas A2 or Atlas inference; 2048 lines (128 KiB) is at least
// what any core has, so the simulator forgets no line hardware could still hold
// (the SIMT pages of Ascend 950 give its Data Cache 32-128 KiB).
inline constexpr size_t kDcacheCarriedLinesPerCore = 2048;

// The pipes of a vector core whose order the simulator checks (pipes.h): S
// (scalar), V (vector), MTE2 (GM -> UB), MTE3 (UB -> GM).
enum class Pipe : uint8_t { kS = 0, kV, kMte2, kMte3 };
inline constexpr int kPipes = 4;

// One instruction's use of some UB bytes: its number on the core (1, 2, ...; 0:
// none) and its API name.
struct PipeUse {
  uint64_t n = 0;
  const char* api = nullptr;
};

// What happened last to a run of UB bytes: the last write, and the last read by
// each pipe since. `queued`: a TQue hand-over (EnQue/DeQue) ordered the write
// before every other pipe (not before its own: queues insert no same-pipe barrier).
struct UbUse {
  PipeUse writer;
  Pipe writerPipe = Pipe::kS;
  bool queued = false;
  PipeUse readers[kPipes];
};

// The order between the pipes of one core (pipes.h).
struct PipeState {
  uint64_t count = 0;            // instructions issued so far
  uint64_t last[kPipes] = {};    // number of each pipe's latest instruction
  // known[p][q]: every instruction of pipe q numbered up to this is complete
  // before pipe p's next instruction starts (a flag, a barrier).
  uint64_t known[kPipes][kPipes] = {};
  std::map<uint32_t, UbUse> ub;  // runs of UB bytes, by first byte; each runs to the next key
  // SetFlag'd events not yet waited for: (HardEvent, eventID) -> the source pipe's
  // clock and the event's spelling (a flag still set when the core ends is reported).
  struct PendingFlag {
    std::vector<uint64_t> clock;
    const char* name = nullptr;
  };
  std::map<std::pair<int, int32_t>, PendingFlag> flags;
  // MTE3 writes to GM since the last PipeBarrier<PIPE_MTE3> / <PIPE_ALL>: first byte -> (end, use).
  std::map<uintptr_t, std::pair<uintptr_t, PipeUse>> gmWrites;
  // Every MTE3 write to GM of the core, as runs of bytes (first byte -> the last
  // MTE3 write of the run up to the next key; n == 0: none), for the MTE3 -> MTE2
  // order of a DMA read of GM the core wrote (pipes.h, ReadGmByMte2).
  std::map<uintptr_t, PipeUse> gmMte3;
};

struct CoreState {
  int64_t blockIdx = -1;
  int64_t blockNum = 0;
  std::vector<uint8_t> ub;
  uint32_t ubUsed = 0;             // bytes handed out by TPipe::InitBuffer
  int livePipes = 0;
  std::vector<std::string> leaks;  // resources found alive when their owner died
  // The core's DCache as this block filled it, by line address (a multiple of
  // 64): what is still dirty at the block's end is lost; what is clean is
  // carried into later launches (DeviceState::carriedDcache).
  std::map<uintptr_t, DcacheLine> dcache;
  // The launch (DeviceState::launches) and the physical core running the block.
  uint64_t launch = 0;
  uint32_t physicalCore = 0;
  // Bytes of carried lines this block dropped (DataCacheCleanAndInvalid) before
  // filling them again: by line address, one bit a byte; all of them once it
  // dropped the entire cache.
  std::map<uintptr_t, uint64_t> dcacheDropped;
  bool dcacheDroppedAll = false;
  PipeState pipes;
};

struct DeviceState {
  DeviceSpec spec;
  std::map<uintptr_t, GmRegion> gm;  // by begin address
  CoreState* core = nullptr;         // set while a kernel runs
  // Kernel launches so far, and the kernel of each (launchKernels[n - 1]).
  uint64_t launches = 0;
  std::vector<std::string> launchKernels;
  // The lines cores' data caches hold between launches, by line address: one
  // entry per core holding it (DcacheCarryOver). The devkit does not say that
  // a kernel starts with an empty cache on Atlas A2 or Atlas inference, so a
  // later kernel's scalar load may meet them (DcacheFill).
  std::map<uintptr_t, std::vector<CarriedDcacheLine>> carriedDcache;
  // Per core, the lines it carries in the order it filled them (the oldest is
  // forgotten past kDcacheCarriedLinesPerCore), and how many it carries.
  std::vector<std::deque<std::pair<uintptr_t, uint64_t>>> carriedOrder;
  std::vector<size_t> carriedCount;
};

inline DeviceState& Device() {
  static DeviceState state;
  return state;
}

inline std::string CoreTag() {
  const CoreState* c = Device().core;
  std::ostringstream s;
  s << "AscendC simulator (" << Device().spec.socName;
  if (c != nullptr) s << ", core " << c->blockIdx << " of " << c->blockNum;
  s << "): ";
  return s.str();
}

[[noreturn]] inline void Fail(const std::string& message) { throw SimError(CoreTag() + message); }

template <typename... Args>
std::string Str(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

inline CoreState& CurrentCore(const char* api) {
  CoreState* c = Device().core;
  if (c == nullptr) {
    throw SimError(Str("AscendC simulator: ", api,
                       " called outside a kernel launch (no simulated core is running)"));
  }
  return *c;
}

// ---- Global Memory ---------------------------------------------------------

// Bytes the device allocator guarantees to exist behind an allocation of
// `bytes`, which a kernel may therefore read (never write: they may hold another
// tensor's data -- a torch_npu block is split between tensors). Both allocators
// a kernel's tensors come from give at least round_up(bytes, 32) + 32:
//   * aclrtMalloc: the CANN runtime reference (aclrtMalloc, 约束说明) rounds the
//     size up to a multiple of 32 bytes and adds 32 bytes (quoted in
//     DeepLink-org/deeplink.framework, dipu/.../AscendCustomAllocatorStrategy.cpp);
//   * torch_npu's caching allocator (Ascend/pytorch,
//     torch_npu/csrc/core/npu/NPUCachingAllocator.cpp, round_size): adds 32 bytes,
//     then rounds up to a multiple of 512, and a tensor's storage starts at its block.
// This is what the official 310P kernels rely on when they move a whole last
// 32-byte block of a short input with DataCopy.
inline uint64_t AllocatorPadding(uint64_t bytes) { return (bytes + 31) / 32 * 32 + 32 - bytes; }

// `padding`: readable bytes behind the end (AllocatorPadding for device
// allocations; 0 for memory of unknown origin).
inline void RegisterGm(const void* ptr, uint64_t bytes, std::string name, uint64_t padding = 0) {
  if (ptr == nullptr || bytes == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  auto& gm = Device().gm;
  auto next = gm.lower_bound(begin);
  if (next != gm.end() && next->first < begin + bytes) {
    if (next->first == begin && next->second.bytes == bytes) {  // the same buffer again
      ++next->second.refs;
      return;
    }
    throw SimError(Str("AscendC simulator: GM buffer '", name, "' overlaps registered buffer '",
                       next->second.name, "'"));
  }
  if (next != gm.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > begin) {
      if (prev->first <= begin && begin + bytes <= prev->first + prev->second.bytes) return;  // a view
      throw SimError(Str("AscendC simulator: GM buffer '", name, "' overlaps registered buffer '",
                         prev->second.name, "'"));
    }
  }
  GmRegion r;
  r.begin = begin;
  r.bytes = bytes;
  r.readableBytes = bytes + padding;
  r.name = std::move(name);
  gm.emplace(begin, std::move(r));
}

inline void UnregisterGm(const void* ptr) {
  auto it = Device().gm.find(reinterpret_cast<uintptr_t>(ptr));
  if (it != Device().gm.end() && --it->second.refs == 0) Device().gm.erase(it);
}

// The registered buffer with the highest start at or below `addr` (the only one
// that can hold it), or nullptr; the caller checks that `addr` lies inside it.
inline GmRegion* GmRegionAtOrBelow(uintptr_t addr) {
  auto& gm = Device().gm;
  auto it = gm.upper_bound(addr);
  if (it == gm.begin()) return nullptr;
  return &std::prev(it)->second;
}

// The registered allocation holding [ptr, ptr + bytes), or a SimError naming
// `what`. Reads may run into the allocator's padding (readableBytes); writes
// (`write`) must stay inside the allocation.
inline GmRegion& CheckGm(const void* ptr, uint64_t bytes, const std::string& what, bool write = false) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (GmRegion* found = GmRegionAtOrBelow(addr)) {
    GmRegion& r = *found;
    if (addr >= r.begin && addr - r.begin <= r.readableBytes) {
      const uint64_t limit = write ? r.bytes : r.readableBytes;
      if (addr + bytes <= r.begin + limit) return r;
      if (write) {
        Fail(Str(what, ": GM write of ", bytes, " bytes at offset ", addr - r.begin, " of buffer '", r.name,
                 "' runs past its end (", r.bytes, " bytes; the allocator's padding behind it may hold another "
                 "tensor, so only reads may use it)"));
      }
      Fail(Str(what, ": GM access of ", bytes, " bytes at offset ", addr - r.begin, " of buffer '",
               r.name, "' runs past its end (", r.bytes, " bytes",
               r.readableBytes > r.bytes ? Str(" + ", r.readableBytes - r.bytes, " bytes of allocator padding") : "",
               ")"));
    }
  }
  Fail(Str(what, ": GM address ", ptr, " (", bytes,
           " bytes) is not inside any buffer given to the kernel"));
}

// True when [ptr, ptr + bytes) lies in a registered device allocation that
// carries the allocator's padding.
inline bool InPaddedAllocation(const void* ptr, uint64_t bytes) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  const GmRegion* r = GmRegionAtOrBelow(addr);
  return r != nullptr && r->readableBytes > r->bytes && addr >= r->begin && addr + bytes <= r->begin + r->bytes;
}

// ---- The scalar unit's Data Cache ------------------------------------------
// (asc-devkit docs/zh/api/SIMD-API/基础API/缓存控制/DataCacheCleanAndInvalid.md and
// 系统缓存概述.md): the scalar unit reaches GM through a per-core DCache of 64-byte
// lines, written back lazily (write-back policy); DMA (DataCopy) bypasses it. So
// a scalar store reaches GM only when its line is cleaned, and a scalar load of a
// line cached before a DMA write returns the old bytes. The simulator keeps the
// cache per core run and reports what hardware would get wrong: a stale scalar
// read, a DMA read of bytes the cache still holds dirty, and a store never
// cleaned (LaunchKernel, at the core's end).

inline uintptr_t DcacheLineOf(uintptr_t addr) { return addr / kDcacheLineBytes * kDcacheLineBytes; }

// Calls fn(b, e) for each maximal run [b, e) of set bits of `mask` (bit i: byte i
// of a line) inside [from, to).
template <typename Fn>
inline void ForEachByteRun(uint64_t mask, uint32_t from, uint32_t to, Fn&& fn) {
  for (uint32_t b = from; b < to; ++b) {
    if (!(mask >> b & 1)) continue;
    uint32_t e = b;
    while (e < to && (mask >> e & 1)) ++e;
    fn(b, e);
    b = e;
  }
}

// The bytes [from, to) of the line at `lineAddr` that lie in [addr, addr + bytes).
inline std::pair<uint32_t, uint32_t> DcacheLineSpan(uintptr_t lineAddr, uintptr_t addr, uint64_t bytes) {
  const uintptr_t lo = std::max(lineAddr, addr), hi = std::min<uintptr_t>(lineAddr + kDcacheLineBytes, addr + bytes);
  return {uint32_t(lo - lineAddr), uint32_t(hi > lo ? hi - lineAddr : lo - lineAddr)};
}

// "buffer 'name', bytes [a, b)" for messages about GM address range [begin, end).
inline std::string GmRangeName(uintptr_t begin, uintptr_t end) {
  const GmRegion* r = GmRegionAtOrBelow(begin);
  if (r != nullptr && begin >= r->begin && begin < r->begin + r->readableBytes) {
    return Str("GM buffer '", r->name, "' bytes [", begin - r->begin, ", ", end - r->begin, ")");
  }
  return Str("GM bytes [", reinterpret_cast<const void*>(begin), ", +", end - begin, ")");
}

// Fills byte `addr`'s line on a miss, as hardware does: every byte of the line
// that lies in the readable part of the registered buffer holding `addr` (bytes
// outside any buffer are never cached, so never reported).
//
// The block may run on any core, and a core may still hold the line from an
// earlier kernel (DcacheCarryOver): a fill meets such a copy unless this block
// dropped those bytes first. Bytes where a carried copy differs from GM are
// marked `carriedStale`, and reading them fails (DcacheRead): hardware would
// return the old bytes. Copies from blocks of the same launch are left out;
// those blocks run beside this one, on other cores.
inline DcacheLine& DcacheFill(CoreState& core, uintptr_t addr) {
  const uintptr_t lineAddr = DcacheLineOf(addr);
  DcacheLine& line = core.dcache[lineAddr];
  const GmRegion* r = GmRegionAtOrBelow(addr);
  if (r == nullptr) return line;
  const uintptr_t lo = std::max<uintptr_t>(lineAddr, r->begin);
  const uintptr_t hi = std::min<uintptr_t>(lineAddr + kDcacheLineBytes, r->begin + r->readableBytes);
  uint64_t filled = 0;
  for (uintptr_t a = lo; a < hi; ++a) {
    const uint64_t bit = uint64_t(1) << (a - lineAddr);
    if (line.valid & bit) continue;
    line.data[a - lineAddr] = *reinterpret_cast<const uint8_t*>(a);
    line.valid |= bit;
    filled |= bit;
  }
  if (filled == 0 || core.dcacheDroppedAll) return line;
  auto carried = Device().carriedDcache.find(lineAddr);
  if (carried == Device().carriedDcache.end()) return line;
  auto dropped = core.dcacheDropped.find(lineAddr);
  const uint64_t live = filled & ~(dropped == core.dcacheDropped.end() ? 0 : dropped->second);
  for (const CarriedDcacheLine& copy : carried->second) {
    if (copy.launch >= core.launch) continue;
    for (uint32_t b = 0; b < kDcacheLineBytes; ++b) {
      const uint64_t bit = uint64_t(1) << b;
      if ((live & copy.valid & bit) && copy.data[b] != line.data[b] && !(line.carriedStale & bit)) {
        line.carriedStale |= bit;
        const auto& names = Device().launchKernels;
        line.carriedFrom = Str("kernel ", copy.launch <= names.size() ? names[copy.launch - 1] : "?", " (launch ",
                               copy.launch, ", block ", copy.block, ", core ", copy.core, ")");
      }
    }
  }
  return line;
}

inline void RecordGmRead(const void* p, uint64_t bytes, const std::string& what);

// A scalar load (GlobalTensor::GetValue) of [p, p + bytes), already bounds-checked.
inline void DcacheRead(void* out, const void* p, uint64_t bytes, const std::string& what) {
  CoreState* core = Device().core;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (core == nullptr) {
    std::memcpy(out, p, bytes);
    return;
  }
  RecordGmRead(p, bytes, what);
  auto* o = static_cast<uint8_t*>(out);
  for (uint64_t i = 0; i < bytes; ++i) {
    const uintptr_t a = addr + i;
    const uint64_t bit = uint64_t(1) << (a - DcacheLineOf(a));
    auto found = core->dcache.find(DcacheLineOf(a));
    DcacheLine& line = (found != core->dcache.end() && (found->second.valid & bit)) ? found->second
                                                                                     : DcacheFill(*core, a);
    if (line.stale & bit) {
      Fail(Str(what, ": stale read of ", GmRangeName(addr, addr + bytes), ": the core's data cache filled line ",
               GmRangeName(DcacheLineOf(a), DcacheLineOf(a) + kDcacheLineBytes),
               " before a DMA write (DataCopy to GM) changed it, and no DataCacheCleanAndInvalid dropped it "
               "in between: on hardware this load returns the old bytes (rule: data cache, "
               "DataCacheCleanAndInvalid page)"));
    }
    if (line.carriedStale & bit) {
      Fail(Str(what, ": stale read of ", GmRangeName(addr, addr + bytes), ": ", line.carriedFrom,
               " left line ", GmRangeName(DcacheLineOf(a), DcacheLineOf(a) + kDcacheLineBytes),
               " in a core's data cache, GM has changed since (another kernel, core or the host wrote it), and this "
               "block dropped no cache line there (DataCacheCleanAndInvalid) before its scalar load: the devkit does "
               "not say a kernel starts with an empty data cache on this SoC, so on hardware this load may return "
               "the old bytes (rule: data cache across launches, DataCacheCleanAndInvalid page: \"读取GM的数据，但该"
               "数据可能在外部被其余核修改\")"));
    }
    o[i] = line.data[a - DcacheLineOf(a)];
  }
}

// A scalar store (GlobalTensor::SetValue) of [p, p + bytes), already checked as a
// write: it changes the cached line only.
inline void DcacheWrite(void* p, const void* src, uint64_t bytes) {
  CoreState* core = Device().core;
  if (core == nullptr) {
    std::memcpy(p, src, bytes);
    return;
  }
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto* s = static_cast<const uint8_t*>(src);
  for (uint64_t i = 0; i < bytes; ++i) {
    const uintptr_t a = addr + i;
    DcacheLine& line = DcacheFill(*core, a);  // write-allocate: the rest of the line is GM's
    const uint64_t bit = uint64_t(1) << (a - DcacheLineOf(a));
    line.data[a - DcacheLineOf(a)] = s[i];
    line.valid |= bit;
    line.dirty |= bit;
    line.stale &= ~bit;
    line.carriedStale &= ~bit;
  }
}

inline void WriteGm(void* dst, const void* src, uint64_t bytes, const std::string& what);

// Writes back bytes [from, to) of `line` when any of them is dirty, then drops
// them. The cache writes back whole, not byte by byte: reads and writes through
// it move 64-byte lines (ReadGmByPassDCache / WriteGmByPassDCache pages: "经过
// DCache的读写将以64B为粒度"; DataCacheCleanAndInvalid page, example 3: cores
// storing into one line overwrite each other at random). So the clean bytes go
// back with the dirty ones, as the core cached them: a byte another core
// changed in this launch is overwritten with its old value (WriteGm reports the
// race), and one that changed in GM since the core cached it (a DMA write, an
// earlier kernel) would be put back to its old value (reported here). Bytes in
// the allocator's padding behind a buffer (cached, never written) are left out.
inline void DcacheCleanRange(uintptr_t lineAddr, DcacheLine& line, uint32_t from, uint32_t to, const char* what) {
  const uint64_t mask = (to - from >= 64) ? ~uint64_t(0) : ((uint64_t(1) << (to - from)) - 1) << from;
  if (line.dirty & mask) {
    const uint64_t undone = (line.stale | line.carriedStale) & line.valid & ~line.dirty & mask;
    ForEachByteRun(undone, from, to, [&](uint32_t b, uint32_t e) {
      Fail(Str(what, ": writes back line ", GmRangeName(lineAddr, lineAddr + kDcacheLineBytes),
               " for the GlobalTensor::SetValue stores in it, and with them ", GmRangeName(lineAddr + b, lineAddr + e),
               ", which GM changed after the core cached them (",
               (line.stale >> b & 1) ? "a DMA write of this core" : line.carriedFrom.c_str(),
               "): the line goes back whole, so those bytes get their old value again (rule: data cache "
               "write-back granularity, ReadGmByPassDCache page)"));
    });
    ForEachByteRun(line.valid, from, to, [&](uint32_t b, uint32_t e) {
      for (uintptr_t a = lineAddr + b, end = lineAddr + e; a < end;) {
        const GmRegion* r = GmRegionAtOrBelow(a);
        if (r == nullptr || a >= r->begin + r->bytes) {
          ++a;  // padding: readable, so cached, but no buffer's bytes
          continue;
        }
        const uintptr_t stop = std::min<uintptr_t>(end, r->begin + r->bytes);
        WriteGm(reinterpret_cast<void*>(a), line.data + (a - lineAddr), stop - a, what);
        a = stop;
      }
    });
  }
  line.valid &= ~mask;
  line.dirty &= ~mask;
  line.stale &= ~mask;
  line.carriedStale &= ~mask;
}

// DataCacheCleanAndInvalid. SINGLE_CACHE_LINE acts on the line holding `addr`
// but, the devkit page says (entireType, and its example 2), only from `addr`
// to the next 64-byte boundary: the bytes of the line before `addr` stay cached
// (and dirty). ENTIRE_DATA_CACHE: every line of the core.
inline void DcacheCleanAndInvalidate(const void* addr, bool entire) {
  CoreState& core = CurrentCore("DataCacheCleanAndInvalid");
  constexpr const char* what = "DataCacheCleanAndInvalid (write-back of the data cache)";
  if (entire) {
    for (auto& [lineAddr, line] : core.dcache) DcacheCleanRange(lineAddr, line, 0, kDcacheLineBytes, what);
    core.dcache.clear();
    core.dcacheDroppedAll = true;
    return;
  }
  const auto a = reinterpret_cast<uintptr_t>(addr);
  // A copy an earlier kernel left on this core loses the same bytes.
  const uint32_t from = uint32_t(a - DcacheLineOf(a));
  core.dcacheDropped[DcacheLineOf(a)] |= ~uint64_t(0) << from;
  auto it = core.dcache.find(DcacheLineOf(a));
  if (it == core.dcache.end()) return;
  DcacheCleanRange(it->first, it->second, uint32_t(a - it->first), kDcacheLineBytes, what);
  if (it->second.valid == 0) core.dcache.erase(it);
}

// A DMA write of [dst, dst + bytes) by the current core: bytes its DCache holds
// with another value become stale (a later scalar load would return the old one).
inline void MarkDcacheStale(const void* dst, const void* src, uint64_t bytes) {
  CoreState* core = Device().core;
  if (core == nullptr || core->dcache.empty()) return;
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (auto it = core->dcache.lower_bound(DcacheLineOf(addr)); it != core->dcache.end() && it->first < addr + bytes;
       ++it) {
    DcacheLine& line = it->second;
    const auto [from, to] = DcacheLineSpan(it->first, addr, bytes);
    ForEachByteRun(line.valid, from, to, [&](uint32_t b, uint32_t e) {
      for (uint32_t i = b; i < e; ++i) {
        if (line.data[i] != s[it->first + i - addr]) line.stale |= uint64_t(1) << i;
      }
    });
  }
}

// A DMA read (DataCopy from GM) of [src, src + bytes) by the current core: it
// reads GM, not the cache, so bytes the core stored with SetValue and has not
// cleaned yet are not there.
inline void CheckDmaReadNotDirty(const void* src, uint64_t bytes, const std::string& what) {
  CoreState* core = Device().core;
  if (core == nullptr || core->dcache.empty()) return;
  const auto addr = reinterpret_cast<uintptr_t>(src);
  for (auto it = core->dcache.lower_bound(DcacheLineOf(addr)); it != core->dcache.end() && it->first < addr + bytes;
       ++it) {
    const auto [from, to] = DcacheLineSpan(it->first, addr, bytes);
    ForEachByteRun(it->second.dirty, from, to, [&](uint32_t b, uint32_t e) {
      Fail(Str(what, ": reads ", GmRangeName(it->first + b, it->first + e), ", which GlobalTensor::SetValue stored into the core's data "
               "cache and no DataCacheCleanAndInvalid wrote back yet: the DMA reads GM, without that store (rule: "
               "data cache, DataCacheCleanAndInvalid page)"));
    });
  }
}

// At the end of a core's run: every dirty byte still in the cache is a store
// that never reaches GM (the simulator drops it, as a core whose line is not
// cleaned in time). "" when none.
inline std::string DcacheLostWrites(const CoreState& core) {
  std::string all;
  int runs = 0;  // the first 8 runs are named, the rest counted
  uintptr_t runBegin = 0, runEnd = 0;  // the current run of dirty bytes, across lines
  auto flush = [&]() {
    if (runEnd == runBegin) return;
    if (++runs > 8) return;
    if (!all.empty()) all += "; ";
    all += GmRangeName(runBegin, runEnd);
  };
  for (const auto& [lineAddr, line] : core.dcache) {
    ForEachByteRun(line.dirty, 0, kDcacheLineBytes, [&, lineAddr = lineAddr](uint32_t b, uint32_t e) {
      if (lineAddr + b != runEnd) {  // a run continues across lines when it ends on one's last byte
        flush();
        runBegin = lineAddr + b;
      }
      runEnd = lineAddr + e;
    });
  }
  flush();
  if (all.empty()) return all;
  if (runs > 8) all += Str(" and ", runs - 8, " more runs");
  return Str("lost write: GlobalTensor::SetValue stored ", all,
             " into the core's data cache and no DataCacheCleanAndInvalid wrote it back before the core ended "
             "(a SINGLE_CACHE_LINE clean covers only its address up to the next 64-byte boundary; rule: data cache, "
             "DataCacheCleanAndInvalid page)");
}

// Records a write by the current core and fails when another core of the same
// launch already wrote a different value there: on hardware the cores run
// concurrently, so the result would depend on timing.
inline void WriteGm(void* dst, const void* src, uint64_t bytes, const std::string& what) {
  GmRegion& r = CheckGm(dst, bytes, what, /*write=*/true);
  const CoreState* core = Device().core;
  if (core != nullptr) {
    if (r.writer.empty()) r.writer.assign(r.bytes, int16_t(-1));
    const uint64_t off = reinterpret_cast<uintptr_t>(dst) - r.begin;
    const auto* s = static_cast<const uint8_t*>(src);
    const auto* d = static_cast<const uint8_t*>(dst);
    const bool read = !r.reader.empty();
    for (uint64_t i = 0; i < bytes; ++i) {
      const int16_t w = r.writer[off + i];
      if (w >= 0 && w != core->blockIdx && d[i] != s[i]) {
        Fail(Str(what, ": core ", core->blockIdx, " overwrites byte ", off + i, " of GM buffer '",
                 r.name, "' that core ", w,
                 " wrote with a different value in the same launch (a race between cores on hardware)"));
      }
      const int16_t seen = read ? r.reader[off + i] : int16_t(-1);
      if (seen != -1 && seen != core->blockIdx && d[i] != s[i]) {
        Fail(Str(what, ": core ", core->blockIdx, " changes byte ", off + i, " of GM buffer '", r.name, "' that ",
                 seen == kSeveralReaders ? std::string("other cores") : Str("core ", seen),
                 " read in the same launch: the cores run concurrently, so that read may see the byte before or "
                 "after this write (a race between cores on hardware)"));
      }
      r.writer[off + i] = int16_t(core->blockIdx);
    }
  }
  MarkDcacheStale(dst, src, bytes);
  std::memmove(dst, src, bytes);
}

inline void ResetGmWriters() {
  for (auto& [begin, region] : Device().gm) {
    region.writer.clear();
    region.reader.clear();
  }
}

// A read (scalar or DMA) of [p, p + bytes) by the current core, recorded for a
// later core that would change those bytes (WriteGm); and failing on bytes
// another core wrote in this launch: the cores run concurrently and no kernel
// here synchronises them (the simulator provides no SyncAll), so what the read
// sees depends on timing; through the data cache it may also see an older line.
inline void RecordGmRead(const void* p, uint64_t bytes, const std::string& what) {
  const CoreState* core = Device().core;
  if (core == nullptr) return;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  GmRegion* r = GmRegionAtOrBelow(addr);
  if (r == nullptr || addr >= r->begin + r->bytes) return;
  const uint64_t off = addr - r->begin, end = std::min<uint64_t>(off + bytes, r->bytes);
  if (r->reader.empty()) r->reader.assign(r->bytes, int16_t(-1));
  const auto me = int16_t(core->blockIdx);
  for (uint64_t i = off; i < end; ++i) {
    int16_t& seen = r->reader[i];
    seen = (seen == -1 || seen == me) ? me : kSeveralReaders;
  }
  if (r->writer.empty()) return;
  for (uint64_t i = off; i < end; ++i) {
    const int16_t w = r->writer[i];
    if (w >= 0 && w != core->blockIdx) {
      Fail(Str(what, ": core ", core->blockIdx, " reads byte ", i, " of GM buffer '", r->name, "' that core ", w,
               " wrote in the same launch: the cores run concurrently, so the read may see the byte before or after "
               "that write (a race between cores on hardware; through the data cache, also an older line)"));
    }
  }
}

// Forgets every line carried between launches (a new SoC, or after a failed
// launch, whose state later kernels must not inherit).
inline void ClearCarriedDcache() {
  DeviceState& dev = Device();
  dev.carriedDcache.clear();
  dev.carriedOrder.clear();
  dev.carriedCount.clear();
}

// At the end of a block that ran clean: the lines it left in its core's data
// cache stay there for later launches, replacing the core's older copies; the
// bytes it dropped are gone from them; past kDcacheCarriedLinesPerCore lines
// the core forgets its oldest.
inline void DcacheCarryOver(const CoreState& core) {
  DeviceState& dev = Device();
  const uint32_t pc = core.physicalCore;
  if (dev.carriedOrder.size() <= pc) {
    dev.carriedOrder.resize(pc + 1);
    dev.carriedCount.resize(pc + 1, 0);
  }
  auto forget = [&](std::map<uintptr_t, std::vector<CarriedDcacheLine>>::iterator it, uint64_t keep) {
    auto& copies = it->second;
    for (auto c = copies.begin(); c != copies.end(); ++c) {
      if (c->core != pc) continue;
      c->valid &= keep;
      if (c->valid == 0) {
        copies.erase(c);
        --dev.carriedCount[pc];
      }
      break;
    }
    if (copies.empty()) dev.carriedDcache.erase(it);
  };
  if (core.dcacheDroppedAll) {
    for (auto it = dev.carriedDcache.begin(); it != dev.carriedDcache.end();) forget(it++, 0);
  } else {
    for (const auto& [lineAddr, mask] : core.dcacheDropped) {
      auto it = dev.carriedDcache.find(lineAddr);
      if (it != dev.carriedDcache.end()) forget(it, ~mask);
    }
  }
  for (const auto& [lineAddr, line] : core.dcache) {
    if (line.valid == 0) continue;
    auto& copies = dev.carriedDcache[lineAddr];
    CarriedDcacheLine* mine = nullptr;
    for (auto& c : copies) mine = c.core == pc ? &c : mine;
    if (mine == nullptr) {
      copies.push_back(CarriedDcacheLine{});
      mine = &copies.back();
      mine->core = pc;
      ++dev.carriedCount[pc];
    }
    // The bytes this block filled replace the old copy's; the rest stay.
    for (uint32_t b = 0; b < kDcacheLineBytes; ++b) {
      if (line.valid >> b & 1) mine->data[b] = line.data[b];
    }
    mine->valid |= line.valid;
    mine->launch = core.launch;
    mine->block = core.blockIdx;
    dev.carriedOrder[pc].emplace_back(lineAddr, core.launch);
  }
  auto& order = dev.carriedOrder[pc];
  while (dev.carriedCount[pc] > kDcacheCarriedLinesPerCore && !order.empty()) {
    const auto [lineAddr, launch] = order.front();
    order.pop_front();
    auto it = dev.carriedDcache.find(lineAddr);
    if (it == dev.carriedDcache.end()) continue;
    for (const auto& c : it->second) {
      if (c.core == pc && c.launch == launch) {  // not refilled since
        forget(it, 0);
        break;
      }
    }
  }
  // Entries of lines dropped or refilled since stay in `order` until they reach
  // its front; keep it from growing without bound.
  if (order.size() > 4 * kDcacheCarriedLinesPerCore) {
    std::deque<std::pair<uintptr_t, uint64_t>> live;
    for (const auto& [lineAddr, launch] : order) {
      auto it = dev.carriedDcache.find(lineAddr);
      if (it == dev.carriedDcache.end()) continue;
      for (const auto& c : it->second) {
        if (c.core == pc && c.launch == launch) live.emplace_back(lineAddr, launch);
      }
    }
    order.swap(live);
  }
}

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_CORE_H_
