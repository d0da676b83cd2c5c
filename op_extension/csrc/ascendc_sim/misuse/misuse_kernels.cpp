// Small Ascend C kernels with one planted mistake each, to show that the
// simulator reports the mistake (tests/test_ascend_sim.py calls them through
// op_extension._ascend_sim._run_misuse). "clean" has no mistake: the control.
//
// Each kernel copies 64 floats from `src` to `dst` (both 256 bytes of device
// memory) the way a real kernel would, except for the one line marked MISTAKE.
#include <cmath>
#include <cstring>
#include <string>

#include "acl/acl.h"
#include "ascendc_sim/launch.h"
#include "kernel_operator.h"

using namespace AscendC;

namespace {

constexpr uint32_t kCount = 64;

struct Buffers {
  GlobalTensor<float> src;
  GlobalTensor<float> dst;
};

Buffers Bind(GM_ADDR src, GM_ADDR dst) {
  Buffers b;
  b.src.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(src), kCount);
  b.dst.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(dst), kCount);
  return b;
}

// Hands `t` from the pipe that wrote it to the next one (EnQue, then DeQue): the
// order a kernel needs between DataCopy in, vector instructions and DataCopy out.
template <typename Que>
LocalTensor<float> HandOver(Que& que, const LocalTensor<float>& t) {
  que.EnQue(t);
  return que.template DeQue<float>();
}

// Correct reference kernel: copy in, copy out through one queue.
void Clean(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  que.EnQue(t);
  LocalTensor<float> u = que.DeQue<float>();
  DataCopy(b.dst, u, kCount);
  que.FreeTensor(u);
}

void UbOverflow(GM_ADDR, GM_ADDR) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> que;
  // MISTAKE: two buffers of 160 KiB do not fit in the UB of any SoC we model (192 / 256 KiB).
  pipe.InitBuffer(que, 2, 160 * 1024);
}

void MisalignedCopyLength(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, 5);  // MISTAKE: 20 bytes, not a multiple of 32 (needs DataCopyPad)
  que.FreeTensor(t);
}

void MisalignedUbAddress(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t[3], b.src, 8);  // MISTAKE: UB destination 12 bytes into the buffer
  que.FreeTensor(t);
}

void DeQueEmpty(GM_ADDR, GM_ADDR) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> que;
  pipe.InitBuffer(que, 2, kCount * sizeof(float));
  LocalTensor<float> t = que.DeQue<float>();  // MISTAKE: nothing was EnQue'd
  que.FreeTensor(t);
}

void NeverFreed(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  // MISTAKE: no que.FreeTensor(t)
}

void AllocPastDepth(GM_ADDR, GM_ADDR) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> que;
  pipe.InitBuffer(que, 2, kCount * sizeof(float));
  LocalTensor<float> a = que.AllocTensor<float>();
  LocalTensor<float> b = que.AllocTensor<float>();
  LocalTensor<float> c = que.AllocTensor<float>();  // MISTAKE: only two buffers
  que.FreeTensor(a);
  que.FreeTensor(b);
  que.FreeTensor(c);
}

void FreeForeignTensor(GM_ADDR, GM_ADDR) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> in;
  TQue<TPosition::VECOUT, 1> out;
  pipe.InitBuffer(in, 1, kCount * sizeof(float));
  pipe.InitBuffer(out, 1, kCount * sizeof(float));
  LocalTensor<float> t = in.AllocTensor<float>();
  out.FreeTensor(t);  // MISTAKE: t belongs to `in`
}

void UseAfterFree(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  que.FreeTensor(t);
  DataCopy(b.dst, t, kCount);  // MISTAKE: t was freed
}

void LocalOutOfBounds(GM_ADDR, GM_ADDR) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, kCount * sizeof(float));
  LocalTensor<float> t = buf.Get<float>();
  t.SetValue(kCount, 1.0f);  // MISTAKE: one past the end
}

void GlobalOutOfBounds(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, 2 * kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, 2 * kCount);  // MISTAKE: src holds only kCount floats
  que.FreeTensor(t);
}

void CoreRace(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, 8 * sizeof(float));
  LocalTensor<float> t = buf.Get<float>();
  Duplicate(t, static_cast<float>(GetBlockIdx()), 8);
  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
  DataCopy(b.dst, t, 8);  // MISTAKE: every core writes its own id to the same 8 floats
}

void DataCopyPadCall(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopyExtParams params{1, 5 * sizeof(float), 0, 0, 0};
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad(t, b.src, params, pad);  // fine on Ascend910B; Ascend310P has no DataCopyPad
  t = HandOver(que, t);
  DataCopyPad(b.dst, t, params);
  que.FreeTensor(t);
}

void PaddingRead(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopyExtParams params{1, 5 * sizeof(float), 0, 0, 0};
  DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
  DataCopyPad(t, b.src, params, pad);
  t = HandOver(que, t);
  // MISTAKE: computes on all 8 floats of the block; 3 are DataCopyPad's undefined padding
  Muls(t, t, 2.0f, 8);
  t = HandOver(que, t);
  DataCopy(b.dst, t, 8);
  que.FreeTensor(t);
}

// ---- API rules of issue 12 ------------------------------------------------------

// ReduceMax of 320 floats (5 repeats) with a work tensor of `workFloats`.
void ReduceMaxWithWork(uint32_t workFloats, bool calIndex) {
  constexpr int32_t n = 320;
  TPipe pipe;
  TBuf<TPosition::VECCALC> data, work, stat;
  pipe.InitBuffer(data, n * sizeof(float));
  pipe.InitBuffer(work, workFloats * sizeof(float));
  pipe.InitBuffer(stat, 32);
  LocalTensor<float> x = data.Get<float>();
  Duplicate(x, 1.0f, n);
  PipeBarrier<PIPE_V>();
  ReduceMax(stat.Get<float>(), x, work.Get<float>(), n, calIndex);
}

// MISTAKE: ReduceSum's size; ReduceMax writes 2 x 5 floats.
void ReduceMaxSmallWork(GM_ADDR, GM_ADDR) { ReduceMaxWithWork(8, false); }
// MISTAKE: 16 floats hold the first round's pairs (enough without the index), but
// with calIndex the second round's pair is kept after them: 16 + 8.
void ReduceMaxIndexSmallWork(GM_ADDR, GM_ADDR) { ReduceMaxWithWork(16, true); }

