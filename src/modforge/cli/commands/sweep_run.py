"""``modforge sweep SWEEP.yaml [--workers N] [--sweep-dir DIR] [--config-root DIR] [--max-trials N]
[--nproc N] [--backend local|ray] [--ray-address ADDR] [--cpus-per-trial N] [--gpus-per-trial N] [--dry-run]
[--write-to FILE]`` — run (or continue) a sweep, then write its results table.

``--backend ray`` runs each trial as a Ray task (a local Ray instance listening on 127.0.0.1
only, or the cluster at ``--ray-address``); its resource settings may also come from the
sweep file's ``ray:`` section (the flags win). Only ``--backend ray`` switches Ray on, and only
``--ray-address`` names a cluster: a sweep file never chooses what this process connects to.

An existing sweep folder is checked once before it is used (no link in it leading out, no
FIFO or device): a folder someone else prepared cannot make the sweep write elsewhere.

Exit status: 0 when every trial finished, 1 when any failed (each is recorded in
``trials.csv`` with its one-line error), 2 for a bad sweep file, 130 when interrupted (a
re-run continues where it stopped).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ...core.config import display_path
from ...core.errors import UsageError
from ...core.safe_files import check_folder
from ...core.text_safety import terminal_text
from ..common import CommandParser
from ..output import console, print_table

HELP = "run trials of a config over a grid / random space and seeds (resumable); writes a results table"


def _parser() -> CommandParser:
    from ...sweep import EXECUTORS

    parser = CommandParser("sweep", description=HELP)
    parser.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep file (see configs/sweeps/reference.yaml)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="trials run at once; torch threads are divided among them (default 1; with "
                        "--backend ray: as many as the cluster holds)")  # fmt: skip
    from ...sweep.spec import DEFAULT_MAX_TRIALS

    parser.add_argument("--sweep-dir", metavar="DIR", help="the sweep folder (default: runs/sweeps/<name>)")
    parser.add_argument("--config-root", metavar="DIR", action="append", default=[],
                        help="a folder where the configs the sweep file names may lie, besides the sweep file's own "
                        "folder (repeatable)")  # fmt: skip
    parser.add_argument("--max-trials", type=int, metavar="N", default=DEFAULT_MAX_TRIALS,
                        help=f"the most trials the sweep may plan (default {DEFAULT_MAX_TRIALS:,})")  # fmt: skip
    parser.add_argument("--backend", choices=sorted(EXECUTORS), default=None,
                        help="where trials run (default local)")  # fmt: skip
    parser.add_argument("--cold-trials", action="store_true",
                        help="start every local trial as a fresh process (default: forked from one process that "
                        "imported torch and modforge once, seconds sooner per trial)")  # fmt: skip
    ray = parser.add_argument_group("Ray (--backend ray; over the sweep file's ray: section)")
    ray.add_argument("--ray-address", metavar="ADDR",
                     help="an existing Ray cluster (auto, HOST:6379, ray://HOST:10001); default: a local instance")  # fmt: skip
    ray.add_argument("--cpus-per-trial", type=float, metavar="N", help="CPUs per trial process (default 1)")
    ray.add_argument("--gpus-per-trial", type=float, metavar="N", help="GPUs per trial process (default 0)")
    parser.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="run each training trial as N processes (torchrun, DDP); with --backend ray a trial "
                        "reserves N times its resources (default 1)")  # fmt: skip
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
    out = console()
    counter = {"n": 0}

    def on_event(kind: str, trial, row: dict) -> None:
        if kind == "started":
            return
        counter["n"] += 1
        of = f"{counter['n']}/{total}" if total else str(counter["n"])
        if kind == "failed":
            out.print(f"[{of}] [red]failed[/red] {terminal_text(trial.id)}: {terminal_text(row['error'])}",
                      highlight=False)  # fmt: skip
            return
        if kind == "pruned":
            out.print(f"[{of}] [yellow]pruned[/yellow] {terminal_text(trial.id)}", highlight=False)
            return
        values = "  ".join(f"{c.label} {float(row[c.name]) * c.scale:,.{c.decimals}f}" for c in collect
                           if row.get(c.name))  # fmt: skip
        word = "[green]done[/green]" if kind == "done" else "[dim]done before[/dim]"
        seconds = f"  ({float(row['seconds']):.1f} s)" if row.get("seconds") and kind == "done" else ""
        out.print(f"[{of}] {word} {terminal_text(trial.id)}  {terminal_text(values)}{seconds}", highlight=False)

    return on_event


def _dry_run(spec, sweep_dir: Path, threads: int, processes: int) -> int:
    from ...sweep import SEARCHES, build_job

    search = SEARCHES[spec.search](spec, sweep_dir)
    if getattr(search, "adaptive", False):  # trials come from results: show what one looks like
        trial = search.example()
        title = (f"{spec.name}: {search.total or 'a search of'} trials chosen by '{spec.search}' as results come in "
                 f"→ {display_path(sweep_dir)}; one looks like")  # fmt: skip
        print_table(("trial", "command"), [(trial.id, build_job(spec, trial, sweep_dir, threads, processes).shown())],
                    title=title)  # fmt: skip
        return 0
    rows = []
    while (trial := search.ask()) is not None:
        rows.append((trial.id, build_job(spec, trial, sweep_dir, threads, processes).shown()))
    print_table(("trial", "command"), rows, title=f"{spec.name}: {len(rows)} trials → {display_path(sweep_dir)}")
    return 0


def _backend_settings(ns, spec) -> tuple[str, dict]:
    """The backend (``--backend``, else local: a sweep file's ``ray:`` section never switches
    Ray on) and its settings: the sweep file's resources, the command line's flags over them;
    the cluster's address only from ``--ray-address``."""
    import dataclasses

    backend = ns.backend or "local"
    flags = (ns.ray_address, ns.cpus_per_trial, ns.gpus_per_trial)
    if backend != "ray":
        if any(f is not None for f in flags):
            raise UsageError("--ray-address, --cpus-per-trial and --gpus-per-trial need --backend ray")
        return backend, {"warm": not ns.cold_trials}
    if ns.cold_trials:
        raise UsageError("--cold-trials is for the local backend: Ray starts each trial on its worker as a fresh process")
    from ...sweep.spec import RaySpec

    settings = dataclasses.asdict(spec.ray or RaySpec())
    settings["address"] = None  # never the sweep file's (refused there): the command line's only
    if ns.cpus_per_trial is not None and not ns.cpus_per_trial > 0:
        raise UsageError(f"--cpus-per-trial must be more than 0, got {ns.cpus_per_trial:g}")
    if ns.gpus_per_trial is not None and not ns.gpus_per_trial >= 0:
        raise UsageError(f"--gpus-per-trial must not be negative, got {ns.gpus_per_trial:g}")
    for key, value in zip(("address", "cpus_per_trial", "gpus_per_trial"), flags, strict=True):
        if value is not None:
            settings[key] = value
    return backend, settings


