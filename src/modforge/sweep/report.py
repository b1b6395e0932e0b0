"""The results table of a sweep: trials grouped over seeds, mean ± std (or median) per group
and collected value, the best of each column in bold; written as ``results.md``,
``results.csv`` and ``results.png`` in the sweep folder.

A group is every parameter but the seed; its ``n`` counts its finished trials (trials an
optuna study pruned are left out of its values and flagged, ``0 (1 pruned)``). Values come
from each finished trial's ``summary.json`` (so a report after editing ``collect:`` in the
folder's ``sweep.yaml`` needs no re-run), ``seconds`` from ``trials.csv``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import platform
import re
import statistics
from datetime import date
from pathlib import Path

from ..core.config import display_path
from ..core.errors import UsageError
from ..core.safe_files import open_regular, write_atomic
from ..core.text_safety import csv_cell, markdown_cell, plain_text
from .collect import collect_metrics, read_summary, trial_folder
from .driver import param_columns
from .spec import DEFAULT_MAX_TRIALS, Collect, SweepSpec, load_sweep
from .table import number, read_rows

__all__ = ["NOTES_MARKER", "Group", "Report", "build_report", "keep_notes", "markdown", "trial_folder", "write_report"]

NOTES_MARKER = "<!-- hand-written notes below: kept by --write -->"
"""A line in a results page: everything from it on is hand-written and kept when the page is regenerated."""


@dataclasses.dataclass
class Group:
    """The trials of one setting, over seeds.

    Attributes:
        params: column → shown value.
        values: collected name → the finished trials' values (``None`` dropped).
        n: finished trials; failed: trials that failed; pruned: trials the optuna study stopped
            early (their values are not among ``values``: a truncated run is no estimate).
        trials: the ids of the group's trials.
    """

    params: dict[str, str]
    values: dict[str, list[float]]
    n: int = 0
    failed: int = 0
    pruned: int = 0
    trials: list[str] = dataclasses.field(default_factory=list)

    def centre(self, c: Collect) -> float | None:
        """The group's value of ``c``: mean or median over its finished trials."""
        values = self.values.get(c.name) or []
        if not values:
            return None
        return statistics.median(values) if c.agg == "median" else statistics.fmean(values)

    def spread(self, c: Collect) -> float | None:
        """The sample standard deviation over seeds (``None`` for fewer than two values or a median)."""
        values = self.values.get(c.name) or []
        return statistics.stdev(values) if len(values) > 1 and c.agg == "mean" else None


@dataclasses.dataclass
class Report:
    """A sweep's groups and how to show them."""

    spec: SweepSpec
    sweep_dir: Path
    params: list[str]
    groups: list[Group]

    def best(self, c: Collect) -> float | None:
        """The best group value of ``c`` (``None``: no goal, or fewer than two groups with a value)."""
        centres = [g.centre(c) for g in self.groups]
        centres = [v for v in centres if v is not None]
        if c.goal == "none" or len(centres) < 2:
            return None
        return max(centres) if c.goal == "max" else min(centres)

    def cell(self, group: Group, c: Collect, *, bold: str = "**") -> str:
        """``mean ± std`` (scaled, rounded), bold where best; ``–`` without a value."""
        centre = group.centre(c)
        if centre is None:
            return "–"
        spread = group.spread(c)
        text = f"{centre * c.scale:,.{c.decimals}f}"
        if spread is not None:
            text += f" ± {spread * c.scale:,.{c.decimals}f}"
        best = self.best(c)
        if best is not None and round(centre * c.scale, c.decimals) == round(best * c.scale, c.decimals):
            text = f"{bold}{text}{bold}" if bold else text
        return text

    def is_best(self, group: Group, c: Collect) -> bool:
        best, centre = self.best(c), group.centre(c)
        return (
            best is not None
            and centre is not None
            and round(centre * c.scale, c.decimals) == round(best * c.scale, c.decimals)
        )

    def headers(self) -> list[str]:
        return [*self.params, "n", *(c.label for c in self.spec.collect)]

    def row(self, group: Group, *, bold: str = "**") -> list[str]:
        notes = [f"{count} {word}" for count, word in ((group.failed, "failed"), (group.pruned, "pruned")) if count]
        n = f"{group.n}" + (f" ({', '.join(notes)})" if notes else "")
        return [
            *(group.params[p] for p in self.params),
            n,
            *(self.cell(group, c, bold=bold) for c in self.spec.collect),
        ]


