"""The prototypes in op_protos/*.json are the single source of truth.

These tests read the JSON files themselves (independently of
op_extension._protos, whose translation is what is under test) and check that

* every file has the msopgen shape plus our "torch" section;
* the schema registered with the dispatcher agrees with the prototype in every
  input, attr and output (compared structurally, argument by argument);
* each op accepts exactly the dtypes its prototype lists, in the C++ kernels and
  in the fake (meta) kernels, and its outputs follow the prototype's shape rules;
* every forward op names a registered backward op;
* the checkers above can fail: tampered prototypes are reported, and
  op_extension._protos.parse_proto rejects malformed files with ProtoError.

The calls made of each op are its schema_args (backward_schema_args) of
tests/op_cases/<op>.py.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import torch

import op_cases
import op_extension  # registers torch.ops.custom.*
from op_extension import _protos

PROTO_DIR = Path(__file__).resolve().parent.parent / "op_protos"
PROTO_FILES = sorted(PROTO_DIR.glob("*.json"))

# msopgen dtype names -> torch dtypes. Deliberately wider than what the package
# maps, so that a prototype listing e.g. int32 can be checked against the op.
MSOPGEN_DTYPES = {
    "float16": torch.float16,
    "float": torch.float32,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "double": torch.float64,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}

# msopgen attr type -> schema type (float attrs defaulting to None become float?).
ATTR_SCHEMA_TYPE = {
    "listInt": "SymInt[]",
    "float": "float",
    "string": "str",
    "int": "int",
    "bool": "bool",
}

# dtypes that no op of this package supports: each must be rejected.
UNSUPPORTED_DTYPES = (torch.int32, torch.int64, torch.complex64, torch.bool)
ALL_PROBED_DTYPES = (torch.float16, torch.float32, torch.bfloat16, torch.float64) + UNSUPPORTED_DTYPES


def _raw(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    assert isinstance(data, list) and len(data) == 1, f"{path.name}: expected a list holding one op object"
    return data[0]


RAW = {p.stem: _raw(p) for p in PROTO_FILES}
OP_NAMES = sorted(obj["torch"]["name"] for obj in RAW.values())
FORWARD_OPS = sorted(obj["torch"]["name"] for obj in RAW.values() if "backward_of" not in obj["torch"])
BACKWARD_OPS = sorted(obj["torch"]["name"] for obj in RAW.values() if "backward_of" in obj["torch"])
RAW_BY_OP = {obj["torch"]["name"]: obj for obj in RAW.values()}


# ---------------------------------------------------------------------------------
# The checkers: prototype (raw JSON) vs registered schema, prototype vs op dtypes.
# ---------------------------------------------------------------------------------


def _render_type(t) -> str:
    """A torch._C type in schema notation (Tensor?, SymInt[], float?, ...)."""
    kind = t.kind()
    if kind == "OptionalType":
        return _render_type(t.getElementType()) + "?"
    if kind == "ListType":
        return _render_type(t.getElementType()) + "[]"
    return {
        "TensorType": "Tensor",
        "SymIntType": "SymInt",
        "IntType": "int",
        "FloatType": "float",
        "StringType": "str",
        "BoolType": "bool",
        "NumberType": "Scalar",
    }.get(kind, str(t))


_NO_DEFAULT = object()


def expected_arguments(obj: dict) -> list[tuple[str, str, object]]:
    """[(name, schema type, default or _NO_DEFAULT)] that the prototype prescribes."""
    inputs = {e["name"]: e for e in obj.get("input_desc", [])}
    attrs = {e["name"]: e for e in obj.get("attr", [])}
    order = obj.get("torch", {}).get("arg_order", list(inputs) + list(attrs))

    def has_default(name):
        if name in inputs:
            return inputs[name]["param_type"] == "optional"
        return "default_value" in attrs.get(name, {})

    args = []
    for i, name in enumerate(order):
        if name in inputs:
            optional = inputs[name]["param_type"] == "optional"
            # An optional tensor takes the default None unless a required argument follows it.
            trailing = all(has_default(n) for n in order[i + 1 :])
            args.append((name, "Tensor?" if optional else "Tensor", None if optional and trailing else _NO_DEFAULT))
        elif name in attrs:
            a = attrs[name]
            typ = ATTR_SCHEMA_TYPE.get(a["type"], f"<unknown attr type {a['type']!r}>")
            if "default_value" in a:
                default = a["default_value"]
                if default is None:
                    typ += "?"
            else:
                default = _NO_DEFAULT
            args.append((name, typ, default))
        else:
            args.append((name, f"<{name!r} in arg_order is neither an input nor an attr>", _NO_DEFAULT))
    return args


def expected_returns(obj: dict) -> list[str]:
    return [e["name"] for e in obj.get("output_desc", [])]


def _fmt_default(d) -> str:
    return "<none>" if d is _NO_DEFAULT else repr(d)


def _defaults_equal(expected, actual) -> bool:
    if expected is _NO_DEFAULT or actual is _NO_DEFAULT:
        return expected is actual
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(float(expected), float(actual), rel_tol=1e-12, abs_tol=0.0)
    return type(expected) is type(actual) and expected == actual


def schema_diff(obj: dict, schema) -> list[str]:
    """Every way in which a registered schema disagrees with the prototype `obj`."""
    problems = []
    name = obj["torch"]["name"]
    if schema.name != f"custom::{name}":
        problems.append(f"op name: prototype custom::{name}, registered {schema.name}")
    if schema.overload_name != "":
        problems.append(f"overload: prototype '' (default), registered {schema.overload_name!r}")

    expected = expected_arguments(obj)
    actual = [
        (a.name, _render_type(a.real_type), a.default_value if a.has_default_value() else _NO_DEFAULT)
        for a in schema.arguments
    ]
    exp_names = [e[0] for e in expected]
    act_names = [a[0] for a in actual]
    if exp_names != act_names:
        missing = [n for n in exp_names if n not in act_names]
        extra = [n for n in act_names if n not in exp_names]
        problems.append(
            f"arguments: prototype {exp_names}, registered {act_names}"
            + (f"; missing from the schema: {missing}" if missing else "")
            + (f"; not in the prototype: {extra}" if extra else "")
        )
    registered = {a[0]: a for a in actual}
    for arg_name, exp_type, exp_default in expected:
        if arg_name not in registered:
            continue
        _, act_type, act_default = registered[arg_name]
        if exp_type != act_type:
            problems.append(f"argument {arg_name!r}: type: prototype {exp_type}, registered {act_type}")
        if not _defaults_equal(exp_default, act_default):
            problems.append(
                f"argument {arg_name!r}: default: prototype {_fmt_default(exp_default)}, "
                f"registered {_fmt_default(act_default)}"
            )
    for a in schema.arguments:
        if a.kwarg_only:
            problems.append(f"argument {a.name!r} is keyword-only in the schema; prototypes give positional arguments")
        if a.alias_info is not None:
            problems.append(f"argument {a.name!r} is annotated as aliased/mutated ({a.alias_info}); ops are functional")

    exp_returns = expected_returns(obj)
    if len(exp_returns) != len(schema.returns):
        problems.append(f"outputs: prototype has {len(exp_returns)} {exp_returns}, registered {len(schema.returns)}")
    for i, r in enumerate(schema.returns):
        if _render_type(r.real_type) != "Tensor":
            problems.append(f"output {i}: prototype Tensor, registered {_render_type(r.real_type)}")
        if r.alias_info is not None:
            problems.append(f"output {i} is annotated as an alias ({r.alias_info}); outputs must be fresh tensors")
    if len(exp_returns) > 1 and len(exp_returns) == len(schema.returns):
        act = [r.name for r in schema.returns]
        if act != exp_returns:
            problems.append(f"output names: prototype {exp_returns}, registered {act}")
    return problems


def _expected_schema_text(obj: dict) -> str:
    args = []
    for n, t, d in expected_arguments(obj):
        args.append(f"{t} {n}" + ("" if d is _NO_DEFAULT else f"={d!r}"))
    outs = expected_returns(obj)
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join(f"Tensor {o}" for o in outs) + ")"
    return f"custom::{obj['torch']['name']}({', '.join(args)}) -> {ret}"


def schema_report(obj: dict, schema) -> str:
    problems = schema_diff(obj, schema)
    return (
        f"{obj['torch']['name']}: the registered schema disagrees with its prototype\n"
        f"  prototype:  {_expected_schema_text(obj)}\n"
        f"  registered: {schema}\n" + "\n".join(f"  - {p}" for p in problems)
    )


def listed_dtypes(obj: dict) -> list[torch.dtype]:
    """The dtypes of the op's first input (all tensors of a call share the dtype)."""
    return [MSOPGEN_DTYPES[t] for t in obj["input_desc"][0]["type"]]


