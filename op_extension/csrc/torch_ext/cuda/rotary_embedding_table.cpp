// custom::rotary_embedding_table_backward on CUDA: its glue (../ops/rotary_embedding.h)
// running the table-gradient kernel (kernel/cuda/rotary_embedding.cu). The op has no
// prototype, so the generated registration of cuda_ops.cpp does not name it.
#include <torch/library.h>

#include "cuda_kernels.h"
#include "../ops/rotary_embedding.h"

namespace op_ext {

TORCH_LIBRARY_IMPL(custom, CUDA, m) {
  m.impl(glue::kRotaryTableBackward, &glue::rotary_embedding_table_backward<CudaKernels>);
}

}  // namespace op_ext