def build_report(sweep_dir: Path, *, max_trials: int = DEFAULT_MAX_TRIALS) -> Report:
    """Group the trials recorded in ``sweep_dir`` (its ``sweep.yaml`` and ``trials.csv``);
    a stored sweep planning more than ``max_trials`` trials is refused before any is listed.

    Raises:
        UsageError: the folder holds no sweep, or its files are malformed (one line each).
    """
    if not all(os.path.isfile(sweep_dir / name) and not os.path.islink(sweep_dir / name)
               for name in ("sweep.yaml", "trials.csv")):  # fmt: skip
        raise UsageError(f"{display_path(sweep_dir)} is not a sweep folder (no sweep.yaml and trials.csv); "
                         "give the folder 'modforge sweep' wrote (runs/sweeps/<name> by default)")  # fmt: skip
    spec = load_sweep(sweep_dir / "sweep.yaml", stored=True, max_trials=max_trials)
    rows = read_rows(sweep_dir)
    table = sweep_dir / "trials.csv"
    folders = {row["trial"]: trial_folder(sweep_dir, row["trial"]) for row in rows}
    planned = _planned_trials(spec, sweep_dir)
    if planned is not None:  # rows of trials the sweep no longer defines (a seed or value removed) are not averaged
        rows = [row for row in rows if row.get("trial") in planned]
    header = rows[0].keys() if rows else []
    params = [c for c in param_columns(spec) if c in header]  # not a column of trials.csv the spec no longer collects
    groups: dict[tuple[str, ...], Group] = {}
    for row in rows:
        key = tuple(row.get(p, "") for p in params)
        group = groups.setdefault(key, Group(dict(zip(params, key, strict=True)), {c.name: [] for c in spec.collect}))
        group.trials.append(row["trial"])
        if row.get("status") == "failed":
            group.failed += 1
        if row.get("status") == "pruned":
            group.pruned += 1
        if row.get("status") != "done":
            continue
        seconds = number(row.get("seconds", ""), table, f"of trial {row['trial']!r}", "seconds")
        summary = read_summary(folders[row["trial"]])
        metrics = collect_metrics(spec.collect, summary, seconds) if summary else {}
        for c in spec.collect:
            value = metrics.get(c.name)
            if value is None and row.get(c.name):
                value = number(row[c.name], table, f"of trial {row['trial']!r}", c.name)
            if value is not None and math.isfinite(value):
                group.values[c.name].append(value)
        group.n += 1
    return Report(spec, sweep_dir, params, list(groups.values()))


def _planned_trials(spec: SweepSpec, sweep_dir: Path) -> set[str] | None:
    """The ids of the trials the sweep defines up front (grid and random searches), or None
    (a search that decides as it goes: every recorded trial is the sweep's)."""
    from .search import SEARCHES

    if spec.search not in ("grid", "random") or spec.search not in SEARCHES:
        return None
    trials = getattr(SEARCHES[spec.search](spec, sweep_dir), "trials", None)
    return None if trials is None else {trial.id for trial in trials}


def _machine() -> str:
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _code(value: str) -> str:
    """``value`` as a code span in a table cell (``|`` escaped), or escaped text where a code
    span cannot hold it (a backtick, a backslash) or HTML: never markup, HTML or a broken row."""
    text = plain_text(value, replacement=" ")
    if not text or text == "–":
        return text
    if any(c in text for c in "`\\<>&"):  # HTML, too, is shown escaped rather than trusted to a code span
        return markdown_cell(text)
    return "`" + text.replace("|", "\\|") + "`"


_PROSE_MARKUP = re.compile(r"`([^`]+)`|(?<![\w*])(\*\*?)(?=\S)([^*`]+?)(?<=\S)\2(?![\w*])")


def _prose(line: str) -> str:
    """A line of the sweep's description as markdown: its `` `code` `` spans stay code (through
    :func:`_code`) and its ``*emphasis*``/``**strong**`` stays emphasis around escaped text; all
    else is escaped like a cell (no link, HTML or other markup from a sweep file reaches the page)."""
    out, last = [], 0
    for match in _PROSE_MARKUP.finditer(line):
        out.append(markdown_cell(line[last : match.start()]))
        code, stars, emphasised = match.groups()
        out.append(_code(code) if code is not None else stars + markdown_cell(emphasised) + stars)
        last = match.end()
    out.append(markdown_cell(line[last:]))
    return "".join(out)


def markdown(report: Report, produced_by: str | None = None) -> str:
    """The report as a markdown page: title, how it was produced, the description, the table,
    and what each row's setting sets. Every string from the sweep's files is escaped: a title
    or a value holding a newline, HTML or ``|`` stays one harmless line of text."""
    spec = report.spec
    lines = [f"# {markdown_cell(spec.report.title)}", ""]
    lines += [f"_Produced by {_code(produced_by or 'modforge sweep-report ' + display_path(report.sweep_dir))} on "
              f"{date.today().isoformat()} ({_machine()})._", ""]  # fmt: skip
    if spec.report.description:
        lines += [*(_prose(line) for line in spec.report.description.splitlines()), ""]
    headers = [markdown_cell(h) for h in report.headers()]
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for group in report.groups:
        row = report.row(group)
        row[: len(report.params)] = [_code(v) for v in row[: len(report.params)]]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *_settings(spec)]
    return "\n".join(lines).rstrip() + "\n"