# Small valid arguments for every op (forward and backward), in one dtype: each
# op's schema_args (backward_schema_args) in tests/op_cases/<op>.py.
def _t(shape, dtype, device="cpu", positive=False):
    base = torch.rand(shape) + 0.5 if positive else torch.randn(shape)
    return base.to(dtype=dtype, device=device)


def sample_args(op: str, dtype: torch.dtype, device: str = "cpu") -> tuple:
    schema_args = op_cases.get(op, "schema_args")
    return tuple(schema_args(lambda *shape, positive=False: _t(shape, dtype, device, positive)))


def call_op(op: str, dtype: torch.dtype, device: str = "cpu"):
    return getattr(torch.ops.custom, op).default(*sample_args(op, dtype, device))


def dtype_mismatches(obj: dict, device: str = "cpu", dtypes=ALL_PROBED_DTYPES) -> list[str]:
    """Runs the op in each dtype; reports every disagreement with the prototype's list."""
    op = obj["torch"]["name"]
    listed = listed_dtypes(obj)
    problems = []
    for dtype in dict.fromkeys(list(dtypes) + listed):
        try:
            call_op(op, dtype, device)
        except TypeError as e:
            if dtype in listed:
                problems.append(f"{dtype} is listed in the prototype but rejected: {e}")
            elif f"custom::{op}" not in str(e):
                problems.append(f"{dtype} is rejected, but the TypeError does not name custom::{op}: {e}")
        except Exception as e:  # noqa: BLE001  (anything but TypeError is a finding)
            problems.append(f"{dtype}: expected success or a TypeError, got {type(e).__name__}: {e}")
        else:
            if dtype not in listed:
                problems.append(f"{dtype} is not listed in the prototype but the op accepts it")
    return problems