def run(argv: list[str]) -> int:
    from ...sweep import SEARCHES, load_sweep, run_sweep

    ns = _parser().parse_args(argv)
    if ns.workers is not None and ns.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {ns.workers}")
    if ns.nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {ns.nproc}")
    if ns.max_trials < 1:
        raise UsageError(f"--max-trials must be at least 1, got {ns.max_trials}")
    spec = load_sweep(Path(ns.sweep), config_roots=ns.config_root, max_trials=ns.max_trials)
    sweep_dir = Path(ns.sweep_dir) if ns.sweep_dir else Path("runs") / "sweeps" / spec.name
    if os.path.lexists(sweep_dir) and os.path.isdir(sweep_dir):  # a folder to reuse: checked once, before use
        check_folder(sweep_dir, what="--sweep-dir" if ns.sweep_dir else "sweep folder")
    write_to = Path(ns.write_to) if ns.write_to else None
    if spec.search not in SEARCHES:
        raise UsageError(f"search: unknown search '{spec.search}' (known: {', '.join(sorted(SEARCHES))}) "
                         f"(in {display_path(ns.sweep)})")  # fmt: skip
    backend, settings = _backend_settings(ns, spec)
    if ns.dry_run:
        from ...sweep.executor import default_threads

        threads = max(1, int(settings["cpus_per_trial"])) if backend == "ray" else default_threads(ns.workers or 1)
        return _dry_run(spec, sweep_dir, threads, ns.nproc)
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise UsageError(f"--sweep-dir {display_path(sweep_dir)}: that is a file, not a folder; choose another")
    _stop_on_sigterm()
    total = SEARCHES[spec.search](spec, sweep_dir).total
    at_once = f"{ns.workers} at a time" if ns.workers else "as many at a time as Ray holds" if backend == "ray" \
        else "1 at a time"  # fmt: skip
    where = f" on Ray ({settings['address'] or 'a local instance'})" if backend == "ray" else ""
    console().print(f"sweep {spec.name}: {total if total else 'a search of'} trials, {at_once}{where} "
                    f"→ {display_path(sweep_dir)}", highlight=False, markup=False)  # fmt: skip
    result = run_sweep(spec, sweep_dir, workers=ns.workers if ns.workers or backend == "ray" else 1, backend=backend,
                       settings=settings, on_event=_progress(total, spec.collect), processes=ns.nproc)  # fmt: skip
    from .sweep_report import show_report

    command = f"modforge sweep {ns.sweep}" + "".join(f" --config-root {root}" for root in ns.config_root)
    command += f" --workers {ns.workers}" if ns.workers and ns.workers > 1 else ""
    command += " --backend ray" if backend == "ray" else ""
    command += f" --nproc {ns.nproc}" if ns.nproc > 1 else ""
    show_report(sweep_dir, write_to=write_to, produced_by=command, max_trials=ns.max_trials)
    if result.pruned:
        console().print(f"{result.pruned} trial(s) pruned by the optuna study (status 'pruned' in "
                        f"{display_path(sweep_dir / 'trials.csv')}; left out of the table's values)", markup=False)  # fmt: skip
    if not result.ok:
        console().print(f"{result.failed} trial(s) failed: see the error column of "
                        f"{display_path(sweep_dir / 'trials.csv')} and trials/<id>.log", markup=False)  # fmt: skip
        return 1
    return 0
