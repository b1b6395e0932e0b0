"""``modforge sweep-report SWEEP_DIR [--write-to FILE]`` — a sweep's results table.

Groups the trials over seeds and writes ``results.md``, ``results.csv`` and ``results.png``
into the sweep folder (``modforge sweep`` runs this at its end). ``--write-to FILE`` also
writes the markdown there, keeping whatever follows the notes marker line of the existing
file — the hand-written reading of the figures (``benchmarks/continual.md``).
"""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ..common import CommandParser
from ..output import console

HELP = "a sweep's results table: mean ± std over seeds per setting → results.md, results.csv, results.png"


def _parser() -> CommandParser:
    parser = CommandParser("sweep-report", description=HELP)
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the folder 'modforge sweep' wrote")
    parser.add_argument("--write-to", metavar="FILE", help="also write the markdown table there, keeping the "
                        "hand-written notes below its notes marker")  # fmt: skip
    return parser


def show_report(sweep_dir: Path, *, write_to: Path | None = None, produced_by: str | None = None) -> None:
    """Write the report files and print the table (best per column in bold)."""
    from rich import box
    from rich.table import Table

    from ...sweep import write_report

    report = write_report(sweep_dir, write_to=write_to, produced_by=produced_by)
    table = Table(title=f"{report.spec.report.title} — {display_path(sweep_dir)}", box=box.SIMPLE_HEAD,
                  show_edge=False, title_justify="left", pad_edge=False)  # fmt: skip
    for header in report.headers():
        table.add_column(header, overflow="fold")
    for group in report.groups:
        cells = report.row(group, bold="")
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
    show_report(Path(ns.sweep_dir), write_to=Path(ns.write_to) if ns.write_to else None)
    return 0
