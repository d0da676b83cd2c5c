"""What an op tells the benchmark: its ``BENCH = Bench(...)`` in op_defs/<op>.py.

``python -m op_extension.bench`` (the package op_extension/bench/) times every
built op whose op module defines ``BENCH``; it names no op itself. This module
is what those op modules import for it: the ``Bench`` and ``OpSetup`` records,
the model the shapes are taken from, and two tensor helpers. It imports only
torch, so that the op layer does not depend on the benchmark's harness (which
imports the op modules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["GELU_APPROX", "HIDDEN", "INTERMEDIATE", "LN_EPS", "RMS_EPS", "Bench", "OpSetup", "activations", "randn"]

# The model every row's shape and constants come from (LLaMA-7B); recorded in
# each run's JSON config.
HIDDEN = 4096          # hidden size: the last dim of most ops' rows
INTERMEDIATE = 11008   # MLP intermediate size: the gated units' rows
RMS_EPS = 1e-6         # LLaMA-2 rms_norm_eps
LN_EPS = 1e-5          # nn.LayerNorm default
# gelu and geglu rows use the tanh approximation (GPT-2 NewGELU, Gemma
# gelu_pytorch_tanh), so the written-out composite computes the same function.
GELU_APPROX = "tanh"


@dataclass
class OpSetup:
    """The inputs and implementations of one row (op, tokens, dtype, device)."""

    inputs: list            # tensors, passed positionally to every impl
    grad_inputs: list       # indices of inputs that get .grad in fwd+bwd
    impls: dict             # "ours" / "native" (where torch has the op) / "composite" -> callable
    num_outputs: int = 1
    shape: tuple = ()       # activation shape, for reports
    numel: int = 0          # N: elements of one activation tensor (0: prod(shape))
    weight_numel: int = 0   # H: elements of one weight / bias vector
    output_shapes: list | None = None  # per output, where they differ from `shape`


@dataclass(frozen=True)
class Bench:
    """An op's rows in the benchmark.

    ``setup(ops, tokens, dtype, device, hidden)`` returns the row's OpSetup:
    ``ours`` calls ``ops.<op>``, ``native`` the PyTorch built-in (left out where
    torch has none: ours is then checked against the composite), ``composite``
    the eager code models contain, as a module-level function (torch.compile
    caches its graphs per code object). ``hidden`` is the last dim: the op's
    ``hidden`` in the table, 8 in the dispatch-overhead section.

    Minimum bytes moved: every input read once and every output written once.
    ``fwd_bytes`` and ``bwd_bytes`` are the coefficients (a, b) of
    ``(a * N + b * H) * s``, N = elements of one activation tensor
    (OpSetup.numel), H = of one weight/bias vector (OpSetup.weight_numel), s =
    bytes per element; fwd+bwd = fwd + bwd. Tiny per-row statistics (rstd,
    mean: tokens * 4 bytes) are not counted; the backward re-reads what it
    saved (no recomputation across passes).
    """

    setup: Callable[..., OpSetup]
    fwd_bytes: tuple[int, int]
    bwd_bytes: tuple[int, int]
    hidden: int = HIDDEN
    # Where the op's rows come in the table and the plot (ascending, then by
    # name), so that related ops stand together.
    order: int = 1000
    n_is: str = ""       # what N counts, where not one activation tensor (the JSON's legend)
    h_is: str = ""       # what H counts, where not one weight/bias vector
    shapes: str = ""     # the inputs' shapes for --help, where `hidden` does not say them
    config: dict = field(default_factory=dict)  # entries of the run's JSON config
    # () -> the Liger-Kernel callable on the setup's inputs (CUDA; imports
    # liger_kernel, so raises where that is missing or lacks the op).
    liger: Callable[[], Callable] | None = None


def randn(shape, dtype, device, scale=1.0):
    """Normal values drawn in float32 (the same values for every dtype), in `dtype`."""
    return torch.randn(shape, dtype=torch.float32, device=device).mul_(scale).to(dtype)


def activations(tokens, dtype, device, hidden, n_inputs):
    """(shape, [n_inputs tensors of [tokens, hidden]])."""
    shape = (tokens, hidden)
    return shape, [randn(shape, dtype, device) for _ in range(n_inputs)]