# ---------------------------------------------------------------------------------
# 1. Every prototype file is a well-formed msopgen prototype with a torch section.
# ---------------------------------------------------------------------------------


def test_prototype_dir_holds_every_op():
    assert PROTO_FILES, f"no prototypes found in {PROTO_DIR}"
    # Every forward op has its functional API and its backward op, and nothing else is there.
    assert set(FORWARD_OPS) == set(op_extension.ops.__all__)
    assert set(BACKWARD_OPS) == {f"{op}_backward" for op in FORWARD_OPS}


@pytest.mark.parametrize("path", PROTO_FILES, ids=lambda p: p.stem)
def test_prototype_is_well_formed(path):
    data = json.loads(path.read_text())
    assert isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict), (
        f"{path.name}: an msopgen prototype is a list holding exactly one op object"
    )
    obj = data[0]
    assert re.fullmatch(r"[A-Z][a-z0-9]*(?:[A-Z][a-z0-9]*)*", obj.get("op", "")), (
        f"{path.name}: 'op' must be a CamelCase op type, got {obj.get('op')!r}"
    )
    torch_side = obj.get("torch")
    assert isinstance(torch_side, dict), f"{path.name}: missing the 'torch' section"
    assert torch_side.get("name") == path.stem, f"{path.name}: torch.name {torch_side.get('name')!r} != file name"
    assert re.fullmatch(r"[a-z][a-z0-9_]*", torch_side["name"])

    inputs = obj.get("input_desc")
    outputs = obj.get("output_desc")
    assert isinstance(inputs, list) and inputs, f"{path.name}: input_desc must be a non-empty list"
    assert isinstance(outputs, list) and outputs, f"{path.name}: output_desc must be a non-empty list"
    n_combos = len(inputs[0]["type"])
    assert n_combos >= 1
    for kind, entries in (("input_desc", inputs), ("output_desc", outputs)):
        for e in entries:
            where = f"{path.name}: {kind} {e.get('name')!r}"
            assert {"name", "param_type", "format", "type"} <= set(e), f"{where} lacks one of name/param_type/format/type"
            assert e["param_type"] in ("required", "optional"), f"{where}: param_type {e['param_type']!r}"
            assert isinstance(e["format"], list) and isinstance(e["type"], list), f"{where}: format/type must be lists"
            assert len(e["format"]) == len(e["type"]) == n_combos, (
                f"{where}: format ({len(e['format'])}) and type ({len(e['type'])}) lists must be aligned "
                f"index by index with the first input's {n_combos} combinations"
            )
            assert all(isinstance(f, str) and f for f in e["format"]), f"{where}: formats must be non-empty strings"
            unknown = [t for t in e["type"] if t not in _protos.PROTO_TO_TORCH_DTYPE]
            assert not unknown, f"{where}: dtypes {unknown} are not supported by the package"
            assert len(set(e["type"])) == len(e["type"]), f"{where}: dtype listed twice: {e['type']}"
        # Every tensor of a call shares one dtype: combination i is the same dtype everywhere.
        for e in entries:
            assert e["type"] == inputs[0]["type"], f"{path.name}: {e['name']} types {e['type']} != {inputs[0]['type']}"
    for e in outputs:
        assert e["param_type"] == "required", f"{path.name}: output {e['name']!r} must be required"
        assert isinstance(e.get("shape"), str) and e["shape"], f"{path.name}: output {e['name']!r} lacks its 'shape' rule"

    attrs = obj.get("attr", [])
    assert isinstance(attrs, list)
    for a in attrs:
        where = f"{path.name}: attr {a.get('name')!r}"
        assert {"name", "param_type", "type"} <= set(a), f"{where} lacks one of name/param_type/type"
        assert a["type"] in ATTR_SCHEMA_TYPE, f"{where}: unknown attr type {a['type']!r}"
        assert a["param_type"] in ("required", "optional"), f"{where}: param_type {a['param_type']!r}"
        if a["param_type"] == "optional":
            assert "default_value" in a, f"{where} is optional but has no default_value"
        else:
            assert "default_value" not in a, f"{where} is required but has a default_value"
        if "allowed_values" in a:
            assert a.get("default_value") in a["allowed_values"], f"{where}: default not among allowed_values"

    names = [e["name"] for e in inputs] + [a["name"] for a in attrs]
    assert len(set(names)) == len(names), f"{path.name}: duplicate argument names {names}"
    out_names = [e["name"] for e in outputs]
    assert len(set(out_names)) == len(out_names), f"{path.name}: duplicate output names {out_names}"
    order = torch_side.get("arg_order")
    assert order is not None, f"{path.name}: torch.arg_order is missing"
    assert sorted(order) == sorted(names) and len(order) == len(names), (
        f"{path.name}: torch.arg_order {order} must list every input and attr exactly once: {names}"
    )
    # Shape rules refer to arguments of the op.
    for e in outputs:
        rule = e["shape"]
        m = re.fullmatch(r"broadcast\((\w+),\s*(\w+)\)", rule)
        refs = list(m.groups()) if m else [rule]
        for ref in refs:
            assert ref in names, f"{path.name}: output {e['name']!r} shape rule {rule!r} names unknown {ref!r}"


