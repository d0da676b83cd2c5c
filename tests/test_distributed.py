"""The ops on DTensors (issue 29; docs/distributed.md): every op's sharding rule.

For every op and backward op, each placement its rule accepts and one it must
redistribute: the DTensor result (values and placements) and, for the forward
ops, the gradients through op_extension.ops.<op> and DTensor's autograd, against
the single-process result (float32, atol 1e-5). One spawn of gloo workers per
world size (2 and 4) runs every case (tests/process_group.py); rank 0 saves what
each case gave, and the tests here compare it, case by case. The same spawn
runs an RMSNorm + MLP block under parallelize_module (sequence and tensor
parallel) against one process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

import pytest
import torch

import op_extension
import process_group
from op_extension import distributed
from op_extension._protos import load_protos

WORLDS = (2, 4)
ATOL = 1e-5
SEED = 29


@dataclass(frozen=True)
class Case:
    """torch.ops.custom.<op>(*args, **kwargs) with each tensor argument placed as
    `places` says ("R", "S<dim>", "P": Replicate, Shard, Partial sum); `out`
    the placements of the outputs, or a tuple of the ones DTensor may pick
    where it redistributes. `grad`: also the gradients of the tensor arguments
    through op_extension.ops.<op>."""

    name: str
    op: str
    make: object  # generator -> (args, kwargs), tensors full-size
    places: tuple
    out: tuple
    grad: bool = False
    kwargs: dict = field(default_factory=dict)


def _x(g, *shape):
    return torch.randn(*shape, generator=g)


ROWS = (4, 8, 16)  # [batch, sequence, hidden]: every dim splits on 4 ranks
ANY = ("R", "S0", "S1", "S2")  # what DTensor may pick for a [4, 8, 16] output


def _cases():
    cases = []

    def add(name, op, make, places, out, grad=None, **kwargs):
        cases.append(Case(f"{op}-{name}", op, make, tuple(places), tuple(out),
                      grad=not op.endswith("_backward") if grad is None else grad, kwargs=kwargs))

    # ---- elementwise: any dim; Partial where linear
    def activations(n):
        return lambda g: [_x(g, *ROWS) for _ in range(n)]

    x1, x2, x3 = activations(1), activations(2), activations(3)
    for p in ("R", "S0", "S1", "S2"):
        add(p, "gelu", x1, [p], [p])
        add(p, "gelu_backward", x2, [p, p], [p])
        add(p, "swiglu", x2, [p, p], [p])
        add(p, "swiglu_backward", x3, [p, p, p], [p, p])
        add(p, "geglu", x2, [p, p], [p], approximate="tanh")
        add(p, "geglu_backward", x3, [p, p, p], [p, p])
        add(p, "add", x2, [p, p], [p], alpha=0.5)
    add("P", "gelu_backward", x2, ["P", "R"], ["P"])
    add("up-P", "swiglu", x2, ["R", "P"], ["P"])
    add("P", "swiglu_backward", x3, ["P", "R", "R"], ["P", "P"])
    add("up-P", "geglu", x2, ["R", "P"], ["P"])
    add("P", "geglu_backward", x3, ["P", "R", "R"], ["P", "P"])
    add("P+P", "add", x2, ["P", "P"], ["P"], alpha=0.5)
    # gelu is not linear: a Partial input is summed first.
    add("P-redistributed", "gelu", x1, ["P"], [ANY])
    add("gate-P-redistributed", "swiglu", x2, ["P", "R"], [ANY])
    add("S0-S1-redistributed", "gelu_backward", x2, ["S0", "S1"], [ANY])

    # ---- add with broadcasting; add_backward sums over the broadcast dims
    def bias(g):
        return [_x(g, *ROWS), _x(g, 16)]

    add("bias-S0", "add", bias, ["S0", "R"], ["S0"], alpha=0.5)
    add("bias-S2", "add", bias, ["S2", "S0"], ["S2"], alpha=0.5)
    add("bias-R", "add", bias, ["R", "R"], ["R"], alpha=0.5)
    add("bias-P+P", "add", bias, ["P", "P"], ["P"], alpha=0.5)
    add("P+R-redistributed", "add", x2, ["P", "R"], [ANY + ("P",)], alpha=0.5)
    for place, size, out in (("S0", [16], "P"), ("S2", [16], "S0"), ("S1", [4, 8, 16], "S1"),
                              ("S0", [1, 8, 16], "P"), ("S1", [1, 8, 16], "S1"), ("R", [16], "R"),
                              ("P", [8, 16], "P")):
        add(f"{place}-to-{size}", "add_backward", lambda g, size=size: [_x(g, *ROWS), size], [place], [out],
            alpha=0.5)

    # ---- row ops: the leading dims; weight and bias gradients Partial when the rows are split
    def norm(n_params, shape=(16,)):
        return lambda g: [_x(g, *ROWS), list(shape)] + [_x(g, *shape) for _ in range(n_params)]

    def norm_backward(n_params, shape=(16,)):
        return lambda g: [_x(g, *ROWS), _x(g, *ROWS), list(shape)] + [_x(g, *shape) for _ in range(n_params)]

    for p in ("R", "S0", "S1"):
        summed = "R" if p == "R" else "P"
        add(p, "rms_norm", norm(1), [p, "R"], [p])
        add(p, "rms_norm_backward", norm_backward(1), [p, p, "R"], [p, summed])
        add(p, "layer_norm", norm(2), [p, "R", "R"], [p])
        add(p, "layer_norm_backward", norm_backward(2), [p, p, "R", "R"], [p, summed, summed])
        add(p, "fused_add_rms_norm", lambda g: [_x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)], [p, p, "R"], [p, p])
        add(p, "fused_add_rms_norm_backward", lambda g: [_x(g, *ROWS), _x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)],
            [p, p, p, "R"], [p, summed])
        add(p, "softmax", lambda g: [_x(g, *ROWS), -1], [p], [p])
        add(p, "softmax_backward", lambda g: [_x(g, *ROWS), torch.softmax(_x(g, *ROWS), -1), -1], [p, p], [p])
    # The same input and placements, normalized over [16] then [8, 16]: the second
    # must not reuse the first's cached strategy (the add_backward cases, one
    # grad_output placement and several input_size in a row, check the same).
    add("S1-before-the-cache-case", "rms_norm", norm(0), ["S1"], ["S1"], grad=False)
    add("S1-cache-key-redistributed", "rms_norm", norm(0, (8, 16)), ["S1"], [("R", "S0")], grad=False)
    add("no-weight-S0", "rms_norm", norm(0), ["S0"], ["S0"])
    add("no-weight-S0", "rms_norm_backward", norm_backward(0), ["S0", "S0"], ["S0", "R"])
    add("no-params-S1", "layer_norm", norm(0), ["S1"], ["S1"])
    add("no-params-S1", "layer_norm_backward", norm_backward(0), ["S1", "S1"], ["S1", "R", "R"])
    add("P", "rms_norm_backward", norm_backward(1), ["P", "R", "R"], ["P", "P"])
    add("P", "layer_norm_backward", norm_backward(2), ["P", "R", "R", "R"], ["P", "P", "P"])
    add("P", "softmax_backward", lambda g: [_x(g, *ROWS), torch.softmax(_x(g, *ROWS), -1), -1], ["P", "R"], ["P"])
    add("P", "fused_add_rms_norm_backward", lambda g: [_x(g, *ROWS), _x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)],
        ["P", "P", "R", "R"], ["P", "P"])
    add("no-grad-residual-S0", "fused_add_rms_norm_backward", lambda g: [_x(g, *ROWS), None, _x(g, *ROWS), [16],
                                                                         _x(g, 16)], ["S0", "S0", "R"], ["S0", "P"])
    # Split on the normalized dim, or a weight split: redistributed, never computed on the slice.
    rows_only = ("R", "S0", "S1")
    add("S2-redistributed", "rms_norm", norm(1), ["S2", "R"], [rows_only])
    add("weight-S0-redistributed", "rms_norm", norm(1), ["S0", "S0"], [("S0", "R")])
    add("S2-redistributed", "rms_norm_backward", norm_backward(1), ["S2", "S2", "R"], [rows_only, ("R", "P")])
    add("S2-redistributed", "layer_norm", norm(2), ["S2", "R", "R"], [rows_only])
    add("S2-redistributed", "layer_norm_backward", norm_backward(2), ["S2", "S2", "R", "R"],
        [rows_only, ("R", "P"), ("R", "P")])
    add("S2-redistributed", "fused_add_rms_norm", lambda g: [_x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)],
        ["S2", "S2", "R"], [rows_only, rows_only])
    add("S2-redistributed", "fused_add_rms_norm_backward",
        lambda g: [_x(g, *ROWS), _x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)], ["S2", "S2", "S2", "R"],
        [rows_only, ("R", "P")])
    add("S2-redistributed", "softmax", lambda g: [_x(g, *ROWS), -1], ["S2"], [rows_only])
    add("P-redistributed", "softmax", lambda g: [_x(g, *ROWS), 1], ["P"], [("R", "S0", "S2")])
    add("S2-redistributed", "softmax_backward", lambda g: [_x(g, *ROWS), torch.softmax(_x(g, *ROWS), -1), -1],
        ["S2", "S2"], [rows_only + ("P",)])
    add("P-redistributed", "rms_norm", norm(1), ["P", "R"], [rows_only])

    # ---- rotary_embedding: q [batch, heads, seq, head_dim], k with fewer heads;
    # cos/sin [batch, seq, head_dim] split with the batch or the sequence,
    # replicated with the heads (and when broadcast along the batch).
    def rope(batch_of_tables=4):
        return lambda g: [_x(g, 4, 8, 8, 16), _x(g, 4, 4, 8, 16), _x(g, batch_of_tables, 8, 16),
                          _x(g, batch_of_tables, 8, 16)]

    for op in ("rotary_embedding", "rotary_embedding_backward"):
        for p, table in (("R", "R"), ("S0", "S0"), ("S1", "R"), ("S2", "S1")):
            add(p, op, rope(), [p, p, table, table], [p, p])
        add("S0-broadcast-batch", op, rope(1), ["S0", "S0", "R", "R"], ["S0", "S0"])
        add("P", op, rope(), ["P", "P", "R", "R"], ["P", "P"])
        add("S2-tables-replicated", op, rope(), ["S2", "S2", "R", "R"], ["S2", "S2"])
        add("S3-redistributed", op, rope(), ["S3", "S3", "R", "R"], [("R", "S0", "S1", "S2")] * 2)
    return cases


CASES = _cases()


def _mesh_2d_cases():
    """On 4 ranks as a 2 x 2 mesh: a placement per mesh dim ("S0,S1"); DTensor
    expands each rule to both dims."""
    rope = lambda g: [_x(g, 4, 8, 8, 16), _x(g, 4, 4, 8, 16), _x(g, 4, 8, 16), _x(g, 4, 8, 16)]  # noqa: E731
    return [
        Case("2d-rms_norm-S0,S1", "rms_norm", lambda g: [_x(g, *ROWS), [16], _x(g, 16)], ("S0,S1", "R,R"),
             ("S0,S1",), grad=True),
        Case("2d-rms_norm_backward-S0,S1", "rms_norm_backward",
             lambda g: [_x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16)], ("S0,S1", "S0,S1", "R,R"), ("S0,S1", "P,P")),
        Case("2d-layer_norm_backward-S1,S0", "layer_norm_backward",
             lambda g: [_x(g, *ROWS), _x(g, *ROWS), [16], _x(g, 16), _x(g, 16)], ("S1,S0", "S1,S0", "R,R", "R,R"),
             ("S1,S0", "P,P", "P,P")),
        Case("2d-add-bias-S1,S2", "add", lambda g: [_x(g, *ROWS), _x(g, 16)], ("S1,S2", "R,S0"), ("S1,S2",),
             grad=True, kwargs={"alpha": 0.5}),
        Case("2d-rotary_embedding-S0,S2", "rotary_embedding", rope, ("S0,S2", "S0,S2", "S0,S1", "S0,S1"),
             ("S0,S2", "S0,S2"), grad=True),
        Case("2d-softmax-S0,S2-redistributed", "softmax", lambda g: [_x(g, *ROWS), -1], ("S0,S2",),
             (("S0,R", "S0,S0", "S0,S1", "R,R", "R,S0", "R,S1"),)),
    ]


MESH_2D_CASES = _mesh_2d_cases()


def _placement(code):
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Replicate() if code == "R" else Partial() if code == "P" else Shard(int(code[1:]))


def _code(placement):
    from torch.distributed.tensor import Partial, Replicate, Shard

    if isinstance(placement, Replicate):
        return "R"
    if isinstance(placement, Shard):
        return f"S{placement.dim}"
    assert isinstance(placement, Partial) and placement.reduce_op == "sum", placement
    return "P"


def _inputs(case):
    return case.make(torch.Generator().manual_seed(SEED))


def _weights(outs):
    """The loss weights of the outputs: sum(out * weight) is the loss."""
    g = torch.Generator().manual_seed(SEED + 1)
    return [torch.randn(o.shape, generator=g) for o in outs]


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ---- the workers ------------------------------------------------------------------------------------------------


def _distribute(t, code, mesh, rank, world):
    from torch.distributed.tensor import DTensor, distribute_tensor

    if code != "P":  # "S0,S1": a placement per dim of a 2-D mesh
        return distribute_tensor(t, mesh, [_placement(c) for c in code.split(",")])
    # A Partial sum of unequal terms: rank 0 holds t less the others' noise.
    noise = [torch.randn(t.shape, generator=torch.Generator().manual_seed(1000 + r)) for r in range(1, world)]
    local = t - sum(noise) if rank == 0 else noise[rank - 1]
    return DTensor.from_local(local, mesh, [_placement("P")], run_check=False)


def _places_of(args, places):
    """The placement code of each argument, None for one that is not a tensor."""
    codes = iter(places)
    return [next(codes) if isinstance(a, torch.Tensor) else None for a in args]


def _run_case(case, mesh, rank, world):
    args = _inputs(case)

    def placed():
        return [a if code is None else _distribute(a, code, mesh, rank, world)
                for a, code in zip(args, _places_of(args, case.places))]

    outs = _as_tuple(getattr(torch.ops.custom, case.op)(*placed(), **case.kwargs))
    got = {"placements": [",".join(_code(p) for p in o.placements) for o in outs],
           "values": [o.full_tensor() for o in outs]}
    if case.grad:
        leaves = [a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in placed()]
        outs = _as_tuple(getattr(op_extension.ops, case.op)(*leaves, **case.kwargs))
        loss = sum((o.full_tensor() * w).sum() for o, w in zip(outs, _weights(outs)))
        loss.backward()
        got["grads"] = [a.grad.full_tensor() for a in leaves if isinstance(a, torch.Tensor)]
    return got


# ---- a block under tensor and sequence parallel -----------------------------------------------------------------


class _Block(torch.nn.Module):
    """RMSNorm, then a two-layer GELU MLP: a transformer's MLP half."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(SEED)
        self.norm = op_extension.nn.CustomRMSNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        with torch.no_grad():
            self.norm.weight.normal_()

    def forward(self, x):
        return self.down(op_extension.ops.gelu(self.up(self.norm(x))))


