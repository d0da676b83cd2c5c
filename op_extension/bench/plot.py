"""The speed-up plot: one panel per op and direction, bars from 1.0x on a log
axis fitted to the panel, figures in doubt hatched and marked '?'."""

from __future__ import annotations

import sys

import torch

from .doubt import SPEEDUP_MAX, SPEEDUP_MIN
from .plan import BASELINES, DTYPE_SHORT

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
