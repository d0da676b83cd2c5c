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
// The per-op functions are generated from the prototypes at build time
// (op_ext_fast_path.h, op_extension/_cpp_gen.py's generate_fast_path): each
// unpacks its schema's arguments with the helpers below and calls run(). This
// file names no op. A call whose tensors do not all share the first tensor's
// dtype returns NotImplemented: the op's Python function then handles the mixed
// dtypes (the norms compute in the wider dtype) or calls torch.ops.custom.<op>,
// whose dtype check raises.
//
// Under a torch.func transform, or with an input that carries a forward-mode
// tangent, the fast path hands the call to the op's Python handler registered
// by op_extension/_transforms.py instead (the C++ autograd kernels support
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
#include <tuple>
#include <utility>
#include <vector>

#include "../kernel/cpu/cpu_kernels.h"
#include "../kernel/cpu/numerics_check.h"
#include "../kernel/cpu/rms_norm.h"
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

// No op of today takes a bool; the generator can emit it (FAST_ARG).
[[maybe_unused]] bool bool_arg(const char* op, PyObject* obj, const char* name) {
  if (!PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "custom::%s: %s must be a bool, got %s", op, name,
                 Py_TYPE(obj)->tp_name);
    throw ArgError{};
  }
  return obj == Py_True;
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

PyObject* wrap(Tensor t) {
  return THPVariable_Wrap(std::move(t));
}

// An op's outputs as a Python tuple of tensors, or nullptr with the error set.
template <typename... Ts>
PyObject* wrap(std::tuple<Ts...> results) {
  PyObject* tuple = PyTuple_New(sizeof...(Ts));
  if (tuple == nullptr) return nullptr;
  Py_ssize_t i = 0;
  bool ok = true;
  std::apply(
      [&](auto&... result) {
        // PyTuple_SET_ITEM steals each reference; a failed wrap stops the rest.
        ((ok = ok && [&] {
            PyObject* item = wrap(std::move(result));
            if (item != nullptr) PyTuple_SET_ITEM(tuple, i++, item);
            return item != nullptr;
          }()),
         ...);
      },
      results);
  if (!ok) {
    Py_DECREF(tuple);  // unset items are NULL, which the tuple's dealloc skips
    return nullptr;
  }
  return tuple;
}

// Runs the op without the GIL, as torch.ops does, and wraps the results.
template <typename F>
PyObject* call_unlocked(F&& f) {
  decltype(f()) result;
  {
    pybind11::gil_scoped_release no_gil;
    result = f();
  }
  return wrap(std::move(result));
}

// ---- torch.func transforms and forward-mode AD ------------------------------

// Calls op_extension._transforms' handler of the forward op `op` (an OpIndex of
// the generated fast path) with the fast path's own arguments.
PyObject* call_transforms(int op, PyObject* const* args, Py_ssize_t nargs);

// Runs the op, or op_extension._transforms' handler where the C++ path cannot.
template <typename F>
PyObject* run(int op, PyObject* const* args, Py_ssize_t nargs, F&& f) {
  if (functorch_active()) return call_transforms(op, args, nargs);
  try {
    return call_unlocked(std::forward<F>(f));
  } catch (const TangentError&) {  // thrown before the op did anything
    return call_transforms(op, args, nargs);
  }
}

// ---- the generated functions' other helpers -------------------------------------

bool other_dtype(const Tensor& first, const Tensor& t) {
  return t.scalar_type() != first.scalar_type();
}
bool other_dtype(const Tensor& first, const OptTensor& t) {
  return t.has_value() && t->defined() && t->scalar_type() != first.scalar_type();
}

// A tensor argument (one that is given) of another dtype than the first: the
// fast path returns NotImplemented and leaves the call to the op's Python
// function (the prototypes' dtype lists give every tensor of a call one dtype,
// so such a call is one the op refuses or Python converts, as the norms do
// under autocast). One comparison here instead of attribute reads in Python.
template <typename... Ts>
bool mixed_dtypes(const Tensor& first, const Ts&... others) {
  return (other_dtype(first, others) || ...);
}

PyCFunction fastcall(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

#define OP_EXT_FAST_BEGIN(op, n)                  \
  HANDLE_TH_ERRORS                                \
  if (!check_nargs(op, nargs, n)) return nullptr; \
  try {
#define OP_EXT_FAST_END     \
  }                         \
  catch (const ArgError&) { \
    return nullptr;         \
  }                         \
  END_HANDLE_TH_ERRORS

}  // namespace
}  // namespace op_ext

// fast_<op> for every forward op, OpIndex, kOpNames, fast_path_methods.
#include "op_ext_fast_path.h"

