// What the forward row norms share -- RmsNormCustom, FusedAddRmsNormCustom and
// LayerNormCustom: each reads its input as [rows, cols] (cols = the normalized
// size), splits the rows as row_tiling.h plans, and has one statistic per row
// (eps, 1 / cols) and an optional weight. Their TilingData differ only in what an
// op adds after these fields (LayerNorm's hasBias) and their kernels' UB plans.
#ifndef OP_EXT_HOST_TILING_ROW_NORM_TILING_H_
#define OP_EXT_HOST_TILING_ROW_NORM_TILING_H_

#include "tiling_def.h"

// The fields of a row norm's TilingData, first in each (inside its
// BEGIN_TILING_DATA_DEF). One macro, because the field list is a macro list in
// CANN's TilingData form too; it holds declarations only.
#define OP_EXT_ROW_NORM_TILING_FIELDS                                                                  \
  TILING_DATA_FIELD_DEF(uint64_t, rows)                                                                \
  TILING_DATA_FIELD_DEF(uint64_t, rowsPerCore)      /* rows of a small core */                         \
  TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)       /* the first cores get one row more */             \
  TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)      /* blockDim */                                     \
  TILING_DATA_FIELD_DEF(uint32_t, cols)             /* normalized size */                              \
  TILING_DATA_FIELD_DEF(uint32_t, rowStride)        /* UB elements between rows (cols rounded up to a block) */ \
  TILING_DATA_FIELD_DEF(uint32_t, splitRow)         /* 0: whole rows per tile; 1: rows in chunks */    \
  TILING_DATA_FIELD_DEF(uint32_t, rowsPerTile)      /* whole rows: rows per tile */                    \
  TILING_DATA_FIELD_DEF(uint32_t, chunkLength)      /* split rows: elements per chunk */               \
  TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength) /* floats of ReduceSum's work tensor */            \
  TILING_DATA_FIELD_DEF(uint32_t, hasWeight)                                                           \
  TILING_DATA_FIELD_DEF(uint32_t, dataType)         /* KernelDType */                                  \
  TILING_DATA_FIELD_DEF(uint32_t, tailMode)         /* TailMode: how runs that are not whole blocks move (row_tiling.h) */ \
  TILING_DATA_FIELD_DEF(float, eps)                                                                    \
  TILING_DATA_FIELD_DEF(float, invCols)             /* 1 / cols */

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include <cstdint>

#include "row_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

// The UB bytes of a row norm's kernel: for k whole rows of stride P per tile, and
// for chunks of C elements (see each op's tiling header).
struct RowNormUbPlan {
  uint64_t (*rows)(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols);
  uint64_t (*chunk)(uint32_t dtype, uint64_t chunk);

  uint64_t Bytes(uint32_t dtype, uint64_t splitRow, uint64_t rowsPerTile, uint64_t rowStride, uint64_t cols,
                 uint64_t chunkLength) const {
    return splitRow ? chunk(dtype, chunkLength) : rows(dtype, rowsPerTile, rowStride, cols);
  }
};

// The fields every row norm's TilingData has, forward or backward, whatever
// their order in it: the row split (PlanRows' plan), ReduceSum's work size and
// the norm's constants.
template <typename TilingData>
void SetRowNormFields(TilingData& t, const RowPlan& plan, uint64_t cols, uint32_t dtype, bool hasWeight, double eps,
                      const SocSpec& soc) {
  t.set_rows(plan.rows);
  t.set_rowsPerCore(plan.rowsPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_cols(plan.cols);
  t.set_rowStride(plan.rowStride);
  t.set_splitRow(plan.splitRow);
  t.set_rowsPerTile(plan.rowsPerTile);
  t.set_chunkLength(plan.chunkLength);
  t.set_reduceWorkLength(uint32_t(ReduceWorkFloats(plan.splitRow ? plan.chunkLength : cols)));
  t.set_hasWeight(hasWeight ? 1 : 0);
  t.set_dataType(dtype);
  t.set_tailMode(RowTailMode(soc));
  t.set_eps(float(eps));
  t.set_invCols(cols == 0 ? 0.0f : float(1.0 / double(cols)));
}

// The op's TilingData with the OP_EXT_ROW_NORM_TILING_FIELDS set: the row split
// (PlanRows, with the kernel's UB plan) and the norm's constants.
template <typename TilingData>
TilingData ComputeRowNormTiling(const char* op, uint64_t rows, uint64_t cols, uint32_t dtype, bool hasWeight,
                                double eps, const SocSpec& soc, const RowNormUbPlan& ub) {
  const RowPlan plan = PlanRows(
      op, rows, cols, dtype, soc, [&](uint64_t k, uint64_t stride) { return ub.rows(dtype, k, stride, cols); },
      [&](uint64_t chunk) { return ub.chunk(dtype, chunk); });
  TilingData t;
  SetRowNormFields(t, plan, cols, dtype, hasWeight, eps, soc);
  return t;
}

// What ascend_sim.tiling returns for a row norm: its fields and the UB bytes its
// kernel allocates (0 when it launches nothing).
template <typename TilingData>
std::vector<TilingFields> InspectRowNorm(const TilingData& t, uint32_t dtype, const RowNormUbPlan& ub) {
  TilingFields fields = DumpTiling(t);
  const uint64_t bytes = ub.Bytes(dtype, t.splitRow, t.rowsPerTile, t.rowStride, t.cols, t.chunkLength);
  fields.emplace_back("_ubBytes", double(t.rows == 0 || t.cols == 0 ? 0 : bytes));
  return std::vector<TilingFields>{fields};
}

// A row norm's inspector query (shapes: [rows, cols]; attrs: eps, hasWeight ...):
// a flag is true unless given as 0; eps is `defaultEps` unless given.
inline bool InspectFlag(const TilingQuery& q, const char* name) { return !q.attrs.count(name) || q.attrs.at(name) != 0; }
inline double InspectEps(const TilingQuery& q, double defaultEps) {
  return q.attrs.count("eps") ? q.attrs.at("eps") : defaultEps;
}

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_ROW_NORM_TILING_H_
