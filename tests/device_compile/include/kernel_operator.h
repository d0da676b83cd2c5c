// Declaration-only stand-in for CANN's kernel_operator.h, used ONLY by
// tests/test_device_compile.py to compile the Ascend C kernels and the device
// branch of their tiling headers the way the device compile sees them: no
// OP_EXT_ASCEND_SIM, no host headers. The test compiles with -nostdinc and
// -nostdinc++, so everything a kernel may rely on must come from here (as on
// the device, where the integer types, half and bfloat16_t come with
// kernel_operator.h) -- a kernel or tiling header that includes <cstdint>,
// <vector>, ... fails to compile, and so does one that uses a type before it
// has included kernel_operator.h.
//
// It declares just the Ascend C API our kernels use, with CANN 8's signatures
// (docs/ascend.md lists it). Declarations only: nothing is ever linked or run.
// Add a declaration here when a kernel starts using a new API (the simulator
// must gain it too).
#ifndef OP_EXT_TEST_DEVICE_KERNEL_OPERATOR_H_
#define OP_EXT_TEST_DEVICE_KERNEL_OPERATOR_H_

// Fixed-width integers from the compiler's predefined macros: no <cstdint>.
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __SIZE_TYPE__ size_t;

#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR __gm__ uint8_t*

struct half {
  half() = default;
  half(float v);   // NOLINT(runtime/explicit)
  half(double v);  // NOLINT(runtime/explicit)
  half(int v);     // NOLINT(runtime/explicit)
  operator float() const;
  uint16_t bits;
};
#if !defined(__CCE_AICORE__) || __CCE_AICORE__ >= 220
struct bfloat16_t {
  bfloat16_t() = default;
  bfloat16_t(float v);   // NOLINT(runtime/explicit)
  bfloat16_t(double v);  // NOLINT(runtime/explicit)
  bfloat16_t(int v);     // NOLINT(runtime/explicit)
  operator float() const;
  uint16_t bits;
};
#endif

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };
enum event_t : int32_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM, SPM, SHM, TSCM, MAX };
using QuePosition = TPosition;
enum class HardEvent : uint8_t { MTE2_V, V_MTE2, MTE3_V, V_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MAX };
enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };
using TEventID = int8_t;

template <typename T, typename U>
struct IsSameType {
  static constexpr bool value = false;
};
template <typename T>
struct IsSameType<T, T> {
  static constexpr bool value = true;
};

template <HardEvent event>
void SetFlag(int32_t eventID);
template <HardEvent event>
void WaitFlag(int32_t eventID);
template <pipe_t pipe = PIPE_ALL>
void PipeBarrier();
int64_t GetBlockIdx();
int64_t GetBlockNum();

template <typename T>
class LocalTensor {
 public:
  LocalTensor operator[](uint32_t offset) const;
  T GetValue(uint32_t index) const;
  void SetValue(uint32_t index, T value) const;
  uint32_t GetSize() const;
  template <typename U>
  LocalTensor<U> ReinterpretCast() const;
};

template <typename T>
class GlobalTensor {
 public:
  void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize);
  void SetGlobalBuffer(__gm__ T* buffer);
  GlobalTensor operator[](uint64_t offset) const;
  T GetValue(uint64_t offset) const;
  void SetValue(uint64_t offset, T value) const;
  uint64_t GetSize() const;
  __gm__ T* GetPhyAddr() const;
};

// Both prototypes exist on Atlas A2; Atlas inference AI Core (310P) has only the
// one without dcciDst (DataCacheCleanAndInvalid API page, product table).
enum class CacheLine : uint8_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
template <typename T, CacheLine entireType>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst);

template <TPosition pos, int32_t depth>
class TQue {
 public:
  template <typename T>
  LocalTensor<T> AllocTensor();
  template <typename T>
  bool EnQue(const LocalTensor<T>& tensor);
  template <typename T>
  LocalTensor<T> DeQue();
  template <typename T>
  void FreeTensor(LocalTensor<T>& tensor);
  bool VacantInQue() const;
  bool HasTensorInQue() const;
  int32_t GetTensorCountInQue() const;
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
 public:
  template <typename T>
  LocalTensor<T> Get();
  template <typename T>
  LocalTensor<T> Get(uint32_t len);
};

class TPipe {
 public:
  TPipe();
  template <TPosition pos, int32_t depth>
  bool InitBuffer(TQue<pos, depth>& que, uint8_t num, uint32_t len);
  template <TPosition pos>
  bool InitBuffer(TBuf<pos>& buf, uint32_t len);
  TEventID FetchEventID(HardEvent event);
  void Destroy();
};
TPipe* GetTPipePtr();

struct DataCopyExtParams {
  DataCopyExtParams();
  DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn);
  uint16_t blockCount;
  uint32_t blockLen;
  uint32_t srcStride;
  uint32_t dstStride;
  uint32_t rsv;
};

template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams();
  DataCopyPadExtParams(bool isPadValue, uint8_t leftPadValue, uint8_t rightPadValue, T padValue);
  bool isPad;
  uint8_t leftPadding;
  uint8_t rightPadding;
  T paddingValue;
};

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count);
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count);
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count);
#if !defined(__CCE_AICORE__) || __CCE_AICORE__ >= 220
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& params,
                 const DataCopyPadExtParams<T>& padParams);
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& params);
#endif

#define OP_EXT_STANDIN_BINARY(NAME)                                                                  \
  template <typename T>                                                                             \
  void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,      \
            const int32_t& count);
OP_EXT_STANDIN_BINARY(Add)
OP_EXT_STANDIN_BINARY(Sub)
OP_EXT_STANDIN_BINARY(Mul)
OP_EXT_STANDIN_BINARY(Div)
OP_EXT_STANDIN_BINARY(Max)
OP_EXT_STANDIN_BINARY(Min)
#undef OP_EXT_STANDIN_BINARY

#define OP_EXT_STANDIN_SCALAR(NAME) \
  template <typename T>             \
  void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count);
OP_EXT_STANDIN_SCALAR(Adds)
OP_EXT_STANDIN_SCALAR(Muls)
OP_EXT_STANDIN_SCALAR(Maxs)
OP_EXT_STANDIN_SCALAR(Mins)
#undef OP_EXT_STANDIN_SCALAR

#define OP_EXT_STANDIN_UNARY(NAME) \
  template <typename T>            \
  void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count);
OP_EXT_STANDIN_UNARY(Exp)
OP_EXT_STANDIN_UNARY(Ln)
OP_EXT_STANDIN_UNARY(Abs)
OP_EXT_STANDIN_UNARY(Sqrt)
OP_EXT_STANDIN_UNARY(Rsqrt)
OP_EXT_STANDIN_UNARY(Reciprocal)
OP_EXT_STANDIN_UNARY(Relu)
#undef OP_EXT_STANDIN_UNARY

template <typename T>
void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count);
template <typename T>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
               const int32_t count);
template <typename T>
void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
               const int32_t count, bool calIndex = false);
template <typename T1, typename T2>
void Cast(const LocalTensor<T1>& dst, const LocalTensor<T2>& src, const RoundMode& roundMode, const uint32_t count);

}  // namespace AscendC

#endif  // OP_EXT_TEST_DEVICE_KERNEL_OPERATOR_H_
