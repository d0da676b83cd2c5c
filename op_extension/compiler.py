"""torch.compile that finds eager RMSNorm, add + RMSNorm, SwiGLU/GEGLU, GELU,
softmax and LayerNorm in a model and runs op_extension's kernels there.

    torch.compile(model, backend="op_extension")      # then Inductor, as usual
    torch.compile(model, backend="op_extension", options={"inner": "aot_eager"})
    op_extension.compiler.enable()                    # the same rewrite inside the
    torch.compile(model)                              #   default (Inductor) backend
    op_extension.compiler.last_report()               # what the last graph got

What is rewritten (every occurrence, in the graph Dynamo captured):
  * RMSNorm written out, ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``
    (or ``x * x``; or ``x / torch.sqrt(...)``), in the variants models use: plain float32/float64; Llama's
    (upcast to float32, normalise, cast back to the input's dtype, times the
    weight); Gemma's (normalise in float32, times ``(1 + w.float())``, cast last);
    and ``F.rms_norm`` / ``nn.RMSNorm`` -> ``custom::rms_norm``. A multiply by a
    weight of the computing dtype right after the normalisation goes into the op;
  * a residual add whose sum feeds such an RMSNorm -> ``custom::fused_add_rms_norm``
    (the sum stays the residual stream);
  * ``F.silu(g) * u`` -> ``custom::swiglu``, ``F.gelu(g, approximate=a) * u`` ->
    ``custom::geglu``;
  * GELU-tanh written as its formula, ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x +
    0.044715 * x^3)))`` (Hugging Face's NewGELUActivation), and ``F.gelu``, ->
    ``custom::gelu`` (or, times an up projection, ``custom::geglu``);
  * ``F.softmax`` / ``torch.softmax`` / ``Tensor.softmax`` without a dtype (or
    with the input's own),
    ``F.layer_norm`` -> their ops.
Everything else is left to the inner compiler (Inductor by default).

What is never rewritten, because our op would compute something else: an RMSNorm
whose arithmetic runs in a 16-bit dtype (no upcast: the model rounds its squares
and mean to 16 bits, our op does not), eps outside the rsqrt, a reduction over
another dim or without keepdim, weights or operands of another dtype or shape
(broadcasting), a softmax with a dtype, ``add`` with alpha.

How: Dynamo hands a backend its graph in Torch IR (torch functions, tensor
methods, operators), before autograd. The rewrite works there, so AOTAutograd
then traces through our ops' own autograd: the forward and the backward both run
our kernels, and the fake kernels carry dynamic shapes (no recompilation for a
new sequence length). ``enable()`` installs the same rewrite as Inductor's
pre-grad custom pass: a post-grad pass would see the forward and backward graphs
after autograd has already differentiated the eager pattern, and could only
replace the forward.

eps: under ``dynamic=True`` Dynamo passes a module's float attribute (``self.eps``)
as a 0-dim tensor input rather than a constant. Our ops take eps as a number, so
the rewrite reads the value from the example input and adds a check to the graph
that fails, naming the op, if a later call passes another value (nothing is
silently computed with a stale eps).
"""

from __future__ import annotations

import logging
import math
import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F

__all__ = ["BACKEND_NAME", "RewriteReport", "backend", "disable", "enable", "last_report", "rewrite"]

log = logging.getLogger(__name__)
BACKEND_NAME = "op_extension"

# ---- node kinds ---------------------------------------------------------------
# Torch IR spells one operation several ways (torch.mul, operator.mul, x.mul).

