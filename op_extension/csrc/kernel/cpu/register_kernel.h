// Included by each kernel file, which ends by registering its implementations
// into its ops' stubs (declared in kernel/cpu/<op>.h) with OP_EXT_REGISTER_KERNEL,
// in the slot of the instruction set this translation unit is built for.
#pragma once

#include "cpu_kernels.h"

#if defined(CPU_CAPABILITY_AVX512)
#define OP_EXT_ISA_SLOT avx512_fn
#elif defined(CPU_CAPABILITY_AVX2)
#define OP_EXT_ISA_SLOT avx2_fn
#else
#define OP_EXT_ISA_SLOT default_fn
#endif

#define OP_EXT_CONCAT_INNER(a, b) a##b
#define OP_EXT_CONCAT(a, b) OP_EXT_CONCAT_INNER(a, b)

// Runs at load time of the extension; the stubs are constant-initialised, so
// the order of static initialisation across files does not matter.
#define OP_EXT_REGISTER_KERNEL(stub, fn)                                    \
  static const bool OP_EXT_CONCAT(op_ext_registered_, stub) = [] {          \
    ::op_ext::cpu::stub.OP_EXT_ISA_SLOT = &fn;                              \
    return true;                                                            \
  }()
