// Tensors and buffer management of Ascend C on the simulator: GlobalTensor,
// LocalTensor, TPipe, TQue, TBuf, and the core-id queries.
//
// Every LocalTensor access goes through LocalTensor::Access(), which checks that
// the tensor's buffer is alive (not freed, not sitting in a queue), that the
// elements touched lie inside the buffer, and, for the instructions that need
// it, that the start address is 32-byte aligned.
#ifndef ASCENDC_SIM_TENSOR_H_
#define ASCENDC_SIM_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ascendc_sim/core.h"
#include "ascendc_sim/float16.h"
#include "ascendc_sim/pipes.h"

// Pipes and events of the AI core. The simulator executes in program order and
// checks that the program orders what hardware would run in parallel (pipes.h).
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };
enum event_t : int32_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM, SPM, SHM, TSCM, MAX };
using QuePosition = TPosition;

enum class HardEvent : uint8_t { MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V,
                                 MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2,
                                 MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S,
                                 M_S, FIX_MTE3, MAX };

using TEventID = int8_t;

template <typename T, typename U>
struct IsSameType {
  static constexpr bool value = std::is_same_v<T, U>;
};

}  // namespace AscendC

namespace ascendc_sim {

// The tracked source and destination pipes of a HardEvent, and its spelling;
// false for events between pipes the simulator does not track (M, MTE1, FIX).
inline bool EventPipes(AscendC::HardEvent event, Pipe& src, Pipe& dst, const char*& name) {
  using E = AscendC::HardEvent;
  switch (event) {
#define ASCENDC_SIM_EVENT(SRC, DST, S, D) \
  case E::SRC##_##DST:                   \
    src = Pipe::S;                       \
    dst = Pipe::D;                       \
    name = #SRC "_" #DST;                \
    return true;
    ASCENDC_SIM_EVENT(MTE2, V, kMte2, kV)
    ASCENDC_SIM_EVENT(V, MTE2, kV, kMte2)
    ASCENDC_SIM_EVENT(MTE3, V, kMte3, kV)
    ASCENDC_SIM_EVENT(V, MTE3, kV, kMte3)
    ASCENDC_SIM_EVENT(V, V, kV, kV)
    ASCENDC_SIM_EVENT(MTE3, MTE2, kMte3, kMte2)
    ASCENDC_SIM_EVENT(MTE2, MTE3, kMte2, kMte3)
    ASCENDC_SIM_EVENT(S, V, kS, kV)
    ASCENDC_SIM_EVENT(V, S, kV, kS)
    ASCENDC_SIM_EVENT(S, MTE2, kS, kMte2)
    ASCENDC_SIM_EVENT(MTE2, S, kMte2, kS)
    ASCENDC_SIM_EVENT(S, MTE3, kS, kMte3)
    ASCENDC_SIM_EVENT(MTE3, S, kMte3, kS)
#undef ASCENDC_SIM_EVENT
    default:
      return false;
  }
}

}  // namespace ascendc_sim

namespace AscendC {

// Synchronisation between pipes (SetFlag-WaitFlag(ISASI) page): WaitFlag's pipe
// starts its later instructions after the SetFlag pipe's earlier ones complete.
template <HardEvent event>
inline void SetFlag(int32_t eventID) {
  ascendc_sim::Pipe src, dst;
  const char* name;
  if (ascendc_sim::EventPipes(event, src, dst, name)) ascendc_sim::SetFlagOn(src, int(event), eventID, name);
}
template <HardEvent event>
inline void WaitFlag(int32_t eventID) {
  ascendc_sim::Pipe src, dst;
  const char* name;
  if (ascendc_sim::EventPipes(event, src, dst, name)) ascendc_sim::WaitFlagOn(dst, int(event), eventID, name);
}

// Synchronisation within one pipe (PipeBarrier(ISASI) page; PIPE_S is not supported there).
template <pipe_t pipe>
inline void PipeBarrier() {
  static_assert(pipe != PIPE_S, "PipeBarrier: PIPE_S is not supported (the scalar pipe is ordered by hardware)");
  if constexpr (pipe == PIPE_ALL) {
    ascendc_sim::BarrierAll();
  } else if constexpr (pipe == PIPE_V) {
    ascendc_sim::BarrierPipe(ascendc_sim::Pipe::kV);
  } else if constexpr (pipe == PIPE_MTE2) {
    ascendc_sim::BarrierPipe(ascendc_sim::Pipe::kMte2);
  } else if constexpr (pipe == PIPE_MTE3) {
    ascendc_sim::BarrierPipe(ascendc_sim::Pipe::kMte3);
  }
}

inline int64_t GetBlockIdx() { return ascendc_sim::CurrentCore("GetBlockIdx").blockIdx; }
inline int64_t GetBlockNum() { return ascendc_sim::CurrentCore("GetBlockNum").blockNum; }

}  // namespace AscendC

