"""Benchmark harness for the custom operators in ``op_extension.ops``.

Run it as ``python -m op_extension.bench`` (or ``python op_extension/bench``);
``--help`` lists the options and ``benchmarks/README.md`` explains the method.

For every op, direction (forward, forward+backward), dtype and token count it
times four implementations in the same process, on the same tensors:

* ``ours``      -- ``op_extension.ops.<name>`` (the custom C++ op, with autograd)
* ``native``    -- the PyTorch built-in (``F.rms_norm``, ``F.gelu``, ...), where
  there is one (none for rotary_embedding)
* ``composite`` -- the eager code models actually contain (e.g. HF LlamaRMSNorm)
* ``compiled``  -- ``torch.compile`` (Inductor, default mode, dynamic=False)
  of that same composite

plus an ``out.copy_(x)`` of the op's input bytes, which gives the memory
bandwidth these (memory-bound) ops can hope to reach on this machine.

Layout, loosely after Liger-Kernel's benchmark scripts:

1. composite functions (what models write by hand),
2. one small setup factory per op returning inputs and callables,
3. a table of minimum-bytes-moved formulas,
4. a shared harness (timing, copy bandwidth, compile warm-up),
5. reporting (stdout table, JSON, PNG).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

# --------------------------------------------------------------------------
# Model constants (LLaMA-7B).
# --------------------------------------------------------------------------
HIDDEN = 4096          # hidden size: norms, add, softmax, gelu
INTERMEDIATE = 11008   # MLP intermediate size: swiglu / geglu
RMS_EPS = 1e-6         # LLaMA-2 rms_norm_eps
LN_EPS = 1e-5          # nn.LayerNorm default
# gelu and geglu rows use the tanh approximation (GPT-2 NewGELU, Gemma
# gelu_pytorch_tanh), so the written-out composite computes the same function.
GELU_APPROX = "tanh"
# rotary_embedding: the attention of LLaMA-3-8B, 32 q heads of 128 (= HIDDEN) and
# 8 k/v heads (grouped-query attention), one sequence of `tokens` positions.
ROPE_HEAD_DIM = 128
ROPE_Q_PER_KV = 4
ROPE_THETA = 500000.0

ALL_OPS = ("add", "gelu", "rms_norm", "fused_add_rms_norm", "layer_norm",
           "softmax", "swiglu", "geglu", "rotary_embedding")
DEFAULT_TOKENS = (1, 16, 128, 512, 2048)
QUICK_TOKENS = (16, 512)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
DTYPE_SHORT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
IMPLS = ("ours", "native", "composite", "compiled")
BASELINES = ("native", "composite", "compiled")
DIRECTIONS = ("fwd", "fwd+bwd")

# --------------------------------------------------------------------------
# 1. Composite eager forms: the code found in model files.  They are also
#    what torch.compile is given, so they are module-level functions (one
#    code object each: dynamo caches compiled graphs per code object).
# --------------------------------------------------------------------------


def composite_add(x, y):
    return torch.add(x, y)


def composite_gelu_tanh(x):
    # Written-out tanh GELU, as in HF NewGELUActivation (GPT-2 and friends).
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def composite_rms_norm(x, weight):
    # Hugging Face LlamaRMSNorm.forward.
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + RMS_EPS)
    return weight * h.to(input_dtype)


def composite_fused_add_rms_norm(x, residual, weight):
    # Decoder layer: ``hidden = residual + x`` then the next LlamaRMSNorm.
    h = x + residual
    return composite_rms_norm(h, weight), h


def composite_layer_norm(x, weight, bias):
    # Mean / biased variance written out, statistics in float32.
    input_dtype = x.dtype
    h = x.to(torch.float32)
    mean = h.mean(-1, keepdim=True)
    centered = h - mean
    var = centered.pow(2).mean(-1, keepdim=True)
    h = centered * torch.rsqrt(var + LN_EPS)
    return h.to(input_dtype) * weight + bias


def composite_softmax(x):
    # Numerically-stable softmax over the last dim, written out.
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def composite_swiglu(gate, up):
    # LlamaMLP: act_fn(gate_proj(x)) * up_proj(x) with act_fn = SiLU.
    return F.silu(gate) * up


def composite_geglu(gate, up):
    # GemmaMLP: gelu_pytorch_tanh(gate_proj(x)) * up_proj(x).
    return F.gelu(gate, approximate=GELU_APPROX) * up


def composite_rotate_half(x):
    # Hugging Face rotate_half.
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def composite_rotary_embedding(q, k, cos, sin):
    # Hugging Face apply_rotary_pos_emb (Llama, Mistral, Qwen2/3, Gemma 1/2/3),
    # unsqueeze_dim=1: q, k [batch, heads, seq, head_dim], cos, sin [batch, seq, head_dim].
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (composite_rotate_half(q) * sin), (k * cos) + (composite_rotate_half(k) * sin)


# --------------------------------------------------------------------------
# 2. Setup factories.  Each returns an OpSetup for (tokens, dtype, device):
#    the input tensors (passed positionally to every implementation), which of
#    them get gradients, and the three eager callables.  ``hidden`` overrides
#    the last dimension (the dispatch-overhead section uses 8).
# --------------------------------------------------------------------------


@dataclass
class OpSetup:
    inputs: list            # tensors, passed positionally to every impl
    grad_inputs: list       # indices of inputs that get .grad in fwd+bwd
    impls: dict             # "ours" / "native" (where torch has the op) / "composite" -> callable
    num_outputs: int = 1
    shape: tuple = ()       # activation shape, for reports
    numel: int = 0          # N: elements of one activation tensor (0: prod(shape))
    weight_numel: int = 0   # H: elements of one weight / bias vector
    output_shapes: list | None = None  # per output, where they differ from `shape`


def reference_impl(setup: OpSetup) -> str:
    """What ours is checked against, and timed against in the dispatch section:
    the native op, or the composite where torch has no such op."""
    return "native" if "native" in setup.impls else "composite"


def _randn(shape, dtype, device, scale=1.0):
    return torch.randn(shape, dtype=torch.float32, device=device).mul_(scale).to(dtype)


def _activations(tokens, dtype, device, hidden, n_inputs):
    shape = (tokens, hidden)
    inputs = [_randn(shape, dtype, device) for _ in range(n_inputs)]
    return shape, inputs


def setup_add(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda x, y: ops.add(x, y),
        "native": lambda x, y: torch.add(x, y),
        "composite": composite_add,
    }, shape=shape)


def setup_gelu(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 1)
    return OpSetup(inputs, [0], {
        "ours": lambda x: ops.gelu(x, approximate=GELU_APPROX),
        "native": lambda x: F.gelu(x, approximate=GELU_APPROX),
        "composite": composite_gelu_tanh,
    }, shape=shape)


def setup_rms_norm(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 1)
    weight = _randn((hidden,), dtype, device, 0.1).add_(1.0)
    return OpSetup(inputs + [weight], [0, 1], {
        "ours": lambda x, w: ops.rms_norm(x, (hidden,), w, RMS_EPS),
        "native": lambda x, w: F.rms_norm(x, (hidden,), w, RMS_EPS),
        "composite": composite_rms_norm,
    }, shape=shape, weight_numel=hidden)


def setup_fused_add_rms_norm(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 2)
    weight = _randn((hidden,), dtype, device, 0.1).add_(1.0)

    def native(x, r, w):
        h = x + r
        return F.rms_norm(h, (hidden,), w, RMS_EPS), h

    return OpSetup(inputs + [weight], [0, 1, 2], {
        "ours": lambda x, r, w: ops.fused_add_rms_norm(x, r, (hidden,), w, RMS_EPS),
        "native": native,
        "composite": composite_fused_add_rms_norm,
    }, num_outputs=2, shape=shape, weight_numel=hidden)


def setup_layer_norm(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 1)
    weight = _randn((hidden,), dtype, device, 0.1).add_(1.0)
    bias = _randn((hidden,), dtype, device, 0.1)
    return OpSetup(inputs + [weight, bias], [0, 1, 2], {
        "ours": lambda x, w, b: ops.layer_norm(x, (hidden,), w, b, LN_EPS),
        "native": lambda x, w, b: F.layer_norm(x, (hidden,), w, b, LN_EPS),
        "composite": composite_layer_norm,
    }, shape=shape, weight_numel=hidden)


def setup_softmax(ops, tokens, dtype, device, hidden=HIDDEN):
    shape, inputs = _activations(tokens, dtype, device, hidden, 1)
    return OpSetup(inputs, [0], {
        "ours": lambda x: ops.softmax(x, -1),
        "native": lambda x: torch.softmax(x, -1),
        "composite": composite_softmax,
    }, shape=shape)


def setup_swiglu(ops, tokens, dtype, device, hidden=INTERMEDIATE):
    shape, inputs = _activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda g, u: ops.swiglu(g, u),
        "native": lambda g, u: F.silu(g) * u,
        "composite": composite_swiglu,
    }, shape=shape)


def setup_geglu(ops, tokens, dtype, device, hidden=INTERMEDIATE):
    shape, inputs = _activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda g, u: ops.geglu(g, u, approximate=GELU_APPROX),
        "native": lambda g, u: F.gelu(g, approximate=GELU_APPROX) * u,
        "composite": composite_geglu,
    }, shape=shape)


def setup_rotary_embedding(ops, tokens, dtype, device, hidden=HIDDEN):
    # q, k as the attention makes them: projections viewed [1, seq, heads, head_dim]
    # and transposed to [1, heads, seq, head_dim] (not contiguous); cos, sin as the
    # rotary embedding module makes them ([1, seq, head_dim], halves repeated).
    # `hidden` = q heads x head_dim (the dispatch section's 8: one head of 8).
    head_dim = min(ROPE_HEAD_DIM, hidden)
    q_heads = hidden // head_dim
    kv_heads = max(1, q_heads // ROPE_Q_PER_KV)
    q = _randn((1, tokens, q_heads, head_dim), dtype, device).transpose(1, 2)
    k = _randn((1, tokens, kv_heads, head_dim), dtype, device).transpose(1, 2)
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.arange(tokens, dtype=torch.float32, device=device)[None, :, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    return OpSetup([q, k, cos, sin], [0, 1], {
        "ours": lambda q, k, c, s: ops.rotary_embedding(q, k, c, s),
        "composite": composite_rotary_embedding,
    }, num_outputs=2, shape=tuple(q.shape), numel=q.numel() + k.numel(), weight_numel=cos.numel(),
        output_shapes=[tuple(q.shape), tuple(k.shape)])


SETUPS = {
    "add": setup_add,
    "gelu": setup_gelu,
    "rms_norm": setup_rms_norm,
    "fused_add_rms_norm": setup_fused_add_rms_norm,
    "layer_norm": setup_layer_norm,
    "softmax": setup_softmax,
    "swiglu": setup_swiglu,
    "geglu": setup_geglu,
    "rotary_embedding": setup_rotary_embedding,
}


def make_setup(ops, name, tokens, dtype, device, hidden=None):
    kwargs = {} if hidden is None else {"hidden": hidden}
    s = SETUPS[name](ops, tokens, dtype, device, **kwargs)
    s.numel = s.numel or math.prod(s.shape)
    return s


# --------------------------------------------------------------------------
# 3. Minimum bytes moved.  N = elements of one activation tensor
#    (tokens * hidden; tokens * 11008 for swiglu/geglu; rotary_embedding: q and
#    k together), H = elements of one weight/bias vector (rotary_embedding: of
#    one of the cos/sin tables), s = bytes per element.  Each entry gives the
#    coefficients (of N*s, of H*s) for the forward pass and for the backward
#    pass; fwd+bwd = fwd + bwd.  Tiny per-row statistics (rstd, mean: tokens*4
#    bytes) that an implementation may save are not counted.  Backward assumes
#    the op re-reads what it saved (no recomputation across passes).
# --------------------------------------------------------------------------

BYTE_FORMULAS = {
    # fwd: read x, y; write out.            bwd: read dout; write dx, dy.
    "add": {"fwd": (3, 0), "bwd": (3, 0)},
    # fwd: read x; write y.                 bwd: read dy, x; write dx.
    "gelu": {"fwd": (2, 0), "bwd": (3, 0)},
    # fwd: read x, w; write y.              bwd: read dy, x, w; write dx, dw.
    "rms_norm": {"fwd": (2, 1), "bwd": (3, 2)},
    # fwd: read x, r, w; write y, h=x+r.    bwd: read dy, dh, h, w; write dx, dr, dw.
    "fused_add_rms_norm": {"fwd": (4, 1), "bwd": (5, 2)},
    # fwd: read x, w, b; write y.           bwd: read dy, x, w; write dx, dw, db.
    "layer_norm": {"fwd": (2, 2), "bwd": (3, 3)},
    # fwd: read x; write y.                 bwd: read dy, y; write dx.
    "softmax": {"fwd": (2, 0), "bwd": (3, 0)},
    # fwd: read gate, up; write out.        bwd: read dout, gate, up; write dgate, dup.
    "swiglu": {"fwd": (3, 0), "bwd": (5, 0)},
    "geglu": {"fwd": (3, 0), "bwd": (5, 0)},
    # N = q + k, H = one table. fwd: read q, k, cos, sin; write q_embed, k_embed.
    # bwd: read dq_embed, dk_embed, cos, sin; write dq, dk (q and k are not needed).
    "rotary_embedding": {"fwd": (2, 2), "bwd": (2, 2)},
}


def _coefficients(name, direction):
    f = BYTE_FORMULAS[name]
    parts = [f["fwd"]] if direction == "fwd" else [f["fwd"], f["bwd"]]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def bytes_moved(name, direction, numel, weight_numel, elem_size):
    n_coef, h_coef = _coefficients(name, direction)
    return (n_coef * numel + h_coef * weight_numel) * elem_size


def formula_text(name, direction):
    n_coef, h_coef = _coefficients(name, direction)
    return f"({n_coef}*N + {h_coef}*H) * s" if h_coef else f"{n_coef}*N*s"


# --------------------------------------------------------------------------
# 4. Harness.
# --------------------------------------------------------------------------


@dataclass
class Timing:
    median_s: float
    iqr_s: float
    samples: int


class CpuTimer:
    """Per-call CPU times from torch.utils.benchmark.Timer (explicit threads).

    blocked_autorange runs the statement in blocks long enough that the timer's
    own overhead is negligible and returns the per-call time of each block.
    ``sample`` is called once per round (see ``measure``) with that round's
    share of the time budget.  With ``reps`` each round instead takes a fixed
    number of blocks of >= 1 ms.
    """

    def __init__(self, threads, min_run_time, reps=None, rounds=5):
        self.threads, self.min_run_time = threads, min_run_time
        self.reps, self.rounds = reps, rounds

    def prepare(self, fn):
        return {"timer": benchmark.Timer(stmt="fn()", globals={"fn": fn},
                                         num_threads=self.threads)}

    def sample(self, handle):
        timer = handle["timer"]
        if not self.reps:
            return list(timer.blocked_autorange(
                min_run_time=self.min_run_time / self.rounds).times)
        if "number" not in handle:
            per_call = max(timer.timeit(1).median, 1e-9)
            handle["number"] = max(1, int(math.ceil(1e-3 / per_call)))
        n_blocks = max(1, math.ceil(self.reps / self.rounds))
        return [timer.timeit(handle["number"]).median for _ in range(n_blocks)]


class CudaTimer:
    """CUDA events around each call, with the L2 cache flushed before each one.

    Writing a 256 MB buffer between reps evicts the inputs from L2 (50 MB on
    H100), so every rep reads from HBM as a real layer would, and the
    bandwidth figures are not inflated by cache hits.  The flush itself is
    outside the events.
    """

    FLUSH_BYTES = 256 * 1024 * 1024

    def __init__(self, min_run_time, reps=None, rounds=5):
        self.min_run_time, self.reps, self.rounds = min_run_time, reps, rounds
        self.flush_buf = torch.empty(self.FLUSH_BYTES, dtype=torch.int8, device="cuda")

    def prepare(self, fn):
        # Estimate one call (flush included) to choose the reps per round.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            self.flush_buf.zero_()
            fn()
        torch.cuda.synchronize()
        est = (time.perf_counter() - t0) / 5
        total = self.reps or int(min(2000, max(20, self.min_run_time / max(est, 1e-6))))
        return {"fn": fn, "per_round": max(1, math.ceil(total / self.rounds))}

    def sample(self, handle):
        fn, n = handle["fn"], handle["per_round"]
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def measure(timer, fns: dict) -> tuple[dict, dict]:
    """Time several implementations of the same thing, interleaved.

    The budget is split into ``timer.rounds`` rounds; each round samples every
    implementation once, starting from a different one each round.  Slow drift
    of the machine (frequency, other tenants, allocator state) and any
    "who runs first" effect are thus shared by all implementations instead of
    landing on whichever was measured in the bad moment; on a 2-core VM this
    brought identical code measured twice from ~30 % apart to a few %.
    Returns ({name: Timing}, {name: error message}).
    """
    handles, errors = {}, {}
    for name, fn in fns.items():
        try:
            handles[name] = timer.prepare(fn)
        except Exception as e:
            errors[name] = _err(e)
    samples = {name: [] for name in handles}
    names = list(handles)
    for r in range(timer.rounds):
        k = r % max(len(names), 1)
        for name in names[k:] + names[:k]:
            if name in errors:
                continue
            try:
                samples[name] += timer.sample(handles[name])
            except Exception as e:
                errors[name] = _err(e)
    return ({n: _timing(s) for n, s in samples.items() if n not in errors and s},
            errors)


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _timing(times: Sequence[float]) -> Timing:
    times = sorted(times)
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = times[-1] - times[0]
    return Timing(statistics.median(times), iqr, len(times))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def warm_up(fn, device, min_calls=3, min_time=0.02):
    """Run fn a few times (first-call allocations, lazy init, compilation)."""
    t0 = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - t0 < min_time:
        fn()
        calls += 1
    sync(device)


def make_step(fn, setup: OpSetup, direction, grads=None):
    """Build the zero-argument statement that is timed.

    Everything it touches (inputs, weights, output gradients) is allocated
    beforehand, so the only allocations inside are the ones the op itself makes.
    """
    inputs = setup.inputs
    if direction == "fwd":
        return lambda: fn(*inputs)

    leaves = [inputs[i] for i in setup.grad_inputs]
    # Reset .grad to None rather than accumulating: with .grad None the
    # AccumulateGrad node simply adopts the gradient the backward produced,
    # whereas accumulating would add a `grad += new` read-modify-write per leaf
    # on every rep -- work that is not part of the op and would dilute the
    # comparison.  Assigning None allocates nothing.
    if setup.num_outputs == 1:
        g = grads[0]

        def step():
            for t in leaves:
                t.grad = None
            fn(*inputs).backward(g)
    else:
        # Backward through every output at once; summing them first would add
        # ops that are not part of the operator.
        def step():
            for t in leaves:
                t.grad = None
            torch.autograd.backward(fn(*inputs), grads)
    return step


def with_grad(setup: OpSetup) -> OpSetup:
    """Same storage, but the gradient inputs are leaves requiring grad."""
    inputs = [t.detach().requires_grad_(i in setup.grad_inputs)
              for i, t in enumerate(setup.inputs)]
    return OpSetup(inputs, setup.grad_inputs, setup.impls, setup.num_outputs,
                   setup.shape, setup.numel, setup.weight_numel, setup.output_shapes)


_COMPILED: dict = {}


def compiled_composite(name, composite):
    """One torch.compile wrapper per op; it recompiles per shape/dtype/grad mode."""
    if name not in _COMPILED:
        _COMPILED[name] = torch.compile(composite, dynamic=False)
    return _COMPILED[name]


def configure_dynamo():
    # dynamic=False gives one graph per (tokens, dtype, requires_grad) for each
    # composite: up to 5 * 2 * 2 = 20 per code object, above the default limit
    # of 8, after which dynamo would silently fall back to eager.
    cfg = torch._dynamo.config
    for key, value in (("recompile_limit", 64), ("cache_size_limit", 64),
                       ("accumulated_recompile_limit", 1024),
                       ("accumulated_cache_size_limit", 1024)):
        if hasattr(cfg, key) and getattr(cfg, key) < value:
            setattr(cfg, key, value)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def configure_host_allocator(mode):
    """Makes freed host memory reusable by the next allocation, or leaves glibc as is.

    glibc serves every allocation of 32 MiB or more (and smaller ones once its
    dynamic threshold says so) with a fresh mmap and returns it on free, so each
    call that allocates a large output pays a page fault per 4 KiB page of it.
    On this kind of VM that costs more than the kernel itself (an RMSNorm of
    2048 x 4096 float32 ran at ~10% of copy bandwidth, the rest page faults),
    and it hits every implementation alike, including the native and compiled
    baselines. "reuse" keeps large blocks on the heap and never trims it, which
    is what jemalloc/tcmalloc setups for CPU inference give; "system" measures
    the default. Returns a description recorded with the results.
    """
    if mode == "system":
        return "system (glibc defaults)"
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**30) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return "system (mallopt unavailable: not glibc)"
    return "reuse (glibc mallopt: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB)"


def load_liger(device):
    """The optional Liger-Kernel baseline: ({op: callable on the op's benchmark
    inputs}, None) for the ops Liger has, or ({}, why there is none). Liger's
    kernels are Triton, for CUDA only."""
    if device.type != "cuda":
        return {}, f"Liger-Kernel runs on CUDA only, not {device.type}"
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception as e:  # not installed, or broken against this torch/triton
        return {}, f"import liger_kernel failed ({_err(e)})"
    # in_place=False: in place, Liger's backward overwrites the output gradient,
    # which the timed step reuses rep after rep.
    impls = {
        "rms_norm": lambda x, w: LigerRMSNormFunction.apply(x, w, RMS_EPS, 0.0, "llama", False),
        "layer_norm": lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, LN_EPS),
        "swiglu": lambda g, u: LigerSiLUMulFunction.apply(g, u),
        "geglu": lambda g, u: LigerGELUMulFunction.apply(g, u),  # tanh GELU, as GELU_APPROX
    }
    try:  # newer releases only
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        impls["fused_add_rms_norm"] = lambda x, r, w: LigerFusedAddRMSNormFunction.apply(
            x, r, w, RMS_EPS, 0.0, "llama", False)
    except ImportError:
        pass
    return impls, None


def copy_bandwidth(nbytes, dtype, device, timer):
    """GB/s of ``out.copy_(x)`` over nbytes (counted as read + write)."""
    elem = torch.empty((), dtype=dtype).element_size()
    numel = max(1, nbytes // elem)
    src = torch.randn(numel, device=device).to(dtype)
    dst = torch.empty_like(src)

    def fn():
        dst.copy_(src)

    warm_up(fn, src.device)
    timings, errors = measure(timer, {"copy": fn})
    if errors:
        raise RuntimeError(errors["copy"])
    t = timings["copy"]
    return 2 * numel * elem / t.median_s / 1e9, t


def check_close(ours, native, dtype):
    """Max abs difference ours vs native forward, and whether it is acceptable."""
    ours = ours if isinstance(ours, (tuple, list)) else (ours,)
    native = native if isinstance(native, (tuple, list)) else (native,)
    if len(ours) != len(native):
        return float("inf"), False
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    err, ok = 0.0, True
    for a, b in zip(ours, native):
        if a.shape != b.shape:
            return float("inf"), False
        a, b = a.detach().float(), b.detach().float()
        err = max(err, (a - b).abs().max().item())
        ok = ok and torch.allclose(a, b, rtol=tol, atol=tol)
    return err, ok


class OtherLoad:
    """How much CPU *other* processes used over an interval.

    /proc/stat gives the busy time of all CPUs; subtracting this process's own
    CPU time (os.times, threads and waited-for children such as the compiler
    Inductor runs) leaves what others took.  On a small machine that is the
    main source of garbage timings, so rows measured while others were busy
    are flagged.  Returns None where /proc/stat does not exist.
    """

    WARN_FRACTION = 0.2

    def __init__(self):
        try:
            self.tick = os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            self.tick = 100

    def snapshot(self):
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        total = sum(values[:8]) / self.tick         # user .. steal
        idle = (values[3] + values[4]) / self.tick  # idle + iowait
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return total, idle, own

    @staticmethod
    def fraction(before, after):
        """Share of total CPU capacity used by other processes, in [0, 1]."""
        if before is None or after is None:
            return None
        total = after[0] - before[0]
        if total <= 0:
            return None
        busy = total - (after[1] - before[1])
        return min(1.0, max(0.0, (busy - (after[2] - before[2])) / total))

    def sample(self, seconds=0.5):
        before = self.snapshot()
        time.sleep(seconds)
        return self.fraction(before, self.snapshot())


class Progress:
    """Progress on stderr. On a terminal, one live bar that each stage (warm-up,
    compile, timing) rewrites in place. Anywhere else (a log file, a pipe) a bar
    cannot be rewritten, so stages print nothing and each finished row prints one
    line: a full run's log gets a line per row, not one per stage."""

    def __init__(self, total, width=28, stream=None):
        # sys.stderr looked up now, not at import: pytest's capture replaces it.
        self.stream = sys.stderr if stream is None else stream
        self.total, self.width = max(total, 1), width
        self.done = 0
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()

    def _line(self, label):
        elapsed = time.perf_counter() - self.start
        count = f"{self.done:>{len(str(self.total))}}/{self.total}"
        if not self.tty:
            return f"[{count}] {elapsed:6.1f}s  {label}"
        filled = int(self.done / self.total * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {count} {elapsed:6.1f}s  {label}"

    def show(self, label):
        """A stage within the current row: shown on a terminal only."""
        if self.tty:
            self.stream.write("\r" + self._line(label)[:150].ljust(150))
            self.stream.flush()

    def advance(self, label=""):
        """A row is finished."""
        self.done += 1
        if self.tty:
            self.show(label)
        else:
            self.stream.write(self._line(label) + "\n")
            self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


# --------------------------------------------------------------------------
# Figures in doubt.  On a small shared machine a timing can be wrong by orders
# of magnitude (a preempted OpenMP thread makes every parallel region wait a
# scheduler tick), and a wrong figure printed plainly reads as a result.  So:
# the copy baseline is taken again while other processes were busy, a row is
# timed again once when its window was busy or a figure left the bounds below,
# and whatever is still in doubt is marked '?' in the table and the plot.
# --------------------------------------------------------------------------

# Plausibility bounds.  %copy: an op can beat the copy_ rate where its data stays
# in a cache level the copy's does not (up to ~120% seen on the development VM),
# never by several times.  Speed-ups: these ops run 0.7x-11x torch's own forms
# there (README, "Performance"); beyond 0.02x-50x one of the two timings was
# disturbed (a run showed 0.00x and 406x next to a %copy of 28407%).
PCT_COPY_MAX = 300.0
SPEEDUP_MIN, SPEEDUP_MAX = 0.02, 50.0
COPY_TRIES = 3   # copy baseline: measured up to this many times until the machine was quiet
ROW_TRIES = 2    # a row: timed once more when busy or implausible


def is_busy(others):
    """True when other processes used more than OtherLoad.WARN_FRACTION of the CPUs
    (None: unknown, e.g. no /proc/stat, counts as quiet)."""
    return others is not None and others > OtherLoad.WARN_FRACTION


def _under_load(other_load, fn):
    """(fn(), share of the CPUs other processes used while it ran)."""
    before = other_load.snapshot()
    value = fn()
    return value, other_load.fraction(before, other_load.snapshot())


def until_quiet(fn, other_load, tries, give_up=lambda value: False):
    """fn() run again while other processes were busy during it, up to `tries`
    times in all (or until give_up(value)). Returns (the last value, the load
    during it, how many times fn ran)."""
    for attempt in range(1, tries + 1):
        value, others = _under_load(other_load, fn)
        if not is_busy(others) or give_up(value):
            break
    return value, others, attempt


class CopyBaseline:
    """The copy_ bandwidth the %copy of a group of rows is relative to, with the
    load it was measured under. A copy timed while others were busy is slow and
    inflates every %copy against it, so measure() tries up to ``tries`` times
    until the machine was quiet; ``busy`` tells whether it never was."""

    def __init__(self, measure_gbps, other_load, tries=COPY_TRIES):
        self._measure_gbps, self._other_load, self.tries = measure_gbps, other_load, tries
        self.gbps = self.others = self.error = None
        self.attempts = 0

    def _once(self):
        try:
            return self._measure_gbps(), None
        except Exception as e:
            return None, _err(e)

    def measure(self, tries=None):
        # An error is not the load's doing: no retry.
        (self.gbps, self.error), self.others, attempts = until_quiet(
            self._once, self._other_load, tries or self.tries, give_up=lambda result: result[1] is not None)
        self.attempts += attempts
        return self

    @property
    def busy(self):
        return is_busy(self.others)


def row_figures(timings, nbytes, copy_gbps):
    """The figures of a table row from its timings ({impl: Timing}): per impl
    median/IQR/GB/s, and our GB/s, %copy and speed-ups when ours was timed."""
    fig = {"impls": {impl: {"median_us": t.median_s * 1e6, "iqr_us": t.iqr_s * 1e6,
                            "samples": t.samples, "gbps": nbytes / t.median_s / 1e9}
                     for impl, t in timings.items()}}
    ours = fig["impls"].get("ours")
    if ours:
        fig["gbps"] = ours["gbps"]
        fig["pct_copy_bw"] = 100.0 * ours["gbps"] / copy_gbps if copy_gbps else None
        for b in BASELINES + ("liger",):
            if b in fig["impls"]:
                fig[f"speedup_vs_{b}"] = fig["impls"][b]["median_us"] / ours["median_us"]
    return fig


def implausible(fig):
    """{figure: why} for the figures outside the plausibility bounds."""
    out = {}
    pct = fig.get("pct_copy_bw")
    if pct is not None and pct > PCT_COPY_MAX:
        out["pct_copy_bw"] = f"%copy > {PCT_COPY_MAX:.0f}%"
    for key, v in fig.items():
        if key.startswith("speedup_vs_") and not SPEEDUP_MIN <= v <= SPEEDUP_MAX:
            out[key] = (f"x {key[len('speedup_vs_'):]} "
                        + (f"< {SPEEDUP_MIN:g}x" if v < SPEEDUP_MIN else f"> {SPEEDUP_MAX:g}x"))
    return out


def timed_figures(fig):
    """The keys of the figures that come from the row's timings."""
    keys = ["ours_us"] if "ours" in fig["impls"] else []
    return keys + [k for k in fig if k in ("gbps", "pct_copy_bw") or k.startswith("speedup_vs_")]


def figures_in_doubt(fig, others, copy: CopyBaseline):
    """{figure: [why, ...]} for each figure that must not be printed as a plain result."""
    doubt = {}
    if is_busy(others):
        for key in timed_figures(fig):
            doubt.setdefault(key, []).append(f"busy: others {100 * others:.0f}%")
    if copy.busy and fig.get("pct_copy_bw") is not None:
        doubt.setdefault("pct_copy_bw", []).append(f"copy busy: others {100 * copy.others:.0f}%")
    for key, why in implausible(fig).items():
        doubt.setdefault(key, []).append(why)
    return doubt


def time_row(measure_fn, nbytes, copy: CopyBaseline, other_load, tries=ROW_TRIES):
    """Times a row with measure_fn() -> ({impl: Timing}, {impl: error}) and
    derives its figures. While a figure is in doubt and tries are left: the row
    is timed again when its window was busy or a figure is implausible, and the
    copy baseline measured once more when it was busy or %copy is implausible
    (it may be the copy that was wrong). Returns (figures, errors, the last window's
    load, attempts, {figure: [why, ...]} for what is still in doubt)."""
    (timings, errors), others = _under_load(other_load, measure_fn)
    fig = row_figures(timings, nbytes, copy.gbps)
    doubt = figures_in_doubt(fig, others, copy)
    attempts = 1
    while doubt and attempts < tries:
        attempts += 1
        bad = implausible(fig)
        if copy.busy or "pct_copy_bw" in bad:
            copy.measure(tries=1)
        if is_busy(others) or bad:
            (timings, errors), others = _under_load(other_load, measure_fn)
        fig = row_figures(timings, nbytes, copy.gbps)
        doubt = figures_in_doubt(fig, others, copy)
    return fig, errors, others, attempts, doubt


def section_doubt(row, others, timed, ratio):
    """{figure: [why]} of a dispatch or Hugging Face row: its timed figures and the
    ratio when the window was busy, the ratio when outside the speed-up bounds."""
    doubt = {}
    if is_busy(others):
        for key in timed + (ratio,):
            if row.get(key) is not None:
                doubt[key] = [f"busy: others {100 * others:.0f}%"]
    v = row.get(ratio)
    if v is not None and not SPEEDUP_MIN <= v <= SPEEDUP_MAX:
        doubt.setdefault(ratio, []).append(f"outside {SPEEDUP_MIN:g}x-{SPEEDUP_MAX:g}x")
    return doubt


@dataclass
class RunConfig:
    ops: list
    dtypes: list
    tokens: list
    device: torch.device
    threads: int
    directions: list
    compile: bool
    compile_filter: Callable  # (dtype, tokens) -> bool
    timer: object             # CpuTimer or CudaTimer: the op timings
    host_timer: object        # CpuTimer: dispatch overhead
    other_load: OtherLoad
    liger: dict | None = None  # op -> Liger-Kernel callable (load_liger), CUDA only


def bench_cell(ops, name, direction, dtype, tokens, cfg: RunConfig, copy: CopyBaseline,
               progress: Progress):
    """Time ours / native / composite / compiled for one table row."""
    setup = make_setup(ops, name, tokens, dtype, cfg.device)
    grads = None
    if direction == "fwd+bwd":
        setup = with_grad(setup)
        grads = [_randn(shape, dtype, cfg.device)
                 for shape in setup.output_shapes or [setup.shape] * setup.num_outputs]

    elem = torch.empty((), dtype=dtype).element_size()
    nbytes = bytes_moved(name, direction, setup.numel, setup.weight_numel, elem)
    label = f"{name} {direction} {DTYPE_SHORT[dtype]} T={tokens}"
    row = {
        "op": name, "direction": direction, "dtype": str(dtype).replace("torch.", ""),
        "tokens": tokens, "shape": list(setup.shape), "bytes": nbytes,
        "bytes_formula": formula_text(name, direction), "impls": {}, "errors": {},
    }

    impls = dict(setup.impls)
    if cfg.compile and cfg.compile_filter(dtype, tokens):
        impls["compiled"] = compiled_composite(name, setup.impls["composite"])
    if cfg.liger and name in cfg.liger:
        impls["liger"] = cfg.liger[name]

    if direction == "fwd":
        # Sanity check: a fast wrong answer is not a result.
        ref = reference_impl(setup)
        try:
            err, ok = check_close(impls["ours"](*setup.inputs),
                                  impls[ref](*setup.inputs), dtype)
            row[f"max_abs_err_vs_{ref}"] = err
            if not ok:
                row["errors"]["check"] = f"ours differs from {ref} (max abs err {err:.3g})"
        except Exception as e:  # reported; the timings still run
            row["errors"]["check"] = _err(e)

    # Warm every implementation up (and compile) before any timing starts.
    steps = {}
    for impl, fn in impls.items():
        progress.show(f"{label} [{'compile' if impl == 'compiled' else 'warm-up'} {impl}]")
        step = make_step(fn, setup, direction, grads)
        try:
            if impl == "compiled":
                # The first call traces and compiles the forward graph (and the
                # backward graph at the first backward): out of the timed region.
                t0 = time.perf_counter()
                step()
                sync(cfg.device)
                row["compile_s"] = time.perf_counter() - t0
            warm_up(step, cfg.device)
            steps[impl] = step
        except Exception as e:
            row["errors"][impl] = _err(e)

    progress.show(f"{label} [timing {', '.join(steps)}]")
    fig, errors, others, attempts, doubt = time_row(
        lambda: measure(cfg.timer, steps), nbytes, copy, cfg.other_load)
    row["errors"].update(errors)
    row.update(fig)
    row.update(copy_gbps=copy.gbps, copy_others_cpu_busy=copy.others, copy_attempts=copy.attempts,
               others_cpu_busy=others, timing_attempts=attempts, in_doubt=doubt)
    for t_ in setup.inputs:
        t_.grad = None
    progress.advance(_with_doubt(label, row))
    return row


def run_benchmarks(ops, cfg: RunConfig, progress: Progress):
    rows = []
    for name in cfg.ops:
        for dtype in cfg.dtypes:
            for tokens in cfg.tokens:
                # Copy bandwidth reference: same bytes as the op's inputs,
                # measured right next to the op so both see the same machine
                # state (threads, frequency, which cache level the data fits).
                progress.show(f"{name} {DTYPE_SHORT[dtype]} T={tokens} [copy]")
                probe = make_setup(ops, name, tokens, dtype, cfg.device)
                in_bytes = sum(t.numel() * t.element_size() for t in probe.inputs)
                del probe
                copy = CopyBaseline(
                    lambda: copy_bandwidth(in_bytes, dtype, cfg.device, cfg.timer)[0],
                    cfg.other_load).measure()
                if copy.error:
                    print(f"\ncopy bandwidth failed: {copy.error}", file=sys.stderr)
                for direction in cfg.directions:
                    rows.append(bench_cell(ops, name, direction, dtype, tokens, cfg,
                                           copy, progress))
                    gc.collect()
    return rows


def dispatch_overhead(ops, cfg: RunConfig, progress: Progress):
    """Per-call cost on a [1, 8] tensor: ours vs native, eager, grad mode on.

    At this size the kernel does nothing, so the time is the Python wrapper +
    dispatcher (+ autograd checks) -- what a model with many small calls pays.
    An op without a native form (rotary_embedding: q, k, cos, sin of one head
    of 8) is timed alone: its composite is many ops, not a dispatch cost.
    Inputs do not require grad, so no graph is recorded.  Timed with the host
    timer even on CUDA (torch's Timer synchronises per block, so per call this
    is the launch-bound wall time), since CUDA events would time the kernel.
    """
    rows = []
    for name in cfg.ops:
        progress.show(f"dispatch {name}")
        s = make_setup(ops, name, 1, torch.float32, cfg.device, hidden=8)
        row = {"op": name, "shape": list(s.shape)}
        if "native" not in s.impls:
            row["note"] = "no native op"
        steps = {}
        with torch.enable_grad():
            for impl in ("ours", "native") if "native" in s.impls else ("ours",):
                fn, inputs = s.impls[impl], s.inputs
                step = (lambda fn=fn, inputs=inputs: fn(*inputs))
                try:
                    warm_up(step, cfg.device, min_calls=20)
                    steps[impl] = step
                except Exception as e:
                    row[f"{impl}_error"] = _err(e)
            # No copy baseline or plausibility re-measure here: timed again only when busy.
            (timings, errors), others, attempts = until_quiet(
                lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
        for impl, t in timings.items():
            row[f"{impl}_us"] = t.median_s * 1e6
        for impl, e in errors.items():
            row[f"{impl}_error"] = e
        if "ours_us" in row and "native_us" in row:
            row["ratio_ours_over_native"] = row["ours_us"] / row["native_us"]
        row.update(others_cpu_busy=others, timing_attempts=attempts,
                   in_doubt=section_doubt(row, others, ("ours_us", "native_us"), "ratio_ours_over_native"))
        rows.append(row)
        progress.advance(_with_doubt(f"dispatch {name}", row))
    return rows


# Hugging Face models: op_extension.transformers.patch on a small decoder of
# each family (random init, built from its config), forward + backward of a
# causal-LM loss, unpatched vs patched in the same interleaved run.
HF_FAMILIES = ("llama", "qwen3", "gemma3", "phi3")
HF_SHAPE = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=4, head_dim=64, vocab_size=1024, max_position_embeddings=512,
                pad_token_id=0, eos_token_id=1, bos_token_id=2)
HF_BATCH, HF_SEQ = 4, 128


def _hf_model(family, transformers, dtype):
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    }[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**HF_SHAPE)).to(dtype).train()
    with torch.no_grad():  # norm weights away from their init value, so they count
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def hf_models(cfg: RunConfig, progress: Progress):
    """Rows: family, dtype, unpatched and patched fwd+bwd ms, speed-up, and how
    the logits compare: the max |difference| with the default patch (fused MLP,
    RoPE rounded once), and, for 16-bit dtypes, whether they are bit for bit
    equal with the Hugging Face casting modes (mlp_casting_mode="hf",
    rope_casting_mode="hf"), as tests/test_transformers.py asserts
    (docs/transformers.md). patch replaces a family's RoPE function
    process-wide: the unpatched model runs under oxt.unpatched()."""
    import copy

    import transformers

    import op_extension.transformers as oxt

    rows = []
    ids = torch.randint(3, HF_SHAPE["vocab_size"], (HF_BATCH, HF_SEQ), generator=torch.Generator().manual_seed(0))
    for family in HF_FAMILIES:
        for dtype in cfg.dtypes:
            progress.show(f"hf {family} {str(dtype).replace('torch.', '')}")
            model = _hf_model(family, transformers, dtype)
            with torch.no_grad(), oxt.unpatched():
                want = model(ids).logits
            # The RoPE function's casting mode is per process: the "hf" patch first,
            # then the default one, which is timed.
            exact = copy.deepcopy(model)
            oxt.patch(exact, mlp_casting_mode="hf", rope_casting_mode="hf")
            with torch.no_grad():
                identical = bool(torch.equal(exact(ids).logits, want))
            del exact
            patched = copy.deepcopy(model)
            report = oxt.patch(patched)
            with torch.no_grad():
                diff = (patched(ids).logits.float() - want.float()).abs().max().item()
            steps = {}
            for name, m, rope in (("hf", model, oxt.unpatched), ("patched", patched, contextlib.nullcontext)):
                def step(m=m, rope=rope):
                    m.zero_grad(set_to_none=True)
                    with rope():
                        loss = m(ids, labels=ids).loss
                    loss.backward()
                warm_up(step, cfg.device, min_calls=2)
                steps[name] = step
            (timings, errors), others, attempts = until_quiet(
                lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
            row = {"family": family, "dtype": str(dtype).replace("torch.", ""), "replaced": dict(report),
                   "rope": dict(report.rope), "max_abs_logit_diff": diff,
                   "logits_identical_hf_casting": identical, "errors": errors}
            for name, t in timings.items():
                row[f"{name}_ms"] = t.median_s * 1e3
            if "hf_ms" in row and "patched_ms" in row:
                row["speedup"] = row["hf_ms"] / row["patched_ms"]
            row.update(others_cpu_busy=others, timing_attempts=attempts,
                       in_doubt=section_doubt(row, others, ("hf_ms", "patched_ms"), "speedup"))
            rows.append(row)
            progress.advance(_with_doubt(f"hf {family}", row))
    oxt.unpatch_classes()
    return rows


# A Llama model, four ways: eager, torch.compile (Inductor), torch.compile with
# backend="op_extension" (which finds the eager patterns itself, then Inductor),
# and manually patched (op_extension.transformers.patch, eager). Forward +
# backward of a causal-LM loss, the same decoder as the Hugging Face section.
MODEL_WAYS = ("eager", "inductor", "op_extension", "patched")


def model_ways(cfg: RunConfig, progress: Progress):
    """Rows: dtype, ms per way, speed-up of each way over eager, the compile
    seconds of the two compiled ways, and what the backend rewrote. The ways
    other than "patched" run under oxt.unpatched() (Hugging Face's RoPE)."""
    import copy

    import transformers

    import op_extension.compiler as oc
    import op_extension.transformers as oxt

    rows = []
    ids = torch.randint(3, HF_SHAPE["vocab_size"], (HF_BATCH, HF_SEQ), generator=torch.Generator().manual_seed(0))
    for dtype in cfg.dtypes:
        progress.show(f"model llama {str(dtype).replace('torch.', '')}: compiling")
        model = _hf_model("llama", transformers, dtype)
        patched = copy.deepcopy(model)
        oxt.patch(patched)
        models = {"eager": model, "inductor": torch.compile(copy.deepcopy(model)),
                  "op_extension": torch.compile(copy.deepcopy(model), backend=oc.BACKEND_NAME), "patched": patched}
        steps, compile_s, replaced = {}, {}, {}
        for name, m in models.items():
            def step(m=m, rope=contextlib.nullcontext if name == "patched" else oxt.unpatched):
                m.zero_grad(set_to_none=True)
                with rope():
                    loss = m(ids, labels=ids).loss
                loss.backward()
            t0 = time.perf_counter()
            step()  # compiles the compiled ways
            compile_s[name] = time.perf_counter() - t0
            if name == "op_extension" and oc.last_report() is not None:
                replaced = dict(oc.last_report().replaced)
            warm_up(step, cfg.device, min_calls=2)
            steps[name] = step
        (timings, errors), others, attempts = until_quiet(
            lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
        row = {"model": "llama", "dtype": str(dtype).replace("torch.", ""), "errors": errors,
               "compile_s": {k: compile_s[k] for k in ("inductor", "op_extension")}, "rewritten": replaced}
        for name, t in timings.items():
            row[f"{name}_ms"] = t.median_s * 1e3
        for name in MODEL_WAYS[1:]:
            if "eager_ms" in row and f"{name}_ms" in row:
                row[f"{name}_speedup"] = row["eager_ms"] / row[f"{name}_ms"]
        row.update(others_cpu_busy=others, timing_attempts=attempts,
                   in_doubt=section_doubt(row, others, tuple(f"{w}_ms" for w in MODEL_WAYS), "op_extension_speedup"))
        rows.append(row)
        progress.advance(_with_doubt("model llama", row))
    oxt.unpatch_classes()
    return rows


def print_model_ways(rows, file=sys.stdout):
    header = ("model", "dtype", "eager ms", "inductor ms", "op_extension ms", "patched ms",
              "x inductor", "x op_extension", "x patched", "compile s (ind/ox)", "note")
    table = [(r["model"], r["dtype"], *(_fmt_marked(r, f"{w}_ms", ".1f") for w in MODEL_WAYS),
              *(_fmt_marked(r, f"{w}_speedup", ".2f", "x") for w in MODEL_WAYS[1:]),
              f"{r['compile_s']['inductor']:.0f}/{r['compile_s']['op_extension']:.0f}",
              doubt_note(r) if r.get("in_doubt") else "") for r in rows]
    _print_aligned(header, table, file, right=range(2, 10))
    for r in rows:
        print(f"# {r['dtype']}: backend rewrote " + (", ".join(f"{k} x{v}" for k, v in sorted(r["rewritten"].items()))
                                                   or "nothing"), file=file)
    print_section_legend(rows, file)


def print_hf(rows, file=sys.stdout):
    header = ("family", "dtype", "HF ms", "patched ms", "speed-up", "max|dlogit|", "bitwise (hf casting)",
              "note")
    table = [(r["family"], r["dtype"], _fmt_marked(r, "hf_ms", ".1f"), _fmt_marked(r, "patched_ms", ".1f"),
              _fmt_marked(r, "speedup", ".2f", "x"), f"{r['max_abs_logit_diff']:.2e}",
              "-" if r["dtype"] in ("float32", "float64") else
              ("yes" if r["logits_identical_hf_casting"] else "no"),
              doubt_note(r) if r.get("in_doubt") else "") for r in rows]
    _print_aligned(header, table, file, right=range(2, 6))
    print_section_legend(rows, file)


# --------------------------------------------------------------------------
# 5. Reporting.
# --------------------------------------------------------------------------


def machine_info(device, threads):
    cpu_model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "torch": torch.__version__,
        "threads": threads,
        "device": str(device),
        "device_name": cpu_model,
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def _loadavg():
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _fmt(v, spec, suffix=""):
    return "-" if v is None else format(v, spec) + suffix


def _fmt_marked(row, key, spec, suffix="", value=None):
    """row[key] (or value) formatted; a figure in doubt keeps its value, marked '?'."""
    value = row.get(key) if value is None else value
    text = _fmt(value, spec, suffix)
    return text + "?" if value is not None and key in row.get("in_doubt", {}) else text


def doubt_note(row):
    """Why a row's figures are in doubt, and how often it was measured."""
    reasons = list(dict.fromkeys(why for whys in row["in_doubt"].values() for why in whys))
    tries = [f"timed {row['timing_attempts']}x"]
    if row.get("copy_attempts", 1) > 1:
        tries.append(f"copy {row['copy_attempts']}x")
    return "; ".join(reasons) + f" ({', '.join(tries)})"


def _with_doubt(label, row):
    """A progress label, with why the row's figures are in doubt if they are."""
    return label + (f"  ? {doubt_note(row)}" if row.get("in_doubt") else "")


def print_table(rows, file=sys.stdout):
    header = ("op", "dir", "dtype", "tokens", "ours us", "GB/s", "%copy",
              "x native", "x compos.", "x compiled", "note")
    with_liger = any("speedup_vs_liger" in r for r in rows)
    if with_liger:
        header = header[:-1] + ("x liger", "note")
    table = []
    for r in rows:
        ours = r["impls"].get("ours", {})
        notes = [f"{k}: {v}" for k, v in r["errors"].items()] + ([doubt_note(r)] if r.get("in_doubt") else [])
        table.append((
            r["op"], r["direction"], DTYPE_SHORT[getattr(torch, r["dtype"])],
            str(r["tokens"]),
            _fmt_marked(r, "ours_us", ".1f", value=ours.get("median_us")),
            _fmt_marked(r, "gbps", ".1f"),
            _fmt_marked(r, "pct_copy_bw", ".0f", "%"),
        ) + tuple(_fmt_marked(r, f"speedup_vs_{b}", ".2f", "x")
                  for b in BASELINES + (("liger",) if with_liger else ()))
          + ("; ".join(notes)[:120],))
    _print_aligned(header, table, file, right=range(3, len(header) - 1))
    if any(r.get("in_doubt") for r in rows):
        print(f"\n# ?: in doubt, not a result, even after measuring again: timed while other processes used "
              f"more than {100 * OtherLoad.WARN_FRACTION:.0f}% of the CPUs ('busy'; %copy also when its copy_ "
              f"baseline was: 'copy busy'), or outside the plausibility bounds (%copy above {PCT_COPY_MAX:.0f}%, "
              f"speed-up outside {SPEEDUP_MIN:g}x-{SPEEDUP_MAX:g}x). 'timed Nx', 'copy Nx': how often the row "
              "and its copy baseline were measured. Rerun on an idle machine.", file=file)


def print_dispatch(rows, file=sys.stdout):
    header = ("op", "ours us", "native us", "ours/native", "note")
    table = [(r["op"], _fmt_marked(r, "ours_us", ".2f"), _fmt_marked(r, "native_us", ".2f"),
              _fmt_marked(r, "ratio_ours_over_native", ".2f", "x"),
              "; ".join(n for n in (r.get("note"), doubt_note(r) if r.get("in_doubt") else None) if n))
             for r in rows]
    _print_aligned(header, table, file, right=range(1, 4))
    print_section_legend(rows, file)


def print_section_legend(rows, file):
    if any(r.get("in_doubt") for r in rows):
        print(f"\n# ?: in doubt, not a result: timed while other processes used more than "
              f"{100 * OtherLoad.WARN_FRACTION:.0f}% of the CPUs, even after timing again, or a ratio "
              f"outside {SPEEDUP_MIN:g}x-{SPEEDUP_MAX:g}x.", file=file)


def _print_aligned(header, table, file, right):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    right = set(right)

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for cells in table:
        print(line(cells), file=file)


def output_paths(out, device_type, stamp):
    """The JSON and the plot of one run, named alike: a run's plot is not
    overwritten by the next run's, and the two are found together."""
    return (os.path.join(out, f"bench_{device_type}_{stamp}.json"),
            os.path.join(out, f"speedup_{device_type}_{stamp}.png"))


# Tick sets, coarse to fine: the first that gives a panel 3 ticks is used, so a
# panel whose figures lie close to 1x still gets a scale.
AXIS_TICKS = ((0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100),
              (0.03, 0.3, 0.7, 1.5, 3, 7, 30),
              (0.8, 0.9, 1.1, 1.2))


def speedup_axis(values, margin=1.25):
    """(low, high, ticks) of a log speed-up axis fitted to values, always
    showing 1.0x (parity). Values outside the plausibility bounds are left out:
    one wild figure (its bar runs off the axis, marked '?') would squash the rest."""
    vals = [v for v in values if v and SPEEDUP_MIN <= v <= SPEEDUP_MAX] + [1.0]
    low, high = min(vals) / margin, max(vals) * margin
    ticks = []
    for extra in AXIS_TICKS:
        ticks = sorted(ticks + [t for t in extra if low <= t <= high])
        if len(ticks) >= 3:
            break
    return low, high, ticks


def speedup_figure(rows, device_label):
    """Grouped bars of speed-up (baseline time / our time), one panel per op and
    direction, on a log y-axis fitted to the panel with a line at 1.0 (above:
    ours is faster). Figures in doubt (see figures_in_doubt) are hatched, pale
    and marked '?'. Returns the matplotlib Figure (None without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.patches
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib is not installed: skipping the speed-up plot "
              "(pip install matplotlib)", file=sys.stderr)
        return None

    ops_ = list(dict.fromkeys(r["op"] for r in rows))
    dirs = list(dict.fromkeys(r["direction"] for r in rows))
    colors = {"native": "#4C72B0", "composite": "#DD8452", "compiled": "#55A868",
              "liger": "#8172B3"}
    # Constrained layout keeps the legend (titled with what the plot shows) in a
    # thin band right above the panels instead of in a corner of the figure.
    fig, axes = plt.subplots(len(ops_), len(dirs), squeeze=False, layout="constrained",
                             figsize=(7 * len(dirs), 2.4 * len(ops_) + 0.6))
    any_doubt = False
    for i, op in enumerate(ops_):
        for j, d in enumerate(dirs):
            ax = axes[i][j]
            cell = [r for r in rows if r["op"] == op and r["direction"] == d]
            labels = [f"{DTYPE_SHORT[getattr(torch, r['dtype'])]}\nT={r['tokens']}"
                      for r in cell]
            baselines = [b for b in BASELINES + ("liger",)
                         if any(r.get(f"speedup_vs_{b}") for r in cell)]
            width = 0.8 / max(len(baselines), 1)
            low, high, ticks = speedup_axis(
                [r.get(f"speedup_vs_{b}") for r in cell for b in baselines])
            for k, b in enumerate(baselines):
                offset = (k - (len(baselines) - 1) / 2) * width
                pts = [(x + offset, r[f"speedup_vs_{b}"], f"speedup_vs_{b}" in r.get("in_doubt", {}))
                       for x, r in enumerate(cell) if r.get(f"speedup_vs_{b}")]
                # Bars grow from 1.0 (parity) up for "ours faster", down for
                # "ours slower"; on a log axis 2x and 0.5x are equally long.
                bars = ax.bar([x for x, _, _ in pts], [v - 1.0 for _, v, _ in pts], width,
                              bottom=1.0, color=colors[b], label=f"vs {b}")
                for bar, (x, v, doubt) in zip(bars, pts):
                    if not doubt:
                        continue
                    any_doubt = True
                    bar.set_hatch("///")
                    bar.set_alpha(0.45)
                    # At the bar's end, outside it; inside the axis where an
                    # implausible bar runs off it.
                    y = min(max(v, low), high)
                    clipped = y != v
                    ax.text(x, y, "?", ha="center", fontsize=9, fontweight="bold",
                            va="bottom" if (v >= 1.0) != clipped else "top",
                            bbox=dict(facecolor="white", edgecolor="none", pad=0.3))
            ax.set_yscale("log")
            ax.set_ylim(low, high)
            ax.set_yticks(ticks)
            ax.set_yticklabels([f"{t:g}x" for t in ticks], fontsize=7)
            ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(cell)))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_title(f"{op} {d}", fontsize=9)
            if j == 0:
                ax.set_ylabel("speed-up", fontsize=8)
    handles, names = [], []
    for ax in axes.flat:
        for h, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(h)
                names.append(name)
    if any_doubt:
        handles.append(matplotlib.patches.Patch(facecolor="lightgray", hatch="///"))
        names.append("? in doubt: busy machine or implausible (see the table)")
    fig.legend(handles, names, loc="outside upper center", ncols=len(handles), fontsize=8,
               frameon=False, title_fontsize=10,
               title=f"op_extension speed-up (baseline time / our time) - {device_label}")
    return fig


def write_plot(rows, path, device_label):
    """speedup_figure saved as a PNG; returns the path (None without matplotlib)."""
    fig = speedup_figure(rows, device_label)
    if fig is None:
        return None
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

QUICK_HELP = (
    "quick smoke run (< 2 min on a 2-core CPU, torch.compile included): tokens "
    f"{','.join(map(str, QUICK_TOKENS))}, both dtypes, all ops, fwd and fwd+bwd, "
    "min-run-time 0.1 s in 2 rounds; the compiled composite is built only for float32 at the "
    "largest token count (compiling every graph would take minutes), other rows "
    "show '-' in the 'x compiled' column. Explicit --tokens/--dtypes/--ops/"
    "--min-run-time still apply.")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m op_extension.bench",
        description="Time op_extension.ops against native PyTorch, the eager "
                    "composite models use, and torch.compile of that composite. "
                    "Prints a table, writes <out>/bench_<device>_<timestamp>.json "
                    "and <out>/speedup_<device>_<timestamp>.png.",
        epilog="See benchmarks/README.md for the method.")
    p.add_argument("--ops", default=",".join(ALL_OPS),
                   help="comma-separated ops to run [default: all: "
                        f"{','.join(ALL_OPS)}]")
    p.add_argument("--dtypes", default=None,
                   help="comma-separated dtypes (float32,bfloat16,float16) "
                        "[default: float32,bfloat16]")
    p.add_argument("--tokens", default=None,
                   help="comma-separated token counts (rows); hidden is 4096, "
                        "11008 for swiglu/geglu; rotary_embedding: q [1, 32, tokens, 128], "
                        "k [1, 8, tokens, 128] [default: "
                        f"{','.join(map(str, DEFAULT_TOKENS))}]")
    p.add_argument("--device", default="cpu", help="cpu or cuda [default: cpu]")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="intra-op threads for every measurement "
                        "[default: torch.get_num_threads(), here "
                        f"{torch.get_num_threads()}]")
    p.add_argument("--min-run-time", type=float, default=None,
                   help="seconds of timed runs per implementation and row, "
                        "split over --rounds [default: 0.5, 0.1 with --quick]")
    p.add_argument("--reps", type=int, default=None,
                   help="take this many timed samples per implementation and "
                        "row (split over --rounds) instead of filling "
                        "--min-run-time")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds: every implementation of a row is "
                        "sampled once per round, in rotating order [default: 5, "
                        "2 with --quick]")
    p.add_argument("--no-backward", action="store_true",
                   help="forward only")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile baseline")
    p.add_argument("--no-dispatch", action="store_true",
                   help="skip the dispatch-overhead section")
    p.add_argument("--no-hf", action="store_true",
                   help="skip the Hugging Face model section (patched vs unpatched small "
                        "Llama, Qwen3, Gemma3, Phi-3 decoders, forward+backward; needs transformers)")
    p.add_argument("--no-model", action="store_true",
                   help="skip the model section (a Llama decoder eager vs torch.compile vs "
                        "backend='op_extension' vs patched; compiles twice, a few minutes on 2 cores)")
    p.add_argument("--allocator", choices=("reuse", "system"), default="reuse",
                   help="host allocator policy: reuse freed large blocks (no page faults "
                        "per call, as with jemalloc/tcmalloc) or glibc's defaults "
                        "[default: reuse]")
    p.add_argument("--out", default="bench_results",
                   help="output folder for the JSON and PNG "
                        "[default: bench_results/]")
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = p.parse_args(argv)

    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in args.ops if o not in SETUPS]
    if unknown:
        p.error(f"unknown op(s) {unknown}; choose from {', '.join(ALL_OPS)}")
    dtypes = args.dtypes or "float32,bfloat16"
    try:
        args.dtypes = [DTYPES[d.strip()] for d in dtypes.split(",") if d.strip()]
    except KeyError as e:
        p.error(f"unknown dtype {e}; choose from {', '.join(DTYPES)}")
    if args.tokens:
        args.tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    else:
        args.tokens = list(QUICK_TOKENS if args.quick else DEFAULT_TOKENS)
    if args.min_run_time is None:
        args.min_run_time = 0.1 if args.quick else 0.5
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.rounds < 1 or (args.reps is not None and args.reps < 1):
        p.error("--rounds and --reps must be >= 1")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda requested but torch.cuda.is_available() is False")

    try:
        from op_extension import ops
    except Exception as e:
        sys.exit(f"cannot import op_extension.ops ({type(e).__name__}: {e}); "
                 "build/install the package first (pip install -e .)")
    missing = [o for o in args.ops if not callable(getattr(ops, o, None))]
    if missing:
        sys.exit(f"op_extension.ops is missing: {', '.join(missing)} "
                 "(use --ops to benchmark the others)")

    # Fix the thread count for everything, compilation included: Inductor's
    # CPU kernels bake the OpenMP thread count in at code-generation time.
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    host_allocator = configure_host_allocator(args.allocator)
    configure_dynamo()

    host_timer = CpuTimer(args.threads, args.min_run_time, args.reps, args.rounds)
    if device.type == "cuda":
        timer = CudaTimer(args.min_run_time, args.reps, args.rounds)
    else:
        timer = host_timer

    largest = max(args.tokens)

    def compile_filter(dtype, tokens):
        # Quick mode compiles only float32 at the largest token count: a cold
        # Inductor compile costs seconds per graph on a small CPU.
        return not args.quick or (dtype == torch.float32 and tokens == largest)
    cfg = RunConfig(ops=args.ops, dtypes=args.dtypes, tokens=args.tokens,
                    device=device, threads=args.threads,
                    directions=["fwd"] if args.no_backward else list(DIRECTIONS),
                    compile=not args.no_compile, compile_filter=compile_filter,
                    timer=timer, host_timer=host_timer, other_load=OtherLoad())
    cfg.liger, no_liger = load_liger(device)
    if no_liger:
        print(f"liger baseline: skipped: {no_liger}", file=sys.stderr)

    busy_before = cfg.other_load.sample()
    if busy_before is not None and busy_before > OtherLoad.WARN_FRACTION:
        print(f"warning: other processes use {100 * busy_before:.0f}% of the CPUs: "
              "they compete for the cores and distort timings (on a small VM a "
              "preempted thread turns into ms-sized outliers)", file=sys.stderr)
    run_start = cfg.other_load.snapshot()

    n_cells = len(cfg.ops) * len(cfg.dtypes) * len(cfg.tokens) * len(cfg.directions)
    run_hf = not args.no_hf and device.type == "cpu"
    if run_hf:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("hf section: skipped: transformers is not installed (scripts/setup_env.sh installs it)",
                  file=sys.stderr)
            run_hf = False
    run_model = run_hf and not args.no_model
    progress = Progress(n_cells + (0 if args.no_dispatch else len(cfg.ops))
                        + (len(HF_FAMILIES) * len(cfg.dtypes) if run_hf else 0)
                        + (len(cfg.dtypes) if run_model else 0))
    t_start = time.perf_counter()
    try:
        rows = run_benchmarks(ops, cfg, progress)
        dispatch = [] if args.no_dispatch else dispatch_overhead(ops, cfg, progress)
        hf_rows = hf_models(cfg, progress) if run_hf else []
        model_rows = model_ways(cfg, progress) if run_model else []
    finally:
        progress.close()
    elapsed = time.perf_counter() - t_start

    info = machine_info(device, args.threads)
    busy_during = cfg.other_load.fraction(run_start, cfg.other_load.snapshot())
    info["others_cpu_busy_before"] = busy_before
    info["others_cpu_busy_during"] = busy_during
    info["loadavg_1min_after"] = _loadavg()
    info["host_allocator"] = host_allocator
    print(f"\n# op_extension benchmark - {info['device_name']}, {args.threads} "
          f"thread(s), torch {torch.__version__}, host allocator {host_allocator}")
    print("# speed-up = baseline time / our time (>1: ours is faster); "
          "GB/s from minimum bytes moved; %copy = our GB/s / copy_ GB/s\n")
    print_table(rows)
    flagged = sum(1 for r in rows if r.get("in_doubt"))
    if flagged:
        print(f"# warning: {flagged} of {len(rows)} row(s) have figures in doubt (see 'note')")
    if dispatch:
        print("\n# dispatch overhead: one eager call on a [1, 8] float32 tensor, "
              "grad mode on\n")
        print_dispatch(dispatch)
    if hf_rows:
        print(f"\n# Hugging Face models: forward+backward of a causal-LM loss, batch {HF_BATCH} x "
              f"{HF_SEQ} tokens, {HF_SHAPE['num_hidden_layers']} layers of hidden {HF_SHAPE['hidden_size']}; "
              "unpatched vs op_extension.transformers.patch (same run, interleaved)\n")
        print_hf(hf_rows)
    if model_rows:
        print(f"\n# a Llama decoder ({HF_SHAPE['num_hidden_layers']} layers of hidden {HF_SHAPE['hidden_size']}, "
              f"batch {HF_BATCH} x {HF_SEQ}), forward+backward: eager vs torch.compile (Inductor) vs "
              "torch.compile(backend='op_extension') vs op_extension.transformers.patch; x = eager ms / ms\n")
        print_model_ways(model_rows)

    os.makedirs(args.out, exist_ok=True)
    json_path, png_path = output_paths(args.out, device.type, time.strftime("%Y%m%d-%H%M%S"))
    report = {
        "metadata": info,
        "config": {
            "ops": cfg.ops, "dtypes": [str(d).replace("torch.", "") for d in cfg.dtypes],
            "tokens": cfg.tokens, "hidden": HIDDEN, "intermediate": INTERMEDIATE,
            "rope": {"q_heads": HIDDEN // ROPE_HEAD_DIM, "kv_heads": HIDDEN // ROPE_HEAD_DIM // ROPE_Q_PER_KV,
                     "head_dim": ROPE_HEAD_DIM, "theta": ROPE_THETA, "batch": 1},
            "directions": cfg.directions, "compile": cfg.compile, "quick": args.quick,
            "min_run_time_s": args.min_run_time, "reps": args.reps,
            "rounds": args.rounds,
            "rms_eps": RMS_EPS, "ln_eps": LN_EPS, "gelu_approximate": GELU_APPROX,
            "timer": type(timer).__name__, "elapsed_s": elapsed,
            "liger": sorted(cfg.liger) if cfg.liger else f"skipped: {no_liger}",
        },
        "byte_formulas": {
            "legend": "N = elements of one activation tensor (rotary_embedding: q and k), H = elements "
                      "of one weight/bias vector (rotary_embedding: one cos/sin table), s = bytes per "
                      "element; fwd+bwd = fwd + bwd",
            **{k: {"fwd": formula_text(k, "fwd"), "fwd+bwd": formula_text(k, "fwd+bwd")}
               for k in BYTE_FORMULAS},
        },
        "results": rows,
        "dispatch_overhead": dispatch,
        "hf_models": hf_rows,
        "model_ways": model_rows,
    }
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    png = write_plot(rows, png_path, f"{info['device_name']}, {args.threads} thr")
    print(f"\nwrote {json_path}" + (f" and {png}" if png else "")
          + f" ({elapsed:.0f} s)")
    return 0
