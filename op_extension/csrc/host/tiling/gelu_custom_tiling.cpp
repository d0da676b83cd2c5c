#include "gelu_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::GeluCustomTilingData ComputeGeluTiling(uint64_t totalLength, uint32_t dtype, uint32_t approximate,
                                                 const SocSpec& soc) {
  const ElementwisePlan plan =
      PlanElementwise("GeluCustom", totalLength, dtype, GeluUbBytesPerElement(dtype), 0, soc);
  optiling::GeluCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_approximate(approximate);
  return t;
}

namespace {

uint32_t Approximate(const TilingQuery& q) {
  auto it = q.strAttrs.find("approximate");
  return it != q.strAttrs.end() && it->second == "tanh" ? 1 : 0;
}

const RegisterTilingInspector kInspectGelu("gelu", [](const TilingQuery& q, const SocSpec& soc) {
  const auto t = ComputeGeluTiling(Numel(q.shapes.at(0)), q.dtype, Approximate(q), soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GeluUbBytesPerElement(q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