void ReduceWorkOverlapsSource(GM_ADDR, GM_ADDR) {
  constexpr int32_t n = 128;
  TPipe pipe;
  TBuf<TPosition::VECCALC> data, stat;
  pipe.InitBuffer(data, n * sizeof(float));
  pipe.InitBuffer(stat, 32);
  LocalTensor<float> x = data.Get<float>();
  Duplicate(x, 1.0f, n);
  PipeBarrier<PIPE_V>();
  ReduceMax(stat.Get<float>(), x, x[64], n);  // MISTAKE: work inside the source, past its start
}

void ReduceSumSmallWork(GM_ADDR, GM_ADDR) {
  constexpr int32_t n = 1024;
  TPipe pipe;
  TBuf<TPosition::VECCALC> data, work, stat;
  pipe.InitBuffer(data, n * sizeof(float));
  // Fine on Ascend910B (its first-n ReduceSum is one vcadd, no work tensor);
  // Ascend310P writes one partial per repeat: 16 floats.
  pipe.InitBuffer(work, 8 * sizeof(float));
  pipe.InitBuffer(stat, 32);
  LocalTensor<float> x = data.Get<float>();
  Duplicate(x, 1.0f, n);
  PipeBarrier<PIPE_V>();
  ReduceSum(stat.Get<float>(), x, work.Get<float>(), n);
}

// Copies src to dst through a half (or bfloat16_t) tensor, narrowing with `mode`.
template <typename Narrow>
void CastThrough(GM_ADDR src, GM_ADDR dst, RoundMode mode) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  TBuf<TPosition::VECCALC> narrow;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  pipe.InitBuffer(narrow, kCount * sizeof(Narrow));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  que.EnQue(t);
  t = que.DeQue<float>();
  LocalTensor<Narrow> h = narrow.Get<Narrow>();
  Cast(h, t, mode, kCount);
  PipeBarrier<PIPE_V>();
  Cast(t, h, RoundMode::CAST_NONE, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

// MISTAKE on Ascend310P: float -> half has CAST_NONE and CAST_ODD only there.
void CastRintToHalf(GM_ADDR src, GM_ADDR dst) { CastThrough<half>(src, dst, RoundMode::CAST_RINT); }
// MISTAKE on Ascend910B: float -> bfloat16_t has no CAST_NONE.
void CastNoneToBf16(GM_ADDR src, GM_ADDR dst) { CastThrough<bfloat16_t>(src, dst, RoundMode::CAST_NONE); }

// dst[i] = 1 / sqrt(src[i] + 1), the shape of a norm's rstd.
void InvSqrtRows(GM_ADDR src, GM_ADDR dst, bool useRsqrt) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  TBuf<TPosition::VECCALC> ones;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  pipe.InitBuffer(ones, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  que.EnQue(t);
  t = que.DeQue<float>();
  Adds(t, t, 1.0f, kCount);
  PipeBarrier<PIPE_V>();
  if (useRsqrt) {
    Rsqrt(t, t, kCount);  // MISTAKE: Rsqrt misses a relative 1e-4 in float (Rsqrt API page)
  } else {
    Sqrt(t, t, kCount);
    LocalTensor<float> one = ones.Get<float>();
    Duplicate(one, 1.0f, kCount);
    PipeBarrier<PIPE_V>();
    Div(t, one, t, kCount);
  }
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

void RsqrtRstd(GM_ADDR src, GM_ADDR dst) { InvSqrtRows(src, dst, true); }
void SqrtDivRstd(GM_ADDR src, GM_ADDR dst) { InvSqrtRows(src, dst, false); }

// Copies src to dst reading `readExtra` floats past src's end and writing
// `writeExtra` past dst's end (each buffer: 256 bytes, plus the 32 bytes of
// padding that the device allocator guarantees behind it -- 8 floats).
void CopyPastEnd(GM_ADDR src, GM_ADDR dst, uint32_t readExtra, uint32_t writeExtra) {
  GlobalTensor<float> in;
  GlobalTensor<float> out;
  in.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(src), kCount + readExtra);
  out.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(dst), kCount + writeExtra);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, (kCount + 16) * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, in, kCount + readExtra);
  que.EnQue(t);
  LocalTensor<float> u = que.DeQue<float>();
  DataCopy(out, u, kCount + writeExtra);
  que.FreeTensor(u);
}

// Not a mistake: one block read from the allocator's padding (the 310P tail scheme).
void ReadInPadding(GM_ADDR src, GM_ADDR dst) { CopyPastEnd(src, dst, 8, 0); }
// MISTAKE: two blocks past the end, beyond the guaranteed padding.
void ReadPastPadding(GM_ADDR src, GM_ADDR dst) { CopyPastEnd(src, dst, 16, 0); }
// MISTAKE: a write into the padding (another tensor may live there).
void WritePastEnd(GM_ADDR src, GM_ADDR dst) { CopyPastEnd(src, dst, 8, 8); }

// ---- The scalar unit's data cache (issue 28) ----------------------------------
// Core 0 alone stores dst[first, first + n) = 2 * src[...] with GlobalTensor::SetValue
// (dst is 512-byte aligned, so element 16 k starts a 64-byte cache line), then
// cleans with DataCacheCleanAndInvalid as `clean` says. The harness checks that
// dst[first, first + n) holds 2 * i afterwards.
enum class CleanMode { kNone, kFirstAndLast, kEveryLine, kEntireCache };

