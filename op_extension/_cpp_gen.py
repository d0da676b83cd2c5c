"""The C++ that the prototypes determine, generated into build/generated at build time.

setup.py calls these with the parsed prototypes (``_protos.load_protos``); nothing
here is hand-maintained per op:

    op_ext_handles.h    a typed dispatcher handle per op (``<name>_op()``), its C++
                        signature derived from the schema
    op_ext_glue.h       includes each op's glue header (csrc/torch_ext/ops/<forward>.h)
                        and registers ``glue::<name><Kernels>`` for every op under a
                        device's key (``glue::register_ops<Kernels>``)
    op_ext_autograd.cpp the Autograd-key kernels: for every forward op whose
                        gradients its backward prototype names, a torch autograd
                        Function derived from the names (see ``autograd_plan``);
                        ops whose derivative is more than that write theirs in
                        csrc/torch_ext/autograd/<name>.cpp and are left out here;
                        backward ops refuse double backward
    op_ext_fast_path.h  the eager fast path of op_extension._C, included by
                        csrc/torch_ext/python_module.cpp (which holds its helpers):
                        per forward op a CPython function ``_C.<name>`` unpacking
                        the schema's arguments by type (``FAST_ARG``), returning
                        NotImplemented for tensors of mixed dtypes, and calling
                        ``<name>_op()``; the op index that the transform handlers
                        are kept by, and the module's method table entries
    op_ext_ascend_sim_ops.h  the Ascend simulator's entry per op (``_ascend_sim.<name>``,
                        included by csrc/ascendc_sim/binding/ascend_sim_module.cpp):
                        contiguous inputs, outputs by the shape rules, the aclnn
                        entry (``aclnn_name``) with its arguments in CANN's order
    aclnn_<stem>.h      each op's aclnn entry points (``aclnn_name``, arguments in
                        CANN's order ``aclnn_order``, named by ``aclnn_arg_name``),
                        included by the npu glue and the simulator binding
    aclnn_<stem>_args.h <OpType>CustomArgs, the arguments as the entry read and
                        checked them, and the declaration of Plan<OpType>Custom,
                        the op's hand-written part (csrc/host/aclnn/aclnn_<stem>.cpp:
                        the checks the prototype cannot state, the tiling, the
                        kernel launches)
    op_ext_aclnn_entries.cpp  every op's two aclnn phases: the first describes each
                        tensor, checks what the prototype says (dtypes, output
                        shapes, optional gradients, string attributes, contiguity)
                        and calls the plan; the second is the shared RunLaunch.
                        Compiled by the simulator's module and cmake/ascend
    op_ext_npu_registration.cpp  (npu builds only) declares each op's
                        ``op_ext::npu::<name>_npu``, defined in its forward op's
                        csrc/torch_ext/npu/ops/<forward>.cpp, and registers it
                        under PrivateUse1

Like _protos.py, this module imports only the standard library (setup.py loads it
before the package is importable).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HEADER = [
    "// Generated from op_protos/*.json by op_extension/_cpp_gen.py at build time.",
    "// Do not edit: change the prototype (or the op's own files) and rebuild.",
]

# Schema argument types -> the C++ parameter types of a typed dispatcher handle
# (what c10::TypedOperatorHandle<...> expects for that schema type).
_CPP_PARAM = {
    "Tensor": "const at::Tensor&",
    "Tensor?": "const std::optional<at::Tensor>&",
    "SymInt[]": "c10::SymIntArrayRef",
    "int[]": "at::IntArrayRef",
    "float": "double",
    "float?": "std::optional<double>",
    "int": "int64_t",
    "int?": "std::optional<int64_t>",
    "bool": "bool",
    "bool?": "std::optional<bool>",
    "str": "c10::string_view",
}


# Schema argument types -> the parameter types of a device kernel registered with
# m.impl (the glue of csrc/torch_ext/ops/<op>.h, which the scaffold writes): the
# kernels run on concrete sizes, so SymInt[] arrives as IntArrayRef.
GLUE_PARAM = {
    "Tensor": "const Tensor&",
    "Tensor?": "const std::optional<Tensor>&",
    "SymInt[]": "IntArrayRef",
    "float": "double",
    "float?": "std::optional<double>",
    "int": "int64_t",
    "bool": "bool",
    "str": "c10::string_view",
}


@dataclass(frozen=True)
class SchemaArg:
    type: str
    name: str


def schema_args(proto) -> list[SchemaArg]:
    """The schema's arguments, in order: (type, name) of each."""
    args = []
    for text in proto._schema_args():
        typ, rest = text.split(" ", 1)
        args.append(SchemaArg(typ, rest.split("=", 1)[0]))
    return args


def cpp_param(arg: SchemaArg) -> str:
    try:
        return _CPP_PARAM[arg.type]
    except KeyError:
        raise ValueError(f"{arg.name}: no C++ type for schema type {arg.type!r}") from None


def cpp_return(proto) -> str:
    if len(proto.outputs) == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join(["at::Tensor"] * len(proto.outputs)) + ">"


def cpp_signature(proto) -> str:
    return f"{cpp_return(proto)}({', '.join(cpp_param(a) for a in schema_args(proto))})"


def generate_handles(protos: dict) -> str:
    lines = HEADER + [
        "#pragma once",
        "#include <ATen/core/Tensor.h>",
        "#include <ATen/core/dispatch/Dispatcher.h>",
        "",
        "#include <optional>",
        "#include <tuple>",
        "",
        "namespace op_ext {",
        "",
        "// Looked up once per process: the dispatcher's handles are stable.",
    ]
    for p in protos.values():
        sig = cpp_signature(p)
        lines += [
            f"inline const c10::TypedOperatorHandle<{sig}>& {p.name}_op() {{",
            f"  static const auto handle = c10::Dispatcher::singleton()",
            f'      .findSchemaOrThrow("custom::{p.name}", "")',
            f"      .typed<{sig}>();",
            "  return handle;",
            "}",
        ]
    lines += ["", "}  // namespace op_ext", ""]
    return "\n".join(lines)


def forward_ops(protos: dict) -> list:
    return [p for p in protos.values() if p.backward_of is None]


