// The pipes of one AI core and the order between them.
//
// On hardware the scalar unit issues every instruction in program order, but
// each pipe (S, V, MTE2, MTE3) then runs on its own: an instruction on one pipe
// may start before an earlier one on another pipe has finished, and within a
// pipe a later instruction may start before an earlier one has finished its
// reads and writes (asc-devkit docs/zh/api/SIMD-API/基础API/同步控制/核内同步/
// 核内同步能力概述.md). The simulator still executes in program order; what it
// adds is the bookkeeping of what hardware would not order:
//   * for every run of UB bytes, the last write and each pipe's last read since
//     (instruction number, API name);
//   * per pipe, how far each other pipe is known to be complete (`known`),
//     raised by SetFlag/WaitFlag, PipeBarrier and PIPE_ALL;
//   * TQue hand-overs, per tensor: DeQue orders the tensor's earlier writes and
//     reads before every other pipe's later use (EnQue/DeQue), AllocTensor every
//     earlier use of the buffer before its reuse (FreeTensor/AllocTensor);
//   * the MTE3 writes to GM since the last PipeBarrier<PIPE_MTE3>, and every
//     MTE3 write to GM of the core (for a later MTE2 read of the same bytes);
//   * the SetFlag'd events not yet waited for.
// An access that meets an earlier one on another pipe with nothing ordering
// them, two overlapping MTE3 writes to GM, two overlapping MTE2 writes to the UB
// without PipeBarrier<PIPE_MTE2> (PipeBarrier page, 约束说明: DMA writes of one
// pipe to overlapping addresses may land in either order), an MTE2 read of GM
// bytes an earlier MTE3 write of the core has not been ordered before (no
// MTE3_MTE2 flag or PIPE_ALL: the read may overtake the write), an event ID
// outside 0-7, a flag still set when the core ends, and (on NPU arch 2002, where
// the compiler does not insert PIPE_V barriers) a vector read of bytes an earlier
// vector instruction wrote with no PipeBarrier<PIPE_V> between, are reported.
// The scalar pipe is exempt: the compiler orders LocalTensor GetValue/SetValue
// against V, MTE2 and MTE3 itself (cce-auto-sync, 关键特性说明.md).
#ifndef ASCENDC_SIM_PIPES_H_
#define ASCENDC_SIM_PIPES_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include "ascendc_sim/core.h"

