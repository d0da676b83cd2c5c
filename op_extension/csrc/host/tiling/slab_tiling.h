// Tiling of the softmax kernels over a dim other than the last (SoftmaxCustom and
// SoftmaxGradCustom, columns mode): the input is [outer, dimSize, inner] with
// inner > 1, and the unit of work is a slab of one outer index -- dimSize rows of
// innerTile neighbouring elements, `inner` apart in GM -- so that the reduction
// along dim is elementwise across the slab's rows and the vector unit works along
// inner, where the data is contiguous. Units (outer * innerTiles of them) are
// split over cores, balanced to within one. When dimSize rows of one 32-byte
// block do not fit in the UB (or dimSize exceeds DataCopyPad's 4095 rows), dim is
// walked in chunks of chunkRows rows (split), several times.
#ifndef OP_EXT_HOST_TILING_SLAB_TILING_H_
#define OP_EXT_HOST_TILING_SLAB_TILING_H_

#include <cstdint>
#include <functional>

#include "soc_spec.h"
#include "tiling_util.h"

namespace op_ext::ascend {

struct SlabPlan {
  uint32_t usedCoreNum = 0;
  uint64_t unitsPerCore = 0;
  uint32_t bigCoreNum = 0;
  uint32_t split = 0;           // dim walked in chunks
  uint32_t chunkRows = 0;       // dim rows per slab (dimSize unless split)
  uint32_t innerTile = 0;       // elements of a slab row (a block multiple)
  uint32_t innerTiles = 0;      // slabs per outer index
  uint32_t stridedCopyPad = 0;  // move a slab with one strided DataCopyPad (else row by row)
};

// ubBytesForSlab(rows, width): UB bytes the kernel allocates for slabs of
// `rows` dim rows of `width` elements; must mirror its InitBuffer calls exactly.
// Throws TilingError (naming `op`) for what the SoC cannot move.
SlabPlan PlanSlabs(const char* op, uint64_t outer, uint64_t dimSize, uint64_t inner, uint32_t dtype,
                   const SocSpec& soc, const std::function<uint64_t(uint64_t rows, uint64_t width)>& ubBytesForSlab);

// Copies a plan into the same-named fields of a softmax TilingData.
template <typename TilingData>
void FillSlabFields(TilingData& t, const SlabPlan& plan) {
  t.set_unitsPerCore(plan.unitsPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_split(plan.split);
  t.set_chunkLength(plan.chunkRows);
  t.set_innerTile(plan.innerTile);
  t.set_innerTiles(plan.innerTiles);
  t.set_stridedCopyPad(plan.stridedCopyPad);
}

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_SLAB_TILING_H_
