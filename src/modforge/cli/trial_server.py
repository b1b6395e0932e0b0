"""The warm trial server: one process that imports torch and modforge once, then forks each
trial of a local sweep from there. An entry point like ``python -m modforge`` (hence in ``cli``):
the sweep (:mod:`modforge.sweep.warm_trials`) starts it by name and never imports it.

A trial started cold (``python -P -m modforge train ...``) spends its first CPU-seconds importing
torch, ``torch._dynamo`` (every optimizer's first step loads it), matplotlib and modforge's parts
before it trains — for a short trial, most of its time. The sweep instead starts this server
once (``python -P -m modforge.cli.trial_server FD``, with the environment a cold trial gets),
and asks it over a socket for each trial; the server forks, and the fork runs exactly what
``python -m modforge ARGS`` runs, as its own process:

* its own session (a Ctrl-C reaches only the sweep), and SIGTERM from the kernel if the server
  dies — which it does, by the same signal, when the sweep dies (SIGKILL included): no trial
  outlives its sweep, as with cold trials;
* its output appended to the trial's log and the sweep's lock held, through file descriptors the
  sweep sends with the request (``SCM_RIGHTS``); they stay inheritable, so what the trial starts
  (torchrun's workers, the checkpoint commit helper) holds the lock too;
* the interpreter's exit: threads joined, exit handlers run, output flushed, the command's status.

The server runs nothing after its imports (no torch operation, no thread), so each fork starts
from the same state and no trial sees another's. It never imports from its current directory
(``-P``, and ``PYTHONSAFEPATH=1`` in its environment). Messages are JSON, one per packet: the
server says ``{"ready": true}`` once it imported everything (or ``{"ready": false, "error": ...}``
and ends; the sweep then starts its trials cold), ``{"started": PID}`` for each request
``{"args": [...], "cwd": ...}``, and ``{"ended": PID, "code": STATUS}`` when a trial ends
(a negative status: killed by that signal, as :class:`subprocess.Popen` reports it).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable

__all__ = ["PRELOAD", "exit_as_interpreter", "interpreter_status", "main", "run_modforge"]

PRELOAD = ("torch", "torch._dynamo", "torch.utils.data", "numpy", "pydantic", "yaml", "matplotlib.pyplot",
           "matplotlib.backends.backend_agg", "modforge.cli.main", "modforge.cli.commands.train_run",
           "modforge.cli.config_args", "modforge.cli.stops", "modforge.experiment.runner", "modforge.model.wiring",
           "modforge.train.distributed")  # fmt: skip
"""What every ``modforge train`` process imports before its first step: imported once here, not
once per trial. The modules of modforge's built-in parts are not: each trial imports those its
config names, as a fresh process would (all of them would cost the server ~40% more, which a sweep
of one or two trials would not win back)."""

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.1


def main(argv: list[str] | None = None) -> int:
    """Serve the sweep on the socket whose descriptor is ``argv[0]`` until the sweep closes it."""
    channel = socket.socket(fileno=int((sys.argv[1:] if argv is None else argv)[0]))
    _die_with_parent(os.getppid())
    try:
        _preload()
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the sweep starts its trials cold
        traceback.print_exc()
        channel.send(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        return 1
    channel.send(b'{"ready": true}')
    running: set[int] = set()
    while True:
        readable, _, _ = select.select([channel], [], [], _POLL_S)
        if readable:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 64)
            if not message:  # the sweep closed its end (done, or gone): nothing more to start
                return 0
            try:
                running.add(_fork_trial(json.loads(message), fds, channel))
            finally:
                for fd in fds:
                    os.close(fd)
        _report_ended(running, channel)


def _preload() -> None:
    for module in PRELOAD:
        importlib.import_module(module)


def _die_with_parent(parent: int) -> None:
    """SIGTERM from the kernel when ``parent`` ends (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes
        import ctypes.util

        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _report_ended(running: set[int], channel: socket.socket) -> None:
    for pid in list(running):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            running.discard(pid)
            channel.send(json.dumps({"ended": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _fork_trial(request: dict, fds: list[int], channel: socket.socket) -> int:
    """Fork a trial running ``modforge ARGS`` (``request["args"]``) in ``request["cwd"]``, its
    stdout and stderr the first of ``fds``, holding the others; tell the sweep its pid."""
    server = os.getpid()
    pid = os.fork()
    if pid:
        channel.send(json.dumps({"started": pid}).encode())
        return pid
    code = 1
    try:
        channel.close()
        os.setsid()
        _die_with_parent(server)
        for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter sets it
        log, *held = fds
        stdin = os.open(os.devnull, os.O_RDONLY)
        for source, target in ((stdin, 0), (log, 1), (log, 2)):
            os.dup2(source, target)
        for fd in {stdin, log} - {0, 1, 2}:
            os.close(fd)  # on 0, 1 and 2 now: no stray copies
        for fd in held:
            os.set_inheritable(fd, True)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        code = run_modforge(list(request["args"]))
    finally:
        exit_as_interpreter(code)
    return 0  # not reached: the fork ends in exit_as_interpreter


def run_modforge(args: list[str]) -> int:
    """What ``python -m modforge ARGS`` does with ARGS, as its exit status (in a forked process
    that then calls :func:`exit_as_interpreter`)."""
    import modforge.__main__ as entry

    sys.argv = [entry.__file__, *args]

    def run() -> int:
        from modforge.cli.main import main as modforge_main

        return modforge_main(args) or 0

    return interpreter_status(run)


def interpreter_status(run: Callable[[], int | None]) -> int:
    """The exit status an interpreter gives for ``run()``: what it returns (None: 0), a
    ``SystemExit``'s code (a message is printed and gives 1), 1 after printing the traceback of
    any other exception."""
    try:
        return run() or 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - the interpreter prints it and exits 1
        traceback.print_exc()
        return 1


def exit_as_interpreter(code: int) -> None:
    """The interpreter's exit, in its order — threads joined, exit handlers run, output
    flushed — then the process ends with ``code`` (never returning into the server's loop)."""
    import atexit
    import threading

    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
