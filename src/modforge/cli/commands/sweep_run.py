"""``modforge sweep SWEEP.yaml [--workers N] [--sweep-dir DIR] [--backend local] [--dry-run]
[--write-to FILE]`` — run (or continue) a sweep, then write its results table.

Exit status: 0 when every trial finished, 1 when any failed (each is recorded in
``trials.csv`` with its one-line error), 2 for a bad sweep file, 130 when interrupted (a
re-run continues where it stopped).
"""

from __future__ import annotations

import signal
from pathlib import Path

from ...core.config import display_path
from ...core.errors import UsageError
from ..common import CommandParser
from ..output import console, print_table

HELP = "run trials of a config over a grid / random space and seeds (resumable); writes a results table"


def _parser() -> CommandParser:
    from ...sweep import EXECUTORS

    parser = CommandParser("sweep", description=HELP)
    parser.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep file (see configs/sweeps/reference.yaml)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="trials run at once; torch threads are divided among them (default 1)")  # fmt: skip
    parser.add_argument("--sweep-dir", metavar="DIR", help="the sweep folder (default: runs/sweeps/<name>)")
    parser.add_argument(
        "--backend", choices=sorted(EXECUTORS), default="local", help="where trials run (default local)"
    )
    parser.add_argument("--dry-run", action="store_true", help="list the trials and their commands; run nothing")
    parser.add_argument("--write-to", metavar="FILE", help="also write the markdown table there, keeping the "
                        "hand-written notes below its notes marker")  # fmt: skip
    return parser


def _stop_on_sigterm() -> None:
    """SIGTERM stops the sweep like Ctrl-C: its trials are ended and recorded as interrupted."""

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _progress(total: int | None, collect):
    from rich.markup import escape

    out = console()
    counter = {"n": 0}

    def on_event(kind: str, trial, row: dict) -> None:
        if kind == "started":
            return
        counter["n"] += 1
        of = f"{counter['n']}/{total}" if total else str(counter["n"])
        if kind == "failed":
            out.print(f"[{of}] [red]failed[/red] {escape(trial.id)}: {escape(row['error'])}", highlight=False)
            return
        values = "  ".join(f"{c.label} {float(row[c.name]) * c.scale:,.{c.decimals}f}" for c in collect
                           if row.get(c.name))  # fmt: skip
        word = "[green]done[/green]" if kind == "done" else "[dim]done before[/dim]"
        seconds = f"  ({float(row['seconds']):.1f} s)" if row.get("seconds") and kind == "done" else ""
        out.print(f"[{of}] {word} {escape(trial.id)}  {escape(values)}{seconds}", highlight=False)

    return on_event


def _dry_run(spec, sweep_dir: Path, workers: int) -> int:
    from ...sweep import SEARCHES, build_job
    from ...sweep.driver import default_threads

    search = SEARCHES[spec.search](spec, sweep_dir)
    rows = []
    while (trial := search.ask()) is not None:
        rows.append((trial.id, build_job(spec, trial, sweep_dir, default_threads(workers)).shown()))
    print_table(("trial", "command"), rows, title=f"{spec.name}: {len(rows)} trials → {display_path(sweep_dir)}")
    return 0


def run(argv: list[str]) -> int:
    from ...sweep import SEARCHES, load_sweep, run_sweep

    ns = _parser().parse_args(argv)
    if ns.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {ns.workers}")
    spec = load_sweep(Path(ns.sweep))
    sweep_dir = Path(ns.sweep_dir) if ns.sweep_dir else Path("runs") / "sweeps" / spec.name
    write_to = Path(ns.write_to) if ns.write_to else None
    if spec.search not in SEARCHES:
        raise UsageError(f"search: unknown search '{spec.search}' (known: {', '.join(sorted(SEARCHES))}) "
                         f"(in {display_path(ns.sweep)})")  # fmt: skip
    if ns.dry_run:
        return _dry_run(spec, sweep_dir, ns.workers)
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise UsageError(f"--sweep-dir {display_path(sweep_dir)}: that is a file, not a folder; choose another")
    _stop_on_sigterm()
    total = SEARCHES[spec.search](spec, sweep_dir).total
    console().print(f"sweep {spec.name}: {total if total else 'a search of'} trials, {ns.workers} at a time "
                    f"→ {display_path(sweep_dir)}", highlight=False, markup=False)  # fmt: skip
    result = run_sweep(spec, sweep_dir, workers=ns.workers, backend=ns.backend,
                       on_event=_progress(total, spec.collect))  # fmt: skip
    from .sweep_report import show_report

    command = f"modforge sweep {ns.sweep}" + (f" --workers {ns.workers}" if ns.workers > 1 else "")
    show_report(sweep_dir, write_to=write_to, produced_by=command)
    if not result.ok:
        console().print(f"{result.failed} trial(s) failed: see the error column of "
                        f"{display_path(sweep_dir / 'trials.csv')} and trials/<id>.log", markup=False)  # fmt: skip
        return 1
    return 0
