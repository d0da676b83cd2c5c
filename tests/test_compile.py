"""torch.compile, torch.export and FakeTensor support of the custom ops.

Every forward op of op_protos/ and its backward op, with the data of
tests/op_cases/<op>.py: CALLS (compiled forward + backward), INFERENCE (the
all-ops graph and its export), FAKE and BACKWARD_FAKE (FakeTensor, opcheck).

Every op is reached through the functional API (op_extension.ops), which is what
models call. Compilation is slow on CPU, so each compiled function is built once
per module and shared by the tests that inspect it:

* one compiled function per CALLS case, run forward + backward (inputs requiring
  grad) for two row counts: results equal eager, one Dynamo frame, no
  recompilation, the op is a single node of the Dynamo graph and of the AOT
  forward graph and custom::<op>_backward is a node of the AOT backward graph;
* one compiled function calling every op's INFERENCE cases (no grad);
* torch.export of a small model built from op_extension.nn with a dynamic batch,
  and of a module calling every op's INFERENCE cases with dynamic rows, and their
  save/load round trips;
* FakeTensorMode (static and symbolic shapes) and torch.library.opcheck.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import pytest
import torch
import torch._dynamo
import torch._functorch.config
from torch._inductor.compile_fx import compile_fx, compile_fx_inner
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import op_cases
import op_extension
from op_cases import BACKWARD_OPS, FORWARD_OPS, H, Fake, rand
from op_extension import nn as onn
from op_extension import ops
from reference import DEVICES, CustomOpCalls

pytestmark = pytest.mark.compile

ROWS = (5, 9)  # the first call compiles, the second must reuse the graph
custom = torch.ops.custom


@pytest.fixture(scope="module", autouse=True)
def _no_autograd_cache():
    # A hit in the on-disk AOTAutograd cache skips Inductor's inner compile, and
    # with it the recording of the AOT graphs that these tests inspect.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield


# ---------------------------------------------------------------------------------
# A Dynamo backend that records every graph it sees and compiles with Inductor.
# ---------------------------------------------------------------------------------


class RecordingBackend:
    def __init__(self) -> None:
        self.dynamo_graphs: list[torch.fx.GraphModule] = []
        self.forward_graphs: list[torch.fx.GraphModule] = []  # AOT forward / inference graphs
        self.backward_graphs: list[torch.fx.GraphModule] = []

    @property
    def frame_count(self) -> int:
        return len(self.dynamo_graphs)

    def _inner_compile(self, gm, example_inputs, **kwargs):
        (self.backward_graphs if kwargs.get("is_backward") else self.forward_graphs).append(gm)
        return compile_fx_inner(gm, example_inputs, **kwargs)

    def __call__(self, gm, example_inputs):
        # Dynamo may abandon a compile attempt and restart the analysis of the same
        # frame (e.g. to specialise a Python float): only completed compiles count.
        counts = len(self.forward_graphs), len(self.backward_graphs)
        try:
            compiled = compile_fx(gm, example_inputs, inner_compile=self._inner_compile)
        except Exception:
            del self.forward_graphs[counts[0] :], self.backward_graphs[counts[1] :]
            raise
        self.dynamo_graphs.append(gm)
        return compiled


def cache_entries(fn) -> int:
    """How many compiled variants Dynamo keeps for fn's code (1 = never recompiled)."""
    return len(torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))


def call_targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def custom_calls(gm: torch.fx.GraphModule) -> list[str]:
    """The custom ops called by a graph, as 'rms_norm', 'rms_norm_backward', ..."""
    return [
        t._schema.name.removeprefix("custom::")
        for t in call_targets(gm)
        if isinstance(t, torch._ops.OpOverload) and t.namespace == "custom"
    ]


def _describe(gms) -> str:
    return "\n".join(gm.print_readable(print_output=False) for gm in gms)


