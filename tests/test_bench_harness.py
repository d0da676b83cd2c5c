"""The benchmark harness's bookkeeping, with fake loads and timings (nothing real
is timed): progress output on and off a terminal, the copy baseline and rows
measured again when the machine was busy or a figure is implausible, the '?'
marks for what stays in doubt."""

from __future__ import annotations

import io

import pytest
import torch

from op_extension import bench, ops
from op_extension.bench import COPY_TRIES, PCT_COPY_MAX, SPEEDUP_MAX, SPEEDUP_MIN, CopyBaseline, Timing

QUIET, BUSY = 0.05, 0.6  # shares of the CPUs other processes used


class ScriptedLoad:
    """Stands in for OtherLoad: window i (snapshot .. snapshot) gets shares[i];
    the last share repeats."""

    def __init__(self, *shares):
        self.shares, self.windows = list(shares), 0

    def snapshot(self):
        return ()

    def fraction(self, before, after):
        self.windows += 1
        return self.shares[min(self.windows, len(self.shares)) - 1]


class ScriptedTimings:
    """measure_fn for time_row: the i-th call returns timings[i] (in microseconds
    per impl); the last repeats."""

    def __init__(self, *timings):
        self.timings, self.calls = list(timings), 0

    def __call__(self):
        self.calls += 1
        us = self.timings[min(self.calls, len(self.timings)) - 1]
        return {impl: Timing(t * 1e-6, 0.0, 10) for impl, t in us.items()}, {}


def copy_baseline(gbps_per_try, *shares):
    values = iter(gbps_per_try)
    return CopyBaseline(lambda: next(values), ScriptedLoad(*shares)).measure()


NBYTES = 3 * 4096 * 4 * 16  # 16 rows of an add, float32: ours at 10 us -> 78.6 GB/s
PLAIN = {"ours": 10.0, "native": 20.0, "composite": 30.0}


# ---- progress -------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_off_a_terminal_prints_one_line_per_finished_row():
    out = io.StringIO()
    p = bench.Progress(3, stream=out)
    for row in ("add fwd f32 T=16", "add fwd+bwd f32 T=16"):
        for stage in ("warm-up ours", "warm-up native", "compile compiled", "timing"):
            p.show(f"{row} [{stage}]")
        p.advance(row)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, out.getvalue()
    assert lines[0].startswith("[1/3]") and lines[0].endswith("add fwd f32 T=16")
    assert lines[1].startswith("[2/3]") and lines[1].endswith("add fwd+bwd f32 T=16")
    assert "\r" not in out.getvalue() and "#" not in out.getvalue()


def test_progress_on_a_terminal_keeps_one_live_bar():
    out = Terminal()
    p = bench.Progress(2, stream=out)
    p.show("add fwd f32 T=16 [warm-up ours]")
    p.advance("add fwd f32 T=16")
    assert out.getvalue().count("\r") == 2 and "\n" not in out.getvalue()
    assert "[##############..............] 1/2" in out.getvalue()
    p.close()
    assert out.getvalue().endswith("\n")


# ---- the copy baseline ----------------------------------------------------------

def test_copy_baseline_is_measured_again_while_the_machine_is_busy():
    copy = copy_baseline([0.05, 20.0], BUSY, QUIET)
    assert copy.attempts == 2 and copy.gbps == 20.0 and not copy.busy


def test_copy_baseline_gives_up_after_its_tries_and_says_busy():
    copy = copy_baseline([0.05] * 10, BUSY)
    assert copy.attempts == COPY_TRIES and copy.busy and copy.others == BUSY


def test_copy_baseline_reports_an_error_without_retrying():
    def fail():
        raise RuntimeError("no memory\nmore")

    copy = CopyBaseline(fail, ScriptedLoad(BUSY)).measure()
    assert copy.gbps is None and copy.error == "RuntimeError: no memory" and copy.attempts == 1


# ---- plausibility ---------------------------------------------------------------

def test_plausibility_bounds():
    def fig(pct, speedup):
        return {"impls": {}, "pct_copy_bw": pct, "speedup_vs_native": speedup}

    assert bench.implausible(fig(PCT_COPY_MAX, SPEEDUP_MIN)) == {}
    assert bench.implausible(fig(120.0, SPEEDUP_MAX)) == {}
    assert set(bench.implausible(fig(PCT_COPY_MAX + 1, 1.0))) == {"pct_copy_bw"}
    assert set(bench.implausible(fig(50.0, 0.0))) == {"speedup_vs_native"}
    assert set(bench.implausible(fig(28407.0, 406.0))) == {"pct_copy_bw", "speedup_vs_native"}
    assert bench.implausible(fig(None, 1.0)) == {}  # no copy baseline: no %copy to judge
    assert bench.implausible(fig(400.0, 0.01)) == {"pct_copy_bw": "%copy > 300%", "speedup_vs_native": "x native < 0.02x"}