_FUNCTION_KINDS = {
    torch.pow: "pow", operator.pow: "pow",
    torch.mean: "mean",
    torch.add: "add", operator.add: "add",
    torch.mul: "mul", operator.mul: "mul",
    torch.rsqrt: "rsqrt",
    torch.sqrt: "sqrt",
    torch.div: "div", torch.true_divide: "div", operator.truediv: "div",
    torch.tanh: "tanh",
    F.silu: "silu",
    F.gelu: "gelu",
    F.softmax: "softmax", torch.softmax: "softmax",
    F.layer_norm: "layer_norm", torch.layer_norm: "layer_norm",
    F.rms_norm: "rms_norm",
}
if hasattr(torch, "rms_norm"):
    _FUNCTION_KINDS[torch.rms_norm] = "rms_norm"
_METHOD_KINDS = {m: m for m in ("pow", "mean", "add", "mul", "rsqrt", "sqrt", "div", "tanh", "to", "float", "type_as",
                                 "softmax", "item")}
_METHOD_KINDS["true_divide"] = "div"

# Scalar arithmetic Dynamo records on unspecialised floats.
_SCALAR_FUNCTIONS = {operator.truediv: operator.truediv, operator.mul: operator.mul, operator.add: operator.add,
                     operator.sub: operator.sub, operator.neg: operator.neg, math.sqrt: math.sqrt}
if hasattr(torch, "_sym_sqrt"):
    _SCALAR_FUNCTIONS[torch._sym_sqrt] = math.sqrt


def _kind(n) -> str | None:
    if not isinstance(n, fx.Node):
        return None
    if n.op == "call_function":
        if n.target is torch.ops.custom.gelu.default:  # a GELU formula already rewritten
            return "gelu"
        try:
            return _FUNCTION_KINDS.get(n.target)
        except TypeError:  # an unhashable target
            return None
    if n.op == "call_method":
        return _METHOD_KINDS.get(n.target)
    return None


def _value(n):
    """The example value Dynamo recorded for a node (a FakeTensor, SymInt, ...)."""
    return n.meta.get("example_value") if isinstance(n, fx.Node) else None


def _tensor(n) -> torch.Tensor | None:
    v = _value(n)
    return v if isinstance(v, torch.Tensor) else None


def _arg(n: fx.Node, index: int, name: str, default=None):
    if len(n.args) > index:
        return n.args[index]
    return n.kwargs.get(name, default)


def _only_user(n: fx.Node) -> fx.Node | None:
    users = list(n.users)
    return users[0] if len(users) == 1 else None


def _other(n: fx.Node, one) -> object:
    """The other operand of a binary node, given one of them (None if neither)."""
    a, b = n.args[0], n.args[1]
    return b if a is one else a if b is one else None


def _same_tensor_type(*nodes) -> bool:
    vals = [_tensor(n) for n in nodes]
    if any(v is None for v in vals):
        return False
    return all(v.dtype == vals[0].dtype and v.shape == vals[0].shape and v.device == vals[0].device
               for v in vals[1:])


def _binary(n: fx.Node, kind: str) -> bool:
    """n is a plain two-operand add/mul/div (no alpha, no rounding mode, no out)."""
    if _kind(n) != kind or len(n.args) != 2:
        return False
    return not n.kwargs


def _floating_cast(n: fx.Node) -> fx.Node | None:
    """n is ``x.to(dtype)`` / ``x.float()``, a pure dtype cast: returns x."""
    k = _kind(n)
    if k == "float" and len(n.args) == 1 and not n.kwargs:
        return n.args[0]
    if k == "to" and set(n.kwargs) <= {"dtype"}:
        dtypes = [a for a in n.args[1:]] + list(n.kwargs.values())
        if len(dtypes) == 1 and isinstance(dtypes[0], torch.dtype):
            return n.args[0]
    return None


# ---- the report -------------------------------------------------------------------


@dataclass
class RewriteReport:
    """What one graph got: op -> count, and the near misses left alone, with why."""

    replaced: Counter = field(default_factory=Counter)
    left_alone: list[str] = field(default_factory=list)
    graph: int = 0

    def __str__(self) -> str:
        done = ", ".join(f"{op} x{n}" for op, n in sorted(self.replaced.items())) or "nothing"
        text = f"op_extension.compiler: graph {self.graph}: {done}"
        if self.left_alone:
            text += "; left alone: " + "; ".join(self.left_alone)
        return text