def generate_glue_registry(protos: dict, csrc: Path, include_from: Path | None = None) -> str:
    """Every op's glue header, and register_ops<Kernels>: one m.impl per op."""
    lines = HEADER + [
        "#pragma once",
        "#include <torch/library.h>",
        "",
    ]
    lines += _include_each_op(protos, csrc / "torch_ext" / "ops", ".h", "glue header", include_from)
    lines += [
        "",
        "namespace op_ext::glue {",
        "",
        "// Registers every op, implemented with `Kernels`, in a TORCH_LIBRARY_IMPL block.",
        "template <typename Kernels>",
        "void register_ops(torch::Library& m) {",
    ]
    lines += [f'  m.impl("{p.name}", &glue::{p.name}<Kernels>);' for p in protos.values()]
    lines += ["}", "", "}  // namespace op_ext::glue", ""]
    return "\n".join(lines)


def generate_cuda_launchers(protos: dict, csrc: Path, include_from: Path | None = None) -> str:
    """Every op's CUDA header (kernel/cuda/<op>.cuh): the launchers and the
    `cuda::launcher(kernel)` overloads through which the CUDA glue and the CPU
    harness run them, bound at link time."""
    lines = HEADER + ["#pragma once", ""]
    lines += _include_each_op(protos, csrc / "kernel" / "cuda", ".cuh", "CUDA header", include_from)
    return "\n".join(lines + [""])


def include_line(header: Path, include_from: Path | None) -> str:
    """#include of `header` in a file generated into the folder `include_from`:
    relative to that folder (a quoted include looks there first), so that the
    generated text, and the compiler cache's hash of it, is the same in every
    copy of the tree (setup.py's compiler_cache()); absolute where no folder is
    given."""
    path = header.resolve()
    if include_from is not None:
        path = Path(os.path.relpath(path, Path(include_from).resolve()))
    return f'#include "{path.as_posix()}"'


def _include_each_op(protos: dict, folder: Path, suffix: str, what: str, include_from: Path | None) -> list[str]:
    """An #include of folder/<op><suffix> for every forward op; a missing one names the scaffold."""
    lines = []
    for p in forward_ops(protos):
        header = folder / f"{p.name}{suffix}"
        if not header.exists():
            raise FileNotFoundError(
                f"{p.path.name}: the op {p.name} has no {what} {header.as_posix()} "
                f"(python -m op_extension.scaffold {p.path.as_posix()} writes one)"
            )
        lines.append(include_line(header, include_from))
    return lines


# ---- autograd ---------------------------------------------------------------------


class AutogradPlanError(ValueError):
    pass


@dataclass(frozen=True)
class BackwardArg:
    """Where one argument of the backward op comes from."""

    kind: str  # "grad" (of forward output `index`), "input", "output" (saved), "attr"
    index: int  # position among the forward's schema args / outputs
    arg: SchemaArg


@dataclass(frozen=True)
class AutogradPlan:
    forward: object
    backward: object
    backward_args: tuple[BackwardArg, ...]
    # For each forward schema arg: the backward output giving its gradient, or None.
    input_grads: tuple[int | None, ...]


def autograd_plan(forward, backward) -> AutogradPlan:
    """Wires a forward op to its backward op by the prototypes' names alone:

    - a backward argument ``grad_<out>`` is the incoming gradient of the forward
      output ``<out>``;
    - any other backward argument is the forward argument or output of that name,
      saved at forward time (tensors with save_for_backward, the rest by value);
    - a backward output ``grad_<in>`` is the gradient of the forward input ``<in>``,
      left undefined where an optional input was absent;
    - every forward tensor input must get a gradient that way.

    Raises AutogradPlanError when the names do not say it all (the op then writes
    its autograd by hand in csrc/torch_ext/autograd/<name>.cpp)."""
    f_args = schema_args(forward)
    f_names = [a.name for a in f_args]
    out_names = [o.name for o in forward.outputs]
    b_args = []
    for arg in schema_args(backward):
        if arg.name.startswith("grad_") and arg.name[5:] in out_names:
            b_args.append(BackwardArg("grad", out_names.index(arg.name[5:]), arg))
        elif arg.name in f_names:
            i = f_names.index(arg.name)
            if f_args[i].type != arg.type:
                raise AutogradPlanError(f"{backward.name}: {arg.name} is {arg.type}, but {f_args[i].type} in {forward.name}")
            kind = "input" if arg.type in ("Tensor", "Tensor?") else "attr"
            b_args.append(BackwardArg(kind, i, arg))
        elif arg.name in out_names:
            b_args.append(BackwardArg("output", out_names.index(arg.name), arg))
        else:
            raise AutogradPlanError(f"{backward.name}: argument {arg.name} is neither grad_<output> nor a {forward.name} argument or output")
    input_grads: list[int | None] = [None] * len(f_args)
    for j, out in enumerate(backward.outputs):
        name = out.name[5:] if out.name.startswith("grad_") else None
        if name not in f_names:
            raise AutogradPlanError(f"{backward.name}: output {out.name} is not grad_<input of {forward.name}>")
        input_grads[f_names.index(name)] = j
    for i, a in enumerate(f_args):
        if a.type in ("Tensor", "Tensor?") and input_grads[i] is None:
            raise AutogradPlanError(f"{backward.name}: no output gives the gradient of {forward.name}'s {a.name}")
    return AutogradPlan(forward, backward, tuple(b_args), tuple(input_grads))


def hand_written_autograd(csrc: Path) -> set[str]:
    return {p.stem for p in (csrc / "torch_ext" / "autograd").glob("*.cpp")}


def _saved_value(arg: SchemaArg, value: str) -> str:
    """C++ that stores a forward attribute in ctx->saved_data."""
    if arg.type == "str":
        return f"std::string({value})"
    return value


