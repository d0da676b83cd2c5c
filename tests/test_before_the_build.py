"""A new op between its prototype and the build, as README "Adding an op" has
its author meet it (issue 27).

Each test works in a scratch copy of the package's sources and op_protos/ (with
the built libraries linked in, or without any), changes the prototypes there,
and runs a fresh interpreter in it: the scaffold exactly as README step 2 says,
or `import op_extension` with a prototype the library was not built from.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from op_extension import scaffold

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = sorted((ROOT / "op_extension").glob("*.so"))


def scratch_tree(tmp_path: Path, built: bool) -> Path:
    """op_extension/ and op_protos/ copied under tmp_path; the built libraries
    linked in with `built`, else no library at all."""
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "op_extension", root / "op_extension",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(ROOT / "op_protos", root / "op_protos")
    if built:
        if not LIBRARIES:
            pytest.skip("the package is not built")
        for library in LIBRARIES:
            (root / "op_extension" / library.name).symlink_to(library)
    return root


def renamed(proto: str, name: str, op_type: str) -> list:
    """op_protos/<proto>.json as the prototype of op `name` (its backward renamed alike)."""
    (obj,) = json.loads((ROOT / "op_protos" / f"{proto}.json").read_text())
    obj["op"] = op_type
    obj["torch"]["name"] = name
    for key in ("backward", "backward_of"):
        if key in obj["torch"]:
            obj["torch"][key] = obj["torch"][key].replace(proto.removesuffix("_backward"), name.removesuffix("_backward"))
    return [obj]


def write_proto(root: Path, name: str, content: list) -> None:
    (root / "op_protos" / f"{name}.json").write_text(json.dumps(content, indent=2) + "\n")


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`python <args>` in the scratch tree, as in a clone of its own: it sees the
    installed dependencies but not the installed op_extension (-S: no .pth
    files, so no editable-install finder, which would supply the missing _C
    from the checkout it points at)."""
    paths = dict.fromkeys([str(root), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-S", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


# ---- README step 2: the scaffold, before the op is built --------------------------------------------------------


@pytest.mark.parametrize("built", [True, False], ids=["built-without-the-op", "no-library"])
def test_the_scaffold_runs_as_the_readme_says_before_the_build(tmp_path, built):
    root = scratch_tree(tmp_path, built)
    # Step 1: the prototype (gelu's, renamed).
    write_proto(root, "scale_tanh", renamed("gelu", "scale_tanh", "ScaleTanh"))
    planned = [f.path.as_posix() for f in scaffold.plan(root / "op_protos" / "scale_tanh.json")]
    # Step 2, as written: from the root of the checkout.
    done = run(root, "-m", "op_extension.scaffold", "op_protos/scale_tanh.json")
    assert done.returncode == 0, done.stderr
    assert "op_protos/scale_tanh_backward.json" in planned and "op_extension/op_defs/scale_tanh.py" in planned
    for rel in planned:
        assert (root / rel).is_file(), f"the scaffold did not write {rel}"
        assert f"wrote {root / rel}" in done.stdout


@pytest.mark.parametrize("module", ["scaffold", "_cpp_gen", "_protos"])
def test_the_scaffold_imports_only_the_standard_library_and_the_prototype_readers(module):
    """Whatever the package's __init__ loads, the scaffold's own code depends on
    nothing that needs the build (torch, _C, the collectors)."""
    tree = ast.parse((ROOT / "op_extension" / f"{module}.py").read_text())
    project = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    assert project <= {"_cpp_gen", "_protos"}, project
    others = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    others |= {node.module.split(".")[0] for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and not node.level}
    assert others <= set(sys.stdlib_module_names), others - set(sys.stdlib_module_names)


# ---- import op_extension with a prototype the library lacks ---------------------------------------------------------

# Run in the scratch tree: imports the package, recording its warnings, then the
# test's own checks (`checks`, with op_extension, ops, torch, warned in scope).
CHILD = '''
import sys, warnings
import torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import op_extension
from op_extension import ops
assert op_extension.__file__ == {init!r}, op_extension.__file__
warned = [str(w.message) for w in caught if str(w.message).startswith("op_extension")]
assert len(warned) == 1, warned
warned = warned[0]

def raises(call, *texts, kind=AttributeError):
    try:
        call()
    except kind as e:
        for text in texts:
            assert text in str(e), (text, str(e))
        return str(e)
    raise AssertionError(f"no {{kind.__name__}} from {{call}}")

def registered_fake(op):
    entry = torch._library.simple_registry.singleton.find(f"custom::{{op}}")
    return entry.fake_impl.kernel is not None

def batching_rule(op):
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"custom::{{op}}", "FuncTorchBatched")
'''


def run_child(root: Path, checks: str) -> None:
    script = CHILD.format(init=str(root / "op_extension" / "__init__.py")) + textwrap.dedent(checks)
    done = run(root, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_a_new_prototype_is_left_out_until_the_rebuild(tmp_path):
    """README step 1 (and the scaffold's backward prototype), not yet built: the
    package imports, warns once, and leaves the op out everywhere."""
    root = scratch_tree(tmp_path, built=True)
    write_proto(root, "scale_tanh", renamed("gelu", "scale_tanh", "ScaleTanh"))
    write_proto(root, "scale_tanh_backward", renamed("gelu_backward", "scale_tanh_backward", "ScaleTanhGrad"))
    run_child(root, '''
        for name in ("scale_tanh.json", "scale_tanh_backward.json", "rebuild"):
            assert name in warned, warned
        assert "scale_tanh" not in ops.__all__ and "scale_tanh" not in op_extension.__all__
        assert not {"scale_tanh", "scale_tanh_backward"} & set(op_extension.debug.OPS)
        assert not {"scale_tanh", "scale_tanh_backward"} & set(op_extension._reference.REFERENCES)
        raises(lambda: ops.scale_tanh, "op_extension.ops.scale_tanh", "op_protos/scale_tanh.json",
               "custom::scale_tanh is not in the built library", "rebuild")
        raises(lambda: op_extension.scale_tanh, "op_protos/scale_tanh.json", "rebuild")
        assert not hasattr(ops, "scale_tanh")
        raises(lambda: torch.ops.custom.scale_tanh, "scale_tanh", kind=(AttributeError, RuntimeError))
        raises(lambda: op_extension.no_such_op, "no attribute 'no_such_op'")
        # The other ops, whole.
        x = torch.randn(3, 8)
        torch.testing.assert_close(op_extension.gelu(x), torch.nn.functional.gelu(x))
        assert registered_fake("gelu") and registered_fake("gelu_backward")
        print("ok")
    ''')


def test_a_prototype_whose_schema_changed_is_never_half_registered(tmp_path):
    """gelu's prototype gains an attribute the built gelu lacks: gelu and its
    backward are reported and left out (no fake kernel, no batching rule, no
    reference, no function: their op module is never imported); the rest works."""
    root = scratch_tree(tmp_path, built=True)
    (gelu,) = json.loads((root / "op_protos" / "gelu.json").read_text())
    gelu["attr"].append({"name": "scale", "param_type": "optional", "type": "float", "default_value": 1.0})
    gelu["torch"]["arg_order"].append("scale")
    write_proto(root, "gelu", [gelu])
    run_child(root, '''
        assert "op_protos/gelu.json: the built custom::gelu has the schema" in warned, warned
        assert "float scale=1." in warned and "op_protos/gelu_backward.json: its forward gelu" in warned, warned
        assert "gelu" not in ops.__all__ and "gelu" not in op_extension.__all__
        raises(lambda: ops.gelu, "op_extension.ops.gelu", "op_protos/gelu.json", "rebuild")
        raises(lambda: op_extension.gelu, "op_protos/gelu.json", "rebuild")
        raises(lambda: op_extension.nn.CustomGELU()(torch.randn(4)), "op_protos/gelu.json", "rebuild")
        for op in ("gelu", "gelu_backward"):
            assert not registered_fake(op) and not batching_rule(op), op
            assert op not in op_extension.debug.OPS and op not in op_extension._reference.REFERENCES
        assert "op_extension.op_defs.gelu" not in sys.modules
        # The fast path's torch.func handler of the built gelu refuses too.
        raises(lambda: torch.func.vmap(lambda t: op_extension._C.gelu(t, "none"))(torch.randn(2, 3)),
               "op_protos/gelu.json", "rebuild", kind=RuntimeError)
        # The other ops, whole: geglu (gelu's kernel inside, its own op) included.
        assert registered_fake("geglu") and batching_rule("geglu")
        gate, up = torch.randn(3, 8), torch.randn(3, 8)
        torch.testing.assert_close(op_extension.geglu(gate, up), torch.nn.functional.gelu(gate) * up)
        x, w = torch.randn(3, 8), torch.rand(8)
        torch.testing.assert_close(op_extension.rms_norm(x, (8,), w), torch.nn.functional.rms_norm(x, (8,), w))
        print("ok")
    ''')


def test_without_any_library_the_package_imports_and_says_to_build(tmp_path):
    root = scratch_tree(tmp_path, built=False)
    run_child(root, '''
        assert "op_extension._C could not be loaded" in warned and "rebuild" in warned, warned
        assert ops.__all__ == [] and op_extension.debug.OPS == ()
        raises(lambda: ops.rms_norm, "op_protos/rms_norm.json", "op_extension._C could not be loaded", "rebuild")
        print("ok")
    ''')