@pytest.mark.parametrize("path", PROTO_FILES, ids=lambda p: p.stem)
def test_package_parser_reads_prototype(path):
    """op_extension._protos agrees with the raw JSON on the facts the fake kernels use."""
    proto = _protos.parse_proto(path)
    obj = _raw(path)
    assert proto.op_type == obj["op"]
    assert proto.name == obj["torch"]["name"]
    assert [t.name for t in proto.inputs] == [e["name"] for e in obj["input_desc"]]
    assert [t.name for t in proto.outputs] == [e["name"] for e in obj["output_desc"]]
    assert [t.shape for t in proto.outputs] == [e["shape"] for e in obj["output_desc"]]
    assert [a.name for a in proto.attrs] == [a["name"] for a in obj.get("attr", [])]
    assert list(proto.arg_order) == obj["torch"]["arg_order"]
    assert [getattr(torch, d) for d in proto.dtypes] == listed_dtypes(obj)
    assert proto.backward == obj["torch"].get("backward")
    assert proto.backward_of == obj["torch"].get("backward_of")
    assert _protos.load_protos()[proto.name].schema() == proto.schema()


def test_generated_header_lists_every_schema():
    header = _protos.generate_cpp_header(_protos.load_protos())
    for op in OP_NAMES:
        assert f'"{_protos.load_protos()[op].schema()}",' in header
        camel = "".join(p.capitalize() for p in op.split("_"))
        assert f"k{camel}Dtypes" in header


