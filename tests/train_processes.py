"""Training in child processes for the kill-and-resume tests: start `modforge train`, and kill
it with SIGKILL at chosen moments, resuming each time, until it finishes.

A child is either *cold* — ``python -m modforge train ARGS``, a fresh interpreter that imports torch,
scikit-learn, matplotlib and modforge (about 6 CPU-seconds) before it trains — or *warm* (the
default): a fork of a server process that imported all that once (:mod:`multiprocessing`'s
``forkserver`` with :data:`PRELOAD`). A warm child is still a real, separate process with its own pid,
that SIGKILL kills wherever it is (mid-step, mid-save); it runs the same ``modforge.cli.main.main``
as ``python -m modforge`` does, in the test's cwd and environment, with its output where a cold
child's goes, and exits with the command's status after the interpreter's exit handlers. It is
forked from the server, never from the (multi-threaded, monkeypatched) test process, and the server
runs nothing after its imports, so no state passes from one child, or one test, to the next. (What
the server's imports read of the environment — OpenMP's ``OMP_*`` — is the test process's environment
when the server started, at the first warm child of a test worker: a test that needs other such
variables in its child wants a cold one.)
``cold=True`` keeps the ``python -m modforge`` path covered (test_experiment's kill test uses it);
``MODFORGE_TEST_COLD_CHILDREN=1`` makes every child cold.

:func:`run_warm` runs any ``modforge ARGS`` so, to its end, for the tests that need a process of its own
(nothing loaded but what the command loads: no plug-in the test process imported) but not a fresh
interpreter — not for tests of what an interpreter imports at start (its cwd, its path) or of its startup.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

HANG_S = 300  # against a hang only

PRELOAD = ["torch", "torch._dynamo", "torch.utils.data", "numpy", "pydantic", "sklearn.datasets",
           "sklearn.model_selection", "matplotlib.pyplot", "matplotlib.backends.backend_agg", "torchvision",
           "modforge.cli.main", "modforge.cli.commands.train_run", "modforge.cli.config_args", "modforge.cli.stops",
           "modforge.experiment.runner", "modforge.model.wiring", "modforge.train.distributed"]  # fmt: skip
"""What the warm server imports: what a ``modforge train`` child imports before its first step (torch's
optimizers import torch._dynamo, the digits loader scikit-learn, the curves matplotlib: about 6 of a cold
child's CPU-seconds), and the modules that register modforge's built-in parts (:func:`_registry_providers`,
added when the server starts). A module missing here is imported by the child itself, as a cold one
would: only slower."""


def start_training(args: list[str], cwd: Path) -> subprocess.Popen:
    """``modforge train ARGS`` in a fresh ``python -m modforge`` child process (stderr kept for the
    failure message)."""
    return subprocess.Popen([sys.executable, "-m", "modforge", "train", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _registry_providers() -> list[str]:
    """The modules whose import registers modforge's built-in parts (each registry imports its own on
    first use)."""
    from modforge.core import registries

    return [module for registry in vars(registries).values() for module in getattr(registry, "_providers", ())]


@cache
def _plain_sys_path() -> tuple[str, ...]:
    """``sys.path`` of ``python -m modforge`` in this environment, less its first entry (the cwd): the
    test process's own path has pytest's additions (the tests folder)."""
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return tuple(json.loads(out))


def _forkserver() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD + _registry_providers())  # read when the server starts (once)
    return context


def _modforge_in_child(args: list[str], cwd: str, env: dict[str, str], sys_path: tuple[str, ...], stdout: str,
                       stderr: str, code: str | None = None, stdin: str = os.devnull) -> None:  # fmt: skip
    """A warm child's body: what ``python -m modforge ARGS`` (with ``code``: ``python -c CODE ARGS``) in
    ``cwd`` with ``env`` does, and the interpreter's exit — threads joined, exit handlers run, output
    flushed — with its status. Its stdin is the file ``stdin``, its stdout goes to the file ``stdout``
    (``os.devnull``: discarded), its stderr to the file ``stderr``."""
    for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter sets it
    # multiprocessing made "forkserver" this process's default start method (the one that started it):
    # back to a fresh interpreter's, or its DataLoader workers would come from a forkserver of its own
    # instead of a fork — and, once it is killed, would wait forever for their dead parent's data
    multiprocessing.set_start_method(None, force=True)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    import modforge.__main__ as entry

    sys.path[:] = [cwd, *sys_path]
    sys.argv = ["-c" if code is not None else entry.__file__, *args]
    sys.stdout.flush()
    sys.stderr.flush()
    with open(stdin, "rb") as given, open(stdout, "ab") as out, open(stderr, "ab") as err:
        os.dup2(given.fileno(), 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - multiprocessing set it to devnull
    from modforge.cli.trial_server import exit_as_interpreter, run_modforge  # what a sweep's warm trial runs

    status = 1
    try:
        status = run_modforge(sys.argv[1:]) if code is None else _run_code(code)
    finally:
        exit_as_interpreter(status)


def _run_code(code: str) -> int:
    """What ``python -c CODE`` does with ``CODE``, as its exit status."""
    from modforge.cli.trial_server import interpreter_status

    return interpreter_status(lambda: exec(compile(code, "<string>", "exec"),
                                           {"__name__": "__main__", "__builtins__": __builtins__}))  # fmt: skip


ALL_COLD = os.environ.get("MODFORGE_TEST_COLD_CHILDREN", "") not in ("", "0")
"""``MODFORGE_TEST_COLD_CHILDREN=1``: every child (kill tests', :func:`run_warm`'s) is a
fresh interpreter (to compare the two paths, or to rule the warm one out)."""


class WarmModforge:
    """``modforge ARGS`` (with ``code``: ``python -c CODE ARGS``) in a warm child (see the module's
    docstring), with the part of :class:`subprocess.Popen`'s surface the kill loop uses: ``pid``, ``poll``,
    ``wait``, ``kill``, and ``stderr`` (its text so far); ``stdout`` too where ``keep_stdout`` (else
    discarded). Its stdin reads the text ``stdin`` (by default nothing)."""

    def __init__(self, args: list[str], cwd: Path, *, env: dict[str, str] | None = None, keep_stdout: bool = False,
                 code: str | None = None, stdin: str = ""):  # fmt: skip
        self._paths = []
        for name in ("stdout", "stderr") if keep_stdout else ("stderr",):
            fd, path = tempfile.mkstemp(prefix="mf-warm-", suffix=f".{name}")
            os.close(fd)
            self._paths.append(path)
        self._stdout_path, self._stderr_path = self._paths if keep_stdout else (os.devnull, self._paths[0])
        stdin_path = os.devnull
        if stdin:
            fd, stdin_path = tempfile.mkstemp(prefix="mf-warm-", suffix=".stdin")
            with os.fdopen(fd, "w") as fh:
                fh.write(stdin)
            self._paths.append(stdin_path)
        environment = dict(os.environ if env is None else env)
        self._process = _forkserver().Process(
            target=_modforge_in_child, name="modforge",
            args=(list(args), str(cwd), environment, _plain_sys_path(), self._stdout_path, self._stderr_path, code,
                  stdin_path))  # fmt: skip
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired("modforge (warm child)", timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, as :meth:`subprocess.Popen.kill`: nothing when it already ended (its parent, the
        forkserver, reaps it at once, so its pid can be gone between a ``poll()`` and this)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    @property
    def stderr(self) -> str:
        return Path(self._stderr_path).read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return Path(self._stdout_path).read_text(errors="replace") if self._stdout_path != os.devnull else ""

    def close(self) -> None:
        """Once it ended: the output files and the process handle released."""
        for path in self._paths:
            Path(path).unlink(missing_ok=True)
        self._process.close()


class WarmTraining(WarmModforge):
    """``modforge train ARGS`` in a warm child (:class:`WarmModforge`), its stdout discarded."""

    def __init__(self, args: list[str], cwd: Path):
        super().__init__(["train", *args], cwd)


def run_warm(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = HANG_S, cold: bool = False,
             code: str | None = None, stdin: str = "") -> subprocess.CompletedProcess:  # fmt: skip
    """``python -m modforge ARGS`` (with ``code``: ``python -c CODE ARGS``) in ``cwd`` (with ``env``, else
    this process's environment) run to its end, as :func:`subprocess.run` with ``capture_output=True,
    text=True`` would: in a warm child (a fork of the server, which imported torch and modforge's built-in
    parts, never a plug-in), or with ``cold`` (or ``MODFORGE_TEST_COLD_CHILDREN=1``) in a fresh
    interpreter. Its stdin reads the text ``stdin`` (by default nothing)."""
    command = [sys.executable, *(["-c", code] if code is not None else ["-m", "modforge"]), *args]
    if cold or ALL_COLD:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              input=stdin)  # fmt: skip
    child = WarmModforge(list(args), cwd, env=env, keep_stdout=True, code=code, stdin=stdin)
    try:
        code = child.wait(timeout)
        return subprocess.CompletedProcess(command, code, child.stdout, child.stderr)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.close()


def _start(args: list[str], cwd: Path, cold: bool) -> subprocess.Popen | WarmTraining:
    return start_training(args, cwd) if cold or ALL_COLD else WarmTraining(args, cwd)


def _ended(proc: subprocess.Popen | WarmTraining) -> None:
    if isinstance(proc, WarmTraining):
        proc.close()
    else:
        proc.stderr.close()


def kill_when(args: list[str], run: Path, moments: Iterable[tuple[Callable[[], bool], float]], cwd: Path, *,
              cold: bool = False) -> int:  # fmt: skip
    """Train into ``run``; for each ``(ready, pause)`` wait until ``ready()`` holds, ``pause`` seconds
    more, and SIGKILL the process, then ``--resume`` it; wait for the last process to succeed. A
    process that finishes first ends the killing. Returns how many times it was killed. The processes
    are warm children, or with ``cold`` fresh ``python -m modforge`` interpreters."""
    proc = _start([*args, "--run-dir", str(run)], cwd, cold)
    kills = 0
    try:
        for ready, pause in moments:
            deadline = time.monotonic() + HANG_S
            while not ready() and proc.poll() is None:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.005)
            time.sleep(pause)
            if proc.poll() is not None:
                break
            proc.kill()
            if proc.wait() != -signal.SIGKILL:  # it ended on its own just before: its status is checked below
                break
            kills += 1
            _ended(proc)
            proc = _start(["--resume", str(run)], cwd, cold)
        code = proc.wait(timeout=HANG_S)
        assert code == 0, proc.stderr if isinstance(proc, WarmTraining) else proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _ended(proc)
    return kills


def kill_and_resume(args: list[str], run: Path, delays: tuple[float, ...], cwd: Path, *, cold: bool = False) -> int:
    """Start training into ``run``; each of ``delays`` seconds after the running process wrote a
    checkpoint (``last.pt`` replaced by *that* process, not the one an earlier process left),
    SIGKILL it, resuming after every kill; wait for the last process to succeed. Returns how many
    times it was killed (``cold``: see :func:`kill_when`). Counted from the process's own
    checkpoint, a kill lands in training whether the process started warm or cold."""
    last = run / "checkpoints" / "last.pt"

    def identity() -> tuple[int, int] | None:
        try:
            found = last.stat()
        except FileNotFoundError:
            return None
        return found.st_ino, found.st_mtime_ns

    def moments() -> Iterable[tuple[Callable[[], bool], float]]:
        for delay in delays:  # each drawn once the process it kills has started (kill_when's loop)
            before = identity()
            yield (lambda before=before: identity() not in (None, before)), delay

    return kill_when(args, run, moments(), cwd, cold=cold)


def newest_step(run: Path) -> int:
    """The highest optimizer step among the run's complete periodic checkpoints (-1: none yet)."""
    steps = [int(m.group(1)) for p in (run / "checkpoints").glob("epoch*-step*.pt")
             if (m := re.fullmatch(r"epoch\d+-step(\d+)\.pt", p.name))]  # fmt: skip
    return max(steps, default=-1)


def kill_at_steps(args: list[str], run: Path, moments: tuple[tuple[int, float], ...], cwd: Path, *,
                  cold: bool = False) -> int:  # fmt: skip
    """:func:`kill_when` each ``(step, pause)``: once the step's checkpoint exists and ``pause``
    seconds more (mid-step, mid-save or mid-validation). Unlike :func:`kill_and_resume`, each kill waits
    for progress of the resumed process itself, so no kill lands while the process is still starting."""
    return kill_when(args, run, ((lambda step=step: newest_step(run) >= step, pause) for step, pause in moments), cwd,
                     cold=cold)  # fmt: skip
