// The Python module op_extension._C. Importing it loads this library, which
// registers the ops; everything else reaches them through torch.ops.custom.
//
// It also holds the eager fast path: one CPython function per forward op that
// unpacks its arguments and enters the dispatcher from C++. Calling through
// torch.ops parses arguments against the schema in Python-facing C++ and costs
// about 2 us more than a native binding; op_extension/ops.py takes this path
// only outside tracing and for plain tensors. The dispatcher still runs the op
// with all its keys, so autograd and dispatch modes see custom::<op> as usual.
//
// Under a torch.func transform, or with an input that carries a forward-mode
// tangent, the fast path hands the call to the op's Python autograd.Function
// in op_extension/_transforms.py instead (the C++ autograd kernels support
// neither): a thread-local test here, and the Autograd kernel's refusal of a
// tangent (TangentError) caught. A test in ops.py would cost ~0.1 us per call.
//
// And it lets tests and the benchmark choose the CPU kernel variant.
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../kernel/cpu/cpu_kernels.h"
#include "op_ext_handles.h"
#include "transforms.h"

namespace op_ext {
namespace {

using at::Tensor;
using OptTensor = std::optional<at::Tensor>;

// ---- argument unpacking: each raises a Python TypeError naming the op ----------

struct ArgError {};  // the Python error is already set

const Tensor& tensor_arg(const char* op, PyObject* obj, const char* name) {
  if (!THPVariable_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "custom::%s: %s must be a Tensor, got %s", op, name,
                 Py_TYPE(obj)->tp_name);
    throw ArgError{};
  }
  return THPVariable_Unpack(obj);
}

OptTensor optional_tensor_arg(const char* op, PyObject* obj, const char* name) {
  if (obj == Py_None) return std::nullopt;
  return tensor_arg(op, obj, name);
}

double float_arg(const char* op, PyObject* obj, const char* name) {
  // Numbers and what converts to one (numpy scalars), as torch's parser takes;
  // a str is refused here, never parsed.
  const double v = PyUnicode_Check(obj) ? -1.0 : PyFloat_AsDouble(obj);
  if (v == -1.0 && (PyUnicode_Check(obj) || PyErr_Occurred())) {
    const bool overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
    PyErr_Clear();
    if (overflow) {  // an int beyond the range of a double
      PyErr_Format(PyExc_ValueError, "custom::%s: %s=%R does not fit in a float64", op, name, obj);
    } else {
      PyErr_Format(PyExc_TypeError, "custom::%s: %s must be a float, got %s", op, name,
                   Py_TYPE(obj)->tp_name);
    }
    throw ArgError{};
  }
  return v;
}

std::optional<double> optional_float_arg(const char* op, PyObject* obj, const char* name) {
  if (obj == Py_None) return std::nullopt;
  return float_arg(op, obj, name);
}

int64_t int_arg(const char* op, PyObject* obj, const char* name) {
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "custom::%s: %s must be an int, got %s", op, name,
                 Py_TYPE(obj)->tp_name);
    throw ArgError{};
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0) {
    PyErr_Format(PyExc_ValueError, "custom::%s: %s=%R does not fit in an int64", op, name, obj);
    throw ArgError{};
  }
  return v;
}

std::vector<int64_t> int_list_arg(const char* op, PyObject* obj, const char* name) {
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "custom::%s: %s must be a list of ints, got %s", op, name,
                 Py_TYPE(obj)->tp_name);
    throw ArgError{};
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  std::vector<int64_t> out(n);
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = int_arg(op, items[i], name);
  return out;
}

std::string str_arg(const char* op, PyObject* obj, const char* name) {
  Py_ssize_t size = 0;
  const char* s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8AndSize(obj, &size) : nullptr;
  if (s == nullptr) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "custom::%s: %s must be a str, got %s", op, name,
                 Py_TYPE(obj)->tp_name);
    throw ArgError{};
  }
  return std::string(s, size);
}