namespace ascendc_sim {

inline const char* PipeName(Pipe p) {
  static const char* const kNames[] = {"PIPE_S", "PIPE_V", "PIPE_MTE2", "PIPE_MTE3"};
  return kNames[int(p)];
}
inline const char* PipeShortName(Pipe p) {
  static const char* const kNames[] = {"S", "V", "MTE2", "MTE3"};
  return kNames[int(p)];
}

// Starts an instruction on pipe `p` of the running core; returns its number, 0
// outside a kernel (host-side use of the API is not checked).
inline uint64_t IssueInstruction(Pipe p) {
  CoreState* core = Device().core;
  if (core == nullptr) return 0;
  PipeState& s = core->pipes;
  s.last[int(p)] = ++s.count;
  return s.count;
}

// The UB run starting at `at` (split off the run holding it if needed).
inline std::map<uint32_t, UbUse>::iterator SplitUbRun(std::map<uint32_t, UbUse>& runs, uint32_t at) {
  if (runs.empty()) runs.emplace(0, UbUse{});
  auto it = runs.lower_bound(at);
  if (it != runs.end() && it->first == at) return it;
  const UbUse copy = std::prev(it)->second;
  return runs.emplace_hint(it, at, copy);
}

// True when the earlier use `u` of pipe `q` is not ordered before pipe `p`'s
// current instruction. `raw`: `p` reads what `u` wrote. Same-pipe cases checked:
// a V read of a V write on NPU arch 2002, and an MTE2 write over an MTE2 write
// (both SoCs; a queue hand-over between does not order two DMAs of one pipe).
inline bool Unordered(const PipeState& s, Pipe p, Pipe q, const PipeUse& u, bool queued, bool raw) {
  if (u.n == 0 || p == Pipe::kS || q == Pipe::kS) return false;
  if (p == q) {
    const bool checked = (raw && p == Pipe::kV && Device().spec.npuArch == 2002) || (!raw && p == Pipe::kMte2);
    return checked && s.known[int(p)][int(p)] < u.n;
  }
  return !queued && s.known[int(p)][int(q)] < u.n;
}

[[noreturn]] inline void FailUbHazard(const char* kind, Pipe p, uint64_t n, const char* api, Pipe q,
                                      const PipeUse& other, bool otherWrote, uint32_t begin, uint32_t end,
                                      const std::string* owner) {
  std::string fix;
  if (p == q && p == Pipe::kMte2) {
    fix = "no PipeBarrier<PIPE_MTE2> (or PIPE_ALL) between them: the two DMA writes may land in either order "
          "(rule: overlapping UB writes, PipeBarrier page 约束说明)";
  } else if (p == q) {
    fix = "no PipeBarrier<PIPE_V> (or PIPE_ALL) between them, and on NPU arch 2002 the compiler inserts none "
          "(rule: same-pipe vector order, PipeBarrier page and 关键特性说明.md)";
  } else {
    fix = Str("nothing orders the two: no EnQue/DeQue (or FreeTensor/AllocTensor) of the tensor, no SetFlag/WaitFlag"
              "<HardEvent::", PipeShortName(q), "_", PipeShortName(p), ">, no PipeBarrier<PIPE_ALL> between them "
              "(rule: pipe order, SetFlag-WaitFlag(ISASI) page and TPipe-TQue框架编程原理.md)");
  }
  Fail(Str("pipe hazard (", kind, "): ", api, " (instruction #", n, ", ", PipeName(p), ") ",
           std::string(kind) == "RAW" ? "reads" : "overwrites", " UB bytes [", begin, ", ", end, ")",
           owner != nullptr ? Str(" of ", *owner) : std::string(), " that ", other.api, " (instruction #", other.n,
           ", ", PipeName(q), ") ", otherWrote ? "wrote" : "read", "; ", fix));
}

// Instruction #n on pipe `p` reads (write = false) or writes UB bytes
// [begin, begin + bytes): reports a hazard with an unordered earlier use, then
// records this one. `owner`: the buffer's name, for messages.
inline void UseUb(Pipe p, uint64_t n, const char* api, uint32_t begin, uint64_t bytes, bool write,
                  const std::string* owner) {
  CoreState* core = Device().core;
  if (core == nullptr || n == 0 || bytes == 0 || p == Pipe::kS) return;
  PipeState& s = core->pipes;
  const uint32_t end = uint32_t(begin + bytes);
  auto last = SplitUbRun(s.ub, end);
  auto first = SplitUbRun(s.ub, begin);
  // The hazard's byte range: from the first run that has it through the following
  // runs with the same earlier instruction.
  auto report = [&](std::map<uint32_t, UbUse>::iterator it, const char* kind, Pipe q, const PipeUse& other,
                    bool otherWrote) {
    uint32_t to = std::next(it)->first;
    for (auto j = std::next(it); j != last; ++j) {
      const PipeUse& o = otherWrote ? j->second.writer : j->second.readers[int(q)];
      if (o.n != other.n) break;
      to = std::next(j)->first;
    }
    FailUbHazard(kind, p, n, api, q, other, otherWrote, it->first, to, owner);
  };
  // Hazards with other pipes first, then with this pipe's own earlier write: the
  // order that another pipe's flag would give usually orders both.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto it = first; it != last; ++it) {
      const UbUse& u = it->second;
      if ((u.writerPipe == p) == (pass == 1) && Unordered(s, p, u.writerPipe, u.writer, u.queued, !write)) {
        report(it, write ? "WAW" : "RAW", u.writerPipe, u.writer, true);
      }
      if (!write || pass == 1) continue;
      for (int q = 0; q < kPipes; ++q) {
        if (q != int(p) && Unordered(s, p, Pipe(q), u.readers[q], false, false)) {
          report(it, "WAR", Pipe(q), u.readers[q], false);
        }
      }
    }
  }
  if (write) {
    s.ub.erase(std::next(first), last);
    first->second = UbUse{};
    first->second.writer = PipeUse{n, api};
    first->second.writerPipe = p;
  } else {
    for (auto it = first; it != last; ++it) it->second.readers[int(p)] = PipeUse{n, api};
  }
}

// A TQue hand-over of the buffer [begin, begin + bytes). DeQue (`reuse` false):
// the tensor's earlier uses are ordered before every other pipe's later ones
// (EnQue set the flag, DeQue waits for it); the write stays unordered against
// later instructions of its own pipe (a vector read on 2002, an MTE2 write: the
// queue's flag does not hold up the pipe that set it). AllocTensor (`reuse`
// true): FreeTensor's flag orders every earlier use before the new owner's, and
// the old content is dead.
inline void HandOverUb(uint32_t begin, uint64_t bytes, bool reuse) {
  CoreState* core = Device().core;
  if (core == nullptr || bytes == 0) return;
  PipeState& s = core->pipes;
  if (s.ub.empty()) return;
  auto last = SplitUbRun(s.ub, uint32_t(begin + bytes));
  auto first = SplitUbRun(s.ub, begin);
  if (reuse) {
    s.ub.erase(std::next(first), last);
    first->second = UbUse{};
    return;
  }
  for (auto it = first; it != last; ++it) {
    UbUse& u = it->second;
    for (auto& r : u.readers) r = PipeUse{};
    u.queued = true;
  }
}