# ---------------------------------------------------------------------------------
# 2. Registered schema == prototype.
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OP_NAMES)
def test_registered_schema_matches_prototype(op):
    assert hasattr(torch.ops.custom, op), f"custom::{op} is described in op_protos/ but not registered"
    schema = getattr(torch.ops.custom, op).default._schema
    obj = RAW_BY_OP[op]
    assert not schema_diff(obj, schema), schema_report(obj, schema)


def test_every_registered_op_has_a_prototype():
    """...or is one of the few ops an op module declares without one (EXTRA_FAKE:
    rotary_embedding_table_backward), with its fake kernel there."""
    from op_extension import op_defs

    registered = {
        s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("custom::")
    }
    declared = op_defs.extra_ops()
    assert declared <= registered, f"declared by an op module but not registered: {sorted(declared - registered)}"
    registered -= declared
    assert registered == set(OP_NAMES), (
        f"registered without a prototype: {sorted(registered - set(OP_NAMES))}; "
        f"prototype without registration: {sorted(set(OP_NAMES) - registered)}"
    )


# ---------------------------------------------------------------------------------
# 3. dtype lists: real kernels and fake (meta) kernels accept exactly the listed dtypes.
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OP_NAMES)
def test_dtype_list_matches_kernels(op):
    problems = dtype_mismatches(RAW_BY_OP[op], "cpu")
    assert not problems, f"custom::{op} (CPU kernels):\n" + "\n".join(f"  - {p}" for p in problems)


@pytest.mark.parametrize("op", OP_NAMES)
def test_dtype_list_matches_fake_kernels(op):
    problems = dtype_mismatches(RAW_BY_OP[op], "meta")
    assert not problems, f"custom::{op} (fake kernels on meta tensors):\n" + "\n".join(f"  - {p}" for p in problems)


@pytest.mark.parametrize("op", FORWARD_OPS)
@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_unsupported_dtype_is_a_type_error(op, dtype, device):
    with pytest.raises(TypeError, match=f"custom::{op}"):
        call_op(op, dtype, device)


