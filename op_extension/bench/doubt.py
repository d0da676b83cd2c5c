"""Figures in doubt.

On a small shared machine a timing can be wrong by orders of magnitude (a
preempted OpenMP thread makes every parallel region wait a scheduler tick), and
a wrong figure printed plainly reads as a result. So: the copy baseline is
taken again while other processes were busy, a row is timed again once when its
window was busy or a figure left the bounds below, and whatever is still in
doubt is marked '?' in the table and the plot.
"""

from __future__ import annotations

from .harness import OtherLoad, error_text
from .plan import BASELINES

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
            return None, error_text(e)

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


def doubt_note(row):
    """Why a row's figures are in doubt, and how often it was measured."""
    reasons = list(dict.fromkeys(why for whys in row["in_doubt"].values() for why in whys))
    tries = [f"timed {row['timing_attempts']}x"]
    if row.get("copy_attempts", 1) > 1:
        tries.append(f"copy {row['copy_attempts']}x")
    return "; ".join(reasons) + f" ({', '.join(tries)})"


def with_doubt(label, row):
    """A progress label, with why the row's figures are in doubt if they are."""
    return label + (f"  ? {doubt_note(row)}" if row.get("in_doubt") else "")
