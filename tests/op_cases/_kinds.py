"""The kinds of entry a tests/op_cases/<name>.py module holds, and the helpers
its entries use. Re-exported by op_cases (``from op_cases import Bad, Call, ...``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from op_extension._reference import acc_dtype

H = 16  # the normalised / hidden size of the Call and Fake cases


def rand(*shape) -> torch.Tensor:
    """A float32 randn tensor (the inputs of Call cases)."""
    return torch.randn(*shape, dtype=torch.float32)


HUGE = (1 << 16, 1 << 16)  # 4 Gi elements, 16 GiB as float32


def huge(*shape) -> torch.Tensor:
    """A float32 tensor of `shape` that owns one element: any kernel, dense copy
    or full-size output allocation for it would need gigabytes (CHECKED_FIRST)."""
    return torch.zeros(()).expand(shape)


# Phrases of the ops' messages that several BAD entries expect.
SAME_DTYPE = "all tensors must have the same dtype"
SAME_DEVICE = "all tensors must be on the same device"
NOT_BROADCASTABLE = "not broadcastable"


class NotWritten(AssertionError):
    """An entry of tests/op_cases/<name>.py that its author has not written yet.

    An AssertionError, so that no ``pytest.raises(ValueError / TypeError /
    RuntimeError)`` of a test can take it for the error it expects."""


def not_written(op: str, what: str) -> Callable:
    """A stand-in for an entry nobody wrote yet (python -m op_extension.scaffold
    generates them): whatever calls it fails, naming the file to fill in."""

    def stand_in(*args, **kwargs):
        raise NotWritten(f"{op}: {what} not written yet: fill in tests/op_cases/{op}.py")

    stand_in.__name__ = f"not_written_{op}"
    return stand_in


# ---------------------------------------------------------------------------
# Tensor factory of the SAMPLES (reference.py re-exports Maker and Sample)
# ---------------------------------------------------------------------------


@dataclass
class Maker:
    """Makes random tensors of one dtype/device; every tensor it makes is a leaf
    that requires grad when `requires_grad` (and `grad` at the call) say so.

    layout:
      contiguous   dense, row-major
      transposed   the transpose of a dense tensor (last two dims swapped)
      strided      every other element of a twice-as-long last dim
      row_strided  every other row (first dim) of a twice-as-tall tensor
      heads_transposed  dims -3 and -2 of a dense tensor swapped: the [batch, heads,
                   seq, dim] view of [batch, seq, heads, dim] memory that attention
                   makes of q and k (the last dim stays innermost)
    """

    dtype: torch.dtype = torch.float32
    requires_grad: bool = False
    device: str | torch.device = "cpu"

    def __call__(self, *shape: int, layout: str = "contiguous", grad: bool = True, scale: float = 1.0,
                 offset: float = 0.0) -> torch.Tensor:
        shape = tuple(shape)
        acc = acc_dtype(self.dtype)

        def rand(s):
            return (torch.randn(s, dtype=acc) * scale + offset).to(self.dtype).to(self.device)

        if layout == "contiguous" or len(shape) == 0:
            t = rand(shape)
        elif layout == "transposed":
            assert len(shape) >= 2, "transposed needs two dims"
            t = rand(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
        elif layout == "strided":
            t = rand(shape[:-1] + (2 * shape[-1],))[..., ::2]
        elif layout == "row_strided":
            t = rand((2 * shape[0],) + shape[1:])[::2]
        elif layout == "heads_transposed":
            assert len(shape) >= 3, "heads_transposed needs three dims"
            t = rand(shape[:-3] + (shape[-2], shape[-3], shape[-1])).transpose(-3, -2)
        else:
            raise ValueError(layout)
        assert t.shape == shape
        if layout != "contiguous" and t.numel() > 1:
            assert not t.is_contiguous(), (layout, shape)
        return t.requires_grad_(self.requires_grad and grad)


@dataclass(frozen=True)
class Sample:
    """One call of an op: build(make) -> (args, kwargs) in the op's schema order."""

    id: str
    build: Callable[[Maker], tuple[tuple, dict]]
    large: bool = False  # only for the reference tests (opcheck's compile time would not buy coverage)


def sample(id, build, large=False) -> Sample:
    return Sample(id, build, large)


# ---------------------------------------------------------------------------
# The other kinds
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """The op as a model calls it: fn(*make(rows)), float32 tensors whose row
    count is `rows`. fn must be a module-level function named f_<case id>
    (Dynamo caches compiled code per code object: one per case)."""

    fn: Callable
    make: Callable[[int], tuple]


@dataclass(frozen=True)
class Fake:
    """fn(*make(dtype)) for the FakeTensor and opcheck tests: batch and row
    sizes 2 and 5 (made symbolic), other sizes static (H, 3, broadcast 1s)."""

    fn: Callable
    make: Callable[[torch.dtype], tuple]


@dataclass(frozen=True)
class Bad:
    """call(t) must raise `exc` with a message `custom::<op>: ...<phrase>`
    (a regex); t(*shape, dtype=None, device=None) makes a tensor."""

    call: Callable
    exc: type[Exception]
    phrase: str


# ---------------------------------------------------------------------------
# DTensor cases (tests/test_distributed.py)
# ---------------------------------------------------------------------------

DT_ROWS = (4, 8, 16)  # [batch, sequence, hidden]: every dim splits on 2 and 4 ranks
DT_ANY = ("R", "S0", "S1", "S2")  # what DTensor may pick for a DT_ROWS output where it redistributes


def grand(g: torch.Generator, *shape) -> torch.Tensor:
    """randn from the case's generator (every rank and the single process draw the same)."""
    return torch.randn(*shape, generator=g)


def dt_rows(n: int) -> Callable:
    """n activations of DT_ROWS."""
    return lambda g: [grand(g, *DT_ROWS) for _ in range(n)]


def dt_norm(n_params: int, shape=(16,), grads: int = 0) -> Callable:
    """A row norm's arguments: `grads` incoming gradients, x, normalized_shape, n_params weights/biases."""
    return lambda g: ([grand(g, *DT_ROWS) for _ in range(grads)] + [grand(g, *DT_ROWS), list(shape)]
                      + [grand(g, *shape) for _ in range(n_params)])


@dataclass(frozen=True)
class Placed:
    """custom::<op>(*make(generator), **kwargs) on DTensors, each tensor argument
    placed as `places` says ("R", "S<dim>", "P": Replicate, Shard, Partial sum;
    "S0,S1" a placement per dim of a 2-D mesh); `out` the placements of the
    outputs, or for each a tuple of those DTensor may pick where it
    redistributes. `grad` (forward ops): also the gradients through
    op_extension.ops.<op>. `mesh` 2: on 4 ranks as a 2 x 2 mesh."""

    name: str
    make: Callable
    places: tuple
    out: tuple
    grad: bool = True
    kwargs: dict = field(default_factory=dict)
    mesh: int = 1


def placed(name, make, places, out, *, grad=True, mesh=1, **kwargs) -> Placed:
    return Placed(name, make, tuple(places), tuple(out), grad, kwargs, mesh)
