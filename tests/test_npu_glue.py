"""The Ascend NPU path, as far as a machine without torch_npu or CANN can check it:

- the npu glue compiles against the torch_npu wheel's headers and needs only
  symbols libtorch_npu.so exports (scripts/check_npu_glue.sh), and that check
  fails on glue that breaks either, fails loudly without a wheel, and skips
  only when told to;
- every op has a PrivateUse1 (npu) registration, and our autograd kernels
  cover AutogradPrivateUse1 and reach the backward ops through the dispatcher
  (so on npu tensors they run the npu backward kernels);
- setup.py's decision to build for NPU (cmake/ascend/npu_build.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import op_cases
from cache_dirs import op_ext_cache_dir  # tests/ is on sys.path (conftest.py)
from op_cases import FORWARD_OPS
from op_extension import _cpp_gen as cpp_gen
from op_extension._fake import PROTOS
from op_extension._protos import load_protos
from reference import CustomOpCalls

ROOT = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = ROOT / "scripts" / "check_npu_glue.sh"
NPU_GLUE = ROOT / "op_extension" / "csrc" / "torch_ext" / "npu"
spec = importlib.util.spec_from_file_location("_npu_build", ROOT / "cmake" / "ascend" / "npu_build.py")
npu_build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(npu_build)

OP_NAMES = sorted(PROTOS)  # every op and backward op


# ---- the compile check ------------------------------------------------------------

def _torch_version() -> str:
    return torch.__version__.split("+")[0]


def _headers_cached() -> bool:
    marker = op_ext_cache_dir() / "torch_npu" / f"for-torch-{_torch_version()}"
    return marker.is_file() and (marker.parent / marker.read_text().strip() / "include").is_dir()


def _offline_env(**extra: str) -> dict[str, str]:
    """pip with no index and no config: any download fails at once."""
    env = dict(os.environ, PY=sys.executable, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    env.pop("OP_EXT_SKIP_NPU_GLUE_CHECK", None)
    env.update(extra)
    return env


def _run_check(env: dict[str, str], *sources: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CHECK_SCRIPT), *sources], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


needs_cached_headers = pytest.mark.skipif(
    not _headers_cached(),
    reason="torch_npu headers not cached yet: `bash scripts/check_npu_glue.sh` downloads them (CI runs it first)",
)


@needs_cached_headers
def test_npu_glue_compiles_from_cache_without_network():
    """The check runs offline once the headers are cached. On the shared glue and
    one op's: the whole glue and the registration are what the script checks
    without arguments, which CI runs (.ci/run) before the tests; here that would
    take a minute and a half more of the same compiles."""
    sources = [NPU_GLUE / "aclnn_call.cpp", NPU_GLUE / "ops" / "layer_norm.cpp"]
    result = _run_check(_offline_env(), *(str(s) for s in sources))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(cached)" in result.stdout
    for source in sources:
        assert f"{source} compiles" in result.stdout, result.stdout


@needs_cached_headers
def test_compile_check_rejects_glue_that_breaks_the_aclnn_contract(tmp_path):
    # One argument short of aclnnGeluCustomGetWorkspaceSize: the check must see it.
    broken = tmp_path / "broken_glue.cpp"
    broken.write_text(
        f'#include "{(NPU_GLUE / "aclnn_call.h").as_posix()}"\n'
        '#include "aclnn_gelu_custom.h"\n'
        "aclnnStatus call(const aclTensor* x, const aclTensor* out, uint64_t* size, aclOpExecutor** ex) {\n"
        "  return aclnnGeluCustomGetWorkspaceSize(x, out, size, ex);\n"
        "}\n"
    )
    result = _run_check(_offline_env(), str(broken))
    assert result.returncode != 0
    assert "aclnnGeluCustomGetWorkspaceSize" in result.stderr
    assert f"FAILED: {broken} does not compile" in result.stderr


@needs_cached_headers
def test_scaffolded_npu_glue_compiles_with_its_registration(tmp_path):
    """A new op's npu glue, as the scaffold writes it, and the registration the
    build derives with it compile against torch_npu: the glue needs no edit to
    build (its aclnn entries say what to fill in when called)."""
    from test_scaffold import DEMO  # the scaffold tests' demo op

    from op_extension import scaffold

    shutil.copytree(ROOT / "op_protos", tmp_path / "op_protos")
    shutil.copytree(ROOT / "op_extension" / "csrc", tmp_path / "op_extension" / "csrc",
                    ignore=shutil.ignore_patterns("*.o", "*.so"))
    (tmp_path / "op_protos" / "scale_shift.json").write_text(json.dumps(DEMO))
    scaffold.scaffold(tmp_path / "op_protos" / "scale_shift.json", tmp_path)
    glue = tmp_path / "op_extension/csrc/torch_ext/npu/ops/scale_shift.cpp"
    result = _run_check(_offline_env(OP_EXT_SOURCE_ROOT=str(tmp_path)), str(glue))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{glue} compiles" in result.stdout
    generated = tmp_path / "generated"
    subprocess.run([sys.executable, str(ROOT / "op_extension" / "_cpp_gen.py"), str(generated), str(tmp_path)],
                   check=True, timeout=60)
    registration = generated / cpp_gen.NPU_REGISTRATION
    assert 'm.impl("scale_shift", &scale_shift_npu);' in registration.read_text()
    result = _run_check(_offline_env(OP_EXT_SOURCE_ROOT=str(tmp_path)), str(registration))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_cached_headers
def test_compile_check_rejects_torch_npu_internals_that_would_not_link(tmp_path):
    # FormatHelper is declared in torch_npu's headers but not exported by libtorch_npu.so.
    hidden = tmp_path / "hidden_symbol.cpp"
    hidden.write_text(
        "#include <ATen/ATen.h>\n"
        '#include "torch_npu/csrc/framework/FormatHelper.h"\n'
        "bool plain(const at::Tensor& t) { return at_npu::native::FormatHelper::IsBaseFormatType(t); }\n"
    )
    result = _run_check(_offline_env(), str(hidden))
    assert result.returncode != 0
    assert "libtorch_npu.so does not export" in result.stderr
    assert "at_npu::native::FormatHelper::IsBaseFormatType(at::Tensor const&)" in result.stderr


def test_compile_check_fails_loudly_without_a_wheel(tmp_path):
    result = _run_check(_offline_env(OP_EXT_CACHE_DIR=str(tmp_path / "empty_cache")))
    assert result.returncode != 0
    assert "FAILED: no torch_npu wheel" in result.stderr
    assert "OP_EXT_SKIP_NPU_GLUE_CHECK=1" in result.stderr
    assert "compiles" not in result.stdout


def test_compile_check_skips_only_when_told(tmp_path):
    result = _run_check(
        _offline_env(OP_EXT_CACHE_DIR=str(tmp_path / "empty_cache"), OP_EXT_SKIP_NPU_GLUE_CHECK="1")
    )
    assert result.returncode == 0
    assert "SKIPPED" in result.stdout


# ---- registrations ----------------------------------------------------------------

def _privateuse1_registrations() -> set[str]:
    """Op names the generated op_ext_npu_registration.cpp registers in its
    TORCH_LIBRARY_IMPL(custom, PrivateUse1) block."""
    source = cpp_gen.generate_npu_registration(load_protos(), ROOT / "op_extension" / "csrc")
    block = source[source.index("TORCH_LIBRARY_IMPL(custom, PrivateUse1, m)"):]
    return set(re.findall(r'm\.impl\("([a-z_]+)"', block))


def test_every_op_and_backward_op_is_registered_for_npu():
    assert _privateuse1_registrations() == set(OP_NAMES)


@pytest.mark.parametrize("op", OP_NAMES)
def test_every_op_has_its_npu_function_in_its_forward_ops_file(op):
    # The registration declares op_ext::npu::<op>_npu; the forward op's own file
    # defines it (a missing one fails to link in tests/test_npu_sim_device.py).
    proto = load_protos()[op]
    tree = proto.path.parent.parent  # the source tree of the prototype (a scaffold test's too)
    source = (tree / NPU_GLUE.relative_to(ROOT) / "ops" / f"{proto.backward_of or op}.cpp").read_text()
    assert re.search(rf"\b{op}_npu\(", source), f"{op}_npu is not defined in npu/ops/{proto.backward_of or op}.cpp"


def test_a_forward_op_without_its_npu_file_is_a_build_error(tmp_path):
    protos = load_protos()
    csrc = tmp_path / "csrc"
    (csrc / "torch_ext" / "npu" / "ops").mkdir(parents=True)
    for name in ("add", "gelu"):
        (csrc / "torch_ext" / "npu" / "ops" / f"{name}.cpp").write_text("")
    with pytest.raises(FileNotFoundError, match=r"geglu has no npu glue .*npu/ops/geglu.cpp .*scaffold"):
        cpp_gen.generate_npu_registration({n: protos[n] for n in ("add", "gelu", "geglu")}, csrc)


def _dispatch_line(op: str, key: str) -> str:
    table = torch._C._dispatch_dump_table(f"custom::{op}")
    lines = [line for line in table.splitlines() if line.startswith(f"{key}:")]
    assert lines, f"custom::{op} has no kernel for {key}:\n{table}"
    return lines[0]


@pytest.mark.parametrize("op", OP_NAMES)
def test_autograd_kernel_covers_npu(op):
    # The Autograd alias key fills AutogradPrivateUse1 with the same kernel as AutogradCPU.
    npu = _dispatch_line(op, "AutogradPrivateUse1")
    # Registered by the generated autograd (build/generated/op_ext_autograd.cpp) or
    # by an op's hand-written one (csrc/torch_ext/autograd/<op>.cpp).
    assert "op_ext_autograd.cpp" in npu or "torch_ext/autograd/" in npu, npu
    assert npu.split(":", 1)[1] == _dispatch_line(op, "AutogradCPU").split(":", 1)[1]


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_backward_goes_through_the_dispatcher(op):
    """Autograd calls custom::<op>_backward as a dispatcher op, so the device of
    the saved tensors picks its kernel: on npu tensors, the npu registration.
    The op as its first CALLS case (tests/op_cases/<op>.py) calls it."""
    call = op_cases.get(op, "CALLS")[0]
    out = call.fn(*(t.requires_grad_() for t in call.make(4)))
    outs = list(out) if isinstance(out, tuple) else [out]
    with CustomOpCalls() as calls:
        torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
    assert f"{op}_backward" in calls.names


# ---- setup.py's NPU decision -------------------------------------------------------

def _never_imported():
    raise AssertionError("torch_npu must not be imported when a prerequisite is missing")


def _import_fails():
    raise ImportError("libascendcl.so: cannot open shared object file")


@pytest.mark.parametrize(
    "setting, installed, home, importer, expected",
    [
        ("0", True, "dir", lambda: None, False),
        ("auto", True, "dir", lambda: None, True),
        ("auto", False, "dir", _never_imported, False),
        ("auto", True, None, _never_imported, False),
        ("auto", True, "missing", _never_imported, False),
        ("auto", True, "dir", _import_fails, False),
        ("1", True, "dir", lambda: None, True),
        ("1", False, "dir", _never_imported, "torch_npu is not installed"),
        ("1", True, None, _never_imported, "ASCEND_HOME_PATH is not set"),
        ("1", True, "missing", _never_imported, "is not a directory"),
        ("1", True, "dir", _import_fails, "`import torch_npu` failed: libascendcl.so"),
        ("yes", True, "dir", lambda: None, "OP_EXT_WITH_NPU must be auto, 0 or 1"),
    ],
)
def test_npu_build_decision(tmp_path, setting, installed, home, importer, expected):
    env = {"OP_EXT_WITH_NPU": setting}
    if home == "dir":
        env["ASCEND_HOME_PATH"] = str(tmp_path)
    elif home == "missing":
        env["ASCEND_HOME_PATH"] = str(tmp_path / "no_such_cann")
    if isinstance(expected, bool):
        assert npu_build.npu_build_wanted(env, installed, importer) is expected
    else:
        with pytest.raises(SystemExit, match=re.escape(expected)):
            npu_build.npu_build_wanted(env, installed, importer)


def test_npu_build_defaults_to_auto(tmp_path):
    assert npu_build.npu_build_wanted({"ASCEND_HOME_PATH": str(tmp_path)}, True, lambda: None) is True
    assert npu_build.npu_build_wanted({}, True, _never_imported) is False


def test_soc_version_comes_from_env_then_device():
    assert npu_build.soc_version({"OP_EXT_ASCEND_SOC": "Ascend910B4"}, _never_imported) == "Ascend910B4"
    assert npu_build.soc_version({}, lambda: "Ascend910B1\n") == "Ascend910B1"
    with pytest.raises(SystemExit, match="set OP_EXT_ASCEND_SOC"):
        npu_build.soc_version({}, lambda: (_ for _ in ()).throw(RuntimeError("no NPU device")))


def test_cmake_builds_and_installs_the_libraries_setup_py_copies(tmp_path):
    commands = npu_build.cmake_commands("/opt/cann", "Ascend910B4", tmp_path, 2, debug=False)
    configure, build, install = commands
    assert configure[:3] == ["cmake", "-S", str(npu_build.CMAKE_SOURCE_DIR)]
    assert "-DSOC_VERSION=Ascend910B4" in configure and "-DASCEND_CANN_PACKAGE_PATH=/opt/cann" in configure
    assert build[:3] == ["cmake", "--build", str(tmp_path)]
    assert install[-1] == str(tmp_path / "out")
    # The CMake targets installed are the libraries setup.py copies next to _C.
    cmake = (npu_build.CMAKE_SOURCE_DIR / "CMakeLists.txt").read_text()
    installed = re.search(r"install\(TARGETS ([\w ]+) LIBRARY DESTINATION lib\)", cmake).group(1).split()
    assert sorted(f"lib{t}.so" for t in installed) == sorted(npu_build.BUILT_LIBRARIES)
    assert "op_ext_ascend" in npu_build.LINK_LIBRARIES


@pytest.mark.parametrize(
    "setting, message",
    [("1", "OP_EXT_WITH_NPU=1 but torch_npu is not installed"), ("maybe", "OP_EXT_WITH_NPU must be auto, 0 or 1")],
)
def test_setup_py_refuses_an_impossible_npu_build(setting, message):
    # This machine has no torch_npu: setup.py must stop before building anything.
    env = dict(os.environ, OP_EXT_WITH_NPU=setting)
    result = subprocess.run(
        [sys.executable, "setup.py", "--name"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0
    assert message in result.stderr