def _read_saved(arg: SchemaArg, key: str) -> str:
    item = f'ctx->saved_data["{key}"]'
    return {
        "SymInt[]": f"{item}.toSymIntVector()",
        "int[]": f"{item}.toIntVector()",
        "float": f"{item}.toDouble()",
        "float?": f"{item}.toOptional<double>()",
        "int": f"{item}.toInt()",
        "int?": f"{item}.toOptional<int64_t>()",
        "bool": f"{item}.toBool()",
        "bool?": f"{item}.toOptional<bool>()",
        "str": f"{item}.toStringRef()",
    }[arg.type]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _autograd_function(plan: AutogradPlan) -> list[str]:
    f, b = plan.forward, plan.backward
    f_args = schema_args(f)
    cls = f"{_camel(f.name)}Function"
    params = ", ".join(f"{cpp_param(a)} {a.name}" for a in f_args)
    call_args = ", ".join(a.name for a in f_args)
    multi = len(f.outputs) > 1
    saved_inputs = [ba for ba in plan.backward_args if ba.kind == "input"]
    saved_outputs = [ba for ba in plan.backward_args if ba.kind == "output"]
    attrs = [ba for ba in plan.backward_args if ba.kind == "attr"]
    slot = {}  # (kind, index) -> position in the saved variables
    for ba in saved_inputs + saved_outputs:
        slot[(ba.kind, ba.index)] = len(slot)

    def as_tensor(ba: BackwardArg) -> str:
        return f"{ba.arg.name}.value_or(at::Tensor())" if ba.arg.type == "Tensor?" else ba.arg.name

    lines = [
        f"class {cls} : public torch::autograd::Function<{cls}> {{",
        " public:",
        f"  static {'variable_list' if multi else 'at::Tensor'} forward(AutogradContext* ctx, {params}) {{",
    ]
    for ba in attrs:
        lines.append(f'    ctx->saved_data["{ba.arg.name}"] = {_saved_value(ba.arg, ba.arg.name)};')
    lines.append("    at::AutoDispatchBelowADInplaceOrView guard;")
    result = f"{f.name}_op().call({call_args})"
    out_names = [o.name for o in f.outputs]
    if multi:
        lines.append(f"    auto [{', '.join(out_names)}] = {result};")
    else:
        lines.append(f"    at::Tensor {out_names[0]} = {result};")
    saved = [as_tensor(ba) for ba in saved_inputs] + [out_names[ba.index] for ba in saved_outputs]
    if saved:
        lines.append(f"    save_for_backward(ctx, {{{', '.join(saved)}}});")
    lines.append(f"    return {{{', '.join(out_names)}}};" if multi else f"    return {out_names[0]};")
    lines += ["  }", "", "  static variable_list backward(AutogradContext* ctx, variable_list grads) {"]
    if saved:
        lines.append("    const auto saved = ctx->get_saved_variables();")
    b_call = []
    for ba in plan.backward_args:
        if ba.kind == "grad":
            b_call.append(f"saved_optional(grads[{ba.index}])" if ba.arg.type == "Tensor?" else f"grads[{ba.index}]")
        elif ba.kind in ("input", "output"):
            s = f"saved[{slot[(ba.kind, ba.index)]}]"
            b_call.append(f"saved_optional({s})" if ba.arg.type == "Tensor?" else s)
        else:
            b_call.append(_read_saved(ba.arg, ba.arg.name))
    call = f"{b.name}_op().call({', '.join(b_call)})"
    grad_names = [o.name for o in b.outputs]
    if len(grad_names) == 1:
        lines.append(f"    const at::Tensor {grad_names[0]} = {call};")
    else:
        lines.append(f"    auto [{', '.join(grad_names)}] = {call};")
    returns = []
    for i, a in enumerate(f_args):
        j = plan.input_grads[i]
        if j is None:
            returns.append("at::Tensor()")
        elif a.type == "Tensor?":
            # The backward op returns an empty placeholder for an absent parameter.
            ba = next((x for x in saved_inputs if x.index == i), None)
            if ba is None:
                raise AutogradPlanError(f"{b.name}: {a.name} is optional, so {b.name} must take it to say whether it was given")
            returns.append(f"param_grad(saved[{slot[('input', i)]}], {grad_names[j]})")
        else:
            returns.append(grad_names[j])
    lines += [f"    return {{{', '.join(returns)}}};", "  }", "};", ""]

    # The Autograd-key kernel.
    tensors = [a.name for a in f_args if a.type in ("Tensor", "Tensor?")]
    ret = cpp_return(f)
    lines += [
        f"{ret} {f.name}_autograd({params}) {{",
        f'  check_no_tangent("{f.name}", {", ".join(tensors)});',
        f"  if (!records_graph({', '.join(tensors)})) {{",
        "    at::AutoDispatchBelowADInplaceOrView guard;",
        f"    return {result};",
        "  }",
        f'  check_no_functorch("{f.name}");',
    ]
    if multi:
        lines += [f"  auto outs = {cls}::apply({call_args});",
                  f"  return {{{', '.join(f'outs[{i}]' for i in range(len(out_names)))}}};"]
    else:
        lines.append(f"  return {cls}::apply({call_args});")
    lines += ["}", ""]
    return lines


def generate_autograd(protos: dict, csrc: Path, include_from: Path | None = None) -> str:
    by_hand = hand_written_autograd(csrc)
    derived = []
    for p in forward_ops(protos):
        if p.name in by_hand:
            continue
        if p.backward is None:
            raise AutogradPlanError(f"{p.path.name}: {p.name} names no backward op and has no csrc/torch_ext/autograd/{p.name}.cpp")
        try:
            derived.append(autograd_plan(p, protos[p.backward]))
        except AutogradPlanError as e:
            raise AutogradPlanError(f"{e}; write csrc/torch_ext/autograd/{p.name}.cpp by hand, or rename to the convention") from None
    lines = HEADER + [
        "//",
        "// Each forward op redispatches below the Autograd key to the device kernel;",
        "// its backward calls the op's backward op through the dispatcher, so tracing",
        "// (torch.compile, export) sees the backward op too. The helpers are in",
        "// csrc/torch_ext/autograd_util.h, shared with the hand-written ones.",
        include_line(csrc / "torch_ext" / "autograd_util.h", include_from),
        "",
        "namespace op_ext {",
        "namespace {",
        "",
    ]
    for plan in derived:
        lines += _autograd_function(plan)
    lines += ["}  // namespace", "", "TORCH_LIBRARY_IMPL(custom, Autograd, m) {"]
    lines += [f'  m.impl("{plan.forward.name}", &{plan.forward.name}_autograd);' for plan in derived]
    lines += [
        "  // The backward ops are not differentiable (no double backward): say so",
        "  // clearly instead of silently dropping the graph.",
    ]
    lines += [
        f'  m.impl("{p.name}", torch::autograd::autogradNotImplementedFallback());'
        for p in protos.values()
        if p.backward_of is not None
    ]
    lines += ["}", "", "}  // namespace op_ext", ""]
    return "\n".join(lines)


