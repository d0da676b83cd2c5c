"""Where the tests keep builds and downloads that outlive one run.

One rule for every test and for scripts/check_npu_glue.sh, so that what one of
them caches the others find: $OP_EXT_CACHE_DIR, else $XDG_CACHE_HOME/op_extension,
else $HOME/.cache/op_extension. An empty variable counts as unset, as `${VAR:-...}`
in the script treats it (and as the XDG spec asks).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def op_ext_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder for `environ` (default: this process's environment)."""
    environ = os.environ if environ is None else environ
    if environ.get("OP_EXT_CACHE_DIR"):
        return Path(environ["OP_EXT_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "op_extension"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return home / ".cache" / "op_extension"