namespace ascendc_sim {

// One buffer handed out by TPipe::InitBuffer: a queue has `num` of them, a TBuf one.
struct UbSlot {
  enum class State { kFree, kAllocated, kEnqueued, kCalc };
  uint32_t ubOffset = 0;
  uint32_t bytes = 0;
  State state = State::kFree;
  uint64_t generation = 0;  // bumped by FreeTensor: stale LocalTensor copies are detected
  std::string owner;        // "TQue<VECIN, 2> #1" etc., for messages
};

inline const char* PositionName(AscendC::TPosition p) {
  switch (p) {
    case AscendC::TPosition::VECIN:
      return "VECIN";
    case AscendC::TPosition::VECOUT:
      return "VECOUT";
    case AscendC::TPosition::VECCALC:
      return "VECCALC";
    case AscendC::TPosition::GM:
      return "GM";
    default:
      return "other";
  }
}

}  // namespace ascendc_sim

namespace AscendC {

template <typename T>
class LocalTensor {
 public:
  using PrimType = T;
  LocalTensor() = default;

  // Number of elements of T the tensor spans.
  uint32_t GetSize() const { return size_; }

  LocalTensor operator[](uint32_t offset) const {
    if (offset > size_) {
      ascendc_sim::Fail(ascendc_sim::Str("LocalTensor[", offset, "]: offset past the end of a tensor of ", size_,
                                         " elements (", Owner(), ")"));
    }
    LocalTensor t = *this;
    t.byteOffset_ += offset * uint32_t(sizeof(T));
    t.size_ -= offset;
    return t;
  }

  T GetValue(uint32_t index) const {
    const T* p = Access(uint64_t(index) + 1, "LocalTensor::GetValue", false);
    ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kS);  // ordered against the other pipes by the compiler
    return p[index];
  }

  void SetValue(uint32_t index, T value) const {
    T* p = Access(uint64_t(index) + 1, "LocalTensor::SetValue", false);
    ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kS);  // ordered against the other pipes by the compiler
    p[index] = value;
  }

  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    LocalTensor<U> t;
    t.slot_ = slot_;
    t.generation_ = generation_;
    t.byteOffset_ = byteOffset_;
    t.size_ = uint32_t(uint64_t(size_) * sizeof(T) / sizeof(U));
    return t;
  }

  // ---- simulator internals ----

  // Pointer to the first element after checking that `count` elements from it
  // may be used now by instruction `api`.
  T* Access(uint64_t count, const char* api, bool needAligned) const {
    using ascendc_sim::Fail;
    using ascendc_sim::Str;
    using State = ascendc_sim::UbSlot::State;
    if (slot_ == nullptr) Fail(Str(api, ": LocalTensor is not bound to any buffer (default-constructed)"));
    if (slot_->generation != generation_ || slot_->state == State::kFree) {
      Fail(Str(api, ": LocalTensor used after FreeTensor (", Owner(), ")"));
    }
    if (slot_->state == State::kEnqueued) {
      Fail(Str(api, ": LocalTensor used while it is in a queue (EnQue'd and not yet DeQue'd; ", Owner(), ")"));
    }
    if (count > size_) {
      Fail(Str(api, ": ", count, " elements of ", ascendc_sim::TypeName<T>::value, " requested but the LocalTensor has ",
               size_, " (", Owner(), ")"));
    }
    const uint32_t addr = UbAddress();
    if (needAligned && addr % ascendc_sim::kUbBlockBytes != 0) {
      Fail(Str(api, ": LocalTensor start address UB+", addr, " is not 32-byte aligned (", Owner(), ")"));
    }
    auto& core = ascendc_sim::CurrentCore(api);
    return reinterpret_cast<T*>(core.ub.data() + addr);
  }

  // Instruction #n on pipe `p` reads or writes `count` elements from the start (pipes.h).
  void Use(ascendc_sim::Pipe p, uint64_t n, const char* api, uint64_t count, bool write) const {
    ascendc_sim::UseUb(p, n, api, UbAddress(), count * sizeof(T), write, &slot_->owner);
  }

  uint32_t UbAddress() const { return slot_->ubOffset + byteOffset_; }
  uint64_t Bytes() const { return uint64_t(size_) * sizeof(T); }
  std::string Owner() const {
    return slot_ == nullptr ? std::string("unbound")
                            : ascendc_sim::Str(slot_->owner, ", UB+", UbAddress());
  }

  ascendc_sim::UbSlot* slot_ = nullptr;
  uint64_t generation_ = 0;
  uint32_t byteOffset_ = 0;
  uint32_t size_ = 0;
};