# ---- Ascend: the aclnn entry of each op, and its simulator binding --------------------


def ascend_stem(proto) -> str:
    """The file stem of an op's Ascend pieces, as msopgen names a custom op's:
    <forward>_custom, and <forward>_grad_custom for the backward op
    (kernel/ascendc/<stem>.cpp, host/tiling/<stem>_tiling.h, host/aclnn/aclnn_<stem>.cpp,
    and the generated aclnn_<stem>.h)."""
    return f"{proto.backward_of}_grad_custom" if proto.backward_of else f"{proto.name}_custom"


def aclnn_name(proto) -> str:
    """The op's aclnn entry point, from its CANN op type: aclnn<OpType>Custom
    (aclnn<OpType>CustomGetWorkspaceSize is phase 1)."""
    return f"aclnn{proto.op_type}Custom"


def aclnn_order(proto) -> list[str]:
    """The arguments of the aclnn entry, in CANN's order: the inputs in the
    prototype's input_desc order, then the attributes in attr order, then the
    outputs in output_desc order (then workspace size and executor)."""
    return [t.name for t in proto.inputs] + [a.name for a in proto.attrs] + [t.name for t in proto.outputs]


# The aclnn entry points themselves: everything the prototype says about an op's
# aclnn arguments is generated (the headers, the reading and checking of the
# arguments, the launch phase); what it cannot say -- shape rules between inputs,
# attribute ranges, the tiling and the kernel launch -- is the op's hand-written
# Plan<OpType>Custom in csrc/host/aclnn/aclnn_<stem>.cpp.

# An attribute's C type in the aclnn entry, by the prototype's schema type (an
# optional attribute takes its type's value: the callers resolve None).
_ACLNN_ATTR = {"int": "int64_t", "float": "double", "bool": "bool", "str": "char*", "SymInt[]": "const aclIntArray*"}
# What the op's plan sees of an attribute: the same, a string read-only.
_PLAN_ATTR = {**_ACLNN_ATTR, "str": "const char*"}
# The prototype's dtypes that the Ascend kernels take (float64, which the CPU and
# CUDA kernels take, has no Ascend kernel), as aclDataType.
_ACL_DTYPE = {"float16": "ACL_FLOAT16", "float32": "ACL_FLOAT", "bfloat16": "ACL_BF16"}


def _lower_camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def aclnn_arg_name(proto, name: str) -> str:
    """An argument's name in the aclnn entry, as CANN names those of custom
    operators: lowerCamelCase; an optional input with the suffix Optional; the
    single output `out`, each of several outputs <name>Out. The checks' messages
    name the arguments so."""
    if any(t.name == name and t.optional for t in proto.inputs):
        return _lower_camel(name) + "Optional"
    if any(t.name == name for t in proto.outputs):
        return "out" if len(proto.outputs) == 1 else _lower_camel(name) + "Out"
    return _lower_camel(name)


def aclnn_params(proto, sep: str = ", ") -> str:
    """The parameters of aclnn<OpType>CustomGetWorkspaceSize before workspaceSize
    and executor, in CANN's order (aclnn_order), joined by `sep`."""
    attrs = {a.name: a for a in proto.attrs}
    params = []
    for name in aclnn_order(proto):
        if name in attrs:
            params.append(f"{_ACLNN_ATTR[attrs[name].schema_type]} {aclnn_arg_name(proto, name)}")
        else:
            params.append(f"const aclTensor* {aclnn_arg_name(proto, name)}")
    return sep.join(params)


def aclnn_op(proto) -> str:
    """The op type CANN knows the op by, which the aclnn messages start with."""
    return f"{proto.op_type}Custom"


def aclnn_plan_source(csrc: Path, proto) -> Path:
    """The op's hand-written part of its aclnn entry: Plan<OpType>Custom."""
    return csrc / "host" / "aclnn" / f"aclnn_{ascend_stem(proto)}.cpp"


def _generated_from(proto) -> list[str]:
    return [
        f"// Generated from op_protos/{proto.path.name} by op_extension/_cpp_gen.py at build time.",
        "// Do not edit: change the prototype (or the op's own files) and rebuild.",
    ]


def generate_aclnn_header(proto) -> str:
    """aclnn_<stem>.h: the op's aclnn entry points, the contract with its callers
    (the npu glue, the simulator binding)."""
    guard = f"OP_EXT_GENERATED_ACLNN_{ascend_stem(proto).upper()}_H_"
    name = aclnn_name(proto)
    return "\n".join(_generated_from(proto) + [
        "//",
        f"// The aclnn entry points of {aclnn_op(proto)} (custom::{proto.name}), in the two-phase form",
        "// CANN generates for custom operator packages: the inputs, the attributes, the",
        "// outputs (each in the prototype's order), then the workspace size and executor.",
        "// The first phase checks the arguments, runs the tiling function and sizes the",
        "// workspace; the second launches the kernel(s) on `stream`.",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "aclnn/acl_meta.h"',
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"aclnnStatus {name}GetWorkspaceSize(",
        f"    {aclnn_params(proto, ',' + chr(10) + '    ')},",
        "    uint64_t* workspaceSize, aclOpExecutor** executor);",
        "",
        f"aclnnStatus {name}(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif  // {guard}",
        "",
    ])


