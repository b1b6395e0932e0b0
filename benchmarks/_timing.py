"""Timing helpers several benchmarks share: in-process calls timed in interleaved rounds, a trainer that
trains one more epoch per call, and a measuring child process's result."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable


def interleaved_times(calls: dict[str, Callable[[], object]], runs: int, warm: bool = True) -> dict[str, list[float]]:
    """Seconds of each of ``runs`` calls per contender, in A B C C B A … order (neither side always goes
    first); one untimed warm-up call each first when ``warm``."""
    for call in calls.values() if warm else ():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(runs):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return times


def epoch_runner(trainer, loader, sync: Callable[[], None]) -> Callable[[], None]:
    """A call that trains ``trainer`` one more epoch over ``loader`` (its ``max_epochs`` raised by one each
    time, so ``fit`` continues rather than starting over), then waits for the device (``sync``)."""
    epochs = [0]

    def run() -> None:
        epochs[0] += 1
        trainer.max_epochs = epochs[0]
        trainer.fit(loader)
        sync()

    return run


def child_result(script: str, *args: str) -> dict:
    """Run ``python script ARGS`` (a benchmark measuring in a process of its own) and read the JSON object
    it prints last."""
    out = subprocess.run([sys.executable, script, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
