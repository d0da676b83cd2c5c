"""The benchmark harness's bookkeeping, with fake loads and timings (nothing real
is timed): progress output on and off a terminal."""

from __future__ import annotations

import io

from op_extension import bench


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
