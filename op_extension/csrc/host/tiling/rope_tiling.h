// Shared tiling of the rotary position embedding kernels RotaryEmbeddingCustom and
// RotaryEmbeddingGradCustom (kernel/ascendc/rotary_embedding_common.h). One
// launch per tensor (q, then k): the input x is [rows, dim], dense, each row of x
// paired with row CosRow(r) of cos and sin ([cosRows, dim], dense):
//   CosRow(r) = (cosBatched ? (r / batchRows) * seqLen : 0) + (r / seqDiv) % seqLen
// ([B, N, S, D] with unsqueeze_dim 1: seqDiv 1; [B, S, N, D] with unsqueeze_dim 2:
// seqDiv N; batchRows N * S in both).
//
// The kernels view every row as its two halves of `half` = dim / 2 elements, i.e.
// x as [2 * rows, half] and cos/sin as [2 * cosRows, half]: each half lands on a
// 32-byte block in the UB (halfStride = half rounded up to a block), so the vector
// instructions on the second half start aligned for any even dim. Half-rows that
// are not whole blocks move by DataCopyPad (tailMode kTailPad) or, on Ascend310P,
// by RowCopier's whole-block copies (kTailOverlap; halves under one block are
// stored element-wise, so such a tensor gets one core).
//
// Rows are split over cores (balanced to within one row, at least kMinBytesPerCore
// of x per core); each core walks its rows rowsPerTile at a time. UB plan of a tile
// of k rows (element size e, hs = halfStride, hf = half rounded up to 8 floats):
//   x, cos, sin and y queues, double buffered: 4 * 2 * (k * 2 * hs * e);
//   float scratch: float inputs one row of products (hf floats); 16-bit inputs
//   x, cos, sin and the result of one row in float (4 * 2 * hf) plus the products;
//   RowCopier's stage (one block).
// A dim whose one row does not fit is refused (TilingError naming the op).
#ifndef OP_EXT_HOST_TILING_ROPE_TILING_H_
#define OP_EXT_HOST_TILING_ROPE_TILING_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "elementwise_tiling.h"
#include "row_tiling.h"
#include "soc_spec.h"
#include "tiling_util.h"