def assert_same(actual, expected, what=""):
    # The compiled graph runs the very kernels eager runs: results agree to
    # rounding (float32, tight tolerance).
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{i}]")
        return
    if expected is None:
        assert actual is None, what
        return
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {m}")


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ---------------------------------------------------------------------------------
# One compiled function per CALLS case of every op (each a function f_<case id> of
# tests/op_cases/<op>.py: distinct code objects, as Dynamo caches per code object).
# ---------------------------------------------------------------------------------



@dataclass
class Case:
    op: str
    fn: object  # the Call's function, f_<case id>
    make: object  # rows -> tuple of input tensors

    @property
    def backward(self) -> str:
        """The backward op the compiled backward graph must call."""
        return op_cases.PROTOS[self.op].backward


def _cases() -> dict:
    cases = {}
    for op, calls in op_cases.each("CALLS"):
        if isinstance(calls, op_cases.Missing):
            cases[f"{op}-MISSING"] = calls
            continue
        for call in calls:
            name = call.fn.__name__.removeprefix("f_")
            assert call.fn.__name__ == f"f_{name}" and name.startswith(op) and name not in cases, (
                f"tests/op_cases/{op}.py: CALLS functions are named f_{op}..., once each; got {call.fn.__name__}")
            cases[name] = Case(op, call.fn, call.make)
    return cases


CASES = _cases()
CASE_IDS = tuple(CASES)


@dataclass
class FwdBwdRun:
    backend: RecordingBackend
    errors: list  # every comparison with eager that failed
    cache_entries: int  # compiled variants of the function added by both row counts


def _run_fwd_bwd(op: str, device: str) -> FwdBwdRun:
    case = CASES[op]
    backend = RecordingBackend()
    # Per device: the same code object may already hold another device's graph.
    entries_before = cache_entries(case.fn)
    compiled = torch.compile(case.fn, backend=backend, fullgraph=True, dynamic=True)
    errors = []
    torch.manual_seed(0)
    for rows in ROWS:
        inputs = [t.to(device) for t in case.make(rows)]
        eager_in = [t.clone().requires_grad_() for t in inputs]
        comp_in = [t.clone().requires_grad_() for t in inputs]
        eager_out = _as_tuple(case.fn(*eager_in))
        comp_out = _as_tuple(compiled(*comp_in))
        grads = [torch.randn_like(o) for o in eager_out]
        eager_grads = torch.autograd.grad(eager_out, eager_in, grads)
        comp_grads = torch.autograd.grad(comp_out, comp_in, grads)
        for what, a, e in (("outputs", comp_out, eager_out), ("grads", comp_grads, eager_grads)):
            try:
                assert_same(a, e, f"{op} rows={rows} {what}")
            except AssertionError as exc:
                errors.append(str(exc))
    return FwdBwdRun(backend, errors, cache_entries(case.fn) - entries_before)


@pytest.fixture(scope="module")
def fwd_bwd():
    """(op, device) -> FwdBwdRun, compiled and run once per module (a failure is
    re-raised for each test)."""
    cache: dict[tuple, object] = {}

    def get(op: str, device: str = "cpu") -> FwdBwdRun:
        key = (op, device)
        if key not in cache:
            try:
                cache[key] = _run_fwd_bwd(op, device)
            except Exception as exc:  # noqa: BLE001
                cache[key] = exc
        if isinstance(cache[key], Exception):
            raise cache[key]
        return cache[key]

    return get


@pytest.mark.parametrize("op", CASE_IDS)
def test_compiled_fwd_bwd_matches_eager(fwd_bwd, op, device):
    run = fwd_bwd(op, device)
    assert not run.errors, "\n".join(run.errors)


@pytest.mark.parametrize("op", CASE_IDS)
def test_compiled_fwd_bwd_one_frame_no_recompile(fwd_bwd, op, device):
    run = fwd_bwd(op, device)
    # fullgraph=True already turns a graph break into an error; one frame over
    # both row counts means dynamic=True did not recompile for the new size.
    assert run.backend.frame_count == 1, (
        f"{op}: {run.backend.frame_count} Dynamo graphs for rows {ROWS}:\n{_describe(run.backend.dynamo_graphs)}"
    )
    assert run.cache_entries == 1, f"{op}: recompiled: {run.cache_entries} cache entries"
    assert len(run.backend.forward_graphs) == 1 and len(run.backend.backward_graphs) == 1, (
        f"{op}: {len(run.backend.forward_graphs)} forward and {len(run.backend.backward_graphs)} backward graphs"
    )


