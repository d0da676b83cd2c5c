"""The cache folder rule (tests/cache_dirs.py) and that everything that caches
follows it: the simulated-npu build (tests/npu_sim/sim_device_checks.py), the
npu glue test and scripts/check_npu_glue.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cache_dirs import op_ext_cache_dir

ROOT = Path(__file__).resolve().parents[1]


def test_op_ext_cache_dir_wins_over_xdg_and_home():
    env = {"OP_EXT_CACHE_DIR": "/c/explicit", "XDG_CACHE_HOME": "/c/xdg", "HOME": "/c/home"}
    assert op_ext_cache_dir(env) == Path("/c/explicit")


def test_xdg_cache_home_wins_over_home():
    env = {"XDG_CACHE_HOME": "/c/xdg", "HOME": "/c/home"}
    assert op_ext_cache_dir(env) == Path("/c/xdg/op_extension")


def test_home_is_the_fallback():
    assert op_ext_cache_dir({"HOME": "/c/home"}) == Path("/c/home/.cache/op_extension")


def test_empty_variables_count_as_unset():
    # As ${VAR:-default} in the script: an empty OP_EXT_CACHE_DIR must not mean ".".
    env = {"OP_EXT_CACHE_DIR": "", "XDG_CACHE_HOME": "", "HOME": "/c/home"}
    assert op_ext_cache_dir(env) == Path("/c/home/.cache/op_extension")
    assert op_ext_cache_dir(dict(env, XDG_CACHE_HOME="/c/xdg")) == Path("/c/xdg/op_extension")


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    env.pop("OP_EXT_CACHE_DIR", None)
    env.pop("XDG_CACHE_HOME", None)
    env.update(overrides)
    return env


def test_simulated_npu_build_goes_to_the_cache_dir(tmp_path):
    probe = ("import sys; sys.path.insert(0, 'tests/npu_sim'); import sim_device_checks as m; "
             "print(m.BUILD_DIR)")
    for overrides, expected in (
        ({"OP_EXT_CACHE_DIR": str(tmp_path / "explicit"), "XDG_CACHE_HOME": str(tmp_path / "xdg")},
         tmp_path / "explicit"),
        ({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path / "xdg" / "op_extension"),
        ({}, tmp_path / "home" / ".cache" / "op_extension"),
    ):
        result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=_env(tmp_path, **overrides),
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        build_dir = Path(result.stdout.strip().splitlines()[-1])
        assert build_dir.parent == expected / "npu_sim_device", (overrides, build_dir)


@pytest.mark.parametrize("overrides", [
    {"OP_EXT_CACHE_DIR": "{tmp}/explicit", "XDG_CACHE_HOME": "{tmp}/xdg"},
    {"XDG_CACHE_HOME": "{tmp}/xdg"},
    {"OP_EXT_CACHE_DIR": "", "XDG_CACHE_HOME": ""},
], ids=["explicit", "xdg", "empty-means-home"])
def test_check_npu_glue_script_reads_the_same_cache_dir(tmp_path, overrides):
    # Plant torch_npu "headers" where the rule says; the script must report them as
    # cached from that folder (and then compile a trivial source against them).
    import torch

    env = _env(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in overrides.items()})
    env.update(PY=sys.executable, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    env.pop("OP_EXT_SKIP_NPU_GLUE_CHECK", None)
    cache = op_ext_cache_dir(env)
    version_dir = cache / "torch_npu" / "planted"
    (version_dir / "include").mkdir(parents=True)
    (version_dir / "libtorch_npu.exports").write_text("planted\n")
    (cache / "torch_npu" / f"for-torch-{torch.__version__.split('+')[0]}").write_text("planted\n")
    source = tmp_path / "trivial.cpp"
    source.write_text("int op_ext_trivial() { return 0; }\n")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "check_npu_glue.sh"), str(source)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert f"headers from {cache} (cached)" in result.stdout, result.stdout + result.stderr
