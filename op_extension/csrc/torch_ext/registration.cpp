// The one place where the custom ops' schemas are defined. The schemas are
// generated from op_protos/*.json at build time (op_ext_schemas.h); backends
// only add implementations with TORCH_LIBRARY_IMPL.
#include <torch/library.h>

#include "op_ext_schemas.h"

TORCH_LIBRARY(custom, m) {
  for (const char* schema : op_ext::generated::kSchemas) {
    m.def(schema);
  }
}