# ---- rows -----------------------------------------------------------------------

def test_quiet_plausible_row_is_timed_once_and_printed_plainly():
    copy = copy_baseline([100.0], QUIET)
    timings = ScriptedTimings(PLAIN)
    fig, errors, others, attempts, doubt = bench.time_row(timings, NBYTES, copy, ScriptedLoad(QUIET))
    assert (attempts, doubt, timings.calls) == (1, {}, 1)
    assert fig["speedup_vs_native"] == pytest.approx(2.0) and fig["speedup_vs_composite"] == pytest.approx(3.0)
    assert fig["pct_copy_bw"] == pytest.approx(100 * NBYTES / 10e-6 / 1e9 / 100.0)


def test_busy_row_is_timed_again_and_the_quiet_timings_kept():
    copy = copy_baseline([100.0], QUIET)
    timings = ScriptedTimings({"ours": 4000.0, "native": 20.0}, PLAIN)
    fig, _, others, attempts, doubt = bench.time_row(timings, NBYTES, copy, ScriptedLoad(BUSY, QUIET))
    assert (attempts, doubt, others) == (2, {}, QUIET)
    assert fig["impls"]["ours"]["median_us"] == pytest.approx(10.0)


def test_row_busy_twice_has_every_timed_figure_in_doubt():
    copy = copy_baseline([100.0], QUIET)
    fig, _, _, attempts, doubt = bench.time_row(ScriptedTimings(PLAIN), NBYTES, copy, ScriptedLoad(BUSY))
    assert attempts == 2
    assert set(doubt) == {"ours_us", "gbps", "pct_copy_bw", "speedup_vs_native", "speedup_vs_composite"}
    assert all(whys == ["busy: others 60%"] for whys in doubt.values())


def test_implausible_speedup_is_measured_again_and_marked_only_if_it_persists():
    copy = copy_baseline([100.0], QUIET)
    once = ScriptedTimings({"ours": 10.0, "native": 4060.0, "composite": 30.0}, PLAIN)
    fig, _, _, attempts, doubt = bench.time_row(once, NBYTES, copy, ScriptedLoad(QUIET))
    assert (attempts, doubt) == (2, {}) and fig["speedup_vs_native"] == pytest.approx(2.0)

    persists = ScriptedTimings({"ours": 10.0, "native": 4060.0, "composite": 30.0})
    fig, _, _, attempts, doubt = bench.time_row(persists, NBYTES, copy, ScriptedLoad(QUIET))
    assert attempts == 2 and set(doubt) == {"speedup_vs_native"}  # the other figures stand
    assert fig["speedup_vs_native"] == pytest.approx(406.0)


def test_copy_baseline_taken_on_a_busy_machine_flags_percent_copy_of_a_quiet_row():
    # The reported run: the copy timed while busy (tiny GB/s), the rows after it
    # quiet, %copy 28407% printed as a result. Now %copy is in doubt and the copy
    # is measured again; once it is quiet, the row is plain.
    slow_then_quiet = copy_baseline([0.28, 0.28, 0.28, 100.0], BUSY, BUSY, BUSY, QUIET)
    assert slow_then_quiet.busy and slow_then_quiet.attempts == COPY_TRIES
    row_load = ScriptedLoad(QUIET)
    fig, _, _, attempts, doubt = bench.time_row(ScriptedTimings(PLAIN), NBYTES, slow_then_quiet, row_load)
    assert (attempts, doubt) == (2, {}) and slow_then_quiet.gbps == 100.0
    assert fig["pct_copy_bw"] < PCT_COPY_MAX

    stays_busy = copy_baseline([30.0] * 10, BUSY)  # busy but plausible: only %copy is in doubt
    fig, _, _, attempts, doubt = bench.time_row(ScriptedTimings(PLAIN), NBYTES, stays_busy, ScriptedLoad(QUIET))
    assert attempts == 2 and stays_busy.attempts == COPY_TRIES + 1
    assert doubt == {"pct_copy_bw": ["copy busy: others 60%"]}