def generate_aclnn_args_header(proto) -> str:
    """aclnn_<stem>_args.h: <OpType>CustomArgs, the op's aclnn arguments as the
    generated first phase has read and checked them, and the declaration of the
    op's hand-written plan."""
    op = aclnn_op(proto)
    guard = f"OP_EXT_GENERATED_ACLNN_{ascend_stem(proto).upper()}_ARGS_H_"
    attrs = {a.name: a for a in proto.attrs}
    ref = _dtype_reference(proto)
    lines = _generated_from(proto) + [
        "//",
        f"// What Plan{op} (csrc/host/aclnn/aclnn_{ascend_stem(proto)}.cpp, by hand) receives from",
        f"// the generated aclnn{op}GetWorkspaceSize: every tensor described, present",
        "// when given (an optional one otherwise absent), of the dtype of",
        f"// `{aclnn_arg_name(proto, ref)}`, contiguous, each output shaped as its prototype's shape rule",
        "// says when that names an input; the attributes as passed (a string one",
        "// defaulted and checked against its allowed values).",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <cstdint>",
        "#include <optional>",
        "",
        '#include "aclnn_common.h"',
        '#include "soc_spec.h"',
        "",
        "namespace op_ext::aclnn {",
        "",
        f"struct {op}Args {{",
        f'  static constexpr const char* kOp = "{op}";',
        "  ascend::SocSpec soc;  // the SoC it runs on",
        f"  uint32_t dtype = 0;   // the kernel dtype code (KernelDType) of every tensor",
    ]
    for name in aclnn_order(proto):
        arg = aclnn_arg_name(proto, name)
        if name in attrs:
            lines.append(f"  {_PLAN_ATTR[attrs[name].schema_type]} {arg}{{}};")
        elif _optional_tensor(proto, name):
            lines.append(f"  std::optional<TensorDesc> {arg};")
        else:
            lines.append(f"  TensorDesc {arg};")
    lines += [
        "};",
        "",
        "// Checks what the prototype cannot say, tiles and plans the kernel launches.",
        f"LaunchPlan Plan{op}(const {op}Args& args);",
        "",
        "}  // namespace op_ext::aclnn",
        "",
        f"#endif  // {guard}",
        "",
    ]
    return "\n".join(lines)


def _optional_tensor(proto, name: str) -> bool:
    """An optional input, or the output whose shape rule names one (an optional
    parameter's gradient: given exactly when the parameter is)."""
    optional_inputs = {t.name for t in proto.inputs if t.optional}
    return name in optional_inputs or any(o.name == name and o.shape in optional_inputs for o in proto.outputs)


def _dtype_reference(proto) -> str:
    """The tensor whose dtype the op's others must share: the input whose shape
    the first output has, else the first required input (as the simulator
    binding picks the outputs' dtype)."""
    required = [t.name for t in proto.inputs if not t.optional]
    return proto.outputs[0].shape if proto.outputs[0].shape in required else required[0]


def _aclnn_entry(proto) -> list[str]:
    op = aclnn_op(proto)
    name = aclnn_name(proto)
    attrs = {a.name: a for a in proto.attrs}
    tensors = {t.name: t for t in proto.inputs + proto.outputs}
    inputs = {t.name: t for t in proto.inputs}
    ref = _dtype_reference(proto)
    arg = lambda n: aclnn_arg_name(proto, n)  # noqa: E731
    lines = [
        f"// {name} (op_protos/{proto.path.name}): what the prototype says, then Plan{op}.",
        f'extern "C" aclnnStatus {name}GetWorkspaceSize(',
        f"    {aclnn_params(proto, ',' + chr(10) + '    ')},",
        "    uint64_t* workspaceSize, aclOpExecutor** executor) {",
        "  using namespace op_ext::aclnn;",
        f"  constexpr const char* op = {op}Args::kOp;",
        "  return PrepareLaunch(op, workspaceSize, executor, [&]() {",
        f"    {op}Args args;",
        "    args.soc = op_ext::ascend::CurrentSocSpec();",
    ]
    # Every tensor: a null required one is ACLNN_ERR_PARAM_NULLPTR naming it.
    order = [n for n in aclnn_order(proto) if n in tensors]
    for n in order:
        if not _optional_tensor(proto, n):
            lines.append(f'    args.{arg(n)} = DescribeTensor(op, "{arg(n)}", {arg(n)});')
    for o in proto.outputs:
        if _optional_tensor(proto, o.name):
            lines += [
                f"    if (({arg(o.shape)} == nullptr) != ({arg(o.name)} == nullptr)) {{",
                f'      Invalid(op, "{arg(o.name)} must be given exactly when {arg(o.shape)} is");',
                "    }",
            ]
    for n in order:
        if _optional_tensor(proto, n):
            lines.append(f'    if ({arg(n)} != nullptr) args.{arg(n)} = DescribeTensor(op, "{arg(n)}", {arg(n)});')
    # dtypes: the reference's among the prototype's (those with an Ascend kernel);
    # every tensor whose type column is the reference's has its dtype.
    listed = []
    for d in tensors[ref].dtypes:
        if d in _ACL_DTYPE and _ACL_DTYPE[d] not in listed:
            listed.append(_ACL_DTYPE[d])
    if not listed:
        raise ValueError(f"{proto.path.name}: {proto.name}: {ref} lists no dtype an Ascend kernel takes ({', '.join(_ACL_DTYPE)})")
    lines.append(f'    args.dtype = KernelDType(op, "{arg(ref)}", args.{arg(ref)}.dtype, args.soc, {{{", ".join(listed)}}});')
    for n in order:
        if n == ref:
            continue
        if tensors[n].dtypes != tensors[ref].dtypes:
            raise ValueError(f"{proto.path.name}: {proto.name}: {n} lists other dtypes than {ref}; "
                             "the aclnn entries take one dtype per call")
        lines.append(_if_present(proto, n, f'CheckSameDType(op, "{arg(ref)}", args.{arg(ref)}, "{arg(n)}", {_value(proto, n)});'))
    for n, a in attrs.items():
        if a.schema_type == "str" and a.allowed_values:
            allowed = ", ".join(f'"{v}"' for v in a.allowed_values)
            fallback = f'"{a.default}"' if isinstance(a.default, str) else "nullptr"
            lines.append(f'    args.{arg(n)} = AllowedValue(op, "{arg(n)}", {arg(n)}, {fallback}, {{{allowed}}});')
        else:
            lines.append(f"    args.{arg(n)} = {arg(n)};")
    # Shapes: each output as its shape rule's input.
    for o in proto.outputs:
        if o.shape in inputs:
            check = f'CheckSameShape(op, "{arg(o.shape)}", {_value(proto, o.shape)}, "{arg(o.name)}", {_value(proto, o.name)});'
            lines.append(_if_present(proto, o.name, check))
    # The kernels read and write dense row-major memory (the prototype's ND format).
    for n in order:
        lines.append(_if_present(proto, n, f'CheckContiguous(op, "{arg(n)}", {_value(proto, n)});'))
    lines += [
        f"    return Plan{op}(args);",
        "  });",
        "}",
        "",
        f'extern "C" aclnnStatus {name}(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,',
        "    aclrtStream stream) {",
        f"  return op_ext::aclnn::RunLaunch(op_ext::aclnn::{op}Args::kOp, workspace, workspaceSize, executor, stream);",
        "}",
        "",
    ]
    return lines


