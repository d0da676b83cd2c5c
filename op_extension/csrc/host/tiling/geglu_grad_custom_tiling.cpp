#include "geglu_grad_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::GeGluGradCustomTilingData ComputeGeGluGradTiling(uint64_t totalLength, uint32_t dtype, uint32_t approximate,
                                                           const SocSpec& soc) {
  const uint32_t activation = approximate == 1 ? kGluGeluTanh : kGluGeluErf;
  const ElementwisePlan plan =
      PlanElementwise("GeGluGradCustom", totalLength, dtype, GluGradUbBytesPerElement(activation, dtype), 0, soc);
  optiling::GeGluGradCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_activation(activation);
  return t;
}

namespace {

const RegisterTilingInspector kInspectGeGluGrad("geglu_backward", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [gate shape]; strAttrs: approximate.
  auto it = q.strAttrs.find("approximate");
  const uint32_t approximate = it != q.strAttrs.end() && it->second == "tanh" ? 1 : 0;
  const auto t = ComputeGeGluGradTiling(Numel(q.shapes.at(0)), q.dtype, approximate, soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GluGradUbBytesPerElement(t.activation, q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
