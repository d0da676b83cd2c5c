"""The ops on DTensors (issue 29; docs/distributed.md): every op's sharding rule.

For every op and backward op, each placement its rule accepts and one it must
redistribute (the cases are the op's DISTRIBUTED entries in tests/op_cases/<op>.py,
its backward op's BACKWARD_DISTRIBUTED): the DTensor result (values and placements) and, for the forward
ops, the gradients through op_extension.ops.<op> and DTensor's autograd, against
the single-process result (float32, atol 1e-5). One spawn of gloo workers per
world size (2 and 4) runs every case (tests/process_group.py); rank 0 saves what
each case gave, and the tests here compare it, case by case. The same spawn
runs an RMSNorm + MLP block under parallelize_module (sequence and tensor
parallel) against one process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import op_cases
import op_extension
import process_group
from op_extension import distributed
from op_extension._protos import load_protos

WORLDS = (2, 4)
ATOL = 1e-5
SEED = 29


@dataclass(frozen=True)
class Case:
    """One entry of an op's DISTRIBUTED (or its BACKWARD_DISTRIBUTED) in
    tests/op_cases/<op>.py (op_cases/_kinds.py's Placed), for custom::<op>."""

    name: str
    op: str
    make: object  # generator -> arguments, tensors full-size; op_cases.Missing where the op has no cases
    places: tuple
    out: tuple
    grad: bool = False
    kwargs: dict = field(default_factory=dict)


def _cases(mesh: int) -> list[Case]:
    """Every op's and backward op's cases on a mesh of `mesh` dims, from its test
    data; an op without them gives one "<op>-MISSING" case that fails naming the file."""
    cases = []
    for op, entries in op_cases.each("DISTRIBUTED", op_cases.ALL_OPS):
        if isinstance(entries, op_cases.Missing):
            if mesh == 1:
                cases.append(Case(f"{op}-MISSING", op, entries, (), ()))
            continue
        backward = bool(op_cases.PROTOS[op].backward_of)
        cases += [Case(f"{op}-{p.name}" if mesh == 1 else f"2d-{op}-{p.name}", op, p.make, p.places, p.out,
                       grad=p.grad and not backward, kwargs=p.kwargs) for p in entries if p.mesh == mesh]
    return cases


CASES = _cases(1)
MESH_2D_CASES = _cases(2)


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
    x = op_cases.grand(torch.Generator().manual_seed(SEED), *op_cases.DT_ROWS)
    local = x.chunk(world, dim=1)[rank].clone().requires_grad_()
    out = DTensor.from_local(block(local), mesh, [Shard(1)]).full_tensor()
    _block_loss(out).backward()
    grads = {name: p.grad.full_tensor() for name, p in block.named_parameters()}
    grads["input"] = DTensor.from_local(local.grad, mesh, [Shard(1)]).full_tensor()
    return {"output": out.detach(), "grads": grads,
            "norm_weight_grad": tuple(_code(p) for p in block.norm.weight.grad.placements)}


# ---- a Llama-style decoder, trained under tensor + sequence parallel and under FSDP2 ----------------------------

VOCAB, HIDDEN, HEADS, HEAD_DIM, FFN, SEQ, BATCH, LAYERS, STEPS, LR = 32, 16, 4, 4, 32, 8, 2, 2, 3, 0.1


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
                                                              for _ in range(4))

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        # -1 heads: all of them in one process, a rank's share under tensor parallel.
        q, k, v = (proj(x).view(b, s, -1, HEAD_DIM).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = op_extension.ops.rotary_embedding(q, k, cos, sin)
        causal = torch.full((s, s), float("-inf")).triu(1)
        attn = op_extension.ops.softmax(q @ k.transpose(-1, -2) * HEAD_DIM ** -0.5 + causal, -1) @ v
        return self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(HIDDEN, FFN, bias=False), torch.nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = torch.nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(op_extension.ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = (op_extension.nn.CustomRMSNorm(HIDDEN, eps=1e-6)
                                                               for _ in range(2))
        self.self_attn, self.mlp = _Attention(), _Mlp()

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Decoder(torch.nn.Module):
    """Llama's structure at toy size, every op of it op_extension's but the linears,
    the embedding and the attention's matmuls."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(SEED)
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(_Layer() for _ in range(LAYERS))
        self.norm = op_extension.nn.CustomRMSNorm(HIDDEN, eps=1e-6)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, op_extension.nn.CustomRMSNorm):
                    module.weight.uniform_(0.5, 1.5)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        angles = torch.outer(torch.arange(SEQ).float(), inv_freq).repeat(1, 2)
        self.cos, self.sin = angles.cos().expand(BATCH, SEQ, HEAD_DIM), angles.sin().expand(BATCH, SEQ, HEAD_DIM)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.norm(x))


def _tokens(step):
    g = torch.Generator().manual_seed(SEED + 10 + step)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _train(model, steps=STEPS):
    """Plain SGD: the losses and the gradients of the last step, by parameter name."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        tokens, labels = _tokens(step)
        optimizer.zero_grad()
        logits = _full(model(tokens))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        loss.backward()
        losses.append(loss.detach())
        grads = {name.removeprefix("_orig_mod."): _full(p.grad).detach().clone()
                 for name, p in model.named_parameters()}
        optimizer.step()
    return {"losses": torch.stack(losses), "grads": grads}


def _tensor_sequence_parallel(model, mesh):
    """Megatron-style: the norms sequence parallel, q/k/v and gate/up column-wise,
    o/down row-wise back to the sequence split, the logits replicated."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    plan = {"embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    for i in range(LAYERS):
        plan |= {f"layers.{i}.input_layernorm": SequenceParallel(),
                 f"layers.{i}.post_attention_layernorm": SequenceParallel(),
                 **{f"layers.{i}.self_attn.{p}": ColwiseParallel(input_layouts=Shard(1))
                    for p in ("q_proj", "k_proj", "v_proj")},
                 f"layers.{i}.self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
                 f"layers.{i}.mlp.gate_proj": ColwiseParallel(input_layouts=Shard(1)),
                 f"layers.{i}.mlp.up_proj": ColwiseParallel(input_layouts=Shard(1)),
                 f"layers.{i}.mlp.down_proj": RowwiseParallel(output_layouts=Shard(1))}
    return parallelize_module(model, mesh, plan)


def _fully_shard(model, mesh):
    from torch.distributed.fsdp import fully_shard

    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _run_decoders(mesh):
    runs = {"tp_sp": _train(_tensor_sequence_parallel(_Decoder(), mesh)),
            "fsdp2": _train(_fully_shard(_Decoder(), mesh))}
    if mesh.size() == 2:  # compiled once (on 2 ranks: compiling on 4 processes of 2 cores takes minutes)
        runs["tp_sp_compiled"] = _train(torch.compile(_tensor_sequence_parallel(_Decoder(), mesh)))
    return runs


def _worker(rank: int, world: int, store: str, out: str, wanted: str) -> None:
    """Runs what the selected tests of this world read (`wanted`: a JSON file of
    case names and the sections "block" and "decoder"), so that `pytest -k` of
    a few cases spawns no more work than they need."""
    import json

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    wanted = set(json.loads(Path(wanted).read_text()))
    process_group.init(rank, world, store)
    mesh = init_device_mesh("cpu", (world,))
    results = {}
    meshes = [(CASES, mesh)] + ([(MESH_2D_CASES, init_device_mesh("cpu", (2, 2)))] if world == 4 else [])
    for cases, case_mesh in meshes:
        for case in cases:
            if case.name not in wanted or isinstance(case.make, op_cases.Missing):
                continue
            try:
                results[case.name] = _run_case(case, case_mesh, rank, world)
            except Exception as e:  # every rank fails alike: the op's own error, reported by the case
                results[case.name] = {"error": f"{type(e).__name__}: {e}"}
    for name, run in (("block", lambda: _run_block(mesh, rank, world)), ("decoder", lambda: _run_decoders(mesh))):
        if name not in wanted:
            continue
        try:
            results[name] = run()
        except Exception as e:
            import traceback

            results[name] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"}
    results["local_shapes"] = distributed.LOCAL_SHAPES
    if rank == 0:
        torch.save(results, out)
    dist.barrier()
    dist.destroy_process_group()


def _wanted(items, world: int) -> list[str]:
    """What the selected tests of this file read for `world`: case names, "block", "decoder"."""
    found = set()
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if Path(str(item.fspath)).name != Path(__file__).name or params.get("world", 4) != world:
            continue
        if "case" in params:
            found.add(params["case"].name)
        elif "block" in item.name:
            found.add("block")
        elif "decoder" in item.name:
            found.add("decoder")
    return sorted(found)


_RUNS: dict[int, dict] = {}


@pytest.fixture(scope="module")
def results(tmp_path_factory, request):
    """world -> {case name: what rank 0 saw}, one spawn per world size, on first use,
    running what the session's selected tests of that world read."""

    def get(world):
        if world not in _RUNS:
            folder = tmp_path_factory.mktemp(f"world{world}")
            wanted = folder / "wanted.json"
            wanted.write_text(json.dumps(_wanted(request.session.items, world)))
            workers = process_group.run("test_distributed", "_worker", world, folder, str(folder / "results.pt"),
                                        str(wanted), deadline_s=120)
            assert process_group.all_passed(workers), process_group.report(workers)
            _RUNS[world] = torch.load(folder / "results.pt")
        return _RUNS[world]

    return get


# ---- the cases --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_dtensor_result_equals_one_process(results, world, case):
    if isinstance(case.make, op_cases.Missing):
        case.make()  # fails, naming the file to write
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
    x = op_cases.grand(torch.Generator().manual_seed(SEED), *op_cases.DT_ROWS).requires_grad_()
    out = block(x)
    _block_loss(out).backward()
    torch.testing.assert_close(got["output"], out.detach(), atol=ATOL, rtol=0)
    want = {name: p.grad for name, p in block.named_parameters()} | {"input": x.grad}
    assert got["grads"].keys() == want.keys()
    for name, grad in want.items():
        torch.testing.assert_close(got["grads"][name], grad, atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
    # The norm's weight gradient is each rank's rows' share, a sum DTensor reduces when it is read.
    assert got["norm_weight_grad"] == ("P",)


@pytest.mark.parametrize("world,parallel", [(w, p) for w in WORLDS for p in ("tp_sp", "fsdp2")]
                         + [(2, "tp_sp_compiled")])
def test_decoder_trains_as_one_process(results, world, parallel):
    """A Llama-style decoder of op_extension's ops, three SGD steps under tensor +
    sequence parallel (Megatron's plan; on 2 ranks once more under torch.compile)
    and under FSDP2: the losses and the last step's gradients of every parameter
    equal one process's (float32, 1e-5)."""
    got = results(world)["decoder"]
    assert "error" not in got, got.get("error")
    got = got[parallel]
    want = _train(_Decoder())
    torch.testing.assert_close(got["losses"], want["losses"], atol=ATOL, rtol=0)
    assert got["grads"].keys() == want["grads"].keys()
    for name, grad in want["grads"].items():
        torch.testing.assert_close(got["grads"][name], grad, atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("case", MESH_2D_CASES, ids=[c.name for c in MESH_2D_CASES])
def test_dtensor_result_on_a_2d_mesh_equals_one_process(results, case):
    test_dtensor_result_equals_one_process(results, 4, case)


# ---- the rules and their registration ---------------------------------------------------------------------------


def test_every_op_has_a_sharding_rule():
    """Every op and backward op of op_protos/ has its SHARDING rule (its cases:
    tests/op_cases/<op>.py's DISTRIBUTED, which test_op_cases requires)."""
    without = sorted(set(load_protos()) - set(distributed.rules()))
    assert not without, f"no SHARDING rule in their op module (op_extension/op_defs/): {without}"


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
