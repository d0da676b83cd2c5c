"""What the benchmark runs comes from the prototypes and each op's BENCH
(op_defs/<op>.py): every built op has rows, an op without BENCH or without a
build is skipped with a note, and each op's minimum bytes are those
benchmarks/README.md documents. Nothing is timed here."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest
import torch

from op_extension import _built, _protos, bench, ops
from op_extension.bench_spec import Bench

ROOT = Path(__file__).resolve().parents[1]


def test_every_built_op_with_a_prototype_has_rows():
    forward = {name for name, p in _protos.load_protos().items() if not p.backward_of}
    built = {name for name in forward if name in _built.BUILT}
    assert set(bench.PLAN.benches) == built and built, bench.PLAN.skipped
    assert {name: why for name, why in bench.PLAN.skipped.items() if name in built} == {}
    assert bench.ALL_OPS == tuple(bench.PLAN.benches) and set(bench.BYTE_FORMULAS) == built
    # Every op's setup runs as the dispatch section calls it too (hidden 8).
    for name in bench.ALL_OPS:
        s = bench.make_setup(ops, name, 2, torch.float32, torch.device("cpu"), hidden=8)
        assert {"ours", "composite"} <= set(s.impls) and s.numel > 0, name


def _with_module(name, module):
    """An op module lookup (op_defs.module's `find`) that gives `module` for op `name`."""
    return lambda op: module if op == name else importlib.import_module(f"op_extension.op_defs.{op}")


def _one_forward_op():
    protos = _protos.load_protos()
    name = next(name for name in bench.ALL_OPS if protos[name].backward)
    return protos, name


def test_an_op_without_bench_or_build_is_skipped_with_a_note():
    protos, name = _one_forward_op()
    plan = bench.load_plan(find=_with_module(name, types.ModuleType(name)))
    assert name not in plan.benches
    assert plan.skipped[name].startswith(f"no BENCH in op_extension/op_defs/{name}.py")
    assert set(plan.benches) == set(bench.PLAN.benches) - {name}  # the others as they were

    unbuilt = bench.load_plan(built={n: p for n, p in _built.BUILT.items() if n != name})
    assert name not in unbuilt.benches and unbuilt.skipped[name].startswith("not built")

    wrong = types.ModuleType(name)
    wrong.BENCH = {"setup": None}
    with pytest.raises(TypeError, match=f"op_defs/{name}.py: BENCH must be an op_extension.bench_spec.Bench"):
        bench.load_plan(find=_with_module(name, wrong))


def test_the_cli_says_why_a_skipped_op_has_no_rows(monkeypatch, capsys):
    _, name = _one_forward_op()
    plan = bench.load_plan(find=_with_module(name, types.ModuleType(name)))
    monkeypatch.setattr(bench.cli, "PLAN", plan)
    with pytest.raises(SystemExit):
        bench.parse_args(["--ops", name])
    assert f"{name} has no rows: no BENCH in op_extension/op_defs/{name}.py" in capsys.readouterr().err


def test_table_order_is_each_bench_order_then_the_name():
    name = bench.ALL_OPS[-1]
    first = types.ModuleType(name)
    first.BENCH = Bench(bench.PLAN.benches[name].setup, (1, 0), (1, 0), order=-1)
    plan = bench.load_plan(find=_with_module(name, first))
    assert next(iter(plan.benches)) == name
    ranks = [(b.order, n) for n, b in bench.PLAN.benches.items()]
    assert ranks == sorted(ranks)


# ---- the byte formulas, as benchmarks/README.md documents them ----------------------------

def _documented_formulas():
    """{op: {"fwd": (a, b), "bwd": ..., "fwd+bwd": ...}} from README's table, where
    a cell ends in `aN s` or `(aN + bH) s`."""
    text = (ROOT / "benchmarks" / "README.md").read_text()
    table = text[text.index("| op | fwd | bwd | fwd+bwd |"):].split("\n\n")[0].splitlines()[2:]

    def coefficients(cell):
        formula = re.findall(r"`([^`]*)`", cell)[-1]
        m = re.fullmatch(r"\(?(\d*)N(?: \+ (\d*)H\))? s", formula)
        assert m, formula
        return int(m[1] or 1), int(m[2] or 1) if m[2] is not None else 0

    out = {}
    for line in table:
        ops_, *cells = [c.strip() for c in line.strip("|").split("|")]
        for op in ops_.split(", "):
            out[op] = dict(zip(("fwd", "bwd", "fwd+bwd"), map(coefficients, cells)))
    return out


DOCUMENTED = _documented_formulas()
TOKENS = 16
# README: N = tokens * 4096 (tokens * 11008 for swiglu/geglu; rotary_embedding q and k
# together, tokens * (4096 + 1024)); H = 4096 (rotary_embedding one cos/sin table, tokens * 128).
N_H = {op: (TOKENS * 4096, 4096) for op in DOCUMENTED}
N_H.update(swiglu=(TOKENS * 11008, 0), geglu=(TOKENS * 11008, 0),
           rotary_embedding=(TOKENS * (4096 + 1024), TOKENS * 128))


def test_readme_documents_every_op_of_the_plan():
    assert set(DOCUMENTED) == set(bench.ALL_OPS)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_byte_formula_gives_the_documented_figures(name):
    doc = DOCUMENTED[name]
    assert bench.BYTE_FORMULAS[name] == {"fwd": doc["fwd"], "bwd": doc["bwd"]}
    assert tuple(map(sum, zip(doc["fwd"], doc["bwd"]))) == doc["fwd+bwd"]
    s = bench.make_setup(ops, name, TOKENS, torch.float32, torch.device("cpu"))
    n, h = N_H[name]
    assert s.numel == n
    if doc["fwd+bwd"][1]:
        assert s.weight_numel == h
    for direction, (a, b) in (("fwd", doc["fwd"]), ("fwd+bwd", doc["fwd+bwd"])):
        assert bench.bytes_moved(name, direction, s.numel, s.weight_numel, 4) == (a * n + b * h) * 4
        assert bench.formula_text(name, direction) == (f"({a}*N + {b}*H) * s" if b else f"{a}*N*s")


def test_rms_norm_figures_as_written():
    # One shape spelled out: 16 rows of 4096 float32, forward reads x and w and writes y.
    assert bench.bytes_moved("rms_norm", "fwd", 16 * 4096, 4096, 4) == 540_672
    assert bench.bytes_moved("rms_norm", "fwd+bwd", 16 * 4096, 4096, 4) == 1_359_872


# ---- the traffic model beside each row (bench/traffic.py) ---------------------------------


def test_the_traffic_column_comes_from_the_ops_own_custom_calls():
    """--traffic runs a row's `ours` on the CPU, records the torch.ops.custom calls
    it makes (the forward, and the backward for fwd+bwd) and counts them on the
    CUDA harness: the bench names no op for it."""
    from op_extension.bench.traffic import harness_traffic, recorded_calls

    calls = [c[0] for c in recorded_calls(ops, "rms_norm", "fwd+bwd", torch.float32)]
    assert calls == ["rms_norm", "rms_norm_backward"]
    fwd = harness_traffic(ops, "softmax", "fwd", torch.float32)
    both = harness_traffic(ops, "softmax", "fwd+bwd", torch.float32)
    # softmax meets the traffic targets: its minimum, in one launch per direction.
    assert {k: fwd[k] for k in ("model", "launches", "tokens")} == {"model": pytest.approx(1.0), "launches": 1,
                                                                     "tokens": 16}
    assert both["launches"] == 2 and both["model"] == pytest.approx(1.0)
    # The weight re-read by each of the backward's 16 groups of one row shows.
    rms = harness_traffic(ops, "rms_norm", "fwd+bwd", torch.float32)
    assert rms["model"] > 1.1
    # Per launch: which op's call made it, the kernel, its share of the row's bytes.
    assert [launch["op"] for launch in both["per_launch"]] == ["softmax", "softmax_backward"]
    assert all("softmax" in launch["kernel"] and "<" not in launch["kernel"] for launch in both["per_launch"])
    assert [launch["op"] for launch in rms["per_launch"]][0] == "rms_norm"
    assert len(rms["per_launch"]) == rms["launches"]
    assert sum(launch["share"] for launch in rms["per_launch"]) == pytest.approx(1.0)
    # softmax's forward reads x and writes y, its backward reads y and dy and writes dx:
    # 2 and 3 tensors of the same size.
    assert [launch["share"] for launch in both["per_launch"]] == [pytest.approx(0.4), pytest.approx(0.6)]


def test_the_table_shows_the_model_only_when_measured():
    import io

    from op_extension.bench.report import print_table

    row = {"op": "softmax", "direction": "fwd", "dtype": "float32", "tokens": 16, "impls": {"ours": {"median_us": 3.0}},
           "errors": {}, "gbps": 1.0, "pct_copy_bw": 50.0}
    plain, with_model = io.StringIO(), io.StringIO()
    print_table([row], plain)
    launches = [{"op": "softmax", "kernel": "softmax_forward_kernel", "bytes": 300, "share": 0.25},
                {"op": "softmax_backward", "kernel": "softmax_backward_kernel", "bytes": 900, "share": 0.75}]
    occupancy = {"warps_per_sm": 15.5, "active_sms": 64, "sms": 132, "per_launch": []}
    print_table([row | {"harness": {"model": 1.234, "launches": 2, "tokens": 16, "per_launch": launches},
                        "occupancy": occupancy}], with_model)
    assert "model" not in plain.getvalue() and "launches:" not in plain.getvalue()
    assert "#   softmax fwd f32: softmax_forward_kernel 25% · softmax_backward_kernel 75%" in with_model.getvalue()
    header, _, line = with_model.getvalue().splitlines()[:3]
    words = header.split()
    assert words[words.index("%copy") + 1:words.index("%copy") + 4] == ["model", "launch", "warps/SM"]
    assert "1.23x" in line.split() and "16 on 64 SMs" in line


def test_the_occupancy_column_plans_the_rows_launches_at_their_own_shape():
    """harness_occupancy plans the row's launches (forward and backward) on the
    harness at the row's tokens, without running them, and models each."""
    from op_extension.bench.traffic import harness_occupancy

    occ = harness_occupancy(ops, "rms_norm", "fwd+bwd", torch.bfloat16, tokens=2048)
    kernels = [launch["kernel"] for launch in occ["per_launch"]]
    assert kernels == ["rms_norm_forward_kernel", "rms_norm_backward_kernel", "sum_partials_kernel"]
    assert occ["sms"] == 132 and occ["active_sms"] <= 132
    assert occ["warps_per_sm"] == min(launch["warps_per_sm"] for launch in occ["per_launch"]) > 0
    small = harness_occupancy(ops, "rms_norm", "fwd", torch.bfloat16, tokens=16)
    # 16 rows, 4 to a block: 4 blocks, 4 SMs.
    assert small["active_sms"] == 4


def test_hidden_widens_the_rows_of_the_ops_that_take_it():
    """--hidden N replaces the last dim of the ops whose rows are [tokens, HIDDEN]
    (add, gelu, the norms, softmax), in the timed rows and the traffic column
    alike; swiglu/geglu (11008) and rotary_embedding (heads x head dim) keep
    their shapes. A bad value is refused before anything runs."""
    from op_extension.bench.cli import parse_args
    from op_extension.bench.plan import make_setup, row_hidden
    from op_extension.bench.traffic import recorded_calls

    assert row_hidden("rms_norm", 16384) == 16384 and row_hidden("add", 16384) == 16384
    assert row_hidden("swiglu", 16384) is None and row_hidden("rotary_embedding", 16384) is None
    assert row_hidden("rms_norm", None) is None
    setup = make_setup(ops, "layer_norm", 2, torch.float32, "cpu", row_hidden("layer_norm", 16384))
    assert setup.shape == (2, 16384) and setup.weight_numel == 16384
    (name, args, _), = recorded_calls(ops, "rms_norm", "fwd", torch.float32, tokens=2, hidden=16384)
    assert name == "rms_norm" and args[0].shape == (2, 16384)
    assert parse_args(["--hidden", "65536"]).hidden == 65536
    with pytest.raises(SystemExit):
        parse_args(["--hidden", "0"])