_last_report: RewriteReport | None = None
_graphs = 0


def last_report() -> RewriteReport | None:
    """The report of the last graph the backend or the enabled pass rewrote in this
    process (a graph Inductor's caches replay is not rewritten again: no report)."""
    return _last_report


# ---- eps --------------------------------------------------------------------------


class _Rewriter:
    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.report = RewriteReport()
        self._checked: dict[fx.Node, float] = {}

    def number(self, a, sources: set | None = None) -> float | None:
        """The value of a scalar operand at compile time, or None. Under
        dynamic=True Dynamo passes Python floats (a module's eps, math.pi) as 0-dim
        tensor inputs read by .item(), and arithmetic on them as graph nodes: those
        are evaluated from the example inputs; the inputs read go into `sources`
        (check() then makes the graph verify them on every call)."""
        if isinstance(a, bool) or a is None:
            return None
        if isinstance(a, (int, float)):
            return float(a)
        if not isinstance(a, fx.Node) or a.op != "call_function" and _kind(a) != "item":
            return None
        if _kind(a) == "item":
            source = a.args[0]
            example = getattr(source.meta.get("grapharg"), "example", None) if source.op == "placeholder" else None
            if not isinstance(example, torch.Tensor) or example.numel() != 1 or not example.is_floating_point():
                return None
            if sources is not None:
                sources.add(source)
            return float(example)
        fn = _SCALAR_FUNCTIONS.get(a.target)
        if fn is None or a.kwargs:
            return None
        args = [self.number(x, sources) for x in a.args]
        return None if any(v is None for v in args) else float(fn(*args))

    def check(self, sources: set, op: str) -> None:
        """Makes the graph fail, naming the op, if a later call passes another
        value for a scalar input that was read at compile time."""
        for source in sources:
            if source in self._checked:
                continue
            value = self._checked[source] = float(source.meta["grapharg"].example)
            anchor = next(n for n in self.graph.nodes if n.op != "placeholder")
            with self.graph.inserting_before(anchor):
                same = self.graph.call_function(torch.eq, (source, value))
                self.graph.call_function(torch._assert_async, (
                    same, f"op_extension.compiler: {op}'s constant {source.name} was {value!r} when the graph "
                          "was compiled and has changed since; recompile (torch._dynamo.reset())"))

    def eps(self, a, op: str) -> float | None:
        """A number for an eps operand (checked at run time if read from an input)."""
        sources: set = set()
        value = self.number(a, sources)
        if value is not None:
            self.check(sources, op)
        return value

    # ---- RMSNorm -------------------------------------------------------------------

    def rms_norms(self) -> None:
        for root in [n for n in self.graph.nodes if _kind(n) in ("rsqrt", "sqrt")]:
            self._rms_norm_at(root)
        for n in [n for n in self.graph.nodes if _kind(n) == "rms_norm"]:
            self._functional_rms_norm(n)

    def _rms_norm_at(self, rsqrt: fx.Node) -> None:
        # rsqrt(mean(xf^2, -1, keepdim=True) + eps), then xf * rsqrt; or the
        # division form, xf / sqrt(mean(xf^2, -1, keepdim=True) + eps), as some
        # hand-written norms have it, which our op computes as the multiply by
        # the reciprocal root: within an ulp or two of float32 of the division.
        if len(rsqrt.args) != 1 or rsqrt.kwargs or not _binary(rsqrt.args[0], "add"):
            return
        division = _kind(rsqrt) == "sqrt"
        plus = rsqrt.args[0]
        var = next((a for a in plus.args if _kind(a) == "mean"), None)
        if var is None or len(var.users) != 1:
            return
        square = var.args[0]
        dims, keepdim = _arg(var, 1, "dim"), _arg(var, 2, "keepdim", False)
        if _kind(square) == "pow" and len(square.args) == 2 and square.args[1] in (2, 2.0) and not square.kwargs:
            xf = square.args[0]
        elif _binary(square, "mul") and square.args[0] is square.args[1]:
            xf = square.args[0]
        else:
            return
        val = _tensor(xf)
        if val is None:
            return
        if not keepdim or (dims if isinstance(dims, (list, tuple)) else [dims]) not in ([-1], [val.dim() - 1]):
            self.report.left_alone.append(f"rms_norm-like at {rsqrt.name}: mean over dim {dims!r}, keepdim={keepdim}")
            return
        normed = _only_user(rsqrt)
        if division:
            if normed is None or not _binary(normed, "div") or normed.args != (xf, rsqrt):
                return
        elif normed is None or not _binary(normed, "mul") or _other(normed, rsqrt) is not xf:
            return
        if val.dtype not in (torch.float32, torch.float64):
            self.report.left_alone.append(
                f"rms_norm-like at {rsqrt.name}: computed in {val.dtype} (no float32 upcast; our op would not "
                "round its squares and mean to that dtype)")
            return
        eps = self.eps(_other(plus, var), "rms_norm")
        if eps is None:
            self.report.left_alone.append(f"rms_norm-like at {rsqrt.name}: eps is not a number at compile time")
            return
        x = _floating_cast(xf)
        upcast = x is not None and _tensor(x) is not None and _tensor(x).is_floating_point()
        x = x if upcast else xf
        if upcast and _tensor(x).dtype == val.dtype:  # x.float() of a float32 x: no cast at all
            xf, upcast = x, False
        # The normalised value cast back to the input's dtype (Llama) is what our
        # op returns for that input: a no-op cast when there was no upcast.
        target, op_input, variant = normed, xf, "float"
        back = _only_user(normed)
        if back is not None and _floating_cast(back) is normed and _tensor(back).dtype == _tensor(x).dtype:
            target, op_input, variant = back, x, "llama" if upcast else "float"
        elif back is not None and _kind(back) == "type_as" and _tensor(back).dtype == _tensor(x).dtype:
            target, op_input, variant = back, x, "llama" if upcast else "float"
        # A weight multiply of the computing dtype right after goes into the op.
        weight = None
        times = _only_user(target)
        op_val = _tensor(op_input)
        if times is not None and _binary(times, "mul"):
            w = _other(times, target)
            wv = _tensor(w)
            if (wv is not None and wv.dim() == 1 and wv.shape[0] == op_val.shape[-1] and wv.dtype == op_val.dtype
                    and _tensor(times).dtype == op_val.dtype and _tensor(times).shape == op_val.shape):
                weight, target = w, times
                variant = "gemma (1 + w)" if variant == "float" and upcast else variant
        self._replace(target, torch.ops.custom.rms_norm.default, (op_input, self._shape(op_input, target), weight, eps))
        self.report.replaced["rms_norm"] += 1
        log.debug("rms_norm (%s) at %s", variant, target.name)

    def _functional_rms_norm(self, n: fx.Node) -> None:
        x, shape, weight = n.args[0], _arg(n, 1, "normalized_shape"), _arg(n, 2, "weight")
        eps = _arg(n, 3, "eps")
        xv = _tensor(x)
        if xv is None or not xv.is_floating_point() or (weight is not None and not _same_dtype(weight, x)):
            return
        if eps is None:
            eps = torch.finfo(xv.dtype).eps
        else:
            eps = self.eps(eps, "rms_norm")
            if eps is None:
                return
        self._replace(n, torch.ops.custom.rms_norm.default, (x, list(shape), weight, eps))
        self.report.replaced["rms_norm"] += 1

    def fused_add_rms_norms(self) -> None:
        for norm in [n for n in self.graph.nodes if n.target is torch.ops.custom.rms_norm.default]:
            total = norm.args[0]
            # A residual: something besides the norm reads the sum (type_as(total)
            # only reads its dtype, as Gemma's norm does).
            readers = [u for u in total.users
                       if u is not norm and not (_kind(u) == "type_as" and u.args[0] is not total)]
            if not _binary(total, "add") or not readers:
                continue
            a, b = total.args
            if not _same_tensor_type(a, b, total):
                continue
            weight = norm.args[2]
            position = _position(self.graph)  # the graph changes between norms: once per norm
            first_user = min(total.users, key=position)
            if weight is not None and position(weight) > position(first_user):
                continue
            with self.graph.inserting_before(first_user):
                fused = self.graph.call_function(torch.ops.custom.fused_add_rms_norm.default,
                                                 (a, b, norm.args[1], weight, norm.args[3]))
                normed = self.graph.call_function(operator.getitem, (fused, 0))
                summed = self.graph.call_function(operator.getitem, (fused, 1))
            normed.meta["example_value"] = _value(norm)
            summed.meta["example_value"] = _value(total)
            norm.replace_all_uses_with(normed)
            self.graph.erase_node(norm)
            total.replace_all_uses_with(summed)
            self.graph.erase_node(total)
            self.report.replaced["rms_norm"] -= 1
            self.report.replaced["fused_add_rms_norm"] += 1

    # ---- GELU-tanh written as its formula ---------------------------------------------
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as Hugging Face's
    # NewGELUActivation and many model files write it.

    def gelu_formulas(self) -> None:
        for tanh in [n for n in self.graph.nodes if _kind(n) == "tanh"]:
            self._gelu_formula_at(tanh)

    def _gelu_formula_at(self, tanh: fx.Node) -> None:
        sources: set = set()
        scaled = lambda n, c: _scaled(n, c, lambda v: self.number(v, sources))  # noqa: E731
        inner = tanh.args[0] if len(tanh.args) == 1 and not tanh.kwargs else None
        shifted = scaled(inner, math.sqrt(2.0 / math.pi))
        if shifted is None or not _binary(shifted, "add"):
            return
        x = next((a for a in shifted.args if isinstance(a, fx.Node) and scaled(_other(shifted, a), 0.044715) is not None
                  and _is_cube(scaled(_other(shifted, a), 0.044715), a)), None)
        one_plus = _only_user(tanh)
        if x is None or one_plus is None or not _binary(one_plus, "add") or self.number(_other(one_plus, tanh)) != 1.0:
            return
        out = _only_user(one_plus)
        if out is None or not _binary(out, "mul"):
            return
        half_x = _other(out, one_plus)
        if not (isinstance(half_x, fx.Node) and scaled(half_x, 0.5) is x and len(half_x.users) == 1):
            return
        xv = _tensor(x)
        if xv is None or not xv.is_floating_point() or _tensor(out) is None or _tensor(out).dtype != xv.dtype:
            return
        self.check(sources, "gelu")
        self._replace(out, torch.ops.custom.gelu.default, (x, "tanh"))
        self.report.replaced["gelu"] += 1

    # ---- GLUs, GELU, softmax, LayerNorm ------------------------------------------------

    def glus(self) -> None:
        for times in [n for n in self.graph.nodes if _binary(n, "mul")]:
            for act in times.args:
                kind = _kind(act)
                if kind not in ("silu", "gelu") or _only_user(act) is not times or act.args[0] is _other(times, act):
                    continue
                gate, up = act.args[0], _other(times, act)
                if not _same_tensor_type(gate, up, times):
                    self.report.left_alone.append(f"{kind} * up at {times.name}: operands differ in shape or dtype")
                    break
                if kind == "silu":
                    if _arg(act, 1, "inplace", False):
                        break
                    self._replace(times, torch.ops.custom.swiglu.default, (gate, up))
                    self.report.replaced["swiglu"] += 1
                else:
                    approximate = _arg(act, 1, "approximate", "none")
                    if act.target is torch.ops.custom.gelu.default:  # counted as a GELU formula
                        self.report.replaced["gelu"] -= 1
                    self._replace(times, torch.ops.custom.geglu.default, (gate, up, approximate))
                    self.report.replaced["geglu"] += 1
                break

    def singles(self) -> None:
        for n in list(self.graph.nodes):
            kind = _kind(n)
            if kind == "gelu" and n.target is not torch.ops.custom.gelu.default:
                x, approximate = n.args[0], _arg(n, 1, "approximate", "none")
                if _tensor(x) is not None and _tensor(x).is_floating_point() and approximate in ("none", "tanh"):
                    self._replace(n, torch.ops.custom.gelu.default, (x, approximate))
                    self.report.replaced["gelu"] += 1
            elif kind == "softmax":
                x, dim = n.args[0], _arg(n, 1, "dim")
                # dtype's position: F.softmax(input, dim, _stacklevel, dtype), torch.softmax(input,
                # dim, dtype), Tensor.softmax(dim, dtype) (self is args[0] here).
                dtype = _arg(n, 3 if n.target is F.softmax else 2, "dtype")
                xv = _tensor(x)
                if xv is not None and dtype == xv.dtype:  # softmax(x, dtype=x.dtype) computes as without it
                    dtype = None
                if isinstance(dim, int) and not isinstance(dim, bool) and dtype is None and xv is not None:
                    self._replace(n, torch.ops.custom.softmax.default, (x, dim))
                    self.report.replaced["softmax"] += 1
                elif dtype is not None:
                    self.report.left_alone.append(f"softmax at {n.name}: computes in {dtype}")
            elif kind == "layer_norm":
                x, shape = n.args[0], _arg(n, 1, "normalized_shape")
                weight, bias, eps = _arg(n, 2, "weight"), _arg(n, 3, "bias"), _arg(n, 4, "eps", 1e-5)
                if _tensor(x) is None or any(p is not None and not _same_dtype(p, x) for p in (weight, bias)):
                    continue
                eps = self.eps(eps, "layer_norm")
                if eps is not None:
                    self._replace(n, torch.ops.custom.layer_norm.default, (x, list(shape), weight, bias, eps))
                    self.report.replaced["layer_norm"] += 1

    # ---- graph surgery -------------------------------------------------------------------

    def _shape(self, x: fx.Node, before: fx.Node) -> list:
        size = _tensor(x).shape[-1]
        if isinstance(size, int):
            return [size]
        with self.graph.inserting_before(before):
            node = self.graph.call_method("size", (x, -1))
        node.meta["example_value"] = size
        return [node]

    def _replace(self, old: fx.Node, op, args) -> fx.Node:
        with self.graph.inserting_before(old):
            new = self.graph.call_function(op, tuple(args))
        new.meta["example_value"] = _value(old)
        old.replace_all_uses_with(new)
        self._erase_dead(old)
        return new

    def _erase_dead(self, node: fx.Node) -> None:
        # The pattern's nodes that nothing reads any more (item() included).
        work, erased = [node], set()
        while work:
            n = work.pop()
            if n in erased or n.users or n.op in ("placeholder", "output"):
                continue
            work.extend(n.all_input_nodes)
            self.graph.erase_node(n)
            erased.add(n)


