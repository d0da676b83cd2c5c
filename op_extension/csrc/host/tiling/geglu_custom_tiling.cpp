#include "geglu_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::GeGluCustomTilingData ComputeGeGluTiling(uint64_t totalLength, uint32_t dtype, uint32_t approximate,
                                                   const SocSpec& soc) {
  const uint32_t activation = approximate == 1 ? kGluGeluTanh : kGluGeluErf;
  const ElementwisePlan plan =
      PlanElementwise("GeGluCustom", totalLength, dtype, GluUbBytesPerElement(activation, dtype), 0, soc);
  optiling::GeGluCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_activation(activation);
  return t;
}

namespace {

const RegisterTilingInspector kInspectGeGlu("geglu", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [gate shape]; strAttrs: approximate.
  auto it = q.strAttrs.find("approximate");
  const uint32_t approximate = it != q.strAttrs.end() && it->second == "tanh" ? 1 : 0;
  const auto t = ComputeGeGluTiling(Numel(q.shapes.at(0)), q.dtype, approximate, soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GluUbBytesPerElement(t.activation, q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
