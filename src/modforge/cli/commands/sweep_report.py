"""``modforge sweep-report SWEEP_DIR [--write-to FILE]`` — a sweep's results table.

Groups the trials over seeds and writes ``results.md``, ``results.csv`` and ``results.png``
into the sweep folder (``modforge sweep`` runs this at its end). ``--write-to FILE`` also
writes the markdown there, keeping whatever follows the notes marker line of the existing
file — the hand-written reading of the figures (``benchmarks/continual.md``).

The folder may come from someone else: it is checked once (no link leading out of it, no
FIFO or device), trial ids from its ``trials.csv`` must name folders inside ``trials/``, its
``sweep.yaml`` may plan at most ``--max-trials`` trials, and every string from its files is
shown as plain text (terminal), escaped (markdown) or neutralised (CSV).
"""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ...core.errors import UsageError
from ...core.safe_files import check_folder
from ...core.text_safety import terminal_text
from ..common import CommandParser
from ..output import console

HELP = "a sweep's results table: mean ± std over seeds per setting → results.md, results.csv, results.png"


def _parser() -> CommandParser:
    parser = CommandParser("sweep-report", description=HELP)
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the folder 'modforge sweep' wrote")
    parser.add_argument("--write-to", metavar="FILE", help="also write the markdown table there, keeping the "
                        "hand-written notes below its notes marker")  # fmt: skip
    from ...sweep.spec import DEFAULT_MAX_TRIALS

    parser.add_argument("--max-trials", type=int, metavar="N", default=DEFAULT_MAX_TRIALS,
                        help=f"the most trials the folder's sweep.yaml may plan (default {DEFAULT_MAX_TRIALS:,})")  # fmt: skip
    return parser


def show_report(sweep_dir: Path, *, write_to: Path | None = None, produced_by: str | None = None,
                max_trials: int | None = None) -> None:  # fmt: skip
    """Write the report files and print the table (best per column in bold; every string from
    the folder's files shown as plain text, never as markup or control characters)."""
    from rich import box
    from rich.table import Table

    from ...sweep import write_report
    from ...sweep.spec import DEFAULT_MAX_TRIALS

    report = write_report(sweep_dir, write_to=write_to, produced_by=produced_by,
                          max_trials=max_trials or DEFAULT_MAX_TRIALS)  # fmt: skip
    table = Table(title=f"{terminal_text(report.spec.report.title)} — {terminal_text(display_path(sweep_dir))}",
                  box=box.SIMPLE_HEAD, show_edge=False, title_justify="left", pad_edge=False)  # fmt: skip
    for header in report.headers():
        table.add_column(terminal_text(header), overflow="fold")
    for group in report.groups:
        cells = [terminal_text(cell) for cell in report.row(group, bold="")]
        styled = cells[: len(report.params) + 1]
        for c, text in zip(report.spec.collect, cells[len(report.params) + 1 :], strict=True):
            styled.append(f"[bold]{text}[/bold]" if report.is_best(group, c) else text)
        table.add_row(*styled)
    out = console()
    out.print(table)
    written = ["results.md", "results.csv", "results.png"]
    out.print(f"wrote {', '.join(display_path(sweep_dir / w) for w in written)}"
              + (f" and {display_path(write_to)}" if write_to else ""), markup=False, highlight=False)  # fmt: skip


def run(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    if ns.max_trials < 1:
        raise UsageError(f"--max-trials must be at least 1, got {ns.max_trials}")
    sweep_dir = Path(ns.sweep_dir)
    check_folder(sweep_dir, what="sweep folder")  # someone else's folder: no link out, no FIFO, before any read
    show_report(sweep_dir, write_to=Path(ns.write_to) if ns.write_to else None, max_trials=ns.max_trials)
    return 0
