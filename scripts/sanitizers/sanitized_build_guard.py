"""pytest plugin for scripts/check_sanitizers.sh (loaded with -p): before any test
runs, checks that the op_extension imported is the sanitized copy the script built
and that the ASan runtime is loaded, so a test run that picked up the normal
(unsanitized) build cannot pass for a sanitizer run. Also lifts Hypothesis's
per-example deadline: sanitized code runs several times slower, and a deadline
measures speed, which this run does not test."""

from __future__ import annotations

import os
from pathlib import Path


def _loaded_libraries() -> str:
    with open("/proc/self/maps") as maps:
        return maps.read()


def _lift_hypothesis_deadline() -> None:
    try:
        from hypothesis import settings
    except ImportError:
        return
    # On top of whatever profile is loaded now; a test's own @settings still wins.
    settings.register_profile("op_ext_sanitizers", parent=settings.default, deadline=None)
    settings.load_profile("op_ext_sanitizers")


def pytest_configure(config):
    root = Path(os.environ["OP_EXT_SANITIZED_TREE"]).resolve()
    import op_extension
    import op_extension._ascend_sim
    import op_extension._C
    import op_extension._cuda_sim

    for module in (op_extension._C, op_extension._ascend_sim, op_extension._cuda_sim):
        path = Path(module.__file__).resolve()
        if root not in path.parents:
            raise RuntimeError(f"sanitizer run: {module.__name__} was imported from {path}, not from {root}")
    if "libasan.so" not in _loaded_libraries():
        raise RuntimeError("sanitizer run: the ASan runtime is not loaded (LD_PRELOAD lost?)")
    _lift_hypothesis_deadline()
    print(f"sanitizer run: op_extension._C, _ascend_sim and _cuda_sim from {root}, ASan runtime loaded")
