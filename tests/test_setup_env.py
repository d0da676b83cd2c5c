"""scripts/setup_env.sh, run against a stand-in interpreter that records what it
is asked to do (no network, no real installs): numpy and the other
torch-independent packages go in before anything imports torch, torch is only
ever installed as TORCH_SPEC, and an installed torch is pinned, never replaced."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The stand-in for $VENV/bin/python. State (what is "installed") lives in
# $FAKE_STATE as files; every call appends one line to $FAKE_STATE/log.
FAKE_PYTHON = r"""#!/usr/bin/env bash
state=$FAKE_STATE
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2
  line="pip $*"
  args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --constraint|-c) line="$line [constraints: $(cat "${args[i+1]}")]" ;;
      numpy) touch "$state/numpy" ;;
      torch==*) touch "$state/torch" ;;
    esac
  done
  echo "$line" >>"$state/log"
  exit 0
fi
if [ "$1" = "-c" ]; then
  case "$2" in
    *importlib.metadata*)
      echo "probe torch metadata" >>"$state/log"
      [ -e "$state/torch" ] && echo "torch==2.13.0+cpu"
      exit 0 ;;
    *"import torch"*)
      if [ -e "$state/numpy" ]; then echo "import torch (numpy there)" >>"$state/log"
      else echo "import torch (NO numpy)" >>"$state/log"; fi
      [ -e "$state/torch" ] || exit 1
      echo "2.13.0+cpu"
      exit 0 ;;
  esac
fi
echo "unexpected: $*" >>"$state/log"
exit 3
"""


def _run_setup(tmp_path: Path, torch_installed: bool) -> list[str]:
    venv, state = tmp_path / "venv", tmp_path / "state"
    (venv / "bin").mkdir(parents=True)
    state.mkdir()
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    if torch_installed:
        (state / "torch").touch()
    env = dict(os.environ, VENV=str(venv), FAKE_STATE=str(state), TORCH_SPEC="torch==9.8.7")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup_env.sh")], env=env,
                            capture_output=True, text=True, timeout=60)
    log = (state / "log").read_text().splitlines()
    assert result.returncode == 0, result.stdout + result.stderr + "\n".join(log)
    assert not [line for line in log if line.startswith("unexpected")], log
    return log


def test_fresh_setup_installs_numpy_before_torch_is_imported(tmp_path):
    log = _run_setup(tmp_path, torch_installed=False)
    imports = [i for i, line in enumerate(log) if line.startswith("import torch")]
    assert imports, log
    assert all("NO numpy" not in log[i] for i in imports), log
    deps = [line for line in log if line.startswith("pip install") and " numpy" in line]
    assert len(deps) == 1, log
    for package in ("ninja", "pytest", "hypothesis", "matplotlib", "transformers==5.23.0"):
        assert f" {package}" in deps[0]
    # torch: installed once, exactly as TORCH_SPEC, after the first failed import.
    torch_installs = [i for i, line in enumerate(log) if line.startswith("pip install") and "torch==9.8.7" in line
                      and "[constraints" not in line]
    assert len(torch_installs) == 1 and torch_installs[0] > imports[0], log
    assert "[constraints: torch==9.8.7]" in deps[0]


def test_existing_torch_is_pinned_and_never_reinstalled(tmp_path):
    log = _run_setup(tmp_path, torch_installed=True)
    installs = [line for line in log if line.startswith("pip install")]
    assert len(installs) == 1, log  # the dependencies only
    assert "[constraints: torch==2.13.0+cpu]" in installs[0], log
    assert all("NO numpy" not in line for line in log), log


def test_make_test_starts_the_longest_files_first():
    """conftest's LONGEST_FILES_FIRST names files that exist (a renamed one would
    quietly fall back to pytest's order), and the Makefile keeps xdist from
    re-sorting them by test count."""
    import conftest

    here = Path(__file__).resolve().parent
    missing = [name for name in conftest.LONGEST_FILES_FIRST if not (here / name).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FILES_FIRST names files that do not exist: {missing}"
    makefile = (here.parent / "Makefile").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in makefile

    class Item:  # what the hook reads of a pytest item
        def __init__(self, name, test):
            self.path, self.test = Path(name), test

    items = [Item("test_a.py", 1), Item("test_compiler.py", 1), Item("test_a.py", 2),
             Item("test_add_an_op.py", 1), Item("test_compiler.py", 2), Item("test_add_an_op.py", 2)]
    conftest.pytest_collection_modifyitems(None, None, items)
    assert [(i.path.name, i.test) for i in items] == [
        ("test_add_an_op.py", 1), ("test_add_an_op.py", 2), ("test_compiler.py", 1),
        ("test_compiler.py", 2), ("test_a.py", 1), ("test_a.py", 2)]
