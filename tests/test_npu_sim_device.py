"""Runs tests/npu_sim/sim_device_checks.py -- the real npu glue on a simulated
npu device -- in its own process: it makes PrivateUse1 a device named "npu" for
the whole process, which nothing else in this suite should see.

The first run compiles the glue, the simulated device and the simulator's
kernels (about a minute on 2 cores); the build is kept in
<cache>/npu_sim_device/<checkout> and later runs reuse it, where <cache> is
$OP_EXT_CACHE_DIR, else $XDG_CACHE_HOME/op_extension, else ~/.cache/op_extension
(tests/cache_dirs.py, the same folder scripts/check_npu_glue.sh and
tests/test_npu_glue.py use).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_npu_glue_on_a_simulated_device():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         str(ROOT / "tests" / "npu_sim" / "sim_device_checks.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