void StoreDoubled(GM_ADDR src, GM_ADDR dst, uint32_t first, uint32_t n, CleanMode clean) {
  if (GetBlockIdx() != 0) return;
  Buffers b = Bind(src, dst);
  GlobalTensor<float> out = b.dst[first];
  for (uint32_t i = 0; i < n; ++i) out.SetValue(i, 2.0f * b.src.GetValue(first + i));
  if (clean == CleanMode::kFirstAndLast) {
    // MISTAKE (WriteShortTensor before issue 28): a clean covers only its address
    // up to the next 64-byte boundary, so the bytes of the last line before
    // element n - 1 stay in the cache.
    DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(out);
    DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(out[n - 1]);
  } else if (clean == CleanMode::kEveryLine) {
    // Once at the first element, then at the start of every further line.
    constexpr uint32_t kLineElems = 64 / sizeof(float);
    for (uint32_t i = 0; i < n; i = (first + i) / kLineElems * kLineElems + kLineElems - first) {
      DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(out[i]);
    }
  }
  if (clean == CleanMode::kEntireCache) {
    // Every line of the core, whatever dst's address (the devkit's example 4).
    DataCacheCleanAndInvalid<float, CacheLine::ENTIRE_DATA_CACHE>(out[n / 2]);
  }
  // CleanMode::kNone -- MISTAKE: the stores stay in the cache and never reach GM.
}

// 7 floats from element 12: bytes [48, 76), across the line boundary at 64.
void DcacheNoClean(GM_ADDR src, GM_ADDR dst) { StoreDoubled(src, dst, 12, 7, CleanMode::kNone); }
void DcacheCleanFirstLast(GM_ADDR src, GM_ADDR dst) { StoreDoubled(src, dst, 12, 7, CleanMode::kFirstAndLast); }
void DcacheCleanEveryLine(GM_ADDR src, GM_ADDR dst) { StoreDoubled(src, dst, 12, 7, CleanMode::kEveryLine); }
// The same over 40 floats from element 4: three lines, one of them wholly inside.
void DcacheCleanEveryLineLong(GM_ADDR src, GM_ADDR dst) { StoreDoubled(src, dst, 4, 40, CleanMode::kEveryLine); }
void DcacheCleanEntire(GM_ADDR src, GM_ADDR dst) { StoreDoubled(src, dst, 4, 40, CleanMode::kEntireCache); }

// Block kBlock alone writes dst = 2 * src.
template <int64_t kBlock>
void DoubleSrcIntoDst(GM_ADDR src, GM_ADDR dst) {
  if (GetBlockIdx() != kBlock) return;
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  t = HandOver(que, t);
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

// Core 0 reads dst[0] with GetValue (its line is now cached), DataCopies
// 2 * src over dst, then reads dst[1] again: the cached line still holds the old
// value. With `invalidate`, a DataCacheCleanAndInvalid before the second read
// drops the line (the fix).
void ScalarReadAfterDma(GM_ADDR src, GM_ADDR dst, bool invalidate) {
  if (GetBlockIdx() != 0) return;
  Buffers b = Bind(src, dst);
  const float before = b.dst.GetValue(0);
  DoubleSrcIntoDst<0>(src, dst);
  if (invalidate) DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(b.dst);
  const float after = b.dst.GetValue(1);  // MISTAKE without `invalidate`: stale line
  (void)before;
  (void)after;
}

void DcacheStaleRead(GM_ADDR src, GM_ADDR dst) { ScalarReadAfterDma(src, dst, false); }
void DcacheInvalidateBeforeRead(GM_ADDR src, GM_ADDR dst) { ScalarReadAfterDma(src, dst, true); }

// Core 0 stores dst[0] with SetValue, then DataCopies dst's first block into the
// UB: the DMA reads GM, which does not have the store yet.
void DcacheDmaReadsDirty(GM_ADDR src, GM_ADDR dst) {
  if (GetBlockIdx() != 0) return;
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  b.dst.SetValue(0, 0.0f);
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.dst, 8);  // MISTAKE: no DataCacheCleanAndInvalid after the SetValue
  que.FreeTensor(t);
  DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(b.dst);
}

// Each block b stores dst[b * kStride] = 2 * src[b * kStride] with SetValue and
// cleans from that element. A line is written back whole, so two blocks whose
// stores share a line (kStride 1) each put the other's element back to its old
// value: which one lands depends on timing. MISTAKE with kStride 1; the control
// (kStride 16: a line each) must leave dst[16] = 32.
template <uint32_t kStride>
void StoreOnePerCore(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  const uint32_t at = static_cast<uint32_t>(GetBlockIdx()) * kStride;
  b.dst.SetValue(at, 2.0f * b.src.GetValue(at));
  DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(b.dst[at]);
}

// ---- The data cache across launches and cores (issue 28) ----------------------
// Three launches over the same buffers (the runner's `fill` and `rewrite`, then
// the kernel): block `fillBlock` reads dst[0] with GetValue, leaving dst's first
// line in its core's cache; a second kernel DataCopies 2 * src over dst; then
// block 0 reads dst[1]. The devkit does not say that a kernel starts with an
// empty data cache, and the runtime may place block 0 on the core that ran the
// first kernel's block 1: without `invalidate` the last load may return i, not 2 i.
template <int64_t kBlock>
void ScalarReadDst0(GM_ADDR src, GM_ADDR dst) {
  if (GetBlockIdx() != kBlock) return;
  Buffers b = Bind(src, dst);
  (void)b.dst.GetValue(0);
}

void ScalarReadDst1(GM_ADDR src, GM_ADDR dst, bool invalidate) {
  if (GetBlockIdx() != 0) return;
  Buffers b = Bind(src, dst);
  if (invalidate) DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE>(b.dst);
  const float v = b.dst.GetValue(1);  // MISTAKE without `invalidate`: the line an earlier kernel left
  (void)v;
}

void DcacheCarriedStaleRead(GM_ADDR src, GM_ADDR dst) { ScalarReadDst1(src, dst, false); }
void DcacheCarriedInvalidateBeforeRead(GM_ADDR src, GM_ADDR dst) { ScalarReadDst1(src, dst, true); }

// Block kBlock alone DataCopies dst into its UB.
template <int64_t kBlock>
void ReadDstOn(GM_ADDR src, GM_ADDR dst) {
  if (GetBlockIdx() != kBlock) return;
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.dst, kCount);
  que.FreeTensor(t);
}