// The run of `runs` (GM bytes, see PipeState::gmMte3) starting at `at`, split off
// the run holding it if needed.
inline std::map<uintptr_t, PipeUse>::iterator SplitGmRun(std::map<uintptr_t, PipeUse>& runs, uintptr_t at) {
  auto it = runs.lower_bound(at);
  if (it != runs.end() && it->first == at) return it;
  const PipeUse copy = it == runs.begin() ? PipeUse{} : std::prev(it)->second;
  return runs.emplace_hint(it, at, copy);
}

// Records that MTE3 instruction #n wrote GM [begin, end).
inline void RecordGmMte3Write(PipeState& s, uint64_t n, const char* api, uintptr_t begin, uintptr_t end) {
  auto last = SplitGmRun(s.gmMte3, end);
  auto first = SplitGmRun(s.gmMte3, begin);
  s.gmMte3.erase(std::next(first), last);
  first->second = PipeUse{n, api};
}

// Instruction #n (an MTE2 copy, GM -> UB) reads GM [begin, begin + bytes): a byte
// an MTE3 write of the same core wrote, with nothing ordering that write before
// this read (SetFlag/WaitFlag<HardEvent::MTE3_MTE2>, PIPE_ALL, or a wait on S
// after MTE3), is reported -- the read may overtake the write and see the old
// bytes (the pipes run in parallel; 核内同步能力概述.md, HardEvent MTE3_MTE2).
inline void ReadGmByMte2(uint64_t n, const char* api, uintptr_t begin, uint64_t bytes) {
  CoreState* core = Device().core;
  if (core == nullptr || n == 0 || bytes == 0) return;
  PipeState& s = core->pipes;
  auto& runs = s.gmMte3;
  const uintptr_t end = begin + bytes;
  auto it = runs.upper_bound(begin);
  if (it != runs.begin()) --it;
  for (; it != runs.end() && it->first < end; ++it) {
    const PipeUse& w = it->second;
    if (w.n == 0 || s.known[int(Pipe::kMte2)][int(Pipe::kMte3)] >= w.n) continue;
    const uintptr_t runEnd = std::next(it) == runs.end() ? end : std::next(it)->first;
    const uintptr_t lo = std::max(begin, it->first), hi = std::min(end, runEnd);
    if (lo >= hi) continue;
    Fail(Str("pipe hazard (RAW, GM): ", api, " (instruction #", n, ", PIPE_MTE2) reads ", GmRangeName(lo, hi),
             ", which ", w.api, " (instruction #", w.n, ", PIPE_MTE3) of this core wrote, and nothing orders the "
             "write before the read: no SetFlag/WaitFlag<HardEvent::MTE3_MTE2>, no PipeBarrier<PIPE_ALL> between "
             "them -- the read may see the old bytes (rule: GM read after write, SetFlag-WaitFlag(ISASI) page and "
             "核内同步能力概述.md)"));
  }
}

// Instruction #n (an MTE3 copy) writes GM [begin, begin + bytes): an overlap with
// another MTE3 write since the last PipeBarrier<PIPE_MTE3> is reported (the two
// DMA writes may land in either order).
inline void UseGmByMte3(uint64_t n, const char* api, uintptr_t begin, uint64_t bytes) {
  CoreState* core = Device().core;
  if (core == nullptr || n == 0 || bytes == 0) return;
  auto& writes = core->pipes.gmWrites;
  const uintptr_t end = begin + bytes;
  // The recorded writes are disjoint: only the last one starting before `end` can overlap.
  auto it = writes.lower_bound(end);
  if (it != writes.begin()) {
    --it;
    if (it->second.first > begin) {
      const uintptr_t lo = std::max(begin, it->first), hi = std::min(end, it->second.first);
      const PipeUse& other = it->second.second;
      Fail(Str("GM write order: ", api, " (instruction #", n, ", PIPE_MTE3) writes ", GmRangeName(lo, hi),
               ", which ", other.api, " (instruction #", other.n,
               ", PIPE_MTE3) also wrote, with no PipeBarrier<PIPE_MTE3> (or PIPE_ALL) between them: the two DMA "
               "writes may land in either order (rule: overlapping GM writes, PipeBarrier page)"));
    }
  }
  RecordGmMte3Write(core->pipes, n, api, begin, end);
  // Coalesce with a write ending exactly here (a run of row copies) to keep the map small.
  auto before = writes.lower_bound(begin);
  if (before != writes.begin() && std::prev(before)->second.first == begin) {
    std::prev(before)->second = {end, PipeUse{n, api}};
    return;
  }
  writes[begin] = {end, PipeUse{n, api}};
}