def _block_loss(out):
    return (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(SEED + 2))).sum()


def _run_block(mesh, rank, world):
    """The norm sequence parallel (its input split on the sequence), up column-wise
    and down row-wise split, the output split on the sequence again."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    block = parallelize_module(_Block(), mesh, {"norm": SequenceParallel(),
                                                "up": ColwiseParallel(input_layouts=Shard(1)),
                                                "down": RowwiseParallel(output_layouts=Shard(1))})
    x = _x(torch.Generator().manual_seed(SEED), *ROWS)
    local = x.chunk(world, dim=1)[rank].clone().requires_grad_()
    out = DTensor.from_local(block(local), mesh, [Shard(1)]).full_tensor()
    _block_loss(out).backward()
    grads = {name: p.grad.full_tensor() for name, p in block.named_parameters()}
    grads["input"] = DTensor.from_local(local.grad, mesh, [Shard(1)]).full_tensor()
    return {"output": out.detach(), "grads": grads,
            "norm_weight_grad": tuple(_code(p) for p in block.norm.weight.grad.placements)}


def _worker(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    process_group.init(rank, world, store)
    mesh = init_device_mesh("cpu", (world,))
    results = {}
    for case in CASES:
        try:
            results[case.name] = _run_case(case, mesh, rank, world)
        except Exception as e:  # every rank fails alike: the op's own error, reported by the case
            results[case.name] = {"error": f"{type(e).__name__}: {e}"}
    if world == 4:
        mesh_2d = init_device_mesh("cpu", (2, 2))
        for case in MESH_2D_CASES:
            try:
                results[case.name] = _run_case(case, mesh_2d, rank, world)
            except Exception as e:
                results[case.name] = {"error": f"{type(e).__name__}: {e}"}
    try:
        results["block"] = _run_block(mesh, rank, world)
    except Exception as e:
        results["block"] = {"error": f"{type(e).__name__}: {e}"}
    results["local_shapes"] = distributed.LOCAL_SHAPES
    if rank == 0:
        torch.save(results, out)
    dist.barrier()
    dist.destroy_process_group()


_RUNS: dict[int, dict] = {}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """world -> {case name: what rank 0 saw}, one spawn per world size, on first use."""

    def get(world):
        if world not in _RUNS:
            folder = tmp_path_factory.mktemp(f"world{world}")
            workers = process_group.run("test_distributed", "_worker", world, folder, str(folder / "results.pt"),
                                        deadline_s=120)
            assert process_group.all_passed(workers), process_group.report(workers)
            _RUNS[world] = torch.load(folder / "results.pt")
        return _RUNS[world]

    return get


# ---- the cases --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_dtensor_result_equals_one_process(results, world, case):
    got = results(world)[case.name]
    assert "error" not in got, f"custom::{case.op} on {case.places}: {got.get('error')}"
    args = _inputs(case)
    expected = _as_tuple(getattr(torch.ops.custom, case.op)(*args, **case.kwargs))
    assert len(got["placements"]) == len(case.out) == len(expected)
    for i, (placements, want) in enumerate(zip(got["placements"], case.out)):
        allowed = want if isinstance(want, tuple) else (want,)
        if i in distributed._shape_arguments(load_protos()[case.op]) and not results(world)["local_shapes"]:
            # A torch whose DTensor cannot give this output its local shape never splits it.
            allowed = tuple(a for a in allowed if not a.startswith("S")) or ("R", "P")
        assert placements in allowed, f"output {i}: {placements} not in {allowed}"
    for i, (value, want) in enumerate(zip(got["values"], expected)):
        torch.testing.assert_close(value, want, atol=ATOL, rtol=0, msg=lambda m, i=i: f"output {i}: {m}")
    if case.grad:
        leaves = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        outs = _as_tuple(getattr(op_extension.ops, case.op)(*leaves, **case.kwargs))
        sum((o * w).sum() for o, w in zip(outs, _weights(outs))).backward()
        want = [a.grad for a in leaves if isinstance(a, torch.Tensor)]
        assert len(got["grads"]) == len(want)
        for i, (grad, w) in enumerate(zip(got["grads"], want)):
            torch.testing.assert_close(grad, w, atol=ATOL, rtol=0, msg=lambda m, i=i: f"gradient {i}: {m}")


@pytest.mark.parametrize("world", WORLDS)
def test_block_under_tensor_and_sequence_parallel_equals_one_process(results, world):
    got = results(world)["block"]
    assert "error" not in got, got.get("error")
    block = _Block()
    x = _x(torch.Generator().manual_seed(SEED), *ROWS).requires_grad_()
    out = block(x)
    _block_loss(out).backward()
    torch.testing.assert_close(got["output"], out.detach(), atol=ATOL, rtol=0)
    want = {name: p.grad for name, p in block.named_parameters()} | {"input": x.grad}
    assert got["grads"].keys() == want.keys()
    for name, grad in want.items():
        torch.testing.assert_close(got["grads"][name], grad, atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
    # The norm's weight gradient is each rank's rows' share, a sum DTensor reduces when it is read.
    assert got["norm_weight_grad"] == ("P",)


@pytest.mark.parametrize("case", MESH_2D_CASES, ids=[c.name for c in MESH_2D_CASES])
def test_dtensor_result_on_a_2d_mesh_equals_one_process(results, case):
    test_dtensor_result_equals_one_process(results, 4, case)


# ---- the rules and their registration ---------------------------------------------------------------------------


def test_every_op_and_backward_op_has_a_rule_and_a_case():
    names = set(load_protos())
    without = sorted(names - set(distributed.rules()))
    assert not without, f"no SHARDING rule in their op module (op_extension/op_defs/): {without}"
    untested = sorted(names - {c.op for c in CASES})
    assert not untested, f"no case in tests/test_distributed.py: {untested}"


def _python(code):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_importing_the_package_leaves_dtensor_unloaded_and_registers_when_it_loads():
    _python("""
        import sys
        import op_extension
        assert "torch.distributed.tensor" not in sys.modules
        assert op_extension.distributed.REGISTERED == []
        from torch.distributed.tensor import DTensor
        assert sorted(op_extension.distributed.REGISTERED) == sorted(op_extension.distributed.rules())
        propagator = DTensor._op_dispatcher.sharding_propagator
        import torch
        assert torch.ops.custom.rms_norm.default in propagator.op_strategy_funcs
        # The cache key holds normalized_shape (argument 1), not only the tensors.
        assert propagator.op_to_schema_info[torch.ops.custom.rms_norm.default].static_argnum == 1
        assert op_extension.distributed.LOCAL_SHAPES == hasattr(propagator, "op_to_shape_and_stride_idx")
        assert not any(type(f).__name__ == "_WhenImported" for f in sys.meta_path)  # it left
    """)


def test_registers_at_import_when_dtensor_is_already_loaded():
    _python("""
        import sys
        import torch.distributed.tensor
        import op_extension
        assert sorted(op_extension.distributed.REGISTERED) == sorted(op_extension.distributed.rules())
        assert not any(type(f).__name__ == "_WhenImported" for f in sys.meta_path)
    """)