// One launch, one core writing dst (2 * src) and the other DataCopying dst into
// its UB. MISTAKE: nothing orders the two cores (no kernel here synchronises
// cores), so the read may see dst before or after the write. The simulator runs
// block 0 first: it must catch the write after the read as well as the read
// after the write.
void CrossCoreReadAfterWrite(GM_ADDR src, GM_ADDR dst) {
  DoubleSrcIntoDst<0>(src, dst);
  ReadDstOn<1>(src, dst);
}
void CrossCoreWriteAfterRead(GM_ADDR src, GM_ADDR dst) {
  ReadDstOn<0>(src, dst);
  DoubleSrcIntoDst<1>(src, dst);
}

// ---- The order between pipes (issue 28) ---------------------------------------
// Each copies src to dst doubled; `ordered` false leaves out the one line that
// orders two pipes (MISTAKE), true is the control.

// MTE2 -> V: DataCopy into a tensor, then a vector instruction on it.
void Mte2ToV(GM_ADDR src, GM_ADDR dst, bool ordered) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  if (ordered) t = HandOver(que, t);  // MISTAKE without it: Muls may read before the copy lands
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

// V -> MTE3 through a TBuf (no queue): the flag pair (event ID `eventId`) orders them.
void VToMte3(GM_ADDR src, GM_ADDR dst, bool ordered, int32_t eventId = EVENT_ID0) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  TBuf<TPosition::VECCALC> out;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  pipe.InitBuffer(out, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  t = HandOver(que, t);
  LocalTensor<float> y = out.Get<float>();
  Muls(y, t, 2.0f, kCount);
  if (ordered) {
    SetFlag<HardEvent::V_MTE3>(eventId);
    WaitFlag<HardEvent::V_MTE3>(eventId);
  }
  DataCopy(b.dst, y, kCount);  // MISTAKE without the flags: the copy may read y before Muls wrote it
  que.FreeTensor(t);
}

// WAR, V then MTE2: two halves through one TBuf; the second DataCopy in
// overwrites what Muls of the first half still reads.
void Mte2OverwritesVRead(GM_ADDR src, GM_ADDR dst, bool ordered) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TBuf<TPosition::VECCALC> in;
  TQue<TPosition::VECOUT, 1> outQue;
  constexpr uint32_t kHalf = kCount / 2;
  pipe.InitBuffer(in, kHalf * sizeof(float));
  pipe.InitBuffer(outQue, 1, kHalf * sizeof(float));
  LocalTensor<float> x = in.Get<float>();
  for (uint32_t h = 0; h < 2; ++h) {
    // MISTAKE (h == 1, without the flags): MTE2 rewrites x while Muls of h == 0 may still read it.
    if (h == 1 && ordered) {
      SetFlag<HardEvent::V_MTE2>(EVENT_ID1);
      WaitFlag<HardEvent::V_MTE2>(EVENT_ID1);
    }
    DataCopy(x, b.src[h * kHalf], kHalf);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    LocalTensor<float> y = outQue.AllocTensor<float>();
    Muls(y, x, 2.0f, kHalf);
    y = HandOver(outQue, y);
    DataCopy(b.dst[h * kHalf], y, kHalf);
    outQue.FreeTensor(y);
  }
}

// V -> V: Adds then Muls on the same bytes. NPU arch 2002 (Ascend310P) needs
// PipeBarrier<PIPE_V> between; on 2201 (Ascend910B) the compiler inserts it.
void VectorChain(GM_ADDR src, GM_ADDR dst, bool ordered) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  t = HandOver(que, t);
  Adds(t, t, 0.0f, kCount);
  if (ordered) PipeBarrier<PIPE_V>();  // MISTAKE without it on Ascend310P
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

// MTE3 -> MTE3 on overlapping GM: dst[0, 48) then dst[16, 64), the second
// rewriting [16, 48) with the same values (the 310P tail scheme).
void OverlappingGmWrites(GM_ADDR src, GM_ADDR dst, bool ordered) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  t = HandOver(que, t);
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, 48);
  if (ordered) PipeBarrier<PIPE_MTE3>();  // MISTAKE without it: the two writes may land in either order
  DataCopy(b.dst[16], t[16], 48);
  que.FreeTensor(t);
}

// WaitFlag with no SetFlag: on hardware the vector pipe waits forever.
void WaitWithoutSet(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TBuf<TPosition::VECCALC> buf;
  pipe.InitBuffer(buf, kCount * sizeof(float));
  LocalTensor<float> t = buf.Get<float>();
  DataCopy(t, b.src, kCount);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID2);  // MISTAKE: no SetFlag<HardEvent::MTE2_V>(EVENT_ID2) before
  Muls(t, t, 2.0f, kCount);
}

// MTE2 -> MTE2 on overlapping UB: t[0, 48) then t[16, 64), the second rewriting
// t[16, 48) with the same values.
void OverlappingUbWrites(GM_ADDR src, GM_ADDR dst, bool ordered) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, 48);
  if (ordered) PipeBarrier<PIPE_MTE2>();  // MISTAKE without it: the two DMA writes may land in either order
  DataCopy(t[16], b.src[16], 48);
  t = HandOver(que, t);
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  que.FreeTensor(t);
}

// MTE3 -> MTE2 through GM: dst[0, 32) = 2 * src is written, read back, and
// dst[32, 64) = that + 64 written (2 * i again), the way a kernel passes a
// partial result through a workspace.
void GmReadAfterWrite(GM_ADDR src, GM_ADDR dst, bool ordered) {
  constexpr uint32_t kHalf = kCount / 2;
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> in;
  TQue<TPosition::VECOUT, 1> out;
  pipe.InitBuffer(in, 1, kHalf * sizeof(float));
  pipe.InitBuffer(out, 1, kHalf * sizeof(float));
  for (uint32_t pass = 0; pass < 2; ++pass) {
    if (pass == 1 && ordered) {
      SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
      WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
    }
    LocalTensor<float> x = in.AllocTensor<float>();
    // MISTAKE (pass 1, without the flags): the read of dst may overtake pass 0's write of it.
    DataCopy(x, pass == 0 ? b.src : b.dst, kHalf);
    x = HandOver(in, x);
    LocalTensor<float> y = out.AllocTensor<float>();
    if (pass == 0) {
      Muls(y, x, 2.0f, kHalf);
    } else {
      Adds(y, x, float(2 * kHalf), kHalf);
    }
    in.FreeTensor(x);
    y = HandOver(out, y);
    DataCopy(b.dst[pass * kHalf], y, kHalf);
    out.FreeTensor(y);
  }
}