@pytest.mark.parametrize("case", CASE_IDS)
def test_compiled_graphs_hold_the_custom_ops(fwd_bwd, case, device):
    run = fwd_bwd(case, device)
    op, backward = CASES[case].op, CASES[case].backward
    (dynamo_gm,) = run.backend.dynamo_graphs
    assert getattr(custom, op).default in call_targets(dynamo_gm), _describe([dynamo_gm])
    assert custom_calls(dynamo_gm) == [op], _describe([dynamo_gm])
    # AOTAutograd keeps the op opaque (no decomposition) and calls its backward op.
    (fw,) = run.backend.forward_graphs
    assert custom_calls(fw) == [op], _describe([fw])
    (bw,) = run.backend.backward_graphs
    assert getattr(custom, backward).default in call_targets(bw), _describe([bw])
    assert custom_calls(bw) == [backward], _describe([bw])


@pytest.mark.parametrize("op", CASE_IDS)
def test_compiled_graph_is_dynamic_in_rows(fwd_bwd, op, device):
    """The row count is a symbol in the Dynamo graph, not a constant of the first call."""
    run = fwd_bwd(op, device)
    (dynamo_gm,) = run.backend.dynamo_graphs
    placeholders = [n for n in dynamo_gm.graph.nodes if n.op == "placeholder"]
    symbolic_dims = [
        d
        for n in placeholders
        if isinstance(n.meta.get("example_value"), torch.Tensor)
        for d in n.meta["example_value"].shape
        if isinstance(d, torch.SymInt)
    ]
    assert symbolic_dims, f"{op}: no symbolic dims in the Dynamo graph:\n{_describe([dynamo_gm])}"


# ---------------------------------------------------------------------------------
# Every op in one inference graph: each op's INFERENCE cases (default: its CALLS),
# one after another, each on its own inputs.
# ---------------------------------------------------------------------------------


def _inference_cases() -> list:
    cases = []
    for op in FORWARD_OPS:
        try:
            calls = op_cases.get(op, "INFERENCE", None) or op_cases.get(op, "CALLS")
        except op_cases.OpCasesError:
            continue  # the CALLS tests fail for it, saying what to write
        cases += [(op, call) for call in calls]
    return cases


INFERENCE = _inference_cases()


def f_all_ops(*groups):
    """groups[i]: the inputs of INFERENCE[i]; returns every output, flat."""
    outs = []
    for (_, call), group in zip(INFERENCE, groups):
        outs += list(_as_tuple(call.fn(*group)))
    return tuple(outs)


def _all_ops_inputs(rows):
    return tuple(tuple(call.make(rows)) for _, call in INFERENCE)


def _on(groups, device):
    return tuple(tuple(t.to(device) for t in group) for group in groups)


def _eager_custom_calls(fn, *inputs) -> list[str]:
    """The custom ops an eager call of fn makes, in order: what its graph must hold."""
    with torch.no_grad(), CustomOpCalls() as calls:
        fn(*inputs)
    return calls.names


@pytest.fixture(scope="module", params=DEVICES)
def all_ops_run(request):
    backend = RecordingBackend()
    entries_before = cache_entries(f_all_ops)
    compiled = torch.compile(f_all_ops, backend=backend, fullgraph=True, dynamic=True)
    results = []
    torch.manual_seed(0)
    with torch.no_grad():
        for rows in ROWS:
            inputs = _on(_all_ops_inputs(rows), request.param)
            results.append((rows, compiled(*inputs), f_all_ops(*inputs)))
    return backend, results, cache_entries(f_all_ops) - entries_before


def test_all_ops_inference_matches_eager(all_ops_run):
    _, results, _ = all_ops_run
    for rows, compiled_out, eager_out in results:
        assert_same(compiled_out, eager_out, f"f_all_ops rows={rows}")


