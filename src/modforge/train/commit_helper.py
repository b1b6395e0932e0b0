"""The commit helper process, seen from the training process: started on first use, shared
by every :class:`~.checkpoint.CheckpointWriter` of the process, ended at exit.

Training hands it a :class:`CommitJob` (a fully written temporary file and the names it
must get) and goes on; the helper runs :func:`~.checkpoint_commit.commit` and answers.
Answers are read without blocking at the next hand-over, and blocking only in
:meth:`CommitHelper.drain` (end of training). If the helper ends unexpectedly, every job
it had not confirmed is committed on the training thread — nothing written is lost — and
the process commits its own checkpoints from then on. Where no helper can be started
(no ``posix_spawn``, no interpreter path), :meth:`CommitHelper.ensure` says so and the
writer commits on its own thread.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .checkpoint_commit import finish, write_all

if TYPE_CHECKING:  # pragma: no cover
    from .checkpoint import CheckpointWriter

__all__ = ["HELPER", "CommitHelper", "CommitJob"]

log = logging.getLogger("modforge.train")
WORKER = str(Path(__file__).with_name("checkpoint_commit.py"))


@dataclasses.dataclass
class CommitJob:
    """A checkpoint already written to ``tmp``: publish it as ``path`` and ``links``, delete ``prune``."""

    tmp: str
    path: str
    links: list[str]
    prune: list[str]


class CommitHelper:
    """One helper process per training process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usable = hasattr(os, "posix_spawn") and bool(sys.executable)
        self._pid: int | None = None
        self._requests = self._answers = -1  # our ends of the two pipes
        self._spawn_ends: tuple[int, ...] = ()  # the helper's ends, until it has them
        self._jobs: dict[int, tuple[CheckpointWriter, CommitJob]] = {}  # sent, not yet answered (in order)
        self._next_id = 0
        self._partial = b""

    @property
    def pid(self) -> int | None:
        """The helper's process id while it runs."""
        return self._pid

    def ensure(self) -> int | None:
        """The helper's process id, starting it if needed; None where there can be none."""
        with self._lock:
            if self._pid is None and self._usable:
                self._start()
            return self._pid

    def send(self, writer: CheckpointWriter, job: CommitJob) -> bool:
        """Hand ``job`` to the helper; False when it cannot take it (commit it yourself)."""
        with self._lock:
            if self._pid is not None:
                self._collect(block=False)
            if self._pid is None:  # not started, or it ended while we read
                return False
            job_id, self._next_id = self._next_id, self._next_id + 1
            line = json.dumps({"id": job_id, **dataclasses.asdict(job)}).encode() + b"\n"
            try:
                write_all(self._requests, line)
            except OSError:
                self._lost("its input pipe broke")
                return False
            self._jobs[job_id] = (writer, job)
            return True

    def unanswered(self, writer: CheckpointWriter) -> int:
        """How many jobs of ``writer`` the helper has not confirmed yet."""
        return sum(1 for owner, _ in self._jobs.values() if owner is writer)

    def drain(self, writer: CheckpointWriter) -> None:
        """Wait until the helper has answered every job of ``writer``."""
        with self._lock:
            while self._pid is not None and self.unanswered(writer):
                self._collect(block=True)

    def close(self) -> None:
        """End the helper after it has committed everything it was sent (at exit)."""
        with self._lock:
            if self._pid is None:
                return
            os.close(self._requests)
            self._requests = -1
            while self._pid is not None:
                self._collect(block=True)  # until end of output: then it has finished

    # ----------------------------------------------------------------- internals
    def _start(self) -> None:
        # every descriptor is on self at once: a fork from another thread meanwhile can close them
        request_read, self._requests = os.pipe()
        self._answers, answer_write = os.pipe()
        self._spawn_ends = (request_read, answer_write)
        args = [sys.executable, "-I", "-S", *(["-X", "utf8"] if sys.flags.utf8_mode else []), WORKER]
        try:
            pid = os.posix_spawn(
                sys.executable,
                args,
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, request_read, 0), (os.POSIX_SPAWN_DUP2, answer_write, 1)],
                setpgroup=0,  # its own process group: a Ctrl-C meant for training does not reach it
            )
        except OSError as exc:
            self._close_fds()
            self._usable = False
            log.debug("no checkpoint commit helper (%s); checkpoints are committed on the training thread", exc)
            return
        for fd in self._spawn_ends:
            os.close(fd)
        self._spawn_ends = ()
        os.set_blocking(self._answers, False)
        self._pid = pid

    def _collect(self, block: bool) -> None:
        """Read the answers available (with ``block``: wait for at least one read)."""
        os.set_blocking(self._answers, block)
        while True:
            try:
                chunk = os.read(self._answers, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self._ended()
                return
            self._partial += chunk
            while (newline := self._partial.find(b"\n")) >= 0:
                answer = json.loads(self._partial[:newline])
                entry = self._jobs.pop(answer["id"], None)  # before consuming the line: an interrupt
                self._partial = self._partial[newline + 1 :]  # in between leaves a line read twice, not lost
                if entry is not None and answer["error"]:
                    entry[0].failed(answer["error"])
            if block:
                return

    def _ended(self) -> None:
        """End of the helper's output: reap it; unexpected unless :meth:`close` asked."""
        pid, self._pid = self._pid, None
        self._close_fds()
        try:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = None
        if self._jobs or code:
            self._recover(f"the checkpoint commit helper (pid {pid}) ended unexpectedly (exit status {code})")

    def _lost(self, why: str) -> None:
        """The helper cannot take more work: let it finish what it has, then recover the rest."""
        os.close(self._requests)
        self._requests = -1
        while self._pid is not None:
            self._collect(block=True)
        if self._usable:  # _ended had nothing to recover
            self._recover(f"the checkpoint commit helper stopped ({why})")

    def _recover(self, why: str) -> None:
        """Finish every unanswered job here, and commit here from now on."""
        self._usable = False
        log.warning("%s; committing checkpoints on the training thread from now on", why)
        jobs, self._jobs = list(self._jobs.values()), {}
        for writer, job in jobs:
            if os.path.exists(job.tmp):
                writer.commit_here(job)
            elif os.path.exists(job.path):  # committed, not yet answered: only the last step may be missing
                try:
                    finish([job.path, *job.links], job.prune)
                except OSError as exc:
                    writer.failed(f"{type(exc).__name__}: {exc}")
            else:
                writer.failed(f"{job.path} was lost when the commit helper ended")

    def _close_fds(self) -> None:
        for fd in (self._requests, self._answers, *self._spawn_ends):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._requests = self._answers = -1
        self._spawn_ends = ()

    def _after_fork(self) -> None:
        """In a forked child: the helper and its jobs belong to the parent; forget them (the
        child starts its own helper when it saves)."""
        self._lock = threading.Lock()
        self._close_fds()
        self._pid, self._jobs, self._partial = None, {}, b""


HELPER = CommitHelper()
atexit.register(HELPER.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HELPER._after_fork)
