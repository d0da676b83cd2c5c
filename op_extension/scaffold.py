"""The msopgen step of op_extension: every file a new op needs, from its prototype.

    python -m op_extension.scaffold op_protos/<op>.json [--root DIR] [--dry-run]

Writes, for the op ``<name>`` of the prototype (its ``torch.name``):

    op_protos/<name>_backward.json                the backward prototype, if the op
                                                  names one ("torch": {"backward": ...})
                                                  and it does not exist yet
    op_extension/csrc/kernel/cpu/<name>.h         the kernel-level arguments (torch-free)
    op_extension/csrc/kernel/cpu/<name>.cpp       the CPU kernels (built once per ISA)
    op_extension/csrc/kernel/cuda/<name>.cuh/.cu  the CUDA launchers (torch-free)
    op_extension/csrc/torch_ext/ops/<name>.h      the torch glue (checks, outputs, args),
                                                  registered for every device by the build
    op_extension/csrc/torch_ext/npu/ops/<name>.cpp  the torch_npu glue: the checks, then
                                                  the aclnn entries (complete as written)
    op_extension/csrc/kernel/ascendc/<stem>.cpp          the Ascend C kernel,
    op_extension/csrc/host/tiling/<stem>_tiling.h/.cpp   its TilingData and tiling,
    op_extension/csrc/host/aclnn/aclnn_<stem>.cpp        its aclnn plan (Plan<OpType>Custom:
                                                  the checks the prototype cannot say,
                                                  the tiling call, the kernel launch;
                                                  the build generates the entry points
                                                  aclnn<OpType>Custom around it): each
                                                  for the op (<stem> = <name>_custom)
                                                  and for its backward (<name>_grad_custom)
    op_extension/op_defs/<name>.py                the Python the prototype cannot say:
                                                  the references you write (the fake
                                                  kernel, ops.<name> and the exports
                                                  are derived; see op_defs/__init__.py)
    tests/test_<name>.py                          the op against that reference
    tests/op_cases/<name>.py                      the op's data for the shared tests
                                                  (opcheck, compile, export, bad input ...)

and nothing else: no shared file needs an edit. Every body that needs the op's
own semantics says so when reached: "<name>: ... not implemented yet: fill in
<file>". The C++ files compile as generated (the build globs these folders), so
the tree stays buildable while you fill them in. An existing file is never
overwritten: if any target exists, nothing is written and the command exits with
status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ._cpp_gen import GLUE_PARAM, aclnn_name, aclnn_op, aclnn_order, ascend_stem, schema_args
from ._protos import OpProto, ProtoError, TensorDesc, parse_proto

__all__ = ["ScaffoldError", "plan", "scaffold", "main"]

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = "python -m op_extension.scaffold"


class ScaffoldError(RuntimeError):
    pass


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


# ---- the backward prototype ---------------------------------------------------------


def backward_prototype(path: Path) -> tuple[str, list] | None:
    """(file name, JSON content) of the backward prototype the op names, or None.

    Inputs: the gradient of each output, then the forward's inputs; outputs: the
    gradient of each input tensor (shaped like it); the forward's attributes.
    Edit it to the inputs your backward really needs (e.g. saved statistics)."""
    (obj,) = json.loads(Path(path).read_text())
    name = obj["torch"]["name"]
    backward = obj["torch"].get("backward")
    if not backward:
        return None
    grads_in = [dict(out, name=f"grad_{out['name']}", param_type="required") for out in obj["output_desc"]]
    for g in grads_in:
        g.pop("shape", None)
    grads_out = [dict(inp, name=f"grad_{inp['name']}", shape=inp["name"]) for inp in obj["input_desc"]]
    order = [g["name"] for g in grads_in] + list(obj["torch"].get("arg_order", []))
    proto = [{
        "op": obj["op"] + "Grad",
        "input_desc": grads_in + obj["input_desc"],
        "output_desc": grads_out,
        "attr": obj.get("attr", []),
        "torch": {"name": backward, "arg_order": order, "backward_of": name},
    }]
    return f"{backward}.json", proto


# ---- C++ pieces ------------------------------------------------------------------------

_ATTR_FIELDS = {
    "int": ["int64_t {n};"],
    "float": ["double {n};"],
    "bool": ["bool {n};"],
    "str": ["const char* {n};"],
    "SymInt[]": ["const int64_t* {n};", "int64_t {n}_size;"],
}


def _stub(o: OpProto) -> str:
    """The kernel entry's name: <op>_forward, or the backward op's own name."""
    return o.name if o.backward_of else f"{o.name}_forward"


def _args_struct(p: OpProto) -> str:
    lines = [f"// {p.op_type}: arguments of the {p.name} kernels (raw pointers, sizes; no torch)."]
    lines.append(f"struct {_camel(p.name)}Args {{")
    for t in p.inputs:
        note = ", nullptr when absent" if t.optional else ""
        lines.append(f"  const void* {t.name};  // input{note}")
    for t in p.outputs:
        lines.append(f"  void* {t.name};  // output, shaped like {t.shape}")
    lines.append(f"  int64_t numel;  // elements of {p.inputs[0].name}: add the sizes and strides your kernel needs")
    for a in p.attrs:
        for field in _ATTR_FIELDS[a.schema_type]:
            lines.append("  " + field.format(n=a.name))
    lines.append("};")
    return "\n".join(lines)


def cpu_header(p: OpProto, backward: OpProto | None) -> str:
    ops = [p] + ([backward] if backward else [])
    structs = "\n\n".join(_args_struct(o) for o in ops)
    stubs = "\n".join(f"struct {_camel(_stub(o))} final : KernelStub<{_camel(o.name)}Args> {{\n"
                      f"  using KernelStub::KernelStub;\n}};\n"
                      f'inline {_camel(_stub(o))} {_stub(o)}{{"{_stub(o)}"}};' for o in ops)
    return f"""// {p.op_type} ({p.name}): the torch-free contract of its kernels, shared by the