def test_all_ops_inference_single_graph(all_ops_run):
    backend, _, entries = all_ops_run
    assert backend.frame_count == 1, _describe(backend.dynamo_graphs)
    assert entries == 1, f"f_all_ops recompiled: {entries} cache entries"
    (gm,) = backend.dynamo_graphs
    expected = _eager_custom_calls(f_all_ops, *_all_ops_inputs(ROWS[0]))
    assert set(expected) == set(FORWARD_OPS), f"INFERENCE cases call {sorted(set(expected))}"
    assert custom_calls(gm) == expected, _describe([gm])
    # Inference: one graph, no backward, and the ops survive AOTAutograd as they are.
    assert len(backend.forward_graphs) == 1 and not backend.backward_graphs
    assert sorted(custom_calls(backend.forward_graphs[0])) == sorted(expected), _describe(backend.forward_graphs)


def test_explain_reports_no_graph_break():
    inputs = _all_ops_inputs(6)
    explanation = torch._dynamo.explain(f_all_ops)(*inputs)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    assert explanation.op_count >= len(FORWARD_OPS)


# ---------------------------------------------------------------------------------
# A model of the nn wrappers, compiled for training.
# ---------------------------------------------------------------------------------


class Block(torch.nn.Module):
    """Pre-norm step: fused add+RMSNorm -> RMSNorm -> SwiGLU MLP -> add -> GEGLU MLP
    -> LayerNorm -> GELU -> Softmax, using every op of the package."""

    def __init__(self, hidden: int = H, intermediate: int = 2 * H) -> None:
        super().__init__()
        self.fused = onn.FusedAddRMSNorm(hidden, eps=1e-6)
        self.rms = onn.CustomRMSNorm(hidden)
        self.mlp = onn.CustomSwiGLUMLP(hidden, intermediate)
        self.geglu_mlp = onn.CustomGEGLUMLP(hidden, intermediate)
        self.ln = onn.CustomLayerNorm(hidden)
        self.act = onn.CustomGELU("tanh")
        self.softmax = onn.CustomSoftmax(dim=-1)
        with torch.no_grad():  # non-trivial affine parameters
            for p in (self.fused.weight, self.rms.weight, self.ln.weight, self.ln.bias):
                p.add_(0.1 * torch.randn_like(p))

    def forward(self, x, residual):
        h, residual = self.fused(x, residual)
        h = self.mlp(self.rms(h))
        h = ops.add(h, residual, alpha=0.5)
        h = self.geglu_mlp(h)
        h = self.act(self.ln(h))
        return self.softmax(h), residual


BLOCK_OPS = ["fused_add_rms_norm", "rms_norm", "swiglu", "add", "geglu", "layer_norm", "gelu", "softmax"]


def _block_inputs(batch, seq=3):
    return rand(batch, seq, H), rand(batch, seq, H)


def test_compiled_model_training_matches_eager(device):
    torch.manual_seed(0)
    model = Block().to(device)
    backend = RecordingBackend()
    entries_before = cache_entries(Block.forward)
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
    for batch in (2, 5):
        x, r = (t.to(device) for t in _block_inputs(batch))
        model.zero_grad()
        xe, re_ = x.clone().requires_grad_(), r.clone().requires_grad_()
        out_e = model(xe, re_)
        (out_e[0].square().sum() + out_e[1].sum()).backward()
        grads_e = [xe.grad] + [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        xc, rc = x.clone().requires_grad_(), r.clone().requires_grad_()
        out_c = compiled(xc, rc)
        (out_c[0].square().sum() + out_c[1].sum()).backward()
        grads_c = [xc.grad] + [p.grad.clone() for p in model.parameters()]
        # Inductor may fuse the surrounding aten ops (linear, loss): a float32 tolerance.
        torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grads_c, grads_e, rtol=1e-4, atol=1e-5)
    assert backend.frame_count == 1, _describe(backend.dynamo_graphs)
    assert cache_entries(Block.forward) - entries_before == 1
    assert custom_calls(backend.dynamo_graphs[0]) == BLOCK_OPS
    (bw,) = backend.backward_graphs
    assert sorted(custom_calls(bw)) == sorted(f"{op}_backward" for op in BLOCK_OPS), _describe([bw])


