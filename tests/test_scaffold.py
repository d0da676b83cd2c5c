"""python -m op_extension.scaffold: every file a new op needs, from its prototype.

A demo prototype (an op with a required and an optional input, a float and a
list attribute, and a backward) is scaffolded into a temporary tree; the files
must be exactly the planned ones, parse or compile as generated (the CPU kernel
with torch's headers, the CUDA file under the CPU harness, the Ascend C kernel,
tiling and aclnn entries under the simulator), and never overwrite anything.
Its tests/op_cases/<name>.py has every entry the shared tests require, each
failing them with "not written yet: fill in tests/op_cases/<name>.py".
On the Python side, the scaffolded files alone (no shared file edited) give the
op its fake kernels, its functional function and its reference placeholders,
through the package's own collectors.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from torch.utils.cpp_extension import include_paths

import op_cases
from op_extension import _fake, _protos, _reference, ops, scaffold, toolkit

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "op_extension" / "csrc"

DEMO = [{
    "op": "ScaleShift",
    "input_desc": [
        {"name": "input", "param_type": "required", "format": ["ND", "ND"], "type": ["float", "bfloat16"]},
        {"name": "shift", "param_type": "optional", "format": ["ND", "ND"], "type": ["float", "bfloat16"]},
    ],
    "output_desc": [
        {"name": "output", "param_type": "required", "format": ["ND", "ND"], "type": ["float", "bfloat16"],
         "shape": "input"},
    ],
    "attr": [
        {"name": "dims", "param_type": "required", "type": "listInt"},
        {"name": "scale", "param_type": "optional", "type": "float", "default_value": 1.0},
    ],
    "torch": {"name": "scale_shift", "arg_order": ["input", "dims", "shift", "scale"],
              "backward": "scale_shift_backward"},
}]

EXPECTED = {
    "op_protos/scale_shift_backward.json",
    "op_extension/csrc/kernel/cpu/scale_shift.h",
    "op_extension/csrc/kernel/cpu/scale_shift.cpp",
    "op_extension/csrc/kernel/cuda/scale_shift.cuh",
    "op_extension/csrc/kernel/cuda/scale_shift.cu",
    "op_extension/csrc/torch_ext/ops/scale_shift.h",
    "op_extension/csrc/torch_ext/npu/ops/scale_shift.cpp",
    # msopgen's names: <op>_custom, and <op>_grad_custom for the backward op
    *(f"op_extension/csrc/{f}" for stem in ("scale_shift_custom", "scale_shift_grad_custom") for f in (
        f"kernel/ascendc/{stem}.cpp", f"host/tiling/{stem}_tiling.h",
        f"host/tiling/{stem}_tiling.cpp", f"host/aclnn/aclnn_{stem}.cpp")),
    "op_extension/op_defs/scale_shift.py",
    "tests/test_scale_shift.py",
    "tests/op_cases/scale_shift.py",
}


def run_scaffold(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "op_extension.scaffold", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    (root / "op_protos").mkdir()
    (root / "op_protos" / "scale_shift.json").write_text(json.dumps(DEMO, indent=2))
    done = run_scaffold(root / "op_protos" / "scale_shift.json", "--root", root)
    assert done.returncode == 0, done.stderr
    return root


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_writes_exactly_the_planned_files(tree):
    assert files_under(tree) == EXPECTED | {"op_protos/scale_shift.json"}


def test_refuses_to_overwrite_and_writes_nothing(tree):
    before = {f: (tree / f).read_text() for f in files_under(tree)}
    (tree / "tests" / "test_scale_shift.py").write_text("# the author's work\n")
    done = run_scaffold(tree / "op_protos" / "scale_shift.json", "--root", tree)
    assert done.returncode == 2
    assert "refusing to overwrite existing files (nothing written)" in done.stderr
    assert "tests/test_scale_shift.py" in done.stderr
    assert (tree / "tests" / "test_scale_shift.py").read_text() == "# the author's work\n"
    (tree / "tests" / "test_scale_shift.py").write_text(before["tests/test_scale_shift.py"])
    assert {f: (tree / f).read_text() for f in files_under(tree)} == before


def test_dry_run_writes_nothing(tmp_path):
    (tmp_path / "op_protos").mkdir()
    (tmp_path / "op_protos" / "scale_shift.json").write_text(json.dumps(DEMO))
    done = run_scaffold(tmp_path / "op_protos" / "scale_shift.json", "--root", tmp_path, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert files_under(tmp_path) == {"op_protos/scale_shift.json"}
    listed = {Path(line.split(" ", 2)[2]).relative_to(tmp_path).as_posix() for line in done.stdout.splitlines()}
    assert listed == EXPECTED


def test_a_backward_prototype_is_refused_as_the_starting_point(tree):
    done = run_scaffold(tree / "op_protos" / "scale_shift_backward.json", "--root", tree / "elsewhere")
    assert done.returncode == 2 and "is a backward op; scaffold its forward op (scale_shift)" in done.stderr


def test_backward_prototype_parses_with_the_forward(tree):
    protos = _protos.load_protos(tree / "op_protos")
    back = protos["scale_shift_backward"]
    assert back.backward_of == "scale_shift"
    assert back.schema() == ("scale_shift_backward(Tensor grad_output, Tensor input, SymInt[] dims, Tensor? shift=None, "
                             "float scale=1.0) -> (Tensor grad_input, Tensor grad_shift)")


def test_generated_test_collects_and_names_what_to_write(tree):
    text = (tree / "tests" / "test_scale_shift.py").read_text()
    compile(text, "test_scale_shift.py", "exec")
    assert "The reference is ref_scale_shift in op_extension/op_defs/scale_shift.py" in text
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(tree / "tests" / "test_scale_shift.py")], capture_output=True, text=True,
                          cwd=tree, timeout=120)
    assert "2 tests collected" in done.stdout, done.stdout + done.stderr


def test_bodies_say_which_file_to_fill_in(tree):
    for rel, phrase in [
        ("op_extension/csrc/kernel/cpu/scale_shift.cpp",
         "scale_shift: the CPU kernel is not implemented yet: fill in op_extension/csrc/kernel/cpu/scale_shift.cpp"),
        ("op_extension/csrc/kernel/cuda/scale_shift.cu",
         "scale_shift_backward: the CUDA kernel is not implemented yet: fill in "
         "op_extension/csrc/kernel/cuda/scale_shift.cu"),
        ("op_extension/csrc/host/tiling/scale_shift_custom_tiling.cpp",
         "ScaleShiftCustom: the tiling is not implemented yet"),
        ("op_extension/csrc/host/aclnn/aclnn_scale_shift_grad_custom.cpp",
         "ScaleShiftGradCustom: not implemented yet: fill in"),
        ("op_extension/op_defs/scale_shift.py",
         "scale_shift_backward: the reference is not implemented yet: fill in op_extension/op_defs/scale_shift.py"),
    ]:
        assert phrase in (tree / rel).read_text(), rel


# ---- the shared tests' data: tests/op_cases/<name>.py ------------------------------------------

NOT_WRITTEN = r"^scale_shift: .+ not written yet: fill in tests/op_cases/scale_shift\.py$"


def _generated_op_cases(tree: Path):
    spec = importlib.util.spec_from_file_location("op_cases.scale_shift", tree / "tests/op_cases/scale_shift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_op_cases_has_every_required_entry_each_naming_the_file(tree):
    mod = _generated_op_cases(tree)
    for name in op_cases.REQUIRED_FORWARD:
        assert hasattr(mod, name), name
    for name in op_cases.REQUIRED_BACKWARD:
        assert hasattr(mod, ("BACKWARD_" if name.isupper() else "backward_") + name), name
    x = lambda *shape, positive=False: torch.zeros(shape)  # noqa: E731
    uses = {
        "schema_args": lambda: mod.schema_args(x),
        "backward_schema_args": lambda: mod.backward_schema_args(x),
        "SAMPLES": lambda: mod.SAMPLES[0].build(op_cases.Maker()),
        "CALLS": lambda: mod.CALLS[0].make(5),
        "f_scale_shift": lambda: mod.CALLS[0].fn(torch.zeros(2), torch.zeros(2)),
        "BACKWARD_FAKE": lambda: mod.BACKWARD_FAKE["not_written"].make(torch.float32),
        "BAD": lambda: mod.BAD["not_written"].call(x),
        "BACKWARD_BAD": lambda: mod.BACKWARD_BAD["not_written"].call(x),
        "GRADCHECK": lambda: mod.GRADCHECK["not_written"](op_cases.Maker()),
        "fuzz_case": lambda: mod.fuzz_case(None),
        "fuzz_model": lambda: mod.fuzz_model(None, (), ()),
        "backward_fuzz_case": lambda: mod.backward_fuzz_case(None),
        "backward_fuzz_model": lambda: mod.backward_fuzz_model(None, (), ()),
        "DISTRIBUTED": lambda: mod.DISTRIBUTED[0].make(None),
        "BACKWARD_DISTRIBUTED": lambda: mod.BACKWARD_DISTRIBUTED[0].make(None),
    }
    for name, use in uses.items():
        with pytest.raises(op_cases.NotWritten, match=NOT_WRITTEN.replace(".+", re.escape(name) + ".*")):
            use()
    assert mod.CALLS[0].fn.__name__ == "f_scale_shift"  # test_compile.py names its case by it


PLUGIN = '''
import importlib.util, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import op_cases
from op_extension._protos import load_protos

TREE = Path({tree!r})
op_cases.PROTOS.update(load_protos(TREE / "op_protos"))
op_cases.FORWARD_OPS += ("scale_shift",)
op_cases.BACKWARD_OPS += ("scale_shift_backward",)
op_cases.ALL_OPS += ("scale_shift", "scale_shift_backward")
spec = importlib.util.spec_from_file_location("op_cases.scale_shift", TREE / "tests/op_cases/scale_shift.py")
module = importlib.util.module_from_spec(spec)
sys.modules["op_cases.scale_shift"] = module
spec.loader.exec_module(module)
_path_of = op_cases.path_of
op_cases.path_of = lambda op: TREE / "tests/op_cases/scale_shift.py" if op.startswith("scale_shift") else _path_of(op)
'''


def test_shared_tests_fail_until_the_op_cases_are_written(tree, tmp_path):
    """The scaffolded op in op_protos/: the shared tests collect as before, and each
    test of it fails saying which file to fill in."""
    (tmp_path / "scaffolded_op_plugin.py").write_text(PLUGIN.format(tests=str(ROOT / "tests"), tree=str(tree)))
    tests = [str(ROOT / "tests" / f) for f in ("test_bad_input.py", "test_ops.py", "test_compile.py", "test_npu_glue.py",
                                               "test_fuzz.py")]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "scaffolded_op_plugin",
         # (but the check that its npu glue file defines its functions, which the
         # scaffold wrote: it passes as generated)
         "-k", "scale_shift and not npu_function", *tests],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "1000"},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-5000:]
    summary = out.strip().splitlines()[-1]
    assert " failed" in summary and "error" not in summary and " passed" not in summary, summary
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    for test in ("test_bad_input[scale_shift-not_written-cpu]", "test_unsupported_dtype[scale_shift_backward-torch.int32-cpu]",
                 "test_opcheck[cpu-scale_shift-not_written-grad]", "test_compiled_fwd_bwd_matches_eager[cpu-scale_shift]",
                 "test_opcheck[cpu-scale_shift_backward_not_written]", "test_gradcheck[cpu-scale_shift_not_written]",
                 "test_backward_goes_through_the_dispatcher[scale_shift]", "test_forward[scale_shift-cpu-default]",
                 "test_backward[scale_shift-ascend-Ascend310P]"):
        assert any(f"::{test} " in line for line in failed), (test, failed)
    # test_autograd_kernel_covers_npu reads the dispatcher, not op_cases: it fails
    # because this op was never built (its kernels are in `tree` only).
    data_tests = [line for line in failed if "test_autograd_kernel_covers_npu[" not in line]
    assert all("not written yet: fill in tests/op_cases/scale_shift.py" in line for line in data_tests), [
        line for line in data_tests if "not written yet" not in line]


# ---- the C++ compiles as generated ----------------------------------------------------------


def syntax_check(source: str, include_dirs: list[Path], defines: list[str], tmp_path: Path, suffix=".cpp"):
    if shutil.which("g++") is None:
        pytest.fail("g++ is needed to check the generated C++")
    wrapper = tmp_path / f"check{suffix}"
    wrapper.write_text(source)
    cmd = ["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Werror=return-type", *(f"-D{d}" for d in defines),
           *(f"-I{p}" for p in include_dirs), *(f"-I{p}" for p in include_paths()), str(wrapper)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


def test_cpu_kernel_compiles(tree, tmp_path):
    # As setup.py's baseline wrapper builds it (the ISA builds add target flags only).
    kernel = tree / "op_extension/csrc/kernel/cpu/scale_shift.cpp"
    syntax_check(f'#define CPU_CAPABILITY DEFAULT\n#define CPU_CAPABILITY_DEFAULT\n#include "{kernel}"\n',
                 [CSRC / "kernel/cpu"], [], tmp_path)


def test_cuda_file_compiles_under_the_cpu_harness(tree, tmp_path):
    cu = tree / "op_extension/csrc/kernel/cuda/scale_shift.cu"
    # The generated file includes "cuda_common.cuh" from its own folder, as the
    # repository's kernels do: compile it from there.
    for name in ("cuda_common.cuh", "cuda_kernels.h", "row_common.cuh"):
        shutil.copy(CSRC / "kernel/cuda" / name, cu.parent / name)
    (tree / "op_extension/csrc/kernel/cpu/cpu_kernels.h").write_text((CSRC / "kernel/cpu/cpu_kernels.h").read_text())
    syntax_check(f'#include "{cu}"\n', [CSRC / "cuda_sim/include"], ["OP_EXT_CUDA_SIM=1"], tmp_path)


def test_ascend_files_compile_under_the_simulator(tree, tmp_path):
    """The scaffolded kernel, tiling and aclnn plan, and the aclnn entry points the
    build generates around the plan (_cpp_gen.write_aclnn), compile."""
    from op_extension import _cpp_gen

    generated = tmp_path / "generated"
    _cpp_gen.write_aclnn(_protos.load_protos(tree / "op_protos"), tree / "op_extension/csrc", generated,
                         lambda path, text: path.parent.mkdir(parents=True, exist_ok=True) or path.write_text(text))
    header = (generated / "aclnn_scale_shift_custom.h").read_text()
    assert header.startswith("// Generated from op_protos/scale_shift.json by op_extension/_cpp_gen.py")
    assert ("aclnnStatus aclnnScaleShiftCustomGetWorkspaceSize(\n    const aclTensor* input,\n"
            "    const aclTensor* shiftOptional,\n    const aclIntArray* dims,\n    double scale,\n"
            "    const aclTensor* out,\n    uint64_t* workspaceSize, aclOpExecutor** executor);") in header
    entries = (generated / _cpp_gen.ACLNN_ENTRIES).read_text()
    assert 'if ((shiftOptional == nullptr) != (gradShiftOut == nullptr)) {' in entries
    assert "return PlanScaleShiftGradCustom(args);" in entries
    folders = [tree / "op_extension/csrc" / d for d in ("host/aclnn", "host/tiling", "kernel/ascendc")]
    includes = folders + [generated] + [CSRC / d for d in ("ascendc_sim/include", "host/aclnn", "host/tiling",
                                                           "kernel/ascendc")]
    for stem in ("scale_shift_custom", "scale_shift_grad_custom"):
        for rel in (f"kernel/ascendc/{stem}.cpp", f"host/tiling/{stem}_tiling.cpp",
                    f"host/aclnn/aclnn_{stem}.cpp"):
            syntax_check(f'#include "{tree / "op_extension/csrc" / rel}"\n', includes, ["OP_EXT_ASCEND_SIM=1"],
                         tmp_path)
    syntax_check(f'#include "{generated / _cpp_gen.ACLNN_ENTRIES}"\n', includes, ["OP_EXT_ASCEND_SIM=1"], tmp_path)


def test_the_op_is_registered_and_differentiable_without_a_shared_file_edit(tree, tmp_path):
    """The repository's C++ plus the scaffolded files, with nothing else edited:
    the build's generated registration (every op's glue under a device key),
    typed handles, derived autograd and eager fast path compile with the new op
    in them."""
    from op_extension import _cpp_gen

    csrc = tmp_path / "csrc"
    shutil.copytree(CSRC, csrc, ignore=shutil.ignore_patterns("*.o", "*.so"))
    protos_dir = tmp_path / "op_protos"
    shutil.copytree(ROOT / "op_protos", protos_dir)
    shutil.copy(tree / "op_protos/scale_shift.json", protos_dir)
    for rel in EXPECTED:  # the scaffold's files, as it wrote them
        source, target = tree / rel, tmp_path / rel.replace("op_extension/csrc", "csrc")
        if rel.startswith("tests/"):
            continue
        assert not target.exists(), f"the scaffold's {rel} exists in the repository"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    protos = _protos.load_protos(protos_dir)
    assert {"scale_shift", "scale_shift_backward"} <= set(protos)
    generated = tmp_path / "generated"
    generated.mkdir()
    (generated / "op_ext_schemas.h").write_text(_protos.generate_cpp_header(protos))
    _cpp_gen.write_all(protos, csrc, generated, lambda path, text: path.write_text(text))
    glue = (generated / "op_ext_glue.h").read_text()
    assert 'm.impl("scale_shift", &glue::scale_shift<Kernels>);' in glue
    assert 'm.impl("scale_shift_backward", &glue::scale_shift_backward<Kernels>);' in glue
    autograd = (generated / "op_ext_autograd.cpp").read_text()
    assert "class ScaleShiftFunction" in autograd and 'm.impl("scale_shift", &scale_shift_autograd);' in autograd
    assert "scale_shift_op()" in (generated / "op_ext_handles.h").read_text()
    fast_path = (generated / "op_ext_fast_path.h").read_text()
    assert "PyObject* fast_scale_shift(PyObject*, PyObject* const* args, Py_ssize_t nargs) {" in fast_path
    assert "if (mixed_dtypes(input, shift)) Py_RETURN_NOTIMPLEMENTED;" in fast_path
    assert '{"scale_shift", fastcall(fast_scale_shift), METH_FASTCALL, "scale_shift(input, dims, shift, scale)"},' in fast_path
    assert "fast_scale_shift_backward" not in fast_path  # backward ops are called by autograd only
    includes = [generated, csrc / "torch_ext"]
    syntax_check('#include "op_ext_glue.h"\n'
                 "struct AnyKernels {\n"
                 "  explicit AnyKernels(const at::Tensor&) {}\n"
                 "  template <typename Kernel>\n"
                 "  void operator()(const Kernel& k, op_ext::cpu::DType d, const typename Kernel::ArgsType& a) const { k(d, a); }\n"
                 "};\n"
                 "TORCH_LIBRARY_IMPL(custom, CPU, m) { op_ext::glue::register_ops<AnyKernels>(m); }\n",
                 includes, [], tmp_path)
    syntax_check((generated / "op_ext_autograd.cpp").read_text(), includes, [], tmp_path)
    # The module _C with the generated fast path (the scaffolded op's included).
    syntax_check(f'#include "{csrc / "torch_ext" / "python_module.cpp"}"\n',
                 includes + [Path(sysconfig.get_paths()["include"])], [], tmp_path)

    # The Ascend simulator's binding: an entry per op, calling its aclnn entry in
    # CANN's order (inputs, attributes, outputs), compiled with the module.
    sim_ops = (generated / "op_ext_ascend_sim_ops.h").read_text()
    assert 'm.def("scale_shift", &sim_scale_shift' in sim_ops
    assert ("aclnnScaleShiftGradCustomGetWorkspaceSize(acl_grad_output.get(), acl_input.get(), acl_shift.get(), "
            "acl_dims.get(), scale, acl_grad_input.get(), acl_grad_shift.get(), workspace_size, executor)") in sim_ops
    syntax_check(f'#include "{csrc / "ascendc_sim/binding/ascend_sim_module.cpp"}"\n',
                 [generated, Path(sysconfig.get_paths()["include"])]
                 + [csrc / d for d in ("ascendc_sim/include", "host/aclnn", "host/tiling", "kernel/ascendc")],
                 ["OP_EXT_ASCEND_SIM=1", "TORCH_EXTENSION_NAME=_ascend_sim"], tmp_path)
    # The npu registration: the scaffolded npu glue defines what it declares (that
    # file compiles against torch_npu's headers: tests/test_npu_glue.py).
    registration = (generated / _cpp_gen.NPU_REGISTRATION).read_text()
    assert 'm.impl("scale_shift_backward", &scale_shift_backward_npu);' in registration
    npu_glue = (csrc / "torch_ext/npu/ops/scale_shift.cpp").read_text()
    for declared in re.findall(r"^(.* scale_shift(?:_backward)?_npu\(.*\));$", registration, re.M):
        definition = declared.replace("at::", "")
        assert definition + " {" in npu_glue, definition


def test_the_fast_path_generator_names_a_type_it_cannot_unpack(tmp_path):
    """An argument of a schema type the eager fast path has no unpacking for
    (here int?, an optional int attr without a default) fails the generation,
    naming the prototype, op, argument and type; the fast path unpacks every
    type a device kernel can take (GLUE_PARAM)."""
    from op_extension import _cpp_gen

    demo = json.loads(json.dumps(DEMO))
    demo[0]["attr"].append({"name": "groups", "param_type": "optional", "type": "int", "default_value": None})
    demo[0]["torch"]["arg_order"].append("groups")
    (tmp_path / "scale_shift.json").write_text(json.dumps(demo))
    proto = _protos.parse_proto(tmp_path / "scale_shift.json")
    with pytest.raises(_cpp_gen.FastPathError, match=r"^scale_shift.json: scale_shift: argument groups has schema "
                                                      r"type 'int\?', which the eager fast path cannot unpack"):
        _cpp_gen.generate_fast_path({"scale_shift": proto})
    assert set(_cpp_gen.FAST_ARG) == set(_cpp_gen.GLUE_PARAM)


def test_the_scaffold_module_plans_without_writing(tmp_path):
    (tmp_path / "scale_shift.json").write_text(json.dumps(DEMO))
    planned = scaffold.plan(tmp_path / "scale_shift.json")
    assert {f.path.as_posix() for f in planned} == EXPECTED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale_shift.json"]


# ---- the Python side: only new files --------------------------------------------------------

NAMESPACE = "scaffold_demo"  # the demo op is not built: its schemas are defined here, under this namespace


def _op_module(tree: Path):
    path = tree / "op_extension/op_defs/scale_shift.py"
    spec = importlib.util.spec_from_file_location("scaffold_demo_op_defs_scale_shift", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo(tree):
    """The scaffolded prototypes and op module, as the package's collectors see
    them: the schemas defined (what the build derives from the prototypes), a
    CPU kernel standing in for the C++ one, and the fake kernels registered by
    _fake.register, the collector op_extension/__init__.py runs for op_protos/."""
    protos = _protos.load_protos(tree / "op_protos")
    module = _op_module(tree)

    def find(name):
        return module if name == "scale_shift" else None

    lib = torch.library.Library(NAMESPACE, "DEF")
    for proto in protos.values():
        lib.define(proto.schema())
    lib.impl("scale_shift", lambda input, dims, shift=None, scale=1.0: input * scale + (0 if shift is None else shift),
             "CPU")
    _fake.register(protos, namespace=NAMESPACE, find=find, lib=lib)
    yield protos, find
    lib._destroy()


def test_scaffolded_op_module_holds_only_the_references_and_sharding_rules(tree):
    module = _op_module(tree)
    pieces = {name for name in vars(module) if name.isupper()}
    assert pieces == {"REFERENCES", "SHARDING"}
    assert set(module.REFERENCES) == set(module.SHARDING) == {"scale_shift", "scale_shift_backward"}
    # A rule DTensor would run says what to write, never a strategy that could be wrong.
    with pytest.raises(NotImplementedError, match="scale_shift_backward: the DTensor sharding rule is not implemented "
                                                  "yet: fill in op_extension/op_defs/scale_shift.py"):
        module.SHARDING["scale_shift_backward"](None, None, None)
    assert not hasattr(module, "scale_shift"), "the functional function is derived, not generated"
    assert module.toolkit is toolkit  # what op modules import of the package (tests/test_import_graph.py)


def test_scaffolded_op_gets_derived_fake_kernels(demo):
    op = getattr(torch.ops, NAMESPACE)
    x = torch.empty(4, 8, device="meta")
    out = op.scale_shift(x, [8])
    assert (out.shape, out.dtype, out.device.type) == ((4, 8), torch.float32, "meta")
    with pytest.raises(TypeError, match=r"custom::scale_shift: input has dtype float16, which is not supported; "
                                        r"supported dtypes: float32, bfloat16"):
        op.scale_shift(x.half(), [8])
    with pytest.raises(TypeError, match=r"custom::scale_shift: shift has dtype bfloat16 but input has dtype "
                                        r"float32; all tensors must have the same dtype"):
        op.scale_shift(x, [8], x.bfloat16())
    # The backward: one gradient per input, shaped by its rule; an absent shift gives an empty placeholder.
    grad_input, grad_shift = op.scale_shift_backward(x, x, [8], None)
    assert grad_input.shape == (4, 8) and grad_shift.shape == (0,)
    grad_input, grad_shift = op.scale_shift_backward(x, x, [8], torch.empty(8, device="meta"), 2.0)
    assert grad_shift.shape == (8,)
    # Fake tensors (torch.compile, export) take the same kernel.
    with torch._subclasses.FakeTensorMode():
        assert op.scale_shift(torch.empty(3, 5), [5]).shape == (3, 5)


def test_scaffolded_op_gets_a_derived_function(demo):
    protos, find = demo
    function = ops.function_of(protos["scale_shift"], protos, namespace=NAMESPACE, find=find)
    assert function.__name__ == "scale_shift" and function.__module__ == "op_extension.ops"
    assert str(inspect.signature(function)) == "(input, dims, shift=None, scale=1.0)"
    assert "scale_shift(Tensor input, SymInt[] dims, Tensor? shift=None, float scale=1.0) -> Tensor" in function.__doc__
    x, shift = torch.randn(4, 8), torch.randn(4, 8)
    torch.testing.assert_close(function(x, [8], shift, 2.0), x * 2.0 + shift)
    torch.testing.assert_close(function(x, [8]), x)  # the prototype's defaults
    assert function(torch.empty(2, 8, device="meta"), dims=[8]).shape == (2, 8)
    documented = dataclasses.replace(protos["scale_shift"], doc="input * scale + shift.")
    assert ops.derived_function(documented, NAMESPACE).__doc__.startswith("input * scale + shift.\n\nCalls ")


def test_scaffolded_op_says_where_its_references_go(demo):
    protos, find = demo
    references = _reference.references(protos, find)
    assert set(references) == {"scale_shift", "scale_shift_backward"}
    with pytest.raises(NotImplementedError, match="scale_shift_backward: the reference is not implemented yet: "
                                                  "fill in op_extension/op_defs/scale_shift.py"):
        references["scale_shift_backward"](torch.ones(2), torch.ones(2), [2], dtype=torch.float32)
    assert _reference.tolerances(protos, find) == {}
    # Without the op module at all, the default says the same.
    default = _reference.references(protos, lambda name: None)["scale_shift"]
    with pytest.raises(NotImplementedError, match=r"fill in REFERENCES\['scale_shift'\] in op_extension/op_defs/"
                                                  r"scale_shift.py"):
        default(torch.ones(2), [2], dtype=torch.float32)


SHARED_PYTHON = ["__init__.py", "_fake.py", "_reference.py", "_transforms.py", "ops.py", "debug.py", "cuda_sim.py",
                 "ascend_sim.py", "_sim_args.py", "op_defs/__init__.py", "toolkit.py", "bench_spec.py",
                 *sorted(p.relative_to(ROOT / "op_extension").as_posix()
                         for p in (ROOT / "op_extension" / "bench").glob("*.py"))]


@pytest.mark.parametrize("name", SHARED_PYTHON)
def test_shared_python_files_name_no_op(name):
    """The shared modules iterate over the prototypes: none lists an op by name
    (a string constant outside docstrings), which adding an op would have to edit."""
    ops_ = set(_protos.load_protos())
    tree = ast.parse((ROOT / "op_extension" / name).read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and ast.get_docstring(node, clean=False) is not None}
    named = sorted({(n.lineno, n.value) for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and n.value in ops_ and id(n) not in docstrings})
    assert not named, f"op_extension/{name} names ops: {named}"


# ---- the worked example: rotary_embedding lives in its own files ----------------------------

# rotary_embedding's own files that the scaffold does not write: helpers its forward
# and backward kernels share, its hand-written autograd (with the schema and
# composite of rotary_embedding_table_backward, its cos/sin gradients, which has no
# prototype), that op's CUDA registration and harness entry, and its probe of the
# CUDA launchers on the harness.
ROPE_OWN_EXTRAS = {
    "op_extension/csrc/kernel/ascendc/rotary_embedding_common.h",
    "op_extension/csrc/host/tiling/rope_tiling.h",
    "op_extension/csrc/host/aclnn/aclnn_rope_common.h",
    "op_extension/csrc/torch_ext/autograd/rotary_embedding.cpp",
    "op_extension/csrc/cuda_sim/probes/rotary_embedding.cpp",
    "op_extension/csrc/torch_ext/cuda/rotary_embedding_table.cpp",
    "op_extension/csrc/cuda_sim/probes/rotary_embedding_table.cpp",
}
# Shared code that uses the op, as any user of the package could: the Hugging Face
# patch (the families whose attention applies it) and the benchmark's model
# sections, which time patched models (its rows come from the op's own BENCH).
ROPE_USERS = {"op_extension/transformers.py", "op_extension/bench/model.py"}
# Written by a tool from the built kernels, not by hand: a new op's kernels enter
# it when `bash scripts/check_cuda_compile.sh --write-resources` runs again.
GENERATED_FROM_THE_KERNELS = {"op_extension/csrc/kernel/cuda/kernel_resources.json"}


def test_rotary_embedding_lives_in_the_files_the_scaffold_wrote():
    """README's worked example: rotary_embedding was added from its prototype. Every
    file the scaffold plans for it exists (filled in), and outside those, its few
    own helpers and the code that uses it, no file of the package, the build or
    the scripts names it: a list the op would have had to be added to."""
    planned = {f.path.as_posix() for f in scaffold.plan(ROOT / "op_protos" / "rotary_embedding.json")}
    assert not {p for p in planned if not (ROOT / p).exists()}
    tracked = subprocess.run(["git", "ls-files", "op_extension", "op_protos", "setup.py", "scripts", "cmake", ".ci",
                              "Makefile", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    pattern = re.compile(r"rotary_embedding|RotaryEmbedding|\brope_|_rope\b", re.IGNORECASE)
    naming = {path for path in tracked.stdout.split()
              if (ROOT / path).is_file() and pattern.search((ROOT / path).read_text(errors="replace"))}
    prototypes = {"op_protos/rotary_embedding.json", "op_protos/rotary_embedding_backward.json"}
    assert naming - planned - prototypes - ROPE_OWN_EXTRAS - ROPE_USERS - GENERATED_FROM_THE_KERNELS == set()


def test_the_aclnn_entries_are_generated_around_hand_written_plans(tmp_path):
    """Every op's aclnn header and both aclnn phases come from its prototype
    (_cpp_gen.write_aclnn); csrc/host/aclnn holds per op only its plan, and an op
    without one fails the generation naming the file and the scaffold."""
    from op_extension import _cpp_gen

    protos = _protos.load_protos()
    assert not sorted((CSRC / "host/aclnn").glob("aclnn_*_custom.h")), "aclnn headers are generated, not written"
    written = {}
    _cpp_gen.write_aclnn(protos, CSRC, tmp_path, lambda path, text: written.__setitem__(path.name, text))
    entries = written.pop(_cpp_gen.ACLNN_ENTRIES)
    for p in protos.values():
        stem, op = _cpp_gen.ascend_stem(p), _cpp_gen.aclnn_op(p)
        for name in (f"aclnn_{stem}.h", f"aclnn_{stem}_args.h"):
            assert written[name].startswith(f"// Generated from op_protos/{p.path.name} by op_extension/_cpp_gen.py"), name
        plan = (CSRC / "host/aclnn" / f"aclnn_{stem}.cpp").read_text()
        assert f"LaunchPlan Plan{op}(const {op}Args& args) {{" in plan
        assert 'extern "C"' not in plan and "RunLaunch" not in plan, f"aclnn_{stem}.cpp: the entry points are generated"
        assert f"    return Plan{op}(args);" in entries
        assert f"  return op_ext::aclnn::RunLaunch(op_ext::aclnn::{op}Args::kOp, workspace" in entries
    # The checks the prototypes state, as the messages name the arguments.
    assert 'Invalid(op, "gradWeightOut must be given exactly when weightOptional is");' in entries
    assert 'args.approximate = AllowedValue(op, "approximate", approximate, "none", {"none", "tanh"});' in entries
    assert 'CheckSameShape(op, "output", args.output, "out", args.out);' in entries  # softmax_backward's rule

    csrc = tmp_path / "csrc"
    shutil.copytree(CSRC / "host", csrc / "host", ignore=shutil.ignore_patterns("*.o"))
    (csrc / "host/aclnn/aclnn_gelu_custom.cpp").unlink()
    with pytest.raises(FileNotFoundError, match=r"gelu.json: the op gelu has no aclnn plan .*aclnn_gelu_custom.cpp "
                                                r"\(python -m op_extension.scaffold writes one"):
        _cpp_gen.generate_aclnn_entries(protos, csrc)