bool check_nargs(const char* op, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected) return true;
  PyErr_Format(PyExc_TypeError, "custom::%s: the fast path takes %zd arguments, got %zd", op,
               expected, nargs);
  return false;
}

c10::SymIntArrayRef as_sym(const std::vector<int64_t>& v) {
  return c10::fromIntArrayRefSlow(v);
}

// Runs the op without the GIL, as torch.ops does, and wraps the results.
template <typename F>
PyObject* call_unlocked(F&& f) {
  decltype(f()) result;
  {
    pybind11::gil_scoped_release no_gil;
    result = f();
  }
  if constexpr (std::is_same_v<decltype(result), Tensor>) {
    return THPVariable_Wrap(std::move(result));
  } else {
    PyObject* first = THPVariable_Wrap(std::move(std::get<0>(result)));
    PyObject* second = THPVariable_Wrap(std::move(std::get<1>(result)));
    PyObject* tuple = (first && second) ? PyTuple_Pack(2, first, second) : nullptr;
    Py_XDECREF(first);
    Py_XDECREF(second);
    return tuple;
  }
}

// ---- torch.func transforms and forward-mode AD ------------------------------

// The forward ops, in the order of kOpNames.
enum OpIndex {
  kAdd,
  kGelu,
  kSwiglu,
  kGeglu,
  kRmsNorm,
  kFusedAddRmsNorm,
  kLayerNorm,
  kSoftmax,
  kNumOps
};
constexpr const char* kOpNames[kNumOps] = {
    "add", "gelu", "swiglu", "geglu", "rms_norm", "fused_add_rms_norm", "layer_norm", "softmax",
};

// op_extension._transforms.<op> per op (strong references, set once at import).
PyObject* transform_handlers[kNumOps] = {};

// Calls op_extension._transforms.<op> with the fast path's own arguments.
PyObject* call_transforms(OpIndex op, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* handler = transform_handlers[op];
  if (handler == nullptr) {
    PyErr_Format(PyExc_RuntimeError,
                 "custom::%s: a torch.func transform or forward-mode AD needs "
                 "op_extension._transforms, which has not registered its functions",
                 kOpNames[op]);
    return nullptr;
  }
  return PyObject_Vectorcall(handler, args, nargs, nullptr);
}

// Runs the op, or op_extension._transforms.<op> where the C++ path cannot.
template <typename F>
PyObject* run(OpIndex op, PyObject* const* args, Py_ssize_t nargs, F&& f) {
  if (functorch_active()) return call_transforms(op, args, nargs);
  try {
    return call_unlocked(std::forward<F>(f));
  } catch (const TangentError&) {  // thrown before the op did anything
    return call_transforms(op, args, nargs);
  }
}

// _set_transform_handlers({op name: callable}) for every forward op.
PyObject* set_transform_handlers(PyObject*, PyObject* arg) {
  if (!PyDict_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "_set_transform_handlers takes a dict {op name: callable}");
    return nullptr;
  }
  PyObject* found[kNumOps];
  for (int i = 0; i < kNumOps; ++i) {
    found[i] = PyDict_GetItemString(arg, kOpNames[i]);  // borrowed
    if (found[i] == nullptr || !PyCallable_Check(found[i])) {
      PyErr_Format(PyExc_TypeError, "_set_transform_handlers: no callable for '%s'", kOpNames[i]);
      return nullptr;
    }
  }
  for (int i = 0; i < kNumOps; ++i) {
    Py_INCREF(found[i]);
    Py_XSETREF(transform_handlers[i], found[i]);
  }
  Py_RETURN_NONE;
}

// A parameter (or residual) of another dtype than the input's: op_extension.ops
// handles that in Python (computing in the wider dtype, _mixed_*), where the
// fast path returns NotImplemented. One comparison here instead of attribute
// reads on every Python call.
bool mixed_dtypes(const Tensor& input, const OptTensor& param) {
  return param.has_value() && param->defined() && param->scalar_type() != input.scalar_type();
}