template <typename T>
class GlobalTensor {
 public:
  using PrimType = T;
  GlobalTensor() = default;

  void SetGlobalBuffer(T* buffer, uint64_t bufferSize) {
    if (bufferSize > 0) {
      ascendc_sim::CheckGm(buffer, bufferSize * sizeof(T), "GlobalTensor::SetGlobalBuffer");
    }
    ptr_ = buffer;
    size_ = bufferSize;
    sized_ = true;
  }
  void SetGlobalBuffer(T* buffer) {
    ptr_ = buffer;
    sized_ = false;
  }

  GlobalTensor operator[](uint64_t offset) const {
    if (sized_ && offset > size_) {
      ascendc_sim::Fail(ascendc_sim::Str("GlobalTensor[", offset, "]: offset past the end of a buffer of ", size_,
                                         " elements"));
    }
    GlobalTensor t = *this;
    t.ptr_ = ptr_ + offset;
    if (sized_) t.size_ = size_ - offset;
    return t;
  }

  // Scalar GM access goes through the core's data cache (core.h, DcacheRead /
  // DcacheWrite): a store reaches GM only when DataCacheCleanAndInvalid writes
  // its line back.
  T GetValue(uint64_t offset) const {
    const T* p = Access(offset + 1, "GlobalTensor::GetValue");
    T v;
    ascendc_sim::DcacheRead(&v, p + offset, sizeof(T), "GlobalTensor::GetValue");
    return v;
  }

  void SetValue(uint64_t offset, T value) const {
    Access(offset + 1, "GlobalTensor::SetValue");
    ascendc_sim::CheckGm(ptr_ + offset, sizeof(T), "GlobalTensor::SetValue", /*write=*/true);
    ascendc_sim::DcacheWrite(ptr_ + offset, &value, sizeof(T));
  }

  uint64_t GetSize() const { return size_; }
  T* GetPhyAddr() const { return ptr_; }

  // ---- simulator internals ----
  T* Access(uint64_t count, const char* api) const {
    if (ptr_ == nullptr) ascendc_sim::Fail(ascendc_sim::Str(api, ": GlobalTensor has no buffer (SetGlobalBuffer not called)"));
    if (sized_ && count > size_) {
      ascendc_sim::Fail(ascendc_sim::Str(api, ": ", count, " elements requested from a GlobalTensor of ", size_,
                                         " elements (SetGlobalBuffer size)"));
    }
    if (count > (uint64_t(1) << 48)) ascendc_sim::Fail(ascendc_sim::Str(api, ": ", count, " elements is not an address range"));
    ascendc_sim::CheckGm(ptr_, count * sizeof(T), api);
    return ptr_;
  }