def _settings(spec: SweepSpec) -> list[str]:
    """What the sweep sets: fixed overrides, each named grid value's overrides, seeds."""
    from .command import override_tokens

    parts = []
    if spec.overrides:
        parts.append("Every trial: " + _code(" ".join(override_tokens(spec.overrides))) + ".")
    for axis in spec.grid:
        named = [v for v in axis.values if list(v.overrides) != [axis.name]]
        if named:
            shown = "; ".join(f"{_code(v.label)} {markdown_cell(_setting_text(v.overrides))}" for v in named)
            parts.append(f"Settings ({markdown_cell(axis.name)}): {shown}.")
    if spec.random is not None:
        space = ", ".join(f"{_code(p.key)} {p.kind} {markdown_cell(list(p.args))}" for p in spec.random.params)
        parts.append(f"Random search: {spec.random.trials} draws (seed {spec.random.seed}) of {space}.")
    if spec.optuna is not None:
        o = spec.optuna
        space = ", ".join(f"{_code(p.key)} {p.kind} {markdown_cell(list(p.args))}" for p in o.params)
        pruning = (
            "no pruning"
            if o.pruner == "none"
            else (f"{o.pruner} pruner on the per-epoch {o.prune_on or 'monitor'} after {o.warmup_epochs} epoch(s)")
        )
        parts.append(f"Optuna search: {o.trials} trials ({o.sampler} sampler, seed {o.seed}, {markdown_cell(pruning)}) "
                     f"of {space}, {'maximising' if o.goal == 'max' else 'minimising'} {markdown_cell(o.metric)}; pruned trials are "
                     "counted apart from n and left out of the values.")  # fmt: skip
    if spec.seeds:
        parts.append(f"Seeds: {', '.join(map(str, spec.seeds))} (mean ± sample std over seeds; n = finished trials).")
    return [" ".join(parts), ""] if parts else []


def _setting_text(overrides: dict) -> str:
    from .command import override_tokens

    text = " ".join(override_tokens(overrides))
    extra = [f"{k} {Path(v).name if k == 'config' else v}" for k, v in overrides.items() if k in ("config", "command")]
    return " ".join(filter(None, [*extra, text])) or "—"


def results_csv(report: Report) -> str:
    """One row per group: parameters, n, failed, pruned, and each value's centre and std (unscaled)."""
    out = io.StringIO()
    columns = [*report.params, "n", "failed", "pruned"]
    for c in report.spec.collect:
        columns += [f"{c.name}_{c.agg}", f"{c.name}_std"]
    writer = csv.writer(out)
    writer.writerow([csv_cell(plain_text(c)) for c in columns])
    for g in report.groups:
        cells: list = [*(csv_cell(plain_text(g.params[p])) for p in report.params), g.n, g.failed, g.pruned]
        for c in report.spec.collect:
            centre, spread = g.centre(c), g.spread(c)
            cells += ["" if centre is None else repr(centre), "" if spread is None else repr(spread)]
        writer.writerow(cells)
    return out.getvalue()


def keep_notes(generated: str, target: Path) -> str:
    """``generated`` followed by the hand-written part of ``target`` (from :data:`NOTES_MARKER` on).

    Raises:
        UsageError: ``target`` exists without the marker (its text would be lost).
    """
    if not target.exists() and not target.is_symlink():
        return f"{generated}\n{NOTES_MARKER}\n"
    with open_regular(target, "r", encoding="utf-8") as fh:
        old = fh.read()
    if NOTES_MARKER not in old:
        raise UsageError(f"--write-to {display_path(target)}: the file has no '{NOTES_MARKER}' line, so its "
                         "hand-written text would be lost; nothing was changed. Add that line above the text to "
                         "keep (everything above it is regenerated), or write to a new file")  # fmt: skip
    return f"{generated}\n{old[old.index(NOTES_MARKER) :]}"


def write_report(sweep_dir: Path, *, write_to: Path | None = None, produced_by: str | None = None,
                 max_trials: int = DEFAULT_MAX_TRIALS) -> Report:  # fmt: skip
    """Write ``results.md``, ``results.csv`` and ``results.png`` into ``sweep_dir`` (and the
    markdown, notes kept, into ``write_to``), each through a new temporary file renamed into
    place (a link planted at any of those names is replaced, never written through); the report."""
    from .plot import plot_results

    report = build_report(sweep_dir, max_trials=max_trials)
    text = markdown(report, produced_by)
    if write_to is not None:
        page = keep_notes(text, write_to)  # checked before anything is written
    write_atomic(sweep_dir / "results.md", text)
    write_atomic(sweep_dir / "results.csv", results_csv(report))
    plot_results(report, sweep_dir / "results.png")
    if write_to is not None:
        write_atomic(write_to, page)
    return report