namespace op_ext::ascend {

struct RopeShape {
  uint64_t rows = 0;       // rows of x (B * N * S)
  uint64_t dim = 0;        // D, even
  uint64_t seqLen = 0;     // S
  uint64_t seqDiv = 1;     // rows of x per step of s
  uint64_t batchRows = 0;  // rows of x per batch index (N * S)
  uint64_t cosRows = 0;    // rows of cos (1 or B) * S
  bool cosBatched = false; // cos has x's batch (else batch 1, broadcast)
};

// The RopeShape of x, 4-D [B, N, S, D] (unsqueeze_dim 1) or [B, S, N, D] (2), with
// cos/sin of batch cosBatch (1 or B). The caller has checked the layout.
inline RopeShape RopeShapeOf(const std::vector<int64_t>& x, int64_t cosBatch, int64_t unsqueezeDim) {
  const uint64_t n = uint64_t(x.at(unsqueezeDim == 1 ? 1 : 2));
  RopeShape s;
  s.seqLen = uint64_t(x.at(unsqueezeDim == 1 ? 2 : 1));
  s.dim = uint64_t(x.at(3));
  s.rows = uint64_t(x.at(0)) * n * s.seqLen;
  s.seqDiv = unsqueezeDim == 1 ? 1 : n;
  s.batchRows = n * s.seqLen;
  s.cosRows = uint64_t(cosBatch) * s.seqLen;
  s.cosBatched = cosBatch != 1;
  return s;
}

inline uint64_t RopeScratchFloats(uint32_t dtype, uint64_t half) {
  const uint64_t hf = RoundUp(half, 8);
  return dtype == kDTypeFloat ? hf : 9 * hf;
}

inline uint64_t RopeUbBytes(uint32_t dtype, uint64_t k, uint64_t halfStride, uint64_t half) {
  const uint64_t e = DTypeBytes(dtype);
  return 4 * kBufferNum * k * 2 * halfStride * e + 4 * RopeScratchFloats(dtype, half) + kRowCopierStageBytes;
}

// Fills the fields both TilingData structs share (they are declared alike).
template <typename TilingData>
TilingData PlanRope(const char* op, const RopeShape& s, uint32_t dtype, const SocSpec& soc) {
  TilingData t;
  if (s.dim % 2 != 0) throw TilingError(std::string(op) + ": the last dim must be even, got " + std::to_string(s.dim));
  if (s.dim > (uint64_t(1) << 30)) throw TilingError(std::string(op) + ": rows of more than 2^30 elements");
  const uint64_t e = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / e;
  const uint64_t half = s.dim / 2;
  const uint64_t halfStride = RoundUp(half, blockElems);
  t.set_rows(s.rows);
  t.set_batchRows(s.batchRows);
  t.set_seqDiv(s.seqDiv);
  t.set_cosRows(s.cosRows);
  t.set_dim(uint32_t(s.dim));
  t.set_half(uint32_t(half));
  t.set_halfStride(uint32_t(halfStride));
  t.set_seqLen(uint32_t(s.seqLen));
  t.set_cosBatched(s.cosBatched ? 1 : 0);
  t.set_dataType(dtype);
  t.set_tailMode(RowTailMode(soc));
  if (s.rows == 0 || s.dim == 0) return t;
  if (RopeUbBytes(dtype, 1, halfStride, half) > soc.ubSize) {
    throw TilingError(std::string(op) + ": one row of " + std::to_string(s.dim) + " " + DTypeName(dtype) +
                      " elements does not fit in the " + std::to_string(soc.ubSize) + "-byte UB of " + soc.name);
  }
  const uint64_t minRows = std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore, s.dim * e));
  const CoreSplit split = SplitOverCores(s.rows, CoresForRuns(soc, half * e), minRows);
  t.set_usedCoreNum(split.usedCoreNum);
  t.set_rowsPerCore(split.unitsPerCore);
  t.set_bigCoreNum(split.bigCoreNum);
  // As many rows per tile as fit; x moves as 2k half-rows in one copy (DataCopyPad:
  // at most 4095 blocks).
  const uint64_t maxRowsPerCore = split.unitsPerCore + (split.bigCoreNum > 0 ? 1 : 0);
  const uint64_t limit = std::min<uint64_t>(maxRowsPerCore, kMaxBlockCount / 2);
  uint64_t k = 1;
  while (k < limit && RopeUbBytes(dtype, k + 1, halfStride, half) <= soc.ubSize) ++k;
  t.set_rowsPerTile(uint32_t(k));
  return t;
}

template <typename TilingData>
uint64_t RopeTilingUbBytes(const TilingData& t) {
  if (t.rows == 0 || t.dim == 0) return 0;
  return RopeUbBytes(t.dataType, t.rowsPerTile, t.halfStride, t.half);
}

// The tiling inspector of a rotary entry: shapes q, k, cos (4-D, 4-D, 3-D), attr
// unsqueeze_dim (1 or 2); one TilingData per launch (q, then k). `compute` is the
// entry's tiling function.
template <typename Compute>
std::vector<TilingFields> InspectRope(const TilingQuery& q, const SocSpec& soc, const Compute& compute) {
  const int64_t unsqueeze = q.attrs.count("unsqueeze_dim") ? int64_t(q.attrs.at("unsqueeze_dim")) : 1;
  std::vector<TilingFields> out;
  for (int i = 0; i < 2; ++i) {
    const auto t = compute(RopeShapeOf(q.shapes.at(i), q.shapes.at(2).at(0), unsqueeze), q.dtype, soc);
    TilingFields fields = DumpTiling(t);
    fields.emplace_back("_ubBytes", double(RopeTilingUbBytes(t)));
    out.push_back(fields);
  }
  return out;
}

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_ROPE_TILING_H_
