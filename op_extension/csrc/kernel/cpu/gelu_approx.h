// GELU's two forms, shared by the GELU kernels (gelu.h), the gated units that
// apply GELU (glu.h: GEGLU) and the glue that parses `approximate`
// (torch_ext/checks.h).
#pragma once

#include <cstdint>

namespace op_ext::cpu {

enum class GeluApprox : int8_t { None, Tanh };

}  // namespace op_ext::cpu