// A flag set for a next tile that never comes: the core ends with it set.
void FlagLeftSet(GM_ADDR src, GM_ADDR dst) {
  Mte2ToV(src, dst, true);
  SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID3);  // MISTAKE: no WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID3)
}

void PipeMte2ToV(GM_ADDR src, GM_ADDR dst) { Mte2ToV(src, dst, false); }
void PipeMte2ToVOrdered(GM_ADDR src, GM_ADDR dst) { Mte2ToV(src, dst, true); }
void PipeVToMte3(GM_ADDR src, GM_ADDR dst) { VToMte3(src, dst, false); }
void PipeVToMte3Ordered(GM_ADDR src, GM_ADDR dst) { VToMte3(src, dst, true); }
void PipeWarMte2(GM_ADDR src, GM_ADDR dst) { Mte2OverwritesVRead(src, dst, false); }
void PipeWarMte2Ordered(GM_ADDR src, GM_ADDR dst) { Mte2OverwritesVRead(src, dst, true); }
void PipeVChain(GM_ADDR src, GM_ADDR dst) { VectorChain(src, dst, false); }
void PipeVChainOrdered(GM_ADDR src, GM_ADDR dst) { VectorChain(src, dst, true); }
void GmOverlap(GM_ADDR src, GM_ADDR dst) { OverlappingGmWrites(src, dst, false); }
void GmOverlapOrdered(GM_ADDR src, GM_ADDR dst) { OverlappingGmWrites(src, dst, true); }
void UbOverlap(GM_ADDR src, GM_ADDR dst) { OverlappingUbWrites(src, dst, false); }
void UbOverlapOrdered(GM_ADDR src, GM_ADDR dst) { OverlappingUbWrites(src, dst, true); }
void GmReadAfterWriteUnordered(GM_ADDR src, GM_ADDR dst) { GmReadAfterWrite(src, dst, false); }
void GmReadAfterWriteOrdered(GM_ADDR src, GM_ADDR dst) { GmReadAfterWrite(src, dst, true); }
// MISTAKE: event IDs are 0-7 (EVENT_ID0..EVENT_ID7).
void EventIdOutOfRange(GM_ADDR src, GM_ADDR dst) { VToMte3(src, dst, true, 8); }

// ---- DataCopyPad parameter ranges and ReduceMax's index (issue 28) -------------