@pytest.mark.parametrize("op", FORWARD_OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_supported_dtype_keeps_dtype(op, dtype):
    outs = call_op(op, dtype)
    for out in outs if isinstance(outs, tuple) else (outs,):
        assert out.dtype == dtype


# ---------------------------------------------------------------------------------
# 4. Output shapes follow each output's prototype `shape` rule (real and fake).
# ---------------------------------------------------------------------------------


def expected_output_shapes(obj: dict, args: tuple) -> list[list[int]]:
    by_name = dict(zip(obj["torch"]["arg_order"], args))
    shapes = []
    for e in obj["output_desc"]:
        rule = e["shape"]
        m = re.fullmatch(r"broadcast\((\w+),\s*(\w+)\)", rule)
        if m:
            a, b = (by_name[n] for n in m.groups())
            shapes.append(list(torch.broadcast_shapes(a.shape, b.shape)))
            continue
        source = by_name[rule]
        if source is None:
            shapes.append([0])  # absent optional parameter: empty placeholder
        elif isinstance(source, torch.Tensor):
            shapes.append(list(source.shape))
        else:
            shapes.append(list(source))
    return shapes


def _without_optional_tensors(op: str, args: tuple) -> tuple:
    """The same call with every optional tensor left out (None)."""
    obj = RAW_BY_OP[op]
    optional = {e["name"] for e in obj["input_desc"] if e["param_type"] == "optional"}
    return tuple(None if n in optional else a for n, a in zip(obj["torch"]["arg_order"], args))


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("with_optional", [True, False], ids=["all_args", "no_optional"])
@pytest.mark.parametrize("op", OP_NAMES)
def test_output_shapes_follow_prototype(op, with_optional, device):
    obj = RAW_BY_OP[op]
    args = sample_args(op, torch.float32, device)
    if not with_optional:
        args = _without_optional_tensors(op, args)
    outs = getattr(torch.ops.custom, op).default(*args)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    assert [list(o.shape) for o in outs] == expected_output_shapes(obj, args)
    assert all(o.dtype == torch.float32 and o.device.type == device for o in outs)


@pytest.mark.parametrize(
    "op,attr",
    [(op, a["name"]) for op in OP_NAMES for a in RAW_BY_OP[op].get("attr", []) if a.get("allowed_values")],
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_attr_allowed_values_match_op(op, attr, device):
    """Each value the prototype allows is accepted; any other is a ValueError naming the op."""
    obj = RAW_BY_OP[op]
    index = obj["torch"]["arg_order"].index(attr)
    args = list(sample_args(op, torch.float32, device))
    for value in next(a for a in obj["attr"] if a["name"] == attr)["allowed_values"]:
        args[index] = value
        getattr(torch.ops.custom, op).default(*args)
    args[index] = "sigmoid"
    with pytest.raises(ValueError, match=f"custom::{op}"):
        getattr(torch.ops.custom, op).default(*args)


# ---------------------------------------------------------------------------------
# 5. Forward/backward pairing.
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_forward_op_names_registered_backward(op):
    obj = RAW_BY_OP[op]
    backward = obj["torch"].get("backward")
    assert backward, f"{op}.json: torch.backward is missing"
    assert backward in RAW_BY_OP, f"{op}.json: backward op {backward!r} has no prototype"
    assert RAW_BY_OP[backward]["torch"].get("backward_of") == op, f"{backward}.json: backward_of must be {op!r}"
    assert "backward" not in RAW_BY_OP[backward]["torch"], f"{backward}: backward ops are not differentiable"
    assert hasattr(torch.ops.custom, backward), f"torch.ops.custom.{backward} is not registered"
    assert isinstance(getattr(torch.ops.custom, backward).default, torch._ops.OpOverload)
    # The backward op produces one gradient per differentiable tensor input of the forward.
    fwd_inputs = [e["name"] for e in obj["input_desc"]]
    bwd_outputs = [e["name"] for e in RAW_BY_OP[backward]["output_desc"]]
    assert all(o.startswith("grad_") for o in bwd_outputs), bwd_outputs
    assert len(bwd_outputs) <= len(fwd_inputs), (fwd_inputs, bwd_outputs)


@pytest.mark.parametrize("op", BACKWARD_OPS)
def test_backward_op_is_someones_backward(op):
    fwd = RAW_BY_OP[op]["torch"]["backward_of"]
    assert RAW_BY_OP[fwd]["torch"]["backward"] == op


# ---------------------------------------------------------------------------------
# 6. The checkers can fail: tampered prototypes are reported.
# ---------------------------------------------------------------------------------


def _set_attr(obj, attr_name, **changes):
    (a,) = [a for a in obj["attr"] if a["name"] == attr_name]
    a.update(changes)


def _drop_input(obj, name):
    obj["input_desc"] = [e for e in obj["input_desc"] if e["name"] != name]
    obj["torch"]["arg_order"] = [n for n in obj["torch"]["arg_order"] if n != name]


def _set_input(obj, input_name, **changes):
    (e,) = [e for e in obj["input_desc"] if e["name"] == input_name]
    e.update(changes)


def _swap_order(obj, i, j):
    order = obj["torch"]["arg_order"]
    order[i], order[j] = order[j], order[i]


def _add_attr(obj, entry):
    obj["attr"].append(entry)
    obj["torch"]["arg_order"].append(entry["name"])


def _rename_output(obj, index, name):
    obj["output_desc"][index]["name"] = name


def _add_output(obj):
    extra = copy.deepcopy(obj["output_desc"][0])
    extra["name"] = "extra"
    obj["output_desc"].append(extra)


SCHEMA_TAMPERINGS = {
    "changed_float_default": ("layer_norm", lambda o: _set_attr(o, "eps", default_value=1e-6), ["'eps'", "default"]),
    "changed_string_default": ("gelu", lambda o: _set_attr(o, "approximate", default_value="tanh"), ["'approximate'", "default"]),
    "default_none_to_value": ("rms_norm", lambda o: _set_attr(o, "eps", default_value=1e-6), ["'eps'", "float?"]),
    "dropped_default": ("add", lambda o: (_set_attr(o, "alpha", param_type="required"), o["attr"][0].pop("default_value")), ["'alpha'", "default"]),
    "dropped_input": ("rms_norm", lambda o: _drop_input(o, "weight"), ["weight", "not in the prototype"]),
    "optional_to_required": ("layer_norm", lambda o: _set_input(o, "bias", param_type="required"), ["'bias'", "Tensor?"]),
    "required_to_optional": ("swiglu", lambda o: _set_input(o, "up", param_type="optional"), ["'up'", "Tensor?"]),
    "renamed_input": ("softmax", lambda o: (_set_input(o, "input", name="x"), o["torch"].update(arg_order=["x", "dim"])), ["'x'"]),
    "swapped_arg_order": ("fused_add_rms_norm", lambda o: _swap_order(o, 0, 1), ["arguments"]),
    "attr_type_changed": ("softmax", lambda o: _set_attr(o, "dim", type="float"), ["'dim'", "type"]),
    "list_attr_to_int": ("rms_norm", lambda o: _set_attr(o, "normalized_shape", type="int"), ["'normalized_shape'", "SymInt[]"]),
    "added_attr": ("swiglu", lambda o: _add_attr(o, {"name": "beta", "param_type": "optional", "type": "float", "default_value": 1.0}), ["beta"]),
    "renamed_output": ("rms_norm_backward", lambda o: _rename_output(o, 1, "grad_gamma"), ["output names", "grad_gamma"]),
    "added_output": ("gelu", _add_output, ["outputs", "extra"]),
    "renamed_op": ("geglu", lambda o: o["torch"].update(name="geglu2"), ["op name"]),
}


def _write_tampered(tmp_path: Path, op: str, mutate) -> dict:
    obj = copy.deepcopy(RAW_BY_OP[op])
    mutate(obj)
    path = tmp_path / f"{op}.json"
    path.write_text(json.dumps([obj], indent=2))
    return _raw(path)


def test_schema_checker_accepts_untampered_copies(tmp_path):
    for op in OP_NAMES:
        obj = _write_tampered(tmp_path, op, lambda o: None)
        assert schema_diff(obj, getattr(torch.ops.custom, op).default._schema) == []


@pytest.mark.parametrize("case", sorted(SCHEMA_TAMPERINGS))
def test_schema_checker_reports_tampered_prototype(case, tmp_path):
    op, mutate, expected_words = SCHEMA_TAMPERINGS[case]
    obj = _write_tampered(tmp_path, op, mutate)
    problems = schema_diff(obj, getattr(torch.ops.custom, op).default._schema)
    assert problems, f"{case}: the checker did not notice the tampered prototype of {op}"
    report = "\n".join(problems)
    for word in expected_words:
        assert word in report, f"{case}: {word!r} not in the report:\n{report}"


@pytest.mark.parametrize(
    "op,mutate,expected",
    [
        # a dtype the kernels reject is added to the list
        ("gelu", lambda types: types + ["int32"], "torch.int32 is listed in the prototype but rejected"),
        # a dtype the kernels accept is dropped from the list
        ("rms_norm", lambda types: [t for t in types if t != "bfloat16"], "torch.bfloat16 is not listed in the prototype but the op accepts it"),
        ("swiglu_backward", lambda types: [t for t in types if t != "double"], "torch.float64 is not listed"),
    ],
    ids=["added_int32", "dropped_bfloat16", "backward_dropped_double"],
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_dtype_checker_reports_tampered_prototype(op, mutate, expected, device, tmp_path):
    def tamper(obj):
        for e in obj["input_desc"] + obj["output_desc"]:
            e["type"] = mutate(e["type"])
            e["format"] = ["ND"] * len(e["type"])

    obj = _write_tampered(tmp_path, op, tamper)
    problems = dtype_mismatches(obj, device)
    assert any(expected in p for p in problems), f"expected {expected!r} among {problems}"


# ---------------------------------------------------------------------------------
# 7. parse_proto rejects malformed prototypes with ProtoError.
# ---------------------------------------------------------------------------------


def _first_input(o):
    return o["input_desc"][0]


MALFORMED = {
    "format_type_length_differ": ("add", lambda o: _first_input(o)["format"].pop()),
    "output_format_type_length_differ": ("add", lambda o: o["output_desc"][0]["type"].pop()),
    "type_lists_not_aligned": ("add", lambda o: (o["input_desc"][1]["type"].pop(), o["input_desc"][1]["format"].pop())),
    "output_lacks_shape": ("softmax", lambda o: o["output_desc"][0].pop("shape")),
    "multi_output_lacks_shape": ("layer_norm_backward", lambda o: o["output_desc"][2].pop("shape")),
    "arg_order_misses_attr": ("layer_norm", lambda o: o["torch"]["arg_order"].remove("eps")),
    "arg_order_unknown_name": ("softmax", lambda o: o["torch"]["arg_order"].append("axis")),
    "arg_order_renamed": ("gelu", lambda o: o["torch"].update(arg_order=["x", "approximate"])),
    "unknown_dtype": ("gelu", lambda o: (_first_input(o)["type"].__setitem__(0, "float8"))),
    "bad_param_type": ("gelu", lambda o: _first_input(o).update(param_type="dynamic")),
    "unknown_attr_type": ("softmax", lambda o: o["attr"][0].update(type="listListInt")),
    "missing_torch_name": ("softmax", lambda o: o["torch"].pop("name")),
    "tensor_lacks_type": ("swiglu", lambda o: _first_input(o).pop("type")),
    "missing_op": ("swiglu", lambda o: o.pop("op")),
    "attr_lacks_name": ("softmax", lambda o: o["attr"][0].pop("name")),
    # Semantic mistakes that would otherwise surface as a wrong schema, a failed
    # TORCH_LIBRARY registration at import, or a KeyError inside a fake kernel.
    "duplicate_argument_name": ("swiglu", lambda o: (_set_input(o, "up", name="gate"), o["torch"].update(arg_order=["gate", "gate"]))),
    "optional_attr_without_default": ("gelu", lambda o: o["attr"][0].pop("default_value")),
    "required_attr_with_default": ("softmax", lambda o: o["attr"][0].update(default_value=-1)),
    "default_not_in_allowed_values": ("gelu", lambda o: o["attr"][0].update(default_value="erf")),
    "no_outputs": ("gelu", lambda o: o.update(output_desc=[])),
    "shape_rule_names_unknown_argument": ("gelu", lambda o: o["output_desc"][0].update(shape="x")),
    "dtype_combinations_differ_between_tensors": ("swiglu", lambda o: o["input_desc"][1]["type"].reverse()),
    # Argument names become Python parameters (ops' derived function, the fake kernel).
    "argument_name_is_a_keyword": ("swiglu", lambda o: (_set_input(o, "up", name="lambda"),
                                                        o["torch"].update(arg_order=["gate", "lambda"]))),
    "op_name_is_a_keyword": ("gelu", lambda o: o["torch"].update(name="lambda")),
    "doc_not_a_string": ("gelu", lambda o: o["torch"].update(doc=["GELU"])),
    "doc_empty": ("gelu", lambda o: o["torch"].update(doc=" ")),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_parse_proto_rejects_malformed(case, tmp_path):
    op, mutate = MALFORMED[case]
    obj = copy.deepcopy(RAW_BY_OP[op])
    mutate(obj)
    path = tmp_path / f"{op}.json"
    path.write_text(json.dumps([obj]))
    with pytest.raises(_protos.ProtoError):
        _protos.parse_proto(path)


@pytest.mark.parametrize(
    "text",
    [
        json.dumps([]),
        json.dumps({"op": "Gelu"}),
        json.dumps([RAW_BY_OP["gelu"], RAW_BY_OP["softmax"]]),
    ],
    ids=["empty_list", "object_not_list", "two_ops"],
)
def test_parse_proto_rejects_wrong_container(text, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(_protos.ProtoError):
        _protos.parse_proto(path)


def test_load_protos_rejects_duplicate_op(tmp_path):
    for stem in ("gelu", "gelu_copy"):
        (tmp_path / f"{stem}.json").write_text(json.dumps([RAW_BY_OP["gelu"]]))
    with pytest.raises(_protos.ProtoError, match="described twice"):
        _protos.load_protos(tmp_path)


def test_parse_proto_accepts_untampered_copies(tmp_path):
    for op in OP_NAMES:
        path = tmp_path / f"{op}.json"
        path.write_text(json.dumps([RAW_BY_OP[op]]))
        assert _protos.parse_proto(path).schema() == _protos.load_protos()[op].schema()
