"""Helpers shared by the benchmarks: timing commands, medians, README figure sections."""

from __future__ import annotations

import platform
import re
import statistics
import subprocess
import time
from datetime import date
from pathlib import Path

README = Path(__file__).with_name("README.md")


def time_command(cmd: list[str], *, cwd: str | None = None) -> float:
    """Wall time of one run of ``cmd`` in seconds (it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - start


def alternate(commands: dict[str, list[str]], runs: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each command ``runs`` times, interleaved (A B A B ...), after ``warmup`` rounds."""
    for _ in range(warmup):
        for cmd in commands.values():
            time_command(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(time_command(cmd))
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    """The machine and how busy it was over the last minute (a figure timed on a busy machine is
    slower and noisier than idle: the note says so)."""
    import os

    from modforge.core.threads import load_note

    note, _busy = load_note()
    system = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    return f"{system}, Python {platform.python_version()}; {note}"


def update_readme(section: str, body: str) -> None:
    """Replace the text between ``<!-- section:start -->`` and ``<!-- section:end -->``."""
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    block = f"{start}\n_Last run {date.today().isoformat()} on {machine()}._\n\n{body.strip()}\n{end}"
    if start in text:
        text = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + f"\n\n{block}\n"
    README.write_text(text)


def paired_run_arguments(doc: str, runs_help: str):
    """The command line of a paired-run benchmark: ``--runs N``, ``--write`` and the hidden
    ``--child`` that marks one of its measuring processes."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help=runs_help)
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


def publish(section: str, table: str, write: bool) -> int:
    """Print a benchmark's table and the machine's load while it ran and, with ``write``, record
    both in README.md; exit status 0."""
    from modforge.core.threads import load_note

    print(table)
    note, busy = load_note()
    print(f"({note})" if not busy else f"caution — {note}")
    if write:
        update_readme(section, table)
    return 0


def slowest(what: str, worst: float, target: float) -> str:
    """The opening of a paired benchmark's verdict: ``**Slowest WHAT: 1.020×** (meets the ≤ 1.05× target; ``
    — the caller goes on with its settings and closes the parenthesis."""
    verdict = "meets" if worst <= target else "misses"
    return f"**Slowest {what}: {worst:.3f}×** ({verdict} the ≤ {target:.2f}× target; "