// DataCopyPad of `count` blocks of `len` bytes from src into one tensor.
void PadCopyIn(GM_ADDR src, GM_ADDR dst, uint16_t count, uint32_t len) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopyPad(t, b.src, DataCopyExtParams{count, len, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
  que.FreeTensor(t);
}

// MISTAKE: one row per block, 4096 rows of one float in one call (blockCount is at most 4095).
void DataCopyPadBlockCount(GM_ADDR src, GM_ADDR dst) { PadCopyIn(src, dst, 4096, sizeof(float)); }
// MISTAKE: a row of 2^19 floats (2 MiB) in one block (blockLen is at most 2097151 bytes).
void DataCopyPadBlockLen(GM_ADDR src, GM_ADDR dst) { PadCopyIn(src, dst, 1, (1u << 19) * sizeof(float)); }

// Not a mistake on Atlas A2: a blockCount or blockLen of 0 makes DataCopyPad a
// NOP (a tail of no rows); the harness checks dst holds 2 * src.
void DataCopyPadEmpty(GM_ADDR src, GM_ADDR dst) {
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TQue<TPosition::VECIN, 1> que;
  pipe.InitBuffer(que, 1, kCount * sizeof(float));
  LocalTensor<float> t = que.AllocTensor<float>();
  DataCopy(t, b.src, kCount);
  DataCopyPad(t, b.src[kCount / 2], DataCopyExtParams{0, 4 * sizeof(float), 0, 0, 0},
              DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
  t = HandOver(que, t);
  Muls(t, t, 2.0f, kCount);
  t = HandOver(que, t);
  DataCopy(b.dst, t, kCount);
  DataCopyPad(b.dst[kCount / 2], t, DataCopyExtParams{1, 0, 0, 0, 0});
  que.FreeTensor(t);
}

// The maximum and the sum of x = 0, 1, ..., 99 kept side by side in one stat
// tensor (stat[0] = max, stat[1] = sum), copied to dst[0, 8): the harness checks
// dst[0] == 99 and dst[1] == 4950. 100 elements: one full repeat and a tail.
void MaxAndSum(GM_ADDR src, GM_ADDR dst, bool calIndex) {
  constexpr int32_t n = 100;
  Buffers b = Bind(src, dst);
  TPipe pipe;
  TBuf<TPosition::VECCALC> data, work, stat;
  pipe.InitBuffer(data, 2 * kCount * sizeof(float));
  pipe.InitBuffer(work, 16 * sizeof(float));  // ReduceMax with calIndex over 100 floats needs 16
  pipe.InitBuffer(stat, 8 * sizeof(float));
  LocalTensor<float> x = data.Get<float>();
  DataCopy(x, b.src, kCount);
  DataCopy(x[kCount], b.src, kCount);
  SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
  Adds(x[kCount], x[kCount], float(kCount), kCount);
  LocalTensor<float> s = stat.Get<float>();
  Duplicate(s, 0.0f, 8);
  PipeBarrier<PIPE_V>();
  ReduceSum(s[1], x, work.Get<float>(), n);
  PipeBarrier<PIPE_V>();
  // MISTAKE with calIndex: ReduceMax then writes (max, index) to s[0] and s[1], over the sum.
  ReduceMax(s, x, work.Get<float>(), n, calIndex);
  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
  DataCopy(b.dst, s, 8);
}

void ReduceMaxIndexClobbers(GM_ADDR src, GM_ADDR dst) { MaxAndSum(src, dst, true); }
void ReduceMaxKeepsDst1(GM_ADDR src, GM_ADDR dst) { MaxAndSum(src, dst, false); }

#define OP_EXT_MISUSE_KERNEL(name, fn) \
  extern "C" __global__ __aicore__ void name(GM_ADDR src, GM_ADDR dst) { fn(src, dst); }

}  // namespace

OP_EXT_MISUSE_KERNEL(misuse_clean, Clean)
OP_EXT_MISUSE_KERNEL(misuse_ub_overflow, UbOverflow)
OP_EXT_MISUSE_KERNEL(misuse_misaligned_copy_length, MisalignedCopyLength)
OP_EXT_MISUSE_KERNEL(misuse_misaligned_ub_address, MisalignedUbAddress)
OP_EXT_MISUSE_KERNEL(misuse_deque_empty, DeQueEmpty)
OP_EXT_MISUSE_KERNEL(misuse_never_freed, NeverFreed)
OP_EXT_MISUSE_KERNEL(misuse_alloc_past_depth, AllocPastDepth)
OP_EXT_MISUSE_KERNEL(misuse_free_foreign_tensor, FreeForeignTensor)
OP_EXT_MISUSE_KERNEL(misuse_use_after_free, UseAfterFree)
OP_EXT_MISUSE_KERNEL(misuse_local_out_of_bounds, LocalOutOfBounds)
OP_EXT_MISUSE_KERNEL(misuse_global_out_of_bounds, GlobalOutOfBounds)
OP_EXT_MISUSE_KERNEL(misuse_core_race, CoreRace)
OP_EXT_MISUSE_KERNEL(misuse_data_copy_pad, DataCopyPadCall)
OP_EXT_MISUSE_KERNEL(misuse_padding_read, PaddingRead)
OP_EXT_MISUSE_KERNEL(misuse_gm_read_in_padding, ReadInPadding)
OP_EXT_MISUSE_KERNEL(misuse_gm_read_past_padding, ReadPastPadding)
OP_EXT_MISUSE_KERNEL(misuse_gm_write_past_end, WritePastEnd)
OP_EXT_MISUSE_KERNEL(misuse_reduce_max_small_work, ReduceMaxSmallWork)
OP_EXT_MISUSE_KERNEL(misuse_reduce_work_overlaps_source, ReduceWorkOverlapsSource)
OP_EXT_MISUSE_KERNEL(misuse_reduce_sum_small_work, ReduceSumSmallWork)
OP_EXT_MISUSE_KERNEL(misuse_cast_rint_to_half, CastRintToHalf)
OP_EXT_MISUSE_KERNEL(misuse_cast_none_to_bf16, CastNoneToBf16)
OP_EXT_MISUSE_KERNEL(misuse_rsqrt_rstd, RsqrtRstd)
OP_EXT_MISUSE_KERNEL(misuse_sqrt_div_rstd, SqrtDivRstd)
OP_EXT_MISUSE_KERNEL(misuse_dcache_no_clean, DcacheNoClean)
OP_EXT_MISUSE_KERNEL(misuse_dcache_clean_first_last, DcacheCleanFirstLast)
OP_EXT_MISUSE_KERNEL(misuse_dcache_clean_every_line, DcacheCleanEveryLine)
OP_EXT_MISUSE_KERNEL(misuse_dcache_clean_every_line_long, DcacheCleanEveryLineLong)
OP_EXT_MISUSE_KERNEL(misuse_dcache_clean_entire, DcacheCleanEntire)
OP_EXT_MISUSE_KERNEL(misuse_dcache_stale_read, DcacheStaleRead)
OP_EXT_MISUSE_KERNEL(misuse_dcache_invalidate_before_read, DcacheInvalidateBeforeRead)
OP_EXT_MISUSE_KERNEL(misuse_dcache_dma_reads_dirty, DcacheDmaReadsDirty)
OP_EXT_MISUSE_KERNEL(misuse_dcache_fill_on_block0, ScalarReadDst0<0>)
OP_EXT_MISUSE_KERNEL(misuse_dcache_fill_on_block1, ScalarReadDst0<1>)
OP_EXT_MISUSE_KERNEL(misuse_dcache_double_src_into_dst, DoubleSrcIntoDst<0>)
OP_EXT_MISUSE_KERNEL(misuse_dcache_carried_stale_read, DcacheCarriedStaleRead)
OP_EXT_MISUSE_KERNEL(misuse_dcache_carried_invalidate_before_read, DcacheCarriedInvalidateBeforeRead)
OP_EXT_MISUSE_KERNEL(misuse_dcache_cores_share_line, StoreOnePerCore<1>)
OP_EXT_MISUSE_KERNEL(misuse_dcache_cores_own_lines, StoreOnePerCore<16>)
OP_EXT_MISUSE_KERNEL(misuse_cross_core_read_after_write, CrossCoreReadAfterWrite)
OP_EXT_MISUSE_KERNEL(misuse_cross_core_write_after_read, CrossCoreWriteAfterRead)
OP_EXT_MISUSE_KERNEL(misuse_pipe_mte2_v, PipeMte2ToV)
OP_EXT_MISUSE_KERNEL(misuse_pipe_mte2_v_ordered, PipeMte2ToVOrdered)
OP_EXT_MISUSE_KERNEL(misuse_pipe_v_mte3, PipeVToMte3)
OP_EXT_MISUSE_KERNEL(misuse_pipe_v_mte3_ordered, PipeVToMte3Ordered)
OP_EXT_MISUSE_KERNEL(misuse_pipe_war_mte2, PipeWarMte2)
OP_EXT_MISUSE_KERNEL(misuse_pipe_war_mte2_ordered, PipeWarMte2Ordered)
OP_EXT_MISUSE_KERNEL(misuse_pipe_v_chain, PipeVChain)
OP_EXT_MISUSE_KERNEL(misuse_pipe_v_chain_ordered, PipeVChainOrdered)
OP_EXT_MISUSE_KERNEL(misuse_gm_overlap, GmOverlap)
OP_EXT_MISUSE_KERNEL(misuse_gm_overlap_ordered, GmOverlapOrdered)
OP_EXT_MISUSE_KERNEL(misuse_wait_without_set, WaitWithoutSet)
OP_EXT_MISUSE_KERNEL(misuse_ub_overlap, UbOverlap)
OP_EXT_MISUSE_KERNEL(misuse_ub_overlap_ordered, UbOverlapOrdered)
OP_EXT_MISUSE_KERNEL(misuse_gm_read_after_write, GmReadAfterWriteUnordered)
OP_EXT_MISUSE_KERNEL(misuse_gm_read_after_write_ordered, GmReadAfterWriteOrdered)
OP_EXT_MISUSE_KERNEL(misuse_flag_left_set, FlagLeftSet)
OP_EXT_MISUSE_KERNEL(misuse_event_id_out_of_range, EventIdOutOfRange)
OP_EXT_MISUSE_KERNEL(misuse_data_copy_pad_block_count, DataCopyPadBlockCount)
OP_EXT_MISUSE_KERNEL(misuse_data_copy_pad_block_len, DataCopyPadBlockLen)
OP_EXT_MISUSE_KERNEL(misuse_data_copy_pad_empty, DataCopyPadEmpty)
OP_EXT_MISUSE_KERNEL(misuse_reduce_max_index_clobbers, ReduceMaxIndexClobbers)
OP_EXT_MISUSE_KERNEL(misuse_reduce_max_keeps_dst1, ReduceMaxKeepsDst1)
OP_EXT_MISUSE_KERNEL(misuse_reduce_max_index_small_work, ReduceMaxIndexSmallWork)

// Runs misuse kernel `name` on 2 simulated cores over fresh device buffers;
// returns the launch status (message in aclGetRecentErrMsg()). For
// "padding_read" the check is on the result: fails if dst holds NaN. For the
// data cache stores, dst[first, first + count) must hold 2 * i. For the
// rstd kernels dst must hold 1 / sqrt(i + 1) to a relative 1e-5 (float32
// reference tests ask for 1.3e-6). For the max-and-sum kernels dst[0] must be
// 99 and dst[1] 4950.
extern "C" aclError op_ext_sim_run_misuse_kernel(const char* name) {
  using Kernel = void (*)(GM_ADDR, GM_ADDR);
  struct Entry {
    const char* name;
    Kernel kernel;
    bool rstd = false;  // dst[i] must be 1 / sqrt(i + 1)
    uint32_t doubledFirst = 0, doubledCount = 0;  // dst[first, first + count) must be 2 * i
    bool maxAndSum = false;  // dst[0] must be max(0..99) = 99 and dst[1] their sum, 4950
    // Launched before `kernel` over the same buffers, in this order (issue 28's
    // data cache across launches): `fill` leaves a line in a core's cache,
    // `rewrite` changes GM under it.
    Kernel fill = nullptr;
    Kernel rewrite = nullptr;
  };
  static const Entry kEntries[] = {
      {"clean", misuse_clean},
      {"ub_overflow", misuse_ub_overflow},
      {"misaligned_copy_length", misuse_misaligned_copy_length},
      {"misaligned_ub_address", misuse_misaligned_ub_address},
      {"deque_empty", misuse_deque_empty},
      {"never_freed", misuse_never_freed},
      {"alloc_past_depth", misuse_alloc_past_depth},
      {"free_foreign_tensor", misuse_free_foreign_tensor},
      {"use_after_free", misuse_use_after_free},
      {"local_out_of_bounds", misuse_local_out_of_bounds},
      {"global_out_of_bounds", misuse_global_out_of_bounds},
      {"core_race", misuse_core_race},
      {"data_copy_pad", misuse_data_copy_pad},
      {"padding_read", misuse_padding_read},
      {"gm_read_in_padding", misuse_gm_read_in_padding},
      {"gm_read_past_padding", misuse_gm_read_past_padding},
      {"gm_write_past_end", misuse_gm_write_past_end},
      {"reduce_max_small_work", misuse_reduce_max_small_work},
      {"reduce_work_overlaps_source", misuse_reduce_work_overlaps_source},
      {"reduce_sum_small_work", misuse_reduce_sum_small_work},
      {"cast_rint_to_half", misuse_cast_rint_to_half},
      {"cast_none_to_bf16", misuse_cast_none_to_bf16},
      {"rsqrt_rstd", misuse_rsqrt_rstd, true},
      {"sqrt_div_rstd", misuse_sqrt_div_rstd, true},
      {"dcache_no_clean", misuse_dcache_no_clean, false, 12, 7},
      {"dcache_clean_first_last", misuse_dcache_clean_first_last, false, 12, 7},
      {"dcache_clean_every_line", misuse_dcache_clean_every_line, false, 12, 7},
      {"dcache_clean_every_line_long", misuse_dcache_clean_every_line_long, false, 4, 40},
      {"dcache_clean_entire", misuse_dcache_clean_entire, false, 4, 40},
      {"dcache_stale_read", misuse_dcache_stale_read},
      {"dcache_invalidate_before_read", misuse_dcache_invalidate_before_read},
      {"dcache_dma_reads_dirty", misuse_dcache_dma_reads_dirty},
      // Block 1 of the first kernel fills the line and block 0 of the last reads
      // it (a block may run on any core); the control also has block 0 fill it.
      {"dcache_carried_stale_read", misuse_dcache_carried_stale_read, false, 0, 0, false,
       misuse_dcache_fill_on_block1, misuse_dcache_double_src_into_dst},
      {"dcache_carried_stale_read_same_block", misuse_dcache_carried_stale_read, false, 0, 0, false,
       misuse_dcache_fill_on_block0, misuse_dcache_double_src_into_dst},
      {"dcache_carried_invalidate_before_read", misuse_dcache_carried_invalidate_before_read, false, 0, kCount,
       false, misuse_dcache_fill_on_block1, misuse_dcache_double_src_into_dst},
      {"dcache_cores_share_line", misuse_dcache_cores_share_line},
      {"dcache_cores_own_lines", misuse_dcache_cores_own_lines, false, 16, 1},
      {"cross_core_read_after_write", misuse_cross_core_read_after_write},
      {"cross_core_write_after_read", misuse_cross_core_write_after_read},
      {"pipe_mte2_v", misuse_pipe_mte2_v},
      {"pipe_mte2_v_ordered", misuse_pipe_mte2_v_ordered, false, 0, kCount},
      {"pipe_v_mte3", misuse_pipe_v_mte3},
      {"pipe_v_mte3_ordered", misuse_pipe_v_mte3_ordered, false, 0, kCount},
      {"pipe_war_mte2", misuse_pipe_war_mte2},
      {"pipe_war_mte2_ordered", misuse_pipe_war_mte2_ordered, false, 0, kCount},
      {"pipe_v_chain", misuse_pipe_v_chain, false, 0, kCount},
      {"pipe_v_chain_ordered", misuse_pipe_v_chain_ordered, false, 0, kCount},
      {"gm_overlap", misuse_gm_overlap},
      {"gm_overlap_ordered", misuse_gm_overlap_ordered, false, 0, kCount},
      {"wait_without_set", misuse_wait_without_set},
      {"ub_overlap", misuse_ub_overlap},
      {"ub_overlap_ordered", misuse_ub_overlap_ordered, false, 0, kCount},
      {"gm_read_after_write", misuse_gm_read_after_write},
      {"gm_read_after_write_ordered", misuse_gm_read_after_write_ordered, false, 0, kCount},
      {"flag_left_set", misuse_flag_left_set},
      {"event_id_out_of_range", misuse_event_id_out_of_range},
      {"data_copy_pad_block_count", misuse_data_copy_pad_block_count},
      {"data_copy_pad_block_len", misuse_data_copy_pad_block_len},
      {"data_copy_pad_empty", misuse_data_copy_pad_empty, false, 0, kCount},
      {"reduce_max_index_clobbers", misuse_reduce_max_index_clobbers, false, 0, 0, true},
      {"reduce_max_keeps_dst1", misuse_reduce_max_keeps_dst1, false, 0, 0, true},
      {"reduce_max_index_small_work", misuse_reduce_max_index_small_work},
  };
  const Entry* entry = nullptr;
  for (const auto& e : kEntries) {
    if (std::string(e.name) == name) entry = &e;
  }
  Kernel kernel = entry == nullptr ? nullptr : entry->kernel;
  const bool rstd = entry != nullptr && entry->rstd;
  if (kernel == nullptr) {
    ascendc_sim::HostState().lastError = std::string("unknown misuse kernel '") + name + "'";
    return ACL_ERROR_INVALID_PARAM;
  }
  void* src = nullptr;
  void* dst = nullptr;
  aclrtMalloc(&src, kCount * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
  aclrtMalloc(&dst, kCount * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
  float host[kCount];
  for (uint32_t i = 0; i < kCount; ++i) host[i] = float(i);
  aclrtMemcpy(src, sizeof(host), host, sizeof(host), ACL_MEMCPY_HOST_TO_DEVICE);
  aclrtMemcpy(dst, sizeof(host), host, sizeof(host), ACL_MEMCPY_HOST_TO_DEVICE);
  aclError err = ACL_SUCCESS;
  const std::string fillName = std::string(name) + ".fill", rewriteName = std::string(name) + ".rewrite";
  for (const auto& [before, beforeName] : {std::pair{entry->fill, &fillName}, std::pair{entry->rewrite, &rewriteName}}) {
    if (before == nullptr || err != ACL_SUCCESS) continue;
    err = ascendc_sim::LaunchKernel(beforeName->c_str(), 2, [&]() {
      before(static_cast<GM_ADDR>(src), static_cast<GM_ADDR>(dst));
    });
  }
  if (err == ACL_SUCCESS) {
    err = ascendc_sim::LaunchKernel(name, 2, [&]() {
      kernel(static_cast<GM_ADDR>(src), static_cast<GM_ADDR>(dst));
    });
  }
  if (err == ACL_SUCCESS) {
    float out[kCount];
    aclrtMemcpy(out, sizeof(out), dst, sizeof(out), ACL_MEMCPY_DEVICE_TO_HOST);
    for (uint32_t i = 0; i < kCount && rstd; ++i) {
      const double exact = 1.0 / std::sqrt(double(i) + 1.0);
      const double rel = std::fabs(double(out[i]) - exact) / exact;
      if (!(rel <= 1e-5)) {
        ascendc_sim::HostState().lastError = std::string("kernel ") + name + ": dst[" + std::to_string(i) + "] = " +
                                             std::to_string(out[i]) + " but 1/sqrt(" + std::to_string(i + 1) +
                                             ") = " + std::to_string(exact) + ": relative error " +
                                             std::to_string(rel) + " > 1e-5";
        err = ACL_ERROR_FAILURE;
        break;
      }
    }
    for (uint32_t i = entry->doubledFirst; i < entry->doubledFirst + entry->doubledCount && err == ACL_SUCCESS;
         ++i) {
      if (out[i] != 2.0f * float(i)) {
        ascendc_sim::HostState().lastError = std::string("kernel ") + name + ": dst[" + std::to_string(i) + "] = " +
                                             std::to_string(out[i]) + ", not 2 * " + std::to_string(i) +
                                             " (a store did not reach GM)";
        err = ACL_ERROR_FAILURE;
      }
    }
    if (entry->maxAndSum && err == ACL_SUCCESS && (out[0] != 99.0f || out[1] != 4950.0f)) {
      uint32_t bits1 = 0;
      std::memcpy(&bits1, &out[1], sizeof(bits1));
      ascendc_sim::HostState().lastError =
          std::string("kernel ") + name + ": dst[0] = " + std::to_string(out[0]) + ", dst[1] = " +
          std::to_string(out[1]) + " (bits " + std::to_string(bits1) + "), not the max 99 and the sum 4950 " +
          "(ReduceMax with calIndex writes the index into its dst[1]; rule: ReduceMax dst, ReduceMax page 约束说明)";
      err = ACL_ERROR_FAILURE;
    }
    for (uint32_t i = 0; i < kCount && err == ACL_SUCCESS; ++i) {
      if (out[i] != out[i]) {
        ascendc_sim::HostState().lastError = std::string("kernel ") + name + " wrote NaN to element " +
                                             std::to_string(i) + " (it computed on undefined UB bytes)";
        err = ACL_ERROR_FAILURE;
        break;
      }
    }
  }
  aclrtFree(src);
  aclrtFree(dst);
  return err;
}