// PipeBarrier<p>: every earlier instruction of pipe `p` is complete before its next.
inline void BarrierPipe(Pipe p) {
  CoreState* core = Device().core;
  if (core == nullptr) return;
  PipeState& s = core->pipes;
  s.known[int(p)][int(p)] = s.last[int(p)];
  if (p == Pipe::kMte3) s.gmWrites.clear();
}

// Raises `known` of every pipe to `clock` (the scalar unit issues every later
// instruction only after this point).
inline void JoinAll(PipeState& s, const uint64_t* clock) {
  for (auto& row : s.known) {
    for (int q = 0; q < kPipes; ++q) row[q] = std::max(row[q], clock[q]);
  }
}

// PipeBarrier<PIPE_ALL>: every earlier instruction of every pipe is complete.
inline void BarrierAll() {
  CoreState* core = Device().core;
  if (core == nullptr) return;
  PipeState& s = core->pipes;
  JoinAll(s, s.last);
  s.gmWrites.clear();
}

// Event IDs of SetFlag / WaitFlag: 0-7 on Atlas A2 and Atlas inference AI Core
// (SetFlag-WaitFlag(ISASI) page, 约束说明; 0-3 only on Atlas training products,
// which the simulator does not model).
inline constexpr int32_t kMaxEventId = 7;

inline void CheckEventId(const char* call, const char* name, int32_t id) {
  if (id < 0 || id > kMaxEventId) {
    Fail(Str(call, "<HardEvent::", name, ">(", id, "): event ID out of range: ", Device().spec.socName,
             " has event IDs 0-", kMaxEventId, " (rule: event IDs, SetFlag-WaitFlag(ISASI) page 约束说明)"));
  }
}

// SetFlag<HardEvent::SRC_DST>(id): remembers how far `src` is when its earlier
// instructions complete. `event`: the HardEvent's value, `name` its spelling.
inline void SetFlagOn(Pipe src, int event, int32_t id, const char* name) {
  CoreState* core = Device().core;
  if (core == nullptr) return;
  CheckEventId("SetFlag", name, id);
  PipeState& s = core->pipes;
  auto key = std::make_pair(event, id);
  if (s.flags.count(key) != 0) {
    Fail(Str("SetFlag<HardEvent::", name, ">(", id, ") twice with no WaitFlag<HardEvent::", name, ">(", id,
             ") between: undefined behaviour on hardware (rule: flag pairs, SetFlag-WaitFlag(ISASI) page)"));
  }
  std::vector<uint64_t> clock(s.known[int(src)], s.known[int(src)] + kPipes);
  clock[int(src)] = s.last[int(src)];
  s.flags.emplace(key, PipeState::PendingFlag{std::move(clock), name});
}

// WaitFlag<HardEvent::SRC_DST>(id): `dst`'s later instructions start after what
// the matching SetFlag recorded; a wait on the scalar pipe holds up the issue of
// every later instruction, so it orders them all.
inline void WaitFlagOn(Pipe dst, int event, int32_t id, const char* name) {
  CoreState* core = Device().core;
  if (core == nullptr) return;
  CheckEventId("WaitFlag", name, id);
  PipeState& s = core->pipes;
  auto it = s.flags.find(std::make_pair(event, id));
  if (it == s.flags.end()) {
    Fail(Str("WaitFlag<HardEvent::", name, ">(", id, ") with no SetFlag<HardEvent::", name, ">(", id,
             ") before it: on hardware the pipe waits forever (rule: flag pairs, SetFlag-WaitFlag(ISASI) page)"));
  }
  const std::vector<uint64_t>& clock = it->second.clock;
  if (dst == Pipe::kS) {
    JoinAll(s, clock.data());
  } else {
    for (int q = 0; q < kPipes; ++q) s.known[int(dst)][q] = std::max(s.known[int(dst)][q], clock[q]);
  }
  s.flags.erase(it);
}

// At the end of a core's run: every flag still set (SetFlag with no WaitFlag) is
// an unpaired SetFlag -- the page asks for pairs, and the next kernel on the core
// would start with the flag set. "" when none.
inline std::string PendingFlags(const CoreState& core) {
  std::string all;
  for (const auto& [key, flag] : core.pipes.flags) {
    if (!all.empty()) all += ", ";
    all += Str("SetFlag<HardEvent::", flag.name, ">(", key.second, ")");
  }
  if (all.empty()) return all;
  return Str("flag left set: ", all, " with no WaitFlag of the same event and ID before the core ended (rule: "
             "flag pairs, SetFlag-WaitFlag(ISASI) page 约束说明: SetFlag and WaitFlag must be used in pairs)");
}

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_PIPES_H_
