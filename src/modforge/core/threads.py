"""How many CPU threads a process should compute with, and how busy the machine is.

A fixed thread count is wrong on most machines: a 16-core laptop wastes 14 cores on a pin of
2, and on a shared server (or under two test workers on two cores) two threads per process
make every parallel op wait for a time slice — measured 140 ms instead of 3 ms for a tiny
forward with one core busy elsewhere. The default is therefore the CPUs this process may run
on (its affinity mask, which ``taskset``, cgroups' cpusets and job schedulers set) divided
among the processes known to share them: torchrun's ``LOCAL_WORLD_SIZE`` processes on this
machine, pytest-xdist's ``PYTEST_XDIST_WORKER_COUNT`` workers. ``OMP_NUM_THREADS``, set by the
user or by torchrun, is respected as the explicit choice it is.

Timings taken on a busy machine are slow and noisy; :func:`load_note` says how busy it was,
so a figure printed by ``modforge profile`` or a benchmark carries its circumstances.
"""

from __future__ import annotations

import logging
import os

__all__ = [
    "available_cpus",
    "choose_threads",
    "default_threads",
    "load_note",
    "machine_load",
    "sharing_processes",
]

log = logging.getLogger("modforge.threads")

_SHARERS = ("LOCAL_WORLD_SIZE", "PYTEST_XDIST_WORKER_COUNT")
"""Environment variables that count the processes started to share this machine's CPUs."""

_warned: set[tuple[int, int]] = set()


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one (Linux), else
    the machine's CPU count; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def _positive_env(name: str) -> int | None:
    """``name`` from the environment as a whole number ≥ 1 (None: unset or not one)."""
    try:
        value = int(os.environ.get(name, "").strip())
    except ValueError:
        return None
    return value if value >= 1 else None


def sharing_processes() -> int:
    """How many processes were started to share this machine's CPUs, this one included: the
    largest of torchrun's local world size and pytest-xdist's worker count (1 when neither)."""
    return max([1, *(count for name in _SHARERS if (count := _positive_env(name)) is not None)])


def default_threads() -> int:
    """The thread count for a process that was given none: ``OMP_NUM_THREADS`` when set, else
    :func:`available_cpus` divided by :func:`sharing_processes`, at least 1."""
    explicit = _positive_env("OMP_NUM_THREADS")
    if explicit is not None:
        return explicit
    return max(1, available_cpus() // sharing_processes())


def choose_threads(pinned: int | None, where: str | None = None) -> int:
    """The thread count to use: ``pinned`` (a config's ``train.num_threads``) when given, else
    :func:`default_threads`. A pin above :func:`available_cpus` is kept — the user chose it —
    with one warning per process naming ``where`` it was set (each further pin of the same size
    on the same machine is the same news)."""
    if pinned is None:
        return default_threads()
    cpus = available_cpus()
    if pinned > cpus and (pinned, cpus) not in _warned:
        _warned.add((pinned, cpus))
        place = f" (set in {where})" if where else ""
        log.warning(
            "train.num_threads is %d%s but this process may use %d CPU(s): threads beyond that wait for one "
            "another and slow every step down; remove the pin to get %d",
            pinned, place, cpus, default_threads(),
        )  # fmt: skip
    return pinned


def machine_load() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_note(load: float | None = None, cpus: int | None = None) -> tuple[str, bool]:
    """One phrase stating the machine's load beside its CPUs, and whether it was busy.

    Busy means other processes kept at least half a CPU, and at least a quarter of the CPUs,
    occupied: the 1-minute average minus about one for the measuring process itself (which is
    running while it times). Timings taken then are slower and noisier than on an idle machine.
    """
    load = machine_load() if load is None else load
    cpus = available_cpus() if cpus is None else cpus
    if load is None:
        return f"machine load unknown on {cpus} CPU(s)", False
    others = max(0.0, load - 1.0)
    busy = others >= 0.5 and others >= 0.25 * cpus
    note = f"machine load {load:.2f} (1-min average) on {cpus} CPU(s)"
    if busy:
        note += f": about {others:.1f} CPU(s) busy with other work, so timings are slower and noisier than idle"
    return note, busy