def _value(proto, name: str) -> str:
    arg = aclnn_arg_name(proto, name)
    return f"*args.{arg}" if _optional_tensor(proto, name) else f"args.{arg}"


def _if_present(proto, name: str, statement: str) -> str:
    if _optional_tensor(proto, name):
        return f"    if (args.{aclnn_arg_name(proto, name)}) {statement}"
    return f"    {statement}"


def generate_aclnn_entries(protos: dict, csrc: Path) -> str:
    """op_ext_aclnn_entries.cpp: every op's two aclnn phases. The first reads each
    tensor argument (DescribeTensor, naming it), pairs an optional parameter's
    gradient with the parameter, checks the dtypes, the output shapes and
    contiguity the prototype states, defaults and checks string attributes, then
    calls the op's Plan<OpType>Custom; the second is RunLaunch, the same for
    every op. Compiled with the host code (the simulator's module, CANN's
    libop_ext_ascend)."""
    for p in protos.values():
        source = aclnn_plan_source(csrc, p)
        if not source.exists():
            raise FileNotFoundError(
                f"{p.path.name}: the op {p.name} has no aclnn plan {source.as_posix()} "
                f"(python -m op_extension.scaffold writes one, named after the op: aclnn_{ascend_stem(p)}.cpp)")
    lines = HEADER + [
        "//",
        "// The aclnn entry points of every op (the headers aclnn_<stem>.h beside this",
        "// file declare them); each op's plan is written by hand in",
        "// csrc/host/aclnn/aclnn_<stem>.cpp.",
    ]
    for p in protos.values():
        lines.append(f'#include "aclnn_{ascend_stem(p)}.h"')
    lines.append("")
    for p in protos.values():
        lines.append(f'#include "aclnn_{ascend_stem(p)}_args.h"')
    lines.append("")
    for p in protos.values():
        lines += _aclnn_entry(p)
    return "\n".join(lines)


ACLNN_ENTRIES = "op_ext_aclnn_entries.cpp"


def write_aclnn(protos: dict, csrc: Path, out_dir: Path, write) -> None:
    """The aclnn headers of every op and their entries (ACLNN_ENTRIES)."""
    for p in protos.values():
        write(out_dir / f"aclnn_{ascend_stem(p)}.h", generate_aclnn_header(p))
        write(out_dir / f"aclnn_{ascend_stem(p)}_args.h", generate_aclnn_args_header(p))
    write(out_dir / ACLNN_ENTRIES, generate_aclnn_entries(protos, csrc))


# What the simulator binding takes for each schema type: the handle's types, but
# lists and strings as pybind11 converts Python's list and str.
_SIM_PARAM = {**{k: v for k, v in _CPP_PARAM.items() if k != "int[]"},
              "SymInt[]": "const std::vector<int64_t>&", "str": "const std::string&"}


def _sim_function(p) -> list[str]:
    """_ascend_sim.<name>: what the npu glue does around the aclnn call that the
    prototype determines -- inputs made contiguous (materialised in simulated
    device memory by AclTensor), outputs allocated NaN-filled by the shape rule,
    an absent optional parameter's gradient an empty [0] placeholder passed to
    aclnn as null -- then the two aclnn phases."""
    args = schema_args(p)
    for a in args:
        if a.type not in _SIM_PARAM:
            raise ValueError(f"{p.path.name}: {p.name}: argument {a.name} of schema type {a.type} has no simulator binding type")
    inputs = {t.name: t for t in p.inputs}
    attrs = {a.name: a for a in args if a.name not in inputs}
    # Outputs take the dtype of the tensor whose shape they have; a parameter's
    # gradient (and a broadcast or list-shaped output) that of the first output's
    # shape tensor, else of the first tensor input. Every tensor of a call has one
    # dtype when the aclnn entry accepts it; this matters for the messages of
    # those it refuses.
    first = _dtype_reference(p)
    multi = len(p.outputs) > 1
    ret = "std::tuple<" + ", ".join(["at::Tensor"] * len(p.outputs)) + ">" if multi else "at::Tensor"
    params = ", ".join(f"{_SIM_PARAM[a.type]} {a.name}" for a in args)
    lines = [f"// custom::{p.name} through {aclnn_name(p)} (op_protos/{p.path.name}).",
             f"{ret} sim_{p.name}({params}) {{"]
    for t in p.inputs:
        if t.optional:
            lines.append(f"  const std::optional<at::Tensor> {t.name}_ = ContiguousOrNone({t.name});")
        else:
            lines.append(f"  const at::Tensor {t.name}_ = {t.name}.contiguous();")
    for name, a in attrs.items():
        if a.type.endswith("?"):
            lines.append(f'  TORCH_CHECK({name}.has_value(), "ascend_sim: {p.name}: {name}=None reaches the aclnn entry, '
                         f'which takes a value: resolve it in SIMULATOR_ARGS (op_extension/op_defs/)");')
    aclnn_arg = {}
    for t in p.inputs:
        lines.append(f"  const AclTensor acl_{t.name}({t.name}_);")
        aclnn_arg[t.name] = f"acl_{t.name}.get()"
    for name, a in attrs.items():
        if a.type == "SymInt[]":
            lines.append(f"  const AclIntArray acl_{name}({name});")
            aclnn_arg[name] = f"acl_{name}.get()"
        elif a.type == "str":
            lines.append(f"  std::string acl_{name} = {name};  // aclnn takes char*")
            aclnn_arg[name] = f"acl_{name}.data()"
        else:
            aclnn_arg[name] = f"*{name}" if a.type.endswith("?") else name
    for o in p.outputs:
        rule = o.shape
        if rule.startswith("broadcast("):
            a, b = (x.strip() for x in rule[len("broadcast("):-1].split(","))
            lines.append(f"  at::Tensor {o.name} = Unwritten(at::infer_size({a}_.sizes(), {b}_.sizes()), {first}_.options());")
            target = o.name
        elif rule in inputs and inputs[rule].optional:
            lines.append(f"  auto [{o.name}, {o.name}_arg] = ParamGrad({rule}_, {first}_);")
            target = f"{o.name}_arg"
        elif rule in inputs:
            lines.append(f"  at::Tensor {o.name} = Unwritten({rule}_.sizes(), {rule}_.options());")
            target = o.name
        else:  # a list attribute: the shape itself
            lines.append(f"  at::Tensor {o.name} = Unwritten({rule}, {first}_.options());")
            target = o.name
        lines.append(f"  const AclTensor acl_{o.name}({target});")
        aclnn_arg[o.name] = f"acl_{o.name}.get()"
    call_args = ", ".join(aclnn_arg[n] for n in aclnn_order(p))
    lines += [
        "  CallAclnn(",
        f"      [&](uint64_t* workspace_size, aclOpExecutor** executor) {{",
        f"        return {aclnn_name(p)}GetWorkspaceSize({call_args}, workspace_size, executor);",
        "      },",
        f"      [&](void* workspace, uint64_t workspace_size, aclOpExecutor* executor) {{",
        f"        return {aclnn_name(p)}(workspace, workspace_size, executor, nullptr);",
        "      });",
    ]
    outs = ", ".join(o.name for o in p.outputs)
    lines += [f"  return {{{outs}}};" if multi else f"  return {outs};", "}", ""]
    return lines