def test_until_quiet_runs_again_while_busy_up_to_its_tries():
    timings = ScriptedTimings({"ours": 5.0, "native": 1.0}, {"ours": 1.0, "native": 1.0})
    (got, _), others, attempts = bench.until_quiet(timings, ScriptedLoad(BUSY, QUIET), 2)
    assert (attempts, others, got["ours"].median_s) == (2, QUIET, pytest.approx(1e-6))
    _, others, attempts = bench.until_quiet(ScriptedTimings(PLAIN), ScriptedLoad(BUSY), 2)
    assert (attempts, others) == (2, BUSY)
    _, _, attempts = bench.until_quiet(lambda: "failed", ScriptedLoad(BUSY), 3, give_up=lambda v: v == "failed")
    assert attempts == 1


def test_section_doubt_marks_busy_timings_and_wild_ratios():
    row = {"hf_ms": 300.0, "patched_ms": 0.5, "speedup": 600.0}
    assert bench.section_doubt(row, QUIET, ("hf_ms", "patched_ms"), "speedup") == {
        "speedup": ["outside 0.02x-50x"]}
    assert bench.section_doubt(dict(row, speedup=1.2), BUSY, ("hf_ms", "patched_ms"), "speedup") == {
        key: ["busy: others 60%"] for key in ("hf_ms", "patched_ms", "speedup")}
    assert bench.section_doubt(dict(row, speedup=1.2), None, ("hf_ms", "patched_ms"), "speedup") == {}


# ---- the table ------------------------------------------------------------------

def _row(doubt=None, **extra):
    row = {"op": "add", "direction": "fwd", "dtype": "float32", "tokens": 16, "errors": {},
           "impls": {"ours": {"median_us": 10.0}}, "gbps": 78.6, "pct_copy_bw": 28407.0,
           "speedup_vs_native": 406.0, "speedup_vs_composite": 1.5, "timing_attempts": 2,
           "copy_attempts": 4, "in_doubt": doubt or {}}
    row.update(extra)
    return row


def test_table_marks_figures_in_doubt_and_explains_the_mark():
    out = io.StringIO()
    doubt = {"pct_copy_bw": ["%copy > 300%"], "speedup_vs_native": ["x native > 50x"]}
    bench.print_table([_row(doubt)], file=out)
    text = out.getvalue()
    data = text.splitlines()[2].split()
    assert data[4:10] == ["10.0", "78.6", "28407%?", "406.00x?", "1.50x", "-"], text
    assert "%copy > 300%; x native > 50x (timed 2x, copy 4x)" in text
    assert "# ?: in doubt, not a result" in text and "%copy above 300%" in text and "0.02x-50x" in text


def test_table_without_doubt_has_no_marks():
    out = io.StringIO()
    bench.print_table([_row(pct_copy_bw=90.0, speedup_vs_native=2.0, timing_attempts=1, copy_attempts=1)], file=out)
    assert "?" not in out.getvalue()


def test_dispatch_and_hf_tables_mark_figures_in_doubt():
    busy = {k: ["busy: others 60%"] for k in ("ours_us", "native_us", "ratio_ours_over_native")}
    out = io.StringIO()
    bench.print_dispatch([{"op": "add", "ours_us": 1.5, "native_us": 1.0, "ratio_ours_over_native": 1.5,
                           "timing_attempts": 2, "in_doubt": busy},
                          {"op": "gelu", "ours_us": 1.0, "native_us": 1.0, "ratio_ours_over_native": 1.0,
                           "timing_attempts": 1, "in_doubt": {}}], file=out)
    lines = out.getvalue().splitlines()
    assert lines[2].split()[:4] == ["add", "1.50?", "1.00?", "1.50x?"] and "busy: others 60% (timed 2x)" in lines[2]
    assert lines[3].split() == ["gelu", "1.00", "1.00", "1.00x"]
    assert lines[-1].startswith("# ?: in doubt")

    out = io.StringIO()
    bench.print_hf([{"family": "llama", "dtype": "bfloat16", "hf_ms": 600.0, "patched_ms": 1.0, "speedup": 600.0,
                     "max_abs_logit_diff": 0.01, "logits_identical_hf_casting": True, "timing_attempts": 1,
                     "in_doubt": {"speedup": ["outside 0.02x-50x"]}}], file=out)
    row = out.getvalue().splitlines()[2].split()
    assert row[2:7] == ["600.0", "1.0", "600.00x?", "1.00e-02", "yes"], row


# ---- wiring: run_benchmarks with a fake timer and load --------------------------