#define OP_EXT_FAST_BEGIN(op, n)               \
  HANDLE_TH_ERRORS                             \
  if (!check_nargs(op, nargs, n)) return nullptr; \
  try {
#define OP_EXT_FAST_END          \
  }                              \
  catch (const ArgError&) {      \
    return nullptr;              \
  }                              \
  END_HANDLE_TH_ERRORS

PyObject* fast_add(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("add", 3)
  const Tensor& input = tensor_arg("add", args[0], "input");
  const Tensor& other = tensor_arg("add", args[1], "other");
  const double alpha = float_arg("add", args[2], "alpha");
  return run(kAdd, args, nargs, [&] { return add_op().call(input, other, alpha); });
  OP_EXT_FAST_END
}

PyObject* fast_gelu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("gelu", 2)
  const Tensor& input = tensor_arg("gelu", args[0], "input");
  const std::string approximate = str_arg("gelu", args[1], "approximate");
  return run(kGelu, args, nargs, [&] { return gelu_op().call(input, approximate); });
  OP_EXT_FAST_END
}

PyObject* fast_swiglu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("swiglu", 2)
  const Tensor& gate = tensor_arg("swiglu", args[0], "gate");
  const Tensor& up = tensor_arg("swiglu", args[1], "up");
  return run(kSwiglu, args, nargs, [&] { return swiglu_op().call(gate, up); });
  OP_EXT_FAST_END
}

PyObject* fast_geglu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("geglu", 3)
  const Tensor& gate = tensor_arg("geglu", args[0], "gate");
  const Tensor& up = tensor_arg("geglu", args[1], "up");
  const std::string approximate = str_arg("geglu", args[2], "approximate");
  return run(kGeglu, args, nargs,
             [&] { return geglu_op().call(gate, up, approximate); });
  OP_EXT_FAST_END
}

PyObject* fast_rms_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("rms_norm", 4)
  const Tensor& input = tensor_arg("rms_norm", args[0], "input");
  const auto shape = int_list_arg("rms_norm", args[1], "normalized_shape");
  const OptTensor weight = optional_tensor_arg("rms_norm", args[2], "weight");
  const auto eps = optional_float_arg("rms_norm", args[3], "eps");
  if (mixed_dtypes(input, weight)) Py_RETURN_NOTIMPLEMENTED;
  return run(kRmsNorm, args, nargs,
             [&] { return rms_norm_op().call(input, as_sym(shape), weight, eps); });
  OP_EXT_FAST_END
}

PyObject* fast_fused_add_rms_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* op = "fused_add_rms_norm";
  OP_EXT_FAST_BEGIN(op, 5)
  const Tensor& input = tensor_arg(op, args[0], "input");
  const Tensor& residual = tensor_arg(op, args[1], "residual");
  const auto shape = int_list_arg(op, args[2], "normalized_shape");
  const OptTensor weight = optional_tensor_arg(op, args[3], "weight");
  const auto eps = optional_float_arg(op, args[4], "eps");
  if (residual.scalar_type() != input.scalar_type() || mixed_dtypes(input, weight)) Py_RETURN_NOTIMPLEMENTED;
  return run(kFusedAddRmsNorm, args, nargs, [&] {
    return fused_add_rms_norm_op().call(input, residual, as_sym(shape), weight, eps);
  });
  OP_EXT_FAST_END
}

PyObject* fast_layer_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("layer_norm", 5)
  const Tensor& input = tensor_arg("layer_norm", args[0], "input");
  const auto shape = int_list_arg("layer_norm", args[1], "normalized_shape");
  const OptTensor weight = optional_tensor_arg("layer_norm", args[2], "weight");
  const OptTensor bias = optional_tensor_arg("layer_norm", args[3], "bias");
  const double eps = float_arg("layer_norm", args[4], "eps");
  if (mixed_dtypes(input, weight) || mixed_dtypes(input, bias)) Py_RETURN_NOTIMPLEMENTED;
  return run(kLayerNorm, args, nargs,
             [&] { return layer_norm_op().call(input, as_sym(shape), weight, bias, eps); });
  OP_EXT_FAST_END
}