  T* ptr_ = nullptr;
  uint64_t size_ = 0;
  bool sized_ = false;
};

// The scalar unit's GM accesses (GlobalTensor::GetValue / SetValue) go through a
// per-core Data Cache of 64-byte lines, which the simulator models (core.h,
// "The scalar unit's Data Cache"): SetValue results reach GM only when
// DataCacheCleanAndInvalid writes their line out, and what is still dirty when
// the core ends is reported as a lost write. SINGLE_CACHE_LINE acts from dst's
// address to the next 64-byte boundary only (the devkit page); ENTIRE_DATA_CACHE
// on every line of the core. dcciDst is accepted but not modelled: every form
// keeps the cache coherent with GM (CACHELINE_OUT; the UB form does not exist here).
// Both forms: with dcciDst (Atlas A2), without (also Atlas inference AI Core).
enum class CacheLine : uint8_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint8_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

template <typename T, CacheLine entireType>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
  const T* p = dst.Access(0, "DataCacheCleanAndInvalid");
  ascendc_sim::DcacheCleanAndInvalidate(p, entireType == CacheLine::ENTIRE_DATA_CACHE);
}
template <typename T, CacheLine entireType, DcciDst dcciDst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
  DataCacheCleanAndInvalid<T, entireType>(dst);
}

class TPipe;

namespace detail {
inline TPipe*& CurrentPipe() {
  static TPipe* pipe = nullptr;
  return pipe;
}
inline int& QueueCounter() {
  static int n = 0;
  return n;
}
}  // namespace detail

// Buffers of one queue or TBuf. The slots are owned here so LocalTensors can
// point at them for the whole life of the kernel object.
class QueueBase {
 public:
  QueueBase() = default;
  QueueBase(const QueueBase&) = delete;
  QueueBase& operator=(const QueueBase&) = delete;

  virtual ~QueueBase() {
    // Never throw from a destructor: record leaks on the core; the launch reports them.
    if (std::uncaught_exceptions() > 0 || ascendc_sim::Device().core == nullptr) return;
    for (const auto& s : slots_) {
      if (s->state == ascendc_sim::UbSlot::State::kAllocated) {
        ascendc_sim::Device().core->leaks.push_back(ascendc_sim::Str(
            "tensor never freed: a buffer of ", s->owner, " (UB+", s->ubOffset,
            ") was allocated with AllocTensor (or DeQue'd) and never given back with FreeTensor"));
      } else if (s->state == ascendc_sim::UbSlot::State::kEnqueued) {
        ascendc_sim::Device().core->leaks.push_back(ascendc_sim::Str(
            "tensor never freed: a buffer of ", s->owner, " (UB+", s->ubOffset,
            ") was EnQue'd and never DeQue'd and freed"));
      }
    }
  }

  bool Initialized() const { return !slots_.empty(); }
  std::vector<std::unique_ptr<ascendc_sim::UbSlot>> slots_;
  std::string name_;
};

template <TPosition pos, int32_t depth>
class TQue : public QueueBase {
 public:
  static_assert(depth >= 1, "TQue depth must be at least 1");

  template <typename T>
  LocalTensor<T> AllocTensor() {
    using State = ascendc_sim::UbSlot::State;
    CheckInit("TQue::AllocTensor");
    for (auto& s : slots_) {
      if (s->state == State::kFree) {
        s->state = State::kAllocated;
        // Fresh tensors hold whatever the UB had: make that visible as NaN.
        auto& core = ascendc_sim::CurrentCore("TQue::AllocTensor");
        std::memset(core.ub.data() + s->ubOffset, ascendc_sim::kGarbageByte, s->bytes);
        ascendc_sim::HandOverUb(s->ubOffset, s->bytes, /*reuse=*/true);  // FreeTensor -> AllocTensor
        LocalTensor<T> t;
        t.slot_ = s.get();
        t.generation_ = s->generation;
        t.byteOffset_ = 0;
        t.size_ = uint32_t(s->bytes / sizeof(T));
        return t;
      }
    }
    ascendc_sim::Fail(ascendc_sim::Str("TQue::AllocTensor: all ", slots_.size(), " buffers of ", name_,
                                       " are in use (allocated and not yet freed with FreeTensor)"));
  }

