// The one place where the custom ops' schemas are defined. The schemas are
// generated from op_protos/*.json at build time (op_ext_schemas.h); backends
// only add implementations with TORCH_LIBRARY_IMPL.
//
// The Python module op_extension._C exists only so that `import` loads this
// library; the ops are reached through torch.ops.custom. Its two functions let
// tests and the benchmark pick the CPU kernel variant.
#include <Python.h>
#include <torch/library.h>

#include <cstring>

#include "../kernel/cpu/cpu_kernels.h"
#include "op_ext_schemas.h"

TORCH_LIBRARY(custom, m) {
  for (const char* schema : op_ext::generated::kSchemas) {
    m.def(schema);
  }
}

namespace {

PyObject* cpu_isa(PyObject*, PyObject*) {
  return PyUnicode_FromString(op_ext::cpu::isa_name(op_ext::cpu::active_isa()));
}

PyObject* best_cpu_isa(PyObject*, PyObject*) {
  return PyUnicode_FromString(op_ext::cpu::isa_name(op_ext::cpu::best_isa()));
}

PyObject* set_cpu_isa(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (name == nullptr) return nullptr;
  using op_ext::cpu::Isa;
  Isa isa;
  if (std::strcmp(name, "default") == 0) {
    isa = Isa::Default;
  } else if (std::strcmp(name, "avx2") == 0) {
    isa = Isa::Avx2;
  } else if (std::strcmp(name, "avx512") == 0) {
    isa = Isa::Avx512;
  } else {
    PyErr_Format(PyExc_ValueError, "unknown CPU ISA '%s' (expected default, avx2 or avx512)", name);
    return nullptr;
  }
  if (!op_ext::cpu::set_active_isa(isa)) {
    PyErr_Format(PyExc_ValueError, "this CPU cannot run the '%s' kernels", name);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"cpu_isa", cpu_isa, METH_NOARGS, "The instruction set of the CPU kernels in use."},
    {"best_cpu_isa", best_cpu_isa, METH_NOARGS, "The best instruction set this CPU supports."},
    {"set_cpu_isa", set_cpu_isa, METH_O,
     "Use the CPU kernels built for 'default', 'avx2' or 'avx512'."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C() {
  return PyModule_Create(&module_def);
}