PyObject* fast_softmax(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  OP_EXT_FAST_BEGIN("softmax", 2)
  const Tensor& input = tensor_arg("softmax", args[0], "input");
  const int64_t dim = int_arg("softmax", args[1], "dim");
  return run(kSoftmax, args, nargs, [&] { return softmax_op().call(input, dim); });
  OP_EXT_FAST_END
}

// ---- CPU kernel variant -------------------------------------------------------

PyObject* cpu_isa(PyObject*, PyObject*) {
  return PyUnicode_FromString(cpu::isa_name(cpu::active_isa()));
}

PyObject* best_cpu_isa(PyObject*, PyObject*) {
  return PyUnicode_FromString(cpu::isa_name(cpu::best_isa()));
}

PyObject* set_cpu_isa(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : nullptr;
  if (name == nullptr) {
    PyErr_SetString(PyExc_TypeError, "set_cpu_isa takes 'default', 'avx2' or 'avx512'");
    return nullptr;
  }
  cpu::Isa isa;
  if (std::strcmp(name, "default") == 0) {
    isa = cpu::Isa::Default;
  } else if (std::strcmp(name, "avx2") == 0) {
    isa = cpu::Isa::Avx2;
  } else if (std::strcmp(name, "avx512") == 0) {
    isa = cpu::Isa::Avx512;
  } else {
    PyErr_Format(PyExc_ValueError, "unknown CPU ISA '%s' (expected default, avx2 or avx512)", name);
    return nullptr;
  }
  if (!cpu::set_active_isa(isa)) {
    PyErr_Format(PyExc_ValueError, "this CPU cannot run the '%s' kernels", name);
    return nullptr;
  }
  Py_RETURN_NONE;
}

#define OP_EXT_FASTCALL(name, fn, doc) \
  {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)), METH_FASTCALL, doc}

PyMethodDef methods[] = {
    OP_EXT_FASTCALL("add", fast_add, "add(input, other, alpha)"),
    OP_EXT_FASTCALL("gelu", fast_gelu, "gelu(input, approximate)"),
    OP_EXT_FASTCALL("swiglu", fast_swiglu, "swiglu(gate, up)"),
    OP_EXT_FASTCALL("geglu", fast_geglu, "geglu(gate, up, approximate)"),
    OP_EXT_FASTCALL("rms_norm", fast_rms_norm, "rms_norm(input, normalized_shape, weight, eps)"),
    OP_EXT_FASTCALL("fused_add_rms_norm", fast_fused_add_rms_norm,
                    "fused_add_rms_norm(input, residual, normalized_shape, weight, eps)"),
    OP_EXT_FASTCALL("layer_norm", fast_layer_norm,
                    "layer_norm(input, normalized_shape, weight, bias, eps)"),
    OP_EXT_FASTCALL("softmax", fast_softmax, "softmax(input, dim)"),
    {"_set_transform_handlers", set_transform_handlers, METH_O,
     "Registers op_extension._transforms' functions for calls under torch.func transforms or "
     "with forward-mode tangents."},
    {"cpu_isa", cpu_isa, METH_NOARGS, "The instruction set of the CPU kernels in use."},
    {"best_cpu_isa", best_cpu_isa, METH_NOARGS, "The best instruction set this CPU supports."},
    {"set_cpu_isa", set_cpu_isa, METH_O,
     "Use the CPU kernels built for 'default', 'avx2' or 'avx512'."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

}  // namespace
}  // namespace op_ext

PyMODINIT_FUNC PyInit__C() {
  return PyModule_Create(&op_ext::module_def);
}
