"""Where the tests keep builds and downloads that outlive one run.

One rule for every test and for scripts/check_npu_glue.sh, so that what one of
them caches the others find: $OP_EXT_CACHE_DIR, else $XDG_CACHE_HOME/op_extension,
else $HOME/.cache/op_extension. An empty variable counts as unset, as `${VAR:-...}`
in the script treats it (and as the XDG spec asks).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def op_ext_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder for `environ` (default: this process's environment): the
    rule op_extension.tune's cache folder follows too, written once there."""
    from op_extension.tune import default_cache_dir

    return default_cache_dir(environ)