  template <typename T>
  bool EnQue(const LocalTensor<T>& tensor) {
    using State = ascendc_sim::UbSlot::State;
    CheckInit("TQue::EnQue");
    ascendc_sim::UbSlot* s = OwnSlot(tensor.slot_, tensor.generation_, "TQue::EnQue");
    if (s->state == State::kEnqueued) ascendc_sim::Fail(ascendc_sim::Str("TQue::EnQue: tensor is already in ", name_));
    if (int32_t(fifo_.size()) >= depth) {
      ascendc_sim::Fail(ascendc_sim::Str("TQue::EnQue: ", name_, " already holds ", depth,
                                         " tensor(s), its depth; DeQue before enqueuing more"));
    }
    s->state = State::kEnqueued;
    fifo_.push_back(s);
    return true;
  }

  template <typename T>
  LocalTensor<T> DeQue() {
    using State = ascendc_sim::UbSlot::State;
    CheckInit("TQue::DeQue");
    if (fifo_.empty()) {
      ascendc_sim::Fail(ascendc_sim::Str("TQue::DeQue on an empty queue (", name_,
                                         "): nothing was EnQue'd since the last DeQue"));
    }
    ascendc_sim::UbSlot* s = fifo_.front();
    fifo_.pop_front();
    s->state = State::kAllocated;
    ascendc_sim::HandOverUb(s->ubOffset, s->bytes, /*reuse=*/false);  // EnQue -> DeQue
    LocalTensor<T> t;
    t.slot_ = s;
    t.generation_ = s->generation;
    t.size_ = uint32_t(s->bytes / sizeof(T));
    return t;
  }

  template <typename T>
  void FreeTensor(LocalTensor<T>& tensor) {
    using State = ascendc_sim::UbSlot::State;
    CheckInit("TQue::FreeTensor");
    ascendc_sim::UbSlot* s = OwnSlot(tensor.slot_, tensor.generation_, "TQue::FreeTensor");
    if (s->state == State::kEnqueued) {
      ascendc_sim::Fail(ascendc_sim::Str("TQue::FreeTensor: tensor is still in ", name_, " (DeQue it first)"));
    }
    s->state = State::kFree;
    ++s->generation;
  }

  bool VacantInQue() const { return int32_t(fifo_.size()) < depth; }
  bool HasTensorInQue() const { return !fifo_.empty(); }
  int32_t GetTensorCountInQue() const { return int32_t(fifo_.size()); }

 private:
  void CheckInit(const char* api) const {
    if (!Initialized()) ascendc_sim::Fail(ascendc_sim::Str(api, ": queue has no buffers (TPipe::InitBuffer not called)"));
  }

  ascendc_sim::UbSlot* OwnSlot(ascendc_sim::UbSlot* slot, uint64_t generation, const char* api) {
    using State = ascendc_sim::UbSlot::State;
    for (auto& s : slots_) {
      if (s.get() == slot) {
        if (s->state == State::kFree || s->generation != generation) {
          ascendc_sim::Fail(ascendc_sim::Str(api, ": tensor of ", name_,
                                             " is not allocated (already freed, or never allocated)"));
        }
        return s.get();
      }
    }
    ascendc_sim::Fail(ascendc_sim::Str(api, ": tensor was not allocated from ", name_,
                                       slot == nullptr ? " (it is not bound to any buffer)"
                                                       : ascendc_sim::Str(" (it belongs to ", slot->owner, ")")));
  }

  std::deque<ascendc_sim::UbSlot*> fifo_;
};