def _scaled(n, constant: float, number):
    """For n = c * y (either order) with c equal to `constant` to 1e-6, returns y;
    number(operand) gives an operand's value at compile time, or None."""
    if not isinstance(n, fx.Node) or not _binary(n, "mul"):
        return None
    for c, y in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
        if not isinstance(y, fx.Node) or _tensor(y) is None:
            continue
        value = number(c)
        if value is not None and math.isclose(value, constant, rel_tol=1e-6):
            return y
    return None


def _is_cube(n, x: fx.Node) -> bool:
    """n is x^3: pow(x, 3) or x * x * x in any grouping."""
    if _kind(n) == "pow" and len(n.args) == 2 and n.args[0] is x and n.args[1] in (3, 3.0) and not n.kwargs:
        return True
    if not _binary(n, "mul"):
        return False
    a, b = n.args
    square = lambda m: _binary(m, "mul") and m.args[0] is x and m.args[1] is x  # noqa: E731
    return (a is x and square(b)) or (b is x and square(a))


def _same_dtype(a, b) -> bool:
    va, vb = _tensor(a), _tensor(b)
    return va is not None and vb is not None and va.dtype == vb.dtype


def _position(graph: fx.Graph):
    order = {n: i for i, n in enumerate(graph.nodes)}
    return lambda n: order.get(n, -1)