# ---------------------------------------------------------------------------------
# torch.export.
# ---------------------------------------------------------------------------------


class AllOps(torch.nn.Module):
    """Every op's INFERENCE cases, as f_all_ops: forward(groups), groups[i] the inputs of case i."""

    def forward(self, groups):
        return f_all_ops(*groups)


@dataclass
class Exported:
    model: torch.nn.Module
    ep: object  # the ExportedProgram
    device: str
    custom_ops: list  # the custom ops its graph must call, in order
    inputs: object  # batch -> the model's positional inputs on the device
    dynamic: list  # (index of the flat user input, dim) that must be symbolic


def _export_block(strict, device) -> Exported:
    model = Block().eval().to(device)
    batch = torch.export.Dim("batch")
    inputs = lambda n: _device_inputs(n, device)  # noqa: E731
    ep = torch.export.export(model, inputs(4), dynamic_shapes=({0: batch}, {0: batch}), strict=strict)
    return Exported(model, ep, device, BLOCK_OPS, inputs, [(0, 0), (1, 0)])


def _row_dims(make) -> list:
    """Per input of make(rows), the dims that are the row count."""
    a, b = make(ROWS[0]), make(ROWS[1])
    return [[d for d, (m, n) in enumerate(zip(x.shape, y.shape)) if m != n] for x, y in zip(a, b)]


def _export_all_ops(strict, device) -> Exported:
    model = AllOps().eval()
    rows = torch.export.Dim("rows")
    dims = [_row_dims(call.make) for _, call in INFERENCE]
    dynamic_shapes = tuple(tuple({d: rows for d in ds} for ds in group) for group in dims)
    inputs = lambda n: (_on(_all_ops_inputs(n), device),)  # noqa: E731
    ep = torch.export.export(model, inputs(4), dynamic_shapes=(dynamic_shapes,), strict=strict)
    flat = [ds for group in dims for ds in group]
    expected = _eager_custom_calls(model, *inputs(4))
    return Exported(model, ep, device, expected, inputs, [(i, d) for i, ds in enumerate(flat) for d in ds])


# Block: a model of the nn wrappers; all_ops: every op of op_protos/.
EXPORT_PARAMS = [(model, strict, device) for model in ("block", "all_ops") for device in DEVICES for strict in (False, True)]


def _device_inputs(batch, device):
    return tuple(t.to(device) for t in _block_inputs(batch))


@pytest.fixture(scope="module", params=EXPORT_PARAMS,
                ids=[("" if m == "block" else f"{m}-") + ("strict" if s else "non_strict") + ("" if d == "cpu" else f"-{d}")
                     for m, s, d in EXPORT_PARAMS])
def exported(request) -> Exported:
    model, strict, device = request.param
    torch.manual_seed(0)
    return (_export_block if model == "block" else _export_all_ops)(strict, device)


def test_export_graph_holds_custom_ops_as_single_nodes(exported):
    ep = exported.ep
    assert custom_calls(ep.graph_module) == exported.custom_ops, ep.graph_module.print_readable(print_output=False)
    for op in exported.custom_ops:
        assert getattr(custom, op).default in call_targets(ep.graph_module)
    if isinstance(exported.model, Block):
        # Nothing but the custom ops, the MLPs' linears and tuple unpacking.
        others = {t for t in call_targets(ep.graph_module) if not (isinstance(t, torch._ops.OpOverload) and t.namespace == "custom")}
        assert others <= {torch.ops.aten.linear.default, operator.getitem}, others
    else:
        assert set(exported.custom_ops) == set(FORWARD_OPS)


def test_export_batch_dim_is_dynamic(exported):
    ep = exported.ep
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user_inputs = [placeholders[name] for name in ep.graph_signature.user_inputs]
    assert exported.dynamic
    for index, dim in exported.dynamic:
        assert isinstance(user_inputs[index].meta["val"].shape[dim], torch.SymInt), (user_inputs[index].name, dim)
    assert len(ep.range_constraints) >= 1


