"""Process settings for a test's child applied by an exec'd wrapper, never by a ``preexec_fn``.

``subprocess``'s ``preexec_fn`` runs Python in the forked child before ``exec``; a test worker
is multi-threaded (xdist's I/O thread, torch's pools), and a lock another thread held at the fork
stays held in the child forever — a child stuck in a futex, its test hung (seen once). Instead the
child execs a fresh interpreter that sets the limits or the signal disposition and then execs the
real command: between fork and exec only ``subprocess``'s C code runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["wrapped"]

_PRELUDE = """\
import os, resource, signal, sys
memory, cpu, sigint, *argv = sys.argv[1:]
for kind, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu)):
    if value != "-":
        resource.setrlimit(kind, (int(value), int(value)))
if memory != "-" or cpu != "-":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if sigint == "default":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(argv[0], argv)
"""


def wrapped(argv: Sequence[str], *, memory_bytes: int | None = None, cpu_seconds: int | None = None,
            default_sigint: bool = False) -> list[str]:
    """``argv`` behind a wrapper that first limits the address space to ``memory_bytes`` and the CPU
    time to ``cpu_seconds`` (then no core files either), and with ``default_sigint`` gives SIGINT its
    default disposition (a test worker may run with it ignored, which a child would inherit)."""
    limits = ["-" if value is None else str(value) for value in (memory_bytes, cpu_seconds)]
    sigint = "default" if default_sigint else "inherit"
    return [sys.executable, "-I", "-S", "-c", _PRELUDE, *limits, sigint, *argv]