def generate_ascend_sim_ops(protos: dict, csrc: Path) -> str:
    """op_ext_ascend_sim_ops.h: one simulator entry per op (_sim_function) and
    register_sim_ops(m), which binds each as _ascend_sim.<name>. Included by
    csrc/ascendc_sim/binding/ascend_sim_module.cpp after its helpers (AclTensor,
    AclIntArray, Unwritten, ParamGrad, ContiguousOrNone, CallAclnn)."""
    lines = HEADER + ["#pragma once", ""]
    for p in protos.values():
        lines.append(f'#include "aclnn_{ascend_stem(p)}.h"  // generated beside this file (write_aclnn)')
    lines += ["", "namespace {", ""]
    for p in protos.values():
        lines += _sim_function(p)
    lines += ["void register_sim_ops(pybind11::module_& m) {"]
    for p in protos.values():
        names = ", ".join(f'pybind11::arg("{a.name}")' for a in schema_args(p))
        lines.append(f'  m.def("{p.name}", &sim_{p.name}, {names});')
    lines += ["}", "", "}  // namespace", ""]
    return "\n".join(lines)


# ---- the npu registration ---------------------------------------------------------


# GLUE_PARAM with namespaces, for a file without using-declarations.
_QUALIFIED_GLUE_PARAM = {k: v.replace("Tensor", "at::Tensor").replace("IntArrayRef", "at::IntArrayRef")
                         for k, v in GLUE_PARAM.items()}


def _glue_signature(proto, name: str) -> str:
    """The declaration of a device kernel `name` of `proto`, as m.impl takes it."""
    params = ", ".join(f"{_QUALIFIED_GLUE_PARAM[a.type]} {a.name}" for a in schema_args(proto))
    return f"{cpp_return(proto)} {name}({params})"


def generate_npu_registration(protos: dict, csrc: Path) -> str:
    """op_ext_npu_registration.cpp (compiled only where the npu glue is): declares
    each op's npu function, op_ext::npu::<name>_npu, which its forward op's file
    csrc/torch_ext/npu/ops/<forward>.cpp defines, and registers it under
    PrivateUse1."""
    lines = HEADER + [
        "#include <ATen/core/Tensor.h>",
        "#include <c10/util/string_view.h>",
        "#include <torch/library.h>",
        "",
        "#include <optional>",
        "#include <tuple>",
        "",
        "namespace op_ext::npu {",
        "",
    ]
    for p in forward_ops(protos):
        source = csrc / "torch_ext" / "npu" / "ops" / f"{p.name}.cpp"
        if not source.exists():
            raise FileNotFoundError(
                f"{p.path.name}: the op {p.name} has no npu glue {source.as_posix()} "
                f"(python -m op_extension.scaffold {p.path.as_posix()} writes one)")
    for p in protos.values():
        forward = p.backward_of or p.name
        lines.append(f"// defined in csrc/torch_ext/npu/ops/{forward}.cpp")
        lines.append(_glue_signature(p, f"{p.name}_npu") + ";")
    lines += ["", "TORCH_LIBRARY_IMPL(custom, PrivateUse1, m) {"]
    lines += [f'  m.impl("{p.name}", &{p.name}_npu);' for p in protos.values()]
    lines += ["}", "", "}  // namespace op_ext::npu", ""]
    return "\n".join(lines)


NPU_REGISTRATION = "op_ext_npu_registration.cpp"


# ---- the eager fast path ------------------------------------------------------------


@dataclass(frozen=True)
class FastArg:
    """How the fast path of python_module.cpp unpacks an argument of one schema
    type: its helper (which raises a TypeError naming the op and argument), the
    C++ type the value is held in, and how the typed handle takes it."""

    unpack: str
    held: str
    passed: str = "{}"


# Every type a device kernel can take (GLUE_PARAM); a test keeps the two in step.
FAST_ARG = {
    "Tensor": FastArg("tensor_arg", "const Tensor&"),
    "Tensor?": FastArg("optional_tensor_arg", "const OptTensor"),
    "SymInt[]": FastArg("int_list_arg", "const std::vector<int64_t>", "as_sym({})"),
    "float": FastArg("float_arg", "const double"),
    "float?": FastArg("optional_float_arg", "const std::optional<double>"),
    "int": FastArg("int_arg", "const int64_t"),
    "bool": FastArg("bool_arg", "const bool"),
    "str": FastArg("str_arg", "const std::string"),
}


