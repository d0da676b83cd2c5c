"""op_extension: LLM operators as real PyTorch custom ops.

    import op_extension                      # registers torch.ops.custom.*
    torch.ops.custom.gelu(x)                 # the dispatcher op
    op_extension.ops.rms_norm(x, (4096,), w) # torch.nn.functional-like API
    op_extension.nn.CustomRMSNorm(4096)      # drop-in nn.Module
"""

import torch  # noqa: F401  (loads libtorch before our library)

from . import _C  # noqa: F401  (loading it runs TORCH_LIBRARY(custom, ...))
from . import _fake  # noqa: F401  (fake kernels for FakeTensor / compile / export)
from . import debug  # noqa: F401  (reads the OP_EXT_* debug switches)
from . import nn, ops
from .ops import add, fused_add_rms_norm, geglu, gelu, layer_norm, rms_norm, rotary_embedding, softmax, swiglu

# torch.compile(backend="op_extension"): Dynamo finds the backend through our
# entry point (pyproject.toml) when it first looks backends up; if Dynamo is
# already loaded, register now. Importing Dynamo ourselves would cost ~0.8 s.
if "torch._dynamo" in __import__("sys").modules:
    from .compiler import _register_backend

    _register_backend()
    del _register_backend

__all__ = [
    "add",
    "debug",
    "fused_add_rms_norm",
    "geglu",
    "gelu",
    "layer_norm",
    "nn",
    "ops",
    "rms_norm",
    "rotary_embedding",
    "softmax",
    "swiglu",
]
