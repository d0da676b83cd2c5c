#include "swiglu_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::SwiGluCustomTilingData ComputeSwiGluTiling(uint64_t totalLength, uint32_t dtype, const SocSpec& soc) {
  const ElementwisePlan plan =
      PlanElementwise("SwiGluCustom", totalLength, dtype, GluUbBytesPerElement(kGluSilu, dtype), 0, soc);
  optiling::SwiGluCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_activation(kGluSilu);
  return t;
}

namespace {

const RegisterTilingInspector kInspectSwiGlu("swiglu", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [gate shape].
  const auto t = ComputeSwiGluTiling(Numel(q.shapes.at(0)), q.dtype, soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GluUbBytesPerElement(kGluSilu, q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
