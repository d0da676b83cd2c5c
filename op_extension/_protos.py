"""Reads the msopgen-style prototypes in ``op_protos/`` and derives torch schemas.

This module is the single place where a prototype becomes a torch schema. It is
imported by ``setup.py`` (to generate the C++ ``TORCH_LIBRARY`` block before the
extension is compiled), by the fake kernels (dtype lists, shape rules) and by the
test that keeps registered schemas and prototypes in sync. It must therefore import
nothing but the standard library.
"""

from __future__ import annotations

import json
import keyword
from dataclasses import dataclass
from pathlib import Path

# msopgen dtype names -> torch dtype attribute names (resolved lazily so that
# setup.py can use this module before torch is importable from the build dir).
PROTO_TO_TORCH_DTYPE = {
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
    "double": "float64",
}

# msopgen attr types -> schema types. Lists are SymInt[] so that shapes taken from
# tensors under torch.compile(dynamic=True) stay symbolic instead of specialising.
PROTO_TO_SCHEMA_ATTR = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "string": "str",
    "listInt": "SymInt[]",
}


@dataclass(frozen=True)
class TensorDesc:
    name: str
    optional: bool
    dtypes: tuple[str, ...]  # torch dtype names, index-aligned with the prototype
    shape: str | None  # output shape rule: name of an input/attr, or "broadcast(a, b)"


@dataclass(frozen=True)
class AttrDesc:
    name: str
    schema_type: str
    optional: bool
    has_default: bool
    default: object
    allowed_values: tuple | None