@pytest.mark.parametrize("batch", [4, 9, 1])
def test_exported_module_matches_eager(exported, batch):
    torch.manual_seed(batch)
    inputs = exported.inputs(batch)
    with torch.no_grad():
        assert_same(exported.ep.module()(*inputs), exported.model(*inputs), f"exported batch={batch}")


def test_export_survives_run_decompositions(exported):
    decomposed = exported.ep.run_decompositions()
    # The custom ops have no decomposition: they stay single nodes.
    assert custom_calls(decomposed.graph_module) == exported.custom_ops
    inputs = exported.inputs(3)
    with torch.no_grad():
        assert_same(decomposed.module()(*inputs), exported.model(*inputs), "decomposed")


def test_export_save_load_round_trip(exported, tmp_path):
    path = tmp_path / "model.pt2"
    torch.export.save(exported.ep, path)
    loaded = torch.export.load(path)
    assert custom_calls(loaded.graph_module) == exported.custom_ops
    for batch in (4, 7):
        inputs = exported.inputs(batch)
        with torch.no_grad():
            assert_same(loaded.module()(*inputs), exported.model(*inputs), f"loaded batch={batch}")


# ---------------------------------------------------------------------------------
# FakeTensor: shapes, dtypes and strides without data, static and symbolic.
# ---------------------------------------------------------------------------------


def _default_fake(op) -> dict:
    """An op without FAKE: each of its CALLS, at rows=5, in the dtype asked for."""
    return {"" if i == 0 else str(i): Fake(call.fn, lambda d, make=call.make: tuple(t.to(d) for t in make(5)))
            for i, call in enumerate(op_cases.get(op, "CALLS"))}


def _fake_table(ops, kind) -> dict:
    table = {}
    for op in ops:
        try:
            fakes = op_cases.get(op, "FAKE", None) if kind == "fwd" else op_cases.get(op, "FAKE")
            fakes = _default_fake(op) if fakes is None else fakes
        except op_cases.OpCasesError as e:
            fakes = {"MISSING": op_cases.Missing(e)}
        for key, fake in fakes.items():
            table[op_cases.case_id(op, key, "_")] = (kind, op, fake)
    return table


# id -> (kind, op, Fake): every forward op's FAKE cases, then every backward op's.
FAKES = _fake_table(FORWARD_OPS, "fwd") | _fake_table(BACKWARD_OPS, "bwd")
FAKE_CASES = [(kind, case) for case, (kind, _, _) in FAKES.items()]


def _fake_case(kind, case):
    fake = FAKES[case][2]
    return fake.fn, fake.make


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind,op", FAKE_CASES, ids=[op for _, op in FAKE_CASES])
def test_fake_tensor_mode_matches_real(kind, op, dtype, device):
    fn, make = _fake_case(kind, op)
    torch.manual_seed(0)
    real_inputs = [t.to(device) for t in make(dtype)]
    real_out = _as_tuple(fn(*real_inputs))
    with FakeTensorMode() as mode:
        fake_inputs = [mode.from_tensor(t) for t in real_inputs]
        fake_out = _as_tuple(fn(*fake_inputs))
    assert len(fake_out) == len(real_out)
    for i, (f, r) in enumerate(zip(fake_out, real_out)):
        assert isinstance(f, FakeTensor), f"{op} output {i} is a {type(f).__name__}, not a FakeTensor"
        assert (f.shape, f.dtype, f.device) == (r.shape, r.dtype, r.device), (op, i)
        assert f.stride() == r.stride(), f"{op} output {i}: fake strides {f.stride()} != real {r.stride()}"


