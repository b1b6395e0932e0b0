"""Run hostile input in a child process under a memory and CPU-time limit (issue 39, deliverable 7).

A reader that walks a pickle's shared references again and again, or decompresses a bomb, would
take the test worker (and the machine's other worker) down with it; in a child limited by
``resource.setrlimit`` it ends instead, and the test sees how: exit 0, or exit 2 with one line
on stderr, is what modforge promises; a ``MemoryError``, a CPU-time kill (SIGXCPU) or a hang is
a finding.

``run_bounded_python(code)`` runs ``python -P -c code`` (never importing from the cwd);
``run_bounded_cli(args)`` runs ``python -P -m modforge *args``. The limits are set by an exec'd
wrapper (:mod:`exec_prelude`), not a ``preexec_fn``: no Python runs between fork and exec.

``run_bounded_python`` starts its child warm: forked, with the limits set in the fork, from a small
server of this worker's (:data:`_SERVER_CODE`, a ``python -P`` started as the cold child would be,
which imported numpy and modforge's readers and archive extraction once and runs nothing else: no
torch, one thread, about 150 MB mapped) — not a fresh interpreter's ~0.25 CPU-seconds of imports per
hostile example. The fork is the child a cold start would be from then on: its own process, stdin
empty, cwd, environment and ``sys.argv`` as given, the code run as ``__main__`` under the same
address-space and CPU-time limits (no core files), what it did not import before importing under
them; its exit status, a killing signal (SIGXCPU, SIGKILL) as a negative status, and its output come
back as :func:`subprocess.run`'s would. ``cold=True`` (or ``MODFORGE_TEST_COLD_CHILDREN=1``) starts a
fresh interpreter instead.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
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


def run_bounded_python(code: str, *, cold: bool = False, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    """``code`` run by this interpreter in a bounded child: warm (see the module), or with ``cold`` a
    fresh ``python -P -c code``."""
    if cold or os.environ.get("MODFORGE_TEST_COLD_CHILDREN", "") not in ("", "0"):
        return run_bounded([sys.executable, "-P", "-c", code], **kwargs)
    return _run_warm(code, **kwargs)


PRELOAD = ("numpy", "modforge.core.errors", "modforge.data.extract", "modforge.data.images.formats.cifar",
           "modforge.data.images.formats.idx")  # fmt: skip
"""What the warm children's server imports once: what the hostile-reader and archive children import first."""

_SERVER_CODE = """\
import importlib, json, os, resource, sys
from modforge.cli.trial_server import exit_as_interpreter, interpreter_status
for name in sys.argv[1:]:
    importlib.import_module(name)
requests, replies = sys.stdin.buffer, sys.stdout
for line in requests:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for kind, value in ((resource.RLIMIT_AS, request["memory"]), (resource.RLIMIT_CPU, request["cpu"])):
                resource.setrlimit(kind, (value, value))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            for path, fd, flags in ((os.devnull, 0, os.O_RDONLY), (request["stdout"], 1, os.O_WRONLY),
                                    (request["stderr"], 2, os.O_WRONLY)):
                opened = os.open(path, flags)
                os.dup2(opened, fd)
                os.close(opened)
            sys.stdin = open(0, encoding="utf-8", closefd=False)
            sys.argv = ["-c"]
            status = interpreter_status(lambda: exec(compile(request["code"], "<string>", "exec"),
                                                     {"__name__": "__main__", "__builtins__": __builtins__}))
        finally:
            exit_as_interpreter(status)
    replies.write(json.dumps({"pid": pid}) + "\\n")
    replies.flush()
    _, waited = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(waited)}) + "\\n")
    replies.flush()
"""

_server: subprocess.Popen | None = None


def _warm_server() -> subprocess.Popen:
    """This worker's server (started on first use; it ends when this process closes its stdin, at exit)."""
    global _server
    if _server is None or _server.poll() is not None:
        env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1"}
        _server = subprocess.Popen([sys.executable, "-P", "-c", _SERVER_CODE, *PRELOAD], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/", text=True,
                                   bufsize=1)  # fmt: skip
        _replies.clear()
    return _server


_replies = bytearray()  # what the server sent and no _reply took yet


def _reply(server: subprocess.Popen, timeout: float | None) -> dict | None:
    """The server's next message, or None when ``timeout`` seconds pass first."""

    deadline = None if timeout is None else time.monotonic() + timeout
    fd = server.stdout.fileno()  # type: ignore[union-attr]
    while b"\n" not in _replies:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not select.select([fd], [], [], wait)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise RuntimeError("the bounded children's server ended")
        _replies.extend(chunk)
    line, _, rest = bytes(_replies).partition(b"\n")
    _replies[:] = rest
    return json.loads(line)


def _run_warm(code: str, *, cwd: str | os.PathLike | None = None, memory_bytes: int = MEMORY_BYTES,
              cpu_seconds: int = CPU_SECONDS, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip

    child_env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="mf-bounded-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        out.touch()
        err.touch()
        server = _warm_server()
        request = {"code": code, "cwd": str(Path(cwd or os.getcwd()).absolute()), "env": child_env,
                   "memory": memory_bytes, "cpu": cpu_seconds, "stdout": str(out), "stderr": str(err)}  # fmt: skip
        server.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        pid = _reply(server, None)["pid"]  # type: ignore[index]
        deadline = time.monotonic() + WALL_SECONDS
        done = _reply(server, deadline - time.monotonic())
        if done is None:  # a hang: killed, as subprocess.run's timeout does, and the test fails
            os.kill(pid, signal.SIGKILL)
            _reply(server, None)
            raise subprocess.TimeoutExpired(["python", "-P", "-c", code], WALL_SECONDS)
        command = [sys.executable, "-P", "-c", code]
        return subprocess.CompletedProcess(command, done["status"], out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))  # fmt: skip


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