@dataclass(frozen=True)
class OpProto:
    op_type: str  # CamelCase, as CANN names it
    name: str  # torch op name in the `custom` namespace
    inputs: tuple[TensorDesc, ...]
    attrs: tuple[AttrDesc, ...]
    outputs: tuple[TensorDesc, ...]
    arg_order: tuple[str, ...]
    backward: str | None
    backward_of: str | None
    path: Path
    doc: str | None = None  # torch.doc: the docstring of a derived op_extension.ops function

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the op accepts (every tensor of one call shares one dtype)."""
        return self.inputs[0].dtypes

    def schema(self) -> str:
        return f"{self.name}({', '.join(self._schema_args())}) -> {self._schema_returns()}"

    def _schema_args(self) -> list[str]:
        by_name = {t.name: t for t in self.inputs}
        attrs = {a.name: a for a in self.attrs}
        args = []
        for i, arg in enumerate(self.arg_order):
            if arg in by_name:
                t = by_name[arg]
                if not t.optional:
                    args.append(f"Tensor {t.name}")
                elif self._defaults_follow(i):
                    args.append(f"Tensor? {t.name}=None")
                else:  # an optional tensor before a required argument takes no default
                    args.append(f"Tensor? {t.name}")
            else:
                a = attrs[arg]
                typ = a.schema_type + ("?" if a.has_default and a.default is None else "")
                text = f"{typ} {a.name}"
                if a.has_default:
                    text += "=" + _schema_default(a.default)
                args.append(text)
        return args

    def _defaults_follow(self, index: int) -> bool:
        by_name = {t.name: t for t in self.inputs}
        attrs = {a.name: a for a in self.attrs}
        for arg in self.arg_order[index + 1 :]:
            if arg in by_name and not by_name[arg].optional:
                return False
            if arg in attrs and not attrs[arg].has_default:
                return False
        return True

    def _schema_returns(self) -> str:
        if len(self.outputs) == 1:
            return "Tensor"
        return "(" + ", ".join(f"Tensor {o.name}" for o in self.outputs) + ")"


def _schema_default(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


class ProtoError(ValueError):
    pass


def _require(path: Path, entry: dict, keys: tuple[str, ...], what: str) -> None:
    if not isinstance(entry, dict):
        raise ProtoError(f"{path}: {what} must be an object, got {type(entry).__name__}")
    for key in keys:
        if key not in entry:
            raise ProtoError(f"{path}: {what} {entry.get('name', '?')!r} lacks {key!r}")


def _parse_tensor(path: Path, entry: dict, what: str) -> TensorDesc:
    _require(path, entry, ("name", "param_type", "format", "type"), what)
    if len(entry["format"]) != len(entry["type"]):
        raise ProtoError(f"{path}: {entry['name']}: 'format' and 'type' lists differ in length")
    unknown = [t for t in entry["type"] if t not in PROTO_TO_TORCH_DTYPE]
    if unknown:
        raise ProtoError(f"{path}: {entry['name']}: unknown dtypes {unknown}")
    if entry["param_type"] not in ("required", "optional"):
        raise ProtoError(f"{path}: {entry['name']}: param_type must be required or optional")
    return TensorDesc(
        name=entry["name"],
        optional=entry["param_type"] == "optional",
        dtypes=tuple(PROTO_TO_TORCH_DTYPE[t] for t in entry["type"]),
        shape=entry.get("shape"),
    )


def _parse_attr(path: Path, entry: dict) -> AttrDesc:
    _require(path, entry, ("name", "param_type", "type"), "attr")
    name = entry["name"]
    if entry["type"] not in PROTO_TO_SCHEMA_ATTR:
        raise ProtoError(f"{path}: attr {name!r}: unknown type {entry['type']!r}")
    optional = entry["param_type"] == "optional"
    if entry["param_type"] not in ("required", "optional"):
        raise ProtoError(f"{path}: attr {name!r}: param_type must be required or optional")
    # msopgen: optional attrs carry their default, required ones have none.
    if optional != ("default_value" in entry):
        raise ProtoError(
            f"{path}: attr {name!r}: an optional attr needs a default_value and a required one must not have one"
        )
    values = entry.get("allowed_values")
    if values and optional and entry["default_value"] not in values:
        raise ProtoError(f"{path}: attr {name!r}: default {entry['default_value']!r} is not in allowed_values {values}")
    return AttrDesc(
        name=name,
        schema_type=PROTO_TO_SCHEMA_ATTR[entry["type"]],
        optional=optional,
        has_default=optional,
        default=entry.get("default_value"),
        allowed_values=tuple(values) if values else None,
    )


def _check_shape_rule(path: Path, output: TensorDesc, inputs: tuple[TensorDesc, ...], attrs: tuple[AttrDesc, ...]) -> None:
    rule = output.shape
    if not rule:
        raise ProtoError(f"{path}: output {output.name!r} lacks its 'shape' rule")
    tensor_names = {t.name for t in inputs}
    list_attrs = {a.name for a in attrs if a.schema_type == "SymInt[]"}
    if rule.startswith("broadcast(") and rule.endswith(")"):
        operands = [n.strip() for n in rule[len("broadcast(") : -1].split(",")]
        if len(operands) != 2 or not set(operands) <= tensor_names:
            raise ProtoError(f"{path}: output {output.name!r}: broadcast() takes two input names, got {rule!r}")
    elif rule not in tensor_names | list_attrs:
        raise ProtoError(
            f"{path}: output {output.name!r}: shape rule {rule!r} names no input tensor or list attr "
            f"(inputs {sorted(tensor_names)}, list attrs {sorted(list_attrs)})"
        )


def parse_proto(path: Path) -> OpProto:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list) or len(data) != 1:
        raise ProtoError(f"{path}: a prototype file holds a list with exactly one op object")
    (obj,) = data
    _require(path, obj, ("op", "input_desc", "output_desc"), "op")
    torch_side = obj.get("torch", {})
    if "name" not in torch_side:
        raise ProtoError(f"{path}: missing torch.name (the op's name in torch.ops.custom)")
    inputs = tuple(_parse_tensor(path, e, "input") for e in obj["input_desc"])
    outputs = tuple(_parse_tensor(path, e, "output") for e in obj["output_desc"])
    attrs = tuple(_parse_attr(path, e) for e in obj.get("attr", []))
    if not inputs or not outputs:
        raise ProtoError(f"{path}: an op needs at least one input and one output")
    # Index i of every type list is one supported combination; the torch ops take
    # one dtype for all tensors of a call, so a combination may not mix dtypes.
    tensors = inputs + outputs
    n_combos = len(inputs[0].dtypes)
    for t in tensors:
        if len(t.dtypes) != n_combos:
            raise ProtoError(f"{path}: {t.name}: every 'type' list must have {n_combos} entries")
    for i in range(n_combos):
        if len({t.dtypes[i] for t in tensors}) != 1:
            raise ProtoError(f"{path}: dtype combination {i} mixes dtypes {[t.dtypes[i] for t in tensors]}")
    names = [t.name for t in inputs] + [a.name for a in attrs]
    if len(set(names)) != len(names) or len({o.name for o in outputs}) != len(outputs):
        raise ProtoError(f"{path}: input, attr and output names must be unique, got {names}")
    # Names become Python parameters (the derived op_extension.ops function, the fake kernel),
    # the op's a Python function.
    for name in names + [o.name for o in outputs] + [torch_side["name"]]:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ProtoError(f"{path}: {name!r} is not a valid name (the op's and its arguments' names become "
                             "Python names: an identifier, not a keyword)")
    doc = torch_side.get("doc")
    if doc is not None and (not isinstance(doc, str) or not doc.strip()):
        raise ProtoError(f"{path}: torch.doc must be a non-empty string "
                         f"(the docstring of op_extension.ops.{torch_side['name']})")
    order = tuple(torch_side.get("arg_order", names))
    if sorted(order) != sorted(names):
        raise ProtoError(f"{path}: torch.arg_order {list(order)} must list every input and attr {names}")
    for o in outputs:
        _check_shape_rule(path, o, inputs, attrs)
    return OpProto(
        op_type=obj["op"],
        name=torch_side["name"],
        inputs=inputs,
        attrs=attrs,
        outputs=outputs,
        arg_order=order,
        backward=torch_side.get("backward"),
        backward_of=torch_side.get("backward_of"),
        path=Path(path),
        doc=doc,
    )


def proto_dir() -> Path:
    """op_protos/ of the source tree (editable installs), else the copy in the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "op_protos", here / "op_protos"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("op_protos/ not found next to the op_extension package")