// CPU kernels ({p.name}.cpp) and the CUDA launchers (../cuda/{p.name}.cuh).
// Generated by `{GENERATOR} {_rel(p.path)}`; edit it to what the kernels need.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {{

{structs}

// The kernels, as the glue names them, each a type of its own: their CPU variants
// filled in by {p.name}.cpp, once per instruction set (register_kernel.h); their
// CUDA launchers defined in ../cuda/{p.name}.cu and bound to them by
// cuda::launcher (../cuda/{p.name}.cuh).
{stubs}

}}  // namespace op_ext::cpu
"""


def cpu_kernel(p: OpProto, backward: OpProto | None) -> str:
    ops = [p] + ([backward] if backward else [])
    file = f"op_extension/csrc/kernel/cpu/{p.name}.cpp"
    bodies = []
    for o in ops:
        args = f"{_camel(o.name)}Args"
        bodies.append(f"""template <typename T>
void {_stub(o)}_typed(const {args}& a) {{
  (void)a;
  throw std::runtime_error("{o.name}: the CPU kernel is not implemented yet: fill in {file}");
}}

void {_stub(o)}_impl(DType dtype, const {args}& a) {{
  dispatch_dtype(dtype, [&](auto tag) {{ {_stub(o)}_typed<typename decltype(tag)::type>(a); }});
}}""")
    registrations = "\n".join(f"OP_EXT_REGISTER_KERNEL({_stub(o)}, {_stub(o)}_impl);" for o in ops)
    body = "\n\n".join(bodies)
    return f"""// {p.op_type} ({p.name}) on the CPU. Compiled once per instruction set (default,
// AVX2, AVX-512) like every file here that includes register_kernel.h; write the
// loops with at::vec (vec_utils.h: widening loads, dispatch_dtype, parallel_range,
// vec_map for elementwise ops; a row kernel passes store_slice the streams_outputs()
// choice so that calls larger than the cache write past it, cpu_kernels.h).
// Generated by `{GENERATOR} {_rel(p.path)}`.
#include <stdexcept>

#include "register_kernel.h"
#include "vec_utils.h"
#include "{p.name}.h"

namespace op_ext::cpu {{
namespace {{

{body}

}}  // namespace

{registrations}

}}  // namespace op_ext::cpu
"""


def cuda_header(p: OpProto, backward: OpProto | None) -> str:
    ops = [p] + ([backward] if backward else [])
    decls = "\n".join(f"void {_stub(o)}(DType dtype, const cpu::{_camel(o.name)}Args& args, cudaStream_t stream);"
                      for o in ops)
    bindings = "\n".join(f"constexpr Launcher<cpu::{_camel(o.name)}Args> launcher(const cpu::{_camel(_stub(o))}&) {{\n"
                         f"  return {{&{_stub(o)}}};\n}}" for o in ops)
    return f"""// {p.op_type} ({p.name}) on CUDA: the launchers (raw device pointers, the stream;
// no torch, so plain nvcc compiles them). Generated by `{GENERATOR} {_rel(p.path)}`.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_kernels.h"
#include "../cpu/{p.name}.h"

namespace op_ext::cuda {{

{decls}

// The launcher the device glue runs for each kernel of ../cpu/{p.name}.h, bound at
// link time. A launcher that needs a workspace returns
// {{&launch, &workspace_bytes}} (cuda_kernels.h's Launcher).
{bindings}

}}  // namespace op_ext::cuda
"""


def cuda_source(p: OpProto, backward: OpProto | None) -> str:
    ops = [p] + ([backward] if backward else [])
    file = f"op_extension/csrc/kernel/cuda/{p.name}.cu"
    defs = "\n\n".join(f"""void {_stub(o)}(DType dtype, const cpu::{_camel(o.name)}Args& args, cudaStream_t stream) {{
  (void)dtype;
  (void)args;
  (void)stream;
  throw std::runtime_error("{o.name}: the CUDA kernel is not implemented yet: fill in {file}");
}}""" for o in ops)
    return f"""// {p.op_type} ({p.name}) on CUDA: write the __global__ kernels here and launch