class FakeTimer:
    """Every sample 10 us: the figures are plausible, only the load decides."""

    rounds = 1

    def prepare(self, fn):
        return fn

    def sample(self, handle):
        return [1e-5]


def _run(load):
    cfg = bench.RunConfig(ops=["add"], dtypes=[torch.float32], tokens=[1], device=torch.device("cpu"), threads=1,
                          directions=["fwd", "fwd+bwd"], compile=False, compile_filter=lambda d, t: False,
                          timer=FakeTimer(), host_timer=FakeTimer(), other_load=load)
    return bench.run_benchmarks(ops, cfg, bench.Progress(2, stream=io.StringIO()))


def test_run_benchmarks_on_a_quiet_machine():
    rows = _run(ScriptedLoad(QUIET))
    assert [(r["timing_attempts"], r["copy_attempts"], r["in_doubt"]) for r in rows] == [(1, 1, {}), (1, 1, {})]


def test_run_benchmarks_on_a_busy_machine_measures_again_and_flags_every_row():
    rows = _run(ScriptedLoad(BUSY))
    assert [r["timing_attempts"] for r in rows] == [2, 2]
    # The copy baseline: its tries, then once more for each row.
    assert [r["copy_attempts"] for r in rows] == [COPY_TRIES + 1, COPY_TRIES + 2]
    for r in rows:
        assert "busy: others 60%" in r["in_doubt"]["speedup_vs_native"]
        assert "copy busy: others 60%" in r["in_doubt"]["pct_copy_bw"]


# ---- per-op declarations: rotary_embedding ----------------------------------------

def test_rotary_embedding_is_declared_as_hugging_face_attention_computes_it():
    from transformers.models.llama import modeling_llama

    s = bench.make_setup(ops, "rotary_embedding", 16, torch.float32, torch.device("cpu"))
    q, k, cos, sin = s.inputs
    # LLaMA-3-8B attention: 32 q heads, 8 k/v heads of 128; q and k transposed views of the projections.
    assert (q.shape, k.shape, cos.shape, sin.shape) == ((1, 32, 16, 128), (1, 8, 16, 128), (1, 16, 128), (1, 16, 128))
    assert not q.is_contiguous() and not k.is_contiguous()
    assert s.output_shapes == [(1, 32, 16, 128), (1, 8, 16, 128)] and s.grad_inputs == [0, 1]
    assert s.numel == q.numel() + k.numel() and s.weight_numel == cos.numel()
    # No torch op: ours is checked against the composite, which is Hugging Face's function.
    assert "native" not in s.impls and bench.reference_impl(s) == "composite"
    for got, want in zip(s.impls["composite"](*s.inputs), modeling_llama.apply_rotary_pos_emb(*s.inputs)):
        assert torch.equal(got, want)
    assert bench.check_close(s.impls["ours"](*s.inputs), s.impls["composite"](*s.inputs), torch.float32)[1]
    # Read q, k, cos, sin and write q_embed, k_embed; the backward moves as much (q and k are not read).
    assert bench.bytes_moved("rotary_embedding", "fwd", s.numel, s.weight_numel, 4) == (2 * s.numel + 2 * cos.numel()) * 4
    assert bench.formula_text("rotary_embedding", "fwd+bwd") == "(4*N + 4*H) * s"


def test_rotary_embedding_rows_run_both_directions_and_the_dispatch_row_says_there_is_no_native_op():
    cfg = bench.RunConfig(ops=["rotary_embedding"], dtypes=[torch.bfloat16], tokens=[3], device=torch.device("cpu"),
                          threads=1, directions=["fwd", "fwd+bwd"], compile=False, compile_filter=lambda d, t: False,
                          timer=FakeTimer(), host_timer=FakeTimer(), other_load=ScriptedLoad(QUIET))
    rows = bench.run_benchmarks(ops, cfg, bench.Progress(2, stream=io.StringIO()))
    assert [r["direction"] for r in rows] == ["fwd", "fwd+bwd"]
    for r in rows:
        assert r["errors"] == {} and set(r["impls"]) == {"ours", "composite"}, r["errors"]
        assert "speedup_vs_composite" in r and "speedup_vs_native" not in r
    assert rows[0]["max_abs_err_vs_composite"] < 0.05  # bfloat16: an ulp or so
    (row,) = bench.dispatch_overhead(ops, cfg, bench.Progress(1, stream=io.StringIO()))
    assert row["shape"] == [1, 1, 1, 8] and row["note"] == "no native op"
    assert "ours_us" in row and "native_us" not in row and "ratio_ours_over_native" not in row
    out = io.StringIO()
    bench.print_dispatch([row], file=out)
    assert out.getvalue().splitlines()[2].split()[2:] == ["-", "-", "no", "native", "op"]