@pytest.mark.parametrize("kind,op", FAKE_CASES, ids=[op for _, op in FAKE_CASES])
def test_fake_tensor_symbolic_rows(kind, op):
    """Leading dims symbolic: outputs carry the same symbols, and nothing is specialised."""
    fn, make = _fake_case(kind, op)
    real_inputs = make(torch.float32)
    real_out = _as_tuple(fn(*real_inputs))
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)

    def fake(t):
        # The batch/row sizes (2 and 5) are dynamic; normalised/hidden sizes (3, H) and
        # broadcast 1s are static. Equal sizes share one symbol (duck shaping), as in Dynamo.
        dims = [DimDynamic.DUCK if s in (2, 5) else DimDynamic.STATIC for s in t.shape]
        return mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims))

    with mode:
        fake_inputs = [fake(t) for t in real_inputs]
        fake_out = _as_tuple(fn(*fake_inputs))
    sym_to_size = {}
    for f, r in zip(fake_inputs, real_inputs):
        for s, n in zip(f.shape, r.shape):
            if isinstance(s, torch.SymInt):
                sym_to_size[str(s)] = n
    assert sym_to_size, f"{op}: no symbolic dims in the inputs"
    for i, (f, r) in enumerate(zip(fake_out, real_out)):
        assert f.dtype == r.dtype
        concrete = [sym_to_size[str(s)] if isinstance(s, torch.SymInt) else s for s in f.shape]
        assert concrete == list(r.shape), f"{op} output {i}: symbolic shape {list(f.shape)} does not evaluate to {list(r.shape)}"
        # Every output dim that is a symbolic dim of the inputs stays that symbol.
        for s, n in zip(f.shape, r.shape):
            if n > 1 and n in sym_to_size.values() and not isinstance(s, torch.SymInt):
                pytest.fail(f"{op} output {i}: dim of size {n} was specialised: {list(f.shape)}")
    assert not shape_env.guards, f"{op}: the fake kernel guarded on symbolic sizes: {shape_env.guards}"


def test_fake_kernel_checks_run_on_symbolic_shapes():
    """A mismatch that is certain even for symbolic sizes is reported, as for real tensors."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    with mode:
        x = mode.from_tensor(torch.randn(5, H), symbolic_context=ctx)
        with pytest.raises(ValueError, match="custom::rms_norm"):
            ops.rms_norm(x, (H + 1,))
        with pytest.raises(TypeError, match="custom::gelu"):
            ops.gelu(mode.from_tensor(torch.ones(5, H, dtype=torch.int64), symbolic_context=ctx))
        with pytest.raises(IndexError, match="custom::softmax"):
            ops.softmax(x, 2)


# ---------------------------------------------------------------------------------
# torch.library.opcheck: schema, autograd registration, fake kernel, AOT dispatch.
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,op", FAKE_CASES, ids=[op for _, op in FAKE_CASES])
def test_opcheck(kind, op, device):
    fn, make = _fake_case(kind, op)
    torch.manual_seed(0)
    inputs = [t.to(device) for t in make(torch.float32)]
    # Recover the overload and its full argument list by tracing the call once.
    calls = []

    class Recorder(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "custom":
                calls.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Recorder():
        fn(*inputs)
    assert len(calls) == 1, calls
    func, args, kwargs = calls[0]
    if kind == "fwd":
        args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    result = torch.library.opcheck(func, args, kwargs)
    assert all(v == "SUCCESS" for v in result.values()), result


def test_every_op_is_covered():
    """Every op of op_protos/ is registered, has a functional API, a compiled case,
    an INFERENCE case and FakeTensor/opcheck cases (its backward op too)."""
    registered = {s.name.removeprefix("custom::") for s in torch._C._jit_get_all_schemas() if s.name.startswith("custom::")}
    # The ops without a prototype have their own tests (rotary_embedding_table_backward:
    # tests/test_rotary_embedding_tables.py, compile and opcheck included).
    registered -= op_extension.op_defs.extra_ops()
    assert registered == set(op_cases.ALL_OPS), registered ^ set(op_cases.ALL_OPS)
    assert set(FORWARD_OPS) == set(op_extension.ops.__all__)
    assert {c.op for c in CASES.values() if isinstance(c, Case)} == set(FORWARD_OPS)
    assert {op for op, _ in INFERENCE} == set(FORWARD_OPS)
    faked = {op for _, op, fake in FAKES.values() if not isinstance(fake, op_cases.Missing)}
    assert faked == set(op_cases.ALL_OPS)