// them on `stream` (cuda_common.cuh has the launch helpers). The CPU harness
// (csrc/cuda_sim) runs this file too. Generated by `{GENERATOR} {_rel(p.path)}`.
#include <stdexcept>

#include "cuda_common.cuh"
#include "{p.name}.cuh"

namespace op_ext::cuda {{

{defs}

}}  // namespace op_ext::cuda
"""


def _ret(o: OpProto) -> str:
    return "Tensor" if len(o.outputs) == 1 else "std::tuple<" + ", ".join(["Tensor"] * len(o.outputs)) + ">"


def _params(o: OpProto) -> str:
    return ", ".join(f"{GLUE_PARAM[a.type]} {a.name}" for a in schema_args(o))


def _arg_names(o: OpProto) -> str:
    return ", ".join(a.name for a in schema_args(o))


def _check_function(o: OpProto, forward: str) -> str:
    first = o.inputs[0].name
    checks = [f'  check_dtype(op, {first}, "{first}", gen::k{_camel(o.name)}Dtypes);']
    for t in o.inputs[1:]:
        if t.optional:
            checks.append(f'  if ({t.name}.has_value()) check_same(op, {first}, "{first}", *{t.name}, "{t.name}");')
        else:
            checks.append(f'  check_same(op, {first}, "{first}", {t.name}, "{t.name}");')
    checks_text = "\n".join(checks)
    return f"""// The argument checks of custom::{o.name} that its prototype expresses (dtype,
// same device and dtype). Add those it cannot (shapes, attribute ranges): every
// device's glue runs this, the npu glue (../npu/ops/{forward}.cpp) too.
inline void check_{o.name}(const char* op, {_params(o)}) {{
{checks_text}
}}"""


def _glue_function(o: OpProto, file: str) -> str:
    first = o.inputs[0].name
    return f"""template <typename Kernels>
{_ret(o)} {o.name}({_params(o)}) {{
  constexpr const char* op = "custom::{o.name}";
  const Kernels kernels({first});
  check_{o.name}(op, {_arg_names(o)});
  // Then: dense inputs, the outputs, the args struct
  // (../../kernel/cpu/{o.name if o.backward_of is None else o.backward_of}.h), and
  //   kernels(cpu::{_stub(o)}, kernel_dtype({first}.scalar_type()), args);
  TORCH_CHECK(false, op, ": the glue is not implemented yet: fill in {file}");
}}"""


def glue_header(p: OpProto, backward: OpProto | None) -> str:
    """The op's torch glue, registered under every device key by the generated
    op_ext_glue.h (nothing else to edit)."""
    file = f"op_extension/csrc/torch_ext/ops/{p.name}.h"
    ops = [p] + ([backward] if backward else [])
    bodies = "\n\n".join(_check_function(o, p.name) + "\n\n" + _glue_function(o, file) for o in ops)
    return f"""// The glue of custom::{p.name}{f" and custom::{backward.name}" if backward else ""}: check the inputs, lay them
// out densely, allocate the outputs, fill the kernel's args struct and run it on
// whatever device `Kernels` is (see ../glue_util.h). The build registers these
// under every device key (the generated op_ext_glue.h); the autograd wiring, the
// typed handles and the schema are derived from the prototypes too.
// Generated by `{GENERATOR} {_rel(p.path)}`.
#pragma once

#include "../../kernel/cpu/{p.name}.h"
#include "../glue_util.h"

