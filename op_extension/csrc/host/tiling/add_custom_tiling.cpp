#include "add_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::AddCustomTilingData ComputeAddTiling(uint64_t totalLength, uint32_t dtype, double alpha,
                                               const SocSpec& soc) {
  const ElementwisePlan plan = PlanElementwise("AddCustom", totalLength, dtype, AddUbBytesPerElement(dtype), 0, soc);
  optiling::AddCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_alpha(float(alpha));
  return t;
}

namespace {

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
