// RotaryEmbeddingCustom (rotary_embedding): the tiling (rope_tiling.h).
#include "rotary_embedding_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

optiling::RotaryEmbeddingCustomTilingData ComputeRotaryEmbeddingTiling(const RopeShape& shape, uint32_t dtype, const SocSpec& soc) {
  return PlanRope<optiling::RotaryEmbeddingCustomTilingData>("RotaryEmbeddingCustom", shape, dtype, soc);
}

namespace {

// shapes: q, k, cos (4-D, 4-D, 3-D); attrs: unsqueeze_dim (1 or 2). One TilingData
// per launch (q, then k).
const RegisterTilingInspector kInspect("rotary_embedding", [](const TilingQuery& q, const SocSpec& soc) {
  const int64_t unsqueeze = q.attrs.count("unsqueeze_dim") ? int64_t(q.attrs.at("unsqueeze_dim")) : 1;
  const auto& cos = q.shapes.at(2);
  std::vector<TilingFields> out;
  for (int i = 0; i < 2; ++i) {
    const auto& x = q.shapes.at(i);
    RopeShape s;
    const uint64_t n = uint64_t(unsqueeze == 1 ? x.at(1) : x.at(2));
    s.seqLen = uint64_t(unsqueeze == 1 ? x.at(2) : x.at(1));
    s.dim = uint64_t(x.at(3));
    s.rows = uint64_t(x.at(0)) * n * s.seqLen;
    s.seqDiv = unsqueeze == 1 ? 1 : n;
    s.batchRows = n * s.seqLen;
    s.cosRows = uint64_t(cos.at(0)) * s.seqLen;
    s.cosBatched = cos.at(0) != 1;
    const auto t = ComputeRotaryEmbeddingTiling(s, q.dtype, soc);
    TilingFields fields = DumpTiling(t);
    fields.emplace_back("_ubBytes", double(RopeTilingUbBytes(t)));
    out.push_back(fields);
  }
  return out;
});

}  // namespace

}  // namespace op_ext::ascend