_LOADED: dict[str, OpProto] | None = None


def load_protos(directory: Path | None = None) -> dict[str, OpProto]:
    """Every prototype of `directory` (default: the package's op_protos/, read
    once per process and shared: do not modify the dict), by op name."""
    global _LOADED
    if directory is None:
        if _LOADED is None:
            _LOADED = _load(proto_dir())
        return _LOADED
    return _load(Path(directory))


def _load(directory: Path) -> dict[str, OpProto]:
    protos = {}
    for path in sorted(directory.glob("*.json")):
        proto = parse_proto(path)
        if proto.name in protos:
            raise ProtoError(f"{path}: op {proto.name!r} is described twice")
        protos[proto.name] = proto
    return protos


_CPP_DTYPE = {
    "float16": "at::kHalf",
    "float32": "at::kFloat",
    "bfloat16": "at::kBFloat16",
    "float64": "at::kDouble",
}


def generate_cpp_header(protos: dict[str, OpProto]) -> str:
    """The C++ side of the prototypes: every schema, and each op's dtype list."""
    lines = [
        "// Generated from op_protos/*.json by op_extension/_protos.py at build time.",
        "// Do not edit: change the prototype and rebuild.",
        "#pragma once",
        "#include <array>",
        "#include <c10/core/ScalarType.h>",
        "",
        "namespace op_ext::generated {",
        "",
        "inline constexpr const char* kSchemas[] = {",
    ]
    lines += [f'    "{p.schema()}",' for p in protos.values()]
    lines += ["};", ""]
    for p in protos.values():
        dtypes = ", ".join(_CPP_DTYPE[d] for d in p.dtypes)
        lines.append(
            f"inline constexpr std::array<c10::ScalarType, {len(p.dtypes)}> k{_camel(p.name)}Dtypes = {{{dtypes}}};"
        )
    lines += ["", "}  // namespace op_ext::generated", ""]
    return "\n".join(lines)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


if __name__ == "__main__":
    for proto in load_protos().values():
        print(proto.schema())
