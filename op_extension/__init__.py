"""op_extension: LLM operators as real PyTorch custom ops.

    import op_extension                      # registers torch.ops.custom.*
    torch.ops.custom.gelu(x)                 # the dispatcher op
    op_extension.ops.rms_norm(x, (4096,), w) # torch.nn.functional-like API
    op_extension.nn.CustomRMSNorm(4096)      # drop-in nn.Module

Every op of op_protos/ that the built library holds is exported here as
op_extension.<name> (= ops.<name>); the others are left out with a warning.
"""

import torch  # noqa: F401  (loads libtorch before our library)

# Loads _C (its TORCH_LIBRARY(custom, ...) defines torch.ops.custom.*) and sorts
# the prototypes into those the library holds as described (_built.BUILT) and the
# others: every collector below takes only the former.
#
# Not lazy: importing the package registers the ops, as torch extensions do
# (code calls torch.ops.custom.<op> after a bare `import op_extension`). What
# runs before a build -- `python -m op_extension.scaffold`, which itself imports
# only the standard library, _protos and _cpp_gen -- relies instead on this
# import never failing for want of the build: an unbuilt prototype, or no
# loadable _C at all, leaves those ops out with one warning.
from . import _built

# The collectors; each imports op_defs, which imports the module
# op_extension/op_defs/<name>.py of every built op (they import only
# op_extension.toolkit, so nothing here imports back). Then each piece of every
# op is collected from its prototype and its module.
from . import _fake, _reference, _transforms, ops

_fake.register()  # fake kernels for FakeTensor / compile / export
_transforms.register()  # torch.func and forward-mode AD, vmap rules
_reference.collect()  # references and tolerances (debug, tests)
ops._collect()  # the functional API
_built.warn()  # once, naming every prototype left out

from . import distributed  # noqa: E402

distributed.register()  # the DTensor sharding rules, once DTensor is loaded

from . import debug  # noqa: E402  (reads the OP_EXT_* debug switches)
from . import nn  # noqa: E402
from . import tune  # noqa: E402  (debug's tune switch dispatches through it)

globals().update({name: getattr(ops, name) for name in ops.__all__})

# torch.compile(backend="op_extension"): Dynamo finds the backend through our
# entry point (pyproject.toml) when it first looks backends up; if Dynamo is
# already loaded, register now. Importing Dynamo ourselves would cost ~0.8 s.
if "torch._dynamo" in __import__("sys").modules:
    from .compiler import _register_backend

    _register_backend()
    del _register_backend

__all__ = sorted([*ops.__all__, "debug", "nn", "ops", "tune"])


def __getattr__(name: str):
    # op_extension.<op> of a prototype the library lacks raises as ops.<op> does,
    # naming the prototype and the rebuild, instead of a bare "no attribute".
    if name in ops._UNBUILT_FORWARD:
        return getattr(ops, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