# ---- the plot and the output files ----------------------------------------------

def test_json_and_plot_of_a_run_share_its_stamp():
    json_path, png_path = bench.output_paths("out", "cpu", "20261124-101500")
    assert json_path == "out/bench_cpu_20261124-101500.json"
    assert png_path == "out/speedup_cpu_20261124-101500.png"


def test_main_writes_json_and_plot_named_alike(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench.cli, "CpuTimer", lambda *args, **kwargs: FakeTimer())
    monkeypatch.setattr(bench.OtherLoad, "sample", lambda self, seconds=0.5: 0.0)
    bench.main(["--ops", "add", "--tokens", "1", "--dtypes", "float32", "--no-compile", "--no-hf",
                "--no-dispatch", "--no-backward", "--out", str(tmp_path)])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2, files
    stamps = {name.split("_", 2)[2].rsplit(".", 1)[0] for name in files}
    assert len(stamps) == 1 and files[0].startswith("bench_cpu_") and files[1].startswith("speedup_cpu_"), files
    assert f"wrote {tmp_path / files[0]} and {tmp_path / files[1]}" in capsys.readouterr().out


def test_a_cpu_run_says_which_instruction_sets_each_side_ran(tmp_path, monkeypatch, capsys):
    """README "On AVX2 CPUs": our variant, ATen's capability and Inductor's
    -march, read when the run ends (here our variant lowered to the portable
    one, and Inductor's -march set), in the header and the JSON."""
    import json

    from torch._inductor import config as inductor_config

    from op_extension import _C

    monkeypatch.setattr(bench.cli, "CpuTimer", lambda *args, **kwargs: FakeTimer())
    monkeypatch.setattr(bench.OtherLoad, "sample", lambda self, seconds=0.5: 0.0)
    old, march = _C.cpu_isa(), inductor_config.cpp.march
    _C.set_cpu_isa("default")
    # config.patch, not monkeypatch: Inductor's config objects restore only through it
    # (monkeypatch's undo left cpp.march unset for every later compile in the process).
    try:
        with inductor_config.patch({"cpp.march": "haswell"}):
            bench.main(["--ops", "add", "--tokens", "1", "--dtypes", "float32", "--no-compile", "--no-hf",
                        "--no-dispatch", "--no-backward", "--out", str(tmp_path)])
    finally:
        _C.set_cpu_isa(old)
    assert inductor_config.cpp.march == march
    aten = torch.backends.cpu.get_cpu_capability()
    assert (f"# instruction sets: ours default, ATen {aten}, Inductor -march=haswell"
            in capsys.readouterr().out)
    [json_path] = tmp_path.glob("bench_cpu_*.json")
    meta = json.loads(json_path.read_text())["metadata"]
    assert (meta["kernel_isa"], meta["aten_cpu_capability"], meta["inductor_march"]) == (
        "default", aten, "haswell")


def test_the_workers_fill_the_compile_cache_each_row_then_loads(tmp_path, monkeypatch):
    """A worker process compiles a row's composite (bench/warm.py); the row's own
    compile in this process, of the same graph on tensors built alike, is then an
    FX graph cache hit, and compiles nothing."""
    from torch._dynamo.utils import counters

    from op_extension.bench.op_rows import row_setup
    from op_extension.bench.warm import prepare_rows

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    row = ("gelu", "fwd", torch.float32, 3)
    prepared, failed, _ = prepare_rows({row: (True, False)}, torch.device("cpu"), torch.get_num_threads(), workers=1)
    assert (prepared, failed) == ({}, [])
    assert any((tmp_path / "inductor").rglob("fxgraph")), "the worker wrote no FX graph cache entry"
    hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    setup, grads = row_setup(ops, "gelu", "fwd", torch.float32, 3, torch.device("cpu"))
    compiled = torch.compile(setup.impls["composite"], dynamic=False)  # a fresh wrapper: nothing in memory
    torch.testing.assert_close(compiled(*setup.inputs), setup.impls["composite"](*setup.inputs))
    assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1
    assert counters["inductor"]["fxgraph_cache_miss"] == misses