def rewrite(graph: fx.Graph) -> RewriteReport:
    """Rewrites the patterns in a Dynamo (Torch IR) graph in place; returns the report."""
    global _last_report, _graphs
    r = _Rewriter(graph)
    r.gelu_formulas()
    r.rms_norms()
    r.fused_add_rms_norms()
    r.glus()
    r.singles()
    graph.lint()
    r.report.replaced = +r.report.replaced  # drop zero counts
    _graphs += 1
    r.report.graph = _graphs
    _last_report = r.report
    log.info("%s", r.report)
    return r.report


# ---- the backend and the Inductor pass -------------------------------------------------


def backend(gm: fx.GraphModule, example_inputs, options: dict | None = None):
    """The "op_extension" torch.compile backend: rewrites the graph, then compiles it
    with ``options["inner"]``: "inductor" (the default; the other options are
    Inductor config patches), any registered backend name, e.g. "aot_eager", or a
    backend function."""
    options = dict(options or {})
    inner = options.pop("inner", "inductor")
    rewrite(gm.graph)
    gm.recompile()
    if callable(inner):  # a backend function, e.g. aot_autograd(fw_compiler=...)
        return inner(gm, example_inputs, **options)
    if inner == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs, config_patches=options or None)
    if options:
        raise ValueError(f"op_extension backend: options {sorted(options)} apply to inner='inductor' only "
                         f"(inner={inner!r})")
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend(inner)(gm, example_inputs)