namespace op_ext {
namespace {

// op_extension._transforms' handler per op (strong references, set once at import).
PyObject* transform_handlers[kNumOps] = {};

PyObject* call_transforms(int op, PyObject* const* args, Py_ssize_t nargs) {
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

// ---- CPU streaming stores (kernel/cpu/cpu_kernels.h) ---------------------------

PyObject* cpu_streaming_store_bytes(PyObject*, PyObject*) {
  return PyLong_FromLongLong(cpu::streaming_store_bytes());
}

PyObject* set_cpu_streaming_store_bytes(PyObject*, PyObject* arg) {
  const long long bytes = PyLong_AsLongLong(arg);
  if (bytes == -1 && PyErr_Occurred()) return nullptr;
  return PyLong_FromLongLong(cpu::set_streaming_store_bytes(bytes));
}

PyObject* cpu_streamed_calls(PyObject*, PyObject*) {
  return PyLong_FromLongLong(cpu::streamed_calls());
}

// ---- native float -> bfloat16 rounding (kernel/cpu/cpu_kernels.h) -------------

PyObject* cpu_native_bf16_narrowing(PyObject*, PyObject*) {
  return PyBool_FromLong(cpu::native_bf16_narrowing());
}

PyObject* set_cpu_native_bf16_narrowing(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  if (!cpu::set_native_bf16_narrowing(on != 0)) {
    PyErr_SetString(PyExc_ValueError, "this CPU has no AVX512-BF16 (VCVTNE2PS2BF16) for native bfloat16 rounding");
    return nullptr;
  }
  Py_RETURN_NONE;
}

// (mismatches, first mismatching pattern, natively converted pairs, pairs) of
// bf16_narrowing_check over every float, in the active ISA.
PyObject* cpu_bf16_narrowing_check(PyObject*, PyObject* arg) {
  const int spread = PyObject_IsTrue(arg);
  if (spread < 0) return nullptr;
  int64_t mismatches = 0, native_pairs = 0, pairs = 0;
  uint64_t first = 0;
  {
    // Every float in a few seconds; release the GIL meanwhile.
    PyThreadState* state = PyEval_SaveThread();
    cpu::bf16_narrowing_check(cpu::DType::Float32, {spread != 0, &mismatches, &first, &native_pairs, &pairs});
    PyEval_RestoreThread(state);
  }
  return Py_BuildValue("LKLL", static_cast<long long>(mismatches), static_cast<unsigned long long>(first),
                       static_cast<long long>(native_pairs), static_cast<long long>(pairs));
}

// exp_check's (worst relative error, its x, worst error in ulps, its x, floats
// checked) for exp_fast (precise false) or exp_precise: every stride-th float
// with |x| <= limit, and the ends (+-inf, +-1000, NaN), in the active ISA.
PyObject* cpu_exp_check(PyObject*, PyObject* args) {
  int precise = 0;
  float limit = 0;
  long long stride = 1;
  if (!PyArg_ParseTuple(args, "pfL", &precise, &limit, &stride)) return nullptr;
  if (!(limit >= 0 && limit <= 1e4f) || stride < 1) {
    PyErr_SetString(PyExc_ValueError, "exp check: need 0 <= limit <= 1e4 and stride >= 1");
    return nullptr;
  }
  double worst = 0, worst_ulps = 0;
  float at = 0, ulps_at = 0;
  int64_t checked = 0;
  {
    PyThreadState* state = PyEval_SaveThread();
    cpu::exp_check(cpu::DType::Float32,
                   {precise != 0, limit, stride, &worst, &at, &worst_ulps, &ulps_at, &checked});
    PyEval_RestoreThread(state);
  }
  return Py_BuildValue("dfdfL", worst, at, worst_ulps, ulps_at, static_cast<long long>(checked));
}

// The address of one kernel stub as this library's code sees it: differs from
// _cuda_sim's unless the dynamic linker merged the two (tests/test_library_isolation.py).
PyObject* kernel_stub_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(static_cast<void*>(&cpu::rms_norm_forward));
}

// The module's functions besides the fast path's (fast_path_methods, added at init).
PyMethodDef methods[] = {
    {"_set_transform_handlers", set_transform_handlers, METH_O,
     "Registers op_extension._transforms' functions for calls under torch.func transforms or "
     "with forward-mode tangents."},
    {"cpu_isa", cpu_isa, METH_NOARGS, "The instruction set of the CPU kernels in use."},
    {"best_cpu_isa", best_cpu_isa, METH_NOARGS, "The best instruction set this CPU supports."},
    {"set_cpu_isa", set_cpu_isa, METH_O,
     "Use the CPU kernels built for 'default', 'avx2' or 'avx512'."},
    {"cpu_streaming_store_bytes", cpu_streaming_store_bytes, METH_NOARGS,
     "Bytes one CPU kernel call moves above which it writes its outputs with streaming stores."},
    {"set_cpu_streaming_store_bytes", set_cpu_streaming_store_bytes, METH_O,
     "Sets that threshold (a negative value: never stream); returns the old one."},
    {"_cpu_streamed_calls", cpu_streamed_calls, METH_NOARGS,
     "CPU kernel calls that chose streaming stores so far."},
    {"cpu_native_bf16_narrowing", cpu_native_bf16_narrowing, METH_NOARGS,
     "Whether the CPU kernels round float to bfloat16 with AVX512-BF16's VCVTNE2PS2BF16."},
    {"set_cpu_native_bf16_narrowing", set_cpu_native_bf16_narrowing, METH_O,
     "Switches that on or off for later calls (ValueError: the CPU lacks the instruction)."},
    {"_cpu_bf16_narrowing_check", cpu_bf16_narrowing_check, METH_O,
     "(mismatches, first mismatch, native pairs, pairs): the native bfloat16 rounding against "
     "at::vec's over every float, lanes consecutive (False) or spread (True)."},
    {"_cpu_exp_check", cpu_exp_check, METH_VARARGS,
     "(precise, limit, stride) -> (worst relative error, its x, worst ulps, its x, floats "
     "checked): the CPU kernels' exp_precise (or exp_fast) against exp in double, every "
     "stride-th float with |x| <= limit."},
    {"_kernel_stub_address", kernel_stub_address, METH_NOARGS,
     "The address of the rms_norm_forward kernel stub in this library (a test of library isolation)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

}  // namespace
}  // namespace op_ext

PyMODINIT_FUNC PyInit__C() {
  PyObject* module = PyModule_Create(&op_ext::module_def);
  if (module != nullptr && PyModule_AddFunctions(module, op_ext::fast_path_methods) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