def test_the_workers_give_each_row_the_cuda_models_it_would_compute():
    from op_extension.bench.traffic import row_models
    from op_extension.bench.warm import prepare_rows

    rows = {("rms_norm", "fwd+bwd", torch.bfloat16, 16): (False, True),
            ("softmax", "fwd", torch.float32, 2048): (False, True),
            ("gelu", "fwd", torch.float32, 16): (False, False)}  # nothing asked: not sent
    prepared, failed, _ = prepare_rows(rows, torch.device("cpu"), 1, workers=2)
    assert failed == [] and set(prepared) == set(list(rows)[:2])
    for (name, direction, dtype, tokens), models in prepared.items():
        assert models == row_models(ops, name, direction, dtype, tokens)
        assert models["errors"] == {} and models["harness"]["launches"] >= 1 and models["occupancy"]["sms"] == 132


def test_a_row_whose_preparation_fails_prepares_itself():
    from op_extension.bench.warm import prepare_rows

    # -1 tokens: the worker cannot build the row's tensors.
    row = ("gelu", "fwd", torch.float32, -1)
    prepared, failed, _ = prepare_rows({row: (True, False)}, torch.device("cpu"), 1, workers=1)
    assert prepared == {} and [r for r, _ in failed] == [row]
    assert "negative" in failed[0][1] or "-1" in failed[0][1], failed


@pytest.mark.parametrize("values, low_above, high_at_least", [
    ([1.5, 3.0], 0.5, 3.0),        # all faster: the axis starts just under 1x, not at 0.1x
    ([0.3, 0.6], 0.2, 1.0),        # all slower: 1x stays in view
    ([0.9, 1.1], 0.5, 1.1),
    ([2.0, 406.0, 0.0], 0.5, 2.0),  # implausible figures do not stretch the axis
])
def test_speedup_axis_fits_the_data_and_keeps_parity_in_view(values, low_above, high_at_least):
    low, high, ticks = bench.speedup_axis(values)
    assert low_above < low < 1.0 < high and high >= high_at_least
    assert high < 2 * max([v for v in values if SPEEDUP_MIN <= v <= SPEEDUP_MAX] + [1.0])
    assert 1 in ticks and len(ticks) >= 3 and all(low <= t <= high for t in ticks)


def _plot_rows():
    rows = []
    for direction in ("fwd", "fwd+bwd"):
        for tokens, native, composite in ((16, 1.5, 3.0), (512, 2.0, 4.0)):
            rows.append({"op": "rms_norm", "direction": direction, "dtype": "float32", "tokens": tokens,
                         "speedup_vs_native": native, "speedup_vs_composite": composite, "in_doubt": {}})
    rows[1].update(speedup_vs_native=406.0, in_doubt={"speedup_vs_native": ["x native > 50x"]})
    rows[2]["in_doubt"] = {"speedup_vs_native": ["busy: others 60%"], "speedup_vs_composite": ["busy: others 60%"]}
    return rows


def test_plot_fits_each_panel_marks_doubt_and_keeps_the_legend_by_the_panels():
    import matplotlib.pyplot as plt

    fig = bench.speedup_figure(_plot_rows(), "test CPU")
    try:
        fwd, bwd = fig.axes
        assert fwd.get_ylim() == pytest.approx(bench.speedup_axis([1.5, 3.0, 4.0])[:2])  # 406x left out
        assert bwd.get_ylim()[0] > 0.5
        hatched = [sum(1 for bar in ax.patches if bar.get_hatch()) for ax in (fwd, bwd)]
        marks = [sum(1 for t in ax.texts if t.get_text() == "?") for ax in (fwd, bwd)]
        assert hatched == marks == [1, 2]
        legend = fig.legends[0]
        assert "? in doubt" in [t.get_text() for t in legend.get_texts()][-1]
        fig.canvas.draw()
        to_fig = fig.transFigure.inverted()
        box = to_fig.transform_bbox(legend.get_window_extent())
        panels_top = max(to_fig.transform_bbox(ax.get_tightbbox()).y1 for ax in fig.axes)
        assert 0 <= box.y0 - panels_top < 0.06, (box, panels_top)  # right above the panels, not in a corner
        assert abs((box.x0 + box.x1) / 2 - 0.5) < 0.05
    finally:
        plt.close(fig)


def test_write_plot_writes_a_png(tmp_path):
    path = bench.write_plot(_plot_rows(), str(tmp_path / "speedup.png"), "test CPU")
    assert path and (tmp_path / "speedup.png").read_bytes().startswith(b"\x89PNG")
