"""op_extension: LLM operators as real PyTorch custom ops.

    import op_extension                      # registers torch.ops.custom.*
    torch.ops.custom.gelu(x)                 # the dispatcher op
    op_extension.ops.rms_norm(x, (4096,), w) # torch.nn.functional-like API
    op_extension.nn.CustomRMSNorm(4096)      # drop-in nn.Module

Every op of op_protos/ is exported here as op_extension.<name> (= ops.<name>).
"""

import torch  # noqa: F401  (loads libtorch before our library)

from . import _C  # noqa: F401  (loading it runs TORCH_LIBRARY(custom, ...))

# The shared machinery first, then each piece of every op collected from its
# prototype and its module op_extension/op_defs/<name>.py (which builds on the
# machinery, so it can only be imported once that is loaded).
from . import _fake, _reference, _transforms, ops

_fake.register()  # fake kernels for FakeTensor / compile / export
_transforms.register()  # torch.func and forward-mode AD, vmap rules
_reference.collect()  # references and tolerances (debug, tests)
ops._collect()  # the functional API

from . import debug  # noqa: E402  (reads the OP_EXT_* debug switches)
from . import nn  # noqa: E402

for _name in ops.__all__:
    globals()[_name] = getattr(ops, _name)
del _name

# torch.compile(backend="op_extension"): Dynamo finds the backend through our
# entry point (pyproject.toml) when it first looks backends up; if Dynamo is
# already loaded, register now. Importing Dynamo ourselves would cost ~0.8 s.
if "torch._dynamo" in __import__("sys").modules:
    from .compiler import _register_backend

    _register_backend()
    del _register_backend

__all__ = sorted([*ops.__all__, "debug", "nn", "ops"])