namespace op_ext::glue {{

{bodies}

}}  // namespace op_ext::glue
"""


def _npu_function(o: OpProto) -> str:
    """op_ext::npu::<name>_npu: the glue's checks, then the aclnn entry with dense
    inputs and outputs allocated by the prototype's shape rules, in the order the
    entry takes them (_cpp_gen.aclnn_order). Complete as generated: until the
    kernel exists, its aclnn entry says which file to fill in."""
    first = o.inputs[0].name
    inputs = {t.name: t for t in o.inputs}
    attrs = {a.name: a for a in schema_args(o) if a.name not in inputs}
    lines = [f"{_ret(o)} {o.name}_npu({_params(o)}) {{",
             f'  constexpr const char* op = "custom::{o.name}";',
             f"  glue::check_{o.name}(op, {_arg_names(o)});",
             f'  check_npu_dtype(op, {first}, "{first}");',
             f"  const c10::DeviceGuard guard({first}.device());",
             "  // The dense, row-major ND layout the Ascend kernels read.",
             ]
    arg = {}
    for t in o.inputs:
        kind = "OptTensor" if t.optional else "Tensor"
        lines.append(f"  const {kind} {t.name}_dense = dense({t.name});")
        arg[t.name] = f"{t.name}_dense"
    for name, a in attrs.items():
        if a.type.endswith("?"):
            lines.append(f'  TORCH_CHECK_VALUE({name}.has_value(), op, ": {name}=None: give the aclnn entry its default '
                         f'here (op_extension/csrc/torch_ext/npu/ops/{o.backward_of or o.name}.cpp)");')
            arg[name] = f"*{name}"
        else:
            arg[name] = name
    like = f"{first}_dense"
    outs = []
    for out in o.outputs:
        rule = out.shape
        if rule.startswith("broadcast("):
            a, b = (x.strip() for x in rule[len("broadcast("):-1].split(","))
            lines.append(f"  Tensor {out.name} = at::empty(at::infer_size({a}.sizes(), {b}.sizes()), {like}.options());")
            arg[out.name] = out.name
        elif rule in inputs and inputs[rule].optional:
            lines.append(f"  // An empty placeholder when the op ran without {rule} (no aclnn output then).")
            lines.append(f"  Tensor {out.name} = glue::param_grad({rule}, {like});")
            lines.append(f"  const OptTensor {out.name}_arg = {rule}_dense.has_value() ? OptTensor({out.name}) : std::nullopt;")
            arg[out.name] = f"{out.name}_arg"
        elif rule in inputs:
            lines.append(f"  Tensor {out.name} = at::empty({rule}_dense.sizes(), {like}.options());")
            arg[out.name] = out.name
        else:
            lines.append(f"  Tensor {out.name} = at::empty({rule}, {like}.options());")
            arg[out.name] = out.name
        outs.append(out.name)
    ret = f"{{{', '.join(outs)}}}" if len(outs) > 1 else outs[0]
    zeros = " ".join(f"{n}.zero_();" for n in outs)
    name = aclnn_name(o)
    call_args = ", ".join(arg[n] for n in aclnn_order(o))
    lines += [
        "  // Empty tensors never reach a kernel; a sum over no elements is zero.",
        f"  if ({like}.numel() == 0) {{",
        f"    {zeros}",
        f"    return {ret};",
        "  }",
        f'  call_aclnn(op, "{name}", {like}.device(), {name}GetWorkspaceSize, {name},',
        f"             {call_args});",
        f"  return {ret};",
        "}",
    ]
    return "\n".join(lines)


def npu_glue_source(p: OpProto, backward: OpProto | None) -> str:
    ops = [p] + ([backward] if backward else [])
    includes = "\n".join(f'#include "aclnn_{_kernel_name(o)}.h"' for o in ops)
    bodies = "\n\n".join(_npu_function(o) for o in ops)
    names = " and ".join(f"custom::{o.name}" for o in ops)
    comment = textwrap.fill(
        f"{names} on Ascend NPUs (torch_npu's PrivateUse1 key): the glue's checks (../../ops/{p.name}.h), then the "
        "Ascend kernels through their aclnn entry points, with every input dense and row-major and the outputs "
        "allocated by the prototype's shape rules. Registered by the build (the generated "
        "op_ext_npu_registration.cpp); the shared steps are in ../npu_glue.h. Adapt it where your kernels need "
        f"more (a broadcast materialised, outputs in the input's layout). Generated by `{GENERATOR} {_rel(p.path)}`.",
        width=97, initial_indent="// ", subsequent_indent="// ", break_on_hyphens=False, break_long_words=False)
    return f"""{comment}
#include "../npu_glue.h"
#include "../../ops/{p.name}.h"
{includes}

namespace op_ext::npu {{

{bodies}

}}  // namespace op_ext::npu
"""


def _kernel_name(o: OpProto) -> str:
    # The build derives the Ascend file names and entry points by the same rule
    # (the simulator binding, the npu glue's includes).
    return ascend_stem(o)


def _aclnn_name(o: OpProto) -> str:
    return aclnn_name(o)


def ascend_kernel(o: OpProto) -> str:
    """One Ascend C kernel per op: a translation unit registers one TilingData."""
    file = f"op_extension/csrc/kernel/ascendc/{_kernel_name(o)}.cpp"
    params = ", ".join(f"GM_ADDR {t.name}" for t in o.inputs + o.outputs)
    unused = "\n".join(f"  (void){t.name};" for t in o.inputs + o.outputs)
    return f"""// {o.op_type}Custom ({o.name}) in Ascend C. Read kernel_common.h (queues, tails,
// the UB budget) and docs/ascend.md (the rules the simulator enforces) first.
// Generated by `{GENERATOR}`.
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "{_kernel_name(o)}_tiling.h"

extern "C" __global__ __aicore__ void {_kernel_name(o)}({params}, GM_ADDR workspace, GM_ADDR tiling) {{
  // Not implemented yet: fill in {file}. Its aclnn entry refuses to launch
  // until then, so this body is never reached.
{unused}
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  (void)tilingData;
}}
"""


def tiling_header(o: OpProto) -> str:
    guard = f"OP_EXT_HOST_TILING_{_kernel_name(o).upper()}_TILING_H_"
    data = f"{o.op_type}CustomTilingData"
    return f"""// {o.op_type}Custom ({o.name}): its TilingData and tiling function. Add the