def _make_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class _PreGradRewrite(CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            rewrite(graph)

        def uuid(self):
            # Inductor's cache keys on it: a change of this file is a new pass.
            return get_hash_for_files((__file__,))

    return _PreGradRewrite()


_previous_pass = None


def enable() -> None:
    """Runs the rewrite inside the default backend, as Inductor's pre-grad custom
    pass (torch._inductor.config.pre_grad_custom_pass); disable() puts back what was there."""
    global _previous_pass
    import torch._inductor.config as inductor_config

    current = inductor_config.pre_grad_custom_pass
    if getattr(current, "__class__", None).__name__ == "_PreGradRewrite":
        return
    _previous_pass = current
    inductor_config.pre_grad_custom_pass = _make_pass()


def disable() -> None:
    global _previous_pass
    import torch._inductor.config as inductor_config

    if type(inductor_config.pre_grad_custom_pass).__name__ == "_PreGradRewrite":
        inductor_config.pre_grad_custom_pass = _previous_pass
        _previous_pass = None


def _register_backend() -> None:
    """Registers backend="op_extension" with Dynamo, unless its entry point
    (pyproject.toml, torch_dynamo_backends) is already known: Dynamo then loads and
    registers it itself, and a second registration under the name would fail."""
    from torch._dynamo.backends import registry

    registered = getattr(registry, "_COMPILER_FNS", {})
    pending = getattr(registry, "_BACKENDS", {})  # name -> entry point not loaded yet
    if BACKEND_NAME in registered or pending.get(BACKEND_NAME) is not None:
        return
    registry.register_backend(backend, name=BACKEND_NAME)

