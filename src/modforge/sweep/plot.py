"""``results.png``: every collected value against every swept parameter (one panel each).

Each finished trial is a dot; each distinct parameter value its mean with the std as an
error bar. Numbers go on a numeric axis (logarithmic when they span more than 100×),
anything else (named grid values) on a categorical one in table order.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .report import Report

__all__ = ["plot_results"]


def _numbers(values: list[str]) -> list[float] | None:
    try:
        out = [float(v) for v in values]
    except ValueError:
        return None
    return out if all(math.isfinite(v) for v in out) else None


MAX_PANELS = 144
"""More panels (collected values × swept parameters) than this is no figure anyone reads; a
sweep file asking for more is refused rather than drawn into gigabytes of pixels."""


def _text(value: object) -> str:
    """A string from the sweep's files as matplotlib shows it: no control characters, and ``$``
    literal (not the start of mathtext, whose parse errors would end the report)."""
    from ..core.text_safety import plain_text

    return plain_text(value).replace("$", r"\$")


def plot_results(report: Report, path: Path) -> None:
    """Draw the report's panels into ``path`` (a PNG; matplotlib's Agg backend, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.safe_files import write_via_temp
    from .collect import collect_metrics, read_summary, trial_folder
    from .table import number, read_rows

    metrics = list(report.spec.collect)
    params = report.params or ["trial"]
    if len(metrics) * len(params) > MAX_PANELS:
        from ..core.config import display_path
        from ..core.errors import UsageError

        raise UsageError(f"{display_path(report.spec.file)}: {len(metrics)} collected values × {len(params)} swept "
                         f"parameters make {len(metrics) * len(params)} panels in results.png, more than "
                         f"{MAX_PANELS}; collect or sweep fewer")  # fmt: skip
    rows = [r for r in read_rows(report.sweep_dir) if r.get("status") == "done"]
    fig, axes = plt.subplots(len(metrics), len(params), figsize=(4.2 * len(params), 3.0 * len(metrics)),
                             squeeze=False)  # fmt: skip
    trial_values = []
    for row in rows:
        seconds = number(row.get("seconds", ""), report.sweep_dir / "trials.csv", f"of trial {row['trial']!r}",
                         "seconds")  # fmt: skip
        summary = read_summary(trial_folder(report.sweep_dir, row["trial"]))
        trial_values.append((row, collect_metrics(report.spec.collect, summary, seconds)))
    for j, param in enumerate(params):
        shown = [_text(row.get(param, row["trial"])) for row, _ in trial_values]
        order = list(dict.fromkeys(_text(g.params.get(param, "")) for g in report.groups)) if report.params \
            else shown  # fmt: skip
        numeric = _numbers(shown)
        xs = numeric if numeric is not None else [order.index(v) if v in order else 0 for v in shown]
        for i, c in enumerate(metrics):
            ax = axes[i][j]
            points = [
                (x, v[c.name] * c.scale)
                for x, (_, v) in zip(xs, trial_values, strict=True)
                if v.get(c.name) is not None
            ]
            if points:
                ax.scatter(*zip(*points, strict=True), s=12, alpha=0.45, color="tab:blue")
                by_x: dict[float, list[float]] = {}
                for x, y in points:
                    by_x.setdefault(x, []).append(y)
                keys = sorted(by_x)
                means = [statistics.fmean(by_x[k]) for k in keys]
                stds = [statistics.stdev(by_x[k]) if len(by_x[k]) > 1 else 0.0 for k in keys]
                ax.errorbar(
                    keys,
                    means,
                    yerr=stds,
                    color="tab:red",
                    marker="o",
                    ms=4,
                    capsize=3,
                    lw=1,
                    ls="-" if numeric is not None else "none",
                )  # named values: no line between them
            if numeric is None:
                ax.set_xticks(range(len(order)), order, rotation=35 if len(order) > 3 else 0, ha="right", fontsize=8)
            elif numeric and min(numeric) > 0 and max(numeric) / min(numeric) > 100:
                ax.set_xscale("log")
            ax.set_xlabel(_text(param), fontsize=9)
            ax.set_ylabel(_text(c.label), fontsize=9)
            ax.grid(alpha=0.3)
    fig.suptitle(_text(report.spec.report.title), fontsize=11)
    fig.tight_layout()
    try:
        write_via_temp(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))  # never a fixed temporary name
    finally:
        plt.close(fig)