template <TPosition pos = TPosition::VECCALC>
class TBuf : public QueueBase {
 public:
  template <typename T>
  LocalTensor<T> Get() {
    if (!Initialized()) ascendc_sim::Fail("TBuf::Get: buffer has no memory (TPipe::InitBuffer not called)");
    LocalTensor<T> t;
    t.slot_ = slots_[0].get();
    t.generation_ = slots_[0]->generation;
    t.size_ = uint32_t(slots_[0]->bytes / sizeof(T));
    return t;
  }
  template <typename T>
  LocalTensor<T> Get(uint32_t len) {
    LocalTensor<T> t = Get<T>();
    if (len > t.size_) {
      ascendc_sim::Fail(ascendc_sim::Str("TBuf::Get(", len, "): the buffer holds only ", t.size_, " elements of ",
                                         ascendc_sim::TypeName<T>::value));
    }
    t.size_ = len;
    return t;
  }
};

class TPipe {
 public:
  TPipe() {
    auto& core = ascendc_sim::CurrentCore("TPipe");
    start_ = core.ubUsed;
    ++core.livePipes;
    if (core.livePipes > 1) ascendc_sim::Fail("TPipe: a second TPipe while one is alive (one TPipe per kernel)");
    detail::CurrentPipe() = this;
  }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;
  ~TPipe() {
    if (ascendc_sim::Device().core != nullptr) {
      ascendc_sim::Device().core->ubUsed = start_;
      --ascendc_sim::Device().core->livePipes;
    }
    if (detail::CurrentPipe() == this) detail::CurrentPipe() = nullptr;
  }

  template <TPosition pos, int32_t depth>
  bool InitBuffer(TQue<pos, depth>& que, uint8_t num, uint32_t len) {
    Allocate(que, num, len, ascendc_sim::Str("TQue<", ascendc_sim::PositionName(pos), ", ", depth, "> #",
                                              ++detail::QueueCounter()),
             ascendc_sim::UbSlot::State::kFree);
    return true;
  }

  template <TPosition pos>
  bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
    Allocate(buf, 1, len, ascendc_sim::Str("TBuf<", ascendc_sim::PositionName(pos), "> #", ++detail::QueueCounter()),
             ascendc_sim::UbSlot::State::kCalc);
    return true;
  }

  TEventID FetchEventID(HardEvent /*event*/) { return 0; }
  void Destroy() {}
  void Reset() {}

 private:
  void Allocate(QueueBase& q, uint32_t num, uint32_t len, std::string name, ascendc_sim::UbSlot::State state) {
    using ascendc_sim::Fail;
    using ascendc_sim::Str;
    auto& core = ascendc_sim::CurrentCore("TPipe::InitBuffer");
    if (q.Initialized()) Fail(Str("TPipe::InitBuffer: ", name, " was already given buffers"));
    if (num == 0 || len == 0) Fail(Str("TPipe::InitBuffer: ", name, " asks for ", num, " buffers of ", len, " bytes"));
    const uint64_t each = (uint64_t(len) + ascendc_sim::kUbBlockBytes - 1) / ascendc_sim::kUbBlockBytes *
                          ascendc_sim::kUbBlockBytes;
    const uint64_t need = each * num;
    const uint64_t capacity = core.ub.size();
    if (core.ubUsed + need > capacity) {
      Fail(Str("UB overflow: TPipe::InitBuffer of ", name, " requests ", need, " bytes (", num, " x ", each,
               ") at UB offset ", core.ubUsed, " but the Unified Buffer has ", capacity, " bytes (",
               capacity - core.ubUsed, " available)"));
    }
    q.name_ = name;
    for (uint32_t i = 0; i < num; ++i) {
      auto s = std::make_unique<ascendc_sim::UbSlot>();
      s->ubOffset = uint32_t(core.ubUsed + i * each);
      s->bytes = uint32_t(each);
      s->state = state;
      s->owner = name;
      q.slots_.push_back(std::move(s));
    }
    core.ubUsed = uint32_t(core.ubUsed + need);
  }

  uint32_t start_ = 0;
};

inline TPipe* GetTPipePtr() {
  TPipe* p = detail::CurrentPipe();
  if (p == nullptr) ascendc_sim::Fail("GetTPipePtr: no TPipe is alive");
  return p;
}

}  // namespace AscendC

#endif  // ASCENDC_SIM_TENSOR_H_