class FastPathError(ValueError):
    pass


def _fast_function(p, index: str) -> list[str]:
    args = schema_args(p)
    lines = [
        f"PyObject* fast_{p.name}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{",
        f'  constexpr const char* op = "{p.name}";',
        f"  OP_EXT_FAST_BEGIN(op, {len(args)})",
    ]
    for i, a in enumerate(args):
        fast = FAST_ARG.get(a.type)
        if fast is None:
            raise FastPathError(
                f"{p.path.name}: {p.name}: argument {a.name} has schema type {a.type!r}, which the eager fast "
                f"path cannot unpack (it takes {', '.join(FAST_ARG)}; op_extension/_cpp_gen.py FAST_ARG)"
            )
        lines.append(f'  {fast.held} {a.name} = {fast.unpack}(op, args[{i}], "{a.name}");')
    # A call whose tensors do not share the first one's dtype leaves the fast
    # path: the Python function handles it (mixed-dtype norms) or calls the op,
    # whose check refuses it.
    tensors = [a.name for a in args if a.type in ("Tensor", "Tensor?")]
    first = next((a.name for a in args if a.type == "Tensor"), None)
    others = [t for t in tensors if t != first]
    if first is not None and others:
        lines.append(f"  if (mixed_dtypes({first}, {', '.join(others)})) Py_RETURN_NOTIMPLEMENTED;")
    passed = ", ".join(FAST_ARG[a.type].passed.format(a.name) for a in args)
    lines += [
        f"  return run({index}, args, nargs, [&] {{ return {p.name}_op().call({passed}); }});",
        "  OP_EXT_FAST_END",
        "}",
        "",
    ]
    return lines


def generate_fast_path(protos: dict) -> str:
    """The eager fast path's per-op part, included by python_module.cpp after
    its helpers: for every forward op, in the prototypes' order, its index
    (OpIndex, kOpNames: the table of transform handlers), a METH_FASTCALL
    function fast_<name> taking the schema's arguments positionally, and its
    entry in fast_path_methods (the module's function <name>)."""
    ops = forward_ops(protos)
    index = {p.name: f"k{_camel(p.name)}" for p in ops}
    lines = HEADER + [
        "//",
        "// The eager fast path of op_extension._C, one function per forward op; a",
        "// fragment of csrc/torch_ext/python_module.cpp, which includes it after the",
        "// helpers it uses (tensor_arg, ..., mixed_dtypes, run, fastcall).",
        "",
        "namespace op_ext {",
        "namespace {",
        "",
        "// The forward ops, in the order of kOpNames.",
        "enum OpIndex {",
    ]
    lines += [f"  {index[p.name]}," for p in ops]
    lines += [
        "  kNumOps",
        "};",
        "constexpr const char* kOpNames[kNumOps] = {",
    ]
    lines += [f'    "{p.name}",' for p in ops]
    lines += ["};", ""]
    for p in ops:
        lines += _fast_function(p, index[p.name])
    lines.append("PyMethodDef fast_path_methods[] = {")
    for p in ops:
        doc = f"{p.name}({', '.join(a.name for a in schema_args(p))})"
        lines.append(f'    {{"{p.name}", fastcall(fast_{p.name}), METH_FASTCALL, "{doc}"}},')
    lines += [
        "    {nullptr, nullptr, 0, nullptr},",
        "};",
        "",
        "}  // namespace",
        "}  // namespace op_ext",
        "",
    ]
    return "\n".join(lines)


def write_all(protos: dict, csrc: Path, out_dir: Path, write) -> list[Path]:
    """Writes every generated file with `write(path, text)`; returns the .cpp sources."""
    write(out_dir / "op_ext_handles.h", generate_handles(protos))
    write(out_dir / "op_ext_glue.h", generate_glue_registry(protos, csrc, out_dir))
    write(out_dir / "op_ext_cuda_launchers.h", generate_cuda_launchers(protos, csrc, out_dir))
    write(out_dir / "op_ext_fast_path.h", generate_fast_path(protos))
    autograd = out_dir / "op_ext_autograd.cpp"
    write(autograd, generate_autograd(protos, csrc, out_dir))
    write(out_dir / "op_ext_ascend_sim_ops.h", generate_ascend_sim_ops(protos, csrc))
    # Not returned: the host code of the simulator's module and of CANN's build
    # (cmake/ascend) compile ACLNN_ENTRIES; the npu glue includes the headers.
    write_aclnn(protos, csrc, out_dir, write)
    # Not returned: compiled only by the npu build (setup.py), its compile check
    # (scripts/check_npu_glue.sh) and the simulated-npu tests.
    write(out_dir / NPU_REGISTRATION, generate_npu_registration(protos, csrc))
    return [autograd]




def _load_protos_module():
    """op_extension/_protos.py, loaded by path: the callers (setup.py, the CI
    scripts, the tests' npu build) may run before the package is importable."""
    import importlib.util
    import sys

    name = "_op_ext_protos"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "_protos.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def _write_if_changed(path: Path, text: str) -> None:
    # Unchanged files keep their timestamps, so ninja rebuilds nothing.
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def generate_all(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Writes every generated file for the source tree `root` (default: this
    one) into `out_dir`: the schema header (_protos.py) and the files above.
    Returns the generated .cpp sources."""
    protos_module = _load_protos_module()
    root = Path(root) if root is not None else Path(__file__).resolve().parent.parent
    out_dir = Path(out_dir)
    parsed = protos_module.load_protos(root / "op_protos")
    _write_if_changed(out_dir / "op_ext_schemas.h", protos_module.generate_cpp_header(parsed))
    return write_all(parsed, root / "op_extension" / "csrc", out_dir, _write_if_changed)


if __name__ == "__main__":
    # python op_extension/_cpp_gen.py OUT_DIR [ROOT]: what setup.py generates (for
    # the source tree ROOT, default this one), for the checks that compile the glue
    # without it (scripts/check_cuda_compile.sh, scripts/check_npu_glue.sh).
    import sys

    generate_all(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
