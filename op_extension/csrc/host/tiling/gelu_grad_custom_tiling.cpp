#include "gelu_grad_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::GeluGradCustomTilingData ComputeGeluGradTiling(uint64_t totalLength, uint32_t dtype, uint32_t approximate,
                                                         const SocSpec& soc) {
  const ElementwisePlan plan =
      PlanElementwise("GeluGradCustom", totalLength, dtype, GeluGradUbBytesPerElement(dtype), 0, soc);
  optiling::GeluGradCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_approximate(approximate);
  return t;
}

namespace {

const RegisterTilingInspector kInspectGeluGrad("gelu_backward", [](const TilingQuery& q, const SocSpec& soc) {
  const auto approx = q.strAttrs.find("approximate");
  const uint32_t tanh = approx != q.strAttrs.end() && approx->second == "tanh" ? 1 : 0;
  const auto t = ComputeGeluGradTiling(Numel(q.shapes.at(0)), q.dtype, tanh, soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GeluGradUbBytesPerElement(q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
