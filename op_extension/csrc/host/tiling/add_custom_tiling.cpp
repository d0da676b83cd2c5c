#include "add_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::AddCustomTilingData ComputeAddTiling(uint64_t totalLength, uint32_t dtype, double alpha,
                                               const SocSpec& soc) {
  const ElementwisePlan plan = PlanElementwise("AddCustom", totalLength, dtype, AddUbBytesPerElement(dtype), 0, soc);
  optiling::AddCustomTilingData t;
  t.set_totalLength(plan.totalLength);
  t.set_blocksPerCore(plan.blocksPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_tileLength(plan.tileLength);
  t.set_tailMode(plan.tailMode);
  t.set_dataType(dtype);
  t.set_alpha(float(alpha));
  return t;
}

namespace {
uint64_t Numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

const RegisterTilingInspector kInspectAdd("add", [](const TilingQuery& q, const SocSpec& soc) {
  const double alpha = q.attrs.count("alpha") ? q.attrs.at("alpha") : 1.0;
  const auto t = ComputeAddTiling(Numel(q.shapes.at(0)), q.dtype, alpha, soc);
  TilingFields fields = DumpTiling(t);
  // Not part of the TilingData: the UB bytes the kernel's buffers take with it.
  fields.emplace_back("_ubBytes", double(uint64_t(AddUbBytesPerElement(q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});
}  // namespace

}  // namespace op_ext::ascend
