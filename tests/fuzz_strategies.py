"""Tensor specs for tests/test_fuzz.py: a tensor described by a few numbers
(shape, dtype, seed, layout, special values) that T() rebuilds bit for bit, so
a failing example prints as one line a user can paste:

    import sys; sys.path.insert(0, "tests"); from fuzz_strategies import T
    T((3, 769), "float32", seed=7, scale=1.0, layout="step", specials={5: "nan"})

Values are torch.randn(shape, float64, generator seeded with `seed`) * scale,
rounded to `dtype`; then `rows` scales/sets flat index ranges (whole rows: rows
whose squares overflow float, constant rows), then `specials` puts single values
at flat indices of the logical (row-major) order. The layout decides where those
values live in memory; memory outside the view holds NaN, so a kernel that reads
past its view shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# contiguous  dense row-major
# transposed  the transpose of a dense tensor (last two dims swapped); needs 2 dims
# step        every other element of a 2n+1 long last dim, from element 1 (stride 2, storage offset 1)
# offset      dense, but at storage offset 3 of a larger buffer
LAYOUTS = ("contiguous", "transposed", "step", "offset")


def _canary(dtype: torch.dtype) -> float:
    return float("nan")


def T(shape, dtype="float32", *, seed=0, scale=1.0, layout="contiguous", rows=(), specials=None) -> torch.Tensor:
    """The tensor a TSpec describes (see the module docstring).

    rows: ((start, stop, "mul"|"set", value), ...) over flat logical indices.
    specials: {flat index: value as a string float() reads, e.g. "nan", "-0.0", "1e-39"}.
    """
    shape = tuple(int(s) for s in shape)
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    g = torch.Generator().manual_seed(int(seed))
    v = (torch.randn(shape, generator=g, dtype=torch.float64) * float(scale)).to(dt)
    flat = v.view(-1)
    for start, stop, how, value in rows:
        if how == "mul":
            flat[start:stop] = (flat[start:stop].double() * float(value)).to(dt)
        else:
            flat[start:stop] = float(value)
    for i, value in (specials or {}).items():
        flat[int(i)] = float(value)
    if layout == "contiguous" or len(shape) == 0:
        return v
    if layout == "transposed":
        buf = torch.full(shape[:-2] + (shape[-1], shape[-2]), _canary(dt), dtype=dt)
        t = buf.transpose(-1, -2)
    elif layout == "step":
        buf = torch.full(shape[:-1] + (2 * shape[-1] + 1,), _canary(dt), dtype=dt)
        t = buf[..., 1::2]
    elif layout == "offset":
        buf = torch.full((v.numel() + 3,), _canary(dt), dtype=dt)
        t = buf[3:].view(shape)
    else:
        raise ValueError(layout)
    t.copy_(v)
    assert t.shape == shape
    return t


@dataclass(frozen=True)
class TSpec:
    """The arguments of one T() call; repr() is that call."""

    shape: tuple
    dtype: str
    seed: int
    scale: float = 1.0
    layout: str = "contiguous"
    rows: tuple = ()
    specials: dict = field(default_factory=dict)

    def build(self) -> torch.Tensor:
        return T(self.shape, self.dtype, seed=self.seed, scale=self.scale, layout=self.layout, rows=self.rows,
                 specials=self.specials)

    def __repr__(self) -> str:
        parts = [repr(tuple(self.shape)), repr(self.dtype), f"seed={self.seed}"]
        if self.scale != 1.0:
            parts.append(f"scale={self.scale!r}")
        if self.layout != "contiguous":
            parts.append(f"layout={self.layout!r}")
        if self.rows:
            parts.append(f"rows={tuple(self.rows)!r}")
        if self.specials:
            parts.append(f"specials={dict(self.specials)!r}")
        return f"T({', '.join(parts)})"