// fields your kernel reads; the tiling must keep every UB buffer 32-byte aligned
// and within the SoC's UB (soc_spec.h, tiling_util.h). Generated by `{GENERATOR}`.
#ifndef {guard}
#define {guard}

#include "tiling_def.h"

namespace optiling {{

BEGIN_TILING_DATA_DEF({data})
TILING_DATA_FIELD_DEF(uint64_t, totalLength)  // elements of {o.inputs[0].name}
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)  // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tailMode)     // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)     // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, reserved)     // keeps the struct a whole number of 8 bytes
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS({o.op_type}Custom, {data})

}}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "soc_spec.h"

namespace op_ext::ascend {{

optiling::{data} Compute{o.op_type}Tiling(uint64_t totalLength, uint32_t dtype, const SocSpec& soc);

}}  // namespace op_ext::ascend
#endif

#endif  // {guard}
"""


def tiling_source(o: OpProto) -> str:
    file = f"op_extension/csrc/host/tiling/{_kernel_name(o)}_tiling.cpp"
    return f"""// {o.op_type}Custom ({o.name}): the tiling. Generated by `{GENERATOR}`.
#include "{_kernel_name(o)}_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {{

optiling::{o.op_type}CustomTilingData Compute{o.op_type}Tiling(uint64_t totalLength, uint32_t dtype,
                                                                   const SocSpec& soc) {{
  (void)totalLength;
  (void)dtype;
  (void)soc;
  throw TilingError("{o.op_type}Custom: the tiling is not implemented yet: fill in {file}");
}}

}}  // namespace op_ext::ascend
"""


def aclnn_source(o: OpProto) -> str:
    """The op's part of its aclnn entry, Plan<OpType>Custom: the build generates
    the rest from the prototype (_cpp_gen.write_aclnn: the header, the reading
    and checking of the arguments, the launch phase)."""
    file = f"op_extension/csrc/host/aclnn/aclnn_{_kernel_name(o)}.cpp"
    op = aclnn_op(o)
    return f"""// Plan{op}: {o.op_type} on the NPU. Generated by `{GENERATOR}`.
//
// {_aclnn_name(o)}GetWorkspaceSize is generated from op_protos/{o.path.name} at
// build time (build/generated/op_ext_aclnn_entries.cpp): it has described every
// tensor, checked the dtypes, the output shapes its shape rules name and
// contiguity before calling this (see {op}Args in aclnn_{_kernel_name(o)}_args.h).
#include "aclnn_{_kernel_name(o)}_args.h"

#include "kernel_launch.h"
#include "{_kernel_name(o)}_tiling.h"

namespace op_ext::aclnn {{

LaunchPlan Plan{op}(const {op}Args& args) {{
  // Check what the prototype cannot say (shapes between inputs, attribute
  // ranges), tile, and launch {_kernel_name(o)} with AddLaunch, as
  // aclnn_gelu_custom.cpp does.
  (void)args;
  throw ArgError(ACLNN_ERR_INNER, "{op}: not implemented yet: fill in {file}");
}}

}}  // namespace op_ext::aclnn
"""


# ---- the Python side: the op module and the test ---------------------------------------------


def _example(t: TensorDesc) -> str:
    return "torch.randn(4, 64, dtype=dtype)"



def _py_params(o: OpProto) -> str:
    """The op's arguments as Python parameters, with the schema's defaults (the trailing ones)."""
    tensors = {t.name: t for t in o.inputs}
    attrs = {a.name: a for a in o.attrs}
    params, defaults_follow = [], True
    for name in reversed(o.arg_order):
        if defaults_follow and name in tensors and tensors[name].optional:
            params.append(f"{name}=None")
        elif defaults_follow and name in attrs and attrs[name].has_default:
            params.append(f"{name}={attrs[name].default!r}")
        else:
            defaults_follow = False
            params.append(name)
    return ", ".join(reversed(params))


def op_module(p: OpProto, backward: OpProto | None) -> str:
    """op_extension/op_defs/<name>.py: the references to write, and nothing where
    the derived default suffices."""
    ops = [p] + ([backward] if backward else [])
    file = f"op_extension/op_defs/{p.name}.py"
    what = {o.name: f"The gradients of {p.name}'s inputs" if o.backward_of else f"What {p.name} computes"
            for o in ops}
    refs = "\n\n\n".join(f'''def ref_{o.name}({_py_params(o)}, *, dtype):
    """{what[o.name]}, as an ATen composite. It runs on float32
    (float64) copies of the inputs; `dtype` is theirs (round stored intermediates to it)."""
    raise NotImplementedError("{o.name}: the reference is not implemented yet: fill in {file}")''' for o in ops)
    table = ", ".join(f'"{o.name}": ref_{o.name}' for o in ops)
    rules = "\n\n\n".join(f'''def shard_{o.name}({_py_params(o)}):
    """{o.name}'s DTensor sharding rule: the placements of the outputs and of each
    tensor argument that the op computes right on the local shards (toolkit.row_sharding
    for an op that computes each row apart; op_extension/toolkit.py says the form)."""
    raise NotImplementedError("{o.name}: the DTensor sharding rule is not implemented yet: fill in {file}")'''
                         for o in ops)
    rule_table = ", ".join(f'"{o.name}": shard_{o.name}' for o in ops)
    return f'''"""{p.name}: what op_protos/{p.path.name} cannot say.

