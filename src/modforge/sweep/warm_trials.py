"""The sweep's side of the warm trial server (:mod:`modforge.cli.trial_server`): start it once, ask it for
each trial, and follow the trials it forked with the part of :class:`subprocess.Popen`'s surface
the local pool uses (``pid``, ``poll``).

Only trials whose command is modforge's own (``python -P -m modforge ...``,
:func:`~.command.modforge_command`) start warm; anything else, and every trial once the server
could not start or has gone, starts cold (:func:`~.local.start_trial`), which is always correct,
only slower.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ..core.child_process import safe_child_env, safe_module_command
from .command import modforge_command

__all__ = ["WarmTrial", "WarmTrials"]

log = logging.getLogger("modforge.sweep")

_READY_S = 600.0  # against a hang only: the server imports torch and modforge's parts once
_GONE = -signal.SIGTERM  # the status of trials a vanished server leaves: its death signal ended them


class WarmTrial:
    """A trial forked by the server: ``pid`` (its own session: ``os.killpg`` ends it and what
    it started) and ``poll()`` (its exit status once it ended, else ``None``)."""

    def __init__(self, pid: int, server: WarmTrials):
        self.pid = pid
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode


class WarmTrials:
    """The server, started on first use with ``setup`` (what cold trials run between fork and
    exec: the parent-death signal) in its child; :meth:`start` forks a trial or returns
    ``None`` (start it cold)."""

    def __init__(self, setup: Callable[[], None]):
        self._setup = setup
        self._channel: socket.socket | None = None
        self._process: subprocess.Popen | None = None
        self._ended: dict[int, int] = {}
        self._usable = True
        self._errors: Any = None

    def start(self, argv: list[str], log_fd: int, keep_fds: tuple[int, ...]) -> WarmTrial | None:
        """Fork ``argv`` (a ``modforge`` command line) with ``log_fd`` as its output, holding
        ``keep_fds``; ``None`` when it cannot start warm."""
        prefix = modforge_command()
        if argv[: len(prefix)] != prefix or not self._ready():
            return None
        request = json.dumps({"args": argv[len(prefix) :], "cwd": os.getcwd()}).encode()
        try:
            socket.send_fds(self._channel, [request], [log_fd, *keep_fds])
            reply = self._next(lambda message: "started" in message)
        except OSError as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
            return None
        if reply is None:
            return None
        return WarmTrial(int(reply["started"]), self)

    def status(self, pid: int) -> int | None:
        """The exit status of trial ``pid`` once the server reported it ended, else ``None``."""
        if pid not in self._ended and self._channel is not None:
            self._next(lambda message: False, block=False)
        if pid not in self._ended and not self._usable:
            return _GONE
        return self._ended.get(pid)

    def close(self) -> None:
        """End the server (its trials have ended or been stopped): close the socket, then wait."""
        channel, process, self._channel, self._usable = self._channel, self._process, None, False
        if channel is not None:
            channel.close()
        if process is not None:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _ready(self) -> bool:
        if self._channel is not None or not self._usable:
            return self._usable
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._errors = tempfile.TemporaryFile()  # what it says if it cannot start (a file: never a full pipe)
        try:
            self._process = subprocess.Popen(
                [*safe_module_command("modforge.cli.trial_server"), str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._errors, pass_fds=(theirs.fileno(),),
                start_new_session=True, preexec_fn=self._setup, env=safe_child_env(PYTHONUNBUFFERED="1"),
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            self._lost(f"{type(exc).__name__}: {exc}")
            return False
        finally:
            theirs.close()
        self._channel = ours
        reply = self._next(lambda message: "ready" in message, timeout=_READY_S)
        if reply is None or not reply["ready"]:
            self._lost(reply["error"] if reply else "it did not answer")
            return False
        self._errors.close()
        self._errors = None
        return True

    def _next(self, wanted: Callable[[dict[str, Any]], bool], *, block: bool = True,
              timeout: float = 60.0) -> dict[str, Any] | None:  # fmt: skip
        """Read the server's messages (noting ended trials) until one is ``wanted`` (returned), or,
        without ``block``, until none is waiting; ``None`` then, or when the server is gone."""
        deadline = time.monotonic() + timeout
        while self._channel is not None:
            self._channel.settimeout(max(0.0, deadline - time.monotonic()) if block else 0.0)
            try:
                packet = self._channel.recv(1 << 16)
            except (BlockingIOError, TimeoutError):
                if block:
                    self._lost("it did not answer in time")
                return None
            except OSError as exc:
                self._lost(f"{type(exc).__name__}: {exc}")
                return None
            if not packet:
                self._lost("it ended")
                return None
            message = json.loads(packet)
            if "ended" in message:
                self._ended[int(message["ended"])] = int(message["code"])
            if wanted(message):
                return message
        return None

    def _lost(self, why: str) -> None:
        """The server cannot serve (any more): trials start cold from now on."""
        if self._process is not None and self._process.poll() is None:
            # a server that stopped answering may still fork what it was asked: ended, with the trials it
            # runs (their parent-death signal; recorded as failed, a re-run resumes them), no trial runs twice
            self._process.kill()
            self._process.wait()
        if self._usable:
            detail = ""
            if self._errors is not None:  # it was starting: say the last line it wrote
                self._errors.seek(0)
                lines = self._errors.read().decode(errors="replace").strip().splitlines()
                detail = f"; it said: {lines[-1]}" if lines else ""
                self._errors.close()
                self._errors = None
            log.warning("warm trial starts are off for this sweep (%s%s): trials start as fresh processes", why, detail)
        self._usable = False
        if self._channel is not None:
            self._channel.close()
            self._channel = None
