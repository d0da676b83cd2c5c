#include "swiglu_grad_custom_tiling.h"

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

optiling::SwiGluGradCustomTilingData ComputeSwiGluGradTiling(uint64_t totalLength, uint32_t dtype,
                                                             const SocSpec& soc) {
  const ElementwisePlan plan =
      PlanElementwise("SwiGluGradCustom", totalLength, dtype, GluGradUbBytesPerElement(kGluSilu, dtype), 0, soc);
  optiling::SwiGluGradCustomTilingData t;
  FillElementwiseFields(t, plan, dtype);
  t.set_activation(kGluSilu);
  return t;
}

namespace {

const RegisterTilingInspector kInspectSwiGluGrad("swiglu_backward", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [gate shape].
  const auto t = ComputeSwiGluGradTiling(Numel(q.shapes.at(0)), q.dtype, soc);
  TilingFields fields = DumpTiling(t);
  fields.emplace_back("_ubBytes", double(uint64_t(GluGradUbBytesPerElement(kGluSilu, q.dtype)) * t.tileLength));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