Generated by `{GENERATOR} {_rel(p.path)}`.
op_extension/op_defs/__init__.py lists what an op module may hold, and the
defaults. Derived from the prototype, with nothing written here: the fake
kernel (the dtype list, same device and dtype of the other inputs, allowed attr
values, output shapes; add FAKE for the op's own checks or an output layout),
op_extension.ops.{p.name} and the package export (define `{p.name}(...)` here
for argument conversions or a C++ fast path), the simulators' argument binding.
The references are yours to write: debug's fallback and autocompare and
tests/test_{p.name}.py compare the kernels with them; so are the DTensor sharding
rules (op_extension.distributed registers them; tests/test_distributed.py runs
the op's DISTRIBUTED cases). For rows in
`python -m op_extension.bench`, add BENCH = Bench(...) at the end
(op_extension/bench_spec.py: the inputs, eager composite and minimum bytes
moved); until then the benchmark skips {p.name} with a note.

Of op_extension, an op module imports op_extension.toolkit (FakeRule and the
shared checks, the argument conversions and the C++ fast path, the reference,
jvp and vmap helpers), op_extension.bench_spec for BENCH, and at most another
op's module it builds on (tests/test_import_graph.py).
"""

from op_extension import toolkit  # noqa: F401  (for what you add: FAKE, a function, TRANSFORM)


{refs}


REFERENCES = {{{table}}}


{rules}


SHARDING = {{{rule_table}}}
'''


def test_file(p: OpProto) -> str:
    args = list(p.arg_order)
    makers = []
    for name in args:
        tensor = next((t for t in p.inputs if t.name == name), None)
        if tensor is not None:
            makers.append(f"        {name}={_example(tensor)},")
        else:
            attr = next(a for a in p.attrs if a.name == name)
            if attr.has_default:
                makers.append(f"        {name}={attr.default!r},")
            else:
                makers.append(f"        {name}=...,  # a value for this attribute")
    makers_text = "\n".join(makers)
    dtypes = ", ".join(f"torch.{d}" for d in p.dtypes)
    return f'''"""{p.name}: torch.ops.custom.{p.name} against its reference.

Generated by `{GENERATOR} {_rel(p.path)}`.
The reference is ref_{p.name} in op_extension/op_defs/{p.name}.py (write it
there: debug's autocompare uses it too); write the inputs your op needs here.
Then every device this runs on checks its kernel against it.
"""

import pytest
import torch

import op_extension  # noqa: F401  (registers torch.ops.custom)
from op_extension._reference import run_reference, tolerance


def inputs(dtype):
    return dict(
{makers_text}
    )


@pytest.mark.parametrize("dtype", [{dtypes}])
def test_{p.name}_matches_the_reference(dtype):
    args = inputs(dtype)
    want = run_reference("{p.name}", list(args.values()))
    got = torch.ops.custom.{p.name}(**args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want):
        torch.testing.assert_close(g, w, **tolerance(dtype, "{p.name}"))
'''


# ---- the op's data for the shared tests (tests/op_cases/<name>.py) ------------------------------------


def _call_signature(o: OpProto) -> str:
    parts = []
    for name in o.arg_order:
        tensor = next((t for t in o.inputs if t.name == name), None)
        if tensor is not None:
            parts.append(f"{name} (Tensor{', optional' if tensor.optional else ''})")
        else:
            attr = next(a for a in o.attrs if a.name == name)
            parts.append(f"{name} ({attr.schema_type}{f', default {attr.default!r}' if attr.has_default else ''})")
    return ", ".join(parts)


def op_cases_file(p: OpProto, backward: OpProto | None) -> str:
    """tests/op_cases/<name>.py: every entry the shared tests require of the op
    (tests/op_cases/__init__.py lists them), each a stand-in that fails the tests
    using it with "<name>: <entry> not written yet: fill in tests/op_cases/<name>.py".
    Everything the shared tests can derive (backward arguments, FAKE, INFERENCE,
    unsupported dtypes, mixed dtype/device cases) is left to them."""
    n = p.name
    b = backward.name if backward else None
    tensors = ", ".join(t.name for t in p.inputs)
    backward_part = "" if backward is None else f'''

def backward_schema_args(x):
    """One small valid call of custom::{b}: {_call_signature(backward)}."""
    return not_written("{n}", "backward_schema_args")(x)


# Direct calls of custom::{b} for the FakeTensor tests and opcheck:
# {{"": Fake(lambda <tensors>: custom.{b}(...), lambda d: (<tensors in dtype d: sizes 2 and 5 become symbolic, H static>))}}
BACKWARD_FAKE = {{"not_written": Fake(not_written("{n}", "BACKWARD_FAKE"), not_written("{n}", "BACKWARD_FAKE"))}}

# Bad inputs of custom::{b} and the error each must raise (a message "custom::{b}: ...<phrase>").
BACKWARD_BAD = {{"not_written": Bad(not_written("{n}", "BACKWARD_BAD"), ValueError, "")}}


def backward_fuzz_case(fz):
    """A call of custom::{b} for the fuzz suite, as fuzz_case (fz.grad_output(shape) for
    an incoming gradient)."""
    return not_written("{n}", "backward_fuzz_case")(fz)


def backward_fuzz_model(case, args, grad_outputs):
    """custom::{b}'s float64 model, as fuzz_model."""
    return not_written("{n}", "backward_fuzz_model")(case, args, grad_outputs)


# custom::{b} on DTensors, as DISTRIBUTED.
BACKWARD_DISTRIBUTED = [placed("not_written", not_written("{n}", "BACKWARD_DISTRIBUTED"), [], [])]
'''
    return f'''"""{n}{f" and {b}" if b else ""}: the test data of the shared tests (tests/op_cases/__init__.py
says what each entry holds and which tests use it).

Generated by `{GENERATOR} {_rel(p.path)}`. Every entry below fails the tests that
use it, saying "not written yet", until you write it; tests/op_cases/gelu.py is a
short complete example. The shared tests derive the rest from the prototype.
"""

import torch

from fuzz_kit import Expect, f64  # noqa: F401
from op_cases import DT_ROWS, Bad, Call, Fake, H, grand, not_written, placed, rand, sample  # noqa: F401
from op_extension import ops  # noqa: F401

custom = torch.ops.custom

# Calls of the op for opcheck and the reference comparisons (tests/test_ops.py):
# sample("<id>", lambda m: ((<positional arguments>), {{<keyword arguments>}})), m(*shape) a tensor
# (layout="transposed" / "strided" / "row_strided", scale=, offset=, grad=False); large=True for big ones.
SAMPLES = [sample("not_written", not_written("{n}", "SAMPLES"))]


def schema_args(x):
    """One small valid call of custom::{n}: {_call_signature(p)};
    every tensor input given, tensors made by x(*shape)."""
    return not_written("{n}", "schema_args")(x)


def f_{n}({tensors}):
    """The op as a model calls it (op_extension.ops.{n}), its backward op reached by autograd."""
    return not_written("{n}", "f_{n}")({tensors})


# Its inputs: rows -> float32 tensors whose row count is `rows` (rand(*shape), H the hidden size).
CALLS = [Call(f_{n}, not_written("{n}", "CALLS (the inputs of f_{n})"))]

# Bad inputs of the op and the error each must raise (a message "custom::{n}: ...<phrase>"):
# {{"<id>": Bad(lambda t: ops.{n}(t(3, 4), ...), ValueError, r"<phrase>")}}
BAD = {{"not_written": Bad(not_written("{n}", "BAD"), ValueError, "")}}

# float64 gradcheck calls: {{"<id>": lambda m: ((<arguments>), {{}})}}
GRADCHECK = {{"not_written": not_written("{n}", "GRADCHECK")}}

# LLM-like calls for the CUDA traffic model (tests/test_cuda_sim_traffic.py), built like SAMPLES:
# [sample("<id>", lambda m: ((m(4, 2048), ...), {{}}))]
TRAFFIC = [sample("not_written", not_written("{n}", "TRAFFIC"))]


# The fuzz suite (tests/test_fuzz.py runs the op on every target; tests/fuzz_kit.py
# holds the strategies and float64 models the ops share, gelu.py has a short example).
def fuzz_case(fz):
    """One call hypothesis draws: fz.spec(shape) a tensor of the drawn dtype fz.dtype,
    fz.any_shape(), fz.pick([...]); return fz.case((<arguments>), row_len=<terms a
    reduction adds>)."""
    return not_written("{n}", "fuzz_case")(fz)


def fuzz_model(case, args, grad_outputs):
    """The float64 model of each output, from the built inputs `args`:
    [Expect(value, magnitude >= |value|, n)] (from fuzz_kit import Expect, f64)."""
    return not_written("{n}", "fuzz_model")(case, args, grad_outputs)


# The op on DTensors (tests/test_distributed.py): each placement its SHARDING rule accepts and
# one it must redistribute: placed("<id>", lambda g: [grand(g, *DT_ROWS), ...], ["S0", ...], [<output
# placements>]) ("R", "S<dim>", "P"; op_cases/_kinds.py's Placed).
DISTRIBUTED = [placed("not_written", not_written("{n}", "DISTRIBUTED"), [], [])]
{backward_part}
# Optional, where they apply (tests/op_cases/__init__.py): LAYOUT, BACKWARD_LAYOUT, PYTHON_LEVEL,
# CHECKED_FIRST, BACKWARD_CHECKED_FIRST, INTEGER_INPUT, FUZZ_TOLERANCE, FUZZ_SATURATES_16BIT;
# and, replacing what is derived: FAKE, INFERENCE, backward_args, BACKWARD_SAMPLE,
# EXPANDED_GRAD_SAMPLE, PARTIAL_GRAD_SAMPLE, LOW_PRECISION_OPCHECK.
'''


# ---- the plan and the writing ----------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    path: Path  # relative to the root
    text: str


def _rel(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return Path(path).name if Path(path).parent.name != "op_protos" else f"op_protos/{Path(path).name}"


def plan(proto_path: Path) -> list[Planned]:
    """Every file the op needs, with its text (nothing is written)."""
    proto_path = Path(proto_path)
    p = parse_proto(proto_path)
    if p.backward_of:
        raise ScaffoldError(f"{proto_path}: {p.name} is a backward op; scaffold its forward op "
                            f"({p.backward_of}), which creates both")
    files: list[Planned] = []
    backward = None
    if p.backward:
        back_path = proto_path.parent / f"{p.backward}.json"
        if back_path.exists():
            backward = parse_proto(back_path)
        else:
            name, content = backward_prototype(proto_path)
            text = json.dumps(content, indent=2) + "\n"
            files.append(Planned(Path("op_protos") / name, text))
            with tempfile.TemporaryDirectory() as tmp:  # parsed as the build will parse it
                (Path(tmp) / name).write_text(text)
                backward = dataclasses.replace(parse_proto(Path(tmp) / name), path=back_path)
    n = p.name
    csrc = Path("op_extension/csrc")
    files += [
        Planned(csrc / "kernel/cpu" / f"{n}.h", cpu_header(p, backward)),
        Planned(csrc / "kernel/cpu" / f"{n}.cpp", cpu_kernel(p, backward)),
        Planned(csrc / "kernel/cuda" / f"{n}.cuh", cuda_header(p, backward)),
        Planned(csrc / "kernel/cuda" / f"{n}.cu", cuda_source(p, backward)),
        Planned(csrc / "torch_ext/ops" / f"{n}.h", glue_header(p, backward)),
        Planned(csrc / "torch_ext/npu/ops" / f"{n}.cpp", npu_glue_source(p, backward)),
    ]
    for o in [p] + ([backward] if backward else []):
        k = _kernel_name(o)
        files += [
            Planned(csrc / "kernel/ascendc" / f"{k}.cpp", ascend_kernel(o)),
            Planned(csrc / "host/tiling" / f"{k}_tiling.h", tiling_header(o)),
            Planned(csrc / "host/tiling" / f"{k}_tiling.cpp", tiling_source(o)),
            Planned(csrc / "host/aclnn" / f"aclnn_{k}.cpp", aclnn_source(o)),
        ]
    files += python_files(p, backward)
    files.append(Planned(Path("tests/op_cases") / f"{n}.py", op_cases_file(p, backward)))
    return files


def python_files(p: OpProto, backward: OpProto | None) -> list[Planned]:
    """The Python side of a new op: its op module and its test."""
    return [
        Planned(Path("op_extension/op_defs") / f"{p.name}.py", op_module(p, backward)),
        Planned(Path("tests") / f"test_{p.name}.py", test_file(p)),
    ]


def scaffold(proto_path: Path, root: Path = ROOT, dry_run: bool = False) -> list[Path]:
    """Writes the planned files under `root`; refuses (ScaffoldError, nothing
    written) if any of them exists."""
    files = plan(proto_path)
    existing = [f.path.as_posix() for f in files if (root / f.path).exists()]
    if existing:
        raise ScaffoldError("refusing to overwrite existing files (nothing written): " + ", ".join(existing))
    if not dry_run:
        for f in files:
            target = root / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f.text)
    return [root / f.path for f in files]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.split("\n\n")[0])
    parser.add_argument("prototype", type=Path, help="op_protos/<op>.json")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree to write into [default: this one]")
    parser.add_argument("--dry-run", action="store_true", help="list the files, write nothing")
    args = parser.parse_args(argv)
    try:
        written = scaffold(args.prototype, args.root, args.dry_run)
    except (ScaffoldError, ProtoError, FileNotFoundError) as e:
        print(f"scaffold: {e}", file=sys.stderr)
        return 2
    verb = "would write" if args.dry_run else "wrote"
    for path in written:
        print(f"{verb} {path}")
    if not args.dry_run:
        print("next: fill in the kernels, the tiling, the references (op_extension/op_defs/) and the "
              "shared tests' data (tests/op_cases/<name>.py), then build and run the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
