"""Run hostile input in a child process under a memory and CPU-time limit (issue 39, deliverable 7).

A reader that walks a pickle's shared references again and again, or decompresses a bomb, would
take the test worker (and the machine's other worker) down with it; in a child limited by
``resource.setrlimit`` it ends instead, and the test sees how: exit 0, or exit 2 with one line
on stderr, is what modforge promises; a ``MemoryError``, a CPU-time kill (SIGXCPU) or a hang is
a finding.

``run_bounded_python(code)`` runs ``python -P -c code`` (never importing from the cwd);
``run_bounded_cli(args)`` runs ``python -P -m modforge *args``. The limits are set by an exec'd
wrapper (:mod:`exec_prelude`), not a ``preexec_fn``: no Python runs between fork and exec.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from exec_prelude import wrapped

MEMORY_BYTES = 4 * 1024**3
"""Address space a child may map: importing torch (with its CUDA libraries) maps ~3 GB of virtual memory; a bomb needs far more."""
CPU_SECONDS = 60
WALL_SECONDS = 120


def run_bounded(argv: Sequence[str], *, cwd: str | os.PathLike | None = None, memory_bytes: int = MEMORY_BYTES,
                cpu_seconds: int = CPU_SECONDS, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``argv`` run under the limits; its output captured as text. A child still running after
    ``WALL_SECONDS`` is killed (``TimeoutExpired`` reaches the test: a hang is a failure)."""
    child_env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        wrapped(argv, memory_bytes=memory_bytes, cpu_seconds=cpu_seconds), cwd=cwd, capture_output=True, text=True,
        timeout=WALL_SECONDS, env=child_env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def run_bounded_python(code: str, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    """``code`` run by this interpreter in a bounded child."""
    return run_bounded([sys.executable, "-P", "-c", code], **kwargs)


def run_bounded_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    """``modforge *args`` in a bounded child."""
    return run_bounded([sys.executable, "-P", "-m", "modforge", *args], **kwargs)


def assert_clean_exit(result: subprocess.CompletedProcess) -> None:
    """Exit 0, or exit 2 with exactly one non-empty line on stderr (modforge's promise for bad input)."""
    assert result.returncode in (0, 2), (result.returncode, result.stderr[-2000:])
    if result.returncode == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr[-2000:]


def files_under(folder: Path) -> dict[str, bytes]:
    """Every regular file below ``folder`` (links not followed) with its bytes: a snapshot to
    compare before and after, proving nothing outside a destination was written."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(folder))] = path.read_bytes()
    return out
